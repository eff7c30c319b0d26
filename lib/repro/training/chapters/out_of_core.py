"""Chapter driver: out-of-core training by combining layer swapping and recomputation (KARMA).

Four kinds of evidence, kept apart:

- exactness: every keep/swap/recompute policy gives plain training's gradients (host and disk stores);
- measured: per-block forward/backward times and saved bytes of three small models profiled on one CPU
  thread (:func:`repro.training.memory.profile_chain`), and a disk-backed swapping run whose wall time
  checks the synchronous variant of the simulator;
- modelled: the two-stream simulator (:mod:`repro.training.ooc_sim`) with an emulated device capacity and
  host link, on which the hybrid planner is compared with swap-only and recompute-only planners; the link
  bandwidth and the device capacity, which decide the outcome, are swept;
- the multi-node part in miniature: 2 gloo ranks train the MLP data-parallel under the hybrid planner's
  policy, with every layer's allreduce pipelined with back-propagation and the update on a host copy of
  the weights (:mod:`repro.training.ooc_dp`), against plain synchronous data parallelism.

The models are built and their inputs drawn on the CPU, then moved to the ``device`` parameter's device,
where they are profiled and checked; on a GPU the host store swaps to host memory, the real out-of-core
case, and every clock reading waits for the queued kernels.  The data-parallel ranks stay on the CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from torch import nn

from repro.devices import resolve_device, synchronize
from repro.params import ChapterParams, require
from repro.training.launcher import launch
from repro.training.memory import BlockProfile, DiskStore, gradients, profile_chain, run_chain
from repro.training.ooc_dp import DP_MODES, DPJob, DPTiming, dp_rank
from repro.training.ooc_sim import Plan, exhaustive, greedy, peak_memory, simulate

MLP_WIDTH, CNN_CHANNELS, TRANSFORMER_WIDTH = 512, 16, 64
"""The three chains' widths at ``scale`` 1 (the cpu profile); ``scale`` multiplies them."""
DP_RANKS = 2
"""Gloo ranks of the data-parallel (multi-node) part."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    scale: int
    capacity_fraction: float
    capacity_fractions: tuple[float, ...]
    bandwidth_ratios: tuple[float, ...]
    claim_ratio: float
    exhaustive_limit: int
    repeats: int
    seeds: tuple[int, ...]
    dp_steps: int
    dp_warmup: int
    device: str

    def checks(self) -> None:
        """Refuse combinations the planners or the claims cannot take, naming the parameters."""
        require(self.claim_ratio in self.bandwidth_ratios, self, ("claim_ratio", "bandwidth_ratios"),
                "claim_ratio must be one of bandwidth_ratios")
        require(self.capacity_fraction in self.capacity_fractions, self, ("capacity_fraction", "capacity_fractions"),
                "capacity_fraction must be one of capacity_fractions")
        require(self.exhaustive_limit >= 8, self, "exhaustive_limit",
                "the greedy planner is judged against the exhaustive optimum: the 8-block chains must be searched "
                "exhaustively (exhaustive_limit >= 8)")


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A chain of blocks and one input batch."""

    name: str
    model: nn.Sequential
    batch: torch.Tensor
    labels: torch.Tensor


def mlp_chain(width: int, depth: int, batch: int, seed: int) -> Workload:
    """``depth`` blocks of Linear-LayerNorm-GELU (the last is the classifier) on random inputs."""
    torch.manual_seed(seed)
    blocks = [nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()) for _ in range(depth - 1)]
    return Workload(name="MLP", model=nn.Sequential(*blocks, nn.Linear(width, 10)), batch=torch.randn(batch, width),
                    labels=torch.randint(0, 10, (batch,)))


def cnn_chain(channels: int, depth: int, batch: int, image: int, seed: int) -> Workload:
    """A stem, ``depth - 2`` residual-free conv-BN-ReLU blocks (the middle one strided) and a pooled classifier."""
    torch.manual_seed(seed)
    conv = lambda i, o, s=1: nn.Sequential(nn.Conv2d(i, o, 3, s, 1), nn.BatchNorm2d(o), nn.ReLU())  # noqa: E731
    body = [conv(channels, channels, 2 if i == (depth - 2) // 2 else 1) for i in range(depth - 2)]
    head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))
    return Workload(name="CNN", model=nn.Sequential(conv(3, channels), *body, head), batch=torch.randn(batch, 3, image, image),
                    labels=torch.randint(0, 10, (batch,)))


class _Pool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


def transformer_chain(d_model: int, depth: int, batch: int, seq: int, seed: int) -> Workload:
    """``depth - 1`` transformer encoder layers and a mean-pooled classifier on random token embeddings."""
    torch.manual_seed(seed)
    layers = [nn.TransformerEncoderLayer(d_model, 4, 2 * d_model, dropout=0.0, batch_first=True) for _ in range(depth - 1)]
    return Workload(name="Transformer", model=nn.Sequential(*layers, nn.Sequential(_Pool(), nn.Linear(d_model, 10))),
                    batch=torch.randn(batch, seq, d_model), labels=torch.randint(0, 10, (batch,)))


def workloads(scale: int, seed: int, device: str = "cpu") -> list[Workload]:
    """The three profiled models on ``device``; ``scale`` multiplies their width (1 = the cpu profile's size)."""
    dev = resolve_device(device)
    built = [mlp_chain(MLP_WIDTH * scale, 8, 256, seed), cnn_chain(CNN_CHANNELS * scale, 8, 16, 32, seed),
             transformer_chain(TRANSFORMER_WIDTH * scale, 6, 8, 64, seed)]
    return [Workload(name=w.name, model=w.model.to(dev), batch=w.batch.to(dev), labels=w.labels.to(dev)) for w in built]



def reference_bandwidth(blocks: list[BlockProfile]) -> float:
    """The link bandwidth at which swapping every activation out takes as long as the forward pass."""
    return sum(b.activation_bytes for b in blocks) / sum(b.forward_s for b in blocks)


SINGLE = ("best swap-only", "best recompute-only")
NAIVE = ("swap-all", "recompute-all")
HYBRID, OPTIMUM = "hybrid (greedy)", "hybrid (optimum)"


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """The planners on one profiled model at one bandwidth and one device capacity.

    Attributes
    ----------
    times
        Modelled iteration time per method (``inf`` when the method cannot fit the capacity).
    policies
        The policy each method chose.
    """

    model: str
    seed: int
    bandwidth_ratio: float
    capacity_fraction: float
    in_core: float
    times: dict[str, float]
    policies: dict[str, tuple[str, ...]]


def _t(plan: Plan) -> float:
    return plan.schedule.time if plan.feasible else float("inf")


@dataclass(frozen=True, kw_only=True)
class Emulated:
    """The emulated device and link a comparison runs on."""

    capacity_fraction: float
    bandwidth_ratio: float
    exhaustive_limit: int


def compare(name: str, seed: int, blocks: list[BlockProfile], emulated: Emulated) -> Comparison:
    """Every planner on one model.

    Naive swap-all / recompute-all, the best swap-only and recompute-only policies (exhaustive over
    keep+swap and keep+recompute), the hybrid greedy planner and the hybrid optimum.
    The emulated device holds the weights plus ``capacity_fraction`` of the in-core activation memory;
    the link runs at ``bandwidth_ratio`` times :func:`reference_bandwidth`.
    """
    n = len(blocks)
    weights = sum(b.weight_bytes for b in blocks)
    capacity = weights + emulated.capacity_fraction * (peak_memory(blocks, ["keep"] * n) - weights)
    bw = emulated.bandwidth_ratio * reference_bandwidth(blocks)
    plans: dict[str, Plan] = {}
    for label, pol in zip(NAIVE, (["swap"] * n, ["recompute"] * n)):
        s = simulate(blocks, pol, bw)
        plans[label] = Plan(policy=tuple(pol), schedule=s, feasible=s.peak_bytes <= capacity)
    search = exhaustive if n <= emulated.exhaustive_limit else greedy
    plans["best swap-only"] = search(blocks, bw, capacity, ("keep", "swap"))
    plans["best recompute-only"] = search(blocks, bw, capacity, ("keep", "recompute"))
    plans[HYBRID] = greedy(blocks, bw, capacity)
    plans[OPTIMUM] = exhaustive(blocks, bw, capacity) if n <= emulated.exhaustive_limit else plans[HYBRID]
    return Comparison(model=name, seed=seed, bandwidth_ratio=emulated.bandwidth_ratio,
                      capacity_fraction=emulated.capacity_fraction, in_core=simulate(blocks, ["keep"] * n, bw).time,
                      times={k: _t(p) for k, p in plans.items()}, policies={k: p.policy for k, p in plans.items()})


@dataclass(frozen=True, kw_only=True)
class DiskCheck:
    """Measured against simulated (synchronous transfers) iteration time for one policy on the disk store."""

    policy: str
    measured_s: float
    predicted_s: float

    @property
    def error_percent(self) -> float:
        """``|predicted - measured| / measured``, percent."""
        return 100.0 * abs(self.predicted_s - self.measured_s) / self.measured_s


def _median_time(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def disk_bandwidth(nbytes: int, repeats: int = 3, device: torch.device | None = None) -> float:
    """Round-trip bandwidth of the disk store (write then read back), bytes per second of one direction.

    The tensor starts on ``device`` (default the CPU), so a GPU's copy to and from host memory is included.
    """
    dev = device if device is not None else torch.device("cpu")
    t = torch.randn(max(1, nbytes // 4)).to(dev)
    store = DiskStore()
    return 2 * t.numel() * 4 / _median_time(lambda: store.get(store.put(t)), repeats, dev)


def disk_check(work: Workload, blocks: list[BlockProfile], repeats: int) -> list[DiskCheck]:
    """Time real iterations (forward + backward) with swap-all on disk and with recompute-all, against the model.

    The per-block profile misses the iteration's fixed costs (loss, autograd engine, allocator), so the
    block times are first scaled by one measured in-core iteration (a one-point calibration); the check is
    then whether the model predicts the two out-of-core iterations, whose extra cost it must add itself
    (synchronous disk transfers at the measured disk bandwidth; one more forward per recomputed block).
    """
    n = len(work.model)
    dev = work.batch.device
    bw = disk_bandwidth(int(np.mean([b.activation_bytes for b in blocks])), device=dev)
    measured = {}
    for label, pol in (("keep", ["keep"] * n), ("swap", ["swap"] * n), ("recompute", ["recompute"] * n)):
        store = DiskStore()

        def step(pol: list[str] = pol, store: DiskStore = store) -> None:
            work.model.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(run_chain(work.model, work.batch, pol, store), work.labels).backward()

        measured[label] = _median_time(step, repeats, dev)
    scale = measured["keep"] / simulate(blocks, ["keep"] * n, bw).time
    calibrated = [
        BlockProfile(
            forward_s=b.forward_s * scale,
            backward_s=b.backward_s * scale,
            activation_bytes=b.activation_bytes,
            input_bytes=b.input_bytes,
            weight_bytes=b.weight_bytes,
        )
        for b in blocks
    ]
    return [
        DiskCheck(
            policy=f"{pol}-all" + (" (disk)" if pol == "swap" else ""),
            measured_s=measured[pol],
            predicted_s=simulate(calibrated, [pol] * n, bw, overlap=False).time,
        )
        for pol in ("swap", "recompute")
    ]


def gradient_check(work: Workload, seed: int, count: int = 3) -> float:
    """Largest gradient difference between plain training and ``count`` random policies (host and disk stores)."""
    rng = np.random.default_rng(seed)
    n = len(work.model)
    plain = gradients(work.model, work.batch, work.labels, ["keep"] * n)
    worst = 0.0
    for i in range(count):
        pol = list(rng.choice(["keep", "swap", "recompute"], size=n))
        got = gradients(work.model, work.batch, work.labels, pol, DiskStore() if i % 2 else None)
        worst = max(worst, max(float((a - b).abs().max()) for a, b in zip(plain, got)))
    return worst


@dataclass(frozen=True, kw_only=True)
class SeedResult:
    """Everything one seed (one profiling of the three models) produced."""

    seed: int
    profiles: dict[str, list[BlockProfile]]
    comparisons: list[Comparison]
    disk: list[DiskCheck]
    grad_diff: float


def emulations(params: Params) -> list[Emulated]:
    """Every bandwidth at the claim capacity, and every capacity at the claim bandwidth (the two sweeps)."""
    out = [Emulated(capacity_fraction=params.capacity_fraction, bandwidth_ratio=r, exhaustive_limit=params.exhaustive_limit)
           for r in params.bandwidth_ratios]
    out += [Emulated(capacity_fraction=c, bandwidth_ratio=params.claim_ratio, exhaustive_limit=params.exhaustive_limit)
            for c in params.capacity_fractions if c != params.capacity_fraction]
    return out


def run_seed(params: Params, seed: int) -> SeedResult:
    """Profile the models on ``device``, run every planner on both sweeps, and the disk and gradient checks."""
    torch.set_num_threads(1)
    works = workloads(params.scale, seed, params.device)
    profiles = {w.name: profile_chain(w.model, w.batch, params.repeats) for w in works}
    comps = [compare(w.name, seed, profiles[w.name], e) for w in works for e in emulations(params)]
    disk = disk_check(works[0], profiles[works[0].name], params.repeats)
    return SeedResult(
        seed=seed, profiles=profiles, comparisons=comps, disk=disk, grad_diff=max(gradient_check(w, seed) for w in works)
    )


def at_claim(result: SeedResult, params: Params) -> list[Comparison]:
    """The seed's comparisons at the claims' bandwidth and capacity (one per model)."""
    return [c for c in result.comparisons
            if c.bandwidth_ratio == params.claim_ratio and c.capacity_fraction == params.capacity_fraction]


def dp_jobs(params: Params, results: list[SeedResult]) -> DPJob:
    """The data-parallel part: the MLP of every seed under its hybrid plan at the claims' bandwidth and capacity."""
    mlps = [workloads(params.scale, r.seed, "cpu")[0] for r in results]
    policies = [next(c for c in at_claim(r, params) if c.model == mlp.name).policies[HYBRID]
                for r, mlp in zip(results, mlps)]
    return DPJob(models=tuple(m.model for m in mlps), policies=tuple(policies), seeds=tuple(r.seed for r in results),
                 features=mlps[0].batch.shape[1], classes=10, batch=len(mlps[0].batch) // DP_RANKS,
                 steps=params.dp_steps, warmup=params.dp_warmup)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced: every seed's profiles, planners and checks, and the data-parallel runs.

    Attributes
    ----------
    params
        The parameters of the run.
    seeds
        One :class:`SeedResult` per seed.
    dp
        Each rank's timings of the data-parallel part (:func:`repro.training.ooc_dp.dp_rank`).
    dp_policies
        The out-of-core policy of the pipelined mode, per seed.
    """

    params: Params
    seeds: list[SeedResult]
    dp: list[list[DPTiming]]
    dp_policies: tuple[tuple[str, ...], ...]


def run(params: Params) -> Results:
    """Every seed's profiling, planners and checks (one after the other: timings must not compete), then the ranks."""
    seeds = [run_seed(params, s) for s in params.seeds]
    job = dp_jobs(params, seeds)
    return Results(params=params, seeds=seeds, dp=launch(dp_rank, DP_RANKS, (job,), timeout_s=600),
                   dp_policies=job.policies)


def profile_table(result: SeedResult) -> pd.DataFrame:
    """Per model: blocks, total forward/backward time, activation and weight bytes, the reference bandwidth."""
    rows = []
    for name, blocks in result.profiles.items():
        rows.append(
            {
                "model": name,
                "blocks": len(blocks),
                "forward ms": 1e3 * sum(b.forward_s for b in blocks),
                "backward ms": 1e3 * sum(b.backward_s for b in blocks),
                "activations MB": sum(b.activation_bytes for b in blocks) / 1e6,
                "weights MB": sum(b.weight_bytes for b in blocks) / 1e6,
                "reference link GB/s": reference_bandwidth(blocks) / 1e9,
            }
        )
    return pd.DataFrame(rows)


def _comparisons(results: Results, ratio: float | None = None, capacity: float | None = None) -> list[Comparison]:
    p = results.params
    ratio = p.claim_ratio if ratio is None else ratio
    capacity = p.capacity_fraction if capacity is None else capacity
    return [c for r in results.seeds for c in r.comparisons if c.bandwidth_ratio == ratio and c.capacity_fraction == capacity]


def throughput_table(results: Results) -> pd.DataFrame:
    """Normalised throughput (in-core time / method time) per model and method at the claims' link and capacity."""
    rows = [{"model": c.model, "method": m, "throughput": c.in_core / t}
            for c in _comparisons(results) for m, t in c.times.items()]
    return pd.DataFrame(rows).groupby(["model", "method"], sort=False).throughput.mean().unstack()


def speedup_over(c: Comparison, baselines: tuple[str, ...], planner: str = HYBRID) -> float:
    """The fastest baseline's time over the planner's time (``nan`` when the planner fits nothing)."""
    best = min(c.times[b] for b in baselines)
    return best / c.times[planner] if np.isfinite(c.times[planner]) else float("nan")


def hybrid_speedup(c: Comparison, planner: str = HYBRID) -> float:
    """Best single-technique time over the hybrid planner's time (``nan`` when nothing fits)."""
    return speedup_over(c, SINGLE, planner)


def mean_speedup(results: Results, baselines: tuple[str, ...] = SINGLE, ratio: float | None = None,
                 capacity: float | None = None) -> float:
    """The hybrid's speed-up over the fastest of ``baselines``, mean over models and seeds (one emulation)."""
    return float(np.nanmean([speedup_over(c, baselines) for c in _comparisons(results, ratio, capacity)]))


def gain_text(gain: float) -> str:
    """A speed-up in words: ``1.23x``, or what an infinite (only the hybrid fits) or missing value means."""
    if np.isnan(gain):
        return "nothing (no plan fits)"
    return f"{gain:.2f}×" if np.isfinite(gain) else "without bound (only the hybrid fits)"


def tightest_fit(results: Results) -> tuple[float, float] | None:
    """The smallest swept device memory at which the hybrid fits some model, with its mean speed-up there."""
    for capacity in sorted(results.params.capacity_fractions):
        fits = [c for c in _comparisons(results, capacity=capacity) if np.isfinite(c.times[HYBRID])]
        if fits:
            return capacity, float(np.mean([hybrid_speedup(c) for c in fits]))
    return None


def best_single(results: Results, ratio: float) -> str:
    """Which single technique is faster more often over models and seeds at ``ratio`` (the claims' capacity)."""
    wins = [min(SINGLE, key=lambda m: c.times[m]) for c in _comparisons(results, ratio)]
    return max(SINGLE, key=wins.count)


def _dp_runs(results: Results, seed: int) -> list[dict[str, DPTiming]]:
    """Each rank's two modes of one seed, by mode."""
    return [{t.mode: t for t in rank if t.seed == seed} for rank in results.dp]


def dp_difference(results: Results, seed: int) -> float:
    """Largest parameter difference of one seed between the two modes on each rank, and between the ranks."""
    runs = _dp_runs(results, seed)
    pairs = [(r["synchronous"], r["pipelined"]) for r in runs] + [(runs[0]["pipelined"], r["pipelined"]) for r in runs[1:]]
    return max(float(np.max(np.abs(x - y))) for a, b in pairs for x, y in zip(a.params, b.params))


def dp_table(results: Results) -> pd.DataFrame:
    """The data-parallel part per seed: each mode's time per step (slower rank), the policy and the modes' difference."""
    rows = []
    for seed, policy in zip(results.params.seeds, results.dp_policies):
        runs = _dp_runs(results, seed)
        row: dict[str, float | int | str] = {"seed": seed}
        for mode in DP_MODES:
            row[f"{mode} ms/step"] = 1e3 * max(r[mode].seconds_per_step for r in runs)
        row["pipelined policy (k/s/r per block)"] = " ".join(pol[0] for pol in policy)
        row["largest parameter difference"] = dp_difference(results, seed)
        rows.append(row)
    return pd.DataFrame(rows)


def claims(results: Results) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims at the claims' bandwidth and capacity."""
    p = results.params

    def greedy_gap(c: Comparison) -> float:
        return 100 * (c.times[HYBRID] / c.times[OPTIMUM] - 1)

    return {
        "hybrid_speedup": [float(np.nanmean([hybrid_speedup(c) for c in at_claim(r, p)])) for r in results.seeds],
        "greedy_near_optimal": [float(np.nanmean([greedy_gap(c) for c in at_claim(r, p) if np.isfinite(c.times[OPTIMUM])]))
                                for r in results.seeds],
        "simulator_accuracy": [float(np.mean([d.error_percent for d in r.disk])) for r in results.seeds],
        "gradients_identical": [r.grad_diff for r in results.seeds],
        "multinode_equals_sync": [dp_difference(results, r.seed) for r in results.seeds],
    }


def throughput_figure(results: Results) -> plt.Figure:
    """Bars: normalised throughput per model and method at the claims' bandwidth and capacity."""
    table = throughput_table(results)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(table.columns)
    for i, m in enumerate(table.columns):
        ax.bar(np.arange(len(table)) + i * width, table[m].replace(np.inf, 0), width, label=m, color=f"C{i}")
    ax.set_xticks(np.arange(len(table)) + 0.4 - width / 2, table.index)
    ax.set_ylabel("throughput / in-core throughput (modelled)")
    ax.set_title(f"link = {results.params.claim_ratio:g} x reference bandwidth, capacity "
                 f"{results.params.capacity_fraction:g} (missing bar: does not fit)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    return fig


def sweep_figure(results: Results, paper_speedup: float) -> plt.Figure:
    """The hybrid's speed-up over the best single technique against the two deciding constants, per model."""
    p = results.params
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    models = list(results.seeds[0].profiles)
    axis_values = ((axes[0], sorted(p.bandwidth_ratios), "ratio"), (axes[1], sorted(p.capacity_fractions), "capacity"))
    for ax, xs, which in axis_values:
        for i, m in enumerate(models):
            ys = [np.nanmean([hybrid_speedup(c) for c in (_comparisons(results, ratio=x) if which == "ratio"
                                                          else _comparisons(results, capacity=x)) if c.model == m])
                  for x in xs]
            ax.plot(xs, ys, marker="o", color=f"C{i}", label=m)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(paper_speedup, color="grey", ls=":", label="paper (average over six models, GPUs)")
        ax.axvline(p.claim_ratio if which == "ratio" else p.capacity_fraction, color="grey", lw=0.8,
                   label="the claims' setting")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("host link bandwidth / reference (1 = swapping all activations out takes one forward pass)")
    axes[1].set_xlabel("device memory for activations (share of the in-core need)")
    axes[0].set_ylabel("best single technique / hybrid (modelled)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def disk_table(results: Results) -> pd.DataFrame:
    """Measured and predicted iteration times of the disk-backed check, per seed and policy."""
    return pd.DataFrame(
        [
            {
                "seed": r.seed,
                "policy": d.policy,
                "measured ms": 1e3 * d.measured_s,
                "predicted ms": 1e3 * d.predicted_s,
                "error %": d.error_percent,
            }
            for r in results.seeds
            for d in r.disk
        ]
    )
