"""Feature-shift client transforms: each client group sees the images through its own lens.

A :class:`ImageShift` is a group's affine change of intensity (contrast
and brightness) followed by a translation of whole pixels, applied to
flattened square grey images (values kept in the data's range).  Clients
of one group share a shift; :func:`draw_shifts` draws a seeded set of
groups, the first one being the identity, so group 0 is the untouched data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class ImageShift:
    """One group's transform ``clip(contrast * x + brightness, lo, hi)``, then a shift by ``(dy, dx)`` pixels.

    Attributes
    ----------
    contrast, brightness
        The affine intensity change (in the data's units).
    dy, dx
        Whole-pixel translation (positive: down and right); uncovered pixels take ``lo``.
    """

    contrast: float = 1.0
    brightness: float = 0.0
    dy: int = 0
    dx: int = 0

    def apply(self, x: np.ndarray, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
        """Transform a batch of flattened square images ``(n, side * side)`` (float32 out)."""
        x = np.asarray(x, dtype=np.float32)
        side = int(round(np.sqrt(x.shape[1])))
        if side * side != x.shape[1]:
            raise ValueError(f"images must be square; got {x.shape[1]} features")
        img = np.clip(self.contrast * x + self.brightness, lo, hi).reshape(len(x), side, side)
        out = np.full_like(img, lo)
        ys, yd = (slice(0, side - self.dy), slice(self.dy, side)) if self.dy >= 0 else \
            (slice(-self.dy, side), slice(0, side + self.dy))
        xs, xd = (slice(0, side - self.dx), slice(self.dx, side)) if self.dx >= 0 else \
            (slice(-self.dx, side), slice(0, side + self.dx))
        out[:, yd, xd] = img[:, ys, xs]
        return out.reshape(len(x), -1)


def draw_shifts(groups: int, seed: int, contrast: tuple[float, float] = (0.6, 1.4),
                brightness: tuple[float, float] = (-0.2, 0.2), max_pixels: int = 1) -> tuple[ImageShift, ...]:
    """``groups`` shifts; group 0 is the identity, the others draw contrast, brightness and a translation.

    Parameters
    ----------
    groups
        Number of groups (at least 1).
    seed
        Seed of the draw.
    contrast, brightness
        Ranges of the uniform draws.
    max_pixels
        Largest translation along each axis.
    """
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    rng = np.random.default_rng(seed)
    out = [ImageShift()]
    for _ in range(groups - 1):
        out.append(
            ImageShift(
                contrast=float(rng.uniform(*contrast)),
                brightness=float(rng.uniform(*brightness)),
                dy=int(rng.integers(-max_pixels, max_pixels + 1)),
                dx=int(rng.integers(-max_pixels, max_pixels + 1)),
            )
        )
    return tuple(out)
