"""Driver of the qlearn-offload chapter: Q-learning opportunistic communication against 4G and heuristics.

Each :class:`OffloadJob` trains the Q-tables of one scenario on the mobility of one seed, saves them,
and evaluates the learned policy and the baselines (all-4G, fixed-probability, greedy) on a held-out
mobility seed.  :func:`sweep` runs the packet-interval sweep at the default deadline and the deadline
sweep at the default interval; :func:`claims` turns the default point into the ledger's per-seed values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import pandas as pd

from repro.netsim.figures import learning_curves, metric_panels
from repro.netsim.heuristics import AllCellular, FixedProbability, GreedyOpportunistic
from repro.netsim.oppcomm_agents import Outcome, Scenario, checkpointed_q_agents, evaluate, greedy_q, train_q_agents
from repro.netsim.qlearning import QLearningConfig
from repro.parallel import parallel_map

HELD_OUT = 1000  # evaluation mobility seed = HELD_OUT + training seed
POLICIES = ("Q-learning", "all-4G", "fixed-probability", "greedy")


@dataclass(frozen=True, kw_only=True)
class OffloadJob:
    """One training seed of one scenario.

    Attributes
    ----------
    scenario
        City, fleet, packet interval and deadline.
    episodes
        Training episodes.
    seed
        Training mobility seed; evaluation uses ``HELD_OUT + seed``.
    qconfig
        Q-learning hyper-parameters.
    fixed_p
        Probability of the fixed-probability baseline.
    theta
        Reward weight of the relay and wait terms.
    checkpoint_dir
        Where the trained tables are saved (``None``: not saved).
    reuse
        Load the tables and the learning curve from ``checkpoint_dir`` instead of training.
    """

    scenario: Scenario
    episodes: int
    seed: int
    qconfig: QLearningConfig
    fixed_p: float = 0.5
    theta: float = 0.5
    checkpoint_dir: str | None = None
    reuse: bool = False

    @property
    def checkpoint_name(self) -> str:
        """File name of this job's Q-tables."""
        s = self.scenario
        return f"q_G{s.gen_interval_s}_delta{s.delta_s:g}_seed{self.seed}.npy"


@dataclass(frozen=True, kw_only=True)
class OffloadResult:
    """A job's learning curve and every policy's held-out outcome."""

    job: OffloadJob
    curve: tuple[Outcome, ...]
    outcomes: dict[str, Outcome]
    checkpoint: str | None


def run(job: OffloadJob) -> OffloadResult:
    """Train and save (or, with ``job.reuse``, load) one job's tables, and evaluate them."""
    sc = job.scenario

    done = checkpointed_q_agents(job.checkpoint_dir, job.checkpoint_name, job.reuse, job.qconfig,
                                 lambda: train_q_agents(sc, job.episodes, job.seed, job.qconfig, job.theta))
    agent, curve, path = done.agent, done.curve, done.path
    test = HELD_OUT + job.seed
    policies = {
        "Q-learning": greedy_q(agent),
        "all-4G": AllCellular().act,
        "fixed-probability": FixedProbability(p=job.fixed_p, delta_s=sc.delta_s).act,
        "greedy": GreedyOpportunistic(delta_s=sc.delta_s).act,
    }
    outcomes = {name: evaluate(sc, test, act, job.theta) for name, act in policies.items()}
    return OffloadResult(job=job, curve=tuple(curve), outcomes=outcomes, checkpoint=path)


def sweep(base: Scenario, gen_intervals: list[int], deltas: list[float], seeds: list[int], episodes: int,
          qconfig: QLearningConfig, fixed_p: float, theta: float, checkpoint_dir: str | None,
          workers: int = 1, reuse: bool = False) -> list[OffloadResult]:
    """The interval sweep at ``base.delta_s`` and the deadline sweep at ``base.gen_interval_s``, every seed.

    The default point (``base``) is run once and shared by both sweeps.  With
    ``reuse`` every job loads its tables from ``checkpoint_dir`` instead of training.
    """
    points = [replace(base, gen_interval_s=g) for g in gen_intervals]
    points += [replace(base, delta_s=float(d)) for d in deltas if float(d) != base.delta_s]
    if base not in points:
        points.insert(0, base)
    jobs = [
        OffloadJob(
            scenario=p,
            episodes=episodes,
            seed=s,
            qconfig=qconfig,
            fixed_p=fixed_p,
            theta=theta,
            checkpoint_dir=checkpoint_dir,
            reuse=reuse,
        )
        for p in points
        for s in seeds
    ]
    return parallel_map(run, jobs, workers=workers, desc="qlearn-offload runs")


def table(results: list[OffloadResult]) -> pd.DataFrame:
    """One row per (scenario, seed, policy) with its held-out metrics."""
    rows = []
    for r in results:
        sc = r.job.scenario
        for name, o in r.outcomes.items():
            rows.append(
                {
                    "G (s)": sc.gen_interval_s,
                    "delta (s)": sc.delta_s,
                    "seed": r.job.seed,
                    "policy": name,
                    "4G cost (%)": o.cost_4g_percent,
                    "4G saved (%)": o.saving_percent,
                    "on time (%)": o.compliance_percent,
                    "via RSU (%)": o.rsu_percent,
                }
            )
    return pd.DataFrame(rows)


def at_point(results: list[OffloadResult], scenario: Scenario) -> list[OffloadResult]:
    """The results of one scenario, in seed order."""
    return sorted((r for r in results if r.job.scenario == scenario), key=lambda r: r.job.seed)


def claims(results: list[OffloadResult], base: Scenario) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims at the default scenario."""
    rs = at_point(results, base)
    return {
        "saving_vs_all4g": [r.outcomes["Q-learning"].saving_percent for r in rs],
        "late_share": [r.outcomes["Q-learning"].late_percent for r in rs],
        "saving_vs_fixed_probability": [
            r.outcomes["Q-learning"].saving_percent - r.outcomes["fixed-probability"].saving_percent for r in rs
        ],
    }


def summary(results: list[OffloadResult], base: Scenario) -> pd.DataFrame:
    """Mean and sd over seeds of every policy at the default scenario (the headline table)."""
    t = table(at_point(results, base))
    agg = t.groupby("policy", sort=False)[["4G saved (%)", "on time (%)", "via RSU (%)"]].agg(["mean", "std"])
    agg.columns = [f"{a} {b}" for a, b in agg.columns]
    return agg.round(2).reset_index()


def figure_learning(results: list[OffloadResult], base: Scenario) -> plt.Figure:
    """Training curves at the default scenario: 4G cost and compliance per episode (exploring policy)."""
    rs = at_point(results, base)
    return learning_curves(
        {
            "4G cost (%)": [[o.cost_4g_percent for o in r.curve] for r in rs],
            "on time (%)": [[o.compliance_percent for o in r.curve] for r in rs],
        },
        ylabel="percent of packets",
        title="Q-learning while training (training city)",
    )


def figure_sweeps(results: list[OffloadResult], base: Scenario) -> tuple[plt.Figure, plt.Figure]:
    """4G saving and compliance against the packet interval, and against the deadline (held-out city)."""
    t = table(results)
    metrics = [("4G saved (%)", "4G cost saved vs all-4G (%)"), ("on time (%)", "packets within delta (%)")]
    by_g = metric_panels(
        t[t["delta (s)"] == base.delta_s], "G (s)", metrics, title=f"packet interval sweep (delta = {base.delta_s:g} s)"
    )
    by_delta = metric_panels(
        t[t["G (s)"] == base.gen_interval_s], "delta (s)", metrics, title=f"deadline sweep (G = {base.gen_interval_s} s)"
    )
    return by_g, by_delta
