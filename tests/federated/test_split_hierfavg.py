"""The split-learning cut layer, HierFAVG and SFETEC's hierarchy."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from repro.federated.client import LocalSettings, LocalSGD, client_seed, local_sgd, make_client_app, round_seed
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.hierfavg import HierFAVG
from repro.federated.sfetec import CostModel, RoundTraffic, SplitHierarchy, SplitSchedule, edge_round, run_split_training
from repro.federated.split import SplitBatch, split_sequential, split_step
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model, client_data, evaluate
from repro.models import mlp

SPEC = TaskSpec(dataset="digits", num_clients=6, alpha=0.5, hidden=(16, 24), n_train=600)
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.9).config(3)


def batches(n: int, sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(n)
    return [(torch.randn(s, 8, generator=gen), torch.randint(0, 3, (s,), generator=gen)) for s in sizes]


def sgd_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> dict[str, torch.Tensor]:
    """One plain SGD step of ``model`` on ``(x, y)`` in place; the gradients it took."""
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    return grads


def test_split_step_core_takes_the_pooled_step_and_each_base_its_own_loss_and_counts_bytes():
    torch.manual_seed(0)
    whole = mlp(8, [6, 5], 3)
    data = batches(1, [4, 7])
    # unsplit: the pooled batch's step (what the core must take)
    reference = copy.deepcopy(whole)
    sgd_step(reference, torch.cat([d[0] for d in data]), torch.cat([d[1] for d in data]), lr=0.1)
    # unsplit, one client alone: the gradient of its own loss (what its base must receive)
    own = [sgd_step(copy.deepcopy(whole), xb, yb, lr=0.1) for xb, yb in data]
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
    for b, g in zip(bases, own):  # the pooled loss's gradient would be 4/11 and 7/11 of these
        torch.testing.assert_close(dict(b.named_parameters())["fc0.weight"].grad, g["fc0.weight"])
    # activations (6 floats) + labels (int64) up, gradients down, per client
    assert [e.up for e in exchanges] == [4 * 6 * 4 + 4 * 8, 7 * 6 * 4 + 7 * 8]
    assert [e.down for e in exchanges] == [4 * 6 * 4, 7 * 6 * 4]


def test_k_equal_clients_each_take_the_step_of_one_client_alone():
    """SplitFed's point: k clients with the same batch move their bases as one client alone would (not 1/k of it)."""
    torch.manual_seed(1)
    whole = mlp(8, [6, 5], 3)
    (x, y), = batches(2, [5])
    alone = copy.deepcopy(whole)
    sgd_step(alone, x, y, lr=0.2)
    k = 4
    bases = [split_sequential(copy.deepcopy(whole), 2)[0] for _ in range(k)]
    core = split_sequential(copy.deepcopy(whole), 2)[1]
    split_step([SplitBatch(base=b, optimizer=torch.optim.SGD(b.parameters(), lr=0.2), x=x, y=y) for b in bases],
               core, torch.optim.SGD(core.parameters(), lr=0.2))
    for b in bases:
        torch.testing.assert_close(b.fc0.weight, alone.fc0.weight)


def test_one_step_of_an_edge_round_is_one_step_of_sgd_on_the_pooled_batch():
    """Equal client batches, one step: the averaged model is centralised SGD's, with one core or a copy per client."""
    torch.manual_seed(2)
    whole = mlp(8, [6, 5], 3)
    data = batches(3, [6, 6, 6])
    reference = copy.deepcopy(whole)
    sgd_step(reference, torch.cat([d[0] for d in data]), torch.cat([d[1] for d in data]), lr=0.1)
    for copies in (False, True):
        model = copy.deepcopy(whole)
        traffic = edge_round(model, 2, [[d] for d in data], [1.0, 1.0, 1.0], lr=0.1, server_copies=copies)
        for (k, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, msg=f"{k}, server copies {copies}")
        base_scalars = 8 * 6 + 6
        assert traffic.down == 3 * (6 * 6 * 4 + base_scalars * 4)


def test_splitfed_core_copies_differ_from_one_pooled_core_after_two_steps():
    torch.manual_seed(3)
    whole = mlp(8, [6, 5], 3)
    data = [[d, e] for d, e in zip(batches(4, [5, 5]), batches(5, [5, 5]))]
    pooled, copies = copy.deepcopy(whole), copy.deepcopy(whole)
    edge_round(pooled, 2, data, [1.0, 1.0], lr=0.5, server_copies=False)
    edge_round(copies, 2, data, [1.0, 1.0], lr=0.5, server_copies=True)
    assert not torch.allclose(pooled.fc2.weight, copies.fc2.weight)


def test_one_client_one_edge_split_training_is_centralised_sgd():
    spec = TaskSpec(dataset="digits", num_clients=1, scheme="iid", hidden=(16, 24), n_train=300)
    schedule = SplitSchedule(rounds=1, steps=3, batch_size=8, lr=0.1)
    model = build_model(spec, 4)
    x, y = client_data(spec, 0)
    local_sgd(model, x, y, LocalSettings(steps=3, batch_size=8, lr=0.1, momentum=0.0, seed=client_seed(round_seed(4, 1), 0)))
    for hierarchy in (SplitHierarchy(edges=((0,),)), SplitHierarchy.splitfed(1)):
        hist = run_split_training(spec, cut=2, hierarchy=hierarchy, schedule=schedule, seed=4, eval_rounds=[1])
        assert abs(evaluate(spec, model)["accuracy"] - hist.accuracy[-1]) < 1e-9


def test_split_records_refuse_bad_values():
    with pytest.raises(ValueError, match="'lr'"):
        SplitSchedule(rounds=1, steps=1, batch_size=1, lr=0.0)
    with pytest.raises(ValueError, match="'edges'"):
        SplitHierarchy(edges=((0,), ()))


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


def test_splitfed_with_a_core_copy_per_client_learns_what_fedavg_learns():
    """SFLV1's arithmetic is FedAvg's: same batches, same rate, every client every round -> the same model."""
    spec = TaskSpec(dataset="digits", num_clients=4, scheme="iid", hidden=(16, 24), n_train=300)
    schedule = SplitSchedule(rounds=3, steps=2, batch_size=8, lr=0.1)
    split = run_split_training(spec, cut=2, hierarchy=SplitHierarchy.splitfed(4), schedule=schedule, seed=5,
                               eval_rounds=[3])
    local = LocalSGD(batch_size=8, lr=0.1, momentum=0.0).config(2)
    fedavg = run_federated(SeededFedAvg(4, local, seed=5), make_client_app(spec, {"seed": 5}), 4, initial_arrays(spec, 5),
                           3, central_evaluator(spec), [3])
    avg = snapshot(fedavg.final_arrays)
    assert set(avg) == set(split.final)
    for k in avg:
        np.testing.assert_allclose(split.final[k], avg[k], rtol=1e-5, atol=1e-6)
