"""No orphans: every process a run starts ends with the run, even when the run is killed.

A chapter's processes do not share the run's process group: the kernel runs
in its own session (jupyter_client), ``mpiexec`` and Flower's SuperLink and
SuperNodes in sessions of their own, and Ray's daemons detach.  A kill of the
``repro run`` process group (Ctrl-C, a cluster's job kill, ``kill -9``) would
reach only the runner.  So instead of process groups, the run marks its
processes:

* the runner puts ``REPRO_RUN_ID=<uuid>`` (:data:`RUN_ID_ENV`) in the
  environment it starts the kernel with, so every descendant inherits it,
  whatever session it moves to;
* it starts this module as a watchdog process in a session of its own
  (:class:`Watchdog`), connected by a pipe.  When the runner dies, by any
  signal, the kernel closes the pipe and the watchdog ends every process that
  carries the marker (:func:`end_marked`: SIGTERM, then SIGKILL after a short
  grace), then removes the run's kernel folder and, holding the run's lock,
  its staging folder.  When the run ends normally the runner says so first,
  and the watchdog only ends stragglers.

Inside the kernel, :func:`on_terminate` lets a component that started
processes (a local Flower deployment, an ``mpiexec`` launch, gloo ranks) stop
them itself when the kernel gets SIGTERM (the watchdog's first signal) or the
interpreter exits; and :func:`die_with_parent` asks the kernel of Linux to kill
a child when its parent dies.

Run as ``python -m repro.watchdog --parent PID --run-id ID [--kernel-dir D]
[--staging D --lock F]`` (by :class:`Watchdog`, not by hand).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import fcntl
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Callable, Iterator, Sequence

RUN_ID_ENV = "REPRO_RUN_ID"
"""The environment variable that marks every process of one ``repro run``."""
DONE = b"done\n"
"""What the runner writes to the watchdog's stdin when the run ended normally."""
GRACE_S = 3.0
"""Seconds between SIGTERM and SIGKILL for the marked processes."""
GIVE_UP_S = 60.0
"""Seconds after which :func:`end_marked` stops looking for new marked processes."""
POLL_S = 0.05
PR_SET_PDEATHSIG = 1


def new_run_id() -> str:
    """A fresh marker value (a UUID4, hex)."""
    return uuid.uuid4().hex


def process_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (``None`` if it is gone).

    With the pid it identifies a process for good: a pid can be reused, a
    (pid, start time) pair cannot.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(stat.rpartition(")")[2].split()[19])


def is_zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits for its parent to reap it (or is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return True


def marked_pids(value: str, var: str = RUN_ID_ENV, exclude: Sequence[int] = ()) -> list[int]:
    """The live processes whose initial environment holds ``var=value`` (zombies and ``exclude`` left out).

    Parameters
    ----------
    value
        The marker's value (a run id).
    var
        The marker's name.
    exclude
        Pids never returned (this process is always left out).

    Returns
    -------
    list of int
        Sorted pids.
    """
    needle = f"{var}={value}".encode()
    skip = {os.getpid(), *exclude}
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            env = Path(entry.path, "environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if needle in env.split(b"\0") and not is_zombie(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def end_marked(value: str, var: str = RUN_ID_ENV, *, grace_s: float = GRACE_S, give_up_s: float = GIVE_UP_S,
               exclude: Sequence[int] = ()) -> int:
    """End every process marked ``var=value``: SIGTERM, SIGKILL after ``grace_s``, until none is left.

    Processes that appear meanwhile (a SuperLink starting an app, Ray
    restarting a worker) are caught by the rescans.

    Parameters
    ----------
    value, var
        The marker.
    grace_s
        Seconds the processes get to stop on SIGTERM before SIGKILL.
    give_up_s
        Seconds after which the scan stops even if marked processes remain.
    exclude
        Pids left alone.

    Returns
    -------
    int
        How many distinct processes were signalled.
    """
    signalled: set[int] = set()
    start = time.monotonic()
    while time.monotonic() - start < give_up_s:
        pids = marked_pids(value, var, exclude)
        if not pids:
            break
        _signal_all(pids, signal.SIGTERM)
        signalled.update(pids)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            time.sleep(POLL_S)
            pids = marked_pids(value, var, exclude)
            _signal_all([p for p in pids if p not in signalled], signal.SIGTERM)
            signalled.update(pids)
        _signal_all(pids, signal.SIGKILL)
    return len(signalled)


# ------------------------------------------------------------------ inside the kernel
_STOPPERS: dict[int, Callable[[], None]] = {}
_COUNTER = itertools.count()
_LOCK = threading.RLock()  # re-entrant: the SIGTERM handler may run while the main thread holds it
_HOOKS = {"atexit": False, "sigterm": False}


def _run_stoppers() -> None:
    with _LOCK:
        stoppers = list(_STOPPERS.values())[::-1]
        _STOPPERS.clear()
    for stop in stoppers:
        with contextlib.suppress(Exception):
            stop()


def _install() -> None:
    """Install the exit hook once, and the SIGTERM handler once it can be (from the main thread)."""
    if not _HOOKS["atexit"]:
        _HOOKS["atexit"] = True
        atexit.register(_run_stoppers)
    if _HOOKS["sigterm"] or threading.current_thread() is not threading.main_thread():
        return
    _HOOKS["sigterm"] = True
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None) and not callable(previous):
        return  # SIGTERM is ignored here: leave it so

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        _run_stoppers()
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


@contextlib.contextmanager
def on_terminate(stop: Callable[[], None]) -> Iterator[None]:
    """Within the block, run ``stop`` if this process gets SIGTERM or the interpreter exits.

    ``stop`` must be quick (a few seconds at most) and safe to call twice
    (the block's own clean-up usually calls it again).  On SIGTERM the
    stoppers run newest first and the process then ends as SIGTERM would
    have ended it (or the previous handler runs).

    Parameters
    ----------
    stop
        Stops what the block started.
    """
    with _LOCK:
        _install()
        key = next(_COUNTER)
        _STOPPERS[key] = stop
    try:
        yield
    finally:
        with _LOCK:
            _STOPPERS.pop(key, None)


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies; exit now if it already has.

    Parameters
    ----------
    parent
        The pid the caller expects as its parent (to close the race where it died before this call).
    sig
        The signal to receive.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


# ------------------------------------------------------------------ around a run
@dataclass(frozen=True, kw_only=True)
class RunFolders:
    """What the watchdog removes after a killed run.

    Attributes
    ----------
    kernel_dir
        The run's private temporary folder (kernel connection files, IPC sockets).
    staging
        The run's staging folder, removed only while holding ``lock``.
    lock
        The run's lock file (``build/locks/<id>.<profile>.lock``): a run that
        started since holds it, and then owns ``staging``.
    """

    kernel_dir: Path | None = None
    staging: Path | None = None
    lock: Path | None = None


def remove_folders(folders: RunFolders) -> None:
    """Remove a dead run's kernel folder, and its staging folder unless another run holds the lock."""
    if folders.kernel_dir is not None:
        shutil.rmtree(folders.kernel_dir, ignore_errors=True)
    if folders.staging is None or folders.lock is None or not folders.staging.exists():
        return
    try:
        fh = folders.lock.open("a")
    except OSError:
        return
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a new run of the chapter owns the staging folder now
        shutil.rmtree(folders.staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            folders.staging.parent.rmdir()  # the chapter's folder, if no other profile is staged


class Watchdog:
    """The watchdog process of one run (see the module docstring); a context manager.

    Parameters
    ----------
    run_id
        The marker value of the run's processes.
    folders
        What to remove if the run dies.
    """

    def __init__(self, run_id: str, folders: RunFolders) -> None:
        self.run_id = run_id
        self.folders = folders
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the watchdog in a session of its own, without the marker."""
        cmd = [sys.executable, "-m", "repro.watchdog", "--parent", str(os.getpid()), "--run-id", self.run_id]
        for flag, path in (("--kernel-dir", self.folders.kernel_dir), ("--staging", self.folders.staging),
                           ("--lock", self.folders.lock)):
            if path is not None:
                cmd += [flag, str(path)]
        env = {k: v for k, v in os.environ.items() if k != RUN_ID_ENV}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env, start_new_session=True)

    def finish(self, timeout: float = GIVE_UP_S + 30) -> None:
        """The run ended normally: let the watchdog end stragglers, and wait for it."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(DONE)
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> Watchdog:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


def watch(parent: int, run_id: str, folders: RunFolders, stdin: int = 0) -> int:
    """The watchdog's loop: wait for the runner's word or its death, then end the run's processes.

    Parameters
    ----------
    parent
        The runner's pid (never signalled).
    run_id
        The marker of the run's processes.
    folders
        What to remove when the runner died.
    stdin
        The pipe from the runner.

    Returns
    -------
    int
        The exit status (0).
    """
    received = b""
    while True:
        try:
            chunk = os.read(stdin, 64)
        except InterruptedError:
            continue
        if not chunk:
            break
        received += chunk
    end_marked(run_id, exclude=[parent])
    if not received.startswith(DONE):  # the runner died: its folders are ours to clean
        remove_folders(folders)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m repro.watchdog``."""
    ap = argparse.ArgumentParser(description="end a repro run's processes when the run dies (internal)")
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--kernel-dir", type=Path)
    ap.add_argument("--staging", type=Path)
    ap.add_argument("--lock", type=Path)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return watch(args.parent, args.run_id, RunFolders(kernel_dir=args.kernel_dir, staging=args.staging, lock=args.lock))


if __name__ == "__main__":
    sys.exit(main())
