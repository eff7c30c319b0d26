"""Chapter driver: growing the mini-batch and learning rate at run time (digits classification arm).

Arms: fixed small, medium and large batches (the large one with linearly
scaled rate and a warm-up), and adaptive schedules that double the batch
every few epochs or on a loss plateau (:mod:`repro.training.batch_schedule`).
Parallel time is modelled with P = B / b_local workers and an alpha-beta
allreduce; a 2-rank gloo run checks that data parallelism with B / 2 per rank
is the same update as one process with batch B.  The arms train on the
``device`` parameter's device; the gloo check stays on the CPU, since it checks
the simulator's arithmetic, not its speed.  The epochs' sample orders are
drawn on the CPU, so every device sees the same batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.datasets import load_digits
from repro.devices import resolve_device
from repro.parallel import parallel_map
from repro.training.batch_schedule import BatchController, BatchSchedule
from repro.training.cost import Network, ring_allreduce_time
from repro.training.data import IndexedDataset
from repro.training.distributed import GroupedJob, ModelSpec, grouped_sgd_rank
from repro.training.launcher import launch
from repro.training.simulator import ReplicaBank, SGDConfig, Topology, evaluate, make_optimizer, run_grouped, train_step


@dataclass(frozen=True, kw_only=True)
class BatchSetup:
    """Model, optimiser and schedule settings shared by the arms."""

    hidden: tuple[int, ...]
    epochs: int
    momentum: float
    initial_lr: float
    initial_batch: int
    max_batch: int
    medium_batch: int
    interval: int
    window: int
    delta: float
    warmup_steps: int
    alphas: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Arm:
    """A named batch schedule."""

    name: str
    schedule: BatchSchedule
    start_lr: float | None = None  # linear warm-up from this rate over the first epoch (fixed large batch)


def arms(s: BatchSetup) -> list[Arm]:
    """Fixed small / medium / large batches and the adaptive schedules (interval per alpha, plateau)."""
    def fixed(b: int) -> BatchSchedule:
        return BatchSchedule(initial_batch=b, max_batch=b, initial_lr=s.initial_lr * b / s.initial_batch)

    out = [Arm(name=f"fixed {s.initial_batch}", schedule=fixed(s.initial_batch)),
           Arm(name=f"fixed {s.medium_batch}", schedule=fixed(s.medium_batch), start_lr=s.initial_lr),
           Arm(name=f"fixed {s.max_batch}", schedule=fixed(s.max_batch), start_lr=s.initial_lr)]
    for a in s.alphas:
        out.append(
            Arm(
                name=f"adaptive interval, alpha={a:g}",
                schedule=BatchSchedule(
                    initial_batch=s.initial_batch,
                    max_batch=s.max_batch,
                    initial_lr=s.initial_lr,
                    alpha=a,
                    trigger="interval",
                    interval=s.interval,
                    warmup_steps=s.warmup_steps,
                ),
            )
        )
    out.append(
        Arm(
            name=f"adaptive plateau, alpha={s.alphas[0]:g}",
            schedule=BatchSchedule(
                initial_batch=s.initial_batch,
                max_batch=s.max_batch,
                initial_lr=s.initial_lr,
                alpha=s.alphas[0],
                trigger="plateau",
                window=s.window,
                delta=s.delta,
                warmup_steps=s.warmup_steps,
            ),
        )
    )
    return out


@dataclass(frozen=True, kw_only=True)
class ArmJob:
    """One arm on one seed, trained on ``device`` (``cpu``, ``cuda`` or ``auto``)."""

    setup: BatchSetup
    arm: Arm
    seed: int
    device: str = "cpu"


@dataclass(frozen=True, kw_only=True)
class ArmRun:
    """An arm's outcome: accuracy per epoch, batch per epoch and optimiser steps."""

    arm: str
    seed: int
    accuracy: tuple[float, ...]
    batch_per_epoch: tuple[int, ...]
    steps: int
    n_train: int
    model_bytes: int

    @property
    def final_accuracy(self) -> float:
        """Test accuracy after the last epoch."""
        return self.accuracy[-1]


def _digits(seed: int) -> tuple[IndexedDataset, IndexedDataset]:
    ds = load_digits(seed=seed)
    return IndexedDataset(ds.x_train, ds.y_train), IndexedDataset(ds.x_test, ds.y_test)


def run_arm(job: ArmJob) -> ArmRun:
    """Train one arm; every epoch visits each training sample once at the controller's current batch."""
    torch.set_num_threads(1)
    s, arm = job.setup, job.arm
    train, test = _digits(job.seed)
    dev = resolve_device(job.device)
    xs, ys = train.x.to(dev), train.y.to(dev)
    spec = ModelSpec(in_features=train.x.shape[1], hidden=s.hidden, num_classes=10, batch_norm=False, seed=job.seed)
    bank = ReplicaBank(spec.build(), Topology(num_groups=1, group_size=1)).to(dev)
    opt = make_optimizer(bank, SGDConfig(lr=arm.schedule.initial_lr, momentum=s.momentum))
    ctl = BatchController(arm.schedule)
    gen = torch.Generator().manual_seed(job.seed)
    n = len(train)
    warm = math.ceil(n / arm.schedule.initial_batch) if arm.start_lr is not None else 0
    acc, batches, steps = [], [], 0
    for e in range(s.epochs):
        batches.append(ctl.batch)
        losses = []
        for ids in ctl.batches(n, gen):
            lr = ctl.step_lr()
            if steps < warm:  # the large fixed batch's gradual warm-up (Goyal et al.)
                lr = arm.start_lr + (lr - arm.start_lr) * (steps + 1) / warm
            idx = torch.as_tensor(ids, device=dev)
            losses.append(train_step(bank, opt, xs[idx][None, None], ys[idx][None, None], lr).mean().item())
            steps += 1
        ctl.end_epoch(e, float(np.mean(losses)))
        acc.append(evaluate(bank, test.x, test.y)[0])
    return ArmRun(
        arm=arm.name,
        seed=job.seed,
        accuracy=tuple(acc),
        batch_per_epoch=tuple(batches),
        steps=steps,
        n_train=n,
        model_bytes=4 * sum(p[0].numel() for p in bank.weights),
    )


def sweep(setup: BatchSetup, seeds: list[int], workers: int = 1, device: str = "cpu") -> list[ArmRun]:
    """Every arm on every seed, trained on ``device`` (``cpu``, ``cuda`` or ``auto``)."""
    jobs = [ArmJob(setup=setup, arm=a, seed=sd, device=device) for a in arms(setup) for sd in seeds]
    return parallel_map(run_arm, jobs, workers=workers, desc="arms")


def modelled_time(run: ArmRun, local_batch: int, sample_seconds: float, net: Network) -> float:
    """Modelled training time: each epoch's steps with P = B / b_local workers, compute plus gradient allreduce."""
    total = 0.0
    for b in run.batch_per_epoch:
        p = max(1, b // local_batch)
        per_step = (b / p) * sample_seconds + ring_allreduce_time(run.model_bytes, p, net)
        total += math.ceil(run.n_train / b) * per_step
    return total


def ddp_check(setup: BatchSetup, batch: int, steps: int, seed: int = 0) -> float:
    """Largest parameter difference: 2 gloo ranks with batch/2 each against one process with the full batch."""
    train, _ = _digits(seed)
    rng = np.random.default_rng(seed)
    plan = np.stack([rng.permutation(len(train))[:batch] for _ in range(steps)]).reshape(steps, 1, 2, batch // 2)
    lrs = np.full(steps, setup.initial_lr * batch / setup.initial_batch)
    spec = ModelSpec(in_features=train.x.shape[1], hidden=setup.hidden, num_classes=10, batch_norm=False, seed=seed)
    sgd = SGDConfig(lr=float(lrs[0]), momentum=setup.momentum)
    job = GroupedJob(x=train.x.numpy(), y=train.y.numpy(), model=spec, sgd=sgd, plan=plan, lrs=lrs, tau=1)
    reports = launch(grouped_sgd_rank, 2, (job,), group_size=2, timeout_s=300)
    bank = ReplicaBank(spec.build(), Topology(num_groups=1, group_size=1))
    run_grouped(bank, make_optimizer(bank, sgd), train.x, train.y, plan.reshape(steps, 1, 1, batch), lrs, tau=1)
    return max(float(np.max(np.abs(a - b))) for rep in reports for a, b in zip(bank.group_state(0), rep.params))


def _final(runs: list[ArmRun], name: str) -> dict[int, float]:
    return {r.seed: r.final_accuracy for r in runs if r.arm == name}


def claims(
    runs: list[ArmRun], setup: BatchSetup, local_batch: int, sample_seconds: float, net: Network, ddp_diff: float
) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (adaptive = the interval schedule with the first alpha)."""
    small, large = f"fixed {setup.initial_batch}", f"fixed {setup.max_batch}"
    adaptive = f"adaptive interval, alpha={setup.alphas[0]:g}"
    a_small, a_large, a_ad = _final(runs, small), _final(runs, large), _final(runs, adaptive)
    by = {(r.arm, r.seed): r for r in runs}
    seeds = sorted(a_small)
    return {
        "large_batch_gap": [a_small[s] - a_large[s] for s in seeds],
        "adaptive_vs_small": [a_small[s] - a_ad[s] for s in seeds],
        "adaptive_closer": [a_ad[s] - a_large[s] for s in seeds],
        "step_reduction": [100.0 * (1 - by[(adaptive, s)].steps / by[(small, s)].steps) for s in seeds],
        "modelled_speedup": [
            modelled_time(by[(small, s)], local_batch, sample_seconds, net)
            / modelled_time(by[(adaptive, s)], local_batch, sample_seconds, net)
            for s in seeds
        ],
        "ddp_equivalence": [ddp_diff],
    }


def summary(runs: list[ArmRun], local_batch: int, sample_seconds: float, net: Network) -> pd.DataFrame:
    """Per arm: final accuracy, optimiser steps and modelled time relative to the small fixed batch."""
    rows = []
    names = list(dict.fromkeys(r.arm for r in runs))
    ref = {r.seed: modelled_time(r, local_batch, sample_seconds, net) for r in runs if r.arm == names[0]}
    for name in names:
        sel = [r for r in runs if r.arm == name]
        acc = np.array([r.final_accuracy for r in sel])
        rows.append(
            {
                "arm": name,
                "test accuracy (%)": acc.mean(),
                "sd": acc.std(ddof=1) if len(acc) > 1 else 0.0,
                "optimiser steps": np.mean([r.steps for r in sel]),
                "final batch": sel[0].batch_per_epoch[-1],
                "modelled speedup": np.mean([ref[r.seed] / modelled_time(r, local_batch, sample_seconds, net) for r in sel]),
            }
        )
    return pd.DataFrame(rows)


def curves_figure(runs: list[ArmRun]) -> plt.Figure:
    """Test accuracy per epoch (left) and batch size per epoch (right) for every arm, mean over seeds."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 3.6))
    for i, name in enumerate(dict.fromkeys(r.arm for r in runs)):
        sel = [r for r in runs if r.arm == name]
        acc = np.array([r.accuracy for r in sel])
        ep = np.arange(1, acc.shape[1] + 1)
        ax.plot(ep, acc.mean(0), color=f"C{i}", label=name)
        ax.fill_between(ep, acc.min(0), acc.max(0), color=f"C{i}", alpha=0.12)
        bx.step(ep, sel[0].batch_per_epoch, where="mid", color=f"C{i}", label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(bottom=max(0, ax.get_ylim()[0]))
    bx.set_yscale("log", base=2)
    bx.set_xlabel("epoch")
    bx.set_ylabel("batch size (first seed)")
    bx.legend(fontsize=7)
    fig.tight_layout()
    return fig


def speedup_figure(
    runs: list[ArmRun], setup: BatchSetup, local_batch: int, sample_seconds_sweep: list[float], net: Network
) -> plt.Figure:
    """Modelled speedup over the small fixed batch against the compute time per sample (the deciding constant)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    names = list(dict.fromkeys(r.arm for r in runs))
    small = {r.seed: r for r in runs if r.arm == names[0]}
    for i, name in enumerate(names[1:], start=1):
        sel = [r for r in runs if r.arm == name]
        sp = [
            np.mean([modelled_time(small[r.seed], local_batch, c, net) / modelled_time(r, local_batch, c, net) for r in sel])
            for c in sample_seconds_sweep
        ]
        ax.plot(np.array(sample_seconds_sweep) * 1e3, sp, marker=".", color=f"C{i}", label=name)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("modelled compute per sample (ms)")
    ax.set_ylabel(f"modelled speedup over {names[0]}")
    ax.set_title(f"P = B / {local_batch} workers, alpha {net.alpha * 1e6:g} µs, {1 / net.beta / 1e9:g} GB/s")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
