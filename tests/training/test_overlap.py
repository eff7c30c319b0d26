"""The overlap engine against the non-overlapped reference and DDP, and the iteration model's invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.training.cost import Network
from repro.training.itersim import Platform, conv_heavy_layers, simulate_iteration, speedup, vgg_a_layers
from repro.training.launcher import launch
from repro.training.overlap import MODES, OverlapEngine, TimingJob, timing_rank, vgg_mini


def _engine_waits_all(ctx):
    torch.manual_seed(0)
    model = vgg_mini(4, 16, 32)
    engine = OverlapEngine(model)
    x = torch.randn(2, 3, 32, 32)
    model(x).sum().backward()
    launched = len(engine.pending)
    waited = engine.synchronize()
    # the hooks fire in back-propagation order: the output layer's tensors first
    return launched, waited, len(engine.pending), engine.launch_order[:2], sum(1 for _ in model.parameters())


@pytest.fixture(scope="module")
def timings():
    job = TimingJob(seeds=(0, 1), local_batch=4, image=32, num_classes=4, width_divisor=16, warmup=1, iterations=3)
    return launch(timing_rank, 2, (job,))


def test_overlapped_training_equals_non_overlapped_and_ddp(timings):
    for rows in timings:
        by = {(r.seed, r.mode): r.params for r in rows}
        assert {m for _, m in by} == set(MODES)
        for seed in (0, 1):
            for a, b in zip(by[(seed, "overlap")], by[(seed, "no_overlap")]):
                np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
            for a, b in zip(by[(seed, "ddp")], by[(seed, "no_overlap")]):
                np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    # every rank ends with the same model (the reduction really happened)
    for r0, r1 in zip(timings[0], timings[1]):
        for a, b in zip(r0.params, r1.params):
            np.testing.assert_array_equal(a, b)


def test_every_async_handle_is_waited_before_the_step():
    launched, waited, left, first, nparams = launch(_engine_waits_all, 2)[0]
    assert launched == waited == nparams and left == 0
    assert set(first) <= {"fc2.weight", "fc2.bias"}


@pytest.mark.parametrize("layers", [vgg_a_layers(), conv_heavy_layers()], ids=["vgg", "conv"])
def test_iteration_model_invariants(layers):
    free = Platform(net=Network(alpha=0.0, beta=0.0))
    for p in (2, 8, 128):
        assert speedup(layers, p, 256, free, True) == pytest.approx(p)
    plat = Platform()
    for p in (2, 16, 128):
        for b in (64, 256, 512):
            ov = simulate_iteration(layers, p, b, plat, True)
            no = simulate_iteration(layers, p, b, plat, False)
            assert ov.total <= no.total + 1e-12
            assert ov.total >= max(ov.forward + ov.backward, ov.communication) - 1e-12
            assert no.total == pytest.approx(no.forward + no.backward + no.communication)


def test_vgg_a_profile_matches_the_architecture():
    layers = vgg_a_layers()
    assert sum(layer.params for layer in layers) == pytest.approx(132.86e6, rel=1e-3)
    assert sum(layer.forward_flops for layer in layers) == pytest.approx(15.2e9, rel=0.01)
    assert sum(layer.params for layer in conv_heavy_layers()) < 0.2 * sum(layer.params for layer in layers)
