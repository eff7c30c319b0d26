"""Shared fixtures: the repo root, a private output root, and runtime folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
