"""Hierarchical local SGD: sharded cross-group model averaging, its cost, and the discrepancy metric.

P workers form G groups of S.  Inside a group the workers run synchronous
SGD, so all S members hold the same model; every ``tau`` steps the G group
models are averaged.  Because the members of a group are identical, the
average need not be a flat allreduce of the whole model over all P workers:
member ``i`` of every group allreduces only shard ``i`` of the flattened
model with the other groups' member ``i`` (a G-way allreduce of ``d / S``
elements, the S of them running side by side), and each group then
allgathers its S averaged shards.  This sharded scheme is our reconstruction
of the paper's "cheaper than allreduce" averaging (the paper's text was not
available); so is the discrepancy metric below.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from repro.training.cost import Network, ring_allgather_bytes, ring_allgather_time, ring_allreduce_bytes, ring_allreduce_time
from repro.training.launcher import GroupLayout
from repro.training.simulator import ReplicaBank


def sharded_average(vec: torch.Tensor, layout: GroupLayout) -> tuple[torch.Tensor, int]:
    """Average a flattened model over the G groups by shard allreduce plus intra-group allgather.

    Parameters
    ----------
    vec
        This rank's flattened model (identical inside a group).
    layout
        The rank's group layout (inter- and intra-group communicators).

    Returns
    -------
    torch.Tensor, int
        The averaged vector and the payload bytes this rank handed to collectives.
    """
    s, g = layout.group_size, layout.num_groups
    chunks = torch.tensor_split(vec, s)
    mine = chunks[layout.index_in_group].clone()
    nbytes = 0
    if g > 1:
        dist.all_reduce(mine, group=layout.inter)
        nbytes += mine.numel() * mine.element_size()
        mine /= g
    if s == 1:
        return mine, nbytes
    width = max(c.numel() for c in chunks)
    padded = torch.zeros(width, dtype=vec.dtype)
    padded[:mine.numel()] = mine
    gathered = [torch.empty_like(padded) for _ in range(s)]
    dist.all_gather(gathered, padded, group=layout.intra)
    nbytes += padded.numel() * padded.element_size()
    return torch.cat([buf[:c.numel()] for buf, c in zip(gathered, chunks)]), nbytes


@dataclass(frozen=True, kw_only=True)
class AveragingCost:
    """Modelled per-process bytes and time of one model averaging."""

    scheme: str
    bytes_per_process: float
    seconds: float


def flat_averaging_cost(model_bytes: float, workers: int, net: Network) -> AveragingCost:
    """A flat ring allreduce of the whole model over all P workers."""
    return AveragingCost(scheme="flat allreduce", bytes_per_process=ring_allreduce_bytes(model_bytes, workers),
                         seconds=ring_allreduce_time(model_bytes, workers, net))


def sharded_averaging_cost(model_bytes: float, num_groups: int, group_size: int, net: Network) -> AveragingCost:
    """The sharded scheme: G-way allreduce of ``d / S`` (S of them in parallel) then an S-way allgather of ``d``."""
    shard = model_bytes / group_size
    return AveragingCost(
        scheme="sharded hierarchical",
        bytes_per_process=ring_allreduce_bytes(shard, num_groups) + ring_allgather_bytes(model_bytes, group_size),
        seconds=ring_allreduce_time(shard, num_groups, net) + ring_allgather_time(model_bytes, group_size, net))


def gradient_allreduce_cost(model_bytes: float, workers: int, net: Network) -> AveragingCost:
    """Synchronous SGD's per-step gradient allreduce over all P workers (same formula as flat averaging)."""
    c = flat_averaging_cost(model_bytes, workers, net)
    return AveragingCost(scheme="per-step gradient allreduce", bytes_per_process=c.bytes_per_process, seconds=c.seconds)


@torch.no_grad()
def model_discrepancy(bank: ReplicaBank) -> float:
    """Relative spread of the group models: ``sum_g ||w_g - w_bar||^2 / ||w_bar||^2`` (0 for one group)."""
    num = den = 0.0
    for p in bank.weights:
        mean = p.mean(dim=0, keepdim=True)
        num += float(((p - mean) ** 2).sum())
        den += float((mean ** 2).sum())
    return num / den if den > 0 else 0.0
