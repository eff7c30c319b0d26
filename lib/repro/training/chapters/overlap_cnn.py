"""Chapter driver: overlapping per-layer gradient communication with back-propagation.

Two kinds of evidence, kept apart: the discrete-event model of one iteration
of full-size VGG-A at up to 128 nodes (:mod:`repro.training.itersim`; its
speedups are fixed by the assumed node and network constants, which are
swept), and real measurements on 2 ``torch.distributed`` gloo ranks of a
VGG-A-mini with the overlap engine, the non-overlapped reference and torch's
``DistributedDataParallel`` (:mod:`repro.training.overlap`).  The ranks
compute on the ``device`` parameter's device (``TimingJob.device``) but keep
the gloo backend: NCCL refuses two ranks on one GPU, so on a single-GPU
machine the device applies to the compute, and gloo moves the gradients
through host memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.training.cost import Network
from repro.training.itersim import Platform, conv_heavy_layers, simulate_iteration, speedup, vgg_a_layers
from repro.training.launcher import launch
from repro.training.overlap import MODES, ModeTiming, TimingJob, timing_rank

MODELS = {"VGG-A (FC-heavy)": vgg_a_layers, "conv-heavy control": conv_heavy_layers}


def platform(node_tflops: float, alpha_us: float, bandwidth_gbs: float) -> Platform:
    """The modelled node and network."""
    return Platform(node_flops=node_tflops * 1e12, net=Network(alpha=alpha_us * 1e-6, beta=1.0 / (bandwidth_gbs * 1e9)))


def scaling_table(nodes: list[int], batches: list[int], plat: Platform) -> pd.DataFrame:
    """Modelled speedup and iteration breakdown for every model, batch, overlap setting and node count."""
    rows = []
    for model, build in MODELS.items():
        layers = build()
        for b in batches:
            for overlap in (False, True):
                for p in nodes:
                    it = simulate_iteration(layers, p, b, plat, overlap)
                    rows.append({"model": model, "batch": b, "overlap": overlap, "nodes": p,
                                 "speedup": speedup(layers, p, b, plat, overlap), "forward_ms": 1e3 * it.forward,
                                 "backward_ms": 1e3 * it.backward, "comm_busy_ms": 1e3 * it.communication,
                                 "exposed_comm_ms": 1e3 * it.exposed_communication, "iteration_ms": 1e3 * it.total})
    return pd.DataFrame(rows)


def measure(job: TimingJob) -> list[list[ModeTiming]]:
    """Run the timing study on 2 gloo ranks; returns each rank's timings."""
    return launch(timing_rank, 2, (job,), timeout_s=600)


@dataclass(frozen=True, kw_only=True)
class MeasuredMode:
    """One mode on one seed: the slower rank's time per iteration."""

    seed: int
    mode: str
    seconds_per_iteration: float
    messages_per_iteration: float


def measured(per_rank: list[list[ModeTiming]]) -> list[MeasuredMode]:
    """Combine the ranks' timings (an iteration ends when the slowest rank ends)."""
    out = []
    for rows in zip(*per_rank):
        assert len({(r.seed, r.mode) for r in rows}) == 1
        out.append(
            MeasuredMode(
                seed=rows[0].seed,
                mode=rows[0].mode,
                seconds_per_iteration=max(r.seconds_per_iteration for r in rows),
                messages_per_iteration=rows[0].messages_per_iteration,
            )
        )
    return out


def max_param_diff(per_rank: list[list[ModeTiming]], mode: str, reference: str = "no_overlap") -> float:
    """Largest parameter difference between ``mode`` and ``reference`` after the timed steps, over seeds and ranks."""
    worst = 0.0
    for rows in per_rank:
        by = {(r.seed, r.mode): r.params for r in rows}
        for seed in {r.seed for r in rows}:
            worst = max(worst, max(float(np.max(np.abs(a - b))) for a, b in zip(by[(seed, mode)], by[(seed, reference)])))
    return worst


def claims(table: pd.DataFrame, per_rank: list[list[ModeTiming]], claim_nodes: int) -> dict[str, list[float]]:
    """Per-seed (measured) or single (modelled) values of the chapter's claims."""

    def sp(model: str, batch: int, overlap: bool) -> float:
        sel = table[(table.model == model) & (table.batch == batch) & (table.overlap == overlap) & (table.nodes == claim_nodes)]
        return float(sel.speedup.iloc[0])

    vgg, ctl = list(MODELS)
    gain = lambda m: 100.0 * (1 - sp(m, 256, False) / sp(m, 256, True))  # noqa: E731 - iteration time saved
    times = {(m.seed, m.mode): m.seconds_per_iteration for m in measured(per_rank)}
    seeds = sorted({s for s, _ in times})
    return {
        "speedup_b256": [sp(vgg, 256, True)],
        "speedup_b512": [sp(vgg, 512, True)],
        "batch_gain": [sp(vgg, 512, True) - sp(vgg, 256, True)],
        "fc_heavy_gain": [gain(vgg) - gain(ctl)],
        "measured_overlap_gain": [100.0 * (1 - times[(s, "overlap")] / times[(s, "no_overlap")]) for s in seeds],
        "overlap_equals_sync": [max_param_diff(per_rank, "overlap")],
    }


def speedup_figure(table: pd.DataFrame, paper: dict[int, float]) -> plt.Figure:
    """Modelled speedup against nodes: VGG-A and the control, B = 256 / 512, overlap on (solid) / off (dashed)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, model in zip(axes, MODELS):
        for i, b in enumerate(sorted(table.batch.unique())):
            for overlap, ls in ((True, "-"), (False, "--")):
                sel = table[(table.model == model) & (table.batch == b) & (table.overlap == overlap)]
                ax.plot(
                    sel.nodes,
                    sel.speedup,
                    ls,
                    color=f"C{i}",
                    marker="o",
                    ms=3,
                    label=f"B={b}, {'overlap' if overlap else 'no overlap'}",
                )
        ax.plot(sel.nodes, sel.nodes, ":", color="grey", label="ideal")
        if model == list(MODELS)[0]:
            for i, (b, v) in enumerate(sorted(paper.items())):
                ax.scatter([max(sel.nodes)], [v], marker="*", s=120, color=f"C{i}", zorder=5, label=f"paper, B={b}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("nodes")
        ax.set_title(model)
    axes[0].set_ylabel("modelled speedup over 1 node")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def sensitivity_figure(
    nodes: int, batches: list[int], node_tflops: float, alpha_us: float, bandwidths: list[float], paper: dict[int, float]
) -> plt.Figure:
    """Speedup of VGG-A at ``nodes`` nodes against the link bandwidth (the deciding constant)."""
    layers = vgg_a_layers()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for i, b in enumerate(batches):
        for overlap, ls in ((True, "-"), (False, "--")):
            ax.plot(
                bandwidths,
                [speedup(layers, nodes, b, platform(node_tflops, alpha_us, bw), overlap) for bw in bandwidths],
                ls,
                color=f"C{i}",
                marker=".",
                label=f"B={b}, {'overlap' if overlap else 'no overlap'}",
            )
        if b in paper:
            ax.axhline(paper[b], color=f"C{i}", lw=0.8, ls=":")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("link bandwidth (GB/s)")
    ax.set_ylabel(f"modelled speedup at {nodes} nodes")
    ax.set_title(f"node {node_tflops:g} TFLOP/s, alpha {alpha_us:g} µs (dotted: the paper's values)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def measured_figure(per_rank: list[list[ModeTiming]]) -> plt.Figure:
    """Measured time per iteration on 2 gloo ranks per mode (bars: mean over seeds; dots: seeds)."""
    rows = measured(per_rank)
    fig, ax = plt.subplots(figsize=(5.4, 3.4))
    for i, mode in enumerate(MODES):
        vals = [1e3 * r.seconds_per_iteration for r in rows if r.mode == mode]
        ax.bar(i, np.mean(vals), color=f"C{i}", alpha=0.6)
        ax.scatter([i] * len(vals), vals, color="k", s=10, zorder=3)
    ax.set_xticks(range(len(MODES)), MODES)
    ax.set_ylabel("ms per iteration (slower rank)")
    ax.set_title("2 gloo ranks on a shared 2-core host (indicative)")
    fig.tight_layout()
    return fig
