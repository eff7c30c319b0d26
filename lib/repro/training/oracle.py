"""An analytic time and memory oracle for data, filter, channel, spatial, pipeline and hybrid parallelism.

A re-implementation of the ParaDL oracle's formulas (Kahira et al., HPDC'21; code
``TruongThaoNguyen/paraDL-analysis``, read through the spec's summary) on the per-layer table of
:func:`repro.training.layertable.layer_table`.  Conventions:

- weak scaling: a micro-batch of ``b`` samples per process; data parallelism has global batch
  ``B = b * p``, model-parallel strategies process ``b`` samples on ``p`` processes together
  (``B = b``); iterations per epoch ``I = ceil(N / B)``;
- compute: forward FLOPs per sample from the layer table, backward = 2 x forward, at the platform's
  FLOP rate; model parallelism divides a sample's compute by ``p``;
- collectives are rings (:mod:`repro.training.cost`): allreduce ``2 (p-1)(alpha + m beta / p)``,
  allgather ``(p-1)(alpha + m beta / p)``;
- memory per process: ``2 (b (sum |x| + sum |y|) + |W|) bytes`` (values and gradients), with the split
  parts divided by ``p``.

The strategies' communication follows the spec's summary of ``parallel_analysis.py``; where it is terse
(filter, channel, spatial, pipeline), the choices are stated in each function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from repro.training.cost import Network, ring_allgather_time, ring_allreduce_time
from repro.training.layertable import LayerRow

STRATEGIES = ("data", "filter", "channel", "spatial", "pipeline", "data+filter", "data+spatial")


@dataclass(frozen=True, kw_only=True)
class PlatformConstants:
    """Pluggable platform: memory per process, FLOP rate, network and value width.

    ``abci()`` gives the constants of the paper's ABCI file (V100: 16 GB, 7.8 TFLOP/s, 12.5 GB/s, 500 ns).
    """

    memory_bytes: float
    flops_per_s: float
    net: Network
    bytes_per_value: int = 4

    @staticmethod
    def abci() -> PlatformConstants:
        """The ABCI constants of ``paraDL-analysis/ABCI.plat``."""
        return PlatformConstants(memory_bytes=16e9, flops_per_s=7.8e12, net=Network(alpha=500e-9, beta=1 / 12.5e9))


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """Per-epoch time split and memory per process of one strategy."""

    strategy: str
    processes: int
    compute_s: float
    communication_s: float
    memory_bytes: float
    feasible: bool

    @property
    def total_s(self) -> float:
        """Compute plus communication (no overlap is modelled)."""
        return self.compute_s + self.communication_s


def oracle_accuracy(predicted_s: float, measured_s: float) -> float:
    """The oracle's accuracy on one configuration, percent: ``100 min(T_pred / T_meas, T_meas / T_pred)``.

    The authors' report (``paraDL-analysis``, main_tech_report.pdf, Section VII-C, Table IX) defines accuracy
    as the ratio of the projection to the empirical time, ``T_pred / T_meas``; their oracle under-predicts
    (it leaves out overheads), so the ratio stays below 1.  Ours can over-predict as well, so the ratio is
    folded: a prediction off by a factor ``f`` either way scores ``100 / f``, and for ``T_pred <= T_meas``
    this is the authors' definition exactly.
    """
    if predicted_s <= 0 or measured_s <= 0 or not (math.isfinite(predicted_s) and math.isfinite(measured_s)):
        raise ValueError(f"times must be positive and finite, got predicted {predicted_s!r}, measured {measured_s!r}")
    return 100.0 * min(predicted_s / measured_s, measured_s / predicted_s)


def is_convolution(row: LayerRow) -> bool:
    """Whether a row is a 2-D or 3-D convolution (channels-first input, weight of one more dimension)."""
    return len(row.in_shape) >= 3 and len(row.weight_shape) == len(row.in_shape) + 1


def largest_micro_batch(table: Sequence[LayerRow], strategy: str, p: int, plat: PlatformConstants, cap: int = 1024,
                        p_data: int = 1) -> int:
    """The largest power of two (at most ``cap``) whose predicted memory fits, or 0 if not even one sample fits.

    The paper's weak-scaling rule: the micro-batch per process (per group for model parallelism) is the
    largest power of two that fits the platform's memory.
    """
    b, best = 1, 0
    while b <= cap and predict(table, strategy, p, b, b * p, plat, p_data=p_data).feasible:
        best, b = b, 2 * b
    return best


def _active(table: Sequence[LayerRow]) -> list[LayerRow]:
    return [r for r in table if r.flops > 0]


def sample_seconds(table: Sequence[LayerRow], plat: PlatformConstants) -> float:
    """Forward plus backward time of one sample (backward = 2 x forward FLOPs)."""
    return 3.0 * sum(r.flops for r in table) / plat.flops_per_s


def _memory(table: Sequence[LayerRow], b: int, act_div: float, weight_div: float, plat: PlatformConstants) -> float:
    acts = sum(r.in_elements + r.out_elements for r in _active(table))
    weights = sum(r.params for r in table)
    return 2.0 * (b * acts / act_div + weights / weight_div) * plat.bytes_per_value


def predict(table: Sequence[LayerRow], strategy: str, p: int, b: int, n_samples: int, plat: PlatformConstants,
            p_data: int = 1, segments: int = 4) -> Prediction:
    """Epoch time and memory of ``strategy`` on ``p`` processes.

    Parameters
    ----------
    table
        The model's layer table.
    strategy
        One of :data:`STRATEGIES`.
    p
        Processes (for hybrids: ``p_data`` groups of ``p // p_data``).
    b
        Micro-batch (samples per process for data parallelism, per group otherwise).
    n_samples
        Samples per epoch ``N``.
    plat
        Platform constants.
    p_data
        Data-parallel groups of a hybrid strategy.
    segments
        Micro-batch segments of the pipeline.

    Returns
    -------
    Prediction
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {STRATEGIES}")
    if p < 1 or b < 1:
        raise ValueError("p and b must be >= 1")
    nbytes = plat.bytes_per_value
    weights_bytes = sum(r.params for r in table) * nbytes
    f = sample_seconds(table, plat)
    act = _active(table)
    if strategy == "data":
        iters = math.ceil(n_samples / (b * p))
        comm = iters * ring_allreduce_time(weights_bytes, p, plat.net)
        mem = _memory(table, b, 1, 1, plat)
        return Prediction(
            strategy=strategy,
            processes=p,
            compute_s=math.ceil(n_samples / p) * f,
            communication_s=comm,
            memory_bytes=mem,
            feasible=mem <= plat.memory_bytes,
        )
    if strategy in ("data+filter", "data+spatial"):
        if p % p_data:
            raise ValueError(f"p_data {p_data} must divide p {p}")
        inner = predict(table, strategy.split("+")[1], p // p_data, b, math.ceil(n_samples / p_data), plat)
        iters = math.ceil(n_samples / (b * p_data))
        shard = weights_bytes / (p // p_data) if strategy == "data+filter" else weights_bytes
        comm = inner.communication_s + iters * ring_allreduce_time(shard, p_data, plat.net)
        return Prediction(
            strategy=strategy,
            processes=p,
            compute_s=inner.compute_s,
            communication_s=comm,
            memory_bytes=inner.memory_bytes,
            feasible=inner.feasible,
        )
    iters = math.ceil(n_samples / b)
    compute = iters * b * f / p
    if strategy == "filter":
        # output channels split: allgather every layer's output forward, allreduce its input gradient backward
        per = sum(ring_allgather_time(b * r.out_elements * nbytes, p, plat.net) for r in act)
        per += sum(ring_allreduce_time(b * r.in_elements * nbytes, p, plat.net) for r in act[1:])
        mem = _memory(table, b, 1, p, plat)
    elif strategy == "channel":
        # input channels split: allreduce of the partial outputs forward, allgather of input gradients backward
        per = sum(ring_allreduce_time(b * r.out_elements * nbytes, p, plat.net) for r in act)
        per += sum(ring_allgather_time(b * r.in_elements * nbytes, p, plat.net) for r in act[1:])
        mem = _memory(table, b, 1, p, plat)
    elif strategy == "spatial":
        # rows (2-D) or slices (3-D) split: per conv layer one halo of (K-1)/2 rows each way forward (y) and backward (dL/dx),
        # an allgather before the first non-conv layer, and the weight gradients allreduced
        per = 0.0
        if p > 1:
            for r in act:
                if is_convolution(r):
                    # the first spatial axis is split: a halo is (K-1)/2 slices of C x (the other spatial axes)
                    halo = (r.weight_shape[2] - 1) // 2 * r.in_shape[0] * math.prod(r.in_shape[2:]) * b * nbytes
                    per += 2 * 2 * (plat.net.alpha + halo * plat.net.beta)
            flat = next((r for r in act if not is_convolution(r)), None)
            if flat is not None:
                per += ring_allgather_time(b * flat.in_elements * nbytes, p, plat.net)
        per += ring_allreduce_time(weights_bytes, p, plat.net)
        mem = _memory(table, b, p, 1, plat)
    else:  # pipeline: p contiguous stages balanced by FLOPs, GPipe schedule with `segments` micro-batches
        stages = split_stages(act, p)
        seg = b / segments
        stage_s = [seg * 3.0 * sum(r.flops for r in s) / plat.flops_per_s for s in stages]
        compute = iters * (p + segments - 1) * max(stage_s)
        sends = [2 * (plat.net.alpha + seg * s[-1].out_elements * nbytes * plat.net.beta) for s in stages[:-1]]
        per = (p + segments - 1) * (max(sends) if sends else 0.0)
        mem = max(2.0 * (b * sum(r.in_elements + r.out_elements for r in s) + sum(r.params for r in s)) * nbytes for s in stages)
    return Prediction(
        strategy=strategy,
        processes=p,
        compute_s=compute,
        communication_s=iters * per,
        memory_bytes=mem,
        feasible=mem <= plat.memory_bytes,
    )


def split_stages(layers: Sequence[LayerRow], p: int) -> list[list[LayerRow]]:
    """Contiguous split of the layers into at most ``p`` non-empty stages, greedily balancing FLOPs."""
    p = min(p, len(layers))
    target = sum(r.flops for r in layers) / p
    stages: list[list[LayerRow]] = [[]]
    acc = 0.0
    for i, r in enumerate(layers):
        left_layers, left_stages = len(layers) - i, p - len(stages)
        if stages[-1] and (acc + r.flops / 2 > target or left_layers <= left_stages) and left_stages > 0:
            stages.append([])
            acc = 0.0
        stages[-1].append(r)
        acc += r.flops
    return stages
