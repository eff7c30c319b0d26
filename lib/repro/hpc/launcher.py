"""Launch Python under ``mpiexec`` with a hard timeout and a clear error.

Every rank runs ``python -m mpi4py <program>``: mpi4py's runner turns an
unhandled exception or a non-zero ``sys.exit`` in any rank into
``MPI_Abort``, so the whole job ends at once and the failing rank's traceback
(or exit message) is in the error, instead of the other ranks waiting in a
collective until the timeout.

The ``mpiexec`` used is the one beside ``sys.executable`` (PyPI's ``mpich``
puts it in the venv's ``bin/``); ``REPRO_MPIEXEC`` overrides it.  The launch
runs in its own process group so that, on timeout, on an exception in the
caller and when the caller gets SIGTERM (:func:`repro.watchdog.on_terminate`),
``mpiexec`` and every rank are killed together and nothing is left hanging.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from repro.watchdog import on_terminate

TAIL_CHARS = 2000


class MPIRunError(RuntimeError):
    """An ``mpiexec`` launch failed or timed out.

    Attributes
    ----------
    nprocs, timeout, returncode, stdout, stderr, timed_out:
        What was asked and what came back (``returncode`` is ``None`` on timeout).
    """

    def __init__(self, message: str, *, nprocs: int, timeout: float, returncode: int | None,
                 stdout: str, stderr: str, timed_out: bool) -> None:
        super().__init__(message)
        self.nprocs, self.timeout, self.returncode = nprocs, timeout, returncode
        self.stdout, self.stderr, self.timed_out = stdout, stderr, timed_out


def find_mpiexec() -> Path:
    """Path of ``mpiexec``: ``$REPRO_MPIEXEC``, else the one next to ``sys.executable``.

    Raises
    ------
    FileNotFoundError
        If neither exists (install ``mpich`` from PyPI into the venv).
    """
    env = os.environ.get("REPRO_MPIEXEC")
    cand = Path(env) if env else Path(sys.executable).parent / "mpiexec"
    if not cand.is_file():
        raise FileNotFoundError(f"mpiexec not found at {cand}; `pip install mpich` into the venv "
                                f"or set REPRO_MPIEXEC")
    return cand


def _tail(text: str, chars: int = TAIL_CHARS) -> str:
    text = text.strip()
    if not text:
        return "(empty)"
    return text if len(text) <= chars else "..." + text[-chars:]


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def run_mpi(args: Sequence[str], nprocs: int, timeout: float, *, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``mpiexec -n nprocs <python> -m mpi4py *args`` and wait at most ``timeout`` seconds.

    Parameters
    ----------
    args:
        The program as mpi4py's runner takes it: a script and its arguments,
        ``["-m", "package.module", ...]`` or ``["-c", "code", ...]``.
    nprocs:
        Number of ranks (oversubscription is fine with MPICH; when ``nprocs``
        exceeds the CPU count, ``MPIR_CVAR_ENABLE_HEAVY_YIELD=1`` is set unless
        already set).
    timeout:
        Wall-clock limit in seconds for the whole launch.
    env:
        Extra environment variables.
    cwd:
        Working directory.

    Returns
    -------
    subprocess.CompletedProcess
        With text ``stdout`` and ``stderr``, when ``mpiexec`` exits with 0.

    Raises
    ------
    MPIRunError
        On timeout (every process of the launch is killed first) or a non-zero
        exit (a rank that raised or called ``sys.exit`` with a non-zero status
        aborts the job); the message names the rank count, the timeout or exit
        code, the command and the tail of stderr, which holds the failing
        rank's traceback or exit message.
    """
    if nprocs < 1:
        raise ValueError("nprocs must be >= 1")
    cmd = [str(find_mpiexec()), "-n", str(nprocs), sys.executable, "-m", "mpi4py", *map(str, args)]
    full_env = dict(os.environ)
    if nprocs > (os.cpu_count() or 1):
        # Oversubscribed: let MPICH's busy-wait loops yield the core (several times faster
        # and far less system time with 16 ranks on 2 cores).  Ignored by other MPIs.
        full_env.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    full_env.update(env or {})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full_env, cwd=cwd, start_new_session=True)
    try:
        with on_terminate(lambda: _kill_group(proc)):
            out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        raise MPIRunError(
            f"mpiexec with {nprocs} ranks timed out after {timeout:g} s and was killed\n"
            f"command: {' '.join(cmd)}\nstderr tail:\n{_tail(_decode(err))}",
            nprocs=nprocs, timeout=timeout, returncode=None, stdout=_decode(out),
            stderr=_decode(err), timed_out=True) from None
    except BaseException:
        _kill_group(proc)
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise MPIRunError(
            f"mpiexec with {nprocs} ranks exited with code {proc.returncode}\n"
            f"command: {' '.join(cmd)}\nstderr tail:\n{_tail(err)}\nstdout tail:\n{_tail(out, 500)}",
            nprocs=nprocs, timeout=timeout, returncode=proc.returncode, stdout=out, stderr=err,
            timed_out=False)
    return subprocess.CompletedProcess(cmd, 0, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill the launch's whole process group (mpiexec, its proxy and every rank)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
