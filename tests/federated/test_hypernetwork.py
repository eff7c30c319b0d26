"""The hypernetwork head generator: set-descriptor invariances, one distribution -> one head, label-free use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.federated.client import LocalSGD
from repro.federated.engine import run_federated
from repro.federated.hypernetwork import HyperSpec, build_hypernet, hyper_initial, make_hyper_client_app, personal_logits
from repro.federated.personal import LabelAccessError, UnseenClientData
from repro.federated.strategies import SeededFedAvg

SPEC = HyperSpec(in_features=12, body_width=10, descriptor=4, hyper_hidden=8, num_classes=3)


def test_descriptor_is_permutation_invariant_and_ignores_duplicating_the_set():
    model = build_hypernet(SPEC, seed=0)
    x = torch.randn(30, SPEC.in_features)
    z = model.descriptor(x)
    torch.testing.assert_close(model.descriptor(x[torch.randperm(30)]), z)
    torch.testing.assert_close(model.descriptor(torch.cat([x, x])), z)


def test_one_shared_distribution_gives_nearly_one_head():
    """Two large samples of the same distribution get (near) identical heads; a shifted one does not."""
    model = build_hypernet(SPEC, seed=1)
    rng = np.random.default_rng(0)
    a, b = (torch.from_numpy(rng.normal(size=(4000, SPEC.in_features)).astype(np.float32)) for _ in range(2))
    shifted = a + 2.0
    with torch.no_grad():
        wa, wb, ws = (model.head(model.descriptor(s))[0] for s in (a, b, shifted))
    assert (wa - wb).norm() < 0.02 * (wa - ws).norm()


def test_forward_needs_a_client_set():
    model = build_hypernet(SPEC, seed=0)
    with pytest.raises(RuntimeError, match="unlabelled set"):
        model(torch.zeros(2, SPEC.in_features))


def test_an_unseen_client_is_served_from_inputs_alone():
    """The unseen path reads only ``x``; code that touches the labels raises."""
    model = build_hypernet(SPEC, seed=0)
    client = UnseenClientData(client=7, x=np.random.default_rng(1).normal(size=(20, SPEC.in_features)).astype(np.float32),
                              _sealed_y=np.zeros(20, dtype=np.int64))
    logits = personal_logits(model, client.x, client.x)
    assert logits.shape == (20, SPEC.num_classes)
    assert client.labels_for_scoring(logits.argmax(1)) >= 0.0
    with pytest.raises(LabelAccessError):
        personal_logits(model, client.x, client.x[client.y == 0])


def test_federated_training_of_the_hypernetwork_learns_a_per_client_rule():
    """Two kinds of client whose label is read from a different input half: personal heads fit both."""
    rng = np.random.default_rng(0)
    data = {}
    for pid in range(4):
        x = rng.normal(size=(64, SPEC.in_features)).astype(np.float32)
        x[:, -1] = 3.0 * (pid % 2)  # the clients' kind is visible in their inputs
        y = (x[:, 0] > 0).astype(np.int64) if pid % 2 == 0 else (x[:, 1] > 0).astype(np.int64) + 1
        data[pid] = (x, y)
    local = LocalSGD(batch_size=16, lr=0.1, momentum=0.5).config(10)
    app = make_hyper_client_app(SPEC, lambda pid: data[pid], {"seed": 0})
    hist = run_federated(SeededFedAvg(4, local, seed=0), app, 4, hyper_initial(SPEC, 0), 30,
                         lambda arrays: {"accuracy": 0.0, "loss": 0.0}, [30])
    model = build_hypernet(SPEC, seed=0)
    model.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in hist.final_arrays.items()})
    accs = [np.mean(personal_logits(model, x, x).argmax(1) == y) for x, y in data.values()]
    assert min(accs) > 0.85
