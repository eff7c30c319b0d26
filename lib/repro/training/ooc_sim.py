"""Two-stream (compute and copy) model of one out-of-core training iteration, and the policy search.

A chain of blocks ``b = 0..L-1`` has forward time ``F_b``, backward time ``B_b``, saved activation bytes
``A_b``, input bytes ``I_b`` and weight bytes ``W_b``; each block is ``keep``, ``swap`` or ``recompute``
(:data:`repro.training.memory.POLICIES`).  With a host link of ``bandwidth`` bytes/s:

- forward: the compute stream runs ``F_0 .. F_{L-1}`` back to back; the swap-out of a swapped block's
  ``A_b`` starts on the copy stream when ``F_b`` ends (transfers are served in order);
- backward (``L-1`` down to 0): the swap-in of block ``b`` starts when the copy stream is free, its
  swap-out is done and, with ``prefetch``, the backward of block ``b+1`` has started (one block of
  look-ahead; without it, when that backward has ended); ``B_b`` starts when the compute stream is free
  and the swap-in is done; a recomputed block costs ``F_b + B_b``;
- ``overlap=False`` puts the transfers on the compute stream (a synchronous swap, as in our disk-backed
  runs).

Device memory: weights, the activations of kept blocks, the inputs of recomputed blocks, plus the
largest transient working set of the backward (the block being re-materialised, and the prefetched one).
This reconstructs the concurrency analysis that KARMA's abstract describes; the paper's own model was not
available.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from repro.training.memory import POLICIES, BlockProfile


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """The simulated iteration of one policy.

    Attributes
    ----------
    time
        Iteration time (end of the last backward), seconds.
    forward_end
        End of the forward pass on the compute stream.
    peak_bytes
        Modelled peak device memory.
    compute_busy
        Seconds of compute (forward, backward and recomputation).
    transfer_busy
        Seconds the copy stream (or, without overlap, the compute stream) spends moving activations.
    """

    time: float
    forward_end: float
    peak_bytes: float
    compute_busy: float
    transfer_busy: float


def peak_memory(blocks: Sequence[BlockProfile], policy: Sequence[str], prefetch: bool = True) -> float:
    """Modelled peak device bytes of ``policy`` (see the module docstring)."""
    weights = sum(b.weight_bytes for b in blocks)
    resident = sum(b.activation_bytes if p == "keep" else b.input_bytes if p == "recompute" else 0
                   for b, p in zip(blocks, policy))
    transient = 0.0
    for i, (b, p) in enumerate(zip(blocks, policy)):
        here = b.activation_bytes if p != "keep" else 0
        ahead = blocks[i - 1].activation_bytes if (prefetch and i > 0 and policy[i - 1] == "swap") else 0
        transient = max(transient, here + ahead)
    return weights + resident + transient


def simulate(blocks: Sequence[BlockProfile], policy: Sequence[str], bandwidth: float, prefetch: bool = True,
             overlap: bool = True) -> Schedule:
    """Simulate one iteration of ``policy`` (see the module docstring).

    Parameters
    ----------
    blocks
        Per-block costs.
    policy
        One of ``keep``/``swap``/``recompute`` per block.
    bandwidth
        Host link bandwidth in bytes per second (``float('inf')`` for a free link).
    prefetch
        Start a swap-in one block ahead of its backward.
    overlap
        Run transfers on a separate copy stream; ``False`` serialises them with compute.

    Returns
    -------
    Schedule
    """
    if len(policy) != len(blocks):
        raise ValueError(f"policy has {len(policy)} entries for {len(blocks)} blocks")
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
    if set(policy) - set(POLICIES):
        raise ValueError(f"unknown policy in {policy}; choose from {POLICIES}")
    xfer = [b.activation_bytes / bandwidth for b in blocks]
    n = len(blocks)
    compute = copy = 0.0
    out_done = [0.0] * n
    moved = 0.0
    for i, (b, p) in enumerate(zip(blocks, policy)):
        compute += b.forward_s
        if p == "swap":
            moved += xfer[i]
            if overlap:
                copy = max(copy, compute) + xfer[i]
            else:
                compute += xfer[i]
                copy = compute
            out_done[i] = copy
    forward_end = compute
    upper_start = upper_end = forward_end  # the backward of the block above (none above the last one)
    busy = sum(b.forward_s for b in blocks)
    for i in reversed(range(n)):
        b, p = blocks[i], policy[i]
        ready = compute
        if p == "swap":
            moved += xfer[i]
            if overlap:
                gate = upper_start if prefetch else upper_end
                copy = max(copy, out_done[i], gate) + xfer[i]
                ready = max(compute, copy)
            else:
                compute += xfer[i]
                ready = compute
        work = b.backward_s + (b.forward_s if p == "recompute" else 0.0)
        busy += work
        upper_start = ready
        compute = ready + work
        upper_end = compute
    return Schedule(
        time=compute,
        forward_end=forward_end,
        peak_bytes=peak_memory(blocks, policy, prefetch),
        compute_busy=busy,
        transfer_busy=moved,
    )


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A policy with its simulated schedule; ``feasible`` when its peak fits the capacity."""

    policy: tuple[str, ...]
    schedule: Schedule
    feasible: bool


def _plan(blocks, policy, bandwidth, capacity, prefetch) -> Plan:
    s = simulate(blocks, policy, bandwidth, prefetch)
    return Plan(policy=tuple(policy), schedule=s, feasible=s.peak_bytes <= capacity)


def _better(a: Plan, b: Plan | None) -> bool:
    if b is None:
        return True
    if a.feasible != b.feasible:
        return a.feasible
    if a.feasible:
        return a.schedule.time < b.schedule.time
    return a.schedule.peak_bytes < b.schedule.peak_bytes


def _local_search(blocks, start: Plan, bandwidth, capacity, allowed, prefetch) -> Plan:
    best = start
    while True:
        step = None
        for i in range(len(blocks)):
            for p in allowed:
                if p == best.policy[i]:
                    continue
                cand = _plan(blocks, best.policy[:i] + (p,) + best.policy[i + 1 :], bandwidth, capacity, prefetch)
                if _better(cand, best) and _better(cand, step):
                    step = cand
        if step is None:
            return best
        best = step


def greedy(
    blocks: Sequence[BlockProfile], bandwidth: float, capacity: float, allowed: Sequence[str] = POLICIES, prefetch: bool = True
) -> Plan:
    """Capacity-based local search (our reconstruction of KARMA's strategy).

    Starts from every block on one memory-saving allowed policy (swap everything; recompute everything),
    then repeatedly applies the single-block change that most reduces the modelled time while the peak
    stays within ``capacity`` (while infeasible: the change that most reduces the peak), until none helps;
    returns the better of the two searches.

    Parameters
    ----------
    blocks, bandwidth, prefetch
        As in :func:`simulate`.
    capacity
        Device memory in bytes.
    allowed
        The policies the search may use (``("keep", "swap")`` is a swap-only planner, and so on).

    Returns
    -------
    Plan
        The plan found; ``feasible`` is False if no start point leads to one that fits.
    """
    starts = [p for p in ("swap", "recompute") if p in allowed] or ["keep"]
    best = None
    for p in starts:
        found = _local_search(
            blocks, _plan(blocks, [p] * len(blocks), bandwidth, capacity, prefetch), bandwidth, capacity, allowed, prefetch
        )
        if _better(found, best):
            best = found
    if best is None:
        raise ValueError("no policy was searched (an empty chain or no allowed policy)")
    return best


def exhaustive(
    blocks: Sequence[BlockProfile],
    bandwidth: float,
    capacity: float,
    allowed: Sequence[str] = POLICIES,
    prefetch: bool = True,
    max_blocks: int = 10,
) -> Plan:
    """The best plan over all ``len(allowed) ** L`` policies (``L <= max_blocks``)."""
    if len(blocks) > max_blocks:
        raise ValueError(f"{len(blocks)} blocks: exhaustive search is limited to {max_blocks}")
    best = None
    for pol in itertools.product(allowed, repeat=len(blocks)):
        cand = _plan(blocks, pol, bandwidth, capacity, prefetch)
        if _better(cand, best):
            best = cand
    if best is None:
        raise ValueError("no policy was searched (an empty chain or no allowed policy)")
    return best
