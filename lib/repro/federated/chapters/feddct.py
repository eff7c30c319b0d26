"""The FedDCT chapter: a large model divided into co-trained sub-models across clusters of weak clients.

:class:`DctRun` is one seeded run at one learning rate, :func:`run`
executes it, :func:`sweep` runs every method, learning rate and seed,
:func:`choices` picks each method's learning rate (:mod:`repro.federated.tuning`,
the same grid for every method) by the final model's accuracy on training
samples held out of every client (the task's ``validation_share``), never
on the test set the claims read; :func:`claims` turns the tuned runs into
the ledger's per-seed values, :func:`per_device_memory` gives each method's
per-device memory; the figures and tables are the chapter's own.

FedGKT (:mod:`repro.federated.fedgkt`) is one of the methods: each client
trains one FedDCT sub-model's architecture as its extractor and head
(:func:`gkt_task`), so its device holds exactly what a FedDCT device holds,
and the server's model on the extracted features has the large model's
hidden widths.  Its accuracy is the mean over clients of each client's
extractor followed by the server model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.federated.arrays import from_arrayrecord
from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import History, RunSummary, central_evaluator, eval_schedule, initial_arrays
from repro.federated.feddct import (
    FedDCT,
    build_ensemble,
    ensemble_arrays,
    ensemble_evaluator,
    make_feddct_client_app,
    sub_hidden,
)
from repro.federated.fedgkt import KD_WEIGHT, SERVER_EPOCHS, TEMPERATURE, FedGKT, GktTask, make_fedgkt_client_app, pair_evaluator
from repro.federated.figures import mean_sd, seed_sd, tuned_accuracy_curves
from repro.federated.regularised import make_regularised_client_app
from repro.federated.runs import FederatedRun, execute, run_tables, summary_record
from repro.federated.sfetec import SplitHierarchy, SplitSchedule, run_split_training
from repro.federated.split import split_sequential
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, build_model
from repro.federated.tiers import count_step, linear_layers, step_memory
from repro.federated.tuning import Choice, best_settings, chosen, keep_best, model_validation_accuracy
from repro.models import set_weights

METHODS = ("fedavg_large", "fedavg_small", "fedprox_large", "splitfed_large", "fedgkt", "clustered_large", "feddct")
LABELS = {"fedavg_large": "FedAvg, large model", "fedavg_small": "FedAvg, one sub-model",
          "fedprox_large": "FedProx, large model", "splitfed_large": "SplitFed, large model",
          "fedgkt": "FedGKT, sub-model on device + large server model",
          "clustered_large": "large model, FedDCT's cluster schedule (ablation)", "feddct": "FedDCT"}
COLOURS = {"fedavg_large": "tab:gray", "fedavg_small": "tab:brown", "fedprox_large": "tab:orange",
           "splitfed_large": "tab:green", "fedgkt": "tab:red", "clustered_large": "tab:purple", "feddct": "tab:blue"}
CUT = 2
"""SplitFed's cut: after the first linear layer and its ReLU (the client keeps ``fc0``), as the spec asks."""
TARGET_SHARE = 0.95
"""Rounds to target count the rounds until a method reaches this share of FedAvg-large's best accuracy."""
STILL_RISING_MARGIN = 2.0
"""Points by which FedGKT's rise over the run's second half must exceed FedDCT's for the reading to call it still rising."""
DEVICE_ROW = {"fedavg_large": 0, "fedprox_large": 0, "clustered_large": 0, "fedavg_small": 1, "feddct": 1,
              "splitfed_large": 2, "fedgkt": 3}
"""Each method's device: its row of :func:`per_device_memory`'s table."""
TUNING_METRIC = "validation_accuracy"
"""What every method's learning rate is chosen on: the final model's accuracy on the held-out training samples."""


@dataclass(frozen=True, kw_only=True)
class DctRun(FederatedRun):
    """One run; the shared fields are :class:`~repro.federated.runs.FederatedRun`'s.

    ``sgd`` is plain SGD (no momentum, as SplitFed's loop) at the run's
    learning rate, the value the sweep tunes; ``tau`` is the local steps per
    client and round; every client takes part in every round.

    Attributes
    ----------
    split_factor
        FedDCT's sub-models ``S`` (and clients per cluster).
    mu
        FedProx's proximal weight.
    cot_final, cot_warmup
        FedDCT's co-training weight and its warm-up in rounds.
    gkt_temperature, gkt_kd_weight, gkt_server_epochs
        FedGKT's distillation temperature and weight and its server's epochs per round.
    """

    split_factor: int
    mu: float
    cot_final: float
    cot_warmup: int
    gkt_temperature: float = TEMPERATURE
    gkt_kd_weight: float = KD_WEIGHT
    gkt_server_epochs: int = SERVER_EPOCHS

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = {m: "sgd.lr" for m in METHODS}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.spec.num_clients % self.split_factor:
            raise ValueError(f"num_clients={self.spec.num_clients} must be a multiple of split_factor={self.split_factor}")

    @property
    def ensemble_size(self) -> int:
        """Sub-models of the cluster-trained methods: ``S`` for FedDCT, 1 for the undivided ablation."""
        return self.split_factor if self.method == "feddct" else 1

    def small_spec(self) -> TaskSpec:
        """The task with one sub-model's widths (``hidden / sqrt(S)``)."""
        return dataclasses.replace(self.spec, hidden=sub_hidden(self.spec.hidden, self.split_factor))

    def gkt_task(self) -> GktTask:
        """FedGKT's models on this run's task (:func:`gkt_task`)."""
        return gkt_task(self.spec, self.split_factor)

    def model(self) -> torch.nn.Module:
        """The global model this run trains (an ensemble for the cluster-trained methods), initialised from seed 0."""
        if self.method in ("feddct", "clustered_large"):
            return build_ensemble(self.spec, self.ensemble_size, seed=0)
        return build_model(self.small_spec() if self.method == "fedavg_small" else self.spec, seed=0)


def gkt_task(spec: TaskSpec, split_factor: int) -> GktTask:
    """FedGKT's models on ``spec``: a client's is one FedDCT sub-model's MLP, the server's has the large widths.

    The client's extractor is the sub-model's hidden layers, its head the last
    layer; the server model maps the extractor's features through the large
    model's hidden widths to the classes.
    """
    return GktTask(spec=spec, client_hidden=sub_hidden(spec.hidden, split_factor), server_hidden=tuple(spec.hidden))


def run_fedgkt(job: DctRun) -> dict[str, Any]:
    """Run FedGKT on Flower's in-process engine; its validation accuracy is the mean over the clients' pairs."""
    task = job.gkt_task()
    strategy = FedGKT(job.spec.num_clients, job.local, task.server_model(job.seed), seed=job.seed,
                      temperature=job.gkt_temperature, kd_weight=job.gkt_kd_weight, server_epochs=job.gkt_server_epochs)
    hist = job.simulate(strategy, make_fedgkt_client_app(task, job.run_config), task.initial_arrays(job.seed),
                        pair_evaluator(task))
    assert hist.final_arrays is not None
    validation = float(np.mean([model_validation_accuracy(job.spec, pair) for pair in task.pairs(hist.final_arrays)]))
    return summary_record(job, RunSummary.of(hist), validation_accuracy=validation)


def run(job: DctRun) -> dict[str, Any]:
    """Run ``job``: SplitFed in the split loop, every other method on Flower's in-process engine.

    Returns
    -------
    dict
        :func:`repro.federated.runs.summary_record`'s fields and ``validation_accuracy``
        (:func:`repro.federated.tuning.model_validation_accuracy` of the final model; for FedGKT the
        mean over the clients' extractor + server pairs).
    """
    if job.method == "fedgkt":
        return run_fedgkt(job)
    n, local, cfg = job.spec.num_clients, job.local, job.run_config
    if job.method == "splitfed_large":
        schedule = SplitSchedule(rounds=job.rounds, steps=job.tau, batch_size=job.sgd.batch_size, lr=job.sgd.lr)
        split = run_split_training(job.spec, cut=CUT, hierarchy=SplitHierarchy.splitfed(n), schedule=schedule,
                                   seed=job.seed, eval_rounds=eval_schedule(job.rounds, job.eval_every), device=job.device)
        hist, final = History(rounds=split.rounds, accuracy=split.accuracy), split.final
    else:
        if job.method in ("feddct", "clustered_large"):
            s = job.ensemble_size
            strategy: SeededFedAvg = FedDCT(n, local, s, seed=job.seed, cot_final=job.cot_final,
                                            cot_warmup=job.cot_warmup, cluster_size=job.split_factor)
            hist = job.simulate(strategy, make_feddct_client_app(job.spec, s, cfg), ensemble_arrays(job.spec, s, job.seed),
                                ensemble_evaluator(job.spec, s))
        elif job.method == "fedprox_large":
            hist = job.simulate(SeededFedProx(n, local, seed=job.seed, mu=job.mu), make_regularised_client_app(job.spec, cfg))
        else:
            spec = job.small_spec() if job.method == "fedavg_small" else job.spec
            hist = job.simulate(SeededFedAvg(n, local, seed=job.seed), make_client_app(spec, cfg),
                                initial_arrays(spec, job.seed), central_evaluator(spec))
        assert hist.final_arrays is not None
        final = from_arrayrecord(hist.final_arrays)
    model = job.model()
    set_weights(model, final)
    return summary_record(job, RunSummary.of(hist), validation_accuracy=model_validation_accuracy(job.spec, model))


def sweep(spec: TaskSpec, split_factor: int, steps: int, rounds: int, batch_size: int, lrs: list[float], mu: float,
          cot_final: float, cot_warmup: int, seeds: list[int], eval_every: int, workers: int = 1,
          device: str = "cpu", gkt_temperature: float = TEMPERATURE, gkt_kd_weight: float = KD_WEIGHT,
          gkt_server_epochs: int = SERVER_EPOCHS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method at every learning rate of ``lrs`` for every seed (FedGKT's constants fixed, not tuned).

    Returns
    -------
    final : DataFrame
        One row per run: ``method, setting, seed, accuracy, budget_accuracy, validation_accuracy``
        (``setting`` is the learning rate, the tuned value :mod:`repro.federated.tuning` reads).
    curves : DataFrame
        ``method, setting, seed, round, accuracy``.
    """
    jobs = [
        DctRun(
            method=m,
            spec=spec,
            sgd=LocalSGD(batch_size=batch_size, lr=lr, momentum=0.0),
            tau=steps,
            rounds=rounds,
            seed=s,
            eval_every=eval_every,
            device=device,
            progress=None if workers > 1 else f"{m} lr={lr} seed={s}",
            split_factor=split_factor,
            mu=mu,
            cot_final=cot_final,
            cot_warmup=cot_warmup,
            gkt_temperature=gkt_temperature,
            gkt_kd_weight=gkt_kd_weight,
            gkt_server_epochs=gkt_server_epochs,
        )
        for s in seeds
        for lr in lrs
        for m in METHODS
    ]
    done = execute(run, jobs, workers, desc="FedDCT comparison")
    return run_tables(
        done, ("method", "setting", "seed", "accuracy", "budget_accuracy", TUNING_METRIC), keys=("method", "setting", "seed")
    )


def choices(final: pd.DataFrame) -> tuple[Choice, ...]:
    """Each method's learning rate with the best mean validation accuracy over seeds (one grid for all)."""
    return best_settings(final, TUNING_METRIC)


def rounds_to_target(curves: pd.DataFrame, rounds: int, eval_every: int) -> pd.DataFrame:
    """Per method and seed, the first evaluated round reaching :data:`TARGET_SHARE` of FedAvg-large's best accuracy.

    A run that never gets there is counted at ``rounds + eval_every`` (censored; the table says so).
    """
    rows = []
    for seed, g in curves.groupby("seed"):
        target = TARGET_SHARE * g[g.method == "fedavg_large"].accuracy.max()
        for m, h in g.groupby("method"):
            hit = h[h.accuracy >= target]["round"]
            rows.append(
                {
                    "method": m,
                    "seed": seed,
                    "target": target,
                    "reached": not hit.empty,
                    "rounds": int(hit.min()) if not hit.empty else rounds + eval_every,
                }
            )
    return pd.DataFrame(rows)


def per_device_memory(spec: TaskSpec, split_factor: int, batch_size: int) -> pd.DataFrame:
    """Peak bytes of one local SGD step on one device (plain SGD), per method, modelled and counted by torch.

    The large model and one sub-model are counted whole
    (:func:`repro.federated.tiers.count_step`); SplitFed's client holds only
    the layers before the cut, and only the model counts it: its step ends at
    the cut, and torch's count would add a loss on the cut activations that
    the server computes.  A FedGKT client trains its whole small model
    (:func:`gkt_task`: one sub-model's architecture) and counts the same.
    """
    large = build_model(spec, seed=0)
    sub = build_ensemble(spec, split_factor, seed=0).members[0]
    base, _ = split_sequential(large, CUT)
    rows = []
    for name, model in {
        "large model (FedAvg, FedProx)": large,
        f"one of {split_factor} sub-models (FedDCT, FedAvg small)": sub,
    }.items():
        step = count_step(model, batch_size, momentum=0.0)
        rows.append(
            {
                "device": name,
                "parameters": step.parameters,
                "step memory, model (kB)": step.modelled.trained / 1e3,
                "step memory, torch (kB)": step.measured / 1e3,
            }
        )
    layers = linear_layers(base)
    rows.append(
        {
            "device": "SplitFed client (layers before the cut)",
            "parameters": sum(lay.parameters for lay in layers),
            "step memory, model (kB)": step_memory(layers, len(layers), batch_size, optimizer_slots=0).trained / 1e3,
            "step memory, torch (kB)": float("nan"),
        }
    )
    step = count_step(gkt_task(spec, split_factor).client_model(0), batch_size, momentum=0.0)
    rows.append(
        {
            "device": "FedGKT client (extractor + head)",
            "parameters": step.parameters,
            "step memory, model (kB)": step.modelled.trained / 1e3,
            "step memory, torch (kB)": step.measured / 1e3,
        }
    )
    table = pd.DataFrame(rows)
    return table.assign(**{"large / device": table["step memory, model (kB)"].iloc[0] / table["step memory, model (kB)"]})


def device_memory(memory: pd.DataFrame, method: str) -> pd.Series:
    """The row of :func:`per_device_memory`'s table describing ``method``'s device."""
    return memory.iloc[DEVICE_ROW[method]]


def claims(
    final: pd.DataFrame, curves: pd.DataFrame, memory: pd.DataFrame, rounds: int, eval_every: int
) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims, every method at the learning rate chosen on validation."""
    best = choices(final)
    sel, cur = keep_best(final, best), keep_best(curves, best)
    acc = {m: sel[sel.method == m].set_index("seed").budget_accuracy for m in METHODS}
    seeds = sorted(acc["feddct"].index)
    hit = rounds_to_target(cur, rounds, eval_every)
    needed = {m: hit[hit.method == m].set_index("seed")["rounds"] for m in ("fedavg_large", "feddct")}
    reduction = float(device_memory(memory, "feddct")["large / device"])
    d = acc["feddct"]
    return {
        "gain_vs_fedavg_large": [float(d[s] - acc["fedavg_large"][s]) for s in seeds],
        "gain_vs_fedavg_small": [float(d[s] - acc["fedavg_small"][s]) for s in seeds],
        "gain_vs_splitfed": [float(d[s] - acc["splitfed_large"][s]) for s in seeds],
        "gain_vs_fedprox": [float(d[s] - acc["fedprox_large"][s]) for s in seeds],
        "gain_vs_fedgkt": [float(d[s] - acc["fedgkt"][s]) for s in seeds],
        "rounds_saved_vs_fedavg_large": [float(needed["fedavg_large"][s] - needed["feddct"][s]) for s in seeds],
        "memory_reduction": [reduction for _ in seeds],
    }


# ----- figures and tables ----------------------------------------------------------------------
def accuracy_curves(curves: pd.DataFrame, best: tuple[Choice, ...]) -> plt.Figure:
    """Test accuracy against rounds per method at its chosen learning rate (mean over seeds, band min to max)."""
    fig = tuned_accuracy_curves(curves, best, METHODS, LABELS, COLOURS, figsize=(7.4, 4.0))
    fig.axes[0].legend(fontsize=8, loc="lower right")
    return fig


def memory_accuracy(final: pd.DataFrame, memory: pd.DataFrame, best: tuple[Choice, ...]) -> plt.Figure:
    """Accuracy at the budget against per-device step memory, per method (error bar = sd over seeds).

    Methods at the same memory are drawn side by side (small horizontal offsets) with their own markers.
    """
    markers = {
        "fedavg_large": "o",
        "fedprox_large": "s",
        "clustered_large": "D",
        "fedavg_small": "v",
        "feddct": "*",
        "splitfed_large": "^",
        "fedgkt": "P",
    }
    sel = keep_best(final, best)
    kb = memory["step memory, model (kB)"]
    fig, ax = plt.subplots(figsize=(8.6, 3.8))
    for m in METHODS:
        vals = sel[sel.method == m].budget_accuracy
        peers = [p for p in METHODS if np.isclose(kb.iloc[DEVICE_ROW[p]], kb.iloc[DEVICE_ROW[m]])]
        x = kb.iloc[DEVICE_ROW[m]] * (1 + 0.04 * (peers.index(m) - (len(peers) - 1) / 2))
        ax.errorbar(x, vals.mean(), yerr=seed_sd(vals), fmt=markers[m], ms=8, color=COLOURS[m], capsize=3, label=LABELS[m])
    ax.set_xlim(0, 1.15 * kb.max())
    ax.set_xlabel("per-device memory of one local step (kB, model)")
    ax.set_ylabel("test accuracy at the budget (%)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def summary_table(final: pd.DataFrame, curves: pd.DataFrame, rounds: int, eval_every: int) -> pd.DataFrame:
    """Per method: learning rate chosen on validation, test accuracy (mean ± sd), rounds to the target (seeds reaching it)."""
    best = choices(final)
    sel, lr = keep_best(final, best), chosen(best)
    hit = rounds_to_target(keep_best(curves, best), rounds, eval_every)
    rows = []
    for m in METHODS:
        r, h = sel[sel.method == m], hit[hit.method == m]
        rows.append(
            {
                "method": LABELS[m],
                "lr (chosen on validation)": f"{lr[m]:g}",
                "test accuracy (%)": mean_sd(r.budget_accuracy),
                f"rounds to {TARGET_SHARE:.0%} of FedAvg-large's best": f"{h['rounds'].mean():.0f}",
                "seeds reaching it": f"{int(h.reached.sum())} / {len(h)}",
            }
        )
    return pd.DataFrame(rows)
