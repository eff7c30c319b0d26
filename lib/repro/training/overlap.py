"""Overlapping gradient communication with back-propagation: the overlap engine and its references.

Synchronous data-parallel SGD must sum every layer's gradient across the
processes before the next step.  Back-propagation produces the gradients
from the output layer to the input layer, so a layer's reduction can start
as soon as its gradient exists, while the earlier layers are still being
differentiated.  Three ways to do the same update on ``torch.distributed``:

- :class:`OverlapEngine`: a ``register_post_accumulate_grad_hook`` on every
  parameter launches ``dist.all_reduce(async_op=True)`` the moment the
  gradient is ready; :meth:`OverlapEngine.synchronize` waits for every handle
  and averages before ``optimizer.step`` (the paper's communication thread,
  one message per parameter tensor);
- :func:`allreduce_after_backward`: the non-overlapped reference (backward,
  then one blocking allreduce per tensor);
- torch's own ``DistributedDataParallel`` (bucketed, overlapped), the modern
  descendant of the idea and the reference implementation.

The ranks compute on :attr:`TimingJob.device`; the process group stays gloo
(which reduces CUDA tensors through host memory), because NCCL refuses two
ranks on one GPU, the case of a single-GPU machine.  Batches and initial
weights are drawn on the CPU, so every device starts from the same ones.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from repro.devices import resolve_device, synchronize
from repro.training.launcher import RankContext


class OverlapEngine:
    """Per-tensor asynchronous gradient allreduce launched from gradient hooks.

    Parameters
    ----------
    model
        The replica on this rank; a hook is registered on each parameter.
    group
        Process group of the reduction (default: the world).
    """

    def __init__(self, model: nn.Module, group=None) -> None:
        self.group = group
        self.world = dist.get_world_size(group)
        self.pending: list[tuple[dist.Work, torch.Tensor]] = []
        self.launch_order: list[str] = []
        names = {id(p): n for n, p in model.named_parameters()}
        self.hooks = [p.register_post_accumulate_grad_hook(self._make_hook(names[id(p)]))
                      for p in model.parameters() if p.requires_grad]

    def _make_hook(self, name: str):
        def hook(param: torch.Tensor) -> None:
            self.launch_order.append(name)
            self.pending.append((dist.all_reduce(param.grad, group=self.group, async_op=True), param))
        return hook

    def synchronize(self) -> int:
        """Wait for every outstanding reduction and average the gradients; return how many were waited."""
        n = len(self.pending)
        for work, param in self.pending:
            work.wait()
            if param.grad is None:
                raise RuntimeError("a reduction was launched for a parameter without a gradient")
            param.grad.div_(self.world)
        self.pending.clear()
        return n

    def remove(self) -> None:
        """Unregister the hooks."""
        for h in self.hooks:
            h.remove()


def allreduce_after_backward(model: nn.Module, group=None) -> None:
    """The non-overlapped reference: one blocking allreduce per gradient tensor, then the average."""
    world = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad.div_(world)


def vgg_mini(num_classes: int = 10, width_divisor: int = 8, image: int = 64) -> nn.Sequential:
    """VGG-A's layer pattern with channels and FC widths divided by ``width_divisor``.

    conv 64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M, FC 4096, 4096, classes
    (widths / divisor), on ``image`` x ``image`` RGB input; most parameters sit
    in the FC layers, as in VGG-A.
    """
    cfg = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]
    layers: list[tuple[str, nn.Module]] = []
    cin, k = 3, 0
    for v in cfg:
        if not isinstance(v, int):
            layers.append((f"pool{k}", nn.MaxPool2d(2)))
        else:
            cout = v // width_divisor
            layers += [(f"conv{k}", nn.Conv2d(cin, cout, 3, padding=1)), (f"relu{k}", nn.ReLU())]
            cin = cout
        k += 1
    side = image // 32
    fc = 4096 // width_divisor
    layers += [("flatten", nn.Flatten()), ("fc0", nn.Linear(cin * side * side, fc)), ("fc0relu", nn.ReLU()),
               ("fc1", nn.Linear(fc, fc)), ("fc1relu", nn.ReLU()), ("fc2", nn.Linear(fc, num_classes))]
    return nn.Sequential(OrderedDict(layers))


MODES = ("no_overlap", "overlap", "ddp")
"""The three ways to synchronise gradients that :func:`timing_rank` compares."""


@dataclass(frozen=True, kw_only=True)
class TimingJob:
    """A timing run on every rank: each seed trains every mode from the same weights on the same data.

    Attributes
    ----------
    seeds
        One measurement per seed (fresh weights and data, modes in a seed-dependent rotated order).
    local_batch, image, num_classes, width_divisor
        Data and model size (VGG-A-mini, random images with random labels: a throughput study).
    warmup, iterations
        Untimed and timed iterations per mode and seed.
    lr
        SGD learning rate.
    ddp_bucket_mb
        ``DistributedDataParallel``'s bucket size.
    device
        Where the ranks compute: ``cpu``, ``cuda`` or ``auto``.
    """

    seeds: tuple[int, ...]
    local_batch: int
    image: int
    num_classes: int
    width_divisor: int
    warmup: int
    iterations: int
    lr: float = 0.01
    ddp_bucket_mb: float = 0.25
    device: str = "cpu"


@dataclass(frozen=True, kw_only=True)
class ModeTiming:
    """One mode on one seed on one rank."""

    seed: int
    mode: str
    seconds_per_iteration: float
    params: tuple[np.ndarray, ...]
    messages_per_iteration: float


def _train(model: nn.Module, mode: str, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
           bucket_mb: float) -> tuple[float, float, nn.Module]:
    net = DistributedDataParallel(model, bucket_cap_mb=bucket_mb) if mode == "ddp" else model
    engine = OverlapEngine(model) if mode == "overlap" else None
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    messages = 0
    dev = next(model.parameters()).device
    synchronize(dev)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if engine is not None:
            messages += engine.synchronize()
        elif mode == "no_overlap":
            allreduce_after_backward(model)
            messages += sum(1 for p in model.parameters() if p.grad is not None)
        opt.step()
    synchronize(dev)
    seconds = time.perf_counter() - t0
    if engine is not None:
        engine.remove()
    return seconds, messages, model


def timing_rank(ctx: RankContext, job: TimingJob) -> list[ModeTiming]:
    """The rank program of the timing study (launch on the ranks with :func:`repro.training.launcher.launch`)."""
    out = []
    dev = resolve_device(job.device)
    for seed in job.seeds:
        gen = torch.Generator().manual_seed(1000 * seed + ctx.rank)  # each rank its own batch
        x = torch.randn(job.local_batch, 3, job.image, job.image, generator=gen).to(dev)
        y = torch.randint(0, job.num_classes, (job.local_batch,), generator=gen).to(dev)
        k = seed % len(MODES)
        for mode in MODES[k:] + MODES[:k]:
            torch.manual_seed(seed)
            model = vgg_mini(job.num_classes, job.width_divisor, job.image).to(dev)
            _train(model, mode, x, y, job.warmup, job.lr, job.ddp_bucket_mb)  # warm-up steps, untimed
            torch.manual_seed(seed)
            model = vgg_mini(job.num_classes, job.width_divisor, job.image).to(dev)
            seconds, messages, trained = _train(model, mode, x, y, job.iterations, job.lr, job.ddp_bucket_mb)
            out.append(ModeTiming(seed=seed, mode=mode, seconds_per_iteration=seconds / job.iterations,
                                  params=tuple(p.detach().cpu().numpy().copy() for p in trained.parameters()),
                                  messages_per_iteration=messages / job.iterations))
    return out
