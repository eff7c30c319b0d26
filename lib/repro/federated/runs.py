"""One seeded run of a chapter's comparison, and what a sweep does with many of them.

Every federated chapter compares methods over seeds.  :class:`FederatedRun`
holds what all such runs share (method, task, local training, rounds, seed,
clients per round, evaluation period, engine); a chapter subclasses it with
its own fields and names its methods and the hyper-parameters its sweep
tunes (see :mod:`repro.federated.tuning`).  :meth:`FederatedRun.simulate` runs a
strategy against a client app with the run's initial model, central
evaluation and schedule; :func:`execute` runs many runs in worker processes
(one at a time on an engine that spreads itself); :func:`summary_record` and
:func:`run_tables` turn the runs into the final table and the accuracy curves
the chapters plot.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, ClassVar, Sequence, TypeVar

import pandas as pd
from flwr.app import ArrayRecord
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import Strategy

from repro.federated.client import LocalSGD
from repro.federated.engine import (
    EvalFn,
    History,
    RunSummary,
    central_evaluator,
    eval_schedule,
    initial_arrays,
    run_federated,
)
from repro.federated.task import TaskSpec
from repro.parallel import parallel_map

R = TypeVar("R", bound="FederatedRun")


@dataclass(frozen=True, kw_only=True)
class FederatedRun:
    """One seeded run of one method; a chapter subclasses it with its own fields (all with defaults).

    Attributes
    ----------
    method
        One of the subclass's :attr:`methods`.
    spec, sgd, tau, rounds, seed
        Task, local training, local steps per round, rounds, run seed.
    active_clients
        Clients per round (``None``: every client every round).
    eval_every, engine
        Evaluation period (rounds) and engine (see :func:`repro.federated.engine.run_federated`).
    device
        Where the clients train (``cpu``, ``cuda`` or ``auto``), handed to them in the run config.
    progress
        Label of a per-round progress bar (``None``: none).
    """

    method: str
    spec: TaskSpec
    sgd: LocalSGD
    tau: int
    rounds: int
    seed: int
    active_clients: int | None = None
    eval_every: int = 10
    engine: str = "inprocess"
    device: str = "cpu"
    progress: str | None = None

    methods: ClassVar[tuple[str, ...]] = ()
    """The methods a subclass runs."""
    tuned: ClassVar[dict[str, str]] = {}
    """The methods whose hyper-parameter a sweep tunes over a grid, and the field that holds it (dotted for a
    field of a field: ``"sgd.lr"`` is the clients' learning rate)."""

    def __post_init__(self) -> None:
        if self.method not in self.methods:
            raise ValueError(f"parameter 'method': must be one of {self.methods}, got {self.method!r}")

    @property
    def clients_per_round(self) -> int:
        """``active_clients``, or every client when it is ``None``."""
        return self.spec.num_clients if self.active_clients is None else self.active_clients

    @property
    def setting(self) -> float:
        """The value of this run's tuned hyper-parameter (:attr:`tuned`), NaN for a method that is not tuned."""
        return float(attrgetter(self.tuned[self.method])(self)) if self.method in self.tuned else float("nan")

    @property
    def run_config(self) -> dict[str, int | str]:
        """The clients' run config: the run seed and the device they train on."""
        return {"seed": self.seed, "device": self.device}

    @property
    def local(self) -> dict[str, float | int]:
        """The local-training config the strategy sends (``sgd`` at ``tau`` steps)."""
        return self.sgd.config(self.tau)

    def simulate(self, strategy: Strategy, client_app: ClientApp, initial: ArrayRecord | None = None,
                 evaluate: EvalFn | None = None, flower_rounds: int = 1) -> History:
        """Run ``strategy`` against ``client_app`` on this run's schedule, evaluating centrally.

        Parameters
        ----------
        strategy, client_app
            The server's strategy and the clients' app.
        initial, evaluate
            The initial global record and its central evaluation; by default the task model of
            :func:`~repro.federated.engine.initial_arrays` for the run seed and
            :func:`~repro.federated.engine.central_evaluator`.
        flower_rounds
            Flower rounds per round of the method (a two-step method takes 2); evaluations fall on
            whole rounds of the method, every :attr:`eval_every` of them.
        """
        spec, k = self.spec, flower_rounds
        return run_federated(strategy, client_app, spec.num_clients,
                             initial_arrays(spec, self.seed) if initial is None else initial, k * self.rounds,
                             central_evaluator(spec) if evaluate is None else evaluate,
                             eval_schedule(k * self.rounds, k * self.eval_every, multiple_of=k), engine=self.engine,
                             progress=self.progress)


def execute(run: Callable[[R], dict[str, Any]], jobs: Sequence[R], workers: int, desc: str) -> list[dict[str, Any]]:
    """``run`` every job, ``workers`` at a time when all are in-process (an engine like Ray spreads itself)."""
    inprocess = all(job.engine == "inprocess" for job in jobs)
    return parallel_map(run, list(jobs), workers if inprocess else 1, desc=desc)


def summary_record(job: FederatedRun, summary: RunSummary, **extra: Any) -> dict[str, Any]:
    """A run's record: ``method, setting, seed``, the summary's accuracies, spread and ``curve``, then ``extra``."""
    return {"method": job.method, "setting": job.setting, "seed": job.seed, "accuracy": summary.accuracy,
            "budget_accuracy": summary.budget_accuracy, "client_acc_std": summary.client_acc_std,
            "curve": list(summary.curve), **extra}


def run_tables(done: Sequence[dict[str, Any]], columns: Sequence[str], keys: Sequence[str] = ("method", "seed"),
               curve_columns: Sequence[str] = ("round", "accuracy")) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The final table and the curves of a sweep's run records.

    Parameters
    ----------
    done
        Run records, each with the ``columns``, the ``keys`` and a ``curve`` of tuples.
    columns
        Columns of the final table, one row per run.
    keys
        Columns naming a run on every row of the curves.
    curve_columns
        Names of the entries of each curve point.

    Returns
    -------
    final, curves : DataFrame
    """
    final = pd.DataFrame([{c: r[c] for c in columns} for r in done])
    curves = pd.DataFrame([{**{k: r[k] for k in keys}, **dict(zip(curve_columns, point, strict=True))}
                           for r in done for point in r["curve"]])
    return final, curves
