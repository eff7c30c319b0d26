"""FIFO links and servers whose finish times are computed when a job arrives.

A FIFO resource serves one job at a time in arrival order, so a job's finish time is fixed the moment it
is enqueued: ``start = max(arrival, free_at)``, ``finish = start + service``.  Later arrivals cannot change
it, which is what lets the V2X environment give each offloading decision its exact latency at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Hop:
    """One job's passage through one FIFO resource."""

    resource: str
    arrival: float
    start: float
    finish: float

    @property
    def waiting(self) -> float:
        """Time spent queueing before service."""
        return self.start - self.arrival


@dataclass(kw_only=True)
class FifoResource:
    """A first-in-first-out link or server.

    Parameters
    ----------
    name
        Label used in :class:`Hop` records.
    rate
        Service rate (bits/s for a link, cycles/s for a server); ``None`` means the service time is given
        directly to :meth:`enqueue`.
    fixed_delay
        Constant added after service (propagation), not occupying the resource.
    """

    name: str
    rate: float | None = None
    fixed_delay: float = 0.0
    free_at: float = field(default=0.0)

    def service_time(self, work: float) -> float:
        """Seconds of service for ``work`` units at this resource's rate."""
        if self.rate is None:
            raise ValueError(f"resource {self.name!r} has no rate; pass the service time")
        return work / self.rate

    def backlog(self, now: float) -> float:
        """Seconds of work ahead of a job arriving at ``now``."""
        return max(0.0, self.free_at - now)

    def enqueue(self, arrival: float, service: float) -> Hop:
        """Serve a job arriving at ``arrival`` needing ``service`` seconds; return its hop record."""
        if service < 0:
            raise ValueError(f"negative service time {service}")
        start = max(arrival, self.free_at)
        self.free_at = start + service
        return Hop(resource=self.name, arrival=arrival, start=start, finish=self.free_at + self.fixed_delay)

    def reset(self) -> None:
        """Empty the resource."""
        self.free_at = 0.0


def pass_through(resources: list[FifoResource], arrival: float, services: list[float]) -> list[Hop]:
    """Send one job through ``resources`` in order; each hop starts when the previous one finishes."""
    hops, t = [], arrival
    for res, s in zip(resources, services, strict=True):
        hop = res.enqueue(t, s)
        hops.append(hop)
        t = hop.finish
    return hops
