"""The parallelism oracle's formulas on hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from repro.training.cost import Network
from repro.training.layertable import LayerRow, layer_table
from repro.training.oracle import PlatformConstants, largest_micro_batch, predict, split_stages

PLAT = PlatformConstants(memory_bytes=1e9, flops_per_s=1e9, net=Network(alpha=1e-3, beta=1e-6), bytes_per_value=4)


def _table():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    return layer_table(model, torch.zeros(1, 3, 8, 8))


def test_data_parallel_by_hand():
    t = _table()
    w = sum(r.params for r in t)
    flops = sum(r.flops for r in t)
    n, b = 1000, 10
    for p in (1, 2, 4):
        pred = predict(t, "data", p, b, n, PLAT)
        iters = math.ceil(n / (b * p))
        expected = 0.0 if p == 1 else iters * 2 * (p - 1) * (1e-3 + w * 4 * 1e-6 / p)
        assert pred.communication_s == pytest.approx(expected)
        assert pred.compute_s == pytest.approx(math.ceil(n / p) * 3 * flops / 1e9)
        acts = sum(r.in_elements + r.out_elements for r in t if r.flops > 0)
        assert pred.memory_bytes == pytest.approx(2 * (b * acts + w) * 4)


def test_model_parallel_memory_falls_with_p_and_spatial_halo_by_hand():
    t = _table()
    for s in ("filter", "channel", "spatial", "pipeline"):
        mems = [predict(t, s, p, 8, 64, PLAT).memory_bytes for p in (1, 2, 4)]
        assert mems[0] >= mems[1] >= mems[2], s
    w = sum(r.params for r in t)
    sp = predict(t, "spatial", 2, 1, 1, PLAT)
    # two 3x3 convs: halo of 1 row of width 8 with C = 3 and C = 8 channels, forward and backward, both ways
    halo = sum(2 * 2 * (1e-3 + 1 * 8 * c * 4 * 1e-6) for c in (3, 8))
    gather = 1 * (1e-3 + 512 * 4 * 1e-6 / 2)
    allreduce = 2 * (1e-3 + w * 4 * 1e-6 / 2)
    assert sp.communication_s == pytest.approx(halo + gather + allreduce)


def test_filter_channel_by_hand_and_hybrids():
    t = _table()
    act = [r for r in t if r.flops > 0]
    p, b = 2, 4
    f = predict(t, "filter", p, b, b, PLAT)
    ag = lambda m: (p - 1) * (1e-3 + m * 1e-6 / p)  # noqa: E731
    ar = lambda m: 2 * (p - 1) * (1e-3 + m * 1e-6 / p)  # noqa: E731
    assert f.communication_s == pytest.approx(sum(ag(b * r.out_elements * 4) for r in act)
                                              + sum(ar(b * r.in_elements * 4) for r in act[1:]))
    c = predict(t, "channel", p, b, b, PLAT)
    assert c.communication_s == pytest.approx(sum(ar(b * r.out_elements * 4) for r in act)
                                              + sum(ag(b * r.in_elements * 4) for r in act[1:]))
    assert predict(t, "data+filter", 4, 4, 64, PLAT, p_data=4).communication_s == pytest.approx(
        predict(t, "data", 4, 4, 64, PLAT).communication_s)  # groups of one: plain data parallelism
    with pytest.raises(ValueError):
        predict(t, "data+filter", 6, 4, 64, PLAT, p_data=4)


def test_pipeline_stages_and_one_stage():
    rows = [
        LayerRow(name=str(i), kind="Linear", in_shape=(4,), out_shape=(4,), weight_shape=(4, 4), params=20, flops=fl)
        for i, fl in enumerate([1, 1, 4, 1, 1])
    ]
    stages = split_stages(rows, 3)
    assert len(stages) == 3 and sum(len(s) for s in stages) == 5
    assert [len(s) for s in split_stages(rows, 9)] == [1] * 5
    one = predict(rows, "pipeline", 1, 8, 16, PLAT, segments=4)
    assert one.communication_s == 0.0
    # one stage, S segments: (1 + S - 1) * (b/S) * F = b * F per iteration
    assert one.compute_s == pytest.approx(2 * 8 * 3 * 8 / 1e9)


def test_spatial_halo_of_a_3d_convolution_by_hand():
    model = nn.Sequential(nn.Conv3d(2, 4, 3, padding=1), nn.Flatten(), nn.Linear(4 * 4 * 4 * 4, 3))
    t = layer_table(model, torch.zeros(1, 2, 4, 4, 4))
    w = sum(r.params for r in t)
    sp = predict(t, "spatial", 2, 1, 1, PLAT)
    halo = 2 * 2 * (1e-3 + 1 * 2 * 4 * 4 * 4 * 1e-6)  # one slice of C x H x W = 2 x 4 x 4, forward and backward
    gather = 1 * (1e-3 + 256 * 4 * 1e-6 / 2)
    allreduce = 2 * (1e-3 + w * 4 * 1e-6 / 2)
    assert sp.communication_s == pytest.approx(halo + gather + allreduce)


def test_largest_micro_batch_is_the_largest_fitting_power_of_two():
    t = _table()
    acts = sum(r.in_elements + r.out_elements for r in t if r.flops > 0)
    w = sum(r.params for r in t)
    mem = lambda b: 2 * (b * acts + w) * 4  # noqa: E731
    plat = PlatformConstants(memory_bytes=mem(12), flops_per_s=1e9, net=PLAT.net)
    assert largest_micro_batch(t, "data", 4, plat) == 8
    assert largest_micro_batch(t, "data", 4, plat, cap=4) == 4
    assert largest_micro_batch(t, "data", 4, PlatformConstants(memory_bytes=mem(1) - 1, flops_per_s=1e9, net=PLAT.net)) == 0
    assert largest_micro_batch(t, "spatial", 2, plat) == 16  # activations halved
