"""Chapter driver: multi-resolution training (coarse fields first, then the original resolution).

Arms on generated log-normal fields (:mod:`repro.training.multires`), every one
``epochs`` epochs long:

- ``fine``: the original resolution throughout (the baseline);
- ``coarse``: the coarse copies throughout, judged on fine validation data (a control);
- ``mrt_fixed``: the authors' schedule (``cosmoflow/train.py`` of NU-CUCIS/Multi-resolution-Training at
  066aa7ab, which trains 50 coarse epochs and then the original data up to 100): the first
  ``coarse_fraction`` of the epochs on coarse data, then the rest on the original data with a fresh Adam at
  ``switch_lr_ratio`` times the rate (the code's dense optimiser starts at 8e-4 against the coarse 2e-3);
  this is the judged arm;
- ``mrt_plateau``: the abstract's rule, switching once the coarse validation curve no longer improves.

Each stage has its own piecewise-constant learning rate (tenfold drops at ``decay_fractions`` of the
stage's steps), as each of the code's two optimisers has its own schedule.  The model carries its weights
and BatchNorm statistics across the switch, as the code copies them.  A run's final validation MSE is
the mean of its last ``final_window`` epochs (the target the mixed arm must keep, not one noisy epoch).
For every seed the arms run one after the other in one process; time is the process's CPU time spent
training (indicative on a shared machine) and pixel-passes are counted exactly.  The arms train on the
``device`` parameter's device, where the fields are put (batch orders are drawn on the CPU, so every
device sees the same ones); on a GPU the clock counts the host's CPU time up to the end of each epoch's
kernels.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from repro.devices import resolve_device, synchronize
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence
from repro.training.multires import FieldSet, PlateauSwitch, coarsen, field_cnn, make_fieldsets

ARMS = ("fine", "coarse", "mrt_fixed", "mrt_plateau")
JUDGED = "mrt_fixed"
"""The mixed arm the claims judge: the authors' fixed schedule."""
DECAY = 0.1
"""The factor of each learning-rate drop (the code's PiecewiseConstantDecay: 2e-3, 2e-4, 2e-5)."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    n_train: int
    n_val: int
    size: int
    factor: int
    channels: tuple[int, ...]
    batch_size: int
    lr: float
    epochs: int
    coarse_fraction: float
    switch_lr_ratio: float
    decay_fractions: tuple[float, ...]
    final_window: int
    window: int
    delta: float
    max_coarse_epochs: int
    seeds: tuple[int, ...]
    workers: int
    device: str

    @property
    def coarse_epochs(self) -> int:
        """Coarse epochs of the fixed schedule: ``coarse_fraction`` of ``epochs``, rounded."""
        return round(self.coarse_fraction * self.epochs)

    def checks(self) -> None:
        """Refuse combinations the model, the schedules or the final level cannot take, naming the parameters."""
        require(self.size % (4 * self.factor) == 0, self, ("size", "factor"),
                "size must be divisible by 4 x factor (two poolings at the coarse level)")
        require(self.n_train >= self.batch_size, self, ("n_train", "batch_size"), "n_train must hold at least one batch")
        require(1 <= self.coarse_epochs <= self.epochs - 1, self, ("coarse_fraction", "epochs"),
                "the fixed schedule needs at least one coarse and one fine epoch")
        require(self.final_window <= self.epochs - self.coarse_epochs, self, ("final_window", "coarse_fraction", "epochs"),
                "the final window must lie in the fixed schedule's fine stage")
        require(self.max_coarse_epochs <= self.epochs - self.final_window, self,
                ("max_coarse_epochs", "epochs", "final_window"),
                "the plateau arm's fine stage must hold the final window")
        require(self.window < self.max_coarse_epochs, self, ("window", "max_coarse_epochs"),
                "the plateau rule looks back window epochs, so it needs more coarse epochs than that")
        fr = self.decay_fractions
        require(all(0 < f < 1 for f in fr) and list(fr) == sorted(set(fr)), self, "decay_fractions",
                "the learning-rate drops lie strictly inside a stage, in increasing order")


@dataclass(frozen=True, kw_only=True)
class Stage:
    """A stretch of training on one resolution with one optimiser: its epochs (``None``: until the plateau) and rate."""

    coarse: bool
    epochs: int | None
    lr: float


def schedule(arm: str, params: Params) -> tuple[Stage, ...]:
    """The stages of an arm (see the module docstring)."""
    p = params
    fine_after = Stage(coarse=False, epochs=None, lr=p.lr * p.switch_lr_ratio)
    return {
        "fine": (Stage(coarse=False, epochs=p.epochs, lr=p.lr),),
        "coarse": (Stage(coarse=True, epochs=p.epochs, lr=p.lr),),
        JUDGED: (Stage(coarse=True, epochs=p.coarse_epochs, lr=p.lr),
                 Stage(coarse=False, epochs=p.epochs - p.coarse_epochs, lr=p.lr * p.switch_lr_ratio)),
        "mrt_plateau": (Stage(coarse=True, epochs=None, lr=p.lr), fine_after),
    }[arm]


def stage_rate(stage: Stage, step: int, total_steps: int, fractions: tuple[float, ...]) -> float:
    """The stage's piecewise-constant rate at ``step`` of ``total_steps``: a tenfold drop at each passed fraction."""
    return stage.lr * DECAY ** sum(step >= f * total_steps for f in fractions)


@dataclass(frozen=True, kw_only=True)
class EpochPoint:
    """The state after one epoch: validation MSE on fine data, cumulative cost, and the resolution used."""

    val_mse: float
    pixel_passes: float
    seconds: float
    coarse: bool


@dataclass(frozen=True, kw_only=True)
class ArmRun:
    """One arm on one seed."""

    arm: str
    seed: int
    curve: tuple[EpochPoint, ...]
    switched_at: int | None

    def final_mse(self, window: int) -> float:
        """The final validation MSE: the mean over the last ``window`` epochs."""
        return float(np.mean([p.val_mse for p in self.curve[-window:]]))

    @property
    def seconds(self) -> float:
        """CPU seconds spent training."""
        return self.curve[-1].seconds

    @property
    def pixel_passes(self) -> float:
        """Pixels pushed through the network while training."""
        return self.curve[-1].pixel_passes


@torch.no_grad()
def _val_mse(model: torch.nn.Module, val: FieldSet) -> float:
    model.eval()
    return float(F.mse_loss(model(val.fields), val.targets))


@dataclass(frozen=True, kw_only=True)
class Data:
    """One seed's fields at both resolutions, on the device the arms train on."""

    train: FieldSet
    val: FieldSet
    coarse_train: torch.Tensor
    coarse_val: FieldSet


def run_arm(arm: str, params: Params, data: Data, seed: int) -> ArmRun:
    """Train one arm for ``epochs`` epochs through its stages (a fresh Adam at each stage's start)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {ARMS}")
    dev = data.train.fields.device
    model = field_cnn(params.channels, seed).to(dev)
    gen = torch.Generator().manual_seed(seed)
    pixels, seconds, curve = 0.0, 0.0, list[EpochPoint]()
    switched_at: int | None = None
    for stage in schedule(arm, params):
        fields = data.coarse_train if stage.coarse else data.train.fields
        plateau = stage.epochs is None and stage.coarse  # the abstract's rule decides when this stage ends
        switch = PlateauSwitch(window=params.window, delta=params.delta, max_coarse_epochs=params.max_coarse_epochs)
        epochs = stage.epochs if stage.epochs is not None else (params.max_coarse_epochs if stage.coarse
                                                               else params.epochs - len(curve))
        fractions = () if plateau else params.decay_fractions  # an open-ended stage has no fractions to drop at
        steps_per_epoch = -(-len(fields) // params.batch_size)
        opt = torch.optim.Adam(model.parameters(), lr=stage.lr)
        if curve and not stage.coarse and switched_at is None:
            switched_at = len(curve)
        for e in range(epochs):
            t0 = time.process_time()
            model.train()
            order = torch.randperm(len(fields), generator=gen).split(params.batch_size)
            for i, idx in enumerate(order):
                for group in opt.param_groups:
                    group["lr"] = stage_rate(stage, e * steps_per_epoch + i, epochs * steps_per_epoch, fractions)
                idx = idx.to(dev)
                loss = F.mse_loss(model(fields[idx]), data.train.targets[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            synchronize(dev)
            seconds += time.process_time() - t0
            pixels += fields.numel()
            curve.append(EpochPoint(val_mse=_val_mse(model, data.val), pixel_passes=pixels, seconds=seconds,
                                    coarse=stage.coarse))
            if plateau and switch.update(_val_mse(model, data.coarse_val)):
                break
    return ArmRun(arm=arm, seed=seed, curve=tuple(curve), switched_at=switched_at)


@dataclass(frozen=True, kw_only=True)
class SeedJob:
    """All arms on one seed."""

    params: Params
    seed: int


@dataclass(frozen=True, kw_only=True)
class SeedRuns:
    """Every arm of one seed, and the trivial level: the validation MSE of predicting the training targets' mean."""

    seed: int
    arms: dict[str, ArmRun]
    trivial_mse: float


def run_seed(job: SeedJob) -> SeedRuns:
    """Every arm on one seed's data."""
    torch.set_num_threads(1)
    p = job.params
    train, val = make_fieldsets(p.n_train, p.n_val, p.size, job.seed)
    trivial = float(((val.targets - train.targets.mean(dim=0)) ** 2).mean())
    dev = resolve_device(p.device)
    train, val = (FieldSet(fields=f.fields.to(dev), targets=f.targets.to(dev)) for f in (train, val))
    data = Data(train=train, val=val, coarse_train=coarsen(train.fields, p.factor),
                coarse_val=FieldSet(fields=coarsen(val.fields, p.factor), targets=val.targets))
    return SeedRuns(seed=job.seed, arms={a: run_arm(a, p, data, job.seed) for a in ARMS}, trivial_mse=trivial)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced: every seed's arms."""

    params: Params
    seeds: list[SeedRuns]

    def final(self, arm: str) -> list[float]:
        """The arm's final validation MSE per seed."""
        return [s.arms[arm].final_mse(self.params.final_window) for s in self.seeds]

    def relative(self, arm: str, key: str = "final") -> list[float]:
        """The arm against fine-only per seed, percent above: final MSE, or ``seconds`` / ``pixel_passes``."""
        if key == "final":
            return [100.0 * (a / f - 1) for a, f in zip(self.final(arm), self.final("fine"))]
        return [100.0 * (getattr(s.arms[arm], key) / getattr(s.arms["fine"], key) - 1) for s in self.seeds]


def run(params: Params) -> Results:
    """Every arm on every seed, seeds spread over ``workers`` processes."""
    jobs = [SeedJob(params=params, seed=s) for s in params.seeds]
    return Results(params=params, seeds=parallel_map(run_seed, jobs, workers=params.workers, desc="seeds"))


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims (the mixed arm judged is the authors' fixed schedule)."""
    fine, mixed = results.final("fine"), results.final(JUDGED)
    trivial = float(np.mean([s.trivial_mse for s in results.seeds]))
    return {
        "time_saving": [-v for v in results.relative(JUDGED, "seconds")],
        "pixel_saving": [-results.relative(JUDGED, "pixel_passes")[0]],
        "accuracy_kept": Evidence(values=results.relative(JUDGED), arms={"fine only": fine, "multi-resolution": mixed},
                                  trivial=trivial),
        "coarse_only_worse": Evidence(values=results.relative("coarse"), arms={"fine only": fine}, trivial=trivial),
    }


def summary(results: Results) -> pd.DataFrame:
    """Final validation MSE, switch epoch and total cost per arm (mean over seeds)."""
    rows = []
    for arm in ARMS:
        runs = [s.arms[arm] for s in results.seeds]
        final = results.final(arm)
        switches = [r.switched_at for r in runs if r.switched_at is not None]
        rows.append(
            {
                "arm": arm,
                "final val MSE": np.mean(final),
                "sd": np.std(final, ddof=1) if len(final) > 1 else 0.0,
                "coarse epochs": np.mean([sum(p.coarse for p in r.curve) for r in runs]),
                "switch after epoch": np.mean(switches) if switches else np.nan,
                "pixel-passes (M)": np.mean([r.pixel_passes for r in runs]) / 1e6,
                "CPU s": np.mean([r.seconds for r in runs]),
            }
        )
    return pd.DataFrame(rows)


def curves_figure(results: Results) -> plt.Figure:
    """Validation MSE (fine data) against cumulative CPU time and epoch per arm, first seed (dotted: the switch)."""
    first = results.seeds[0]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for i, arm in enumerate(ARMS):
        r = first.arms[arm]
        mse = [p.val_mse for p in r.curve]
        axis_values: tuple[list[float], list[float]] = ([p.seconds for p in r.curve],
                                                       [float(e) for e in range(1, len(r.curve) + 1)])
        for ax, xs in zip(axes, axis_values):
            ax.plot(xs, mse, marker=".", color=f"C{i}", label=arm)
            if r.switched_at:
                ax.axvline(xs[r.switched_at - 1], color=f"C{i}", ls=":", lw=0.8)
    axes[1].axhline(first.trivial_mse, color="k", lw=0.8, label="predicting the mean")
    for ax, lab in zip(axes, ("CPU seconds spent training", "epoch")):
        ax.set_xlabel(lab)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("validation MSE (fine data)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"learning curves, seed {first.seed} (dotted: switch to the original resolution)")
    fig.tight_layout()
    return fig


def preview_figure(params: Params, count: int = 4) -> plt.Figure:
    """A few generated fields at both resolutions (the first seed's data)."""
    train, _ = make_fieldsets(count, 2, params.size, params.seeds[0])
    fig, axes = plt.subplots(2, count, figsize=(2.25 * count, 4.6), squeeze=False)
    for i in range(count):
        axes[0, i].imshow(train.fields[i, 0], cmap="magma")
        axes[1, i].imshow(coarsen(train.fields[i:i + 1], params.factor)[0, 0], cmap="magma")
        for ax in axes[:, i]:
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
    side = params.size // params.factor
    axes[0, 0].set_ylabel(f"{params.size}×{params.size}")
    axes[1, 0].set_ylabel(f"{side}×{side}")
    fig.suptitle("generated fields at both resolutions")
    return fig
