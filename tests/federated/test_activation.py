"""Client activation policies: the spec's invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.federated.activation import (
    ActivatedFedAvg,
    GradNormActivation,
    MultiMetricActivation,
    PowerOfChoice,
    RankSumActivation,
    UniformActivation,
    gradient_norm,
    make_activation_client_app,
    make_policy,
    make_probing_client_app,
    probe_metrics,
    scaled_ranks,
)
from repro.federated.client import LocalSGD
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, client_data

SPEC = TaskSpec(dataset="digits", num_clients=12, alpha=0.2, hidden=(16,))
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.5).config(3)
METRICS = {3: {"loss": 2.0, "grad-norm": 0.1}, 5: {"loss": 1.0, "grad-norm": 0.9},
           7: {"loss": 3.0, "grad-norm": 0.2}, 9: {"loss": 0.5, "grad-norm": 0.8}}


def _run(strategy, rounds=4, spec=SPEC, engine="inprocess"):
    return run_federated(strategy, make_probing_client_app(spec), spec.num_clients, initial_arrays(spec, 0), rounds,
                         central_evaluator(spec), range(rounds + 1), engine=engine)


def test_policies_pick_by_their_metric():
    cands = [9, 3, 7, 5]
    assert PowerOfChoice().select(cands, METRICS, 2) == [3, 7]
    assert GradNormActivation().select(cands, METRICS, 2) == [5, 9]
    assert UniformActivation().select(cands, METRICS, 2) == [3, 9]  # the first two drawn
    # loss ranks: 9:0, 5:1/3, 3:2/3, 7:1; grad ranks: 3:0, 7:1/3, 9:2/3, 5:1
    mm = RankSumActivation(beta=1.0)
    assert mm.select(cands, METRICS, 2) == [5, 7]  # 5: 4/3, 7: 4/3, 3: 2/3, 9: 2/3


def test_beta_zero_equals_power_of_choice_and_ties_break_by_id():
    rng = np.random.default_rng(0)
    for _ in range(50):
        cands = [int(c) for c in rng.choice(40, 10, replace=False)]
        metrics = {c: {"loss": float(rng.integers(0, 4)), "grad-norm": float(rng.random())} for c in cands}
        m = int(rng.integers(1, 10))
        poc = PowerOfChoice().select(cands, metrics, m)
        assert RankSumActivation(beta=0.0).select(cands, metrics, m) == poc
        assert len(poc) == len(set(poc)) == m and set(poc) <= set(cands)
    tied = {c: {"loss": 1.0, "grad-norm": 1.0} for c in (4, 2, 8, 6)}
    assert RankSumActivation(2.0).select([8, 6, 4, 2], tied, 2) == [2, 4]


def test_d_equal_m_returns_the_candidates():
    for policy in (UniformActivation(), PowerOfChoice(), GradNormActivation(), RankSumActivation(0.5)):
        assert policy.select([5, 9, 3, 7], METRICS, 4) == [3, 5, 7, 9]


def test_scaled_ranks_and_bad_input():
    np.testing.assert_allclose(scaled_ranks([3.0, 1.0, 2.0]), [1.0, 0.0, 0.5])
    np.testing.assert_allclose(scaled_ranks([1.0, 1.0, 2.0]), [0.25, 0.25, 1.0])
    with pytest.raises(ValueError, match="m must"):
        PowerOfChoice().select([1, 2], METRICS, 3)
    with pytest.raises(ValueError, match="beta"):
        RankSumActivation(float("nan"))
    with pytest.raises(ValueError, match="policy"):
        make_policy("oracle")
    with pytest.raises(ValueError, match="candidates"):
        ActivatedFedAvg(4, LOCAL, candidates=2)


def test_probe_metrics_match_autograd_by_hand():
    x, y = client_data(SPEC, 0)
    torch.manual_seed(0)
    model = torch.nn.Linear(x.shape[1], 10)
    m = probe_metrics(model, x, y)
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
    g = torch.autograd.grad(loss, list(model.parameters()))
    assert m["loss"] == pytest.approx(loss.item())
    assert m["grad-norm"] == pytest.approx(float(torch.sqrt(sum((t**2).sum() for t in g))), rel=1e-6)
    assert all(p.grad is None for p in model.parameters())


def test_uniform_with_d_equal_m_is_bitwise_seeded_fedavg(same_weights):
    h_avg = _run(SeededFedAvg(4, LOCAL, seed=0))
    s = ActivatedFedAvg(4, LOCAL, seed=0, policy=UniformActivation(), candidates=4)
    h_act = _run(s)
    assert same_weights(snapshot(h_avg.final_arrays), snapshot(h_act.final_arrays))
    assert s.probe_downloads == 0


def test_probed_run_activates_the_policys_choice():
    s = ActivatedFedAvg(3, LOCAL, seed=1, policy=RankSumActivation(1.0), candidates=6)
    _run(s, rounds=3)
    assert s.probe_downloads == 3 * 6
    for r in (1, 2, 3):
        assert len(s.drawn[r]) == 6 and set(s.probes[r]) == set(s.drawn[r])
        assert s.sampled[r] == RankSumActivation(1.0).select(s.drawn[r], s.probes[r], 3)
        assert all(m["loss"] > 0 and m["grad-norm"] > 0 for m in s.probes[r].values())


def test_negative_beta_is_the_opposite_sign_of_the_gradient_term():
    cands = [0, 1, 2, 3]
    metrics = {c: {"loss": 1.0, "grad-norm": g} for c, g in zip(cands, (4.0, 1.0, 3.0, 2.0))}  # equal losses
    assert RankSumActivation(1.0).select(cands, metrics, 2) == [0, 2]
    assert RankSumActivation(-1.0).select(cands, metrics, 2) == [1, 3]


def test_the_authors_rule_boosts_high_losses_and_among_them_small_norms():
    mm = MultiMetricActivation(6, shortlist=1, boost=10.0)
    # nobody has trained: every loss is +inf and every norm 0; ties fall as in the authors' argsort, so the
    # last m + b = 3 ids are shortlisted and the first m = 2 of them boosted twice
    np.testing.assert_allclose(mm.weights(2) * 213, [1.0, 1.0, 1.0, 100.0, 100.0, 10.0])
    for pid, loss, norm in ((0, 3.0, 0.5), (1, 2.0, 0.1), (2, 1.0, 0.9), (3, 0.5, 0.2), (4, 4.0, 0.3), (5, 0.1, 0.05)):
        mm.observe(pid, loss, norm)
    # m + b = 3 highest losses: 4, 0, 1; of them the m = 2 smallest norms: 1 (0.1) and 4 (0.3)
    w = mm.weights(2) * (1 + 1 + 1 + 10 + 100 + 100)
    np.testing.assert_allclose(w, [10.0, 100.0, 1.0, 1.0, 100.0, 1.0])
    # a client that never trained keeps +inf loss and 0 norm, so it is shortlisted and boosted twice
    fresh = MultiMetricActivation(4, shortlist=0, boost=10.0)
    fresh.observe(0, 1.0, 1.0)
    fresh.observe(1, 1.0, 1.0)
    assert set(np.flatnonzero(fresh.weights(2) == fresh.weights(2).max())) == {2, 3}
    draws = [tuple(mm.draw(2, np.random.default_rng(k))) for k in range(400)]
    assert sum(d == (1, 4) for d in draws) > 250  # the doubly boosted pair dominates


def test_the_authors_rule_runs_on_stored_training_metrics_without_probes():
    policy = make_policy("multi-metric", num_clients=SPEC.num_clients)
    s = ActivatedFedAvg(3, LOCAL, seed=2, policy=policy, candidates=3)
    run_federated(s, make_activation_client_app(SPEC), SPEC.num_clients, initial_arrays(SPEC, 0), 3,
                  central_evaluator(SPEC), [3])
    assert s.probe_downloads == 0
    trained = sorted({p for r in (1, 2, 3) for p in s.sampled[r]})
    assert np.isfinite(policy.losses[trained]).all() and (policy.norms[trained] > 0).all()
    untouched = [p for p in range(SPEC.num_clients) if p not in trained]
    assert np.isinf(policy.losses[untouched]).all()


def test_the_reporting_client_trains_as_the_shared_one_and_reports_the_mean_norm(same_weights):
    avg = _run(SeededFedAvg(4, LOCAL, seed=0))
    rep = run_federated(SeededFedAvg(4, LOCAL, seed=0), make_activation_client_app(SPEC), SPEC.num_clients,
                        initial_arrays(SPEC, 0), 4, central_evaluator(SPEC), range(5))
    assert same_weights(snapshot(avg.final_arrays), snapshot(rep.final_arrays))
    model = torch.nn.Linear(3, 2)
    model(torch.ones(1, 3)).sum().backward()
    assert gradient_norm(model) == pytest.approx(float(torch.sqrt(sum((p.grad**2).sum() for p in model.parameters()))))
