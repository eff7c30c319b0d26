"""Chapter driver: overlapping per-layer gradient communication with back-propagation.

Two kinds of evidence, kept apart: the discrete-event model of one iteration
of full-size VGG-A at up to 128 nodes (:mod:`repro.training.itersim`; its
speedups are fixed by the assumed node and network constants, so its claims
are modelled, judged once at the named configuration, and the bandwidth is
swept in a figure), and real measurements on 2 ``torch.distributed`` gloo
ranks of a VGG-A-mini with the overlap engine, the non-overlapped reference
and torch's ``DistributedDataParallel`` (:mod:`repro.training.overlap`).  The
ranks compute on the ``device`` parameter's device (``TimingJob.device``) but
keep the gloo backend: NCCL refuses two ranks on one GPU, so on a single-GPU
machine the device applies to the compute, and gloo moves the gradients
through host memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.params import ChapterParams, require
from repro.training.cost import Network
from repro.training.itersim import Platform, conv_heavy_layers, simulate_iteration, speedup, vgg_a_layers
from repro.training.launcher import launch
from repro.training.overlap import MODES, ModeTiming, TimingJob, timing_rank

MODELS = {"VGG-A (FC-heavy)": vgg_a_layers, "conv-heavy control": conv_heavy_layers}
PAPER_BATCHES = (256, 512)
"""The global mini-batches of the paper's two speedups; the claims compare them."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    node_tflops: float
    alpha_us: float
    bandwidth_gbs: float
    sweep_bandwidths_gbs: tuple[float, ...]
    batches: tuple[int, ...]
    nodes: tuple[int, ...]
    claim_nodes: int
    seeds: tuple[int, ...]
    local_batch: int
    image: int
    num_classes: int
    width_divisor: int
    warmup: int
    iterations: int
    ddp_bucket_mb: float
    device: str

    def checks(self) -> None:
        """Refuse combinations the model or the real runs cannot take, naming the parameters."""
        require(self.claim_nodes in self.nodes and 1 in self.nodes, self, ("claim_nodes", "nodes"),
                "nodes must contain 1 (the speedup's reference) and claim_nodes")
        require(all(b in self.batches for b in PAPER_BATCHES), self, "batches",
                f"the claims compare the paper's batches {PAPER_BATCHES[0]} and {PAPER_BATCHES[1]}")
        require(self.image % 32 == 0, self, "image", "image must be a multiple of 32 (five 2x2 poolings)")
        require(self.width_divisor <= 64 and 64 % self.width_divisor == 0, self, "width_divisor",
                "width_divisor must divide 64 (VGG-A's narrowest layer has 64 channels)")

    def platform(self) -> Platform:
        """The modelled node and network of the claims."""
        return platform(self.node_tflops, self.alpha_us, self.bandwidth_gbs)

    def timing_job(self) -> TimingJob:
        """The real runs' job on the 2 gloo ranks."""
        return TimingJob(seeds=self.seeds, local_batch=self.local_batch, image=self.image,
                         num_classes=self.num_classes, width_divisor=self.width_divisor, warmup=self.warmup,
                         iterations=self.iterations, ddp_bucket_mb=self.ddp_bucket_mb, device=self.device)


def platform(node_tflops: float, alpha_us: float, bandwidth_gbs: float) -> Platform:
    """The modelled node and network."""
    return Platform(node_flops=node_tflops * 1e12, net=Network(alpha=alpha_us * 1e-6, beta=1.0 / (bandwidth_gbs * 1e9)))


def scaling_table(nodes: tuple[int, ...], batches: tuple[int, ...], plat: Platform) -> pd.DataFrame:
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


def bandwidth_sweep(params: Params) -> pd.DataFrame:
    """Modelled speedup of VGG-A at ``claim_nodes`` nodes for every swept bandwidth, batch and overlap setting."""
    layers = vgg_a_layers()
    rows = []
    for bw in params.sweep_bandwidths_gbs:
        plat = platform(params.node_tflops, params.alpha_us, bw)
        for b in params.batches:
            for overlap in (False, True):
                rows.append({"bandwidth_gbs": bw, "batch": b, "overlap": overlap,
                             "speedup": speedup(layers, params.claim_nodes, b, plat, overlap)})
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
        if len({(r.seed, r.mode) for r in rows}) != 1:
            raise ValueError(f"the ranks' timings are out of step: {[(r.seed, r.mode) for r in rows]}")
        out.append(
            MeasuredMode(
                seed=rows[0].seed,
                mode=rows[0].mode,
                seconds_per_iteration=max(r.seconds_per_iteration for r in rows),
                messages_per_iteration=rows[0].messages_per_iteration,
            )
        )
    return out


def param_diff(per_rank: list[list[ModeTiming]], mode: str, seed: int, reference: str = "no_overlap") -> float:
    """Largest parameter difference between ``mode`` and ``reference`` after the timed steps of one seed, over ranks."""
    worst = 0.0
    for rows in per_rank:
        by = {(r.seed, r.mode): r.params for r in rows}
        worst = max(worst, max(float(np.max(np.abs(a - b))) for a, b in zip(by[(seed, mode)], by[(seed, reference)])))
    return worst


def max_param_diff(per_rank: list[list[ModeTiming]], mode: str, reference: str = "no_overlap") -> float:
    """Largest parameter difference between ``mode`` and ``reference`` over seeds and ranks."""
    seeds = {r.seed for rows in per_rank for r in rows}
    return max(param_diff(per_rank, mode, s, reference) for s in seeds)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params
        The parameters of the run.
    table
        The modelled scaling table (:func:`scaling_table`) at the chapter's constants.
    sensitivity
        The modelled speedup at ``claim_nodes`` against the link bandwidth (:func:`bandwidth_sweep`).
    per_rank
        Each gloo rank's timings of the real runs.
    """

    params: Params
    table: pd.DataFrame
    sensitivity: pd.DataFrame
    per_rank: list[list[ModeTiming]]

    def modelled_speedup(self, model: str, batch: int, overlap: bool = True) -> float:
        """The modelled speedup of ``model`` at ``claim_nodes`` nodes and global batch ``batch``."""
        t = self.table
        sel = t[(t.model == model) & (t.batch == batch) & (t.overlap == overlap) & (t.nodes == self.params.claim_nodes)]
        return float(sel.speedup.iloc[0])

    def overlap_saving(self, model: str, batch: int) -> float:
        """Modelled iteration time saved by overlap at ``claim_nodes`` nodes, percent."""
        return 100.0 * (1 - self.modelled_speedup(model, batch, False) / self.modelled_speedup(model, batch, True))


def run(params: Params) -> Results:
    """The modelled scaling table and bandwidth sweep, then the real runs on 2 gloo ranks."""
    return Results(params=params, table=scaling_table(params.nodes, params.batches, params.platform()),
                   sensitivity=bandwidth_sweep(params), per_rank=measure(params.timing_job()))


def claims(results: Results) -> dict[str, list[float]]:
    """The modelled claims once (at ``claim_nodes`` nodes and the chapter's constants), the measured ones per seed."""
    vgg, ctl = list(MODELS)
    small, large = PAPER_BATCHES
    times = {(m.seed, m.mode): m.seconds_per_iteration for m in measured(results.per_rank)}
    seeds = sorted({s for s, _ in times})
    return {
        "speedup_b256": [results.modelled_speedup(vgg, small)],
        "speedup_b512": [results.modelled_speedup(vgg, large)],
        "batch_gain": [results.modelled_speedup(vgg, large) / results.modelled_speedup(vgg, small)],
        "fc_heavy_gain": [results.overlap_saving(vgg, small) - results.overlap_saving(ctl, small)],
        "measured_overlap_gain": [100.0 * (1 - times[(s, "overlap")] / times[(s, "no_overlap")]) for s in seeds],
        "overlap_equals_sync": [param_diff(results.per_rank, "overlap", s) for s in seeds],
    }


def speedup_figure(results: Results, paper: dict[int, float]) -> plt.Figure:
    """Modelled speedup against nodes: VGG-A and the control, each batch, overlap on (solid) / off (dashed)."""
    table = results.table
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, model in zip(axes, MODELS):
        for i, b in enumerate(sorted(table.batch.unique())):
            for overlap, ls in ((True, "-"), (False, "--")):
                sel = table[(table.model == model) & (table.batch == b) & (table.overlap == overlap)]
                ax.plot(sel.nodes, sel.speedup, ls, color=f"C{i}", marker="o", ms=3,
                        label=f"B={b}, {'overlap' if overlap else 'no overlap'}")
        ax.plot(sel.nodes, sel.nodes, ":", color="grey", label="ideal")
        if model == list(MODELS)[0]:
            for i, (b, v) in enumerate(sorted(paper.items())):
                ax.scatter([results.params.claim_nodes], [v], marker="*", s=120, color=f"C{i}", zorder=5,
                           label=f"paper, B={b}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("nodes")
        ax.set_title(model)
    axes[0].set_ylabel("modelled speedup over 1 node")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def sensitivity_figure(results: Results, paper: dict[int, float]) -> plt.Figure:
    """Speedup of VGG-A at ``claim_nodes`` nodes against the link bandwidth (the deciding constant)."""
    p, sweep = results.params, results.sensitivity
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for i, b in enumerate(p.batches):
        for overlap, ls in ((True, "-"), (False, "--")):
            sel = sweep[(sweep.batch == b) & (sweep.overlap == overlap)]
            ax.plot(sel.bandwidth_gbs, sel.speedup, ls, color=f"C{i}", marker=".",
                    label=f"B={b}, {'overlap' if overlap else 'no overlap'}")
        if b in paper:
            ax.axhline(paper[b], color=f"C{i}", lw=0.8, ls=":")
    ax.axvline(p.bandwidth_gbs, color="grey", lw=0.8, label="the claims' bandwidth")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("link bandwidth (GB/s)")
    ax.set_ylabel(f"modelled speedup at {p.claim_nodes} nodes")
    ax.set_title(f"node {p.node_tflops:g} TFLOP/s, alpha {p.alpha_us:g} µs (dotted: the paper's values)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def bandwidth_matching(results: Results, batch: int, target: float) -> tuple[float, float] | None:
    """The neighbouring swept bandwidths between which VGG-A's overlapped speedup at ``batch`` crosses ``target``."""
    sel = results.sensitivity
    sel = sel[(sel.batch == batch) & sel.overlap].sort_values("bandwidth_gbs")
    xs, ys = sel.bandwidth_gbs.tolist(), sel.speedup.tolist()
    for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:]):
        if (y0 - target) * (y1 - target) <= 0:
            return float(x0), float(x1)
    return None


def measured_figure(results: Results) -> plt.Figure:
    """Measured time per iteration on 2 gloo ranks per mode (bars: mean over seeds; dots: seeds)."""
    rows = measured(results.per_rank)
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
