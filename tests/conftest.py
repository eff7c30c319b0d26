"""Shared fixtures: the repo root, a private output root, and runtime folders."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from repro import datasets

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("REPRO_ROOT", str(ROOT))
os.environ.setdefault("RAY_TMPDIR", str(ROOT / ".cache" / "ray"))
os.environ.setdefault("FLWR_HOME", str(ROOT / ".cache" / "flwr"))
os.environ.setdefault("DVC_NO_ANALYTICS", "1")


@pytest.fixture(scope="session")
def root() -> Path:
    """The repository root."""
    return ROOT


@pytest.fixture()
def out_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Send run outputs (results/, build/) to a temporary folder."""
    monkeypatch.setenv("REPRO_OUTPUT_ROOT", str(tmp_path))
    return tmp_path


@pytest.fixture()
def data_root(root, tmp_path):
    """A private repo root holding a copy of data/, data.dvc, its cached manifest and the params files."""
    datasets.verify()  # the real data must be clean to start from
    shutil.copytree(root / "data", tmp_path / "data")
    shutil.copy(root / "data.dvc", tmp_path / "data.dvc")
    h = datasets.recorded_hash(root)
    cached = Path(".dvc") / "cache" / "files" / "md5" / h[:2] / h[2:]
    (tmp_path / cached).parent.mkdir(parents=True)
    shutil.copy(root / cached, tmp_path / cached)
    shutil.copytree(root / "params", tmp_path / "params")
    shutil.copytree(root / "notebooks", tmp_path / "notebooks")
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture()
def corrupt():
    """A function that flips one byte in the middle of a file."""
    return _flip_middle_byte
