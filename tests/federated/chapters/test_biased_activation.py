"""The biased-activation chapter driver: parameters refused before any run, claims and tables from a known frame."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from repro.federated.chapters.biased_activation import (
    Params,
    Results,
    claims,
    jobs,
    sign_ablation,
    summary_table,
    uniform_spread,
)
from repro.params import ParameterError
from repro.results import Evidence

BASE = Params(dataset="digits", n_train=1437, num_clients=20, active_clients=4, candidates=8, alpha=0.1,
              hidden=(32,), tau=5, rounds=6, batch_size=16, lr=0.05, betas=(1.0, -1.0), seeds=(0, 1), eval_every=2,
              engine="inprocess", device="cpu", workers=1)


def _results() -> Results:
    rows = [{"policy": p, "beta": b, "seed": s, "accuracy": 0.0, "budget_accuracy": acc + s, "probe_downloads": d}
            for s in (0, 1) for p, b, acc, d in (("uniform", 0.0, 70.0, 0), ("power-of-choice", 0.0, 74.0, 48),
                                                 ("multi-metric", 0.0, 75.0, 0), ("rank-sum", 1.0, 60.0, 48),
                                                 ("rank-sum", -1.0, 72.0, 48))]
    return Results(final=pd.DataFrame(rows), curves=pd.DataFrame(), trivial=10.0)


def test_claims_compare_the_authors_rule_per_seed_with_arms_and_trivial_level():
    c = claims(_results())
    assert set(c) == {"acc_gain_vs_uniform", "acc_gain_vs_power_of_choice"}
    uni, poc = c["acc_gain_vs_uniform"], c["acc_gain_vs_power_of_choice"]
    assert isinstance(uni, Evidence) and isinstance(poc, Evidence)
    assert list(uni.values) == [5.0, 5.0] and list(poc.values) == [1.0, 1.0]
    assert uni.arms == {"multi-metric": [75.0, 76.0], "uniform": [70.0, 71.0]} and uni.trivial == 10.0


def test_the_ablation_table_reads_every_rank_sum_weight_against_uniform():
    table = sign_ablation(_results())
    assert list(table.rule) == ["multi-metric (authors')", "rank sum, β = -1", "rank sum, β = 1"]
    assert list(table["gain over uniform (points)"]) == ["+5.0 ± 0.0", "+2.0 ± 0.0", "-10.0 ± 0.0"]
    assert uniform_spread(_results()) == pytest.approx(2**-0.5)
    assert list(summary_table(_results())["probe downloads per run"]) == [0, 48, 0, 48, 48]


def test_jobs_cover_every_rule_and_weight_for_every_seed():
    got = jobs(BASE)
    assert len(got) == (4 + len(BASE.betas)) * len(BASE.seeds)
    assert {(j.method, j.beta) for j in got} == {("uniform", 0.0), ("power-of-choice", 0.0), ("grad-norm", 0.0),
                                                 ("multi-metric", 0.0), ("rank-sum", 1.0), ("rank-sum", -1.0)}


@pytest.mark.parametrize(("change", "named"), [
    ({"active_clients": 9}, "active_clients"),
    ({"candidates": 21}, "candidates"),
    ({"num_clients": 1000}, "num_clients"),
])
def test_impossible_combinations_are_refused_naming_the_parameter(change, named):
    with pytest.raises(ParameterError, match=named):
        dataclasses.replace(BASE, **change).checks()
