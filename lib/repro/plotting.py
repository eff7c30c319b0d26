"""Figure helpers shared by every chapter."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from repro.results import Ledger


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


def margin_sweep_figure(ledger: Ledger, claim_id: str) -> plt.Figure:
    """Where a claim's verdict flips as its margin (null value) is swept: the 95% interval against each margin.

    A margin the paper does not give is an assumption; this figure shows the
    reader, for every margin of the claim's ``null_sweep``, whether the
    interval of the recorded per-seed values clears it.

    Parameters
    ----------
    ledger
        The chapter's ledger, with the claim recorded.
    claim_id
        A claim with a ``null_sweep`` in the registry.

    Raises
    ------
    ValueError
        When the claim sweeps no margin or is not recorded.
    """
    claim = ledger.chapter.claim(claim_id)
    result = ledger.results.get(claim_id)
    if not claim.null_sweep or result is None:
        raise ValueError(f"claim {claim_id!r}: no margin sweep recorded (null_sweep in the registry, then Ledger.record)")
    fig, ax = plt.subplots(figsize=(6.0, 3.2))
    if result.ci_low is not None and result.ci_high is not None:
        ax.axhspan(result.ci_low, result.ci_high, color="0.85", label="95% interval of the mean")
    ax.axhline(result.mean, color="black", lw=1, label=f"mean over {result.n} seed(s)")
    for point in result.margin_sweep:
        holds = point["sign_holds"]
        colour = "#2e7d32" if holds else ("#c62828" if holds is False else "0.5")
        ax.scatter([point["null_value"]], [point["null_value"]], color=colour, zorder=3, s=40)
    xs = [p["null_value"] for p in result.margin_sweep]
    ax.plot(xs, xs, color="0.4", ls="--", lw=1, label="margin (the claim holds where the interval is "
            + ("above" if claim.direction == "higher" else "below") + " it)")
    ax.axvline(claim.null_value, color="#1565c0", lw=1, ls=":", label=f"the chapter's margin {claim.null_value:g}")
    ax.set_xlabel(f"margin (null value), {claim.unit}".rstrip(", "))
    ax.set_ylabel(claim.unit or "value")
    ax.set_title(f"{claim_id}: green where the sign holds, red where it fails", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    return fig


def source_listing(*objects: object) -> str:
    """Markdown with the source code of functions or classes, for "The idea": the reader sees the code that runs.

    Parameters
    ----------
    objects
        The functions or classes to list, in order.
    """
    blocks = []
    for obj in objects:
        where = f"{obj.__module__}.{getattr(obj, '__qualname__', '')}"
        blocks.append(f"`{where}`:\n\n```python\n{inspect.getsource(obj).rstrip()}\n```\n")  # type: ignore[arg-type]
    return "\n".join(blocks)
