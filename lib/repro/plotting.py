"""Figure helpers shared by every chapter."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt


def save(fig: plt.Figure, output_dir: str | Path, name: str) -> Path:
    """Save ``fig`` as ``<output_dir>/figures/<name>.png`` (150 dpi) and return the path."""
    path = Path(output_dir) / "figures" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    return path


def style() -> None:
    """The book's common Matplotlib style (readable in print and on screen)."""
    plt.rcParams.update({"figure.dpi": 100, "figure.figsize": (7.0, 4.0), "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False, "font.size": 11,
                         "axes.titlesize": 11, "legend.fontsize": 9})
