"""The offline text task that stands in for AG News."""

from __future__ import annotations

import numpy as np
import pytest

from repro.federated.task import TaskSpec, load_dataset, load_task_data
from repro.federated.textdata import DOC_TOPIC_SOURCES, docstrings, load_doc_topics


def test_docstrings_are_cut_and_filtered():
    docs = docstrings("networkx", min_words=8, max_words=12)
    assert len(docs) > 1000
    assert all(8 <= len(d.split()) <= 12 for d in docs)


def test_doc_topics_is_balanced_normalised_and_cached():
    d = load_doc_topics()
    assert d.num_classes == len(DOC_TOPIC_SOURCES) == 4
    assert d.x_train.shape == (4800, 2000) and d.x_test.shape == (1200, 2000)
    assert np.bincount(d.y_train).tolist() == [1200] * 4 and np.bincount(d.y_test).tolist() == [300] * 4
    norms = np.linalg.norm(d.x_train, axis=1)
    nonempty = norms > 0
    assert nonempty.mean() > 0.99
    np.testing.assert_allclose(norms[nonempty], 10.0, rtol=1e-5)
    again = load_doc_topics()  # from the cache: identical
    assert np.array_equal(again.x_train, d.x_train) and np.array_equal(again.y_test, d.y_test)
    sub = load_doc_topics(n_train=100)
    assert len(sub.y_train) == 100


def test_doc_topics_through_a_federated_task():
    spec = TaskSpec(dataset="doc_topics", num_clients=8, alpha=0.5, hidden=(8,))
    ds, parts = load_task_data(spec)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(ds.y_train)))
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("ag_news")
    with pytest.raises(ValueError, match="row_norm"):
        load_doc_topics(row_norm=0.0)
