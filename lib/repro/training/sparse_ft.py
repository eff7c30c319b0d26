"""Sparse fine-tuning: score functions, per-layer budget allocators, gradient masks, and PEFT baselines.

A sparse fine-tuning run picks a binary mask over the pre-trained weights with a global budget ``K``
entries, trains only the masked entries (a gradient hook multiplies each gradient by its mask) and leaves
every other entry at its pre-trained value exactly (the optimiser must not decay frozen entries: use
weight decay 0).

GEM (gradient-to-weight ratio and entropy-guided masking), as the authors' code computes it
(github.com/sungminkg/GEM_PEFT at 590f44c, ``PEFT/entropy_masking.py`` and ``run.py``): the gradients of
a calibration pass are summed with their sign, ``G = sum_t dL_t/dw``; an entry scores
``r = |G| / (|w0| + 1e-8)``; layer ``l`` gets a share of ``K`` proportional to ``||r_l||_2 * H(p_l)``, with
``p_l = r_l / sum(r_l)`` and ``H`` the Shannon entropy; each layer trains its top-``k_l`` entries.  The
authors' baselines (top-|g|, the ratio alone, random) give every eligible layer the same number of entries
(the ``uniform`` allocator on equal-sized layers).  Our earlier reconstruction from the abstract (budget
proportional to the entropy of a histogram of the layer's values times its size) stays as the
``entropy`` allocator.  The variants are flags: :data:`SCORES` and :data:`ALLOCATORS`.

Baselines: LoRA from ``peft`` (:func:`lora_model`); BitFit (bias-only) is set up by hand with
``requires_grad`` because ``peft`` has no BitFit method.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np
import torch
from torch import nn

SCORES = ("ratio", "grad", "weight", "random")
ALLOCATORS = ("gem", "entropy", "entropy_only", "uniform")


def accumulate_gradients(model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                         batches: Iterable[tuple[torch.Tensor, torch.Tensor]], names: list[str], *,
                         absolute: bool = False) -> dict[str, torch.Tensor]:
    """The calibration gradients of the named parameters, summed over ``batches`` (the model is unchanged).

    Parameters
    ----------
    model, loss_fn
        The model and ``loss_fn(output, y)``.
    batches
        The calibration batches ``(x, y)``.
    names
        The parameters whose gradients are kept (parameters that do not require gradients are unfrozen for
        the pass and restored after it).
    absolute
        ``False`` (the authors' GEM): ``G = sum_t dL_t/dw``, signed; ``True``: ``sum_t |dL_t/dw|``.
    """
    params = dict(model.named_parameters())
    frozen = [n for n in names if not params[n].requires_grad]
    for n in frozen:
        params[n].requires_grad_(True)
    acc = {n: torch.zeros_like(params[n]) for n in names}
    for x, y in batches:
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        for n in names:
            grad = params[n].grad
            if grad is not None:
                acc[n] += grad.detach().abs() if absolute else grad.detach()
    model.zero_grad(set_to_none=True)
    for n in frozen:
        params[n].requires_grad_(False)
    return acc


def score(kind: str, grad_acc: torch.Tensor, weight: torch.Tensor, eps: float,
          rng: torch.Generator | None = None) -> torch.Tensor:
    """Per-entry score: ``ratio`` = |G| / (|w| + eps) (GEM), ``grad`` = |G|, ``weight`` = |w|, ``random`` = U(0, 1)."""
    if kind == "ratio":
        return grad_acc.abs() / (weight.detach().abs() + eps)
    if kind == "grad":
        return grad_acc.abs()
    if kind == "weight":
        return weight.detach().abs()
    if kind == "random":
        return torch.rand(weight.shape, generator=rng)
    raise ValueError(f"unknown score {kind!r}; choose one of {SCORES}")


def gem_layer_score(ratio: torch.Tensor) -> float:
    """The authors' layer weight: ``||r||_2 * H(r / sum r)`` (entropy in nats; 0 for an all-zero ``r``)."""
    r = ratio.detach().flatten().double()
    total = float(r.sum())
    if total <= 0 or not np.isfinite(total):
        return 0.0
    prob = r / total
    entropy = float(-(prob * torch.log(prob + 1e-8)).sum())
    return float(r.norm()) * entropy


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
        The layer weights of the rule: ``H_l`` per layer for ``entropy`` and ``entropy_only`` (see
        :func:`layer_entropy`), the GEM layer score for ``gem`` (see :func:`gem_layer_score`); unused by
        ``uniform``.
    budget
        ``K``.
    rule
        ``gem`` (shares proportional to the given scores), ``entropy`` (``H_l n_l``), ``entropy_only``
        (``H_l``) or ``uniform`` (``n_l``: the same density in every layer).

    Returns
    -------
    list of int
        Largest-remainder rounding of the proportional shares; the share of a full layer goes to the others.
    """
    n = np.asarray(sizes, dtype=float)
    h = np.asarray(entropies, dtype=float)
    weight = {"gem": h, "entropy": h * n, "entropy_only": h, "uniform": n}.get(rule)
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


def build_masks(params: Mapping[str, torch.Tensor], grad_acc: Mapping[str, torch.Tensor], score_kind: str, allocator: str,
                budget: int, eps: float = 1e-8, seed: int = 0) -> dict[str, torch.Tensor]:
    """Top-``k_l`` masks per layer.

    Parameters
    ----------
    params
        The eligible parameters by name.
    grad_acc
        Their calibration gradients (unused by ``weight`` and ``random``; see :func:`accumulate_gradients`).
    score_kind, allocator
        One of :data:`SCORES` and of :data:`ALLOCATORS` (``gem`` weighs each layer by
        :func:`gem_layer_score` of its ratio scores, whatever ``score_kind`` ranks the entries by).
    budget
        ``K``, total trainable entries.
    eps
        ``eps`` of the ratio score (the authors' 1e-8).
    seed
        Seed of the random score.

    Returns
    -------
    dict
        Name -> boolean mask of the parameter's shape; ``sum`` of all masks equals ``min(K, total)``.
    """
    names = list(params)
    rng = torch.Generator().manual_seed(seed)
    grads = {n: grad_acc.get(n, torch.zeros_like(params[n])) for n in names}
    if allocator == "gem":
        weights = [gem_layer_score(score("ratio", grads[n], params[n], eps)) for n in names]
    else:
        weights = [layer_entropy(params[n]) for n in names]
    ks = allocate([params[n].numel() for n in names], weights, budget, allocator)
    masks = {}
    for n, k in zip(names, ks):
        w = params[n]
        s = score(score_kind, grads[n], w, eps, rng).flatten()
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
