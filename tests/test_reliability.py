"""Reliability: corrupted data is refused, never blessed; runs publish as one set; small failures stay small.

Each case here failed on the landed main of 2720ec0 (the reliability sweep of the data-integrity issue).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from repro import datasets, params, runner, watchdog
from repro.registry import load_registry
from repro.results import Ledger

REG = load_registry()


def _cli(args: list[str], root: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "repro.cli", *args], cwd=root, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "REPRO_ROOT": str(root), "REPRO_OUTPUT_ROOT": str(root), **env})


def test_repro_data_refuses_a_corrupted_file_and_leaves_data_dvc_alone(data_root, corrupt):
    before = (data_root / "data.dvc").read_text()
    corrupt(data_root / "data" / "fashion_mnist" / "test_y.npy")
    proc = _cli(["data"], data_root)
    assert proc.returncode == 1
    assert "data/fashion_mnist/test_y.npy" in proc.stderr and "dvc checkout --force data.dvc" in proc.stderr
    assert (data_root / "data.dvc").read_text() == before


def test_a_rewritten_data_dvc_does_not_bless_corrupted_data(data_root, corrupt):
    """`dvc repro` and `dvc add` rewrite data.dvc to the corrupted hash; the committed record still refuses it."""
    subprocess.run(["git", "init", "-q", str(data_root)], check=True)
    subprocess.run(["git", "-C", str(data_root), "add", "data.dvc"], check=True)
    subprocess.run(["git", "-C", str(data_root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "data"],
                   check=True)
    corrupt(data_root / "data" / "fashion_mnist" / "train_x.npy")
    dvc_file = data_root / "data.dvc"
    bad_hash = datasets.dir_hash(datasets.manifest(data_root / "data"))
    dvc_file.write_text(dvc_file.read_text().replace(datasets.recorded_hash(data_root), bad_hash))  # what dvc repro does
    with pytest.raises(datasets.DataIntegrityError, match="git checkout data.dvc"):
        datasets.verify("fashion_mnist", data_root)


def _dvc(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DVC_NO_ANALYTICS": "1"})


def test_dvc_repro_never_rewrites_data_dvc_over_corrupted_data(root, tmp_path, corrupt):
    """The generated stage of a chapter that reads data, in a scratch DVC project: `dvc repro` leaves data.dvc alone.

    With a dependency under data/ (the old generator), DVC re-saves the data source data.dvc before running the
    stage, so one flipped byte became the recorded version.  The stage's command is replaced by a refusal (what
    `repro run` does with corrupted data); everything else is the generator's.
    """
    from repro import dvcgen

    chapter = REG.get("fedlama")
    assert chapter.datasets
    stage = dvcgen.stage(chapter, root)
    assert not [d for d in stage["deps"] if d == "data" or d.startswith("data/")]
    assert _dvc(["init", "-q", "--no-scm"], tmp_path).returncode == 0
    for dep in [d for d in [*stage["deps"], chapter.params_file] if not d.startswith("data/")]:
        (tmp_path / dep).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / dep).write_bytes((root / dep).read_bytes())
    dataset = tmp_path / "data" / chapter.datasets[0]
    dataset.mkdir(parents=True)
    (dataset / "train_x.npy").write_bytes(bytes(range(256)) * 64)
    assert _dvc(["add", "-q", "data"], tmp_path).returncode == 0
    before = (tmp_path / "data.dvc").read_text()
    stage["cmd"] = "exit 2"
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {chapter.id: stage}}, sort_keys=False))
    corrupt(dataset / "train_x.npy")
    proc = _dvc(["repro", chapter.id], tmp_path)
    assert proc.returncode != 0, proc.stdout + proc.stderr  # the stage's refusal
    assert (tmp_path / "data.dvc").read_text() == before


def test_no_stage_of_dvc_yaml_depends_on_data(root):
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    assert not {sid: d for sid, st in stages.items() for d in st["deps"] if d == "data" or d.startswith("data/")}
    assert all("lib/repro/datasets.py" in stages[c.id]["deps"] for c in REG.chapters if c.datasets)


def test_makefile_checks_data_before_dvc_add(root):
    recipe = (root / "Makefile").read_text().split("\ndata:", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in recipe.splitlines() if line.startswith("\t")]
    assert lines.index("repro data") < next(i for i, line in enumerate(lines) if line.startswith("dvc add"))


def test_run_refuses_corrupted_declared_data_before_the_kernel(data_root, corrupt):
    ch = REG.get("fedlama")
    assert "fashion_mnist" in ch.datasets
    corrupt(data_root / "data" / "fashion_mnist" / "train_y.npy")
    proc = _cli(["run", "fedlama", "--profile", "smoke"], data_root)
    assert proc.returncode == 2 and "dataset 'fashion_mnist'" in proc.stderr and "train_y.npy" in proc.stderr
    # refused in the plan: no kernel started, so nothing was staged or published (no timing: a loaded machine is slow)
    assert not (data_root / "results").exists() and not (data_root / "build" / "staging").exists()


def test_input_fingerprint_includes_declared_data(data_root, monkeypatch, corrupt):
    monkeypatch.setenv("REPRO_ROOT", str(data_root))
    ch = REG.get("fedlama")
    values = params.resolve(ch, "smoke", root=data_root)
    before = runner.inputs_hash(ch, "smoke", values, data_root)
    corrupt(data_root / "data" / "fashion_mnist" / "test_x.npy")
    assert runner.inputs_hash(ch, "smoke", values, data_root) != before


def test_verify_names_only_the_dataset_asked_for(data_root):
    (data_root / "data" / "fashion_mnist" / "extra.npy").write_bytes(b"x")
    with pytest.raises(datasets.DataIntegrityError, match="extra.npy"):
        datasets.verify("fashion_mnist", data_root)
    with pytest.raises(datasets.DataIntegrityError, match="missing"):
        datasets.verify("no_such_set", data_root)


def test_ledger_refuses_a_non_finite_metric_naming_the_claim(tmp_path):
    led = Ledger("fedlama", "smoke", tmp_path)
    with pytest.raises(ValueError, match="claim 'comm_reduction_vs_fedavg_tau'"):
        led.record("comm_reduction_vs_fedavg_tau", [1.0, float("nan")])


def test_active_clients_above_clients_is_refused():
    with pytest.raises(params.ParameterError, match="active_clients"):
        params.resolve(REG.get("fedlama"), "smoke", {"active_clients": 100})


PUBLISHER = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from repro import atomic, runner
    base = Path(sys.argv[1])
    (base / "ready").touch()
    n = 0
    while True:
        n += 1
        staged = base / "staging"
        if staged.exists():
            import shutil; shutil.rmtree(staged)
        (staged / "figures").mkdir(parents=True)
        for name in ("record.json", "run.json", "executed.ipynb", "figures/a.png", "figures/b.png"):
            atomic.write_text(staged / name, json.dumps({"run": n}))
        runner.publish(staged, base / "published")
''')


def _consistent_set(published: Path) -> int:
    runs = {json.loads(f.read_text())["run"] for f in published.rglob("*") if f.is_file()}
    files = sorted(f.relative_to(published).as_posix() for f in published.rglob("*") if f.is_file())
    assert files == ["executed.ipynb", "figures/a.png", "figures/b.png", "record.json", "run.json"], files
    assert len(runs) == 1, f"a mixture of runs {runs}"
    return runs.pop()


def test_publishing_is_atomic_as_a_set_under_sigkill(tmp_path):
    """Kill a publishing loop at 12 random instants: the published folder is always one complete set."""
    rng = random.Random(0)
    script = tmp_path / "publisher.py"
    script.write_text(PUBLISHER)
    last = 0
    for _ in range(12):
        (tmp_path / "ready").unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.05 + rng.random() * 0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if (tmp_path / "published").exists():
            last = _consistent_set(tmp_path / "published")
    assert last > 0, "the loop should have published at least once"


def test_a_second_publish_replaces_the_whole_set(tmp_path):
    from repro import atomic

    for n, names in ((1, ("record.json", "figures/old.png")), (2, ("record.json",))):
        staged = tmp_path / "staging"
        for name in names:
            atomic.write_text(staged / name, str(n))
        runner.publish(staged, tmp_path / "published")
    assert sorted(p.name for p in (tmp_path / "published").rglob("*") if p.is_file()) == ["record.json"]
    assert not (tmp_path / "staging").exists()


def test_torn_history_line_is_skipped_with_a_warning(out_root):
    hist = out_root / "results" / "fedlama" / "runs.jsonl"
    hist.parent.mkdir(parents=True)
    hist.write_text(json.dumps({"profile": "smoke", "ok": True, "wall_time_s": 7.0}) + "\n" + '{"profile": "sm')
    with pytest.warns(UserWarning, match="line 2 is torn"):
        assert runner.expected_seconds("fedlama", "smoke") == 7.0
    proc = subprocess.run([sys.executable, "-m", "repro.cli", "run", "fedlama", "--profile", "smoke", "--dry-run"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "about 7 s" in proc.stdout and "Traceback" not in proc.stderr


def test_published_files_have_the_usual_permissions(tmp_path):
    from repro import atomic

    old = os.umask(0o022)
    try:
        atomic.write_json(tmp_path / "record.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "record.json").stat().st_mode) == 0o644


@pytest.mark.chapter
def test_ctrl_c_is_one_line_and_leaves_no_kernel_files(root, out_root, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "repro.cli", "run", "fedlama", "--profile", "smoke"], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "REPRO_OUTPUT_ROOT": str(out_root), "TMPDIR": str(tmpdir)})
    staged = out_root / "build" / "staging" / "fedlama" / "smoke" / "executed.ipynb"
    deadline = time.monotonic() + 120
    while not staged.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(2.0)  # the kernel is up and running cells
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "interrupted; nothing was published" in err
    assert not list(tmpdir.rglob("*.json")), "kernel connection files left behind"
    assert not (out_root / "results" / "fedlama" / "smoke").exists()



def test_kernel_sockets_live_in_the_runs_private_folder(tmp_path, monkeypatch):
    """Two runs started at once never share IPC sockets (jupyter_client's default is kernel-ipc-<n> in the cwd)."""
    firsts = []
    for name in ("a", "b"):
        private = tmp_path / name
        private.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(private))
        km = runner.LocalKernelManager(kernel_name="python3")
        assert km.transport == "ipc" and Path(km.ip).is_absolute() and Path(km.ip).parent == private.resolve()
        firsts.append(km.ip)
    assert firsts[0] != firsts[1]


def test_kernel_folder_holds_socket_paths_under_a_deep_tmpdir(tmp_path, monkeypatch):
    """A deep $TMPDIR (pytest's) would make the IPC socket paths too long; the kernel folder stays short."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    folder = runner.kernel_dir()
    try:
        assert len(os.fsencode(str(folder / "kernel-ipc-99999"))) <= runner.SOCKET_PATH_MAX
    finally:
        shutil.rmtree(folder)
    short_base = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(short_base))
    try:
        short = runner.kernel_dir()
        assert short.parent == short_base  # a short $TMPDIR is used as it is
        shutil.rmtree(short)
    finally:
        short_base.rmdir()


# --- no orphans: a killed run ends every process it started and removes its folders ------------------------
TAG = "REPRO_TEST_TAG"
"""Put in the environment of the `repro run` under test: every process the run starts inherits it."""
KILL_CASES = {
    # chapter, overrides, processes below the kernel to wait for before the kill
    "mpi": ("pnetcdf-compress", ["repeats=100", "rows=512", "cols=512"], 5),  # mpiexec, its proxy, 4 ranks
    "gloo": ("overlap-cnn", ["iterations=2000"], 3),  # multiprocessing's tracker and 2 ranks
    "deployment": ("fedlama", ["engine=deployment", "num_clients=4", "active_clients=2"], 6),  # SuperLink, 4 nodes, ...
    "ray": ("fedlama", ["engine=ray"], 5),  # GCS, raylet, dashboard agent, log monitor, workers
}
KILLS = [(kind, sig) for kind in ("mpi", "gloo", "deployment") for sig in (signal.SIGKILL, signal.SIGTERM)]
KILLS.append(("ray", signal.SIGKILL))
START_DEADLINE_S = 600
"""Seconds the run may take to start the processes of interest (generous: the tests must hold on a loaded machine)."""
END_DEADLINE_S = 30
"""Seconds after the kill within which every process of the run must be gone (it takes about 1 s when idle)."""


def _tagged(tag: str) -> list[int]:
    return watchdog.marked_pids(tag, TAG)


def _below(runner_pid: int, pids: list[int]) -> list[int]:
    """The tagged processes that are neither the runner nor its direct children (the kernel, the watchdog)."""
    def parent(pid: int) -> int | None:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            return None
    return [p for p in pids if p != runner_pid and parent(p) not in (runner_pid, None)]


def _wait_until(condition, deadline_s: float, poll_s: float = 0.1) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll_s)
    return condition()


@pytest.mark.chapter
@pytest.mark.parametrize(("kind", "sig"), KILLS, ids=[f"{k}-{s.name}" for k, s in KILLS])
def test_a_killed_run_leaves_no_process_and_no_folder(kind, sig, root, out_root, tmp_path):
    """Kill the process group of `repro run` while its MPI ranks, gloo ranks, Flower or Ray processes run.

    Survivors are counted by an environment marker the test sets, never by process name; the kernel runs in
    a session of its own and mpiexec and the Flower processes in theirs, so the kill reaches the runner only.
    """
    chapter, overrides, below = KILL_CASES[kind]
    tag = watchdog.new_run_id()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    cmd = [sys.executable, "-m", "repro.cli", "run", chapter, "--profile", "smoke", *(f"-p{o}" for o in overrides)]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, TAG: tag, "REPRO_OUTPUT_ROOT": str(out_root), "TMPDIR": str(tmpdir)})
    try:
        started = _wait_until(lambda: proc.poll() is not None or len(_below(proc.pid, _tagged(tag))) >= below,
                              START_DEADLINE_S)
        assert started and proc.poll() is None, f"the run ended or never started its processes: {proc.stderr.read()}"
        os.killpg(proc.pid, sig)
        proc.wait(timeout=60)
        gone = _wait_until(lambda: not _tagged(tag), END_DEADLINE_S)
        assert gone, f"{len(_tagged(tag))} processes of the run alive {END_DEADLINE_S} s after {sig.name}"
        assert not list(tmpdir.iterdir()), "the run's temporary files (kernel connection files) were left behind"
        assert not (out_root / "build" / "staging" / chapter).exists(), "the killed run's staging folder was left"
    finally:
        watchdog.end_marked(tag, TAG, grace_s=1.0)
        proc.stderr.close()


FAKE_RUNNER = textwrap.dedent('''
    import subprocess, sys, time
    from pathlib import Path
    from repro import watchdog
    base = Path(sys.argv[1])
    folders = watchdog.RunFolders(kernel_dir=base / "kernel", staging=base / "staging" / "ch" / "smoke",
                                  lock=base / "ch.lock")
    for d in (folders.kernel_dir, folders.staging):
        d.mkdir(parents=True)
    run_id = sys.argv[2]
    dog = watchdog.Watchdog(run_id, folders)
    dog.start()
    env = {"PATH": "/usr/bin:/bin", watchdog.RUN_ID_ENV: run_id}
    # a grandchild in a session of its own, as mpiexec and the SuperLink are
    subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600"], env=env, start_new_session=True)
    (base / "ready").touch()
    time.sleep(600)
''')


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_watchdog_ends_marked_processes_and_folders_when_the_runner_dies(tmp_path, sig):
    script = tmp_path / "runner.py"
    script.write_text(FAKE_RUNNER)
    run_id = watchdog.new_run_id()
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), run_id], start_new_session=True)
    try:
        assert _wait_until(lambda: (tmp_path / "ready").exists() and len(watchdog.marked_pids(run_id)) >= 2, 120)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        assert _wait_until(lambda: not watchdog.marked_pids(run_id), END_DEADLINE_S)
        assert _wait_until(lambda: not (tmp_path / "kernel").exists() and not (tmp_path / "staging" / "ch").exists(),
                           END_DEADLINE_S)
    finally:
        watchdog.end_marked(run_id, grace_s=0.5)


def test_the_watchdog_leaves_the_staging_folder_of_a_newer_run_alone(tmp_path):
    import fcntl

    staging = tmp_path / "staging" / "ch" / "smoke"
    staging.mkdir(parents=True)
    lock = tmp_path / "ch.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new run of the chapter has started
        watchdog.remove_folders(watchdog.RunFolders(kernel_dir=None, staging=staging, lock=lock))
        assert staging.is_dir()
    watchdog.remove_folders(watchdog.RunFolders(kernel_dir=None, staging=staging, lock=lock))
    assert not staging.exists()


ON_TERMINATE = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from repro.watchdog import on_terminate
    out = Path(sys.argv[1])
    with on_terminate(lambda: out.write_text("stopped")):
        (out.parent / "ready").touch()
        time.sleep(600)
''')


def test_on_terminate_stops_what_a_block_started_and_the_process_still_ends_by_sigterm(tmp_path):
    script = tmp_path / "block.py"
    script.write_text(ON_TERMINATE)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")])
    try:
        assert _wait_until(lambda: (tmp_path / "ready").exists(), 120)
        proc.terminate()
        assert proc.wait(timeout=60) == -signal.SIGTERM
        assert (tmp_path / "out").read_text() == "stopped"
    finally:
        proc.kill()


def test_kernel_folders_of_dead_runners_are_swept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale, live, foreign = (tmp_path / f"{runner.KERNEL_DIR_PREFIX}{n}" for n in ("stale", "live", "foreign"))
    for folder in (stale, live, foreign):
        folder.mkdir()
    (stale / runner.OWNER_FILE).write_text(f"{dead.pid} 12345\n")
    (live / runner.OWNER_FILE).write_text(f"{os.getpid()} {watchdog.process_start_time(os.getpid())}\n")
    assert runner.sweep_kernel_dirs(tmp_path) == [stale]
    assert live.is_dir() and foreign.is_dir() and not stale.exists()
