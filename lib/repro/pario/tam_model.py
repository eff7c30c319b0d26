"""Communication time of plain two-phase I/O and of TAM at scale (endpoint model and SimGrid).

Plain two-phase: all ``N ppn`` ranks send to the ``N`` global aggregators
(one per node) in one unordered round, ROMIO's default.  TAM with ``k`` INAs
per node: layer 1 moves every member's data to its INA through shared memory
(start-up ``alpha_shm``, memory bandwidth, the same queue term for the
``ppn/k - 1`` receives the INA posts) and the INA heap-merges its members'
pieces (``merge`` seconds per piece and per ``log2`` of the group size);
layer 2 is the unordered exchange from the ``N k`` INAs, with the members'
byte counts summed (:func:`repro.pario.intranode.ina_counts`).  The
inter-node exchange of either can also be simulated by SimGrid on a
Dragonfly, with the INAs on their members' node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.hpc.platforms import Platform
from repro.pario.exchange_sim import Pattern, SimPoint, simulate_kernel
from repro.pario.intranode import IntraNodeLayout, ina_aggregators, ina_counts
from repro.pario.kernels import UNORDERED_TEXT, EndpointModel, RoundLoads, round_loads, round_table


@dataclass(frozen=True, kw_only=True)
class NodeConstants:
    """Intra-node constants of layer 1 (seconds and bytes/s).

    Attributes
    ----------
    alpha_shm:
        Start-up of one shared-memory message.
    memory_bandwidth:
        Bandwidth of the INA's copy-in.
    merge:
        Heap-merge cost per piece and per ``log2(group size)``.
    """

    alpha_shm: float
    memory_bandwidth: float
    merge: float


@dataclass(frozen=True, kw_only=True)
class TamTime:
    """Modelled time of the two layers (s)."""

    layer1: float
    layer2: float

    @property
    def total(self) -> float:
        """Both layers."""
        return self.layer1 + self.layer2


def plain_loads(pattern: Pattern) -> RoundLoads:
    """Round loads of plain two-phase I/O's unordered exchange (every rank sends)."""
    return round_loads(round_table(UNORDERED_TEXT, pattern.counts, pattern.aggregators), pattern.counts)


def plain_time(pattern: Pattern, model: EndpointModel) -> float:
    """Unordered exchange of plain two-phase I/O (every rank sends), seconds."""
    return plain_loads(pattern).time(model)


def layer1_time(pattern: Pattern, layout: IntraNodeLayout, model: EndpointModel, node: NodeConstants) -> float:
    """The slowest INA's gather and merge, seconds (0 when every rank is its own INA)."""
    g = layout.group_size
    if g == 1:
        return 0.0
    sent = pattern.counts.sum(axis=1).astype(np.float64)
    members_bytes = sent.reshape(-1, g)[:, 1:].sum(axis=1)
    pieces = pattern.pieces.astype(np.float64).reshape(-1, g).sum(axis=1)
    n = g - 1
    per_ina = (node.alpha_shm + members_bytes / node.memory_bandwidth + n * (model.o0 + model.o1 * n)
               + pieces * np.log2(g) * node.merge)
    return float(per_ina.max())


def layer2_pattern(pattern: Pattern, layout: IntraNodeLayout) -> Pattern:
    """The INAs' all-to-many pattern: group sums of the counts, one global aggregator per node."""
    counts = ina_counts(pattern.counts, layout)
    pieces = pattern.pieces.reshape(-1, layout.group_size).sum(axis=1)
    return Pattern(p=counts.shape[0], aggregators=tuple(ina_aggregators(layout)), counts=counts, pieces=pieces)


def layer2_loads(pattern: Pattern, layout: IntraNodeLayout) -> RoundLoads:
    """Round loads of TAM's layer 2 (the INAs' unordered exchange)."""
    inter = layer2_pattern(pattern, layout)
    return round_loads(round_table(UNORDERED_TEXT, inter.counts, inter.aggregators), inter.counts)


def tam_time(pattern: Pattern, layout: IntraNodeLayout, model: EndpointModel, node: NodeConstants,
             loads: RoundLoads | None = None) -> TamTime:
    """Modelled TAM communication time: layer 1 (intra-node) and layer 2 (unordered, INAs only).

    ``loads`` are :func:`layer2_loads` of the same pattern and layout, when already computed.
    """
    loads = layer2_loads(pattern, layout) if loads is None else loads
    return TamTime(layer1=layer1_time(pattern, layout, model, node), layer2=loads.time(model))


def simulate_layer2(pattern: Pattern, layout: IntraNodeLayout, platform: Platform) -> SimPoint:
    """SimGrid time of TAM's inter-node exchange, with every INA on its own host (rank ``ina``)."""
    return simulate_kernel(layer2_pattern(pattern, layout), UNORDERED_TEXT, platform, placement=layout.inas())
