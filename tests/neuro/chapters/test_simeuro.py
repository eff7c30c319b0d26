"""The simeuro chapter's scaling study on a tiny synthetic chip."""

from __future__ import annotations

import pytest

from repro.neuro.chapters import simeuro as chapter


def test_scaling_point_counts_cores_mesh_and_both_placements():
    settings = chapter.ScalingSettings(widths=(96,), crossbar=32, ticks=4, batch=2, rate=0.1, workers=2)
    point = chapter.scaling_point(settings, 96, seed=1)  # raises if the partitioned run differs
    assert point.cores == 2 * 3 * 3 and point.mesh_side == 5 and point.synapses == 2 * 96 * 96
    assert point.core_tick_single > 0 and point.core_tick_partitioned > 0
    assert point.hops_sequential > 0 and point.hops_random > 0
    # twice the cores, each with a full 96x96 crossbar: 36 * 9216 synapses against the chip's 18432
    seconds = chapter.per_tick_extrapolation([point], 2 * point.cores, 96 * 96)
    assert seconds == pytest.approx(18 * point.core_tick_single)
