"""FedDCT's ensemble, co-training loss, warm-up and clustering."""

from __future__ import annotations

import copy

import torch

from repro.federated.feddct import CoTrainedEnsemble, co_training_loss, cot_weight, js_divergence, random_clusters, sub_width
from repro.models import mlp


def test_js_is_nonnegative_and_zero_for_identical_members():
    torch.manual_seed(0)
    z = torch.randn(8, 5)
    assert abs(js_divergence([z, z.clone(), z.clone()]).item()) < 1e-6
    for _ in range(5):
        assert js_divergence([torch.randn(8, 5) for _ in range(3)]).item() >= 0


def test_ensemble_output_is_mean_of_member_logits():
    torch.manual_seed(1)
    members = [mlp(4, [6], 3) for _ in range(4)]
    ens, x = CoTrainedEnsemble(members), torch.randn(5, 4)
    torch.testing.assert_close(ens(x), sum(m(x) for m in members) / 4)


def test_one_member_loss_is_cross_entropy():
    torch.manual_seed(2)
    z, y = torch.randn(6, 3), torch.randint(0, 3, (6,))
    torch.testing.assert_close(co_training_loss([z], y, weight=0.5), torch.nn.functional.cross_entropy(z, y))


def test_one_member_training_equals_plain_sgd():
    torch.manual_seed(3)
    model = mlp(4, [6], 3)
    ens = CoTrainedEnsemble([copy.deepcopy(model)])
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    for net, loss_fn in ((model, lambda: torch.nn.functional.cross_entropy(model(x), y)),
                         (ens, lambda: co_training_loss(ens.member_logits(x), y, cot_weight(0)))):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
    for a, b in zip(model.parameters(), ens.members[0].parameters()):
        torch.testing.assert_close(a, b)


def test_warmup_and_clusters():
    assert cot_weight(0) == 0.005 and cot_weight(20) == 0.25 and cot_weight(100) == 0.5
    clusters = random_clusters(list(range(10)), 4, seed=0)
    assert len(clusters) == 2 and all(len(c) == 4 for c in clusters)
    assert len({c for cl in clusters for c in cl}) == 8
    assert sub_width(256, 4) == 128
