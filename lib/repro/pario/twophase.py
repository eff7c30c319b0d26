"""ROMIO-style two-phase collective write: file domains, request flattening, exchange plan.

ROMIO's generic collective write (``ADIOI_GEN_WriteStridedColl``) works in
two phases.  The aggregate access range ``[min offset, max end)`` of all
ranks is cut into ``A`` contiguous *file domains*, one per aggregator
(``cb_nodes``); each rank's flattened ``(offset, length)`` requests are cut at
domain boundaries and every piece is sent to the aggregator that owns it
(phase 1, the all-to-many exchange); each aggregator then assembles its
domain and writes it with contiguous file accesses (phase 2).

This module is the pure, MPI-free part: :func:`file_domains` (even split,
optionally aligned to a stripe size as ROMIO does for Lustre),
:func:`aggregator_ranks`, :func:`split_by_domain` and :func:`exchange_plan`,
which gives, for every (sender, aggregator) pair, the pieces and their byte
count.  :mod:`repro.pario.kernels` turns the plan into a schedule of the
shared IR, and :mod:`repro.pario.mpi_twophase` runs it on MPI.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.pario.decomp import Decomposition, Requests, RunTable


@dataclass(frozen=True, kw_only=True)
class FileDomain:
    """The half-open byte range ``[lo, hi)`` one aggregator owns."""

    lo: int
    hi: int

    @property
    def size(self) -> int:
        """Bytes in the domain."""
        return self.hi - self.lo


def file_domains(start: int, end: int, aggregators: int, stripe: int | None = None) -> list[FileDomain]:
    """Split ``[start, end)`` into ``aggregators`` contiguous domains.

    Without ``stripe`` the size is ``ceil((end - start) / A)`` (ROMIO's even
    split; trailing domains may be short or empty).  With ``stripe`` every
    inner boundary is moved down to a multiple of ``stripe``, so that no two
    aggregators touch the same stripe (ROMIO's Lustre driver aligns domains
    to stripes for the same reason).

    Parameters
    ----------
    start, end:
        The aggregate access range, ``0 <= start <= end``.
    aggregators:
        Number of domains ``A >= 1``.
    stripe:
        Stripe size in bytes, or ``None``.

    Returns
    -------
    list[FileDomain]
        ``A`` disjoint domains, in file order, whose union is ``[start, end)``.
    """
    if aggregators < 1 or not 0 <= start <= end:
        raise ValueError(f"bad domain request: [{start}, {end}) over {aggregators} aggregators")
    if stripe is not None and stripe < 1:
        raise ValueError(f"stripe must be >= 1, got {stripe}")
    size = -(-(end - start) // aggregators) if end > start else 0
    bounds = [min(start + i * size, end) for i in range(aggregators + 1)]
    if stripe is not None:
        inner = [max(start, b // stripe * stripe) for b in bounds[1:-1]]
        bounds = [start, *inner, end]
        bounds = list(np.maximum.accumulate(bounds))
    return [FileDomain(lo=int(lo), hi=int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def aggregator_ranks(p: int, aggregators: int) -> list[int]:
    """Ranks acting as aggregators: ``A`` ranks spread evenly over ``0..p-1``.

    ROMIO places one aggregator per node by default; on a single host we
    spread them (rank ``floor(i * p / A)`` for domain ``i``).
    """
    if not 1 <= aggregators <= p:
        raise ValueError(f"need 1 <= aggregators <= p, got A={aggregators}, p={p}")
    return [i * p // aggregators for i in range(aggregators)]


def split_by_domain(requests: Requests, domains: list[FileDomain]) -> list[Requests]:
    """Cut ``requests`` at domain boundaries: the pieces that fall in each domain.

    Parameters
    ----------
    requests:
        One rank's sorted requests.
    domains:
        Contiguous, ordered file domains covering every request.

    Returns
    -------
    list[Requests]
        ``out[a]`` = the pieces inside ``domains[a]``, in file order (the
        concatenation over ``a`` is the original byte sequence).
    """
    bounds = np.array([d.lo for d in domains] + [domains[-1].hi], dtype=np.int64)
    out = []
    lo_req, hi_req = requests.offsets, requests.offsets + requests.lengths
    for a, dom in enumerate(domains):
        lo = np.maximum(lo_req, bounds[a])
        hi = np.minimum(hi_req, bounds[a + 1])
        keep = hi > lo
        out.append(Requests(offsets=lo[keep], lengths=hi[keep] - lo[keep]))
    covered = sum(r.nbytes for r in out)
    if covered != requests.nbytes:
        raise ValueError(f"domains cover {covered} of {requests.nbytes} requested bytes")
    return out


@dataclass(frozen=True, kw_only=True)
class ExchangePlan:
    """Who sends which pieces to which aggregator in phase 1.

    Attributes
    ----------
    p:
        Number of ranks.
    aggregators:
        Rank of the aggregator of every domain.
    domains:
        The file domains, one per aggregator.
    pieces:
        ``pieces[s][a]`` = the :class:`Requests` of rank ``s`` inside domain ``a``.
    """

    p: int
    aggregators: tuple[int, ...]
    domains: tuple[FileDomain, ...]
    pieces: tuple[tuple[Requests, ...], ...]

    @property
    def counts(self) -> np.ndarray:
        """``counts[s, a]`` = bytes rank ``s`` sends to aggregator ``a`` (``p x A``)."""
        return np.array([[r.nbytes for r in row] for row in self.pieces], dtype=np.int64).reshape(
            self.p, len(self.aggregators))

    @property
    def num_aggregators(self) -> int:
        """``A``."""
        return len(self.aggregators)


def access_range(decomp: Decomposition) -> tuple[int, int]:
    """``(min offset, max end)`` over all ranks' requests (``(0, 0)`` if nothing is requested)."""
    starts = [int(r.offsets[0]) for r in decomp.ranks if r.count]
    ends = [int(r.offsets[-1] + r.lengths[-1]) for r in decomp.ranks if r.count]
    return (min(starts), max(ends)) if starts else (0, 0)


def exchange_plan(decomp: Decomposition, aggregators: int, stripe: int | None = None) -> ExchangePlan:
    """The phase-1 plan of a two-phase write of ``decomp`` over ``aggregators`` domains."""
    start, end = access_range(decomp)
    domains = file_domains(start, end, aggregators, stripe)
    pieces = tuple(tuple(split_by_domain(r, domains)) for r in decomp.ranks)
    return ExchangePlan(
        p=decomp.p,
        aggregators=tuple(aggregator_ranks(decomp.p, aggregators)),
        domains=tuple(domains),
        pieces=pieces,
    )


def pair_counts(runs: RunTable, domains: list[FileDomain]) -> np.ndarray:
    """Bytes every rank sends to every domain's aggregator, for a whole run table at once.

    The vectorised equivalent of :func:`exchange_plan`'s ``counts`` for
    thousands of ranks: every run is cut at the domain boundaries it crosses.

    Returns
    -------
    numpy.ndarray
        ``p x A`` int64 byte counts.
    """
    bounds = np.array([d.lo for d in domains] + [domains[-1].hi], dtype=np.int64)
    A = len(domains)
    counts = np.zeros((runs.p, A), dtype=np.int64)
    lo, hi, owner = runs.starts.astype(np.int64), runs.starts + runs.lengths, runs.owner
    while lo.size:
        dom = np.clip(np.searchsorted(bounds, lo, side="right") - 1, 0, A - 1)
        cut = np.minimum(hi, bounds[dom + 1])
        np.add.at(counts, (owner, dom), cut - lo)
        rest = cut < hi
        lo, hi, owner = cut[rest], hi[rest], owner[rest]
    return counts
