"""Vehicle-based crowdsensing: spatio-temporal coverage, sampling cost and load balance of frequency plans.

A plan gives every vehicle a monitoring frequency ``f_v`` in ``{0, ..., f_max}`` samples per time slot.
Within each slot a vehicle at level ``f`` samples at the first ``f`` points of the base-2 van der Corput
sequence (1/2, 1/4, 3/4, 1/8, ...), which are spread over the slot and nested, so raising a frequency
never removes a sample (evenly spaced samples at ``slot / f`` are not nested and coverage could fall when
a frequency rises).  Each sample covers the (grid cell, time slot) pair where it is taken.
:class:`CoverageModel` precomputes, for every vehicle and level, the boolean set of pairs covered, so
the coverage of a whole population of plans is one vectorised OR.
The objective (reconstructed; the paper defines one combined function, not retrieved) is, in the spec's
two forms,

``J = w_c * Cov + w_k * (1 - Cost_norm) + w_b * Balance``            (``additive``)
``J = Cov * (1 - Cost_norm) ** (w_k / w_c) * Balance ** (w_b / w_c)``  (``multiplicative``; the spec's
``Cov (1 - Cost)^0.5 Balance^0.5`` at the default weights 0.5 / 0.25 / 0.25)

with ``Cov`` the covered share of the pairs any vehicle ever visits, ``Cost_norm`` the samples over those
of the all-``f_max`` plan, and ``Balance = 1 - Gini`` of the per-vehicle sample counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.netsim.mobility import CitySpec, Fleet


def van_der_corput(k: int) -> float:
    """The ``k``-th (0-based) point of the base-2 van der Corput sequence: 1/2, 1/4, 3/4, 1/8, ..."""
    x, denom, n = 0.0, 1.0, k + 1
    while n:
        denom *= 2
        n, bit = divmod(n, 2)
        x += bit / denom
    return x


def gini(loads: np.ndarray) -> np.ndarray:
    """Gini coefficient of each row of ``loads`` (0 for equal or all-zero loads).

    Parameters
    ----------
    loads
        ``(..., n)`` non-negative loads.
    """
    x = np.sort(np.asarray(loads, dtype=float), axis=-1)
    n = x.shape[-1]
    total = x.sum(axis=-1)
    rank = np.arange(1, n + 1)
    g = (2.0 * (rank * x).sum(axis=-1) / np.where(total > 0, total, 1.0) - (n + 1)) / n
    return np.where(total > 0, g, 0.0)


FORMS = ("additive", "multiplicative")


@dataclass(frozen=True, kw_only=True)
class Weights:
    """Weights of coverage, cost saving and balance in the objective, and the objective's form.

    Raises
    ------
    ValueError
        For an unknown form, or a multiplicative objective without weight on coverage.
    """

    coverage: float = 0.5
    cost: float = 0.25
    balance: float = 0.25
    form: str = "additive"

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"objective form must be one of {FORMS}, got {self.form!r}")
        if self.form == "multiplicative" and self.coverage <= 0:
            raise ValueError("a multiplicative objective needs a positive coverage weight (the exponents are w / w_c)")

    @classmethod
    def from_coverage(cls, w_c: float, form: str = "additive") -> "Weights":
        """``w_c`` for coverage and the rest split evenly between cost and balance."""
        return cls(coverage=w_c, cost=(1.0 - w_c) / 2, balance=(1.0 - w_c) / 2, form=form)

    def combine(self, coverage: np.ndarray, cost: np.ndarray, balance: np.ndarray) -> np.ndarray:
        """The objective of plans with these coverages, normalised costs and balances."""
        if self.form == "additive":
            return np.asarray(self.coverage * coverage + self.cost * (1.0 - cost) + self.balance * balance)
        saving = np.clip(1.0 - cost, 0.0, None)
        return np.asarray(coverage * saving ** (self.cost / self.coverage) * np.clip(balance, 0.0, None)
                          ** (self.balance / self.coverage))


@dataclass(frozen=True, kw_only=True)
class PlanScore:
    """The objective of a plan and its three components."""

    objective: float
    coverage: float
    cost: float
    balance: float
    samples: int


class CoverageModel:
    """Covered (cell, slot) pairs of every vehicle at every frequency level.

    Parameters
    ----------
    fleet
        Trajectories (positions every ``fleet.dt`` seconds).
    city
        The city (its side fixes the grid of cells).
    cell_m
        Side of a coverage cell.
    slot_s
        Length of a time slot; frequencies are samples per slot.
    f_max
        Highest frequency level.
    """

    def __init__(self, fleet: Fleet, city: CitySpec, cell_m: float, slot_s: float, f_max: int) -> None:
        pos = fleet.positions.astype(float)
        steps, n = pos.shape[:2]
        side = int(np.ceil((city.side_m + 1e-9) / cell_m))
        self.cells, self.slots, self.f_max = side * side, int(np.ceil(steps * fleet.dt / slot_s)), f_max
        cell = np.minimum((pos // cell_m).astype(int), side - 1)
        cell_id = cell[..., 0] * side + cell[..., 1]  # (steps, n)
        pairs = self.cells * self.slots
        reach = np.zeros(pairs, dtype=bool)
        t = np.arange(steps) * fleet.dt
        reach[(t // slot_s).astype(int)[:, None] * self.cells + cell_id] = True
        self.reachable = reach
        self.covered = np.zeros((n, f_max + 1, pairs), dtype=bool)
        self.samples = np.zeros((n, f_max + 1), dtype=int)
        starts = np.arange(self.slots) * slot_s
        for f in range(1, f_max + 1):
            self.covered[:, f] = self.covered[:, f - 1]
            times = starts + van_der_corput(f - 1) * slot_s  # the f-th sample of every slot
            times = times[times < steps * fleet.dt]
            idx = (times / fleet.dt).astype(int)
            slot = (times // slot_s).astype(int)
            self.samples[:, f] = self.samples[:, f - 1] + len(times)
            for v in range(n):
                self.covered[v, f, slot * self.cells + cell_id[idx, v]] = True
        self.vehicles = n

    def score(self, plans: np.ndarray, weights: Weights) -> list[PlanScore]:
        """Objective and components of each plan (rows of ``plans``, one level per vehicle)."""
        plans = np.atleast_2d(np.asarray(plans, dtype=int))
        if plans.shape[1] != self.vehicles or plans.min() < 0 or plans.max() > self.f_max:
            raise ValueError(f"plans must be (k, {self.vehicles}) levels in [0, {self.f_max}]")
        union = self.covered[np.arange(self.vehicles)[None, :], plans].any(axis=1)
        cov = union.sum(axis=1) / self.reachable.sum()
        loads = self.samples[np.arange(self.vehicles)[None, :], plans]
        total = loads.sum(axis=1)
        cost = total / self.samples[:, self.f_max].sum()
        balance = 1.0 - gini(loads)
        obj = weights.combine(cov, cost, balance)
        return [PlanScore(objective=float(o), coverage=float(c), cost=float(k), balance=float(b), samples=int(s))
                for o, c, k, b, s in zip(obj, cov, cost, balance, total)]

    def objective(self, plans: np.ndarray, weights: Weights) -> np.ndarray:
        """Just the objective of each plan."""
        return np.array([s.objective for s in self.score(plans, weights)])


def uniform_plan(model: CoverageModel, level: int) -> np.ndarray:
    """Every vehicle at ``level``."""
    return np.asarray(np.full(model.vehicles, level, dtype=int))


def random_plan(model: CoverageModel, rng: np.random.Generator) -> np.ndarray:
    """Levels drawn uniformly per vehicle."""
    return np.asarray(rng.integers(0, model.f_max + 1, size=model.vehicles))


def greedy_plan(model: CoverageModel, weights: Weights) -> np.ndarray:
    """Marginal-gain-per-cost greedy plan.

    From all zeros, repeatedly raise by one level the vehicle whose next level adds the most newly covered
    pairs per extra sample; return the plan with the best objective seen along the way.
    """
    plan = np.zeros(model.vehicles, dtype=int)
    union = np.zeros_like(model.reachable)
    best_plan, best = plan.copy(), model.objective(plan, weights)[0]
    rows = np.arange(model.vehicles)
    while (plan < model.f_max).any():
        nxt = np.minimum(plan + 1, model.f_max)
        gain = (model.covered[rows, nxt] & ~union).sum(axis=1)
        extra = model.samples[rows, nxt] - model.samples[rows, plan]
        ratio = np.where(plan < model.f_max, gain / np.maximum(extra, 1), -np.inf)
        v = int(np.argmax(ratio))
        plan[v] += 1
        union |= model.covered[v, plan[v]]
        value = model.objective(plan, weights)[0]
        if value > best:
            best_plan, best = plan.copy(), value
    return best_plan
