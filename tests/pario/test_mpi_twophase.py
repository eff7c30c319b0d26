"""Our two-phase write on real MPI writes the same file as MPI's own Write_at_all.

One ``mpiexec`` launch per rank count writes an uneven irregular (E3SM-like)
decomposition with MPI's ``Write_at_all`` and with every kernel, and rank 0
compares the files byte for byte.  Ranks are oversubscribed on 2 cores.
"""

from __future__ import annotations

import pytest

from repro.hpc.launcher import MPIRunError
from repro.pario.mpi_worker import launch

KERNELS = ["unordered", "pairwise", "scattered:1", "scattered:3", "balanced:1", "balanced:2", "alltoallw"]


def job(p: int, kind: str = "irregular") -> dict:
    return {"decomp": {"kind": kind, "file_size": 3000 * p + 17, "mean_run": 6, "seed": p, "block_elems": 37},
            "aggregators": max(1, (p + 1) // 3), "kernels": KERNELS, "repeats": 1}


@pytest.mark.parametrize("p", [1, 2, 3, 5, pytest.param(8, marks=pytest.mark.slow),
                               pytest.param(13, marks=pytest.mark.slow)])
def test_every_kernel_matches_write_at_all(p: int) -> None:
    report = launch(p, job(p), timeout=120)
    assert report["mpi"]["equals_pattern"] and report["mpi"]["read_back_ok"]
    assert [w["kernel"] for w in report["writes"]] == [k.replace(":", "(") + ")" if ":" in k else k for k in KERNELS]
    for w in report["writes"]:
        assert w["identical_to_mpi"], w
        assert w["equals_pattern"] and w["read_back_ok"], w


def test_block_cyclic_with_stripe_alignment() -> None:
    j = job(4, "block_cyclic") | {"stripe": 512}
    report = launch(4, j, timeout=120)
    assert all(w["identical_to_mpi"] for w in report["writes"])


def test_failing_rank_ends_the_job_with_its_error() -> None:
    """The failing rank aborts the launch before the launcher's timeout, with its own error."""
    with pytest.raises(MPIRunError) as err:
        launch(3, job(3) | {"fail_rank": 1}, timeout=60)
    assert not err.value.timed_out
    assert "injected failure on rank 1" in str(err.value)
