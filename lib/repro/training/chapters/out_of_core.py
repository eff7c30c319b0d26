"""Chapter driver: out-of-core training by combining layer swapping and recomputation (KARMA).

Three kinds of evidence, kept apart:

- exactness: every keep/swap/recompute policy gives plain training's gradients (host and disk stores);
- measured: per-block forward/backward times and saved bytes of three small models profiled on one CPU
  thread (:func:`repro.training.memory.profile_chain`), and a disk-backed swapping run whose wall time
  checks the synchronous variant of the simulator;
- modelled: the two-stream simulator (:mod:`repro.training.ooc_sim`) with an emulated device capacity and
  host link, on which the hybrid planner is compared with swap-only and recompute-only planners; the link
  bandwidth, which decides the outcome, is swept.

The models are built and their inputs drawn on the CPU, then moved to the ``device`` parameter's device,
where they are profiled and checked; on a GPU the host store swaps to host memory, the real out-of-core
case, and every clock reading waits for the queued kernels.
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
from repro.training.memory import BlockProfile, DiskStore, gradients, profile_chain, run_chain
from repro.training.ooc_sim import Plan, exhaustive, greedy, peak_memory, simulate


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
    built = [mlp_chain(512 * scale, 8, 256, seed), cnn_chain(16 * scale, 8, 16, 32, seed),
             transformer_chain(64 * scale, 6, 8, 64, seed)]
    return [Workload(name=w.name, model=w.model.to(dev), batch=w.batch.to(dev), labels=w.labels.to(dev)) for w in built]


def reference_bandwidth(blocks: list[BlockProfile]) -> float:
    """The link bandwidth at which swapping every activation out takes as long as the forward pass."""
    return sum(b.activation_bytes for b in blocks) / sum(b.forward_s for b in blocks)


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """The planners on one profiled model at one bandwidth.

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
    in_core: float
    times: dict[str, float]
    policies: dict[str, tuple[str, ...]]


def _t(plan: Plan) -> float:
    return plan.schedule.time if plan.feasible else float("inf")


def compare(name: str, seed: int, blocks: list[BlockProfile], capacity_fraction: float, bandwidth_ratio: float,
            exhaustive_limit: int) -> Comparison:
    """Every planner on one model.

    Naive swap-all / recompute-all, the best swap-only and recompute-only policies (exhaustive over
    keep+swap and keep+recompute), the hybrid greedy planner and the hybrid optimum.
    The emulated device holds the weights plus ``capacity_fraction`` of the in-core activation memory;
    the link runs at ``bandwidth_ratio`` times :func:`reference_bandwidth`.
    """
    n = len(blocks)
    weights = sum(b.weight_bytes for b in blocks)
    capacity = weights + capacity_fraction * (peak_memory(blocks, ["keep"] * n) - weights)
    bw = bandwidth_ratio * reference_bandwidth(blocks)
    plans: dict[str, Plan] = {}
    for label, pol in (("swap-all", ["swap"] * n), ("recompute-all", ["recompute"] * n)):
        s = simulate(blocks, pol, bw)
        plans[label] = Plan(policy=tuple(pol), schedule=s, feasible=s.peak_bytes <= capacity)
    search = exhaustive if n <= exhaustive_limit else greedy
    plans["best swap-only"] = search(blocks, bw, capacity, ("keep", "swap"))
    plans["best recompute-only"] = search(blocks, bw, capacity, ("keep", "recompute"))
    plans["hybrid (greedy)"] = greedy(blocks, bw, capacity)
    plans["hybrid (optimum)"] = exhaustive(blocks, bw, capacity) if n <= exhaustive_limit else plans["hybrid (greedy)"]
    return Comparison(model=name, seed=seed, bandwidth_ratio=bandwidth_ratio, in_core=simulate(blocks, ["keep"] * n, bw).time,
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


def _median_time(fn: Callable[[], None], repeats: int, device: torch.device) -> float:
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

        def step() -> None:
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


def run_seed(
    seed: int, scale: int, capacity_fraction: float, ratios: list[float], exhaustive_limit: int, repeats: int, device: str = "cpu"
) -> SeedResult:
    """Profile the models on ``device``, run every planner at every bandwidth ratio, and the disk and gradient checks."""
    torch.set_num_threads(1)
    works = workloads(scale, seed, device)
    profiles = {w.name: profile_chain(w.model, w.batch, repeats) for w in works}
    comps = [compare(w.name, seed, profiles[w.name], capacity_fraction, r, exhaustive_limit) for w in works for r in ratios]
    disk = disk_check(works[0], profiles[works[0].name], repeats)
    return SeedResult(
        seed=seed, profiles=profiles, comparisons=comps, disk=disk, grad_diff=max(gradient_check(w, seed) for w in works)
    )


def sweep(
    seeds: list[int],
    scale: int,
    capacity_fraction: float,
    ratios: list[float],
    exhaustive_limit: int,
    repeats: int,
    device: str = "cpu",
) -> list[SeedResult]:
    """:func:`run_seed` for every seed on ``device``, in this process (timings must not compete with each other)."""
    return [run_seed(s, scale, capacity_fraction, ratios, exhaustive_limit, repeats, device) for s in seeds]


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


def throughput_table(results: list[SeedResult], ratio: float) -> pd.DataFrame:
    """Normalised throughput (in-core time / method time) per model and method at one bandwidth ratio, mean over seeds."""
    rows = []
    for c in (c for r in results for c in r.comparisons if c.bandwidth_ratio == ratio):
        rows += [{"model": c.model, "method": m, "throughput": c.in_core / t} for m, t in c.times.items()]
    return pd.DataFrame(rows).groupby(["model", "method"], sort=False).throughput.mean().unstack()


def hybrid_speedup(c: Comparison, planner: str = "hybrid (greedy)") -> float:
    """Best single-technique time over the hybrid planner's time (``nan`` when nothing fits)."""
    best_single = min(c.times["best swap-only"], c.times["best recompute-only"])
    return best_single / c.times[planner] if np.isfinite(c.times[planner]) else float("nan")


def claims(results: list[SeedResult], ratio: float) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims at the claim's bandwidth ratio."""
    at = lambda r: [c for c in r.comparisons if c.bandwidth_ratio == ratio]  # noqa: E731
    return {
        "hybrid_speedup": [float(np.nanmean([hybrid_speedup(c) for c in at(r)])) for r in results],
        "greedy_near_optimal": [
            float(
                np.nanmean(
                    [
                        100 * (c.times["hybrid (greedy)"] / c.times["hybrid (optimum)"] - 1)
                        for c in at(r)
                        if np.isfinite(c.times["hybrid (optimum)"])
                    ]
                )
            )
            for r in results
        ],
        "simulator_accuracy": [float(np.mean([d.error_percent for d in r.disk])) for r in results],
        "gradients_identical": [r.grad_diff for r in results],
    }


def throughput_figure(results: list[SeedResult], ratio: float) -> plt.Figure:
    """Bars: normalised throughput per model and method at the claim's bandwidth ratio."""
    table = throughput_table(results, ratio)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(table.columns)
    for i, m in enumerate(table.columns):
        ax.bar(np.arange(len(table)) + i * width, table[m].replace(np.inf, 0), width, label=m, color=f"C{i}")
    ax.set_xticks(np.arange(len(table)) + 0.4 - width / 2, table.index)
    ax.set_ylabel("throughput / in-core throughput (modelled)")
    ax.set_title(f"link = {ratio:g} x reference bandwidth (missing bar: does not fit)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    return fig


def bandwidth_figure(results: list[SeedResult], paper_speedup: float) -> plt.Figure:
    """Hybrid speedup over the best single technique against the link bandwidth (the deciding constant)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    models = list(results[0].profiles)
    ratios = sorted({c.bandwidth_ratio for c in results[0].comparisons})
    for i, m in enumerate(models):
        ys = [
            np.mean([hybrid_speedup(c) for r in results for c in r.comparisons if c.model == m and c.bandwidth_ratio == x])
            for x in ratios
        ]
        ax.plot(ratios, ys, marker="o", color=f"C{i}", label=m)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(paper_speedup, color="grey", ls=":", label="paper (average, V100)")
    ax.set_xscale("log")
    ax.set_xlabel("host link bandwidth / reference (1 = swap-out of all activations takes one forward pass)")
    ax.set_ylabel("best single technique / hybrid")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def disk_table(results: list[SeedResult]) -> pd.DataFrame:
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
            for r in results
            for d in r.disk
        ]
    )
