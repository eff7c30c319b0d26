"""The SFETEC chapter: base models on clients, core models on edges, against FedAvg, HierFAVG and SplitFed.

:class:`SfetecRun` is one seeded run, :func:`run` executes it and returns
a :class:`RunRecord`, :func:`sweep` runs every method and seed,
:func:`claims` turns the records into the ledger's per-seed values,
:func:`time_sensitivity` sweeps the cost model's deciding constant; the
figures and tables are the chapter's own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import central_evaluator, eval_schedule, initial_arrays, run_federated
from repro.federated.figures import accuracy_band
from repro.federated.hierfavg import HierFAVG
from repro.federated.sfetec import CostModel, RoundTraffic, SplitHierarchy, SplitSchedule, run_split_training, training_flops
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model, planted_clusters
from repro.federated.tiers import FLOAT_BYTES, linear_layers
from repro.parallel import parallel_map

METHODS = ("fedavg", "hierfavg", "splitfed", "sfetec")
LABELS = {"fedavg": "FedAvg", "hierfavg": "HierFAVG", "splitfed": "SplitFed", "sfetec": "SFETEC"}
COLOURS = {"fedavg": "tab:gray", "hierfavg": "tab:orange", "splitfed": "tab:green", "sfetec": "tab:blue"}
CUT = 2
"""The MLP is cut after its first linear layer and ReLU (modules ``fc0, relu0``): the base."""


@dataclass(frozen=True, kw_only=True)
class SfetecRun:
    """One run; field names are the chapter's parameters.

    Attributes
    ----------
    method
        One of :data:`METHODS`.
    seed
        Run seed.
    spec
        The task (``cluster_skew``: one planted group per edge).
    steps, rounds, batch_size, lr
        Local steps (split steps) per round, rounds, batch, SGD learning rate (no momentum).
    cloud_every
        Edge rounds between cloud aggregations (HierFAVG, SFETEC).
    share_bases
        SFETEC also averages the bases across edges at the cloud.
    eval_every
        Evaluation period.
    device
        Where the clients (and the split models) train: ``cpu``, ``cuda`` or ``auto``.
    """

    method: str
    seed: int
    spec: TaskSpec
    steps: int
    rounds: int
    batch_size: int
    lr: float
    cloud_every: int
    share_bases: bool
    eval_every: int
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"parameter 'method': must be one of {METHODS}, got {self.method!r}")

    def edges(self) -> tuple[tuple[int, ...], ...]:
        """Partition ids per edge (the planted client groups)."""
        groups = planted_clusters(self.spec)
        return tuple(tuple(int(p) for p in np.flatnonzero(groups == g)) for g in sorted(set(groups)))


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """What one run produced.

    Attributes
    ----------
    method, seed
        Which run.
    accuracy, budget_accuracy
        Final test accuracy and the mean of the last three evaluations (percent).
    client_up, client_down, cloud
        Mean bytes per round: per client up and down, and between edges and cloud.
    curve
        ``(round, accuracy)`` at every evaluation.
    """

    method: str
    seed: int
    accuracy: float
    budget_accuracy: float
    client_up: float
    client_down: float
    cloud: float
    curve: tuple[tuple[int, float], ...]


def model_bytes(spec: TaskSpec) -> int:
    """Bytes of the whole model (float32)."""
    return FLOAT_BYTES * sum(int(p.numel()) for p in build_model(spec, 0).parameters())


def run(job: SfetecRun) -> RunRecord:
    """Run ``job``: FedAvg and HierFAVG on Flower's in-process engine, SplitFed and SFETEC in the split loop."""
    sched = eval_schedule(job.rounds, job.eval_every)
    clients = job.spec.num_clients
    if job.method in ("fedavg", "hierfavg"):
        local = LocalSGD(batch_size=job.batch_size, lr=job.lr, momentum=0.0).config(job.steps)
        if job.method == "fedavg":
            strategy: SeededFedAvg = SeededFedAvg(clients, local, seed=job.seed)
        else:
            edge_of = [0] * clients
            for e, members in enumerate(job.edges()):
                for p in members:
                    edge_of[p] = e
            strategy = HierFAVG(clients, local, edge_of, seed=job.seed, cloud_every=job.cloud_every)
        hist = run_federated(strategy, make_client_app(job.spec, {"seed": job.seed, "device": job.device}), clients,
                             initial_arrays(job.spec, job.seed), job.rounds, central_evaluator(job.spec), sched)
        size = model_bytes(job.spec)
        cloud = strategy.cloud_scalars * FLOAT_BYTES / job.rounds if isinstance(strategy, HierFAVG) else 0.0
        rounds, acc, up, down = hist.rounds, hist.accuracy, float(size), float(size)
    else:
        hierarchy = (SplitHierarchy.splitfed(clients) if job.method == "splitfed"
                     else SplitHierarchy(edges=job.edges(), cloud_every=job.cloud_every, share_bases=job.share_bases))
        schedule = SplitSchedule(rounds=job.rounds, steps=job.steps, batch_size=job.batch_size, lr=job.lr)
        split = run_split_training(job.spec, cut=CUT, hierarchy=hierarchy, schedule=schedule, seed=job.seed,
                                   eval_rounds=sched, device=job.device)
        rounds, acc = split.rounds, split.accuracy
        up = float(np.mean([t.client_up for t in split.traffic]))
        down = float(np.mean([t.client_down for t in split.traffic]))
        cloud = float(np.mean([t.cloud for t in split.traffic]))
    return RunRecord(
        method=job.method,
        seed=job.seed,
        accuracy=acc[-1],
        budget_accuracy=float(np.mean(acc[-3:])),
        client_up=up,
        client_down=down,
        cloud=cloud,
        curve=tuple(zip(rounds, acc)),
    )


def sweep(
    spec: TaskSpec,
    steps: int,
    rounds: int,
    batch_size: int,
    lr: float,
    cloud_every: int,
    share_bases: bool,
    seeds: list[int],
    eval_every: int,
    workers: int = 1,
    device: str = "cpu",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method for every seed.

    Returns
    -------
    final : DataFrame
        One row per run: accuracy and mean bytes per round.
    curves : DataFrame
        ``method, seed, round, accuracy``.
    """
    jobs = [
        SfetecRun(
            method=m,
            seed=s,
            spec=spec,
            steps=steps,
            rounds=rounds,
            batch_size=batch_size,
            lr=lr,
            cloud_every=cloud_every,
            share_bases=share_bases,
            eval_every=eval_every,
            device=device,
        )
        for s in seeds
        for m in METHODS
    ]
    done = parallel_map(run, jobs, workers)
    final = pd.DataFrame([{k: v for k, v in dataclasses.asdict(r).items() if k != "curve"} for r in done])
    curves = pd.DataFrame([{"method": r.method, "seed": r.seed, "round": rd, "accuracy": a} for r in done for rd, a in r.curve])
    return final, curves


# ----- simulated wall-clock ------------------------------------------------------------------------
def round_seconds(final: pd.DataFrame, spec: TaskSpec, steps: int, batch_size: int, cost: CostModel, edges: int) -> pd.DataFrame:
    """Simulated seconds per round of every run under ``cost`` (see :class:`repro.federated.sfetec.CostModel`)."""
    layers = linear_layers(build_model(spec, 0))
    base_flops, core_flops = training_flops(layers[:1], batch_size), training_flops(layers[1:], batch_size)
    size = model_bytes(spec)
    clients = spec.num_clients
    seconds = []
    for r in final.itertuples():
        if r.method in ("fedavg", "hierfavg"):
            seconds.append(
                cost.fedavg_round(size, base_flops + core_flops, steps, hierarchical=r.method == "hierfavg", cloud_bytes=r.cloud)
            )
        else:
            traffic = RoundTraffic(client_up=r.client_up, client_down=r.client_down, cloud=r.cloud)
            per_server = clients if r.method == "splitfed" else clients // edges
            seconds.append(cost.split_round(traffic, base_flops, core_flops, steps, per_server, at_edge=r.method == "sfetec"))
    return final.assign(seconds=seconds)


def per_seed(final: pd.DataFrame, column: str) -> dict[str, pd.Series]:
    """``column`` of every method, indexed by seed."""
    return {m: final[final.method == m].set_index("seed")[column] for m in METHODS}


def claims(final: pd.DataFrame, timed: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (``timed``: :func:`round_seconds` under the stated cost model)."""
    acc, up, sec = per_seed(final, "budget_accuracy"), per_seed(final, "client_up"), per_seed(timed, "seconds")
    seeds = sorted(acc["sfetec"].index)
    return {
        "acc_gap_vs_fedavg": [float(acc["fedavg"][s] - acc["sfetec"][s]) for s in seeds],
        "uplink_saving_vs_fedavg": [float(100.0 * (1 - up["sfetec"][s] / up["fedavg"][s])) for s in seeds],
        "time_saving_vs_splitfed": [float(100.0 * (1 - sec["sfetec"][s] / sec["splitfed"][s])) for s in seeds],
    }


def time_sensitivity(
    final: pd.DataFrame, spec: TaskSpec, steps: int, batch_size: int, cost: CostModel, edges: int, ratios: list[float]
) -> pd.DataFrame:
    """SFETEC's simulated time saving against SplitFed as the client-edge link goes from ``ratios`` x the WAN's."""
    rows = []
    for ratio in ratios:
        timed = round_seconds(
            final, spec, steps, batch_size, dataclasses.replace(cost, edge_bandwidth=ratio * cost.wan_bandwidth), edges
        )
        saving = claims(final, timed)["time_saving_vs_splitfed"]
        rows.append({"edge / WAN bandwidth": ratio, "time saving vs SplitFed (%)": float(np.mean(saving))})
    return pd.DataFrame(rows)


# ----- figures and tables ------------------------------------------------------------------------
def accuracy_curves(curves: pd.DataFrame) -> plt.Figure:
    """Test accuracy against rounds per method (mean over seeds, band min to max)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for m in METHODS:
        accuracy_band(ax, curves[curves.method == m], None, COLOURS[m], LABELS[m])
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def cost_bars(timed: pd.DataFrame) -> plt.Figure:
    """Client uplink per round and simulated seconds per round, per method (mean over seeds)."""
    g = timed.groupby("method").agg(up=("client_up", "mean"), sec=("seconds", "mean")).reindex(list(METHODS))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    colours = [COLOURS[m] for m in METHODS]
    axes[0].bar([LABELS[m] for m in METHODS], g.up / 1e3, color=colours)
    axes[0].set_ylabel("client uplink per round (kB)")
    axes[1].bar([LABELS[m] for m in METHODS], g.sec, color=colours)
    axes[1].set_ylabel("simulated seconds per round")
    fig.tight_layout()
    return fig


def sensitivity_figure(table: pd.DataFrame) -> plt.Figure:
    """SFETEC's simulated time saving against SplitFed over the client-edge bandwidth (zero line: no saving)."""
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    ax.plot(table["edge / WAN bandwidth"], table["time saving vs SplitFed (%)"], marker="o")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("client-edge bandwidth / client-cloud bandwidth")
    ax.set_ylabel("time saved vs SplitFed (%)")
    fig.tight_layout()
    return fig


def summary_table(timed: pd.DataFrame) -> pd.DataFrame:
    """Accuracy (mean ± sd), bytes per client and round, and simulated seconds per round, per method."""
    rows = []
    for m in METHODS:
        r = timed[timed.method == m]
        sd = r.budget_accuracy.std(ddof=1) if len(r) > 1 else 0.0
        rows.append(
            {
                "method": LABELS[m],
                "accuracy (%)": f"{r.budget_accuracy.mean():.1f} ± {sd:.1f}",
                "client up (kB/round)": round(r.client_up.mean() / 1e3, 1),
                "client down (kB/round)": round(r.client_down.mean() / 1e3, 1),
                "edge-cloud (kB/round)": round(r.cloud.mean() / 1e3, 1),
                "simulated s/round": round(r.seconds.mean(), 3),
                "seeds": len(r),
            }
        )
    return pd.DataFrame(rows)
