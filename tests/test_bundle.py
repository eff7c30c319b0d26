"""Offline bundles: one archive reruns a chapter in a fresh folder with the network off."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from repro.bundle import write_bundle
from repro.datasets import DataIntegrityError
from repro.registry import load_registry

CHAPTER = "fedlama"  # declares a DVC-tracked dataset, so the bundle must carry data


def _network_off() -> list[str]:
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.fail("unshare -n is needed to run the bundle with the network off")
    return ["unshare", "-n"]


def test_bundle_holds_the_chapter_and_its_data(out_root, tmp_path):
    b = write_bundle(CHAPTER, "smoke", out=tmp_path / "b.tar.gz")
    ch = load_registry().get(CHAPTER)
    expected = {ch.notebook, ch.params_file, "envs/cpu.lock", "run.sh", "data.dvc"}
    assert expected <= set(b.members)
    assert any(m.startswith("wheels/repro-") and m.endswith(".whl") for m in b.members)
    assert {m for m in b.members if m.startswith("data/")} == {f"data/fashion_mnist/{k}.npy" for k in
                                                              ("train_x", "train_y", "test_x", "test_y")}
    with tarfile.open(b.archive) as tar:
        assert all(n == CHAPTER or n.startswith(f"{CHAPTER}/") for n in tar.getnames())


def test_bundle_runs_its_smoke_profile_offline_from_its_own_files(out_root, tmp_path):
    """Unpacked in a fresh folder and run with the network off, the bundle needs only its own files.

    Its notebook, params, data and repro wheel are all it needs besides the third-party packages (here
    taken from this venv; the slow test below installs those from the bundled wheels too).
    """
    b = write_bundle(CHAPTER, "smoke", out=tmp_path / "b.tar.gz")
    target = tmp_path / "elsewhere"
    with tarfile.open(b.archive) as tar:
        tar.extractall(target, filter="data")
    unpacked = target / CHAPTER
    wheel = next((unpacked / "wheels").glob("repro-*.whl"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    str(wheel)], check=True)
    env = {**os.environ, "PYTHONPATH": str(site), "REPRO_ROOT": str(unpacked), "PATH": os.environ["PATH"]}
    env.pop("REPRO_OUTPUT_ROOT", None)
    proc = subprocess.run([*_network_off(), sys.executable, "-m", "repro.cli", "run", CHAPTER, "--profile", "smoke"],
                          cwd=unpacked, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((unpacked / "results" / CHAPTER / "smoke" / "record.json").read_text())
    assert set(rec["claims"]) == {c.id for c in load_registry().get(CHAPTER).claims}


def test_corrupted_data_is_never_bundled(data_root, monkeypatch, tmp_path, corrupt):
    monkeypatch.setenv("REPRO_ROOT", str(data_root))
    corrupt(data_root / "data" / "fashion_mnist" / "test_y.npy")
    with pytest.raises(DataIntegrityError, match="test_y.npy"):
        write_bundle(CHAPTER, "smoke", out=tmp_path / "b.tar.gz")
    assert not (tmp_path / "b.tar.gz").exists()


@pytest.mark.slow
def test_bundle_with_wheels_installs_and_runs_with_the_network_off(out_root, tmp_path):
    """The whole path: ``--wheels`` packs every wheel of the lock; run.sh builds its venv from them offline."""
    b = write_bundle(CHAPTER, "smoke", wheels=True, out=tmp_path / "b.tar.gz")
    assert b.wheels > 100
    target = tmp_path / "elsewhere"
    with tarfile.open(b.archive) as tar:
        tar.extractall(target, filter="data")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPRO_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if ".venv" not in p)
    proc = subprocess.run([*_network_off(), "bash", str(target / CHAPTER / "run.sh"), "smoke"], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert (target / CHAPTER / "results" / CHAPTER / "smoke" / "record.json").is_file()
