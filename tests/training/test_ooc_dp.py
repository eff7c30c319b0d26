"""KARMA's multi-node part: the host-side update is SGD, and pipelined out-of-core data parallelism is plain DP."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from repro.training.launcher import launch
from repro.training.ooc_dp import DP_MODES, DPJob, HostUpdate, dp_rank


def _chain(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Sequential(nn.Linear(8, 16), nn.GELU()), nn.Sequential(nn.Linear(16, 16), nn.GELU()),
                         nn.Linear(16, 3))


def test_host_update_is_torch_sgd_with_momentum_bit_for_bit():
    a, b = _chain(0), _chain(0)
    opt = torch.optim.SGD(a.parameters(), lr=0.05, momentum=0.9)
    host = HostUpdate(b, lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        x, y = torch.randn(5, 8, generator=gen), torch.randint(0, 3, (5,), generator=gen)
        for m in (a, b):
            m.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
        for p in b.parameters():
            host.apply(p, p.grad)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    # the host copy is a copy: the device weights only change through apply
    first = next(b.parameters())
    assert host.weights[id(first)].data_ptr() != first.data_ptr()


def test_host_update_without_momentum_state_differs_from_a_reset():
    # a check that can fail: dropping the momentum buffer between steps changes the weights
    a, b = _chain(0), _chain(0)
    ha, hb = HostUpdate(a, lr=0.1, momentum=0.9), HostUpdate(b, lr=0.1, momentum=0.9)
    x, y = torch.randn(5, 8), torch.randint(0, 3, (5,))
    for step in range(2):
        for m, h in ((a, ha), (b, hb)):
            m.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            if step and h is hb:
                h.buffers.clear()
            for p in m.parameters():
                h.apply(p, p.grad)
    assert any(not torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_job_needs_one_model_policy_and_seed_per_run():
    with pytest.raises(ValueError, match="one model, one policy and one seed"):
        DPJob(models=(_chain(0),), policies=(), seeds=(0,), features=8, classes=3, batch=4, steps=1, warmup=0)


@pytest.fixture(scope="module")
def two_ranks():
    job = DPJob(models=(_chain(0), _chain(1)), policies=(("swap", "recompute", "keep"), ("recompute", "swap", "swap")),
                seeds=(0, 1), features=8, classes=3, batch=6, steps=3, warmup=1)
    return launch(dp_rank, 2, (job,), timeout_s=300)


def test_pipelined_host_updated_training_equals_synchronous_data_parallelism(two_ranks):
    for rank in two_ranks:
        assert sorted((t.seed, t.mode) for t in rank) == sorted((s, m) for s in (0, 1) for m in DP_MODES)
        assert [t.mode for t in rank[:2]] != [t.mode for t in rank[2:]]  # the order rotates between seeds
        by = {(t.seed, t.mode): t for t in rank}
        for s in (0, 1):
            for a, b in zip(by[(s, "synchronous")].params, by[(s, "pipelined")].params):
                np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    # the replicas agree across ranks, and training moved them away from the start
    first = [{(t.seed, t.mode): t for t in rank}[(0, "pipelined")] for rank in two_ranks]
    for a, b in zip(first[0].params, first[1].params):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    start = [p.detach().numpy() for p in _chain(0).parameters()]
    assert max(float(np.abs(a - b).max()) for a, b in zip(start, first[0].params)) > 1e-4
