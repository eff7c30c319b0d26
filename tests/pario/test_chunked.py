"""Chunked compressed variables: grid, ownership rule, layout, reader, and the MPI write."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from repro.pario import chunked as ck
from repro.pario.hdf5_ref import hdf5_reference
from repro.pario.mpi_worker import launch


def test_chunks_cover_the_variable_once() -> None:
    var = ck.Variable(name="v", shape=(23, 17), chunk=(5, 4))
    seen = np.zeros(var.shape, dtype=int)
    for c in range(var.num_chunks):
        seen[var.chunk_slab(c).index()] += 1
    assert var.grid == (5, 5) and np.all(seen == 1)
    assert var.chunks_of(ck.Slab(start=(4, 3), count=(2, 2))) == [0, 1, 5, 6]


def _owners(var: ck.Variable, slabs_per_rank: list[list[ck.Slab]]) -> np.ndarray:
    p = len(slabs_per_rank)
    keys = [ck.owner_keys(ck.overlaps(var, s), r, p) for r, s in enumerate(slabs_per_rank)]
    red = keys[0]
    for k in keys[1:]:
        red = ck.lexmax_pairs(red, k)
    return ck.owners_from_keys(red, p)


def test_owner_is_max_overlap_and_unique_writer() -> None:
    var = ck.Variable(name="v", shape=(8, 8), chunk=(4, 4))
    # rank 0 writes the left half, rank 1 the right half, rank 2 a 1x1 corner of chunk 0 (shared with rank 0)
    slabs = [[ck.Slab(start=(0, 0), count=(8, 4))], [ck.Slab(start=(0, 4), count=(8, 4))], [ck.Slab(start=(0, 0), count=(1, 1))]]
    owners = _owners(var, slabs)
    assert owners.tolist() == [0, 1, 0, 1]
    # a tie: two ranks with equal overlap of every chunk; the priority rotates, so both own some chunks
    var2 = ck.Variable(name="w", shape=(2, 16), chunk=(2, 2))
    tie = [[ck.Slab(start=(0, 0), count=(1, 16))], [ck.Slab(start=(1, 0), count=(1, 16))]]
    owners2 = _owners(var2, tie)
    assert set(owners2.tolist()) == {0, 1}


def test_header_table_and_reader_round_trip(tmp_path: Path) -> None:
    variables = [
        ck.Variable(name="a", shape=(13, 10), chunk=(4, 3)),
        ck.Variable(name="b", shape=(5, 9), chunk=(5, 2), dtype="<f8", filter="identity"),
    ]
    fields = [ck.synthetic_field(v, i) for i, v in enumerate(variables)]
    blobs = [[v.encode(f[v.chunk_slab(c).index()]) for c in range(v.num_chunks)] for v, f in zip(variables, fields)]
    table = ck.layout(variables, [np.array([len(b) for b in bl]) for bl in blobs])
    ext = table.extents()
    assert all(o1 + s1 <= o2 for (o1, s1), (o2, _) in zip(ext, ext[1:]))
    assert ext[0][0] == ck.header_bytes(variables)
    path = tmp_path / "f.bin"
    with open(path, "wb") as fh:
        fh.write(ck.encode_header(table))
        for bl in blobs:
            for b in bl:
                fh.write(b)
    for v, f in zip(variables, fields):
        assert ck.read_variable(path, v.name).tobytes() == f.tobytes()
        slab = ck.Slab(start=(2, 1), count=(3, 5))
        assert np.array_equal(ck.read_variable(path, v.name, slab), f[slab.index()])


@pytest.mark.parametrize("chunk,tile", [((16, 32), (5, 7)), ((7, 9), (3, 20)), ((64, 64), (8, 8))])
def test_mpi_chunked_round_trip(chunk: tuple[int, int], tile: tuple[int, int]) -> None:
    variables = [
        {
            "name": f"v{i}",
            "shape": [40 + 3 * i, 61],
            "chunk": list(chunk),
            "dtype": "<f4",
            "filter": "zlib" if i % 2 == 0 else "identity",
            "level": 4,
        }
        for i in range(4)
    ]
    rep = launch(
        4,
        {
            "chunked": {
                "variables": variables,
                "grid": [2, 2],
                "tile": list(tile),
                "seed": 1,
                "modes": ["per-request", "aggregated"],
                "repeats": 1,
            }
        },
        timeout=120,
    )
    assert rep["modes_identical"] and rep["contiguous"]["equals_fields"]
    for m in rep["modes"]:
        assert m["variables_differing"] == 0 and m["overlapping_extents"] == 0 and m["extents_outside"] == 0, m
    assert [m["rounds"] for m in rep["modes"]] == [4, 1]
    # the collective read path (owners read their chunks with Read_at_all and scatter the pieces) gives every
    # rank its hyperslabs back, one round per variable or one for all
    assert [m["read_differing"] for m in rep["modes"]] == [0, 0]
    assert [m["read_rounds"] for m in rep["modes"]] == [4, 1]
    assert all(m["read_total_s"] > 0 for m in rep["modes"])


def test_hdf5_gzip_chunks_decode_alike(tmp_path: Path) -> None:
    variables = [
        ck.Variable(name="a", shape=(30, 20), chunk=(8, 6)),
        ck.Variable(name="b", shape=(9, 9), chunk=(4, 4), filter="identity"),
    ]
    fields = [ck.synthetic_field(v, i) for i, v in enumerate(variables)]
    blobs = [[v.encode(f[v.chunk_slab(c).index()]) for c in range(v.num_chunks)] for v, f in zip(variables, fields)]
    table = ck.layout(variables, [np.array([len(b) for b in bl]) for bl in blobs])
    ours = tmp_path / "ours.bin"
    with open(ours, "wb") as fh:
        fh.write(ck.encode_header(table))
        fh.write(b"".join(b for bl in blobs for b in bl))
    cmp = hdf5_reference(ours, tmp_path / "ref.h5", variables, fields)
    assert cmp.chunks == sum(v.num_chunks for v in variables) and cmp.differing == 0
    # a corrupted field must be caught
    bad = [f.copy() for f in fields]
    bad[0][3, 3] += 1
    cmp_bad = hdf5_reference(ours, tmp_path / "bad.h5", variables, bad)
    assert cmp_bad.differing == 1
    assert json.dumps(cmp_bad.__dict__)
