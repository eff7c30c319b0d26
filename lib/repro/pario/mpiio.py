"""Collective MPI-IO with hindexed file views, through mpi4py's ``MPI.File``.

These helpers are the baseline every two-phase variant is checked against:
MPI's own ``Write_at_all`` / ``Read_at_all`` (ROMIO inside the venv's MPICH)
with a file view that selects exactly a rank's :class:`~repro.pario.decomp.Requests`.
They are called on every rank of a communicator (the calls are collective).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from repro.pario.decomp import Requests

_OPENS = [0]
"""How many times this process opened a file through :func:`open_file` (every MPI-IO open of the family)."""


def opens() -> int:
    """How many MPI-IO file opens this process has made so far (a rank that took part in an I/O call opened the file)."""
    return _OPENS[0]


def open_file(comm: Any, path: str, amode: int, info: Any = None) -> Any:
    """``MPI.File.Open`` (collective over ``comm``), counted for :func:`opens`.

    Every MPI-IO call of the family goes through it, so a test or a check can count which ranks really
    took part in a write, rather than trusting a flag of the algorithm.
    """
    from mpi4py import MPI

    fh = MPI.File.Open(comm, path, amode, MPI.INFO_NULL if info is None else info)
    _OPENS[0] += 1
    return fh


def make_info(hints: Mapping[str, str | int] | None) -> Any:
    """An ``MPI.Info`` holding ``hints`` (e.g. ``cb_nodes``, ``romio_cb_write``)."""
    from mpi4py import MPI

    info = MPI.Info.Create()
    for key, value in (hints or {}).items():
        info.Set(str(key), str(value))
    return info


def view_type(requests: Requests) -> Any:
    """A committed hindexed datatype of bytes selecting ``requests`` (``MPI.BYTE`` if empty).

    The caller frees it (``Free()``) unless it is ``MPI.BYTE``.
    """
    from mpi4py import MPI

    if requests.count == 0:
        return MPI.BYTE
    ftype = MPI.BYTE.Create_hindexed(requests.lengths.tolist(), requests.offsets.tolist())
    ftype.Commit()
    return ftype


def _with_view(fh: Any, requests: Requests) -> Any:
    from mpi4py import MPI

    ftype = view_type(requests)
    fh.Set_view(0, MPI.BYTE, ftype)
    return ftype


def write_all(comm: Any, path: str, requests: Requests, data: np.ndarray,
              hints: Mapping[str, str | int] | None = None) -> None:
    """Collective write of ``data`` to the bytes ``requests`` selects, with MPI's ``Write_at_all``.

    Parameters
    ----------
    comm:
        The communicator (every rank calls).
    path:
        The file (created if missing).
    requests:
        This rank's pieces of the file.
    data:
        ``requests.nbytes`` bytes (``uint8``), in request order.
    hints:
        MPI-IO hints, e.g. ``{"cb_nodes": 4, "romio_cb_write": "enable"}``.
    """
    from mpi4py import MPI

    buf = np.ascontiguousarray(data, dtype=np.uint8)
    if buf.size != requests.nbytes:
        raise ValueError(f"data has {buf.size} bytes, requests select {requests.nbytes}")
    info = make_info(hints)
    fh = open_file(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE, info)
    try:
        collective_write(fh, requests, buf)
    finally:
        fh.Close()
        info.Free()


def collective_write(fh: Any, requests: Requests, data: np.ndarray) -> None:
    """On an open file: set the hindexed view of ``requests`` and ``Write_at_all`` the bytes (collective)."""
    from mpi4py import MPI

    buf = np.ascontiguousarray(data, dtype=np.uint8)
    if buf.size != requests.nbytes:
        raise ValueError(f"data has {buf.size} bytes, requests select {requests.nbytes}")
    ftype = _with_view(fh, requests)
    try:
        fh.Write_at_all(0, [buf, buf.size, MPI.BYTE])
    finally:
        if ftype != MPI.BYTE:
            ftype.Free()


def collective_read(fh: Any, requests: Requests) -> np.ndarray:
    """On an open file: set the hindexed view of ``requests`` and ``Read_at_all`` the bytes (collective).

    Every rank calls it, a rank with no request too (it reads nothing); returns the bytes in request order.
    """
    from mpi4py import MPI

    buf = np.empty(requests.nbytes, dtype=np.uint8)
    ftype = _with_view(fh, requests)
    try:
        fh.Read_at_all(0, [buf, buf.size, MPI.BYTE])
    finally:
        if ftype != MPI.BYTE:
            ftype.Free()
    return buf


def read_all(comm: Any, path: str, requests: Requests, hints: Mapping[str, str | int] | None = None) -> np.ndarray:
    """Collective read (MPI's ``Read_at_all``) of the bytes ``requests`` selects, in request order."""
    from mpi4py import MPI

    buf = np.empty(requests.nbytes, dtype=np.uint8)
    info = make_info(hints)
    fh = open_file(comm, path, MPI.MODE_RDONLY, info)
    ftype = _with_view(fh, requests)
    try:
        fh.Read_at_all(0, [buf, buf.size, MPI.BYTE])
    finally:
        fh.Close()
        if ftype != MPI.BYTE:
            ftype.Free()
        info.Free()
    return buf


def independent_write(comm: Any, path: str, requests: Requests, data: np.ndarray) -> None:
    """Independent I/O: every rank opens the file and writes each of its extents with ``Write_at`` (no aggregation)."""
    from mpi4py import MPI

    buf = np.ascontiguousarray(data, dtype=np.uint8)
    if buf.size != requests.nbytes:
        raise ValueError(f"data has {buf.size} bytes, requests select {requests.nbytes}")
    fh = open_file(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
    try:
        write_extents(fh, requests, buf)
    finally:
        fh.Close()


def write_extents(fh: Any, extents: Requests, data: np.ndarray) -> None:
    """Independent contiguous writes (``Write_at``) of ``data`` to each extent, in order."""
    from mpi4py import MPI

    pos = 0
    for off, ln in zip(extents.offsets.tolist(), extents.lengths.tolist()):
        fh.Write_at(off, [data[pos:pos + ln], ln, MPI.BYTE])
        pos += ln
