"""Chapter ``simeuro``: a converted SNN simulated on a crossbar chip with RRAM, ADC and a mesh NoC.

:func:`run_seed` trains the ANN, converts it, runs the monolithic torch
reference, runs the ideal chip partitioned over worker processes (checking
bitwise equality and the packet count), and sweeps RRAM levels and device
variation for accuracy.  :func:`scaling_study` maps random networks of
growing width onto square meshes of growing side and times the core phase in
one process and partitioned over worker processes, and compares the NoC hops
of sequential and random placement of the same traffic.  :func:`run` does both
for the chapter's :class:`Params`; :func:`claims` reads the records; the
paper-scale time is extrapolated by :func:`modelled_minutes`, and the network-on-
chip's delay is estimated to first order from the hop and link-load counters
(:func:`repro.neuro.mapping.noc_delay`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from repro.datasets import load_digits
from repro.neuro import convert as cv
from repro.neuro import synthetic
from repro.neuro.core import DeviceModel
from repro.neuro.mapping import NocDelay, NocTiming, noc_delay, place, tile_network
from repro.neuro.simulate import ChipConfig, build_chip, chip_run, reference_run
from repro.params import ChapterParams, require
from repro.results import Evidence

DIGITS_FEATURES, DIGITS_CLASSES = 64, 10
"""scikit-learn's 8 x 8 digits: 64 inputs, 10 classes."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    hidden: tuple[int, ...]
    epochs: int
    percentile: float
    weight_scale: int
    ticks: int
    n_test: int
    axons: int
    neurons: int
    mesh: tuple[int, ...]
    placement: str
    levels: tuple[int, ...]
    sigmas: tuple[float, ...]
    adc_bits: int
    workers: int
    energy_pj: tuple[float, ...]
    noc_cycles: tuple[float, ...]
    clock_mhz: float
    paper_cores: int
    paper_crossbar: int
    paper_ticks: int
    paper_images: int
    paper_devices: int
    device_speedup: float
    sweep_speedups: tuple[float, ...]
    scale_widths: tuple[int, ...]
    scale_crossbar: int
    scale_ticks: int
    scale_batch: int
    scale_rate: float
    seeds: tuple[int, ...]

    def checks(self) -> None:
        """Refuse impossible combinations before any kernel starts."""
        require(len(self.mesh) == 2, self, "mesh", "must be [width, height]")
        require(len(self.energy_pj) == 3, self, "energy_pj", "must be [synaptic event, spike, hop]")
        require(len(self.noc_cycles) == 3, self, "noc_cycles", "must be [router, link, packet] cycles")
        require(len(set(self.levels)) >= 2, self, "levels", "the RRAM claim compares the fewest and the most levels")
        require(len(set(self.sigmas)) >= 2 and min(self.sigmas) == 0.0, self, "sigmas",
                "the variation claim compares no variation (0) with the largest sigma")
        cores = len(tile_network(self.sizes, self.axons, self.neurons))
        require(cores <= self.mesh[0] * self.mesh[-1], self, ("mesh", "axons", "neurons", "hidden"),
                f"the network needs {cores} cores, more than the mesh holds")

    @property
    def sizes(self) -> list[int]:
        """Population sizes of the digits network: 64 inputs, the hidden layers, 10 classes."""
        return [DIGITS_FEATURES, *self.hidden, DIGITS_CLASSES]

    def chip(self, device: DeviceModel | None = None) -> ChipConfig:
        """The chip of the digits network (ideal devices unless given)."""
        return ChipConfig(axons=self.axons, neurons=self.neurons, mesh=(self.mesh[0], self.mesh[-1]),
                          placement=self.placement, device=device or DeviceModel())

    @property
    def timing(self) -> NocTiming:
        """The assumed network-on-chip timing."""
        router, link, packet = self.noc_cycles
        return NocTiming(router_cycles=router, link_cycles=link, packet_cycles=packet, clock_mhz=self.clock_mhz)

    @property
    def scale(self) -> PaperScale:
        """The paper-scale run of the modelled claim."""
        return PaperScale(cores=self.paper_cores, synapses=self.paper_crossbar**2, ticks=self.paper_ticks,
                          images=self.paper_images, devices=self.paper_devices)

    @property
    def scaling(self) -> ScalingSettings:
        """The synthetic chips of the scaling study."""
        return ScalingSettings(widths=self.scale_widths, crossbar=self.scale_crossbar, ticks=self.scale_ticks,
                               batch=self.scale_batch, rate=self.scale_rate, workers=self.workers)


@dataclass(frozen=True, kw_only=True)
class GridPoint:
    """Accuracy of the chip under one device model."""

    levels: int
    sigma: float
    accuracy: float


@dataclass(frozen=True, kw_only=True)
class SeedRecord:
    """Everything one seed measured.

    Attributes
    ----------
    ann_accuracy, reference_accuracy, ideal_accuracy
        The ANN, the torch SNN reference and the ideal chip on the test images.
    adc_accuracy
        The chip with ideal weights and an ``adc_bits`` ADC.
    spike_mismatches
        Spike-train entries where the partitioned chip differs from the reference.
    packet_error
        ``|spike packets - spikes x destination cores| + |link traversals - hops|``.
    synaptic_events, spike_packets, partial_packets, hops, max_link_load, spikes
        Ideal chip statistics over all test images.
    cores, synapses_per_core
        Cores used and crossbar size.
    core_seconds, wall_seconds
        Core-phase and whole-loop (core and NoC phases) wall time of the single-process ideal run.
    delay
        The first-order network-on-chip delay of the ideal run (:func:`repro.neuro.mapping.noc_delay`).
    grid
        Accuracy over RRAM levels and variation.
    """

    seed: int
    ann_accuracy: float
    reference_accuracy: float
    ideal_accuracy: float
    adc_accuracy: float
    spike_mismatches: int
    packet_error: int
    synaptic_events: int
    spike_packets: int
    partial_packets: int
    hops: int
    max_link_load: int
    spikes: int
    cores: int
    synapses_per_core: int
    core_seconds: float
    wall_seconds: float
    delay: NocDelay
    grid: tuple[GridPoint, ...]


def run_seed(cfg: Params, seed: int) -> SeedRecord:
    """Train, convert, simulate and sweep the device models for one seed."""
    torch.set_num_threads(1)
    data = load_digits(seed=seed)
    model = cv.train_mlp(data, list(cfg.hidden), cfg.epochs, seed)
    net = cv.convert(model, data.x_train, cfg.percentile, cfg.weight_scale)
    x = cv.input_spikes(data.x_test[: cfg.n_test], cfg.ticks)
    y = data.y_test[: cfg.n_test]
    ref = reference_run(net, x)
    ideal_chip = build_chip(net, cfg.chip(), seed)
    ideal = chip_run(ideal_chip, x, workers=1)
    parted = chip_run(ideal_chip, x, workers=cfg.workers)
    mism = sum(int((a != b).sum()) for a, b in zip(parted.spikes, ref.spikes))
    mism += sum(int((a != b).sum()) for a, b in zip(ideal.spikes, ref.spikes))
    perr = abs(parted.spike_packets - parted.expected_spike_packets) + abs(parted.link_traversals - parted.hops)
    grid = []
    for levels in cfg.levels:
        for sigma in cfg.sigmas:
            chip = build_chip(net, cfg.chip(DeviceModel(levels=levels, sigma=sigma)), seed)
            grid.append(GridPoint(levels=levels, sigma=sigma, accuracy=float((chip_run(chip, x).predictions() == y).mean())))
    adc_chip = build_chip(net, cfg.chip(DeviceModel(adc_bits=cfg.adc_bits)), seed)
    if ideal.traffic is None:
        raise RuntimeError("the chip run kept no traffic counter")
    return SeedRecord(
        seed=seed,
        ann_accuracy=cv.ann_accuracy(model, data, cfg.n_test),
        reference_accuracy=float((ref.predictions() == y).mean()),
        ideal_accuracy=float((ideal.predictions() == y).mean()),
        adc_accuracy=float((chip_run(adc_chip, x).predictions() == y).mean()),
        spike_mismatches=mism,
        packet_error=perr,
        synaptic_events=ideal.synaptic_events,
        spike_packets=ideal.spike_packets,
        partial_packets=ideal.partial_packets,
        hops=ideal.hops,
        max_link_load=ideal.max_link_load,
        spikes=int(sum(s.sum() for s in ideal.spikes)),
        cores=len(ideal_chip.tiles),
        synapses_per_core=cfg.axons * cfg.neurons,
        core_seconds=ideal.core_seconds,
        wall_seconds=ideal.wall_seconds,
        delay=noc_delay(ideal.traffic, ideal.max_link_load, cfg.ticks, cfg.n_test, cfg.timing),
        grid=tuple(grid),
    )


def energy_breakdown(rec: SeedRecord, energy_pj: tuple[float, ...], n_images: int) -> dict[str, float]:
    """Modelled energy per image (nJ): synaptic events, spike generation and packet hops (constants assumed)."""
    syn, spk, hop = energy_pj
    return {
        "synaptic events": rec.synaptic_events * syn / 1e3 / n_images,
        "spikes": rec.spikes * spk / 1e3 / n_images,
        "NoC hops": (rec.hops) * hop / 1e3 / n_images,
    }


@dataclass(frozen=True, kw_only=True)
class PaperScale:
    """The paper-scale run the model extrapolates to (cores, crossbar synapses, ticks, inputs, GPUs)."""

    cores: int
    synapses: int
    ticks: int
    images: int
    devices: int


def modelled_minutes(rec: SeedRecord, cfg: Params, scale: PaperScale, device_speedup: float) -> float:
    """Minutes to simulate ``scale`` on its devices.

    Model: the measured seconds per synapse, tick and image of the whole tick
    loop (core and NoC phases) on one CPU process here, times the paper-scale
    synapse-ticks and inputs, divided by the devices and by each device's
    assumed speed-up over one CPU process here (perfect scaling across devices).
    """
    per_synapse_tick = rec.wall_seconds / (rec.cores * rec.synapses_per_core * cfg.ticks * cfg.n_test)
    work = scale.cores * scale.synapses * scale.ticks * scale.images
    return per_synapse_tick * work / (scale.devices * device_speedup) / 60.0


def grid_frame(records: Sequence[SeedRecord]) -> pd.DataFrame:
    """Accuracy per seed, RRAM levels and variation."""
    return pd.DataFrame([{"seed": r.seed, "levels": g.levels, "sigma": g.sigma, "accuracy": g.accuracy}
                         for r in records for g in r.grid])


@dataclass(frozen=True, kw_only=True)
class ScalingSettings:
    """The synthetic chips of the scaling study.

    Attributes
    ----------
    widths
        Neurons per population of the random three-population networks (``width -> width -> width``).
    crossbar
        Rows = columns of a core.
    ticks, batch
        Ticks simulated and inputs per tick.
    rate
        Input spike probability per tick.
    workers
        Worker processes of the partitioned core phase.
    """

    widths: tuple[int, ...]
    crossbar: int
    ticks: int
    batch: int
    rate: float
    workers: int


@dataclass(frozen=True, kw_only=True)
class ScalingPoint:
    """One synthetic chip of the scaling study.

    Attributes
    ----------
    seed, width
        Which chip.
    cores, mesh_side, synapses
        Cores used, side of the square mesh they are placed on, synapses of the chip.
    activity
        Mean spike probability per neuron and tick over the simulated populations.
    core_tick_single, core_tick_partitioned
        Core-phase seconds of the fastest tick in one process and over ``workers`` processes (on a machine
        shared with other jobs the fastest tick is the one least disturbed by them).
    wall_tick_single, wall_tick_partitioned
        The same for the whole tick (core and NoC phases).
    hops_sequential, hops_random
        Hops per packet with sequential (tile-order, row-major) and random placement of the same cores.
    """

    seed: int
    width: int
    cores: int
    mesh_side: int
    synapses: int
    activity: float
    core_tick_single: float
    core_tick_partitioned: float
    wall_tick_single: float
    wall_tick_partitioned: float
    hops_sequential: float
    hops_random: float


def scaling_point(settings: ScalingSettings, width: int, seed: int) -> ScalingPoint:
    """Map a random ``width``-wide network on the smallest square mesh that holds it, time it and count its hops."""
    net = synthetic.random_network([width] * 3, settings.rate, seed)
    cores = sum(
        math.ceil(a / settings.crossbar) * math.ceil(b / settings.crossbar) for a, b in zip(net.sizes[:-1], net.sizes[1:])
    )
    side = math.ceil(math.sqrt(cores))
    chip = build_chip(net, ChipConfig(axons=settings.crossbar, neurons=settings.crossbar, mesh=(side, side)), seed)
    x = synthetic.poisson_inputs(settings.ticks, settings.batch, width, settings.rate, seed)
    single = chip_run(chip, x, workers=1)
    parted = chip_run(chip, x, workers=settings.workers)
    for a, b in zip(single.spikes, parted.spikes):
        if not np.array_equal(a, b):
            raise RuntimeError("the partitioned run differs from the single-process run")
    if single.traffic is None:
        raise RuntimeError("the chip run kept no traffic counter")
    traffic = single.traffic
    shuffled = traffic.relocated(place(cores, (side, side), "random", seed))
    packets = max(traffic.packets, 1)
    return ScalingPoint(
        seed=seed,
        width=width,
        cores=cores,
        mesh_side=side,
        synapses=sum(w.size for w in net.weights),
        activity=float(np.mean([s.mean() for s in single.spikes])),
        core_tick_single=min(single.tick_core_seconds),
        core_tick_partitioned=min(parted.tick_core_seconds),
        wall_tick_single=min(single.tick_wall_seconds),
        wall_tick_partitioned=min(parted.tick_wall_seconds),
        hops_sequential=traffic.hops / packets,
        hops_random=shuffled.hops / packets,
    )


def scaling_study(settings: ScalingSettings, seeds: list[int]) -> list[ScalingPoint]:
    """:func:`scaling_point` for every width and seed (one at a time: the timings must not compete)."""
    jobs = [(w, s) for s in seeds for w in settings.widths]
    return [scaling_point(settings, w, s) for w, s in tqdm(jobs, desc="synthetic chips")]


def per_tick_extrapolation(points: list[ScalingPoint], cores: int, synapses_per_core: int) -> float:
    """Single-process core-phase seconds per tick of a chip of ``cores`` cores, linear in synapses.

    Uses the measured seconds per synapse of the largest synthetic chip (mean over seeds).
    """
    largest = max(p.synapses for p in points)
    per_synapse = np.mean([p.core_tick_single / p.synapses for p in points if p.synapses == largest])
    return float(per_synapse * cores * synapses_per_core)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params
        The parameters of the run.
    records
        One per seed: the digits network on the chip.
    points
        The scaling study's synthetic chips (every width and seed).
    """

    params: Params
    records: tuple[SeedRecord, ...]
    points: tuple[ScalingPoint, ...]


def run(params: Params) -> Results:
    """Every seed's digits chip, then the scaling study (one at a time: the timings must not compete)."""
    records = tuple(run_seed(params, s) for s in tqdm(params.seeds, desc="simeuro seeds"))
    return Results(params=params, records=records, points=tuple(scaling_study(params.scaling, list(params.seeds))))


def _accuracies(records: Sequence[SeedRecord], levels: int, sigma: float) -> list[float]:
    """Per seed, the chip's test accuracy (%) at one device model."""
    grid = grid_frame(list(records))
    return [100.0 * float(grid[(grid.seed == r.seed) & (grid.levels == levels) & (grid.sigma == sigma)].accuracy.iloc[0])
            for r in records]


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims (see its registry file)."""
    cfg, records, points = results.params, results.records, results.points
    lo, hi = min(cfg.levels), max(cfg.levels)
    s_lo, s_hi = min(cfg.sigmas), max(cfg.sigmas)
    best, fewest, varied = _accuracies(records, hi, s_lo), _accuracies(records, lo, s_lo), _accuracies(records, hi, s_hi)
    ann = [100.0 * r.ann_accuracy for r in records]
    ideal = [100.0 * r.ideal_accuracy for r in records]
    widest = max(p.width for p in points)
    return {
        "partition_exact": [float(r.spike_mismatches) for r in records],
        "packets_match": [float(r.packet_error) for r in records],
        "conversion_gap": Evidence(values=[a - b for a, b in zip(ann, ideal)], arms={"ANN": ann, "ideal chip": ideal}),
        "rram_levels_drop": Evidence(values=[a - b for a, b in zip(best, fewest)],
                                     arms={f"{hi} levels": best, f"{lo} levels": fewest}),
        "variation_drop": Evidence(values=[a - b for a, b in zip(best, varied)],
                                   arms={"no variation": best, f"sigma {s_hi:g}": varied}),
        "paper_scale_minutes": [modelled_minutes(r, cfg, cfg.scale, cfg.device_speedup) for r in records],
        "partition_speedup": [p.core_tick_single / p.core_tick_partitioned for p in points if p.width == widest],
        "placement_hops_saved": [
            float(np.mean([100.0 * (1.0 - p.hops_sequential / p.hops_random) for p in points if p.seed == s]))
            for s in sorted({p.seed for p in points})
        ],
    }


def delay_table(results: Results) -> pd.DataFrame:
    """The first-order NoC delay of the digits chip per seed, with the modelled energy per image."""
    cfg = results.params
    rows = []
    for r in results.records:
        rows.append({"seed": r.seed, "cores": r.cores, "longest route (cycles)": r.delay.route_cycles,
                     "busiest link (cycles per tick)": r.delay.serialisation_cycles,
                     "NoC cycles per tick": r.delay.cycles_per_tick,
                     "NoC delay per image (us)": r.delay.microseconds_per_input,
                     **{f"{k} (nJ/image)": v for k, v in energy_breakdown(r, cfg.energy_pj, cfg.n_test).items()}})
    return pd.DataFrame(rows)


def record_table(results: Results) -> pd.DataFrame:
    """Every seed's scalar measurements (the accuracy grid and the delay apart)."""
    skip = {"grid", "delay"}
    return pd.DataFrame([{f.name: getattr(r, f.name) for f in fields(r) if f.name not in skip} for r in results.records])


def scaling_table(results: Results) -> pd.DataFrame:
    """The scaling study's synthetic chips, one row each."""
    return pd.DataFrame([{f.name: getattr(p, f.name) for f in fields(p)} for p in results.points])


def accuracy_figure(records: Sequence[SeedRecord]) -> plt.Figure:
    """Test accuracy against RRAM levels, one line per variation sigma (mean over seeds), the ideal chip dashed."""
    ideal = float(np.mean([r.ideal_accuracy for r in records]))
    grid = grid_frame(list(records)).groupby(["sigma", "levels"]).accuracy.agg(["mean", "std"]).reset_index()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for sigma, g in grid.groupby("sigma"):
        ax.errorbar(
            g.levels,
            100 * g["mean"],
            yerr=100 * g["std"].fillna(0.0),
            marker="o",
            capsize=3,
            label=f"variation sigma = {sigma:g}",
        )
    ax.axhline(100 * ideal, color="k", ls="--", label="ideal weights")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("RRAM conductance levels")
    ax.set_ylabel("test accuracy, %")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def energy_figure(records: Sequence[SeedRecord], cfg: Params) -> plt.Figure:
    """Modelled energy per image by component (mean over seeds)."""
    parts = pd.DataFrame([energy_breakdown(r, cfg.energy_pj, cfg.n_test) for r in records]).mean()
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(parts.index, parts.values, color=["tab:blue", "tab:orange", "tab:green"])
    ax.set_ylabel("modelled energy per image (nJ)")
    fig.tight_layout()
    return fig


def minutes_figure(records: Sequence[SeedRecord], cfg: Params, limit: float) -> plt.Figure:
    """Modelled paper-scale minutes against the assumed per-device speed-ups of the sweep, with the claim's limit."""
    scale, speedups = cfg.scale, cfg.sweep_speedups
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    vals = [[modelled_minutes(r, cfg, scale, s) for r in records] for s in speedups]
    ax.plot(speedups, [np.mean(v) for v in vals], marker="o")
    ax.axhline(limit, color="tab:red", ls="--", label=f"'a few minutes' (< {limit:g})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("assumed speed-up of one GPU over one CPU process here")
    ax.set_ylabel("modelled minutes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def scaling_figure(points: Sequence[ScalingPoint], workers: int, paper_cores: int) -> plt.Figure:
    """Left: core-phase seconds per tick against cores, one process and partitioned.  Right: hops per packet against mesh side."""
    df = pd.DataFrame([{f.name: getattr(p, f.name) for f in fields(p)} for p in points])
    mean = df.groupby(["cores", "mesh_side"]).mean(numeric_only=True).reset_index()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    left.plot(mean.cores, mean.core_tick_single, "o-", label="core phase, 1 process")
    left.plot(mean.cores, mean.core_tick_partitioned, "s-", label=f"core phase, {workers} processes")
    left.plot(mean.cores, mean.wall_tick_single, "o:", color="tab:blue", alpha=0.6, label="whole tick, 1 process")
    left.plot(
        mean.cores, mean.wall_tick_partitioned, "s:", color="tab:orange", alpha=0.6, label=f"whole tick, {workers} processes"
    )
    left.axvline(paper_cores, color="tab:red", ls="--", label=f"paper: {paper_cores:,} cores")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("cores of the synthetic chip")
    left.set_ylabel("seconds per tick")
    left.legend(fontsize=7)
    right.plot(mean.mesh_side, mean.hops_sequential, "o-", label="sequential placement")
    right.plot(mean.mesh_side, mean.hops_random, "s-", label="random placement")
    right.set_xlabel("mesh side (cores per row)")
    right.set_ylabel("hops per packet")
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig
