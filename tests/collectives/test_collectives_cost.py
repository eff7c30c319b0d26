"""Closed-form alpha-beta costs against the schedules' own step and byte counts.

The structural invariants of the specs hold as well.
"""

from __future__ import annotations

import math

import pytest

from repro.collectives.algorithms import ALGORITHMS, build_schedule, closed_form_cost, parameter_grid
from repro.collectives.cost import schedule_cost
from repro.hpc.ir import link_bytes, messages, total_link_bytes

# alpha-only counts start-ups, beta-only bytes, gamma-only reduced bytes; then a mix.
MODELS = [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (2e-6, 1e-9, 3e-10)]
ITEMSIZE = 4


def divisible_n(p: int, params: dict) -> int:
    """A length every block split of the algorithm divides evenly (even for 2dfc halves)."""
    return 2 * math.lcm(*range(1, p + 1)) * params.get("segments", 1)


@pytest.mark.parametrize("p", range(1, 17))
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_closed_form_equals_schedule_cost(name: str, p: int) -> None:
    """For every parameterisation, the closed form equals the cost summed step by step over the schedule (alpha: start-ups.

    Beta: bytes; gamma: reduced bytes).
    """
    for params in parameter_grid(name, p):
        n = divisible_n(p, params)
        sched = build_schedule(name, p, n, **params)
        for alpha, beta, gamma in MODELS:
            got = schedule_cost(sched, ITEMSIZE, alpha, beta, gamma)
            want = closed_form_cost(name, p, n * ITEMSIZE, alpha, beta, gamma, **params)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-18), (name, params, alpha, beta, gamma)


@pytest.mark.parametrize("p", range(1, 17))
def test_ring_has_2p_minus_2_steps_of_n_over_p(p: int) -> None:
    """Ring: 2(p-1) communicating steps; in each, every rank sends exactly one block of n/p elements to its right neighbour.

    The first p-1 steps reduce.
    """
    n = 12 * p
    sched = build_schedule("ring", p, n)
    assert len(sched.comm_steps()) == 2 * (p - 1)
    for s, row in enumerate(sched.steps):
        for st in row:
            assert len(st.sends) == 1 and len(st.recvs) == 1
            assert st.sends[0].peer == (st.rank + 1) % p
            assert sched.blocks_length(st.sends[0].blocks) == n // p
            assert st.recvs[0].op == ("sum" if s < p - 1 else "copy")


@pytest.mark.parametrize("p", [1, 2, 4, 8, 16])
def test_rabenseifner_power_of_two_formula(p: int) -> None:
    """dln-allreduce invariant.

    For p a power of two the schedule costs exactly 2 log2(p) alpha + 2 (p-1)/p n beta, in 2 log2(p) steps.
    """
    n, alpha, beta = 48 * 16, 3.0, 0.5
    sched = build_schedule("rabenseifner", p, n)
    assert len(sched.comm_steps()) == 2 * int(math.log2(p))
    want = 2 * math.log2(p) * alpha + 2 * (p - 1) / p * n * ITEMSIZE * beta
    assert schedule_cost(sched, ITEMSIZE, alpha, beta) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("p", range(1, 17))
def test_step_counts_of_tree_and_doubling_algorithms(p: int) -> None:
    """Recursive doubling: log2 p' steps (+2 for the fold-in); Rabenseifner 2 log2 p' (+2); binomial 2 ceil(log2 p).

    Bruck ceil(log2 p); pairwise p-1; 2dfc <= 2.
    """
    q = 1 << (p.bit_length() - 1)
    fold = 0 if q == p else 2
    lg = q.bit_length() - 1
    counts = {
        "recursive_doubling": lg + fold,
        "rabenseifner": 2 * lg + fold,
        "binomial": 2 * (p - 1).bit_length(),
        "bruck": (p - 1).bit_length(),
        "pairwise": p - 1,
        "linear": min(p - 1, 1),
    }
    for name, want in counts.items():
        assert len(build_schedule(name, p, 5).comm_steps()) == want, name
    for params in parameter_grid("2dfc", p):
        assert len(build_schedule("2dfc", p, 6, **params).comm_steps()) == (0 if p == 1 else 2)


@pytest.mark.parametrize("nodes,k", [(1, 4), (2, 2), (2, 4), (4, 2), (3, 3), (4, 4)])
def test_lr_lr_startups_and_internode_volume(nodes: int, k: int) -> None:
    """multileader-allreduce invariants.

    Start-ups drop from 2(P-1) to 2(N-1) + 2(k-1), while the bytes each node injects into the inter-node
    network equal the flat ring's 2 (N-1)/N n.
    """
    p, n = nodes * k, 24 * 36
    sched = build_schedule("lr_lr", p, n, k=k)
    assert len(sched.comm_steps()) == 2 * (nodes - 1) + 2 * (k - 1)
    assert len(build_schedule("ring", p, n).comm_steps()) == 2 * (p - 1)
    out_of_node = {m: 0 for m in range(nodes)}
    for (src, dst), b in total_link_bytes(sched).items():
        if src // k != dst // k:
            out_of_node[src // k] += b
    for m, b in out_of_node.items():
        assert b == 2 * (nodes - 1) * n // nodes, m


@pytest.mark.parametrize("p,k", [(4, 2), (8, 2), (8, 4), (9, 3), (12, 3), (16, 4)])
def test_pipeline_moves_same_bytes_and_overlaps(p: int, k: int) -> None:
    """lr_lr_pipe with S=1 is lr_lr step for step (same per-step link bytes).

    Any S moves the same total bytes (per link when n divides evenly); with two or more segments the
    bandwidth-only cost is strictly lower than lr_lr's (overlap).
    """
    n = 2**6 * 3**3 * 5 * 7  # divisible by S*k*N for every case below
    base = build_schedule("lr_lr", p, n, k=k)
    assert link_bytes(build_schedule("lr_lr_pipe", p, n, k=k, segments=1)) == link_bytes(base)
    for segments in (2, 3, 4):
        pipe = build_schedule("lr_lr_pipe", p, n, k=k, segments=segments)
        assert total_link_bytes(pipe) == total_link_bytes(base)
        odd = build_schedule("lr_lr_pipe", p, n + 7, k=k, segments=segments)
        assert sum(m.elements for m in messages(odd)) == sum(
            m.elements for m in messages(build_schedule("lr_lr", p, n + 7, k=k)))
        assert schedule_cost(pipe, 4, 0.0, 1.0) < schedule_cost(base, 4, 0.0, 1.0)


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("m", [6, 7])
def test_2dfc_link_load_and_lower_bound(k: int, m: int) -> None:
    """a2a-2dfc invariants on a k x k grid: messages only travel along rows or columns (direct links of the 2dfc network).

    In each phase the busiest directed link carries k * ceil(m/2) elements (the striped halves); at alpha = 0
    the cost equals the multi-port lower bound m[(R-1)+(C-1)+2(R-1)(C-1)]/(R+C-2) beta = k m beta (m even),
    half that of the non-striped two-phase algorithm.
    """
    p = k * k
    sched = build_schedule("2dfc", p, m, rows=k)
    for msg in messages(sched):
        (r1, c1), (r2, c2) = divmod(msg.src, k), divmod(msg.dst, k)
        assert (r1 == r2) != (c1 == c2), msg
    per_step = link_bytes(sched)
    assert len(per_step) == 2
    for step in per_step:
        assert max(step.values()) == k * ((m + 1) // 2)
    if m % 2 == 0:
        R = C = k
        bound = m * ((R - 1) + (C - 1) + 2 * (R - 1) * (C - 1)) / (R + C - 2)
        assert schedule_cost(sched, 1, 0.0, 1.0) == pytest.approx(bound)
        assert closed_form_cost("2dfc", p, m, 1.0, 1.0) == pytest.approx(2 + k * m)
        plain = build_schedule("two_phase", p, m, rows=k)
        assert schedule_cost(plain, 1, 0.0, 1.0) == pytest.approx(2 * bound)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_bruck_power_of_two_formula(p: int) -> None:
    """Bruck for p = 2^j: log2(p) (alpha + p/2 m beta)."""
    m = 10
    want = math.log2(p) * (1.0 + p / 2 * m)
    assert schedule_cost(build_schedule("bruck", p, m), 1, 1.0, 1.0) == pytest.approx(want)
    assert closed_form_cost("bruck", p, m, 1.0, 1.0) == pytest.approx(want)


def test_single_port_model_serialises_a_ranks_messages() -> None:
    """Under the single-port model the direct all-to-all costs (p-1)(alpha + m beta), like pairwise.

    Under the multi-port model one step.
    """
    p, m = 6, 5
    lin = build_schedule("linear", p, m)
    assert schedule_cost(lin, 1, 1.0, 1.0, ports="single") == pytest.approx((p - 1) * (1 + m))
    assert schedule_cost(lin, 1, 1.0, 1.0, ports="multi") == pytest.approx(1 + m)
