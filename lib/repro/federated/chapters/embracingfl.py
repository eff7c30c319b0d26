"""The EmbracingFL chapter: partial training of output-side layers against width reduction, over client mixes.

:class:`EmbracingRun` is one seeded run, :func:`run` executes it and
returns its record.  A :class:`Comparison` holds what every run shares;
:func:`tune` runs every method at every value of one learning-rate grid on
a tuning seed and keeps, per method, the value whose final model scores
best on held-out training samples (``TaskSpec.validation_share``, never the
test set; :mod:`repro.federated.tuning`); :func:`sweep` runs every method,
client mix and seed at its chosen rate, and :func:`claims` turns the
records into the ledger's per-seed values; the figures and tables are the
chapter's own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from flwr.clientapp import ClientApp

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import RunSummary
from repro.federated.figures import accuracy_band, mean_sd, seed_sd
from repro.federated.fjord import AUTHORS_DISTILLATION, SelfDistillation, make_fjord_client_app
from repro.federated.heterofl import WidthReduced, make_heterofl_client_app, sub_spec
from repro.federated.partial import PartialTraining, make_partial_client_app
from repro.federated.runs import FederatedRun, execute, run_tables, summary_record
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model
from repro.federated.tiers import Tier, assign_tiers, count_step, linear_layers, step_memory
from repro.federated.tuning import Choice, best_settings, validation_accuracy

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


def run(job: EmbracingRun) -> dict[str, Any]:
    """Run ``job``; the record is :func:`repro.federated.runs.summary_record`'s with the mix, ``comm`` and validation.

    ``comm`` counts the scalars moved, both directions; ``validation_accuracy`` is
    :func:`repro.federated.tuning.validation_accuracy` of the final global model (NaN when the task holds no
    samples out).
    """
    strategy, app = build_strategy(job)
    hist = job.simulate(strategy, app)
    assert strategy.comm is not None and hist.final_arrays is not None
    valid = validation_accuracy(job.spec, hist.final_arrays) if job.spec.validation_share > 0 else float("nan")
    return summary_record(
        job, RunSummary.of(hist), strong_share=job.strong_share, comm=strategy.comm.total, validation_accuracy=valid
    )


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


def tune(
    comparison: Comparison, mix: tuple[float, float], lrs: Sequence[float], seed: int, workers: int = 1
) -> tuple[tuple[Choice, ...], pd.DataFrame]:
    """Every method's learning rate: the grid value whose final model scores best on the held-out samples.

    Every method runs at every value of ``lrs`` in ``mix`` on the tuning ``seed`` (a seed the sweep does not
    report); :func:`repro.federated.tuning.best_settings` picks the value with the best
    :data:`TUNING_METRIC` (the smallest on ties).  A one-value grid runs nothing and chooses it.

    Returns
    -------
    choices : tuple of Choice
        One per method.
    runs : DataFrame
        The tuning runs, :data:`RUN_COLUMNS` (empty for a one-value grid).
    """
    grid = sorted(float(v) for v in lrs)
    if len(grid) == 1:
        return tuple(Choice(method=m, value=grid[0], score=float("nan"), grid=tuple(grid)) for m in METHODS), pd.DataFrame(
            columns=RUN_COLUMNS
        )
    if comparison.spec.validation_share <= 0:
        raise ValueError("parameter 'comparison': tuning needs held-out samples (spec.validation_share > 0)")
    done = execute(run, comparison.jobs({m: grid for m in METHODS}, [mix], [seed], workers), workers, desc="EmbracingFL tuning")
    runs = pd.DataFrame([{c: r[c] for c in RUN_COLUMNS} for r in done])
    return best_settings(runs, TUNING_METRIC), runs


def sweep(
    comparison: Comparison, mixes: list[tuple[float, float]], seeds: list[int], lr_of: dict[str, float], workers: int = 1
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method on every client mix and seed at its rate ``lr_of[method]`` (all-strong FedAvg once per seed).

    Returns
    -------
    final : DataFrame
        One row per run: :data:`RUN_COLUMNS` (``setting`` is the learning rate).
    curves : DataFrame
        ``method, strong_share, seed, round, accuracy`` at every evaluation.
    """
    jobs = comparison.jobs({m: [lr_of[m]] for m in METHODS}, mixes, seeds, workers)
    done = execute(run, jobs, workers, desc="EmbracingFL comparison")
    return run_tables(done, RUN_COLUMNS, keys=("method", "strong_share", "seed"))


def mix_rows(final: pd.DataFrame, strong_share: float) -> pd.DataFrame:
    """Runs of one mix, with the all-strong reference rows (which every mix shares)."""
    return final[(final.strong_share == strong_share) | (final.method == "all_strong")]


def claims(final: pd.DataFrame, strong_share: float) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims in the mix with ``strong_share`` strong clients."""
    rows = mix_rows(final, strong_share)
    acc = {m: rows[rows.method == m].set_index("seed").budget_accuracy for m in METHODS}
    seeds = sorted(acc["embracingfl"].index)
    e = acc["embracingfl"]
    return {
        "gap_to_all_strong": [float(acc["all_strong"][s] - e[s]) for s in seeds],
        "gain_vs_heterofl": [float(e[s] - acc["heterofl"][s]) for s in seeds],
        "gain_vs_fjord": [float(e[s] - acc["fjord"][s]) for s in seeds],
        "gain_vs_strong_only": [float(e[s] - acc["strong_only"][s]) for s in seeds],
    }


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
def accuracy_curves(curves: pd.DataFrame, strong_shares: list[float]) -> plt.Figure:
    """Test accuracy against rounds per method, one panel per client mix (mean over seeds, band min to max)."""
    fig, axes = plt.subplots(1, len(strong_shares), figsize=(5.4 * len(strong_shares), 3.8), squeeze=False, sharey=True)
    for ax, share in zip(axes[0], strong_shares):
        sel = mix_rows(curves, share)
        for m in METHODS:
            accuracy_band(ax, sel[sel.method == m], None, COLOURS[m], LABELS[m])
        ax.set_title(f"{share:.0%} strong clients")
        ax.set_xlabel("round")
    axes[0][0].set_ylabel("test accuracy (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(METHODS), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def accuracy_bars(final: pd.DataFrame, mixes: list[tuple[float, float]]) -> plt.Figure:
    """The miniature of the paper's main table: accuracy per method and client mix (mean, error bar = sd)."""
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


def summary_table(final: pd.DataFrame, mixes: list[tuple[float, float]]) -> pd.DataFrame:
    """Learning rate, accuracy (mean ± sd over seeds) per method and mix, and communication relative to all-strong FedAvg."""
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
