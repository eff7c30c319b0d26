"""The biased-activation chapter: uniform, Power-of-Choice, gradient-norm and multi-metric client activation.

The multi-metric rule is the authors' (:class:`repro.federated.activation.MultiMetricActivation`);
our earlier reconstruction, a rank sum of probed losses and gradient norms, runs
at every weight of ``betas`` (both signs) as an ablation.  :class:`Params` holds the
chapter's parameters; :func:`run` runs one :class:`ActivationRun` per policy,
weight and seed through :func:`run_one` into an :class:`ActivationRecord` and
returns the :class:`Results`; :func:`claims` gives the ledger's evidence.
The figures and the table are the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.activation import POLICIES, ActivatedFedAvg, make_activation_client_app, make_policy
from repro.federated.client import LocalSGD
from repro.federated.engine import RunSummary
from repro.federated.figures import accuracy_band, seed_sd
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, execute, records_frame
from repro.federated.task import TaskSpec, available_train, majority_accuracy
from repro.params import ChapterParams, require
from repro.results import Evidence


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``biased-activation.yaml``)."""

    dataset: str
    n_train: int
    num_clients: int
    active_clients: int
    candidates: int
    alpha: float
    hidden: tuple[int, ...]
    tau: int
    rounds: int
    batch_size: int
    lr: float
    betas: tuple[float, ...]
    seeds: tuple[int, ...]
    eval_every: int
    engine: str
    device: str
    workers: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(self.active_clients <= self.candidates, self, ("active_clients", "candidates"),
                "active_clients must not exceed candidates")
        require(self.candidates <= self.num_clients, self, ("candidates", "num_clients"),
                "candidates must not exceed num_clients")
        require(available_train(self.dataset, self.n_train) >= 2 * self.num_clients, self,
                ("dataset", "n_train", "num_clients"), "the split needs at least 2 training samples per client")

    def spec(self) -> TaskSpec:
        """The task: the dataset split over the clients by a Dirichlet label skew."""
        return TaskSpec(dataset=self.dataset, num_clients=self.num_clients, scheme="dirichlet", alpha=self.alpha,
                        hidden=self.hidden, model="mlp", n_train=self.n_train, data_seed=0)

    def sgd(self) -> LocalSGD:
        """The clients' local SGD (no momentum)."""
        return LocalSGD(batch_size=self.batch_size, lr=self.lr, momentum=0.0)


@dataclass(frozen=True, kw_only=True)
class ActivationRun(FederatedRun):
    """One FedAvg run whose clients are activated by ``method`` (a policy); the shared fields are FederatedRun's.

    Attributes
    ----------
    beta
        The weight of the gradient-norm rank (``rank-sum`` only).
    candidates
        Candidates drawn uniformly and probed per round (the probing policies).
    """

    beta: float = 0.0
    candidates: int = 1

    methods: ClassVar[tuple[str, ...]] = POLICIES


@dataclass(frozen=True, kw_only=True)
class ActivationRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields (``method`` is the policy) and these.

    Attributes
    ----------
    beta
        The rank-sum's weight (0 for the other policies).
    probe_downloads
        Model downloads spent on probing candidates.
    """

    beta: float = 0.0
    probe_downloads: int = 0


def run_one(job: ActivationRun) -> ActivationRecord:
    """Run ``job`` (accuracy at the budget: the mean of the last three evaluations)."""
    strat = ActivatedFedAvg(job.clients_per_round, job.local, seed=job.seed,
                            policy=make_policy(job.method, job.beta, job.spec.num_clients), candidates=job.candidates)
    hist = job.simulate(strat, make_activation_client_app(job.spec, job.run_config))
    return ActivationRecord.of(job, RunSummary.of(hist), beta=job.beta if job.method == "rank-sum" else 0.0,
                               probe_downloads=strat.probe_downloads)


def jobs(params: Params) -> list[ActivationRun]:
    """Uniform, Power-of-Choice, gradient-norm and multi-metric activation, and the rank sum at every ``betas``."""
    spec, sgd = params.spec(), params.sgd()
    pairs = [(p, 0.0) for p in ("uniform", "power-of-choice", "grad-norm", "multi-metric")]
    pairs += [("rank-sum", float(b)) for b in params.betas]
    return [ActivationRun(method=p, beta=b, spec=spec, sgd=sgd, tau=params.tau, rounds=params.rounds,
                          active_clients=params.active_clients, candidates=params.candidates, seed=s,
                          eval_every=params.eval_every, engine=params.engine, device=params.device)
            for p, b in pairs for s in params.seeds]


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the comparison produced.

    Attributes
    ----------
    final
        One row per run: ``policy, beta, seed, accuracy, budget_accuracy, probe_downloads``.
    curves
        Accuracy at each evaluated round, every run.
    trivial
        Test accuracy of always predicting the majority class (percent).
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    trivial: float


def run(params: Params) -> Results:
    """Every policy (the rank sum at every ``betas``) for every seed."""
    done = execute(run_one, jobs(params), params.workers, desc="activation runs")
    columns = ("method", "beta", "seed", "accuracy", "budget_accuracy", "probe_downloads")
    return Results(final=records_frame(done, columns).rename(columns={"method": "policy"}),
                   curves=curves_frame(done, ("method", "beta", "seed")).rename(columns={"method": "policy"}),
                   trivial=majority_accuracy(params.spec()))


def _budget(final: pd.DataFrame, policy: str, beta: float = 0.0) -> pd.Series:
    return final[(final.policy == policy) & np.isclose(final.beta, beta)].set_index("seed").budget_accuracy


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence: the authors' multi-metric rule against uniform and Power-of-Choice, at the budget."""
    final = results.final
    mm, uni, poc = _budget(final, "multi-metric"), _budget(final, "uniform"), _budget(final, "power-of-choice")
    seeds = sorted(uni.index)

    def evidence(other: pd.Series, name: str) -> Evidence:
        return Evidence(values=[float(mm[s] - other[s]) for s in seeds], trivial=results.trivial,
                        arms={"multi-metric": [float(mm[s]) for s in seeds], name: [float(other[s]) for s in seeds]})

    return {"acc_gain_vs_uniform": evidence(uni, "uniform"),
            "acc_gain_vs_power_of_choice": evidence(poc, "power-of-choice")}


def sign_ablation(results: Results) -> pd.DataFrame:
    """Mean and sd over seeds of the accuracy at the budget against uniform's, per rank-sum weight and the authors' rule.

    The rank sum at a positive weight favours large gradient norms, at a negative one small ones; the
    authors' rule favours small ones among the high-loss clients.
    """
    final = results.final
    uni = _budget(final, "uniform")
    rows = [("multi-metric (authors')", _budget(final, "multi-metric"))]
    rows += [(f"rank sum, β = {b:g}", _budget(final, "rank-sum", b)) for b in sorted(set(final[final.policy == "rank-sum"].beta))]
    out = []
    for name, acc in rows:
        gain = pd.Series([acc[s] - uni[s] for s in sorted(uni.index)])
        out.append({"rule": name, "gain over uniform (points)": f"{gain.mean():+.1f} ± {seed_sd(gain):.1f}"})
    return pd.DataFrame(out)


def uniform_spread(results: Results) -> float:
    """The sd over seeds of uniform sampling's accuracy at the budget (points; 0 with one seed)."""
    acc = _budget(results.final, "uniform")
    return seed_sd(acc)


# ----- figures and table ------------------------------------------------------------------
POLICY_LABELS = {
    "uniform": "uniform",
    "power-of-choice": "Power-of-Choice (loss)",
    "grad-norm": "gradient norm",
    "multi-metric": "multi-metric (the authors' rule)",
    "rank-sum": "rank sum",
}
_POLICY_COLOURS = {"uniform": "tab:gray", "power-of-choice": "tab:orange", "grad-norm": "tab:green",
                   "multi-metric": "tab:blue", "rank-sum": "tab:purple"}


def policy_label(policy: str, beta: float) -> str:
    """Legend label of an activation policy (``beta`` shown for the rank sum)."""
    return POLICY_LABELS[policy] + (f" (β={beta:g})" if policy == "rank-sum" else "")


def accuracy_curves(results: Results) -> Figure:
    """Test accuracy against rounds per activation policy (mean over seeds; band: min to max); no rank-sum ablation."""
    curves = results.curves
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for p in ("uniform", "power-of-choice", "grad-norm", "multi-metric"):
        accuracy_band(ax, curves[curves.policy == p], None, _POLICY_COLOURS[p], policy_label(p, 0.0))
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def summary_table(results: Results) -> pd.DataFrame:
    """Accuracy at the budget and final accuracy per policy (and beta), mean ± sd over seeds."""
    g = (
        results.final.groupby(["policy", "beta"], sort=False)
        .agg(
            b=("budget_accuracy", "mean"),
            b_sd=("budget_accuracy", "std"),
            f=("accuracy", "mean"),
            f_sd=("accuracy", "std"),
            probes=("probe_downloads", "mean"),
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
            "probe downloads per run": g.probes.round().astype(int).to_numpy(),
            "seeds": g.seeds.to_numpy(),
        }
    )
