"""HDF5's own chunked gzip filter (through h5py, serial) as the reference for our chunked files.

:func:`write_hdf5` stores the same variables with the same chunk shapes and
zlib level through HDF5's deflate filter; :func:`compare_chunks` reads every
chunk of both files raw (``read_direct_chunk`` on the HDF5 side, the metadata
table on ours), decompresses both and compares the bytes of the valid region
(HDF5 pads edge chunks to the full chunk shape; we store them clipped).
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from repro.pario.chunked import Variable, read_table


@dataclass(frozen=True, kw_only=True)
class Hdf5Comparison:
    """Our chunked file against HDF5's for the same variables.

    Attributes
    ----------
    chunks:
        Chunks compared.
    differing:
        Chunks whose decoded bytes differ.
    ours_bytes, hdf5_bytes:
        Stored (compressed) chunk bytes in each file (HDF5's include edge padding).
    hdf5_write_s:
        Wall time of the serial h5py write.
    """

    chunks: int
    differing: int
    ours_bytes: int
    hdf5_bytes: int
    hdf5_write_s: float


def write_hdf5(path: str | Path, variables: list[Variable], fields: list[np.ndarray]) -> float:
    """Write every variable chunked with gzip (or no filter) through h5py; return the wall time."""
    t0 = time.perf_counter()
    with h5py.File(path, "w") as fh:
        for var, field in zip(variables, fields):
            opts = dict(compression="gzip", compression_opts=var.level) if var.filter == "zlib" else {}
            fh.create_dataset(var.name, data=field, chunks=var.chunk, **opts)
    return time.perf_counter() - t0


def compare_chunks(ours: str | Path, hdf5: str | Path) -> tuple[int, int, int, int]:
    """``(chunks, differing, ours_bytes, hdf5_bytes)`` over every chunk of every variable."""
    table = read_table(ours)
    chunks = differing = ours_bytes = hdf5_bytes = 0
    with open(ours, "rb") as fo, h5py.File(hdf5, "r") as fh:
        for idx, var in enumerate(table.variables):
            ds = fh[var.name]
            for c in range(var.num_chunks):
                cs = var.chunk_slab(c)
                fo.seek(int(table.offsets[idx][c]))
                blob = fo.read(int(table.sizes[idx][c]))
                mine = var.decode(blob, cs)
                _, raw = ds.id.read_direct_chunk(cs.start)
                theirs_raw = zlib.decompress(raw) if var.filter == "zlib" else raw
                theirs = np.frombuffer(theirs_raw, dtype=var.dtype).reshape(var.chunk)[:cs.count[0], :cs.count[1]]
                chunks += 1
                differing += int(mine.tobytes() != np.ascontiguousarray(theirs).tobytes())
                ours_bytes += len(blob)
                hdf5_bytes += len(raw)
    return chunks, differing, ours_bytes, hdf5_bytes


def hdf5_reference(ours: str | Path, hdf5: str | Path, variables: list[Variable],
                   fields: list[np.ndarray]) -> Hdf5Comparison:
    """Write the HDF5 reference and compare it chunk by chunk with our file."""
    seconds = write_hdf5(hdf5, variables, fields)
    chunks, differing, ours_bytes, hdf5_bytes = compare_chunks(ours, hdf5)
    return Hdf5Comparison(chunks=chunks, differing=differing, ours_bytes=ours_bytes, hdf5_bytes=hdf5_bytes,
                          hdf5_write_s=seconds)
