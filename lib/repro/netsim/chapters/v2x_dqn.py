"""Driver of the v2x-dqn chapter: DQN offloading over V2I, V2C and V2I+I2C paths against queue-aware baselines.

Per seed, two DQN agents (queue-guided and uniform exploration) are trained at the heaviest load and
saved; then every agent and the baselines (greedy on the exact queue-based latency, the three fixed
paths, random) are evaluated on held-out traffic at every load point of the two sweeps (vehicle arrival
rate at the default task rate, task rate at the default vehicle rate).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.netsim.dqn import DQNConfig, checkpointed_dqn, greedy_actions, train_dqn
from repro.netsim.figures import learning_curves, metric_panels
from repro.netsim.heuristics import FixedPath, GreedyLatency, RandomAllowed
from repro.netsim.v2x import V2C, V2I, V2I_I2C, ThreeTierV2XEnv, V2XConfig, latencies_from_observation
from repro.parallel import parallel_map

HELD_OUT = 1000
AGENTS = ("DQN (guided)", "DQN (uniform)")
BASELINES = ("greedy", "all-V2I", "all-V2C", "all-V2I+I2C", "random")
FIXED = ("all-V2I", "all-V2C", "all-V2I+I2C")


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
class V2XJob:
    """One seed of one agent (or of the baselines when ``agent`` is ``"baselines"``).

    Attributes
    ----------
    agent
        ``"DQN (guided)"``, ``"DQN (uniform)"`` or ``"baselines"``.
    seed
        Training seed; evaluation traffic uses ``HELD_OUT + seed``.
    base
        Scenario constants; the load fields are overridden per load point.
    train_load, train_steps, train_horizon_s
        Where and how long the agent trains (episodes of ``train_horizon_s`` simulated seconds).
    eval_loads, eval_horizon_s
        Evaluation points and episode length.
    dqn
        DQN hyper-parameters.
    checkpoint_dir
        Where the trained model is saved (``None``: not saved).
    device
        Where the Q-networks train and act: ``cpu``, ``cuda`` or ``auto``.
    reuse
        Load the agents (and their training curves) from ``checkpoint_dir`` instead of training.
    """

    agent: str
    seed: int
    base: V2XConfig
    train_load: Load
    train_steps: int
    train_horizon_s: float
    eval_loads: tuple[Load, ...]
    eval_horizon_s: float
    dqn: DQNConfig
    checkpoint_dir: str | None = None
    device: str = "cpu"
    reuse: bool = False


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
    """A job's evaluations, its training curve (mean reward per task per episode) and checkpoint."""

    job: V2XJob
    evaluations: tuple[Evaluation, ...]
    curve: tuple[float, ...]
    train_seconds: float
    checkpoint: str | None


def scenario(base: V2XConfig, load: Load, horizon_s: float) -> V2XConfig:
    """``base`` at a load point and episode length."""
    return replace(base, vehicle_rate=load.vehicle_rate, task_rate=load.task_rate, horizon_s=horizon_s)


def evaluate(cfg: V2XConfig, seed: int, act, name: str, load: Load) -> Evaluation:
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
        path_share=tuple(float(p) for p in paths),
    )


def run(job: V2XJob) -> V2XResult:
    """Train (for an agent) and evaluate one job."""
    torch.set_num_threads(1)
    test = HELD_OUT + job.seed
    if job.agent == "baselines":
        rng = np.random.default_rng([job.seed, 3])
        policies = {
            "greedy": GreedyLatency(),
            "all-V2I": FixedPath(path=V2I),
            "all-V2C": FixedPath(path=V2C),
            "all-V2I+I2C": FixedPath(path=V2I_I2C),
            "random": RandomAllowed(),
        }
        evals = tuple(
            evaluate(scenario(job.base, load, job.eval_horizon_s), test, lambda o, i, p=pol: p.act(o, i, rng), name, load)
            for load in job.eval_loads
            for name, pol in policies.items()
        )
        return V2XResult(job=job, evaluations=evals, curve=(), train_seconds=0.0, checkpoint=None)
    if job.agent not in AGENTS:
        raise ValueError(f"unknown agent {job.agent!r}; use one of {AGENTS + ('baselines',)}")
    train_cfg = scenario(job.base, job.train_load, job.train_horizon_s)
    guide = functools.partial(latencies_from_observation, train_cfg) if job.agent == AGENTS[0] else None
    tag = "guided" if guide else "uniform"
    done = checkpointed_dqn(
        job.checkpoint_dir,
        f"dqn_{tag}_seed{job.seed}.zip",
        job.reuse,
        lambda: train_dqn(ThreeTierV2XEnv(train_cfg), job.train_steps, job.seed, job.dqn, guide, job.device),
        job.device,
    )
    trained, path = done.trained, done.path
    act = lambda o, i: int(greedy_actions(trained.model, o)[0])  # noqa: E731
    evals = tuple(evaluate(scenario(job.base, load, job.eval_horizon_s), test, act, job.agent, load) for load in job.eval_loads)
    curve = tuple(r / max(n, 1) for r, n in zip(trained.episode_returns, trained.episode_lengths))
    return V2XResult(job=job, evaluations=evals, curve=curve, train_seconds=trained.seconds, checkpoint=path)


def loads(vehicle_rates: list[float], task_rates: list[float], vehicle_rate: float, task_rate: float) -> tuple[Load, ...]:
    """The vehicle-rate sweep at ``task_rate`` and the task-rate sweep at ``vehicle_rate`` (no duplicates)."""
    pts = [Load(vehicle_rate=v, task_rate=task_rate) for v in vehicle_rates] + [
        Load(vehicle_rate=vehicle_rate, task_rate=p) for p in task_rates
    ]
    return tuple(dict.fromkeys(pts))


def heaviest(points: tuple[Load, ...]) -> Load:
    """The load point with the most tasks per second."""
    return max(points, key=lambda p: p.vehicle_rate * p.task_rate)


def lightest(points: tuple[Load, ...]) -> Load:
    """The load point with the fewest tasks per second."""
    return min(points, key=lambda p: p.vehicle_rate * p.task_rate)


def sweep(
    base: V2XConfig,
    eval_loads: tuple[Load, ...],
    train_load: Load,
    seeds: list[int],
    train_steps: int,
    train_horizon_s: float,
    eval_horizon_s: float,
    dqn: DQNConfig,
    checkpoint_dir: str | None,
    workers: int = 1,
    device: str = "cpu",
    reuse: bool = False,
) -> list[V2XResult]:
    """Every agent and the baselines for every seed (the agents' networks on ``device``; with ``reuse``, loaded)."""
    jobs = [
        V2XJob(
            agent=agent,
            seed=s,
            base=base,
            train_load=train_load,
            train_steps=train_steps,
            train_horizon_s=train_horizon_s,
            eval_loads=eval_loads,
            eval_horizon_s=eval_horizon_s,
            dqn=dqn,
            checkpoint_dir=checkpoint_dir,
            device=device,
            reuse=reuse,
        )
        for s in seeds
        for agent in (*AGENTS, "baselines")
    ]
    return parallel_map(run, jobs, workers=workers, desc="v2x-dqn runs")


def table(results: list[V2XResult]) -> pd.DataFrame:
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


def claims(results: list[V2XResult], heavy: Load, light: Load) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims."""
    t = table(results)
    guided_vs_fixed_heavy = _reduction(t, AGENTS[0], best_fixed(t, heavy), heavy)
    guided_vs_fixed_light = _reduction(t, AGENTS[0], best_fixed(t, light), light)
    return {
        "latency_vs_greedy_heavy": list(_reduction(t, AGENTS[0], _latency(t, "greedy", heavy), heavy)),
        "latency_vs_fixed_heavy": list(guided_vs_fixed_heavy),
        "gain_grows_with_load": list(guided_vs_fixed_heavy - guided_vs_fixed_light),
        "guided_vs_uniform_heavy": list(_reduction(t, AGENTS[0], _latency(t, AGENTS[1], heavy), heavy)),
    }


def summary(results: list[V2XResult], heavy: Load) -> pd.DataFrame:
    """The headline table: every policy at the heaviest load, mean and sd over seeds."""
    t = table(results)
    t = t[(t["vehicle rate"] == heavy.vehicle_rate) & (t["task rate"] == heavy.task_rate)]
    agg = t.groupby("policy", sort=False)[["mean latency (ms)", "missed (%)", "share V2I", "share V2C", "share V2I+I2C"]].agg(
        ["mean", "std"]
    )
    agg.columns = [f"{a} {b}" for a, b in agg.columns]
    return agg.round(3).reset_index()


def figure_learning(results: list[V2XResult]) -> plt.Figure:
    """Mean reward per task in each training episode, guided against uniform exploration."""
    curves = {}
    for agent in AGENTS:
        runs = [r.curve for r in results if r.job.agent == agent]
        n = min(len(c) for c in runs)
        curves[agent] = [c[:n] for c in runs]
    return learning_curves(curves, ylabel="mean reward per task", title="DQN training at the heaviest load")


def figure_loads(results: list[V2XResult], base_vehicle_rate: float, base_task_rate: float) -> plt.Figure:
    """Mean latency against vehicle arrival rate and against task rate (log scale), every policy."""
    t = table(results)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, (col, fixed_col, fixed_val) in zip(
        axes, [("vehicle rate", "task rate", base_task_rate), ("task rate", "vehicle rate", base_vehicle_rate)]
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


def figure_misses(results: list[V2XResult], base_vehicle_rate: float) -> plt.Figure:
    """Deadline misses against task rate (at the default vehicle rate)."""
    t = table(results)
    return metric_panels(
        t[t["vehicle rate"] == base_vehicle_rate],
        "task rate",
        [("missed (%)", "tasks over deadline (%)")],
        title=f"vehicle rate = {base_vehicle_rate:g} veh/s",
    )
