"""The federated family's one driver scheme: a seeded run, its typed record, running many, and their tables.

Every federated chapter compares methods over seeds, and every driver is built
the same way:

- a chapter's ``Params`` (a :class:`repro.params.ChapterParams`) holds its parameters;
- its ``run(params) -> Results`` builds one **job** per method, setting and seed:
  a frozen record subclassing :class:`FederatedRun` (a task spec and local SGD,
  the usual initial model and central evaluation) or, for a task of its own,
  :class:`SeededRun` (the fields every run shares: method, rounds, seed,
  clients per round, evaluation period, engine, device);
- a module-level ``run_one(job) -> <Chapter>Record`` runs one job and returns
  a frozen, keyword-only :class:`RunRecord` subclass (never a dict);
- :func:`execute` runs many jobs in worker processes (one at a time on an
  engine that spreads itself), and :func:`records_frame` and
  :func:`curves_frame` turn the records into the final table and the curves
  the chapters plot;
- the chapter's ``Results`` (frozen, keyword-only) holds those tables, and
  ``claims(results)`` the ledger's evidence.

A job names its methods (:attr:`SeededRun.methods`) and the hyper-parameter a
sweep tunes for each (:attr:`SeededRun.tuned`, see :mod:`repro.federated.tuning`).
:meth:`SeededRun.play` hands a strategy and a client app to the engine on the
job's schedule (a :class:`Simulation`); :meth:`FederatedRun.simulate` does so
with the task's initial model and central evaluation.

The dict-based helpers :func:`summary_record` and :func:`run_tables` remain for
drivers not yet on typed records; :func:`run_tables` accepts records too.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from numbers import Number
from operator import attrgetter
from typing import Any, Callable, ClassVar, Mapping, Sequence, TypeVar

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

J = TypeVar("J", bound="SeededRun")
T = TypeVar("T")
Rec = TypeVar("Rec", bound="RunRecord")


@dataclass(frozen=True, kw_only=True)
class Simulation:
    """What the engine needs of a run besides the strategy and the client app.

    Attributes
    ----------
    num_clients
        Clients (partition ids ``0 .. num_clients - 1``).
    initial
        The initial global model.
    evaluate
        Central evaluation of a global model (``accuracy`` and ``loss``).
    num_rounds
        Flower rounds to run.
    eval_rounds
        Flower rounds after which to evaluate (0 is the initial model).
    """

    num_clients: int
    initial: ArrayRecord
    evaluate: EvalFn
    num_rounds: int
    eval_rounds: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class SeededRun:
    """One seeded run of one method: the fields every federated run shares (a chapter subclasses it).

    Attributes
    ----------
    method
        One of the subclass's :attr:`methods`.
    rounds, seed
        Rounds of the method and the run seed (model initialisation, client sampling, mini-batches).
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
    def setting(self) -> float:
        """The value of this run's tuned hyper-parameter (:attr:`tuned`), NaN for a method that is not tuned."""
        return float(attrgetter(self.tuned[self.method])(self)) if self.method in self.tuned else math.nan

    @property
    def run_config(self) -> dict[str, int | str]:
        """The clients' run config: the run seed and the device they train on."""
        return {"seed": self.seed, "device": self.device}

    def schedule(self, flower_rounds: int = 1, multiple_of: int = 1) -> tuple[int, tuple[int, ...]]:
        """Flower rounds and evaluation rounds of this run.

        Parameters
        ----------
        flower_rounds
            Flower rounds per round of the method (a two-step method takes 2).
        multiple_of
            Evaluations fall on multiples of this many rounds of the method (a full synchronisation).

        Returns
        -------
        num_rounds, eval_rounds
            ``flower_rounds * rounds`` and the evaluation rounds: 0, every :attr:`eval_every` rounds of the
            method (rounded up to ``multiple_of``) and the last, all in Flower rounds.
        """
        k = flower_rounds
        step = multiple_of * math.ceil(max(self.eval_every, multiple_of) / multiple_of)
        return k * self.rounds, tuple(eval_schedule(k * self.rounds, k * step, multiple_of=k))

    def play(self, strategy: Strategy, client_app: ClientApp, simulation: Simulation) -> History:
        """Run ``strategy`` against ``client_app`` as ``simulation`` says, on this run's engine."""
        return run_federated(strategy, client_app, simulation.num_clients, simulation.initial, simulation.num_rounds,
                             simulation.evaluate, simulation.eval_rounds, engine=self.engine, progress=self.progress)


@dataclass(frozen=True, kw_only=True)
class FederatedRun(SeededRun):
    """A :class:`SeededRun` on a :class:`~repro.federated.task.TaskSpec` with local SGD (most chapters' runs).

    Attributes
    ----------
    spec, sgd, tau
        Task, local training and local steps per round.
    """

    spec: TaskSpec
    sgd: LocalSGD
    tau: int

    @property
    def clients_per_round(self) -> int:
        """``active_clients``, or every client when it is ``None``."""
        return self.spec.num_clients if self.active_clients is None else self.active_clients

    @property
    def local(self) -> dict[str, float | int]:
        """The local-training config the strategy sends (``sgd`` at ``tau`` steps)."""
        return self.sgd.config(self.tau)

    def simulation(self, initial: ArrayRecord | None = None, evaluate: EvalFn | None = None,
                   flower_rounds: int = 1, multiple_of: int = 1) -> Simulation:
        """The :class:`Simulation` of this run: by default the task model for the seed and central evaluation.

        Parameters
        ----------
        initial, evaluate
            The initial global record and its central evaluation; by default the task model of
            :func:`~repro.federated.engine.initial_arrays` for the run seed and
            :func:`~repro.federated.engine.central_evaluator`.
        flower_rounds, multiple_of
            See :meth:`SeededRun.schedule`.
        """
        num_rounds, eval_rounds = self.schedule(flower_rounds, multiple_of)
        return Simulation(num_clients=self.spec.num_clients,
                          initial=initial_arrays(self.spec, self.seed) if initial is None else initial,
                          evaluate=central_evaluator(self.spec) if evaluate is None else evaluate,
                          num_rounds=num_rounds, eval_rounds=eval_rounds)

    def simulate(self, strategy: Strategy, client_app: ClientApp, initial: ArrayRecord | None = None,
                 evaluate: EvalFn | None = None, flower_rounds: int = 1) -> History:
        """Run ``strategy`` against ``client_app`` on this run's schedule, evaluating centrally.

        Parameters
        ----------
        strategy, client_app
            The server's strategy and the clients' app.
        initial, evaluate
            See :meth:`simulation`.
        flower_rounds
            Flower rounds per round of the method (a two-step method takes 2); evaluations fall on
            whole rounds of the method, every :attr:`eval_every` of them.
        """
        return self.play(strategy, client_app, self.simulation(initial, evaluate, flower_rounds))


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """What one run produced; a chapter subclasses it with its own fields (keyword-only, with defaults).

    Attributes
    ----------
    method, setting, seed
        The run's method, its tuned hyper-parameter (NaN when the method is not tuned) and seed.
    accuracy, budget_accuracy
        Test accuracy at the last evaluation and the mean of the last evaluations
        (:class:`~repro.federated.engine.RunSummary`), percent.
    client_acc_std
        Spread of per-client accuracy of the final model (NaN when not computed).
    curve
        One tuple per evaluation, ``(round, accuracy, ...)`` (the chapter names the entries).
    """

    method: str
    seed: int
    setting: float = math.nan
    accuracy: float
    budget_accuracy: float = math.nan
    client_acc_std: float = math.nan
    curve: tuple[tuple[float, ...], ...] = ()

    @classmethod
    def of(cls: type[Rec], job: SeededRun, summary: RunSummary, **extra: Any) -> Rec:
        """The record of ``job`` from its summary; ``extra`` sets the subclass's own fields."""
        return cls(method=job.method, setting=job.setting, seed=job.seed, accuracy=summary.accuracy,
                   budget_accuracy=summary.budget_accuracy, client_acc_std=summary.client_acc_std,
                   curve=tuple(tuple(p) for p in summary.curve), **extra)

    def row(self, columns: Sequence[str] | None = None) -> dict[str, Any]:
        """The record as one table row: ``columns``, or every field holding a number, a string or a bool."""
        if columns is not None:
            return {c: getattr(self, c) for c in columns}
        values = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        return {k: v for k, v in values if isinstance(v, (Number, str, bool))}


def execute(run: Callable[[J], T], jobs: Sequence[J], workers: int, desc: str) -> list[T]:
    """``run`` every job, ``workers`` at a time when all are in-process (an engine like Ray spreads itself)."""
    inprocess = all(job.engine == "inprocess" for job in jobs)
    return parallel_map(run, list(jobs), workers if inprocess else 1, desc=desc)


def records_frame(done: Sequence[RunRecord], columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The final table: one row per record (:meth:`RunRecord.row`), ``columns`` or every scalar field."""
    return pd.DataFrame([r.row(columns) for r in done])


def curves_frame(done: Sequence[RunRecord], keys: Sequence[str] = ("method", "seed"),
                 curve_columns: Sequence[str] = ("round", "accuracy")) -> pd.DataFrame:
    """The curves: one row per evaluation of every record, its ``keys`` and the named curve entries.

    Raises
    ------
    ValueError
        If a curve point has more or fewer entries than ``curve_columns`` names.
    """
    return pd.DataFrame([{**{k: getattr(r, k) for k in keys}, **dict(zip(curve_columns, point, strict=True))}
                         for r in done for point in r.curve], columns=[*keys, *curve_columns])


def summary_record(job: SeededRun, summary: RunSummary, **extra: Any) -> dict[str, Any]:
    """A run's record as a dict (the older form; new drivers use :meth:`RunRecord.of`).

    ``method, setting, seed``, the summary's accuracies, spread and ``curve``, then ``extra``.
    """
    return {"method": job.method, "setting": job.setting, "seed": job.seed, "accuracy": summary.accuracy,
            "budget_accuracy": summary.budget_accuracy, "client_acc_std": summary.client_acc_std,
            "curve": list(summary.curve), **extra}


def _field(record: RunRecord | Mapping[str, Any], name: str) -> Any:
    return getattr(record, name) if isinstance(record, RunRecord) else record[name]


def run_tables(done: Sequence[RunRecord | Mapping[str, Any]], columns: Sequence[str],
               keys: Sequence[str] = ("method", "seed"),
               curve_columns: Sequence[str] = ("round", "accuracy")) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The final table and the curves of a sweep's run records (typed :class:`RunRecord` or dicts).

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
    final = pd.DataFrame([{c: _field(r, c) for c in columns} for r in done])
    curves = pd.DataFrame([{**{k: _field(r, k) for k in keys}, **dict(zip(curve_columns, point, strict=True))}
                           for r in done for point in _field(r, "curve")])
    return final, curves
