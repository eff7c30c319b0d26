"""Driver of the v2x-dqn chapter: DQN offloading over V2I, V2C and V2I+I2C paths against queue-aware baselines.

Per seed, two DQN agents (queue-guided and uniform exploration) are trained at the training load and
saved; then every agent and the baselines (greedy on the exact queue-based latency, least-loaded on the
queue backlogs alone, the three fixed paths, random) are evaluated on held-out traffic at every load point
of the two sweeps (vehicle arrival rate at the default task rate, task rate at the default vehicle rate).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.netsim.dqn import DQNConfig, checkpointed_dqn, greedy_actions, train_dqn
from repro.netsim.figures import learning_curves, metric_panels
from repro.netsim.heuristics import FixedPath, GreedyLatency, LeastLoaded, RandomAllowed
from repro.netsim.v2x import V2C, V2I, V2I_I2C, ThreeTierV2XEnv, V2XConfig, latencies_from_observation
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence

HELD_OUT = 1000
"""The held-out traffic of training seed ``s`` is drawn from seed ``s + HELD_OUT``."""
AGENTS = ("DQN (guided)", "DQN (uniform)")
GREEDY, LEAST, RANDOM = "greedy", "least-loaded", "random"
FIXED = ("all-V2I", "all-V2C", "all-V2I+I2C")
BASELINES = (GREEDY, LEAST, *FIXED, RANDOM)
OffloadPolicy = FixedPath | GreedyLatency | LeastLoaded | RandomAllowed


@dataclass(frozen=True, kw_only=True)
class Load:
    """One load point: vehicle arrivals per second and tasks per second per vehicle."""

    vehicle_rate: float
    task_rate: float

    @property
    def label(self) -> str:
        """Short label for tables."""
        return f"{self.vehicle_rate:g} veh/s, {self.task_rate:g} task/s"


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    vehicle_rates: tuple[float, ...]
    task_rates: tuple[float, ...]
    vehicle_rate: float
    task_rate: float
    train_vehicle_rate: float
    train_task_rate: float
    train_steps: int
    train_horizon_s: float
    eval_horizon_s: float
    hidden: tuple[int, ...]
    learning_rate: float
    gamma: float
    temperature: float
    seeds: tuple[int, ...]
    workers: int
    reuse_checkpoints: bool
    device: str

    def checks(self) -> None:
        """Refuse impossible combinations before any kernel starts."""
        require(self.vehicle_rate in self.vehicle_rates, self, ("vehicle_rate", "vehicle_rates"),
                "vehicle_rates must contain vehicle_rate")
        require(self.task_rate in self.task_rates, self, ("task_rate", "task_rates"), "task_rates must contain task_rate")
        require(len(self.loads) >= 2, self, ("vehicle_rates", "task_rates"),
                "the load claims compare the heaviest and the lightest load point: give at least two")
        require(max(self.seeds) < HELD_OUT, self, "seeds",
                f"training seeds must lie below {HELD_OUT} (seed + {HELD_OUT} is the held-out traffic)")
        require(self.train_steps > DQNConfig().learning_starts, self, "train_steps",
                f"the DQN learns nothing in its first {DQNConfig().learning_starts} steps; train for more")

    @property
    def loads(self) -> tuple[Load, ...]:
        """The vehicle-rate sweep at ``task_rate`` and the task-rate sweep at ``vehicle_rate``."""
        return loads(self.vehicle_rates, self.task_rates, self.vehicle_rate, self.task_rate)

    @property
    def train_load(self) -> Load:
        """Where the agents train."""
        return Load(vehicle_rate=self.train_vehicle_rate, task_rate=self.train_task_rate)

    @property
    def dqn(self) -> DQNConfig:
        """The DQN's settings: the profile's widths, learning rate, discount and temperature, the rest the defaults."""
        return DQNConfig(hidden=self.hidden, learning_rate=self.learning_rate, gamma=self.gamma,
                         temperature=self.temperature)


@dataclass(frozen=True, kw_only=True)
class V2XJob:
    """One seed of one agent (or of the baselines when ``agent`` is ``"baselines"``).

    Attributes
    ----------
    agent
        ``"DQN (guided)"``, ``"DQN (uniform)"`` or ``"baselines"``.
    seed
        Training seed; evaluation traffic uses ``HELD_OUT + seed``.
    params
        The chapter's parameters.
    base
        Scenario constants; the load fields are overridden per load point.
    checkpoint_dir
        Where the trained model is saved (``None``: not saved).
    """

    agent: str
    seed: int
    params: Params
    base: V2XConfig = field(default_factory=V2XConfig)
    checkpoint_dir: str | None = None


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """One policy on one load point: mean latency (s), deadline-miss share (%) and the path mix."""

    policy: str
    load: Load
    mean_latency_s: float
    miss_percent: float
    path_share: tuple[float, float, float]


@dataclass(frozen=True, kw_only=True)
class V2XResult:
    """A job's evaluations, its training curve (mean reward per task per episode) and training time."""

    job: V2XJob
    evaluations: tuple[Evaluation, ...]
    curve: tuple[float, ...]
    train_seconds: float


def scenario(base: V2XConfig, load: Load, horizon_s: float) -> V2XConfig:
    """``base`` at a load point and episode length."""
    return replace(base, vehicle_rate=load.vehicle_rate, task_rate=load.task_rate, horizon_s=horizon_s)


def evaluate(cfg: V2XConfig, seed: int, act: Callable[[np.ndarray, dict[str, Any]], int], name: str,
             load: Load) -> Evaluation:
    """Play ``act(obs, info) -> path`` over one episode of held-out traffic."""
    env = ThreeTierV2XEnv(cfg)
    obs, info = env.reset(seed=seed)
    done = False
    while not done:
        obs, _, done, _, info = env.step(act(obs, info))
    lat = env.latencies()
    paths = np.bincount([r.path for r in env.records], minlength=3) / max(len(env.records), 1)
    return Evaluation(
        policy=name,
        load=load,
        mean_latency_s=float(lat.mean()),
        miss_percent=float(100.0 * np.mean(lat > cfg.deadline_s)),
        path_share=(float(paths[0]), float(paths[1]), float(paths[2])),
    )


def _with_rng(policy: OffloadPolicy, rng: np.random.Generator, obs: np.ndarray, info: dict[str, Any]) -> int:
    return int(policy.act(obs, info, rng))


def run_job(job: V2XJob) -> V2XResult:
    """Train (for an agent) and evaluate one job."""
    torch.set_num_threads(1)
    prm = job.params
    test = HELD_OUT + job.seed
    if job.agent == "baselines":
        rng = np.random.default_rng([job.seed, 3])
        policies: dict[str, OffloadPolicy] = {
            GREEDY: GreedyLatency(),
            LEAST: LeastLoaded(),
            "all-V2I": FixedPath(path=V2I),
            "all-V2C": FixedPath(path=V2C),
            "all-V2I+I2C": FixedPath(path=V2I_I2C),
            RANDOM: RandomAllowed(),
        }
        evals = tuple(
            evaluate(scenario(job.base, load, prm.eval_horizon_s), test, functools.partial(_with_rng, pol, rng), name,
                     load)
            for load in prm.loads
            for name, pol in policies.items()
        )
        return V2XResult(job=job, evaluations=evals, curve=(), train_seconds=0.0)
    if job.agent not in AGENTS:
        raise ValueError(f"unknown agent {job.agent!r}; use one of {AGENTS + ('baselines',)}")
    train_cfg = scenario(job.base, prm.train_load, prm.train_horizon_s)
    guide = functools.partial(latencies_from_observation, train_cfg) if job.agent == AGENTS[0] else None
    tag = "guided" if guide else "uniform"
    done = checkpointed_dqn(
        job.checkpoint_dir,
        f"dqn_{tag}_seed{job.seed}.zip",
        prm.reuse_checkpoints,
        lambda: train_dqn(ThreeTierV2XEnv(train_cfg), prm.train_steps, job.seed, prm.dqn, guide, prm.device),
        prm.device,
    )
    trained = done.trained
    act = lambda o, i: int(greedy_actions(trained.model, o)[0])  # noqa: E731
    evals = tuple(evaluate(scenario(job.base, load, prm.eval_horizon_s), test, act, job.agent, load)
                  for load in prm.loads)
    curve = tuple(r / max(n, 1) for r, n in zip(trained.episode_returns, trained.episode_lengths))
    return V2XResult(job=job, evaluations=evals, curve=curve, train_seconds=trained.seconds)


def loads(vehicle_rates: Sequence[float], task_rates: Sequence[float], vehicle_rate: float,
          task_rate: float) -> tuple[Load, ...]:
    """The vehicle-rate sweep at ``task_rate`` and the task-rate sweep at ``vehicle_rate`` (no duplicates)."""
    pts = [Load(vehicle_rate=v, task_rate=task_rate) for v in vehicle_rates] + [
        Load(vehicle_rate=vehicle_rate, task_rate=p) for p in task_rates
    ]
    return tuple(dict.fromkeys(pts))


def heaviest(points: Sequence[Load]) -> Load:
    """The load point with the most tasks per second."""
    return max(points, key=lambda p: p.vehicle_rate * p.task_rate)


def lightest(points: Sequence[Load]) -> Load:
    """The load point with the fewest tasks per second."""
    return min(points, key=lambda p: p.vehicle_rate * p.task_rate)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    table
        One row per (seed, load point, policy) with the held-out latency, misses and path mix.
    curves
        Per agent, the training curves of every seed (mean reward per task per episode).
    train_seconds
        Per agent, the training wall time of every seed.
    heavy, light
        The heaviest and the lightest load point, where the claims are read.
    vehicle_rate, task_rate
        The rates held fixed in the two sweeps.
    """

    table: pd.DataFrame
    curves: dict[str, tuple[tuple[float, ...], ...]]
    train_seconds: dict[str, tuple[float, ...]]
    heavy: Load
    light: Load
    vehicle_rate: float
    task_rate: float


def run(params: Params, checkpoint_dir: str | None = None) -> Results:
    """Every agent and the baselines for every seed (the agents' networks on ``params.device``)."""
    jobs = [V2XJob(agent=agent, seed=s, params=params, checkpoint_dir=checkpoint_dir)
            for s in params.seeds for agent in (*AGENTS, "baselines")]
    done = parallel_map(run_job, jobs, workers=params.workers, desc="v2x-dqn runs")
    return Results(table=table(done),
                   curves={a: tuple(r.curve for r in done if r.job.agent == a) for a in AGENTS},
                   train_seconds={a: tuple(r.train_seconds for r in done if r.job.agent == a) for a in AGENTS},
                   heavy=heaviest(params.loads), light=lightest(params.loads),
                   vehicle_rate=params.vehicle_rate, task_rate=params.task_rate)


def table(results: Sequence[V2XResult]) -> pd.DataFrame:
    """One row per (seed, load, policy)."""
    rows = []
    for r in results:
        for e in r.evaluations:
            rows.append(
                {
                    "seed": r.job.seed,
                    "policy": e.policy,
                    "vehicle rate": e.load.vehicle_rate,
                    "task rate": e.load.task_rate,
                    "load": e.load.label,
                    "tasks/s": e.load.vehicle_rate * e.load.task_rate,
                    "mean latency (ms)": 1000 * e.mean_latency_s,
                    "missed (%)": e.miss_percent,
                    "share V2I": e.path_share[0],
                    "share V2C": e.path_share[1],
                    "share V2I+I2C": e.path_share[2],
                }
            )
    return pd.DataFrame(rows)


def _latency(t: pd.DataFrame, policy: str, load: Load) -> pd.Series:
    part = t[(t["policy"] == policy) & (t["vehicle rate"] == load.vehicle_rate) & (t["task rate"] == load.task_rate)]
    return part.set_index("seed")["mean latency (ms)"].sort_index()


def _reduction(t: pd.DataFrame, policy: str, reference: pd.Series, load: Load) -> pd.Series:
    return 100.0 * (reference - _latency(t, policy, load)) / reference


def best_fixed(t: pd.DataFrame, load: Load) -> pd.Series:
    """Per seed, the lowest mean latency of the fixed paths and random at ``load``."""
    return pd.concat([_latency(t, p, load) for p in (*FIXED, "random")], axis=1).min(axis=1)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims."""
    t, heavy, light = results.table, results.heavy, results.light
    guided = AGENTS[0]
    vs_least_heavy = _reduction(t, guided, _latency(t, LEAST, heavy), heavy)
    vs_least_light = _reduction(t, guided, _latency(t, LEAST, light), light)
    return {
        "latency_vs_greedy_heavy": list(_reduction(t, guided, _latency(t, GREEDY, heavy), heavy)),
        "latency_vs_least_loaded_heavy": list(vs_least_heavy),
        "latency_vs_fixed_heavy": list(_reduction(t, guided, best_fixed(t, heavy), heavy)),
        "gain_grows_with_load": list(vs_least_heavy - vs_least_light),
        "guided_vs_uniform_heavy": list(_reduction(t, guided, _latency(t, AGENTS[1], heavy), heavy)),
    }


def summary(results: Results) -> pd.DataFrame:
    """The headline table: every policy at the heaviest load, mean and sd over seeds."""
    t, heavy = results.table, results.heavy
    t = t[(t["vehicle rate"] == heavy.vehicle_rate) & (t["task rate"] == heavy.task_rate)]
    agg = t.groupby("policy", sort=False)[["mean latency (ms)", "missed (%)", "share V2I", "share V2C", "share V2I+I2C"]].agg(
        ["mean", "std"]
    )
    agg.columns = [f"{a} {b}" for a, b in agg.columns]
    return agg.round(3).reset_index()


def figure_learning(results: Results) -> plt.Figure:
    """Mean reward per task in each training episode, guided against uniform exploration."""
    curves = {}
    for agent, runs in results.curves.items():
        n = min(len(c) for c in runs)
        curves[agent] = [list(c[:n]) for c in runs]
    return learning_curves(curves, ylabel="mean reward per task", title="DQN training at the training load")


def figure_loads(results: Results) -> plt.Figure:
    """Mean latency against vehicle arrival rate and against task rate (log scale), every policy."""
    t = results.table
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, (col, fixed_col, fixed_val) in zip(
        axes, [("vehicle rate", "task rate", results.task_rate), ("task rate", "vehicle rate", results.vehicle_rate)]
    ):
        part = t[t[fixed_col] == fixed_val]
        stats = part.groupby(["policy", col])["mean latency (ms)"].agg(["mean", "std"]).reset_index()
        for name, p in stats.groupby("policy", sort=False):
            ax.errorbar(p[col], p["mean"], yerr=p["std"].fillna(0.0), marker="o", ms=4, capsize=3, label=name)
        ax.set_yscale("log")
        ax.set_xlabel(f"{col} ({'veh/s' if col == 'vehicle rate' else 'tasks/s per vehicle'})")
        ax.set_ylabel("mean task latency (ms)")
        ax.set_title(f"{fixed_col} = {fixed_val:g}")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def figure_misses(results: Results) -> plt.Figure:
    """Deadline misses against task rate (at the default vehicle rate)."""
    t = results.table
    return metric_panels(
        t[t["vehicle rate"] == results.vehicle_rate],
        "task rate",
        [("missed (%)", "tasks over deadline (%)")],
        title=f"vehicle rate = {results.vehicle_rate:g} veh/s",
    )


def constants(params: Params) -> pd.DataFrame:
    """Every constant of the simulator and of the DQN that is not a chapter parameter."""
    base = V2XConfig()
    sim = [(f"simulator: {f.name}", getattr(base, f.name)) for f in fields(base)
           if f.name not in ("vehicle_rate", "task_rate", "horizon_s")]
    own = {"hidden", "learning_rate", "gamma", "temperature"}
    dqn = [(f"DQN: {f.name}", getattr(params.dqn, f.name)) for f in fields(DQNConfig) if f.name not in own]
    return pd.DataFrame([*sim, *dqn], columns=["constant", "value"])
