"""Data, filter, channel and spatial parallelism of a sequential CNN on ``torch.distributed`` ranks.

The four strategies the parallelism oracle (:mod:`repro.training.oracle`) predicts, run for real, so that
its predictions can be checked against measured steps:

- ``data``: every rank holds the whole model and its own micro-batch; the gradients are summed in one
  flat allreduce and averaged;
- ``filter``: every convolution and linear layer keeps ``1/p`` of its output channels (filters); the
  partial outputs are all-gathered forward, and the input gradient, partial on every rank, is
  allreduced backward;
- ``channel``: every such layer keeps ``1/p`` of its input channels; the partial outputs are allreduced
  forward and the input gradients all-gathered backward;
- ``spatial``: every rank keeps ``1/p`` of the image rows; a 3x3 convolution first exchanges one halo row
  with each neighbour (and sends the halo's gradient back in the backward pass); the rows are
  all-gathered before the first layer that is not a convolution, pooling or activation, and the
  convolution weights' partial gradients are allreduced.

The forward/backward communication pairs are small autograd functions, the mappings Megatron-LM calls
*f* and *g* (``torch.distributed.nn.functional`` sums gradients over ranks in backward, which is wrong when
the layers after a gather are replicated, so it is not used here).  Every rank of the model-parallel
strategies sees the same micro-batch; :func:`gradients_rank` returns the full gradients so that a test
can compare them with one process's.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from repro.training.launcher import RankContext

STRATEGIES = ("data", "filter", "channel", "spatial")
_WEIGHTED = (nn.Conv2d, nn.Linear)
_ROW_LOCAL = (nn.ReLU, nn.MaxPool2d)


def _ranks() -> tuple[int, int]:
    return dist.get_rank(), dist.get_world_size()


def _check_even(size: int, world: int, what: str) -> None:
    if size % world:
        raise ValueError(f"{what} ({size}) must be divisible by the number of ranks ({world})")


class _CopyToRanks(torch.autograd.Function):
    """Identity forward; backward sums the input gradient over the ranks (Megatron's *f*)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class _SumOverRanks(torch.autograd.Function):
    """Allreduce forward; identity backward, the layers after it being replicated (Megatron's *g*)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = x.contiguous().clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


class _GatherAlong(torch.autograd.Function):
    """All-gather the ranks' equal parts along ``dim`` forward; keep this rank's part of the gradient backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int) -> torch.Tensor:
        rank, world = _ranks()
        ctx.dim, ctx.rank, ctx.world = dim, rank, world
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad.chunk(ctx.world, ctx.dim)[ctx.rank].contiguous(), None


class _ScatterAlong(torch.autograd.Function):
    """Keep this rank's part along ``dim`` forward; all-gather the parts' gradients backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int) -> torch.Tensor:
        rank, world = _ranks()
        _check_even(x.shape[dim], world, "channels of a channel-split layer's input")
        ctx.dim, ctx.world = dim, world
        return x.chunk(world, dim)[rank].contiguous()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        parts = [torch.empty_like(grad) for _ in range(ctx.world)]
        dist.all_gather(parts, grad.contiguous())
        return torch.cat(parts, ctx.dim), None


def _exchange_rows(top: torch.Tensor, bottom: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Send ``top`` to the rank above and ``bottom`` to the rank below; return what they sent (zeros at the edges)."""
    rank, world = _ranks()
    from_above, from_below = torch.zeros_like(bottom), torch.zeros_like(top)
    reqs = []
    if rank > 0:
        reqs += [dist.isend(top, rank - 1), dist.irecv(from_above, rank - 1)]
    if rank < world - 1:
        reqs += [dist.isend(bottom, rank + 1), dist.irecv(from_below, rank + 1)]
    for r in reqs:
        if r is not None:
            r.wait()
    return from_above, from_below


class _HaloRows(torch.autograd.Function):
    """Extend this rank's rows by ``halo`` rows of each neighbour; backward returns the halo's gradient to them."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, halo: int) -> torch.Tensor:
        ctx.halo = halo
        above, below = _exchange_rows(x[:, :, :halo].contiguous(), x[:, :, -halo:].contiguous())
        return torch.cat([above, x, below], dim=2)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        h = ctx.halo
        inner = grad[:, :, h:-h].clone()
        from_above, from_below = _exchange_rows(grad[:, :, :h].contiguous(), grad[:, :, -h:].contiguous())
        inner[:, :, :h] += from_above
        inner[:, :, -h:] += from_below
        return inner, None


def _same_padding_conv(m: nn.Module) -> bool:
    if not isinstance(m, nn.Conv2d):
        return False
    k = m.kernel_size
    return (m.stride == (1, 1) and m.dilation == (1, 1) and m.groups == 1 and k[0] % 2 == 1
            and m.padding == ((k[0] - 1) // 2, (k[1] - 1) // 2))


class ShardedCNN(nn.Module):
    """One rank's part of a sequential CNN under one strategy.

    Parameters
    ----------
    serial
        The whole model: ``Conv2d``, ``Linear``, ``ReLU``, ``MaxPool2d`` and ``Flatten`` children (the
        shape of :func:`repro.training.overlap.vgg_mini`).  It is copied; its weights are sliced.
    strategy
        One of :data:`STRATEGIES`.
    rank, world
        This rank and the number of ranks (the default process group).
    """

    def __init__(self, serial: nn.Sequential, strategy: str, rank: int, world: int) -> None:
        super().__init__()
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; choose one of {STRATEGIES}")
        self.strategy, self.rank, self.world = strategy, rank, world
        self.layers = copy.deepcopy(serial)
        weighted = [m for m in self.layers if isinstance(m, _WEIGHTED)]
        self.first = weighted[0] if weighted else None
        for m in weighted:
            with torch.no_grad():
                if strategy == "filter":
                    _check_even(m.weight.shape[0], world, f"output channels of {type(m).__name__}")
                    m.weight = nn.Parameter(m.weight.chunk(world, 0)[rank].clone())
                    if m.bias is not None:
                        m.bias = nn.Parameter(m.bias.chunk(world, 0)[rank].clone())
                elif strategy == "channel":
                    m.weight = nn.Parameter(m.weight.tensor_split(world, 1)[rank].clone())
        if strategy == "spatial":
            for layer in self.layers:
                if isinstance(layer, nn.Conv2d) and not _same_padding_conv(layer):
                    raise ValueError("spatial parallelism here needs stride-1 convolutions with 'same' padding")

    def _filter(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return _GatherAlong.apply(m(x if m is self.first else _CopyToRanks.apply(x)), 1)

    def _channel(self, m: nn.Conv2d | nn.Linear, x: torch.Tensor) -> torch.Tensor:
        part = x.tensor_split(self.world, 1)[self.rank] if m is self.first else _ScatterAlong.apply(x, 1)
        partial = m._conv_forward(part, m.weight, None) if isinstance(m, nn.Conv2d) else F.linear(part, m.weight)
        out = _SumOverRanks.apply(partial)
        if m.bias is None:
            return out
        return out + (m.bias.view(1, -1, 1, 1) if isinstance(m, nn.Conv2d) else m.bias)

    def _spatial(self, x: torch.Tensor) -> torch.Tensor:
        _check_even(x.shape[2], self.world, "image rows")
        x = x.chunk(self.world, 2)[self.rank]
        split = True
        for m in self.layers:
            if split and isinstance(m, nn.Conv2d):
                halo = m.kernel_size[0] // 2
                if x.shape[2] < halo:
                    raise ValueError(f"{x.shape[2]} rows per rank cannot hold a halo of {halo}")
                ext = _HaloRows.apply(x, halo) if halo else x
                x = F.conv2d(ext, m.weight, m.bias, padding=(0, int(m.padding[1])))
            elif split and isinstance(m, _ROW_LOCAL):
                rows = m.kernel_size if isinstance(m, nn.MaxPool2d) else 1
                rows = rows if isinstance(rows, int) else rows[0]
                if x.shape[2] % rows:
                    raise ValueError(f"{x.shape[2]} rows per rank do not pool evenly by {rows}")
                x = m(x)
            else:
                if split:
                    x, split = _GatherAlong.apply(x, 2), False
                x = m(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The model's output, whole on every rank (for ``data``: of this rank's micro-batch)."""
        if self.strategy == "spatial":
            return self._spatial(x)
        for m in self.layers:
            if self.strategy == "filter" and isinstance(m, _WEIGHTED):
                x = self._filter(m, x)
            elif self.strategy == "channel" and isinstance(m, _WEIGHTED):
                x = self._channel(m, x)
            else:
                x = m(x)
        return x

    def sync_gradients(self) -> None:
        """The gradient communication after backward: averaged (data) or summed over rows (spatial convs)."""
        if self.strategy == "data":
            allreduce_flat([_grad(p) for p in self.parameters()], average=True)
        elif self.strategy == "spatial":
            convs = [m for m in self.layers if isinstance(m, nn.Conv2d)]
            allreduce_flat([_grad(p) for m in convs for p in m.parameters()], average=False)

    def full_gradients(self) -> list[torch.Tensor]:
        """The serial model's gradients, in its parameter order, assembled from every rank's slices."""
        out = []
        for m in self.layers:
            for name, p in m.named_parameters(recurse=False):
                dim = {"filter": 0, "channel": 1 if name == "weight" else None}.get(self.strategy)
                if dim is None or not isinstance(m, _WEIGHTED):
                    out.append(_grad(p).clone())
                    continue
                full = m.in_channels if isinstance(m, nn.Conv2d) else m.in_features
                out.append(_gather_uneven(_grad(p), dim, full if self.strategy == "channel" else p.shape[dim] * self.world))
        return out


def _grad(p: torch.Tensor) -> torch.Tensor:
    """A parameter's gradient, which the step must have produced (the strategies hold zeroed gradients)."""
    if p.grad is None:
        raise RuntimeError(f"a parameter of shape {tuple(p.shape)} has no gradient")
    return p.grad


def _gather_uneven(part: torch.Tensor, dim: int, full: int) -> torch.Tensor:
    """All-gather the ``tensor_split`` parts of a dimension of size ``full`` (padded to equal sizes on the wire)."""
    world = dist.get_world_size()
    sizes = [len(c) for c in torch.arange(full).tensor_split(world)]
    pad = [0, 0] * (part.dim() - dim - 1) + [0, max(sizes) - part.shape[dim]]
    parts = [torch.empty_like(F.pad(part, pad)) for _ in range(world)]
    dist.all_gather(parts, F.pad(part, pad).contiguous())
    return torch.cat([q.narrow(dim, 0, n) for q, n in zip(parts, sizes)], dim)


def allreduce_flat(grads: Sequence[torch.Tensor], average: bool) -> None:
    """Sum the tensors over all ranks in one flat allreduce (one message per ring step), in place.

    Parameters
    ----------
    grads
        Gradient tensors of this rank.
    average
        Divide by the number of ranks afterwards.
    """
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    if average:
        flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


@dataclass(frozen=True, kw_only=True)
class StrategyJob:
    """The same model and batches for every strategy.

    Attributes
    ----------
    model
        The serial model (pickled to every rank).
    image
        Side of the square RGB input.
    micro_batch
        Samples per rank (data) or per group of ranks (the model-parallel strategies).
    strategies
        The strategies to time, in order.
    steps, warmup
        Timed and untimed SGD steps per strategy.
    seed
        Seeds the batches.
    num_classes
        Classes of the synthetic labels.
    """

    model: nn.Sequential
    image: int
    micro_batch: int
    strategies: tuple[str, ...]
    steps: int
    warmup: int
    seed: int = 0
    num_classes: int = 10


@dataclass(frozen=True, kw_only=True)
class StrategyTiming:
    """Median seconds of one SGD step of a strategy on one rank, at a micro-batch."""

    strategy: str
    seconds: float
    micro_batch: int


def _batch(job: StrategyJob, strategy: str, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    # data parallelism: every rank its own samples; model parallelism: the same samples on every rank
    gen = torch.Generator().manual_seed(job.seed * 1_000_003 + step * 101 + (rank if strategy == "data" else 0))
    x = torch.randn(job.micro_batch, 3, job.image, job.image, generator=gen)
    return x, torch.randint(0, job.num_classes, (job.micro_batch,), generator=gen)


def _step(model: ShardedCNN, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=False)
    F.cross_entropy(model(x), y).backward()
    model.sync_gradients()
    opt.step()


def timing_rank(ctx: RankContext, job: StrategyJob) -> list[StrategyTiming]:
    """Median step time of every strategy of ``job`` on this rank (one thread per rank)."""
    torch.set_num_threads(1)
    out = []
    for strategy in job.strategies:
        model = ShardedCNN(job.model, strategy, ctx.rank, ctx.world_size)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        times = []
        for i in range(job.warmup + job.steps):
            x, y = _batch(job, strategy, ctx.rank, i)
            dist.barrier()
            t0 = time.perf_counter()
            _step(model, opt, x, y)
            if i >= job.warmup:
                times.append(time.perf_counter() - t0)
        out.append(StrategyTiming(strategy=strategy, seconds=float(np.median(times)), micro_batch=job.micro_batch))
    return out


def gradients_rank(ctx: RankContext, job: StrategyJob) -> dict[str, list[np.ndarray]]:
    """The full gradients of one step (batch of step 0) under every strategy of ``job``, per strategy."""
    torch.set_num_threads(1)
    out = {}
    for strategy in job.strategies:
        model = ShardedCNN(job.model, strategy, ctx.rank, ctx.world_size)
        x, y = _batch(job, strategy, ctx.rank, 0)
        F.cross_entropy(model(x), y).backward()
        model.sync_gradients()
        out[strategy] = [g.numpy() for g in model.full_gradients()]
    return out


def serial_batch(job: StrategyJob, strategy: str, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The samples one step of ``strategy`` processes on ``world`` ranks, as one batch (for the serial reference)."""
    ranks = range(world) if strategy == "data" else range(1)
    parts = [_batch(job, strategy, r, 0) for r in ranks]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
