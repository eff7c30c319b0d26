"""Distillation on unlabelled data: FedDF-style server ensemble distillation and on-device distillation.

- :func:`labelled_split`: a client's local data split into a labelled and an
  unlabelled part (on-device KD's setting: most local data carry no label).
- :func:`distill`: train a student on unlabelled inputs towards a teacher's
  softened outputs with the book's :func:`repro.federated.kd.kd_loss`.
- :func:`ensemble_logits`: FedDF's teacher, the mean of the client models'
  logits; :func:`server_distill` fine-tunes the aggregated model on the
  server's unlabelled pool towards it (Lin et al., FedDF).  On-device KD
  runs :func:`distill` on a strong client with the small auxiliary model as
  the teacher and the client's own unlabelled data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from repro.devices import resolve_device
from repro.federated.kd import kd_loss


@dataclass(frozen=True, kw_only=True)
class LocalSplit:
    """Indices of a client's labelled and unlabelled samples."""

    labelled: np.ndarray
    unlabelled: np.ndarray


def labelled_split(num_samples: int, labelled_share: float, seed: int) -> LocalSplit:
    """Seeded split of ``num_samples`` local samples; at least one labelled sample when the share is positive."""
    if not 0.0 <= labelled_share <= 1.0:
        raise ValueError(f"labelled_share must be in [0, 1], got {labelled_share}")
    order = np.random.default_rng(seed).permutation(num_samples)
    k = int(round(labelled_share * num_samples))
    k = max(k, 1) if labelled_share > 0 and num_samples else k
    return LocalSplit(labelled=np.sort(order[:k]), unlabelled=np.sort(order[k:]))


def ensemble_logits(models: Sequence[torch.nn.Module]) -> Callable[[torch.Tensor], torch.Tensor]:
    """FedDF's teacher: the mean logits of ``models`` (evaluated without gradients)."""
    def teacher(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for m in models:
                m.eval()
            return torch.stack([m(x) for m in models]).mean(0)

    return teacher


@dataclass(frozen=True, kw_only=True)
class DistillSteps:
    """How a student is distilled: SGD steps on seeded batches of unlabelled inputs towards a teacher's logits.

    Attributes
    ----------
    steps, batch_size, lr, momentum
        The SGD steps.
    temperature
        The distillation temperature ``T``.
    seed
        Seed of the batches.
    device
        Where the student trains (``cpu``, ``cuda`` or ``auto``).
    """

    steps: int
    batch_size: int
    lr: float
    temperature: float
    seed: int
    momentum: float = 0.9
    device: str = "cpu"


def distill(student: torch.nn.Module, teacher: Callable[[torch.Tensor], torch.Tensor], x: np.ndarray,
            how: DistillSteps) -> float:
    """Train ``student`` in place on unlabelled ``x`` towards ``teacher``'s outputs (SGD, seeded batches).

    The student trains on ``how.device`` (the teacher must take inputs there) and
    is back on the CPU on return; batches are drawn on the CPU.

    Returns
    -------
    float
        Mean distillation loss over the steps.
    """
    dev = resolve_device(how.device)
    on_cpu = dev.type == "cpu"
    if not on_cpu:
        student.to(dev)
    gen = np.random.default_rng(how.seed)
    opt = torch.optim.SGD(student.parameters(), lr=how.lr, momentum=how.momentum)
    xt = torch.from_numpy(np.asarray(x)).to(dev)
    total = 0.0
    try:
        for _ in range(how.steps):
            idx = torch.from_numpy(gen.choice(len(xt), size=min(how.batch_size, len(xt)), replace=False)).to(dev)
            target = teacher(xt[idx])
            student.train()
            opt.zero_grad()
            loss = kd_loss(student(xt[idx]), target, how.temperature)
            loss.backward()
            opt.step()
            total += loss.item()
    finally:
        if not on_cpu:
            student.to("cpu")
    return total / max(how.steps, 1)


def server_distill(student: torch.nn.Module, clients: Sequence[torch.nn.Module], pool: np.ndarray,
                   how: DistillSteps) -> float:
    """FedDF's server step: distil the clients' logit ensemble into ``student`` on the unlabelled ``pool``."""
    return distill(student, ensemble_logits(clients), pool, how)
