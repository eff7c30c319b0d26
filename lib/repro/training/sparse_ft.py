"""Sparse fine-tuning: score functions, per-layer budget allocators, gradient masks, and PEFT baselines.

A sparse fine-tuning run picks a binary mask over the pre-trained weights with a global budget ``K``
entries, trains only the masked entries (a gradient hook multiplies each gradient by its mask) and leaves
every other entry at its pre-trained value exactly (the optimiser must not decay frozen entries: use
weight decay 0).

GEM (gradient-to-weight ratio and entropy-guided masking) scores an entry by ``G / (|w0| + eps)``, with
``G`` the accumulated absolute gradient over a few calibration batches, and gives layer ``l`` a budget
proportional to ``H_l * n_l``, the Shannon entropy of the histogram of its values times its size.
The formulas are our reconstruction from the abstract (the method section was not available); the
variants are flags: :data:`SCORES` and :data:`ALLOCATORS`.

Baselines: LoRA from ``peft`` (:func:`lora_model`); BitFit (bias-only) is set up by hand with
``requires_grad`` because ``peft`` has no BitFit method.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import torch
from torch import nn

SCORES = ("ratio", "grad", "weight", "random")
ALLOCATORS = ("entropy", "entropy_only", "uniform")


def accumulate_gradients(model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                         batches: Iterable[tuple[torch.Tensor, torch.Tensor]], names: list[str]) -> dict[str, torch.Tensor]:
    """``G = sum_t |dL_t/dw|`` over the calibration batches, for the named parameters (model unchanged)."""
    params = dict(model.named_parameters())
    acc = {n: torch.zeros_like(params[n]) for n in names}
    for x, y in batches:
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        for n in names:
            if params[n].grad is not None:
                acc[n] += params[n].grad.detach().abs()
    model.zero_grad(set_to_none=True)
    return acc


def score(kind: str, grad_acc: torch.Tensor, weight: torch.Tensor, eps: float,
          rng: torch.Generator | None = None) -> torch.Tensor:
    """Per-entry score: ``ratio`` = G / (|w| + eps) (GEM), ``grad`` = G, ``weight`` = |w|, ``random`` = U(0, 1)."""
    if kind == "ratio":
        return grad_acc / (weight.detach().abs() + eps)
    if kind == "grad":
        return grad_acc.clone()
    if kind == "weight":
        return weight.detach().abs()
    if kind == "random":
        return torch.rand(weight.shape, generator=rng)
    raise ValueError(f"unknown score {kind!r}; choose one of {SCORES}")


def layer_entropy(weight: torch.Tensor, bins: int = 256) -> float:
    """Shannon entropy (nats) of the histogram of a tensor's values, ``bins`` equal-width bins over [min, max]."""
    w = weight.detach().flatten().double()
    lo, hi = float(w.min()), float(w.max())
    if hi <= lo:
        return 0.0
    counts = torch.histc(w, bins=bins, min=lo, max=hi)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


def allocate(sizes: list[int], entropies: list[float], budget: int, rule: str) -> list[int]:
    """Split ``budget`` entries over layers; returns ``k_l`` with ``sum k_l == min(budget, sum n_l)`` and ``k_l <= n_l``.

    Parameters
    ----------
    sizes
        ``n_l``, entries per layer.
    entropies
        ``H_l`` per layer (see :func:`layer_entropy`).
    budget
        ``K``.
    rule
        ``entropy`` (weights ``H_l n_l``), ``entropy_only`` (``H_l``) or ``uniform`` (``n_l``: the same density
        in every layer).

    Returns
    -------
    list of int
        Largest-remainder rounding of the proportional shares; the share of a full layer goes to the others.
    """
    n = np.asarray(sizes, dtype=float)
    h = np.asarray(entropies, dtype=float)
    weight = {"entropy": h * n, "entropy_only": h, "uniform": n}.get(rule)
    if weight is None:
        raise ValueError(f"unknown allocator {rule!r}; choose one of {ALLOCATORS}")
    budget = int(min(budget, n.sum()))
    k = np.zeros(len(n), dtype=int)
    open_ = weight > 0
    while k.sum() < budget and open_.any():
        left = budget - k.sum()
        share = np.where(open_, weight, 0.0)
        ideal = left * share / share.sum()
        add = np.minimum(np.floor(ideal).astype(int), (n - k).astype(int))
        rem = left - add.sum()
        order = np.argsort(-(ideal - np.floor(ideal)), kind="stable")
        for i in order:
            if rem <= 0:
                break
            if open_[i] and k[i] + add[i] < n[i]:
                add[i] += 1
                rem -= 1
        k += add
        open_ &= k < n
        if add.sum() == 0:
            break
    return [int(v) for v in k]


def build_masks(params: dict[str, torch.Tensor], grad_acc: dict[str, torch.Tensor], score_kind: str, allocator: str,
                budget: int, eps_relative: float = 1e-8, seed: int = 0) -> dict[str, torch.Tensor]:
    """Top-``k_l`` masks per layer.

    Parameters
    ----------
    params
        The eligible parameters by name.
    grad_acc
        Their accumulated absolute gradients (unused by ``weight`` and ``random``).
    score_kind, allocator
        One of :data:`SCORES` and of :data:`ALLOCATORS`.
    budget
        ``K``, total trainable entries.
    eps_relative
        ``eps`` of the ratio score, relative to each layer's standard deviation.
    seed
        Seed of the random score.

    Returns
    -------
    dict
        Name -> boolean mask of the parameter's shape; ``sum`` of all masks equals ``min(K, total)``.
    """
    names = list(params)
    ks = allocate([params[n].numel() for n in names], [layer_entropy(params[n]) for n in names], budget, allocator)
    rng = torch.Generator().manual_seed(seed)
    masks = {}
    for n, k in zip(names, ks):
        w = params[n]
        eps = eps_relative * float(w.detach().std()) if w.numel() > 1 else eps_relative
        s = score(score_kind, grad_acc.get(n, torch.zeros_like(w)), w, eps, rng).flatten()
        m = torch.zeros(w.numel(), dtype=torch.bool)
        if k:
            m[torch.topk(s, k, sorted=False).indices] = True
        masks[n] = m.view(w.shape)
    return masks


class GradientMask:
    """Train only the masked entries: a hook multiplies each gradient by its mask.

    Parameters not in ``masks`` are left as they are (``requires_grad`` decides whether they train).
    Call :meth:`remove` to detach the hooks.
    """

    def __init__(self, model: nn.Module, masks: dict[str, torch.Tensor]) -> None:
        params = dict(model.named_parameters())
        self.masks = masks
        self.handles = []
        for n, m in masks.items():
            mf = m.to(device=params[n].device, dtype=params[n].dtype)
            self.handles.append(params[n].register_hook(lambda g, mf=mf: g * mf))

    def remove(self) -> None:
        """Detach every hook."""
        for h in self.handles:
            h.remove()
        self.handles = []


def lora_model(model: nn.Module, rank: int, targets: list[str], trainable: list[str]) -> nn.Module:
    """Wrap ``model`` with ``peft`` LoRA adapters of rank ``rank`` on the ``targets`` modules.

    ``trainable`` names modules trained in full beside the adapters (the task head).
    """
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, modules_to_save=trainable, lora_dropout=0.0)
    return get_peft_model(model, cfg)


def bitfit(model: nn.Module, trainable: list[str]) -> int:
    """BitFit: freeze everything but the biases and the ``trainable`` modules; returns the trainable entries."""
    for n, p in model.named_parameters():
        p.requires_grad_(n.endswith("bias") or any(n.startswith(t + ".") for t in trainable))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
