"""Non-learning baselines, acting on the same environments as the learned agents.

Each policy is a small frozen dataclass with ``act(obs, info, rng) -> action``.  The opportunistic-
communication policies (:class:`AllCellular`, :class:`FixedProbability`, :class:`GreedyOpportunistic`,
:class:`RandomAllowed`) return one action per device of ``OppComm-v0``; the offloading policies
(:class:`FixedPath`, :class:`GreedyLatency`, :class:`RandomAllowed`) return one path for the current task of
``ThreeTierV2X-v0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from repro.netsim.oppcomm import CELL, RELAY, RSU, WAIT


def _deadline(info: dict, delta_s: float, margin_s: float) -> np.ndarray:
    """Devices whose oldest packet must go over 4G now to arrive within delta."""
    return (info["age_s"] >= delta_s - margin_s) & (info["free_ratio"] < 1.0)


@dataclass(frozen=True, kw_only=True)
class AllCellular:
    """Every packet over 4G at once (the cost reference: 100 %)."""

    def act(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        """4G for every device."""
        return np.full(len(obs["state"]), CELL)


@dataclass(frozen=True, kw_only=True)
class FixedProbability:
    """Use a Wi-Fi option (RSU first, else a neighbour) with probability ``p`` when one exists; 4G at the deadline.

    Parameters
    ----------
    p
        Probability of taking an available Wi-Fi option in a slot.
    delta_s
        Latency threshold.
    margin_s
        Send over 4G once the oldest packet is this close to ``delta_s``.
    """

    p: float
    delta_s: float
    margin_s: float = 2.0

    def act(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        """One action per device."""
        mask = obs["mask"].astype(bool)
        take = rng.random(len(mask)) < self.p
        action = np.full(len(mask), WAIT)
        action[take & mask[:, RELAY]] = RELAY
        action[take & mask[:, RSU]] = RSU
        action[_deadline(info, self.delta_s, self.margin_s)] = CELL
        return action


@dataclass(frozen=True, kw_only=True)
class GreedyOpportunistic:
    """RSU when in range, else a neighbour with more free buffer, else wait; 4G at the deadline.

    Parameters
    ----------
    delta_s
        Latency threshold.
    margin_s
        Send over 4G once the oldest packet is this close to ``delta_s``.
    """

    delta_s: float
    margin_s: float = 2.0

    def act(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        """One action per device."""
        mask = obs["mask"].astype(bool)
        action = np.full(len(mask), WAIT)
        action[mask[:, RELAY] & (info["neighbour_free"] > info["free"])] = RELAY
        action[mask[:, RSU]] = RSU
        action[_deadline(info, self.delta_s, self.margin_s)] = CELL
        return action


@dataclass(frozen=True, kw_only=True)
class RandomAllowed:
    """A uniformly random allowed action per device (or per task)."""

    def act(self, obs, info: dict, rng: np.random.Generator):
        """Random among the allowed actions."""
        mask = np.asarray(obs["mask"] if isinstance(obs, dict) else info["mask"], dtype=float)
        if mask.ndim == 1:
            return int(np.argmax(rng.random(mask.shape) * mask + mask))
        return np.argmax(rng.random(mask.shape) * mask + mask, axis=1)


@dataclass(frozen=True, kw_only=True)
class FixedPath:
    """Always the same offloading path (``0`` all-RSU edge, ``1`` all-cloud over V2C)."""

    path: int

    def act(self, obs, info: dict, rng: np.random.Generator) -> int:
        """The fixed path."""
        return self.path


@dataclass(frozen=True, kw_only=True)
class GreedyLatency:
    """The path with the smallest latency estimated from the current queue backlogs."""

    def act(self, obs, info: dict, rng: np.random.Generator) -> int:
        """Argmin of ``info["latency_estimate"]``."""
        return int(np.argmin(info["latency_estimate"]))



@dataclass(frozen=True, kw_only=True)
class LeastLoaded:
    """The allowed path whose busiest resource has the smallest backlog (join the least-loaded path).

    It reads only the queue backlogs of the observation (``obs[3:8]``: RSU uplink, RSU server, cellular
    uplink, RSU backhaul, gNB-cloud link, in units of the deadline), not the task's size or the links'
    rates, so unlike :class:`GreedyLatency` it knows no service time; unlike a fixed path it spreads the
    load and does not saturate one resource.  Ties go to the lowest path index.
    """

    def act(self, obs: np.ndarray, info: dict[str, Any], rng: np.random.Generator) -> int:
        """The path of least bottleneck backlog among the allowed ones."""
        up, cpu, cell, backhaul, cloud = (float(b) for b in np.asarray(obs)[3:8])
        loads = np.array([max(up, cpu), max(cell, cloud), max(up, backhaul, cloud)])
        allowed = np.asarray(info["mask"], dtype=bool)
        return int(np.argmin(np.where(allowed, loads, np.inf)))
