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

FjORD's self-distillation (:class:`SelfDistillation`, on when
:func:`make_fjord_client_app` gets one): at every step the client also runs
its widest slice ``p_max`` on the same batch, trains it on cross-entropy,
and trains the drawn width ``p`` on ``(1 - alpha) CE + alpha KD`` with the
``p_max`` logits as the (undifferentiated) teacher; both gradients go into
one optimiser step.  :data:`AUTHORS_DISTILLATION` holds the constants of
the authors' own implementation.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from repro.devices import resolve_device
from repro.federated.client import ClientRound, client_app_with, train_locally
from repro.federated.heterofl import slice_units, train_width
from repro.federated.kd import kd_loss
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
        self._pinned: float | None = None
        self._handles = [model.register_forward_pre_hook(self._draw)]
        self._handles += [relu.register_forward_hook(self._mask_of(i)) for i, relu in enumerate(self.relus)]

    def _draw(self, module: torch.nn.Module, args: tuple) -> None:
        if self._pinned is not None:
            return
        p = float(self.rng.choice(self.widths))
        self.drawn.append(p)
        self._keep = [slice_units(h, p) for h in self.full_hidden]

    @contextmanager
    def pinned(self, width: float) -> Iterator[None]:
        """Forward passes inside run at ``width`` and draw nothing (the draws outside are unchanged)."""
        saved = self._keep
        self._pinned = width
        self._keep = [slice_units(h, width) for h in self.full_hidden]
        try:
            yield
        finally:
            self._pinned, self._keep = None, saved

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


@dataclass(frozen=True, kw_only=True)
class SelfDistillation:
    """FjORD's in-place self-distillation from a client's widest slice to the width drawn at a step.

    Attributes
    ----------
    weight
        ``alpha``: the drawn width trains on ``(1 - alpha) CE + alpha KD`` (1: on the teacher's outputs alone).
    temperature
        ``T`` of the distillation loss (:func:`repro.federated.kd.kd_loss`, which scales by ``T^2``).
    """

    weight: float = 1.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"parameter 'weight': alpha must lie in [0, 1], got {self.weight}")
        if self.temperature <= 0:
            raise ValueError(f"parameter 'temperature': must be > 0, got {self.temperature}")


AUTHORS_DISTILLATION = SelfDistillation(weight=1.0, temperature=1.0)
"""The authors' own FjORD client (the Flower baseline by Laskaridis and Horváth, ``baselines/fjord/fjord/models.py``
of adap/flower at 0b6f6795): the drawn width is trained by cross-entropy against ``softmax`` of the detached ``p_max``
logits and nothing else, i.e. ``alpha = 1`` and ``T = 1`` (soft-target cross-entropy and ``KL`` differ by the
teacher's entropy, a constant, so their gradients agree)."""


def fjord_step_loss(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor,
                    distillation: SelfDistillation) -> torch.Tensor:
    """One distilled FjORD step's loss: ``CE(teacher) + (1 - alpha) CE(student) + alpha KD(student | teacher)``.

    ``teacher`` is the ``p_max`` logits, ``student`` those of the drawn width;
    the distillation term does not differentiate the teacher.
    """
    ce = torch.nn.functional.cross_entropy
    w = distillation.weight
    return ce(teacher, labels) + (1.0 - w) * ce(student, labels) + w * kd_loss(student, teacher,
                                                                              distillation.temperature)


def train_ordered_dropout(spec: TaskSpec, rnd: ClientRound, p_max: float,
                          distillation: SelfDistillation | None = None) -> float:
    """Local SGD on the width-``p_max`` slice with ordered dropout (one width per step, drawn from the round's seed).

    With ``distillation`` every step minimises :func:`fjord_step_loss`: the
    batch also runs at ``p_max`` (a forward pass that draws no width, so the
    widths drawn are those of the plain run); when the drawn width is
    ``p_max`` itself its logits are the teacher's (the same numbers a second
    pass would give).  ``None`` is plain ordered dropout.

    Returns
    -------
    float
        Mean cross-entropy of the drawn widths over the steps.
    """
    dropout = OrderedDropout(rnd.model, spec.hidden, ladder_up_to(p_max), seed=rnd.settings.seed + 1)
    try:
        if distillation is None:
            return train_locally(rnd.model, rnd.x, rnd.y, rnd.settings)
        dev = resolve_device(rnd.settings.device)
        xt, yt = torch.from_numpy(rnd.x).to(dev), torch.from_numpy(rnd.y).to(dev)

        def distilled(student: torch.Tensor, idx: torch.Tensor) -> list[torch.Tensor]:
            if dropout.drawn[-1] >= p_max - 1e-9:
                teacher = student
            else:
                with dropout.pinned(p_max):
                    teacher = rnd.model(xt[idx])
            # local_sgd already adds CE(student); the term brings the sum to fjord_step_loss
            plain = torch.nn.functional.cross_entropy(student, yt[idx])
            return [fjord_step_loss(student, teacher, yt[idx], distillation) - plain]

        return train_locally(rnd.model, rnd.x, rnd.y, rnd.settings, penalties=distilled)
    finally:
        dropout.remove()


def train_fjord(spec: TaskSpec, msg: Message, context: Context, distillation: SelfDistillation | None = None) -> Message:
    """A FjORD client round (HeteroFL's round with ordered-dropout training, distilled if ``distillation``)."""
    return train_width(spec, msg, context,
                       trainer=lambda rnd, ratio: train_ordered_dropout(spec, rnd, ratio, distillation))


def make_fjord_client_app(spec: TaskSpec, run_config: dict | None = None,
                          distillation: SelfDistillation | None = None) -> ClientApp:
    """The FjORD ``ClientApp``; ``distillation`` turns on self-distillation (``None``: ordered dropout alone)."""
    return client_app_with(lambda msg, context: train_fjord(spec, msg, context, distillation), run_config)
