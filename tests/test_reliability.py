"""Reliability: corrupted data is refused, never blessed; runs publish as one set; small failures stay small.

Each case here failed on the landed main of 2720ec0 (the reliability sweep of the data-integrity issue).
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from repro import datasets, params, runner
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


def test_makefile_checks_data_before_dvc_add(root):
    recipe = (root / "Makefile").read_text().split("\ndata:", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in recipe.splitlines() if line.startswith("\t")]
    assert lines.index("repro data") < next(i for i, line in enumerate(lines) if line.startswith("dvc add"))


def test_run_refuses_corrupted_declared_data_before_the_kernel(data_root, corrupt):
    ch = REG.get("fedlama")
    assert "fashion_mnist" in ch.datasets
    corrupt(data_root / "data" / "fashion_mnist" / "train_y.npy")
    t0 = time.monotonic()
    proc = _cli(["run", "fedlama", "--profile", "smoke"], data_root)
    assert proc.returncode == 2 and "dataset 'fashion_mnist'" in proc.stderr and "train_y.npy" in proc.stderr
    assert time.monotonic() - t0 < 60 and not (data_root / "results").exists()


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
        folder.rmdir()
    short_base = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(short_base))
    try:
        short = runner.kernel_dir()
        assert short.parent == short_base  # a short $TMPDIR is used as it is
        short.rmdir()
    finally:
        short_base.rmdir()
