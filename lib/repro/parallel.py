"""Independent, seeded runs spread over worker processes or threads.

:func:`parallel_map` is the one place in ``repro`` that fans independent
runs out to processes, :func:`thread_map` the one that fans them out to
threads (for jobs that wait on a child process of their own, such as a
SimGrid simulation, so threads overlap them without pickling).  Every run
seeds itself, so results never depend on how many workers ran them.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
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
    _check_workers(workers)
    if workers == 1 or len(jobs) <= 1:
        return [fn(j) for j in tqdm(jobs, desc=desc, leave=False)]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        return list(tqdm(pool.map(fn, jobs), total=len(jobs), desc=desc, leave=False))


def thread_map(
    fn: Callable[[Job], Result], jobs: Sequence[Job], workers: int = 1, *, desc: str = "runs",
    progress: bool = True,
) -> list[Result]:
    """Apply ``fn`` to every job in ``workers`` threads of this process.

    Meant for jobs that spend their time waiting on a child process (a SimGrid
    simulation, an ``mpiexec`` launch): threads overlap them, share this
    process's caches and need nothing pickled.  The first exception a job
    raises is raised here, after the jobs already started have finished.

    Parameters
    ----------
    fn
        Any callable of one job (it must be thread-safe).
    jobs
        The jobs.
    workers
        Threads to use; 1 runs every job in the calling thread.
    desc
        Label of the progress bar.
    progress
        Show the progress bar.

    Returns
    -------
    list
        ``fn(job)`` for every job, in job order.

    Raises
    ------
    ValueError
        If ``workers`` is below 1.
    """
    _check_workers(workers)
    if workers == 1 or len(jobs) <= 1:
        return [fn(j) for j in tqdm(jobs, desc=desc, leave=False, disable=not progress)]
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        return list(tqdm(pool.map(fn, jobs), total=len(jobs), desc=desc, leave=False, disable=not progress))


def _check_workers(workers: int) -> None:
    """Refuse a worker count below 1, naming the parameter."""
    if workers < 1:
        raise ValueError(f"parameter 'workers': must be >= 1, got {workers}")
