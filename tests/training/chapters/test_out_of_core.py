"""The out-of-core driver: its parameter checks, the planner comparisons and the claims."""

from __future__ import annotations

import numpy as np
import pytest

from repro.params import ParameterError, load_profiles
from repro.registry import load_registry
from repro.training.chapters import out_of_core as driver
from repro.training.memory import BlockProfile
from repro.training.ooc_dp import DPTiming

CHAPTER = load_registry().get("out-of-core")


def _params(**changes) -> driver.Params:
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in load_profiles(CHAPTER)["smoke"].items()}
    return driver.Params(**{**values, **changes})


@pytest.mark.parametrize(("changes", "named"), [
    ({"claim_ratio": 2.0}, "'claim_ratio', 'bandwidth_ratios'"),
    ({"capacity_fraction": 0.4}, "'capacity_fraction', 'capacity_fractions'"),
    ({"exhaustive_limit": 6}, "'exhaustive_limit'"),
])
def test_impossible_combinations_are_refused_by_name(changes, named):
    _params().checks()
    with pytest.raises(ParameterError, match=named):
        _params(**changes).checks()


def _blocks(n: int = 8) -> list[BlockProfile]:
    rng = np.random.default_rng(0)
    return [BlockProfile(forward_s=float(f), backward_s=2 * float(f), activation_bytes=int(a), input_bytes=int(a) // 2,
                         weight_bytes=1000) for f, a in zip(rng.uniform(1e-3, 3e-3, n), rng.integers(10**5, 10**6, n))]


def test_the_greedy_planner_is_judged_against_a_real_exhaustive_optimum():
    # the old chapter fell back to the greedy plan as its own "optimum" beyond exhaustive_limit (a gap of 0 by
    # construction); now the 8-block chains are always searched exhaustively
    em = driver.Emulated(capacity_fraction=0.3, bandwidth_ratio=0.5, exhaustive_limit=8)
    c = driver.compare("toy", 0, _blocks(), em)
    assert c.times[driver.OPTIMUM] <= c.times[driver.HYBRID]
    assert c.times[driver.OPTIMUM] <= min(c.times[m] for m in driver.SINGLE)
    assert len(c.policies[driver.OPTIMUM]) == 8


def _results(diff: float) -> driver.Results:
    p = _params(seeds=(0, 1))
    blocks = _blocks()
    seeds = [driver.SeedResult(seed=s, profiles={"toy": blocks},
                               comparisons=[driver.compare("toy", s, blocks, e) for e in driver.emulations(p)],
                               disk=[driver.DiskCheck(policy="swap-all", measured_s=1.0, predicted_s=1.2)],
                               grad_diff=0.0) for s in p.seeds]
    weights = (np.zeros(3),)
    dp = [[DPTiming(seed=s, mode=m, seconds_per_step=0.01, params=(weights[0] + (diff if m == "pipelined" else 0),))
           for s in p.seeds for m in ("synchronous", "pipelined")] for _ in range(2)]
    return driver.Results(params=p, seeds=seeds, dp=dp, dp_policies=(("keep",) * 8,) * 2)


def test_claims_have_one_value_per_profiling_seed_and_the_dp_check_can_fail():
    res = _results(0.0)
    values = driver.claims(res)
    assert set(values) == {c.id for c in CHAPTER.claims}
    assert all(len(v) == 2 for v in values.values())
    assert values["simulator_accuracy"] == [pytest.approx(20.0)] * 2
    assert values["multinode_equals_sync"] == [0.0, 0.0]
    assert driver.claims(_results(1e-3))["multinode_equals_sync"] == [pytest.approx(1e-3)] * 2
    table = driver.dp_table(res)
    assert list(table.seed) == [0, 1] and "pipelined ms/step" in table


def test_the_sweeps_cover_both_constants_at_the_others_claim_value():
    p = _params(capacity_fractions=(0.3, 0.5, 0.8), bandwidth_ratios=(0.5, 1.0))
    em = driver.emulations(p)
    assert {(e.bandwidth_ratio, e.capacity_fraction) for e in em} == {(0.5, 0.5), (1.0, 0.5), (1.0, 0.3), (1.0, 0.8)}


def test_gains_read_in_words_where_a_number_would_mislead():
    assert driver.gain_text(1.234) == "1.23×"
    assert "no plan fits" in driver.gain_text(float("nan"))
    assert "only the hybrid fits" in driver.gain_text(float("inf"))
    res = _results(0.0)
    fit = driver.tightest_fit(res)
    assert fit is not None and fit[0] in res.params.capacity_fractions
