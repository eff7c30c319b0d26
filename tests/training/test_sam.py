"""Layer-wise SAM: reductions to SGD and to SAM, exact truncation, perturbation radius, frozen BN statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from repro.training.layertable import flops_by_child, layer_table
from repro.training.sam import LayerSelector, SamConfig, layer_blocks, sam_step, second_pass_fraction, select_layers


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU()),
                         nn.Sequential(nn.Conv2d(4, 6, 3), nn.BatchNorm2d(6), nn.ReLU()),
                         nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()),
                         nn.Sequential(nn.Linear(6, 8), nn.ReLU()), nn.Linear(8, 3)).double()


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 1, 8, 8, generator=g, dtype=torch.float64), torch.randint(0, 3, (16,), generator=g)


def _reference_sam(model, x, y, opt, rho, layers_to_perturb):
    """Textbook SAM restricted to the given blocks, written independently of repro.training.sam."""
    loss = nn.functional.cross_entropy
    opt.zero_grad()
    loss(model(x), y).backward()
    params = [p for i in layers_to_perturb for p in model[i].parameters()]
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in params))
    w0 = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p in params:
            p.add_(rho * p.grad / norm)
    bn = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    stats = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in bn]
    opt.zero_grad()
    loss(model(x), y).backward()
    with torch.no_grad():
        for p, w in zip(params, w0):
            p.copy_(w)
        for m, (mu, var, count) in zip(bn, stats):
            m.running_mean.copy_(mu)
            m.running_var.copy_(var)
            m.num_batches_tracked.copy_(count)
    opt.step()


def _params(model):
    return [p.detach().clone() for p in model.parameters()] + [b.clone() for b in model.buffers()]


def _run(selector, rho, truncated=True, steps=3, alpha=1.0, plain_unselected=False):
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x, y = _batch()
    cfg = SamConfig(rho=rho, alpha=alpha, truncated=truncated, plain_unselected=plain_unselected)
    recs = [sam_step(model, nn.functional.cross_entropy, x, y, opt, cfg, selector) for _ in range(steps)]
    return model, recs


def test_rho_zero_equals_sgd():
    sgd, _ = _run(None, 0.0)
    for rule in ("all", "top"):
        sam, _ = _run(LayerSelector(rule, 2, 1), 0.0)
        for a, b in zip(_params(sgd), _params(sam)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_all_layers_equals_reference_sam():
    sam, recs = _run(LayerSelector("all", 99, 1), 0.05)
    ref = _net()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x, y = _batch()
    for _ in range(3):
        _reference_sam(ref, x, y, opt, 0.05, layer_blocks(ref))
    for a, b in zip(_params(sam), _params(ref)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    assert all(abs(r.perturbation_norm - 0.05) < 1e-6 for r in recs)
    assert all(r.first_block == 0 for r in recs)


def test_truncated_second_pass_keeps_upper_update_and_first_pass_lower_gradient():
    pick = lambda norms: (2, 3)  # noqa: E731 - layers 2 and 3 = blocks 3 and 4
    full, _ = _run(pick, 0.1, truncated=False)
    ref = _net()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x, y = _batch()
    for _ in range(3):
        _reference_sam(ref, x, y, opt, 0.1, [3, 4])
    for a, c in zip(_params(full), _params(ref)):
        torch.testing.assert_close(a, c, rtol=0, atol=1e-10)
    # one step: blocks from j = 3 up get the perturbed gradient (as untruncated), blocks below it the SGD one
    trunc, recs = _run(pick, 0.1, truncated=True, steps=1)
    full, _ = _run(pick, 0.1, truncated=False, steps=1)
    sgd, _ = _run(None, 0.1, steps=1)
    for i in range(5):
        other = full if i >= 3 else sgd
        for a, b in zip(trunc[i].parameters(), other[i].parameters()):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert not torch.allclose(full[0][0].weight, sgd[0][0].weight)
    assert recs[0].first_block == 3 and recs[0].selected == (2, 3)
    assert abs(recs[0].perturbation_norm - 0.1) < 1e-6


def test_weights_restored_before_the_step():
    model = _net()
    before = _params(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # no move: the parameters must come back to w exactly
    x, y = _batch()
    sam_step(model, nn.functional.cross_entropy, x, y, opt, SamConfig(rho=0.5), LayerSelector("all", 9, 1))
    after = [p.detach() for p in model.parameters()]
    for a, b in zip(before, after):
        assert torch.equal(a, b)


def test_selection_rules():
    norms = (0.1, 3.0, 0.5, 2.0)
    assert select_layers(norms, 2, "top") == (1, 3)
    assert select_layers(norms, 2, "input") == (0, 1)
    assert select_layers(norms, 9, "all") == (0, 1, 2, 3)
    r = select_layers(norms, 2, "random", np.random.default_rng(0))
    assert len(set(r)) == 2 and all(0 <= i < 4 for i in r)
    sel = LayerSelector("top", 1, refresh_steps=2)
    assert [sel(n) for n in ((1, 0), (0, 1), (0, 1))] == [(0,), (0,), (1,)]
    with pytest.raises(ValueError):
        select_layers(norms, 1, "largest")


def test_layer_table_flops_and_second_pass_fraction():
    model = _net().float()
    table = layer_table(model, torch.zeros(2, 1, 8, 8))
    conv = [r for r in table if r.kind == "Conv2d"]
    assert conv[0].flops == 2 * 1 * 9 * 4 * 6 * 6 and conv[1].flops == 2 * 4 * 9 * 6 * 4 * 4
    assert conv[1].in_shape == (4, 6, 6) and conv[1].out_shape == (6, 4, 4) and conv[1].params == 4 * 6 * 9 + 6
    lin = [r for r in table if r.kind == "Linear"]
    assert lin[0].flops == 2 * 6 * 8
    per_block = flops_by_child(model, torch.zeros(1, 1, 8, 8))
    assert per_block[2] == 0 and sum(per_block) == sum(r.flops for r in table)
    assert second_pass_fraction(0, per_block) == 1.0
    assert 0 < second_pass_fraction(3, per_block) < second_pass_fraction(1, per_block) < 1


def _reference_gnp(model, x, y, opt, rho, alpha, layers_to_perturb):
    """The summarised layer-wise rule, written independently.

    Selected blocks step with (1 - alpha) g(w) + alpha g(w + eps), every other block with g(w).
    """
    loss = nn.functional.cross_entropy
    opt.zero_grad()
    loss(model(x), y).backward()
    first = {p: p.grad.detach().clone() for p in model.parameters()}
    params = [p for i in layers_to_perturb for p in model[i].parameters()]
    norm = torch.sqrt(sum((first[p] ** 2).sum() for p in params))
    w0 = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p in params:
            p.add_(rho * first[p] / norm)
    bn = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    stats = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in bn]
    opt.zero_grad()
    loss(model(x), y).backward()
    with torch.no_grad():
        for p, w in zip(params, w0):
            p.copy_(w)
        for m, (mu, var, count) in zip(bn, stats):
            m.running_mean.copy_(mu)
            m.running_var.copy_(var)
            m.num_batches_tracked.copy_(count)
        chosen = {id(p) for p in params}
        for p in model.parameters():
            p.grad = (1 - alpha) * first[p] + alpha * p.grad if id(p) in chosen else first[p]
    opt.step()


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_unselected_layers_step_with_their_plain_gradient(alpha):
    """Selecting layers 0 and 3 (blocks 0 and 4): blocks 1 and 3 in between keep g(w).

    The selected ones get the interpolation; the earlier rule gave blocks 1 and 3 the perturbed gradient too.
    """
    pick = lambda norms: (0, 3)  # noqa: E731
    ours, _ = _run(pick, 0.1, steps=3, alpha=alpha, plain_unselected=True)
    ref = _net()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x, y = _batch()
    for _ in range(3):
        _reference_gnp(ref, x, y, opt, 0.1, alpha, [0, 4])
    for a, b in zip(_params(ours), _params(ref)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    old_rule, _ = _run(pick, 0.1, steps=1, alpha=alpha, plain_unselected=False)
    new_rule, _ = _run(pick, 0.1, steps=1, alpha=alpha, plain_unselected=True)
    assert not torch.allclose(old_rule[1][0].weight, new_rule[1][0].weight)


def test_alpha_zero_is_sgd_whatever_the_selection():
    sgd, _ = _run(None, 0.0)
    for rule in ("all", "top"):
        gnp, _ = _run(LayerSelector(rule, 2, 1), 0.3, alpha=0.0, plain_unselected=True)
        for a, b in zip(_params(sgd), _params(gnp)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
