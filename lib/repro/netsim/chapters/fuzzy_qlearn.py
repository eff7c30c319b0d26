"""Driver of the fuzzy-qlearn chapter: Q-learning whose reward weight theta comes from a fuzzy controller.

Each :class:`FuzzyJob` (one deadline, one seed) trains Q-tables with the fuzzy theta and with every fixed
theta on the training city, saves them, evaluates the fixed-theta agents on a validation city (where the
best fixed theta is chosen) and every policy, with all-4G and the greedy heuristic, on a test city.  The
city is the heterogeneous variant: most RSUs in the centre, so a single theta cannot suit every bus.  With
one shared table (the cpu profile) the fuzzy agent is also trained with per-device tables, the paper's
setting, at the default deadline.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.netsim.figures import learning_curves, metric_panels
from repro.netsim.fuzzy import ConstantTheta, FuzzyTheta, shaped_reward
from repro.netsim.heuristics import AllCellular, GreedyOpportunistic
from repro.netsim.mobility import rsu_room
from repro.netsim.oppcomm_agents import (
    TEST_OFFSET,
    VALIDATION_OFFSET,
    Outcome,
    Scenario,
    checkpointed_q_agents,
    evaluate,
    greedy_q,
    train_q_agents,
)
from repro.netsim.qlearning import QLearningConfig
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence

FUZZY = "fuzzy-Q"
PER_DEVICE = "fuzzy-Q, per-device tables"
LATE_BOUND = 1.0
"""Percent of packets the paper lets miss delta ("the latency of 99% packets below the required threshold",
abstract of arXiv 2405.01057): a fixed theta must keep it at every deadline on the validation city."""


def fixed_name(theta: float) -> str:
    """Label of Q-learning with a fixed theta."""
    return f"Q, theta={theta:g}"


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    buses: int
    rsus: int
    rsu_centre_share: float
    grid: int
    horizon_s: float
    episodes: int
    gen_interval_s: int
    delta_s: float
    deltas: tuple[float, ...]
    thetas: tuple[float, ...]
    reference_theta: float
    density_scale: float
    alpha: float
    gamma: float
    epsilon: float
    shared_table: bool
    seeds: tuple[int, ...]
    workers: int
    reuse_checkpoints: bool

    def checks(self) -> None:
        """Refuse impossible combinations before any kernel starts."""
        require(self.delta_s in self.deltas, self, ("delta_s", "deltas"), "deltas must contain delta_s")
        require(self.reference_theta in self.thetas, self, ("reference_theta", "thetas"),
                "thetas must contain reference_theta")
        require(max(self.seeds) < TEST_OFFSET, self, "seeds",
                f"training seeds must lie below {TEST_OFFSET} (seed + {TEST_OFFSET} is the test city)")
        require(self.gen_interval_s < self.horizon_s, self, ("gen_interval_s", "horizon_s"),
                "a packet interval must be shorter than an episode")
        require(min(self.deltas) < self.horizon_s, self, ("deltas", "horizon_s"),
                "a deadline must be shorter than an episode")
        require(self.grid >= 3, self, "grid", "bus routes need at least 3 intersections per side")
        require(rsu_room(self.base.config().city, self.rsus, self.rsu_centre_share), self, ("rsus", "grid", "rsu_centre_share"),
                "the RSUs do not fit on distinct intersections (of the central 1 km square and outside it)")

    @property
    def base(self) -> Scenario:
        """The city at the default deadline."""
        return Scenario(buses=self.buses, rsus=self.rsus, grid=self.grid, horizon_s=self.horizon_s,
                        gen_interval_s=self.gen_interval_s, delta_s=self.delta_s,
                        rsu_centre_share=self.rsu_centre_share)

    def qconfig(self, shared: bool) -> QLearningConfig:
        """Q-learning settings, with one shared table or one per device."""
        return QLearningConfig(alpha=self.alpha, gamma=self.gamma, epsilon=self.epsilon, shared=shared)


@dataclass(frozen=True, kw_only=True)
class FuzzyJob:
    """One deadline and seed: fuzzy and fixed-theta agents trained and evaluated.

    Attributes
    ----------
    scenario
        The city (heterogeneous RSU placement) and the deadline.
    seed
        Training mobility seed; validation on ``seed + VALIDATION_OFFSET``, test on ``seed + TEST_OFFSET``.
    params
        The chapter's parameters.
    per_device
        Train only the fuzzy agent, with one table per device, and evaluate it on the test city.
    checkpoint_dir
        Where the Q-tables are saved (``None``: not saved).
    """

    scenario: Scenario
    seed: int
    params: Params
    per_device: bool = False
    checkpoint_dir: str | None = None


@dataclass(frozen=True, kw_only=True)
class FuzzyResult:
    """Test and validation outcomes and the training curve of every policy of one job."""

    job: FuzzyJob
    outcomes: dict[str, Outcome]
    validation: dict[str, Outcome]
    curves: dict[str, tuple[Outcome, ...]]


def run_job(job: FuzzyJob) -> FuzzyResult:
    """Train the fuzzy and fixed-theta agents of one job and evaluate every policy."""
    sc, prm = job.scenario, job.params
    fuzzy = FuzzyTheta(density_scale=prm.density_scale)
    if job.per_device:
        controllers: dict[str, FuzzyTheta | ConstantTheta] = {PER_DEVICE: fuzzy}
    else:
        controllers = {FUZZY: fuzzy, **{fixed_name(t): ConstantTheta(theta=t) for t in prm.thetas}}
    qconfig = prm.qconfig(prm.shared_table and not job.per_device)
    outcomes, validation, curves = {}, {}, {}
    test, val = TEST_OFFSET + job.seed, VALIDATION_OFFSET + job.seed
    for name, controller in controllers.items():
        tag = name.replace(", theta=", "_theta").replace(", per-device tables", "_perdevice").replace(" ", "")
        train = functools.partial(train_q_agents, sc, prm.episodes, job.seed, qconfig,
                                  reward_fn=shaped_reward(controller), desc=name)
        done = checkpointed_q_agents(job.checkpoint_dir, f"{tag}_delta{sc.delta_s:g}_seed{job.seed}.npy",
                                     prm.reuse_checkpoints, qconfig, train)
        outcomes[name] = evaluate(sc, test, greedy_q(done.agent))
        if isinstance(controller, ConstantTheta):
            validation[name] = evaluate(sc, val, greedy_q(done.agent))
        curves[name] = done.curve
    if not job.per_device:
        outcomes["all-4G"] = evaluate(sc, test, AllCellular().act)
        outcomes["greedy"] = evaluate(sc, test, GreedyOpportunistic(delta_s=sc.delta_s).act)
    return FuzzyResult(job=job, outcomes=outcomes, validation=validation, curves=curves)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    table
        One row per (deadline, seed, policy, city): the test city's and, for the fixed thetas, the
        validation city's metrics (column ``city``).
    curves
        Per deadline, per policy, the training curves of every seed.
    default_delta, reference_theta, thetas
        Where the claims are read.
    """

    table: pd.DataFrame
    curves: dict[float, dict[str, tuple[tuple[Outcome, ...], ...]]]
    default_delta: float
    reference_theta: float
    thetas: tuple[float, ...]


def run(params: Params, checkpoint_dir: str | None = None) -> Results:
    """Every deadline and seed (with ``reuse_checkpoints``, the Q-tables loaded from ``checkpoint_dir``)."""
    jobs = [FuzzyJob(scenario=replace(params.base, delta_s=float(d)), seed=s, params=params,
                     checkpoint_dir=checkpoint_dir) for d in params.deltas for s in params.seeds]
    if params.shared_table:
        jobs += [FuzzyJob(scenario=params.base, seed=s, params=params, per_device=True, checkpoint_dir=checkpoint_dir)
                 for s in params.seeds]
    done = parallel_map(run_job, jobs, workers=params.workers, desc="fuzzy-qlearn runs")
    rows = []
    curves: dict[float, dict[str, list[tuple[Outcome, ...]]]] = {}
    for r in done:
        delta = r.job.scenario.delta_s
        for city, outcomes in (("test", r.outcomes), ("validation", r.validation)):
            for name, o in outcomes.items():
                rows.append({"delta (s)": delta, "seed": r.job.seed, "policy": name, "city": city,
                             "4G saved (%)": o.saving_percent, "on time (%)": o.compliance_percent,
                             "late (%)": o.late_percent, "via RSU (%)": o.rsu_percent})
        for name, c in r.curves.items():
            curves.setdefault(delta, {}).setdefault(name, []).append(c)
    return Results(table=pd.DataFrame(rows), curves={d: {k: tuple(v) for k, v in c.items()} for d, c in curves.items()},
                   default_delta=params.delta_s, reference_theta=params.reference_theta, thetas=params.thetas)


def held_out_rows(results: Results) -> pd.DataFrame:
    """The test city's rows."""
    t = results.table
    return t[t["city"] == "test"].drop(columns="city")


def _per_seed(t: pd.DataFrame, policy: str, col: str, delta: float | None = None) -> pd.Series:
    part = t[t["policy"] == policy]
    if delta is not None:
        part = part[part["delta (s)"] == delta]
    return part.groupby("seed")[col].mean().sort_index()


def best_fixed_theta(results: Results) -> pd.Series:
    """Per seed, the fixed theta chosen on the validation city.

    The one with the largest mean saving over the deadlines among those that kept late packets within
    :data:`LATE_BOUND` at every deadline; where none did, the one with the fewest late packets at its worst
    deadline.
    """
    t = results.table[results.table["city"] == "validation"]
    out = {}
    for seed, part in t.groupby("seed"):
        stats = part.groupby("policy").agg(saving=("4G saved (%)", "mean"), worst=("late (%)", "max"))
        ok = stats[stats["worst"] <= LATE_BOUND]
        out[seed] = ok["saving"].idxmax() if len(ok) else stats.sort_values(["worst", "saving"],
                                                                            ascending=[True, False]).index[0]
    return pd.Series(out).sort_index()


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims."""
    t = held_out_rows(results)
    fuzzy_mean = _per_seed(t, FUZZY, "4G saved (%)")
    chosen = best_fixed_theta(results)
    best = pd.Series({s: _per_seed(t, name, "4G saved (%)")[s] for s, name in chosen.items()}).sort_index()
    return {
        "saving_vs_all4g": list(_per_seed(t, FUZZY, "4G saved (%)", results.default_delta)),
        "late_share": list(t[t["policy"] == FUZZY].groupby("seed")["late (%)"].max().sort_index()),
        "saving_vs_fixed_theta": list(fuzzy_mean - _per_seed(t, fixed_name(results.reference_theta), "4G saved (%)")),
        "saving_vs_best_fixed_theta": list(fuzzy_mean - best),
    }


def summary(results: Results) -> pd.DataFrame:
    """Mean and sd over seeds of every policy at every deadline, test city (the headline table)."""
    t = held_out_rows(results)
    agg = t.groupby(["delta (s)", "policy"], sort=False)[["4G saved (%)", "late (%)"]].agg(["mean", "std"])
    agg.columns = [f"{a} {b}" for a, b in agg.columns]
    return agg.round(2).reset_index()


def figure_deadlines(results: Results) -> plt.Figure:
    """4G saving and late packets against the deadline, every policy (test city)."""
    return metric_panels(
        held_out_rows(results),
        "delta (s)",
        [("4G saved (%)", "4G cost saved vs all-4G (%)"), ("late (%)", "packets over delta (%)")],
        title="heterogeneous city: fuzzy theta against fixed thetas",
    )


def figure_learning(results: Results) -> plt.Figure:
    """Training 4G cost per episode at the default deadline, fuzzy against fixed thetas (and per-device tables)."""
    curves = results.curves[results.default_delta]
    return learning_curves(
        {n: [[o.cost_4g_percent for o in c] for c in runs] for n, runs in curves.items()},
        ylabel="4G cost while training (%)",
        title=f"training curves (delta = {results.default_delta:g} s)",
    )


def figure_controller(params: Params) -> plt.Figure:
    """The controller's theta over its two inputs."""
    controller = FuzzyTheta(density_scale=params.density_scale)
    fig, ax = plt.subplots(figsize=(4.6, 3.6))
    n = controller.table.shape[0]
    im = ax.imshow(controller.table.T, origin="lower", extent=(0, 1, 0, 1), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xlabel("oldest packet age / delta")
    ax.set_ylabel(f"opportunity density (count / {controller.density_scale:g})")
    ax.set_title(f"fuzzy theta ({n} x {n} lattice from scikit-fuzzy)")
    fig.colorbar(im, ax=ax, label="theta")
    return fig


def theta_range(params: Params) -> tuple[float, float]:
    """The smallest and largest theta the controller gives."""
    table = FuzzyTheta(density_scale=params.density_scale).table
    return float(np.min(table)), float(np.max(table))
