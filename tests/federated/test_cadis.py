"""CADIS: similarity, clustering, cluster-equal aggregation and the KD-regularised client."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from repro.federated.cadis import (
    CADIS,
    ClusterEqualWeights,
    ClusterRule,
    classifier_layer,
    cluster_equal_weights,
    cluster_labels,
    cluster_matrix,
    grown_threshold,
    impact_factors,
    make_kd_client_app,
    pairwise_cosine,
    relational_kd,
    representation,
    scaled_mean_similarity,
)
from repro.federated.client import LocalSettings, LocalSGD, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
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


def test_similarity_is_the_plain_cosine_of_the_flattened_updates():
    rng = np.random.default_rng(0)
    ups = [rng.normal(size=(4, 6)) for _ in range(5)] + [np.zeros((4, 6))]
    s = pairwise_cosine(ups)
    assert np.array_equal(s, s.T) and np.array_equal(np.diag(s), np.ones(6))
    assert np.all(np.isfinite(s)) and np.all(np.abs(s) <= 1.0)
    assert s[5, :5].tolist() == [0.0] * 5
    a, b = ups[0].ravel(), ups[1].ravel()
    assert s[0, 1] == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b), rel=1e-12)
    # the authors' cosine is of the whole flattened update: scaling one class row changes it
    scaled = [u.copy() for u in ups]
    scaled[0][2] *= 50.0
    assert not np.allclose(pairwise_cosine(scaled)[0, 1:5], s[0, 1:5])


def test_scaling_thresholding_and_impact_factors_follow_the_authors_rule():
    total = np.array([[2.0, 1.6, 0.2, 0.0], [1.6, 2.0, 0.4, 0.0], [0.2, 0.4, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    count = np.array([[2.0, 2.0, 1.0, 0.0], [2.0, 2.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    scaled = scaled_mean_similarity(total, count)
    # means: 1 on the diagonal, 0.8 for (0, 1), 0.2 and 0.4 with client 2, client 3 never met the others
    np.testing.assert_allclose(scaled[0, 1], (0.8 - 0.2) / (1.0 - 0.2))
    assert scaled[0, 2] == 0.0 and scaled[0, 3] == 0.0 and scaled[3, 3] == 1.0
    related = cluster_matrix(scaled, 0.7)
    assert related.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    np.testing.assert_allclose(impact_factors(related), [0.5, 0.5, 1.0, 1.0])
    assert cluster_labels(related).tolist() == [0, 0, 1, 2]
    # A^T A relates clients through a shared similar client (a chain 0 - 1 - 2 relates 0 and 2)
    chain = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.9], [0.0, 0.9, 1.0]])
    assert cluster_matrix(chain, 0.5)[0, 2] == 1
    # the absolute value of the authors' scaling: a strongly negative mean maps high
    neg = scaled_mean_similarity(np.array([[1.0, -0.99], [-0.99, 1.0]]), np.ones((2, 2)))
    assert neg[0, 1] > 0.9
    # equal positive means: every seen pair is 1 (the authors' code would divide by zero)
    assert scaled_mean_similarity(np.eye(2), np.ones((2, 2))).tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_the_threshold_grows_as_the_authors_and_stops_at_the_cap():
    thr = 0.975
    seen = []
    for t in range(1, 10):
        thr = grown_threshold(thr, t)
        seen.append(thr)
    assert seen[0] == pytest.approx(0.975 * 1.0005)
    assert seen[1] == pytest.approx(0.975 * 1.0005 * 1.0005**2)
    assert max(seen) == 0.985 and seen == sorted(seen)
    with pytest.raises(ValueError, match="threshold"):
        ClusterRule(threshold=0.99)


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


def _authors_kl(teacher, student):
    """The authors' KL_divergence (algorithm/cadis.py @df1a72f2), transcribed with its reshape trick."""
    n = student.shape[0]
    t, s = teacher.unsqueeze(1), student.unsqueeze(1)
    sub_s = torch.norm(s - s.transpose(0, 1), dim=2).flatten()[1:].view(n - 1, n + 1)[:, :-1].reshape(n, n - 1)
    sub_t = torch.norm(t - t.transpose(0, 1), dim=2).flatten()[1:].view(n - 1, n + 1)[:, :-1].reshape(n, n - 1)
    ks = torch.exp(-1 / 2 * torch.pow(sub_s - sub_s.mean(), 2) / (torch.pow(sub_s.std(), 2) + 0.001))
    kt = torch.exp(-1 / 2 * torch.pow(sub_t - sub_t.mean(), 2) / (torch.pow(sub_t.std(), 2) + 0.001))
    ks, kt = ks / ks.sum(1, keepdim=True), kt / kt.sum(1, keepdim=True)
    return torch.sum(kt * torch.log(kt / ks))


def test_relational_kd_is_the_authors_kl_and_vanishes_on_equal_representations():
    torch.manual_seed(0)
    t = torch.randn(8, 5, dtype=torch.float64)
    s = torch.randn(8, 5, dtype=torch.float64, requires_grad=True)
    loss = relational_kd(t, s)
    torch.testing.assert_close(loss, _authors_kl(t, s))
    loss.backward()
    assert s.grad is not None and s.grad.abs().sum() > 0
    assert relational_kd(t, t.clone()).item() == pytest.approx(0.0, abs=1e-12)
    assert relational_kd(t[:2], s[:2]).item() == 0.0  # too small a batch to standardise


def test_the_representation_is_the_classifiers_input():
    model = build_model(SKEW, seed=0)
    x = torch.from_numpy(client_data(SKEW, 0)[0][:4])
    assert classifier_layer(model) is model.fc1
    torch.testing.assert_close(representation(model, x), model.relu0(model.fc0(x)))


def test_kd_client_with_mu_zero_trains_like_the_shared_client(same_weights):
    avg = _run(SeededFedAvg(4, LOCAL, seed=1), SKEW, make_client_app(SKEW))
    kd = _run(SeededFedAvg(4, {**LOCAL, "kd-mu": 0.0}, seed=1), SKEW, make_kd_client_app(SKEW))
    assert same_weights(snapshot(avg.final_arrays), snapshot(kd.final_arrays))


def test_cadis_server_relates_the_planted_clusters_and_weighs_them_equally():
    strat = CADIS(9, LOCAL, SKEW.num_clients, "fc1.weight", rule=ClusterRule(threshold=0.65, grow=False), seed=0)
    _run(strat, SKEW, make_kd_client_app(SKEW), rounds=4)
    planted = np.repeat([0, 1, 2], SKEW.cluster_sizes)
    assert adjusted_rand_score(planted, strat.final_clusters()) == 1.0
    w = strat.weights_used[4]
    labels = strat.clusters_used[4]
    totals = [sum(w[p] for p in w if labels[p] == c) for c in set(labels.values())]
    np.testing.assert_allclose(totals, 1 / 3)  # every client present: each group weighs a third
    assert sum(w.values()) == pytest.approx(1.0) and strat.threshold == 0.65
    grown = CADIS(9, LOCAL, SKEW.num_clients, "fc1.weight", rule=ClusterRule(threshold=0.5), seed=0)
    _run(grown, SKEW, make_kd_client_app(SKEW), rounds=2)
    assert grown.threshold == pytest.approx(grown_threshold(grown_threshold(0.5, 1), 2))
