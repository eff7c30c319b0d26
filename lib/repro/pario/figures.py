"""Figures that two or more parallel-I/O chapters draw.

Both two-phase chapters sweep the endpoint model's queue-search cost ``o1``
because their verdicts turn on it; :func:`speedup_against_queue_cost` draws
a speedup against that cost.  Figures only one chapter draws live in that
chapter's driver.
"""

from __future__ import annotations

from typing import Any, Callable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def speedup_against_queue_cost(ax: plt.Axes, stats: pd.DataFrame, group: str, label: Callable[[Any], str]) -> None:
    """Draw a speedup (mean ± sd over seeds) against ``o1`` in ns, one line per value of ``group``.

    ``o1 = 0`` has no place on the log axis: each line's value there is a
    dotted horizontal line in its colour.  A black line marks "no gain" (1).

    Parameters
    ----------
    ax
        The axes.
    stats
        Columns ``group``, ``o1`` (s), ``mean`` and ``std`` (NaN for one seed: drawn as 0).
    group
        The column that names a line (``p``, ``o0`` ...).
    label
        The legend label of a line, from its ``group`` value.
    """
    for value, grp in stats.groupby(group):
        x = np.where(grp.o1 > 0, grp.o1 * 1e9, np.nan)
        ax.errorbar(x, grp["mean"], yerr=grp["std"].fillna(0), marker="o", label=label(value))
        zero = grp[grp.o1 == 0]
        if len(zero):
            ax.axhline(float(zero["mean"].iloc[0]), ls=":", lw=0.8, color=ax.lines[-1].get_color())
    ax.axhline(1.0, color="k", lw=1, label="no gain")
