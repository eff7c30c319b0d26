"""Alpha-beta communication cost model for ring collectives.

A message of ``n`` bytes between two processes costs ``alpha + n * beta``.
The ring algorithms move ``(p - 1) / p`` of the payload per process per
phase: an allreduce is a reduce-scatter plus an allgather, ``2 (p - 1)``
steps.  Localhost timings say nothing about a cluster network, so every
chapter that extrapolates time states these constants and sweeps them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Network:
    """Latency ``alpha`` (s per message) and inverse bandwidth ``beta`` (s per byte)."""

    alpha: float = 5e-6
    beta: float = 1.0 / 10e9

    def __post_init__(self) -> None:
        if self.alpha < 0 or self.beta < 0:
            raise ValueError(f"alpha and beta must be >= 0, got {self.alpha}, {self.beta}")


def ring_allreduce_bytes(nbytes: float, p: int) -> float:
    """Bytes each process sends in a ring allreduce of ``nbytes`` over ``p`` processes."""
    return 0.0 if p <= 1 else 2.0 * (p - 1) / p * nbytes


def ring_allgather_bytes(nbytes_total: float, p: int) -> float:
    """Bytes each process sends in a ring allgather whose result is ``nbytes_total``."""
    return 0.0 if p <= 1 else (p - 1) / p * nbytes_total


def ring_allreduce_time(nbytes: float, p: int, net: Network) -> float:
    """Time of a ring allreduce: ``2 (p - 1) alpha + 2 (p - 1) / p * n * beta``."""
    return 0.0 if p <= 1 else 2 * (p - 1) * net.alpha + ring_allreduce_bytes(nbytes, p) * net.beta


def ring_allgather_time(nbytes_total: float, p: int, net: Network) -> float:
    """Time of a ring allgather: ``(p - 1) alpha + (p - 1) / p * n * beta``."""
    return 0.0 if p <= 1 else (p - 1) * net.alpha + ring_allgather_bytes(nbytes_total, p) * net.beta
