"""SAFA, daisy chaining and FedProx: the spec's invariants and SAFA's adaptive period."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.federated import regularised
from repro.federated.client import LocalSettings, LocalSGD, make_client_app, penalised_sgd
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.regularised import label_pattern, make_regularised_client_app, squared_gradient
from repro.federated.safa import SAFA, ModelTrail, PeriodRule, PeriodTracker, feddc, next_period
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, build_model, client_data

SPEC = TaskSpec(dataset="digits", num_clients=20, scheme="sparse_and_scarce", alpha=0.1, usage=1.0, hidden=(16,))
LOCAL = LocalSGD(batch_size=8, lr=0.05, momentum=0.0).config(4)


def _run(strategy, app, rounds=5, spec=SPEC, engine="inprocess"):
    return run_federated(strategy, app, spec.num_clients, initial_arrays(spec, 0), rounds,
                         central_evaluator(spec), range(rounds + 1), engine=engine)


def test_safa_lambda_zero_a_zero_period_one_is_bitwise_fedavg(same_weights):
    h_avg = _run(SeededFedAvg(4, LOCAL, seed=0), make_client_app(SPEC))
    h_safa = _run(SAFA(4, LOCAL, seed=0, lam=0.0, mix=0.0, period=1), make_regularised_client_app(SPEC))
    assert same_weights(snapshot(h_avg.final_arrays), snapshot(h_safa.final_arrays))
    assert h_avg.accuracy == h_safa.accuracy


def test_fedprox_mu_zero_is_bitwise_fedavg_and_mu_pulls_towards_the_anchor(same_weights):
    h_avg = _run(SeededFedAvg(4, LOCAL, seed=1), make_client_app(SPEC))
    s = SeededFedProx(4, LOCAL, seed=1, mu=0.0)
    h_prox = _run(s, make_regularised_client_app(SPEC))
    assert same_weights(snapshot(h_avg.final_arrays), snapshot(h_prox.final_arrays))
    assert s.proximal_mu == 0.0
    # a strong proximal term keeps the local model nearer its start
    x, y = client_data(SPEC, 0)
    torch.manual_seed(0)
    base = torch.nn.Linear(64, 10)
    start = {k: v.detach().numpy().copy() for k, v in base.state_dict().items()}
    dist = []
    for mu in (0.0, 5.0):
        m = torch.nn.Linear(64, 10)
        m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in start.items()})
        penalised_sgd(m, x, y, LocalSettings(steps=20, batch_size=8, lr=0.05, momentum=0.0, seed=3), anchor=start,
                      weight=mu / 2)
        dist.append(sum(float(((p.detach().numpy() - start[k]) ** 2).sum()) for k, p in m.named_parameters()))
    assert dist[1] < dist[0]


def test_models_are_chained_and_volumes_and_importance_accumulate():
    K, u = 3, 4
    s = SAFA(K, LOCAL, seed=2, lam=0.1, mix=0.5, period=u)
    _run(s, make_regularised_client_app(SPEC), rounds=3)
    # every round, each model went to exactly one sampled client
    for r, assign in s.assignment.items():
        assert sorted(assign) == s.sampled[r] and sorted(assign.values()) == list(range(K))
    # no pull yet (3 < u): each model's volume is the data of the clients it visited
    sizes = {p: len(client_data(SPEC, p)[1]) for p in range(SPEC.num_clients)}
    for k in range(K):
        seen = [p for r in (1, 2, 3) for p, kk in s.assignment[r].items() if kk == k]
        assert s.volume[k] == sum(sizes[p] for p in seen)
        assert all((f >= 0).all() for f in s.fisher[k].values())
        assert any(f.sum() > 0 for f in s.fisher[k].values())


def test_pull_mixes_models_with_the_global_one_and_resets_volumes():
    K = 3
    s = SAFA(K, LOCAL, seed=3, lam=0.0, mix=0.25, period=2)
    before = {}

    orig = s._pull

    def spy(glob):
        before["models"] = [{k: v.copy() for k, v in m.items()} for m in s.models]
        before["glob"] = {k: v.copy() for k, v in glob.items()}
        orig(glob)

    s._pull = spy
    _run(s, make_regularised_client_app(SPEC), rounds=2)
    assert (s.volume == 0).all()
    for k in range(K):
        for n, g in before["glob"].items():
            np.testing.assert_allclose(s.models[k][n], 0.75 * g + 0.25 * before["models"][k][n], rtol=1e-6)


def test_feddc_is_safa_without_importance_or_memory():
    s = feddc(4, LOCAL, seed=0, period=5)
    assert (s.lam, s.mix, s.period) == (0.0, 0.0, 5)
    with pytest.raises(ValueError, match="mix must"):
        SAFA(2, LOCAL, mix=1.5)
    with pytest.raises(ValueError, match="period"):
        SAFA(2, LOCAL, period=0)


def test_squared_gradient_is_the_square_of_autograd():
    x, y = client_data(SPEC, 1)
    torch.manual_seed(1)
    m = torch.nn.Linear(64, 10)
    sq = squared_gradient(m, x, y)
    loss = torch.nn.functional.cross_entropy(m(torch.from_numpy(x)), torch.from_numpy(y))
    g = torch.autograd.grad(loss, [m.weight, m.bias])
    np.testing.assert_allclose(sq["weight"], (g[0] ** 2).numpy(), rtol=1e-6)
    np.testing.assert_allclose(sq["bias"], (g[1] ** 2).numpy(), rtol=1e-6)


def test_fedprox_mu_reaches_the_clients(same_weights):
    h_avg = _run(SeededFedAvg(4, LOCAL, seed=1), make_client_app(SPEC), rounds=2)
    h_prox = _run(SeededFedProx(4, LOCAL, seed=1, mu=1.0), make_regularised_client_app(SPEC), rounds=2)
    assert not same_weights(snapshot(h_avg.final_arrays), snapshot(h_prox.final_arrays))


# ----- the adaptive period ---------------------------------------------------------------------
def test_label_pattern_marks_only_labels_the_client_holds_and_a_single_label_exactly():
    agree = []
    for seed in (0, 7):
        model = build_model(SPEC, seed=seed)
        for pid in range(SPEC.num_clients):
            x, y = client_data(SPEC, pid)
            held = np.zeros(10, dtype=np.int64)
            held[np.unique(y)] = 1
            pattern = label_pattern(model, x, y)
            assert (pattern <= held).all() and pattern.sum() >= 1  # an absent label never shows
            assert pattern[np.bincount(y).argmax()] == 1  # the client's commonest label always shows
            if held.sum() == 1:
                np.testing.assert_array_equal(pattern, held)
            agree.append((pattern == held).all())
            assert all(p.grad is None for p in model.parameters())  # the gradient does not leak into training
    # a rare label among many of another can leave its row positive: the pattern is not always the label set
    assert 0.5 <= np.mean(agree) < 1.0


def test_next_period_follows_the_rule_on_hand_made_trackers():
    rule = PeriodRule()
    forget = np.zeros(6)
    gain = np.array([9.0, 1.0, 1.0, -5.0, 0.0, 9.0])  # the first and last entries are outside the slice
    # advantage = cumsum([1, 1, -5, 0]) = [1, 2, -3, -3]: argmax 1, so the candidate is 1 + 3 = 4
    choice = next_period(forget, gain, period=15, misses=4, rule=rule)
    np.testing.assert_allclose(choice.advantage, [1, 2, -3, -3])
    assert (choice.period, choice.misses) == (7, 0)  # max(4, 15 // 2)
    assert next_period(forget, gain, period=4, misses=0, rule=rule).period == 9  # unchanged candidate: + 5
    assert next_period(forget, gain, period=6, misses=0, rule=rule).period == 4  # max(4, 3)
    # forgetting outweighs the gain everywhere: no positive advantage
    lost = np.array([0.0, 2.0, 2.0, 2.0, 2.0, 0.0])
    assert (next_period(lost, gain, period=15, misses=0, rule=rule).period,
            next_period(lost, gain, period=15, misses=0, rule=rule).misses) == (7, 1)  # max(3, 7)
    assert next_period(lost, gain, period=4, misses=0, rule=rule).period == 3
    assert next_period(lost, gain, period=8, misses=rule.patience - 1, rule=rule).period == 1
    with pytest.raises(ValueError, match="floor"):
        PeriodRule(floor=2)


def test_trail_files_forgetting_by_revisit_distance_and_the_tracker_moves_where_it_is_positive():
    trail = ModelTrail()
    for group, arrival, departure in [((1,), 10.0, 80.0), ((2,), 20.0, 70.0), ((1,), 50.0, 90.0), ((2,), 75.0, 85.0)]:
        trail.visit(group, arrival, departure)
    assert trail.revisits == [(2, 30.0), (2, -5.0)]  # 80 - 50 and 70 - 75, both two rounds apart
    tracker = PeriodTracker(PeriodRule(smoothing=0.5), period=4, models=1)
    tracker.trails = [trail]
    assert tracker.begin_round() == 1
    tracker.end_round([10.0, 30.0])
    np.testing.assert_allclose(tracker.forget, [0.0, 0.5 * 12.5, 0.0, 0.0])  # mean of 30 and -5, half-way
    np.testing.assert_allclose(tracker.gain, [0.0, 0.5 * 20.0, 0.0, 0.0])
    tracker.trails = [ModelTrail(revisits=[(1, -4.0)])]
    tracker.end_round([0.0])
    assert tracker.forget[0] == 0.0  # a negative forgetting leaves the tracker where it is (as the code does)


def test_adaptation_that_never_fires_is_fixed_period_safa_bit_for_bit(same_weights):
    fixed = SAFA(4, LOCAL, seed=4, lam=0.1, mix=0.95, period=2)
    watched = SAFA(4, LOCAL, seed=4, lam=0.1, mix=0.95, period=2, adaptive=PeriodRule(retain=1000))
    h_fixed = _run(fixed, make_regularised_client_app(SPEC))
    h_watched = _run(watched, make_regularised_client_app(SPEC))
    assert same_weights(snapshot(h_fixed.final_arrays), snapshot(h_watched.final_arrays))
    assert h_fixed.accuracy == h_watched.accuracy
    assert fixed.tracker is None and watched.tracker is not None and not watched.tracker.choices
    assert set(fixed.periods.values()) == {2}


def test_adaptive_period_groups_every_client_it_sees_and_changes_u_at_a_pull():
    s = SAFA(4, LOCAL, seed=6, lam=0.1, mix=0.95, period=3, adaptive=PeriodRule(retain=1))
    _run(s, make_regularised_client_app(SPEC), rounds=8)
    assert s.tracker is not None and 3 in s.tracker.choices  # the first pull, at round 3, adapts
    assert sorted(s.tracker.groups) == sorted({p for r in s.sampled.values() for p in r})  # every client seen
    for pid, group in s.tracker.groups.items():  # grouped by labels it holds (an absent one never shows)
        held = np.zeros(10, dtype=np.int64)
        held[np.unique(client_data(SPEC, pid)[1])] = 1
        assert all(g <= h for g, h in zip(group, held)) and sum(group) >= 1
    first = s.tracker.choices[3].period
    assert [s.periods[r] for r in (1, 2, 3)] == [3, 3, 3]
    assert s.periods[4] == first and first != 3


def test_each_client_is_asked_for_its_label_pattern_once(monkeypatch):
    calls = []

    def counted(model, x, y):
        calls.append(len(y))
        return label_pattern(model, x, y)

    monkeypatch.setattr(regularised, "label_pattern", counted)
    s = SAFA(4, LOCAL, seed=6, lam=0.1, mix=0.95, period=3, adaptive=PeriodRule(retain=1))
    _run(s, make_regularised_client_app(SPEC), rounds=8)
    seen = {p for r in s.sampled.values() for p in r}
    assert len(calls) == len(seen) == len(s.tracker.groups) < 4 * 8  # one gradient per client, not per round


def test_the_tracker_needs_a_pattern_only_for_a_client_it_has_not_grouped():
    tracker = PeriodTracker(PeriodRule(), period=4, models=1)
    with pytest.raises(ValueError, match="no group"):
        tracker.observe(0, 5, None, 10.0, 20.0)
    tracker.observe(0, 5, [1, 0], 10.0, 20.0)
    tracker.observe(0, 5, None, 15.0, 25.0)
    assert tracker.groups == {5: (1, 0)} and tracker.trails[0].revisits == [(1, 5.0)]
