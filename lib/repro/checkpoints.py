"""Trained models saved beside a run, and redrawn from without retraining.

A chapter that trains models (agents, networks, Q-tables) saves each one
under ``output_dir/checkpoints/`` with a JSON file beside it holding what the
figures need besides the model (its training curve).  A run with the
chapter parameter ``reuse_checkpoints: true`` starts from the published
run's checkpoints (:func:`repro.runner.checkpoint_source` checks that they
were trained with the same parameters and copies them in) and
:func:`trained` loads them instead of training again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from repro import atomic

Model = TypeVar("Model")


@dataclass(frozen=True)
class Trained(Generic[Model]):
    """A model, trained now or loaded from its checkpoint.

    Attributes
    ----------
    model
        The trained model.
    extras
        What training produced besides the model (JSON values, e.g. the training curve).
    path
        Its checkpoint (``None`` when no checkpoint folder was given).
    reused
        Whether it was loaded rather than trained.
    """

    model: Model
    extras: dict[str, Any]
    path: Path | None
    reused: bool


def extras_path(path: Path) -> Path:
    """The JSON file beside a checkpoint."""
    return path.with_name(path.name + ".json")


def trained(folder: str | Path | None, name: str, reuse: bool, train: Callable[[], tuple[Model, dict[str, Any]]],
            save: Callable[[Model, Path], Path], load: Callable[[Path], Model]) -> Trained[Model]:
    """Train a model and save it as ``folder/name``, or with ``reuse`` load it from there.

    Parameters
    ----------
    folder
        The run's checkpoint folder (``None``: train and save nothing).
    name
        The checkpoint's file name, extension included.
    reuse
        Load the checkpoint and its extras instead of training.
    train
        Trains the model; returns it and its JSON-able extras.
    save, load
        Write a model to a path (returning the path written) and read it back.

    Raises
    ------
    FileNotFoundError
        With ``reuse``, naming the checkpoint that is missing.
    ValueError
        ``reuse`` without a folder.
    """
    if folder is None:
        if reuse:
            raise ValueError("reuse_checkpoints needs the run's checkpoint folder")
        model, extras = train()
        return Trained(model, extras, None, False)
    path = Path(folder) / name
    if reuse:
        missing = [p for p in (path, extras_path(path)) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"reuse_checkpoints: {missing[0]} is missing; run once with reuse_checkpoints=false")
        return Trained(load(path), json.loads(extras_path(path).read_text()), path, True)
    model, extras = train()
    saved = save(model, path)
    atomic.write_json(extras_path(saved), extras)
    return Trained(model, extras, saved, False)
