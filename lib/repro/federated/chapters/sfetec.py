"""The SFETEC chapter: base models on clients, core models on edges, against FedAvg, HierFAVG and SplitFed.

:class:`Params` holds the chapter's parameters.  :func:`run` first tunes
every method's learning rate over one grid on a tuning seed, choosing on
training samples no client holds (:mod:`repro.federated.tuning`, never the
test set), then runs every method at its chosen rate for every seed (one
:class:`SfetecRun` each, through :func:`run_one` into a
:class:`SfetecRecord`) and prices each run's round with the cost model; it
returns the :class:`Results`, and :func:`claims` the ledger's evidence.
The figures and tables are the chapter's own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import History, RunSummary
from repro.federated.figures import accuracy_band, mean_sd
from repro.federated.hierfavg import HierFAVG
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, execute, records_frame
from repro.federated.seed_tuning import tune_on_seed
from repro.federated.seed_tuning import tuning_summary as tuning_summary_table
from repro.federated.sfetec import (
    CostModel,
    RoundTraffic,
    SplitHierarchy,
    SplitSchedule,
    run_split_training,
    training_flops,
)
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, available_train, build_model, majority_accuracy, planted_clusters
from repro.federated.tiers import FLOAT_BYTES, linear_layers
from repro.federated.tuning import Choice, chosen, model_validation_accuracy, validation_accuracy
from repro.models import set_weights
from repro.params import ChapterParams, require
from repro.results import Evidence

METHODS = ("fedavg", "hierfavg", "splitfed", "sfetec")
LABELS = {"fedavg": "FedAvg", "hierfavg": "HierFAVG", "splitfed": "SplitFed", "sfetec": "SFETEC"}
COLOURS = {"fedavg": "tab:gray", "hierfavg": "tab:orange", "splitfed": "tab:green", "sfetec": "tab:blue"}
CUT = 2
"""The MLP is cut after its first linear layer and ReLU (modules ``fc0, relu0``): the base."""
TUNING_METRIC = "validation_accuracy"
"""What every method's learning rate is chosen on: the final model's accuracy on the held-out training samples."""
RECORD_COLUMNS = ("method", "setting", "seed", "accuracy", "budget_accuracy", TUNING_METRIC, "client_up",
                  "client_down", "cloud")


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``sfetec.yaml``)."""

    edges: int
    clients_per_edge: int
    samples_per_client: int
    alpha: float
    hidden: tuple[int, ...]
    steps: int
    rounds: int
    batch_size: int
    lrs: tuple[float, ...]
    validation_share: float
    tuning_seed: int
    cloud_every: int
    share_bases: bool
    client_gflops: float
    server_speedup: float
    wan_mbps: float
    edge_mbps: float
    backbone_mbps: float
    bandwidth_ratios: tuple[float, ...]
    seeds: tuple[int, ...]
    workers: int
    device: str
    eval_every: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        clients = self.edges * self.clients_per_edge
        dealt = int(available_train("digits", None) * (1.0 - self.validation_share))
        require(clients * self.samples_per_client <= dealt, self,
                ("edges", "clients_per_edge", "samples_per_client", "validation_share"),
                f"the clients would hold more samples than the {dealt} training samples left after the validation share")
        require(self.tuning_seed not in self.seeds, self, ("tuning_seed", "seeds"), "the tuning seed must not be a reported seed")
        require(self.cloud_every <= self.rounds, self, ("cloud_every", "rounds"),
                "the cloud must aggregate at least once within the rounds")

    def spec(self) -> TaskSpec:
        """Digits split over ``edges`` groups of clients, one label skew per group (a region-level skew)."""
        return TaskSpec(dataset="digits", num_clients=self.edges * self.clients_per_edge, scheme="cluster_skew",
                        alpha=self.alpha, hidden=self.hidden, cluster_sizes=(self.clients_per_edge,) * self.edges,
                        samples_per_client=self.samples_per_client, validation_share=self.validation_share)

    def cost(self) -> CostModel:
        """The cost model of the simulated wall-clock (speeds in FLOP/s, bandwidths in bytes/s)."""
        return CostModel(client_flops=self.client_gflops * 1e9, server_speedup=self.server_speedup,
                         wan_bandwidth=self.wan_mbps * 1e6, edge_bandwidth=self.edge_mbps * 1e6,
                         backbone_bandwidth=self.backbone_mbps * 1e6)


@dataclass(frozen=True, kw_only=True)
class SfetecRun(FederatedRun):
    """One run; the shared fields are :class:`FederatedRun`'s (``sgd`` plain SGD, ``tau`` the split steps per round).

    Attributes
    ----------
    cloud_every
        Edge rounds between cloud aggregations (HierFAVG, SFETEC).
    share_bases
        SFETEC also averages the bases across edges at the cloud.
    """

    cloud_every: int = 1
    share_bases: bool = True

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = {m: "sgd.lr" for m in METHODS}

    def edges(self) -> tuple[tuple[int, ...], ...]:
        """Partition ids per edge (the planted client groups)."""
        groups = planted_clusters(self.spec)
        return tuple(tuple(int(p) for p in np.flatnonzero(groups == g)) for g in sorted(set(groups)))

    def hierarchy(self) -> SplitHierarchy:
        """SplitFed's one server (a core copy per client) or SFETEC's edges."""
        if self.method == "splitfed":
            return SplitHierarchy.splitfed(self.spec.num_clients)
        return SplitHierarchy(edges=self.edges(), cloud_every=self.cloud_every, share_bases=self.share_bases)


@dataclass(frozen=True, kw_only=True)
class SfetecRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields and these.

    Attributes
    ----------
    validation_accuracy
        The final model's class-balanced accuracy on the held-out training samples (what tuning reads).
    client_up, client_down, cloud
        Mean bytes per round: per client up and down, and between the edges and the cloud.
    """

    validation_accuracy: float = float("nan")
    client_up: float = 0.0
    client_down: float = 0.0
    cloud: float = 0.0


def model_scalars(spec: TaskSpec) -> int:
    """Parameters of the whole model."""
    return sum(int(p.numel()) for p in build_model(spec, 0).parameters())


def model_bytes(spec: TaskSpec) -> int:
    """Bytes of the whole model (float32)."""
    return FLOAT_BYTES * model_scalars(spec)


def run_one(job: SfetecRun) -> SfetecRecord:
    """Run ``job``: FedAvg and HierFAVG on Flower's in-process engine, SplitFed and SFETEC in the split loop."""
    spec = job.spec
    if job.method in ("fedavg", "hierfavg"):
        k, local = spec.num_clients, job.local
        if job.method == "fedavg":
            strategy: SeededFedAvg = SeededFedAvg(k, local, seed=job.seed)
        else:
            edge_of = [0] * k
            for e, members in enumerate(job.edges()):
                for p in members:
                    edge_of[p] = e
            strategy = HierFAVG(k, local, edge_of, seed=job.seed, cloud_every=job.cloud_every)
        hist = job.simulate(strategy, make_client_app(spec, job.run_config))
        assert hist.final_arrays is not None
        size = float(model_bytes(spec))
        cloud = strategy.cloud_scalars * FLOAT_BYTES / job.rounds if isinstance(strategy, HierFAVG) else 0.0
        return SfetecRecord.of(job, RunSummary.of(hist), validation_accuracy=validation_accuracy(spec, hist.final_arrays),
                               client_up=size, client_down=size, cloud=cloud)
    schedule = SplitSchedule(rounds=job.rounds, steps=job.tau, batch_size=job.sgd.batch_size, lr=job.sgd.lr)
    split = run_split_training(spec, cut=CUT, hierarchy=job.hierarchy(), schedule=schedule, seed=job.seed,
                               eval_rounds=job.schedule()[1], device=job.device)
    model = build_model(spec, seed=0)
    set_weights(model, split.final)
    return SfetecRecord.of(job, RunSummary.of(History(rounds=split.rounds, accuracy=split.accuracy)),
                           validation_accuracy=model_validation_accuracy(spec, model),
                           client_up=float(np.mean([t.client_up for t in split.traffic])),
                           client_down=float(np.mean([t.client_down for t in split.traffic])),
                           cloud=float(np.mean([t.cloud for t in split.traffic])))


def job(params: Params, method: str, lr: float, seed: int) -> SfetecRun:
    """One run of ``method`` at learning rate ``lr``."""
    return SfetecRun(method=method, spec=params.spec(), sgd=LocalSGD(batch_size=params.batch_size, lr=lr, momentum=0.0),
                     tau=params.steps, rounds=params.rounds, seed=seed, eval_every=params.eval_every,
                     device=params.device, cloud_every=params.cloud_every, share_bases=params.share_bases,
                     progress=None if params.workers > 1 else f"{method} lr={lr:g} seed={seed}")


def tune(params: Params) -> tuple[tuple[Choice, ...], pd.DataFrame]:
    """Every method at every rate of ``lrs`` on the tuning seed; each keeps the best on the held-out samples.

    See :func:`repro.federated.seed_tuning.tune_on_seed` (a one-value grid runs nothing and chooses it).
    """
    return tune_on_seed(run_one, lambda m, lr: job(params, m, lr, params.tuning_seed), METHODS, params.lrs,
                        RECORD_COLUMNS, TUNING_METRIC, params.workers, desc="SFETEC tuning")


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the chapter's comparison produced.

    Attributes
    ----------
    final
        One row per reported run: :data:`RECORD_COLUMNS` and ``seconds`` (simulated seconds per round under the
        chapter's cost model).
    curves
        ``method, setting, seed, round, accuracy`` at every evaluation.
    choices, tuning
        The learning rate each method kept, and the tuning runs it was chosen from.
    sensitivity
        SFETEC's simulated time saving against SplitFed per client-edge / client-cloud bandwidth ratio.
    trivial
        Test accuracy of always predicting the majority class (percent): the task's trivial level.
    model_scalars
        Parameters of the whole model.
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    choices: tuple[Choice, ...]
    tuning: pd.DataFrame
    sensitivity: pd.DataFrame
    trivial: float
    model_scalars: int


def run(params: Params) -> Results:
    """Tune every method's rate on the tuning seed, then run every method at its rate for every seed."""
    choices, tuning = tune(params)
    lr = chosen(choices)
    done = execute(run_one, [job(params, m, lr[m], s) for s in params.seeds for m in METHODS], params.workers,
                   desc="SFETEC comparison")
    final = records_frame(done, RECORD_COLUMNS)
    spec = params.spec()
    return Results(final=round_seconds(final, params, params.cost()), curves=curves_frame(done, ("method", "setting", "seed")),
                   choices=choices, tuning=tuning, sensitivity=time_sensitivity(final, params),
                   trivial=majority_accuracy(spec), model_scalars=model_scalars(spec))


# ----- simulated wall-clock ------------------------------------------------------------------------
def round_seconds(final: pd.DataFrame, params: Params, cost: CostModel) -> pd.DataFrame:
    """``final`` with ``seconds``: every run's simulated seconds per round under ``cost``."""
    spec = params.spec()
    layers = linear_layers(build_model(spec, 0))
    base_flops = training_flops(layers[:1], params.batch_size)
    core_flops = training_flops(layers[1:], params.batch_size)
    size = model_bytes(spec)
    seconds = []
    for r in final.itertuples():
        if r.method in ("fedavg", "hierfavg"):
            seconds.append(cost.fedavg_round(size, base_flops + core_flops, params.steps,
                                             hierarchical=r.method == "hierfavg", cloud_bytes=r.cloud))
        else:
            traffic = RoundTraffic(client_up=r.client_up, client_down=r.client_down, cloud=r.cloud)
            per_server = spec.num_clients if r.method == "splitfed" else params.clients_per_edge
            seconds.append(cost.split_round(traffic, base_flops, core_flops, params.steps, per_server,
                                            at_edge=r.method == "sfetec"))
    return final.assign(seconds=seconds)


def per_seed(final: pd.DataFrame, column: str) -> dict[str, pd.Series]:
    """``column`` of every method, indexed by seed."""
    return {m: final[final.method == m].set_index("seed")[column] for m in METHODS}


def saving(final: pd.DataFrame, column: str, method: str, base: str) -> float:
    """The percent of ``base``'s ``column`` that ``method`` saves: one value, the same on every seed.

    Bytes and simulated seconds follow from the sizes of the model, the batches and the activations, not from
    the seed.

    Raises
    ------
    ValueError
        If the saving differs between seeds (then it is not a deterministic quantity).
    """
    values = per_seed(final, column)
    per = [100.0 * (1.0 - values[method][s] / values[base][s]) for s in sorted(values[base].index)]
    if not np.allclose(per, per[0], rtol=0.0, atol=1e-9):
        raise ValueError(f"{column} saving of {method} over {base} differs between seeds: {per}")
    return float(per[0])


def time_sensitivity(final: pd.DataFrame, params: Params) -> pd.DataFrame:
    """SFETEC's simulated time saving against SplitFed as the client-edge link goes from each ratio x the WAN's."""
    cost = params.cost()
    rows = []
    for ratio in params.bandwidth_ratios:
        timed = round_seconds(final, params, dataclasses.replace(cost, edge_bandwidth=ratio * cost.wan_bandwidth))
        rows.append({"edge / WAN bandwidth": ratio,
                     "time saving vs SplitFed (%)": saving(timed, "seconds", "sfetec", "splitfed")})
    return pd.DataFrame(rows)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence: the accuracy gap per seed (with both arms), the two deterministic savings once."""
    acc = per_seed(results.final, "budget_accuracy")
    seeds = sorted(acc["sfetec"].index)
    return {
        "acc_gap_vs_fedavg": Evidence(values=[float(acc["fedavg"][s] - acc["sfetec"][s]) for s in seeds],
                                      arms={m: [float(acc[m][s]) for s in seeds] for m in ("fedavg", "sfetec")},
                                      trivial=results.trivial),
        "uplink_saving_vs_fedavg": [saving(results.final, "client_up", "sfetec", "fedavg")],
        "time_saving_vs_splitfed": [saving(results.final, "seconds", "sfetec", "splitfed")],
    }


def flip_ratio(results: Results) -> float | None:
    """The smallest swept bandwidth ratio at which SFETEC saves time against SplitFed (``None``: none does)."""
    table = results.sensitivity
    positive = table[table["time saving vs SplitFed (%)"] > 0]["edge / WAN bandwidth"]
    return float(positive.min()) if len(positive) else None


# ----- figures and tables ------------------------------------------------------------------------
def accuracy_curves(results: Results) -> Figure:
    """Test accuracy against rounds per method at its chosen rate (mean over seeds, band min to max)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for m in METHODS:
        accuracy_band(ax, results.curves[results.curves.method == m], None, COLOURS[m], LABELS[m])
    ax.axhline(results.trivial, color="k", lw=0.8, ls=":", label="majority class")
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def cost_bars(results: Results) -> Figure:
    """Client uplink per round and simulated seconds per round, per method (mean over seeds)."""
    g = results.final.groupby("method").agg(up=("client_up", "mean"), sec=("seconds", "mean")).reindex(list(METHODS))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    colours = [COLOURS[m] for m in METHODS]
    axes[0].bar([LABELS[m] for m in METHODS], g.up / 1e3, color=colours)
    axes[0].set_ylabel("client uplink per round (kB)")
    axes[1].bar([LABELS[m] for m in METHODS], g.sec, color=colours)
    axes[1].set_ylabel("simulated seconds per round")
    fig.tight_layout()
    return fig


def sensitivity_figure(results: Results) -> Figure:
    """SFETEC's simulated time saving against SplitFed over the client-edge bandwidth (zero line: no saving)."""
    table = results.sensitivity
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    ax.plot(table["edge / WAN bandwidth"], table["time saving vs SplitFed (%)"], marker="o")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("client-edge bandwidth / client-cloud bandwidth")
    ax.set_ylabel("time saved vs SplitFed (%)")
    fig.tight_layout()
    return fig


def tuning_summary(results: Results) -> pd.DataFrame:
    """Per method: validation and test accuracy at every rate on the tuning seed, and the rate kept."""
    return tuning_summary_table(results.tuning, results.choices, LABELS, TUNING_METRIC)


def summary_table(results: Results) -> pd.DataFrame:
    """Accuracy (mean ± sd), bytes per client and round, and simulated seconds per round, per method."""
    lr = chosen(results.choices)
    rows = []
    for m in METHODS:
        r = results.final[results.final.method == m]
        rows.append({
            "method": LABELS[m],
            "lr": f"{lr[m]:g}",
            "accuracy (%)": mean_sd(r.budget_accuracy),
            "client up (kB/round)": round(r.client_up.mean() / 1e3, 1),
            "client down (kB/round)": round(r.client_down.mean() / 1e3, 1),
            "edge-cloud (kB/round)": round(r.cloud.mean() / 1e3, 1),
            "simulated s/round": round(r.seconds.mean(), 3),
            "seeds": len(r),
        })
    return pd.DataFrame(rows)
