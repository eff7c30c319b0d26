"""Chapter driver: growing the mini-batch and learning rate at run time (digits classification arm).

Arms: fixed small, medium and large batches (the larger ones with linearly
scaled rate and a one-epoch warm-up), and adaptive schedules that double the
batch every few epochs or on a loss plateau (:mod:`repro.training.batch_schedule`).
Every arm tries every initial rate of one grid (the rate at ``B0``; each arm
scales it by its own rule) on the tuning seeds and keeps the rate with the best
validation accuracy (:mod:`repro.training.tuning`); the evaluation seeds then
train at that rate.  Parallel time is modelled with P = B / b_local workers and
an alpha-beta allreduce; a 2-rank gloo run checks that data parallelism with
B / 2 per rank is the same update as one process with batch B.  The arms train
on the ``device`` parameter's device; the gloo check stays on the CPU, since it
checks the simulator's arithmetic, not its speed.  The epochs' sample orders
are drawn on the CPU, so every device sees the same batches.
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
from repro.params import ChapterParams, require
from repro.results import Evidence
from repro.training.batch_schedule import BatchController, BatchSchedule
from repro.training.cost import Network, ring_allreduce_time
from repro.training.data import IndexedDataset
from repro.training.distributed import GroupedJob, ModelSpec, grouped_sgd_rank
from repro.training.launcher import launch
from repro.training.simulator import ReplicaBank, SGDConfig, Topology, evaluate, make_optimizer, run_grouped, train_step
from repro.training.tuning import Trial, choose

DIGITS_TRAIN = 1437
"""Training images of scikit-learn's digits at the default 80 / 20 split (before the validation hold-out)."""
DIGITS_TEST_IMAGES = 360
"""Test images of that split."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    hidden: tuple[int, ...]
    epochs: int
    momentum: float
    lr_grid: tuple[float, ...]
    validation_fraction: float
    initial_batch: int
    medium_batch: int
    max_batch: int
    interval: int
    window: int
    delta: float
    warmup_steps: int
    alphas: tuple[float, ...]
    local_batch: int
    sample_ms: float
    sweep_sample_ms: tuple[float, ...]
    alpha_us: float
    bandwidth_gbs: float
    ddp_batch: int
    ddp_steps: int
    tune_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    workers: int
    device: str

    @property
    def n_train(self) -> int:
        """Training images after the validation hold-out."""
        return DIGITS_TRAIN - round(self.validation_fraction * DIGITS_TRAIN)

    @property
    def network(self) -> Network:
        """The modelled network (latency ``alpha_us``, bandwidth ``bandwidth_gbs``)."""
        return Network(alpha=self.alpha_us * 1e-6, beta=1.0 / (self.bandwidth_gbs * 1e9))

    def checks(self) -> None:
        """Refuse impossible combinations before any work starts."""
        require(self.initial_batch < self.medium_batch < self.max_batch, self,
                ("initial_batch", "medium_batch", "max_batch"), "batches must grow: initial < medium < max")
        ratio = self.max_batch // self.initial_batch
        require(self.max_batch % self.initial_batch == 0 and ratio & (ratio - 1) == 0, self,
                ("initial_batch", "max_batch"), "max_batch must be a power-of-two multiple of initial_batch")
        require(self.max_batch <= self.n_train, self, ("max_batch", "validation_fraction"),
                f"the large batch must fit in the {self.n_train} training images")
        require(self.ddp_batch % 2 == 0, self, "ddp_batch", "ddp_batch must be even (split over 2 ranks)")
        require(self.ddp_batch <= self.n_train, self, ("ddp_batch", "validation_fraction"),
                f"the check's batch must fit in the {self.n_train} training images")
        require(not set(self.tune_seeds) & set(self.seeds), self, ("tune_seeds", "seeds"),
                "the tuning seeds must differ from the evaluation seeds")
        require(all(r > 0 for r in self.lr_grid), self, "lr_grid", "the learning-rate grid holds positive rates")

    @property
    def small(self) -> str:
        """The fixed small batch's arm name."""
        return f"fixed {self.initial_batch}"

    @property
    def large(self) -> str:
        """The fixed large batch's arm name."""
        return f"fixed {self.max_batch}"

    @property
    def adaptive(self) -> str:
        """The claimed adaptive arm: the interval schedule with the first scaling exponent."""
        return f"adaptive interval, alpha={self.alphas[0]:g}"


@dataclass(frozen=True, kw_only=True)
class Arm:
    """A named batch schedule."""

    name: str
    schedule: BatchSchedule
    start_lr: float | None = None  # linear warm-up from this rate over the first epoch (fixed larger batches)


def arms(params: Params, lr: float) -> list[Arm]:
    """Fixed small / medium / large batches and the adaptive schedules (interval per alpha, plateau) at initial rate ``lr``."""
    def fixed(b: int) -> BatchSchedule:
        return BatchSchedule(initial_batch=b, max_batch=b, initial_lr=lr * b / params.initial_batch)

    out = [Arm(name=params.small, schedule=fixed(params.initial_batch)),
           Arm(name=f"fixed {params.medium_batch}", schedule=fixed(params.medium_batch), start_lr=lr),
           Arm(name=params.large, schedule=fixed(params.max_batch), start_lr=lr)]
    for a in params.alphas:
        out.append(Arm(name=f"adaptive interval, alpha={a:g}", schedule=BatchSchedule(
            initial_batch=params.initial_batch, max_batch=params.max_batch, initial_lr=lr, alpha=a, trigger="interval",
            interval=params.interval, warmup_steps=params.warmup_steps)))
    out.append(Arm(name=f"adaptive plateau, alpha={params.alphas[0]:g}", schedule=BatchSchedule(
        initial_batch=params.initial_batch, max_batch=params.max_batch, initial_lr=lr, alpha=params.alphas[0],
        trigger="plateau", window=params.window, delta=params.delta, warmup_steps=params.warmup_steps)))
    return out


def arm_names(params: Params) -> list[str]:
    """The arms' names, in order."""
    return [a.name for a in arms(params, 1.0)]


@dataclass(frozen=True, kw_only=True)
class ArmJob:
    """One arm at one initial rate on one seed."""

    params: Params
    arm: str
    lr: float
    seed: int


@dataclass(frozen=True, kw_only=True)
class ArmRun:
    """An arm's outcome: test accuracy per epoch, final validation accuracy, batch per epoch and optimiser steps."""

    arm: str
    lr: float
    seed: int
    accuracy: tuple[float, ...]
    val_accuracy: float
    batch_per_epoch: tuple[int, ...]
    steps: int
    n_train: int
    model_bytes: int

    @property
    def final_accuracy(self) -> float:
        """Test accuracy after the last epoch."""
        return self.accuracy[-1]


def digits(seed: int, validation_fraction: float) -> tuple[IndexedDataset, IndexedDataset, IndexedDataset]:
    """Training, validation (the last ``validation_fraction`` of the training images) and test sets of a seed."""
    ds = load_digits(seed=seed)
    cut = len(ds.x_train) - round(validation_fraction * len(ds.x_train))
    return (IndexedDataset(ds.x_train[:cut], ds.y_train[:cut]), IndexedDataset(ds.x_train[cut:], ds.y_train[cut:]),
            IndexedDataset(ds.x_test, ds.y_test))


def run_arm(job: ArmJob) -> ArmRun:
    """Train one arm; every epoch visits each training sample once at the controller's current batch."""
    torch.set_num_threads(1)
    p = job.params
    arm = next(a for a in arms(p, job.lr) if a.name == job.arm)
    train, val, test = digits(job.seed, p.validation_fraction)
    dev = resolve_device(p.device)
    xs, ys = train.x.to(dev), train.y.to(dev)
    spec = ModelSpec(in_features=train.x.shape[1], hidden=p.hidden, num_classes=10, batch_norm=False, seed=job.seed)
    bank = ReplicaBank(spec.build(), Topology(num_groups=1, group_size=1)).to(dev)
    opt = make_optimizer(bank, SGDConfig(lr=arm.schedule.initial_lr, momentum=p.momentum))
    ctl = BatchController(arm.schedule)
    gen = torch.Generator().manual_seed(job.seed)
    n = len(train)
    warm = math.ceil(n / arm.schedule.initial_batch) if arm.start_lr is not None else 0
    acc, batches, steps = [], [], 0
    for e in range(p.epochs):
        batches.append(ctl.batch)
        losses = []
        for ids in ctl.batches(n, gen):
            lr = ctl.step_lr()
            if arm.start_lr is not None and steps < warm:  # the larger fixed batches' gradual warm-up (Goyal et al.)
                lr = arm.start_lr + (lr - arm.start_lr) * (steps + 1) / warm
            idx = torch.as_tensor(ids, device=dev)
            losses.append(train_step(bank, opt, xs[idx][None, None], ys[idx][None, None], lr).mean().item())
            steps += 1
        ctl.end_epoch(e, float(np.mean(losses)))
        acc.append(evaluate(bank, test.x, test.y)[0])
    return ArmRun(arm=arm.name, lr=job.lr, seed=job.seed, accuracy=tuple(acc), val_accuracy=evaluate(bank, val.x, val.y)[0],
                  batch_per_epoch=tuple(batches), steps=steps, n_train=n,
                  model_bytes=4 * sum(w[0].numel() for w in bank.weights))


def tune(params: Params) -> tuple[list[ArmRun], dict[str, float]]:
    """Every arm at every initial rate of the grid on the tuning seeds; each keeps its best on validation."""
    jobs = [ArmJob(params=params, arm=a, lr=lr, seed=s)
            for s in params.tune_seeds for a in arm_names(params) for lr in params.lr_grid]
    runs = parallel_map(run_arm, jobs, workers=params.workers, desc="tuning runs")
    rates = choose(Trial(arm=r.arm, value=r.lr, score=r.val_accuracy) for r in runs)
    return runs, {a: rates[a] for a in arm_names(params)}


def sweep(params: Params, rates: dict[str, float]) -> list[ArmRun]:
    """Every arm at its chosen rate on every evaluation seed."""
    jobs = [ArmJob(params=params, arm=a, lr=rates[a], seed=s) for a in arm_names(params) for s in params.seeds]
    return parallel_map(run_arm, jobs, workers=params.workers, desc="arms")


def modelled_time(run: ArmRun, local_batch: int, sample_seconds: float, net: Network) -> float:
    """Modelled training time: each epoch's steps with P = B / b_local workers, compute plus gradient allreduce."""
    total = 0.0
    for b in run.batch_per_epoch:
        p = max(1, b // local_batch)
        per_step = (b / p) * sample_seconds + ring_allreduce_time(run.model_bytes, p, net)
        total += math.ceil(run.n_train / b) * per_step
    return total


def ddp_check(params: Params, lr: float) -> float:
    """Largest parameter difference: 2 gloo ranks with ``ddp_batch / 2`` each against one process with the whole batch."""
    seed, batch, steps = params.seeds[0], params.ddp_batch, params.ddp_steps
    train, _, _ = digits(seed, params.validation_fraction)
    rng = np.random.default_rng(seed)
    plan = np.stack([rng.permutation(len(train))[:batch] for _ in range(steps)]).reshape(steps, 1, 2, batch // 2)
    lrs = np.full(steps, lr * batch / params.initial_batch)
    spec = ModelSpec(in_features=train.x.shape[1], hidden=params.hidden, num_classes=10, batch_norm=False, seed=seed)
    sgd = SGDConfig(lr=float(lrs[0]), momentum=params.momentum)
    job = GroupedJob(x=train.x.numpy(), y=train.y.numpy(), model=spec, sgd=sgd, plan=plan, lrs=lrs, tau=1)
    reports = launch(grouped_sgd_rank, 2, (job,), group_size=2, timeout_s=300)
    bank = ReplicaBank(spec.build(), Topology(num_groups=1, group_size=1))
    run_grouped(bank, make_optimizer(bank, sgd), train.x, train.y, plan.reshape(steps, 1, 1, batch), lrs, tau=1)
    return max(float(np.max(np.abs(a - b))) for rep in reports for a, b in zip(bank.group_state(0), rep.params))


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params
        The parameters it ran with.
    tuning
        The grid runs on the tuning seeds.
    rates
        The initial rate each arm chose on validation data.
    runs
        The evaluation runs (every arm at its rate on every evaluation seed).
    ddp_diff
        The 2-rank check's largest parameter difference.
    chance
        The majority class's share of the test labels, percent, largest over the evaluation seeds.
    """

    params: Params
    tuning: tuple[ArmRun, ...]
    rates: dict[str, float]
    runs: tuple[ArmRun, ...]
    ddp_diff: float
    chance: float

    def by_seed(self, arm: str) -> dict[int, ArmRun]:
        """The evaluation runs of one arm, per seed."""
        return {r.seed: r for r in self.runs if r.arm == arm}


def majority_share(seed: int, validation_fraction: float) -> float:
    """The most frequent digit's share of the test labels, percent."""
    _, _, test = digits(seed, validation_fraction)
    return 100.0 * float(np.bincount(test.y.numpy()).max()) / len(test)


def run(params: Params) -> Results:
    """Tune every arm's initial rate on validation data, train the evaluation seeds, run the 2-rank check."""
    tuning, rates = tune(params)
    runs = sweep(params, rates)
    return Results(params=params, tuning=tuple(tuning), rates=rates, runs=tuple(runs),
                   ddp_diff=ddp_check(params, rates[params.large]),
                   chance=max(majority_share(s, params.validation_fraction) for s in params.seeds))


def modelled_speedup(results: Results, sample_seconds: float, net: Network) -> float:
    """Modelled time of the fixed small batch on one worker over the claimed adaptive arm (the first seed's schedule)."""
    p = results.params
    seed = p.seeds[0]
    return (modelled_time(results.by_seed(p.small)[seed], p.local_batch, sample_seconds, net)
            / modelled_time(results.by_seed(p.adaptive)[seed], p.local_batch, sample_seconds, net))


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The accuracy gaps per seed with their arms; the schedule's step saving and the modelled speed-up, once."""
    p = results.params
    small, large, adaptive = (results.by_seed(a) for a in (p.small, p.large, p.adaptive))
    seeds = sorted(small)
    final = {p.small: [small[s].final_accuracy for s in seeds], p.large: [large[s].final_accuracy for s in seeds],
             p.adaptive: [adaptive[s].final_accuracy for s in seeds]}

    def gap(a: str, b: str) -> Evidence:
        return Evidence(values=[x - y for x, y in zip(final[a], final[b])], arms={a: final[a], b: final[b]},
                        trivial=results.chance)

    first = seeds[0]
    return {
        "large_batch_gap": gap(p.small, p.large),
        "adaptive_vs_small": gap(p.small, p.adaptive),
        "adaptive_closer": gap(p.adaptive, p.large),
        "step_reduction": [100.0 * (1 - adaptive[first].steps / small[first].steps)],
        "modelled_speedup": [modelled_speedup(results, p.sample_ms * 1e-3, p.network)],
        "ddp_equivalence": [results.ddp_diff],
    }


def summary(results: Results) -> pd.DataFrame:
    """Per arm: its tuned rate, final accuracy, optimiser steps and modelled time relative to the small fixed batch."""
    p = results.params
    rows = []
    ref = {r.seed: modelled_time(r, p.local_batch, p.sample_ms * 1e-3, p.network) for r in results.runs
           if r.arm == p.small}
    for name in arm_names(p):
        sel = list(results.by_seed(name).values())
        acc = np.array([r.final_accuracy for r in sel])
        rows.append({"arm": name, "rate": results.rates[name], "test accuracy (%)": acc.mean(),
                     "sd": acc.std(ddof=1) if len(acc) > 1 else 0.0, "optimiser steps": np.mean([r.steps for r in sel]),
                     "final batch": sel[0].batch_per_epoch[-1],
                     "modelled speedup": np.mean([ref[r.seed] / modelled_time(r, p.local_batch, p.sample_ms * 1e-3,
                                                                              p.network) for r in sel])})
    return pd.DataFrame(rows)


def curves_figure(results: Results) -> plt.Figure:
    """Test accuracy per epoch (left) and batch size per epoch (right) for every arm, mean over seeds."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 3.6))
    for i, name in enumerate(arm_names(results.params)):
        sel = list(results.by_seed(name).values())
        acc = np.array([r.accuracy for r in sel])
        ep = np.arange(1, acc.shape[1] + 1)
        ax.plot(ep, acc.mean(0), color=f"C{i}", label=name)
        ax.fill_between(ep, acc.min(0), acc.max(0), color=f"C{i}", alpha=0.12)
        bx.step(ep, sel[0].batch_per_epoch, where="mid", color=f"C{i}", label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%), tuned rate")
    ax.set_ylim(bottom=max(0, ax.get_ylim()[0]))
    bx.set_yscale("log", base=2)
    bx.set_xlabel("epoch")
    bx.set_ylabel("batch size (first seed)")
    bx.legend(fontsize=7)
    fig.tight_layout()
    return fig


def tuning_figure(results: Results) -> plt.Figure:
    """Validation accuracy against the initial rate, per arm (tuning seeds; circles: the chosen rates)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for i, name in enumerate(arm_names(results.params)):
        sel = [r for r in results.tuning if r.arm == name]
        rates = sorted({r.lr for r in sel})
        val = [np.mean([r.val_accuracy for r in sel if r.lr == lr]) for lr in rates]
        ax.plot(rates, val, marker=".", color=f"C{i}", label=name)
        ax.scatter([results.rates[name]], [val[rates.index(results.rates[name])]], s=110, facecolors="none",
                   edgecolors=f"C{i}")
    ax.set_xscale("log")
    ax.set_xlabel(f"initial learning rate (at batch {results.params.initial_batch})")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title("the same grid for every arm (tuning seeds)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def speedup_figure(results: Results) -> plt.Figure:
    """Modelled speedup over the small fixed batch against the compute time per sample (the deciding constant)."""
    p = results.params
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    names = arm_names(p)
    first = p.seeds[0]
    small = results.by_seed(p.small)[first]
    for i, name in enumerate(names[1:], start=1):
        run_ = results.by_seed(name)[first]
        sp = [modelled_time(small, p.local_batch, c * 1e-3, p.network) / modelled_time(run_, p.local_batch, c * 1e-3,
                                                                                       p.network)
              for c in p.sweep_sample_ms]
        ax.plot(p.sweep_sample_ms, sp, marker=".", color=f"C{i}", label=name)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axvline(p.sample_ms, color="0.5", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("modelled compute per sample (ms; dotted: the claim's)")
    ax.set_ylabel(f"modelled speedup over {names[0]}")
    ax.set_title(f"P = B / {p.local_batch} workers, alpha {p.alpha_us:g} µs, {p.bandwidth_gbs:g} GB/s")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
