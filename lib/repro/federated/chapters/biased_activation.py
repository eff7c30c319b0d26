"""The biased-activation chapter: uniform, Power-of-Choice, gradient-norm and multi-metric client activation.

:class:`ActivationRun` is one seeded run, :func:`run` executes it,
:func:`sweep` runs every policy (and multi-metric at every ``beta``) and
seed, :func:`claims` gives the ledger's per-seed values; the figures and
the table are the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.activation import ActivatedFedAvg, make_policy, make_probing_client_app
from repro.federated.client import LocalSGD
from repro.federated.engine import RunSummary, central_evaluator, eval_schedule, initial_arrays, run_federated
from repro.federated.figures import accuracy_band
from repro.federated.task import TaskSpec
from repro.parallel import parallel_map

POLICIES = ("uniform", "power-of-choice", "grad-norm", "multi-metric")


@dataclass(frozen=True, kw_only=True)
class ActivationRun:
    """One FedAvg run whose clients are activated by ``policy``; field names are the chapter's parameters.

    Attributes
    ----------
    policy, beta
        Activation policy (see :mod:`repro.federated.activation`) and the
        weight of the gradient-norm rank (multi-metric only).
    spec, sgd, tau, rounds, active_clients, candidates, seed
        Task, local training, local steps, rounds, clients activated and
        probed per round, run seed.
    eval_every, engine
        Evaluation period (rounds) and engine.
    device
        Where the clients train (``cpu``, ``cuda`` or ``auto``).
    """

    policy: str
    beta: float
    spec: TaskSpec
    sgd: LocalSGD
    tau: int
    rounds: int
    active_clients: int
    candidates: int
    seed: int
    eval_every: int = 10
    engine: str = "inprocess"
    device: str = "cpu"


def run(job: ActivationRun) -> dict:
    """One run's record.

    Returns
    -------
    dict
        ``policy, beta, seed, accuracy`` (final), ``budget_accuracy`` (mean of
        the last three evaluations, less sensitive to the last round's
        clients), ``curve`` (round, accuracy) and ``probe_downloads``.
    """
    strat = ActivatedFedAvg(job.active_clients, job.sgd.config(job.tau), seed=job.seed,
                            policy=make_policy(job.policy, job.beta), candidates=job.candidates)
    hist = run_federated(strat, make_probing_client_app(job.spec, {"seed": job.seed, "device": job.device}), job.spec.num_clients,
                         initial_arrays(job.spec, job.seed), job.rounds, central_evaluator(job.spec),
                         eval_schedule(job.rounds, job.eval_every), engine=job.engine)
    summary = RunSummary.of(hist)
    return {"policy": job.policy, "beta": job.beta if job.policy == "multi-metric" else 0.0, "seed": job.seed,
            "accuracy": summary.accuracy, "budget_accuracy": summary.budget_accuracy, "curve": list(summary.curve),
            "probe_downloads": strat.probe_downloads}


def sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active_clients: int, candidates: int,
          seeds: list[int], betas: list[float], eval_every: int, engine: str = "inprocess",
          workers: int = 1, device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Uniform, Power-of-Choice, gradient-norm and multi-metric (every ``beta``) activation, every seed.

    Returns
    -------
    final : DataFrame
        One row per run: ``policy, beta, seed, accuracy, budget_accuracy``.
    curves : DataFrame
        Accuracy at each evaluated round, every run.
    """
    if not betas:
        raise ValueError("parameter 'betas': must not be empty")
    runs = [(p, 0.0) for p in ("uniform", "power-of-choice", "grad-norm")] + [("multi-metric", b) for b in betas]
    jobs = [
        ActivationRun(
            policy=p,
            beta=b,
            spec=spec,
            sgd=sgd,
            tau=tau,
            rounds=rounds,
            active_clients=active_clients,
            candidates=candidates,
            seed=s,
            eval_every=eval_every,
            engine=engine,
            device=device,
        )
        for p, b in runs
        for s in seeds
    ]
    done = parallel_map(run, jobs, workers if engine == "inprocess" else 1, desc="activation runs")
    final = pd.DataFrame([{k: r[k] for k in ("policy", "beta", "seed", "accuracy", "budget_accuracy")} for r in done])
    curves = pd.DataFrame(
        [
            {"policy": r["policy"], "beta": r["beta"], "seed": r["seed"], "round": rd, "accuracy": a}
            for r in done
            for rd, a in r["curve"]
        ]
    )
    return final, curves


def _budget(final: pd.DataFrame, policy: str, b: float = 0.0) -> pd.Series:
    return final[(final.policy == policy) & np.isclose(final.beta, b)].set_index("seed").budget_accuracy


def claims(final: pd.DataFrame, beta: float) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims for multi-metric at ``beta`` (accuracy at the budget)."""
    if not np.isclose(final[final.policy == "multi-metric"].beta, beta).any():
        raise ValueError(f"parameter 'beta': {beta} was not run; choose one of the swept betas")
    mm, uni, poc = _budget(final, "multi-metric", beta), _budget(final, "uniform"), _budget(final, "power-of-choice")
    seeds = sorted(uni.index)
    return {
        "acc_gain_vs_uniform": [mm[s] - uni[s] for s in seeds],
        "acc_gain_vs_power_of_choice": [mm[s] - poc[s] for s in seeds],
    }


def sign_ablation(final: pd.DataFrame, beta: float) -> list[float]:
    """Per-seed accuracy at the budget of multi-metric at ``beta`` minus at ``-beta`` (the opposite sign).

    The sign of the gradient-norm term is our guess; this ablation shows how much the guess matters.
    """
    if not np.isclose(final[final.policy == "multi-metric"].beta, -beta).any():
        raise ValueError(f"parameter 'betas': must include {-beta:g}, the opposite sign of beta")
    plus, minus = _budget(final, "multi-metric", beta), _budget(final, "multi-metric", -beta)
    return [plus[s] - minus[s] for s in sorted(plus.index)]


# ----- figures and table ------------------------------------------------------------------
POLICY_LABELS = {
    "uniform": "uniform",
    "power-of-choice": "Power-of-Choice (loss)",
    "grad-norm": "gradient norm",
    "multi-metric": "multi-metric",
}
_POLICY_COLOURS = {"uniform": "tab:gray", "power-of-choice": "tab:orange", "grad-norm": "tab:green", "multi-metric": "tab:blue"}


def policy_label(policy: str, beta: float) -> str:
    """Legend label of an activation policy (``beta`` shown for multi-metric)."""
    return POLICY_LABELS[policy] + (f" (β={beta:g})" if policy == "multi-metric" else "")


def accuracy_curves(curves: pd.DataFrame, beta: float) -> Figure:
    """Test accuracy against rounds per activation policy (mean over seeds; band: min to max).

    Multi-metric activation is drawn at ``beta``.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for p in POLICY_LABELS:
        sel = curves[(curves.policy == p) & (np.isclose(curves.beta, beta) | (p != "multi-metric"))]
        accuracy_band(ax, sel, None, _POLICY_COLOURS[p], policy_label(p, beta))
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def summary_table(final: pd.DataFrame) -> pd.DataFrame:
    """Accuracy at the budget and final accuracy per policy (and beta), mean ± sd over seeds."""
    g = (
        final.groupby(["policy", "beta"], sort=False)
        .agg(
            b=("budget_accuracy", "mean"),
            b_sd=("budget_accuracy", "std"),
            f=("accuracy", "mean"),
            f_sd=("accuracy", "std"),
            seeds=("seed", "count"),
        )
        .reset_index()
        .fillna({"b_sd": 0.0, "f_sd": 0.0})
    )
    return pd.DataFrame(
        {
            "activation": [policy_label(p, b) for p, b in zip(g.policy, g.beta)],
            "accuracy at the budget (%)": [f"{m:.1f} ± {s:.1f}" for m, s in zip(g.b, g.b_sd)],
            "final accuracy (%)": [f"{m:.1f} ± {s:.1f}" for m, s in zip(g.f, g.f_sd)],
            "seeds": g.seeds.to_numpy(),
        }
    )
