"""Decomposition generators: every byte of the file has exactly one writer."""

from __future__ import annotations

import numpy as np
import pytest

from repro.pario import decomp as dc

RANKS = [1, 2, 3, 5, 8, 13]


def generators(p: int) -> list[dc.Decomposition]:
    return [dc.block(1000, p), dc.block_cyclic(1001, p, 7), dc.irregular_runs(4099, p, 5, seed=p),
            dc.subarray_2d_block_cyclic(9, 23, 1, p, (2, 3))]


@pytest.mark.parametrize("p", RANKS)
def test_every_byte_has_one_writer(p: int) -> None:
    for d in generators(p):
        assert d.p == p
        offsets = np.concatenate([dc.expand_offsets(r) for r in d.ranks])
        assert np.array_equal(np.sort(offsets), np.arange(d.file_size)), d.name


def test_irregular_is_uneven_and_fragmented() -> None:
    d = dc.irregular_runs(1 << 16, 8, 8, seed=0)
    shares = np.array(d.bytes_per_rank())
    assert shares.max() > 2 * shares.min()
    assert min(d.pieces_per_rank()) > 50


def test_requests_reject_overlap_and_coalesce_keeps_bytes() -> None:
    with pytest.raises(ValueError):
        dc.Requests(offsets=np.array([0, 5]), lengths=np.array([6, 2]))
    r = dc.Requests.from_pairs([10, 0, 4, 6], [3, 4, 2, 1])
    c = r.coalesced()
    assert c.nbytes == r.nbytes and c.offsets.tolist() == [0, 10] and c.lengths.tolist() == [7, 3]
    assert np.array_equal(dc.expand_offsets(c), dc.expand_offsets(r))


def test_payload_matches_pattern() -> None:
    d = dc.block_cyclic(300, 3, 11)
    image = np.zeros(d.file_size, dtype=np.uint8)
    for r in d.ranks:
        image[dc.expand_offsets(r)] = dc.payload(r)
    assert image.tobytes() == dc.expected_file(d)
    assert len(set(image.tolist())) > 100  # the pattern is not constant
