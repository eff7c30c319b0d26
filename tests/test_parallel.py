"""repro.parallel: results in job order, the same with one worker or several, and the worker count checked."""

from __future__ import annotations

import pytest

from repro.parallel import parallel_map


def square(x: int) -> dict[str, int]:
    """A module-level job function (picklable for the worker processes)."""
    return {"x": x * x}


def test_parallel_map_keeps_job_order_whatever_the_workers():
    jobs = [3, 1, 2]
    assert parallel_map(square, jobs, workers=1) == [{"x": 9}, {"x": 1}, {"x": 4}]
    assert parallel_map(square, jobs, workers=2) == parallel_map(square, jobs, workers=1)
    with pytest.raises(ValueError, match="workers"):
        parallel_map(square, [1], workers=0)
