"""Neuromorphic simulation: synaptic events per second, partitioned against monolithic.

A synthetic spiking network (1024-2048-2048-256 neurons, random integer weights, inputs firing at about 5%
per tick) on 128x128 crossbars (416 cores on a 21x21 mesh), 20 ticks for a batch of 16 inputs.  Rows: the
monolithic torch reference, the chip in one process, and the chip with its core phase in 2 worker
processes (the tick loop, after the workers have started), each with synaptic events per second and the
ratio to the single-process chip.  Timings live here, never in the tests.
"""

from __future__ import annotations

import numpy as np
from timing import timed

from repro.neuro.convert import SpikingNetwork
from repro.neuro.simulate import ChipConfig, build_chip, chip_run, reference_run

SIZES = [1024, 2048, 2048, 256]


def _network() -> SpikingNetwork:
    rng = np.random.default_rng(0)
    weights = tuple(np.round(rng.normal(0, 12, size=(a, b))) for a, b in zip(SIZES[:-1], SIZES[1:]))
    biases = tuple(np.zeros(b) for b in SIZES[1:])
    return SpikingNetwork(weights=weights, biases=biases, threshold=100.0)


def run() -> list[tuple[str, float, str]]:
    """Rows ``(name, seconds per run, events per second and ratio)``."""
    net = _network()
    inputs = (np.random.default_rng(1).random((20, 16, SIZES[0])) < 0.05).astype(np.float64)
    chip = build_chip(net, ChipConfig(axons=128, neurons=128, mesh=(21, 21)), seed=0)
    events = chip_run(chip, inputs).synaptic_events
    ref = timed(lambda: reference_run(net, inputs), repeat=2)
    one = min(chip_run(chip, inputs, workers=1).wall_seconds for _ in range(2))
    two = min(chip_run(chip, inputs, workers=2).wall_seconds for _ in range(2))  # tick loop, workers started
    return [
        ("neuro: SNN, monolithic torch reference", ref, f"{events / ref / 1e6:.0f} M syn. events/s"),
        ("neuro: SNN chip, 1 process", one, f"{events / one / 1e6:.0f} M syn. events/s, 1.00x"),
        ("neuro: SNN chip, core phase in 2 workers", two,
         f"{events / two / 1e6:.0f} M syn. events/s, {one / two:.2f}x the 1-process chip"),
    ]


if __name__ == "__main__":
    for name, sec, ratio in run():
        print(f"{name:<45} {sec:8.3f}  {ratio}")
