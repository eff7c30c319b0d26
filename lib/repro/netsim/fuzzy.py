"""The fuzzy reward-weight controller of fuzzy Q-learning, on scikit-fuzzy's control system.

A Mamdani controller (``skfuzzy.control``) maps two inputs in [0, 1] to the reward weight ``theta``:

- **age**, the oldest buffered packet's age over delta: Low, Medium, High;
- **density**, the opportunity density (RSUs plus neighbours in Wi-Fi range, over ``density_scale``):
  Sparse, Normal, Dense;

with triangular memberships that form a partition (degrees sum to 1), product AND, bounded-sum
accumulation, output ``theta`` in {Small, Medium, Large} and centroid defuzzification.  The rule base
(reconstructed) says: young packets in a dense neighbourhood may wait (large theta); old packets where
opportunities are sparse should not
(small theta).  Evaluating the controller per device and slot through scikit-fuzzy is slow, so
:class:`FuzzyTheta` evaluates it once on a grid and interpolates bilinearly; the grid values are
scikit-fuzzy's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import skfuzzy as fuzz
from scipy.interpolate import RegularGridInterpolator
from skfuzzy import control as ctrl

LEVELS = ("low", "medium", "high")
DENSITY = ("sparse", "normal", "dense")
THETA = ("small", "medium", "large")
# rows: age low/medium/high; columns: density sparse/normal/dense
RULES = (("medium", "large", "large"),
         ("small", "medium", "large"),
         ("small", "small", "medium"))


def _partition(var, names: tuple[str, str, str]) -> None:
    u = var.universe
    var[names[0]] = fuzz.trimf(u, [0.0, 0.0, 0.5])
    var[names[1]] = fuzz.trimf(u, [0.0, 0.5, 1.0])
    var[names[2]] = fuzz.trimf(u, [0.5, 1.0, 1.0])


def build_controller(resolution: int = 101) -> ctrl.ControlSystem:
    """The Mamdani control system (inputs ``age``, ``density``; output ``theta``).

    The output sets are whole triangles centred on 0, 0.5 and 1 (the universe runs from -0.5 to 1.5), so
    a clipped set's centroid stays at its peak and ``theta`` is a firing-weighted mean of 0, 0.5 and 1:
    it lies in [0, 1] and moves monotonically with the rules.  Half-triangles cut at the ends of [0, 1]
    would pull the centroid inwards by an amount that depends on the firing strength.
    """
    u = np.linspace(0.0, 1.0, resolution)
    age, density = ctrl.Antecedent(u, "age"), ctrl.Antecedent(u, "density")
    theta = ctrl.Consequent(np.linspace(-0.5, 1.5, 2 * resolution - 1), "theta")
    _partition(age, LEVELS)
    _partition(density, DENSITY)
    for name, peak in zip(THETA, (0.0, 0.5, 1.0)):
        theta[name] = fuzz.trimf(theta.universe, [peak - 0.5, peak, peak + 0.5])
    theta.defuzzify_method = "centroid"
    theta.accumulation_method = bounded_sum
    rules = [ctrl.Rule(age[a] & density[d], theta[RULES[i][j]], and_func=np.multiply)
             for i, a in enumerate(LEVELS) for j, d in enumerate(DENSITY)]
    return ctrl.ControlSystem(rules)


def bounded_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Accumulation of rule outputs: ``min(a + b, 1)``.

    With product AND over partitions the rule strengths sum to 1, so this sum never clips and
    ``theta`` is monotone in both inputs; scikit-fuzzy's default (min AND, max accumulation) is not
    (measured: theta rises by 0.016 between age 0.70 and 0.75 at density 0.2).
    """
    return np.minimum(a + b, 1.0)


def memberships(x: np.ndarray) -> np.ndarray:
    """Degrees of the three-set triangular partition used for every input, ``(len(x), 3)``."""
    u = np.asarray(x, dtype=float)
    return np.stack([fuzz.trimf(u, [0.0, 0.0, 0.5]), fuzz.trimf(u, [0.0, 0.5, 1.0]),
                     fuzz.trimf(u, [0.5, 1.0, 1.0])], axis=-1)


@dataclass(frozen=True, kw_only=True)
class ConstantTheta:
    """A pinned controller: the same ``theta`` for every device and slot."""

    theta: float

    def __call__(self, age_ratio: np.ndarray, density: np.ndarray) -> np.ndarray:
        """``theta`` for every device."""
        return np.full(np.shape(age_ratio), self.theta, dtype=float)


class FuzzyTheta:
    """The fuzzy controller tabulated on a ``grid x grid`` lattice of its inputs.

    Parameters
    ----------
    grid
        Lattice points per input (scikit-fuzzy evaluates every point once, at construction).
    density_scale
        Opportunity count that counts as fully dense (density = min(count / scale, 1)).
    """

    def __init__(self, grid: int = 21, density_scale: float = 4.0) -> None:
        self.density_scale = density_scale
        sim = ctrl.ControlSystemSimulation(build_controller())
        axis = np.linspace(0.0, 1.0, grid)
        ages, dens = np.meshgrid(axis, axis, indexing="ij")
        sim.input["age"], sim.input["density"] = ages.ravel(), dens.ravel()
        sim.compute()  # scikit-fuzzy evaluates the whole lattice at once
        table = np.clip(np.asarray(sim.output["theta"], dtype=float).reshape(grid, grid), 0.0, 1.0)
        self.table = table
        self._interp = RegularGridInterpolator((axis, axis), table)

    def __call__(self, age_ratio: np.ndarray, density: np.ndarray) -> np.ndarray:
        """``theta`` per device from its age ratio and its raw opportunity count."""
        a = np.clip(np.asarray(age_ratio, dtype=float), 0.0, 1.0)
        d = np.clip(np.asarray(density, dtype=float) / self.density_scale, 0.0, 1.0)
        return self._interp(np.column_stack([a.ravel(), d.ravel()])).reshape(a.shape)


def shaped_reward(controller: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[dict, dict], np.ndarray]:
    """A ``reward_fn`` for :func:`repro.netsim.qlearning.play_episode`: ``base + theta(before) * flexible``.

    ``theta`` is computed from the inputs the agents saw when they acted (the info before the step).
    """

    def reward(before: dict, after: dict) -> np.ndarray:
        theta = controller(before["age_ratio"], before["opportunity"])
        return after["reward_base"] + theta * after["reward_flexible"]

    return reward
