"""CADIS: similarity, clustering, cluster-equal aggregation and the KD-regularised client."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from repro.federated.cadis import (
    CADIS,
    ClusterEqualWeights,
    cluster_by_similarity,
    cluster_equal_weights,
    cosine_similarity_matrix,
    kd_sgd,
    last_layer_features,
    make_kd_client_app,
)
from repro.federated.client import LocalSettings, LocalSGD, local_sgd, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.kd import kd_loss
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model, client_data
from repro.federated.weighting import FlowerPolicyFedAvg

SKEW = TaskSpec(dataset="digits", num_clients=9, scheme="cluster_skew", alpha=0.3, cluster_sizes=(5, 3, 1),
                samples_per_client=40, hidden=(16,))
LOCAL = LocalSGD(batch_size=8, lr=0.05).config(5)
SETTINGS = LocalSettings(steps=20, batch_size=8, lr=0.1, momentum=0.0, seed=5)


def _run(strategy, spec, app, rounds=3):
    return run_federated(strategy, app, spec.num_clients, initial_arrays(spec, 0), rounds,
                         central_evaluator(spec), [rounds])


def test_similarity_is_symmetric_with_unit_diagonal_even_for_zero_updates():
    rng = np.random.default_rng(0)
    ups = [rng.normal(size=(4, 6)) for _ in range(5)] + [np.zeros((4, 6))]
    s = cosine_similarity_matrix(last_layer_features(ups))
    assert np.array_equal(s, s.T) and np.array_equal(np.diag(s), np.ones(6))
    assert np.all(np.isfinite(s)) and np.all(np.abs(s) <= 1.0)
    assert s[5, :5].tolist() == [0.0] * 5
    # row normalisation: scaling one class row of one client changes nothing
    scaled = [u.copy() for u in ups]
    scaled[0][2] *= 50.0
    np.testing.assert_allclose(cosine_similarity_matrix(last_layer_features(scaled)), s, atol=1e-12)


def test_clustering_recovers_planted_groups_from_noisy_last_layer_updates():
    rng = np.random.default_rng(1)
    sizes = (7, 3, 2)
    centres = [rng.normal(size=(10, 16)) for _ in sizes]
    planted = np.repeat(np.arange(len(sizes)), sizes)
    ups = [centres[g] + 0.4 * rng.normal(size=(10, 16)) for g in planted]
    order = rng.permutation(len(ups))
    labels = cluster_by_similarity(cosine_similarity_matrix(last_layer_features([ups[i] for i in order])), 0.5)
    assert adjusted_rand_score(planted[order], labels) == 1.0
    assert labels[0] == 0 and set(labels) == {0, 1, 2}
    assert set(cluster_by_similarity(np.eye(4), 0.5)) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="threshold"):
        cluster_by_similarity(np.eye(3), 2.0)


def test_cluster_equal_weights_give_each_cluster_an_equal_share():
    clusters = np.array([0, 0, 0, 1, 2, 2])
    n = np.array([10, 30, 20, 5, 1, 3])
    w = cluster_equal_weights(clusters, n)
    assert (w >= 0).all() and w.sum() == pytest.approx(1.0)
    for c in range(3):
        assert w[clusters == c].sum() == pytest.approx(1 / 3)
    np.testing.assert_allclose(w[:3], np.array([10, 30, 20]) / 60 / 3)
    # equal clusters holding equal data: the weights are FedAvg's
    eq = np.array([0, 0, 1, 1, 2, 2])
    np.testing.assert_allclose(cluster_equal_weights(eq, np.full(6, 7)), np.full(6, 1 / 6), rtol=1e-15)
    with pytest.raises(ValueError, match="shape"):
        cluster_equal_weights(eq, np.ones(4))


def test_cluster_equal_aggregation_over_equal_clusters_is_fedavg():
    spec = TaskSpec(dataset="digits", num_clients=6, scheme="cluster_skew", alpha=0.3, cluster_sizes=(2, 2, 2),
                    samples_per_client=40, hidden=(16,))
    avg = snapshot(_run(SeededFedAvg(6, LOCAL, seed=0), spec, make_client_app(spec)).final_arrays)
    pol = ClusterEqualWeights({p: p // 2 for p in range(6)})
    eq = snapshot(_run(FlowerPolicyFedAvg(6, LOCAL, pol, seed=0), spec, make_client_app(spec)).final_arrays)
    for k in avg:
        np.testing.assert_allclose(avg[k], eq[k], rtol=0, atol=1e-7)


def test_kd_loss_gradient_matches_the_closed_form():
    torch.manual_seed(0)
    s = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    t = torch.randn(4, 5, dtype=torch.float64)
    T = 3.0
    kd_loss(s, t, T).backward()
    expected = T * (torch.softmax(s / T, 1) - torch.softmax(t / T, 1)) / 4
    torch.testing.assert_close(s.grad, expected.detach())
    assert torch.autograd.gradcheck(lambda x: kd_loss(x, t, T), (s.detach().clone().requires_grad_(),))
    same = t.clone().requires_grad_()
    kd_loss(same, t, T).backward()
    assert same.grad.abs().max().item() < 1e-12


def test_kd_sgd_with_mu_zero_is_local_sgd_and_mu_keeps_the_student_near_the_teacher():
    x, y = client_data(SKEW, 0)
    a, b = build_model(SKEW, seed=3), build_model(SKEW, seed=3)
    teacher = build_model(SKEW, seed=3)
    kd_sgd(a, teacher, x, y, SETTINGS, mu=0.0, temperature=2.0)
    local_sgd(b, x, y, SETTINGS)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    c = build_model(SKEW, seed=3)
    kd_sgd(c, teacher, x, y, SETTINGS, mu=5.0, temperature=2.0)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        plain, distilled = kd_loss(b(xt), teacher(xt), 2.0).item(), kd_loss(c(xt), teacher(xt), 2.0).item()
    assert distilled < plain
    with pytest.raises(ValueError, match="mu"):
        kd_sgd(c, teacher, x, y, replace(SETTINGS, steps=1), mu=-1.0, temperature=2.0)


def test_kd_client_with_mu_zero_trains_like_the_shared_client(same_weights):
    avg = _run(SeededFedAvg(4, LOCAL, seed=1), SKEW, make_client_app(SKEW))
    kd = _run(SeededFedAvg(4, {**LOCAL, "kd-mu": 0.0}, seed=1), SKEW, make_kd_client_app(SKEW))
    assert same_weights(snapshot(avg.final_arrays), snapshot(kd.final_arrays))


def test_cadis_server_finds_the_planted_clusters_and_weighs_them_equally():
    strat = CADIS(9, LOCAL, SKEW.num_clients, "fc1.weight", threshold=0.5, seed=0)
    _run(strat, SKEW, make_kd_client_app(SKEW), rounds=4)
    planted = np.repeat([0, 1, 2], SKEW.cluster_sizes)
    found = strat.remembered_clusters(list(range(9)))
    assert adjusted_rand_score(planted, found) == 1.0
    w = strat.weights_used[4]
    labels = strat.clusters_used[4]
    totals = [sum(w[p] for p in w if labels[p] == c) for c in set(labels.values())]
    np.testing.assert_allclose(totals, 1 / 3)
    assert sum(w.values()) == pytest.approx(1.0)
