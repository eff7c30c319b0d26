"""Driver of the wrsn-drl chapter: a DQN mobile charger against the authors' Q-charging and INMA.

Per seed, a DQN (stable-baselines3) is trained on freshly drawn networks and saved; then it, the authors'
Q-charging (which learns online, from a zero table, during the very run it is judged on), the authors'
INMA rule and two rules of ours (nearest request, no charging) are evaluated by network lifetime on
held-out networks at every packet probability of the sweep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.netsim.dqn import DQNConfig, checkpointed_dqn, greedy_actions, train_dqn
from repro.netsim.figures import learning_curves
from repro.netsim.qcharging import Move, QCharging, inma
from repro.netsim.wrsn import WRSNChargingEnv, WRSNConfig, nearest_request
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence

HELD_OUT = 5000
"""Evaluation networks are drawn from seeds ``HELD_OUT + NETWORKS_PER_SEED * seed + k``."""
NETWORKS_PER_SEED = 100
DQN_NAME, Q_NAME, INMA_NAME, NEAREST, PARKED = "DQN", "Q-charging", "INMA", "nearest request", "no charging"
EXISTING = (Q_NAME, INMA_NAME)
"""The existing algorithms of the authors' code that the DQN is set against."""
OURS = (NEAREST, PARKED)
"""Rules of ours: a greedy reference and the floor."""

# The DQN's settings that the authors' DQN.py and MobileCharger.py fix (commit 855cd06):
DQN_BUFFER = 5000
"""Replay memory (``deque(maxlen=5000)``)."""
DQN_BATCH = 64
"""Minibatch (``self.batch_size = 64``)."""
DQN_GAMMA = 0.99
"""Discount (``discount_factor=0.99``)."""
DQN_WARMUP = 100
"""Decisions before the first replay (``steps_to_update_target_model < 100``)."""
DQN_TARGET_EVERY = 10
"""Target-network copy period in replays (``UPDATE_EVERY = 10``); one replay per decision."""
EPSILON_DECAY, EPSILON_MIN = 0.99, 0.05
"""Exploration: 1.0, times 0.99 per decision, down to 0.05 (``MobileCharger.epsilon``)."""


def exploration_steps() -> int:
    """Decisions until the authors' epsilon reaches its floor (1.0 x 0.99^n <= 0.05)."""
    return math.ceil(math.log(EPSILON_MIN) / math.log(EPSILON_DECAY))


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    sensors: int
    targets: int
    field_m: float
    comm_m: float
    grid: int
    drain_scale: float
    max_time_s: float
    packet_prob: float
    packet_probs: tuple[float, ...]
    train_steps: int
    eval_networks: int
    hidden: tuple[int, ...]
    learning_rate: float
    seeds: tuple[int, ...]
    workers: int
    reuse_checkpoints: bool
    device: str

    def checks(self) -> None:
        """Refuse impossible combinations before any kernel starts."""
        require(self.packet_prob in self.packet_probs, self, ("packet_prob", "packet_probs"),
                "packet_probs must contain packet_prob (the claims are read there)")
        require(self.targets <= self.sensors, self, ("targets", "sensors"), "need at least one sensor per target")
        require(self.train_steps > DQN_WARMUP, self, "train_steps",
                f"the DQN replays nothing in its first {DQN_WARMUP} decisions; train for more")
        require(self.eval_networks <= NETWORKS_PER_SEED, self, "eval_networks",
                f"at most {NETWORKS_PER_SEED} held-out networks per seed (their seeds would overlap the next seed's)")

    @property
    def config(self) -> WRSNConfig:
        """The scenario at the training packet probability."""
        return WRSNConfig(sensors=self.sensors, targets=self.targets, field_m=self.field_m, comm_m=self.comm_m,
                          grid=self.grid, drain_scale=self.drain_scale, max_time_s=self.max_time_s,
                          packet_prob=self.packet_prob)

    @property
    def dqn(self) -> DQNConfig:
        """The DQN's settings: the authors' constants, our widths and learning rate."""
        return DQNConfig(hidden=self.hidden, learning_rate=self.learning_rate, gamma=DQN_GAMMA,
                         batch_size=DQN_BATCH, buffer_size=DQN_BUFFER, learning_starts=DQN_WARMUP, train_freq=1,
                         target_update_interval=DQN_TARGET_EVERY,
                         exploration_fraction=min(1.0, exploration_steps() / self.train_steps),
                         exploration_final_eps=EPSILON_MIN)


Policy = Callable[[WRSNChargingEnv, np.ndarray], "int | Move"]


def lifetime(cfg: WRSNConfig, seed: int, act: Policy) -> float:
    """Network lifetime (s) of one held-out network under ``act(env, obs)`` (capped at ``max_time_s``).

    ``act`` returns a charging location's index or a :class:`repro.netsim.qcharging.Move`.
    """
    env = WRSNChargingEnv(cfg)
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        choice = act(env, obs)
        step = env.move(choice.target, choice.dwell_s) if isinstance(choice, Move) else env.step(choice)
        obs, _, term, trunc, _ = step
        done = term or trunc
    return float(env.t)


def q_charging_lifetime(cfg: WRSNConfig, seed: int) -> float:
    """Lifetime under the authors' Q-charging, which starts from a zero table on this network and learns online."""
    agent = QCharging(len(cfg.locations))
    return lifetime(cfg, seed, lambda env, obs: agent.decide(env))


@dataclass(frozen=True, kw_only=True)
class WRSNJob:
    """One seed of the DQN, or of the rules (``agent == "rules"``: Q-charging, INMA and ours).

    Attributes
    ----------
    agent
        ``"DQN"`` or ``"rules"``.
    seed
        Training seed; evaluation networks are ``HELD_OUT + NETWORKS_PER_SEED * seed + k``.
    params
        The chapter's parameters.
    checkpoint_dir
        Where the trained DQN is saved (``None``: not saved).
    """

    agent: str
    seed: int
    params: Params
    checkpoint_dir: str | None = None


@dataclass(frozen=True, kw_only=True)
class Lifetime:
    """Lifetime (s) of one policy on one held-out network at one packet probability."""

    policy: str
    packet_prob: float
    network: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class WRSNResult:
    """A job's lifetimes and (for the DQN) its training curve (return per episode)."""

    job: WRSNJob
    lifetimes: tuple[Lifetime, ...]
    curve: tuple[float, ...]


def _evaluate(job: WRSNJob, name: str, life: Callable[[WRSNConfig, int], float]) -> list[Lifetime]:
    out = []
    for p in job.params.packet_probs:
        cfg = replace(job.params.config, packet_prob=p)
        for k in range(job.params.eval_networks):
            secs = life(cfg, HELD_OUT + NETWORKS_PER_SEED * job.seed + k)
            out.append(Lifetime(policy=name, packet_prob=p, network=k, seconds=secs))
    return out


def _rule(fn: Callable[[WRSNChargingEnv], "int | Move"]) -> Callable[[WRSNConfig, int], float]:
    return lambda cfg, seed: lifetime(cfg, seed, lambda env, obs: fn(env))


def run_job(job: WRSNJob) -> WRSNResult:
    """Train (for the DQN) and evaluate one job."""
    torch.set_num_threads(1)
    p = job.params
    if job.agent == "rules":
        rules: dict[str, Callable[[WRSNConfig, int], float]] = {
            Q_NAME: q_charging_lifetime, INMA_NAME: _rule(inma), NEAREST: _rule(nearest_request),
            PARKED: _rule(lambda env: len(env.locations) - 1)}
        lifes = [lt for name, life in rules.items() for lt in _evaluate(job, name, life)]
        return WRSNResult(job=job, lifetimes=tuple(lifes), curve=())
    if job.agent != DQN_NAME:
        raise ValueError(f"unknown agent {job.agent!r}; use {DQN_NAME!r} or 'rules'")
    done = checkpointed_dqn(job.checkpoint_dir, f"dqn_seed{job.seed}.zip", p.reuse_checkpoints,
                            lambda: train_dqn(WRSNChargingEnv(p.config), p.train_steps, job.seed, p.dqn,
                                              device=p.device), p.device)
    model = done.trained.model
    lifes = _evaluate(job, DQN_NAME, _rule_on_obs(model))
    return WRSNResult(job=job, lifetimes=tuple(lifes), curve=tuple(done.trained.episode_returns))


def _rule_on_obs(model: object) -> Callable[[WRSNConfig, int], float]:
    return lambda cfg, seed: lifetime(cfg, seed, lambda env, obs: int(greedy_actions(model, obs)[0]))  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    lifetimes
        One row per (seed, policy, packet probability, held-out network): ``lifetime (s)``.
    curves
        Per seed, the DQN's training return per episode (lifetime / ``reward_scale_s``).
    packet_prob
        The training packet probability, where the claims are read.
    reward_scale_s
        The unit of the training return.
    """

    lifetimes: pd.DataFrame
    curves: tuple[tuple[float, ...], ...]
    packet_prob: float
    reward_scale_s: float


def run(params: Params, checkpoint_dir: str | None = None) -> Results:
    """Every seed's DQN and rules (the DQN's networks on ``params.device``; with ``reuse_checkpoints``, loaded)."""
    jobs = [WRSNJob(agent=agent, seed=s, params=params, checkpoint_dir=checkpoint_dir)
            for s in params.seeds for agent in (DQN_NAME, "rules")]
    done = parallel_map(run_job, jobs, workers=params.workers, desc="wrsn-drl runs")
    rows = [{"seed": r.job.seed, "policy": lt.policy, "packet prob": lt.packet_prob, "network": lt.network,
             "lifetime (s)": lt.seconds} for r in done for lt in r.lifetimes]
    return Results(lifetimes=pd.DataFrame(rows), curves=tuple(r.curve for r in done if r.job.agent == DQN_NAME),
                   packet_prob=params.packet_prob, reward_scale_s=params.config.reward_scale_s)


def per_seed(results: Results) -> pd.DataFrame:
    """Mean lifetime over the held-out networks: rows (seed, packet probability), one column per policy."""
    t = results.lifetimes
    return t.pivot_table(index=["seed", "packet prob"], columns="policy", values="lifetime (s)", aggfunc="mean")


def ratios(results: Results) -> pd.DataFrame:
    """The DQN's lifetime over each other policy's, per seed and packet probability."""
    m = per_seed(results)
    return m[[*EXISTING, *OURS]].rdiv(m[DQN_NAME], axis=0)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims (at the training packet probability unless said otherwise)."""
    r = ratios(results)
    at = r.xs(results.packet_prob, level="packet prob").sort_index()
    m = per_seed(results).xs(results.packet_prob, level="packet prob").sort_index()
    best = m[[*EXISTING, NEAREST]].max(axis=1)
    up_to = r[list(EXISTING)].groupby(level="seed").max().max(axis=1).sort_index()
    return {
        "lifetime_vs_qcharging": list(at[Q_NAME]),
        "lifetime_vs_best_existing": list(m[DQN_NAME] / best),
        "lifetime_up_to_vs_existing": list(up_to),
    }


def summary(results: Results) -> pd.DataFrame:
    """Mean and sd over seeds of every policy's lifetime (h) at every packet probability (the headline table)."""
    t = per_seed(results).reset_index().melt(id_vars=["seed", "packet prob"], var_name="policy",
                                             value_name="lifetime (s)")
    agg = t.groupby(["packet prob", "policy"], sort=False)["lifetime (s)"].agg(["mean", "std"]) / 3600
    return agg.round(2).rename(columns={"mean": "mean (h)", "std": "sd (h)"}).reset_index()


def figure_lifetimes(results: Results) -> plt.Figure:
    """Lifetime of every policy against the packet probability (mean over seeds, bars: sd over seeds)."""
    t = per_seed(results).reset_index().melt(id_vars=["seed", "packet prob"], var_name="policy",
                                             value_name="lifetime (s)")
    stats = t.groupby(["policy", "packet prob"], sort=False)["lifetime (s)"].agg(["mean", "std"]).reset_index()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, part in stats.groupby("policy", sort=False):
        ax.errorbar(part["packet prob"], part["mean"] / 3600, yerr=part["std"].fillna(0) / 3600, marker="o", ms=4,
                    capsize=3, label=name)
    ax.set_xlabel("packet probability per second")
    ax.set_ylabel("network lifetime (h)")
    ax.set_title("lifetime on held-out networks")
    ax.legend(fontsize=8)
    return fig


def figure_learning(results: Results) -> plt.Figure:
    """The DQN's training return (lifetime per episode, h) on fresh networks."""
    n = min(len(c) for c in results.curves)
    runs = [[v * results.reward_scale_s / 3600 for v in c[:n]] for c in results.curves]
    return learning_curves({DQN_NAME: runs}, ylabel="episode lifetime (h)", title="DQN training on fresh networks")


def figure_network(params: Params) -> plt.Figure:
    """One held-out network: sensors coloured by drain, targets, charging locations and the base."""
    env = WRSNChargingEnv(params.config)
    env.reset(seed=HELD_OUT)
    fig, ax = plt.subplots(figsize=(4.6, 4.6))
    sensors, targets, spots = env.topo.sensors, env.topo.targets, env.locations[:-1]
    ax.scatter(sensors[:, 0], sensors[:, 1], s=12, c=env.rate, cmap="Reds", label="sensors (colour: drain)")
    ax.scatter(targets[:, 0], targets[:, 1], marker="x", c="k", label="targets")
    ax.scatter(spots[:, 0], spots[:, 1], marker="+", c="C0", alpha=0.5, label="charging locations")
    ax.scatter([env.topo.base[0]], [env.topo.base[1]], marker="s", c="C2", s=40, label="base")
    ax.set_aspect("equal")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title("a held-out network")
    return fig


def constants(params: Params) -> pd.DataFrame:
    """Every constant of the simulator and of the DQN that is not a chapter parameter."""
    cfg = params.config
    own = set(Params.__dataclass_fields__)
    sim = [(f"simulator: {name}", getattr(cfg, name)) for name in WRSNConfig.__dataclass_fields__ if name not in own]
    dqn = [(f"DQN: {name}", getattr(params.dqn, name)) for name in DQNConfig.__dataclass_fields__
           if name not in ("hidden", "learning_rate", "temperature")]
    return pd.DataFrame([*sim, *dqn], columns=["constant", "value"])
