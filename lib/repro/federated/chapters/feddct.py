"""The FedDCT chapter: a large model divided into co-trained sub-models across clusters of weak clients.

:class:`DctRun` is one seeded run at one learning rate, :func:`run`
executes it and returns a :class:`RunRecord`, :func:`sweep` runs every
method, learning rate and seed, :func:`tuning` picks each method's best
learning rate (:mod:`repro.federated.tuning`, the same grid for every
method), :func:`claims` turns the tuned records into the ledger's per-seed values, :func:`memory_table`
gives each method's per-device memory; the figures and tables are the
chapter's own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import RunSummary, central_evaluator, eval_schedule, initial_arrays, run_federated
from repro.federated.feddct import (
    FedDCT,
    build_ensemble,
    ensemble_arrays,
    ensemble_evaluator,
    make_feddct_client_app,
    sub_hidden,
)
from repro.federated.figures import accuracy_band
from repro.federated.regularised import make_regularised_client_app
from repro.federated.runs import setting_sweep_tables
from repro.federated.sfetec import SplitHierarchy, run_split_training
from repro.federated.split import split_sequential
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, build_model
from repro.federated.tiers import linear_layers, measure_step_memory, step_memory
from repro.federated.tuning import Choice, best_on_test, chosen, keep_best
from repro.parallel import parallel_map

METHODS = ("fedavg_large", "fedavg_small", "fedprox_large", "splitfed_large", "clustered_large", "feddct")
LABELS = {"fedavg_large": "FedAvg, large model", "fedavg_small": "FedAvg, one sub-model",
          "fedprox_large": "FedProx, large model", "splitfed_large": "SplitFed, large model",
          "clustered_large": "large model, FedDCT's cluster schedule (ablation)", "feddct": "FedDCT"}
COLOURS = {"fedavg_large": "tab:gray", "fedavg_small": "tab:brown", "fedprox_large": "tab:orange",
           "splitfed_large": "tab:green", "clustered_large": "tab:purple", "feddct": "tab:blue"}
CUT = 2
"""SplitFed's cut: after the first linear layer and its ReLU (the client keeps ``fc0``), as the spec asks."""
TARGET_SHARE = 0.95
"""Rounds to target count the rounds until a method reaches this share of FedAvg-large's best accuracy."""


@dataclass(frozen=True)
class DctRun:
    """One run; field names are the chapter's parameters.

    Attributes
    ----------
    method
        One of :data:`METHODS`.
    seed, lr
        Run seed and the SGD learning rate (no momentum, as SplitFed's loop).
    spec
        The task; ``spec.hidden`` are the large model's widths.
    split_factor
        FedDCT's sub-models ``S`` (and clients per cluster).
    steps, rounds, batch_size
        Local steps per client and round, rounds, batch.
    mu
        FedProx's proximal weight.
    cot_final, cot_warmup
        FedDCT's co-training weight and its warm-up in rounds.
    eval_every
        Evaluation period.
    progress
        Label of a per-round progress bar (``None``: none).
    device
        Where the clients (and SplitFed's split loop) train: ``cpu``, ``cuda`` or ``auto``.
    """

    method: str
    seed: int
    lr: float
    spec: TaskSpec
    split_factor: int
    steps: int
    rounds: int
    batch_size: int
    mu: float
    cot_final: float
    cot_warmup: int
    eval_every: int
    progress: str | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"parameter 'method': must be one of {METHODS}, got {self.method!r}")
        if self.spec.num_clients % self.split_factor:
            raise ValueError(f"num_clients={self.spec.num_clients} must be a multiple of split_factor={self.split_factor}")

    def small_spec(self) -> TaskSpec:
        """The task with one sub-model's widths (``hidden / sqrt(S)``)."""
        return dataclasses.replace(self.spec, hidden=sub_hidden(self.spec.hidden, self.split_factor))


@dataclass(frozen=True)
class RunRecord:
    """What one run produced.

    Attributes
    ----------
    method, seed, lr
        Which run.
    accuracy, budget_accuracy
        Final test accuracy and the mean of the last three evaluations (percent).
    curve
        ``(round, accuracy)`` at every evaluation.
    """

    method: str
    seed: int
    lr: float
    accuracy: float
    budget_accuracy: float
    curve: tuple[tuple[int, float], ...]


def run(job: DctRun) -> RunRecord:
    """Run ``job``: SplitFed in the split loop, every other method on Flower's in-process engine; all clients every round."""
    sched = eval_schedule(job.rounds, job.eval_every)
    n, local = job.spec.num_clients, LocalSGD(job.batch_size, job.lr, 0.0).config(job.steps)
    cfg = {"seed": job.seed, "device": job.device}
    if job.method == "splitfed_large":
        split = run_split_training(job.spec, CUT, SplitHierarchy.splitfed(n), job.rounds, job.steps, job.batch_size,
                                   job.lr, job.seed, sched, device=job.device)
        acc = split.accuracy
        return RunRecord(job.method, job.seed, job.lr, acc[-1], float(np.mean(acc[-3:])), tuple(zip(split.rounds, acc)))
    if job.method in ("feddct", "clustered_large"):
        s = job.split_factor if job.method == "feddct" else 1
        strategy: SeededFedAvg = FedDCT(n, local, s, seed=job.seed, cot_final=job.cot_final, cot_warmup=job.cot_warmup,
                                        cluster_size=job.split_factor)
        app, init, evaluator = (make_feddct_client_app(job.spec, s, cfg), ensemble_arrays(job.spec, s, job.seed),
                                ensemble_evaluator(job.spec, s))
    else:
        spec = job.small_spec() if job.method == "fedavg_small" else job.spec
        if job.method == "fedprox_large":
            strategy, app = SeededFedProx(n, local, seed=job.seed, mu=job.mu), make_regularised_client_app(spec, cfg)
        else:
            strategy, app = SeededFedAvg(n, local, seed=job.seed), make_client_app(spec, cfg)
        init, evaluator = initial_arrays(spec, job.seed), central_evaluator(spec)
    hist = run_federated(strategy, app, n, init, job.rounds, evaluator, sched, progress=job.progress)
    s = RunSummary.of(hist)
    return RunRecord(job.method, job.seed, job.lr, s.accuracy, s.budget_accuracy, s.curve)


def sweep(spec: TaskSpec, split_factor: int, steps: int, rounds: int, batch_size: int, lrs: list[float], mu: float,
          cot_final: float, cot_warmup: int, seeds: list[int], eval_every: int, workers: int = 1,
          device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method at every learning rate of ``lrs`` for every seed.

    Returns
    -------
    final : DataFrame
        One row per run: ``method, seed, setting, accuracy, budget_accuracy`` (``setting`` is the learning
        rate, the tuned value :mod:`repro.federated.tuning` reads).
    curves : DataFrame
        ``method, seed, setting, round, accuracy``.
    """
    jobs = [DctRun(m, s, lr, spec, split_factor, steps, rounds, batch_size, mu, cot_final, cot_warmup, eval_every,
                   progress=None if workers > 1 else f"{m} lr={lr} seed={s}", device=device)
            for s in seeds for lr in lrs for m in METHODS]
    return setting_sweep_tables(parallel_map(run, jobs, workers))


tuning = best_on_test
"""Each method's learning rate with the best mean accuracy at the budget over seeds (the split leaves no
training sample unused to validate on, so it reads the test accuracy the claims compare, for every method alike)."""


def rounds_to_target(curves: pd.DataFrame, rounds: int, eval_every: int) -> pd.DataFrame:
    """Per method and seed, the first evaluated round reaching :data:`TARGET_SHARE` of FedAvg-large's best accuracy.

    A run that never gets there is counted at ``rounds + eval_every`` (censored; the table says so).
    """
    rows = []
    for seed, g in curves.groupby("seed"):
        target = TARGET_SHARE * g[g.method == "fedavg_large"].accuracy.max()
        for m, h in g.groupby("method"):
            hit = h[h.accuracy >= target]["round"]
            rows.append({"method": m, "seed": seed, "target": target, "reached": not hit.empty,
                         "rounds": int(hit.min()) if not hit.empty else rounds + eval_every})
    return pd.DataFrame(rows)


def per_device_memory(spec: TaskSpec, split_factor: int, batch_size: int) -> pd.DataFrame:
    """Peak bytes of one local SGD step on one device (plain SGD), per method, modelled and counted by torch.

    The large model and one sub-model are counted whole; SplitFed's client
    holds only the layers before the cut.  The modelled column is
    :func:`repro.federated.tiers.step_memory`; the measured column counts the
    tensors of a real step (:func:`repro.federated.tiers.measure_step_memory`),
    left empty for SplitFed's client, whose step ends at the cut (torch's
    count would add a loss on the cut activations that the server computes).
    """
    large = build_model(spec, seed=0)
    sub = build_ensemble(spec, split_factor, seed=0).members[0]
    base, _ = split_sequential(large, CUT)
    x = torch.zeros(batch_size, linear_layers(large)[0].fan_in)
    y = torch.zeros(batch_size, dtype=torch.long)
    devices = {"large model (FedAvg, FedProx)": large, f"one of {split_factor} sub-models (FedDCT, FedAvg small)": sub,
               "SplitFed client (layers before the cut)": base}
    rows = []
    for name, model in devices.items():
        layers = linear_layers(model)
        modelled = step_memory(layers, len(layers), batch_size, optimizer_slots=0).trained
        measured = (measure_step_memory(model, [k for k, _ in model.named_parameters()], x, y, momentum=0.0)
                    if model is not base else float("nan"))
        rows.append({"device": name, "parameters": sum(lay.parameters for lay in layers),
                     "step memory, model (kB)": modelled / 1e3, "step memory, torch (kB)": measured / 1e3})
    table = pd.DataFrame(rows)
    return table.assign(**{"large / device": table["step memory, model (kB)"].iloc[0] / table["step memory, model (kB)"]})


def claims(final: pd.DataFrame, curves: pd.DataFrame, memory: pd.DataFrame, rounds: int,
           eval_every: int) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims, every method at its own best learning rate."""
    best = tuning(final)
    sel, cur = keep_best(final, best), keep_best(curves, best)
    acc = {m: sel[sel.method == m].set_index("seed").budget_accuracy for m in METHODS}
    seeds = sorted(acc["feddct"].index)
    hit = rounds_to_target(cur, rounds, eval_every)
    needed = {m: hit[hit.method == m].set_index("seed")["rounds"] for m in ("fedavg_large", "feddct")}
    reduction = float(memory["large / device"].iloc[1])
    d = acc["feddct"]
    return {
        "gain_vs_fedavg_large": [float(d[s] - acc["fedavg_large"][s]) for s in seeds],
        "gain_vs_fedavg_small": [float(d[s] - acc["fedavg_small"][s]) for s in seeds],
        "gain_vs_splitfed": [float(d[s] - acc["splitfed_large"][s]) for s in seeds],
        "gain_vs_fedprox": [float(d[s] - acc["fedprox_large"][s]) for s in seeds],
        "rounds_saved_vs_fedavg_large": [float(needed["fedavg_large"][s] - needed["feddct"][s]) for s in seeds],
        "memory_reduction": [reduction for _ in seeds],
    }


# ----- figures and tables ----------------------------------------------------------------------
def accuracy_curves(curves: pd.DataFrame, best: tuple[Choice, ...]) -> plt.Figure:
    """Test accuracy against rounds per method at its chosen learning rate (mean over seeds, band min to max)."""
    fig, ax = plt.subplots(figsize=(7.4, 4.0))
    sel, lr = keep_best(curves, best), chosen(best)
    for m in METHODS:
        accuracy_band(ax, sel[sel.method == m], None, COLOURS[m], f"{LABELS[m]} (lr {lr[m]:g})")
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def memory_accuracy(final: pd.DataFrame, memory: pd.DataFrame, best: tuple[Choice, ...]) -> plt.Figure:
    """Accuracy at the budget against per-device step memory, per method (error bar = sd over seeds).

    Methods on the same device are drawn side by side (small horizontal offsets) with their own markers.
    """
    device_of = {"fedavg_large": 0, "fedprox_large": 0, "clustered_large": 0, "fedavg_small": 1, "feddct": 1,
                 "splitfed_large": 2}
    markers = {"fedavg_large": "o", "fedprox_large": "s", "clustered_large": "D", "fedavg_small": "v", "feddct": "*",
               "splitfed_large": "^"}
    sel = keep_best(final, best)
    kb = memory["step memory, model (kB)"]
    fig, ax = plt.subplots(figsize=(8.6, 3.8))
    for m in METHODS:
        vals = sel[sel.method == m].budget_accuracy
        peers = [p for p in METHODS if device_of[p] == device_of[m]]
        x = kb.iloc[device_of[m]] * (1 + 0.04 * (peers.index(m) - (len(peers) - 1) / 2))
        ax.errorbar(x, vals.mean(), yerr=vals.std(ddof=1) if len(vals) > 1 else 0.0, fmt=markers[m], ms=8,
                    color=COLOURS[m], capsize=3, label=LABELS[m])
    ax.set_xlim(0, 1.15 * kb.max())
    ax.set_xlabel("per-device memory of one local step (kB, model)")
    ax.set_ylabel("test accuracy at the budget (%)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def summary_table(final: pd.DataFrame, curves: pd.DataFrame, rounds: int, eval_every: int) -> pd.DataFrame:
    """Per method: chosen learning rate, accuracy (mean ± sd), rounds to the target (how many seeds reached it)."""
    best = tuning(final)
    sel, lr = keep_best(final, best), chosen(best)
    hit = rounds_to_target(keep_best(curves, best), rounds, eval_every)
    rows = []
    for m in METHODS:
        r, h = sel[sel.method == m], hit[hit.method == m]
        sd = r.budget_accuracy.std(ddof=1) if len(r) > 1 else 0.0
        rows.append({"method": LABELS[m], "lr (tuned)": f"{lr[m]:g}",
                     "accuracy (%)": f"{r.budget_accuracy.mean():.1f} ± {sd:.1f}",
                     f"rounds to {TARGET_SHARE:.0%} of FedAvg-large's best": f"{h['rounds'].mean():.0f}",
                     "seeds reaching it": f"{int(h.reached.sum())} / {len(h)}"})
    return pd.DataFrame(rows)
