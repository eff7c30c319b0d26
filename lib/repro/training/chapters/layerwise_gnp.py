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
from repro.params import ChapterParams, require
from repro.results import Evidence
from repro.training.layertable import flops_by_child
from repro.training.sam import LayerSelector, SamConfig, layer_blocks, sam_step, second_pass_fraction

DIGITS_TRAIN = 1200
"""Training images (the spec's 1200 / 597 split of the 1797 digits)."""
DIGITS_TEST = (1797 - DIGITS_TRAIN) / 1797
LAYER_NAMES = ("conv1", "conv2", "conv3", "fc1", "fc2")


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    label_noise: float
    widths: tuple[int, ...]
    hidden: int
    epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    rho: float
    penalty_alpha: float
    plain_unselected: bool
    ks: tuple[int, ...]
    claim_k: int
    last_epochs: int
    seeds: tuple[int, ...]
    workers: int
    device: str

    def checks(self) -> None:
        """Refuse impossible combinations before any work starts."""
        require(self.claim_k in self.ks, self, ("claim_k", "ks"), "claim_k must be one of ks")
        require(len(self.widths) == 3, self, "widths", "widths gives the three conv blocks' channels")
        require(self.last_epochs <= self.epochs, self, ("last_epochs", "epochs"), "last_epochs must not exceed epochs")
        require(max(self.ks) < len(LAYER_NAMES), self, "ks",
                f"a layer-wise run perturbs fewer than all {len(LAYER_NAMES)} layers (all of them is SAM)")

    @property
    def sam(self) -> SamConfig:
        """The perturbation and update rule of every SAM-type run."""
        return SamConfig(rho=self.rho, alpha=self.penalty_alpha, plain_unselected=self.plain_unselected)


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
class RunJob:
    """One method on one seed."""

    params: Params
    method: Method
    seed: int


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


def cnn(widths: tuple[int, ...], hidden: int, num_classes: int = 10) -> nn.Sequential:
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
    s, m = job.params, job.method
    x, y, xt, yt, _ = noisy_digits(s.label_noise, job.seed)
    torch.manual_seed(job.seed)
    model = cnn(s.widths, s.hidden)
    block_flops = flops_by_child(model, x[:1])
    dev = resolve_device(s.device)
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
            rec = sam_step(model, loss_fn, x[idx], y[idx], opt, s.sam, selector)
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


def sweep(params: Params, chosen: list[Method]) -> list[RunResult]:
    """Every method on every seed, trained on ``params.device``."""
    jobs = [RunJob(params=params, method=m, seed=s) for s in params.seeds for m in chosen]
    return parallel_map(train_run, jobs, workers=params.workers, desc="layerwise-gnp runs")


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params
        The parameters it ran with.
    runs
        Every method on every seed.
    noise
        The realised share of flipped training labels, per seed.
    chance
        The majority class's share of the (clean) test labels, percent, largest over the seeds.
    """

    params: Params
    runs: tuple[RunResult, ...]
    noise: dict[int, float]
    chance: float

    @property
    def layerwise(self) -> str:
        """The name of the layer-wise run the claims judge (top ``claim_k``)."""
        return f"layer-wise k={self.params.claim_k}"

    @property
    def random_control(self) -> str:
        """The name of the random control at ``claim_k``."""
        return f"random k={self.params.claim_k}"


def run(params: Params) -> Results:
    """SGD, SAM, layer-wise SAM for every k and the two controls, on every seed."""
    runs = sweep(params, methods(list(params.ks), params.claim_k))
    data = {s: noisy_digits(params.label_noise, s) for s in params.seeds}
    chance = max(100.0 * float(np.bincount(d[3].numpy()).max()) / len(d[3]) for d in data.values())
    return Results(params=params, runs=tuple(runs), noise={s: d[4] for s, d in data.items()}, chance=chance)


def _by(runs: list[RunResult] | tuple[RunResult, ...], method: str) -> dict[int, RunResult]:
    return {r.seed: r for r in runs if r.method == method}


def final_accuracy(run: RunResult, last: int) -> float:
    """Mean test accuracy over the last ``last`` epochs (smooths epoch-to-epoch noise)."""
    return float(np.mean(run.test_accuracy[-last:]))


def late_grad_norm(run: RunResult) -> float:
    """Mean whole-model gradient norm over the last quarter of training."""
    q = max(1, len(run.grad_norm) // 4)
    return float(np.mean(run.grad_norm[-q:]))


def summary(results: Results) -> pd.DataFrame:
    """Per method: accuracy, late gradient norm, second-pass compute and wall time (mean and sd over seeds)."""
    runs, last = results.runs, results.params.last_epochs
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


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims (see the registry entry for their metrics)."""
    last = results.params.last_epochs
    sgd, sam, lw, rnd = (_by(results.runs, n) for n in ("SGD", "SAM", results.layerwise, results.random_control))
    seeds = sorted(sgd)

    def acc(d: dict[int, RunResult]) -> list[float]:
        return [final_accuracy(d[s], last) for s in seeds]

    def gap(a: tuple[str, dict[int, RunResult]], b: tuple[str, dict[int, RunResult]]) -> Evidence:
        xa, xb = acc(a[1]), acc(b[1])
        return Evidence(values=[p - q for p, q in zip(xa, xb)], arms={a[0]: xa, b[0]: xb}, trivial=results.chance)

    g = lambda d, s: late_grad_norm(d[s])  # noqa: E731

    def share(s: int) -> float:  # part of SAM's gradient-norm reduction that the layer-wise method achieves, percent
        gap_ = g(sgd, s) - g(sam, s)
        return 100.0 * (g(sgd, s) - g(lw, s)) / gap_ if gap_ != 0 else 0.0

    def time_share(s: int) -> float:  # where the layer-wise wall time lies between SGD (0) and SAM (100)
        gap_ = sam[s].seconds - sgd[s].seconds
        return 100.0 * (lw[s].seconds - sgd[s].seconds) / gap_ if gap_ > 0 else 100.0

    named = {"SGD": sgd, "SAM": sam, results.layerwise: lw, results.random_control: rnd}
    arm = lambda name: (name, named[name])  # noqa: E731
    return {
        "sam_beats_sgd": gap(arm("SAM"), arm("SGD")),
        "layerwise_beats_sgd": gap(arm(results.layerwise), arm("SGD")),
        "layerwise_near_sam": gap(arm("SAM"), arm(results.layerwise)),
        "top_beats_random": gap(arm(results.layerwise), arm(results.random_control)),
        "sam_suppresses_gradnorm": [100.0 * (g(sgd, s) - g(sam, s)) / g(sgd, s) for s in seeds],
        "layerwise_suppresses_gradnorm": [share(s) for s in seeds],
        "second_pass_compute": [100.0 * lw[s].second_pass for s in seeds],
        "wall_time_position": [time_share(s) for s in seeds],
    }


def curves_figure(results: Results) -> plt.Figure:
    """Whole-model gradient norm and test accuracy per epoch, per method (mean over seeds)."""
    runs = results.runs
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


def cost_figure(results: Results) -> plt.Figure:
    """Accuracy against second-pass compute: the accuracy/cost trade-off of every method (dots: seeds)."""
    runs, last = results.runs, results.params.last_epochs
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


def selection_table(results: Results) -> pd.DataFrame:
    """How often each layer was perturbed by the claimed layer-wise run, percent of steps, mean over seeds."""
    rs = list(_by(results.runs, results.layerwise).values())
    share = np.mean([np.asarray(r.selected_counts) / r.steps for r in rs], axis=0)
    return pd.DataFrame({"layer": LAYER_NAMES, "perturbed (% of steps)": 100 * share})
