"""Every impossible combination of a netsim chapter's parameters is refused before any kernel starts, naming them."""

from __future__ import annotations

import pytest

from repro import params as rp
from repro.registry import load_registry

REG = load_registry()

CASES = [
    ("wrsn-drl", {"packet_prob": 0.4}, "packet_prob"),
    ("wrsn-drl", {"targets": 40}, "targets"),
    ("wrsn-drl", {"train_steps": 50}, "train_steps"),
    ("wrsn-drl", {"seeds": [0, 0]}, "seeds"),
    ("wrsn-drl", {"eval_networks": 100, "seeds": [0]}, None),  # the largest allowed
    ("qlearn-offload", {"gen_interval_s": 60}, "gen_interval_s"),
    ("qlearn-offload", {"delta_s": 60.0}, "delta_s"),
    ("qlearn-offload", {"seeds": [3, 3]}, "seeds"),
    ("qlearn-offload", {"rsus": 500, "grid": 11}, "rsus"),
    ("qlearn-offload", {"gen_intervals": [600], "gen_interval_s": 600}, "gen_intervals"),
    ("fuzzy-qlearn", {"reference_theta": 0.8}, "reference_theta"),
    ("fuzzy-qlearn", {"rsus": 30, "grid": 7}, "rsus"),
    ("fuzzy-qlearn", {"deltas": [600.0], "delta_s": 600.0}, "deltas"),
    ("v2x-dqn", {"vehicle_rate": 2.0}, "vehicle_rate"),
    ("v2x-dqn", {"train_steps": 400}, "train_steps"),
    ("v2x-dqn", {"vehicle_rates": [1.0], "task_rates": [1.0]}, "vehicle_rates"),
    ("crowdsense-freq", {"vehicles_default": 40}, "vehicles_default"),
    ("crowdsense-freq", {"population": 2}, "population"),
    ("crowdsense-freq", {"objective": "multiplicative", "w_coverages": [0.0, 0.5]}, "objective"),
    ("crowdsense-freq", {"slot_s": 30.0, "sample_dt_s": 60.0}, "sample_dt_s"),
]


@pytest.mark.parametrize(("chapter_id", "overrides", "named"), CASES)
def test_impossible_combinations_are_refused_by_name(chapter_id, overrides, named):
    chapter = REG.get(chapter_id)
    if named is None:
        rp.resolve(chapter, "smoke", overrides)
        return
    with pytest.raises(rp.ParameterError, match=repr(named)):
        rp.resolve(chapter, "smoke", overrides)
