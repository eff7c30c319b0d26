"""FedDCT's divide-and-co-train pieces (Nguyen et al.; mechanics from the authors' code, vinuni-vishc/fedDCT).

A large model is replaced by ``S`` narrower sub-models; the ensemble's
output is the mean of their logits (:class:`CoTrainedEnsemble`).  Each
round the clients are grouped at random into clusters of ``S``
(:func:`random_clusters`); client ``s`` of a cluster trains sub-model ``s``.
The training loss of a batch is ``sum_s CE(p_s, y) + w_cot * JS`` where
``JS = H(mean_s p_s) - mean_s H(p_s)`` (:func:`co_training_loss`), and
``w_cot`` rises linearly to its final value over a warm-up
(:func:`cot_weight`, with the code's floor).

Sub-model widths follow SplitNet's rule that keeps the total parameter count
about constant: width ``/ sqrt(S)`` (:func:`sub_width`).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

COT_FLOOR = 0.005
"""The smallest co-training weight during warm-up (the authors' code)."""


def sub_width(width: int, split_factor: int) -> int:
    """Width of each of ``split_factor`` sub-models of a layer of ``width`` units (SplitNet: ``/ sqrt(S)``)."""
    if split_factor < 1:
        raise ValueError(f"split_factor must be >= 1, got {split_factor}")
    return max(1, int(round(width / math.sqrt(split_factor))))


class CoTrainedEnsemble(torch.nn.Module):
    """``S`` sub-models whose ensemble output is the mean of their logits.

    Parameters
    ----------
    members
        The sub-models (same input and output shapes).
    """

    def __init__(self, members: Sequence[torch.nn.Module]) -> None:
        super().__init__()
        self.members = torch.nn.ModuleList(members)

    def member_logits(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each sub-model's logits."""
        return [m(x) for m in self.members]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The ensemble's logits: the mean of the members'."""
        return torch.stack(self.member_logits(x)).mean(0)


def js_divergence(logits: Sequence[torch.Tensor]) -> torch.Tensor:
    """Generalised Jensen-Shannon divergence ``H(mean_s p_s) - mean_s H(p_s)`` of the members' softmaxes, batch mean."""
    probs = [torch.softmax(z, dim=1) for z in logits]
    log_probs = [torch.log_softmax(z, dim=1) for z in logits]
    mean = torch.stack(probs).mean(0)
    entropy_of_mean = -(mean * torch.log(mean.clamp_min(1e-12))).sum(1)
    mean_entropy = torch.stack([-(p * lp).sum(1) for p, lp in zip(probs, log_probs)]).mean(0)
    return (entropy_of_mean - mean_entropy).mean()


def co_training_loss(logits: Sequence[torch.Tensor], y: torch.Tensor, weight: float) -> torch.Tensor:
    """``sum_s CE(logits_s, y) + weight * JS``."""
    ce = sum(torch.nn.functional.cross_entropy(z, y) for z in logits)
    return ce + weight * js_divergence(logits) if len(logits) > 1 else ce


def cot_weight(epoch: int, final: float = 0.5, warmup: int = 40) -> float:
    """The co-training weight at ``epoch``: linear warm-up to ``final`` over ``warmup`` epochs, floored at :data:`COT_FLOOR`."""
    if warmup <= 0:
        return final
    return max(COT_FLOOR, final * min(1.0, epoch / warmup))


def random_clusters(clients: Sequence[int], split_factor: int, seed: int) -> list[list[int]]:
    """A seeded grouping of ``clients`` into clusters of ``split_factor`` (leftover clients sit the round out)."""
    order = np.random.default_rng(seed).permutation(np.asarray(clients))
    n = len(order) // split_factor
    return [sorted(int(c) for c in order[i * split_factor:(i + 1) * split_factor]) for i in range(n)]
