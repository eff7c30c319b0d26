"""Chapter driver: KAKURENBO's sample hiding against plain training, ISWR, Selective Backprop and ablations.

For every seed, all methods run in the same process on the same data and
initial weights, interleaved epoch by epoch after one throw-away warm-up
epoch, so their times are comparable.  Time is the training process's CPU time
(``time.process_time``, one torch thread, data loading in-process), which a
shared machine disturbs far less than wall-clock time; it is still
indicative only.  The models train on the ``device`` parameter's device
(samplers and their generators stay on the CPU, so every device sees the
same batches); on a GPU the clock still counts the host process's CPU time
(launching kernels and waiting for them at each epoch's end), not the GPU's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.devices import resolve_device, synchronize
from repro.models import mlp
from repro.parallel import parallel_map
from repro.training import kakurenbo as hiding
from repro.training.data import Split, synthetic_classification
from repro.training.importance_sampling import importance_draw
from repro.training.sample_loop import accuracy, forward_stats, train_epoch
from repro.training.selective_backprop import LossHistory, selective_epoch

METHODS = ("baseline", "kakurenbo", "no_moveback", "no_lr_scale", "random_hiding", "iswr", "selective_backprop")
"""The compared methods: plain uniform SGD, KAKURENBO, its two ablations, random hiding (the control),
importance sampling with replacement and Selective Backprop."""


@dataclass(frozen=True, kw_only=True)
class KakurenboSetup:
    """Data, model, optimiser and method settings of a sweep."""

    n_samples: int
    n_features: int
    n_informative: int
    num_classes: int
    class_sep: float
    flip_y: float
    hidden: tuple[int, ...]
    batch_size: int
    base_lr: float
    momentum: float
    weight_decay: float
    epochs: int
    max_fraction: float
    threshold: float
    sb_keep: float
    methods: tuple[str, ...] = METHODS


@dataclass(frozen=True, kw_only=True)
class EpochLog:
    """One epoch of one method."""

    epoch: int
    lr: float
    hidden: int
    max_hidden: int
    forward_passes: int
    backward_passes: int
    seconds: float
    test_accuracy: float


@dataclass(frozen=True, kw_only=True)
class MethodRun:
    """One method on one seed."""

    method: str
    seed: int
    n_train: int
    log: tuple[EpochLog, ...]

    @property
    def final_accuracy(self) -> float:
        """Test accuracy after the last epoch."""
        return self.log[-1].test_accuracy

    @property
    def seconds(self) -> float:
        """Training CPU time of the process (evaluation excluded)."""
        return sum(e.seconds for e in self.log)

    @property
    def backward_passes(self) -> int:
        """Sample-passes with a backward pass."""
        return sum(e.backward_passes for e in self.log)

    @property
    def forward_passes(self) -> int:
        """Sample-passes with a forward pass (training and refresh)."""
        return sum(e.forward_passes for e in self.log)


def step_lr(epoch: int, setup: KakurenboSetup) -> float:
    """The baseline schedule: ``base_lr`` x {1, 0.2, 0.04} with steps at 50% and 75% of the epochs."""
    mult = 1.0 if epoch < 0.5 * setup.epochs else 0.2 if epoch < 0.75 * setup.epochs else 0.04
    return setup.base_lr * mult


def data(setup: KakurenboSetup, seed: int) -> Split:
    """The generated classification set of a seed."""
    return synthetic_classification(setup.n_samples, setup.n_features, setup.n_informative, setup.num_classes,
                                    class_sep=setup.class_sep, flip_y=setup.flip_y, seed=seed)


class MethodTrainer:
    """One method trained epoch by epoch from the seed's initial weights.

    Parameters
    ----------
    method
        One of :data:`METHODS`.
    setup, split, seed
        Settings, data and seed (weights, sampling order).
    device
        Where the model trains: ``cpu``, ``cuda`` or ``auto``.
    """

    def __init__(self, method: str, setup: KakurenboSetup, split: Split, seed: int, device: str = "cpu") -> None:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
        self.method, self.setup, self.split, self.seed = method, setup, split, seed
        self.device = resolve_device(device)
        torch.manual_seed(seed)
        self.model = mlp(split.num_features, setup.hidden, split.num_classes).to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=setup.base_lr, momentum=setup.momentum,
                                   weight_decay=setup.weight_decay)
        self.gen = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.state = hiding.HidingState(len(split.train), setup.threshold, move_back=(method != "no_moveback"))
        self.history = LossHistory()
        self.log: list[EpochLog] = []

    def epoch(self, e: int, hide_count: int = 0) -> EpochLog:
        """Train epoch ``e``; ``hide_count`` is the number hidden by ``random_hiding`` (the control)."""
        m, setup, split = self.method, self.setup, self.split
        n = len(split.train)
        t0 = time.process_time()
        lr = step_lr(e, setup)
        fraction = hiding.hidden_fraction(e, setup.epochs, setup.max_fraction) \
            if m in ("kakurenbo", "no_moveback", "no_lr_scale", "random_hiding") else 0.0
        sel = hiding.random_hiding(n, hide_count, self.rng) if m == "random_hiding" else self.state.select(fraction)
        if m in ("kakurenbo", "no_moveback", "random_hiding"):
            lr *= hiding.lr_compensation(fraction)
        fwd = bwd = len(sel.visible)
        if m == "iswr":
            draw = importance_draw(self.state.loss, self.gen)
            stats = train_epoch(self.model, self.opt, split.train, draw.sampler, setup.batch_size, lr, draw.weights)
            self.state.update(stats, e)
        elif m == "selective_backprop":
            sp = selective_epoch(self.model, self.opt, split.train, hiding.visible_sampler(sel, self.gen),
                                 setup.batch_size, lr, setup.sb_keep, self.history)
            self.state.update(sp.stats, e)
            fwd, bwd = sp.forward_passes, sp.backward_passes
        else:
            self.state.update(train_epoch(self.model, self.opt, split.train, hiding.visible_sampler(sel, self.gen),
                                          setup.batch_size, lr), e)
            if len(sel.hidden):
                self.state.update(forward_stats(self.model, split.train, sel.hidden), e)
                fwd += len(sel.hidden)
        synchronize(self.device)
        seconds = time.process_time() - t0
        rec = EpochLog(
            epoch=e,
            lr=lr,
            hidden=len(sel.hidden),
            max_hidden=sel.candidates,
            forward_passes=fwd,
            backward_passes=bwd,
            seconds=seconds,
            test_accuracy=accuracy(self.model, split.test),
        )
        self.log.append(rec)
        return rec

    def result(self) -> MethodRun:
        """The run so far."""
        return MethodRun(method=self.method, seed=self.seed, n_train=len(self.split.train), log=tuple(self.log))


def train_method(method: str, setup: KakurenboSetup, split: Split, seed: int, device: str = "cpu") -> MethodRun:
    """Train one method alone for all epochs on ``device`` (``random_hiding`` then hides nothing)."""
    trainer = MethodTrainer(method, setup, split, seed, device)
    for e in range(setup.epochs):
        trainer.epoch(e)
    return trainer.result()


@dataclass(frozen=True, kw_only=True)
class SeedJob:
    """All methods on one seed, trained on ``device`` (``cpu``, ``cuda`` or ``auto``)."""

    setup: KakurenboSetup
    seed: int
    device: str = "cpu"


def run_seed(job: SeedJob) -> list[MethodRun]:
    """Every method of the setup on one seed, interleaved epoch by epoch (so load changes hit all alike)."""
    torch.set_num_threads(1)
    split = data(job.setup, job.seed)
    train_method(job.setup.methods[0], replace(job.setup, epochs=1), split, job.seed, job.device)  # warm-up, discarded
    trainers = {m: MethodTrainer(m, job.setup, split, job.seed, job.device) for m in job.setup.methods}
    order = sorted(job.setup.methods, key=lambda m: m == "random_hiding")  # the control needs KAKURENBO's count
    for e in range(job.setup.epochs):
        for m in order:
            count = trainers["kakurenbo"].log[e].hidden if m == "random_hiding" else 0
            trainers[m].epoch(e, count)
    return [trainers[m].result() for m in job.setup.methods]


def sweep(setup: KakurenboSetup, seeds: list[int], workers: int = 1, device: str = "cpu") -> list[MethodRun]:
    """Every method on every seed (one job per seed), trained on ``device``."""
    return [
        r
        for rs in parallel_map(
            run_seed, [SeedJob(setup=setup, seed=s, device=device) for s in seeds], workers=workers, desc="seeds"
        )
        for r in rs
    ]


def _by(runs: list[MethodRun], method: str) -> dict[int, MethodRun]:
    return {r.seed: r for r in runs if r.method == method}


def claims(runs: list[MethodRun]) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims."""
    base, kak = _by(runs, "baseline"), _by(runs, "kakurenbo")
    seeds = sorted(base)
    acc = {m: _by(runs, m) for m in ("iswr", "no_moveback", "random_hiding")}
    return {
        "time_reduction": [100.0 * (1 - kak[s].seconds / base[s].seconds) for s in seeds],
        "backward_reduction": [100.0 * (1 - kak[s].backward_passes / base[s].backward_passes) for s in seeds],
        "accuracy_drop": [base[s].final_accuracy - kak[s].final_accuracy for s in seeds],
        "iswr_gap": [kak[s].final_accuracy - acc["iswr"][s].final_accuracy for s in seeds],
        "moveback_gain": [kak[s].final_accuracy - acc["no_moveback"][s].final_accuracy for s in seeds],
        "importance_vs_random": [kak[s].final_accuracy - acc["random_hiding"][s].final_accuracy for s in seeds],
    }


def summary(runs: list[MethodRun]) -> pd.DataFrame:
    """The miniature of the paper's main table: accuracy, time and passes per method (mean over seeds)."""
    base = _by(runs, "baseline")
    rows = []
    for m in dict.fromkeys(r.method for r in runs):
        sel = list(_by(runs, m).values())
        acc = np.array([r.final_accuracy for r in sel])
        rows.append(
            {
                "method": m,
                "test accuracy (%)": acc.mean(),
                "sd": acc.std(ddof=1) if len(acc) > 1 else 0.0,
                "time vs baseline (%)": np.mean([100 * (r.seconds / base[r.seed].seconds - 1) for r in sel]),
                "backward passes vs baseline (%)": np.mean(
                    [100 * (r.backward_passes / base[r.seed].backward_passes - 1) for r in sel]
                ),
                "forward passes vs baseline (%)": np.mean(
                    [100 * (r.forward_passes / base[r.seed].forward_passes - 1) for r in sel]
                ),
            }
        )
    return pd.DataFrame(rows)


def hidden_fraction_figure(runs: list[MethodRun], setup: KakurenboSetup) -> plt.Figure:
    """Realised hidden fraction per epoch (KAKURENBO and no move-back) against the maximum F_e."""
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    epochs = np.arange(setup.epochs)
    ax.step(
        epochs,
        [hiding.hidden_fraction(e, setup.epochs, setup.max_fraction) for e in epochs],
        where="mid",
        color="k",
        ls="--",
        label="maximum $F_e$",
    )
    for m, c in (("kakurenbo", "C0"), ("no_moveback", "C1")):
        sel = list(_by(runs, m).values())
        if not sel:
            continue
        frac = np.array([[e.hidden / r.n_train for e in r.log] for r in sel])
        ax.plot(epochs, frac.mean(0), color=c, marker=".", label=f"{m} (realised)")
        ax.fill_between(epochs, frac.min(0), frac.max(0), color=c, alpha=0.2)
    ax.set_xlabel("epoch")
    ax.set_ylabel("hidden fraction")
    ax.set_title("samples hidden per epoch")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def tradeoff_figure(runs: list[MethodRun]) -> plt.Figure:
    """Accuracy against training time and against backward passes, relative to the baseline, per method."""
    df = summary(runs)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, col in zip(axes, ("time vs baseline (%)", "backward passes vs baseline (%)")):
        for i, row in df.iterrows():
            ax.errorbar(
                row[col], row["test accuracy (%)"], yerr=row["sd"], fmt="o", color=f"C{i}", capsize=3, label=row["method"]
            )
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlabel(col)
    axes[0].set_ylabel("final test accuracy (%)")
    axes[1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle("accuracy against cost (mean over seeds; bars: sd)")
    fig.tight_layout()
    return fig
