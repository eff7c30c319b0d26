"""Client capability tiers and the memory model of one local training step.

A tier names how much of the model a client can train: ``strong`` clients
train every layer, ``moderate`` and ``weak`` ones only some output-side
layers (EmbracingFL), a narrower model (HeteroFL, FjORD) or a smaller model
(on-device distillation, FedDCT's sub-models).

The memory model counts, for one SGD step on a batch, the bytes of

- the parameters of the trained layers, their gradients and the optimiser's
  per-parameter state (one momentum buffer for SGD with momentum);
- the activations autograd keeps for the backward pass: the input of the
  first trained layer and the output of every trained layer (for an MLP of
  ``Linear`` + ``ReLU`` layers a ReLU output is the next layer's input, so
  each is stored once);
- the frozen, input-side part run forward only, layer by layer: the largest
  frozen layer's parameters and the largest pair of activations it streams.

:func:`measure_step_memory` counts the same tensors in a real step (the
tensors autograd saves, the gradients and the optimiser state torch
allocated), so the model can be checked against torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

FLOAT_BYTES = 4


@dataclass(frozen=True, kw_only=True)
class Tier:
    """A client capability tier.

    Attributes
    ----------
    name
        ``strong``, ``moderate`` or ``weak``.
    trained_layers
        Output-side layers the tier trains under partial training (0: it cannot take part).
    width
        Width ratio of the tier's sub-model under width reduction (HeteroFL, FjORD).
    """

    name: str
    trained_layers: int
    width: float

    def __post_init__(self) -> None:
        if self.trained_layers < 0:
            raise ValueError(f"trained_layers must be >= 0, got {self.trained_layers}")
        if not 0.0 < self.width <= 1.0:
            raise ValueError(f"width must be in (0, 1], got {self.width}")


def assign_tiers(num_clients: int, shares: Sequence[float], tiers: Sequence[Tier], seed: int) -> list[Tier]:
    """Give each client a tier so that the tiers' counts follow ``shares`` (rounded, shuffled with ``seed``).

    Parameters
    ----------
    num_clients
        Number of clients.
    shares
        Share of clients in each tier (sums to 1), in the order of ``tiers``.
    tiers
        The tiers.
    seed
        Seed of the shuffle deciding which client gets which tier.
    """
    if len(shares) != len(tiers):
        raise ValueError(f"{len(shares)} shares for {len(tiers)} tiers")
    if abs(sum(shares) - 1.0) > 1e-6:
        raise ValueError(f"shares must sum to 1, got {sum(shares)}")
    counts = np.floor(np.asarray(shares) * num_clients).astype(int)
    rest = num_clients - counts.sum()
    order = np.argsort(-(np.asarray(shares) * num_clients - counts), kind="stable")
    counts[order[:rest]] += 1
    labels = np.repeat(np.arange(len(tiers)), counts)
    np.random.default_rng(seed).shuffle(labels)
    return [tiers[int(i)] for i in labels]


@dataclass(frozen=True, kw_only=True)
class LayerShape:
    """One ``Linear`` layer of a feed-forward model: its name, input and output widths."""

    name: str
    fan_in: int
    fan_out: int

    @property
    def parameters(self) -> int:
        """Weights and bias."""
        return self.fan_in * self.fan_out + self.fan_out


def linear_layers(model: torch.nn.Module) -> list[LayerShape]:
    """The model's ``Linear`` layers, input side first."""
    return [LayerShape(name=n, fan_in=m.in_features, fan_out=m.out_features) for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear)]


@dataclass(frozen=True, kw_only=True)
class StepMemory:
    """Bytes one local SGD step holds, by kind.

    Attributes
    ----------
    trained_parameters, gradients, optimizer_state, activations
        The trained part: its weights, their gradients, the optimiser's
        buffers, and the activations kept for backward.
    frozen_forward
        The frozen part run forward only (largest frozen layer and its input and output); 0 without one.
    """

    trained_parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    frozen_forward: int = 0

    @property
    def trained(self) -> int:
        """Bytes of the trained part (what :func:`measure_step_memory` measures)."""
        return self.trained_parameters + self.gradients + self.optimizer_state + self.activations

    @property
    def total(self) -> int:
        """Peak bytes of the step under the model: the trained part plus the streamed frozen part."""
        return self.trained + self.frozen_forward


def step_memory(layers: Sequence[LayerShape], trained_layers: int, batch_size: int,
                optimizer_slots: int = 1) -> StepMemory:
    """The memory model of one SGD step that trains the last ``trained_layers`` layers.

    Parameters
    ----------
    layers
        The model's layers, input side first (:func:`linear_layers`).
    trained_layers
        Output-side layers trained (``len(layers)``: all).
    batch_size
        Samples in the batch.
    optimizer_slots
        Per-parameter buffers of the optimiser (SGD with momentum: 1; plain SGD: 0; Adam: 2).
    """
    if not 0 <= trained_layers <= len(layers):
        raise ValueError(f"trained_layers must be in 0..{len(layers)}, got {trained_layers}")
    cut = len(layers) - trained_layers
    trained, frozen = layers[cut:], layers[:cut]
    p = sum(lay.parameters for lay in trained)
    acts = (trained[0].fan_in + sum(lay.fan_out for lay in trained)) * batch_size if trained else 0
    stream = 0
    if frozen:
        stream = max(lay.parameters for lay in frozen) + batch_size * max(lay.fan_in + lay.fan_out for lay in frozen)
    return StepMemory(trained_parameters=FLOAT_BYTES * p, gradients=FLOAT_BYTES * p,
                      optimizer_state=FLOAT_BYTES * p * optimizer_slots, activations=FLOAT_BYTES * acts,
                      frozen_forward=FLOAT_BYTES * stream)


def memory_fractions(layers: Sequence[LayerShape], batch_size: int, optimizer_slots: int = 1) -> list[float]:
    """Peak memory of training the last ``k`` layers relative to training all, for ``k = 0..len(layers)``."""
    full = step_memory(layers, len(layers), batch_size, optimizer_slots).total
    return [step_memory(layers, k, batch_size, optimizer_slots).total / full for k in range(len(layers) + 1)]


def layers_within(layers: Sequence[LayerShape], budget: float, batch_size: int, optimizer_slots: int = 1) -> int:
    """The most output-side layers a client with ``budget`` (share of the full step's memory) can train."""
    fractions = memory_fractions(layers, batch_size, optimizer_slots)
    return max(k for k, f in enumerate(fractions) if f <= budget + 1e-12)


def measure_step_memory(model: torch.nn.Module, trained: Sequence[str], x: torch.Tensor, y: torch.Tensor,
                        momentum: float = 0.9, lr: float = 0.01) -> int:
    """Bytes of the trained part of one real SGD step, counted from the tensors torch holds.

    The parameters named in ``trained`` (state-dict keys) require gradients,
    the others are frozen.  One step runs with the activations autograd saves
    for backward recorded by ``torch.autograd.graph.saved_tensors_hooks``
    (distinct storages, parameters and integer targets left out); then the
    gradients and the optimiser state torch allocated are added, with the
    trained parameters themselves.  ``requires_grad`` is restored afterwards.
    """
    named = dict(model.named_parameters())
    unknown = set(trained) - set(named)
    if unknown:
        raise KeyError(f"unknown parameters {sorted(unknown)}")
    before = {k: p.requires_grad for k, p in named.items()}
    param_ptrs = {p.untyped_storage().data_ptr() for p in named.values()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in param_ptrs and t.is_floating_point():
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    try:
        for k, p in named.items():
            p.requires_grad_(k in trained)
            p.grad = None
        params = [named[k] for k in trained]
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        grads = sum(p.grad.nbytes for p in params if p.grad is not None)
        state = sum(v.nbytes for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
        weights = sum(p.nbytes for p in params)
    finally:
        for k, p in named.items():
            p.requires_grad_(before[k])
            p.grad = None
    return int(sum(saved.values()) + grads + state + weights)


@dataclass(frozen=True, kw_only=True)
class StepCount:
    """One local SGD step of a model under the memory model, and torch's count of the same step.

    Attributes
    ----------
    parameters
        Parameters of the whole model.
    modelled
        :func:`step_memory` of the step.
    measured
        :func:`measure_step_memory` of the step: bytes of its trained part.
    """

    parameters: int
    modelled: StepMemory
    measured: int


def count_step(model: torch.nn.Module, batch_size: int, momentum: float, trained_layers: int | None = None) -> StepCount:
    """Model and measure one SGD step of ``model`` on a batch of zeros, training its last ``trained_layers`` layers.

    Parameters
    ----------
    model
        A feed-forward model of ``Linear`` layers (:func:`linear_layers`).
    batch_size
        Samples in the batch.
    momentum
        SGD momentum; the optimiser keeps one buffer per parameter when it is positive, none otherwise.
    trained_layers
        Output-side ``Linear`` layers trained (``None``: all); the others are frozen.
    """
    layers = linear_layers(model)
    k = len(layers) if trained_layers is None else trained_layers
    modules = dict(model.named_modules())
    trained = [f"{lay.name}.{name}" for lay in layers[len(layers) - k:] for name, _ in modules[lay.name].named_parameters()]
    x = torch.zeros(batch_size, layers[0].fan_in)
    y = torch.zeros(batch_size, dtype=torch.long)
    return StepCount(
        parameters=sum(lay.parameters for lay in layers),
        modelled=step_memory(layers, k, batch_size, 1 if momentum > 0 else 0),
        measured=measure_step_memory(model, trained, x, y, momentum=momentum),
    )
