"""Chapter driver: hierarchical local SGD (groups of synchronous workers, periodic cross-group averaging).

P simulated workers in G groups of S (:mod:`repro.training.simulator`):
synchronous SGD is G = 1, plain local SGD is G = P, hierarchical local SGD
is 1 < G < P.  Every configuration trains for the same number of epochs with
a global shuffle each epoch; the learning rate is scaled linearly with the
group batch S * b after a one-epoch warm-up.  Communication time at scale is
modelled with alpha-beta ring costs (:mod:`repro.training.hier_localsgd`);
a 2-rank gloo run checks the simulator's local-SGD averaging.  The simulated
workers compute on the ``device`` parameter's device (the sample orders are
drawn on the CPU, so every device sees the same batches); the gloo check stays
on the CPU, since it checks the simulator's arithmetic, not its speed.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from repro.devices import resolve_device
from repro.parallel import parallel_map
from repro.training.cost import Network, ring_allreduce_time
from repro.training.data import synthetic_classification
from repro.training.distributed import GroupedJob, ModelSpec, grouped_sgd_rank
from repro.training.hier_localsgd import flat_averaging_cost, model_discrepancy, sharded_averaging_cost
from repro.training.launcher import launch
from repro.training.simulator import ReplicaBank, SGDConfig, Topology, evaluate, make_optimizer, run_grouped, warmup_schedule


@dataclass(frozen=True, kw_only=True)
class LocalSGDSetup:
    """Data, model and optimiser of a sweep."""

    n_samples: int
    n_features: int
    n_informative: int
    num_classes: int
    class_sep: float
    hidden: tuple[int, ...]
    batch_size: int
    lr_per_worker: float
    momentum: float
    epochs: int


@dataclass(frozen=True, kw_only=True)
class LocalSGDJob:
    """One configuration: P workers in G groups, averaging period tau, seed, and the device it computes on."""

    setup: LocalSGDSetup
    workers: int
    groups: int
    tau: int
    seed: int
    device: str = "cpu"


@dataclass(frozen=True, kw_only=True)
class LocalSGDRun:
    """The outcome of one configuration.

    Attributes
    ----------
    workers, groups, tau, seed
        The configuration.
    accuracy
        Test accuracy (%) of the averaged model at the end.
    discrepancy
        Mean relative spread of the group models just before averaging (0 for G = 1).
    steps
        Optimiser steps taken.
    model_bytes
        Size of the model in bytes (fp32).
    """

    workers: int
    groups: int
    tau: int
    seed: int
    accuracy: float
    discrepancy: float
    steps: int
    model_bytes: int

    @property
    def kind(self) -> str:
        """``sync``, ``local`` or ``hierarchical``."""
        return "sync" if self.groups == 1 else "local" if self.groups == self.workers else "hierarchical"


def _data(setup: LocalSGDSetup, seed: int):
    return synthetic_classification(setup.n_samples, setup.n_features, setup.n_informative, setup.num_classes,
                                    class_sep=setup.class_sep, seed=seed)


def global_shuffle_plan(n: int, topology: Topology, batch_size: int, epochs: int, seed: int) -> np.ndarray:
    """A fresh random order of the whole set every epoch, dealt to the P workers: ``(steps, G, S, b)``."""
    rng = np.random.default_rng(seed)
    per_step = topology.workers * batch_size
    steps = n // per_step
    if steps == 0:
        raise ValueError(f"{n} samples hold no step of {topology.workers} workers x {batch_size}")
    return np.concatenate([rng.permutation(n)[:steps * per_step].reshape(steps, topology.num_groups,
                                                                        topology.group_size, batch_size)
                           for _ in range(epochs)])


def run_config(job: LocalSGDJob) -> LocalSGDRun:
    """Train one configuration in the simulator."""
    torch.set_num_threads(1)
    s = job.setup
    split = _data(s, job.seed)
    topo = Topology(num_groups=job.groups, group_size=job.workers // job.groups)
    plan = global_shuffle_plan(len(split.train), topo, s.batch_size, s.epochs, job.seed)
    steps_per_epoch = len(plan) // s.epochs
    lrs = warmup_schedule(s.lr_per_worker, topo.group_size, steps_per_epoch, s.epochs, warmup_epochs=1.0)
    spec = ModelSpec(
        in_features=split.num_features, hidden=s.hidden, num_classes=split.num_classes, batch_norm=False, seed=job.seed
    )
    dev = resolve_device(job.device)
    bank = ReplicaBank(spec.build(), topo).to(dev)
    spreads: list[float] = []
    run_grouped(
        bank,
        make_optimizer(bank, SGDConfig(lr=s.lr_per_worker, momentum=s.momentum)),
        split.train.x.to(dev),
        split.train.y.to(dev),
        plan,
        lrs,
        job.tau,
        before_average=lambda b: spreads.append(model_discrepancy(b)),
    )
    if topo.num_groups > 1:
        spreads.append(model_discrepancy(bank))
        bank.average_groups()
    acc, _ = evaluate(bank, split.test.x, split.test.y)
    nbytes = 4 * sum(p[0].numel() for p in bank.weights)
    return LocalSGDRun(
        workers=job.workers,
        groups=job.groups,
        tau=job.tau,
        seed=job.seed,
        accuracy=acc,
        discrepancy=float(np.mean(spreads)) if spreads else 0.0,
        steps=len(plan),
        model_bytes=nbytes,
    )


def configurations(worker_counts: list[int], group_counts: list[int], taus: list[int]) -> list[tuple[int, int, int]]:
    """(P, G, tau) triples: synchronous SGD (G = 1, tau irrelevant), every G dividing P, and G = P."""
    out = []
    for p in worker_counts:
        out.append((p, 1, 1))
        for g in sorted({*group_counts, p}):
            if 1 < g <= p and p % g == 0:
                out += [(p, g, t) for t in taus]
    return out


def sweep(
    setup: LocalSGDSetup,
    worker_counts: list[int],
    group_counts: list[int],
    taus: list[int],
    seeds: list[int],
    workers: int = 1,
    device: str = "cpu",
) -> list[LocalSGDRun]:
    """Every configuration on every seed, computed on ``device`` (``cpu``, ``cuda`` or ``auto``)."""
    jobs = [
        LocalSGDJob(setup=setup, workers=p, groups=g, tau=t, seed=sd, device=device)
        for p, g, t in configurations(worker_counts, group_counts, taus)
        for sd in seeds
    ]
    return parallel_map(run_config, jobs, workers=workers, desc="configurations")


@dataclass(frozen=True, kw_only=True)
class GlooCheck:
    """2 real gloo ranks running local SGD (G = 2, S = 1) against the simulator."""

    max_abs_param_diff: float
    averaging_bytes_per_rank: int


def gloo_check(setup: LocalSGDSetup, tau: int, steps: int, seed: int = 0) -> GlooCheck:
    """Run ``steps`` steps of local SGD with periodic averaging on 2 gloo ranks and in the simulator.

    The two differ only in float summation order (batched matmul against ``F.linear``); over long runs
    such differences are amplified by training itself, so the check is kept to a few averaging periods.
    """
    split = _data(setup, seed)
    topo = Topology(num_groups=2, group_size=1)
    plan = global_shuffle_plan(len(split.train), topo, setup.batch_size, 1, seed)
    lrs = warmup_schedule(setup.lr_per_worker, 1, len(plan), 1, warmup_epochs=1.0)
    if steps > len(plan):
        raise ValueError(f"check_steps {steps} exceeds one epoch of {len(plan)} steps")
    plan, lrs = plan[:steps], lrs[:steps]
    spec = ModelSpec(
        in_features=split.num_features, hidden=setup.hidden, num_classes=split.num_classes, batch_norm=False, seed=seed
    )
    sgd = SGDConfig(lr=setup.lr_per_worker, momentum=setup.momentum)
    job = GroupedJob(
        x=split.train.x.numpy(), y=split.train.y.numpy(), model=spec, sgd=sgd, plan=plan, lrs=lrs, tau=tau, averaging="sharded"
    )
    reports = launch(grouped_sgd_rank, 2, (job,), group_size=1, timeout_s=300)
    bank = ReplicaBank(spec.build(), topo)
    run_grouped(bank, make_optimizer(bank, sgd), split.train.x, split.train.y, plan, lrs, tau)
    diff = max(float(np.max(np.abs(a - b))) for rep in reports for a, b in zip(bank.group_state(rep.rank), rep.params))
    return GlooCheck(max_abs_param_diff=diff, averaging_bytes_per_rank=reports[0].collective_bytes["model_averaging"])


def comm_per_iteration(
    model_bytes: float, workers: int, groups: int, tau: int, net: Network, averaging: str = "sharded"
) -> float:
    """Modelled communication seconds per iteration of a configuration.

    Synchronous SGD allreduces gradients over all P every step; a grouped
    configuration allreduces over its S members every step and averages the
    groups every ``tau`` steps (``sharded`` or ``flat``).
    """
    s = workers // groups
    per_step = ring_allreduce_time(model_bytes, s, net)
    if groups == 1:
        return per_step
    avg = (
        sharded_averaging_cost(model_bytes, groups, s, net)
        if averaging == "sharded"
        else flat_averaging_cost(model_bytes, workers, net)
    )
    return per_step + avg.seconds / tau


def _acc(runs: list[LocalSGDRun], p: int, g: int, tau: int | None) -> dict[int, float]:
    return {r.seed: r.accuracy for r in runs if r.workers == p and r.groups == g and (tau is None or r.tau == tau)}


def claims(runs: list[LocalSGDRun], claim_groups: int, claim_tau: int, net: Network, check: GlooCheck) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (at the largest P, G = ``claim_groups``, tau = ``claim_tau``)."""
    pmax = max(r.workers for r in runs)
    sync, local = _acc(runs, pmax, 1, None), _acc(runs, pmax, pmax, claim_tau)
    hier = _acc(runs, pmax, claim_groups, claim_tau)
    seeds = sorted(sync)
    d = next(r.model_bytes for r in runs)
    rho = []
    for sd in seeds:
        sel = [r for r in runs if r.seed == sd and r.groups > 1]
        disc, acc = [r.discrepancy for r in sel], [r.accuracy for r in sel]
        # a constant input carries no ranking information: count it as no correlation (the claim then fails)
        constant = len(set(disc)) < 2 or len(set(acc)) < 2
        rho.append(0.0 if constant else float(spearmanr(disc, acc).statistic))
    hier_t = comm_per_iteration(d, pmax, claim_groups, claim_tau, net)
    sync_t = comm_per_iteration(d, pmax, 1, 1, net)
    return {
        "localsgd_degrades": [sync[s] - local[s] for s in seeds],
        "hier_closer": [hier[s] - local[s] for s in seeds],
        "hier_vs_sync": [sync[s] - hier[s] for s in seeds],
        "discrepancy_ranks": rho,
        "averaging_bytes_saving": [
            100.0
            * (
                1
                - sharded_averaging_cost(d, claim_groups, pmax // claim_groups, net).bytes_per_process
                / flat_averaging_cost(d, pmax, net).bytes_per_process
            )
        ],
        "comm_time_saving": [100.0 * (1 - hier_t / sync_t)],
        "gloo_matches_simulator": [check.max_abs_param_diff],
    }


def accuracy_figure(runs: list[LocalSGDRun], claim_groups: int, taus: list[int]) -> plt.Figure:
    """Final accuracy against the number of workers: sync SGD, local SGD and hierarchical (G fixed), per tau."""
    ps = sorted({r.workers for r in runs})
    fig, axes = plt.subplots(1, len(taus), figsize=(5 * len(taus), 3.6), sharey=True, squeeze=False)
    for ax, tau in zip(axes[0], taus):
        for label, pick, c in (
            ("sync SGD (G=1)", lambda p: (1, None), "k"),
            ("local SGD (G=P)", lambda p: (p, tau), "C3"),
            (f"hierarchical (G={claim_groups})", lambda p: (claim_groups, tau), "C0"),
        ):
            xs, mean, lo, hi = [], [], [], []
            for p in ps:
                g, t = pick(p)
                vals = list(_acc(runs, p, g, t).values())
                if vals and (g == 1 or g <= p):
                    xs.append(p)
                    mean.append(np.mean(vals))
                    lo.append(np.min(vals))
                    hi.append(np.max(vals))
            ax.plot(xs, mean, marker="o", color=c, label=label)
            ax.fill_between(xs, lo, hi, color=c, alpha=0.15)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers P")
        ax.set_title(f"averaging period tau = {tau}")
    axes[0, 0].set_ylabel("final test accuracy (%)")
    axes[0, -1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def comm_figure(
    model_bytes: float, worker_counts: list[int], claim_groups: int, claim_tau: int, net: Network, alphas: list[float]
) -> plt.Figure:
    """Modelled communication per iteration against P (left) and the hierarchical saving against alpha (right)."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    ps = np.array(sorted(worker_counts))
    rows = (
        ("sync SGD: gradient allreduce over P", lambda p: comm_per_iteration(model_bytes, p, 1, 1, net)),
        ("hierarchical, flat averaging", lambda p: comm_per_iteration(model_bytes, p, claim_groups, claim_tau, net, "flat")),
        (
            "hierarchical, sharded averaging",
            lambda p: comm_per_iteration(model_bytes, p, claim_groups, claim_tau, net, "sharded"),
        ),
        ("local SGD (G=P), flat averaging", lambda p: comm_per_iteration(model_bytes, p, p, claim_tau, net, "flat")),
    )
    for label, fn in rows:
        ax.plot(ps, [1e6 * fn(p) for p in ps], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("workers P")
    ax.set_ylabel("modelled communication per iteration (µs)")
    ax.set_title(f"alpha = {net.alpha * 1e6:g} µs, {1 / net.beta / 1e9:g} GB/s, d = {model_bytes / 1e3:.0f} kB")
    ax.legend(fontsize=7)
    pmax = int(ps.max())
    for p in ps:
        sav = [
            100
            * (
                1
                - comm_per_iteration(model_bytes, int(p), claim_groups, claim_tau, Network(alpha=a, beta=net.beta))
                / comm_per_iteration(model_bytes, int(p), 1, 1, Network(alpha=a, beta=net.beta))
            )
            for a in alphas
        ]
        bx.plot(np.array(alphas) * 1e6, sav, marker=".", label=f"P = {p}", lw=2 if p == pmax else 1)
    bx.set_xscale("symlog", linthresh=0.1)
    bx.set_xlabel("latency alpha (µs)")
    bx.set_ylabel("saving against sync SGD (%)")
    bx.set_title("the deciding constant")
    bx.legend(fontsize=7)
    fig.tight_layout()
    return fig


def summary(runs: list[LocalSGDRun]) -> pd.DataFrame:
    """Mean accuracy and discrepancy per configuration."""
    df = pd.DataFrame(
        [
            {
                "P": r.workers,
                "G": r.groups,
                "S": r.workers // r.groups,
                "tau": r.tau,
                "kind": r.kind,
                "accuracy": r.accuracy,
                "discrepancy": r.discrepancy,
                "steps": r.steps,
            }
            for r in runs
        ]
    )
    return df.groupby(["P", "G", "S", "tau", "kind"], as_index=False).agg(
        accuracy=("accuracy", "mean"), sd=("accuracy", "std"), discrepancy=("discrepancy", "mean"), steps=("steps", "first")
    )
