"""The sparse-and-scarce and cluster-skew partitioners: histograms match their parameters."""

from __future__ import annotations

import numpy as np
import pytest

from repro import partition as P

LABELS = np.random.default_rng(0).integers(0, 10, size=6000)


def _disjoint(parts):
    allidx = np.concatenate(parts)
    return len(allidx) == len(np.unique(allidx))


def test_sparse_and_scarce_histogram_is_its_target_and_is_sparse_and_scarce():
    counts = P.sparse_and_scarce_counts(LABELS, 100, usage=0.3, alpha=0.1, beta=2000.0, seed=1).counts
    parts = P.sparse_and_scarce(LABELS, 100, usage=0.3, alpha=0.1, beta=2000.0, seed=1)
    hist = P.label_histogram(LABELS, parts, 10)
    assert np.array_equal(hist, counts)
    assert _disjoint(parts) and all(len(p) >= 1 for p in parts)
    # volumes: 0.1 u |D| / N + floor(q u |D|) with q near uniform (beta large): about 1.1 u |D| / N each
    vol = hist.sum(1)
    assert vol.max() <= 1.1 * 0.3 * 6000 / 100 + 1
    assert np.median(vol) == pytest.approx(1.1 * 0.3 * 6000 / 100, rel=0.15)
    assert P.sparsity(hist) > 0.6  # alpha = 0.1: most clients miss most classes
    assert P.scarcity(hist, threshold=50) == 1.0


def test_sparse_and_scarce_responds_to_alpha_and_usage():
    dense = P.label_histogram(LABELS, P.sparse_and_scarce(LABELS, 50, usage=0.5, alpha=100.0, seed=2), 10)
    sparse = P.label_histogram(LABELS, P.sparse_and_scarce(LABELS, 50, usage=0.5, alpha=0.05, seed=2), 10)
    assert P.sparsity(dense) < 0.05 < 0.6 < P.sparsity(sparse)
    small = P.sparse_and_scarce_counts(LABELS, 50, usage=0.05, seed=3).counts.sum(1)
    large = P.sparse_and_scarce_counts(LABELS, 50, usage=0.5, seed=3).counts.sum(1)
    assert small.mean() < 0.2 * large.mean()
    with pytest.raises(ValueError, match="usage"):
        P.sparse_and_scarce_counts(LABELS, 10, usage=0.0)
    with pytest.raises(ValueError, match="alpha"):
        P.sparse_and_scarce_counts(LABELS, 10, alpha=-1.0)


def test_cluster_skew_clients_of_a_group_share_their_histogram():
    sizes = [5, 3, 2]
    counts, cluster = P.cluster_skew_counts(LABELS, sizes, samples_per_client=120, alpha=0.3, seed=4)
    parts = P.cluster_skew(LABELS, sizes, samples_per_client=120, alpha=0.3, seed=4)
    hist = P.label_histogram(LABELS, parts, 10)
    assert np.array_equal(hist, counts) and _disjoint(parts)
    assert cluster.tolist() == [0] * 5 + [1] * 3 + [2] * 2
    assert (hist.sum(1) == 120).all()
    for g in range(3):
        rows = hist[cluster == g]
        assert (rows == rows[0]).all()
    assert not (hist[0] == hist[5]).all()
    with pytest.raises(ValueError, match="cluster_sizes"):
        P.cluster_skew_counts(LABELS, [3, 0], 10)


def test_draw_histogram_refuses_more_than_the_pool():
    with pytest.raises(ValueError, match="classes"):
        P.draw_histogram(np.array([0, 0, 1]), np.array([[2, 0], [1, 1]]))
    assert P._largest_remainder(10, np.array([1.0, 1.0, 1.0])).tolist() == [4, 3, 3]


def test_cluster_skew_resamples_a_class_that_runs_out_instead_of_capping_it():
    labels = np.repeat(np.arange(4), [400, 400, 400, 20])  # class 3 is rare
    sizes, per_client = [4, 4], 100
    counts, _ = P.cluster_skew_counts(labels, sizes, per_client, alpha=0.2, seed=4)
    short = P.shortages(labels, counts)
    assert short, "the plan must ask for more of some class than it has, or this test proves nothing"
    with pytest.warns(UserWarning, match="again with replacement"):
        parts = P.cluster_skew(labels, sizes, per_client, alpha=0.2, seed=4)
    hist = P.label_histogram(labels, parts, 4)
    assert np.array_equal(hist, counts) and (hist.sum(1) == per_client).all()  # every client gets its plan
    used = np.concatenate(parts)
    assert len(used) - len(np.unique(used)) == sum(short.values())  # exactly the shortfall is drawn twice
    with pytest.raises(ValueError, match="more samples than they have"):
        P.cluster_skew(labels, sizes, per_client, alpha=0.2, seed=4, on_shortage="raise")
