"""Launch k local ``torch.distributed`` ranks on gloo, with process sub-groups and clear failures.

:func:`launch` spawns ``world_size`` processes, joins them into one gloo
process group through a file store in a private temporary folder (no TCP port
to collide with other jobs on the machine), optionally builds the intra-group
and inter-group sub-communicators of a grouped layout, calls a module-level
function on every rank and returns the per-rank results in rank order.

Failures end the job instead of hanging it: a rank that raises reports its
traceback, the launcher kills the other ranks at once and raises
:class:`RankFailed` naming the rank and the cause; a rank that dies without
reporting (killed, segfault) is detected from its exit code; a job that
exceeds its wall-clock ``timeout`` is killed and raises :class:`TimeoutError`.
Collectives themselves time out too (``init_process_group(timeout=...)``), after
``timeout_s`` but never before :data:`RENDEZVOUS_TIMEOUT_S`, so that ranks that
take long to start on a loaded machine are not mistaken for failed ones: the
job's wall-clock ``timeout_s`` still ends the job.  Every rank runs one thread: it is spawned
with ``OMP_NUM_THREADS=1`` and calls ``torch.set_num_threads(1)``.

No rank outlives the launch: the ranks are killed when the launcher gets
SIGTERM (:func:`repro.watchdog.on_terminate`) or the interpreter exits, and each
rank asks Linux to kill it when the launching process dies, even by SIGKILL
(:func:`repro.watchdog.die_with_parent`).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import queue as queue_module
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from repro.watchdog import die_with_parent, on_terminate

RENDEZVOUS_TIMEOUT_S = 300.0
"""The least time a rank waits for the others to join or to reach a collective (spawning torch ranks takes
seconds, tens of seconds on a loaded machine); the launch's own wall-clock limit ends a job before it."""


class RankFailed(RuntimeError):
    """A rank of a launched job raised or died; the message carries its rank and cause."""

    def __init__(self, rank: int, cause: str) -> None:
        super().__init__(f"rank {rank} failed:\n{cause}")
        self.rank = rank
        self.cause = cause


@dataclass(frozen=True, kw_only=True)
class GroupLayout:
    """A rank's place in ``num_groups`` groups of ``group_size`` consecutive ranks.

    Attributes
    ----------
    num_groups, group_size
        G and S, with ``G * S`` the world size.
    group_index
        The group this rank belongs to (``rank // S``).
    index_in_group
        Its position inside the group (``rank % S``).
    intra
        Communicator of this rank's group (its S members).
    inter
        Communicator of the G ranks that share this rank's ``index_in_group``
        (one member of every group).
    """

    num_groups: int
    group_size: int
    group_index: int
    index_in_group: int
    intra: Any
    inter: Any


@dataclass(frozen=True, kw_only=True)
class RankContext:
    """What a launched function receives: its rank, the world size and the optional group layout."""

    rank: int
    world_size: int
    layout: GroupLayout | None = None


@dataclass(frozen=True, kw_only=True)
class _Outcome:
    rank: int
    ok: bool
    value: Any = None
    error: str = ""


def build_layout(rank: int, world_size: int, group_size: int) -> GroupLayout:
    """Create the intra-group and inter-group communicators (every rank must call this, in order).

    Parameters
    ----------
    rank, world_size
        This process's rank and the world size of the initialised default group.
    group_size
        S, the number of consecutive ranks per group; must divide ``world_size``.

    Returns
    -------
    GroupLayout
        This rank's layout.

    Raises
    ------
    ValueError
        If ``group_size`` does not divide ``world_size``.
    """
    if group_size < 1 or world_size % group_size:
        raise ValueError(f"group_size {group_size} must divide world_size {world_size}")
    num_groups = world_size // group_size
    intra = inter = None
    # dist.new_group is collective over the whole world: every rank creates every group in the same order.
    for g in range(num_groups):
        pg = dist.new_group(list(range(g * group_size, (g + 1) * group_size)))
        if rank // group_size == g:
            intra = pg
    for s in range(group_size):
        pg = dist.new_group([g * group_size + s for g in range(num_groups)])
        if rank % group_size == s:
            inter = pg
    return GroupLayout(
        num_groups=num_groups,
        group_size=group_size,
        group_index=rank // group_size,
        index_in_group=rank % group_size,
        intra=intra,
        inter=inter,
    )


@dataclass(frozen=True, kw_only=True)
class _RankJob:
    """What every rank of one launch runs: the function and the job's settings."""

    world_size: int
    store_file: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    timeout_s: float
    group_size: int | None
    parent: int


def _rank_main(rank: int, job: _RankJob, results: Any) -> None:
    die_with_parent(job.parent)
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{job.store_file}", rank=rank, world_size=job.world_size,
                                timeout=datetime.timedelta(seconds=max(job.timeout_s, RENDEZVOUS_TIMEOUT_S)))
        layout = build_layout(rank, job.world_size, job.group_size) if job.group_size else None
        value = job.fn(RankContext(rank=rank, world_size=job.world_size, layout=layout), *job.args)
        # gloo's rendezvous can return on one rank while a peer still completes its half of the connection;
        # no rank tears its group down (or exits) until every rank is through, or that peer loses its link
        dist.barrier()
        results.put(_Outcome(rank=rank, ok=True, value=value))
    except BaseException:  # noqa: BLE001 - every failure must reach the parent with its traceback
        results.put(_Outcome(rank=rank, ok=False, error=traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(fn: Callable[..., Any], world_size: int, args: tuple[Any, ...] = (), *, group_size: int | None = None,
           timeout_s: float = 120.0) -> list[Any]:
    """Run ``fn(ctx, *args)`` on ``world_size`` local gloo ranks and return the results in rank order.

    Parameters
    ----------
    fn
        A module-level function (pickled by reference into spawned processes)
        taking a :class:`RankContext` first; its return value must be picklable.
    world_size
        Number of ranks, at least 1.
    args
        Extra positional arguments, passed to every rank.
    group_size
        If given, every rank gets a :class:`GroupLayout` with groups of this
        many consecutive ranks in ``ctx.layout``.
    timeout_s
        Wall-clock limit of the whole job, also the collectives' timeout.

    Returns
    -------
    list
        ``fn``'s return value on each rank, by rank.

    Raises
    ------
    RankFailed
        As soon as one rank raises or dies; the other ranks are killed.
    TimeoutError
        If the job runs longer than ``timeout_s``; all ranks are killed.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="repro-gloo-") as tmp:
        store = str(Path(tmp) / "store")
        job = _RankJob(world_size=world_size, store_file=store, fn=fn, args=args, timeout_s=timeout_s,
                       group_size=group_size, parent=os.getpid())
        procs = [ctx.Process(target=_rank_main, args=(r, job, results), daemon=True) for r in range(world_size)]
        outcomes: dict[int, Any] = {}
        with on_terminate(lambda: _kill_ranks(procs)):
            try:
                _start_single_threaded(procs)
                _collect(procs, results, outcomes, timeout_s)
            finally:
                _kill_ranks(procs)
                for p in procs:
                    p.join(timeout=5)
                results.close()
    return [outcomes[r] for r in range(world_size)]


def _start_single_threaded(procs: list[Any]) -> None:
    """Start the ranks with ``OMP_NUM_THREADS=1`` (they read it when they import torch, before ``_rank_main``)."""
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        for p in procs:
            p.start()
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = saved


def _collect(procs: list[Any], results: Any, outcomes: dict[int, Any], timeout_s: float) -> None:
    """Fill ``outcomes`` with every rank's value; raise as soon as a rank fails, dies or the job times out."""
    world_size = len(procs)
    deadline = time.monotonic() + timeout_s
    while len(outcomes) < world_size:
        try:
            out = results.get(timeout=0.2)
        except queue_module.Empty:
            for r, p in enumerate(procs):
                if r not in outcomes and p.exitcode is not None and p.exitcode != 0:
                    raise RankFailed(r, f"process exited with code {p.exitcode} without reporting") from None
            if time.monotonic() > deadline:
                waiting = sorted(set(range(world_size)) - set(outcomes))
                raise TimeoutError(f"launched job exceeded {timeout_s:g} s; ranks {waiting} never finished") from None
            continue
        if not out.ok:
            raise RankFailed(out.rank, out.error)
        outcomes[out.rank] = out.value


def _kill_ranks(procs: list[Any]) -> None:
    """SIGKILL every rank still alive (safe to call twice, and from a SIGTERM handler)."""
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
