"""Sharpness-aware minimisation (SAM) and gradient-norm penalising with per-layer masks and a truncated second pass.

The model is an ``nn.Sequential`` of blocks; a block that owns parameters is a
*layer* in the sense of the layer-wise method.  One step of :func:`sam_step`:

1. forward and backward at ``w`` (the ordinary SGD pass), caching each block's input;
   the gradient ``g(w)`` and the per-layer norms ``||g_l||`` are recorded;
2. perturb the selected layers ``S`` only: ``eps_l = rho * g_l / ||g_S||`` for ``l`` in ``S``,
   ``eps_l = 0`` elsewhere (``S`` = every layer is Foret et al.'s SAM);
3. second forward and backward at ``w + eps``.  With ``truncated=True`` it starts from the cached
   input of the most input-side selected block ``j`` (blocks below ``j`` are unperturbed, so their
   activations are unchanged) and stops there, so the layers below ``j`` keep ``g(w)``;
   batch-norm running statistics are frozen during this pass;
4. the update direction of a selected layer is the gradient-norm-penalty interpolation
   ``(1 - alpha) g(w) + alpha g(w + eps)`` (Zhao et al.'s GNP; ``alpha = 1`` is SAM's ``g(w + eps)``);
   an unselected layer keeps its plain gradient ``g(w)`` (``plain_unselected``) or, as in SAM
   restricted to ``S``, takes the same interpolation where the second pass reached it;
5. restore ``w`` exactly and let the base optimiser step.

The selection rules (:func:`select_layers`) and the truncated pass are our reconstruction of the
layer-wise gradient-norm-penalising method (Lee, KDD 2024) from its abstract and third-party summaries;
the paper's text was not reachable.  One summary gives step 4 (the interpolation for the selected layers
and the plain gradient for the others); :class:`SamConfig` keeps both readings.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

RULES = ("top", "random", "input", "all")


@dataclass(frozen=True, kw_only=True)
class SamConfig:
    """How a (layer-wise) SAM step perturbs and combines gradients.

    Attributes
    ----------
    rho
        Perturbation radius.
    alpha
        Weight of the perturbed gradient in the selected layers' update, ``(1 - alpha) g(w) + alpha g(w + eps)``
        (1: SAM).
    truncated
        Start the second pass at the most input-side selected block instead of the input.
    plain_unselected
        Unselected layers step with ``g(w)``; ``False`` gives them the selected layers' interpolation where the
        second pass reached them (SAM restricted to the selected layers).
    """

    rho: float
    alpha: float = 1.0
    truncated: bool = True
    plain_unselected: bool = True


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """What one SAM step did.

    Attributes
    ----------
    loss
        Loss of the first pass (at ``w``).
    grad_norm
        Whole-model gradient norm ``||g||`` at ``w``.
    layer_norms
        ``||g_l||`` per layer (parametrised block), input side first.
    selected
        Indices (into the layers) of the perturbed layers.
    first_block
        Index (into the blocks) where the second pass starts; ``len(blocks)`` when it is skipped.
    perturbation_norm
        ``||eps||`` actually applied (``rho`` unless ``S`` is empty or ``g_S = 0``).
    """

    loss: float
    grad_norm: float
    layer_norms: tuple[float, ...]
    selected: tuple[int, ...]
    first_block: int
    perturbation_norm: float


def layer_blocks(model: nn.Sequential) -> list[int]:
    """Indices of the blocks that own trainable parameters (the layers)."""
    return [i for i, b in enumerate(model) if any(p.requires_grad for p in b.parameters())]


def select_layers(norms: Sequence[float], k: int, rule: str, rng: np.random.Generator | None = None) -> tuple[int, ...]:
    """Choose the layers to perturb.

    Parameters
    ----------
    norms
        ``||g_l||`` per layer, input side first.
    k
        Number of layers (clipped to the number of layers).
    rule
        ``"top"`` (largest gradient norms), ``"random"`` (uniform, needs ``rng``), ``"input"`` (the ``k``
        most input-side layers) or ``"all"`` (every layer: SAM).

    Returns
    -------
    tuple of int
        Sorted layer indices.
    """
    n = len(norms)
    k = min(k, n)
    if rule == "all":
        return tuple(range(n))
    if rule == "top":
        return tuple(sorted(int(i) for i in np.argsort(-np.asarray(norms), kind="stable")[:k]))
    if rule == "input":
        return tuple(range(k))
    if rule == "random":
        if rng is None:
            raise ValueError("rule 'random' needs an rng")
        return tuple(sorted(int(i) for i in rng.choice(n, size=k, replace=False)))
    raise ValueError(f"unknown rule {rule!r}; choose one of {RULES}")


class LayerSelector:
    """A selection rule refreshed every ``refresh_steps`` calls (the paper's periodic refresh; default: each epoch).

    Parameters
    ----------
    rule, k
        As in :func:`select_layers`.
    refresh_steps
        Calls between refreshes; in between the last selection is reused.
    seed
        Seed of the random rule.
    """

    def __init__(self, rule: str, k: int, refresh_steps: int, seed: int = 0) -> None:
        if rule not in RULES:
            raise ValueError(f"unknown rule {rule!r}; choose one of {RULES}")
        if refresh_steps < 1:
            raise ValueError(f"refresh_steps must be >= 1, got {refresh_steps}")
        self.rule, self.k, self.refresh_steps = rule, k, refresh_steps
        self.rng = np.random.default_rng(seed)
        self.calls = 0
        self.current: tuple[int, ...] = ()

    def __call__(self, norms: tuple[float, ...]) -> tuple[int, ...]:
        """The selection for this step, refreshed from ``norms`` when due."""
        if self.calls % self.refresh_steps == 0:
            self.current = select_layers(norms, self.k, self.rule, self.rng)
        self.calls += 1
        return self.current


@contextlib.contextmanager
def frozen_batchnorm_stats(model: nn.Module) -> Iterator[None]:
    """Keep batch-norm running statistics and batch counters unchanged (momentum 0) while the block runs."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm.BatchNorm1d | nn.modules.batchnorm.BatchNorm2d
                                                    | nn.modules.batchnorm.BatchNorm3d)]
    saved = [(m.momentum, None if m.num_batches_tracked is None else m.num_batches_tracked.clone()) for m in bns]
    for m in bns:
        m.momentum = 0.0
    try:
        yield
    finally:
        for m, (mom, count) in zip(bns, saved):
            m.momentum = mom
            if count is not None and m.num_batches_tracked is not None:
                m.num_batches_tracked.copy_(count)


def _grad_norm(params: Sequence[torch.Tensor]) -> float:
    sq = sum(float(p.grad.detach().pow(2).sum()) for p in params if p.grad is not None)
    return sq ** 0.5


def sam_step(model: nn.Sequential, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
             x: torch.Tensor, y: torch.Tensor, optimizer: torch.optim.Optimizer, config: SamConfig,
             selector: Callable[[tuple[float, ...]], Sequence[int]] | None) -> StepRecord:
    """One (layer-wise) SAM step; ``selector=None`` is a plain SGD step (no second pass).

    Parameters
    ----------
    model
        The blocks.
    loss_fn
        ``loss_fn(output, y)`` returning a scalar.
    x, y
        The mini-batch.
    optimizer
        The base optimiser over ``model.parameters()``.
    config
        Radius, interpolation, truncation and the unselected layers' gradient.
    selector
        Called with the first pass's per-layer gradient norms, returns the layer indices to perturb
        (e.g. a :class:`LayerSelector`); ``None`` for SGD.

    Returns
    -------
    StepRecord
        Loss, gradient norms, selection and where the second pass started.
    """
    blocks = list(model)
    layers = layer_blocks(model)
    optimizer.zero_grad(set_to_none=True)
    inputs = []
    out = x
    for b in blocks:
        inputs.append(out)
        out = b(out)
    loss = loss_fn(out, y)
    loss.backward()
    layer_params = [[p for p in blocks[i].parameters() if p.requires_grad] for i in layers]
    norms = tuple(_grad_norm(ps) for ps in layer_params)
    total = float(np.sqrt(sum(n * n for n in norms)))
    if selector is None:
        optimizer.step()
        return StepRecord(loss=float(loss.detach()), grad_norm=total, layer_norms=norms, selected=(),
                          first_block=len(blocks), perturbation_norm=0.0)
    selected = tuple(sorted(selector(norms)))
    norm_s = float(np.sqrt(sum(norms[i] ** 2 for i in selected)))
    scale = config.rho / norm_s if norm_s > 0 else 0.0
    saved: dict[nn.Parameter, torch.Tensor] = {}
    applied = 0.0
    with torch.no_grad():
        for i in selected:
            for p in layer_params[i]:
                if p.grad is None:
                    continue
                saved[p] = p.detach().clone()
                eps = p.grad * scale
                applied += float(eps.pow(2).sum())
                p.add_(eps)
    start = layers[selected[0]] if (config.truncated and selected) else 0
    chosen = {id(p) for i in selected for p in layer_params[i]}
    first: dict[nn.Parameter, torch.Tensor | None] = {}
    for b in blocks[start:]:
        for p in b.parameters():
            first[p] = None if p.grad is None else p.grad.detach().clone()
            p.grad = None
    with frozen_batchnorm_stats(model):
        out = inputs[start].detach() if start > 0 else x
        for b in blocks[start:]:
            out = b(out)
        loss_fn(out, y).backward()
    with torch.no_grad():
        for p, w in saved.items():
            p.copy_(w)
        for p, g1 in first.items():
            if g1 is None or p.grad is None:
                continue
            if id(p) not in chosen and config.plain_unselected:
                p.grad.copy_(g1)
            elif config.alpha != 1.0:
                p.grad.mul_(config.alpha).add_(g1, alpha=1.0 - config.alpha)
    optimizer.step()
    return StepRecord(loss=float(loss.detach()), grad_norm=total, layer_norms=norms, selected=selected,
                      first_block=start, perturbation_norm=applied**0.5)


def second_pass_fraction(first_block: int, block_flops: Sequence[float]) -> float:
    """Compute of a second pass starting at ``first_block`` as a fraction of a full one (forward FLOPs proxy)."""
    total = float(sum(block_flops))
    return float(sum(block_flops[first_block:])) / total if total > 0 else 0.0
