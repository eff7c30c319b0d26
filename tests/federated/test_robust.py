"""The edge-case backdoor and the defences: planted attackers are detected, clean rounds measured."""

from __future__ import annotations

import numpy as np
import pytest

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.robust import (
    RFA,
    EdgeCaseAttack,
    FedGradFilter,
    Flame,
    MultiKrumDefence,
    NoDefence,
    NormClipping,
    RobustFedAvg,
    attacked_client_data,
    detection_rates,
    geometric_median,
    make_attacked_client_app,
    rotate_images,
    tail_sets,
)
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, client_data

SPEC = TaskSpec(dataset="digits", num_clients=10, alpha=0.5, hidden=(16,))
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.0).config(3)
KEYS = {"fc0.weight": (4, 6), "fc0.bias": (4,), "fc1.weight": (3, 4), "fc1.bias": (3,)}


def _models(n_honest: int, n_bad: int, seed: int = 0, shift: float = 3.0):
    """Honest updates scattered around one direction; attackers share a distinct, larger direction."""
    rng = np.random.default_rng(seed)
    prev = {k: rng.normal(size=s).astype(np.float32) for k, s in KEYS.items()}
    common = {k: rng.normal(size=s) for k, s in KEYS.items()}
    evil = {k: rng.normal(size=s) for k, s in KEYS.items()}
    honest = [{k: (prev[k] + 0.3 * common[k] + 0.05 * rng.normal(size=s)).astype(np.float32)
               for k, s in KEYS.items()} for _ in range(n_honest)]
    bad = [{k: (prev[k] + shift * evil[k] + 0.05 * rng.normal(size=s)).astype(np.float32)
            for k, s in KEYS.items()} for _ in range(n_bad)]
    return prev, honest + bad


def test_multikrum_rfa_flame_fedgrad_flag_planted_attackers():
    prev, models = _models(8, 2)
    counts = [10] * 10
    bad = {8, 9}
    _, f = MultiKrumDefence(num_malicious=2).aggregate(prev, models, counts)
    assert set(f) == bad
    _, f = Flame().aggregate(prev, models, counts)
    assert bad <= set(f) and len(set(f) - bad) <= 3  # HDBSCAN may also call a few honest points noise
    _, f = FedGradFilter("fc1.weight", "fc1.bias").aggregate(prev, models, counts)
    assert bad <= set(f)
    # RFA flags nobody but ends near the honest models
    agg, f = RFA().aggregate(prev, models, counts)
    honest_mean = {k: np.mean([m[k] for m in models[:8]], axis=0) for k in prev}
    fedavg, _ = NoDefence().aggregate(prev, models, counts)
    d_rfa = sum(np.linalg.norm(agg[k] - honest_mean[k]) for k in prev)
    d_avg = sum(np.linalg.norm(fedavg[k] - honest_mean[k]) for k in prev)
    assert f == [] and d_rfa < 0.25 * d_avg


def test_false_positives_without_attackers():
    prev, models = _models(10, 0, seed=1)
    counts = [10] * 10
    _, f = Flame().aggregate(prev, models, counts)
    assert len(f) < 5  # the majority cluster is always admitted; HDBSCAN's noise points are its false positives
    _, f = MultiKrumDefence(num_malicious=2).aggregate(prev, models, counts)
    assert len(f) == 2  # Multi-Krum always drops f models, attackers or not
    rates = detection_rates({1: list(range(10))}, {1: f}, attackers=[])
    assert np.isnan(rates["tpr"]) and rates["fpr"] == pytest.approx(0.2)


def test_detection_rates_count_per_round():
    sampled = {1: [0, 1, 2, 3], 2: [0, 4, 5, 6]}
    flagged = {1: [0, 2], 2: [5]}
    r = detection_rates(sampled, flagged, attackers=[0, 1])
    assert r["tpr"] == pytest.approx(1 / 3) and r["fpr"] == pytest.approx(2 / 5)


def test_norm_clipping_bounds_updates_and_large_bound_is_fedavg():
    prev, models = _models(5, 1, seed=2)
    counts = [1, 2, 3, 4, 5, 6]
    big, _ = NormClipping(1e9).aggregate(prev, models, counts)
    avg, _ = NoDefence().aggregate(prev, models, counts)
    for k in prev:
        np.testing.assert_allclose(big[k], avg[k], rtol=1e-6, atol=1e-6)
    small, _ = NormClipping(0.1).aggregate(prev, models, counts)
    flat = np.concatenate([(small[k] - prev[k]).ravel() for k in prev])
    assert np.linalg.norm(flat) <= 0.1 + 1e-5


def test_geometric_median_of_symmetric_points_and_an_outlier():
    pts = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [100.0, 100.0]])
    z = geometric_median(pts, np.ones(5))
    assert np.linalg.norm(z) < 0.5  # the outlier barely moves it; the mean would be (20, 20)


def test_edge_case_attack_data():
    attack = EdgeCaseAttack(spec=SPEC, attackers=(2, 5), pdr=0.25)
    train_tail, test_tail = tail_sets(attack)
    ds_x, ds_y = client_data(SPEC, 2)
    x, y = attacked_client_data(attack, 2)
    n_poison = len(y) - len(ds_y)
    assert n_poison == round(0.25 * len(ds_y) / 0.75)
    assert (y[len(ds_y):] == 1).all() and np.array_equal(x[:len(ds_x)], ds_x)
    xh, yh = attacked_client_data(attack, 3)
    assert np.array_equal(yh, client_data(SPEC, 3)[1])
    assert len(train_tail) > 50 and len(test_tail) > 10
    # rotation keeps the ink and changes the picture
    r = rotate_images(train_tail[:1], np.array([0.0]))
    np.testing.assert_allclose(r, np.clip(train_tail[:1], 0, train_tail.max()), atol=1e-6)
    with pytest.raises(ValueError, match="pdr"):
        EdgeCaseAttack(spec=SPEC, attackers=(1,), pdr=1.0)
    with pytest.raises(ValueError, match="attackers"):
        EdgeCaseAttack(spec=SPEC, attackers=(99,))


def test_attacked_app_without_attackers_and_no_defence_is_bitwise_fedavg():
    rounds = 3
    h_avg = run_federated(SeededFedAvg(4, LOCAL, seed=0), make_client_app(SPEC), 10, initial_arrays(SPEC, 0),
                          rounds, central_evaluator(SPEC), [rounds])
    s = RobustFedAvg(4, LOCAL, NoDefence(), seed=0)
    h_rob = run_federated(s, make_attacked_client_app(EdgeCaseAttack(spec=SPEC, attackers=())), 10,
                          initial_arrays(SPEC, 0), rounds, central_evaluator(SPEC), [rounds])
    a, b = snapshot(h_avg.final_arrays), snapshot(h_rob.final_arrays)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-6)
    assert all(f == [] for f in s.flagged.values()) and sorted(s.flagged) == [1, 2, 3]


def test_fedgrad_keeps_the_previous_model_when_it_excludes_everyone(monkeypatch):
    prev, models = _models(4, 2)
    grad = FedGradFilter("fc1.weight", "fc1.bias")
    monkeypatch.setattr(grad, "suspects", lambda prev, models, pids: set(range(len(models))))
    agg, excluded = grad.aggregate(prev, models, [10] * 6)
    assert excluded == list(range(6))
    for k in prev:
        np.testing.assert_array_equal(agg[k], prev[k])


def test_fedgrad_hard_filter_history_every_round_trust_gated_and_krum_neighbourhood():
    prev, models = _models(6, 2)
    grad = FedGradFilter("fc1.weight", "fc1.bias", switch_round=3, num_malicious=2)
    pids = list(range(8))
    for _ in range(2):
        grad.aggregate(prev, models, [10] * 8, pids)
    assert len(grad._pairs_weight[(0, 7)]) == 2 and len(grad._pairs_bias[(3, 3)]) == 2  # before the switch round
    assert all(r[0] == FedGradFilter.trust_initial for r in grad.trust.values())
    # Krum: n - f - 2 = 4 nearest others
    flat = np.stack([np.concatenate([np.asarray(v, np.float64).ravel() for v in m.values()]) for m in models])
    d2 = ((flat[:, None] - flat[None]) ** 2).sum(-1)
    np.testing.assert_allclose(grad.krum_scores(models), [np.sort(r)[1:5].sum() for r in d2])



def test_flame_adds_noise_of_its_factor_times_the_median_update_norm_to_the_clipped_average():
    prev, models = _models(8, 2)
    counts = [10] * 10
    quiet, flagged = Flame(noise_factor=0.0).aggregate(prev, models, counts)
    admitted = [i for i in range(10) if i not in flagged]
    bound = float(np.median([np.linalg.norm(np.concatenate([(m[k] - prev[k]).ravel() for k in prev])) for m in models]))
    clipped, _ = NormClipping(bound).aggregate(prev, [models[i] for i in admitted], [counts[i] for i in admitted])
    assert all(np.array_equal(quiet[k], clipped[k]) for k in prev)
    noisy, again = Flame(noise_factor=0.05, seed=3).aggregate(prev, models, counts)
    assert again == flagged
    noise = np.concatenate([(noisy[k] - quiet[k]).ravel() for k in prev])
    # 43 coordinates: the sample sd is within 30% of the noise's, the mean within half an sd of 0
    assert noise.std() == pytest.approx(0.05 * bound, rel=0.3) and abs(noise.mean()) < 0.5 * 0.05 * bound
    same, _ = Flame(noise_factor=0.05, seed=3).aggregate(prev, models, counts)
    assert all(np.array_equal(same[k], noisy[k]) for k in prev)
    with pytest.raises(ValueError, match="noise_factor"):
        Flame(noise_factor=-1.0)
