"""The on-device KD chapter: weak clients train a small auxiliary model, strong clients distil it into a large one.

:class:`KdRun` is one seeded run at one learning rate, :func:`run`
executes it and returns a :class:`RunRecord`, :func:`sweep` runs every
method, learning rate and seed, each method keeps its best learning rate
(:mod:`repro.federated.tuning`, the same grid for every method),
:func:`claims` turns the tuned records into the ledger's per-seed values,
:func:`memory_table` shows why weak clients can train only the auxiliary
model; the figures and tables are the chapter's own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.federated.client import LocalSGD
from repro.federated.engine import RunSummary, eval_schedule, run_federated
from repro.federated.figures import accuracy_band
from repro.federated.ondevice_kd import (
    AUX,
    LARGE,
    Recipe,
    TwoModelFedAvg,
    build_pair,
    keys_of,
    make_two_model_client_app,
    pair_arrays,
    pair_evaluator,
)
from repro.federated.runs import setting_sweep_tables
from repro.federated.task import TaskSpec, load_task_data
from repro.federated.tiers import Tier, assign_tiers, linear_layers, measure_step_memory, step_memory
from repro.federated.tuning import Choice, best_on_test, chosen, keep_best
from repro.parallel import parallel_map

METHODS = ("strong_only", "aux_all", "feddf", "kd_only", "ondevice_kd")
LABELS = {"strong_only": "FedAvg of L, strong clients, labelled data", "aux_all": "FedAvg of A, all clients (A's accuracy)",
          "feddf": "FedDF-style server KD into L", "kd_only": "on-device KD, KD loss only (abstract's reading)",
          "ondevice_kd": "on-device KD (authors' code: CE, then KD)"}
COLOURS = {"strong_only": "tab:brown", "aux_all": "tab:gray", "feddf": "tab:orange", "kd_only": "tab:green",
           "ondevice_kd": "tab:blue"}


@dataclass(frozen=True)
class KdRun:
    """One run; field names are the chapter's parameters.

    Attributes
    ----------
    method
        One of :data:`METHODS`.
    seed, lr
        Run seed and the SGD learning rate.
    spec
        The task; ``spec.hidden`` are ``L``'s widths.
    aux_hidden
        ``A``'s widths.
    strong_share, labelled_share
        Share of strong clients; share of each client's samples that carry a label.
    active_clients
        Clients sampled for the aux step of a round (every strong client takes the large step).
    steps, rounds, batch_size, momentum
        Local steps per step, two-step rounds, batch, SGD momentum.
    temperature, kd_final, kd_rampup
        Distillation temperature, and the KD weight of the authors' loss with its ramp-up in rounds.
    pool_size, server_steps
        FedDF's central unlabelled pool (training images) and its distillation steps per round.
    eval_every
        Evaluation period in two-step rounds.
    progress
        Label of a progress bar (``None``: none).
    device
        Where the clients train (``cpu``, ``cuda`` or ``auto``; the server's FedDF step stays on the CPU).
    """

    method: str
    seed: int
    lr: float
    spec: TaskSpec
    aux_hidden: tuple[int, ...]
    strong_share: float
    labelled_share: float
    active_clients: int
    steps: int
    rounds: int
    batch_size: int
    momentum: float
    temperature: float
    kd_final: float
    kd_rampup: int
    pool_size: int
    server_steps: int
    eval_every: int
    progress: str | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"parameter 'method': must be one of {METHODS}, got {self.method!r}")

    def recipe(self) -> Recipe:
        """The steps of a round for this method."""
        return {"strong_only": Recipe(False, "ce"), "aux_all": Recipe(True, "none"),
                "feddf": Recipe(True, "ce", server_pool_steps=self.server_steps), "kd_only": Recipe(True, "kd"),
                "ondevice_kd": Recipe(True, "ce-then-kd")}[self.method]

    def client_tiers(self) -> list[Tier]:
        """Strong or weak, per client (the same for every method of a seed)."""
        return client_tiers(self.spec, self.strong_share, self.seed)

    def pool(self) -> np.ndarray:
        """FedDF's central unlabelled pool: ``pool_size`` training images drawn with the seed."""
        ds, _ = load_task_data(self.spec)
        pick = np.random.default_rng(self.seed).choice(len(ds.y_train), size=min(self.pool_size, len(ds.y_train)),
                                                       replace=False)
        return ds.x_train[np.sort(pick)]


def client_tiers(spec: TaskSpec, strong_share: float, seed: int) -> list[Tier]:
    """Each client strong (can train ``L``) or weak (only ``A``), in the shares asked, shuffled with ``seed``."""
    layers = len(spec.hidden) + 1
    return assign_tiers(spec.num_clients, [strong_share, 1.0 - strong_share],
                        [Tier("strong", layers, 1.0), Tier("weak", 0, 1.0)], seed=seed)


@dataclass(frozen=True)
class RunRecord:
    """What one run produced.

    Attributes
    ----------
    method, seed, lr
        Which run.
    accuracy, budget_accuracy
        Final test accuracy of the evaluated model (``A`` for ``aux_all``, else ``L``) and the mean of the last
        three evaluations (percent).
    weak_large_scalars
        Scalars of ``L`` that weak clients downloaded or uploaded (0 by design).
    large_scalars
        Scalars of ``L`` moved in all, both directions.
    curve
        ``(round, accuracy)`` at every evaluation (two-step rounds).
    """

    method: str
    seed: int
    lr: float
    accuracy: float
    budget_accuracy: float
    weak_large_scalars: int
    large_scalars: int
    curve: tuple[tuple[int, float], ...]


def run(job: KdRun) -> RunRecord:
    """Run ``job`` on Flower's in-process engine (two Flower rounds per round of the method)."""
    tiers = job.client_tiers()
    recipe = job.recipe()
    local = LocalSGD(job.batch_size, job.lr, job.momentum).config(job.steps)
    strategy = TwoModelFedAvg(job.active_clients, local, tiers, recipe, seed=job.seed, temperature=job.temperature,
                              kd_final=job.kd_final, kd_rampup=job.kd_rampup,
                              pool=job.pool() if recipe.server_pool_steps else None, spec=job.spec,
                              aux_hidden=job.aux_hidden)
    app = make_two_model_client_app(job.spec, job.aux_hidden, job.labelled_share,
                                    {"seed": job.seed, "device": job.device})
    evaluated = AUX if job.method == "aux_all" else LARGE
    hist = run_federated(strategy, app, job.spec.num_clients, pair_arrays(job.spec, job.aux_hidden, job.seed),
                         2 * job.rounds, pair_evaluator(job.spec, job.aux_hidden, evaluated),
                         eval_schedule(2 * job.rounds, 2 * job.eval_every, multiple_of=2), progress=job.progress)
    s = RunSummary.of(hist)
    sizes = strategy.comm.sizes if strategy.comm is not None else {}
    moved = {t.partition_id: 0 for t in strategy.traffic}
    for t in strategy.traffic:
        moved[t.partition_id] += sum(sizes[k] for k in keys_of(t.down + t.up, LARGE))
    weak = sum(v for p, v in moved.items() if tiers[p].name != "strong")
    return RunRecord(job.method, job.seed, job.lr, s.accuracy, s.budget_accuracy, weak, sum(moved.values()),
                     tuple((r // 2, a) for r, a in s.curve))


def sweep(base: KdRun, lrs: list[float], seeds: list[int], workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method at every learning rate of ``lrs`` for every seed (other fields from ``base``).

    Returns
    -------
    final : DataFrame
        One row per run (the fields of :class:`RunRecord` but the curve; the learning rate is ``setting``,
        the tuned value :mod:`repro.federated.tuning` reads).
    curves : DataFrame
        ``method, seed, setting, round, accuracy``.
    """
    jobs = [dataclasses.replace(base, method=m, seed=s, lr=lr,
                                progress=None if workers > 1 else f"{m} lr={lr} seed={s}")
            for s in seeds for lr in lrs for m in METHODS]
    return setting_sweep_tables(parallel_map(run, jobs, workers))


tuning = best_on_test
"""Each method's learning rate with the best mean accuracy at the budget over seeds (the split leaves no
training sample unused to validate on, so it reads the test accuracy the claims compare, for every method alike)."""


def claims(final: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims, every method at its own best learning rate."""
    sel = keep_best(final, tuning(final))
    acc = {m: sel[sel.method == m].set_index("seed").budget_accuracy for m in METHODS}
    seeds = sorted(acc["ondevice_kd"].index)
    kd = acc["ondevice_kd"]
    return {
        "gain_vs_strong_only": [float(kd[s] - acc["strong_only"][s]) for s in seeds],
        "gain_vs_aux": [float(kd[s] - acc["aux_all"][s]) for s in seeds],
        "gain_vs_feddf": [float(kd[s] - acc["feddf"][s]) for s in seeds],
    }


def memory_table(spec: TaskSpec, aux_hidden: tuple[int, ...], batch_size: int, momentum: float) -> pd.DataFrame:
    """One local step of ``A`` and of ``L``: parameters and peak bytes (the tiers' model and torch's count)."""
    pair = build_pair(spec, aux_hidden, seed=0)
    slots = 1 if momentum > 0 else 0
    rows = []
    for name, label in ((AUX, "A (every client)"), (LARGE, "L (strong clients)")):
        model = pair[name]
        layers = linear_layers(model)
        x = torch.zeros(batch_size, layers[0].fan_in)
        y = torch.zeros(batch_size, dtype=torch.long)
        modelled = step_memory(layers, len(layers), batch_size, slots).trained
        measured = measure_step_memory(model, [k for k, _ in model.named_parameters()], x, y, momentum=momentum)
        rows.append({"model": label, "parameters": sum(lay.parameters for lay in layers),
                     "step memory, model (kB)": modelled / 1e3, "step memory, torch (kB)": measured / 1e3})
    table = pd.DataFrame(rows)
    return table.assign(**{"relative to A": table["step memory, model (kB)"] / table["step memory, model (kB)"].iloc[0]})


# ----- figures and tables ----------------------------------------------------------------------
def accuracy_curves(curves: pd.DataFrame, best: tuple[Choice, ...]) -> plt.Figure:
    """Test accuracy against rounds per method at its chosen learning rate (mean over seeds, band min to max)."""
    fig, ax = plt.subplots(figsize=(8.8, 4.0))
    sel, lr = keep_best(curves, best), chosen(best)
    for m in METHODS:
        accuracy_band(ax, sel[sel.method == m], None, COLOURS[m], f"{LABELS[m]} (lr {lr[m]:g})")
    ax.set_xlabel("round (aux step + large step)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def accuracy_bars(final: pd.DataFrame, best: tuple[Choice, ...]) -> plt.Figure:
    """The miniature of the paper's main table: accuracy at the budget per method (error bar = sd over seeds)."""
    sel = keep_best(final, best)
    fig, ax = plt.subplots(figsize=(8.8, 3.6))
    for i, m in enumerate(METHODS):
        vals = sel[sel.method == m].budget_accuracy
        ax.barh(i, vals.mean(), xerr=vals.std(ddof=1) if len(vals) > 1 else 0.0, color=COLOURS[m], capsize=3)
    ax.set_yticks(range(len(METHODS)), [LABELS[m] for m in METHODS], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("test accuracy at the budget (%)")
    fig.tight_layout()
    return fig


def summary_table(final: pd.DataFrame) -> pd.DataFrame:
    """Per method: chosen learning rate, accuracy (mean ± sd), ``L``'s traffic in all and through weak clients."""
    best = tuning(final)
    sel, lr = keep_best(final, best), chosen(best)
    rows = []
    for m in METHODS:
        r = sel[sel.method == m]
        sd = r.budget_accuracy.std(ddof=1) if len(r) > 1 else 0.0
        rows.append({"method": LABELS[m], "lr (tuned)": f"{lr[m]:g}",
                     "accuracy (%)": f"{r.budget_accuracy.mean():.1f} ± {sd:.1f}",
                     "L scalars moved (millions)": round(r.large_scalars.mean() / 1e6, 2),
                     "of which by weak clients": int(r.weak_large_scalars.max()), "seeds": len(r)})
    return pd.DataFrame(rows)
