"""Drivers of qlearn-offload, fuzzy-qlearn and v2x-dqn: validated baselines, per-device tables, new baselines."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.netsim.chapters import fuzzy_qlearn, qlearn_offload
from repro.netsim.heuristics import FixedProbability, LeastLoaded
from repro.netsim.oppcomm_agents import TEST_OFFSET, VALIDATION_OFFSET, Outcome, choose_on_validation, evaluate


def _outcome(saving: float, late: float) -> Outcome:
    return Outcome(cost_4g_percent=100.0 - saving, compliance_percent=100.0 - late, late_percent=late, rsu_percent=0.0)


def test_choose_on_validation_takes_the_best_saving_within_the_bound():
    outcomes = {"a": _outcome(40.0, 0.2), "b": _outcome(60.0, 0.4), "c": _outcome(80.0, 3.0)}
    assert choose_on_validation(outcomes, 0.5) == "b"  # c saves most but misses the bound
    assert choose_on_validation(outcomes, 5.0) == "c"
    # nobody keeps the bound: the fewest late packets, ties broken by the saving
    assert choose_on_validation({"x": _outcome(10.0, 2.0), "y": _outcome(30.0, 2.0), "z": _outcome(90.0, 9.0)},
                                0.5) == "y"
    with pytest.raises(ValueError):
        choose_on_validation({}, 1.0)


TINY = dict(buses=6, rsus=4, grid=15, horizon_s=240.0, episodes=1, gen_interval_s=20, delta_s=60.0,
            gen_intervals=(20,), deltas=(60.0,), theta=0.5, alpha=0.1, gamma=0.99, epsilon=0.1,
            seeds=(0, 1), workers=1, reuse_checkpoints=False)


def test_qlearn_offload_tunes_p_on_the_validation_city_and_trains_per_device_tables():
    prm = qlearn_offload.Params(**TINY, fixed_ps=(0.0, 1.0), shared_table=True)
    prm.checks()
    res = qlearn_offload.run(prm)
    t = res.table
    assert set(t["policy"]) == {*qlearn_offload.POLICIES, qlearn_offload.PER_DEVICE}
    for seed in prm.seeds:
        val = {f"{q:g}": evaluate(prm.base, VALIDATION_OFFSET + seed, FixedProbability(p=q, delta_s=prm.delta_s).act)
               for q in prm.fixed_ps}
        want = float(choose_on_validation(val, qlearn_offload.LATE_BOUND))
        row = t[(t["policy"] == qlearn_offload.FIXED) & (t["seed"] == seed)].iloc[0]
        assert row["p"] == want
        test = evaluate(prm.base, TEST_OFFSET + seed, FixedProbability(p=want, delta_s=prm.delta_s).act)
        assert row["4G saved (%)"] == pytest.approx(test.saving_percent)
    got = qlearn_offload.claims(res)
    q = t[t["policy"] == qlearn_offload.Q].set_index("seed")["4G saved (%)"]
    g = t[t["policy"] == qlearn_offload.GREEDY].set_index("seed")["4G saved (%)"]
    assert got["saving_vs_greedy"] == pytest.approx(list(q - g))
    assert len(res.curves[qlearn_offload.PER_DEVICE]) == len(prm.seeds)


def _fuzzy_results(rows: list[tuple[str, str, int, float, float]]) -> fuzzy_qlearn.Results:
    table = pd.DataFrame([{"delta (s)": 60.0, "seed": seed, "policy": pol, "city": city, "4G saved (%)": saving,
                           "on time (%)": 100 - late, "late (%)": late, "via RSU (%)": 0.0}
                          for pol, city, seed, saving, late in rows])
    return fuzzy_qlearn.Results(table=table, curves={}, default_delta=60.0, reference_theta=0.5, thetas=(0.2, 0.8))


def test_fuzzy_best_fixed_theta_is_chosen_on_the_validation_city_not_the_test_city():
    lo, hi = fuzzy_qlearn.fixed_name(0.2), fuzzy_qlearn.fixed_name(0.8)
    rows = [(lo, "validation", 0, 50.0, 0.0), (hi, "validation", 0, 40.0, 0.0),  # validation prefers 0.2
            (lo, "test", 0, 30.0, 0.0), (hi, "test", 0, 70.0, 0.0),  # the test city would prefer 0.8
            (fuzzy_qlearn.fixed_name(0.5), "test", 0, 20.0, 0.0), (fuzzy_qlearn.FUZZY, "test", 0, 45.0, 0.5)]
    res = _fuzzy_results(rows)
    assert fuzzy_qlearn.best_fixed_theta(res).to_dict() == {0: lo}
    assert fuzzy_qlearn.claims(res)["saving_vs_best_fixed_theta"] == [pytest.approx(45.0 - 30.0)]
    late = _fuzzy_results([(lo, "validation", 0, 90.0, 3.0), (hi, "validation", 0, 40.0, 0.5)])
    assert fuzzy_qlearn.best_fixed_theta(late).to_dict() == {0: hi}  # 0.2 breaks the 1 % bound


def test_fuzzy_qlearn_trains_per_device_tables_beside_the_shared_one():
    prm = fuzzy_qlearn.Params(**{k: v for k, v in TINY.items() if k not in ("gen_intervals", "theta")}, rsu_centre_share=0.5,
                              thetas=(0.5,), reference_theta=0.5, density_scale=4.0, shared_table=True)
    res = fuzzy_qlearn.run(prm)
    t = res.table
    assert set(t[t["city"] == "test"]["policy"]) == {fuzzy_qlearn.FUZZY, fuzzy_qlearn.PER_DEVICE,
                                                    fuzzy_qlearn.fixed_name(0.5), "all-4G", "greedy"}
    assert set(t[t["city"] == "validation"]["policy"]) == {fuzzy_qlearn.fixed_name(0.5)}


def test_least_loaded_takes_the_allowed_path_with_the_smallest_bottleneck():
    obs = np.zeros(10, dtype=np.float32)
    obs[3:8] = [0.9, 0.1, 0.3, 0.0, 0.2]  # RSU uplink, RSU server, cellular, backhaul, gNB-cloud
    rng = np.random.default_rng(0)
    assert LeastLoaded().act(obs, {"mask": np.array([1, 1, 1])}, rng) == 1  # V2C: max(0.3, 0.2)
    obs[3] = 0.05
    assert LeastLoaded().act(obs, {"mask": np.array([1, 1, 1])}, rng) == 0  # V2I: max(0.05, 0.1)
    assert LeastLoaded().act(obs, {"mask": np.array([0, 1, 0])}, rng) == 1  # out of RSU coverage
