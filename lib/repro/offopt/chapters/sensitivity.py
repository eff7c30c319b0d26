"""Driver of the BOSS chapter: surrogate sensitivity as a regulariser for offline optimisers.

Every base optimiser (the authors' mean- and min-ensemble gradient ascents
among them) runs with and without BOSS on the shared grid
(:mod:`repro.offopt.grid`), and each trained single surrogate's Monte-Carlo
sensitivity is logged on the offline set and on unseen top designs.  The
claims are the paired comparisons of :func:`repro.offopt.grid.regulariser_claims`
and the sensitivity reduction of :func:`repro.offopt.grid.diagnostic_reduction`,
one value per seed.  The ``device`` parameter places the surrogates' training
(BOSS's penalty included); the searches and the sensitivity measurements use
the trained surrogates on the CPU, and every random draw is made there.
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

REGULARIZER = "boss"
"""The regulariser this chapter judges."""


@dataclass(frozen=True, kw_only=True)
class Params(GridSettings):
    """The BOSS chapter's parameters (its registry schema), on top of the shared grid parameters.

    Attributes
    ----------
    optimizers
        Base optimisers, each run with and without BOSS.
    boss_weight
        ``lambda``, the weight of the sensitivity penalty.
    boss_alpha
        The relative tolerance ``alpha`` (also used when sensitivity is measured).
    n_gamma
        Perturbation draws per batch.
    sensitivity_sigma
        ``sigma`` of the perturbations when sensitivity is measured.
    """

    optimizers: tuple[str, ...]
    boss_weight: float
    boss_alpha: float
    n_gamma: int
    sensitivity_sigma: float

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "optimizers", tuple(self.optimizers))

    def methods(self) -> list[str]:
        """Each base optimiser followed by its BOSS-regularised twin."""
        return regularised_methods(self.optimizers, [REGULARIZER])


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced: the grid, with the ``sensitivity_*`` columns."""

    grid: GridResult


def run(params: Params, tasks: list[OfflineTask] | None = None) -> Results:
    """Run every base optimiser with and without BOSS on every task and seed, logging sensitivity.

    Parameters
    ----------
    params
        The chapter's parameters.
    tasks
        The tasks, if already built (default: ``params.build_tasks()``).

    Returns
    -------
    Results
        The grid, with the ``sensitivity_offline`` and ``sensitivity_unseen`` columns.
    """
    boss = {"weight": params.boss_weight, "alpha": params.boss_alpha, "n_gamma": params.n_gamma}
    diagnostics = Diagnostics(which=("sensitivity",),
                              sensitivity_kwargs={"alpha": params.boss_alpha, "sigma": params.sensitivity_sigma})
    settings = params.method_settings(regularizer_kwargs={REGULARIZER: boss})
    return Results(grid=run_chapter_grid(params, params.methods(), settings, diagnostics=diagnostics, tasks=tasks))


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The chapter's claims, per seed.

    Returns
    -------
    dict
        ``frac_improved`` and ``mean_gain_points`` (BOSS against vanilla, over
        (task, optimiser) pairs) and ``sensitivity_reduction_pct`` (on unseen
        top designs).
    """
    rows = results.grid.rows
    paired = regulariser_claims(rows, REGULARIZER)
    return {
        "frac_improved": paired["frac_improved"],
        "mean_gain_points": paired["mean_gain_points"],
        "sensitivity_reduction_pct": diagnostic_reduction(rows, REGULARIZER, "sensitivity_unseen"),
    }
