"""Sparse fine-tuning: budgets, scores, exact freezing, density 1 equals full fine-tuning, PEFT baselines."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from repro.training.sparse_ft import (
    GradientMask,
    accumulate_gradients,
    allocate,
    bitfit,
    build_masks,
    gem_layer_score,
    layer_entropy,
    lora_model,
    score,
)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(32, 6, generator=g), torch.randint(0, 3, (32,), generator=g)


def _train(model, steps=5):
    x, y = _data()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.0)
    for i in range(steps):
        idx = slice(8 * (i % 4), 8 * (i % 4) + 8)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    return model


def _body(model):
    return {n: p for n, p in model.named_parameters() if not n.startswith("4.")}


def test_allocation_sums_to_budget_and_respects_layer_sizes():
    sizes, ent = [10, 1000, 50, 5], [2.0, 1.0, 0.0, 3.0]
    for rule in ("gem", "entropy", "entropy_only", "uniform"):
        for budget in (0, 7, 100, 900, 1065, 5000):
            k = allocate(sizes, ent, budget, rule)
            assert all(0 <= a <= n for a, n in zip(k, sizes))
            expected = min(budget, sum(sizes)) if rule == "uniform" else min(budget, sum(n for n, h in zip(sizes, ent) if h > 0))
            assert sum(k) == expected, (rule, budget, k)
    assert allocate(sizes, ent, 100, "entropy")[2] == 0  # a zero-entropy layer gets nothing


def test_entropy_and_scores():
    assert layer_entropy(torch.full((50,), 0.3)) == 0.0
    assert layer_entropy(torch.randn(5000)) > layer_entropy(torch.cat([torch.zeros(4990), torch.randn(10)]))
    g = torch.tensor([1.0, 1.0])
    w = torch.tensor([0.1, 0.5])
    s = score("ratio", g, w, eps=0.0)
    assert s[0] > s[1]  # same gradient, smaller weight: larger relative update
    assert torch.equal(score("grad", g, w, 0.0), g) and torch.equal(score("weight", g, -w, 0.0), w)


def test_masks_have_the_budget_and_frozen_entries_stay_exact():
    model = _model()
    body = _body(model)
    total = sum(p.numel() for p in body.values())
    x, y = _data()
    grads = accumulate_gradients(model, nn.functional.cross_entropy, [(x, y)], list(body))
    w0 = {n: p.detach().clone() for n, p in body.items()}
    masks = build_masks(body, grads, "ratio", "uniform", budget=total // 10)
    assert sum(int(m.sum()) for m in masks.values()) == total // 10
    GradientMask(model, masks)
    _train(model)
    moved = 0
    for n, p in body.items():
        assert torch.equal(p.detach()[~masks[n]], w0[n][~masks[n]])
        moved += int((p.detach() != w0[n]).sum())
    assert 0 < moved <= total // 10


def test_density_one_equals_full_fine_tuning():
    full = _train(_model())
    sparse = _model()
    body = _body(sparse)
    masks = build_masks(body, {}, "random", "uniform", budget=sum(p.numel() for p in body.values()))
    assert all(bool(m.all()) for m in masks.values())
    GradientMask(sparse, masks)
    _train(sparse)
    for a, b in zip(full.parameters(), sparse.parameters()):
        assert torch.equal(a, b)


def test_bitfit_and_lora_trainable_counts():
    model = _model()
    assert bitfit(model, ["4"]) == 16 + 8 + (8 * 3 + 3)
    lora = lora_model(_model(), 2, ["0", "2"], ["4"])
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert trainable == 2 * (6 + 16) + 2 * (16 + 8) + (8 * 3 + 3)
    x, _ = _data()
    torch.testing.assert_close(lora(x), _model()(x))  # LoRA's B starts at zero: the wrapped model is unchanged


def test_calibration_gradients_are_summed_with_their_sign_as_in_the_authors_code():
    """GEM_PEFT 590f44c (run.py backward_qv_pass) adds the batches' gradients; opposite ones cancel."""
    model = _model()
    x, _ = _data()
    flip = lambda out, y: out.sum() * y.float().mean()  # noqa: E731 - a loss whose gradient changes sign with y
    batches = [(x, torch.ones(len(x))), (x, -torch.ones(len(x)))]
    signed = accumulate_gradients(model, flip, batches, ["0.weight"])
    absolute = accumulate_gradients(model, flip, batches, ["0.weight"], absolute=True)
    assert float(signed["0.weight"].abs().max()) < 1e-5
    assert float(absolute["0.weight"].abs().max()) > 1e-3


def test_calibration_pass_leaves_frozen_parameters_frozen():
    model = _model()
    model[0].weight.requires_grad_(False)
    x, y = _data()
    grads = accumulate_gradients(model, nn.functional.cross_entropy, [(x, y)], ["0.weight"])
    assert float(grads["0.weight"].abs().sum()) > 0 and not model[0].weight.requires_grad


def test_gem_layer_score_is_the_norm_times_the_entropy_of_the_normalised_ratios():
    r = torch.tensor([1.0, 1.0, 1.0, 1.0])
    assert gem_layer_score(r) == pytest.approx(2.0 * math.log(4), rel=1e-6)
    assert gem_layer_score(torch.tensor([0.0, 3.0])) == pytest.approx(0.0, abs=1e-6)  # one entry: no entropy
    assert gem_layer_score(torch.zeros(5)) == 0.0


def test_gem_allocator_splits_the_budget_by_the_layer_scores():
    torch.manual_seed(0)
    params = {"a": torch.ones(100), "b": torch.ones(100)}
    grads = {"a": torch.ones(100), "b": torch.cat([torch.ones(10), torch.zeros(90)])}
    masks = build_masks(params, grads, "ratio", "gem", budget=60)
    share_a = gem_layer_score(grads["a"]) / (gem_layer_score(grads["a"]) + gem_layer_score(grads["b"]))
    assert int(masks["a"].sum()) == round(60 * share_a) and int(masks["a"].sum() + masks["b"].sum()) == 60
