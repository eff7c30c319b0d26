"""The split-learning cut layer, HierFAVG and SFETEC's hierarchy."""

from __future__ import annotations

import copy

import numpy as np
import torch

from repro.federated.client import LocalSGD, client_seed, local_sgd, make_client_app, round_seed
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.hierfavg import HierFAVG
from repro.federated.sfetec import CostModel, RoundTraffic, SplitHierarchy, run_split_training
from repro.federated.split import SplitBatch, split_sequential, split_step
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model, client_data, evaluate
from repro.models import mlp

SPEC = TaskSpec(dataset="digits", num_clients=6, alpha=0.5, hidden=(16, 24), n_train=600)
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.9).config(3)


def batches(n: int, sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(n)
    return [(torch.randn(s, 8, generator=gen), torch.randint(0, 3, (s,), generator=gen)) for s in sizes]


def test_split_step_equals_unsplit_backprop_and_counts_bytes():
    torch.manual_seed(0)
    whole = mlp(8, [6, 5], 3)
    reference = copy.deepcopy(whole)
    data = batches(1, [4, 7])
    # unsplit: one SGD step on the pooled batch
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = torch.cat([d[0] for d in data]), torch.cat([d[1] for d in data])
    torch.nn.functional.cross_entropy(reference(x), y).backward()
    grads = {k: p.grad.clone() for k, p in reference.named_parameters()}
    opt.step()
    # split: two clients, each with its own copy of the base, one shared core
    bases = [split_sequential(copy.deepcopy(whole), 2)[0] for _ in data]
    core = split_sequential(whole, 2)[1]
    clients = [
        SplitBatch(base=b, optimizer=torch.optim.SGD(b.parameters(), lr=0.1), x=xb, y=yb) for b, (xb, yb) in zip(bases, data)
    ]
    _, exchanges = split_step(clients, core, torch.optim.SGD(core.parameters(), lr=0.1))
    ref = dict(reference.named_parameters())
    for k, p in core.named_parameters():
        torch.testing.assert_close(p, ref[k])
    base_grad = sum(dict(b.named_parameters())["fc0.weight"].grad for b in bases)
    torch.testing.assert_close(base_grad, grads["fc0.weight"])
    # activations (6 floats) + labels (int64) up, gradients down, per client
    assert [e.up for e in exchanges] == [4 * 6 * 4 + 4 * 8, 7 * 6 * 4 + 7 * 8]
    assert [e.down for e in exchanges] == [4 * 6 * 4, 7 * 6 * 4]


def test_one_client_one_edge_split_training_is_centralised_sgd():
    spec = TaskSpec(dataset="digits", num_clients=1, scheme="iid", hidden=(16, 24), n_train=300)
    hist = run_split_training(
        spec, 2, SplitHierarchy(edges=((0,),)), rounds=1, steps=3, batch_size=8, lr=0.1, seed=4, eval_rounds=[1]
    )
    model = build_model(spec, 4)
    x, y = client_data(spec, 0)
    local_sgd(model, x, y, steps=3, batch_size=8, lr=0.1, momentum=0.0, seed=client_seed(round_seed(4, 1), 0))
    assert abs(evaluate(spec, model)["accuracy"] - hist.accuracy[-1]) < 1e-9


def test_hierfavg_with_one_edge_is_fedavg():
    fedavg = run_federated(
        SeededFedAvg(3, LOCAL, seed=1),
        make_client_app(SPEC, {"seed": 1}),
        SPEC.num_clients,
        initial_arrays(SPEC, 1),
        3,
        central_evaluator(SPEC),
        [3],
    )
    hier = run_federated(
        HierFAVG(3, LOCAL, [0] * SPEC.num_clients, seed=1),
        make_client_app(SPEC, {"seed": 1}),
        SPEC.num_clients,
        initial_arrays(SPEC, 1),
        3,
        central_evaluator(SPEC),
        [3],
    )
    a, b = snapshot(fedavg.final_arrays), snapshot(hier.final_arrays)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_hierfavg_edges_drift_apart_between_cloud_rounds():
    strategy = HierFAVG(6, LOCAL, [0, 0, 0, 1, 1, 1], seed=1, cloud_every=2)
    run_federated(
        strategy, make_client_app(SPEC, {"seed": 1}), SPEC.num_clients, initial_arrays(SPEC, 1), 3, central_evaluator(SPEC), [3]
    )
    e0, e1 = snapshot(strategy.edge_models[0]), snapshot(strategy.edge_models[1])
    assert any(not np.array_equal(e0[k], e1[k]) for k in e0)
    size = sum(v.size for v in e0.values())
    assert strategy.cloud_scalars == 2 * size * 2  # one cloud round (round 2), two edges, both directions


def test_split_round_time_grows_with_clients_per_server():
    cost = CostModel()
    traffic = RoundTraffic(client_up=1e4, client_down=1e4, cloud=0.0)
    one = cost.split_round(traffic, 1e6, 1e6, steps=5, clients_per_server=1, at_edge=True)
    many = cost.split_round(traffic, 1e6, 1e6, steps=5, clients_per_server=30, at_edge=True)
    assert many > one
