"""Single-process simulator of grouped data-parallel SGD: G model replicas, each trained by S workers.

The maths is that of :mod:`repro.training.distributed`: P = G * S workers
each take a local mini-batch; inside a group the S workers' gradients are
averaged every step (synchronous data parallelism, so the S members hold one
model); every ``tau`` steps the G group models are averaged (local SGD).
G = 1 is synchronous SGD over all workers, S = 1 is plain local SGD.

:class:`ReplicaBank` holds the G replicas of a ``Linear``/``BatchNorm1d``/
``ReLU`` stack as stacked tensors (leading dimension G) and runs all workers
in one batched forward pass.  Batch normalisation is per worker, as with
per-rank BatchNorm in ``DistributedDataParallel``: statistics over each
worker's own batch, and running statistics per worker (evaluation uses worker
0's, as rank 0 would).  ``torch.func.vmap`` cannot update running statistics
in place, which is why the stack is written out here.  Because SGD with
momentum and weight decay acts element by element, one
``torch.optim.SGD`` over the stacked tensors is G independent optimisers.
The bank computes wherever it was moved (``bank.to(device)``): batches are
moved to it, and :meth:`ReplicaBank.group_state` returns CPU arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from repro.models import mlp


@dataclass(frozen=True, kw_only=True)
class Topology:
    """G groups of S workers (P = G * S)."""

    num_groups: int
    group_size: int

    def __post_init__(self) -> None:
        if self.num_groups < 1 or self.group_size < 1:
            raise ValueError(f"num_groups and group_size must be >= 1, got {self.num_groups}, {self.group_size}")

    @property
    def workers(self) -> int:
        """P, the total number of workers."""
        return self.num_groups * self.group_size


@dataclass(frozen=True, kw_only=True)
class SGDConfig:
    """Optimiser settings shared by the simulator and the distributed run."""

    lr: float
    momentum: float = 0.9
    weight_decay: float = 0.0


def build_template(in_features: int, hidden: tuple[int, ...], num_classes: int, *, batch_norm: bool,
                   seed: int) -> nn.Sequential:
    """The reference MLP (``Linear [-> BatchNorm1d] -> ReLU`` per hidden layer), seeded.

    With ``batch_norm=False`` this is :func:`repro.models.mlp`.
    """
    torch.manual_seed(seed)
    if not batch_norm:
        return mlp(in_features, hidden, num_classes)
    dims = [in_features, *hidden]
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU()]
    layers.append(nn.Linear(dims[-1], num_classes))
    return nn.Sequential(*layers)


class ReplicaBank(nn.Module):
    """G stacked replicas of a template MLP, run by S workers each.

    Parameters
    ----------
    template
        An ``nn.Sequential`` of ``Linear``, ``BatchNorm1d`` and ``ReLU`` layers;
        every replica starts as a copy of it.
    topology
        The G x S worker layout.
    """

    def __init__(self, template: nn.Sequential, topology: Topology) -> None:
        super().__init__()
        self.topology = topology
        g, s = topology.num_groups, topology.group_size
        self.kinds: list[str] = []
        self.weights = nn.ParameterList()
        self.momentum_bn: list[float] = []
        self.eps_bn: list[float] = []
        for m in template:
            if isinstance(m, nn.Linear):
                self.kinds.append("linear")
                self.weights.append(nn.Parameter(m.weight.detach().clone().expand(g, -1, -1).contiguous()))
                self.weights.append(nn.Parameter(m.bias.detach().clone().expand(g, -1).contiguous()))
            elif isinstance(m, nn.BatchNorm1d):
                if m.running_mean is None or m.running_var is None or m.momentum is None:
                    raise TypeError("ReplicaBank needs BatchNorm1d with running statistics and a momentum")
                k = len(self.momentum_bn)
                self.kinds.append("bn")
                self.weights.append(nn.Parameter(m.weight.detach().clone().expand(g, -1).contiguous()))
                self.weights.append(nn.Parameter(m.bias.detach().clone().expand(g, -1).contiguous()))
                self.register_buffer(f"running_mean{k}", m.running_mean.clone().expand(g, s, -1).contiguous())
                self.register_buffer(f"running_var{k}", m.running_var.clone().expand(g, s, -1).contiguous())
                self.momentum_bn.append(float(m.momentum))
                self.eps_bn.append(float(m.eps))
            elif isinstance(m, nn.ReLU):
                self.kinds.append("relu")
            else:
                raise TypeError(f"ReplicaBank supports Linear, BatchNorm1d and ReLU, not {type(m).__name__}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for inputs ``x`` of shape ``(G, S, b, d)`` (training) or ``(G, 1, n, d)`` (evaluation)."""
        p = iter(self.weights)
        k = 0
        for kind in self.kinds:
            if kind == "linear":
                w, b = next(p), next(p)
                x = torch.matmul(x, w.transpose(1, 2)[:, None]) + b[:, None, None, :]
            elif kind == "relu":
                x = F.relu(x)
            else:
                w, b = next(p), next(p)
                rm, rv = getattr(self, f"running_mean{k}"), getattr(self, f"running_var{k}")
                if self.training:
                    mean = x.mean(dim=2)
                    var = x.var(dim=2, unbiased=False)
                    with torch.no_grad():
                        n = x.shape[2]
                        mom = self.momentum_bn[k]
                        rm.mul_(1 - mom).add_(mom * mean)
                        rv.mul_(1 - mom).add_(mom * var * n / max(n - 1, 1))
                else:
                    mean, var = rm[:, :1], rv[:, :1]
                x = (x - mean[:, :, None, :]) / torch.sqrt(var[:, :, None, :] + self.eps_bn[k])
                x = x * w[:, None, None, :] + b[:, None, None, :]
                k += 1
        return x

    @property
    def device(self) -> torch.device:
        """Where the replicas live (move them with ``bank.to(device)``; batches follow in :func:`train_step`)."""
        return self.weights[0].device

    def group_state(self, group: int) -> list[np.ndarray]:
        """The parameters of replica ``group`` in the template's ``parameters()`` order, as CPU arrays."""
        return [p[group].detach().cpu().numpy().copy() for p in self.weights]

    def average_groups(self) -> None:
        """Replace every replica's parameters by their mean over the G groups (buffers and momentum stay local)."""
        with torch.no_grad():
            for p in self.weights:
                p.copy_(p.mean(dim=0, keepdim=True).expand_as(p))


def warmup_schedule(base_lr: float, scale: float, steps_per_epoch: int, epochs: int, warmup_epochs: float = 0.0,
                    decay_epochs: tuple[float, ...] = (), decay: float = 0.1) -> np.ndarray:
    """Per-step learning rates: linear warm-up from ``base_lr`` to ``base_lr * scale``, then step decays.

    Parameters
    ----------
    base_lr
        Learning rate of one worker's batch.
    scale
        Linear-scaling factor (the number of batches averaged per step).
    steps_per_epoch, epochs
        Length of the run.
    warmup_epochs
        Epochs of the linear ramp (Goyal et al.'s gradual warm-up); 0 starts at the scaled rate.
    decay_epochs, decay
        The rate is multiplied by ``decay`` from each of these epochs on.

    Returns
    -------
    np.ndarray
        Learning rate of every step, shape ``(steps_per_epoch * epochs,)``.
    """
    t = np.arange(steps_per_epoch * epochs) / steps_per_epoch  # epoch position of each step
    peak = base_lr * scale
    ramp = np.minimum(t / warmup_epochs, 1.0) if warmup_epochs > 0 else np.ones_like(t)
    lrs = base_lr + (peak - base_lr) * ramp
    for e in decay_epochs:
        lrs = np.where(t >= e, lrs * decay, lrs)
    return lrs


def make_optimizer(bank: ReplicaBank, cfg: SGDConfig) -> torch.optim.SGD:
    """One ``torch.optim.SGD`` over the stacked replicas (equivalent to one optimiser per replica)."""
    return torch.optim.SGD(bank.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def train_step(bank: ReplicaBank, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               lr: float | None = None) -> torch.Tensor:
    """One synchronous step of every group on the workers' batches.

    Parameters
    ----------
    bank, opt
        The replicas and their optimiser.
    x, y
        Batches of shape ``(G, S, b, ...)`` and ``(G, S, b)``, moved to the bank's device if elsewhere.
    lr
        If given, the learning rate for this step.

    Returns
    -------
    torch.Tensor
        Per-sample losses ``(G, S, b)``, detached.
    """
    if lr is not None:
        for group in opt.param_groups:
            group["lr"] = lr
    bank.train()
    x, y = x.to(bank.device), y.to(bank.device)
    logits = bank(x.reshape(*x.shape[:3], -1))
    losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none").view(y.shape)
    opt.zero_grad(set_to_none=True)
    # each group minimises the mean over its S workers of their batch means (= the allreduce-mean of gradients)
    losses.mean(dim=(1, 2)).sum().backward()
    opt.step()
    return losses.detach()


@torch.no_grad()
def evaluate(bank: ReplicaBank, x: torch.Tensor, y: torch.Tensor, group: int = 0) -> tuple[float, float]:
    """Accuracy (%) and mean loss of replica ``group`` on ``(x, y)``, with worker 0's BN statistics."""
    bank.eval()
    x, y = x.to(bank.device), y.to(bank.device)
    logits = bank(x.reshape(1, 1, len(x), -1).expand(bank.topology.num_groups, 1, -1, -1))[group, 0]
    loss = F.cross_entropy(logits, y).item()
    acc = 100.0 * (logits.argmax(1) == y).float().mean().item()
    return acc, loss


def run_grouped(bank: ReplicaBank, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                plan: np.ndarray, lrs: np.ndarray, tau: int,
                before_average: Callable[[ReplicaBank], None] | None = None) -> np.ndarray:
    """Train through a batch plan; average the groups every ``tau`` steps.

    Parameters
    ----------
    bank, opt
        Replicas and optimiser.
    x, y
        The full training arrays; ``plan`` indexes them (hold them on the bank's device to gather
        batches there).
    plan
        Sample indices of shape ``(steps, G, S, b)``.
    lrs
        Learning rate of each step, shape ``(steps,)``.
    tau
        Local-SGD period in steps (averaging after global steps tau, 2 tau, ...).
    before_average
        Called with the bank just before each averaging (to measure the replicas' spread).

    Returns
    -------
    np.ndarray
        Mean training loss of each step, shape ``(steps,)``.
    """
    out = np.empty(len(plan))
    for t, idx in enumerate(plan):
        it = torch.as_tensor(idx, device=x.device)
        out[t] = train_step(bank, opt, x[it], y[it], lr=float(lrs[t])).mean().item()
        if bank.topology.num_groups > 1 and (t + 1) % tau == 0:
            if before_average is not None:
                before_average(bank)
            bank.average_groups()
    return out
