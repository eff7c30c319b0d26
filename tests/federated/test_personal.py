"""The unseen-client label guard and the EM label-prior estimator."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from repro.federated.personal import LabelAccessError, UnseenClientData, em_label_prior, seen_unseen_split


def test_unseen_labels_raise_on_access_but_score():
    data = UnseenClientData(client=3, x=np.zeros((4, 2)), _sealed_y=np.array([0, 1, 1, 0]))
    with pytest.raises(LabelAccessError):
        _ = data.y
    assert data.labels_for_scoring(np.array([0, 1, 0, 0])) == 75.0


def test_seen_unseen_split_partitions_clients():
    seen, unseen = seen_unseen_split(50, 10, seed=0)
    assert len(unseen) == 10 and sorted(seen + unseen) == list(range(50))


def test_em_recovers_a_known_prior_within_005_l1():
    rng = np.random.default_rng(0)
    means, true_prior, train_prior = np.array([-2.0, 0.0, 2.0]), np.array([0.6, 0.3, 0.1]), np.full(3, 1 / 3)
    y = rng.choice(3, size=2000, p=true_prior)
    x = rng.normal(means[y], 1.0)
    likelihood = norm.pdf(x[:, None], means[None, :], 1.0)
    posteriors = likelihood * train_prior / (likelihood * train_prior).sum(1, keepdims=True)
    assert np.abs(em_label_prior(posteriors, train_prior) - true_prior).sum() < 0.05


def test_an_unseen_client_can_agree_to_label_a_seeded_share():
    data = UnseenClientData(client=1, x=np.arange(20.0).reshape(10, 2), _sealed_y=np.arange(10))
    x, y = data.offer_labels(0.3, seed=4)
    assert len(y) == 3 and np.array_equal(x[:, 0] / 2, y)  # the labels belong to the inputs offered
    again, _ = data.offer_labels(0.3, seed=4)
    assert np.array_equal(x, again)
    with pytest.raises(ValueError, match="'share'"):
        data.offer_labels(0.0, seed=0)
