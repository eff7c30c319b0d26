"""repro.parallel: results in job order, the same with one worker or several, and the worker count checked."""

from __future__ import annotations

import threading

import pytest

from repro.parallel import parallel_map, thread_map


def square(x: int) -> dict[str, int]:
    """A module-level job function (picklable for the worker processes)."""
    return {"x": x * x}


def test_parallel_map_keeps_job_order_whatever_the_workers():
    jobs = [3, 1, 2]
    assert parallel_map(square, jobs, workers=1) == [{"x": 9}, {"x": 1}, {"x": 4}]
    assert parallel_map(square, jobs, workers=2) == parallel_map(square, jobs, workers=1)
    with pytest.raises(ValueError, match="workers"):
        parallel_map(square, [1], workers=0)


def test_thread_map_keeps_job_order_and_overlaps_waiting_jobs():
    barrier = threading.Barrier(3, timeout=60)

    def wait_then_square(x: int) -> int:
        barrier.wait()  # passes only when three jobs run at the same time
        return x * x

    assert thread_map(wait_then_square, [3, 1, 2], workers=3) == [9, 1, 4]
    assert thread_map(lambda x: -x, [1, 2, 3], workers=1) == [-1, -2, -3]
    with pytest.raises(ValueError, match="workers"):
        thread_map(square, [1], workers=0)


def test_thread_map_raises_a_jobs_exception():
    def fail_on_two(x: int) -> int:
        if x == 2:
            raise RuntimeError("job 2 fails")
        return x

    with pytest.raises(RuntimeError, match="job 2 fails"):
        thread_map(fail_on_two, [1, 2, 3], workers=2)
