"""Chapter driver: an analytic oracle for data, model and hybrid parallel training of CNNs (ParaDL).

Two kinds of evidence, kept apart:

- measured: this machine calibrated as a platform (FLOP rate of the model on one thread per rank while
  both ranks run, alpha and beta from a gloo ping-pong), then real steps of data, filter, channel and
  spatial parallelism (:mod:`repro.training.model_parallel`) on 2 gloo ranks, against the oracle's
  prediction with the calibrated constants (:mod:`repro.training.oracle`);
- modelled: the oracle with the paper's ABCI constants on AlexNet, VGG16, ResNet-50 and a
  CosmoFlow-like 3-D network, up to 1024 GPUs; the network bandwidth, the constant that decides the
  verdicts, is swept.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm import tqdm
from transformers import ResNetConfig, ResNetForImageClassification

from repro.training.calibrate import MeasureJob, RankMeasurement, fit_alpha_beta, measure_rank
from repro.training.cost import Network
from repro.training.launcher import launch
from repro.training.layertable import LayerRow, layer_table
from repro.training.model_parallel import STRATEGIES as MEASURED_STRATEGIES
from repro.training.model_parallel import StrategyJob, serial_batch
from repro.training.oracle import STRATEGIES, PlatformConstants, Prediction, largest_micro_batch, predict
from repro.training.overlap import vgg_mini

IMAGENET_SAMPLES = 1_281_167
COSMO_SAMPLES = 262_144
"""Samples per epoch of the projections: ImageNet-1k's training set; the CosmoFlow-like set's size is assumed."""

# ----------------------------------------------------------------------------------------------- measured


@dataclass(frozen=True, kw_only=True)
class SeedMeasurement:
    """One seed: the calibrated platform, measured step times (slowest rank) and the oracle's predictions.

    ``gradient_error`` is the largest difference between any strategy's gradients (any rank) and one
    process's gradients of the same samples.
    """

    seed: int
    ranks: int
    micro_batch: int
    platform: PlatformConstants
    measured_s: dict[str, float]
    predicted: dict[str, Prediction]
    gradient_error: float

    def accuracy(self, strategy: str) -> float:
        """The paper's oracle accuracy, ``100 (1 - |predicted - measured| / measured)``, percent."""
        m = self.measured_s[strategy]
        return 100.0 * (1.0 - abs(self.predicted[strategy].total_s - m) / m)


def measured_model(width_divisor: int, image: int, seed: int) -> nn.Sequential:
    """The measured CNN: VGG-A's layer pattern with widths divided by ``width_divisor`` (seeded)."""
    torch.manual_seed(seed)
    return vgg_mini(10, width_divisor, image)


def step_prediction(table: list[LayerRow], strategy: str, ranks: int, micro_batch: int,
                    plat: PlatformConstants) -> Prediction:
    """The oracle's time of one step: ``ranks * b`` samples for data parallelism, ``b`` for the others."""
    samples = micro_batch * ranks if strategy == "data" else micro_batch
    return predict(table, strategy, ranks, micro_batch, samples, plat)


def measure_seed(seed: int, ranks: int, micro_batch: int, image: int, width_divisor: int, steps: int, warmup: int,
                 pingpong_repeats: int, timeout_s: float = 300.0) -> SeedMeasurement:
    """Launch the ranks once for a seed; fit alpha and beta, and predict every strategy with the calibration."""
    model = measured_model(width_divisor, image, seed)
    sizes = (64, 4096, 65536, 262144, 1 << 20, 4 << 20)
    job = MeasureJob(
        strategies=StrategyJob(
            model=model,
            image=image,
            micro_batch=micro_batch,
            strategies=MEASURED_STRATEGIES,
            steps=steps,
            warmup=warmup,
            seed=seed,
        ),
        pingpong_sizes=sizes,
        pingpong_repeats=pingpong_repeats,
        flop_repeats=max(3, steps),
    )
    per_rank = launch(measure_rank, ranks, (job,), timeout_s=timeout_s)
    net = fit_alpha_beta(per_rank[0].pingpong)
    plat = PlatformConstants(memory_bytes=1e12, flops_per_s=float(np.mean([r.flops_per_s for r in per_rank])), net=net)
    measured = {s: max(t.seconds for r in per_rank for t in r.timings if t.strategy == s) for s in MEASURED_STRATEGIES}
    table = layer_table(model, torch.zeros(1, 3, image, image))
    predicted = {s: step_prediction(table, s, ranks, micro_batch, plat) for s in MEASURED_STRATEGIES}
    return SeedMeasurement(
        seed=seed,
        ranks=ranks,
        micro_batch=micro_batch,
        platform=plat,
        measured_s=measured,
        predicted=predicted,
        gradient_error=gradient_error(model, job.strategies, per_rank),
    )


def gradient_error(model: nn.Sequential, job: StrategyJob, per_rank: list[RankMeasurement]) -> float:
    """Largest gradient difference between every strategy on every rank and one process on the same samples."""
    worst = 0.0
    for s in job.strategies:
        x, y = serial_batch(job, s, len(per_rank))
        model.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        for r in per_rank:
            worst = max(worst, max(float(np.abs(p.grad.numpy() - g).max()) for p, g in zip(model.parameters(), r.gradients[s])))
    return worst


def measure(
    seeds: list[int], ranks: int, micro_batch: int, image: int, width_divisor: int, steps: int, warmup: int, pingpong_repeats: int
) -> list[SeedMeasurement]:
    """:func:`measure_seed` for every seed, one after the other (timings must not compete)."""
    return [
        measure_seed(s, ranks, micro_batch, image, width_divisor, steps, warmup, pingpong_repeats)
        for s in tqdm(seeds, desc="gloo runs")
    ]


def measured_table(results: list[SeedMeasurement]) -> pd.DataFrame:
    """Per strategy: measured and predicted step (compute, communication) and the oracle's accuracy, mean over seeds."""
    rows = [
        {
            "strategy": s,
            "measured ms": 1e3 * r.measured_s[s],
            "predicted ms": 1e3 * r.predicted[s].total_s,
            "compute ms": 1e3 * r.predicted[s].compute_s,
            "communication ms": 1e3 * r.predicted[s].communication_s,
            "accuracy %": r.accuracy(s),
        }
        for r in results
        for s in MEASURED_STRATEGIES
    ]
    return pd.DataFrame(rows).groupby("strategy", sort=False).mean()


def calibration_table(results: list[SeedMeasurement]) -> pd.DataFrame:
    """The calibrated constants of every seed beside ABCI's."""
    rows = [
        {
            "platform": f"this machine, seed {r.seed}",
            "GFLOP/s": r.platform.flops_per_s / 1e9,
            "alpha us": 1e6 * r.platform.net.alpha,
            "bandwidth GB/s": 1 / r.platform.net.beta / 1e9 if r.platform.net.beta else float("inf"),
        }
        for r in results
    ]
    abci = PlatformConstants.abci()
    rows.append(
        {
            "platform": "ABCI (paper)",
            "GFLOP/s": abci.flops_per_s / 1e9,
            "alpha us": 1e6 * abci.net.alpha,
            "bandwidth GB/s": 1 / abci.net.beta / 1e9,
        }
    )
    return pd.DataFrame(rows)


def accuracy_figure(results: list[SeedMeasurement]) -> plt.Figure:
    """Measured step time against the oracle's (compute and communication stacked), per strategy."""
    table = measured_table(results)
    x = np.arange(len(table))
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.bar(x - 0.2, table["measured ms"], 0.4, color="C0", label="measured (gloo, slowest rank)")
    ax.bar(x + 0.2, table["compute ms"], 0.4, color="C1", label="oracle: compute")
    ax.bar(x + 0.2, table["communication ms"], 0.4, bottom=table["compute ms"], color="C2", label="oracle: communication")
    for xi, acc, top in zip(x, table["accuracy %"], np.maximum(table["measured ms"], table["predicted ms"])):
        ax.annotate(f"{acc:.0f}%", (xi, top), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, table.index)
    ax.set_ylabel(f"one step, ms ({results[0].ranks} ranks)")
    ax.set_title("oracle accuracy (annotated) with this machine's calibrated constants")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------- modelled


def _plain_cnn(cfg: list, in_channels: int, pool: Callable[[], nn.Module], head: list[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    c = in_channels
    for v in cfg:
        if v == "M":
            layers.append(pool())
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU()]
            c = v
    return nn.Sequential(*layers, *head)


def alexnet() -> nn.Sequential:
    """AlexNet as in the one-GPU variant torch's model zoo uses (ImageNet, 224 x 224)."""
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, 4, 2),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.AdaptiveAvgPool2d(6),
        nn.Flatten(),
        nn.Linear(9216, 4096),
        nn.ReLU(),
        nn.Linear(4096, 4096),
        nn.ReLU(),
        nn.Linear(4096, 1000),
    )


def vgg16() -> nn.Sequential:
    """VGG16 (configuration D) for ImageNet at 224 x 224."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    head = [nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 1000)]
    return _plain_cnn(cfg, 3, lambda: nn.MaxPool2d(2), head)


def resnet50() -> nn.Module:
    """ResNet-50 from ``transformers`` (randomly initialised from its configuration; nothing downloaded)."""
    return ResNetForImageClassification(
        ResNetConfig(
            layer_type="bottleneck", depths=[3, 4, 6, 3], embedding_size=64, hidden_sizes=[256, 512, 1024, 2048], num_labels=1000
        )
    )


def cosmoflow_like(side: int) -> nn.Sequential:
    """A CosmoFlow-like 3-D regressor: five conv3d-ReLU-maxpool blocks (16 to 256 channels), then 128-64-4 dense.

    The block pattern follows CosmoFlow (4 input channels, 4 regressed parameters); the widths are ours.
    """
    layers: list[nn.Module] = []
    c = 4
    for v in (16, 32, 64, 128, 256):
        layers += [nn.Conv3d(c, v, 3, padding=1), nn.ReLU(), nn.MaxPool3d(2)]
        c = v
    s = side // 32
    return nn.Sequential(
        *layers, nn.Flatten(), nn.Linear(c * s**3, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 4)
    )


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A projected model: its layer table and samples per epoch."""

    name: str
    table: list[LayerRow]
    samples: int
    three_d: bool


def workloads(cosmo_side: int) -> list[Workload]:
    """Layer tables of the four projected models, traced on the meta device (no weights, no compute)."""
    specs = [
        ("AlexNet", alexnet, (3, 224, 224), IMAGENET_SAMPLES, False),
        ("VGG16", vgg16, (3, 224, 224), IMAGENET_SAMPLES, False),
        ("ResNet-50", resnet50, (3, 224, 224), IMAGENET_SAMPLES, False),
        (f"CosmoFlow-like {cosmo_side}^3", lambda: cosmoflow_like(cosmo_side), (4,) + (cosmo_side,) * 3, COSMO_SAMPLES, True),
    ]
    out = []
    for name, build, shape, n, three_d in specs:
        with torch.device("meta"):
            model, example = build(), torch.zeros(1, *shape)
        out.append(Workload(name=name, table=layer_table(model, example), samples=n, three_d=three_d))
    return out


@dataclass(frozen=True, kw_only=True)
class Projection:
    """One strategy on one model at ``p`` processes, at its largest fitting micro-batch (0: nothing fits)."""

    model: str
    strategy: str
    processes: int
    micro_batch: int
    prediction: Prediction | None

    @property
    def epoch_s(self) -> float:
        """Modelled epoch time, ``inf`` when not even one sample fits."""
        return self.prediction.total_s if self.prediction is not None else float("inf")


@dataclass(frozen=True, kw_only=True)
class ProjectionSetup:
    """How the projections are made: hybrid group size, widest pure model parallelism, micro-batch cap.

    Attributes
    ----------
    node
        Processes per model-parallel group of the hybrids (one node: 4 GPUs on ABCI); data parallelism across.
    max_model_parallel
        Widest pure model parallelism projected (beyond, a few rows or channels would be left per process).
    max_micro_batch
        Cap of the weak-scaling micro-batch (the largest power of two that fits, at most this).
    """

    node: int
    max_model_parallel: int
    max_micro_batch: int


def project(work: Workload, strategy: str, p: int, plat: PlatformConstants, setup: ProjectionSetup) -> Projection:
    """The oracle on one model at its largest fitting micro-batch (hybrids: groups of ``setup.node``)."""
    p_data = max(1, p // setup.node) if "+" in strategy else 1
    b = largest_micro_batch(work.table, strategy, p, plat, cap=setup.max_micro_batch, p_data=p_data)
    if b == 0:
        return Projection(model=work.name, strategy=strategy, processes=p, micro_batch=0, prediction=None)
    return Projection(
        model=work.name,
        strategy=strategy,
        processes=p,
        micro_batch=b,
        prediction=predict(work.table, strategy, p, b, work.samples, plat, p_data=p_data),
    )


def projections(works: list[Workload], ps: list[int], plat: PlatformConstants, setup: ProjectionSetup) -> list[Projection]:
    """Every strategy of :data:`repro.training.oracle.STRATEGIES` on every model at every process count.

    Pure model parallelism (filter, channel, spatial, pipeline) stops at ``setup.max_model_parallel``.
    """
    return [
        project(w, s, p, plat, setup)
        for w in works
        for p in ps
        for s in STRATEGIES
        if s in ("data", "data+filter", "data+spatial") or p <= setup.max_model_parallel
    ]


def with_bandwidth(plat: PlatformConstants, gb_per_s: float) -> PlatformConstants:
    """The platform with another network bandwidth (latency unchanged)."""
    return replace(plat, net=Network(alpha=plat.net.alpha, beta=1 / (gb_per_s * 1e9)))


def with_memory(plat: PlatformConstants, gb: float) -> PlatformConstants:
    """The platform with another memory per process."""
    return replace(plat, memory_bytes=gb * 1e9)


def data_comm_share(works: list[Workload], p: int, plat: PlatformConstants, setup: ProjectionSetup) -> float:
    """Communication share of data parallelism's modelled epoch, percent, mean over the 2-D models."""
    shares = []
    for w in works:
        if not w.three_d:
            pred = project(w, "data", p, plat, setup).prediction
            shares.append(100.0 * pred.communication_s / pred.total_s if pred is not None else float("nan"))
    return float(np.mean(shares))


def hybrid_gain_3d(works: list[Workload], p: int, plat: PlatformConstants, setup: ProjectionSetup) -> float:
    """Data parallelism's modelled epoch over the data+spatial hybrid's, 3-D model.

    ``inf`` when data parallelism cannot hold one sample per process, ``nan`` when the hybrid cannot either.
    """
    w = next(w for w in works if w.three_d)
    hybrid = project(w, "data+spatial", p, plat, setup).epoch_s
    return project(w, "data", p, plat, setup).epoch_s / hybrid if np.isfinite(hybrid) else float("nan")


def bandwidth_sweep(works: list[Workload], p: int, gb_per_s: list[float], setup: ProjectionSetup) -> pd.DataFrame:
    """Both modelled claims at every network bandwidth, other constants ABCI's."""
    rows = []
    for bw in gb_per_s:
        plat = with_bandwidth(PlatformConstants.abci(), bw)
        rows.append(
            {
                "bandwidth GB/s": bw,
                "data comm share %": data_comm_share(works, p, plat, setup),
                "3-D data / hybrid": hybrid_gain_3d(works, p, plat, setup),
            }
        )
    return pd.DataFrame(rows)


def memory_sweep(works: list[Workload], p: int, memory_gb: list[float], setup: ProjectionSetup) -> pd.DataFrame:
    """The 3-D claim and the micro-batches at every memory per process, other constants ABCI's."""
    w = next(w for w in works if w.three_d)
    rows = []
    for gb in memory_gb:
        plat = with_memory(PlatformConstants.abci(), gb)
        rows.append(
            {
                "memory GB": gb,
                "3-D data / hybrid": hybrid_gain_3d(works, p, plat, setup),
                "data micro-batch": project(w, "data", p, plat, setup).micro_batch,
                "hybrid micro-batch": project(w, "data+spatial", p, plat, setup).micro_batch,
            }
        )
    return pd.DataFrame(rows)


def flip_interval(xs: list[float], ys: list[float], level: float) -> tuple[float, float] | None:
    """The first pair of neighbouring sweep points between which ``ys`` crosses ``level`` (``inf`` counts as above)."""
    for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:]):
        if not (np.isnan(y0) or np.isnan(y1)) and (y0 > level) != (y1 > level):
            return float(x0), float(x1)
    return None


def flip_text(interval: tuple[float, float] | None, unit: str) -> str:
    """Words for where a verdict flips: ``between a and b unit``, or ``nowhere in the swept range``."""
    return f"between {interval[0]:g} and {interval[1]:g} {unit}" if interval else "nowhere in the swept range"


def ranking_table(projs: list[Projection], p: int) -> pd.DataFrame:
    """Modelled epoch time (seconds) per model and strategy at ``p`` processes; empty where not projected or nothing fits."""
    rows = [
        {"model": q.model, "strategy": q.strategy, "epoch s": q.epoch_s if q.prediction else np.nan}
        for q in projs
        if q.processes == p
    ]
    df = pd.DataFrame(rows)
    return df.pivot(index="strategy", columns="model", values="epoch s").reindex(STRATEGIES)[
        list(dict.fromkeys(q.model for q in projs))
    ]


def scaling_figure(projs: list[Projection]) -> plt.Figure:
    """Modelled epoch time against processes per strategy, one panel per model (ABCI constants)."""
    models = list(dict.fromkeys(q.model for q in projs))
    fig, axes = plt.subplots(1, len(models), figsize=(3.1 * len(models), 3.6))
    for ax, m in zip(np.atleast_1d(axes), models):
        for i, s in enumerate(STRATEGIES):
            pts = [(q.processes, q.epoch_s) for q in projs if q.model == m and q.strategy == s and q.prediction]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, color=f"C{i}", label=s)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("processes (GPUs)")
    np.atleast_1d(axes)[0].set_ylabel("modelled epoch, s (ABCI constants)")
    np.atleast_1d(axes)[-1].legend(fontsize=6)
    fig.tight_layout()
    return fig


def _sweep_panel(
    ax: plt.Axes, xs: list[float], ys: list[float], level: float, at: float, at_label: str, xlabel: str, title: str
) -> None:
    finite = [y if np.isfinite(y) else np.nan for y in ys]
    ax.plot(xs, finite, marker="o")
    for x, y in zip(xs, ys):
        if y == float("inf"):
            ax.annotate("data does\nnot fit", (x, level), ha="center", va="bottom", fontsize=6, color="C3")
    ax.axhline(level, color="k", lw=0.8)
    ax.axvline(at, color="grey", ls=":", label=at_label)
    flip = flip_interval(xs, ys, level)
    if flip is not None:
        ax.axvspan(*flip, color="C3", alpha=0.15, label=f"verdict flips between {flip[0]:g} and {flip[1]:g}")
    ax.set_xscale("log")
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=6)


def sweep_figure(bandwidth: pd.DataFrame, memory: pd.DataFrame, p: int) -> plt.Figure:
    """The modelled claims against their deciding constants: network bandwidth, and memory per process."""
    abci = PlatformConstants.abci()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    bw = bandwidth["bandwidth GB/s"].tolist()
    _sweep_panel(
        axes[0],
        bw,
        bandwidth["data comm share %"].tolist(),
        50.0,
        1 / abci.net.beta / 1e9,
        "ABCI",
        "network bandwidth, GB/s",
        f"data parallelism: communication share, % ({p} GPUs, 2-D models)",
    )
    _sweep_panel(
        axes[1],
        bw,
        bandwidth["3-D data / hybrid"].tolist(),
        1.0,
        1 / abci.net.beta / 1e9,
        "ABCI",
        "network bandwidth, GB/s",
        f"3-D model: data / data+spatial epoch ({p} GPUs)",
    )
    _sweep_panel(
        axes[2],
        memory["memory GB"].tolist(),
        memory["3-D data / hybrid"].tolist(),
        1.0,
        abci.memory_bytes / 1e9,
        "ABCI",
        "memory per GPU, GB",
        f"3-D model: data / data+spatial epoch ({p} GPUs)",
    )
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------ claims


def claims(results: list[SeedMeasurement], works: list[Workload], p: int, setup: ProjectionSetup) -> dict[str, list[float]]:
    """Per-seed values of the measured and structural claims, and the (seed-free) modelled claims with ABCI constants."""
    abci = PlatformConstants.abci()
    model_parallel = [s for s in MEASURED_STRATEGIES if s != "data"]
    return {
        "accuracy_data": [r.accuracy("data") for r in results],
        "accuracy_mean": [float(np.mean([r.accuracy(s) for s in MEASURED_STRATEGIES])) for r in results],
        "data_most_accurate": [r.accuracy("data") - float(np.mean([r.accuracy(s) for s in model_parallel])) for r in results],
        "strategies_exact": [r.gradient_error for r in results],
        "allreduce_limits_data": [data_comm_share(works, p, abci, setup)],
        "hybrid_wins_3d": [hybrid_gain_3d(works, p, abci, setup)],
    }
