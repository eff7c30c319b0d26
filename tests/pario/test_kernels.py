"""All-to-many kernels: the same bytes delivered, window bounds, and the endpoint model."""

from __future__ import annotations

import numpy as np
import pytest

from repro.hpc.ir import validate
from repro.hpc.reference import execute_reference
from repro.pario import decomp as dc
from repro.pario.kernels import EndpointModel, KernelSpec, endpoint_model, round_table, to_schedule
from repro.pario.twophase import exchange_plan

SPECS = ["unordered", "pairwise", "scattered:1", "scattered:3", "balanced:1", "balanced:2", "balanced:5", "alltoallw"]


@pytest.mark.parametrize("p,A", [(1, 1), (2, 1), (3, 2), (5, 5), (8, 3), (13, 4), (16, 16)])
@pytest.mark.parametrize("spec", SPECS)
def test_every_kernel_delivers_every_pair(p: int, A: int, spec: str) -> None:
    d = dc.irregular_runs(600 * p, p, 4, seed=p + A)
    plan = exchange_plan(d, A)
    table = round_table(spec, plan.counts, plan.aggregators)
    sched = to_schedule(table, plan.counts)
    validate(sched)
    offs = sched.offsets
    inputs = []
    for s in range(p):
        x = np.zeros(sched.work_length, dtype=np.int64)
        x[offs[s * A]:offs[s * A + A]] = 1000 * s + np.arange(offs[s * A + A] - offs[s * A])
        inputs.append(x)
    out = execute_reference(sched, inputs)
    for a, agg in enumerate(plan.aggregators):
        for s in range(p):
            lo, hi = offs[s * A + a], offs[s * A + a + 1]
            assert np.array_equal(out[agg][lo:hi], inputs[s][lo:hi]), (s, a)
    # one message per pair with data, none to oneself
    expected = sum(1 for s in range(p) for a in range(A) if plan.counts[s, a] and s != plan.aggregators[a])
    assert (table.rounds >= 0).sum() == expected


@pytest.mark.parametrize("p,A,W", [(16, 4, 2), (13, 3, 4), (64, 8, 8), (64, 8, 3), (50, 7, 7)])
def test_window_bounds(p: int, A: int, W: int) -> None:
    counts = np.ones((p, A), dtype=np.int64)
    aggs = [i * p // A for i in range(A)]
    for name in ("scattered", "balanced"):
        sends, recvs = round_table(KernelSpec(name=name, window=W), counts, aggs).outstanding()
        assert recvs.max() <= W and sends.max() <= W, name
    sends, recvs = round_table(KernelSpec(name="balanced", window=W), counts, aggs).outstanding()
    if W <= p // A:
        assert sends.max() == 1  # every sender has one target per round: no hot spot
    unordered = round_table("unordered", counts, aggs).outstanding()[1]
    assert unordered.max() == p - 1
    for spec in ("unordered", "pairwise", KernelSpec(name="scattered", window=W), KernelSpec(name="balanced", window=W)):
        table = round_table(spec, counts, aggs)
        assert table.busiest_round == table.outstanding()[0].sum(axis=1).max() == table.outstanding()[1].sum(axis=1).max()
    assert round_table("unordered", counts, aggs).busiest_round == p * A - A  # every message at once
    assert round_table(KernelSpec(name="balanced", window=W), counts, aggs).busiest_round <= A * W


def test_kernel_spec_parsing() -> None:
    assert KernelSpec.parse("balanced:4") == KernelSpec(name="balanced", window=4)
    with pytest.raises(ValueError):
        KernelSpec.parse("balanced")
    with pytest.raises(ValueError):
        KernelSpec.parse("pairwise:3")


def test_endpoint_model_queue_term() -> None:
    p, A = 256, 8
    counts = np.full((p, A), 4096, dtype=np.int64)
    aggs = [i * p // A for i in range(A)]
    tables = {s: round_table(s, counts, aggs) for s in ("unordered", "balanced:16")}
    flat = EndpointModel(alpha=2e-6, bandwidth=5e9, o0=0.0, o1=0.0)
    queued = EndpointModel(alpha=2e-6, bandwidth=5e9, o0=2e-7, o1=5e-9)
    # without a queue term, moving everything at once is never slower
    assert endpoint_model(tables["unordered"], counts, flat) <= endpoint_model(tables["balanced:16"], counts, flat)
    # with it, the all-at-once kernel pays n^2 o1 at each aggregator
    assert endpoint_model(tables["unordered"], counts, queued) > endpoint_model(tables["balanced:16"], counts, queued)


def test_alltoallw_is_costed_as_every_message_at_once() -> None:
    """MPICH's Alltoallw posts every Isend/Irecv at once: its round table is the unordered kernel's."""
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 5, size=(12, 3))
    aggs = [0, 4, 8]
    w, u = round_table("alltoallw", counts, aggs), round_table("unordered", counts, aggs)
    assert np.array_equal(w.rounds, u.rounds) and w.num_rounds == 1
