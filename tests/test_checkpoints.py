"""Redrawing a chapter from its published checkpoints, without retraining."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from repro import params, runner
from repro.checkpoints import RECORD_KEY, checkpoint_hashes, extras_path, trained
from repro.paths import published_dir
from repro.registry import load_registry

CHAPTER = "qlearn-offload"


def _counting_train(calls: list[int]):
    def train():
        calls.append(1)
        return np.arange(4.0), {"curve": [0.5, 0.25]}
    return train


def _save(model: np.ndarray, path):
    np.save(path, model)
    return path


def test_trained_saves_then_loads_without_training(tmp_path):
    calls: list[int] = []
    first = trained(tmp_path, "m.npy", False, _counting_train(calls), _save, np.load)
    assert not first.reused and extras_path(first.path).is_file() and calls == [1]
    again = trained(tmp_path, "m.npy", True, _counting_train(calls), _save, np.load)
    assert again.reused and calls == [1]  # not trained a second time
    assert np.array_equal(again.model, first.model) and again.extras == first.extras


def test_reuse_names_the_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="m.npy is missing"):
        trained(tmp_path, "m.npy", True, _counting_train([]), _save, np.load)
    with pytest.raises(ValueError, match="reuse_checkpoints"):
        trained(None, "m.npy", True, _counting_train([]), _save, np.load)


def _save_npy(path: Path) -> None:
    np.save(path, np.arange(64.0))


def _save_pt(path: Path) -> None:
    torch.save({"weight": torch.arange(64.0)}, path)


def _save_zip(path: Path) -> None:
    """Stable-Baselines3 saves an agent as a zip archive."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("policy.pth", bytes(range(256)) * 4)
        z.writestr("data", json.dumps({"gamma": 0.99}))


SAVERS = {"q.npy": _save_npy, "net.pt": _save_pt, "agent.zip": _save_zip}


def _publish_fake(values: dict, with_checkpoint: bool = True, name: str = "q.npy", hashes: bool = True) -> Path:
    """A published cpu set of the chapter trained with ``values``, its checkpoints hashed as the runner records them."""
    pub = published_dir(CHAPTER, "cpu")
    (pub / "checkpoints").mkdir(parents=True)
    if with_checkpoint:
        SAVERS[name](pub / "checkpoints" / name)
        (pub / "checkpoints" / f"{name}.json").write_text(json.dumps({"curve": [1.0]}))
    record = {"parameters": values, "provenance": {"git_sha": "abc"}}
    if hashes:
        record[RECORD_KEY] = checkpoint_hashes(pub / "checkpoints")
    (pub / "record.json").write_text(json.dumps(record))
    (pub / "run.json").write_text(json.dumps({"finished_at": "then"}))
    return pub / "checkpoints" / name


def test_reuse_is_refused_before_any_work_without_a_matching_published_run(out_root):
    chapter = load_registry().get(CHAPTER)
    values = params.resolve(chapter, "cpu", {"reuse_checkpoints": True})
    with pytest.raises(params.ParameterError, match="'reuse_checkpoints': there is no published cpu run"):
        runner.plan(CHAPTER, "cpu", ["reuse_checkpoints=true"])
    _publish_fake({**values, "episodes": values["episodes"] + 1, "reuse_checkpoints": False})
    with pytest.raises(params.ParameterError, match=r"other values \(episodes: "):
        runner.plan(CHAPTER, "cpu", ["reuse_checkpoints=true"])


def test_reuse_plans_from_the_published_checkpoints(out_root):
    chapter = load_registry().get(CHAPTER)
    values = params.resolve(chapter, "cpu", {"reuse_checkpoints": False})
    _publish_fake(values)
    plan = runner.plan(CHAPTER, "cpu", ["reuse_checkpoints=true"])
    assert plan.checkpoints_from == published_dir(CHAPTER, "cpu") / "checkpoints"
    assert runner.plan(CHAPTER, "cpu").checkpoints_from is None


@pytest.mark.parametrize("name", sorted(SAVERS))
def test_a_corrupted_checkpoint_is_refused_naming_the_file(out_root, corrupt, name):
    """One flipped byte in a numpy, torch or SB3 checkpoint: reuse is refused before any kernel, naming the file."""
    chapter = load_registry().get(CHAPTER)
    path = _publish_fake(params.resolve(chapter, "cpu", {"reuse_checkpoints": False}), name=name)
    assert runner.plan(CHAPTER, "cpu", ["reuse_checkpoints=true"]).checkpoints_from == path.parent
    corrupt(path)
    with pytest.raises(params.ParameterError, match=rf"'reuse_checkpoints': checkpoint .*{name} is corrupted"):
        runner.plan(CHAPTER, "cpu", ["reuse_checkpoints=true"])


def test_checkpoints_without_recorded_hashes_or_with_a_stray_file_are_refused(out_root):
    chapter = load_registry().get(CHAPTER)
    path = _publish_fake(params.resolve(chapter, "cpu", {"reuse_checkpoints": False}), hashes=False)
    with pytest.raises(params.ParameterError, match="recorded no hashes"):
        runner.plan(CHAPTER, "cpu", ["reuse_checkpoints=true"])
    record = json.loads((path.parent.parent / "record.json").read_text())
    record[RECORD_KEY] = checkpoint_hashes(path.parent)
    (path.parent.parent / "record.json").write_text(json.dumps(record))
    np.save(path.parent / "planted.npy", np.ones(3))
    with pytest.raises(params.ParameterError, match="planted.npy was not saved by the run"):
        runner.plan(CHAPTER, "cpu", ["reuse_checkpoints=true"])


def test_a_checkpoint_corrupted_after_the_plan_is_refused_as_copied(out_root, corrupt):
    """The files are checked again once copied into the run's staging folder, before the kernel starts."""
    chapter = load_registry().get(CHAPTER)
    path = _publish_fake(params.resolve(chapter, "cpu", {"reuse_checkpoints": False}))
    plan = runner.plan(CHAPTER, "cpu", ["reuse_checkpoints=true"])
    corrupt(path)
    with pytest.raises(runner.RunError, match=r"checkpoint .*q.npy is corrupted.*nothing was run"):
        runner.execute(plan)
    assert not (out_root / "build" / "staging" / CHAPTER).exists()


@pytest.mark.chapter
def test_a_redrawn_chapter_gives_the_trained_runs_numbers(out_root):
    """Smoke run, then the same run redrawn from its checkpoints: the same ledger, and provenance says so."""
    first = runner.execute(runner.plan(CHAPTER, "smoke"))
    again = runner.execute(runner.plan(CHAPTER, "smoke", ["reuse_checkpoints=true"]))
    assert again["claims"] == first["claims"]
    assert "finished at" in again["provenance"]["checkpoints_from"]
    assert "checkpoints_from" not in first["provenance"]
    folder = published_dir(CHAPTER, "smoke") / "checkpoints"
    assert sorted(p.name for p in folder.iterdir())
    assert again[RECORD_KEY] == first[RECORD_KEY] == checkpoint_hashes(folder)
    saved = next(p for p in sorted(folder.iterdir()) if p.suffix != ".json")
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0xFF
    saved.write_bytes(bytes(data))
    with pytest.raises(params.ParameterError, match=f"checkpoint .*{saved.name} is corrupted"):
        runner.plan(CHAPTER, "smoke", ["reuse_checkpoints=true"])
