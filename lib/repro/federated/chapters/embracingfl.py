"""The EmbracingFL chapter: partial training of output-side layers against width reduction, over client mixes.

:class:`Params` holds the chapter's parameters and builds the
:class:`Comparison` (what every run shares).  :func:`run` first runs every
method at every value of one learning-rate grid on a tuning seed, in the
weak-heavy mix, and keeps, per method, the value whose final model scores
best on held-out training samples (``TaskSpec.validation_share``, never the
test set; :func:`tune`, :mod:`repro.federated.tuning`); then every method,
client mix and seed at its chosen rate (one :class:`EmbracingRun` each,
through :func:`run_one` into an :class:`EmbracingRecord`).  It returns the
:class:`Results`, and :func:`claims` the ledger's evidence in the weak-heavy
mix; the figures and tables are the chapter's own.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from flwr.clientapp import ClientApp
from matplotlib.figure import Figure

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import RunSummary
from repro.federated.figures import accuracy_band, mean_sd, seed_sd
from repro.federated.fjord import AUTHORS_DISTILLATION, SelfDistillation, make_fjord_client_app
from repro.federated.heterofl import WidthReduced, make_heterofl_client_app, sub_spec
from repro.federated.partial import PartialTraining, make_partial_client_app
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, execute, records_frame
from repro.federated.seed_tuning import tune_on_seed
from repro.federated.seed_tuning import tuning_summary as tuning_summary_table
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, available_train, build_model, load_task_data, majority_accuracy
from repro.federated.tiers import Tier, assign_tiers, count_step, linear_layers, step_memory
from repro.federated.tuning import Choice, chosen, validation_accuracy
from repro.models import MLP_INITS, linear_input_rms
from repro.params import ChapterParams, require
from repro.results import Evidence

METHODS = ("all_strong", "strong_only", "heterofl", "fjord", "embracingfl")
LABELS = {"all_strong": "FedAvg, all clients strong", "strong_only": "FedAvg, strong clients only",
          "heterofl": "HeteroFL", "fjord": "FjORD", "embracingfl": "EmbracingFL"}
COLOURS = {"all_strong": "tab:gray", "strong_only": "tab:brown", "heterofl": "tab:orange", "fjord": "tab:green",
           "embracingfl": "tab:blue"}
TUNING_METRIC = "validation_accuracy"
"""What every method's learning rate is chosen on: the final global model's accuracy on the held-out samples."""


@dataclass(frozen=True, kw_only=True)
class TierPlan:
    """The three tiers of a run: layers trained under partial training, width under width reduction.

    Attributes
    ----------
    layers
        Linear layers of the model (strong clients train all of them).
    moderate_layers, weak_layers
        Output-side layers moderate and weak clients train.
    moderate_width, weak_width
        Width ratios of moderate and weak clients under HeteroFL and FjORD.
    """

    layers: int
    moderate_layers: int
    weak_layers: int
    moderate_width: float
    weak_width: float

    def tiers(self) -> tuple[Tier, Tier, Tier]:
        """``(strong, moderate, weak)``."""
        return (
            Tier(name="strong", trained_layers=self.layers, width=1.0),
            Tier(name="moderate", trained_layers=self.moderate_layers, width=self.moderate_width),
            Tier(name="weak", trained_layers=self.weak_layers, width=self.weak_width),
        )


@dataclass(frozen=True, kw_only=True)
class WidthBaselines:
    """How HeteroFL and FjORD train their clients beyond the nested slices.

    Attributes
    ----------
    scaler
        HeteroFL's scaler (:class:`repro.federated.heterofl.WidthScaler`): hidden outputs divided by the
        width ratio while a client trains.
    masked_ce
        HeteroFL's masked cross-entropy (:class:`repro.federated.heterofl.LabelMask`): logits of classes absent
        from a client's local data set to zero while it trains.
    distillation
        FjORD's self-distillation (:class:`repro.federated.fjord.SelfDistillation`), ``None`` for none.
    """

    scaler: bool = True
    distillation: SelfDistillation | None = AUTHORS_DISTILLATION
    masked_ce: bool = True

    @classmethod
    def of(cls, scaler: bool, self_distillation: bool, masked_ce: bool) -> WidthBaselines:
        """The chapter's switches: the scaler, self-distillation with the authors' constants or none, masked CE."""
        return cls(scaler=scaler, distillation=AUTHORS_DISTILLATION if self_distillation else None, masked_ce=masked_ce)


@dataclass(frozen=True, kw_only=True)
class EmbracingRun(FederatedRun):
    """One run of the comparison; the shared fields are :class:`~repro.federated.runs.FederatedRun`'s.

    ``tau`` is the local steps per round; the run seed also draws the tier assignment.

    Attributes
    ----------
    strong_share, moderate_share
        The client mix (the rest are weak).
    plan
        The tiers.
    baselines
        HeteroFL's scaler and masked cross-entropy, FjORD's self-distillation (default: on, as the papers run them).
    """

    strong_share: float
    moderate_share: float
    plan: TierPlan
    baselines: WidthBaselines = WidthBaselines()

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = {m: "sgd.lr" for m in METHODS}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.strong_share + self.moderate_share > 1.0 + 1e-9:
            raise ValueError("strong and moderate shares must not exceed 1 together")

    def client_tiers(self) -> list[Tier]:
        """Every client's tier (the same for every method of a seed)."""
        shares = (self.strong_share, self.moderate_share, max(0.0, 1.0 - self.strong_share - self.moderate_share))
        return assign_tiers(self.spec.num_clients, shares, self.plan.tiers(), seed=self.seed)


def build_strategy(job: EmbracingRun) -> tuple[SeededFedAvg, ClientApp]:
    """The strategy and the ``ClientApp`` of ``job``'s method."""
    local, tiers, cfg, k = job.local, job.client_tiers(), job.run_config, job.clients_per_round
    if job.method == "all_strong":
        return SeededFedAvg(k, local, seed=job.seed), make_client_app(job.spec, cfg)
    if job.method in ("strong_only", "embracingfl"):
        if job.method == "strong_only":
            tiers = [t if t.name == "strong" else Tier(name=t.name, trained_layers=0, width=t.width) for t in tiers]
        return PartialTraining(k, local, tiers, seed=job.seed), make_partial_client_app(job.spec, cfg)
    fjord = job.method == "fjord"
    app = (
        make_fjord_client_app(job.spec, cfg, job.baselines.distillation)
        if fjord
        else make_heterofl_client_app(job.spec, cfg, job.baselines.scaler, job.baselines.masked_ce)
    )
    return WidthReduced(k, local, tiers, seed=job.seed, ordered_dropout=fjord), app


@dataclass(frozen=True, kw_only=True)
class EmbracingRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields (``setting`` is the learning rate) and these.

    Attributes
    ----------
    strong_share
        The mix's share of strong clients (1 for all-strong FedAvg).
    comm
        Scalars moved, both directions.
    validation_accuracy
        The final global model's accuracy on the held-out samples (NaN when the task holds none out).
    """

    strong_share: float = math.nan
    comm: float = math.nan
    validation_accuracy: float = math.nan


def run_one(job: EmbracingRun) -> EmbracingRecord:
    """Run ``job`` on Flower's in-process engine and record it."""
    strategy, app = build_strategy(job)
    hist = job.simulate(strategy, app)
    assert strategy.comm is not None and hist.final_arrays is not None
    valid = validation_accuracy(job.spec, hist.final_arrays) if job.spec.validation_share > 0 else math.nan
    return EmbracingRecord.of(job, RunSummary.of(hist), strong_share=job.strong_share, comm=float(strategy.comm.total),
                              validation_accuracy=valid)


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """What every run of the chapter shares: task, local training (``sgd.lr`` is the default rate), tiers, schedule.

    Attributes
    ----------
    spec, sgd, plan
        The task, the clients' local SGD and the tiers.
    steps, rounds, active_clients, eval_every
        Local steps per round, rounds, clients per round, evaluation period.
    device
        Where the clients train.
    baselines
        How HeteroFL and FjORD train.
    """

    spec: TaskSpec
    sgd: LocalSGD
    plan: TierPlan
    steps: int
    rounds: int
    active_clients: int
    eval_every: int
    device: str = "cpu"
    baselines: WidthBaselines = WidthBaselines()

    def job(self, method: str, lr: float, mix: tuple[float, float], seed: int, progress: str | None) -> EmbracingRun:
        """One run of ``method`` at learning rate ``lr`` in the ``(strong, moderate)`` mix."""
        return EmbracingRun(
            method=method,
            spec=self.spec,
            sgd=dataclasses.replace(self.sgd, lr=lr),
            tau=self.steps,
            rounds=self.rounds,
            seed=seed,
            active_clients=self.active_clients,
            eval_every=self.eval_every,
            device=self.device,
            progress=progress,
            strong_share=mix[0],
            moderate_share=mix[1],
            plan=self.plan,
            baselines=self.baselines,
        )

    def jobs(
        self, lr_of: dict[str, Sequence[float]], mixes: Sequence[tuple[float, float]], seeds: Sequence[int], workers: int
    ) -> list[EmbracingRun]:
        """Every method at each of its rates on every mix and seed (all-strong FedAvg once per seed and rate)."""
        out = []
        for seed in seeds:
            for m in METHODS:
                for lr in lr_of[m]:
                    for mix in [(1.0, 0.0)] if m == "all_strong" else mixes:
                        out.append(
                            self.job(m, lr, mix, seed, None if workers > 1 else f"{m} lr={lr:g} strong={mix[0]} seed={seed}")
                        )
        return out


RUN_COLUMNS = ("method", "setting", "strong_share", "seed", "accuracy", "budget_accuracy", "validation_accuracy", "comm")


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``embracingfl.yaml``)."""

    dataset: str
    n_train: int
    validation_share: float
    num_clients: int
    active_clients: int
    alpha: float
    hidden: tuple[int, ...]
    init: str
    moderate_layers: int
    weak_layers: int
    moderate_width: float
    weak_width: float
    heterofl_scaler: bool
    heterofl_masked_ce: bool
    fjord_self_distillation: bool
    strong_shares: tuple[float, ...]
    moderate_shares: tuple[float, ...]
    steps: int
    rounds: int
    batch_size: int
    lrs: tuple[float, ...]
    momentum: float
    tuning_seed: int
    seeds: tuple[int, ...]
    workers: int
    device: str
    eval_every: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(len(self.strong_shares) == len(self.moderate_shares), self, ("strong_shares", "moderate_shares"),
                "give one moderate share per strong share")
        require(all(s + m <= 1.0 for s, m in zip(self.strong_shares, self.moderate_shares)), self,
                ("strong_shares", "moderate_shares"), "strong + moderate shares must not exceed 1 in any mix")
        require(all(round(s * self.num_clients) >= 1 for s in self.strong_shares), self, ("strong_shares", "num_clients"),
                "every mix needs at least one strong client")
        require(1 <= self.weak_layers <= self.moderate_layers <= len(self.hidden) + 1, self,
                ("weak_layers", "moderate_layers", "hidden"), "need 1 <= weak_layers <= moderate_layers <= number of layers")
        require(self.weak_width <= self.moderate_width, self, ("weak_width", "moderate_width"),
                "a weak client's width must not exceed a moderate client's")
        require(self.active_clients <= self.num_clients, self, ("active_clients", "num_clients"),
                "active_clients must not exceed num_clients")
        dealt = int(available_train(self.dataset, self.n_train) * (1.0 - self.validation_share))
        require(dealt >= 2 * self.num_clients, self, ("dataset", "n_train", "validation_share", "num_clients"),
                "the split needs at least 2 training samples per client after the validation share")
        require(self.tuning_seed not in self.seeds, self, ("tuning_seed", "seeds"), "the tuning seed must not be a reported seed")

    def spec(self) -> TaskSpec:
        """The task: the dataset over the clients by a Dirichlet label skew, a validation share held out."""
        return TaskSpec(dataset=self.dataset, num_clients=self.num_clients, scheme="dirichlet", alpha=self.alpha,
                        hidden=self.hidden, model="mlp", n_train=self.n_train, data_seed=0,
                        validation_share=self.validation_share, init=self.init)

    def plan(self) -> TierPlan:
        """The tiers: layers trained under partial training, widths under width reduction."""
        return TierPlan(layers=len(self.hidden) + 1, moderate_layers=self.moderate_layers, weak_layers=self.weak_layers,
                        moderate_width=self.moderate_width, weak_width=self.weak_width)

    def mixes(self) -> list[tuple[float, float]]:
        """The ``(strong, moderate)`` shares of every client mix."""
        return list(zip(self.strong_shares, self.moderate_shares))

    def weak_heavy(self) -> tuple[float, float]:
        """The mix with the fewest strong clients: the claims' and the tuning's."""
        return min(self.mixes())

    def comparison(self) -> Comparison:
        """What every run shares."""
        return Comparison(spec=self.spec(), sgd=LocalSGD(batch_size=self.batch_size, lr=self.lrs[0], momentum=self.momentum),
                          plan=self.plan(), steps=self.steps, rounds=self.rounds, active_clients=self.active_clients,
                          eval_every=self.eval_every, device=self.device,
                          baselines=WidthBaselines.of(self.heterofl_scaler, self.fjord_self_distillation,
                                                      self.heterofl_masked_ce))


def tune(params: Params) -> tuple[tuple[Choice, ...], pd.DataFrame]:
    """Every method's learning rate: the grid value whose final model scores best on the held-out samples.

    Every method runs at every value of ``lrs`` in the weak-heavy mix on the tuning seed (a seed no claim
    reports); see :func:`repro.federated.seed_tuning.tune_on_seed` (a one-value grid runs nothing).
    """
    comparison, mix = params.comparison(), params.weak_heavy()

    def job_of(method: str, lr: float) -> EmbracingRun:
        return comparison.job(method, lr, (1.0, 0.0) if method == "all_strong" else mix, params.tuning_seed,
                              None if params.workers > 1 else f"{method} lr={lr:g} tuning")

    return tune_on_seed(run_one, job_of, METHODS, params.lrs, RUN_COLUMNS, TUNING_METRIC, params.workers,
                        desc="EmbracingFL tuning")


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the chapter's comparison produced.

    Attributes
    ----------
    final
        One row per reported run: :data:`RUN_COLUMNS` (``setting`` is the learning rate).
    curves
        ``method, strong_share, seed, round, accuracy`` at every evaluation.
    choices, tuning
        The learning rate each method kept, and the tuning runs.
    mixes, weak_heavy
        The ``(strong, moderate)`` shares of every mix, and the claims' mix (the fewest strong clients).
    memory
        :func:`memory_table`'s table.
    trivial
        Test accuracy of always predicting the majority class (percent): the task's trivial level.
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    choices: tuple[Choice, ...]
    tuning: pd.DataFrame
    mixes: tuple[tuple[float, float], ...]
    weak_heavy: tuple[float, float]
    memory: pd.DataFrame
    trivial: float


def run(params: Params) -> Results:
    """Tune every method's rate in the weak-heavy mix, then every method, mix and seed at its rate."""
    choices, tuning = tune(params)
    lr = chosen(choices)
    jobs = params.comparison().jobs({m: [lr[m]] for m in METHODS}, params.mixes(), params.seeds, params.workers)
    done = execute(run_one, jobs, params.workers, desc="EmbracingFL comparison")
    spec = params.spec()
    return Results(final=records_frame(done, RUN_COLUMNS), curves=curves_frame(done, ("method", "strong_share", "seed")),
                   choices=choices, tuning=tuning, mixes=tuple(params.mixes()), weak_heavy=params.weak_heavy(),
                   memory=memory_table(spec, params.plan(), params.batch_size, params.momentum),
                   trivial=majority_accuracy(spec))


def mix_rows(final: pd.DataFrame, strong_share: float) -> pd.DataFrame:
    """Runs of one mix, with the all-strong reference rows (which every mix shares)."""
    return final[(final.strong_share == strong_share) | (final.method == "all_strong")]


def accuracies(results: Results, strong_share: float) -> dict[str, pd.Series]:
    """Every method's accuracy at the budget in the mix with ``strong_share`` strong clients, indexed by seed."""
    rows = mix_rows(results.final, strong_share)
    return {m: rows[rows.method == m].set_index("seed").budget_accuracy for m in METHODS}


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence in the weak-heavy mix: EmbracingFL against each method per seed, with both arms."""
    acc = accuracies(results, results.weak_heavy[0])
    seeds = sorted(acc["embracingfl"].index)
    e = acc["embracingfl"]

    def evidence(values: list[float], base: str) -> Evidence:
        return Evidence(values=values, trivial=results.trivial,
                        arms={m: [float(acc[m][s]) for s in seeds] for m in ("embracingfl", base)})

    return {
        "gap_to_all_strong": evidence([float(acc["all_strong"][s] - e[s]) for s in seeds], "all_strong"),
        "gain_vs_heterofl": evidence([float(e[s] - acc["heterofl"][s]) for s in seeds], "heterofl"),
        "gain_vs_fjord": evidence([float(e[s] - acc["fjord"][s]) for s in seeds], "fjord"),
        "gain_vs_strong_only": evidence([float(e[s] - acc["strong_only"][s]) for s in seeds], "strong_only"),
    }


def tuning_summary(results: Results) -> pd.DataFrame:
    """Per method: validation and test accuracy at every rate on the tuning seed, and the rate kept."""
    return tuning_summary_table(results.tuning, results.choices, LABELS, TUNING_METRIC)


# ----- scale of the features each layer receives ---------------------------------------------
SCALE_SEEDS = (0, 1, 2, 3, 4)
"""Initialisation seeds :func:`input_scales` averages over."""


def input_scales(spec: TaskSpec) -> pd.DataFrame:
    """Per linear layer, the root mean square of its input on the training samples at initialisation, per init.

    One row per layer (``fc0`` first) with a column per :data:`repro.models.MLP_INITS` entry, each the mean
    over :data:`SCALE_SEEDS` of :func:`repro.models.linear_input_rms`; the task's own ``init`` does not matter.
    """
    ds, _ = load_task_data(spec)
    x = torch.from_numpy(ds.x_train)
    columns: dict[str, list[float]] = {}
    for init in MLP_INITS:
        per_seed = [linear_input_rms(build_model(dataclasses.replace(spec, init=init), seed=s), x) for s in SCALE_SEEDS]
        columns[f"input RMS ({init} init)"] = [float(np.mean([r[name] for r in per_seed])) for name in per_seed[0]]
    return pd.DataFrame({"layer": list(linear_input_rms(build_model(spec, seed=0), x)), **columns})


def scale_note(scales: pd.DataFrame, init: str) -> str:
    """One sentence: the last layer's input scale as a share of the first layer's, under each init."""
    shares = {col.split("(")[1].split()[0]: scales[col].iloc[-1] / scales[col].iloc[0]
              for col in scales.columns if col != "layer"}
    parts = " and ".join(f"{share:.1%} under {name} init" for name, share in shares.items())
    return (f"Measured against the input's root mean square, the features reaching the last layer (the one every "
            f"tier trains) are at {parts} (mean of {len(SCALE_SEEDS)} initialisations). This run uses {init} init.")


# ----- memory of the tiers -------------------------------------------------------------------
def memory_table(spec: TaskSpec, plan: TierPlan, batch_size: int, momentum: float) -> pd.DataFrame:
    """Per tier: layers trained, the memory model's peak of one step relative to a strong client, and torch's count.

    The measured column counts the tensors of a real step of the trained part
    (:func:`repro.federated.tiers.count_step`); the model's column is
    :func:`repro.federated.tiers.step_memory`'s trained part.  The width
    columns give the same model for HeteroFL's and FjORD's sub-models.
    """
    model = build_model(spec, seed=0)
    layers = linear_layers(model)
    slots = 1 if momentum > 0 else 0
    full = step_memory(layers, len(layers), batch_size, slots).total
    rows = []
    for tier in plan.tiers():
        step = count_step(model, batch_size, momentum, trained_layers=tier.trained_layers)
        modelled = step.modelled
        narrow = build_model(sub_spec(spec, tier.width), seed=0)
        width_mem = step_memory(linear_layers(narrow), len(layers), batch_size, slots).total
        rows.append(
            {
                "tier": tier.name,
                "layers trained": tier.trained_layers,
                "partial training: peak / strong": modelled.total / full,
                "trained part, model (kB)": modelled.trained / 1e3,
                "trained part, torch (kB)": step.measured / 1e3,
                "model error (%)": 100.0 * (step.measured - modelled.trained) / modelled.trained,
                "width": tier.width,
                "width reduction: peak / strong": width_mem / full,
            }
        )
    return pd.DataFrame(rows)


# ----- figures and tables ----------------------------------------------------------------------
def accuracy_curves(results: Results) -> Figure:
    """Test accuracy against rounds per method, one panel per client mix (mean over seeds, band min to max)."""
    curves, strong_shares = results.curves, [s for s, _ in results.mixes]
    fig, axes = plt.subplots(1, len(strong_shares), figsize=(5.4 * len(strong_shares), 3.8), squeeze=False, sharey=True)
    for ax, share in zip(axes[0], strong_shares):
        sel = mix_rows(curves, share)
        for m in METHODS:
            accuracy_band(ax, sel[sel.method == m], None, COLOURS[m], LABELS[m])
        ax.axhline(results.trivial, color="k", lw=0.8, ls=":")
        ax.set_title(f"{share:.0%} strong clients")
        ax.set_xlabel("round")
    axes[0][0].set_ylabel("test accuracy (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(METHODS), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def accuracy_bars(results: Results) -> Figure:
    """The miniature of the paper's main table: accuracy per method and client mix (mean, error bar = sd)."""
    final, mixes = results.final, results.mixes
    fig, ax = plt.subplots(figsize=(9.5, 3.8))
    width = 0.8 / len(METHODS)
    for j, m in enumerate(METHODS):
        means, sds = [], []
        for strong, _ in mixes:
            vals = mix_rows(final, strong)
            vals = vals[vals.method == m].budget_accuracy
            means.append(vals.mean())
            sds.append(seed_sd(vals))
        ax.bar(
            np.arange(len(mixes)) + (j - (len(METHODS) - 1) / 2) * width,
            means,
            width,
            yerr=sds,
            color=COLOURS[m],
            label=LABELS[m],
            capsize=2,
        )
    ax.set_xticks(range(len(mixes)), [f"{s:.0%} / {m:.0%} / {1 - s - m:.0%}" for s, m in mixes])
    ax.set_xlabel("strong / moderate / weak clients")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def summary_table(results: Results) -> pd.DataFrame:
    """Learning rate, accuracy (mean ± sd over seeds) per method and mix, and communication relative to all-strong FedAvg."""
    final, mixes = results.final, results.mixes
    base = final[final.method == "all_strong"].set_index("seed").comm
    rows = []
    for strong, moderate in mixes:
        sel = mix_rows(final, strong)
        for m in METHODS:
            r = sel[sel.method == m]
            rows.append(
                {
                    "strong / moderate / weak": f"{strong:.0%} / {moderate:.0%} / {1 - strong - moderate:.0%}",
                    "method": LABELS[m],
                    "lr": ", ".join(f"{v:g}" for v in sorted(r.setting.unique())),
                    "accuracy (%)": mean_sd(r.budget_accuracy),
                    "communication vs all-strong": f"{np.mean([c / base[s] for s, c in zip(r.seed, r.comm)]):.2f}×",
                    "seeds": len(r),
                }
            )
    return pd.DataFrame(rows)
