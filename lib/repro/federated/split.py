"""Split learning at a cut layer: activations go up, their gradients come down, and every byte is counted.

A feed-forward model ``f = core o base`` is cut after one of its modules
(:func:`split_sequential`).  In one split step (:func:`split_step`) each
client runs its ``base`` on a batch and sends the cut-layer activations and
labels to the server holding ``core``; the server concatenates the
activations of all its clients (one client in plain split learning, all
clients of an edge in SFETEC), runs the core forward and backward on the
pooled batch and updates the core with the gradient of the pooled mean loss;
it sends each client the gradient of *that client's own* mean loss with
respect to its activations, and the client back-propagates it through its
base and updates it.  So the core takes the step of centralised SGD on the
pooled batch, and each base the step its client would take alone, as in
SplitFed (Thapa et al.), where every client's server-side copy is trained on
its own loss.  Autograd does the arithmetic; the cut only detaches the graph
(tested against back-propagation through the unsplit model).

Shared by the SFETEC chapter and the SplitFed baselines of SFETEC and FedDCT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from repro.federated.tiers import FLOAT_BYTES

LABEL_BYTES = 8
"""Bytes of one label sent with the activations (int64)."""


def split_sequential(model: torch.nn.Module, cut: int) -> tuple[torch.nn.Sequential, torch.nn.Sequential]:
    """The base (modules ``[:cut]``) and the core (``[cut:]``) of ``model``; both share its parameters.

    Raises
    ------
    TypeError
        If ``model`` is not an ``nn.Sequential`` (only a chain of modules can be cut).
    ValueError
        If ``cut`` leaves the base or the core empty.
    """
    if not isinstance(model, torch.nn.Sequential):
        raise TypeError(f"parameter 'model': only an nn.Sequential can be cut, got {type(model).__name__}")
    if not 0 < cut < len(model):
        raise ValueError(f"parameter 'cut': must be in 1..{len(model) - 1}, got {cut}")
    base, core = model[:cut], model[cut:]
    assert isinstance(base, torch.nn.Sequential) and isinstance(core, torch.nn.Sequential)
    return base, core


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

    The core descends the mean cross-entropy over the pooled batch.  Each
    client's base descends the mean cross-entropy over *its own* batch: the
    gradient the server sends down is that of the client's own loss, which is
    the pooled loss's gradient times ``pooled / own`` batch size (a client's
    activations enter the pooled mean only through its own share of it).
    Sending the pooled loss's gradient instead would move each of ``k``
    equal clients by ``1/k`` of its own step.

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
    pooled = sum(len(c.y) for c in clients)
    exchanges = []
    for c, out, act in zip(clients, cut_outputs, received):
        assert act.grad is not None
        own = act.grad * (pooled / len(c.y))  # d(own mean loss)/d(own activations), what is sent down
        out.backward(own)
        c.optimizer.step()
        exchanges.append(Exchange(up=act.numel() * FLOAT_BYTES + c.y.numel() * LABEL_BYTES,
                                  down=own.numel() * FLOAT_BYTES))
    return float(loss.item()), exchanges
