"""Chapter driver: multi-resolution training (coarse fields first, then the original resolution).

Arms on generated log-normal fields (:mod:`repro.training.multires`): fine
only, coarse only (judged on fine validation data), and mixed-resolution
training with a plateau-triggered or a fixed switch.  The mixed arms get the
same compute budget as fine-only training, counted in pixel-passes.  For every
seed the arms run one after the other in one process; time is the process's
CPU time (indicative on a shared machine) and pixel-passes are counted exactly.
The arms train on the ``device`` parameter's device, where the fields are put
(the batch orders are drawn on the CPU, so every device sees the same ones); on
a GPU the clock counts the host's CPU time up to the end of each epoch's kernels.
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
from repro.training.multires import FieldSet, PlateauSwitch, coarsen, field_cnn, make_fieldsets


@dataclass(frozen=True, kw_only=True)
class MultiresSetup:
    """Data, model and schedule settings shared by the arms."""

    n_train: int
    n_val: int
    size: int
    factor: int
    channels: tuple[int, ...]
    batch_size: int
    lr: float
    epochs: int
    window: int
    delta: float
    max_coarse_epochs: int
    fixed_switch: int
    tolerance: float


ARMS = ("fine", "coarse", "mrt_plateau", "mrt_fixed")


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

    @property
    def final_mse(self) -> float:
        """Validation MSE at the end."""
        return self.curve[-1].val_mse


@torch.no_grad()
def _val_mse(model: torch.nn.Module, val: FieldSet) -> float:
    model.eval()
    return float(F.mse_loss(model(val.fields), val.targets))


@torch.no_grad()
def _recalibrate_bn(model: torch.nn.Module, fields: torch.Tensor, batch_size: int, batches: int = 10) -> int:
    """Re-estimate BatchNorm statistics on the new resolution (cumulative average over a few batches)."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    seen = 0
    for i in range(min(batches, len(fields) // batch_size)):
        model(fields[i * batch_size:(i + 1) * batch_size])
        seen += batch_size
    for m in bns:
        m.momentum = 0.1
    return seen


def run_arm(arm: str, setup: MultiresSetup, train: FieldSet, val: FieldSet, seed: int) -> ArmRun:
    """Train one arm within its budget.

    The fine and coarse arms train for their epochs; the mixed arms train as long as the next epoch fits
    in the fine arm's pixel-pass budget (the BatchNorm re-estimation after the switch is charged too).
    The model trains on the device that holds ``train`` and ``val``.
    """
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {ARMS}")
    dev = train.fields.device
    model = field_cnn(setup.channels, seed).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=setup.lr)
    coarse_fields = coarsen(train.fields, setup.factor)
    fine_pixels = train.fields[0].numel()
    budget = setup.epochs * len(train.fields) * fine_pixels
    switch = {"fine": PlateauSwitch(fixed_epoch=0),
              "coarse": PlateauSwitch(fixed_epoch=10**9),
              "mrt_plateau": PlateauSwitch(setup.window, setup.delta, setup.max_coarse_epochs),
              "mrt_fixed": PlateauSwitch(fixed_epoch=setup.fixed_switch)}[arm]
    gen = torch.Generator().manual_seed(seed)
    pixels, seconds, curve = 0.0, 0.0, []
    while True:
        fields = coarse_fields if switch.coarse else train.fields
        epoch_cost = len(fields) * fields[0].numel()
        if (pixels + epoch_cost > budget + 1e-9) if arm.startswith("mrt") else len(curve) >= setup.epochs:
            break
        t0 = time.process_time()
        model.train()
        for idx in torch.randperm(len(fields), generator=gen).split(setup.batch_size):
            idx = idx.to(dev)
            loss = F.mse_loss(model(fields[idx]), train.targets[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        pixels += epoch_cost
        was_coarse = switch.coarse
        mse = _val_mse(model, val) if not was_coarse or arm == "coarse" else None
        if was_coarse and arm != "coarse":
            # the plateau is judged on the coarse validation loss (what the coarse stage can see)
            coarse_val = FieldSet(fields=coarsen(val.fields, setup.factor), targets=val.targets)
            if switch.update(_val_mse(model, coarse_val)):
                pixels += _recalibrate_bn(model, train.fields, setup.batch_size) * fine_pixels
        synchronize(dev)
        seconds += time.process_time() - t0
        curve.append(
            EpochPoint(
                val_mse=mse if mse is not None else _val_mse(model, val), pixel_passes=pixels, seconds=seconds, coarse=was_coarse
            )
        )
    return ArmRun(arm=arm, seed=seed, curve=tuple(curve), switched_at=switch.switched_at)


@dataclass(frozen=True, kw_only=True)
class SeedJob:
    """All arms on one seed, trained on ``device`` (``cpu``, ``cuda`` or ``auto``)."""

    setup: MultiresSetup
    seed: int
    device: str = "cpu"


def run_seed(job: SeedJob) -> list[ArmRun]:
    """Every arm on one seed's data."""
    torch.set_num_threads(1)
    s = job.setup
    train, val = make_fieldsets(s.n_train, s.n_val, s.size, job.seed)
    dev = resolve_device(job.device)
    train, val = (FieldSet(fields=f.fields.to(dev), targets=f.targets.to(dev)) for f in (train, val))
    return [run_arm(a, s, train, val, job.seed) for a in ARMS]


def sweep(setup: MultiresSetup, seeds: list[int], workers: int = 1, device: str = "cpu") -> list[ArmRun]:
    """Every arm on every seed, trained on ``device``."""
    return [
        r
        for rs in parallel_map(
            run_seed, [SeedJob(setup=setup, seed=s, device=device) for s in seeds], workers=workers, desc="seeds"
        )
        for r in rs
    ]


def cost_to_target(run: ArmRun, target: float, key: str) -> float:
    """Cumulative cost (``seconds`` or ``pixel_passes``) when the validation MSE first reaches ``target``.

    A run that never does is charged its whole cost (censored: counts as no saving at best).
    """
    for p in run.curve:
        if p.val_mse <= target:
            return getattr(p, key)
    return getattr(run.curve[-1], key)


def claims(runs: list[ArmRun], tolerance: float) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (the mixed arm judged is the plateau-triggered one)."""
    by = {(r.arm, r.seed): r for r in runs}
    seeds = sorted({r.seed for r in runs})
    out: dict[str, list[float]] = {"time_saving": [], "pixel_saving": [], "accuracy_kept": [], "coarse_only_worse": []}
    for s in seeds:
        fine, mrt, coarse = by[("fine", s)], by[("mrt_plateau", s)], by[("coarse", s)]
        target = fine.final_mse * (1 + tolerance)
        for key, name in (("seconds", "time_saving"), ("pixel_passes", "pixel_saving")):
            out[name].append(100.0 * (1 - cost_to_target(mrt, target, key) / cost_to_target(fine, target, key)))
        out["accuracy_kept"].append(100.0 * (mrt.final_mse / fine.final_mse - 1))
        out["coarse_only_worse"].append(100.0 * (coarse.final_mse / fine.final_mse - 1))
    return out


def summary(runs: list[ArmRun]) -> pd.DataFrame:
    """Final validation MSE, switch epoch and total cost per arm (mean over seeds)."""
    rows = []
    for arm in ARMS:
        sel = [r for r in runs if r.arm == arm]
        rows.append(
            {
                "arm": arm,
                "final val MSE": np.mean([r.final_mse for r in sel]),
                "sd": np.std([r.final_mse for r in sel], ddof=1) if len(sel) > 1 else 0.0,
                "epochs": np.mean([len(r.curve) for r in sel]),
                "coarse epochs": np.mean([sum(p.coarse for p in r.curve) for r in sel]),
                "pixel-passes (M)": np.mean([r.curve[-1].pixel_passes for r in sel]) / 1e6,
                "CPU s": np.mean([r.curve[-1].seconds for r in sel]),
            }
        )
    return pd.DataFrame(rows)


def curves_figure(runs: list[ArmRun]) -> plt.Figure:
    """Validation MSE (fine data) against cumulative pixel-passes, CPU time and epoch, per arm (first seed)."""
    seed = min(r.seed for r in runs)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharey=True)
    for i, arm in enumerate(ARMS):
        r = next(x for x in runs if x.arm == arm and x.seed == seed)
        mse = [p.val_mse for p in r.curve]
        for ax, xs in zip(
            axes, ([p.pixel_passes / 1e6 for p in r.curve], [p.seconds for p in r.curve], range(1, len(r.curve) + 1))
        ):
            ax.plot(list(xs), mse, marker=".", color=f"C{i}", label=arm)
            if r.switched_at:
                ax.axvline(list(xs)[r.switched_at - 1], color=f"C{i}", ls=":", lw=0.8)
    for ax, lab in zip(axes, ("pixel-passes (millions)", "CPU seconds", "epoch")):
        ax.set_xlabel(lab)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("validation MSE (fine data)")
    axes[2].legend(fontsize=8)
    fig.suptitle(f"learning curves, seed {seed} (dotted: switch to fine data)")
    fig.tight_layout()
    return fig
