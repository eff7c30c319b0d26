"""Run a chapter: validate its parameters and data, execute it with papermill, publish.

A run stages everything in ``build/staging/<id>/<profile>/``.  Only after the
notebook finished without error and saved its ledger is the staged folder
(record, run facts, executed notebook, figures) put in place of the published
one, ``results/<id>/<profile>/``, in a single exchange.  A failed or killed
run therefore never leaves a result that looks complete, nor a mixture of two
runs.

Every process a run starts carries the run's marker in its environment and
keeps its temporary files in the run's private folder (``$TMPDIR`` points
there), and a watchdog (:mod:`repro.watchdog`) ends them all, and removes the
run's private and staging folders, as soon as the runner dies, whatever
killed it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, TextIO

import yaml
from jupyter_client.manager import AsyncKernelManager
from tqdm import tqdm

from repro import atomic, checkpoints, datasets, deps, params, results, watchdog
from repro.paths import failed_notebook, output_root, published_dir, repo_root, results_dir
from repro.registry import Chapter, load_registry
from repro.verdicts import verdict_class

RUNTIME_PARAMS = ("profile", "output_dir")
_VOLATILE = ("start_time", "end_time", "duration")


class LocalKernelManager(AsyncKernelManager):
    """A kernel that talks to its client over local IPC sockets, not TCP ports.

    The kernel is always on this machine, so TCP (and the kernel's warning
    that it runs over TCP without encryption) buys nothing.  The sockets sit
    in the run's private temporary folder (``tempfile.gettempdir()`` while
    the runner executes): jupyter_client's default is ``kernel-ipc-<n>`` in
    the working directory, numbered from 1, so two runs started at once from
    the repo root would share sockets and fail with "Invalid Signature".
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("ip", str(Path(tempfile.gettempdir()).resolve() / "kernel-ipc"))
        super().__init__(transport="ipc", **kwargs)

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
        """Start the kernel with its stderr in a file beside the connection file, not on our console."""
        log = Path(self.connection_file).with_suffix(".stderr")
        kw.setdefault("stderr", open(log, "ab"))  # noqa: SIM115 - the kernel process owns it until it exits
        await super()._async_launch_kernel(kernel_cmd, **kw)


SOCKET_PATH_MAX = 107
"""Longest path of a Unix socket on Linux (``sun_path`` less its final NUL)."""


KERNEL_DIR_PREFIX = "repro-kernel-"
OWNER_FILE = "owner"
"""The file in a kernel folder naming the runner that made it: ``<pid> <start time>``."""


def kernel_base() -> Path:
    """Where kernel folders go: the temporary folder (``$TMPDIR``), or ``/tmp`` when that path is too long.

    Too long means that ``<folder>/kernel-ipc-<port>`` could not be a Unix socket path.
    """
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) + len(f"/{KERNEL_DIR_PREFIX}xxxxxxxx/kernel-ipc-99999") > SOCKET_PATH_MAX:
        base = "/tmp"
    return Path(base)


def kernel_dir() -> Path:
    """A new private folder for a run's kernel files, short enough to hold its IPC sockets.

    It holds an :data:`OWNER_FILE` naming this process, so that a folder left
    by a runner that died is recognised and removed (:func:`sweep_kernel_dirs`).
    """
    folder = Path(tempfile.mkdtemp(prefix=KERNEL_DIR_PREFIX, dir=kernel_base()))
    (folder / OWNER_FILE).write_text(f"{os.getpid()} {watchdog.process_start_time(os.getpid())}\n")
    return folder


def sweep_kernel_dirs(base: Path | None = None) -> list[Path]:
    """Remove the kernel folders under ``base`` whose runner has died (their owner process is gone).

    A killed run's folder is removed by its watchdog; this catches the rest
    (a watchdog that was killed too).  Folders without an owner file, or whose
    owner still runs, are left alone.

    Returns
    -------
    list of Path
        The folders removed.
    """
    removed = []
    for folder in sorted((base or kernel_base()).glob(f"{KERNEL_DIR_PREFIX}*")):
        try:
            pid, start = (folder / OWNER_FILE).read_text().split()
        except (OSError, ValueError):
            continue
        if str(watchdog.process_start_time(int(pid))) != start:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class RunError(RuntimeError):
    """The chapter's notebook failed; the message names the failing notebook."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A validated run, before anything executes."""

    chapter: Chapter
    profile: str
    values: dict[str, Any]
    expected_s: float | None
    checkpoints_from: Path | None = None


def chapter_inputs(chapter: Chapter, root: Path | None = None) -> list[Path]:
    """Files whose content decides a chapter's outputs: notebook, library modules, env lock."""
    root = root or repo_root()
    nb = root / chapter.notebook
    mods = deps.chapter_modules(nb, root / "lib")
    return [nb, *mods, results.env_lock_path(root), root / "lib" / "repro" / "registry.yaml", root / chapter.source]


def inputs_hash(chapter: Chapter, profile: str, values: dict[str, Any], root: Path | None = None) -> str:
    """Fingerprint of everything a run at ``profile`` depends on (for ``repro status``)."""
    root = root or repo_root()
    h = hashlib.sha256()
    for f in chapter_inputs(chapter, root):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes() if f.is_file() else b"<missing>")
    for name in chapter.datasets:
        h.update(f"dataset {name}".encode())
        h.update(datasets.fingerprint(name).encode())
    h.update(yaml.safe_dump({"profile": profile, "values": values}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def history(chapter_id: str) -> list[dict[str, Any]]:
    """Every recorded run of a chapter (oldest first)."""
    p = results_dir(chapter_id) / "runs.jsonl"
    if not p.is_file():
        return []
    out = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            warnings.warn(f"{p}: line {n} is torn (a run was killed while appending); skipped", stacklevel=2)
    return out


def expected_seconds(chapter_id: str, profile: str) -> float | None:
    """Median wall time of the recorded runs at ``profile`` (``None`` if never run)."""
    times = [r["wall_time_s"] for r in history(chapter_id) if r.get("profile") == profile and r.get("ok")]
    return float(statistics.median(times[-5:])) if times else None


REUSE_PARAMETER = "reuse_checkpoints"
"""A chapter that declares this bool parameter can be redrawn from its published checkpoints without retraining."""
CHECKPOINTS = "checkpoints"
"""The folder of a run's set (``output_dir/checkpoints``) holding its trained models."""


def checkpoint_source(chapter: Chapter, profile: str, values: dict[str, Any]) -> Path | None:
    """The published checkpoints a run with ``reuse_checkpoints`` starts from (``None`` when it trains afresh).

    The published run at the same profile must have checkpoints and have been
    made with the same values of every other parameter, so that what is
    redrawn is what those values would have trained; and every checkpoint
    must still have the sha256 recorded when that run published it.

    Raises
    ------
    repro.params.ParameterError
        Naming ``reuse_checkpoints``, when there is nothing to reuse, it was
        trained with other values (the differing parameters are listed) or a
        checkpoint is corrupted (the file is named).
    """
    if not values.get(REUSE_PARAMETER):
        return None
    published = published_dir(chapter.id, profile)
    folder = published / CHECKPOINTS
    record = published / "record.json"
    if not record.is_file() or not folder.is_dir() or not any(folder.iterdir()):
        raise params.ParameterError(
            f"parameter {REUSE_PARAMETER!r}: there is no published {profile} run of {chapter.id!r} with checkpoints; "
            f"run it once with {REUSE_PARAMETER}=false")
    published_record = json.loads(record.read_text())
    old = published_record["parameters"]
    differ = [k for k in sorted(set(old) | set(values)) if k != REUSE_PARAMETER and old.get(k) != values.get(k)]
    if differ:
        got = "; ".join(f"{k}: {old.get(k)!r} there, {values.get(k)!r} here" for k in differ)
        raise params.ParameterError(
            f"parameter {REUSE_PARAMETER!r}: the published {profile} run of {chapter.id!r} was trained with other "
            f"values ({got}); run with {REUSE_PARAMETER}=false to train with these")
    try:
        checkpoints.verify_checkpoints(folder, published_record.get(checkpoints.RECORD_KEY))
    except checkpoints.CheckpointCorrupted as exc:
        raise params.ParameterError(
            f"parameter {REUSE_PARAMETER!r}: {exc}; run with {REUSE_PARAMETER}=false to train again") from None
    return folder


def _recorded_checkpoints(checkpoints_from: Path) -> dict[str, str] | None:
    """The checkpoint hashes in the record of the published set that holds ``checkpoints_from``."""
    record = json.loads((checkpoints_from.parent / "record.json").read_text())
    hashes = record.get(checkpoints.RECORD_KEY)
    return None if hashes is None else {str(k): str(v) for k, v in hashes.items()}


def plan(chapter_id: str, profile: str = params.DEFAULT_PROFILE, overrides: list[str] | None = None) -> Plan:
    """Validate a run request; raises before any kernel starts.

    Parameters
    ----------
    chapter_id
        Registry id.
    profile
        ``smoke``, ``cpu`` or ``paper``.
    overrides
        ``key=value`` strings (values parsed as YAML).

    Raises
    ------
    KeyError
        Unknown chapter.
    repro.params.ParameterError
        Unknown parameter, wrong type or out-of-range value.
    """
    chapter = load_registry().get(chapter_id)
    parsed = dict(params.parse_override(o) for o in overrides or [])
    values = params.resolve(chapter, profile, parsed)
    for name in chapter.datasets:
        datasets.verify(name)
    return Plan(chapter=chapter, profile=profile, values=values, expected_s=expected_seconds(chapter_id, profile),
                checkpoints_from=checkpoint_source(chapter, profile, values))


def strip_volatile(nb: dict[str, Any]) -> dict[str, Any]:
    """Remove timestamps and durations from an executed notebook (DVC hashes it).

    That is papermill's and Jupyter's execution times, and the stderr streams,
    which hold progress bars with elapsed times and rates (the book hides
    stderr anyway; a failed run keeps everything in its ``.failed.ipynb``).
    """
    pm = nb.get("metadata", {}).get("papermill", {})
    for k in _VOLATILE:
        pm.pop(k, None)
    pm.pop("input_path", None)
    pm.pop("output_path", None)
    for cell in nb.get("cells", []):
        if "outputs" in cell:
            cell["outputs"] = [o for o in cell["outputs"] if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
        md = cell.get("metadata", {})
        md.pop("execution", None)
        for k in _VOLATILE:
            md.get("papermill", {}).pop(k, None)
    return nb


def _lock(chapter_id: str, profile: str) -> TextIO:
    path = output_root() / "build" / "locks" / f"{chapter_id}.{profile}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        fh.close()
        raise RunError(f"{chapter_id} at {profile} is already running ({path})") from exc
    return fh


def command_line(p: Plan, overrides: list[str] | None) -> str:
    """The command that reruns this exact run."""
    extra = "".join(f" -p {o}" for o in overrides or [])
    return f"repro run {p.chapter.id} --profile {p.profile}{extra}"


def execute(p: Plan, overrides: list[str] | None = None, log_output: bool = False) -> dict[str, Any]:
    """Execute a planned run with papermill and publish its outputs as one set.

    Returns
    -------
    dict
        The published ledger record (claims plus provenance).

    Raises
    ------
    RunError
        If the notebook fails or saves no ledger; nothing is published then.
    """
    import papermill as pm

    root = repo_root()
    ch = p.chapter
    lock = _lock(ch.id, p.profile)
    staging = output_root() / "build" / "staging" / ch.id / p.profile
    sweep_kernel_dirs()
    kernel_tmp = kernel_dir()
    saved_tempdir = tempfile.tempdir
    run_id = watchdog.new_run_id()
    dog = watchdog.Watchdog(run_id, watchdog.RunFolders(kernel_dir=kernel_tmp, staging=staging, lock=Path(lock.name)))
    dog.start()  # ends every process of the run if this one dies, however
    saved_env = {name: os.environ.get(name) for name in (watchdog.RUN_ID_ENV, "TMPDIR")}
    os.environ[watchdog.RUN_ID_ENV] = run_id  # the kernel and everything it starts inherit it
    os.environ["TMPDIR"] = str(kernel_tmp)  # and their temporary files go where the watchdog cleans
    try:
        if staging.exists():
            shutil.rmtree(staging)
        (staging / "figures").mkdir(parents=True)
        if p.checkpoints_from is not None:  # the published set is replaced at the end; its models start this one
            shutil.copytree(p.checkpoints_from, staging / CHECKPOINTS)
            try:  # checked again as copied: the published files may have changed since the plan
                checkpoints.verify_checkpoints(staging / CHECKPOINTS, _recorded_checkpoints(p.checkpoints_from))
            except checkpoints.CheckpointCorrupted as exc:
                raise RunError(f"chapter {ch.id!r}: {REUSE_PARAMETER}: {exc}; nothing was run") from None
        staged_nb = staging / "executed.ipynb"
        values = {**p.values, "profile": p.profile, "output_dir": str(staging)}
        os.environ.setdefault("REPRO_ROOT", str(root))
        os.environ.pop("MPLBACKEND", None)  # a non-inline backend would drop the figures from the page
        tempfile.tempdir = str(kernel_tmp)  # kernel connection files go here and are removed, even on Ctrl-C
        t0 = time.monotonic()
        try:
            with _interrupts_noted() as interrupted, _engine_logs_to(kernel_tmp / "engine.log", keep=log_output):
                pm.execute_notebook(
                    str(root / ch.notebook), str(staged_nb), parameters=values, kernel_name="python3",
                    cwd=str(root), progress_bar=False, log_output=log_output,
                    kernel_manager_class=LocalKernelManager,
                )
        except KeyboardInterrupt:
            _quiet_abandoned_tasks()
            raise
        except Exception as exc:  # papermill raises PapermillExecutionError and others
            if interrupted.is_set():  # Ctrl-C reached the kernel too, which then "died"
                _quiet_abandoned_tasks()
                raise KeyboardInterrupt from None
            failed = failed_notebook(ch.id, p.profile)
            if staged_nb.is_file():
                atomic.write_bytes(failed, staged_nb.read_bytes())
            kernel_log = "".join(f.read_text(errors="replace") for f in kernel_tmp.glob("*.stderr"))
            if "Kernel died" in str(exc) and kernel_log.strip():
                exc = RuntimeError(f"{exc}\nthe kernel's last words:\n" + "\n".join(kernel_log.splitlines()[-20:]))
            _append_history(ch.id, {"profile": p.profile, "ok": False, "wall_time_s": time.monotonic() - t0,
                                    "finished_at": _now()})
            raise RunError(f"chapter {ch.id!r} failed at profile {p.profile!r}: {exc}\n(notebook kept at {failed})") from exc
        finally:
            tempfile.tempdir = saved_tempdir
        wall = time.monotonic() - t0
        ledger = staging / results.LEDGER_NAME
        if not ledger.is_file():
            raise RunError(f"chapter {ch.id!r} did not save its ledger (call Ledger.save() in the notebook)")
        claims = json.loads(ledger.read_text())
        nb = strip_volatile(json.loads(staged_nb.read_text()))
        nb_text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        nb_text = nb_text.replace(str(staging), f"build/staging/{ch.id}/{p.profile}")
        record = {
            "chapter": ch.id,
            "profile": p.profile,
            "claims": claims["claims"],
            "parameters": p.values,
            "provenance": {
                "git_sha": results.git_sha(root),
                "env_lock": str(results.env_lock_path(root).relative_to(root)),
                "env_lock_sha256": results.env_lock_hash(root),
                "hardware": results.hardware(),
                "python": sys.version.split()[0],
                "command": command_line(p, overrides),
                **({"checkpoints_from": _trained_by(p.checkpoints_from)} if p.checkpoints_from else {}),
            },
            "figures": sorted(f.name for f in (staging / "figures").iterdir()),
        }
        saved = checkpoints.checkpoint_hashes(staging / CHECKPOINTS)
        if saved:  # checked before any reuse (checkpoint_source)
            record[checkpoints.RECORD_KEY] = saved
        run = {"profile": p.profile, "ok": True, "wall_time_s": round(wall, 2), "finished_at": _now(),
               "inputs_hash": inputs_hash(ch, p.profile, p.values, root)}
        atomic.write_text(staged_nb, nb_text)
        atomic.write_json(staging / "run.json", run)
        atomic.write_json(staging / "record.json", record)
        publish(staging, published_dir(ch.id, p.profile))
        _append_history(ch.id, run)
        record["run"] = run
        return record
    finally:
        tempfile.tempdir = saved_tempdir
        for name, value in saved_env.items():
            _restore_env(name, value)
        dog.finish()  # ends stragglers (a Ray daemon, an app a SuperLink left)
        shutil.rmtree(kernel_tmp, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)  # a run that did not publish leaves nothing staged
        _remove_empty_parents(staging)
        lock.close()


def _restore_env(name: str, value: str | None) -> None:
    """Set ``os.environ[name]`` back to ``value`` (``None``: unset)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _trained_by(folder: Path) -> str:
    """Which earlier run trained the reused checkpoints in ``folder``: its git commit and when it finished."""
    published = folder.parent
    prov = json.loads((published / "record.json").read_text()).get("provenance", {})
    trained = prov.get("checkpoints_from")  # a redraw of a redraw names the run that trained
    if trained:
        return str(trained)
    run = json.loads((published / "run.json").read_text()) if (published / "run.json").is_file() else {}
    return f"the run of {prov.get('git_sha', '?')} finished at {run.get('finished_at', '?')}"


_ENGINE_LOGGERS = ("papermill", "nbclient", "asyncio", "traitlets", "jupyter_client")


@contextlib.contextmanager
def _engine_logs_to(path: Path, keep: bool) -> Iterator[None]:
    """Send the execution engine's log records to ``path`` instead of the console (unless ``keep``).

    A failure still reaches the user, as a :class:`RunError` naming the notebook; an interrupted run
    ends with one line, not with the tracebacks the engine logs while its kernel shuts down.
    """
    if keep:
        yield
        return
    handler = logging.FileHandler(path)
    saved = []
    for name in _ENGINE_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers, logger.propagate = [handler], False
    try:
        yield
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate
        handler.close()


def _quiet_abandoned_tasks() -> None:
    """After a Ctrl-C, keep asyncio from printing the kernel client's abandoned tasks as tracebacks at exit.

    nbclient watches the kernel from asyncio tasks; when Ctrl-C stops the run,
    a task whose kernel died with it ends with ``DeadKernelError`` and nobody
    awaits it, so asyncio would log "Task exception was never retrieved" with a
    traceback when the process exits, after the one-line message.  The run is
    over and reported, so that logger is silenced for the rest of the process.
    """
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)


@contextlib.contextmanager
def _interrupts_noted() -> Iterator[threading.Event]:
    """Note a Ctrl-C (and still raise ``KeyboardInterrupt``) while a kernel runs."""
    noted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def on_sigint(signum: int, frame: Any) -> None:
        noted.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def publish(staged: Path, published: Path) -> None:
    """Put the staged set in place of the published one in one step, then drop the old set.

    A kill at any instant leaves either the old set or the new one at
    ``published``; the old set, moved to ``staged`` by the exchange, is removed
    afterwards (or by the next run, which clears its staging folder first).
    """
    atomic.exchange_dirs(staged, published)
    shutil.rmtree(staged, ignore_errors=True)


def _remove_empty_parents(staging: Path) -> None:
    """Remove the staging folder and its chapter folder if a run left them empty."""
    for d in (staging, staging.parent):
        if not d.exists():
            continue
        try:
            d.rmdir()
        except OSError:
            break


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _append_history(chapter_id: str, entry: dict[str, Any]) -> None:
    p = results_dir(chapter_id) / "runs.jsonl"
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def status(chapter: Chapter) -> dict[str, dict[str, Any]]:
    """Per profile: ``fresh``, ``stale`` or ``never run``, and the last wall time."""
    out: dict[str, dict[str, Any]] = {}
    for prof in params.PROFILES:
        rec = results.load_result(chapter.id, prof)
        if rec is None or "run" not in rec:
            out[prof] = {"state": "never run", "wall_time_s": None}
            continue
        try:
            values = params.resolve(chapter, prof, {k: v for k, v in rec["parameters"].items()})
            now = inputs_hash(chapter, prof, values)
            default = params.resolve(chapter, prof)
        except (params.ParameterError, FileNotFoundError):
            now, default = None, None
        state = "fresh" if now == rec["run"].get("inputs_hash") and values == default else "stale"
        out[prof] = {"state": state, "wall_time_s": rec["run"]["wall_time_s"]}
    return out


def verdict_counts(record: dict[str, Any] | None) -> dict[str, int]:
    """How many of a published record's claims fall in each scoreboard class."""
    counts: dict[str, int] = {}
    for c in (record or {}).get("claims", {}).values():
        name = verdict_class(c["verdict"])
        counts[name] = counts.get(name, 0) + 1
    return counts


@dataclass(frozen=True, kw_only=True)
class ChapterOutcome:
    """What :func:`run_stale` did with one chapter."""

    chapter: str
    profile: str
    action: str  # "ran", "fresh" (left alone) or "failed"
    wall_time_s: float | None
    verdicts: dict[str, int]

    def line(self) -> str:
        """One line for the log of a book build."""
        wall = "" if self.wall_time_s is None else f"{self.wall_time_s:6.1f} s"
        counts = ", ".join(f"{k}: {n}" for k, n in self.verdicts.items())
        return f"{self.chapter:<24} {self.profile:<6} {self.action:<6} {wall:>9}  {counts}"


def run_stale(chapters: list[Chapter], profile: str) -> list[ChapterOutcome]:
    """Run every chapter whose result at ``profile`` is not fresh; one log line per chapter.

    A progress bar runs across the chapters; a failing chapter is reported and
    the others still run (the caller decides whether a failure stops the build).
    """
    out = []
    bar = tqdm(chapters, desc=f"chapters at {profile}", unit="chapter")
    for ch in bar:
        bar.set_postfix_str(ch.id)
        rec = results.load_result(ch.id, profile)
        if rec is not None and status(ch)[profile]["state"] == "fresh":
            outcome = ChapterOutcome(
                chapter=ch.id,
                profile=profile,
                action="fresh",
                wall_time_s=rec["run"]["wall_time_s"],
                verdicts=verdict_counts(rec),
            )
        else:
            try:
                rec = execute(plan(ch.id, profile))
                outcome = ChapterOutcome(
                    chapter=ch.id,
                    profile=profile,
                    action="ran",
                    wall_time_s=rec["run"]["wall_time_s"],
                    verdicts=verdict_counts(rec),
                )
            except RunError as exc:
                outcome = ChapterOutcome(chapter=ch.id, profile=profile, action="failed", wall_time_s=None, verdicts={"error": 1})
                bar.write(f"{ch.id}: {str(exc).splitlines()[0]}")
        bar.write(outcome.line())
        out.append(outcome)
    return out
