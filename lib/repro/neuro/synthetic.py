"""Synthetic spiking networks for simulator scaling studies.

The paper simulates chips of up to 20,000 cores; a trained network that large
is out of reach here, so the scaling study maps random integer-weight
networks of growing width onto the chip.  Only the work matters for timing:
synapses per core, active axons per tick and packets, so the weights are
random and zero-mean, the threshold is set from the expected input current
so that hidden neurons fire sparsely, and the inputs are Bernoulli spike
trains of a given rate.
"""

from __future__ import annotations

import math

import numpy as np

from repro.neuro.convert import SpikingNetwork


def random_network(sizes: list[int], input_rate: float, seed: int, weight_scale: int = 16,
                   threshold_sigmas: float = 3.0) -> SpikingNetwork:
    """A random integer-weight spiking MLP with populations ``sizes`` (inputs first).

    Weights are ``round(N(0, weight_scale))``, biases zero; the threshold is
    ``threshold_sigmas`` standard deviations of one tick's input current of a
    first-layer neuron (``weight_scale * sqrt(fan_in * input_rate)``), so
    activity is sparse and stays sparse in later layers.

    Raises
    ------
    ValueError
        If fewer than two populations are given or ``input_rate`` is not in ``(0, 1]``.
    """
    if len(sizes) < 2:
        raise ValueError("a network needs at least an input and an output population")
    if not 0.0 < input_rate <= 1.0:
        raise ValueError(f"input_rate must be in (0, 1], got {input_rate}")
    rng = np.random.default_rng([seed, 5])
    weights = tuple(np.round(rng.normal(0.0, weight_scale, size=(a, b))) for a, b in zip(sizes[:-1], sizes[1:]))
    biases = tuple(np.zeros(b) for b in sizes[1:])
    threshold = float(max(1, round(threshold_sigmas * weight_scale * math.sqrt(sizes[0] * input_rate))))
    return SpikingNetwork(weights=weights, biases=biases, threshold=threshold)


def poisson_inputs(ticks: int, batch: int, features: int, rate: float, seed: int) -> np.ndarray:
    """Bernoulli spike trains ``(ticks, batch, features)`` with spike probability ``rate`` per tick."""
    rng = np.random.default_rng([seed, 6])
    return (rng.random((ticks, batch, features)) < rate).astype(np.float64)
