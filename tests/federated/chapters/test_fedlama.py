"""The FedLAMA chapter driver: equal total local steps, typed run records, worker-independent runs, the claims."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from repro.federated.chapters import fedlama
from repro.federated.chapters.fedlama import FedLamaRun, Params, Results, claims, run_strategy
from repro.federated.client import LocalSGD
from repro.federated.strategies import StepDecay
from repro.federated.task import TaskSpec
from repro.params import ParameterError

SPEC = TaskSpec(dataset="digits", num_clients=12, alpha=0.3, hidden=(32, 16))
BASE = dict(dataset="digits", n_train=400, num_clients=6, active_clients=3, alpha=0.5, model="mlp", hidden=(16,),
            tau=2, phis=(2,), rounds=4, batch_size=16, lr=0.05, momentum=0.0, seeds=(0, 1), engine="inprocess",
            device="cpu", workers=1, eval_every=2, warmup=2, lr_decay_at=(0.5,), lr_decay=0.1, weight_decay=2e-4)


def test_same_total_steps_for_long_interval_baseline():
    sgd = LocalSGD(batch_size=16, lr=0.05, momentum=0.0)
    _, s_long = run_strategy(
        FedLamaRun(method="fedavg_long", phi=2, seed=0, spec=SPEC, sgd=sgd, tau=3, rounds=4, active_clients=3, eval_every=2)
    )
    _, s_avg = run_strategy(
        FedLamaRun(method="fedavg", phi=1, seed=0, spec=SPEC, sgd=sgd, tau=3, rounds=4, active_clients=3, eval_every=2)
    )
    assert s_long.local["steps"] == 2 * s_avg.local["steps"]  # phi*tau steps per round
    assert s_long.comm.total * 2 == s_avg.comm.total  # half the rounds, full model each time
    with pytest.raises(ValueError, match="multiple of phi"):
        FedLamaRun(method="fedlama", phi=3, seed=0, spec=SPEC, sgd=sgd, tau=3, rounds=4, active_clients=3, eval_every=2)


def test_runs_do_not_depend_on_worker_processes():
    one = fedlama.run(Params(**BASE))
    two = fedlama.run(Params(**{**BASE, "workers": 2}))
    assert one.final.equals(two.final) and one.curves.equals(two.curves) and one.timelines == two.timelines
    assert set(one.timelines) == {(2, 0), (2, 1)}


def _results(rows: list[dict], phis: tuple[int, ...]) -> Results:
    return Results(final=pd.DataFrame(rows), curves=pd.DataFrame(), timelines={}, phis=phis, trivial=11.0)


def test_communication_counts_only_where_accuracy_holds_and_the_saving_is_the_largest_over_phi():
    rows = []
    for seed, lama4, lama2 in ((0, 89.5, 89.0), (1, 85.0, 89.5)):  # seed 1 drops 5 points below FedAvg at phi 4
        rows += [
            {"method": "fedavg", "phi": 1, "seed": seed, "accuracy": 90.0, "comm": 1000},
            {"method": "fedavg_long", "phi": 4, "seed": seed, "accuracy": 80.0, "comm": 250},
            {"method": "fedlama", "phi": 4, "seed": seed, "accuracy": lama4, "comm": 400},
            {"method": "fedavg_long", "phi": 2, "seed": seed, "accuracy": 85.0, "comm": 500},
            {"method": "fedlama", "phi": 2, "seed": seed, "accuracy": lama2, "comm": 700},
        ]
    c = claims(_results(rows, (2, 4)))
    assert c["comm_reduction_vs_fedavg_tau"] == pytest.approx([60.0, 60.0])
    # seed 0: phi 4 saves 60% within the margin; seed 1: only phi 2 (30%) stays within it
    assert list(c["comm_saved_within_margin"].values) == pytest.approx([60.0, 30.0])
    assert list(c["acc_drop_vs_fedavg_tau"].values) == [0.5, 5.0]
    assert c["acc_gain_vs_fedavg_phitau"].arms == {"fedlama": [89.5, 85.0], "fedavg_long": [80.0, 80.0]}
    assert fedlama.saving_within_margin(_results(rows, (2, 4)), 10.0) == pytest.approx([60.0, 60.0])
    only4 = [r for r in rows if r["phi"] != 2]
    assert list(claims(_results(only4, (4,)))["comm_saved_within_margin"].values) == pytest.approx([60.0, 0.0])


@pytest.mark.parametrize("change, names", [
    ({"rounds": 5}, "'rounds', 'phis'"),
    ({"active_clients": 7}, "'active_clients', 'num_clients'"),
    ({"num_clients": 300, "active_clients": 3}, "'dataset', 'n_train', 'num_clients'"),
    ({"phis": (1,)}, "'phis'"),
    ({"warmup": 4}, "'warmup', 'rounds'"),
    ({"lr_decay_at": (0.3,)}, "'lr_decay_at', 'rounds'"),
])
def test_impossible_combinations_are_refused_by_name(change, names):
    Params(**BASE).checks()
    with pytest.raises(ParameterError, match=names):
        Params(**{**BASE, **change}).checks()


def test_jobs_cover_every_method_phi_and_seed():
    js = fedlama.jobs(Params(**{**BASE, "phis": (2, 4)}))
    assert sorted({(j.method, j.phi) for j in js}) == [("fedavg", 1), ("fedavg_long", 2), ("fedavg_long", 4),
                                                       ("fedlama", 2), ("fedlama", 4)]
    assert all(dataclasses.is_dataclass(j) and j.rounds == 4 for j in js) and len(js) == 10


def test_the_decay_falls_on_the_same_local_step_for_every_method():
    params = Params(**{**BASE, "rounds": 8, "phis": (4,), "lr_decay_at": (0.5, 0.75)})
    schedule = params.lr_schedule()
    assert schedule == StepDecay(milestones=(4, 6), factor=0.1)
    assert Params(**{**BASE, "lr_decay_at": ()}).lr_schedule() is None
    assert params.sgd().config(2)["weight-decay"] == 2e-4
    runs = {j.method: j for j in fedlama.jobs(params) if j.seed == 0}
    assert runs["fedavg"].lr_decay == runs["fedlama"].lr_decay == schedule
    # FedAvg(4 tau')'s rounds cover tau'-rounds 1-4, 5-8, 9-12: it drops after its first (the step of tau'-round 4)
    # and, since tau'-round 6 ends inside its second, again only from its third on (none in 8 tau'-rounds)
    assert runs["fedavg_long"].long_decay() == StepDecay(milestones=(1, 2), factor=0.1)
    _, strategy = run_strategy(runs["fedavg_long"])
    assert strategy.lr_decay == StepDecay(milestones=(1, 2), factor=0.1)
