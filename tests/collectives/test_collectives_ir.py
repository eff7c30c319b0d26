"""The schedule IR, its validator and the registry helpers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from repro.collectives.algorithms import ALGORITHMS, build_schedule, default_node_size, get_algorithm, parse_spec
from repro.collectives.alltoall import grid_shape
from repro.hpc.ir import Recv, Send, split_lengths, validate
from repro.hpc.reference import execute_reference


@pytest.mark.parametrize("n", [0, 1, 5, 16, 17, 1003])
@pytest.mark.parametrize("parts", [1, 2, 3, 7, 16])
def test_split_lengths_is_balanced_and_complete(n: int, parts: int) -> None:
    """Lengths sum to n, differ by at most one, the longer ones first."""
    lengths = split_lengths(n, parts)
    assert len(lengths) == parts and sum(lengths) == n
    assert max(lengths) - min(lengths) <= 1
    assert lengths == sorted(lengths, reverse=True)


def test_split_lengths_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        split_lengths(3, 0)
    with pytest.raises(ValueError):
        split_lengths(-1, 2)


def _replace_step(sched, s, r, **changes):
    rows = [list(row) for row in sched.steps]
    rows[s][r] = dataclasses.replace(rows[s][r], **changes)
    return dataclasses.replace(sched, steps=tuple(tuple(row) for row in rows))


def test_validate_rejects_unmatched_and_mismatched_messages() -> None:
    """A dropped receive, a receive of the wrong length, an out-of-range block and a double copy-write are all rejected."""
    sched = build_schedule("ring", 4, 10)
    validate(sched)
    st = sched.steps[0][1]
    with pytest.raises(ValueError, match="do not match"):
        validate(_replace_step(sched, 0, 1, recvs=()))
    longer = (Recv(peer=st.recvs[0].peer, blocks=st.recvs[0].blocks + (3,), op=st.recvs[0].op),)
    with pytest.raises(ValueError, match="do not match"):
        validate(_replace_step(sched, 0, 1, recvs=longer))
    with pytest.raises(ValueError, match="out of range"):
        validate(_replace_step(sched, 0, 1, sends=(Send(peer=2, blocks=(99,)),)))
    twice = (Recv(peer=0, blocks=(0,), op="copy"), Recv(peer=0, blocks=(0,), op="copy"))
    with pytest.raises(ValueError, match="written twice"):
        validate(_replace_step(sched, 0, 1, recvs=twice))


def test_sends_snapshot_before_receives_land() -> None:
    """Step semantics.

    A rank that sends and receives the same block in one step sends its old value (recursive doubling relies
    on it).
    """
    sched = build_schedule("recursive_doubling", 2, 3)
    out = execute_reference(sched, [np.array([1, 2, 3]), np.array([10, 20, 30])])
    assert out[0].tolist() == out[1].tolist() == [11, 22, 33]


def test_registry_helpers() -> None:
    """Aliases, spec parsing, node sizes and grid shapes."""
    assert get_algorithm("lr").name == "ring" and get_algorithm("rab").name == "rabenseifner"
    assert parse_spec("lr_lr_pipe:k=4,segments=3") == ("lr_lr_pipe", {"k": 4, "segments": 3})
    with pytest.raises(KeyError, match="unknown algorithm"):
        get_algorithm("nope")
    assert [default_node_size(p) for p in (1, 2, 7, 8, 12, 13, 16)] == [1, 1, 1, 2, 3, 1, 4]
    for p in range(1, 17):
        r, c = grid_shape(p)
        assert r * c == p and r <= c
    assert grid_shape(16) == (4, 4) and grid_shape(8) == (2, 4) and grid_shape(13) == (1, 13)
    with pytest.raises(ValueError):
        build_schedule("lr_lr", 6, 10, k=4)
    with pytest.raises(ValueError):
        build_schedule("2dfc", 6, 10, rows=4)
    assert {a.kind for a in ALGORITHMS.values()} == {"allreduce", "alltoall"}
