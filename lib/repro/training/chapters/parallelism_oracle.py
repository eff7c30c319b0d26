"""Chapter driver: an analytic oracle for data, model and hybrid parallel training of CNNs (ParaDL).

Two kinds of evidence, kept apart:

- measured: this machine calibrated as a platform (a FLOP rate measured on other models than the one
  predicted, while all ranks run; alpha and beta from a gloo ping-pong), then real steps of data, filter,
  channel and spatial parallelism (:mod:`repro.training.model_parallel`) on gloo ranks, data parallelism at
  several micro-batches, against the oracle's prediction with the calibrated constants
  (:mod:`repro.training.oracle`), scored by the paper's accuracy (the ratio of predicted to measured time);
- modelled: the oracle with the paper's ABCI constants on AlexNet, VGG16, ResNet-50 and a
  CosmoFlow-like 3-D network, up to 1024 GPUs, judged once at the named configuration; the network
  bandwidth and the memory per GPU, the constants that decide the verdicts, are swept in a figure.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy import stats
from torch import nn
from tqdm import tqdm
from transformers import ResNetConfig, ResNetForImageClassification

from repro.params import ChapterParams, require
from repro.registry import Claim, load_registry
from repro.results import Evidence
from repro.training.calibrate import MeasureJob, RankMeasurement, fit_alpha_beta, measure_rank, tiny_cnn
from repro.training.cost import Network
from repro.training.launcher import launch
from repro.training.layertable import LayerRow, layer_table
from repro.training.model_parallel import STRATEGIES as MEASURED_STRATEGIES
from repro.training.model_parallel import StrategyJob, serial_batch
from repro.training.oracle import STRATEGIES, PlatformConstants, Prediction, largest_micro_batch, oracle_accuracy, predict
from repro.training.overlap import vgg_mini

CHAPTER_ID = "parallelism-oracle"
IMAGENET_SAMPLES = 1_281_167
COSMO_SAMPLES = 262_144
"""Samples per epoch of the projections: ImageNet-1k's training set; the CosmoFlow-like set's size is assumed."""
PINGPONG_SIZES = (64, 4096, 65536, 262144, 1 << 20, 4 << 20)
"""Message sizes (bytes) of the alpha-beta calibration."""


def claim(claim_id: str) -> Claim:
    """The chapter's claim in the registry (its null value is the level the sweeps and figures draw)."""
    return load_registry().get(CHAPTER_ID).claim(claim_id)


# ----------------------------------------------------------------------------------------------- params


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    ranks: int
    micro_batch: int
    data_micro_batches: tuple[int, ...]
    image: int
    width_divisor: int
    steps: int
    warmup: int
    pingpong_repeats: int
    max_processes: int
    claim_processes: int
    node_gpus: int
    max_model_parallel: int
    max_micro_batch: int
    cosmo_side: int
    bandwidths_gb: tuple[float, ...]
    memories_gb: tuple[float, ...]
    seeds: tuple[int, ...]

    def checks(self) -> None:
        """Refuse combinations the measured strategies or the projections cannot take, naming the parameters."""
        require(self.image % (32 * self.ranks) == 0, self, ("image", "ranks"),
                "image must be a multiple of 32 x ranks (five 2x2 poolings of each rank's rows)")
        require(self.width_divisor <= 32 and 32 % self.width_divisor == 0, self, "width_divisor",
                "width_divisor must divide 32 (the FLOP rate is calibrated on the CNN at twice the divisor)")
        require((64 // self.width_divisor) % self.ranks == 0, self, ("width_divisor", "ranks"),
                "filter parallelism splits the narrowest layer's 64 / width_divisor channels evenly over the ranks")
        require(self.micro_batch not in self.data_micro_batches, self, ("micro_batch", "data_micro_batches"),
                "data_micro_batches lists data parallelism's further micro-batches (micro_batch is always timed)")
        for name in ("max_processes", "claim_processes"):
            value = getattr(self, name)
            require(value & (value - 1) == 0, self, name, f"{name} must be a power of two")
        require(self.claim_processes <= self.max_processes, self, ("claim_processes", "max_processes"),
                "claim_processes must not exceed max_processes")
        require(self.claim_processes % self.node_gpus == 0, self, ("claim_processes", "node_gpus"),
                "node_gpus must divide claim_processes")
        require(self.cosmo_side % 32 == 0, self, "cosmo_side", "cosmo_side must be a multiple of 32 (five 2x2x2 poolings)")
        if self.cosmo_side % 32 == 0:
            fits = hybrid_fits_3d(self.cosmo_side, self.claim_processes, self.projection_setup())
            require(fits, self, ("cosmo_side", "claim_processes", "node_gpus"),
                    "the data+spatial hybrid cannot hold one volume per group at ABCI's memory, so the 3-D claim "
                    "compares nothing; choose a smaller cosmo_side")

    def projection_setup(self) -> ProjectionSetup:
        """How the projections are made (hybrid group, widest pure model parallelism, micro-batch cap)."""
        return ProjectionSetup(node=self.node_gpus, max_model_parallel=self.max_model_parallel,
                               max_micro_batch=self.max_micro_batch)

    @property
    def process_counts(self) -> list[int]:
        """1, 2, 4, ... up to ``max_processes``: the projections' process counts."""
        return [2**i for i in range(self.max_processes.bit_length())]


# ----------------------------------------------------------------------------------------------- measured


@dataclass(frozen=True, kw_only=True)
class Step:
    """One measured configuration: a strategy at a micro-batch, its time (slowest rank) and the predictions.

    ``compute_only_s`` is the trivial predictor: the oracle's compute term alone, without communication.
    """

    strategy: str
    micro_batch: int
    measured_s: float
    predicted: Prediction
    compute_only_s: float

    @property
    def accuracy(self) -> float:
        """The oracle's accuracy on this step (:func:`repro.training.oracle.oracle_accuracy`), percent."""
        return oracle_accuracy(self.predicted.total_s, self.measured_s)

    @property
    def trivial_accuracy(self) -> float:
        """The compute-only prediction's accuracy, percent."""
        return oracle_accuracy(self.compute_only_s, self.measured_s)


@dataclass(frozen=True, kw_only=True)
class SeedMeasurement:
    """One seed: the calibrated platform, every measured step, and the strategies' gradient check.

    ``gradient_error`` is the largest difference between any strategy's gradients (any rank) and one
    process's gradients of the same samples.
    """

    seed: int
    ranks: int
    micro_batch: int
    platform: PlatformConstants
    steps: tuple[Step, ...]
    gradient_error: float

    def step(self, strategy: str, micro_batch: int | None = None) -> Step:
        """The measured step of ``strategy`` at ``micro_batch`` (default: the shared micro-batch)."""
        b = self.micro_batch if micro_batch is None else micro_batch
        return next(s for s in self.steps if s.strategy == strategy and s.micro_batch == b)

    def accuracy(self, strategy: str) -> float:
        """The oracle's accuracy for ``strategy`` at the shared micro-batch, percent."""
        return self.step(strategy).accuracy

    def best_data(self) -> Step:
        """Data parallelism's most accurately predicted configuration (the paper's 'as high as')."""
        return max((s for s in self.steps if s.strategy == "data"), key=lambda s: s.accuracy)

    def mean_accuracy(self, trivial: bool = False) -> float:
        """Mean accuracy over the four strategies at the shared micro-batch (of the compute-only prediction if ``trivial``)."""
        return float(np.mean([self.step(s).trivial_accuracy if trivial else self.accuracy(s) for s in MEASURED_STRATEGIES]))

    def ranking(self) -> float:
        """Kendall's tau between the predicted and the measured order of the four strategies' steps."""
        steps = [self.step(s) for s in MEASURED_STRATEGIES]
        tau = stats.kendalltau([s.predicted.total_s for s in steps], [s.measured_s for s in steps]).statistic
        return float(tau)


def measured_model(width_divisor: int, image: int, seed: int) -> nn.Sequential:
    """The measured CNN: VGG-A's layer pattern with widths divided by ``width_divisor`` (seeded)."""
    torch.manual_seed(seed)
    return vgg_mini(10, width_divisor, image)


def calibration_models(params: Params, seed: int) -> tuple[tuple[nn.Module, torch.Tensor], ...]:
    """The held-out models the FLOP rate is measured on: a two-convolution CNN and the CNN at half the widths.

    Neither is the measured model, so the rate is a constant of the platform that the oracle then applies
    to another model, as the paper's oracle applies the rate of its platform file.
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    batch = torch.randn(params.micro_batch, 3, params.image, params.image, generator=gen)
    return ((tiny_cnn(), batch), (vgg_mini(10, 2 * params.width_divisor, params.image), batch))


def step_prediction(table: list[LayerRow], strategy: str, ranks: int, micro_batch: int,
                    plat: PlatformConstants) -> Prediction:
    """The oracle's time of one step: ``ranks * b`` samples for data parallelism, ``b`` for the others."""
    samples = micro_batch * ranks if strategy == "data" else micro_batch
    return predict(table, strategy, ranks, micro_batch, samples, plat)


def measure_job(params: Params, seed: int) -> MeasureJob:
    """What the ranks of one seed run: the four strategies at ``micro_batch``, data at the further micro-batches."""
    model = measured_model(params.width_divisor, params.image, seed)

    def job(strategies: tuple[str, ...], micro_batch: int) -> StrategyJob:
        return StrategyJob(model=model, image=params.image, micro_batch=micro_batch, strategies=strategies,
                           steps=params.steps, warmup=params.warmup, seed=seed)

    return MeasureJob(strategies=(job(MEASURED_STRATEGIES, params.micro_batch),
                                  *(job(("data",), b) for b in params.data_micro_batches)),
                      calibration=calibration_models(params, seed), pingpong_sizes=PINGPONG_SIZES,
                      pingpong_repeats=params.pingpong_repeats, flop_repeats=max(3, params.steps))


def measure_seed(params: Params, seed: int, timeout_s: float = 300.0) -> SeedMeasurement:
    """Launch the ranks once for a seed; fit alpha and beta, and predict every measured step with the calibration."""
    job = measure_job(params, seed)
    model = job.strategies[0].model
    per_rank = launch(measure_rank, params.ranks, (job,), timeout_s=timeout_s)
    net = fit_alpha_beta(per_rank[0].pingpong)
    plat = PlatformConstants(memory_bytes=1e12, flops_per_s=float(np.mean([r.flops_per_s for r in per_rank])), net=net)
    table = layer_table(model, torch.zeros(1, 3, params.image, params.image))
    steps = []
    for t in per_rank[0].timings:
        pred = step_prediction(table, t.strategy, params.ranks, t.micro_batch, plat)
        slowest = max(u.seconds for r in per_rank for u in r.timings
                      if u.strategy == t.strategy and u.micro_batch == t.micro_batch)
        steps.append(Step(strategy=t.strategy, micro_batch=t.micro_batch, measured_s=slowest, predicted=pred,
                          compute_only_s=pred.compute_s))
    return SeedMeasurement(seed=seed, ranks=params.ranks, micro_batch=params.micro_batch, platform=plat,
                           steps=tuple(steps), gradient_error=gradient_error(model, job.strategies[0], per_rank))


def gradient_error(model: nn.Sequential, job: StrategyJob, per_rank: list[RankMeasurement]) -> float:
    """Largest gradient difference between every strategy on every rank and one process on the same samples."""
    worst = 0.0
    for s in job.strategies:
        x, y = serial_batch(job, s, len(per_rank))
        model.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        for r in per_rank:
            worst = max(worst, max(float(np.abs(p.grad.numpy() - g).max()) for p, g in zip(model.parameters(), r.gradients[s])
                                   if p.grad is not None))
    return worst


def measure(params: Params) -> list[SeedMeasurement]:
    """:func:`measure_seed` for every seed, one after the other (timings must not compete)."""
    return [measure_seed(params, s) for s in tqdm(params.seeds, desc="gloo runs")]


def measured_table(results: list[SeedMeasurement]) -> pd.DataFrame:
    """Per strategy and micro-batch: measured and predicted step, its split, and both predictors' accuracy (mean over seeds)."""
    rows = [
        {
            "strategy": s.strategy,
            "micro-batch": s.micro_batch,
            "measured ms": 1e3 * s.measured_s,
            "predicted ms": 1e3 * s.predicted.total_s,
            "compute ms": 1e3 * s.predicted.compute_s,
            "communication ms": 1e3 * s.predicted.communication_s,
            "oracle accuracy %": s.accuracy,
            "compute-only accuracy %": s.trivial_accuracy,
        }
        for r in results
        for s in r.steps
    ]
    return pd.DataFrame(rows).groupby(["strategy", "micro-batch"], sort=False).mean()


def calibration_table(results: list[SeedMeasurement]) -> pd.DataFrame:
    """The calibrated constants of every seed beside ABCI's, and the rank agreement of the four strategies."""
    rows = [
        {
            "platform": f"this machine, seed {r.seed}",
            "GFLOP/s": r.platform.flops_per_s / 1e9,
            "alpha us": 1e6 * r.platform.net.alpha,
            "bandwidth GB/s": 1 / r.platform.net.beta / 1e9 if r.platform.net.beta else float("inf"),
            "Kendall tau (predicted vs measured order)": r.ranking(),
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
            "Kendall tau (predicted vs measured order)": float("nan"),
        }
    )
    return pd.DataFrame(rows)


def accuracy_figure(results: list[SeedMeasurement]) -> plt.Figure:
    """Measured step time against the oracle's (compute and communication stacked), per configuration."""
    table = measured_table(results)
    x = np.arange(len(table))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.bar(x - 0.2, table["measured ms"], 0.4, color="C0", label="measured (gloo, slowest rank)")
    ax.bar(x + 0.2, table["compute ms"], 0.4, color="C1", label="oracle: compute")
    ax.bar(x + 0.2, table["communication ms"], 0.4, bottom=table["compute ms"], color="C2", label="oracle: communication")
    for xi, acc, top in zip(x, table["oracle accuracy %"], np.maximum(table["measured ms"], table["predicted ms"])):
        ax.annotate(f"{acc:.0f}%", (xi, top), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [f"{s}\nb={b}" for s, b in table.index])
    ax.set_ylabel(f"one step, ms ({results[0].ranks} ranks)")
    ax.set_title("oracle accuracy (annotated) with this machine's calibrated constants")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------- modelled


def _plain_cnn(cfg: list[int | str], in_channels: int, pool: Callable[[], nn.Module],
               head: list[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    c = in_channels
    for v in cfg:
        if isinstance(v, int):
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU()]
            c = v
        else:  # "M": a pooling
            layers.append(pool())
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
    cfg: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    head = [nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 1000)]
    return _plain_cnn(cfg, 3, lambda: nn.MaxPool2d(2), head)


def resnet50() -> nn.Module:
    """ResNet-50 from ``transformers`` (randomly initialised from its configuration; nothing downloaded)."""
    config = ResNetConfig(layer_type="bottleneck", depths=[3, 4, 6, 3], embedding_size=64,
                          hidden_sizes=[256, 512, 1024, 2048])
    config.num_labels = 1000
    return ResNetForImageClassification(config)


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
    specs: list[tuple[str, Callable[[], nn.Module]]] = [("AlexNet", alexnet), ("VGG16", vgg16), ("ResNet-50", resnet50)]
    out = []
    for name, build in specs:
        with torch.device("meta"):
            model, example = build(), torch.zeros(1, 3, 224, 224)
        out.append(Workload(name=name, table=layer_table(model, example), samples=IMAGENET_SAMPLES, three_d=False))
    return [*out, _cosmo_workload(cosmo_side)]


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


def hybrid_share_3d(works: list[Workload], p: int, plat: PlatformConstants, setup: ProjectionSetup) -> float:
    """The data+spatial hybrid's modelled epoch over data parallelism's, 3-D model (below 1: the hybrid wins).

    0 when data parallelism cannot hold one volume per process (the hybrid wins by fitting at all); ``nan``
    when the hybrid cannot either (:meth:`Params.checks` refuses that configuration before any work).
    """
    w = next(w for w in works if w.three_d)
    hybrid = project(w, "data+spatial", p, plat, setup).epoch_s
    data = project(w, "data", p, plat, setup).epoch_s
    if not math.isfinite(hybrid):
        return float("nan")
    return 0.0 if not math.isfinite(data) else hybrid / data


@functools.lru_cache(maxsize=16)
def _cosmo_workload(side: int) -> Workload:
    with torch.device("meta"):
        model, example = cosmoflow_like(side), torch.zeros(1, 4, side, side, side)
    return Workload(name=f"CosmoFlow-like {side}^3", table=layer_table(model, example), samples=COSMO_SAMPLES, three_d=True)


def hybrid_fits_3d(side: int, p: int, setup: ProjectionSetup) -> bool:
    """Whether the data+spatial hybrid holds one ``side``^3 volume per group at ``p`` GPUs with ABCI's memory."""
    return project(_cosmo_workload(side), "data+spatial", p, PlatformConstants.abci(), setup).micro_batch >= 1


def bandwidth_sweep(works: list[Workload], p: int, gb_per_s: tuple[float, ...], setup: ProjectionSetup) -> pd.DataFrame:
    """Both modelled claims at every network bandwidth, other constants ABCI's."""
    rows = []
    for bw in gb_per_s:
        plat = with_bandwidth(PlatformConstants.abci(), bw)
        rows.append(
            {
                "bandwidth GB/s": bw,
                "data comm share %": data_comm_share(works, p, plat, setup),
                "3-D hybrid / data": hybrid_share_3d(works, p, plat, setup),
            }
        )
    return pd.DataFrame(rows)


def memory_sweep(works: list[Workload], p: int, memory_gb: tuple[float, ...], setup: ProjectionSetup) -> pd.DataFrame:
    """The 3-D claim and the micro-batches at every memory per process, other constants ABCI's."""
    w = next(w for w in works if w.three_d)
    rows = []
    for gb in memory_gb:
        plat = with_memory(PlatformConstants.abci(), gb)
        rows.append(
            {
                "memory GB": gb,
                "3-D hybrid / data": hybrid_share_3d(works, p, plat, setup),
                "data micro-batch": project(w, "data", p, plat, setup).micro_batch,
                "hybrid micro-batch": project(w, "data+spatial", p, plat, setup).micro_batch,
            }
        )
    return pd.DataFrame(rows)


def flip_interval(xs: list[float], ys: list[float], level: float) -> tuple[float, float] | None:
    """The first pair of neighbouring sweep points between which ``ys`` crosses ``level`` (``nan`` points are skipped)."""
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


@dataclass(frozen=True, kw_only=True)
class Panel:
    """One sweep panel: the swept values, the claim's metric at each, the claim's null value and the setting marked."""

    xs: list[float]
    ys: list[float]
    level: float
    at: float
    xlabel: str
    title: str


def _sweep_panel(ax: plt.Axes, panel: Panel) -> None:
    ys = [y if np.isfinite(y) else np.nan for y in panel.ys]
    ax.plot(panel.xs, ys, marker="o")
    ax.axhline(panel.level, color="k", lw=0.8, label=f"the claim's null value, {panel.level:g}")
    ax.axvline(panel.at, color="grey", ls=":", label="ABCI")
    flip = flip_interval(panel.xs, panel.ys, panel.level)
    if flip is not None:
        ax.axvspan(*flip, color="C3", alpha=0.15, label=f"verdict flips between {flip[0]:g} and {flip[1]:g}")
    ax.set_xscale("log")
    ax.set_xticks(panel.xs, [f"{x:g}" for x in panel.xs])
    ax.minorticks_off()
    ax.set_xlabel(panel.xlabel)
    ax.set_title(panel.title, fontsize=8)
    ax.legend(fontsize=6)


def sweep_figure(results: Results) -> plt.Figure:
    """The modelled claims against their deciding constants (network bandwidth, memory per GPU), at their null values."""
    abci, p = PlatformConstants.abci(), results.params.claim_processes
    bandwidth, memory = results.by_bandwidth, results.by_memory
    share, gain = claim("allreduce_limits_data").null_value, claim("hybrid_wins_3d").null_value
    bw = bandwidth["bandwidth GB/s"].tolist()
    abci_bw, abci_mem = 1 / abci.net.beta / 1e9, abci.memory_bytes / 1e9
    panels = [
        Panel(xs=bw, ys=bandwidth["data comm share %"].tolist(), level=share, at=abci_bw, xlabel="network bandwidth, GB/s",
              title=f"data parallelism: communication share, % ({p} GPUs, 2-D models)"),
        Panel(xs=bw, ys=bandwidth["3-D hybrid / data"].tolist(), level=gain, at=abci_bw, xlabel="network bandwidth, GB/s",
              title=f"3-D model: data+spatial / data epoch ({p} GPUs; 0: data does not fit)"),
        Panel(xs=memory["memory GB"].tolist(), ys=memory["3-D hybrid / data"].tolist(), level=gain, at=abci_mem,
              xlabel="memory per GPU, GB", title=f"3-D model: data+spatial / data epoch ({p} GPUs; 0: data does not fit)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    for ax, panel in zip(axes, panels):
        _sweep_panel(ax, panel)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------- results


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params
        The parameters of the run.
    measured
        One :class:`SeedMeasurement` per seed.
    works
        The projected models' layer tables.
    projections
        Every strategy on every projected model at every process count, ABCI constants.
    by_bandwidth, by_memory
        The modelled claims across the network bandwidth and the memory per GPU (other constants ABCI's).
    """

    params: Params
    measured: list[SeedMeasurement]
    works: list[Workload]
    projections: list[Projection]
    by_bandwidth: pd.DataFrame
    by_memory: pd.DataFrame


def run(params: Params) -> Results:
    """The gloo runs (one launch per seed), then the projections and the two sweeps."""
    setup = params.projection_setup()
    works = workloads(params.cosmo_side)
    return Results(
        params=params,
        measured=measure(params),
        works=works,
        projections=projections(works, params.process_counts, PlatformConstants.abci(), setup),
        by_bandwidth=bandwidth_sweep(works, params.claim_processes, params.bandwidths_gb, setup),
        by_memory=memory_sweep(works, params.claim_processes, params.memories_gb, setup),
    )


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The measured and structural claims per seed, and the modelled claims once.

    The accuracies carry the compute-only predictor's accuracy as their trivial level; the modelled claims use
    ABCI's constants at ``claim_processes`` GPUs.
    """
    p, setup, abci = results.params, results.params.projection_setup(), PlatformConstants.abci()
    m = results.measured
    best = [r.best_data() for r in m]
    data = [s.accuracy for s in best]
    mean = [r.mean_accuracy() for r in m]
    trivial_mean = float(np.mean([r.mean_accuracy(trivial=True) for r in m]))
    return {
        "accuracy_data": Evidence(values=data, arms={"oracle, data parallelism": data},
                                  trivial=float(np.mean([s.trivial_accuracy for s in best]))),
        "accuracy_mean": Evidence(values=mean, arms={"oracle, four strategies": mean}, trivial=trivial_mean),
        "data_most_accurate": Evidence(values=[d - a for d, a in zip(data, mean)],
                                       arms={"oracle, data parallelism": data, "oracle, four strategies": mean},
                                       trivial=trivial_mean),
        "strategies_exact": [r.gradient_error for r in m],
        "allreduce_limits_data": [data_comm_share(results.works, p.claim_processes, abci, setup)],
        "hybrid_wins_3d": [hybrid_share_3d(results.works, p.claim_processes, abci, setup)],
    }
