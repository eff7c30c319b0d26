"""The FedDCT chapter: a large model divided into co-trained sub-models across clusters of weak clients.

:class:`Params` holds the chapter's parameters.  :func:`run` tunes every
method on a tuning seed (:func:`tune`, choosing on training samples no
client holds, never on the test set): first each method's learning rate over
one grid, then, at that rate, the one knob of each method that has one
(FedProx's ``mu``, FedGKT's distillation weight, FedDCT's co-training weight)
over grids of one size.  It then runs every method at its chosen settings for
every seed (one :class:`DctRun` each, through :func:`run_one` into a
:class:`DctRecord`) and returns the :class:`Results`; :func:`claims` gives the
ledger's evidence.  The figures and tables are the chapter's own.

Besides FedAvg on the large model at the same local steps as a FedAvg
client of FedDCT's federation, FedAvg-large also runs at ``S`` times those
steps (``fedavg_large_long``): a FedDCT cluster trains its ensemble over all
its ``S`` members' data in turn, ``S`` times the sequential local steps of a
FedAvg client, and the claims compare FedDCT with both.

FedGKT (:mod:`repro.federated.fedgkt`) is one of the methods: each client
trains one FedDCT sub-model's architecture as its extractor and head
(:func:`gkt_task`), so its device holds exactly what a FedDCT device holds,
and the server's model on the extracted features has the large model's
hidden widths.  Its accuracy is the mean over clients of each client's
extractor followed by the server model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from repro.federated.arrays import from_arrayrecord
from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import History, RunSummary, central_evaluator, initial_arrays
from repro.federated.feddct import (
    FedDCT,
    build_ensemble,
    ensemble_arrays,
    ensemble_evaluator,
    make_feddct_client_app,
    sub_hidden,
)
from repro.federated.fedgkt import FedGKT, GktTask, make_fedgkt_client_app, pair_evaluator
from repro.federated.figures import accuracy_band, mean_sd, seed_sd
from repro.federated.regularised import make_regularised_client_app
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, execute, records_frame
from repro.federated.seed_tuning import one_value, tune_on_seed, tuning_summary
from repro.federated.sfetec import SplitHierarchy, SplitSchedule, run_split_training
from repro.federated.split import split_sequential
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, available_train, build_model, majority_accuracy
from repro.federated.tiers import count_step, linear_layers, step_memory
from repro.federated.tuning import Choice, best_settings, chosen, model_validation_accuracy
from repro.models import set_weights
from repro.params import ChapterParams, require
from repro.results import Evidence

METHODS = ("fedavg_large", "fedavg_large_long", "fedavg_small", "fedprox_large", "splitfed_large", "fedgkt",
           "clustered_large", "feddct")
LABELS = {"fedavg_large": "FedAvg, large model", "fedavg_large_long": "FedAvg, large model, S x the local steps",
          "fedavg_small": "FedAvg, one sub-model", "fedprox_large": "FedProx, large model",
          "splitfed_large": "SplitFed, large model", "fedgkt": "FedGKT, sub-model on device + large server model",
          "clustered_large": "large model, FedDCT's cluster schedule (ablation)", "feddct": "FedDCT"}
COLOURS = {"fedavg_large": "tab:gray", "fedavg_large_long": "black", "fedavg_small": "tab:brown",
           "fedprox_large": "tab:orange", "splitfed_large": "tab:green", "fedgkt": "tab:red",
           "clustered_large": "tab:purple", "feddct": "tab:blue"}
KNOBS = {"fedprox_large": "mu", "fedgkt": "gkt_kd_weight", "feddct": "cot_final"}
"""The methods with a hyper-parameter beside the learning rate, and the :class:`DctRun` field that holds it."""
KNOB_SYMBOL = {"fedprox_large": "μ", "fedgkt": "KD weight", "feddct": "co-training weight"}
CUT = 2
"""SplitFed's cut: after the first linear layer and its ReLU (the client keeps ``fc0``), as the spec asks."""
TARGET_SHARE = 0.95
"""Rounds to target count the rounds until a method reaches this share of the reference method's best accuracy."""
STILL_RISING_MARGIN = 2.0
"""Points by which FedGKT's rise over the run's second half must exceed FedDCT's for the reading to call it still rising."""
DEVICE_ROW = {"fedavg_large": 0, "fedavg_large_long": 0, "fedprox_large": 0, "clustered_large": 0, "fedavg_small": 1,
              "feddct": 1, "splitfed_large": 2, "fedgkt": 3}
"""Each method's device: its row of :func:`per_device_memory`'s table."""
TUNING_METRIC = "validation_accuracy"
"""What every setting is chosen on: the final model's accuracy on the held-out training samples."""
RECORD_COLUMNS = ("method", "setting", "seed", "lr", "knob", "tau", "accuracy", "budget_accuracy", TUNING_METRIC)


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``feddct.yaml``)."""

    dataset: str
    n_train: int
    validation_share: float
    num_clients: int
    scheme: str
    alpha: float
    hidden: tuple[int, ...]
    split_factor: int
    steps: int
    rounds: int
    batch_size: int
    lrs: tuple[float, ...]
    mus: tuple[float, ...]
    cot_finals: tuple[float, ...]
    cot_warmup: int
    gkt_temperature: float
    gkt_kd_weights: tuple[float, ...]
    gkt_server_epochs: int
    memory_batch: int
    tuning_seed: int
    seeds: tuple[int, ...]
    workers: int
    device: str
    eval_every: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(self.num_clients % self.split_factor == 0, self, ("num_clients", "split_factor"),
                "num_clients must be a multiple of split_factor (whole clusters)")
        require(len(self.mus) == len(self.cot_finals) == len(self.gkt_kd_weights), self,
                ("mus", "cot_finals", "gkt_kd_weights"),
                "FedProx, FedDCT and FedGKT get knob grids of one size (the same tuning budget)")
        dealt = int(available_train(self.dataset, self.n_train) * (1.0 - self.validation_share))
        require(dealt >= 2 * self.num_clients, self, ("dataset", "n_train", "validation_share", "num_clients"),
                "the split needs at least 2 training samples per client after the validation share")
        require(self.tuning_seed not in self.seeds, self, ("tuning_seed", "seeds"), "the tuning seed must not be a reported seed")
        require(self.eval_every <= self.rounds, self, ("eval_every", "rounds"),
                "rounds to target need evaluations within the run")

    def spec(self) -> TaskSpec:
        """The task: the dataset over the clients (IID or Dirichlet), a validation share held out, the large MLP."""
        return TaskSpec(dataset=self.dataset, num_clients=self.num_clients, scheme=self.scheme, alpha=self.alpha,
                        hidden=self.hidden, model="mlp", n_train=self.n_train, data_seed=0,
                        validation_share=self.validation_share)

    def reference(self) -> dict[str, float]:
        """The knobs at which the learning rates are tuned: each knob grid's first value (the authors' default)."""
        return {"mu": self.mus[0], "cot_final": self.cot_finals[0], "gkt_kd_weight": self.gkt_kd_weights[0]}

    def knob_grid(self, method: str) -> tuple[float, ...]:
        """The grid of ``method``'s knob (:data:`KNOBS`)."""
        return {"mu": self.mus, "cot_final": self.cot_finals, "gkt_kd_weight": self.gkt_kd_weights}[KNOBS[method]]


@dataclass(frozen=True, kw_only=True)
class DctRun(FederatedRun):
    """One run; the shared fields are :class:`~repro.federated.runs.FederatedRun`'s.

    ``sgd`` is plain SGD (no momentum, as SplitFed's loop) at the run's
    learning rate; ``tau`` is the local steps per client and round (``S``
    times the others' for ``fedavg_large_long``); every client takes part in
    every round.

    Attributes
    ----------
    split_factor
        FedDCT's sub-models ``S`` (and clients per cluster).
    mu
        FedProx's proximal weight.
    cot_final, cot_warmup
        FedDCT's co-training weight and its warm-up in rounds.
    gkt_temperature, gkt_kd_weight, gkt_server_epochs
        FedGKT's distillation temperature and weight and its server's epochs per round.
    """

    split_factor: int = 1
    mu: float = 0.01
    cot_final: float = 0.5
    cot_warmup: int = 0
    gkt_temperature: float = 3.0
    gkt_kd_weight: float = 1.0
    gkt_server_epochs: int = 1

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = {m: "sgd.lr" for m in METHODS}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.spec.num_clients % self.split_factor:
            raise ValueError(f"num_clients={self.spec.num_clients} must be a multiple of split_factor={self.split_factor}")

    @property
    def knob(self) -> float:
        """The value of this method's knob (:data:`KNOBS`), NaN for a method without one."""
        return float(getattr(self, KNOBS[self.method])) if self.method in KNOBS else math.nan

    @property
    def ensemble_size(self) -> int:
        """Sub-models of the cluster-trained methods: ``S`` for FedDCT, 1 for the undivided ablation."""
        return self.split_factor if self.method == "feddct" else 1

    def small_spec(self) -> TaskSpec:
        """The task with one sub-model's widths (``hidden / sqrt(S)``)."""
        return dataclasses.replace(self.spec, hidden=sub_hidden(self.spec.hidden, self.split_factor))

    def model(self) -> torch.nn.Module:
        """The global model this run trains (an ensemble for the cluster-trained methods), initialised from seed 0."""
        if self.method in ("feddct", "clustered_large"):
            return build_ensemble(self.spec, self.ensemble_size, seed=0)
        return build_model(self.small_spec() if self.method == "fedavg_small" else self.spec, seed=0)


@dataclass(frozen=True, kw_only=True)
class DctRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields (``setting`` is the learning rate) and these.

    Attributes
    ----------
    lr, knob
        The learning rate and the method's knob (NaN without one).
    tau
        Local steps per client and round.
    validation_accuracy
        The final model's accuracy on the held-out training samples (for FedGKT, the mean over the clients'
        extractor + server pairs).
    """

    lr: float = math.nan
    knob: float = math.nan
    tau: int = 0
    validation_accuracy: float = math.nan


def gkt_task(spec: TaskSpec, split_factor: int) -> GktTask:
    """FedGKT's models on ``spec``: a client's is one FedDCT sub-model's MLP, the server's has the large widths.

    The client's extractor is the sub-model's hidden layers, its head the last
    layer; the server model maps the extractor's features through the large
    model's hidden widths to the classes.
    """
    return GktTask(spec=spec, client_hidden=sub_hidden(spec.hidden, split_factor), server_hidden=tuple(spec.hidden))


def record(job: DctRun, history: History, validation: float) -> DctRecord:
    """The record of ``job`` from its history and validation accuracy."""
    return DctRecord.of(job, RunSummary.of(history), lr=job.sgd.lr, knob=job.knob, tau=job.tau,
                        validation_accuracy=validation)


def run_fedgkt(job: DctRun) -> DctRecord:
    """Run FedGKT on Flower's in-process engine; its validation accuracy is the mean over the clients' pairs."""
    task = gkt_task(job.spec, job.split_factor)
    strategy = FedGKT(job.spec.num_clients, job.local, task.server_model(job.seed), seed=job.seed,
                      temperature=job.gkt_temperature, kd_weight=job.gkt_kd_weight, server_epochs=job.gkt_server_epochs)
    hist = job.simulate(strategy, make_fedgkt_client_app(task, job.run_config), task.initial_arrays(job.seed),
                        pair_evaluator(task))
    assert hist.final_arrays is not None
    pairs = task.pairs(hist.final_arrays)
    return record(job, hist, float(np.mean([model_validation_accuracy(job.spec, pair) for pair in pairs])))


def run_one(job: DctRun) -> DctRecord:
    """Run ``job``: SplitFed in the split loop, every other method on Flower's in-process engine."""
    if job.method == "fedgkt":
        return run_fedgkt(job)
    n, local, cfg = job.spec.num_clients, job.local, job.run_config
    if job.method == "splitfed_large":
        schedule = SplitSchedule(rounds=job.rounds, steps=job.tau, batch_size=job.sgd.batch_size, lr=job.sgd.lr)
        split = run_split_training(job.spec, cut=CUT, hierarchy=SplitHierarchy.splitfed(n), schedule=schedule,
                                   seed=job.seed, eval_rounds=job.schedule()[1], device=job.device)
        hist, final = History(rounds=split.rounds, accuracy=split.accuracy), split.final
    else:
        if job.method in ("feddct", "clustered_large"):
            s = job.ensemble_size
            strategy: SeededFedAvg = FedDCT(n, local, s, seed=job.seed, cot_final=job.cot_final,
                                            cot_warmup=job.cot_warmup, cluster_size=job.split_factor)
            hist = job.simulate(strategy, make_feddct_client_app(job.spec, s, cfg), ensemble_arrays(job.spec, s, job.seed),
                                ensemble_evaluator(job.spec, s))
        elif job.method == "fedprox_large":
            hist = job.simulate(SeededFedProx(n, local, seed=job.seed, mu=job.mu), make_regularised_client_app(job.spec, cfg))
        else:
            spec = job.small_spec() if job.method == "fedavg_small" else job.spec
            hist = job.simulate(SeededFedAvg(n, local, seed=job.seed), make_client_app(spec, cfg),
                                initial_arrays(spec, job.seed), central_evaluator(spec))
        assert hist.final_arrays is not None
        final = from_arrayrecord(hist.final_arrays)
    model = job.model()
    set_weights(model, final)
    return record(job, hist, model_validation_accuracy(job.spec, model))


def job(params: Params, method: str, settings: dict[str, float], seed: int) -> DctRun:
    """One run of ``method`` with ``settings`` (``lr`` and the knobs of :meth:`Params.reference`, any overridden)."""
    steps = params.steps * (params.split_factor if method == "fedavg_large_long" else 1)
    return DctRun(method=method, spec=params.spec(), sgd=LocalSGD(batch_size=params.batch_size, lr=settings["lr"], momentum=0.0),
                  tau=steps, rounds=params.rounds, seed=seed, eval_every=params.eval_every, device=params.device,
                  progress=None if params.workers > 1 else f"{method} {settings} seed={seed}",
                  split_factor=params.split_factor, mu=settings["mu"], cot_final=settings["cot_final"],
                  cot_warmup=params.cot_warmup, gkt_temperature=params.gkt_temperature,
                  gkt_kd_weight=settings["gkt_kd_weight"], gkt_server_epochs=params.gkt_server_epochs)


@dataclass(frozen=True, kw_only=True)
class Tuned:
    """What :func:`tune` chose and from which runs.

    Attributes
    ----------
    lr
        Each method's learning rate, chosen at the reference knobs.
    knob
        For the methods of :data:`KNOBS`, the knob value chosen at that learning rate.
    runs
        Every tuning run (:data:`RECORD_COLUMNS` and ``stage``: ``lr`` or ``knob``); empty when nothing was tuned.
    """

    lr: tuple[Choice, ...]
    knob: tuple[Choice, ...]
    runs: pd.DataFrame

    def settings(self, params: Params, method: str) -> dict[str, float]:
        """``method``'s chosen learning rate and knob (the reference knobs for the others)."""
        out = {**params.reference(), "lr": chosen(self.lr)[method]}
        if method in KNOBS:
            out[KNOBS[method]] = chosen(self.knob)[method]
        return out


def tune(params: Params) -> Tuned:
    """Each method's learning rate on the tuning seed, then the knobs at those rates, chosen on validation.

    Stage one runs every method at every value of ``lrs`` with the reference knobs (each knob grid's first
    value, the authors' default); stage two runs FedProx, FedGKT and FedDCT at their chosen rate and every
    other value of their knob grids (the reference run is reused).  Both stages choose with
    :func:`repro.federated.tuning.best_settings` on :data:`TUNING_METRIC`.  A one-value grid runs nothing.
    """
    ref, seed, w = params.reference(), params.tuning_seed, params.workers
    lr_choices, lr_runs = tune_on_seed(run_one, lambda m, v: job(params, m, {**ref, "lr": v}, seed), METHODS, params.lrs,
                                       RECORD_COLUMNS, TUNING_METRIC, w, desc="FedDCT tuning: learning rates")
    lr = chosen(lr_choices)
    knobbed = tuple(KNOBS)
    if len(params.mus) == 1:
        knob_choices = tuple(c for m in knobbed for c in one_value([m], params.knob_grid(m)[0]))
        return Tuned(lr=lr_choices, knob=knob_choices, runs=lr_runs.assign(stage="lr"))
    extra = [job(params, m, {**ref, "lr": lr[m], KNOBS[m]: v}, seed) for m in knobbed for v in params.knob_grid(m)[1:]]
    # under two runs per worker, in this process: spawning the workers would cost more CPU than it saves
    done = execute(run_one, extra, w if len(extra) >= 2 * w else 1, desc="FedDCT tuning: knobs")
    reused = (lr_runs[lr_runs.method.isin(knobbed)] if len(lr_runs)
              else records_frame(execute(run_one, [job(params, m, {**ref, "lr": lr[m]}, seed) for m in knobbed], w,
                                         desc="FedDCT tuning: reference knobs"), RECORD_COLUMNS))
    reused = reused[[np.isclose(r.lr, lr[r.method]) for r in reused.itertuples()]]
    knob_runs = pd.concat([reused, records_frame(done, RECORD_COLUMNS)], ignore_index=True)
    knob_choices = best_settings(knob_runs.assign(setting=knob_runs.knob), TUNING_METRIC)
    runs = pd.concat([lr_runs.assign(stage="lr"), knob_runs.assign(stage="knob")], ignore_index=True)
    return Tuned(lr=lr_choices, knob=knob_choices, runs=runs)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the chapter's comparison produced.

    Attributes
    ----------
    final
        One row per reported run: :data:`RECORD_COLUMNS`.
    curves
        ``method, seed, round, accuracy`` at every evaluation.
    tuned
        The chosen learning rates and knobs, and the tuning runs.
    memory
        :func:`per_device_memory`'s table.
    trivial
        Test accuracy of always predicting the majority class (percent): the task's trivial level.
    censor_round
        The round a run that never reaches its target is counted at (the rounds plus one evaluation period).
    rounds
        Rounds of every run.
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    tuned: Tuned
    memory: pd.DataFrame
    trivial: float
    censor_round: int
    rounds: int


def run(params: Params) -> Results:
    """Tune on the tuning seed, then run every method at its chosen settings for every seed."""
    tuned = tune(params)
    done = execute(run_one, [job(params, m, tuned.settings(params, m), s) for s in params.seeds for m in METHODS],
                   params.workers, desc="FedDCT comparison")
    spec = params.spec()
    return Results(final=records_frame(done, RECORD_COLUMNS), curves=curves_frame(done), tuned=tuned,
                   memory=per_device_memory(spec, params.split_factor, params.memory_batch),
                   trivial=majority_accuracy(spec), censor_round=params.rounds + params.eval_every, rounds=params.rounds)


def rounds_to_target(curves: pd.DataFrame, reference: str, censor_round: int) -> pd.DataFrame:
    """Per method and seed, the first evaluated round reaching :data:`TARGET_SHARE` of ``reference``'s best accuracy.

    A run that never gets there is counted at ``censor_round`` (censored; the table says so).
    """
    rows = []
    for seed, g in curves.groupby("seed"):
        target = TARGET_SHARE * g[g.method == reference].accuracy.max()
        for m, h in g.groupby("method"):
            hit = h[h.accuracy >= target]["round"]
            rows.append({"method": m, "seed": seed, "target": target, "reached": not hit.empty,
                         "rounds": int(hit.min()) if not hit.empty else censor_round})
    return pd.DataFrame(rows)


def per_device_memory(spec: TaskSpec, split_factor: int, batch_size: int) -> pd.DataFrame:
    """Peak bytes of one local SGD step on one device (plain SGD), per method, modelled and counted by torch.

    The large model and one sub-model are counted whole
    (:func:`repro.federated.tiers.count_step`); SplitFed's client holds only
    the layers before the cut, and only the model counts it: its step ends at
    the cut, and torch's count would add a loss on the cut activations that
    the server computes.  A FedGKT client trains its whole small model
    (:func:`gkt_task`: one sub-model's architecture) and counts the same.
    """
    large = build_model(spec, seed=0)
    sub = build_ensemble(spec, split_factor, seed=0).members[0]
    base, _ = split_sequential(large, CUT)
    rows = []
    devices: dict[str, torch.nn.Module] = {"large model (FedAvg, FedProx)": large,
                                           f"one of {split_factor} sub-models (FedDCT, FedAvg small)": sub}
    for name, model in devices.items():
        step = count_step(model, batch_size, momentum=0.0)
        rows.append({"device": name, "parameters": step.parameters, "step memory, model (kB)": step.modelled.trained / 1e3,
                     "step memory, torch (kB)": step.measured / 1e3})
    layers = linear_layers(base)
    rows.append({"device": "SplitFed client (layers before the cut)", "parameters": sum(lay.parameters for lay in layers),
                 "step memory, model (kB)": step_memory(layers, len(layers), batch_size, optimizer_slots=0).trained / 1e3,
                 "step memory, torch (kB)": float("nan")})
    step = count_step(gkt_task(spec, split_factor).client_model(0), batch_size, momentum=0.0)
    rows.append({"device": "FedGKT client (extractor + head)", "parameters": step.parameters,
                 "step memory, model (kB)": step.modelled.trained / 1e3, "step memory, torch (kB)": step.measured / 1e3})
    table = pd.DataFrame(rows)
    return table.assign(**{"large / device": table["step memory, model (kB)"].iloc[0] / table["step memory, model (kB)"]})


def device_memory(memory: pd.DataFrame, method: str) -> pd.Series:
    """The row of :func:`per_device_memory`'s table describing ``method``'s device."""
    return memory.iloc[DEVICE_ROW[method]]


def accuracies(results: Results) -> dict[str, pd.Series]:
    """Every method's accuracy at the budget, indexed by seed."""
    final = results.final
    return {m: final[final.method == m].set_index("seed").budget_accuracy for m in METHODS}


def rounds_saved(results: Results, reference: str) -> tuple[list[float], dict[str, list[float]]]:
    """Per seed, the share (%) of ``reference``'s rounds to its target that FedDCT saves, and the arms' accuracies.

    ``100 (n_ref - n_dct) / n_ref``, with ``n`` the first evaluated round reaching :data:`TARGET_SHARE` of
    ``reference``'s best accuracy (:func:`rounds_to_target`): a share, so that runs of 16 and of 300 rounds can be
    set side by side.
    """
    hit = rounds_to_target(results.curves, reference, results.censor_round)
    need = {m: hit[hit.method == m].set_index("seed")["rounds"] for m in (reference, "feddct")}
    acc = accuracies(results)
    seeds = sorted(acc["feddct"].index)
    return ([float(100.0 * (need[reference][s] - need["feddct"][s]) / need[reference][s]) for s in seeds],
            {m: [float(acc[m][s]) for s in seeds] for m in (reference, "feddct")})


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence: FedDCT's gains per seed with both arms, rounds saved, the memory reduction once."""
    acc = accuracies(results)
    seeds = sorted(acc["feddct"].index)
    d = acc["feddct"]

    def gain(base: str) -> Evidence:
        return Evidence(values=[float(d[s] - acc[base][s]) for s in seeds],
                        arms={m: [float(acc[m][s]) for s in seeds] for m in ("feddct", base)}, trivial=results.trivial)

    def saved(reference: str) -> Evidence:
        values, arms = rounds_saved(results, reference)
        return Evidence(values=values, arms=arms, trivial=results.trivial)

    return {
        "gain_vs_fedavg_large": gain("fedavg_large"),
        "gain_vs_fedavg_large_equal_steps": gain("fedavg_large_long"),
        "gain_vs_fedavg_small": gain("fedavg_small"),
        "gain_vs_fedprox": gain("fedprox_large"),
        "gain_vs_fedgkt": gain("fedgkt"),
        "rounds_saved_vs_fedavg_large": saved("fedavg_large"),
        "rounds_saved_vs_fedavg_large_equal_steps": saved("fedavg_large_long"),
        "memory_reduction": [float(device_memory(results.memory, "feddct")["large / device"])],
    }


# ----- what the reading reports ------------------------------------------------------------------
def splitfed_gap(results: Results) -> float:
    """Largest absolute difference, over the seeds, between SplitFed's and FedAvg-large's final test accuracy, points.

    SplitFed with a server-side copy per client, every client selected and both
    halves averaged each round does FedAvg's arithmetic, so the gap is float
    noise; it is why SplitFed is shown but not scored.
    """
    acc = accuracies(results)
    return float((acc["splitfed_large"] - acc["fedavg_large"]).abs().max())


def schedule_share(results: Results) -> float:
    """Share of FedDCT's mean gain over FedAvg-large that the undivided model with the cluster schedule also gets.

    NaN when FedDCT and FedAvg-large end equal.
    """
    acc = {m: a.mean() for m, a in accuracies(results).items()}
    gap = acc["feddct"] - acc["fedavg_large"]
    return float((acc["clustered_large"] - acc["fedavg_large"]) / gap) if gap else math.nan


def second_half_rise(results: Results, method: str) -> tuple[int, float]:
    """The round halfway through the run and ``method``'s mean accuracy gain from it to the last round."""
    curves = results.curves
    mean_curve = curves[curves.method == method].groupby("round").accuracy.mean()
    mid = int(mean_curve.index[mean_curve.index <= results.rounds / 2].max())
    return mid, float(mean_curve[results.rounds] - mean_curve[mid])


def fedgkt_still_rising(results: Results) -> bool:
    """Whether FedGKT's rise over the second half exceeds FedDCT's by more than :data:`STILL_RISING_MARGIN`."""
    return second_half_rise(results, "fedgkt")[1] > second_half_rise(results, "feddct")[1] + STILL_RISING_MARGIN


def moved_on_test(results: Results) -> list[str]:
    """The methods whose learning rate choosing on the tuning seed's test accuracy would have changed."""
    runs = results.tuned.runs
    lr_runs = runs[runs.stage == "lr"]
    if lr_runs.empty:
        return []
    on_test = chosen(best_settings(lr_runs, "budget_accuracy"))
    return [c.method for c in results.tuned.lr if not np.isclose(on_test[c.method], c.value)]


# ----- figures and tables ----------------------------------------------------------------------
def accuracy_curves(results: Results) -> Figure:
    """Test accuracy against rounds per method at its chosen settings (mean over seeds, band min to max)."""
    fig, ax = plt.subplots(figsize=(7.4, 4.0))
    for m in METHODS:
        accuracy_band(ax, results.curves[results.curves.method == m], None, COLOURS[m], LABELS[m])
    ax.axhline(results.trivial, color="k", lw=0.8, ls=":", label="majority class")
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def memory_accuracy(results: Results) -> Figure:
    """Accuracy at the budget against per-device step memory, per method (error bar = sd over seeds).

    Methods at the same memory are drawn side by side (small horizontal offsets) with their own markers.
    """
    markers = {"fedavg_large": "o", "fedavg_large_long": "X", "fedprox_large": "s", "clustered_large": "D",
               "fedavg_small": "v", "feddct": "*", "splitfed_large": "^", "fedgkt": "P"}
    acc = accuracies(results)
    kb = results.memory["step memory, model (kB)"]
    fig, ax = plt.subplots(figsize=(8.6, 3.8))
    for m in METHODS:
        peers = [p for p in METHODS if np.isclose(kb.iloc[DEVICE_ROW[p]], kb.iloc[DEVICE_ROW[m]])]
        x = kb.iloc[DEVICE_ROW[m]] * (1 + 0.04 * (peers.index(m) - (len(peers) - 1) / 2))
        ax.errorbar(x, acc[m].mean(), yerr=seed_sd(acc[m]), fmt=markers[m], ms=8, color=COLOURS[m], capsize=3,
                    label=LABELS[m])
    ax.set_xlim(0, 1.15 * kb.max())
    ax.set_xlabel("per-device memory of one local step (kB, model)")
    ax.set_ylabel("test accuracy at the budget (%)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def tuning_tables(results: Results) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The learning-rate stage and the knob stage of the tuning: validation and test accuracy per value, the choice."""
    runs = results.tuned.runs
    staged = {stage: runs[runs.stage == stage] if len(runs) else runs for stage in ("lr", "knob")}
    labels = {m: f"{LABELS[m]}: {KNOB_SYMBOL[m]}" for m in KNOBS}
    knobs = staged["knob"]
    return (tuning_summary(staged["lr"], results.tuned.lr, LABELS, TUNING_METRIC),
            tuning_summary(knobs.assign(setting=knobs.knob) if len(knobs) else knobs, results.tuned.knob, labels,
                           TUNING_METRIC))


def summary_table(results: Results) -> pd.DataFrame:
    """Per method: settings chosen on validation, test accuracy (mean ± sd), rounds to FedAvg-large's target."""
    hit = rounds_to_target(results.curves, "fedavg_large", results.censor_round)
    acc = accuracies(results)
    rows = []
    for m in METHODS:
        h = hit[hit.method == m]
        r = results.final[results.final.method == m].iloc[0]
        knob = f"{KNOB_SYMBOL[m]} {r.knob:g}" if m in KNOBS else ""
        rows.append({"method": LABELS[m], "local steps": int(r.tau), "lr": f"{r.lr:g}", "knob": knob,
                     "test accuracy (%)": mean_sd(acc[m]),
                     f"rounds to {TARGET_SHARE:.0%} of FedAvg-large's best": f"{h['rounds'].mean():.0f}",
                     "seeds reaching it": f"{int(h.reached.sum())} / {len(h)}"})
    return pd.DataFrame(rows)
