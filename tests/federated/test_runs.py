"""The shared run record: methods are checked, clients per round default to all, tables have one row per run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pytest

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import RunSummary, central_evaluator, initial_arrays, run_federated
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, records_frame, run_tables, summary_record
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TRAIN_SAMPLES, TaskSpec, available_train, load_dataset, majority_accuracy

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


@dataclass(frozen=True, kw_only=True)
class ToyRecord(RunRecord):
    tag: str = ""
    extra: dict = field(default_factory=dict)


def test_typed_records_become_rows_and_curves():
    job = ToyRun(method="fedavg", spec=SPEC, sgd=LocalSGD(batch_size=8, lr=0.1), tau=2, rounds=3, seed=1,
                 active_clients=2, eval_every=2)
    hist = job.simulate(SeededFedAvg(job.clients_per_round, job.local, seed=job.seed),
                        make_client_app(SPEC, {"seed": job.seed}))
    rec = ToyRecord.of(job, RunSummary.of(hist), tag="x", extra={"a": 1})
    assert (rec.method, rec.seed, rec.tag) == ("fedavg", 1, "x") and np.isnan(rec.setting)
    # the row holds every scalar field, never the curve or a mapping
    assert set(rec.row()) == {"method", "seed", "setting", "accuracy", "budget_accuracy", "client_acc_std", "tag"}
    other = ToyRecord(method="fedavg", seed=2, accuracy=1.0, curve=((0, 5.0), (3, 6.0)))
    assert records_frame([rec, other], ("seed", "accuracy")).seed.tolist() == [1, 2]
    curves = curves_frame([rec, other])
    assert curves.columns.tolist() == ["method", "seed", "round", "accuracy"] and len(curves) == 5
    # the dict helpers read typed records too
    final, _ = run_tables([rec, other], ("method", "seed", "tag"))
    assert final.tag.tolist() == ["x", ""]
    with pytest.raises(ValueError):
        curves_frame([other], curve_columns=("round",))
    with pytest.raises(TypeError, match="unknown option"):
        run_federated(SeededFedAvg(2, job.local, seed=0), make_client_app(SPEC), SPEC.num_clients,
                      initial_arrays(SPEC, 0), 1, central_evaluator(SPEC), [1], engin="ray")


def test_the_schedule_evaluates_on_whole_synchronisations():
    job = ToyRun(method="fedavg", spec=SPEC, sgd=LocalSGD(), tau=1, rounds=12, seed=0, eval_every=5)
    assert job.schedule() == (12, (0, 5, 10, 12))
    assert job.schedule(multiple_of=4) == (12, (0, 8, 12))  # every 5 rounds rounded up to a multiple of 4
    assert job.schedule(flower_rounds=2) == (24, (0, 10, 20, 24))
    assert job.simulation().eval_rounds == job.schedule()[1]


def test_the_train_sizes_the_checks_use_are_the_loaders():
    for name in ("digits", "doc_topics"):
        assert len(load_dataset(name).y_train) == TRAIN_SAMPLES[name]
    assert available_train("digits", 100_000) == TRAIN_SAMPLES["digits"] and available_train("digits", 50) == 50
    assert 10.0 <= majority_accuracy(SPEC) < 20.0  # ten nearly balanced digit classes
