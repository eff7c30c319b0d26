"""Tabular Q-learning for many agents at once, with action masks.

One :class:`TabularQ` holds a Q-table per agent (``shared=False``, the distributed setting of the
opportunistic-communication papers) or one table for all agents (``shared=True``).  Updates are the
textbook rule ``Q(s,a) += alpha * (r + gamma * max_{a' allowed} Q(s',a') - Q(s,a))``, applied to every agent's
transition of the slot in one vectorised call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np


@dataclass(frozen=True, kw_only=True)
class QLearningConfig:
    """Hyper-parameters of tabular Q-learning.

    Parameters
    ----------
    alpha, gamma
        Learning rate and discount.
    epsilon, epsilon_decay, epsilon_min
        Exploration rate at the first episode, its per-episode decay factor and its floor.
    shared
        One table for all agents instead of one per agent.
    """

    alpha: float = 0.1
    gamma: float = 0.99
    epsilon: float = 0.1
    epsilon_decay: float = 0.7
    epsilon_min: float = 0.01
    shared: bool = True

    def epsilon_at(self, episode: int) -> float:
        """Exploration rate of training episode ``episode`` (0-based)."""
        return max(self.epsilon_min, self.epsilon * self.epsilon_decay**episode)


class TabularQ:
    """Q-tables of ``agents`` agents over ``states`` x ``actions``.

    Parameters
    ----------
    agents, states, actions
        Table dimensions.
    config
        Learning hyper-parameters.
    """

    def __init__(self, agents: int, states: int, actions: int, config: QLearningConfig | None = None) -> None:
        self.config = config or QLearningConfig()
        self.agents = agents
        self.table = np.zeros((1 if self.config.shared else agents, states, actions))

    def _rows(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=int) if self.config.shared else np.arange(n)

    def values(self, states: np.ndarray) -> np.ndarray:
        """``(agents, actions)`` Q-values of each agent's current state."""
        return self.table[self._rows(len(states)), states]

    def greedy(self, states: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """The best allowed action of every agent (lowest index on ties)."""
        q = np.where(masks.astype(bool), self.values(states), -np.inf)
        return np.argmax(q, axis=1)

    def act(self, states: np.ndarray, masks: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
        """Epsilon-greedy over the allowed actions: explore uniformly among them with probability ``epsilon``."""
        action = self.greedy(states, masks)
        explore = rng.random(len(states)) < epsilon
        if explore.any():
            m = masks[explore].astype(float)
            u = rng.random(m.shape) * m  # a uniform draw among allowed actions
            action[explore] = np.argmax(u + m, axis=1)
        return action

    def update(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray,
               next_masks: np.ndarray) -> None:
        """One Q-learning step for every agent's transition ``(s, a, r, s')``.

        An all-zero ``next_masks`` row marks a terminal transition (no bootstrap).
        """
        c = self.config
        rows = self._rows(len(states))
        allowed = next_masks.astype(bool)
        nxt = np.where(allowed, self.table[rows, next_states], -np.inf).max(axis=1)
        nxt = np.where(allowed.any(axis=1), nxt, 0.0)  # no allowed action: a terminal state, worth 0
        target = rewards + c.gamma * nxt
        td = target - self.table[rows, states, actions]
        if c.shared:  # several agents may hit the same cell: accumulate
            np.add.at(self.table, (rows, states, actions), c.alpha * td)
        else:
            self.table[rows, states, actions] += c.alpha * td

    def save(self, path: str | Path) -> Path:
        """Write the tables to ``path`` (``.npy``) and return it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, self.table)
        return path

    @classmethod
    def load(cls, path: str | Path, config: QLearningConfig | None = None) -> "TabularQ":
        """Tables written by :meth:`save`."""
        table = np.load(path)
        agent = cls(table.shape[0], table.shape[1], table.shape[2], config)
        if agent.table.shape != table.shape:
            raise ValueError(f"table of shape {table.shape} does not fit config (shared={agent.config.shared})")
        agent.table = table
        return agent


def env_rewards(before: dict, after: dict) -> np.ndarray:
    """The environment's own per-agent rewards of a step (``after["rewards"]``)."""
    return np.asarray(after["rewards"], dtype=float)


def play_episode(env, seed: int, act: Callable[[dict, dict], np.ndarray], learner: TabularQ | None = None,
                 reward_fn: Callable[[dict, dict], np.ndarray] = env_rewards) -> float:
    """Run one episode of a multi-agent environment with ``{"state", "mask"}`` observations.

    Parameters
    ----------
    env
        The environment (e.g. ``OppComm-v0``); reset with ``seed``.
    seed
        Episode seed.
    act
        ``act(obs, info) -> actions``, one per agent.
    learner
        When given, its tables are updated after every step with the rewards of ``reward_fn``.
    reward_fn
        ``reward_fn(info_before, info_after) -> rewards``: the info the agents acted on and the step's
        outcome (a shaped reward such as the fuzzy one reads its inputs from the first).

    Returns
    -------
    float
        The sum over steps and agents of the rewards given by ``reward_fn``.
    """
    obs, info = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        action = act(obs, info)
        nxt, _, terminated, truncated, nxt_info = env.step(action)
        rewards = reward_fn(info, nxt_info)
        if learner is not None:
            learner.update(obs["state"], nxt_info["executed"], rewards, nxt["state"], nxt["mask"])
        total += float(np.sum(rewards))
        obs, info, done = nxt, nxt_info, terminated or truncated
    return total
