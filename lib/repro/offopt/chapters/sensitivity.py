"""Driver of the BOSS chapter: surrogate sensitivity as a regulariser for offline optimisers.

Every base optimiser runs with and without BOSS on the shared grid
(:mod:`repro.offopt.grid`), and each trained surrogate's Monte-Carlo
sensitivity is logged on the offline set and on unseen top designs.  The
claims are the paired comparisons of :func:`repro.offopt.grid.regulariser_claims`
and the sensitivity reduction of :func:`repro.offopt.grid.diagnostic_reduction`.
The ``device`` parameter places the surrogates' training (BOSS's penalty
included); the searches and the sensitivity measurements use the trained
surrogates on the CPU, and every random draw is made there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from repro.offopt.grid import (
    GridResult,
    GridSettings,
    diagnostic_reduction,
    regularised_methods,
    regulariser_claims,
    run_chapter_grid,
)
from repro.offopt.tasks import OfflineTask

REGULARIZER = "boss"
"""The regulariser this chapter judges."""


@dataclass(frozen=True, kw_only=True)
class SensitivitySettings(GridSettings):
    """The BOSS chapter's parameters (its registry schema), on top of the shared grid settings.

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


def run(settings: SensitivitySettings, tasks: Sequence[OfflineTask] | None = None) -> GridResult:
    """Run every base optimiser with and without BOSS on every task and seed, logging sensitivity.

    Parameters
    ----------
    settings
        The chapter's parameters.
    tasks
        The tasks, if already built (default: ``settings.build_tasks()``).

    Returns
    -------
    GridResult
        The grid, with the ``sensitivity_offline`` and ``sensitivity_unseen`` columns.
    """
    boss = {"weight": settings.boss_weight, "alpha": settings.boss_alpha, "n_gamma": settings.n_gamma}
    return run_chapter_grid(settings, settings.methods(), tasks, regularizer_kwargs={REGULARIZER: boss},
                            diagnostics=["sensitivity"],
                            sensitivity_kwargs={"alpha": settings.boss_alpha, "sigma": settings.sensitivity_sigma})


def claims(grid: GridResult) -> dict[str, list[float]]:
    """The chapter's claims, per seed.

    Returns
    -------
    dict
        ``frac_improved`` and ``mean_gain_points`` (BOSS against vanilla, over
        (task, optimiser) pairs) and ``sensitivity_reduction_pct`` (on unseen
        top designs).
    """
    paired = regulariser_claims(grid.rows, REGULARIZER)
    return {
        "frac_improved": paired["frac_improved"],
        "mean_gain_points": paired["mean_gain_points"],
        "sensitivity_reduction_pct": diagnostic_reduction(grid.rows, REGULARIZER, "sensitivity_unseen"),
    }
