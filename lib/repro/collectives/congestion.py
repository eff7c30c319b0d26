"""Platform-aware alpha-beta costs: link sharing, path lengths and link energy.

The closed forms of :mod:`repro.collectives.cost` assume one latency and one
bandwidth for every message.  On a real topology two things change: a
message's start-up is the latency summed along its route, and messages of the
same step that cross one link share its bandwidth.  :func:`congestion_cost`
charges, per step, every message ``sum(latencies on its route) + bytes *
max over its links (flows on the link / bandwidth)`` and a step its slowest
message (a bulk-synchronous estimate: an upper bound on a contention-free
step and exact when the flows of a step are equal).  :func:`step_link_flows`
exposes the per-step link load, and :func:`link_energy` turns the bytes a
schedule puts on every link into network energy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from repro.hpc.ir import Schedule, messages
from repro.hpc.platforms import Platform


def step_link_flows(schedule: Schedule, platform: Platform,
                    placement: list[int] | None = None) -> list[dict[str, int]]:
    """Number of messages crossing every link, per step.

    Parameters
    ----------
    schedule, platform:
        The schedule and the network it runs on.
    placement:
        Host of every rank (default: rank ``r`` on host ``r``).

    Returns
    -------
    list[dict[str, int]]
        ``out[s][link]`` = messages of step ``s`` whose route uses ``link``
        (zero-length messages count: they still occupy a start-up).
    """
    host = list(range(schedule.p)) if placement is None else list(placement)
    out: list[dict[str, int]] = [dict() for _ in schedule.steps]
    for msg in messages(schedule):
        for link in platform.routes[(host[msg.src], host[msg.dst])]:
            out[msg.step][link] = out[msg.step].get(link, 0) + 1
    return out


def max_link_flows(schedule: Schedule, platform: Platform, placement: list[int] | None = None,
                   links: Callable[[str], bool] | None = None,
                   flows: list[dict[str, int]] | None = None) -> list[int]:
    """Largest number of messages sharing one link, per communicating step.

    ``links`` optionally restricts the count to links whose name it accepts
    (e.g. only inter-switch links).  Latency-only FATPIPE links are ignored.
    ``flows`` may pass a precomputed :func:`step_link_flows`.
    """
    out = []
    active = set(schedule.comm_steps())
    if flows is None:
        flows = step_link_flows(schedule, platform, placement)
    for s, step_flows in enumerate(flows):
        if s not in active:
            continue
        vals = [n for name, n in step_flows.items()
                if platform.links[name].sharing != "FATPIPE" and (links is None or links(name))]
        out.append(max(vals, default=0))
    return out


def congestion_cost(schedule: Schedule, platform: Platform, itemsize: int = 4,
                    placement: list[int] | None = None, flows: list[dict[str, int]] | None = None) -> float:
    """Alpha-beta time of ``schedule`` on ``platform`` with link sharing (seconds).

    Per step, every message costs the latency summed along its route plus its
    bytes times the largest ``flows / bandwidth`` over the links it crosses
    (FATPIPE links are never shared); the step costs its slowest message and
    the schedule the sum of its steps.  ``flows`` may pass a precomputed
    :func:`step_link_flows` (it does not depend on the message sizes).
    """
    host = list(range(schedule.p)) if placement is None else list(placement)
    if flows is None:
        flows = step_link_flows(schedule, platform, host)
    links = platform.links
    shared = {name: link.sharing != "FATPIPE" for name, link in links.items()}
    latency: dict[tuple[int, int], float] = {}
    worst = [0.0] * len(schedule.steps)
    for msg in messages(schedule):
        pair = (host[msg.src], host[msg.dst])
        route = platform.routes[pair]
        lat = latency.get(pair)
        if lat is None:
            lat = latency[pair] = sum(links[x].latency for x in route)
        f = flows[msg.step]
        per_byte = max((f[x] if shared[x] else 1) / links[x].bandwidth for x in route)
        t = lat + msg.elements * itemsize * per_byte
        if t > worst[msg.step]:
            worst[msg.step] = t
    return sum(worst)


def link_bytes_on_platform(schedule: Schedule, platform: Platform, itemsize: int = 4,
                           placement: list[int] | None = None) -> dict[str, int]:
    """Total bytes the schedule puts on every link of the platform."""
    host = list(range(schedule.p)) if placement is None else list(placement)
    out: dict[str, int] = {}
    for msg in messages(schedule):
        for link in platform.routes[(host[msg.src], host[msg.dst])]:
            out[link] = out.get(link, 0) + msg.elements * itemsize
    return out


@dataclass(frozen=True, kw_only=True)
class LinkPower:
    """Peak power (W) of one directed link of a class, and its idle share of the peak."""

    peak_w: float
    idle_fraction: float = 0.85


def link_energy(schedule: Schedule, platform: Platform, duration: float,
                power: Mapping[str, LinkPower], classify: Callable[[str], str | None],
                itemsize: int = 4) -> float:
    """Network energy (J) of one collective of length ``duration`` seconds.

    Every link draws its idle power for the whole ``duration`` and the rest of
    its peak while busy; busy time = bytes on the link / bandwidth (capped at
    ``duration``).  ``classify(link_name)`` gives the power class of a link
    (a key of ``power``) or ``None`` for links that are not counted.
    """
    used = link_bytes_on_platform(schedule, platform, itemsize)
    total = 0.0
    for name, link in platform.links.items():
        cls = classify(name)
        if cls is None:
            continue
        lp = power[cls]
        busy = min(used.get(name, 0) / link.bandwidth, duration)
        total += lp.peak_w * (lp.idle_fraction * duration + (1 - lp.idle_fraction) * busy)
    return total


def contention_of(builder: str, kw: dict[str, Any]) -> tuple[int, float]:
    """``(hosts per switch/leaf, flows sharing an uplink)`` of a DLN or fat-tree platform."""
    if builder == "distributed_loop":
        p = kw["hosts_per_switch"]
        return p, p / kw.get("chord_copies", 1)
    if builder == "fat_tree":
        return kw["hosts_per_leaf"], kw["hosts_per_leaf"] / kw["spines"]
    raise ValueError(f"no contention model for {builder!r}")
