"""FedLAMA and the FL core: the spec's invariants."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, RecordDict
from flwr.serverapp.strategy import FedAvg

from repro.federated.client import (
    LocalSettings,
    LocalSGD,
    client_app_with,
    client_seed,
    make_client_app,
    round_seed,
    train_locally,
    train_shared,
)
from repro.federated.engine import (
    ClientFailed,
    History,
    StrictGrid,
    central_evaluator,
    initial_arrays,
    run_federated,
    snapshot,
)
from repro.federated.fedlama import FedLAMA, discrepancy, select_relaxed_layers
from repro.federated.reference import fedavg_loop
from repro.federated.strategies import SeededFedAvg, StepDecay
from repro.federated.task import TaskSpec, build_model
from repro.models import torch_threads

SPEC = TaskSpec(dataset="digits", num_clients=12, alpha=0.3, hidden=(32, 16))
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.5).config(3)


def test_phi_one_is_bitwise_fedavg(run_rounds, same_weights):
    h_avg = run_rounds(SeededFedAvg(4, LOCAL, seed=0))
    s = FedLAMA(4, LOCAL, seed=0, phi=1)
    h_lama = run_rounds(s)
    assert same_weights(snapshot(h_avg.final_arrays), snapshot(h_lama.final_arrays))
    assert h_avg.accuracy == h_lama.accuracy and h_avg.comm == h_lama.comm


def test_flower_fedavg_equals_hand_written_loop(same_weights):
    """Flower's FedAvg through our in-process grid gives exactly the hand-written loop's weights."""
    ref = fedavg_loop(SPEC, LOCAL, rounds=6, active_clients=4, seed=3)
    hist = run_federated(SeededFedAvg(4, LOCAL, seed=3), make_client_app(SPEC, {"seed": 3}), SPEC.num_clients,
                         initial_arrays(SPEC, 3), 6, central_evaluator(SPEC), [6])
    assert same_weights(snapshot(hist.final_arrays), ref)


def _stock_and_lama(spec: TaskSpec, rounds: int, engine: str = "inprocess") -> tuple[History, History]:
    """Flower's own FedAvg (settings only in the run config) and FedLAMA at phi=1 with every client active."""
    app = make_client_app(spec, {"seed": 4, **LOCAL})
    runs = []
    for strategy in (FedAvg(), FedLAMA(spec.num_clients, LOCAL, seed=9, phi=1)):
        runs.append(run_federated(strategy, app, spec.num_clients, initial_arrays(spec, 0), rounds,
                                  central_evaluator(spec), range(rounds + 1), engine=engine))
    return runs[0], runs[1]


def test_stock_flower_fedavg_equals_fedlama_at_phi_one(same_weights):
    """The engine takes Flower's own FedAvg unwrapped; replies in node order, it equals FedLAMA(phi=1) bitwise."""
    stock, lama = _stock_and_lama(SPEC, rounds=4)
    assert same_weights(snapshot(stock.final_arrays), snapshot(lama.final_arrays))
    assert stock.accuracy == lama.accuracy and stock.rounds == lama.rounds == [0, 1, 2, 3, 4]
    assert stock.comm == [0] * 5  # stock FedAvg does not count its communication
    assert stock.accuracy[-1] != stock.accuracy[0]  # it trained


@pytest.mark.slow
def test_stock_flower_fedavg_runs_on_ray():
    """Flower's own FedAvg runs unwrapped under the Ray engine and ends where the in-process run ends."""
    spec = TaskSpec(dataset="digits", num_clients=4, alpha=0.5, hidden=(16,))
    stock_ray, _ = _stock_and_lama(spec, rounds=2, engine="ray")
    # Ray gives each one-cpu actor one thread; the in-process run uses as many, since torch's
    # reductions split by thread count and on a many-core host the runs drift apart in training
    with torch_threads(1):
        stock_in, _ = _stock_and_lama(spec, rounds=2)
    assert stock_ray.rounds == [0, 1, 2]
    a, b = snapshot(stock_ray.final_arrays), snapshot(stock_in.final_arrays)
    for k in a:  # Ray delivers replies in arrival order, so the sums may differ in the last bits
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_batch_seed_comes_from_the_run_seed_and_the_server_round():
    """Clients seed their batches from the run config's seed and the round, whatever the strategy sends."""
    def settings(run_seed: int, server_round: int, extra: dict | None = None) -> LocalSettings:
        ctx = Context(run_id=1, node_id=3, node_config={"partition-id": 2}, state=RecordDict(),
                      run_config={"seed": run_seed, "steps": 7})
        return LocalSettings.read(ConfigRecord({"server-round": server_round, **(extra or {})}), ctx, 2)

    assert settings(0, 1).steps == 7 and settings(0, 1, {"steps": 2}).steps == 2
    seeds = {settings(s, r).seed for s in (0, 1) for r in (1, 2)}
    assert len(seeds) == 4
    assert settings(1, 2, {"seed": 99}).seed == settings(1, 2).seed  # a strategy's own "seed" key is not used
    assert settings(1, 2).seed == client_seed(round_seed(1, 2), 2)
    with pytest.raises(KeyError, match="server-round"):
        LocalSettings.read(ConfigRecord({}), Context(run_id=1, node_id=1, node_config={}, state=RecordDict(),
                                                      run_config={"steps": 1}), 0)


def test_discrepancy_zero_for_equal_copies():
    u = np.random.default_rng(0).normal(size=(5, 4))
    assert discrepancy(u, [u.copy(), u.copy(), u.copy()]) == 0.0
    assert discrepancy(np.zeros(3), [np.ones(3), -np.ones(3)]) == pytest.approx(3.0)


def test_selection_stops_at_first_crossing_and_includes_it():
    # eff order: a (0.1) < b (0.2) < c (0.3) < d (0.4)
    dims = {"a": 100, "b": 100, "c": 100, "d": 100}
    eff = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}
    dist = {k: eff[k] * dims[k] for k in dims}  # totals: dist 100, dim 400
    # after a: delta=0.1, 1-lambda=0.75 -> go on; after b: delta=0.3, 0.5 -> go on;
    # after c: delta=0.6 > 1-lambda=0.25 -> stop, c included
    assert select_relaxed_layers(eff, dist, dims) == ["a", "b", "c"]
    # a large layer with little discrepancy is relaxed alone; the small, drifting one is not
    dims3 = {"big": 900, "small": 100}
    dist3 = {"big": 1.0, "small": 99.0}
    eff3 = {k: dist3[k] / dims3[k] for k in dims3}
    # after big: delta=0.01, 1-lambda=0.1 -> go on; after small: delta=1 > 0 -> stop (both in)
    assert select_relaxed_layers(eff3, dist3, dims3) == ["big", "small"]
    dims4 = {"big": 900, "small": 100}
    dist4 = {"big": 50.0, "small": 50.0}
    eff4 = {k: dist4[k] / dims4[k] for k in dims4}
    # after big: delta=0.5 > 1-lambda=0.1 -> stop with big only
    assert select_relaxed_layers(eff4, dist4, dims4) == ["big"]


def test_biases_keep_interval_one_and_comm_counts_match_intervals(run_rounds):
    phi, rounds = 3, 12
    s = FedLAMA(4, LOCAL, seed=1, phi=phi, warmup=0)
    run_rounds(s, rounds=rounds)
    for r, intervals in s.timeline.items():
        for k, i in intervals.items():
            if k.endswith(".bias"):
                assert i == 1
            assert i in (1, phi)
    assert any(i == phi for tl in s.timeline.values() for i in tl.values()), "some layer should be relaxed"
    # layer l is aggregated exactly in the rounds r with r mod I_l(r) == 0
    for k in s.timeline[1]:
        expected = [r for r in range(1, rounds + 1) if r % s.timeline[r][k] == 0]
        assert s.comm.syncs[k] == expected
        assert s.comm.sync_count(k) == len(expected)
    # every layer is synchronised at the end of each period
    for r in range(phi, rounds + 1, phi):
        assert all(r in s.comm.syncs[k] for k in s.comm.syncs)


def test_clients_resampled_only_every_phi_rounds(run_rounds):
    phi = 4
    s = FedLAMA(4, LOCAL, seed=2, phi=phi)
    run_rounds(s, rounds=8)
    assert s.sampled[1] == s.sampled[2] == s.sampled[3] == s.sampled[4]
    assert s.sampled[5] == s.sampled[8]


def test_fedlama_communicates_less_than_fedavg(run_rounds):
    s_avg, s_lama = SeededFedAvg(4, LOCAL, seed=0), FedLAMA(4, LOCAL, seed=0, phi=2, warmup=0)
    run_rounds(s_avg, rounds=8)
    run_rounds(s_lama, rounds=8)
    assert s_lama.comm.total < s_avg.comm.total


@pytest.mark.slow
def test_ray_engine_matches_inprocess(run_rounds, same_weights):
    """Flower's Ray simulation and the in-process grid give identical metrics and weights."""
    spec = TaskSpec(dataset="digits", num_clients=6, alpha=0.5, hidden=(16,))
    h_in = run_rounds(FedLAMA(3, LOCAL, seed=5, phi=2), rounds=4, spec=spec)
    h_ray = run_rounds(FedLAMA(3, LOCAL, seed=5, phi=2), rounds=4, spec=spec, engine="ray")
    assert h_in.accuracy == h_ray.accuracy and h_in.comm == h_ray.comm
    assert same_weights(snapshot(h_in.final_arrays), snapshot(h_ray.final_arrays))


def test_intervals_adapt_only_after_the_warmup(run_rounds):
    s = FedLAMA(4, LOCAL, seed=1, phi=2, warmup=6)
    run_rounds(s, rounds=10)
    assert all(i == 1 for r in range(1, 8) for i in s.timeline[r].values())  # adapted first at the end of round 8
    assert any(i == 2 for i in s.timeline[9].values())


def test_discrepancy_share_counts_the_whole_model():
    eff, dist, dims = {"a": 2.0, "b": 0.1}, {"a": 2.0, "b": 1.0}, {"a": 1, "b": 10}
    # the candidates alone: b holds a third of the discrepancy and 10/11 of the parameters -> stop at b
    assert select_relaxed_layers(eff, dist, dims) == ["b"]
    # the whole model's discrepancy (biases included) in the denominator: b's share is small, the walk goes on
    assert select_relaxed_layers(eff, dist, dims, total_dist=100.0) == ["b", "a"]



def test_a_failing_client_stops_the_run_with_its_cause():
    """Flower's FedAvg would average the clients that did not fail; every engine stops and names the failure."""
    spec = TaskSpec(dataset="digits", num_clients=4, alpha=0.5, hidden=(8,))

    def train(msg, context):
        if int(context.node_config["partition-id"]) == 2:
            raise ValueError("planted failure on partition 2")
        return train_shared(spec, msg, context)

    app = client_app_with(train, {"seed": 0, **LOCAL})
    with pytest.raises((ClientFailed, ValueError), match="planted failure on partition 2"):
        run_federated(FedAvg(), app, spec.num_clients, initial_arrays(spec, 0), 1, central_evaluator(spec), [1])


class _StubGrid:
    """Replies as a remote engine would: some carry an error, some never come."""

    def __init__(self, replies):
        self.replies = replies

    def send_and_receive(self, messages, *, timeout=None):
        return self.replies


def _reply(node: int, reason: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(has_error=lambda: reason is not None, metadata=SimpleNamespace(src_node_id=node),
                           error=SimpleNamespace(reason=reason))


def test_strict_grid_refuses_error_replies_and_missing_ones():
    ok = [_reply(1), _reply(2)]
    assert StrictGrid(_StubGrid(ok)).send_and_receive(["m1", "m2"]) == ok
    with pytest.raises(ClientFailed, match="node 2 failed: out of memory"):
        StrictGrid(_StubGrid([_reply(1), _reply(2, "out of memory")])).send_and_receive(["m1", "m2"])
    with pytest.raises(ClientFailed, match="1 of 2 clients sent no reply"):
        StrictGrid(_StubGrid([_reply(1)])).send_and_receive(["m1", "m2"])


def test_step_decay_divides_the_rate_after_each_milestone():
    decay = StepDecay(milestones=(4, 6), factor=0.1)
    assert [decay.scale(r) for r in range(1, 9)] == pytest.approx([1, 1, 1, 1, 0.1, 0.1, 0.01, 0.01])
    with pytest.raises(ValueError, match="factor"):
        StepDecay(milestones=(4,), factor=0.0)
    with pytest.raises(ValueError, match="milestones"):
        StepDecay(milestones=(0,))


def test_the_strategy_sends_each_rounds_rate_and_keeps_its_base_rate():
    strategy = SeededFedAvg(2, LOCAL, seed=0, lr_decay=StepDecay(milestones=(2,), factor=0.1))
    strategy.set_partition_map({0: 10, 1: 11, 2: 12})
    arrays = initial_arrays(SPEC, 0)
    sent = {r: [float(m.content["config"]["lr"]) for m in strategy.configure_train(r, arrays, ConfigRecord(), None)]
            for r in (1, 2, 3)}
    assert sent == {1: [0.05, 0.05], 2: [0.05, 0.05], 3: [pytest.approx(0.005)] * 2}
    assert strategy.local["lr"] == 0.05
    plain = SeededFedAvg(2, LOCAL, seed=0)
    plain.set_partition_map({0: 10, 1: 11, 2: 12})
    assert {float(m.content["config"]["lr"]) for m in plain.configure_train(3, arrays, ConfigRecord(), None)} == {0.05}


def test_weight_decay_pulls_every_weight_towards_zero_by_rate_times_decay():
    x = np.random.default_rng(0).normal(size=(32, 64)).astype(np.float32)
    y = np.arange(32) % 10
    start = build_model(SPEC, seed=0)
    after = {}
    for wd in (0.0, 0.01):
        model = build_model(SPEC, seed=0)
        train_locally(model, x, y, LocalSettings(steps=1, batch_size=8, lr=0.1, momentum=0.0, seed=5, weight_decay=wd))
        after[wd] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for k, w0 in start.state_dict().items():
        assert torch.allclose(after[0.01][k] - after[0.0][k], -0.1 * 0.01 * w0, atol=1e-6)
    assert "weight-decay" not in LocalSGD().config(3) and LocalSGD(weight_decay=0.01).config(3)["weight-decay"] == 0.01
