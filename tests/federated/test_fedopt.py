"""FedOpt from Flower with the book's seeded sampling: stock equality, server SGD and Adam's first step."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedYogi

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.fedopt import SeededFedAdagrad, SeededFedAdam, SeededFedAvgM, SeededFedYogi
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec

SPEC = TaskSpec(dataset="digits", num_clients=6, alpha=0.5, hidden=(16,), n_train=600)
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.0).config(3)


def final(strategy, rounds: int, seed: int = 2) -> dict[str, np.ndarray]:
    app = make_client_app(SPEC, {"seed": seed, **LOCAL})
    hist = run_federated(strategy, app, SPEC.num_clients, initial_arrays(SPEC, 0), rounds, central_evaluator(SPEC),
                         [rounds])
    return snapshot(hist.final_arrays)


@pytest.mark.parametrize("seeded, stock", [(SeededFedAdam, FedAdam), (SeededFedYogi, FedYogi),
                                           (SeededFedAdagrad, FedAdagrad)])
def test_seeded_optimiser_with_every_client_equals_flowers_own(seeded, stock, same_weights):
    """Only the sampling is the book's: with every client active the run ends where Flower's stock strategy does."""
    ours = final(seeded(SPEC.num_clients, LOCAL, seed=5, eta=0.03, tau=1e-3), rounds=3)
    flower = final(stock(eta=0.03, tau=1e-3, fraction_evaluate=0.0, min_available_nodes=SPEC.num_clients,
                         min_train_nodes=SPEC.num_clients), rounds=3)
    assert same_weights(ours, flower)


def test_server_sgd_at_rate_one_without_momentum_is_fedavg(same_weights):
    assert same_weights(final(SeededFedAvgM(3, LOCAL, seed=1), 4), final(SeededFedAvg(3, LOCAL, seed=1), 4))


def test_server_sgd_at_half_rate_stops_halfway():
    """One round of server SGD at rate 0.5 lands midway between the start and FedAvg's model (same clients)."""
    start = {k: v.numpy() for k, v in initial_arrays(SPEC, 0).items()}
    avg = final(SeededFedAvg(3, LOCAL, seed=1), 1)
    half = final(SeededFedAvgM(3, LOCAL, seed=1, server_lr=0.5), 1)
    for k in start:
        np.testing.assert_allclose(half[k], start[k] - 0.5 * (start[k] - avg[k]), rtol=1e-5, atol=1e-6)


def test_adam_first_step_follows_the_pseudo_gradient_of_the_sampled_clients():
    """Round 1 of FedAdam = start + eta_1 * m / (sqrt(v) + tau), with Delta the FedAvg change of the same clients."""
    eta, tau, b1, b2 = 0.02, 1e-3, 0.9, 0.99
    start = {k: v.numpy() for k, v in initial_arrays(SPEC, 0).items()}
    avg = final(SeededFedAvg(3, LOCAL, seed=4), 1)
    adam = final(SeededFedAdam(3, LOCAL, seed=4, eta=eta, beta_1=b1, beta_2=b2, tau=tau), 1)
    eta_1 = eta * np.sqrt(1 - b2**2) / (1 - b1**2)  # Flower's bias correction at server round 1
    for k in start:
        delta = avg[k] - start[k]
        expected = start[k] + eta_1 * (1 - b1) * delta / (np.sqrt((1 - b2) * delta**2) + tau)
        np.testing.assert_allclose(adam[k], expected, rtol=1e-4, atol=1e-6)
    assert any(not np.array_equal(adam[k], avg[k]) for k in start)


def test_adagrad_keeps_flowers_moment_defaults():
    s = SeededFedAdagrad(2, LOCAL, eta=0.1)
    assert (s.beta_1, s.beta_2, s.eta, s.eta_l) == (0.0, 0.0, 0.1, LOCAL["lr"])
    with pytest.raises(ValueError, match="eta and tau"):
        SeededFedAdam(2, LOCAL, eta=0.0)
