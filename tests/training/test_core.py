"""The training core on its own: launcher, simulator against real gloo ranks, shuffling, cost model."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from repro.training import shuffling
from repro.training.cost import Network, ring_allreduce_time
from repro.training.data import IndexedDataset, synthetic_classification
from repro.training.distributed import GroupedJob, ModelSpec, grouped_sgd_rank
from repro.training.hier_localsgd import flat_averaging_cost, sharded_averaging_cost
from repro.training.launcher import RankFailed, launch
from repro.training.simulator import ReplicaBank, SGDConfig, Topology, make_optimizer, run_grouped

# --- rank programs (module level: spawned ranks import them) ---------------------------------


def _sum_ranks(ctx, offset):
    t = torch.tensor([float(ctx.rank + offset)])
    torch.distributed.all_reduce(t)
    return float(t.item())


def _group_sums(ctx):
    lay = ctx.layout
    a = torch.tensor([float(ctx.rank)])
    b = torch.tensor([float(ctx.rank)])
    torch.distributed.all_reduce(a, group=lay.intra)
    torch.distributed.all_reduce(b, group=lay.inter)
    return lay.group_index, lay.index_in_group, a.item(), b.item()


def _rank1_raises(ctx):
    if ctx.rank == 1:
        raise ValueError("deliberate failure on rank 1")
    t = torch.zeros(1)
    torch.distributed.all_reduce(t)  # rank 0 would wait here forever without the launcher
    return 0


def _sleeps(ctx):
    time.sleep(60)


# --- launcher -------------------------------------------------------------------------------

def test_launch_returns_results_in_rank_order():
    assert launch(_sum_ranks, 2, (10,)) == [21.0, 21.0]


def test_subgroups_intra_and_inter():
    out = launch(_group_sums, 4, group_size=2)
    # groups {0,1} and {2,3}; inter groups {0,2} and {1,3}
    assert out == [(0, 0, 1.0, 2.0), (0, 1, 1.0, 4.0), (1, 0, 5.0, 2.0), (1, 1, 5.0, 4.0)]


def test_failing_rank_ends_job_with_its_cause():
    t = time.monotonic()
    with pytest.raises(RankFailed) as err:
        launch(_rank1_raises, 2, timeout_s=300)
    assert err.value.rank == 1 and "deliberate failure on rank 1" in str(err.value)
    # spawning two torch processes takes seconds (tens under load); the point is not waiting for the timeout
    assert time.monotonic() - t < 150, "a failure must not wait for the timeout"


def test_timeout_kills_the_job():
    with pytest.raises(TimeoutError):
        launch(_sleeps, 2, timeout_s=8)


# --- simulator == distributed ---------------------------------------------------------------

def _job(topo: Topology, batch_norm: bool, tau: int, averaging: str, steps_epochs: int = 2):
    split = synthetic_classification(400, 12, 8, 4, seed=3)
    y = split.train.y.numpy()
    rng = np.random.default_rng(0)
    shards = shuffling.initial_shards(y, topo.workers, "skewed", seed=0)
    plans, epochs = [], [tuple(shards)]
    for _ in range(steps_epochs):
        plans.append(shuffling.epoch_plan(shards, 8, rng))
        shards, _ = shuffling.partial_exchange(shards, 0.3, rng)
        epochs.append(tuple(shards))
    plan = np.concatenate(plans).reshape(-1, topo.num_groups, topo.group_size, 8)
    lrs = np.linspace(0.05, 0.1, len(plan))
    spec = ModelSpec(in_features=12, hidden=(16, 16), num_classes=4, batch_norm=batch_norm, seed=5)
    job = GroupedJob(
        x=split.train.x.numpy(),
        y=y,
        model=spec,
        sgd=SGDConfig(lr=0.05, momentum=0.9, weight_decay=5e-4),
        plan=plan,
        lrs=lrs,
        tau=tau,
        averaging=averaging,
        shards=tuple(epochs),
        steps_per_epoch=len(plans[0]),
    )
    return split, spec, job


def _simulate(topo, spec, job, split):
    bank = ReplicaBank(spec.build(), topo)
    opt = make_optimizer(bank, job.sgd)
    losses = run_grouped(bank, opt, split.train.x, split.train.y, job.plan, job.lrs, job.tau)
    return bank, losses


@pytest.mark.parametrize(
    "topo,batch_norm,averaging",
    [
        (Topology(num_groups=1, group_size=2), True, "flat"),
        (Topology(num_groups=2, group_size=2), False, "sharded"),
        (Topology(num_groups=2, group_size=2), False, "flat"),
    ],
)
def test_simulator_equals_distributed_run(topo, batch_norm, averaging):
    split, spec, job = _job(topo, batch_norm, tau=4, averaging=averaging)
    reports = launch(grouped_sgd_rank, topo.workers, (job,), group_size=topo.group_size)
    bank, losses = _simulate(topo, spec, job, split)
    for rep in reports:
        g, s = divmod(rep.rank, topo.group_size)
        for sim, real in zip(bank.group_state(g), rep.params):
            np.testing.assert_allclose(sim, real, atol=1e-5, rtol=1e-5)
    # members of a group hold identical parameters (allreduce correctness)
    for a, b in zip(reports[0].params, reports[1].params):
        np.testing.assert_array_equal(a, b)
    if topo.num_groups > 1:
        # the plan ends on an averaging step, so every rank of every group holds the same model
        assert len(job.plan) % job.tau == 0
        for rep in reports[1:]:
            for a, b in zip(reports[0].params, rep.params):
                np.testing.assert_allclose(a, b, atol=1e-6)
    # samples really travelled in the exchange
    assert sum(r.exchange_bytes_sent for r in reports) > 0


def test_group_of_one_equals_synchronous_sgd_on_the_bank():
    """G = 1 with S workers is synchronous SGD: same as one worker whose batch is the S batches together."""
    split, spec, job = _job(Topology(num_groups=1, group_size=2), False, tau=1, averaging="flat")
    bank, _ = _simulate(Topology(num_groups=1, group_size=2), spec, job, split)
    one = ReplicaBank(spec.build(), Topology(num_groups=1, group_size=1))
    run_grouped(
        one, make_optimizer(one, job.sgd), split.train.x, split.train.y, job.plan.reshape(len(job.plan), 1, 1, -1), job.lrs, 1
    )
    for a, b in zip(bank.group_state(0), one.group_state(0)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_tau_one_local_sgd_equals_synchronous_model_averaging():
    """S = 1, tau = 1 (plain SGD momentum kept local) vs G = 1: equal after the first step without momentum."""
    split, spec, job = _job(Topology(num_groups=2, group_size=1), False, tau=1, averaging="flat")
    job_nomom = GroupedJob(
        x=job.x, y=job.y, model=spec, sgd=SGDConfig(lr=0.05, momentum=0.0, weight_decay=0.0), plan=job.plan, lrs=job.lrs, tau=1
    )
    local = ReplicaBank(spec.build(), Topology(num_groups=2, group_size=1))
    run_grouped(local, make_optimizer(local, job_nomom.sgd), split.train.x, split.train.y, job.plan, job.lrs, 1)
    sync = ReplicaBank(spec.build(), Topology(num_groups=1, group_size=2))
    run_grouped(
        sync,
        make_optimizer(sync, job_nomom.sgd),
        split.train.x,
        split.train.y,
        job.plan.reshape(len(job.plan), 1, 2, -1),
        job.lrs,
        1,
    )
    for a, b in zip(local.group_state(0), sync.group_state(0)):
        np.testing.assert_allclose(a, b, atol=1e-5)


# --- data and shuffling ---------------------------------------------------------------------


def test_indexed_dataset_returns_index_and_sample():
    ds = IndexedDataset(np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6))
    idx, x, y = ds[np.array([4, 1])]
    assert idx.tolist() == [4, 1] and y.tolist() == [4, 1] and x[0].tolist() == [8.0, 9.0]
    loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False)
    first = next(iter(loader))
    assert first[0].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("q", [0.0, 0.1, 0.3, 1.0])
def test_exchange_keeps_a_partition_of_equal_shards(q):
    labels = np.repeat(np.arange(4), 50)
    shards = shuffling.initial_shards(labels, 4, "skewed", seed=0)
    rng = np.random.default_rng(1)
    for _ in range(3):
        new, rec = shuffling.partial_exchange(shards, q, rng, sample_bytes=10)
        assert [len(s) for s in new] == [50] * 4
        allids = np.concatenate(new)
        assert len(np.unique(allids)) == 200 and set(allids) == set(range(200))
        assert rec.picked_per_worker == (round(q * 50),) * 4
        assert rec.bytes_moved == 10 * rec.samples_moved
        assert sum(rec.sent_per_worker) == sum(rec.received_per_worker)
        assert rec.peak_storage <= (1 + q) * 50
        shards = new


def test_q_zero_is_local_shuffling():
    labels = np.repeat(np.arange(4), 25)
    shards = shuffling.initial_shards(labels, 4, "iid", seed=0)
    new, rec = shuffling.partial_exchange(shards, 0.0, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(shards, new)) and rec.samples_moved == 0


def test_q_one_is_a_fresh_random_partition():
    """From fully label-sorted shards, Q=1 gives shards whose label mix matches the global one (hypergeometric)."""
    labels = np.repeat(np.arange(4), 500)
    shards = shuffling.initial_shards(labels, 4, "skewed", seed=0)
    assert shuffling.label_spread(labels, shards, 4) > 0.7
    spreads = [
        shuffling.label_spread(labels, shuffling.partial_exchange(shards, 1.0, np.random.default_rng(s))[0], 4) for s in range(20)
    ]
    assert np.mean(spreads) < 0.05
    # and every sample's destination is uniform: the share staying home is about 1/M
    new, rec = shuffling.partial_exchange(shards, 1.0, np.random.default_rng(0))
    assert abs(rec.samples_moved / 2000 - 0.75) < 0.05


def test_epoch_plan_visits_each_local_sample_once():
    shards = [np.arange(0, 10), np.arange(10, 20)]
    plan = shuffling.epoch_plan(shards, 5, np.random.default_rng(0))
    assert plan.shape == (2, 2, 5)
    assert sorted(plan[:, 0].ravel()) == list(range(10)) and sorted(plan[:, 1].ravel()) == list(range(10, 20))


# --- cost model -----------------------------------------------------------------------------


def test_sharded_averaging_moves_fewer_bytes_than_flat_for_groups_of_two_or_more():
    net = Network()
    for g, s in [(2, 2), (2, 8), (4, 4), (8, 2)]:
        assert sharded_averaging_cost(4e6, g, s, net).bytes_per_process <= flat_averaging_cost(4e6, g * s, net).bytes_per_process
    assert ring_allreduce_time(1e6, 1, net) == 0.0


def _omp_threads(ctx):
    return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


def test_ranks_are_spawned_single_threaded_and_the_parent_environment_is_restored(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert launch(_omp_threads, 2, timeout_s=300) == [("1", 1), ("1", 1)]
    assert os.environ["OMP_NUM_THREADS"] == "7"


def _rank_zero_outlives_the_slowest_rank(ctx, folder):
    """Rank 0 returns at once; rank 1 waits, then tells whether rank 0's process is still running (not a zombie)."""
    mine = Path(folder) / f"pid{ctx.rank}"
    mine.write_text(str(os.getpid()))
    if ctx.rank == 0:
        return True
    first = Path(folder) / "pid0"
    deadline = time.monotonic() + 120
    while not first.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2.0)
    try:
        status = Path(f"/proc/{first.read_text()}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def test_no_rank_leaves_its_group_while_a_peer_is_still_working(tmp_path):
    # a rank that left early would close the connections a slow peer may still be setting up (seen under load as
    # "Gloo connectFullMesh failed ... Connection closed by peer")
    assert launch(_rank_zero_outlives_the_slowest_rank, 2, (str(tmp_path),), timeout_s=300) == [True, True]
