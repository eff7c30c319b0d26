"""The on-device KD chapter: weak clients train a small auxiliary model, strong clients distil it into a large one.

A :class:`KdRun` (one method, seed and learning rate) is executed by
:func:`run`; :func:`sweep` covers the whole grid.  Every method gets the
same learning-rate grid, and :func:`choices` keeps, per method, the value
whose evaluated model scores best on a validation set: training samples
that no client holds (``TaskSpec.validation_share``).  The test accuracy
the claims compare plays no part in the choice.  :func:`claims` gives the
ledger's per-seed values and :func:`memory_table` shows why weak clients
can train only the auxiliary model; the figures and tables are the
chapter's own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.federated.arrays import from_arrayrecord
from repro.federated.engine import RunSummary
from repro.federated.figures import mean_sd, seed_sd, tuned_accuracy_curves
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
    strip,
)
from repro.federated.runs import FederatedRun, execute, run_tables, summary_record
from repro.federated.task import TaskSpec, load_task_data
from repro.federated.tiers import Tier, assign_tiers, count_step
from repro.federated.tuning import Choice, best_settings, chosen, keep_best, model_validation_accuracy
from repro.models import set_weights

METHODS = ("strong_only", "aux_all", "feddf", "kd_only", "ondevice_kd")
LABELS = {"strong_only": "FedAvg of L, strong clients, labelled data", "aux_all": "FedAvg of A, all clients (A's accuracy)",
          "feddf": "FedDF-style server KD into L", "kd_only": "on-device KD, KD loss only (abstract's reading)",
          "ondevice_kd": "on-device KD (authors' code: CE, then KD)"}
COLOURS = {"strong_only": "tab:brown", "aux_all": "tab:gray", "feddf": "tab:orange", "kd_only": "tab:green",
           "ondevice_kd": "tab:blue"}
TUNING_METRIC = "validation_accuracy"
"""What every method's learning rate is chosen on: the evaluated model's final accuracy on the held-out samples."""


@dataclass(frozen=True, kw_only=True)
class KdRun(FederatedRun):
    """One run; the shared fields are :class:`~repro.federated.runs.FederatedRun`'s.

    ``spec.hidden`` are ``L``'s widths; ``sgd`` holds the learning rate the
    sweep tunes; ``tau`` is the local steps per step (CE and KD each);
    ``rounds`` and ``eval_every`` count two-step rounds; ``active_clients``
    are sampled for the aux step of a round (every strong client takes the
    large step); the server's FedDF step stays on the CPU whatever ``device``.

    Attributes
    ----------
    aux_hidden
        ``A``'s widths.
    strong_share, labelled_share
        Share of strong clients; share of each client's samples that carry a label.
    temperature, kd_final, kd_rampup
        Distillation temperature, and the KD weight of the authors' loss with its ramp-up in rounds.
    pool_size, server_steps
        FedDF's central unlabelled pool (training images of the clients) and its distillation steps per round.
    """

    aux_hidden: tuple[int, ...]
    strong_share: float
    labelled_share: float
    temperature: float
    kd_final: float
    kd_rampup: int
    pool_size: int
    server_steps: int

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = {m: "sgd.lr" for m in METHODS}

    @property
    def evaluated(self) -> str:
        """The model the run is scored on: ``A`` for FedAvg of ``A``, ``L`` for every other method."""
        return AUX if self.method == "aux_all" else LARGE

    def recipe(self) -> Recipe:
        """The steps of a round for this method."""
        return {
            "strong_only": Recipe(train_aux=False, large_loss="ce"),
            "aux_all": Recipe(train_aux=True, large_loss="none"),
            "feddf": Recipe(train_aux=True, large_loss="ce", server_pool_steps=self.server_steps),
            "kd_only": Recipe(train_aux=True, large_loss="kd"),
            "ondevice_kd": Recipe(train_aux=True, large_loss="ce-then-kd"),
        }[self.method]

    def client_tiers(self) -> list[Tier]:
        """Strong or weak, per client (the same for every method of a seed)."""
        return client_tiers(self.spec, self.strong_share, self.seed)

    def pool(self) -> np.ndarray:
        """FedDF's central unlabelled pool: ``pool_size`` of the clients' training images drawn with the seed.

        Samples held out for validation are never drawn.
        """
        ds, parts = load_task_data(self.spec)
        dealt = np.sort(np.concatenate(parts))
        pick = np.random.default_rng(self.seed).choice(len(dealt), size=min(self.pool_size, len(dealt)), replace=False)
        return ds.x_train[dealt[np.sort(pick)]]


def client_tiers(spec: TaskSpec, strong_share: float, seed: int) -> list[Tier]:
    """Each client strong (can train ``L``) or weak (only ``A``), in the shares asked, shuffled with ``seed``."""
    layers = len(spec.hidden) + 1
    return assign_tiers(
        spec.num_clients,
        [strong_share, 1.0 - strong_share],
        [Tier(name="strong", trained_layers=layers, width=1.0), Tier(name="weak", trained_layers=0, width=1.0)],
        seed=seed,
    )


def run(job: KdRun) -> dict[str, Any]:
    """Run ``job`` on Flower's in-process engine (two Flower rounds per round of the method).

    Returns
    -------
    dict
        :func:`repro.federated.runs.summary_record`'s fields (the curve in two-step rounds),
        ``validation_accuracy`` of the evaluated model
        (:func:`repro.federated.tuning.model_validation_accuracy`), ``weak_large_scalars`` (scalars of ``L``
        that weak clients downloaded or uploaded; 0 by design) and ``large_scalars`` (scalars of ``L`` moved
        in all, both directions).
    """
    tiers = job.client_tiers()
    recipe = job.recipe()
    strategy = TwoModelFedAvg(
        job.clients_per_round,
        job.local,
        tiers,
        recipe,
        seed=job.seed,
        temperature=job.temperature,
        kd_final=job.kd_final,
        kd_rampup=job.kd_rampup,
        pool=job.pool() if recipe.server_pool_steps else None,
        spec=job.spec,
        aux_hidden=job.aux_hidden,
    )
    app = make_two_model_client_app(job.spec, job.aux_hidden, job.labelled_share, job.run_config)
    hist = job.simulate(
        strategy,
        app,
        pair_arrays(job.spec, job.aux_hidden, job.seed),
        pair_evaluator(job.spec, job.aux_hidden, job.evaluated),
        flower_rounds=2,
    )
    s = RunSummary.of(hist)
    sizes = strategy.comm.sizes if strategy.comm is not None else {}
    moved = {t.partition_id: 0 for t in strategy.traffic}
    for t in strategy.traffic:
        moved[t.partition_id] += sum(sizes[k] for k in keys_of(t.down + t.up, LARGE))
    assert hist.final_arrays is not None
    model = build_pair(job.spec, job.aux_hidden, seed=0)[job.evaluated]
    set_weights(model, strip(from_arrayrecord(hist.final_arrays), job.evaluated))
    return summary_record(
        job,
        dataclasses.replace(s, curve=tuple((r // 2, a) for r, a in s.curve)),
        validation_accuracy=model_validation_accuracy(job.spec, model),
        weak_large_scalars=sum(v for p, v in moved.items() if tiers[p].name != "strong"),
        large_scalars=sum(moved.values()),
    )


def sweep(base: KdRun, lrs: list[float], seeds: list[int], workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method at every learning rate of ``lrs`` for every seed (other fields from ``base``).

    Returns
    -------
    final : DataFrame
        One row per run: ``method, setting, seed, accuracy, budget_accuracy, validation_accuracy,
        weak_large_scalars, large_scalars`` (``setting`` is the learning rate, the tuned value
        :mod:`repro.federated.tuning` reads).
    curves : DataFrame
        ``method, setting, seed, round, accuracy``.
    """
    jobs = [
        dataclasses.replace(
            base,
            method=m,
            seed=s,
            sgd=dataclasses.replace(base.sgd, lr=lr),
            progress=None if workers > 1 else f"{m} lr={lr} seed={s}",
        )
        for s in seeds
        for lr in lrs
        for m in METHODS
    ]
    done = execute(run, jobs, workers, desc="on-device KD comparison")
    return run_tables(
        done,
        ("method", "setting", "seed", "accuracy", "budget_accuracy", TUNING_METRIC, "weak_large_scalars", "large_scalars"),
        keys=("method", "setting", "seed"),
    )


def choices(final: pd.DataFrame) -> tuple[Choice, ...]:
    """Each method's learning rate with the best mean validation accuracy over seeds (one grid for all)."""
    return best_settings(final, TUNING_METRIC)


def claims(final: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims, every method at the learning rate chosen on validation."""
    sel = keep_best(final, choices(final))
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
    rows = []
    for name, label in ((AUX, "A (every client)"), (LARGE, "L (strong clients)")):
        step = count_step(pair[name], batch_size, momentum)
        rows.append(
            {
                "model": label,
                "parameters": step.parameters,
                "step memory, model (kB)": step.modelled.trained / 1e3,
                "step memory, torch (kB)": step.measured / 1e3,
            }
        )
    table = pd.DataFrame(rows)
    return table.assign(**{"relative to A": table["step memory, model (kB)"] / table["step memory, model (kB)"].iloc[0]})


# ----- figures and tables ----------------------------------------------------------------------
def accuracy_curves(curves: pd.DataFrame, best: tuple[Choice, ...]) -> plt.Figure:
    """Test accuracy against rounds per method at its chosen learning rate (mean over seeds, band min to max)."""
    fig = tuned_accuracy_curves(
        curves, best, METHODS, LABELS, COLOURS, xlabel="round (aux step + large step)", figsize=(8.8, 4.0)
    )
    fig.axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def accuracy_bars(final: pd.DataFrame, best: tuple[Choice, ...]) -> plt.Figure:
    """The miniature of the paper's main table: accuracy at the budget per method (error bar = sd over seeds)."""
    sel = keep_best(final, best)
    fig, ax = plt.subplots(figsize=(8.8, 3.6))
    for i, m in enumerate(METHODS):
        vals = sel[sel.method == m].budget_accuracy
        ax.barh(i, vals.mean(), xerr=seed_sd(vals), color=COLOURS[m], capsize=3)
    ax.set_yticks(range(len(METHODS)), [LABELS[m] for m in METHODS], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("test accuracy at the budget (%)")
    fig.tight_layout()
    return fig


def summary_table(final: pd.DataFrame) -> pd.DataFrame:
    """Per method: learning rate chosen on validation, test accuracy (mean ± sd), ``L``'s traffic (all, weak clients)."""
    best = choices(final)
    sel, lr = keep_best(final, best), chosen(best)
    rows = []
    for m in METHODS:
        r = sel[sel.method == m]
        rows.append(
            {
                "method": LABELS[m],
                "lr (chosen on validation)": f"{lr[m]:g}",
                "test accuracy (%)": mean_sd(r.budget_accuracy),
                "L scalars moved (millions)": round(r.large_scalars.mean() / 1e6, 2),
                "of which by weak clients": int(r.weak_large_scalars.max()),
                "seeds": len(r),
            }
        )
    return pd.DataFrame(rows)
