"""The authors' charging baselines on ``WRSNCharging-v0``: Q-charging (online, three-term reward) and INMA.

Both follow the candidate authors' repository (github.com/labaiotbkhn/datn-2021-wrsn-dqn at commit
855cd06c4ffe7c07deca3285cfcc98ca9e975d12): ``Q__Learning.py`` with ``Q_learning_method.py`` and ``Inma.py``.

**Q-charging** keeps a table over (current location, next location), the grid points and the depot, and
learns *during* the run it is judged on, from a zero table.  At every decision with pending requests
(sensors below ``request_j``) it scores every location ``a`` with three terms, each normalised to sum to one
over the locations (``reward_function``):

- ``first(a) = sum_i e_i p_i(a) / E_i`` over the requesting sensors ``i`` (drain ``e_i``, energy ``E_i``,
  power ``p_i(a) = alpha / (d_i(a) + beta)^2`` received at ``a``);
- ``second(a)``: the share of targets whose reporting path holds no requesting sensor predicted to die
  when the charger goes to ``a`` and charges for the heuristic time;
- ``third(a) = sum_i w_i p_i(a) / sum_j p_j(a)``, ``w_i`` the share of target paths through sensor ``i``;

then updates the whole row of the current location at once,
``Q[s] <- (1 - alpha) Q[s] + alpha (R + gamma q)`` with ``q[a] = max Q[a]`` for ``a != s`` and ``q[s] = -2``
(``q_max_function``), ``alpha = 0.6``, ``gamma = 0.5``, and moves greedily to ``argmax Q[s]`` (no exploration),
to the depot when the charger is below :data:`repro.netsim.wrsn.MC_LOW_J`.  Without requests it stays.

**INMA** serves, among the requesting sensors, the one with the smallest travel time plus time to a full
battery at the power of a charger standing on it (``alpha / beta^2`` net of its drain); the charger drives
to that sensor's own position and stays for the sensor's remaining lifetime (``energy / drain``), capped
like every dwell by the environment's ``max_charge_s``.

Departures from the code: the charging-time heuristic, requests and drain rates are the environment's
(exact drain rates instead of the code's running estimate); a request is any alive sensor below
``request_j`` at decision time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.netsim.wrsn import MC_LOW_J, WRSNChargingEnv, charge_rate, charging_times

ALPHA = 0.6
"""Learning rate of Q-charging (``Q_learning.update(alpha=0.6)`` in the authors' ``Q__Learning.py``)."""
GAMMA = 0.5
"""Discount of Q-charging (``Q_learning.update(gamma=0.5)``)."""
SELF_VALUE = -2.0
"""The bootstrap value the authors give staying where the charger is (``q_max_function``'s ``-2``)."""
PATH_SMOOTHING = 1e-3
"""Added to every path count before the path weights are normalised (``get_weight``'s ``10 ** -3``)."""


def _normalised(x: np.ndarray) -> np.ndarray:
    total = float(x.sum())
    return x / total if total > 0 else np.zeros_like(x)


@dataclass(frozen=True, kw_only=True)
class ChargingReward:
    """The authors' reward of every location for the current requests, and the dwell the heuristic gives each.

    Attributes
    ----------
    first, second, third
        The three terms over the locations, each normalised to sum to one (zeros where a term is 0 everywhere).
    dwell_s
        The charging-time heuristic at every location (travel from the charger's position).
    """

    first: np.ndarray
    second: np.ndarray
    third: np.ndarray
    dwell_s: np.ndarray

    @property
    def total(self) -> np.ndarray:
        """``first + second + third``, the reward vector of the row update."""
        return np.asarray(self.first + self.second + self.third)


def charging_reward(env: WRSNChargingEnv, requests: np.ndarray) -> ChargingReward:
    """The three-term reward of every charging location for the sensors in ``requests`` (see the module docstring).

    Parameters
    ----------
    env
        The environment, mid-episode.
    requests
        Indices of the requesting sensors (at least one).
    """
    c = env.config
    locs = env.locations
    travel = np.linalg.norm(locs - env.mc, axis=1) / c.mc_speed
    gain_all = charge_rate(c, np.linalg.norm(locs[:, None, :] - env.topo.sensors[None, :, :], axis=2))
    dwell = charging_times(c, env.energy, env.rate, gain_all, travel)
    p = gain_all[:, requests]  # (locations, requests)
    energy, drain = env.energy[requests], env.rate[requests]
    first = (drain[None, :] * p / np.maximum(energy[None, :], 1e-12)).sum(axis=1)
    predicted = energy[None, :] - travel[:, None] * drain[None, :] + (p - drain[None, :]) * dwell[:, None]
    dying = predicted < 0  # (locations, requests)
    paths = [set(path) for path in env.routes.paths]
    on_path = np.array([[int(i) in path for i in requests] for path in paths], dtype=bool)  # (targets, requests)
    reported = np.array([len(path) > 0 for path in paths])
    broken = (dying[:, None, :] & on_path[None, :, :]).any(axis=2)  # (locations, targets)
    second = (reported[None, :] & ~broken).sum(axis=1) / max(len(paths), 1)
    counts = on_path.sum(axis=0).astype(float)
    w = (counts + PATH_SMOOTHING) / (counts.sum() + len(counts) * PATH_SMOOTHING)
    share = p / np.maximum(p.sum(axis=1, keepdims=True), 1e-300)
    third = (w[None, :] * share).sum(axis=1)
    return ChargingReward(first=_normalised(first), second=_normalised(second), third=_normalised(third),
                          dwell_s=dwell)


def location_index(env: WRSNChargingEnv) -> int:
    """The index of the charging location the charger stands on (the nearest one)."""
    return int(np.argmin(np.linalg.norm(env.locations - env.mc, axis=1)))


class QCharging:
    """The authors' Q-charging: a table over (location, next location), updated a whole row per decision.

    Parameters
    ----------
    locations
        Number of charging locations (the grid points and the depot, last).
    alpha, gamma
        Learning rate and discount (the authors' 0.6 and 0.5 by default).
    """

    def __init__(self, locations: int, alpha: float = ALPHA, gamma: float = GAMMA) -> None:
        self.alpha, self.gamma = alpha, gamma
        self.table = np.zeros((locations, locations))

    def bootstrap(self, state: int) -> np.ndarray:
        """The authors' ``q_max``: every next location's best value, ``SELF_VALUE`` for staying."""
        q = self.table.max(axis=1)
        q[state] = SELF_VALUE
        return q

    def update(self, state: int, reward: np.ndarray) -> None:
        """``Q[s] <- (1 - alpha) Q[s] + alpha (R + gamma q_max)``, every action of the row at once."""
        target = reward + self.gamma * self.bootstrap(state)
        self.table[state] = (1.0 - self.alpha) * self.table[state] + self.alpha * target

    def decide(self, env: WRSNChargingEnv) -> int:
        """Learn from the current requests and return the next location (stay when nothing is requested)."""
        state = location_index(env)
        requests = env.requests()
        if len(requests) == 0:
            return state
        self.update(state, charging_reward(env, requests).total)
        if env.mc_energy < MC_LOW_J:
            return len(env.locations) - 1
        return int(np.argmax(self.table[state]))


@dataclass(frozen=True, kw_only=True)
class Move:
    """Where a rule sends the charger and how long it charges there (``None``: the environment's heuristic)."""

    target: np.ndarray
    dwell_s: float | None


def inma(env: WRSNChargingEnv) -> Move:
    """The authors' INMA rule (``Inma.py``): the request with the least travel plus time to full, at its own position."""
    c = env.config
    requests = env.requests()
    if len(requests) == 0:
        return Move(target=env.mc.copy(), dwell_s=None)
    energy, drain = env.energy[requests], env.rate[requests]
    spots = env.topo.sensors[requests]
    travel = np.linalg.norm(spots - env.mc, axis=1) / c.mc_speed
    net = c.alpha / c.beta**2 - drain
    with np.errstate(divide="ignore"):
        to_full = np.where(net > 0, (c.e_max_j - energy) / net, np.inf)
    k = int(np.argmin(travel + to_full))
    return Move(target=spots[k].copy(), dwell_s=float(energy[k] / drain[k]) if drain[k] > 0 else None)
