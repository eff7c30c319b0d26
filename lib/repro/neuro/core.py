"""The core phase: programmed crossbars (RRAM levels, lognormal variation), the column ADC and the membrane update.

With ``levels=None``, ``sigma=0`` and ``adc_bits=None`` every operation is the
ideal one and, with integer weights, exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class DeviceModel:
    """Analog constraints of a core.

    Attributes
    ----------
    levels
        Conductance levels of an RRAM cell (a differential pair gives
        ``(levels - 1) // 2`` magnitudes per sign); ``None`` for ideal weights.
    sigma
        Standard deviation of the lognormal device-to-device variation
        (``g -> g * exp(N(0, sigma))``); 0 for none.
    adc_bits
        Resolution of the column ADC; ``None`` for an ideal readout.
    adc_range
        ADC full scale as a multiple of the firing threshold.
    """

    levels: int | None = None
    sigma: float = 0.0
    adc_bits: int | None = None
    adc_range: float = 2.0

    @property
    def ideal(self) -> bool:
        """Whether every constraint is off."""
        return self.levels is None and self.sigma == 0.0 and self.adc_bits is None


def program(weights: np.ndarray, device: DeviceModel, rng: np.random.Generator) -> np.ndarray:
    """The effective weights a crossbar stores: quantised to the RRAM levels, then perturbed by variation."""
    g = np.array(weights, dtype=np.float64, copy=True)
    if device.levels is not None:
        half = max((device.levels - 1) // 2, 1)
        wmax = float(np.abs(g).max()) or 1.0
        g = np.round(g / wmax * half) * wmax / half
    if device.sigma > 0.0:
        g = g * np.exp(rng.normal(0.0, device.sigma, size=g.shape))
    return g


def adc(current: np.ndarray, device: DeviceModel, threshold: float) -> np.ndarray:
    """Column readout: clip to ``+-adc_range * threshold`` and quantise to ``2**adc_bits`` levels (ideal if no ADC)."""
    if device.adc_bits is None:
        return current
    full = device.adc_range * threshold
    step = 2.0 * full / (2 ** device.adc_bits - 1)
    return np.round(np.clip(current, -full, full) / step) * step


@dataclass(kw_only=True)
class NeuronGroup:
    """The neurons of one ``(layer, out_block)`` and the crossbars feeding them.

    Attributes
    ----------
    layer
        Weight layer index.
    out_lo, out_hi
        The neurons' indices in the layer's output population.
    in_slices
        Each tile's rows of the input population.
    crossbars
        Each tile's programmed ``(rows, neurons)`` weights.
    bias
        Integer bias current per neuron and tick.
    """

    layer: int
    out_lo: int
    out_hi: int
    in_slices: list[tuple[int, int]]
    crossbars: list[np.ndarray]
    bias: np.ndarray

    def step(self, v: np.ndarray, axon_input: np.ndarray, device: DeviceModel, threshold: float
             ) -> tuple[np.ndarray, int]:
        """Integrate one tick for a batch: ``v`` (``(batch, neurons)``) is updated in place.

        Returns
        -------
        spikes, synaptic_events
            The 0/1 spikes ``(batch, neurons)`` and the number of synapse
            activations (active axons x tile columns, summed over tiles).
        """
        current = np.zeros_like(v)
        events = 0
        for (lo, hi), g in zip(self.in_slices, self.crossbars):
            s = axon_input[:, lo:hi]
            current += adc(s @ g, device, threshold)
            events += int(s.sum()) * g.shape[1]
        v += current + self.bias
        spikes = (v >= threshold).astype(np.float64)
        v -= spikes * threshold
        return spikes, events
