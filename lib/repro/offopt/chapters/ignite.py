"""Driver of the IGNITE chapter: the surrogate's sharpness (gradient norm) as a regulariser.

Every base optimiser runs vanilla and with each IGNITE variant on the shared
grid (:mod:`repro.offopt.grid`), and each trained single surrogate's gradient
norm is logged on the offline set and on unseen top designs.  The base
optimisers include the authors' mean- and min-ensemble gradient ascents.  The
claims judge one variant, :attr:`Params.judged_variant`: the paired
comparisons of :func:`repro.offopt.grid.regulariser_claims`, one value per
seed (the seed is the independent replication; the (task, optimiser) pairs of
one seed share its draws), and the sharpness reduction of
:func:`repro.offopt.grid.diagnostic_reduction`.  The paper's 9.6% is a
maximum ("up to"), so it is set against our maximum over the same kind of
pairs (``max_rel_gain_pct``), and the mean gain is a claim of its own without
a paper number.  The ``device`` parameter places the surrogates' training
(IGNITE's penalty included); the searches and the sharpness measurements use
the trained surrogates on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.offopt.grid import (
    Diagnostics,
    GridResult,
    GridSettings,
    diagnostic_reduction,
    regularised_methods,
    regulariser_claims,
    run_chapter_grid,
)
from repro.offopt.tasks import OfflineTask
from repro.results import Evidence

DUAL_ASCENT = "ignite"
"""The paper's variant (dual ascent on the multiplier), judged whenever it runs."""


@dataclass(frozen=True, kw_only=True)
class Params(GridSettings):
    """The IGNITE chapter's parameters (its registry schema), on top of the shared grid parameters.

    Attributes
    ----------
    optimizers
        Base optimisers, each run vanilla and with every variant.
    variants
        Regulariser variants: ``ignite`` (dual ascent) and ``ignite2`` (fixed lambda).
    ignite_rho
        Radius ``rho`` of the parameter ball.
    ignite_eps
        Sharpness budget ``epsilon`` of the constraint.
    ignite_dual_lr
        Dual step on the multiplier.
    """

    optimizers: tuple[str, ...]
    variants: tuple[str, ...]
    ignite_rho: float
    ignite_eps: float
    ignite_dual_lr: float

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("optimizers", "variants"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def judged_variant(self) -> str:
        """The variant the claims judge: ``ignite`` when it runs, else the first variant."""
        return DUAL_ASCENT if DUAL_ASCENT in self.variants else self.variants[0]

    def methods(self) -> list[str]:
        """Each base optimiser followed by its regularised twins, one per variant."""
        return regularised_methods(self.optimizers, self.variants)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    grid
        The grid, with the ``sharpness_offline`` and ``sharpness_unseen`` columns.
    variant
        The variant the claims judge.
    """

    grid: GridResult
    variant: str


def run(params: Params, tasks: list[OfflineTask] | None = None) -> Results:
    """Run every base optimiser vanilla and with each variant on every task and seed, logging sharpness.

    Parameters
    ----------
    params
        The chapter's parameters.
    tasks
        The tasks, if already built (default: ``params.build_tasks()``).

    Returns
    -------
    Results
        The grid and the judged variant.
    """
    ignite = {"rho": params.ignite_rho, "eps": params.ignite_eps, "dual_lr": params.ignite_dual_lr}
    settings = params.method_settings(regularizer_kwargs={DUAL_ASCENT: ignite})
    grid = run_chapter_grid(params, params.methods(), settings, diagnostics=Diagnostics(which=("sharpness",)), tasks=tasks)
    return Results(grid=grid, variant=params.judged_variant)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The chapter's claims for the judged variant, one value per seed.

    Returns
    -------
    dict
        ``mean_rel_gain_pct`` and ``max_rel_gain_pct`` (the mean and the largest relative gain over
        (task, optimiser) pairs), ``frac_improved`` and ``sharpness_reduction_unseen_pct``.
    """
    rows = results.grid.rows
    paired = regulariser_claims(rows, results.variant)
    return {
        "mean_rel_gain_pct": paired["mean_rel_gain_pct"],
        "max_rel_gain_pct": paired["max_rel_gain_pct"],
        "frac_improved": paired["frac_improved"],
        "sharpness_reduction_unseen_pct": diagnostic_reduction(rows, results.variant, "sharpness_unseen"),
    }
