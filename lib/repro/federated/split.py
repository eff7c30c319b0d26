"""Split learning at a cut layer: activations go up, their gradients come down, and every byte is counted.

A feed-forward model ``f = core o base`` is cut after one of its modules
(:func:`split_sequential`).  In one split step (:func:`split_step`) each
client runs its ``base`` on a batch and sends the cut-layer activations and
labels to the server holding ``core``; the server concatenates the
activations of all its clients (one client in plain split learning, all
clients of an edge in SFETEC), runs the core forward and backward on the
pooled batch, updates the core, and sends each client the gradient of the
loss with respect to its own activations; each client back-propagates that
gradient through its base and updates it.  Autograd does the arithmetic; the
cut only detaches the graph, so the gradients equal end-to-end back-propagation
through the unsplit model on the pooled batch (tested).

Shared by the SFETEC chapter and SplitFed baselines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from repro.federated.tiers import FLOAT_BYTES

LABEL_BYTES = 8
"""Bytes of one label sent with the activations (int64)."""


def split_sequential(model: torch.nn.Sequential, cut: int) -> tuple[torch.nn.Sequential, torch.nn.Sequential]:
    """The base (modules ``[:cut]``) and the core (``[cut:]``) of ``model``; both share its parameters."""
    if not 0 < cut < len(model):
        raise ValueError(f"cut must be in 1..{len(model) - 1}, got {cut}")
    return model[:cut], model[cut:]


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """Bytes one split step moved between one client and its server.

    Attributes
    ----------
    up
        Activations and labels sent to the server.
    down
        Cut-layer gradients sent back.
    """

    up: int
    down: int

    def __add__(self, other: Exchange) -> Exchange:
        return Exchange(up=self.up + other.up, down=self.down + other.down)


@dataclass(frozen=True, kw_only=True)
class SplitBatch:
    """One client's part of a split step: its base, its optimiser and its batch."""

    base: torch.nn.Module
    optimizer: torch.optim.Optimizer
    x: torch.Tensor
    y: torch.Tensor


def split_step(clients: Sequence[SplitBatch], core: torch.nn.Module, core_optimizer: torch.optim.Optimizer,
               ) -> tuple[float, list[Exchange]]:
    """One split-learning SGD step of ``clients`` sharing one server-side ``core``.

    The loss is the mean cross-entropy over the pooled batch.

    Returns
    -------
    loss : float
        The pooled batch's loss.
    exchanges : list of Exchange
        Bytes moved with each client, in order.
    """
    cut_outputs, received = [], []
    for c in clients:
        c.optimizer.zero_grad()
        out = c.base(c.x)
        cut_outputs.append(out)
        received.append(out.detach().requires_grad_(True))  # what crosses the link
    core_optimizer.zero_grad()
    logits = core(torch.cat(received))
    loss = torch.nn.functional.cross_entropy(logits, torch.cat([c.y for c in clients]))
    loss.backward()
    core_optimizer.step()
    exchanges = []
    for c, out, act in zip(clients, cut_outputs, received):
        out.backward(act.grad)  # the gradient sent down, back-propagated through the base
        c.optimizer.step()
        exchanges.append(Exchange(up=act.numel() * FLOAT_BYTES + c.y.numel() * LABEL_BYTES,
                                  down=act.grad.numel() * FLOAT_BYTES))
    return float(loss.item()), exchanges
