"""Grouped data-parallel / local SGD on real ``torch.distributed`` gloo ranks.

:func:`grouped_sgd_rank` is the rank program that :func:`repro.training.launcher.launch`
runs: every rank builds the same seeded template model, takes its own batch of
every step from a shared batch plan, averages gradients inside its group with
``all_reduce`` on the intra-group communicator, and every ``tau`` steps
averages the group models, either with one flat ``all_reduce`` over all ranks
or with the sharded hierarchical scheme of :mod:`repro.training.hier_localsgd`.
The maths is that of :func:`repro.training.simulator.run_grouped`; the tests
check that both give the same parameters.

When the job carries per-epoch shards, every rank keeps only its own shard's
samples in memory and receives the samples dealt to it by the partial
exchange through ``send``/``recv`` before the epoch starts (the samples, not
just their ids, travel), so the run also exercises the exchange of
:mod:`repro.training.shuffling`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from repro.training.hier_localsgd import sharded_average
from repro.training.launcher import RankContext
from repro.training.simulator import SGDConfig, build_template


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """The MLP every rank builds (see :func:`repro.training.simulator.build_template`)."""

    in_features: int
    hidden: tuple[int, ...]
    num_classes: int
    batch_norm: bool
    seed: int

    def build(self) -> torch.nn.Sequential:
        """The seeded template model."""
        return build_template(self.in_features, self.hidden, self.num_classes, batch_norm=self.batch_norm,
                              seed=self.seed)


@dataclass(frozen=True, kw_only=True)
class GroupedJob:
    """Everything a rank needs; identical on every rank.

    Attributes
    ----------
    x, y
        The training set (only rows of the rank's shard are used when ``shards`` is set).
    model, sgd
        Model and optimiser settings.
    plan
        Sample ids of shape ``(steps, G, S, b)``; rank ``g * S + s`` takes ``plan[t, g, s]``.
    lrs
        Learning rate per step.
    tau
        Averaging period in steps.
    averaging
        ``"flat"`` (one all_reduce over all ranks) or ``"sharded"`` (hierarchical).
    shards
        Optional per-epoch shards, ``shards[e][rank]``; with them each rank holds
        only its shard and receives exchanged samples over the network.
    steps_per_epoch
        Steps of one epoch (needed with ``shards``).
    """

    x: np.ndarray
    y: np.ndarray
    model: ModelSpec
    sgd: SGDConfig
    plan: np.ndarray
    lrs: np.ndarray
    tau: int
    averaging: str = "flat"
    shards: tuple[tuple[np.ndarray, ...], ...] | None = None
    steps_per_epoch: int = 0


@dataclass(frozen=True, kw_only=True)
class RankReport:
    """What a rank returns: its final parameters and buffers, losses and bytes it moved."""

    rank: int
    params: list[np.ndarray]
    buffers: list[np.ndarray]
    losses: np.ndarray
    collective_bytes: dict[str, int] = field(default_factory=dict)
    exchange_bytes_sent: int = 0


class _LocalStore:
    """The samples a rank holds, looked up by global id."""

    def __init__(self, ids: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
        order = np.argsort(ids)
        self.ids, self.x, self.y = ids[order], x[order], y[order]

    def rows(self, ids: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self.ids, ids)
        if np.any(pos >= len(self.ids)) or np.any(self.ids[np.minimum(pos, len(self.ids) - 1)] != ids):
            raise KeyError("a batch asks for samples this rank does not hold")
        return pos


def _exchange(ctx: RankContext, store: _LocalStore, old: tuple[np.ndarray, ...],
              new: tuple[np.ndarray, ...]) -> tuple[_LocalStore, int]:
    """Move the samples whose owner changed from ``old`` to ``new`` shards; return the new store and bytes sent."""
    me = ctx.rank
    owner = {}
    for w, s in enumerate(new):
        owner.update(dict.fromkeys(s.tolist(), w))
    keep = np.isin(store.ids, new[me])
    reqs, sent = [], 0
    payloads = []
    for w in range(ctx.world_size):
        if w == me:
            continue
        go = np.array([owner[i] == w for i in store.ids.tolist()], dtype=bool) & ~keep
        ids = store.ids[go]
        xs = torch.as_tensor(store.x[go])
        ys = torch.as_tensor(store.y[go])
        ids_t = torch.as_tensor(ids)
        payloads.append((ids_t, xs, ys))  # keep the buffers alive until the sends complete
        if len(ids):
            reqs += [dist.isend(ids_t, w), dist.isend(xs, w), dist.isend(ys, w)]
            sent += xs.numel() * xs.element_size() + ys.numel() * ys.element_size()
    got_ids, got_x, got_y = [store.ids[keep]], [store.x[keep]], [store.y[keep]]
    for w in range(ctx.world_size):
        if w == me:
            continue
        incoming = np.intersect1d(old[w], new[me], assume_unique=True)
        if len(incoming):
            ids_in = torch.empty(len(incoming), dtype=torch.int64)
            xs_in = torch.empty((len(incoming), *store.x.shape[1:]), dtype=torch.float32)
            ys_in = torch.empty(len(incoming), dtype=torch.int64)
            for t in (ids_in, xs_in, ys_in):
                dist.recv(t, w)
            got_ids.append(ids_in.numpy())
            got_x.append(xs_in.numpy())
            got_y.append(ys_in.numpy())
    for r in reqs:
        if r is not None:
            r.wait()
    return _LocalStore(np.concatenate(got_ids), np.concatenate(got_x), np.concatenate(got_y)), sent


def grouped_sgd_rank(ctx: RankContext, job: GroupedJob) -> RankReport:
    """The rank program of grouped SGD (launch it with ``group_size = S``).

    Parameters
    ----------
    ctx
        The rank's context; ``ctx.layout`` must be set.
    job
        The shared job description.

    Returns
    -------
    RankReport
        Final parameters, BN buffers, per-step local losses and byte counts.
    """
    layout = ctx.layout
    if layout is None:
        raise ValueError("grouped_sgd_rank needs a group layout: launch with group_size")
    g, s = layout.group_index, layout.index_in_group
    model = job.model.build()
    opt = torch.optim.SGD(model.parameters(), lr=job.sgd.lr, momentum=job.sgd.momentum,
                          weight_decay=job.sgd.weight_decay)
    params = list(model.parameters())
    counts = {"gradient_allreduce": 0, "model_averaging": 0}
    x_all, y_all = np.asarray(job.x, np.float32), np.asarray(job.y, np.int64)
    store = None
    exchanged = 0
    if job.shards is not None:
        mine = job.shards[0][ctx.rank]
        store = _LocalStore(mine, x_all[mine], y_all[mine])
    losses = np.empty(len(job.plan))
    for t in range(len(job.plan)):
        if job.shards is not None and t > 0 and t % job.steps_per_epoch == 0:
            e = t // job.steps_per_epoch
            assert store is not None  # set with the shards above
            store, sent = _exchange(ctx, store, job.shards[e - 1], job.shards[e])
            exchanged += sent
        ids = job.plan[t, g, s]
        if store is not None:
            pos = store.rows(ids)
            xb, yb = torch.as_tensor(store.x[pos]), torch.as_tensor(store.y[pos])
        else:
            xb, yb = torch.as_tensor(x_all[ids]), torch.as_tensor(y_all[ids])
        for group in opt.param_groups:
            group["lr"] = float(job.lrs[t])
        model.train()
        loss = F.cross_entropy(model(xb.reshape(len(xb), -1)), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if layout.group_size > 1:
            grads = [p.grad for p in params]
            if any(g is None for g in grads):
                raise RuntimeError("a parameter has no gradient after the backward pass")
            flat = torch.cat([g.reshape(-1) for g in grads if g is not None])
            dist.all_reduce(flat, group=layout.intra)
            counts["gradient_allreduce"] += flat.numel() * flat.element_size()
            flat /= layout.group_size
            off = 0
            for p, grad in zip(params, grads):
                if grad is not None:
                    grad.copy_(flat[off:off + p.numel()].view_as(p))
                off += p.numel()
        opt.step()
        losses[t] = loss.item()
        if layout.num_groups > 1 and (t + 1) % job.tau == 0:
            with torch.no_grad():
                vec = parameters_to_vector(params)
                if job.averaging == "flat":
                    dist.all_reduce(vec)
                    counts["model_averaging"] += vec.numel() * vec.element_size()
                    vec /= ctx.world_size
                elif job.averaging == "sharded":
                    vec, nbytes = sharded_average(vec, layout)
                    counts["model_averaging"] += nbytes
                else:
                    raise ValueError(f"unknown averaging {job.averaging!r}; use 'flat' or 'sharded'")
                vector_to_parameters(vec, params)
    return RankReport(rank=ctx.rank, params=[p.detach().numpy().copy() for p in params],
                      buffers=[b.detach().numpy().copy() for b in model.buffers() if b.dtype.is_floating_point],
                      losses=losses, collective_bytes=counts, exchange_bytes_sent=exchanged)
