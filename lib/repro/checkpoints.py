"""Trained models saved beside a run, and redrawn from without retraining.

A chapter that trains models (agents, networks, Q-tables) saves each one
under ``output_dir/checkpoints/`` with a JSON file beside it holding what the
figures need besides the model (its training curve).  A run with the
chapter parameter ``reuse_checkpoints: true`` starts from the published
run's checkpoints (:func:`repro.runner.checkpoint_source` checks that they
were trained with the same parameters and copies them in) and
:func:`trained` loads them instead of training again.

Every file of a run's ``checkpoints/`` folder (numpy ``.npy``, torch ``.pt``,
Stable-Baselines3 ``.zip`` and the JSON beside each) is hashed when the run
publishes (:func:`checkpoint_hashes`, kept in the run's ``record.json``), and
:func:`verify_checkpoints` checks them before any of them is reused, so a
corrupted or replaced checkpoint is refused by name instead of being loaded
(or failing inside a loader with an unrelated message).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Mapping, TypeVar

from repro import atomic

Model = TypeVar("Model")

RECORD_KEY = "checkpoints"
"""The field of a published ``record.json`` that maps each checkpoint file to its sha256."""
CHUNK = 1 << 20


class CheckpointCorrupted(ValueError):
    """A checkpoint differs from the hash recorded when it was saved; the message names the file."""


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes (hex), read in chunks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint_hashes(folder: Path) -> dict[str, str]:
    """The sha256 of every file under ``folder``, by path relative to it (POSIX), sorted.

    Parameters
    ----------
    folder
        A run's checkpoint folder; a missing folder has no checkpoints.

    Returns
    -------
    dict
        ``{relative path: sha256}``.
    """
    if not folder.is_dir():
        return {}
    return {f.relative_to(folder).as_posix(): file_sha256(f) for f in sorted(folder.rglob("*")) if f.is_file()}


def verify_checkpoints(folder: Path, recorded: Mapping[str, str] | None) -> None:
    """Check every checkpoint under ``folder`` against the hashes recorded when it was saved.

    Parameters
    ----------
    folder
        The checkpoint folder about to be reused.
    recorded
        ``{relative path: sha256}`` from the record of the run that saved them
        (``None``: that run recorded none).

    Raises
    ------
    CheckpointCorrupted
        Naming the first file whose bytes differ from its recorded hash, that
        is missing, or that no hash was recorded for (and naming the folder
        when no hash was recorded at all).
    """
    if recorded is None:
        raise CheckpointCorrupted(f"{folder}: the run that saved these checkpoints recorded no hashes, so they cannot "
                                  f"be checked before reuse")
    found = checkpoint_hashes(folder)
    for name in sorted(set(recorded) | set(found)):
        path = folder / name
        if name not in found:
            raise CheckpointCorrupted(f"checkpoint {path} is missing (its hash was recorded when it was saved)")
        if name not in recorded:
            raise CheckpointCorrupted(f"checkpoint {path} was not saved by the run (no hash was recorded for it)")
        if found[name] != recorded[name]:
            raise CheckpointCorrupted(f"checkpoint {path} is corrupted: its sha256 {found[name][:12]}... differs "
                                      f"from the {recorded[name][:12]}... recorded when it was saved")


@dataclass(frozen=True, kw_only=True)
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
        return Trained(model=model, extras=extras, path=None, reused=False)
    path = Path(folder) / name
    if reuse:
        missing = [p for p in (path, extras_path(path)) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"reuse_checkpoints: {missing[0]} is missing; run once with reuse_checkpoints=false")
        return Trained(model=load(path), extras=json.loads(extras_path(path).read_text()), path=path, reused=True)
    model, extras = train()
    saved = save(model, path)
    atomic.write_json(extras_path(saved), extras)
    return Trained(model=model, extras=extras, path=saved, reused=False)
