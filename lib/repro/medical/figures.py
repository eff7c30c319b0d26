"""Figure helpers shared by the medical chapters: CT and PET panels drawn the same way."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes

CT_WINDOW = (-1000.0, 1000.0)


def show_ct(ax: Axes, ct01: np.ndarray, title: str = "") -> None:
    """Draw a normalised CT image (``(HU + 1024) / 2047``) in grey, lung-to-bone window."""
    lo, hi = ((v + 1024.0) / 2047.0 for v in CT_WINDOW)
    ax.imshow(ct01, cmap="gray", vmin=lo, vmax=hi, interpolation="nearest")
    _finish(ax, title)


def show_pet(ax: Axes, pet01: np.ndarray, title: str = "", lesions: np.ndarray | None = None, vmax: float = 0.4) -> None:
    """Draw a normalised PET image in a hot colour map, with lesion outlines in cyan when given."""
    ax.imshow(pet01, cmap="magma", vmin=0.0, vmax=vmax, interpolation="nearest")
    if lesions is not None and lesions.any():
        ax.contour(lesions.astype(float), levels=[0.5], colors="cyan", linewidths=0.8)
    _finish(ax, title)


def _finish(ax: Axes, title: str) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=8)
