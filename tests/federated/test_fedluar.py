"""FedLUAR, its ablations and the top-k baseline: the spec's invariants."""

from __future__ import annotations

import numpy as np
import pytest

from repro.federated.client import LocalSGD
from repro.federated.engine import snapshot
from repro.federated.fedluar import (
    FedLUAR,
    TopKSparsified,
    recycle_probabilities,
    select_recycled,
    top_k_mask,
    update_score,
    uplink_ratio,
)
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec

SPEC = TaskSpec(dataset="digits", num_clients=10, alpha=0.3, hidden=(32, 16, 16))
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.5).config(3)


class _Recorder(FedLUAR):
    """FedLUAR that keeps, per round, the global model and last updates before and after aggregation."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.trace = []

    def aggregate_train(self, server_round, replies):
        before = {k: v.copy() for k, v in self._global.items()}
        upd = {k: v.copy() for k, v in self._update.items()}
        out = super().aggregate_train(server_round, replies)
        self.trace.append((server_round, before, upd, {k: v.copy() for k, v in self._global.items()}))
        return out


def test_delta_zero_is_bitwise_fedavg(run_rounds, same_weights):
    h_avg = run_rounds(SeededFedAvg(4, LOCAL, seed=0))
    s = FedLUAR(4, LOCAL, seed=0, delta=0)
    h_luar = run_rounds(s)
    assert same_weights(snapshot(h_avg.final_arrays), snapshot(h_luar.final_arrays))
    assert h_avg.accuracy == h_luar.accuracy and h_avg.comm == h_luar.comm
    assert all(r == [] for r in s.recycled.values())


def test_recycled_layer_is_previous_weights_plus_previous_update_and_not_uploaded(run_rounds):
    s = _Recorder(4, LOCAL, seed=1, delta=2)
    run_rounds(s, rounds=8)
    kernels = set(s.kernels())
    assert len(kernels) == 4
    seen = 0
    for rnd, before, upd, after in s.trace:
        rec = s.recycled[rnd]
        assert len(rec) == (0 if rnd == 1 else 2) and set(rec) <= kernels
        for k in rec:
            np.testing.assert_array_equal(after[k], before[k] + upd[k])
            assert rnd not in s.comm.syncs[k]  # no client uploaded it this round
            seen += 1
        for k in set(after) - set(rec):
            assert rnd in s.comm.syncs[k]
    assert seen == 2 * 7
    # biases are never recycled
    assert all(not k.endswith(".bias") for r in s.recycled.values() for k in r)


def test_drop_mode_leaves_recycled_layers_unchanged(run_rounds):
    s = _Recorder(4, LOCAL, seed=2, delta=1, mode="drop")
    run_rounds(s, rounds=5)
    for rnd, before, _, after in s.trace:
        for k in s.recycled[rnd]:
            np.testing.assert_array_equal(after[k], before[k])


def test_uplink_cost_is_one_minus_recycled_share(run_rounds):
    rounds = 8
    s = FedLUAR(4, LOCAL, seed=3, delta=2)
    run_rounds(s, rounds=rounds)
    sizes = s.comm.sizes
    total = sum(sizes.values())
    expected = 1.0 - np.mean([sum(sizes[k] for k in s.recycled[r]) for r in range(1, rounds + 1)]) / total
    assert uplink_ratio(s, total, rounds) == pytest.approx(expected, abs=1e-12)
    # the per-layer ledger (FedLAMA's CommLedger) counts the same uploads
    from_ledger = sum(s.comm.up[k] * sizes[k] for k in sizes)
    assert from_ledger == sum(s.uplink)
    assert sum(s.comm.down[k] * sizes[k] for k in sizes) == rounds * 4 * total  # full broadcast


def test_selection_probabilities_positive_normalised_and_decreasing_in_score():
    scores = {"a": 0.5, "b": 0.1, "c": 2.0, "d": 0.1}
    p = recycle_probabilities(scores)
    assert all(v > 0 for v in p.values())
    assert sum(p.values()) == pytest.approx(1.0, abs=1e-15)
    order = sorted(scores, key=scores.get)
    assert all(p[x] >= p[y] for x, y in zip(order, order[1:]))
    assert p["b"] == pytest.approx(p["d"]) and p["b"] == pytest.approx(5 * p["a"])
    with pytest.raises(ValueError, match="scores"):
        recycle_probabilities({"a": -1.0})
    with pytest.raises(ValueError, match="empty"):
        recycle_probabilities({})


def test_select_recycled_draws_distinct_layers_and_follows_the_weights():
    rng = np.random.default_rng(0)
    scores = {"small-update": 0.01, "big-update": 1.0}
    picks = [select_recycled(scores, 1, rng)[0] for _ in range(2000)]
    share = picks.count("small-update") / len(picks)
    assert share == pytest.approx(100 / 101, abs=0.01)
    assert select_recycled({"a": 1.0, "b": 1.0, "c": 1.0}, 5, rng) == ["a", "b", "c"]
    assert select_recycled(scores, 0, rng) == []
    with pytest.raises(ValueError, match="selection"):
        select_recycled(scores, 1, rng, selection="magnitude")
    with pytest.raises(ValueError, match="delta"):
        FedLUAR(2, LOCAL, delta=-1)
    with pytest.raises(ValueError, match="mode"):
        FedLUAR(2, LOCAL, mode="skip")


def test_update_score():
    w = np.full((2, 2), 3.0)
    d = np.full((2, 2), 0.3)
    assert update_score(d, w) == pytest.approx(0.6 / (6.0 + 1e-6))


def test_top_k_mask_keeps_the_largest_entries():
    u = np.array([[0.1, -5.0, 0.2], [3.0, 0.0, -0.3]])
    m = top_k_mask(u, 0.5)
    assert m.sum() == 3
    assert set(np.abs(u[m])) == {5.0, 3.0, 0.3}
    assert top_k_mask(u, 1.0).all()
    assert top_k_mask(u, 0.01).sum() == 1
    with pytest.raises(ValueError, match="keep"):
        top_k_mask(u, 0.0)


def test_top_k_keep_one_equals_fedavg_and_counts_uploads(run_rounds):
    h_avg = run_rounds(SeededFedAvg(4, LOCAL, seed=4), rounds=4)
    s = TopKSparsified(4, LOCAL, seed=4, keep=1.0)
    h_top = run_rounds(s, rounds=4)
    a, b = snapshot(h_avg.final_arrays), snapshot(h_top.final_arrays)
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-5)
    total = sum(s.comm.sizes.values())
    assert uplink_ratio(s, total, 4) == 1.0
    s2 = TopKSparsified(4, LOCAL, seed=4, keep=0.1)
    run_rounds(s2, rounds=2)
    expected = 2 * 4 * sum(int(np.ceil(0.1 * n)) for n in s2.comm.sizes.values())
    assert sum(s2.uplink) == expected



def test_top_k_error_feedback_keeps_what_was_not_sent(run_rounds):
    s = TopKSparsified(4, LOCAL, seed=4, keep=0.1)
    h_fb = run_rounds(s, rounds=3)
    plain = TopKSparsified(4, LOCAL, seed=4, keep=0.1, error_feedback=False)
    h_plain = run_rounds(plain, rounds=3)
    assert plain.residual == {} or all(r == {} for r in plain.residual.values())
    sampled = {p for r in s.sampled.values() for p in r}
    assert set(s.residual) == sampled
    for res in s.residual.values():
        for k, v in res.items():
            kept = int(np.ceil(0.1 * v.size))
            assert np.count_nonzero(v) <= v.size - kept  # the sent entries leave the residual
            assert np.count_nonzero(v) > 0  # the rest is remembered
    a, b = snapshot(h_fb.final_arrays), snapshot(h_plain.final_arrays)
    assert any(not np.allclose(a[k], b[k]) for k in a)  # the remembered remainder changes the model

@pytest.mark.slow
def test_fedluar_ray_engine_matches_inprocess(run_rounds, same_weights):
    """Flower's Ray simulation and the in-process grid give identical FedLUAR runs."""
    spec = TaskSpec(dataset="digits", num_clients=4, alpha=0.5, hidden=(16, 16))
    s_in, s_ray = FedLUAR(2, LOCAL, seed=5, delta=1), FedLUAR(2, LOCAL, seed=5, delta=1)
    h_in = run_rounds(s_in, rounds=3, spec=spec)
    h_ray = run_rounds(s_ray, rounds=3, spec=spec, engine="ray")
    assert h_in.accuracy == h_ray.accuracy and s_in.recycled == s_ray.recycled
    assert same_weights(snapshot(h_in.final_arrays), snapshot(h_ray.final_arrays))
