"""Driver of the wrsn-drl chapter: a DQN mobile charger against Q-charging and charging heuristics.

Per seed, a DQN (stable-baselines3) and a tabular Q-charging agent (state: the charger's location) are
trained on freshly drawn networks and saved; then they and the heuristics (INMA-like, nearest request,
no charging) are evaluated by network lifetime on held-out networks, at every packet probability of the
sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.checkpoints import trained
from repro.netsim.dqn import DQNConfig, checkpointed_dqn, greedy_actions, train_dqn
from repro.netsim.figures import learning_curves
from repro.netsim.qlearning import QLearningConfig, TabularQ
from repro.netsim.wrsn import WRSNChargingEnv, WRSNConfig, nearest_request
from repro.parallel import parallel_map

HELD_OUT = 5000
AGENTS = ("DQN", "Q-charging")
HEURISTICS = ("INMA-like", "nearest request", "no charging")


def inma_like(env: WRSNChargingEnv) -> int:
    """Heuristic: serve the request (sensor below ``E_min``) with the smallest remaining lifetime times distance.

    Without requests it falls back to the nearest-request rule.
    """
    c = env.config
    e_min = c.e_thresh_j + 0.3 * c.e_max_j
    requests = env.alive & (env.energy < e_min) & (env.rate > 0)
    if not requests.any():
        return nearest_request(env)
    remaining = np.where(requests, env.energy / np.where(env.rate > 0, env.rate, 1.0), np.inf)
    dist = np.linalg.norm(env.topo.sensors - env.mc, axis=1)
    score = np.where(requests, remaining * (dist + c.mc_speed), np.inf)
    worst = int(np.argmin(score))
    return int(np.argmin(np.linalg.norm(env.locations[:-1] - env.topo.sensors[worst], axis=1)))


def no_charging(env: WRSNChargingEnv) -> int:
    """The charger stays at the depot."""
    return len(env.locations) - 1


def location_state(env: WRSNChargingEnv) -> int:
    """Q-charging's state: the index of the charger's current location."""
    return int(np.argmin(np.linalg.norm(env.locations - env.mc, axis=1)))


def lifetime(cfg: WRSNConfig, seed: int, act: Callable[[WRSNChargingEnv, np.ndarray], int]) -> float:
    """Network lifetime (s) of one held-out network under ``act(env, obs)`` (capped at ``max_time_s``)."""
    env = WRSNChargingEnv(cfg)
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        obs, _, term, trunc, _ = env.step(act(env, obs))
        done = term or trunc
    return float(env.t)


def train_q_charging(cfg: WRSNConfig, episodes: int, seed: int, qconfig: QLearningConfig) -> tuple[TabularQ, list[float]]:
    """Tabular Q-learning over (current location -> next location), one fresh network per episode."""
    env = WRSNChargingEnv(cfg)
    n = len(env.locations)
    agent = TabularQ(1, n, n, qconfig)
    rng = np.random.default_rng([seed, 11])
    mask = np.ones((1, n))
    returns = []
    for ep in range(episodes):
        env.reset(seed=int(rng.integers(2**31)))
        eps = qconfig.epsilon_at(ep)
        done, total = False, 0.0
        while not done:
            s = np.array([location_state(env)])
            a = agent.act(s, mask, eps, rng)
            _, r, term, trunc, _ = env.step(int(a[0]))
            agent.update(s, a, np.array([r]), np.array([location_state(env)]), mask * (not term))
            total += r
            done = term or trunc
        returns.append(total)
    return agent, returns


@dataclass(frozen=True, kw_only=True)
class WRSNJob:
    """One seed of one agent, or of the heuristics (``agent == "heuristics"``).

    Attributes
    ----------
    agent
        ``"DQN"``, ``"Q-charging"`` or ``"heuristics"``.
    seed
        Training seed; evaluation networks are ``HELD_OUT + 100 * seed + k``.
    config
        Network scenario (training packet probability).
    train_steps, q_episodes
        DQN environment steps; Q-charging episodes.
    eval_networks, packet_probs
        Held-out networks per point; packet probabilities evaluated.
    dqn, qconfig
        Agent settings.
    checkpoint_dir
        Where trained agents are saved (``None``: not saved).
    device
        Where the DQN's networks train and act: ``cpu``, ``cuda`` or ``auto`` (Q-charging is a numpy table).
    reuse
        Load the agents (and their training curves) from ``checkpoint_dir`` instead of training.
    """

    agent: str
    seed: int
    config: WRSNConfig
    train_steps: int
    q_episodes: int
    eval_networks: int
    packet_probs: tuple[float, ...]
    dqn: DQNConfig
    qconfig: QLearningConfig
    checkpoint_dir: str | None = None
    device: str = "cpu"
    reuse: bool = False


@dataclass(frozen=True, kw_only=True)
class Lifetime:
    """Mean lifetime (s) of one policy over the held-out networks at one packet probability."""

    policy: str
    packet_prob: float
    seconds: float


@dataclass(frozen=True, kw_only=True)
class WRSNResult:
    """A job's lifetimes, its training curve (return per episode) and checkpoint."""

    job: WRSNJob
    lifetimes: tuple[Lifetime, ...]
    curve: tuple[float, ...]
    checkpoint: str | None


def _evaluate(job: WRSNJob, name: str, act) -> list[Lifetime]:
    out = []
    for p in job.packet_probs:
        cfg = replace(job.config, packet_prob=p)
        secs = [lifetime(cfg, HELD_OUT + 100 * job.seed + k, act) for k in range(job.eval_networks)]
        out.append(Lifetime(policy=name, packet_prob=p, seconds=float(np.mean(secs))))
    return out


def _q_charging_with_returns(job: WRSNJob) -> tuple[TabularQ, dict]:
    agent, returns = train_q_charging(job.config, job.q_episodes, job.seed, job.qconfig)
    return agent, {"returns": [float(r) for r in returns]}


def run(job: WRSNJob) -> WRSNResult:
    """Train (for an agent) and evaluate one job."""
    torch.set_num_threads(1)
    if job.agent == "heuristics":
        rules = {"INMA-like": inma_like, "nearest request": nearest_request, "no charging": no_charging}
        lifes = [lt for name, rule in rules.items() for lt in _evaluate(job, name, lambda env, obs, f=rule: f(env))]
        return WRSNResult(job=job, lifetimes=tuple(lifes), curve=(), checkpoint=None)
    path = None
    if job.agent == "DQN":
        done = checkpointed_dqn(job.checkpoint_dir, f"dqn_seed{job.seed}.zip", job.reuse,
                                lambda: train_dqn(WRSNChargingEnv(job.config), job.train_steps, job.seed, job.dqn,
                                                  device=job.device), job.device)
        dqn_run, path = done.trained, done.path
        curve = tuple(dqn_run.episode_returns)
        lifes = _evaluate(job, "DQN", lambda env, obs: int(greedy_actions(dqn_run.model, obs)[0]))
    elif job.agent == "Q-charging":
        tables = trained(job.checkpoint_dir, f"q_charging_seed{job.seed}.npy", job.reuse,
                         lambda: _q_charging_with_returns(job), lambda a, p: a.save(p),
                         lambda p: TabularQ.load(p, job.qconfig))
        agent, path = tables.model, None if tables.path is None else str(tables.path)
        curve = tuple(tables.extras["returns"])
        ones = np.ones((1, agent.table.shape[2]))
        lifes = _evaluate(job, "Q-charging",
                          lambda env, obs: int(agent.greedy(np.array([location_state(env)]), ones)[0]))
    else:
        raise ValueError(f"unknown agent {job.agent!r}")
    return WRSNResult(job=job, lifetimes=tuple(lifes), curve=curve, checkpoint=path)


def sweep(config: WRSNConfig, seeds: list[int], train_steps: int, q_episodes: int, eval_networks: int,
          packet_probs: list[float], dqn: DQNConfig, qconfig: QLearningConfig, checkpoint_dir: str | None,
          workers: int = 1, device: str = "cpu", reuse: bool = False) -> list[WRSNResult]:
    """Every agent and the heuristics, for every seed (the DQN's networks on ``device``; with ``reuse``, loaded)."""
    jobs = [
        WRSNJob(
            agent=agent,
            seed=s,
            config=config,
            train_steps=train_steps,
            q_episodes=q_episodes,
            eval_networks=eval_networks,
            packet_probs=tuple(packet_probs),
            dqn=dqn,
            qconfig=qconfig,
            checkpoint_dir=checkpoint_dir,
            device=device,
            reuse=reuse,
        )
        for s in seeds
        for agent in (*AGENTS, "heuristics")
    ]
    return parallel_map(run, jobs, workers=workers, desc="wrsn-drl runs")


def table(results: list[WRSNResult]) -> pd.DataFrame:
    """One row per (seed, packet probability, policy)."""
    return pd.DataFrame(
        [
            {"seed": r.job.seed, "policy": lt.policy, "packet prob": lt.packet_prob, "lifetime (s)": lt.seconds}
            for r in results
            for lt in r.lifetimes
        ]
    )


def _life(t: pd.DataFrame, policy: str, prob: float) -> pd.Series:
    part = t[(t["policy"] == policy) & (t["packet prob"] == prob)]
    return part.set_index("seed").sort_index()["lifetime (s)"]


def claims(results: list[WRSNResult], prob: float) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims at the training packet probability."""
    t = table(results)
    dqn = _life(t, "DQN", prob)
    existing = pd.concat([_life(t, p, prob) for p in ("Q-charging", "INMA-like", "nearest request")], axis=1)
    return {
        "lifetime_vs_best_existing": list(dqn / existing.max(axis=1)),
        "lifetime_vs_qcharging": list(dqn / _life(t, "Q-charging", prob)),
    }


def summary(results: list[WRSNResult]) -> pd.DataFrame:
    """Mean and sd over seeds of every policy's lifetime at every packet probability (the headline table)."""
    t = table(results)
    agg = t.groupby(["packet prob", "policy"], sort=False)["lifetime (s)"].agg(["mean", "std"]).round(0)
    return agg.reset_index()


def figure_lifetimes(results: list[WRSNResult]) -> plt.Figure:
    """Lifetime of every policy against the packet probability (mean over seeds, bars: sd)."""
    t = table(results)
    stats = t.groupby(["policy", "packet prob"], sort=False)["lifetime (s)"].agg(["mean", "std"]).reset_index()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, part in stats.groupby("policy", sort=False):
        ax.errorbar(
            part["packet prob"], part["mean"] / 3600, yerr=part["std"].fillna(0) / 3600, marker="o", ms=4, capsize=3, label=name
        )
    ax.set_xlabel("packet probability per second")
    ax.set_ylabel("network lifetime (h)")
    ax.set_title("lifetime on held-out networks")
    ax.legend(fontsize=8)
    return fig


def figure_learning(results: list[WRSNResult], scale_s: float) -> plt.Figure:
    """Training return (lifetime per episode, h) of DQN and Q-charging."""
    curves = {}
    for agent in AGENTS:
        runs = [r.curve for r in results if r.job.agent == agent]
        n = min(len(c) for c in runs)
        curves[agent] = [[v * scale_s / 3600 for v in c[:n]] for c in runs]
    return learning_curves(curves, ylabel="episode lifetime (h)", title="training on fresh networks")
