"""mpi4py executor: runs a schedule on a real MPI communicator.

Each step: local copies, then every receive is posted (``Irecv`` into a fresh
buffer), every send is packed and posted (``Isend``), all are completed
(``Waitall``), and the receives are applied in schedule order.  Packing before
any receive lands gives exactly the step semantics of
:mod:`repro.hpc.ir`, so the result equals the reference executor's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from repro.hpc.ir import Schedule
from repro.hpc.reference import BlockIndex

TAG_BASE = 7700


def execute_mpi(schedule: Schedule, comm: Any, sendbuf: np.ndarray) -> np.ndarray:
    """Run ``schedule`` on ``comm`` and return this rank's output.

    Parameters
    ----------
    schedule:
        The schedule; ``schedule.p`` must equal ``comm.Get_size()``.
    comm:
        An ``mpi4py.MPI.Comm``.
    sendbuf:
        This rank's input, a 1-D numpy array of ``schedule.input_length``
        elements (any dtype mpi4py maps, e.g. int32/int64/float32/float64).

    Returns
    -------
    numpy.ndarray
        This rank's output (``schedule.output_length`` elements).
    """
    from mpi4py import MPI

    p, me = comm.Get_size(), comm.Get_rank()
    if p != schedule.p:
        raise ValueError(f"schedule is for {schedule.p} ranks, communicator has {p}")
    sendbuf = np.ascontiguousarray(sendbuf)
    if sendbuf.ndim != 1 or sendbuf.shape[0] != schedule.input_length:
        raise ValueError(f"input must be 1-D of length {schedule.input_length}, got {sendbuf.shape}")
    idx = BlockIndex(schedule)
    buf = np.zeros(schedule.work_length, dtype=sendbuf.dtype)
    idx.scatter(buf, schedule.input_blocks, sendbuf)
    for s, row in enumerate(schedule.steps):
        st = row[me]
        for cp in st.copies:
            idx.scatter(buf, cp.dst, idx.gather(buf, cp.src))
        if not st.communicates:
            continue
        tag = TAG_BASE + s % 20000
        incoming = [np.empty(schedule.blocks_length(rv.blocks), dtype=buf.dtype) for rv in st.recvs]
        requests = [comm.Irecv(data, source=rv.peer, tag=tag) for rv, data in zip(st.recvs, incoming)]
        outgoing = [idx.gather(buf, sd.blocks) for sd in st.sends]
        requests += [comm.Isend(data, dest=sd.peer, tag=tag) for sd, data in zip(st.sends, outgoing)]
        MPI.Request.Waitall(requests)
        for rv, data in zip(st.recvs, incoming):
            idx.scatter(buf, rv.blocks, data, rv.op)
    return idx.gather(buf, schedule.output_blocks)
