"""Driver of the qlearn-offload chapter: Q-learning opportunistic communication against 4G and heuristics.

Each :class:`OffloadJob` trains the Q-tables of one scenario on the mobility of one seed, saves them,
chooses the fixed-probability baseline's probability on a validation city, and evaluates the learned
policy and the baselines (all-4G, fixed-probability at the chosen p, greedy) on a test city.  :func:`run`
covers the packet-interval sweep at the default deadline and the deadline sweep at the default interval;
with one shared table (the cpu profile) it also trains per-device tables, the paper's setting, at the
default point.  :func:`claims` reads the default point.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import pandas as pd

from repro.netsim.figures import learning_curves, metric_panels
from repro.netsim.heuristics import AllCellular, FixedProbability, GreedyOpportunistic
from repro.netsim.mobility import rsu_room
from repro.netsim.oppcomm_agents import (
    TEST_OFFSET,
    VALIDATION_OFFSET,
    Outcome,
    Scenario,
    checkpointed_q_agents,
    choose_on_validation,
    evaluate,
    greedy_q,
    train_q_agents,
)
from repro.netsim.qlearning import QLearningConfig
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence

Q, PER_DEVICE, ALL_4G, FIXED, GREEDY = ("Q-learning", "Q-learning, per-device tables", "all-4G", "fixed-probability",
                                        "greedy")
POLICIES = (Q, ALL_4G, FIXED, GREEDY)
LATE_BOUND = 0.5
"""Percent of packets the paper lets miss delta ("99.5% of packets", abstract of arXiv 2405.01609): the bound a
fixed probability must keep on the validation city to be chosen."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    buses: int
    rsus: int
    grid: int
    horizon_s: float
    episodes: int
    gen_interval_s: int
    delta_s: float
    gen_intervals: tuple[int, ...]
    deltas: tuple[float, ...]
    fixed_ps: tuple[float, ...]
    theta: float
    alpha: float
    gamma: float
    epsilon: float
    shared_table: bool
    seeds: tuple[int, ...]
    workers: int
    reuse_checkpoints: bool

    def checks(self) -> None:
        """Refuse impossible combinations before any kernel starts."""
        require(self.gen_interval_s in self.gen_intervals, self, ("gen_interval_s", "gen_intervals"),
                "gen_intervals must contain gen_interval_s (the claims are read there)")
        require(self.delta_s in self.deltas, self, ("delta_s", "deltas"), "deltas must contain delta_s")
        require(max(self.seeds) < TEST_OFFSET, self, "seeds",
                f"training seeds must lie below {TEST_OFFSET} (seed + {TEST_OFFSET} is the test city)")
        require(self.gen_interval_s < self.horizon_s and max(self.gen_intervals) < self.horizon_s, self,
                ("gen_intervals", "horizon_s"), "a packet interval must be shorter than an episode")
        require(min(self.deltas) < self.horizon_s, self, ("deltas", "horizon_s"),
                "a deadline must be shorter than an episode")
        require(self.grid >= 3, self, "grid", "bus routes need at least 3 intersections per side")
        require(rsu_room(self.base.config().city, self.rsus, 0.0), self, ("rsus", "grid"),
                "the RSUs do not fit on distinct intersections (of the central 1 km square and outside it)")

    @property
    def base(self) -> Scenario:
        """The default scenario, where the claims are read."""
        return Scenario(buses=self.buses, rsus=self.rsus, grid=self.grid, horizon_s=self.horizon_s,
                        gen_interval_s=self.gen_interval_s, delta_s=self.delta_s)

    def qconfig(self, shared: bool) -> QLearningConfig:
        """Q-learning settings, with one shared table or one per device."""
        return QLearningConfig(alpha=self.alpha, gamma=self.gamma, epsilon=self.epsilon, shared=shared)

    def points(self) -> list[Scenario]:
        """The interval sweep at ``delta_s`` and the deadline sweep at ``gen_interval_s``, the default point first."""
        pts = [self.base]
        pts += [replace(self.base, gen_interval_s=g) for g in self.gen_intervals]
        pts += [replace(self.base, delta_s=float(d)) for d in self.deltas]
        return list(dict.fromkeys(pts))


@dataclass(frozen=True, kw_only=True)
class OffloadJob:
    """One training seed of one scenario (with ``per_device``, the per-device tables of the default point).

    Attributes
    ----------
    scenario
        City, fleet, packet interval and deadline.
    seed
        Training mobility seed; validation on ``seed + VALIDATION_OFFSET``, test on ``seed + TEST_OFFSET``.
    params
        The chapter's parameters.
    per_device
        Train one table per device whatever ``params.shared_table`` says (and evaluate only the learner).
    checkpoint_dir
        Where the trained tables are saved (``None``: not saved).
    """

    scenario: Scenario
    seed: int
    params: Params
    per_device: bool = False
    checkpoint_dir: str | None = None

    @property
    def checkpoint_name(self) -> str:
        """File name of this job's Q-tables."""
        s = self.scenario
        tag = "_perdevice" if self.per_device else ""
        return f"q{tag}_G{s.gen_interval_s}_delta{s.delta_s:g}_seed{self.seed}.npy"


@dataclass(frozen=True, kw_only=True)
class OffloadResult:
    """A job's learning curve, every policy's test outcome and the probability chosen on validation."""

    job: OffloadJob
    curve: tuple[Outcome, ...]
    outcomes: dict[str, Outcome]
    chosen_p: float | None


def run_job(job: OffloadJob) -> OffloadResult:
    """Train and save (or, with ``reuse_checkpoints``, load) one job's tables, tune the baseline and evaluate."""
    sc, prm = job.scenario, job.params
    shared = prm.shared_table and not job.per_device
    qconfig = prm.qconfig(shared)
    done = checkpointed_q_agents(job.checkpoint_dir, job.checkpoint_name, prm.reuse_checkpoints, qconfig,
                                 lambda: train_q_agents(sc, prm.episodes, job.seed, qconfig, prm.theta))
    test = TEST_OFFSET + job.seed
    if job.per_device:
        outcome = evaluate(sc, test, greedy_q(done.agent), prm.theta)
        return OffloadResult(job=job, curve=done.curve, outcomes={PER_DEVICE: outcome}, chosen_p=None)
    validation = {f"{p:g}": evaluate(sc, VALIDATION_OFFSET + job.seed,
                                     FixedProbability(p=p, delta_s=sc.delta_s).act, prm.theta) for p in prm.fixed_ps}
    chosen = float(choose_on_validation(validation, LATE_BOUND))
    policies = {
        Q: greedy_q(done.agent),
        ALL_4G: AllCellular().act,
        FIXED: FixedProbability(p=chosen, delta_s=sc.delta_s).act,
        GREEDY: GreedyOpportunistic(delta_s=sc.delta_s).act,
    }
    outcomes = {name: evaluate(sc, test, act, prm.theta) for name, act in policies.items()}
    return OffloadResult(job=job, curve=done.curve, outcomes=outcomes, chosen_p=chosen)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    table
        One row per (scenario, seed, policy) with its test-city metrics and, for fixed-probability, the p
        chosen on the validation city.
    curves
        The default point's learning curves, per table kind (shared or per-device), one per seed.
    base
        The default scenario.
    """

    table: pd.DataFrame
    curves: dict[str, tuple[tuple[Outcome, ...], ...]]
    base: Scenario


def run(params: Params, checkpoint_dir: str | None = None) -> Results:
    """Every point of both sweeps for every seed (with ``reuse_checkpoints``, the tables loaded, not trained)."""
    jobs = [OffloadJob(scenario=sc, seed=s, params=params, checkpoint_dir=checkpoint_dir)
            for sc in params.points() for s in params.seeds]
    if params.shared_table:
        jobs += [OffloadJob(scenario=params.base, seed=s, params=params, per_device=True, checkpoint_dir=checkpoint_dir)
                 for s in params.seeds]
    done = parallel_map(run_job, jobs, workers=params.workers, desc="qlearn-offload runs")
    rows = []
    for r in done:
        sc = r.job.scenario
        for name, o in r.outcomes.items():
            rows.append({"G (s)": sc.gen_interval_s, "delta (s)": sc.delta_s, "seed": r.job.seed, "policy": name,
                         "4G cost (%)": o.cost_4g_percent, "4G saved (%)": o.saving_percent,
                         "on time (%)": o.compliance_percent, "late (%)": o.late_percent,
                         "via RSU (%)": o.rsu_percent, "p": r.chosen_p if name == FIXED else None})
    at_base = sorted((r for r in done if r.job.scenario == params.base), key=lambda r: r.job.seed)
    curves = {Q: tuple(r.curve for r in at_base if not r.job.per_device),
              PER_DEVICE: tuple(r.curve for r in at_base if r.job.per_device)}
    return Results(table=pd.DataFrame(rows), curves=curves, base=params.base)


def at_base(results: Results) -> pd.DataFrame:
    """The default point's rows."""
    t = results.table
    return t[(t["G (s)"] == results.base.gen_interval_s) & (t["delta (s)"] == results.base.delta_s)]


def _per_seed(results: Results, policy: str, col: str) -> pd.Series:
    t = at_base(results)
    return t[t["policy"] == policy].set_index("seed").sort_index()[col]


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims at the default scenario."""
    q = _per_seed(results, Q, "4G saved (%)")
    return {
        "saving_vs_all4g": list(q),
        "late_share": list(_per_seed(results, Q, "late (%)")),
        "saving_vs_fixed_probability": list(q - _per_seed(results, FIXED, "4G saved (%)")),
        "saving_vs_greedy": list(q - _per_seed(results, GREEDY, "4G saved (%)")),
    }


def summary(results: Results) -> pd.DataFrame:
    """Mean and sd over seeds of every policy at the default scenario (the headline table)."""
    t = at_base(results)
    agg = t.groupby("policy", sort=False)[["4G saved (%)", "late (%)", "via RSU (%)"]].agg(["mean", "std"])
    agg.columns = [f"{a} {b}" for a, b in agg.columns]
    return agg.round(2).reset_index()


def chosen_probabilities(results: Results) -> pd.Series:
    """How often each fixed probability was chosen on the validation city (every point and seed)."""
    t = results.table
    return t[t["policy"] == FIXED]["p"].value_counts().sort_index()


def figure_learning(results: Results) -> plt.Figure:
    """Training curves at the default scenario: late packets per episode, shared and per-device tables."""
    curves = {f"{kind}: late (%)": [[o.late_percent for o in c] for c in runs]
              for kind, runs in results.curves.items() if runs}
    curves.update({f"{Q}: 4G cost (%)": [[o.cost_4g_percent for o in c] for c in results.curves[Q]]})
    return learning_curves(curves, ylabel="percent of packets", title="Q-learning while training (training city)")


def figure_sweeps(results: Results) -> tuple[plt.Figure, plt.Figure]:
    """4G saving and late packets against the packet interval, and against the deadline (test city)."""
    t = results.table[results.table["policy"].isin(POLICIES)]
    base = results.base
    metrics = [("4G saved (%)", "4G cost saved vs all-4G (%)"), ("late (%)", "packets over delta (%)")]
    by_g = metric_panels(t[t["delta (s)"] == base.delta_s], "G (s)", metrics,
                         title=f"packet interval sweep (delta = {base.delta_s:g} s)")
    by_delta = metric_panels(t[t["G (s)"] == base.gen_interval_s], "delta (s)", metrics,
                             title=f"deadline sweep (G = {base.gen_interval_s} s)")
    return by_g, by_delta
