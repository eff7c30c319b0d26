"""FIFO resources: finish times equal a hand computation, and jobs finish in arrival order."""

from __future__ import annotations

import pytest

from repro.netsim.queues import FifoResource, pass_through


def test_single_resource_hand_computation():
    link = FifoResource(name="uplink", rate=10.0)  # 10 units per second
    # arrivals at 0, 1, 5 with work 20, 5, 10 -> service 2, 0.5, 1
    hops = [link.enqueue(a, link.service_time(w)) for a, w in [(0.0, 20.0), (1.0, 5.0), (5.0, 10.0)]]
    assert [h.start for h in hops] == [0.0, 2.0, 5.0]
    assert [h.finish for h in hops] == [2.0, 2.5, 6.0]
    assert [h.waiting for h in hops] == [0.0, 1.0, 0.0]
    assert link.backlog(5.5) == pytest.approx(0.5)


def test_tandem_hand_computation_with_fixed_delay():
    up, cpu = FifoResource(name="up", rate=2.0), FifoResource(name="cpu", rate=4.0, fixed_delay=0.25)
    first = pass_through([up, cpu], 0.0, [up.service_time(4.0), cpu.service_time(8.0)])
    second = pass_through([up, cpu], 0.5, [up.service_time(2.0), cpu.service_time(2.0)])
    # first: up 0 -> 2, cpu 2 -> 4 (+0.25 propagation) = 4.25
    assert [h.finish for h in first] == [2.0, 4.25]
    # second: up waits until 2, 2 -> 3; cpu busy until 4 (propagation does not occupy it): 4 -> 4.5 (+0.25)
    assert [h.start for h in second] == [2.0, 4.0]
    assert [h.finish for h in second] == [3.0, 4.75]


def test_fifo_order_and_no_negative_queueing():
    res = FifoResource(name="q", rate=1.0)
    arrivals = [0.0, 0.1, 0.2, 3.0, 3.05]
    finishes = [res.enqueue(a, 1.0).finish for a in arrivals]
    assert finishes == sorted(finishes)
    with pytest.raises(ValueError):
        res.enqueue(4.0, -1.0)
    with pytest.raises(ValueError):
        FifoResource(name="no rate").service_time(1.0)
