"""FjORD (Horváth et al.): ordered dropout over nested widths.

A client whose device allows width ``p_max`` receives the ``p_max`` slice of
the global model (as in HeteroFL, :mod:`repro.federated.heterofl`) and, at
every local step, draws a width ``p`` uniformly from the ladder
:data:`WIDTH_LADDER` up to ``p_max`` and trains only the first
``ceil(p * h)`` units of every hidden layer: the later units are zeroed
after their ReLU, so neither their incoming nor their outgoing weights get
a gradient on that step.  The server is HeteroFL's
(:class:`~repro.federated.heterofl.WidthReduced` with ``ordered_dropout``),
averaging each entry over the clients that held it.

Simplification: FjORD's optional self-distillation between widths is left out.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from repro.federated.client import ClientRound, client_app_with, train_locally
from repro.federated.heterofl import slice_units, train_width
from repro.federated.task import TaskSpec

WIDTH_LADDER = (0.25, 0.5, 0.75, 1.0)
"""The discrete widths ordered dropout samples from."""


def ladder_up_to(p_max: float, ladder: Sequence[float] = WIDTH_LADDER) -> list[float]:
    """The ladder's widths not above ``p_max`` (``p_max`` itself if it is below every rung)."""
    rungs = [p for p in ladder if p <= p_max + 1e-9]
    return rungs or [p_max]


class OrderedDropout:
    """Ordered-dropout masks on a model's hidden ReLU outputs, redrawn at every forward pass.

    Parameters
    ----------
    model
        A width-``p_max`` slice of the global MLP.
    full_hidden
        Hidden widths of the global model (masks keep ``ceil(p * h)`` of them).
    widths
        Widths to draw from.
    seed
        Seed of the draws.

    Attributes
    ----------
    drawn
        The width drawn at each forward pass, in order.
    """

    def __init__(self, model: torch.nn.Module, full_hidden: Sequence[int], widths: Sequence[float], seed: int) -> None:
        self.relus = [m for m in model.modules() if isinstance(m, torch.nn.ReLU)]
        if len(self.relus) != len(full_hidden):
            raise ValueError(f"{len(self.relus)} hidden activations for {len(full_hidden)} hidden widths")
        self.full_hidden = list(full_hidden)
        self.widths = list(widths)
        self.rng = np.random.default_rng(seed)
        self.drawn: list[float] = []
        self._keep: list[int] = []
        self._handles = [model.register_forward_pre_hook(self._draw)]
        self._handles += [relu.register_forward_hook(self._mask_of(i)) for i, relu in enumerate(self.relus)]

    def _draw(self, module: torch.nn.Module, args: tuple) -> None:
        p = float(self.rng.choice(self.widths))
        self.drawn.append(p)
        self._keep = [slice_units(h, p) for h in self.full_hidden]

    def _mask_of(self, i: int):
        def hook(module: torch.nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
            keep = self._keep[i]
            if keep >= out.shape[1]:
                return out
            mask = torch.zeros(out.shape[1], dtype=out.dtype, device=out.device)
            mask[:keep] = 1.0
            return out * mask

        return hook

    def remove(self) -> None:
        """Detach the hooks (the model is a per-process work model shared by later rounds)."""
        for h in self._handles:
            h.remove()


def train_ordered_dropout(spec: TaskSpec, rnd: ClientRound, p_max: float) -> float:
    """Local SGD on the width-``p_max`` slice with ordered dropout (one width per step, drawn from the round's seed)."""
    dropout = OrderedDropout(rnd.model, spec.hidden, ladder_up_to(p_max), seed=rnd.settings.seed + 1)
    try:
        return train_locally(rnd.model, rnd.x, rnd.y, rnd.settings)
    finally:
        dropout.remove()


def train_fjord(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """A FjORD client round (HeteroFL's round with ordered-dropout training)."""
    return train_width(spec, msg, context, trainer=lambda rnd, ratio: train_ordered_dropout(spec, rnd, ratio))


def make_fjord_client_app(spec: TaskSpec, run_config: dict | None = None) -> ClientApp:
    """The FjORD ``ClientApp``."""
    return client_app_with(lambda msg, context: train_fjord(spec, msg, context), run_config)
