"""The FedLUAR chapter: FedAvg, FedLUAR at several recycling depths, its ablations and top-k at equal uplink.

:class:`Params` holds the chapter's parameters, :func:`run` runs the
comparison (one :class:`FedLuarRun` per method, depth and seed, each through
:func:`run_one` into a :class:`FedLuarRecord`) and returns the
:class:`Results`; :func:`claims` gives the ledger's evidence.  The figures
and the table are the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.fedluar import FedLUAR, TopKSparsified, uplink_ratio
from repro.federated.figures import accuracy_band, within_margin_figure
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, execute, records_frame
from repro.federated.task import TaskSpec, available_train, build_model, majority_accuracy
from repro.models import count_parameters
from repro.params import ChapterParams, require
from repro.registry import load_registry
from repro.results import Evidence

METHODS = ("fedavg", "fedluar", "drop", "uniform", "topk")
CHAPTER = "fedluar"


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``fedluar.yaml``)."""

    dataset: str
    n_train: int
    num_clients: int
    active_clients: int
    alpha: float
    hidden: tuple[int, ...]
    tau: int
    rounds: int
    batch_size: int
    lr: float
    momentum: float
    deltas: tuple[int, ...]
    delta: int
    seeds: tuple[int, ...]
    eval_every: int
    engine: str
    device: str
    workers: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(self.delta in self.deltas, self, ("delta", "deltas"), "delta must be one of deltas")
        require(self.active_clients <= self.num_clients, self, ("active_clients", "num_clients"),
                "active_clients must not exceed num_clients")
        kernels = len(self.hidden) + 1
        require(max(self.deltas) <= kernels, self, ("deltas", "hidden"),
                f"the MLP has {kernels} kernel layers (len(hidden) + 1); no delta may recycle more")
        require(available_train(self.dataset, self.n_train) >= 2 * self.num_clients, self,
                ("dataset", "n_train", "num_clients"), "the split needs at least 2 training samples per client")

    def spec(self) -> TaskSpec:
        """The task: the dataset split over the clients by a Dirichlet label skew."""
        return TaskSpec(dataset=self.dataset, num_clients=self.num_clients, scheme="dirichlet", alpha=self.alpha,
                        hidden=self.hidden, model="mlp", n_train=self.n_train, data_seed=0)

    def sgd(self) -> LocalSGD:
        """The clients' local SGD."""
        return LocalSGD(batch_size=self.batch_size, lr=self.lr, momentum=self.momentum)


@dataclass(frozen=True, kw_only=True)
class FedLuarRun(FederatedRun):
    """One run of the comparison; the shared fields are :class:`FederatedRun`'s.

    ``method`` is ``fedavg``, ``fedluar`` (recycle, score selection), ``drop``
    (score selection, updates dropped), ``uniform`` (recycle, uniform selection)
    or ``topk`` (top-k sparsified updates with error feedback, keeping fraction ``keep``).

    Attributes
    ----------
    delta
        Layers recycled (or dropped) per round.
    keep
        Fraction of each update kept by ``topk``.
    """

    delta: int = 0
    keep: float = 1.0

    methods: ClassVar[tuple[str, ...]] = METHODS


@dataclass(frozen=True, kw_only=True)
class FedLuarRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields (``curve``: round, accuracy, uplink so far) and these.

    Attributes
    ----------
    delta
        Recycled layers per round (0 for FedAvg).
    uplink
        Uplink as a fraction of FedAvg's.
    recycled
        For the recycling runs, round -> the layers recycled in it (empty otherwise).
    """

    delta: int = 0
    uplink: float = 1.0
    recycled: dict[int, list[str]] = field(default_factory=dict)


def run_one(job: FedLuarRun) -> FedLuarRecord:
    """Run ``job``; the curve's uplink so far is in units of one FedAvg round's upload."""
    local, k = job.local, job.clients_per_round
    if job.method == "topk":
        strat: FedLUAR | TopKSparsified = TopKSparsified(k, local, seed=job.seed, keep=job.keep)
    else:
        d = 0 if job.method == "fedavg" else job.delta
        strat = FedLUAR(k, local, seed=job.seed, delta=d, mode="drop" if job.method == "drop" else "recycle",
                        selection="uniform" if job.method == "uniform" else "score")
    spec = job.spec
    full = sum(count_parameters(build_model(spec, seed=0)).values())
    hist = job.simulate(strat, make_client_app(spec, job.run_config))
    cum = np.cumsum(strat.uplink) / (k * full)
    curve = tuple((float(r), float(a), float(cum[r - 1]) if r else 0.0) for r, a in zip(hist.rounds, hist.accuracy))
    return FedLuarRecord(method=job.method, seed=job.seed, accuracy=hist.final_accuracy, curve=curve,
                         delta=0 if job.method == "fedavg" else job.delta, uplink=uplink_ratio(strat, full, job.rounds),
                         recycled=dict(getattr(strat, "recycled", None) or {}))


def jobs(params: Params, methods: tuple[str, ...], keep: dict[int, float] | None = None) -> list[FedLuarRun]:
    """The runs of ``methods``: FedAvg once, FedLUAR at every ``deltas``, the others at ``delta``.

    ``keep`` gives top-k's kept fraction per seed (FedLUAR's measured uplink at ``delta``).
    """
    spec, sgd = params.spec(), params.sgd()
    depths = {"fedavg": (0,), "fedluar": params.deltas}
    return [FedLuarRun(method=m, spec=spec, sgd=sgd, tau=params.tau, rounds=params.rounds, seed=s,
                       active_clients=params.active_clients, eval_every=params.eval_every, engine=params.engine,
                       device=params.device, delta=d, keep=(keep or {}).get(s, 1.0))
            for m in methods for d in depths.get(m, (params.delta,)) for s in params.seeds]


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the chapter's comparison produced.

    Attributes
    ----------
    final
        One row per run: ``method, delta, seed, accuracy, uplink``.
    curves
        Accuracy and uplink so far (in FedAvg rounds' worth of uploads) at each evaluation, every run.
    recycled
        ``(delta, seed) -> round -> layers`` of the FedLUAR runs.
    delta
        The depth the ablations, top-k and the claims use.
    trivial
        Test accuracy of always predicting the majority class (percent): the task's trivial level.
    sizes
        Parameters per layer of the clients' model.
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    recycled: dict[tuple[int, int], dict[int, list[str]]]
    delta: int
    trivial: float
    sizes: dict[str, int]


def run(params: Params) -> Results:
    """FedAvg, FedLUAR at every ``deltas``, and at ``delta`` the drop and uniform ablations and top-k.

    The top-k runs come last: each keeps the fraction of the update that the
    FedLUAR run with the same seed at ``delta`` actually uploaded, so the two
    are compared at equal uplink.
    """
    w = params.workers
    done = execute(run_one, jobs(params, ("fedavg", "fedluar", "drop", "uniform")), w,
                   desc="FedAvg, FedLUAR and ablations")
    keep = {r.seed: r.uplink for r in done if r.method == "fedluar" and r.delta == params.delta}
    done += execute(run_one, jobs(params, ("topk",), keep), w, desc="top-k at FedLUAR's uplink")
    spec = params.spec()
    return Results(final=records_frame(done, ("method", "delta", "seed", "accuracy", "uplink")),
                   curves=curves_frame(done, ("method", "delta", "seed"), ("round", "accuracy", "uplink")),
                   recycled={(r.delta, r.seed): r.recycled for r in done if r.method == "fedluar"},
                   delta=params.delta, trivial=majority_accuracy(spec),
                   sizes=count_parameters(build_model(spec, seed=0)))


def accuracy_margin() -> float:
    """The accuracy margin of "nearly the same accuracy": the null value of ``acc_drop_vs_fedavg`` (registry)."""
    return load_registry().get(CHAPTER).claim("acc_drop_vs_fedavg").null_value


def _pick(final: pd.DataFrame, method: str, delta: int) -> pd.DataFrame:
    d = 0 if method == "fedavg" else delta
    return final[(final.method == method) & (final.delta == d)].set_index("seed")


def uplink_within_margin(results: Results, margin: float) -> list[float]:
    """Per seed, FedLUAR's uplink in percent of FedAvg's, or 100 when it lost more than ``margin`` points."""
    avg, luar = _pick(results.final, "fedavg", results.delta), _pick(results.final, "fedluar", results.delta)
    return [100.0 * luar.uplink[s] if avg.accuracy[s] - luar.accuracy[s] <= margin else 100.0
            for s in sorted(avg.index)]


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence at ``results.delta``, each with the compared arms' test accuracy per seed.

    ``uplink_cost_pct`` joins the uplink with accuracy: a seed whose FedLUAR accuracy is more than
    :func:`accuracy_margin` points below FedAvg's counts as 100% (no saving at an acceptable accuracy).
    """
    final, delta = results.final, results.delta
    avg, luar, drop, topk = (_pick(final, m, delta) for m in ("fedavg", "fedluar", "drop", "topk"))
    seeds = sorted(avg.index)

    def acc(frame: pd.DataFrame) -> list[float]:
        return [float(frame.accuracy[s]) for s in seeds]

    def evidence(values: list[float], **arms: pd.DataFrame) -> Evidence:
        return Evidence(values=values, arms={k: acc(v) for k, v in arms.items()}, trivial=results.trivial)

    return {
        "uplink_cost_pct": evidence(uplink_within_margin(results, accuracy_margin()), fedavg=avg, fedluar=luar),
        "acc_drop_vs_fedavg": evidence([avg.accuracy[s] - luar.accuracy[s] for s in seeds], fedavg=avg, fedluar=luar),
        "acc_gain_vs_drop": evidence([luar.accuracy[s] - drop.accuracy[s] for s in seeds], fedluar=luar, drop=drop),
        "acc_gain_vs_topk": evidence([luar.accuracy[s] - topk.accuracy[s] for s in seeds], fedluar=luar, topk=topk),
    }


def margin_figure(results: Results) -> Figure:
    """``uplink_cost_pct`` against the accuracy margin it is computed with (the margins ``acc_drop_vs_fedavg`` sweeps)."""
    chapter = load_registry().get(CHAPTER)
    margins = chapter.claim("acc_drop_vs_fedavg").null_sweep
    sweep = pd.DataFrame([{"margin": m, "value": v} for m in margins for v in uplink_within_margin(results, m)])
    return within_margin_figure(sweep, chosen=accuracy_margin(), ylabel="FedLUAR's uplink (% of FedAvg's)",
                                xlabel="accuracy margin of 'nearly the same accuracy' (points)")


# ----- figures and table ------------------------------------------------------------------
LABELS = {
    "fedavg": "FedAvg",
    "fedluar": "FedLUAR (recycle)",
    "drop": "drop (same selection, update skipped)",
    "uniform": "recycle, uniform selection",
    "topk": "top-k sparsified updates (error feedback)",
}
_COLOURS = {"fedavg": "tab:gray", "fedluar": "tab:blue", "drop": "tab:red", "uniform": "tab:purple", "topk": "tab:orange"}


def mean_sd(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Accuracy mean and sd, uplink mean and seed count per group of ``by``."""
    return (
        df.groupby(by, sort=True)
        .agg(acc=("accuracy", "mean"), acc_sd=("accuracy", "std"), up=("uplink", "mean"), seeds=("seed", "count"))
        .reset_index()
    )


def accuracy_vs_uplink(results: Results) -> Figure:
    """Final accuracy against uplink cost (% of FedAvg), mean ± sd over seeds.

    FedLUAR is drawn as a line over its ``delta`` values; FedAvg and, at
    ``results.delta``, the ablations and top-k are single points.
    """
    final, delta = results.final, results.delta
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    g = mean_sd(final, ["method", "delta"]).fillna({"acc_sd": 0.0})
    luar = g[g.method == "fedluar"].sort_values("up")
    ax.errorbar(
        100 * luar.up, luar.acc, yerr=luar.acc_sd, marker="o", color=_COLOURS["fedluar"], label=LABELS["fedluar"], capsize=3
    )
    for _, r in luar.iterrows():
        ax.annotate(f"δ={int(r.delta)}", (100 * r.up, r.acc), textcoords="offset points", xytext=(4, 6), fontsize=8)
    for m, marker in (("fedavg", "s"), ("drop", "v"), ("uniform", "D"), ("topk", "^")):
        sel = g[(g.method == m) & ((g.delta == delta) | (m == "fedavg"))]
        ax.errorbar(
            100 * sel.up,
            sel.acc,
            yerr=sel.acc_sd,
            marker=marker,
            ls="none",
            color=_COLOURS[m],
            label=LABELS[m] + ("" if m == "fedavg" else f", δ={delta}"),
            capsize=3,
            ms=7,
        )
    ax.set_xlabel("uplink communication (% of FedAvg's)")
    ax.set_ylabel("final test accuracy (%)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def accuracy_curves(results: Results) -> Figure:
    """Test accuracy against uplink spent so far (in FedAvg rounds), mean over seeds, at ``results.delta``."""
    curves, delta = results.curves, results.delta
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for m in ("fedavg", "fedluar", "drop", "uniform", "topk"):
        sel = curves[(curves.method == m) & ((curves.delta == delta) | (m == "fedavg"))]
        accuracy_band(ax, sel, "uplink", _COLOURS[m], LABELS[m])
    ax.set_xlabel("uplink so far (rounds of FedAvg's upload)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def recycle_frequency(results: Results) -> Figure:
    """Share of rounds in which each kernel layer was recycled (the first seed's FedLUAR run at ``results.delta``)."""
    recycled, sizes = results.recycled[(results.delta, first_seed(results))], results.sizes
    rounds = sorted(recycled)
    kernels = [k for k in sizes if any(k in recycled[r] for r in rounds) or k.endswith("weight")]
    share = [np.mean([k in recycled[r] for r in rounds]) for k in kernels]
    fig, ax = plt.subplots(figsize=(6.4, 0.4 * len(kernels) + 1.2))
    ax.barh([f"{k} ({sizes[k]:,})" for k in kernels], share, color=_COLOURS["fedluar"])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of rounds recycled")
    fig.tight_layout()
    return fig


def first_seed(results: Results) -> int:
    """The smallest seed of the comparison."""
    return int(results.final.seed.min())


def largest_layer_recycled(results: Results) -> tuple[str, float, float]:
    """The largest kernel layer, its share of the parameters and of the rounds it was recycled (first seed)."""
    kernels = [k for k in results.sizes if k.endswith("weight")]
    largest = max(kernels, key=results.sizes.__getitem__)
    rec = results.recycled[(results.delta, first_seed(results))]
    share = sum(largest in rec[rd] for rd in rec) / max(1, len(rec))
    return largest, results.sizes[largest] / sum(results.sizes.values()), share


def summary_table(results: Results) -> pd.DataFrame:
    """Final accuracy and uplink cost per method and delta, mean ± sd over seeds."""
    final = results.final
    g = mean_sd(final, ["method", "delta"]).fillna({"acc_sd": 0.0})
    order = {m: i for i, m in enumerate(LABELS)}
    g = g.sort_values(["method", "delta"], key=lambda c: c.map(order) if c.name == "method" else c)
    return pd.DataFrame(
        {
            "method": [LABELS[m] for m in g.method],
            "δ": ["–" if m == "fedavg" else str(int(d)) for m, d in zip(g.method, g.delta)],
            "final accuracy (%)": [f"{a:.1f} ± {s:.1f}" for a, s in zip(g.acc, g.acc_sd)],
            "uplink (% of FedAvg)": [f"{100 * u:.0f}" for u in g.up],
            "seeds": g.seeds.to_numpy(),
        }
    )
