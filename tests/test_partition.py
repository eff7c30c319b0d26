"""Partitioners: coverage and label histograms that match their parameters."""

from __future__ import annotations

import numpy as np
import pytest

from repro import partition

LABELS = np.repeat(np.arange(10), 300)  # 3000 samples, 10 balanced classes


def _covers_once(parts, n):
    allidx = np.concatenate(parts)
    return len(allidx) == n and len(np.unique(allidx)) == n


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards"])
def test_every_sample_exactly_once(scheme):
    parts = partition.partition(LABELS, 20, scheme, seed=3, alpha=0.5)
    assert len(parts) == 20
    assert _covers_once(parts, len(LABELS))


def test_iid_sizes_and_histograms():
    parts = partition.iid(LABELS, 10, seed=0)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    hist = partition.label_histogram(LABELS, parts, 10)
    # each client's class shares are close to 1/10 (300 samples per client)
    assert np.abs(hist / hist.sum(1, keepdims=True) - 0.1).max() < 0.1


def test_dirichlet_histogram_matches_alpha():
    """Dir(alpha) per class over K clients: E[share] = 1/K and Var[share] = (K-1)/(K^2 (K alpha + 1))."""
    k = 10
    for alpha in (0.1, 1.0, 100.0):
        shares = []
        for seed in range(20):
            parts = partition.dirichlet(LABELS, k, alpha, seed=seed, min_size=1)
            hist = partition.label_histogram(LABELS, parts, 10)
            shares.append(hist / hist.sum(0, keepdims=True))  # share of each class on each client
        s = np.stack(shares)
        assert abs(s.mean() - 1 / k) < 1e-9  # shares of a class sum to 1 over clients
        expected_var = (k - 1) / (k**2 * (k * alpha + 1))
        assert s.var() == pytest.approx(expected_var, rel=0.25), alpha


def test_dirichlet_small_alpha_gives_few_classes():
    parts = partition.dirichlet(LABELS, 20, 0.05, seed=1)
    hist = partition.label_histogram(LABELS, parts, 10)
    major = (hist / hist.sum(1, keepdims=True) > 0.05).sum(1)
    assert np.median(major) <= 3


def test_dirichlet_min_size_and_errors():
    parts = partition.dirichlet(LABELS, 50, 0.1, seed=0, min_size=5)
    assert min(len(p) for p in parts) >= 5
    with pytest.raises(ValueError, match="alpha"):
        partition.dirichlet(LABELS, 5, 0.0)
    with pytest.raises(ValueError, match="cannot split"):
        partition.iid(np.arange(3), 5)


def test_shards_give_at_most_two_classes():
    parts = partition.shards(LABELS, 15, shards_per_client=2, seed=0)
    hist = partition.label_histogram(LABELS, parts, 10)
    # 30 shards of 100 samples; class boundaries fall on shard boundaries here
    assert ((hist > 0).sum(1) <= 2).all()
    assert all(len(p) == 200 for p in parts)


def test_deterministic_by_seed():
    a = partition.dirichlet(LABELS, 8, 0.3, seed=7)
    b = partition.dirichlet(LABELS, 8, 0.3, seed=7)
    c = partition.dirichlet(LABELS, 8, 0.3, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_sparse_and_scarce_reports_or_refuses_classes_it_would_cap():
    # usage 1 asks for about 1.1 |D| samples in all: some class must run short
    plan = partition.sparse_and_scarce_counts(LABELS, 30, usage=1.0, alpha=0.1, seed=0)
    assert plan.capped, "the plan must ask for more of some class than it has, or this test proves nothing"
    for c, lost in plan.capped.items():
        assert plan.counts[:, c].sum() == 300  # a capped class uses its whole pool, no more
        assert plan.planned[:, c].sum() - plan.counts[:, c].sum() == lost
    uncapped = [c for c in range(10) if c not in plan.capped]
    assert np.array_equal(plan.counts[:, uncapped], plan.planned[:, uncapped])
    with pytest.warns(UserWarning, match=r"usage=1 .*classes .* capped"):
        parts = partition.sparse_and_scarce(LABELS, 30, usage=1.0, alpha=0.1, seed=0)
    assert np.array_equal(partition.label_histogram(LABELS, parts, 10), plan.counts)
    with pytest.raises(ValueError, match=r"parameter 'usage' \(1\) asks for more samples of classes"):
        partition.sparse_and_scarce_counts(LABELS, 30, usage=1.0, alpha=0.1, seed=0, on_shortage="raise")
    with pytest.raises(ValueError, match="on_shortage"):
        partition.sparse_and_scarce_counts(LABELS, 30, on_shortage="resample")


def test_sparse_and_scarce_that_fits_the_pool_is_neither_capped_nor_refused():
    plan = partition.sparse_and_scarce_counts(LABELS, 30, usage=0.2, alpha=0.5, seed=0, on_shortage="raise")
    assert plan.capped == {} and np.array_equal(plan.planned, plan.counts)
