"""FedRep: a frozen head reduces it to FedAvg of the body; personal heads stay on their clients."""

from __future__ import annotations

import numpy as np
import torch

from repro.federated.client import LocalSGD
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.fedrep import FedRep, head_keys, make_fedrep_client_app
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec

SPEC = TaskSpec(dataset="digits", num_clients=6, alpha=0.3, hidden=(16,), n_train=600)
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.5).config(3)


def final(strategy, rounds: int = 4) -> dict[str, np.ndarray]:
    hist = run_federated(strategy, make_fedrep_client_app(SPEC, run_config={"seed": 1}), SPEC.num_clients,
                         initial_arrays(SPEC, 0), rounds, central_evaluator(SPEC), [rounds])
    return snapshot(hist.final_arrays)


def test_head_keys_are_the_last_layer():
    assert head_keys(["fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"]) == ["fc1.weight", "fc1.bias"]


def test_with_the_head_frozen_at_the_shared_one_fedrep_is_fedavg_of_the_body():
    """Equal up to rounding: FedAvg's weighted mean of identical heads is not bitwise the head (FedRep's mean is)."""
    rep = final(FedRep(3, {**LOCAL, "head-steps": 0}, seed=2))
    avg = final(SeededFedAvg(3, {**LOCAL, "head-steps": 0}, seed=2))
    assert set(rep) == set(avg)
    for k in rep:
        np.testing.assert_allclose(rep[k], avg[k], rtol=1e-5, atol=1e-6)
    start = snapshot(initial_arrays(SPEC, 0))
    for k in head_keys(list(start)):
        np.testing.assert_array_equal(rep[k], start[k])  # the head never moved
    assert any(not np.array_equal(rep[k], start[k]) for k in start if k not in head_keys(list(start)))


def test_personal_heads_differ_and_their_mean_is_the_shared_head():
    strategy = FedRep(6, {**LOCAL, "head-steps": 5}, seed=0)
    out = final(strategy, rounds=3)
    heads = list(strategy.heads.values())
    assert len(heads) == SPEC.num_clients
    key = head_keys(list(out))[0]
    assert not np.allclose(heads[0][key], heads[1][key])
    np.testing.assert_allclose(out[key], np.mean([h[key] for h in heads], axis=0), rtol=1e-6, atol=1e-8)


def test_fine_tuning_a_new_clients_head_moves_only_the_head_and_fits_its_labels():
    from repro.federated.client import LocalSettings
    from repro.federated.fedrep import fine_tune_head
    from repro.federated.task import build_model, client_data

    model = build_model(SPEC, seed=0)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y = client_data(SPEC, 0)
    loss = torch.nn.functional.cross_entropy
    start = loss(model(torch.from_numpy(x)), torch.from_numpy(y)).item()
    fine_tune_head(model, x, y, LocalSettings(steps=30, batch_size=16, lr=0.1, momentum=0.0, seed=0))
    head = set(head_keys(list(before)))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]) != (k in head), k  # the head moved, the body did not
    assert loss(model(torch.from_numpy(x)), torch.from_numpy(y)).item() < start
    assert all(p.requires_grad for p in model.parameters())  # nothing left frozen
