"""Intra-node aggregation (TAM) in front of two-phase I/O: layout, k-way merge, coalescing.

Kang et al. (TPDS 2020) add a first layer to collective I/O: the processes of
a node are split into ``k`` groups of consecutive ranks, the lowest rank of
each group is its *intra-node aggregator* (INA); members send their flattened
requests and data to their INA, which k-way merges the members' sorted offset
lists and coalesces adjacent pieces; only the INAs then call the collective
write, so the all-to-many exchange has ``N k`` senders instead of ``N ppn``.
(PnetCDF's ``ncmpio_intra_node.c`` is the production implementation.)

Everything here is MPI-free: :class:`IntraNodeLayout` (rank-to-node map,
groups and INAs, so 8 or 16 ranks on one host can act as 2 or 4 nodes),
:func:`merge_requests` (``heapq.merge`` over the members' lists, with the
permutation that reorders their data), and :func:`ina_counts`, the
(INA, global aggregator) byte counts of layer 2 at any scale.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from repro.pario.decomp import Requests


@dataclass(frozen=True, kw_only=True)
class IntraNodeLayout:
    """Which rank is on which node, and which INA serves it.

    Attributes
    ----------
    p:
        Number of ranks.
    ranks_per_node:
        ``ppn``; node of rank ``r`` is ``r // ppn`` (``p`` must be a multiple).
    per_node:
        ``k``, INAs per node (a divisor of ``ppn``).
    """

    p: int
    ranks_per_node: int
    per_node: int

    def __post_init__(self) -> None:
        if self.ranks_per_node < 1 or self.p % self.ranks_per_node:
            raise ValueError(f"p={self.p} is not a multiple of ranks_per_node={self.ranks_per_node}")
        if self.per_node < 1 or self.ranks_per_node % self.per_node:
            raise ValueError(f"per_node={self.per_node} must divide ranks_per_node={self.ranks_per_node}")

    @property
    def nodes(self) -> int:
        """Number of nodes ``N``."""
        return self.p // self.ranks_per_node

    @property
    def group_size(self) -> int:
        """Ranks per INA group, ``ppn / k``."""
        return self.ranks_per_node // self.per_node

    def node_of(self, rank: int) -> int:
        """Node of ``rank``."""
        return rank // self.ranks_per_node

    def ina_of(self, rank: int) -> int:
        """The INA serving ``rank``: the lowest rank of its group of consecutive ranks."""
        return rank - rank % self.group_size

    def inas(self) -> list[int]:
        """Every INA rank, in rank order (``N k`` of them)."""
        return list(range(0, self.p, self.group_size))

    def members(self, ina: int) -> list[int]:
        """Ranks served by ``ina`` (itself first)."""
        return list(range(ina, ina + self.group_size))


@dataclass(frozen=True, kw_only=True)
class MergedRequests:
    """An INA's merged view of its members' requests.

    Attributes
    ----------
    requests:
        Every member piece in file order (not coalesced).
    order:
        Permutation of the members' concatenated data (member order, then request
        order) into file order: ``merged_data = concatenated_data[order]``.
    extents:
        The merged pieces with adjacent ones coalesced (the INA's file view).
    """

    requests: Requests
    order: np.ndarray
    extents: Requests


def merge_requests(lists: list[Requests]) -> MergedRequests:
    """k-way heap merge of sorted request lists (``heapq.merge``), then coalescing.

    Parameters
    ----------
    lists:
        One sorted, non-overlapping :class:`Requests` per member; the members'
        pieces must not overlap one another (one writer per byte).

    Returns
    -------
    MergedRequests
        The merged pieces, the data permutation and the coalesced extents.
    """
    starts = np.cumsum([0] + [r.nbytes for r in lists])
    streams = []
    for m, r in enumerate(lists):
        data_pos = starts[m] + np.concatenate([[0], np.cumsum(r.lengths)[:-1]]) if r.count else []
        streams.append(zip(r.offsets.tolist(), r.lengths.tolist(), list(map(int, data_pos))))
    merged = list(heapq.merge(*streams))
    if not merged:
        empty = np.zeros(0, dtype=np.int64)
        return MergedRequests(
            requests=Requests(offsets=empty, lengths=empty), order=empty, extents=Requests(offsets=empty, lengths=empty)
        )
    off, ln, pos = (np.array(col, dtype=np.int64) for col in zip(*merged))
    reqs = Requests(offsets=off, lengths=ln)  # checks sorted and non-overlapping
    order = np.repeat(pos - np.concatenate([[0], np.cumsum(ln)[:-1]]), ln) + np.arange(int(ln.sum()))
    return MergedRequests(requests=reqs, order=order, extents=reqs.coalesced())


def ina_counts(counts: np.ndarray, layout: IntraNodeLayout) -> np.ndarray:
    """Layer-2 byte counts: rows of ``counts`` (``p x A``) summed over each INA's group."""
    if counts.shape[0] != layout.p:
        raise ValueError(f"counts has {counts.shape[0]} rows, layout has {layout.p} ranks")
    return counts.reshape(layout.p // layout.group_size, layout.group_size, -1).sum(axis=1)


def ina_aggregators(layout: IntraNodeLayout) -> list[int]:
    """Global aggregators of layer 2 among the INAs (index into :meth:`IntraNodeLayout.inas`): one per node."""
    return [node * layout.per_node for node in range(layout.nodes)]
