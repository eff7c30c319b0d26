"""Two-layer aggregation (TAM) on MPI: gather to intra-node aggregators, then collective I/O among them.

Every rank calls :func:`tam_write` (or :func:`tam_read`).  Layer 1 runs on a
communicator per INA group (``comm.Split`` by INA): members send their piece
counts and lists (``gather``) and then their data (``Gatherv``) to the INA,
which merges them (:func:`repro.pario.intranode.merge_requests`).  Layer 2
runs on a communicator of the INAs only: MPI's own ``Write_at_all`` with the
merged, coalesced view (ROMIO's two-phase with ``cb_nodes`` = number of
nodes), or our two-phase write with a chosen kernel.  Ranks that are not INAs
make no MPI-IO call at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from repro.pario import mpiio
from repro.pario.decomp import Requests
from repro.pario.intranode import IntraNodeLayout, MergedRequests, merge_requests
from repro.pario.kernels import KernelSpec
from repro.pario.mpi_twophase import two_phase_write

#: Messages a member sends its INA per write: its piece lists, its byte count, its data.
LAYER1_MESSAGES = 3


@dataclass(frozen=True, kw_only=True)
class TamTiming:
    """One rank's view of a TAM write.

    Attributes
    ----------
    gather_s, io_s:
        Layer 1 (metadata and data to the INA, and the INA's heap merge), layer 2.
    is_ina:
        Whether this rank is an INA (an MPI-IO participant).
    pieces_in, pieces_out:
        Pieces the INA merged and extents it wrote after coalescing (0 on members).
    layer1_messages, layer1_bytes:
        Point-to-point messages and data bytes this rank sent to its INA (0 on INAs).
    """

    gather_s: float
    io_s: float
    is_ina: bool
    pieces_in: int
    pieces_out: int
    layer1_messages: int
    layer1_bytes: int


def _group_comms(comm: Any, layout: IntraNodeLayout) -> tuple[Any, Any]:
    """(communicator of my INA group, communicator of the INAs or ``MPI.COMM_NULL``)."""
    from mpi4py import MPI

    me = comm.Get_rank()
    group = comm.Split(color=layout.ina_of(me), key=me)
    inas = comm.Split(color=0 if layout.ina_of(me) == me else MPI.UNDEFINED, key=me)
    return group, inas


def _gather_to_ina(group: Any, requests: Requests, data: np.ndarray) -> tuple[MergedRequests | None, np.ndarray]:
    """Layer 1: piece lists then data to the group's rank 0; it returns the merge and the merged data."""
    from mpi4py import MPI

    lists = group.gather((requests.offsets, requests.lengths), root=0)
    sizes = group.gather(int(data.size), root=0)
    if group.Get_rank() == 0:
        recv = np.empty(int(sum(sizes)), dtype=np.uint8)
        group.Gatherv(data, [recv, sizes, MPI.BYTE], root=0)
        merged = merge_requests([Requests(offsets=np.asarray(o), lengths=np.asarray(n)) for o, n in lists])
        return merged, recv[merged.order]
    group.Gatherv(data, None, root=0)
    return None, np.zeros(0, dtype=np.uint8)


def tam_write(comm: Any, path: str, requests: Requests, data: np.ndarray, layout: IntraNodeLayout,
              hints: Mapping[str, str | int] | None = None, kernel: KernelSpec | str | None = None) -> TamTiming:
    """Write ``data`` to the bytes ``requests`` selects with two-layer aggregation.

    Parameters
    ----------
    comm:
        The communicator (collective: every rank calls); its size is ``layout.p``.
    path:
        Output file.
    requests, data:
        This rank's pieces and their bytes, in request order.
    layout:
        Rank-to-node map and INAs per node.
    hints:
        MPI-IO hints of layer 2 (``cb_nodes`` defaults to the number of nodes).
    kernel:
        ``None``: layer 2 is MPI's ``Write_at_all``; otherwise our two-phase
        write among the INAs with this exchange kernel and one aggregator per node.
    """
    if comm.Get_size() != layout.p:
        raise ValueError(f"layout is for {layout.p} ranks, communicator has {comm.Get_size()}")
    data = np.ascontiguousarray(data, dtype=np.uint8)
    group, inas = _group_comms(comm, layout)
    t0 = time.perf_counter()
    merged, merged_data = _gather_to_ina(group, requests, data)
    is_ina = merged is not None
    t1 = t2 = time.perf_counter()
    if merged is not None:
        if kernel is None:
            mpiio.write_all(inas, path, merged.extents, merged_data, {"cb_nodes": layout.nodes, **(hints or {})})
        else:
            two_phase_write(inas, path, merged.extents, merged_data, kernel, layout.nodes)
        inas.Free()
    t3 = time.perf_counter()
    group.Free()
    member = int(not is_ina)
    return TamTiming(
        gather_s=t1 - t0,
        io_s=t3 - t2,
        is_ina=is_ina,
        pieces_in=merged.requests.count if merged is not None else 0,
        pieces_out=merged.extents.count if merged is not None else 0,
        layer1_messages=LAYER1_MESSAGES * member,
        layer1_bytes=int(data.size) * member,
    )


def tam_read(
    comm: Any, path: str, requests: Requests, layout: IntraNodeLayout, hints: Mapping[str, str | int] | None = None
) -> np.ndarray:
    """Read the bytes ``requests`` selects: INAs read collectively and scatter the pieces back."""
    from mpi4py import MPI

    group, inas = _group_comms(comm, layout)
    lists = group.gather((requests.offsets, requests.lengths), root=0)
    sizes = group.gather(requests.nbytes, root=0)
    mine = np.empty(requests.nbytes, dtype=np.uint8)
    if group.Get_rank() == 0:
        merged = merge_requests([Requests(offsets=np.asarray(o), lengths=np.asarray(n)) for o, n in lists])
        file_order = mpiio.read_all(inas, path, merged.extents, {"cb_nodes": layout.nodes, **(hints or {})})
        member_order = np.empty_like(file_order)
        member_order[merged.order] = file_order
        group.Scatterv([member_order, sizes, MPI.BYTE], mine, root=0)
        inas.Free()
    else:
        group.Scatterv(None, mine, root=0)
    group.Free()
    return mine
