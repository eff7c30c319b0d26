"""FedDyn and SCAFFOLD: reduction to FedAvg, and the update rules of their states."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.client import LocalSGD, client_seed, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.feddyn import FEDDYN_STATE, FedDyn, feddyn_train, make_feddyn_client_app
from repro.federated.scaffold import (
    DELTA_CV,
    SCAFFOLD,
    SCAFFOLD_STATE,
    SERVER_CV,
    make_scaffold_client_app,
    scaffold_train,
)
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, client_data, work_model
from repro.models import set_weights

SPEC = TaskSpec(dataset="digits", num_clients=10, alpha=0.5, hidden=(16,))
LOCAL = LocalSGD(batch_size=8, lr=0.05, momentum=0.0).config(3)


@pytest.fixture(autouse=True)
def _message_identity():
    """Messages built outside an engine need Flower's task identity (as the in-process grid sets it)."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1


def _run(strategy, app, rounds=3, spec=SPEC, engine="inprocess"):
    return run_federated(strategy, app, spec.num_clients, initial_arrays(spec, 0), rounds,
                         central_evaluator(spec), range(rounds + 1), engine=engine)


def _context(pid: int) -> Context:
    return Context(run_id=1, node_id=pid + 1, node_config={"partition-id": pid, "num-partitions": SPEC.num_clients},
                   state=RecordDict(), run_config={})


def _message(arrays: dict[str, np.ndarray], **config) -> Message:
    cfg = ConfigRecord({**LOCAL, "server-round": 7, **config})
    return Message(RecordDict({"arrays": to_arrayrecord(arrays), "config": cfg}), dst_node_id=1,
                   message_type=MessageType.TRAIN)


def test_feddyn_alpha_zero_is_bitwise_fedavg(same_weights):
    h_avg = _run(SeededFedAvg(4, LOCAL, seed=3), make_client_app(SPEC))
    s = FedDyn(4, LOCAL, SPEC.num_clients, alpha=0.0, seed=3)
    h_dyn = _run(s, make_feddyn_client_app(SPEC))
    assert same_weights(snapshot(h_avg.final_arrays), snapshot(h_dyn.final_arrays))
    assert h_avg.accuracy == h_dyn.accuracy and h_avg.loss == h_dyn.loss
    assert all(not v.any() for v in s.h.values())


def test_scaffold_without_correction_is_bitwise_fedavg_and_with_it_differs(same_weights):
    h_avg = _run(SeededFedAvg(4, LOCAL, seed=4), make_client_app(SPEC))
    h_off = _run(SCAFFOLD(4, LOCAL, SPEC.num_clients, correction=False, seed=4), make_scaffold_client_app(SPEC))
    assert same_weights(snapshot(h_avg.final_arrays), snapshot(h_off.final_arrays))
    assert h_avg.accuracy == h_off.accuracy and h_avg.loss == h_off.loss
    h_on = _run(SCAFFOLD(4, LOCAL, SPEC.num_clients, correction=True, seed=4), make_scaffold_client_app(SPEC))
    assert not same_weights(snapshot(h_avg.final_arrays), snapshot(h_on.final_arrays))


def test_scaffold_client_variate_follows_option_two():
    x = {k: v.numpy() for k, v in initial_arrays(SPEC, 0).items()}
    rng = np.random.default_rng(0)
    c = {k: rng.normal(0, 0.1, v.shape).astype(v.dtype) for k, v in x.items()}
    ctx = _context(2)
    send = dict(x, **{SERVER_CV + k: v for k, v in c.items()})
    # first round: c_i = 0
    r1 = from_arrayrecord(scaffold_train(SPEC, _message(send), ctx).content["arrays"])
    ci1 = from_arrayrecord(ctx.state[SCAFFOLD_STATE])
    K, lr = LOCAL["steps"], LOCAL["lr"]
    for k in x:
        expect = 0.0 - c[k] + (x[k] - r1[k]) / (K * lr)
        np.testing.assert_allclose(ci1[k], expect, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(r1[DELTA_CV + k], ci1[k])  # delta from a zero variate
    # second round from the stored c_i
    r2 = from_arrayrecord(scaffold_train(SPEC, _message(send, **{"server-round": 8}), ctx).content["arrays"])
    ci2 = from_arrayrecord(ctx.state[SCAFFOLD_STATE])
    for k in x:
        np.testing.assert_allclose(ci2[k], ci1[k] - c[k] + (x[k] - r2[k]) / (K * lr), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r2[DELTA_CV + k], ci2[k] - ci1[k], rtol=1e-6, atol=1e-7)


def test_scaffold_one_step_variate_is_the_minibatch_gradient():
    """With K = 1 and no momentum, c_i+ = c_i - c + (x - y)/lr = grad at x on the step's batch."""
    one = dict(LOCAL, steps=1)
    x = {k: v.numpy() for k, v in initial_arrays(SPEC, 0).items()}
    c = {k: np.full(v.shape, 0.01, v.dtype) for k, v in x.items()}
    ctx = _context(1)
    msg = Message(RecordDict({"arrays": to_arrayrecord(dict(x, **{SERVER_CV + k: v for k, v in c.items()})),
                              "config": ConfigRecord({**one, "server-round": 5})}),
                  dst_node_id=1, message_type=MessageType.TRAIN)
    scaffold_train(SPEC, msg, ctx)
    ci = from_arrayrecord(ctx.state[SCAFFOLD_STATE])
    model = work_model(SPEC)
    set_weights(model, x)
    dx, dy = client_data(SPEC, 1)
    # run seed 0, round 5: round_seed(0, 5) == 5
    idx = np.random.default_rng(client_seed(5, 1)).choice(len(dy), size=min(one["batch-size"], len(dy)), replace=False)
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(dx[idx])), torch.from_numpy(dy[idx]))
    grads = dict(zip([k for k, _ in model.named_parameters()], torch.autograd.grad(loss, list(model.parameters()))))
    for k, g in grads.items():
        np.testing.assert_allclose(ci[k], g.numpy(), rtol=1e-3, atol=1e-5)


def test_scaffold_server_variate_is_mean_delta_times_share():
    s = SCAFFOLD(4, LOCAL, SPEC.num_clients, seed=6)
    deltas = {}
    inner = s.aggregate_train

    def spy(server_round, replies):
        replies = list(replies)
        deltas[server_round] = [from_arrayrecord(m.content["arrays"]) for m in replies]
        before = {k: v.copy() for k, v in s.c.items()}
        out = inner(server_round, replies)
        deltas[server_round] = (before, deltas[server_round])
        return out

    s.aggregate_train = spy
    _run(s, make_scaffold_client_app(SPEC), rounds=1)
    before, replies = deltas[1]
    for k, c in s.c.items():
        assert not before[k].any()
        mean = np.mean([r[DELTA_CV + k].astype(np.float64) for r in replies], axis=0)
        np.testing.assert_allclose(c, mean * 4 / SPEC.num_clients, rtol=1e-5, atol=1e-8)
        assert c.any()
    # the communication counts the variates both ways
    assert s.comm.total == 2 * 4 * 2 * sum(v.size for v in s.c.values())


def test_feddyn_server_state_and_model_follow_their_rules():
    alpha, N = 0.1, SPEC.num_clients
    s = FedDyn(4, LOCAL, N, alpha=alpha, seed=2)
    seen = {}
    inner = s.aggregate_train

    def spy(server_round, replies):
        replies = list(replies)
        h0 = {k: v.copy() for k, v in s.h.items()}
        x = {k: v.copy() for k, v in s._sent.items()}
        models = [from_arrayrecord(m.content["arrays"]) for m in replies]
        counts = [int(m.content["metrics"]["num-examples"]) for m in replies]
        out = inner(server_round, replies)
        seen[server_round] = (h0, {k: v.copy() for k, v in s.h.items()}, x, models, counts, from_arrayrecord(out[0]))
        return out

    s.aggregate_train = spy
    _run(s, make_feddyn_client_app(SPEC), rounds=2)
    assert not any(v.any() for v in seen[1][0].values())
    for rnd in (1, 2):
        h0, h1, x, models, counts, new = seen[rnd]
        w = np.asarray(counts, np.float64) / sum(counts)
        for k in x:
            total = sum(m[k].astype(np.float64) - x[k].astype(np.float64) for m in models)
            np.testing.assert_allclose(h1[k], h0[k] - alpha / N * total, rtol=1e-12, atol=1e-15)
            mean = sum(wi * m[k].astype(np.float64) for wi, m in zip(w, models))
            np.testing.assert_allclose(new[k], mean - h1[k] / alpha, rtol=1e-4, atol=1e-5)
            assert h1[k].any()
    # the state carries over between rounds
    for k in seen[2][0]:
        np.testing.assert_array_equal(seen[2][0][k], seen[1][1][k])


def test_feddyn_client_state_is_minus_alpha_times_drift():
    alpha = 0.2
    x = {k: v.numpy() for k, v in initial_arrays(SPEC, 0).items()}
    ctx = _context(3)
    r1 = from_arrayrecord(feddyn_train(SPEC, _message(x, **{"feddyn-alpha": alpha}), ctx).content["arrays"])
    g1 = from_arrayrecord(ctx.state[FEDDYN_STATE])
    for k in x:
        np.testing.assert_allclose(g1[k], -alpha * (r1[k] - x[k]), rtol=1e-5, atol=1e-7)
    second = _message(x, **{"server-round": 9, "feddyn-alpha": alpha})
    r2 = from_arrayrecord(feddyn_train(SPEC, second, ctx).content["arrays"])
    g2 = from_arrayrecord(ctx.state[FEDDYN_STATE])
    for k in x:
        np.testing.assert_allclose(g2[k], g1[k] - alpha * (r2[k] - x[k]), rtol=1e-5, atol=1e-7)


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="alpha"):
        FedDyn(2, LOCAL, 10, alpha=-1.0)
    with pytest.raises(ValueError, match="num_clients"):
        SCAFFOLD(4, LOCAL, 3)


@pytest.mark.slow
def test_scaffold_ray_engine_matches_inprocess(same_weights):
    spec = TaskSpec(dataset="digits", num_clients=4, alpha=0.5, hidden=(16,))
    h_in = _run(SCAFFOLD(2, LOCAL, 4, seed=1), make_scaffold_client_app(spec), rounds=2, spec=spec)
    h_ray = _run(SCAFFOLD(2, LOCAL, 4, seed=1), make_scaffold_client_app(spec), rounds=2, spec=spec, engine="ray")
    assert h_in.accuracy == h_ray.accuracy and h_in.loss == h_ray.loss
    assert same_weights(snapshot(h_in.final_arrays), snapshot(h_ray.final_arrays))
