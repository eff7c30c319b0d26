"""Feature-shift client transforms."""

from __future__ import annotations

import numpy as np
import pytest

from repro.federated.feature_shift import ImageShift, draw_shifts


def test_identity_and_translation():
    x = np.arange(16, dtype=np.float32).reshape(1, 16) / 16
    np.testing.assert_array_equal(ImageShift().apply(x), x)
    moved = ImageShift(dx=1).apply(x).reshape(4, 4)
    np.testing.assert_array_equal(moved[:, 1:], x.reshape(4, 4)[:, :-1])
    assert (moved[:, 0] == 0).all()
    up = ImageShift(dy=-1).apply(x).reshape(4, 4)
    np.testing.assert_array_equal(up[:-1], x.reshape(4, 4)[1:])


def test_intensity_stays_in_range_and_groups_are_seeded():
    x = np.random.default_rng(0).random((5, 64)).astype(np.float32)
    out = ImageShift(contrast=1.5, brightness=0.3).apply(x)
    assert out.min() >= 0.0 and out.max() <= 1.0
    shifts = draw_shifts(5, seed=3)
    assert shifts[0] == ImageShift() and shifts == draw_shifts(5, seed=3) and len(set(shifts)) == 5
    with pytest.raises(ValueError, match="square"):
        ImageShift().apply(np.zeros((1, 10)))
