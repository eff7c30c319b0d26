"""Redrawing a chapter from its published checkpoints, without retraining."""

from __future__ import annotations

import json

import numpy as np
import pytest

from repro import params, runner
from repro.checkpoints import extras_path, trained
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


def _publish_fake(values: dict, with_checkpoint: bool = True) -> None:
    """A published cpu set of the chapter trained with ``values``."""
    pub = published_dir(CHAPTER, "cpu")
    (pub / "checkpoints").mkdir(parents=True)
    if with_checkpoint:
        np.save(pub / "checkpoints" / "q.npy", np.zeros(2))
    (pub / "record.json").write_text(json.dumps({"parameters": values, "provenance": {"git_sha": "abc"}}))
    (pub / "run.json").write_text(json.dumps({"finished_at": "then"}))


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


@pytest.mark.chapter
def test_a_redrawn_chapter_gives_the_trained_runs_numbers(out_root):
    """Smoke run, then the same run redrawn from its checkpoints: the same ledger, and provenance says so."""
    first = runner.execute(runner.plan(CHAPTER, "smoke"))
    again = runner.execute(runner.plan(CHAPTER, "smoke", ["reuse_checkpoints=true"]))
    assert again["claims"] == first["claims"]
    assert "finished at" in again["provenance"]["checkpoints_from"]
    assert "checkpoints_from" not in first["provenance"]
    assert sorted(p.name for p in (published_dir(CHAPTER, "smoke") / "checkpoints").iterdir())
