"""Out-of-core data parallelism: per-layer gradient exchange pipelined with the host-side update (KARMA's multi-node part).

KARMA trains a model that does not fit the accelerator on many nodes by
combining its out-of-core schedule (swap or recompute each block) with data
parallelism, where the gradient exchange is pipelined with back-propagation
and the parameters are updated on the host, which holds the master weights
and the optimiser state, so the device needs room for neither.  On ``k`` gloo
ranks (:func:`repro.training.launcher.launch`):

- the ``pipelined`` mode runs each rank's chain under an out-of-core policy
  (:func:`repro.training.memory.run_chain`: swapped blocks go to a host store,
  recomputed blocks are checkpointed), starts each parameter's allreduce the
  moment back-propagation produces its gradient (the hooks of
  :class:`repro.training.overlap.OverlapEngine`), and, as each reduction
  completes in launch order (output layer first), copies the averaged
  gradient to the host, applies SGD with momentum to the host's master copy
  and copies the new weights back (:class:`HostUpdate`), while the lower
  layers' reductions are still in flight;
- the ``synchronous`` reference keeps every activation, allreduces after
  back-propagation and updates on the device with ``torch.optim.SGD``.

Both compute the same update: :func:`dp_rank` returns each mode's final
parameters (their difference is the chapter's structural check) and its time
per step.  On one shared CPU host the "device" and the "host" are the same
memory, so the copies cost time without saving any; the mechanism, not the
memory saving, is what this reproduces.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from repro.training.launcher import RankContext
from repro.training.memory import HostStore, run_chain
from repro.training.overlap import OverlapEngine, allreduce_after_backward

DP_MODES = ("synchronous", "pipelined")
"""The reference (keep everything, allreduce after back-propagation, device-side update) and KARMA's schedule."""


class HostUpdate:
    """SGD with momentum on a host copy of every parameter (the master weights and the momentum live on the host).

    The update is ``m <- mu m + g``, ``w <- w - lr m`` (``m = g`` on the first step), the arithmetic of
    ``torch.optim.SGD`` without dampening or weight decay, so the two give the same weights.

    Parameters
    ----------
    model
        The device replica; its parameters are overwritten with the host's weights after each update.
    lr, momentum
        SGD's learning rate and momentum.
    """

    def __init__(self, model: nn.Module, lr: float, momentum: float) -> None:
        self.lr, self.momentum = lr, momentum
        self.weights = {id(p): p.detach().to("cpu", copy=True) for p in model.parameters()}
        self.buffers: dict[int, torch.Tensor] = {}

    @torch.no_grad()
    def apply(self, param: torch.Tensor, grad: torch.Tensor) -> None:
        """Update the host copy of ``param`` with ``grad`` (copied to the host) and copy the weights back."""
        g = grad.to("cpu", copy=True)
        key = id(param)
        buf = self.buffers.get(key)
        if buf is None:
            self.buffers[key] = buf = g
        else:
            buf.mul_(self.momentum).add_(g)
        self.weights[key].add_(buf, alpha=-self.lr)
        param.copy_(self.weights[key])


def pipelined_step(engine: OverlapEngine, host: HostUpdate) -> int:
    """Wait for each outstanding reduction in launch order and update its parameter on the host at once.

    The update of a layer whose gradient has arrived runs while the reductions launched after it (the
    layers nearer the input) are still in flight.  Returns the number of parameters updated.
    """
    n = len(engine.pending)
    for work, param in engine.pending:
        work.wait()
        if param.grad is None:
            raise RuntimeError("a reduction was launched for a parameter without a gradient")
        host.apply(param, param.grad.div_(engine.world))
    engine.pending.clear()
    return n


@dataclass(frozen=True, kw_only=True)
class DPJob:
    """Data-parallel out-of-core runs on every rank, one per seed.

    Attributes
    ----------
    models
        Each seed's chain (an ``nn.Sequential`` of blocks), pickled to every rank.
    policies
        Each seed's out-of-core policy for the pipelined mode, one of ``keep``/``swap``/``recompute`` per block.
    seeds
        Seed each run's batches (every rank draws its own).
    features, classes, batch
        Input width, label count and each rank's batch.
    steps, warmup
        Timed and untimed steps per mode.
    lr, momentum
        SGD's settings (the same in both modes).
    """

    models: tuple[nn.Sequential, ...]
    policies: tuple[tuple[str, ...], ...]
    seeds: tuple[int, ...]
    features: int
    classes: int
    batch: int
    steps: int
    warmup: int
    lr: float = 0.01
    momentum: float = 0.9

    def __post_init__(self) -> None:
        if not len(self.models) == len(self.policies) == len(self.seeds):
            raise ValueError(f"one model, one policy and one seed per run: got {len(self.models)}, "
                             f"{len(self.policies)} and {len(self.seeds)}")


@dataclass(frozen=True, kw_only=True)
class DPTiming:
    """One mode of one seed on one rank: seconds per step and the final parameters."""

    seed: int
    mode: str
    seconds_per_step: float
    params: tuple[np.ndarray, ...]


@dataclass(frozen=True, kw_only=True)
class _Run:
    model: nn.Sequential
    policy: tuple[str, ...]
    seed: int
    batches: list[tuple[torch.Tensor, torch.Tensor]]


def _batches(job: DPJob, seed: int, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1_000_003 * seed + rank)
    return [(torch.randn(job.batch, job.features, generator=gen), torch.randint(0, job.classes, (job.batch,), generator=gen))
            for _ in range(job.warmup + job.steps)]


def _train(job: DPJob, run: _Run, mode: str) -> DPTiming:
    model = copy.deepcopy(run.model)  # every mode starts from the same weights
    store = HostStore()
    engine, host = (OverlapEngine(model), HostUpdate(model, job.lr, job.momentum)) if mode == "pipelined" else (None, None)
    opt = torch.optim.SGD(model.parameters(), lr=job.lr, momentum=job.momentum)
    policy = list(run.policy) if mode == "pipelined" else ["keep"] * len(model)
    times = []
    for i, (x, y) in enumerate(run.batches):
        dist.barrier()
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(run_chain(model, x, policy, store), y).backward()
        if engine is not None and host is not None:
            pipelined_step(engine, host)
        else:
            allreduce_after_backward(model)
            opt.step()
        if i >= job.warmup:
            times.append(time.perf_counter() - t0)
    if engine is not None:
        engine.remove()
    return DPTiming(seed=run.seed, mode=mode, seconds_per_step=float(np.median(times)),
                    params=tuple(p.detach().cpu().numpy().copy() for p in model.parameters()))


def dp_rank(ctx: RankContext, job: DPJob) -> list[DPTiming]:
    """The rank program: per seed, both modes from the same weights on the same batches (launch with ``launch``).

    Returns the timings seed by seed; within a seed the modes run in an order rotated by the seed's position,
    so that neither always runs first on a warming machine.
    """
    torch.set_num_threads(1)
    out = []
    for i, (model, policy, seed) in enumerate(zip(job.models, job.policies, job.seeds)):
        run = _Run(model=model, policy=policy, seed=seed, batches=_batches(job, seed, ctx.rank))
        k = i % len(DP_MODES)
        out += [_train(job, run, mode) for mode in DP_MODES[k:] + DP_MODES[:k]]
    return out
