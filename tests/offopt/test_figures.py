"""Figures shared by the chapters: one panel per task, one mark per method or pair."""

from __future__ import annotations

import matplotlib.pyplot as plt

from repro.offopt import figures
from repro.offopt.grid import GridResult, paired_gains


def test_scores_by_task_has_one_panel_per_task_and_one_bar_per_method(grid: GridResult) -> None:
    fig = figures.scores_by_task(grid.rows)
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == len(grid.methods)
    plt.close("all")


def test_diagnostic_pairs_and_gain_bars(grid: GridResult) -> None:
    fig = figures.diagnostic_pairs(grid.rows, "ignite2", "sharpness_unseen", "gradient norm")
    assert len(fig.axes) == 2 and len(fig.axes[0].collections) == 2  # one scatter per task
    fig = figures.paired_gain_bars(paired_gains(grid.rows, "ignite2"), "ignite2")
    assert len(fig.axes[0].patches) == 2 * 2  # tasks x bases
    plt.close("all")


def test_method_colours_are_stable_and_distinct() -> None:
    c = figures.method_colours(["a", "b", "c"])
    assert c == figures.method_colours(["a", "b", "c"]) and len(set(c.values())) == 3
