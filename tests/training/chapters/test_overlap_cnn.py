"""The overlap-cnn driver: its parameter checks, and claims that judge the model once and the real runs per seed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from repro.params import ParameterError, load_profiles
from repro.registry import load_registry
from repro.results import Ledger
from repro.training.chapters import overlap_cnn as driver
from repro.training.overlap import MODES, ModeTiming

CHAPTER = load_registry().get("overlap-cnn")


def _params(**changes) -> driver.Params:
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in load_profiles(CHAPTER)["smoke"].items()}
    return driver.Params(**{**values, **changes})


@pytest.mark.parametrize(("changes", "named"), [
    ({"nodes": (8, 128)}, "'claim_nodes', 'nodes'"),
    ({"claim_nodes": 64}, "'claim_nodes', 'nodes'"),
    ({"batches": (256, 1024)}, "'batches'"),
    ({"image": 48}, "'image'"),
    ({"width_divisor": 3}, "'width_divisor'"),
])
def test_impossible_combinations_are_refused_by_name(changes, named):
    _params().checks()
    with pytest.raises(ParameterError, match=named):
        _params(**changes).checks()


def _fake_rank(seeds: list[int], seconds: dict[str, float], drift: float) -> list[ModeTiming]:
    rows = []
    for s in seeds:
        for mode in MODES:
            params = (np.full(3, float(s)) + (drift if mode == "overlap" else 0.0),)
            rows.append(ModeTiming(seed=s, mode=mode, seconds_per_iteration=seconds[mode], params=params,
                                   messages_per_iteration=1.0))
    return rows


def _results(per_rank) -> driver.Results:
    p = _params()
    return driver.Results(params=p, table=driver.scaling_table(p.nodes, p.batches, p.platform()),
                          sensitivity=driver.bandwidth_sweep(p), per_rank=per_rank)


def test_modelled_claims_are_one_value_and_the_measured_ones_one_per_seed():
    seeds = [0, 1, 2, 3, 4]
    per_rank = [_fake_rank(seeds, {"no_overlap": 2.0, "overlap": 1.5, "ddp": 1.0}, 1e-9) for _ in range(2)]
    res = _results(per_rank)
    values = driver.claims(res)
    assert set(values) == {c.id for c in CHAPTER.claims}
    for c in CHAPTER.claims:
        assert len(values[c.id]) == (1 if c.deterministic else len(seeds)), c.id
    vgg = list(driver.MODELS)[0]
    assert values["batch_gain"] == [pytest.approx(res.modelled_speedup(vgg, 512) / res.modelled_speedup(vgg, 256))]
    assert values["measured_overlap_gain"] == [pytest.approx(25.0)] * len(seeds)
    assert values["overlap_equals_sync"] == [pytest.approx(1e-9)] * len(seeds)
    ledger = Ledger("overlap-cnn", "cpu", "/tmp")
    ledger.record_all(values)
    assert ledger.results["overlap_equals_sync"].verdict == "structural check"


def test_a_diverging_overlap_fails_its_structural_check_on_that_seed():
    per_rank = [_fake_rank([0, 1, 2, 3, 4], {"no_overlap": 1.0, "overlap": 1.0, "ddp": 1.0}, 1e-3) for _ in range(2)]
    ledger = Ledger("overlap-cnn", "cpu", "/tmp")
    ledger.record_all(driver.claims(_results(per_rank)))
    assert ledger.results["overlap_equals_sync"].verdict == "structural check failed"


def test_bandwidth_matching_brackets_the_paper_value():
    res = _results([_fake_rank([0], {m: 1.0 for m in MODES}, 0.0)])
    sweep = res.sensitivity[(res.sensitivity.batch == 256) & res.sensitivity.overlap]
    target = float(sweep.speedup.median())
    lo, hi = driver.bandwidth_matching(res, 256, target)
    at = dict(zip(sweep.bandwidth_gbs, sweep.speedup))
    assert min(at[lo], at[hi]) <= target <= max(at[lo], at[hi])
    assert driver.bandwidth_matching(res, 256, 1e9) is None
    assert dataclasses.is_dataclass(res)
