"""Chapter driver: layer-wise gradient-norm penalising (SAM on a few critical layers) against SGD and SAM.

A small CNN on scikit-learn's digits with symmetric label noise on the
training split, trained by SGD, full SAM, layer-wise SAM with the ``k``
layers of largest gradient norm (refreshed every epoch, truncated second
pass) and two controls with the same ``k`` (random layers, the ``k`` most
input-side layers).  Every run logs the whole-model gradient norm, the wall
time and the counted compute of the second pass (forward FLOPs of the blocks
it runs, from :mod:`repro.training.layertable`).  Runs train on the
``device`` parameter's device; batch orders and the layer draws of the random
control stay on the CPU, so every device sees the same ones, and the wall
time waits for the device's queued kernels at each epoch's end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from torch import nn

from repro.datasets import load_digits
from repro.devices import resolve_device, synchronize
from repro.parallel import parallel_map
from repro.training.layertable import flops_by_child
from repro.training.sam import LayerSelector, layer_blocks, sam_step, second_pass_fraction

DIGITS_TEST = 597 / 1797  # the spec's 1200 / 597 split
LAYER_NAMES = ("conv1", "conv2", "conv3", "fc1", "fc2")


@dataclass(frozen=True, kw_only=True)
class Method:
    """A training method: ``rule`` of :func:`repro.training.sam.select_layers` (``None`` = SGD) and ``k``."""

    name: str
    rule: str | None
    k: int = 0


def methods(ks: list[int], control_k: int) -> list[Method]:
    """SGD, SAM, layer-wise top-k for every k, and the random / input-side controls at ``control_k``."""
    out = [Method(name="SGD", rule=None), Method(name="SAM", rule="all", k=99)]
    out += [Method(name=f"layer-wise k={k}", rule="top", k=k) for k in ks]
    out += [
        Method(name=f"random k={control_k}", rule="random", k=control_k),
        Method(name=f"input-side k={control_k}", rule="input", k=control_k),
    ]
    return out


@dataclass(frozen=True, kw_only=True)
class GnpSetup:
    """Data, model and optimiser of every run."""

    label_noise: float
    widths: tuple[int, int, int]
    hidden: int
    epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    rho: float


@dataclass(frozen=True, kw_only=True)
class RunJob:
    """One method on one seed, trained on ``device`` (``cpu``, ``cuda`` or ``auto``)."""

    setup: GnpSetup
    method: Method
    seed: int
    device: str = "cpu"


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """Curves and totals of one run.

    Attributes
    ----------
    test_accuracy
        Test accuracy after each epoch, percent.
    grad_norm
        Mean whole-model gradient norm ``||g||`` at ``w`` over each epoch's steps.
    second_pass
        Mean second-pass compute per step as a fraction of a full pass (0 for SGD, 1 for SAM).
    selected_counts
        How often each layer was perturbed, per layer.
    steps
        Optimiser steps taken.
    seconds
        Wall time of training (evaluation excluded).
    """

    method: str
    seed: int
    test_accuracy: tuple[float, ...]
    grad_norm: tuple[float, ...]
    second_pass: float
    selected_counts: tuple[int, ...]
    steps: int
    seconds: float


def cnn(widths: tuple[int, int, int], hidden: int, num_classes: int = 10) -> nn.Sequential:
    """Three 3x3 conv-BN-ReLU blocks (no padding), global average pooling, two linear layers: 6 layers."""
    c1, c2, c3 = widths
    conv = lambda i, o: nn.Sequential(nn.Conv2d(i, o, 3), nn.BatchNorm2d(o), nn.ReLU())  # noqa: E731
    return nn.Sequential(
        conv(1, c1),
        conv(c1, c2),
        conv(c2, c3),
        nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()),
        nn.Sequential(nn.Linear(c3, hidden), nn.ReLU()),
        nn.Linear(hidden, num_classes),
    )


def noisy_digits(noise: float, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """Digits as 1x8x8 images, with a fraction ``noise`` of the training labels replaced by a different class.

    Returns
    -------
    tuple
        ``x_train, y_train_noisy, x_test, y_test`` and the realised noise fraction.
    """
    d = load_digits(test_fraction=DIGITS_TEST, seed=seed)
    rng = np.random.default_rng(seed + 7919)
    y = d.y_train.copy()
    flip = rng.random(len(y)) < noise
    y[flip] = (y[flip] + rng.integers(1, d.num_classes, flip.sum())) % d.num_classes
    img = lambda a: torch.from_numpy(a).reshape(-1, 1, 8, 8)  # noqa: E731
    return img(d.x_train), torch.from_numpy(y), img(d.x_test), torch.from_numpy(d.y_test), float(flip.mean())


def train_run(job: RunJob) -> RunResult:
    """Train one method on one seed (one thread) and return its curves."""
    torch.set_num_threads(1)
    s, m = job.setup, job.method
    x, y, xt, yt, _ = noisy_digits(s.label_noise, job.seed)
    torch.manual_seed(job.seed)
    model = cnn(s.widths, s.hidden)
    block_flops = flops_by_child(model, x[:1])
    dev = resolve_device(job.device)
    model.to(dev)
    x, y, xt, yt = x.to(dev), y.to(dev), xt.to(dev), yt.to(dev)
    steps_per_epoch = int(np.ceil(len(x) / s.batch_size))
    opt = torch.optim.SGD(model.parameters(), lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=s.epochs * steps_per_epoch)
    selector = None if m.rule is None else LayerSelector(m.rule, m.k, steps_per_epoch, seed=job.seed)
    gen = torch.Generator().manual_seed(job.seed)
    loss_fn = nn.functional.cross_entropy
    acc, gnorm, passes = [], [], []
    counts = np.zeros(len(layer_blocks(model)), dtype=int)
    seconds = 0.0
    for _ in range(s.epochs):
        model.train()
        t0 = time.perf_counter()
        norms = []
        for idx in torch.randperm(len(x), generator=gen).split(s.batch_size):
            idx = idx.to(dev)
            rec = sam_step(model, loss_fn, x[idx], y[idx], opt, s.rho, selector)
            sched.step()
            norms.append(rec.grad_norm)
            passes.append(second_pass_fraction(rec.first_block, block_flops) if selector else 0.0)
            counts[list(rec.selected)] += 1
        synchronize(dev)
        seconds += time.perf_counter() - t0
        gnorm.append(float(np.mean(norms)))
        model.eval()
        with torch.no_grad():
            acc.append(100.0 * float((model(xt).argmax(1) == yt).float().mean()))
    return RunResult(
        method=m.name,
        seed=job.seed,
        test_accuracy=tuple(acc),
        grad_norm=tuple(gnorm),
        second_pass=float(np.mean(passes)),
        selected_counts=tuple(int(c) for c in counts),
        steps=len(passes),
        seconds=seconds,
    )


def sweep(setup: GnpSetup, chosen: list[Method], seeds: list[int], workers: int = 1, device: str = "cpu") -> list[RunResult]:
    """Every method on every seed, trained on ``device`` (``cpu``, ``cuda`` or ``auto``)."""
    jobs = [RunJob(setup=setup, method=m, seed=s, device=device) for s in seeds for m in chosen]
    return parallel_map(train_run, jobs, workers=workers, desc="layerwise-gnp runs")


def _by(runs: list[RunResult], method: str) -> dict[int, RunResult]:
    return {r.seed: r for r in runs if r.method == method}


def final_accuracy(run: RunResult, last: int) -> float:
    """Mean test accuracy over the last ``last`` epochs (smooths epoch-to-epoch noise)."""
    return float(np.mean(run.test_accuracy[-last:]))


def late_grad_norm(run: RunResult) -> float:
    """Mean whole-model gradient norm over the last quarter of training."""
    q = max(1, len(run.grad_norm) // 4)
    return float(np.mean(run.grad_norm[-q:]))


def summary(runs: list[RunResult], last: int) -> pd.DataFrame:
    """Per method: accuracy, late gradient norm, second-pass compute and wall time (mean and sd over seeds)."""
    rows = []
    for name in dict.fromkeys(r.method for r in runs):
        rs = list(_by(runs, name).values())
        acc = [final_accuracy(r, last) for r in rs]
        rows.append(
            {
                "method": name,
                "test accuracy (%)": np.mean(acc),
                "sd": np.std(acc, ddof=1) if len(acc) > 1 else 0.0,
                "late ||g||": np.mean([late_grad_norm(r) for r in rs]),
                "second pass (% of SAM's)": 100 * np.mean([r.second_pass for r in rs]),
                "train seconds (under load)": np.mean([r.seconds for r in rs]),
            }
        )
    return pd.DataFrame(rows)


def claims(runs: list[RunResult], layerwise: str, random_control: str, last: int) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (see the registry entry for their metrics)."""
    sgd, sam, lw, rnd = (_by(runs, n) for n in ("SGD", "SAM", layerwise, random_control))
    seeds = sorted(sgd)
    acc = lambda d, s: final_accuracy(d[s], last)  # noqa: E731
    g = lambda d, s: late_grad_norm(d[s])  # noqa: E731

    def share(s: int) -> float:  # part of SAM's gradient-norm reduction that the layer-wise method achieves, percent
        gap = g(sgd, s) - g(sam, s)
        return 100.0 * (g(sgd, s) - g(lw, s)) / gap if gap != 0 else 0.0

    def time_share(s: int) -> float:  # where the layer-wise wall time lies between SGD (0) and SAM (100)
        gap = sam[s].seconds - sgd[s].seconds
        return 100.0 * (lw[s].seconds - sgd[s].seconds) / gap if gap > 0 else 100.0

    return {
        "sam_beats_sgd": [acc(sam, s) - acc(sgd, s) for s in seeds],
        "layerwise_beats_sgd": [acc(lw, s) - acc(sgd, s) for s in seeds],
        "layerwise_near_sam": [acc(sam, s) - acc(lw, s) for s in seeds],
        "top_beats_random": [acc(lw, s) - acc(rnd, s) for s in seeds],
        "sam_suppresses_gradnorm": [100.0 * (g(sgd, s) - g(sam, s)) / g(sgd, s) for s in seeds],
        "layerwise_suppresses_gradnorm": [share(s) for s in seeds],
        "second_pass_compute": [100.0 * lw[s].second_pass for s in seeds],
        "wall_time_position": [time_share(s) for s in seeds],
    }


def curves_figure(runs: list[RunResult]) -> plt.Figure:
    """Whole-model gradient norm and test accuracy per epoch, per method (mean over seeds)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, name in enumerate(dict.fromkeys(r.method for r in runs)):
        rs = list(_by(runs, name).values())
        ep = np.arange(1, len(rs[0].grad_norm) + 1)
        axes[0].plot(ep, np.mean([r.grad_norm for r in rs], axis=0), color=f"C{i}", label=name)
        axes[1].plot(ep, np.mean([r.test_accuracy for r in rs], axis=0), color=f"C{i}", label=name)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("epoch")
    axes[0].set_ylabel("whole-model ||g|| at w (epoch mean)")
    axes[1].set_xlabel("epoch")
    axes[1].set_ylabel("test accuracy (%)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def cost_figure(runs: list[RunResult], last: int) -> plt.Figure:
    """Accuracy against second-pass compute: the accuracy/cost trade-off of every method (dots: seeds)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for i, name in enumerate(dict.fromkeys(r.method for r in runs)):
        rs = list(_by(runs, name).values())
        xs = [100 * r.second_pass for r in rs]
        ys = [final_accuracy(r, last) for r in rs]
        ax.scatter(xs, ys, color=f"C{i}", s=14, alpha=0.6)
        ax.errorbar(np.mean(xs), np.mean(ys), yerr=np.std(ys), fmt="o", color=f"C{i}", ms=7, label=name)
    ax.set_xlabel("second-pass compute per step (% of SAM's, counted FLOPs)")
    ax.set_ylabel(f"test accuracy, mean of last {last} epochs (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def selection_table(runs: list[RunResult], method: str) -> pd.DataFrame:
    """How often each layer was perturbed by ``method``, percent of steps, mean over seeds."""
    rs = list(_by(runs, method).values())
    share = np.mean([np.asarray(r.selected_counts) / r.steps for r in rs], axis=0)
    return pd.DataFrame({"layer": LAYER_NAMES, "perturbed (% of steps)": 100 * share})
