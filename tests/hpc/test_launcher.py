"""The shared MPI launcher: a failing rank aborts the job with its cause, a timeout kills every process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from repro.hpc.launcher import MPIRunError, run_mpi

FAILING_RANK = """
import sys
from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_rank() == 1:
    if sys.argv[1] == "raise":
        raise RuntimeError("rank 1 fails on purpose")
    sys.exit("rank 1 gives up on purpose")
comm.Barrier()  # the other ranks would wait here for ever without an abort
"""


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_failing_rank_aborts_the_job_at_once_with_its_cause(how: str, tmp_path: Path) -> None:
    """A rank that raises or exits while the others wait in a barrier ends the launch at once.

    The launch ends before the launcher's own timeout (the other ranks would wait in the barrier for ever
    without an abort), and the error carries that rank's cause (mpi4py's runner calls ``MPI_Abort``).
    """
    script = tmp_path / "fails.py"
    script.write_text(FAILING_RANK)
    with pytest.raises(MPIRunError) as err:
        run_mpi([str(script), how], 3, timeout=60)
    assert not err.value.timed_out and err.value.returncode != 0
    cause = "rank 1 fails on purpose" if how == "raise" else "rank 1 gives up on purpose"
    assert cause in str(err.value)


def test_ranks_print_and_the_output_comes_back(tmp_path: Path) -> None:
    script = tmp_path / "hello.py"
    # one os.write per rank: with PYTHONUNBUFFERED (set on these machines) print() writes its arguments and
    # separators one by one, so under two concurrent test runs the ranks' pieces interleaved inside a phrase and
    # rank 0's was lost to the regex; a single write below PIPE_BUF reaches the pipe whole
    script.write_text("import os\nfrom mpi4py import MPI\n"
                      "os.write(1, f'rank {MPI.COMM_WORLD.Get_rank()} of {MPI.COMM_WORLD.Get_size()}\\n'.encode())\n")
    out = run_mpi([str(script)], 2, timeout=120).stdout
    # two ranks write to one pipe: their lines may come in either order, so read the phrases, not the lines
    assert sorted(re.findall(r"rank \d+ of \d+", out)) == ["rank 0 of 2", "rank 1 of 2"]


def test_bad_rank_count_is_refused() -> None:
    with pytest.raises(ValueError, match="nprocs"):
        run_mpi(["-c", "pass"], 0, timeout=10)
