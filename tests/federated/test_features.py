"""The shared last-layer features: detection, exact values, and the callers' old inline formulas."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from repro.federated.arrays import to_arrayrecord
from repro.federated.engine import initial_arrays
from repro.federated.features import (
    last_layer_deviations,
    last_layer_stack,
    last_layer_updates,
    last_weight_layer,
    row_normalised,
)
from repro.federated.robust import FedGradFilter
from repro.federated.task import TaskSpec

SPEC = TaskSpec(dataset="digits", num_clients=6, alpha=0.5, hidden=(16, 8))


@pytest.fixture(autouse=True)
def _message_identity():
    """Messages built outside an engine need Flower's task identity (as the in-process grid sets it)."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1


def _models(n: int = 4, seed: int = 0) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    glob = {k: v.numpy().copy() for k, v in initial_arrays(SPEC, 0).items()}
    rng = np.random.default_rng(seed)
    models = [{k: (v + rng.normal(0, 0.05, v.shape)).astype(v.dtype) for k, v in glob.items()} for _ in range(n)]
    return glob, models


def _reply(arrays: dict[str, np.ndarray], pid: int) -> Message:
    request = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=1, message_type=MessageType.TRAIN)
    content = RecordDict({"arrays": to_arrayrecord(arrays), "metrics": MetricRecord({"partition-id": pid})})
    return Message(content, reply_to=request)


def test_last_weight_layer_is_the_classifier_weight():
    glob, _ = _models()
    assert list(glob)[-2:] == ["fc2.weight", "fc2.bias"]
    assert last_weight_layer(glob) == "fc2.weight"
    assert last_weight_layer(to_arrayrecord(glob)) == "fc2.weight"
    with pytest.raises(ValueError, match="no weight layer"):
        last_weight_layer({"bias": np.zeros(3)})


def test_updates_are_exact_differences_whatever_the_container():
    glob, models = _models()
    from_dicts = last_layer_updates(models, glob)
    assert from_dicts.shape == (4, 10, 8) and from_dicts.dtype == np.float64
    for i, m in enumerate(models):  # the difference is taken in float32 and then widened
        np.testing.assert_array_equal(from_dicts[i], (m["fc2.weight"] - glob["fc2.weight"]).astype(np.float64))
    records = [to_arrayrecord(m) for m in models]
    replies = [_reply(m, i) for i, m in enumerate(models)]
    np.testing.assert_array_equal(last_layer_updates(records, to_arrayrecord(glob)), from_dicts)
    np.testing.assert_array_equal(last_layer_updates(replies, glob["fc2.weight"]), from_dicts)
    # another layer by name
    np.testing.assert_array_equal(last_layer_updates(models, glob, layer="fc0.bias")[1],
                                  (models[1]["fc0.bias"] - glob["fc0.bias"]).astype(np.float64))


def test_stack_and_deviations():
    _, models = _models(5, seed=1)
    w = last_layer_stack(models)
    np.testing.assert_array_equal(w[3], models[3]["fc2.weight"].astype(np.float64))
    dev = last_layer_deviations(models)
    np.testing.assert_array_equal(dev, w - w.mean(0))
    np.testing.assert_allclose(dev.sum(0), 0.0, atol=1e-12)


def test_row_normalised_hand_case():
    u = np.array([[[3.0, 4.0], [0.0, 0.0]], [[0.0, -2.0], [1.0, 0.0]]])
    out = row_normalised(u)
    np.testing.assert_array_equal(out, [[0.6, 0.8, 0.0, 0.0], [0.0, -1.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="updates must have shape"):
        row_normalised(np.zeros((2, 3)))


def test_bad_inputs_are_named():
    glob, models = _models(2)
    with pytest.raises(KeyError, match="nope"):
        last_layer_updates(models, glob, layer="nope")
    with pytest.raises(ValueError, match="differs"):
        last_layer_updates(models, np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError, match="empty"):
        last_layer_stack([])
    with pytest.raises(TypeError, match="ArrayRecord"):
        last_layer_stack([3.0])


def test_callers_give_their_previous_inline_results_bit_for_bit():
    glob, models = _models(6, seed=2)
    key = "fc2.weight"
    # FedGrad's soft filter, before: cosines of deviations from the mean with the mean update
    W = np.stack([m[key].astype(np.float64).ravel() for m in models])
    avg = W.mean(0)
    g = avg - glob[key].astype(np.float64).ravel()
    u = W - avg
    c = u @ g / np.maximum(np.linalg.norm(u, axis=1) * np.linalg.norm(g), 1e-12)
    np.testing.assert_array_equal(FedGradFilter(key, "fc2.bias").soft_scores(glob, models),
                                  (c - c.min()) / (c.max() - c.min()))
    # FedGrad's hard filter, before: per-class-row sums of the deviations from the mean
    W3 = np.stack([m[key].astype(np.float64) for m in models])
    np.testing.assert_array_equal(last_layer_deviations(models, key).sum(axis=2), (W3 - W3.mean(0)).sum(axis=2))
