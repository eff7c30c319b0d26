"""How the medical chapters run their seeds and keep their networks.

Both chapters train small networks once per seed, one seed per worker
process, and save every network under ``output_dir/checkpoints/`` with CPU
tensors.  This module holds that shared frame: the per-seed job record, the
sweep over seeds and the checkpoint writer the network modules build on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar

import torch
from torch import nn

from repro.devices import resolve_device
from repro.parallel import parallel_map

# One torch thread per run: these networks are too small to gain from intra-op threads, and on a
# shared machine threads beyond the free cores made a training step ten times slower (measured).
TORCH_THREADS = 1


class SeededParams(Protocol):
    """What :func:`seed_jobs` and :class:`SeedJob` read from a chapter's parameters."""

    @property
    def seeds(self) -> tuple[int, ...]:
        """The seeds, one job each."""

    @property
    def workers(self) -> int:
        """Worker processes."""

    @property
    def device(self) -> str:
        """Where the networks train (a :func:`repro.devices.resolve_device` name)."""


Params = TypeVar("Params", bound=SeededParams)
Outcome = TypeVar("Outcome")


@dataclass(frozen=True, kw_only=True)
class SeedJob(Generic[Params]):
    """One seed's work.

    Attributes
    ----------
    params
        The chapter's parameters.
    seed
        The seed.
    checkpoint_dir
        Where the seed's networks are saved (or loaded from with ``reuse``).
    threads
        Torch intra-op threads of the worker.
    reuse
        Load the networks from ``checkpoint_dir`` instead of training them.
    lrs
        Per arm, the learning rates to try (the best on validation is kept); only these arms run.
    tag
        Added to the checkpoint names (a sweep's runs keep their own networks).
    """

    params: Params
    seed: int
    checkpoint_dir: str
    threads: int
    reuse: bool = False
    lrs: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    tag: str = ""

    def start(self) -> torch.device:
        """Set this worker's torch threads and return the device the seed's networks train on."""
        torch.set_num_threads(self.threads)
        return resolve_device(self.params.device)


def seed_jobs(params: Params, output_dir: str | Path, *, lrs: Mapping[str, tuple[float, ...]], seeds: Sequence[int],
              tag: str = "") -> list[SeedJob[Params]]:
    """One job per seed, checkpoints under ``output_dir/checkpoints`` (reused when the parameters ask for it).

    Parameters
    ----------
    params
        The chapter's parameters (``reuse_checkpoints`` is read when present).
    output_dir
        The run's folder.
    lrs
        Per arm, the learning rates to try.
    seeds
        The seeds.
    tag
        Added to the checkpoint names.
    """
    folder = str(Path(output_dir) / "checkpoints")
    reuse = bool(getattr(params, "reuse_checkpoints", False))
    return [SeedJob(params=params, seed=s, checkpoint_dir=folder, threads=TORCH_THREADS, reuse=reuse, lrs=dict(lrs), tag=tag)
            for s in seeds]


def run_jobs(run_seed: Callable[[SeedJob[Params]], Outcome], jobs: Sequence[SeedJob[Params]], workers: int,
             desc: str) -> list[Outcome]:
    """Run ``run_seed`` on every job, in ``workers`` processes; outcomes in job order."""
    return parallel_map(run_seed, list(jobs), workers=workers, desc=desc)


class Tuned(Protocol):
    """What :func:`tune_on_first_seed` reads from a seed's outcome: its arms, each with the rate it kept."""

    @property
    def arms(self) -> Sequence[Any]:
        """Results with ``arm`` and ``lr`` attributes."""


TunedOutcome = TypeVar("TunedOutcome", bound=Tuned)


def tune_on_first_seed(run_seed: Callable[[SeedJob[Params]], TunedOutcome], params: Params, output_dir: str | Path,
                       arms: Sequence[str], grid: tuple[float, ...]) -> tuple[TunedOutcome, dict[str, float]]:
    """Run the first seed with every arm trying every rate of ``grid`` (each keeps its best on validation).

    Parameters
    ----------
    run_seed
        The chapter's per-seed function; it trains each arm of ``job.lrs`` at every rate given and keeps
        the one its validation data prefer.
    params
        The chapter's parameters (their first seed is the tuning seed).
    output_dir
        The run's folder.
    arms
        The arms to tune.
    grid
        The learning rates every arm tries.

    Returns
    -------
    tuple
        The first seed's outcome (its arms at their chosen rates) and arm -> chosen rate, to fix for the
        other seeds.
    """
    jobs = seed_jobs(params, output_dir, lrs={arm: grid for arm in arms}, seeds=params.seeds[:1])
    first = run_jobs(run_seed, jobs, 1, "tuning on the first seed")[0]
    return first, {a.arm: a.lr for a in first.arms}


def save_network(net: nn.Module, path: str | Path, fields: dict[str, Any]) -> Path:
    """Write a network's weights (as CPU tensors) and ``fields`` (plain values only) to ``path``.

    Parameters
    ----------
    net
        The network, on any device.
    path
        Destination file (its folder is created).
    fields
        What rebuilding the network needs (its config, vocabulary ...) and extra values (seed, parameters).

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.cpu() for k, v in net.state_dict().items()}  # loadable on a machine without the training device
    torch.save({"state_dict": state, **fields}, path)
    return path
