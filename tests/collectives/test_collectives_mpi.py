"""The mpi4py executor agrees with MPI's own Allreduce / Alltoall on a real MPI.

One ``mpiexec`` launch per rank count runs every algorithm (several
parameterisations), several lengths that do not divide evenly and several
dtypes; rank 0's JSON report is checked here.  Ranks are oversubscribed (up to
16 on 2 cores), which MPICH allows by default.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from repro.collectives.algorithms import ALGORITHMS, parse_spec
from repro.hpc.launcher import MPIRunError, run_mpi

WORKER = ["-m", "repro.collectives.mpi_worker"]

# Extra parameterisations per rank count, beyond each algorithm's defaults.
EXTRA_SPECS = {
    2: ["lr_lr:k=2", "lr_lr_pipe:k=1,segments=3", "2dfc:rows=2"],
    3: ["lr_rab:k=3"],
    5: ["lr_lr:k=5", "lr_lr_pipe:k=5,segments=3"],
    7: ["lr_rab:k=1"],
    8: ["lr_lr:k=4", "lr_rab:k=4", "lr_lr_pipe:k=4,segments=3", "lr_lr_pipe:k=2,segments=1", "2dfc:rows=4",
        "two_phase:rows=1"],
    13: [],
    16: ["lr_rab:k=2", "lr_lr_pipe:k=8,segments=4", "2dfc:rows=2"],
}
DTYPES = {5: "int64,float64,int32,float32", 8: "int64,float64,int32,float32"}


def run_worker(tmp_path: Path, nprocs: int, *args: str, timeout: float = 120) -> dict:
    out = tmp_path / "report.json"
    run_mpi([*WORKER, *args, "--out", str(out)], nprocs, timeout=timeout)
    assert not list(tmp_path.glob(".report.json.*")), "temporary report file left behind"
    return json.loads(out.read_text())


@pytest.mark.parametrize("p", sorted(EXTRA_SPECS))
def test_mpi_executor_equals_mpi_builtin(p: int, tmp_path: Path) -> None:
    """Every algorithm equals MPI's collective on every rank.

    Exactly for integers and all-to-alls, within the summation-order bound for floating-point allreduce; all
    ranks hold bit-identical allreduce results; no case is skipped.
    """
    specs = list(ALGORITHMS) + EXTRA_SPECS[p]
    lengths = sorted({0, 1, p + 1, 1003})
    dtypes = DTYPES.get(p, "int64,float64")
    report = run_worker(tmp_path, p, "--algos", ";".join(specs), "--lengths", ",".join(map(str, lengths)),
                        "--a2a-lengths", "1,3", "--dtypes", dtypes, "--seed", str(p))
    assert report["p"] == p and report["mode"] == "check"
    n_dtypes = len(dtypes.split(","))
    expected = sum((len(lengths) if ALGORITHMS[parse_spec(s)[0]].kind == "allreduce" else 2) * n_dtypes
                   for s in specs)
    assert report["n_skipped"] == 0
    assert report["n_cases"] == expected == len(report["cases"])
    failed = [c for c in report["cases"] if not c["ok"]]
    assert not failed, json.dumps(failed, indent=1)
    assert report["ok"] is True
    for case in report["cases"]:
        if case["kind"] == "allreduce":
            assert case["ranks_identical"] is True, case
        if case["kind"] == "alltoall" or case["dtype"].startswith("int"):
            assert case["max_abs_err"] == 0.0, case
    assert {c["algorithm"] for c in report["cases"]} == set(ALGORITHMS)


def _leftover(marker: str) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in ps.splitlines() if marker in line and "ps -eo" not in line]


def test_launcher_timeout_is_a_clear_error(tmp_path: Path) -> None:
    """A worker told to sleep past the timeout.

    ``run_mpi`` raises MPIRunError naming the timeout and the rank count, within a few seconds, and leaves no
    process behind.
    """
    marker = str(tmp_path / "never.json")
    t0 = time.monotonic()
    with pytest.raises(MPIRunError) as err:
        run_mpi([*WORKER, "--sleep", "120", "--out", marker], 2, timeout=3)
    assert time.monotonic() - t0 < 60
    msg = str(err.value)
    assert "timed out after 3 s" in msg and "2 ranks" in msg and "stderr tail" in msg
    assert err.value.timed_out and err.value.returncode is None and err.value.nprocs == 2
    deadline = time.monotonic() + 30  # killed at once; a loaded machine may take a moment to reap them
    while _leftover(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _leftover(marker)
    assert not Path(marker).exists()


def test_launcher_failure_reports_exit_code_and_stderr(tmp_path: Path) -> None:
    """A worker that fails on every rank.

    The error names the rank count, the exit code and carries the tail of stderr (here the worker's own
    message).
    """
    with pytest.raises(MPIRunError) as err:
        run_mpi([*WORKER, "--algos", "no_such_algorithm", "--out", str(tmp_path / "r.json")], 3, timeout=60)
    msg = str(err.value)
    assert "3 ranks exited with code" in msg
    assert "unknown algorithm 'no_such_algorithm'" in msg
    assert not err.value.timed_out and err.value.returncode != 0


def test_bench_mode_reports_timings(tmp_path: Path) -> None:
    """Throughput mode returns a time for ours and for MPI's built-in per algorithm (values are not asserted.

    Timings on a shared machine mean nothing).
    """
    report = run_worker(tmp_path, 4, "--mode", "bench", "--algos", "ring;lr_lr;2dfc", "--nbytes", "4096",
                        "--repeats", "2", "--dtypes", "float32")
    assert [c["algorithm"] for c in report["cases"]] == ["ring", "lr_lr", "2dfc"]
    for case in report["cases"]:
        assert case["ours_s"] > 0 and case["mpi_s"] > 0 and case["p"] == 4


def test_bad_algorithm_parameter_fails_instead_of_skipping(tmp_path: Path) -> None:
    """A misspelt or invalid parameter is an error of the caller, not a case that does not apply."""
    for spec, message in (("lr_lr:k=2,segmnts=2", "lr_lr takes"), ("lr_lr_pipe:k=2,segments=0", "segments must be")):
        with pytest.raises(MPIRunError) as err:
            run_worker(tmp_path, 2, "--algos", spec, "--lengths", "4", timeout=90)
        assert message in str(err.value) and not err.value.timed_out


def test_inapplicable_cases_are_counted_and_zero_cases_is_not_ok(tmp_path: Path) -> None:
    """A node size that does not divide the rank count is skipped and counted; a report in which no case ran is not ok."""
    report = run_worker(tmp_path, 3, "--algos", "lr_lr:k=2", "--lengths", "1,5", "--dtypes", "int64")
    assert report["n_cases"] == 0 and report["n_skipped"] == 2 and report["ok"] is False
    assert all(c["ok"] is None and "does not divide" in c["skipped"] for c in report["cases"])
    report = run_worker(tmp_path, 3, "--algos", "lr_lr:k=2;lr_lr:k=3", "--lengths", "5", "--dtypes", "int64")
    assert report["n_cases"] == 1 and report["n_skipped"] == 1 and report["ok"] is True
