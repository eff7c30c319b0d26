"""The shared run record: methods are checked, clients per round default to all, tables have one row per run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import RunSummary
from repro.federated.runs import FederatedRun, run_tables, summary_record
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec

SPEC = TaskSpec(dataset="digits", num_clients=4, scheme="iid", hidden=(8,))


@dataclass(frozen=True, kw_only=True)
class ToyRun(FederatedRun):
    lr_scale: float = 1.0

    methods: ClassVar[tuple[str, ...]] = ("fedavg",)


def test_unknown_methods_are_refused_and_clients_per_round_defaults_to_all():
    with pytest.raises(ValueError, match="parameter 'method'"):
        ToyRun(method="fedsgd", spec=SPEC, sgd=LocalSGD(), tau=1, rounds=1, seed=0)
    assert ToyRun(method="fedavg", spec=SPEC, sgd=LocalSGD(), tau=1, rounds=1, seed=0).clients_per_round == 4
    assert ToyRun(method="fedavg", spec=SPEC, sgd=LocalSGD(), tau=1, rounds=1, seed=0,
                  active_clients=2).clients_per_round == 2


def test_a_simulated_run_becomes_one_row_and_its_evaluations_the_curve():
    job = ToyRun(method="fedavg", spec=SPEC, sgd=LocalSGD(batch_size=8, lr=0.1), tau=2, rounds=3, seed=1,
                 active_clients=2, eval_every=2)
    hist = job.simulate(SeededFedAvg(job.clients_per_round, job.local, seed=job.seed),
                        make_client_app(SPEC, {"seed": job.seed}))
    assert hist.rounds == [0, 2, 3]  # evaluated at 0, every 2 rounds and at the last
    record = summary_record(job, RunSummary.of(hist), tag="x")
    final, curves = run_tables([record, {**record, "seed": 2}], ("method", "seed", "budget_accuracy", "tag"))
    assert final.columns.tolist() == ["method", "seed", "budget_accuracy", "tag"] and len(final) == 2
    assert curves.columns.tolist() == ["method", "seed", "round", "accuracy"] and len(curves) == 6
    with pytest.raises(ValueError):  # a curve point with more entries than names is an error, not a silent cut
        run_tables([record], ("method",), curve_columns=("round",))
