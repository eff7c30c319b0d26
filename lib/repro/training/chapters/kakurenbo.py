"""Chapter driver: KAKURENBO's sample hiding against plain training, ISWR, Selective Backprop and forgetting.

The baselines: plain training, importance sampling with replacement, Selective Backprop and pruning by
forgetting events; the ablations and the control: no move-back, no rate compensation, random hiding.

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
from repro.params import ChapterParams, require
from repro.results import Evidence
from repro.training import kakurenbo as hiding
from repro.training.data import Split, split_sizes, synthetic_classification
from repro.training.forgetting import ForgettingCounter
from repro.training.importance_sampling import importance_draw
from repro.training.sample_loop import accuracy, forward_stats, train_epoch
from repro.training.selective_backprop import LossHistory, selective_epoch

METHODS = ("baseline", "kakurenbo", "no_moveback", "no_lr_scale", "random_hiding", "iswr", "selective_backprop",
           "forgetting")
"""The compared methods: plain uniform SGD, KAKURENBO, its two ablations, random hiding (the control),
importance sampling with replacement, Selective Backprop and pruning by forgetting events."""
TEST_FRACTION = 0.2
"""Share of the generated samples held out for testing."""
CLUSTERS_PER_CLASS = 2
"""``make_classification``'s clusters per class (the default of :func:`repro.training.data.synthetic_classification`)."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

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
    forget_epochs: int
    seeds: tuple[int, ...]
    workers: int
    device: str

    @property
    def n_train(self) -> int:
        """Training samples after the test hold-out."""
        return split_sizes(self.n_samples, TEST_FRACTION)[0]

    def checks(self) -> None:
        """Refuse impossible combinations before any work starts."""
        require(self.n_informative <= self.n_features, self, ("n_informative", "n_features"),
                "n_informative must not exceed n_features")
        require(self.num_classes * CLUSTERS_PER_CLASS <= 2 ** self.n_informative, self, ("num_classes", "n_informative"),
                f"make_classification needs num_classes * {CLUSTERS_PER_CLASS} <= 2 ** n_informative")
        require(self.forget_epochs < self.epochs, self, ("forget_epochs", "epochs"),
                "the forgetting baseline counts events for fewer epochs than the run has")
        require(self.batch_size <= self.n_train, self, ("batch_size", "n_samples"),
                f"a batch must fit in the {self.n_train} training samples")


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


def step_lr(epoch: int, params: Params) -> float:
    """The baseline schedule: ``base_lr`` x {1, 0.2, 0.04} with steps at 50% and 75% of the epochs."""
    mult = 1.0 if epoch < 0.5 * params.epochs else 0.2 if epoch < 0.75 * params.epochs else 0.04
    return params.base_lr * mult


def data(params: Params, seed: int) -> Split:
    """The generated classification set of a seed."""
    return synthetic_classification(params.n_samples, params.n_features, params.n_informative, params.num_classes,
                                    class_sep=params.class_sep, flip_y=params.flip_y,
                                    n_clusters_per_class=CLUSTERS_PER_CLASS, test_fraction=TEST_FRACTION, seed=seed)


class MethodTrainer:
    """One method trained epoch by epoch from the seed's initial weights.

    Parameters
    ----------
    method
        One of :data:`METHODS`.
    params, split, seed
        Settings (the model trains on ``params.device``), data and seed (weights, sampling order).
    """

    def __init__(self, method: str, params: Params, split: Split, seed: int) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
        self.method, self.params, self.split, self.seed = method, params, split, seed
        self.device = resolve_device(params.device)
        torch.manual_seed(seed)
        self.model = mlp(split.num_features, params.hidden, split.num_classes).to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=params.base_lr, momentum=params.momentum,
                                   weight_decay=params.weight_decay)
        self.gen = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.state = hiding.HidingState(len(split.train), params.threshold, move_back=(method != "no_moveback"))
        self.history = LossHistory()
        self.forgetting = ForgettingCounter(len(split.train))
        self.log: list[EpochLog] = []

    def _selection(self, e: int, fraction: float, hide_count: int) -> hiding.Selection:
        """The epoch's visible and hidden samples."""
        n = len(self.split.train)
        if self.method == "random_hiding":
            return hiding.random_hiding(n, hide_count, self.rng)
        if self.method == "forgetting":
            if e == self.params.forget_epochs:
                return self.forgetting.prune(self.params.max_fraction)
            return self.forgetting.selection()
        return self.state.select(fraction)

    def epoch(self, e: int, hide_count: int = 0) -> EpochLog:
        """Train epoch ``e``; ``hide_count`` is the number hidden by ``random_hiding`` (the control)."""
        m, params, split = self.method, self.params, self.split
        t0 = time.process_time()
        lr = step_lr(e, params)
        fraction = hiding.hidden_fraction(e, params.epochs, params.max_fraction) \
            if m in ("kakurenbo", "no_moveback", "no_lr_scale", "random_hiding") else 0.0
        sel = self._selection(e, fraction, hide_count)
        if m in ("kakurenbo", "no_moveback", "random_hiding"):
            lr *= hiding.lr_compensation(fraction)
        fwd = bwd = len(sel.visible)
        if m == "iswr":
            draw = importance_draw(self.state.loss, self.gen)
            stats = train_epoch(self.model, self.opt, split.train, draw.sampler, params.batch_size, lr, draw.weights)
            self.state.update(stats, e)
        elif m == "selective_backprop":
            sp = selective_epoch(self.model, self.opt, split.train, hiding.visible_sampler(sel, self.gen),
                                 params.batch_size, lr, params.sb_keep, self.history)
            self.state.update(sp.stats, e)
            fwd, bwd = sp.forward_passes, sp.backward_passes
        else:
            stats = train_epoch(self.model, self.opt, split.train, hiding.visible_sampler(sel, self.gen),
                                params.batch_size, lr)
            self.state.update(stats, e)
            if m == "forgetting" and e < params.forget_epochs:
                self.forgetting.update(stats)
            if len(sel.hidden) and m != "forgetting":
                self.state.update(forward_stats(self.model, split.train, sel.hidden), e)
                fwd += len(sel.hidden)
        synchronize(self.device)
        seconds = time.process_time() - t0
        rec = EpochLog(epoch=e, lr=lr, hidden=len(sel.hidden), max_hidden=sel.candidates, forward_passes=fwd,
                       backward_passes=bwd, seconds=seconds, test_accuracy=accuracy(self.model, split.test))
        self.log.append(rec)
        return rec

    def result(self) -> MethodRun:
        """The run so far."""
        return MethodRun(method=self.method, seed=self.seed, n_train=len(self.split.train), log=tuple(self.log))


def train_method(method: str, params: Params, split: Split, seed: int) -> MethodRun:
    """Train one method alone for all epochs on ``params.device`` (``random_hiding`` then hides nothing)."""
    trainer = MethodTrainer(method, params, split, seed)
    for e in range(params.epochs):
        trainer.epoch(e)
    return trainer.result()


@dataclass(frozen=True, kw_only=True)
class SeedJob:
    """All methods on one seed."""

    params: Params
    seed: int


def run_seed(job: SeedJob) -> list[MethodRun]:
    """Every method on one seed, interleaved epoch by epoch (so load changes hit all alike)."""
    torch.set_num_threads(1)
    split = data(job.params, job.seed)
    train_method(METHODS[0], replace(job.params, epochs=1), split, job.seed)  # warm-up, discarded
    trainers = {m: MethodTrainer(m, job.params, split, job.seed) for m in METHODS}
    order = sorted(METHODS, key=lambda m: m == "random_hiding")  # the control needs KAKURENBO's count
    for e in range(job.params.epochs):
        for m in order:
            count = trainers["kakurenbo"].log[e].hidden if m == "random_hiding" else 0
            trainers[m].epoch(e, count)
    return [trainers[m].result() for m in METHODS]


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced: every method on every seed, and the task's trivial accuracy.

    Attributes
    ----------
    params
        The parameters it ran with.
    runs
        One :class:`MethodRun` per method and seed.
    chance
        The majority class's share of the test labels, percent, largest over the seeds.
    """

    params: Params
    runs: tuple[MethodRun, ...]
    chance: float


def majority_share(split: Split) -> float:
    """The most frequent test label's share, percent: what always answering that class scores."""
    return 100.0 * float(np.bincount(split.test.y.numpy()).max()) / len(split.test)


def run(params: Params) -> Results:
    """Every method on every seed (one job per seed)."""
    per_seed = parallel_map(run_seed, [SeedJob(params=params, seed=s) for s in params.seeds], workers=params.workers,
                            desc="seeds")
    return Results(params=params, runs=tuple(r for rs in per_seed for r in rs),
                   chance=max(majority_share(data(params, s)) for s in params.seeds))


def _by(runs: tuple[MethodRun, ...] | list[MethodRun], method: str) -> dict[int, MethodRun]:
    return {r.seed: r for r in runs if r.method == method}


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims, the accuracy ones with the arms they compare."""
    base, kak = _by(results.runs, "baseline"), _by(results.runs, "kakurenbo")
    seeds = sorted(base)

    def final(method: str) -> list[float]:
        by = _by(results.runs, method)
        return [by[s].final_accuracy for s in seeds]

    def gap(first: str, second: str) -> Evidence:
        a, b = final(first), final(second)
        return Evidence(values=[x - y for x, y in zip(a, b)], arms={first: a, second: b}, trivial=results.chance)

    return {
        "time_reduction": [100.0 * (1 - kak[s].seconds / base[s].seconds) for s in seeds],
        "backward_reduction": [100.0 * (1 - kak[s].backward_passes / base[s].backward_passes) for s in seeds],
        "accuracy_drop": gap("baseline", "kakurenbo"),
        "iswr_gap": gap("kakurenbo", "iswr"),
        "forgetting_gap": gap("kakurenbo", "forgetting"),
        "moveback_gain": gap("kakurenbo", "no_moveback"),
        "importance_vs_random": gap("kakurenbo", "random_hiding"),
    }


def summary(results: Results) -> pd.DataFrame:
    """The miniature of the paper's main table: accuracy, time and passes per method (mean over seeds)."""
    runs = results.runs
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


def hidden_fraction_figure(results: Results) -> plt.Figure:
    """Realised hidden fraction per epoch (KAKURENBO, no move-back, forgetting events) against the maximum F_e."""
    runs, params = results.runs, results.params
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    epochs = np.arange(params.epochs)
    ax.step(
        epochs,
        [hiding.hidden_fraction(int(e), params.epochs, params.max_fraction) for e in epochs],
        where="mid",
        color="k",
        ls="--",
        label="maximum $F_e$",
    )
    for m, c in (("kakurenbo", "C0"), ("no_moveback", "C1"), ("forgetting", "C7")):
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


def tradeoff_figure(results: Results) -> plt.Figure:
    """Accuracy against training time and against backward passes, relative to the baseline, per method."""
    df = summary(results)
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
