"""Driver of the ROOT chapter: offline optimisation as translation through a probabilistic bridge.

ROOT is compared with the surrogate baselines on the shared grid
(:mod:`repro.offopt.grid`).  The authors' code conditions ROOT's sampler on
0.8 times the task's *known maximum* (``BaseRunner.test``, ``alpha = 0.8``),
information the baselines never get; ``target_from`` makes that source a
parameter, and whenever ROOT runs with it a second ROOT arm conditioned on the
best offline score alone (``offline_max``) runs beside it, so every claim is
reported both ways.  With ``ablations`` on, ROOT with a single GP (``F=1``)
and without guidance (``w=0``) run as well but stay out of the ranking.  The
chapter's claims are read from the grid's rows by :func:`root_claims`, and the
two figures only this chapter draws are here.  The ``device`` parameter places
the surrogates' training and ROOT's bridge (training and sampling); the GP
ensemble, the searches and the scoring stay on the CPU, and every random draw
is made there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.offopt.figures import method_colours
from repro.offopt.grid import GridResult, GridSettings, MethodSpec, mean_rank_by_seed, run_chapter_grid
from repro.offopt.pipeline import TARGETS
from repro.offopt.tasks import OfflineTask
from repro.params import require
from repro.results import Evidence

METHOD = "root"
"""ROOT's label in the grid."""

ORACLE_TARGET = "task_max"
"""The authors' target source: the task's known maximum, which the baselines do not see."""

OFFLINE_TARGET = "offline_max"
"""The target source of the second ROOT arm: the best offline score, information every method has."""

OFFLINE_ARM = "root (offline target)"
"""The label of ROOT conditioned on the offline data alone, when the main arm uses the known maximum."""

BASELINE = "grad_ascent"
"""The surrogate baseline of the gain claims."""


@dataclass(frozen=True, kw_only=True)
class Params(GridSettings):
    """The ROOT chapter's parameters (its registry schema), on top of the shared grid parameters.

    Attributes
    ----------
    baselines
        Methods ROOT is ranked against (``grad_ascent`` is required by the claims).
    n_functions
        GPs in ROOT's synthetic-function ensemble (``F``).
    gp_seeds, gp_steps, gp_max_points
        Best offline designs each GP is climbed from, gradient steps up and
        down each GP, and offline points the GPs are fitted to.
    bridge_hidden, bridge_epochs
        Denoiser MLP widths and training epochs.
    sample_steps
        Skip-sampling steps of the bridge.
    guidance
        Classifier-free guidance weight ``w``.
    target_scale
        The sampling target is ``target_scale`` times the reference score (the code: 0.8).
    target_from
        The reference score of the ``root`` arm: ``task_max`` (the code's, the hidden optimum),
        ``offline_max`` or ``gp_max`` (see :func:`repro.offopt.pipeline.reference_score_z`).
    ablations
        Also run ROOT with one GP (``F=1``) and without guidance (``w=0``).
    pairs_per_epoch
        Draw a fresh GP ensemble and fresh pairs before every bridge epoch, as
        the authors' code does (``False``: one set of pairs for all epochs).
    """

    baselines: tuple[str, ...]
    n_functions: int
    gp_seeds: int
    gp_steps: int
    gp_max_points: int
    bridge_hidden: tuple[int, ...]
    bridge_epochs: int
    sample_steps: int
    guidance: float
    target_scale: float
    target_from: str
    ablations: bool
    pairs_per_epoch: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("baselines", "bridge_hidden"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def checks(self) -> None:
        """The shared checks and the baseline the gain claims need."""
        super().checks()
        require(BASELINE in self.baselines, self, "baselines",
                f"baselines must include {BASELINE} (the gain claims compare ROOT with it)")
        require(self.target_from in TARGETS, self, "target_from", f"target_from must be one of {list(TARGETS)}")

    def root_config(self, target_from: str | None = None) -> dict[str, Any]:
        """Overrides of :class:`repro.offopt.pipeline.RootConfig` (``target_from``: another target source)."""
        return {"n_functions": self.n_functions, "n_seeds": self.gp_seeds, "gp_steps": self.gp_steps,
                "gp_max_points": self.gp_max_points, "hidden": list(self.bridge_hidden), "epochs": self.bridge_epochs,
                "sample_steps": self.sample_steps, "guidance": self.guidance, "target_scale": self.target_scale,
                "target_from": target_from or self.target_from, "pairs_per_epoch": self.pairs_per_epoch,
                "device": self.device}

    @property
    def offline_arm(self) -> str:
        """The label of ROOT conditioned on offline information only (``root`` itself unless it uses the known maximum)."""
        return OFFLINE_ARM if self.target_from == ORACLE_TARGET else METHOD

    def methods(self) -> list[str | MethodSpec]:
        """The grid's methods: the baselines, ROOT, ROOT on an offline target, then the ablations when asked for."""
        methods: list[str | MethodSpec] = [*self.baselines, METHOD]
        if self.offline_arm != METHOD:
            methods.append(MethodSpec(label=OFFLINE_ARM, method=METHOD, root={"target_from": OFFLINE_TARGET}))
        if self.ablations:
            methods += [MethodSpec(label="root (F=1)", method=METHOD, root={"n_functions": 1}),
                        MethodSpec(label="root (w=0)", method=METHOD, root={"guidance": 0.0})]
        return methods


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    grid
        One row per (task, method, seed).
    baselines
        The methods ROOT is ranked against.
    offline_arm
        The label of ROOT conditioned on offline information only.
    """

    grid: GridResult
    baselines: tuple[str, ...]
    offline_arm: str


def run(params: Params, tasks: Sequence[OfflineTask] | None = None) -> Results:
    """Run ROOT (both ways), its baselines and (optionally) its ablations on every task and seed.

    Parameters
    ----------
    params
        The chapter's parameters.
    tasks
        The tasks, if already built (default: ``params.build_tasks()``).

    Returns
    -------
    Results
        The grid, one row per (task, method, seed).
    """
    settings = params.method_settings(root=params.root_config())
    grid = run_chapter_grid(params, params.methods(), settings, tasks=tasks)
    return Results(grid=grid, baselines=params.baselines, offline_arm=params.offline_arm)


def main_rows(results: Results) -> pd.DataFrame:
    """The grid's rows of ROOT (both targets) and its baselines (the ablations left out)."""
    rows = results.grid.rows
    return rows[rows.method.isin([*results.baselines, METHOD, results.offline_arm])]


def root_claims(
    rows: pd.DataFrame,
    method: str = METHOD,
    baseline: str = BASELINE,
    metric: str = "p100",
    compare: Sequence[str] | None = None,
) -> dict[str, list[float]]:
    """Per-seed values of the ROOT chapter's claims.

    Parameters
    ----------
    rows
        Grid rows.
    method
        ROOT's label.
    baseline
        The surrogate baseline of the third claim.
    metric
        Score percentile.
    compare
        The methods ROOT is ranked against (default: every other label in the
        grid); pass the baselines to keep ROOT's own ablations out of the ranking.

    Returns
    -------
    dict
        ``rank_gap_vs_best_other``: ROOT's mean rank minus the best mean rank
        among ``compare`` (<= 0: ROOT ranks first);
        ``frac_tasks_beyond_offline``: share of tasks where ROOT's ``metric``
        exceeds the best offline design's score;
        ``gain_vs_baseline_points``: ROOT minus ``baseline``, mean over tasks, points.
    """
    labels = set(rows.method)
    compare = [m for m in (compare if compare is not None else dict.fromkeys(rows.method)) if m != method]
    for m in (method, baseline, *compare):
        if m not in labels:
            raise ValueError(f"method {m!r} is not in the grid")
    if not compare:
        raise ValueError("ROOT needs at least one method to be ranked against")
    ranks = mean_rank_by_seed(rows[rows.method.isin([method, *compare])], metric)
    r = rows[rows.method == method].set_index(["seed", "task"])
    b = rows[rows.method == baseline].set_index(["seed", "task"])[metric]
    seeds = sorted(set(rows.seed))
    return {
        "rank_gap_vs_best_other": [float(ranks.loc[s, method] - ranks.loc[s, compare].min()) for s in seeds],
        "frac_tasks_beyond_offline": [float((r.loc[s, metric] > r.loc[s, "best_offline"]).mean()) for s in seeds],
        "gain_vs_baseline_points": [float(100.0 * (r.loc[s, metric] - b.loc[s]).mean()) for s in seeds],
    }


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The chapter's claims, per seed, for ROOT as configured and for ROOT on the offline target.

    Each ROOT arm is ranked against the baselines only (the other arm and the ablations left out).
    """
    rows = results.grid.rows
    main = root_claims(rows, compare=list(results.baselines))
    fair = root_claims(rows, method=results.offline_arm, compare=list(results.baselines))
    return {**main, "rank_gap_offline_target": fair["rank_gap_vs_best_other"],
            "gain_offline_target_points": fair["gain_vs_baseline_points"]}


def candidate_distributions(
    scores: Mapping[tuple[str, str, int], np.ndarray], tasks: Sequence[str], methods: Sequence[str], seed: int,
    best_offline: Mapping[str, float] | None = None,
) -> Figure:
    """Box plots of the normalised scores of all ``K`` candidates, per task and method (one seed).

    Parameters
    ----------
    scores
        :attr:`repro.offopt.grid.GridResult.scores`.
    tasks, methods
        What to show, in order.
    seed
        The seed shown.
    best_offline
        Optional ``task -> `` best offline normalised score (dashed line).
    """
    colours = method_colours(methods)
    fig, axes = plt.subplots(1, len(tasks), figsize=(max(3.2 * len(tasks), 5.0), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        data = [scores[(task, m, seed)] for m in methods]
        bp = ax.boxplot(data, patch_artist=True, widths=0.6, showfliers=False)
        for patch, m in zip(bp["boxes"], methods):
            patch.set_facecolor(colours[m])
            patch.set_alpha(0.5)
        for i, d in enumerate(data):
            ax.scatter(np.full(len(d), i + 1) + np.random.default_rng(i).uniform(-0.18, 0.18, len(d)), d, s=3,
                       color=colours[methods[i]], alpha=0.6, zorder=3)
        if best_offline is not None:
            ax.axhline(best_offline[task], color="black", linestyle="--", linewidth=1)
        ax.set_xticks(range(1, len(methods) + 1), methods, rotation=40, ha="right")
        ax.set_title(task)
        ax.grid(axis="x", visible=False)
    axes[0][0].set_ylabel("normalised score of each candidate")
    fig.tight_layout()
    return fig


def _pca2(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and the two leading principal axes (rows) of ``a``."""
    mean = a.mean(axis=0)
    _, _, vt = np.linalg.svd(a - mean, full_matrices=False)
    return mean, vt[:2]


def bridge_translation(task: OfflineTask, start_z: np.ndarray, end_z: np.ndarray, max_arrows: int = 64) -> Figure:
    """Where the bridge moves its starting designs, in a 2-D PCA view of the offline set.

    Left: the offline set (grey), the starting designs (the best offline ones)
    and the candidates they were translated into, with arrows for the first
    ``max_arrows`` pairs; the PCA axes are those of the offline set.  Right: the
    oracle's normalised score of each start against its candidate (points above
    the diagonal were improved by the translation).

    Parameters
    ----------
    task
        The task (offline set and oracle).
    start_z, end_z
        Starting designs and their translations in z-space, row-aligned, shape ``(k, d)``.
    max_arrows
        Arrows drawn.
    """
    if start_z.shape != end_z.shape:
        raise ValueError(f"start_z and end_z must have the same shape, got {start_z.shape} and {end_z.shape}")
    mean, axes_ = _pca2(task.x_z)
    proj = lambda a: (a - mean) @ axes_.T  # noqa: E731
    off, s, e = proj(task.x_z), proj(start_z), proj(end_z)
    s_score = task.normalise(task.score(task.from_z(start_z)))
    e_score = task.normalise(task.score(task.from_z(end_z)))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4.2))
    ax.scatter(off[:, 0], off[:, 1], s=4, color="lightgray", label="offline set")
    ax.scatter(s[:, 0], s[:, 1], s=12, color="tab:blue", label="start (best offline)")
    sc = ax.scatter(e[:, 0], e[:, 1], s=16, c=e_score, cmap="viridis", marker="^", label="candidate (colour: score)")
    for i in range(min(max_arrows, len(s))):
        ax.annotate("", xy=e[i], xytext=s[i], arrowprops={"arrowstyle": "->", "color": "tab:blue", "alpha": 0.35, "lw": 0.7})
    fig.colorbar(sc, ax=ax, label="normalised score")
    ax.set_xlabel("PC 1 of the offline set (z-space)")
    ax.set_ylabel("PC 2")
    ax.legend(loc="best", fontsize=8)
    lo, hi = float(min(s_score.min(), e_score.min())), float(max(s_score.max(), e_score.max()))
    bx.scatter(s_score, e_score, s=10, color="tab:green")
    bx.plot([lo, hi], [lo, hi], color="black", linestyle="--", linewidth=1)
    bx.set_xlabel("score of the start")
    bx.set_ylabel("score of its candidate")
    bx.set_title(f"{task.name}: {float(np.mean(e_score > s_score)):.0%} of starts improved")
    fig.tight_layout()
    return fig
