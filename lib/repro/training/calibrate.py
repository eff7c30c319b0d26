"""Platform constants of this machine for the parallelism oracle: FLOP rate, and alpha and beta over gloo.

:func:`flop_rate` times forward plus backward of a model on one thread and divides the layer table's
FLOPs (backward = 2 x forward) by it.  :func:`pingpong_rank` runs on 2 ranks of
:func:`repro.training.launcher.launch`: rank 0 sends a message to rank 1, which sends it back; half the
median round trip per message size is fitted by least squares to ``alpha + n * beta``
(:func:`fit_alpha_beta`).  :func:`data_parallel_rank` times real data-parallel steps (forward, backward,
one allreduce of the flattened gradients, SGD step) to check the oracle against, and :func:`measure_rank`
calibrates and times the data, filter, channel and spatial strategies of :mod:`repro.training.model_parallel`
in one launch, so that calibration and timing see the same load.  The FLOP rate is the platform's constant:
it is calibrated on other models than the one whose steps are predicted (:func:`held_out_rate`), as the
paper's oracle takes its rate from the platform file, not from the model it predicts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from repro.training.cost import Network
from repro.training.launcher import RankContext
from repro.training.layertable import layer_table
from repro.training.model_parallel import StrategyJob, StrategyTiming, allreduce_flat, gradients_rank, timing_rank


def flop_rate(model: nn.Module, batch: torch.Tensor, repeats: int = 5) -> float:
    """Measured FLOP/s of forward plus backward of ``model`` on ``batch`` (median of ``repeats``)."""
    flops = 3.0 * sum(r.flops for r in layer_table(model, batch[:1])) * len(batch)
    times = []
    for i in range(repeats + 1):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        model(batch).sum().backward()
        if i:
            times.append(time.perf_counter() - t0)
    return flops / float(np.median(times))


@dataclass(frozen=True, kw_only=True)
class PingPong:
    """Half the median round-trip time for each message size in bytes."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]


def pingpong_rank(ctx: RankContext, sizes: Sequence[int], repeats: int) -> PingPong:
    """Ping-pong between ranks 0 and 1 (launch with world size 2)."""
    out = []
    for n in sizes:
        buf = torch.zeros(max(1, n // 4), dtype=torch.float32)
        times = []
        for i in range(repeats + 1):
            dist.barrier()
            t0 = time.perf_counter()
            if ctx.rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)
            if i:
                times.append((time.perf_counter() - t0) / 2)
        out.append(float(np.median(times)))
    return PingPong(sizes=tuple(int(max(1, n // 4) * 4) for n in sizes), seconds=tuple(out))


def fit_alpha_beta(pp: PingPong) -> Network:
    """Least-squares ``alpha + n beta`` through the ping-pong points (both clipped at 0)."""
    beta, alpha = np.polyfit(np.asarray(pp.sizes, float), np.asarray(pp.seconds, float), 1)
    return Network(alpha=max(float(alpha), 0.0), beta=max(float(beta), 0.0))


@dataclass(frozen=True, kw_only=True)
class DataParallelJob:
    """A tiny CNN trained data-parallel: micro-batch per rank, image size, timed and warm-up steps."""

    micro_batch: int
    image: int
    steps: int
    warmup: int
    seed: int = 0


def tiny_cnn() -> nn.Sequential:
    """Conv(3->16)-ReLU-Conv(16->32)-ReLU-pool-Linear(32->10), for 3-channel images."""
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def data_parallel_rank(ctx: RankContext, job: DataParallelJob) -> float:
    """Median seconds of one data-parallel step on this rank (one thread per rank)."""
    torch.set_num_threads(1)
    torch.manual_seed(job.seed)
    model = tiny_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(job.seed + ctx.rank)
    times = []
    for i in range(job.warmup + job.steps):
        x = torch.randn(job.micro_batch, 3, job.image, job.image, generator=gen)
        y = torch.randint(0, 10, (job.micro_batch,), generator=gen)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        allreduce_flat([p.grad for p in model.parameters() if p.grad is not None], average=True)
        opt.step()
        if i >= job.warmup:
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


@dataclass(frozen=True, kw_only=True)
class MeasureJob:
    """What every rank of one measured seed runs: ping-pong, FLOP-rate calibration, then the strategies.

    Attributes
    ----------
    strategies
        The timed steps: the first job's strategies at its micro-batch (its gradients are also returned, for
        the exactness check), then any further jobs (e.g. data parallelism at other micro-batches).
    calibration
        The models whose forward plus backward calibrates the FLOP rate, each with its example batch; none
        of them is a timed model, so the rate is the platform's constant, not a fit to the model it predicts.
    pingpong_sizes, pingpong_repeats
        Message sizes (bytes) and round trips per size of the alpha-beta calibration.
    flop_repeats
        Timed forward-plus-backward passes per calibration model (median).
    """

    strategies: tuple[StrategyJob, ...]
    calibration: tuple[tuple[nn.Module, torch.Tensor], ...]
    pingpong_sizes: tuple[int, ...]
    pingpong_repeats: int
    flop_repeats: int


@dataclass(frozen=True, kw_only=True)
class RankMeasurement:
    """One rank's half-round-trip times, its FLOP rate, its median step times and one step's gradients per strategy."""

    pingpong: PingPong
    flops_per_s: float
    timings: tuple[StrategyTiming, ...]
    gradients: dict[str, list[np.ndarray]]


def held_out_rate(models: Sequence[tuple[nn.Module, torch.Tensor]], repeats: int) -> float:
    """One FLOP rate pooled over several models: their forward-plus-backward FLOPs over their median times, summed.

    Parameters
    ----------
    models
        ``(model, batch)`` pairs, none of them the model to be predicted.
    repeats
        Timed passes per model (median).
    """
    if not models:
        raise ValueError("the FLOP rate needs at least one calibration model")
    flops = seconds = 0.0
    for model, batch in models:
        work = 3.0 * sum(r.flops for r in layer_table(model, batch[:1])) * len(batch)
        rate = flop_rate(model, batch, repeats)
        flops, seconds = flops + work, seconds + work / rate
    return flops / seconds


def measure_rank(ctx: RankContext, job: MeasureJob) -> RankMeasurement:
    """Calibrate the platform on held-out models and time every strategy on this rank (both ranks run, so both contend).

    Then one step's full gradients per strategy of the first job, for the check that the strategies compute one
    process's step.
    """
    torch.set_num_threads(1)
    pp = pingpong_rank(ctx, job.pingpong_sizes, job.pingpong_repeats)
    rate = held_out_rate(job.calibration, job.flop_repeats)
    timings = tuple(t for sj in job.strategies for t in timing_rank(ctx, sj))
    return RankMeasurement(pingpong=pp, flops_per_s=rate, timings=timings, gradients=gradients_rank(ctx, job.strategies[0]))
