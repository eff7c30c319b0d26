"""Chapter driver: partial-local shuffling (PLS) against global and local shuffling.

M data-parallel workers hold disjoint shards of a generated 8-class set
(node-local storage).  Before every epoch they either re-deal the whole set
(GS, Q = 1), keep their shards (LS, Q = 0), or pool a fraction Q of their
samples for a re-deal (PLS); see :mod:`repro.training.shuffling`.  Training
is synchronous data-parallel SGD with per-worker batch normalisation, run by
the single-process simulator (M workers); a 2-rank ``torch.distributed`` gloo
run with a real sample exchange checks the simulator on a small case.  The
simulated workers compute on the ``device`` parameter's device (shards and
batch orders are drawn on the CPU, so every device sees the same batches); the
gloo check stays on the CPU, since it checks the simulator's arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.devices import resolve_device
from repro.parallel import parallel_map
from repro.training import shuffling
from repro.training.data import synthetic_classification
from repro.training.distributed import GroupedJob, ModelSpec, grouped_sgd_rank
from repro.training.launcher import launch
from repro.training.simulator import ReplicaBank, SGDConfig, Topology, evaluate, make_optimizer, run_grouped, warmup_schedule


@dataclass(frozen=True, kw_only=True)
class ShuffleSetup:
    """Data, model and optimiser shared by every run of a sweep."""

    n_samples: int
    n_features: int
    n_informative: int
    num_classes: int
    class_sep: float
    workers: int
    hidden: tuple[int, ...]
    batch_size: int
    base_lr: float
    momentum: float
    warmup_epochs: float
    epochs: int


@dataclass(frozen=True, kw_only=True)
class ShuffleJob:
    """One run: a shard scheme (``iid`` or ``skewed``), an exchange fraction Q, a seed and the device it computes on."""

    setup: ShuffleSetup
    scheme: str
    q: float
    seed: int
    device: str = "cpu"


@dataclass(frozen=True, kw_only=True)
class ShuffleRun:
    """The outcome of one run.

    Attributes
    ----------
    scheme, q, seed
        The run's identity.
    accuracy
        Test accuracy (%) after every epoch.
    bytes_per_epoch
        Bytes that crossed between workers before each epoch after the first.
    spread
        Mean total-variation distance of the workers' label mix from the global one, per epoch.
    peak_storage_ratio
        Largest per-worker storage during an exchange, in units of N / M.
    dataset_bytes
        Size of the whole training set, the unit of the exchange share.
    """

    scheme: str
    q: float
    seed: int
    accuracy: tuple[float, ...]
    bytes_per_epoch: tuple[int, ...]
    spread: tuple[float, ...]
    peak_storage_ratio: float
    dataset_bytes: int

    @property
    def strategy(self) -> str:
        """GS, LS or PLS(Q)."""
        return strategy_name(self.q)

    @property
    def final_accuracy(self) -> float:
        """Test accuracy after the last epoch."""
        return self.accuracy[-1]


def strategy_name(q: float) -> str:
    """The label of an exchange fraction: ``GS`` for 1, ``LS`` for 0, else ``PLS Q=..``."""
    return "GS" if q >= 1.0 else "LS" if q <= 0.0 else f"PLS Q={q:g}"


def _data(setup: ShuffleSetup, seed: int):
    return synthetic_classification(setup.n_samples, setup.n_features, setup.n_informative, setup.num_classes,
                                    class_sep=setup.class_sep, seed=seed)


def run_shuffle(job: ShuffleJob) -> ShuffleRun:
    """Train one configuration in the simulator and record accuracy, exchanged bytes and label spread."""
    torch.set_num_threads(1)
    s = job.setup
    split = _data(s, job.seed)
    y = split.train.y.numpy()
    rng = np.random.default_rng(job.seed + 1000)
    shards = shuffling.initial_shards(y, s.workers, job.scheme, seed=job.seed)
    steps = len(shards[0]) // s.batch_size
    lrs = warmup_schedule(s.base_lr, s.workers, steps, s.epochs, s.warmup_epochs, decay_epochs=(0.75 * s.epochs,))
    spec = ModelSpec(
        in_features=split.num_features, hidden=s.hidden, num_classes=split.num_classes, batch_norm=True, seed=job.seed
    )
    dev = resolve_device(job.device)
    bank = ReplicaBank(spec.build(), Topology(num_groups=1, group_size=s.workers)).to(dev)
    opt = make_optimizer(bank, SGDConfig(lr=s.base_lr, momentum=s.momentum, weight_decay=5e-4))
    xs, ys = split.train.x.to(dev), split.train.y.to(dev)
    acc, moved, spread, peak = [], [], [], 1.0
    for e in range(s.epochs):
        if e > 0:
            shards, rec = shuffling.partial_exchange(shards, job.q, rng, split.train.sample_bytes)
            moved.append(rec.bytes_moved)
            peak = max(peak, rec.peak_storage / len(shards[0]))
        spread.append(shuffling.label_spread(y, shards, split.num_classes))
        plan = shuffling.epoch_plan(shards, s.batch_size, rng)[:, None]
        run_grouped(bank, opt, xs, ys, plan, lrs[e * steps : (e + 1) * steps], tau=1)
        acc.append(evaluate(bank, split.test.x, split.test.y)[0])
    return ShuffleRun(
        scheme=job.scheme,
        q=job.q,
        seed=job.seed,
        accuracy=tuple(acc),
        bytes_per_epoch=tuple(moved),
        spread=tuple(spread),
        peak_storage_ratio=peak,
        dataset_bytes=len(y) * split.train.sample_bytes,
    )


def sweep(
    setup: ShuffleSetup, schemes: list[str], q_values: list[float], seeds: list[int], workers: int = 1, device: str = "cpu"
) -> list[ShuffleRun]:
    """Every scheme x {LS, PLS(q) for q in q_values, GS} x seed, spread over ``workers`` processes, on ``device``."""
    qs = sorted({0.0, 1.0, *q_values})
    jobs = [ShuffleJob(setup=setup, scheme=sc, q=q, seed=sd, device=device) for sc in schemes for q in qs for sd in seeds]
    return parallel_map(run_shuffle, jobs, workers=workers, desc="shuffle runs")


@dataclass(frozen=True, kw_only=True)
class GlooCheck:
    """A 2-rank gloo run with a real sample exchange against the simulator on the same plan."""

    max_abs_param_diff: float
    exchange_bytes_gloo: int
    exchange_bytes_accounted: int


def gloo_check(setup: ShuffleSetup, q: float, n_samples: int, epochs: int, seed: int = 0) -> GlooCheck:
    """Run PLS(q) on a skewed partition on 2 gloo ranks (each holding only its shard) and in the simulator.

    Parameters
    ----------
    setup
        Model and optimiser settings (its ``workers`` is replaced by 2).
    q
        Exchange fraction.
    n_samples, epochs
        Size of the check.
    seed
        Seed of data, partition and model.

    Returns
    -------
    GlooCheck
        The largest parameter difference and the exchanged bytes, measured and accounted.
    """
    split = synthetic_classification(
        n_samples, setup.n_features, setup.n_informative, setup.num_classes, class_sep=setup.class_sep, seed=seed
    )
    y = split.train.y.numpy()
    rng = np.random.default_rng(seed)
    shards = shuffling.initial_shards(y, 2, "skewed", seed=seed)
    plans, per_epoch, accounted = [], [tuple(shards)], 0
    for e in range(epochs):
        plans.append(shuffling.epoch_plan(shards, setup.batch_size, rng))
        if e < epochs - 1:
            shards, rec = shuffling.partial_exchange(shards, q, rng, split.train.sample_bytes)
            accounted += rec.bytes_moved
            per_epoch.append(tuple(shards))
    plan = np.concatenate(plans)[:, None]
    steps = len(plans[0])
    lrs = warmup_schedule(setup.base_lr, 2, steps, epochs, setup.warmup_epochs)
    spec = ModelSpec(
        in_features=split.num_features, hidden=setup.hidden, num_classes=split.num_classes, batch_norm=True, seed=seed
    )
    sgd = SGDConfig(lr=setup.base_lr, momentum=setup.momentum, weight_decay=5e-4)
    job = GroupedJob(
        x=split.train.x.numpy(),
        y=y,
        model=spec,
        sgd=sgd,
        plan=plan,
        lrs=lrs,
        tau=1,
        shards=tuple(per_epoch),
        steps_per_epoch=steps,
    )
    reports = launch(grouped_sgd_rank, 2, (job,), group_size=2, timeout_s=300)
    bank = ReplicaBank(spec.build(), Topology(num_groups=1, group_size=2))
    run_grouped(bank, make_optimizer(bank, sgd), split.train.x, split.train.y, plan, lrs, tau=1)
    diff = max(float(np.max(np.abs(a - b))) for rep in reports for a, b in zip(bank.group_state(0), rep.params))
    return GlooCheck(
        max_abs_param_diff=diff,
        exchange_bytes_gloo=sum(r.exchange_bytes_sent for r in reports),
        exchange_bytes_accounted=accounted,
    )


def _final(runs: list[ShuffleRun], scheme: str, q: float) -> dict[int, float]:
    return {r.seed: r.final_accuracy for r in runs if r.scheme == scheme and np.isclose(r.q, q)}


def claims(runs: list[ShuffleRun], claim_q: float, check: GlooCheck) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims.

    Parameters
    ----------
    runs
        The sweep's runs (must include the ``iid`` and ``skewed`` schemes, Q = 0, ``claim_q`` and 1).
    claim_q
        The exchange fraction the PLS claims are about.
    check
        The gloo check.
    """
    gs_sk, ls_sk, pls_sk = (_final(runs, "skewed", q) for q in (1.0, 0.0, claim_q))
    gs_iid, ls_iid = _final(runs, "iid", 1.0), _final(runs, "iid", 0.0)
    gs_bytes = {r.seed: np.mean(r.bytes_per_epoch) for r in runs if r.scheme == "skewed" and r.q == 1.0}
    pls_bytes = {r.seed: np.mean(r.bytes_per_epoch) for r in runs if r.scheme == "skewed" and np.isclose(r.q, claim_q)}
    seeds = sorted(gs_sk)
    return {
        "ls_gap_skewed": [gs_sk[s] - ls_sk[s] for s in seeds],
        "pls_drop_skewed": [gs_sk[s] - pls_sk[s] for s in seeds],
        "ls_drop_iid": [gs_iid[s] - ls_iid[s] for s in seeds],
        "exchange_saving": [100.0 * (1.0 - pls_bytes[s] / gs_bytes[s]) for s in seeds],
        "gloo_matches_simulator": [check.max_abs_param_diff],
    }


def summary(runs: list[ShuffleRun]) -> pd.DataFrame:
    """Mean and spread of the final accuracy and the exchanged share per scheme and strategy."""
    rows = []
    for scheme, q in sorted({(r.scheme, r.q) for r in runs}):
        sel = [r for r in runs if r.scheme == scheme and r.q == q]
        acc = np.array([r.final_accuracy for r in sel])
        rows.append(
            {
                "partition": scheme,
                "strategy": strategy_name(q),
                "final accuracy (%)": acc.mean(),
                "sd": acc.std(ddof=1) if len(acc) > 1 else 0.0,
                "MB exchanged per epoch": np.mean([np.mean(r.bytes_per_epoch) for r in sel]) / 1e6,
                "peak storage (x N/M)": max(r.peak_storage_ratio for r in sel),
            }
        )
    return pd.DataFrame(rows)


def accuracy_curves(runs: list[ShuffleRun]) -> plt.Figure:
    """Test accuracy per epoch for every strategy, one panel per partition scheme (mean and min-max band)."""
    schemes = sorted({r.scheme for r in runs})
    fig, axes = plt.subplots(1, len(schemes), figsize=(5.2 * len(schemes), 3.6), sharey=True, squeeze=False)
    qs = sorted({r.q for r in runs})
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(qs)))
    for ax, scheme in zip(axes[0], schemes):
        for q, c in zip(qs, colors):
            curves = np.array([r.accuracy for r in runs if r.scheme == scheme and r.q == q])
            ep = np.arange(1, curves.shape[1] + 1)
            ax.plot(ep, curves.mean(0), color=c, label=strategy_name(q))
            ax.fill_between(ep, curves.min(0), curves.max(0), color=c, alpha=0.15)
        ax.set_title(f"{scheme} initial shards")
        ax.set_xlabel("epoch")
    axes[0, 0].set_ylabel("test accuracy (%)")
    axes[0, -1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def tradeoff(runs: list[ShuffleRun], scheme: str = "skewed") -> plt.Figure:
    """Final accuracy against data exchanged per epoch (share of the data set), with the label-mix decay."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    qs = sorted({r.q for r in runs})
    for q in qs:
        sel = [r for r in runs if r.scheme == scheme and r.q == q]
        share = [100 * np.mean(r.bytes_per_epoch) / r.dataset_bytes for r in sel]
        acc = [r.final_accuracy for r in sel]
        ax.errorbar(np.mean(share), np.mean(acc), yerr=np.std(acc), fmt="o", capsize=3)
        ax.annotate(strategy_name(q), (np.mean(share), np.mean(acc)), textcoords="offset points", xytext=(4, -10), fontsize=8)
        bx.plot(np.mean([r.spread for r in sel], axis=0), label=strategy_name(q))
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("data moved per epoch (% of the data set)")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title(f"accuracy against exchange volume ({scheme})")
    bx.set_xlabel("epoch")
    bx.set_ylabel("label-mix distance from global (TV)")
    bx.set_title("how fast the shards mix")
    bx.legend(fontsize=8)
    fig.tight_layout()
    return fig
