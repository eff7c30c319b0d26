"""Chapter driver: hierarchical local SGD (groups of synchronous workers, periodic cross-group averaging).

P simulated workers in G groups of S (:mod:`repro.training.simulator`):
synchronous SGD is G = 1, plain local SGD is G = P, hierarchical local SGD
is 1 < G < P.  Every configuration trains for the same number of epochs with
a global shuffle each epoch.  Every configuration tries every peak learning
rate of one grid on the tuning seeds and keeps the rate with the best
validation accuracy (:mod:`repro.training.tuning`); the evaluation seeds then
train at that rate and are scored on the test set.  The rate ramps linearly
from ``rate / S`` to ``rate`` over the first epoch (Goyal et al.'s warm-up for
the group batch ``S * b``).  Communication time at scale is modelled with
alpha-beta ring costs (:mod:`repro.training.hier_localsgd`); a 2-rank gloo
run checks the simulator's local-SGD averaging.  The simulated workers compute
on the ``device`` parameter's device (the sample orders are drawn on the CPU,
so every device sees the same batches); the gloo check stays on the CPU, since
it checks the simulator's arithmetic, not its speed.
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
from repro.params import ChapterParams, require
from repro.results import Evidence
from repro.training.cost import Network, ring_allreduce_time
from repro.training.data import Split, split_sizes, synthetic_classification
from repro.training.distributed import GroupedJob, ModelSpec, grouped_sgd_rank
from repro.training.hier_localsgd import flat_averaging_cost, model_discrepancy, sharded_averaging_cost
from repro.training.launcher import launch
from repro.training.simulator import ReplicaBank, SGDConfig, Topology, evaluate, make_optimizer, run_grouped, warmup_schedule
from repro.training.tuning import Trial, choose

TEST_FRACTION = 0.2
"""Share of the generated samples held out for testing."""
CLUSTERS_PER_CLASS = 2
"""``make_classification``'s clusters per class (it needs ``classes * clusters <= 2 ** n_informative``)."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    n_samples: int
    n_features: int
    n_informative: int
    num_classes: int
    class_sep: float
    hidden: tuple[int, ...]
    batch_size: int
    lr_grid: tuple[float, ...]
    validation_fraction: float
    momentum: float
    epochs: int
    worker_counts: tuple[int, ...]
    group_counts: tuple[int, ...]
    taus: tuple[int, ...]
    claim_groups: int
    claim_tau: int
    alpha_us: float
    bandwidth_gbs: float
    sweep_alphas_us: tuple[float, ...]
    check_steps: int
    tune_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    workers: int
    device: str

    @property
    def n_train(self) -> int:
        """Training samples left after the test and validation hold-outs."""
        return split_sizes(self.n_samples, TEST_FRACTION, self.validation_fraction)[0]

    @property
    def network(self) -> Network:
        """The modelled network (latency ``alpha_us``, bandwidth ``bandwidth_gbs``)."""
        return Network(alpha=self.alpha_us * 1e-6, beta=1.0 / (self.bandwidth_gbs * 1e9))

    @property
    def check_epoch_steps(self) -> int:
        """Steps of one epoch of the 2-rank gloo check (2 workers of ``batch_size``)."""
        return self.n_train // (2 * self.batch_size)

    def checks(self) -> None:
        """Refuse impossible combinations before any work starts."""
        require(self.n_informative <= self.n_features, self, ("n_informative", "n_features"),
                "n_informative must not exceed n_features")
        require(self.num_classes * CLUSTERS_PER_CLASS <= 2 ** self.n_informative, self, ("num_classes", "n_informative"),
                f"make_classification needs num_classes * {CLUSTERS_PER_CLASS} <= 2 ** n_informative")
        require(self.claim_groups in self.group_counts, self, ("claim_groups", "group_counts"),
                "claim_groups must be one of group_counts")
        require(self.claim_tau in self.taus, self, ("claim_tau", "taus"), "claim_tau must be one of taus")
        pmax = max(self.worker_counts)
        require(pmax % self.claim_groups == 0 and pmax > self.claim_groups, self, ("claim_groups", "worker_counts"),
                "claim_groups must divide the largest P and be smaller than it")
        require(self.n_train >= pmax * self.batch_size, self,
                ("n_samples", "validation_fraction", "worker_counts", "batch_size"),
                f"the largest P must get at least one step per epoch ({self.n_train} training samples)")
        require(self.check_steps <= self.check_epoch_steps, self, ("check_steps", "n_samples", "batch_size"),
                f"the gloo check runs within one epoch of 2 workers: at most {self.check_epoch_steps} steps")
        require(not set(self.tune_seeds) & set(self.seeds), self, ("tune_seeds", "seeds"),
                "the tuning seeds must differ from the evaluation seeds")
        require(all(r > 0 for r in self.lr_grid), self, "lr_grid", "the learning-rate grid holds positive rates")


@dataclass(frozen=True, kw_only=True)
class Config:
    """One way of running P workers: G groups, averaging period tau (1 for synchronous SGD)."""

    workers: int
    groups: int
    tau: int

    @property
    def kind(self) -> str:
        """``sync``, ``local`` or ``hierarchical``."""
        return "sync" if self.groups == 1 else "local" if self.groups == self.workers else "hierarchical"

    @property
    def topology(self) -> Topology:
        """G groups of S = P / G workers."""
        return Topology(num_groups=self.groups, group_size=self.workers // self.groups)

    @property
    def label(self) -> str:
        """A short name for tables and figures."""
        return {"sync": "sync SGD (G=1)", "local": f"local SGD (G=P), τ={self.tau}"}.get(
            self.kind, f"hierarchical G={self.groups}, τ={self.tau}")


@dataclass(frozen=True, kw_only=True)
class LocalSGDJob:
    """One configuration at one peak learning rate on one seed."""

    params: Params
    config: Config
    lr: float
    seed: int


@dataclass(frozen=True, kw_only=True)
class LocalSGDRun:
    """The outcome of one job.

    Attributes
    ----------
    config, lr, seed
        What ran.
    accuracy, val_accuracy
        Test and validation accuracy (%) of the averaged model at the end.
    discrepancy
        Mean relative spread of the group models just before averaging (0 for G = 1).
    steps
        Optimiser steps taken.
    model_bytes
        Size of the model in bytes (fp32).
    """

    config: Config
    lr: float
    seed: int
    accuracy: float
    val_accuracy: float
    discrepancy: float
    steps: int
    model_bytes: int


def data(params: Params, seed: int) -> Split:
    """The generated set of a seed, with the validation share held out of the training part."""
    return synthetic_classification(params.n_samples, params.n_features, params.n_informative, params.num_classes,
                                    class_sep=params.class_sep, n_clusters_per_class=CLUSTERS_PER_CLASS,
                                    test_fraction=TEST_FRACTION, validation_fraction=params.validation_fraction,
                                    seed=seed)


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


def learning_rates(lr: float, group_size: int, steps_per_epoch: int, epochs: int) -> np.ndarray:
    """Per-step rates: a linear ramp from ``lr / S`` to the peak ``lr`` over the first epoch, then ``lr``."""
    return warmup_schedule(lr / group_size, group_size, steps_per_epoch, epochs, warmup_epochs=1.0)


def run_config(job: LocalSGDJob) -> LocalSGDRun:
    """Train one configuration at one rate in the simulator and score it on validation and test data."""
    torch.set_num_threads(1)
    p, cfg = job.params, job.config
    split = data(p, job.seed)
    topo = cfg.topology
    plan = global_shuffle_plan(len(split.train), topo, p.batch_size, p.epochs, job.seed)
    lrs = learning_rates(job.lr, topo.group_size, len(plan) // p.epochs, p.epochs)
    spec = ModelSpec(in_features=split.num_features, hidden=p.hidden, num_classes=split.num_classes, batch_norm=False,
                     seed=job.seed)
    dev = resolve_device(p.device)
    bank = ReplicaBank(spec.build(), topo).to(dev)
    spreads: list[float] = []
    run_grouped(bank, make_optimizer(bank, SGDConfig(lr=job.lr, momentum=p.momentum)), split.train.x.to(dev),
                split.train.y.to(dev), plan, lrs, cfg.tau, before_average=lambda b: spreads.append(model_discrepancy(b)))
    if topo.num_groups > 1:
        spreads.append(model_discrepancy(bank))
        bank.average_groups()
    assert split.val is not None
    return LocalSGDRun(config=cfg, lr=job.lr, seed=job.seed, accuracy=evaluate(bank, split.test.x, split.test.y)[0],
                       val_accuracy=evaluate(bank, split.val.x, split.val.y)[0],
                       discrepancy=float(np.mean(spreads)) if spreads else 0.0, steps=len(plan),
                       model_bytes=4 * sum(w[0].numel() for w in bank.weights))


def configurations(params: Params) -> list[Config]:
    """Synchronous SGD (G = 1) for every P, and every G of ``group_counts`` dividing P, and G = P, per tau."""
    out = []
    for p in params.worker_counts:
        out.append(Config(workers=p, groups=1, tau=1))
        for g in sorted({*params.group_counts, p}):
            if 1 < g <= p and p % g == 0:
                out += [Config(workers=p, groups=g, tau=t) for t in params.taus]
    return out


def tune(params: Params) -> tuple[list[LocalSGDRun], dict[Config, float]]:
    """Every configuration at every rate of the grid on the tuning seeds; each keeps its best validation rate."""
    jobs = [LocalSGDJob(params=params, config=c, lr=lr, seed=s)
            for c in configurations(params) for lr in params.lr_grid for s in params.tune_seeds]
    runs = parallel_map(run_config, jobs, workers=params.workers, desc="tuning runs")
    rates = choose(Trial(arm=r.config, value=r.lr, score=r.val_accuracy) for r in runs)
    return runs, {c: rates[c] for c in configurations(params)}


def sweep(params: Params, rates: dict[Config, float]) -> list[LocalSGDRun]:
    """Every configuration at its chosen rate on every evaluation seed."""
    jobs = [LocalSGDJob(params=params, config=c, lr=rates[c], seed=s) for c in configurations(params)
            for s in params.seeds]
    return parallel_map(run_config, jobs, workers=params.workers, desc="configurations")


@dataclass(frozen=True, kw_only=True)
class GlooCheck:
    """2 real gloo ranks running local SGD (G = 2, S = 1) against the simulator."""

    max_abs_param_diff: float
    averaging_bytes_per_rank: int


def gloo_check(params: Params, lr: float) -> GlooCheck:
    """Run ``check_steps`` steps of local SGD with period ``claim_tau`` on 2 gloo ranks and in the simulator.

    The two differ only in float summation order (batched matmul against ``F.linear``); over long runs
    such differences are amplified by training itself, so the check is kept to a few averaging periods.
    """
    seed = params.seeds[0]
    split = data(params, seed)
    topo = Topology(num_groups=2, group_size=1)
    plan = global_shuffle_plan(len(split.train), topo, params.batch_size, 1, seed)[: params.check_steps]
    lrs = learning_rates(lr, 1, len(plan), 1)
    spec = ModelSpec(in_features=split.num_features, hidden=params.hidden, num_classes=split.num_classes,
                     batch_norm=False, seed=seed)
    sgd = SGDConfig(lr=lr, momentum=params.momentum)
    job = GroupedJob(x=split.train.x.numpy(), y=split.train.y.numpy(), model=spec, sgd=sgd, plan=plan, lrs=lrs,
                     tau=params.claim_tau, averaging="sharded")
    reports = launch(grouped_sgd_rank, 2, (job,), group_size=1, timeout_s=300)
    bank = ReplicaBank(spec.build(), topo)
    run_grouped(bank, make_optimizer(bank, sgd), split.train.x, split.train.y, plan, lrs, params.claim_tau)
    diff = max(float(np.max(np.abs(a - b))) for rep in reports for a, b in zip(bank.group_state(rep.rank), rep.params))
    return GlooCheck(max_abs_param_diff=diff, averaging_bytes_per_rank=reports[0].collective_bytes["model_averaging"])


def comm_per_iteration(model_bytes: float, config: Config, net: Network, averaging: str = "sharded") -> float:
    """Modelled communication seconds per iteration of a configuration.

    Synchronous SGD allreduces gradients over all P every step; a grouped
    configuration allreduces over its S members every step and averages the
    groups every ``tau`` steps (``sharded`` or ``flat``).
    """
    s = config.workers // config.groups
    per_step = ring_allreduce_time(model_bytes, s, net)
    if config.groups == 1:
        return per_step
    avg = (sharded_averaging_cost(model_bytes, config.groups, s, net) if averaging == "sharded"
           else flat_averaging_cost(model_bytes, config.workers, net))
    return per_step + avg.seconds / config.tau


def comm_saving(model_bytes: float, config: Config, net: Network) -> float:
    """Modelled communication per iteration of ``config`` below synchronous SGD on as many workers, percent."""
    sync = comm_per_iteration(model_bytes, Config(workers=config.workers, groups=1, tau=1), net)
    return 100.0 * (1 - comm_per_iteration(model_bytes, config, net) / sync)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params
        The parameters it ran with.
    tuning
        The grid runs on the tuning seeds (validation and test accuracy per rate).
    rates
        The peak learning rate each configuration chose on validation data.
    runs
        The evaluation runs (every configuration at its rate on every evaluation seed).
    check
        The 2-rank gloo check against the simulator.
    chance
        The majority class's share of the test labels, percent (the trivial accuracy), largest over seeds.
    """

    params: Params
    tuning: tuple[LocalSGDRun, ...]
    rates: dict[Config, float]
    runs: tuple[LocalSGDRun, ...]
    check: GlooCheck
    chance: float

    @property
    def largest(self) -> int:
        """The largest P, where the claims are judged."""
        return max(self.params.worker_counts)

    @property
    def model_bytes(self) -> int:
        """Size of the model in bytes (fp32)."""
        return self.runs[0].model_bytes

    def claim_configs(self) -> dict[str, Config]:
        """The three configurations the accuracy claims compare, at the largest P."""
        p, prm = self.largest, self.params
        return {"sync": Config(workers=p, groups=1, tau=1), "local": Config(workers=p, groups=p, tau=prm.claim_tau),
                "hierarchical": Config(workers=p, groups=prm.claim_groups, tau=prm.claim_tau)}

    def accuracy(self, config: Config) -> dict[int, float]:
        """Test accuracy per evaluation seed of one configuration."""
        return {r.seed: r.accuracy for r in self.runs if r.config == config}


def majority_share(split: Split) -> float:
    """The most frequent test label's share, percent: what always answering that class scores."""
    return 100.0 * float(np.bincount(split.test.y.numpy()).max()) / len(split.test)


def run(params: Params) -> Results:
    """Tune every configuration's rate on validation data, train the evaluation seeds, run the gloo check."""
    tuning, rates = tune(params)
    runs = sweep(params, rates)
    local = Config(workers=max(params.worker_counts), groups=max(params.worker_counts), tau=params.claim_tau)
    return Results(params=params, tuning=tuple(tuning), rates=rates, runs=tuple(runs),
                   check=gloo_check(params, rates[local]),
                   chance=max(majority_share(data(params, s)) for s in params.seeds))


def _discrepancy_rank(results: Results, seed: int) -> float:
    """Spearman correlation of discrepancy and accuracy over the grouped configurations of one seed."""
    sel = [r for r in results.runs if r.seed == seed and r.config.groups > 1]
    disc, acc = [r.discrepancy for r in sel], [r.accuracy for r in sel]
    # a constant input carries no ranking information: count it as no correlation (the claim then fails)
    return 0.0 if len(set(disc)) < 2 or len(set(acc)) < 2 else float(spearmanr(disc, acc).statistic)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The chapter's claims: accuracy gaps per seed at the largest P, the discrepancy ranking, the models' values."""
    prm, cfg = results.params, results.claim_configs()
    acc = {k: results.accuracy(c) for k, c in cfg.items()}
    seeds = sorted(acc["sync"])
    per_seed = {k: [a[s] for s in seeds] for k, a in acc.items()}

    def gap(a: str, b: str) -> Evidence:
        return Evidence(values=[x - y for x, y in zip(per_seed[a], per_seed[b])],
                        arms={a: per_seed[a], b: per_seed[b]}, trivial=results.chance)

    grouped = sorted({r.config for r in results.runs if r.config.groups > 1}, key=lambda c: (c.workers, c.groups, c.tau))
    d, net, hier = results.model_bytes, prm.network, cfg["hierarchical"]
    flat = flat_averaging_cost(d, hier.workers, net).bytes_per_process
    sharded = sharded_averaging_cost(d, hier.groups, hier.workers // hier.groups, net).bytes_per_process
    return {
        "localsgd_degrades": gap("sync", "local"),
        "hier_closer": gap("hierarchical", "local"),
        "hier_vs_sync": gap("sync", "hierarchical"),
        "discrepancy_ranks": Evidence(values=[_discrepancy_rank(results, s) for s in seeds],
                                      arms={c.label + f", P={c.workers}": list(results.accuracy(c).values())
                                            for c in grouped}, trivial=results.chance),
        "averaging_bytes_saving": [100.0 * (1 - sharded / flat)],
        "comm_time_saving": [comm_saving(d, hier, net)],
        "gloo_matches_simulator": [results.check.max_abs_param_diff],
    }


def _band(values: list[float]) -> tuple[float, float, float]:
    return float(np.mean(values)), float(np.min(values)), float(np.max(values))


def accuracy_figure(results: Results) -> plt.Figure:
    """Final test accuracy against the number of workers, each configuration at its tuned rate, per tau."""
    prm = results.params
    ps = sorted(prm.worker_counts)
    fig, axes = plt.subplots(1, len(prm.taus), figsize=(5 * len(prm.taus), 3.6), sharey=True, squeeze=False)
    for ax, tau in zip(axes[0], prm.taus):
        for label, groups, colour in (("sync SGD (G=1)", lambda p: 1, "k"), ("local SGD (G=P)", lambda p: p, "C3"),
                                      (f"hierarchical (G={prm.claim_groups})", lambda p: prm.claim_groups, "C0")):
            pts = [(p, results.accuracy(Config(workers=p, groups=groups(p), tau=tau if groups(p) > 1 else 1)))
                   for p in ps]
            bands = [(p, _band(list(acc.values()))) for p, acc in pts if acc]
            if not bands:
                continue
            xs = [p for p, _ in bands]
            ax.plot(xs, [b[0] for _, b in bands], marker="o", color=colour, label=label)
            ax.fill_between(xs, [b[1] for _, b in bands], [b[2] for _, b in bands], color=colour, alpha=0.15)
        ax.axhline(results.chance, color="0.5", ls=":", lw=1, label="majority class")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers P")
        ax.set_title(f"averaging period tau = {tau}")
    axes[0, 0].set_ylabel("final test accuracy (%), tuned rate")
    axes[0, -1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def tuning_figure(results: Results) -> plt.Figure:
    """Validation accuracy against the peak rate for the three configurations the claims compare (tuning seeds)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for (name, cfg), colour in zip(results.claim_configs().items(), ("k", "C3", "C0")):
        sel = [r for r in results.tuning if r.config == cfg]
        rates = sorted({r.lr for r in sel})
        ax.plot(rates, [np.mean([r.val_accuracy for r in sel if r.lr == lr]) for lr in rates], marker="o",
                color=colour, label=f"{cfg.label} (chosen {results.rates[cfg]:g})")
        ax.scatter([results.rates[cfg]], [np.mean([r.val_accuracy for r in sel if r.lr == results.rates[cfg]])],
                   s=120, facecolors="none", edgecolors=colour)
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(f"P = {results.largest}: the same grid for every method (tuning seeds)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def comm_figure(results: Results) -> plt.Figure:
    """Modelled communication per iteration against P (left) and the hierarchical saving against alpha (right)."""
    prm, d = results.params, results.model_bytes
    net = prm.network
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    ps = sorted(prm.worker_counts)
    g, tau = prm.claim_groups, prm.claim_tau
    rows = (("sync SGD: gradient allreduce over P", 1, "sharded"), ("hierarchical, flat averaging", g, "flat"),
            ("hierarchical, sharded averaging", g, "sharded"), ("local SGD (G=P), flat averaging", 0, "flat"))
    for label, groups, averaging in rows:
        valid = [p for p in ps if groups in (0, 1) or (p % groups == 0 and p > groups)]
        cost = [comm_per_iteration(d, Config(workers=p, groups=groups or p, tau=tau if groups != 1 else 1), net, averaging)
                for p in valid]
        ax.plot(valid, [1e6 * c for c in cost], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("workers P")
    ax.set_ylabel("modelled communication per iteration (µs)")
    ax.set_title(f"alpha = {prm.alpha_us:g} µs, {prm.bandwidth_gbs:g} GB/s, d = {d / 1e3:.0f} kB")
    ax.legend(fontsize=7)
    for p in ps:
        if p % g or p <= g:
            continue
        sav = [comm_saving(d, Config(workers=p, groups=g, tau=tau), Network(alpha=a * 1e-6, beta=net.beta))
               for a in prm.sweep_alphas_us]
        bx.plot(prm.sweep_alphas_us, sav, marker=".", label=f"P = {p}", lw=2 if p == results.largest else 1)
    bx.axvline(prm.alpha_us, color="0.5", ls=":", lw=1)
    bx.set_xscale("symlog", linthresh=0.1)
    bx.set_xlabel("latency alpha (µs)")
    bx.set_ylabel("saving against sync SGD (%)")
    bx.set_title("the deciding constant (dotted: the claim's alpha)")
    bx.legend(fontsize=7)
    fig.tight_layout()
    return fig


def summary(results: Results) -> pd.DataFrame:
    """Per configuration: its tuned rate, mean test accuracy (sd over seeds), discrepancy and steps."""
    rows = [{"P": r.config.workers, "G": r.config.groups, "S": r.config.workers // r.config.groups, "tau": r.config.tau,
             "kind": r.config.kind, "rate": r.lr, "accuracy": r.accuracy, "discrepancy": r.discrepancy, "steps": r.steps}
            for r in results.runs]
    return pd.DataFrame(rows).groupby(["P", "G", "S", "tau", "kind", "rate"], as_index=False).agg(
        accuracy=("accuracy", "mean"), sd=("accuracy", "std"), discrepancy=("discrepancy", "mean"),
        steps=("steps", "first"))
