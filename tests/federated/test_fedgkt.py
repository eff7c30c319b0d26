"""FedGKT: the client's round, what it sends, the server's step, and the run on both engines."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.federated.client import LocalSettings, LocalSGD, client_seed, round_seed, train_locally
from repro.federated.engine import run_federated, snapshot
from repro.federated.fedgkt import (
    FEATURES_KEY,
    LABELS_KEY,
    LOGITS_KEY,
    FedGKT,
    GktTask,
    Received,
    client_prefix,
    extractor,
    make_fedgkt_client_app,
    pair_evaluator,
    server_loss,
    train_server,
    unprefixed,
)
from repro.federated.task import TaskSpec, client_data
from repro.models import set_weights, torch_threads

SPEC = TaskSpec(dataset="digits", num_clients=4, scheme="iid", hidden=(32,), n_train=400)
TASK = GktTask(spec=SPEC, client_hidden=(16, 12), server_hidden=(32,))
LOCAL = LocalSGD(batch_size=16, lr=0.1).config(3)


def run_gkt(rounds: int, kd_weight: float = 1.0, server_epochs: int = 1, engine: str = "inprocess",
            seed: int = 0, local: dict[str, float | int] = LOCAL) -> tuple[FedGKT, dict[str, np.ndarray], list[float]]:
    strategy = FedGKT(SPEC.num_clients, local, TASK.server_model(seed), seed=seed, kd_weight=kd_weight,
                      server_epochs=server_epochs)
    hist = run_federated(strategy, make_fedgkt_client_app(TASK, {"seed": seed}), SPEC.num_clients,
                         TASK.initial_arrays(seed), rounds, pair_evaluator(TASK), range(rounds + 1), engine=engine)
    return strategy, snapshot(hist.final_arrays), hist.accuracy


def test_without_distillation_or_server_a_client_round_is_plain_local_sgd():
    """KD weight 0 and no server step: each client's model after two rounds is two rounds of plain local SGD."""
    _, final, _ = run_gkt(rounds=2, kd_weight=0.0, server_epochs=0, seed=3)
    init = unprefixed(snapshot(TASK.initial_arrays(3)), client_prefix(0))
    for pid in range(SPEC.num_clients):
        model = TASK.client_model(0)
        set_weights(model, init)
        x, y = client_data(SPEC, pid)
        for rnd in (1, 2):
            settings = LocalSettings(steps=3, batch_size=16, lr=0.1, momentum=0.0,
                                     seed=client_seed(round_seed(3, rnd), pid))
            train_locally(model, x, y, settings)
        got = unprefixed(final, client_prefix(pid))
        for k, v in model.state_dict().items():
            np.testing.assert_array_equal(got[k], v.numpy())


def test_distillation_changes_the_clients_from_the_second_round_on():
    _, plain, _ = run_gkt(rounds=2, kd_weight=0.0, server_epochs=1)
    _, taught, _ = run_gkt(rounds=2, kd_weight=1.0, server_epochs=1)
    one = unprefixed(plain, client_prefix(1))
    assert any(not np.array_equal(one[k], v) for k, v in unprefixed(taught, client_prefix(1)).items())


def test_what_a_client_sends_has_its_partitions_shapes_and_labels():
    strategy = FedGKT(SPEC.num_clients, LOCAL, TASK.server_model(0), server_epochs=1)
    captured: list = []
    aggregate = strategy.aggregate_train

    def spy(server_round, replies):
        replies = list(replies)
        captured.extend(replies)
        return aggregate(server_round, replies)

    strategy.aggregate_train = spy
    run_federated(strategy, make_fedgkt_client_app(TASK, {"seed": 0}), SPEC.num_clients, TASK.initial_arrays(0), 1,
                  pair_evaluator(TASK), [1])
    assert len(captured) == SPEC.num_clients
    for reply in captured:
        pid = int(reply.content["metrics"]["partition-id"])
        arrays = {k: v.numpy() for k, v in reply.content["arrays"].items()}
        x, y = client_data(SPEC, pid)
        assert arrays[FEATURES_KEY].shape == (len(y), TASK.client_hidden[-1])
        assert arrays[LOGITS_KEY].shape == (len(y), 10)
        np.testing.assert_array_equal(arrays[LABELS_KEY], y)
        assert strategy.server_logits[pid].shape == (len(y), 10)
    # traffic: round 1 moves each client's model down and features, labels and logits up
    n = sum(len(client_data(SPEC, p)[1]) for p in range(SPEC.num_clients))
    model = sum(p.numel() for p in TASK.client_model(0).parameters())
    assert strategy.comm.total == SPEC.num_clients * model + n * (TASK.client_hidden[-1] + 1 + 10)


def test_server_step_lowers_the_server_loss_on_the_received_features():
    gen = np.random.default_rng(0)
    y = gen.integers(0, 10, 300)
    centres = gen.normal(size=(10, 12)).astype(np.float32)
    data = Received(features=centres[y] + 0.5 * gen.normal(size=(300, 12)).astype(np.float32), labels=y,
                    logits=gen.normal(size=(300, 10)).astype(np.float32))
    server = TASK.server_model(0)
    before = server_loss(server, data, temperature=3.0, weight=1.0)
    train_server(server, data, epochs=3, lr=0.1, batch_size=16, temperature=3.0, weight=1.0, seed=0)
    assert server_loss(server, data, temperature=3.0, weight=1.0) < 0.8 * before
    unchanged = TASK.server_model(0)
    assert np.isnan(train_server(unchanged, data, epochs=0, lr=0.1, batch_size=16, temperature=3.0, weight=1.0, seed=0))
    for a, b in zip(unchanged.parameters(), TASK.server_model(0).parameters()):
        assert torch.equal(a, b)


def test_received_refuses_misaligned_arrays():
    with pytest.raises(ValueError):
        Received(features=np.zeros((3, 2), np.float32), labels=np.zeros(4, np.int64), logits=np.zeros((3, 10), np.float32))


def test_pair_is_the_clients_extractor_then_the_server():
    client, server = TASK.client_model(1), TASK.server_model(2)
    x = torch.randn(5, 64)
    torch.testing.assert_close(TASK.pair(client, server)(x), server(extractor(client)(x)))
    assert extractor(client)(x).shape == (5, TASK.client_hidden[-1])


def test_training_improves_the_clients_test_accuracy():
    _, _, acc = run_gkt(rounds=6, local=LocalSGD(batch_size=16, lr=0.3).config(3))
    assert acc[-1] > acc[0] + 10


def test_ray_engine_equals_in_process():
    with torch_threads(1):  # the server trains in this process under both engines
        s_in, w_in, acc_in = run_gkt(rounds=2, seed=1)
        s_ray, w_ray, acc_ray = run_gkt(rounds=2, seed=1, engine="ray")
    assert acc_in == acc_ray and s_in.comm.total == s_ray.comm.total
    for k in w_in:
        np.testing.assert_array_equal(w_in[k], w_ray[k])
