"""Independent, seeded runs spread over worker processes.

:func:`parallel_map` is the one place in ``repro`` that fans independent
runs out to processes.  Every run seeds itself, so results never depend on
how many workers ran them.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Sequence, TypeVar

from tqdm import tqdm

Job = TypeVar("Job")
Result = TypeVar("Result")


def parallel_map(
    fn: Callable[[Job], Result], jobs: Sequence[Job], workers: int = 1, desc: str = "runs"
) -> list[Result]:
    """Apply ``fn`` to every job, in ``workers`` spawned processes when ``workers > 1``.

    Parameters
    ----------
    fn
        A module-level function (it is pickled by reference for the workers).
    jobs
        The jobs, each picklable (typically a frozen dataclass).
    workers
        Processes to use; 1 runs every job in this process.
    desc
        Label of the progress bar.

    Returns
    -------
    list
        ``fn(job)`` for every job, in job order.

    Raises
    ------
    ValueError
        If ``workers`` is below 1.
    """
    if workers < 1:
        raise ValueError(f"parameter 'workers': must be >= 1, got {workers}")
    if workers == 1 or len(jobs) <= 1:
        return [fn(j) for j in tqdm(jobs, desc=desc, leave=False)]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        return list(tqdm(pool.map(fn, jobs), total=len(jobs), desc=desc, leave=False))
