"""Chapter driver: partial-local shuffling (PLS) against global and local shuffling.

M data-parallel workers hold disjoint shards of a generated classification
set (node-local storage).  Before every epoch they either re-deal the whole
set (GS, Q = 1), keep their shards (LS, Q = 0), or pool a fraction Q of their
samples for a re-deal (PLS); see :mod:`repro.training.shuffling`.  Training
is synchronous data-parallel SGD with per-worker batch normalisation, run by
the single-process simulator (M workers); a 2-rank ``torch.distributed`` gloo
run with a real sample exchange checks the simulator on a small case.  The
test accuracy is read twice: with the workers' BatchNorm statistics averaged
(judged: a worker that saw only its shard is not taken as the model's
statistics) and with worker 0's, as the simulator's evaluation does.  The
simulated workers compute on the ``device`` parameter's device (shards and
batch orders are drawn on the CPU, so every device sees the same batches);
the gloo check stays on the CPU, since it checks the simulator's arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.devices import resolve_device
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence
from repro.training import shuffling
from repro.training.data import Split, split_sizes, synthetic_classification
from repro.training.distributed import GroupedJob, ModelSpec, grouped_sgd_rank
from repro.training.launcher import launch
from repro.training.simulator import ReplicaBank, SGDConfig, Topology, evaluate, make_optimizer, run_grouped, warmup_schedule

TEST_FRACTION = 0.2
"""Share of the generated samples held out for testing (the rest is dealt to the workers)."""
CLUSTERS_PER_CLASS = 2
"""Clusters per class of ``make_classification`` (it needs ``classes x clusters <= 2 ** n_informative``)."""
DECAY_AT = 0.75
"""The learning rate drops tenfold after this share of the epochs (a step schedule after the warm-up)."""
FULL_MIX_SCHEMES = ("iid",)
"""Partitions on which only GS and LS run (their claim compares those two); the others run every Q."""


def train_size(n_samples: int) -> int:
    """Training samples of a generated set of ``n_samples`` (the stratified split holds out the test share)."""
    return split_sizes(n_samples, TEST_FRACTION)[0]


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    n_samples: int
    n_features: int
    n_informative: int
    num_classes: int
    class_sep: float
    num_workers: int
    hidden: tuple[int, ...]
    batch_size: int
    base_lr: float
    momentum: float
    warmup_epochs: float
    epochs: int
    q_values: tuple[float, ...]
    schemes: tuple[str, ...]
    claim_q: float
    seeds: tuple[int, ...]
    check_samples: int
    check_epochs: int
    workers: int
    device: str

    def checks(self) -> None:
        """Refuse combinations the data generator, the shards or the claims cannot take, naming the parameters."""
        require(self.claim_q in self.q_values, self, ("claim_q", "q_values"), "claim_q must be one of q_values")
        require(0.0 < self.claim_q < 1.0, self, "claim_q",
                "the PLS claims need a partial exchange, 0 < claim_q < 1 (0 is LS and 1 is GS)")
        require(set(self.schemes) == {"iid", "skewed"}, self, "schemes",
                "the claims need both the iid and the skewed partition")
        require(self.n_informative <= self.n_features, self, ("n_informative", "n_features"),
                "n_informative must not exceed n_features")
        require(self.num_classes * CLUSTERS_PER_CLASS <= 2 ** min(self.n_informative, 30), self,
                ("num_classes", "n_informative"),
                f"make_classification needs num_classes x {CLUSTERS_PER_CLASS} clusters <= 2 ** n_informative")
        require(train_size(self.n_samples) // self.num_workers >= self.batch_size, self,
                ("n_samples", "num_workers", "batch_size"), "every worker's shard must hold at least one batch")
        require(train_size(self.check_samples) // 2 >= self.batch_size, self, ("check_samples", "batch_size"),
                "each of the gloo check's 2 shards must hold at least one batch")
        require(self.warmup_epochs <= DECAY_AT * self.epochs, self, ("warmup_epochs", "epochs"),
                f"the warm-up must end before the learning-rate decay at {DECAY_AT:g} x epochs")

    def setup(self) -> ShuffleSetup:
        """The data, model and optimiser every run shares."""
        return ShuffleSetup(n_samples=self.n_samples, n_features=self.n_features, n_informative=self.n_informative,
                            num_classes=self.num_classes, class_sep=self.class_sep, workers=self.num_workers,
                            hidden=self.hidden, batch_size=self.batch_size, base_lr=self.base_lr,
                            momentum=self.momentum, warmup_epochs=self.warmup_epochs, epochs=self.epochs)


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
        Test accuracy (%) after every epoch, with the workers' BatchNorm statistics averaged (judged).
    accuracy_worker0
        The same with worker 0's BatchNorm statistics only.
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
    accuracy_worker0: tuple[float, ...]
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
        """Test accuracy after the last epoch (averaged BatchNorm statistics)."""
        return self.accuracy[-1]

    @property
    def final_accuracy_worker0(self) -> float:
        """Test accuracy after the last epoch with worker 0's BatchNorm statistics."""
        return self.accuracy_worker0[-1]


def strategy_name(q: float) -> str:
    """The label of an exchange fraction: ``GS`` for 1, ``LS`` for 0, else ``PLS Q=..``."""
    return "GS" if q >= 1.0 else "LS" if q <= 0.0 else f"PLS Q={q:g}"


def _data(setup: ShuffleSetup, seed: int) -> Split:
    return synthetic_classification(setup.n_samples, setup.n_features, setup.n_informative, setup.num_classes,
                                    class_sep=setup.class_sep, n_clusters_per_class=CLUSTERS_PER_CLASS,
                                    test_fraction=TEST_FRACTION, seed=seed)


def evaluate_both(bank: ReplicaBank, split: Split) -> tuple[float, float]:
    """Test accuracy (%) with the workers' BatchNorm statistics averaged, and with worker 0's."""
    with shuffling.averaged_bn_statistics(bank):
        averaged = evaluate(bank, split.test.x, split.test.y)[0]
    return averaged, evaluate(bank, split.test.x, split.test.y)[0]


def run_shuffle(job: ShuffleJob) -> ShuffleRun:
    """Train one configuration in the simulator and record accuracy (both BN readings), exchanged bytes and label spread."""
    torch.set_num_threads(1)
    s = job.setup
    split = _data(s, job.seed)
    y = split.train.y.numpy()
    rng = np.random.default_rng(job.seed + 1000)
    shards = shuffling.initial_shards(y, s.workers, job.scheme, seed=job.seed)
    steps = len(shards[0]) // s.batch_size
    lrs = warmup_schedule(s.base_lr, s.workers, steps, s.epochs, s.warmup_epochs, decay_epochs=(DECAY_AT * s.epochs,))
    spec = ModelSpec(
        in_features=split.num_features, hidden=s.hidden, num_classes=split.num_classes, batch_norm=True, seed=job.seed
    )
    dev = resolve_device(job.device)
    bank = ReplicaBank(spec.build(), Topology(num_groups=1, group_size=s.workers)).to(dev)
    opt = make_optimizer(bank, SGDConfig(lr=s.base_lr, momentum=s.momentum, weight_decay=5e-4))
    xs, ys = split.train.x.to(dev), split.train.y.to(dev)
    acc: list[float] = []
    acc0: list[float] = []
    moved: list[int] = []
    spread: list[float] = []
    peak = 1.0
    for e in range(s.epochs):
        if e > 0:
            shards, rec = shuffling.partial_exchange(shards, job.q, rng, split.train.sample_bytes)
            moved.append(rec.bytes_moved)
            peak = max(peak, rec.peak_storage / len(shards[0]))
        spread.append(shuffling.label_spread(y, shards, split.num_classes))
        plan = shuffling.epoch_plan(shards, s.batch_size, rng)[:, None]
        run_grouped(bank, opt, xs, ys, plan, lrs[e * steps : (e + 1) * steps], tau=1)
        averaged, worker0 = evaluate_both(bank, split)
        acc.append(averaged)
        acc0.append(worker0)
    return ShuffleRun(
        scheme=job.scheme,
        q=job.q,
        seed=job.seed,
        accuracy=tuple(acc),
        accuracy_worker0=tuple(acc0),
        bytes_per_epoch=tuple(moved),
        spread=tuple(spread),
        peak_storage_ratio=peak,
        dataset_bytes=len(y) * split.train.sample_bytes,
    )


def jobs(params: Params) -> list[ShuffleJob]:
    """Every run of the chapter: GS and LS on every partition, every PLS(Q) on the partitions the PLS claims use."""
    setup = params.setup()
    all_q = sorted({0.0, 1.0, *params.q_values})
    return [ShuffleJob(setup=setup, scheme=sc, q=q, seed=sd, device=params.device)
            for sc in params.schemes for q in ((0.0, 1.0) if sc in FULL_MIX_SCHEMES else all_q) for sd in params.seeds]


def sweep(params: Params) -> list[ShuffleRun]:
    """Every run of :func:`jobs`, spread over ``workers`` processes, on ``device``."""
    return parallel_map(run_shuffle, jobs(params), workers=params.workers, desc="shuffle runs")


@dataclass(frozen=True, kw_only=True)
class GlooCheck:
    """A 2-rank gloo run with a real sample exchange against the simulator on the same plan."""

    max_abs_param_diff: float
    exchange_bytes_gloo: int
    exchange_bytes_accounted: int


def gloo_check(params: Params) -> GlooCheck:
    """Run PLS(claim_q) on a skewed partition on 2 gloo ranks (each holding only its shard) and in the simulator.

    The check has ``check_samples`` samples and ``check_epochs`` epochs, the first seed's data, partition and
    model, and the chapter's model and optimiser settings on 2 workers.

    Returns
    -------
    GlooCheck
        The largest parameter difference and the exchanged bytes, measured and accounted.
    """
    setup, seed, q = params.setup(), params.seeds[0], params.claim_q
    split = synthetic_classification(params.check_samples, setup.n_features, setup.n_informative, setup.num_classes,
                                     class_sep=setup.class_sep, n_clusters_per_class=CLUSTERS_PER_CLASS,
                                     test_fraction=TEST_FRACTION, seed=seed)
    y = split.train.y.numpy()
    rng = np.random.default_rng(seed)
    shards = shuffling.initial_shards(y, 2, "skewed", seed=seed)
    plans, per_epoch, accounted = [], [tuple(shards)], 0
    for e in range(params.check_epochs):
        plans.append(shuffling.epoch_plan(shards, setup.batch_size, rng))
        if e < params.check_epochs - 1:
            shards, rec = shuffling.partial_exchange(shards, q, rng, split.train.sample_bytes)
            accounted += rec.bytes_moved
            per_epoch.append(tuple(shards))
    plan = np.concatenate(plans)[:, None]
    steps = len(plans[0])
    lrs = warmup_schedule(setup.base_lr, 2, steps, params.check_epochs, setup.warmup_epochs)
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


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced: every shuffle run and the gloo check."""

    params: Params
    runs: list[ShuffleRun]
    check: GlooCheck

    def final(self, scheme: str, q: float, worker0: bool = False) -> dict[int, float]:
        """Final test accuracy per seed of one partition and Q (averaged BN statistics unless ``worker0``)."""
        return {r.seed: r.final_accuracy_worker0 if worker0 else r.final_accuracy
                for r in self.runs if r.scheme == scheme and np.isclose(r.q, q)}

    def gap(self, scheme: str, q: float, worker0: bool = False) -> list[float]:
        """GS's final accuracy minus the accuracy at ``q``, per seed (points)."""
        gs, other = self.final(scheme, 1.0, worker0), self.final(scheme, q, worker0)
        return [gs[s] - other[s] for s in sorted(gs)]


def run(params: Params) -> Results:
    """The shuffle runs, then the 2-rank gloo check."""
    return Results(params=params, runs=sweep(params), check=gloo_check(params))


def _arms(results: Results, scheme: str, q: float) -> Evidence:
    gs, other = results.final(scheme, 1.0), results.final(scheme, q)
    seeds = sorted(gs)
    return Evidence(values=[gs[s] - other[s] for s in seeds],
                    arms={"GS": [gs[s] for s in seeds], strategy_name(q): [other[s] for s in seeds]},
                    trivial=100.0 / results.params.num_classes)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims, the accuracy claims with their arms and chance level."""
    q = results.params.claim_q
    skewed = [r for r in results.runs if r.scheme == "skewed"]
    gs_bytes = {r.seed: float(np.mean(r.bytes_per_epoch)) for r in skewed if r.q == 1.0}
    pls_bytes = {r.seed: float(np.mean(r.bytes_per_epoch)) for r in skewed if np.isclose(r.q, q)}
    return {
        "ls_gap_skewed": _arms(results, "skewed", 0.0),
        "pls_drop_skewed": _arms(results, "skewed", q),
        "ls_drop_iid": _arms(results, "iid", 0.0),
        "exchange_saving": [100.0 * (1.0 - pls_bytes[s] / gs_bytes[s]) for s in sorted(gs_bytes)],
        "gloo_matches_simulator": [results.check.max_abs_param_diff],
    }


def summary(results: Results) -> pd.DataFrame:
    """Mean and spread of the final accuracy (both BN readings) and the exchanged share per partition and strategy."""
    rows = []
    for scheme, q in sorted({(r.scheme, r.q) for r in results.runs}):
        sel = [r for r in results.runs if r.scheme == scheme and r.q == q]
        acc = np.array([r.final_accuracy for r in sel])
        rows.append(
            {
                "partition": scheme,
                "strategy": strategy_name(q),
                "final accuracy (%), averaged BN": acc.mean(),
                "sd": acc.std(ddof=1) if len(acc) > 1 else 0.0,
                "final accuracy (%), worker 0's BN": np.mean([r.final_accuracy_worker0 for r in sel]),
                "MB exchanged per epoch": np.mean([np.mean(r.bytes_per_epoch) for r in sel]) / 1e6,
                "peak storage (x N/M)": max(r.peak_storage_ratio for r in sel),
            }
        )
    return pd.DataFrame(rows)


def accuracy_curves(results: Results) -> plt.Figure:
    """Test accuracy per epoch for every strategy, one panel per partition (averaged BN; mean and min-max band)."""
    runs = results.runs
    schemes = sorted({r.scheme for r in runs})
    fig, axes = plt.subplots(1, len(schemes), figsize=(5.2 * len(schemes), 3.6), sharey=True, squeeze=False)
    qs = sorted({r.q for r in runs})
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(qs)))
    for ax, scheme in zip(axes[0], schemes):
        for q, c in zip(qs, colors):
            sel = [r.accuracy for r in runs if r.scheme == scheme and r.q == q]
            if not sel:
                continue
            curves = np.array(sel)
            ep = np.arange(1, curves.shape[1] + 1)
            ax.plot(ep, curves.mean(0), color=c, label=strategy_name(q))
            ax.fill_between(ep, curves.min(0), curves.max(0), color=c, alpha=0.15)
        ax.set_title(f"{scheme} initial shards")
        ax.set_xlabel("epoch")
    axes[0, 0].set_ylabel("test accuracy (%), averaged BN statistics")
    axes[0, -1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def tradeoff(results: Results, scheme: str = "skewed") -> plt.Figure:
    """Final accuracy (both BN readings) against data exchanged per epoch, with the label-mix decay."""
    runs = results.runs
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    qs = sorted({r.q for r in runs if r.scheme == scheme})
    for q in qs:
        sel = [r for r in runs if r.scheme == scheme and r.q == q]
        share = float(np.mean([100 * np.mean(r.bytes_per_epoch) / r.dataset_bytes for r in sel]))
        for worker0, marker in ((False, "o"), (True, "x")):
            acc = [r.final_accuracy_worker0 if worker0 else r.final_accuracy for r in sel]
            ax.errorbar(share, np.mean(acc), yerr=np.std(acc), fmt=marker, color="C1" if worker0 else "C0", capsize=3)
        ax.annotate(strategy_name(q), (share, np.mean([r.final_accuracy for r in sel])), textcoords="offset points",
                    xytext=(4, -10), fontsize=8)
        bx.plot(np.mean([r.spread for r in sel], axis=0), label=strategy_name(q))
    ax.plot([], [], "o", color="C0", label="averaged BN statistics (judged)")
    ax.plot([], [], "x", color="C1", label="worker 0's BN statistics")
    ax.legend(fontsize=7)
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
