"""Driver of the IGNITE chapter: the surrogate's sharpness (gradient norm) as a regulariser.

Every base optimiser runs vanilla and with each IGNITE variant on the shared
grid (:mod:`repro.offopt.grid`), and each trained surrogate's gradient norm is
logged on the offline set and on unseen top designs.  The claims judge one
variant, :attr:`IgniteSettings.judged_variant`: the paired comparisons of
:func:`repro.offopt.grid.regulariser_claims` (the gain claim is the paired
*mean* relative gain, not the maximum over noisy pairs, which grows with the
number of pairs even when the regulariser does nothing) and the sharpness
reduction of :func:`repro.offopt.grid.diagnostic_reduction`.  The ``device``
parameter places the surrogates' training (IGNITE's penalty included); the
searches and the sharpness measurements use the trained surrogates on the CPU.
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

DUAL_ASCENT = "ignite"
"""The paper's variant (dual ascent on the multiplier), judged whenever it runs."""


@dataclass(frozen=True, kw_only=True)
class IgniteSettings(GridSettings):
    """The IGNITE chapter's parameters (its registry schema), on top of the shared grid settings.

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
        if not self.variants:
            raise ValueError("variants must name at least one IGNITE variant")

    @property
    def judged_variant(self) -> str:
        """The variant the claims judge: ``ignite`` when it runs, else the first variant."""
        return DUAL_ASCENT if DUAL_ASCENT in self.variants else self.variants[0]

    def methods(self) -> list[str]:
        """Each base optimiser followed by its regularised twins, one per variant."""
        return regularised_methods(self.optimizers, self.variants)


def run(settings: IgniteSettings, tasks: Sequence[OfflineTask] | None = None) -> GridResult:
    """Run every base optimiser vanilla and with each variant on every task and seed, logging sharpness.

    Parameters
    ----------
    settings
        The chapter's parameters.
    tasks
        The tasks, if already built (default: ``settings.build_tasks()``).

    Returns
    -------
    GridResult
        The grid, with the ``sharpness_offline`` and ``sharpness_unseen`` columns.
    """
    ignite = {"rho": settings.ignite_rho, "eps": settings.ignite_eps, "dual_lr": settings.ignite_dual_lr}
    return run_chapter_grid(settings, settings.methods(), tasks, regularizer_kwargs={DUAL_ASCENT: ignite},
                            diagnostics=["sharpness"])


def claims(grid: GridResult, settings: IgniteSettings) -> dict[str, list[float]]:
    """The chapter's claims for the judged variant, per seed.

    Returns
    -------
    dict
        ``mean_rel_gain_pct`` (the mean relative gain over (task, optimiser)
        pairs), ``frac_improved`` and ``sharpness_reduction_unseen_pct``.
    """
    variant = settings.judged_variant
    paired = regulariser_claims(grid.rows, variant)
    return {
        "mean_rel_gain_pct": paired["mean_rel_gain_pct"],
        "frac_improved": paired["frac_improved"],
        "sharpness_reduction_unseen_pct": diagnostic_reduction(grid.rows, variant, "sharpness_unseen"),
    }
