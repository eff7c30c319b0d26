"""Crowdsensing coverage, objective and the integer GA: the invariants of the crowdsense-freq spec."""

from __future__ import annotations

import numpy as np
import pytest

from repro.netsim.crowdsensing import (
    CoverageModel,
    Weights,
    gini,
    greedy_plan,
    random_plan,
    uniform_plan,
    van_der_corput,
)
from repro.netsim.genetic import GAConfig, integer_ga
from repro.netsim.mobility import CitySpec, generate_fleet

CITY = CitySpec(grid=11, buses=6, taxis=3, routes=3, speed_min=8.0, speed_max=12.0, horizon_s=3600.0, dt=10.0)


@pytest.fixture(scope="module")
def model():
    return CoverageModel(generate_fleet(CITY, 0), CITY, 100.0, 300.0, 4)


def test_van_der_corput_points():
    assert [van_der_corput(k) for k in range(5)] == [0.5, 0.25, 0.75, 0.125, 0.625]


def test_coverage_monotone_in_every_single_frequency(model):
    w = Weights()
    rng = np.random.default_rng(0)
    for _ in range(20):
        plan = random_plan(model, rng)
        v = int(rng.integers(model.vehicles))
        if plan[v] == model.f_max:
            continue
        up = plan.copy()
        up[v] += 1
        a, b = model.score(np.stack([plan, up]), w)
        assert b.coverage >= a.coverage and b.samples > a.samples


def test_extreme_plans(model):
    zero, full = model.score(np.stack([uniform_plan(model, 0), uniform_plan(model, model.f_max)]), Weights())
    assert zero.coverage == 0.0 and zero.cost == 0.0 and zero.samples == 0
    assert full.cost == pytest.approx(1.0) and 0 < full.coverage <= 1.0


def test_gini_and_balance():
    assert gini(np.array([3.0, 3.0, 3.0])) == 0.0 and gini(np.zeros(4)) == 0.0
    assert gini(np.array([0.0, 0.0, 0.0, 8.0])) == pytest.approx(0.75)
    model_free = np.array([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]])
    np.testing.assert_allclose(gini(model_free), [2 / 9, 0.0])


def test_uniform_plans_are_perfectly_balanced(model):
    assert all(s.balance == 1.0 for s in model.score(np.stack([uniform_plan(model, f) for f in range(5)]), Weights()))


def test_ga_is_elitist_and_never_below_its_seeds(model):
    w = Weights.from_coverage(0.7)
    seeded = [uniform_plan(model, f) for f in range(model.f_max + 1)] + [greedy_plan(model, w)]
    res = integer_ga(lambda p: model.objective(p, w), model.vehicles, model.f_max,
                     GAConfig(population=16, generations=25), seed=1, seeded=seeded)
    assert all(b >= a - 1e-12 for a, b in zip(res.history, res.history[1:])), "best-of-generation never falls"
    assert res.fitness >= model.objective(np.array(seeded), w).max() - 1e-12
    assert res.fitness == pytest.approx(model.objective(res.best, w)[0])


def test_ga_improves_on_a_random_start(model):
    w = Weights.from_coverage(0.7)
    res = integer_ga(lambda p: model.objective(p, w), model.vehicles, model.f_max,
                     GAConfig(population=16, generations=30), seed=0)
    assert res.history[-1] > res.history[0]


def test_the_multiplicative_objective_is_the_specs_at_the_default_weights():
    w = Weights(form="multiplicative")
    cov, cost, bal = np.array([0.6, 0.0]), np.array([0.3, 0.2]), np.array([0.8, 1.0])
    np.testing.assert_allclose(w.combine(cov, cost, bal), cov * (1 - cost) ** 0.5 * bal**0.5)
    np.testing.assert_allclose(Weights().combine(cov, cost, bal), 0.5 * cov + 0.25 * (1 - cost) + 0.25 * bal)
    with pytest.raises(ValueError, match="form"):
        Weights(form="geometric")
    with pytest.raises(ValueError, match="coverage weight"):
        Weights.from_coverage(0.0, "multiplicative")


def test_the_chapters_ga_starts_from_a_random_population(monkeypatch):
    from repro.netsim.chapters import crowdsense_freq as driver

    seen = {}
    real = driver.integer_ga

    def spy(*args, **kwargs):
        seen["seeded"] = kwargs.get("seeded")
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "integer_ga", spy)
    prm = driver.Params(vehicles=(6,), vehicles_default=6, w_coverages=(0.5,), w_coverage_default=0.5,
                        objective="additive", grid=11, horizon_s=1800.0, sample_dt_s=10.0, slot_s=300.0, cell_m=100.0,
                        f_max=3, population=8, generations=2, seeds=(0,), workers=1)
    prm.checks()
    res = driver.run_job(prm.job(6, 0.5, 0))
    assert seen["seeded"] is None  # not seeded with the plans it is compared against
    assert set(res.scores) == set(driver.METHODS)
