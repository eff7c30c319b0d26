"""The layerwise-gnp chapter's driver: its checks, the update rule it hands the step, and the claims' evidence."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from repro.params import ParameterError, resolve
from repro.registry import load_registry
from repro.training.chapters import layerwise_gnp as driver

CHAPTER = load_registry().get("layerwise-gnp")
PARAMS = driver.Params(label_noise=0.2, widths=(4, 4, 4), hidden=8, epochs=2, batch_size=128, lr=0.05, momentum=0.9,
                       weight_decay=5e-4, rho=0.05, penalty_alpha=0.5, plain_unselected=True, ks=(1,), claim_k=1,
                       last_epochs=1, seeds=(0, 1), workers=1, device="cpu")


@pytest.mark.parametrize("override,name", [
    ({"claim_k": 3}, "claim_k"),
    ({"widths": [8, 8]}, "widths"),
    ({"last_epochs": 9}, "last_epochs"),
])
def test_impossible_combinations_are_refused_before_any_work(override, name):
    with pytest.raises(ParameterError, match=repr(name)):
        resolve(CHAPTER, "smoke", override)


def test_the_parameters_set_the_update_rule():
    cfg = PARAMS.sam
    assert (cfg.rho, cfg.alpha, cfg.plain_unselected, cfg.truncated) == (0.05, 0.5, True, True)
    assert not dataclasses.replace(PARAMS, plain_unselected=False).sam.plain_unselected


def test_claims_pair_the_arms_by_seed():
    results = driver.run(PARAMS)
    vals = driver.claims(results)
    assert set(vals) == {c.id for c in CHAPTER.claims}
    ev = vals["sam_beats_sgd"]
    assert set(ev.arms) == {"SAM", "SGD"} and ev.trivial == results.chance
    assert list(ev.values) == pytest.approx([a - b for a, b in zip(ev.arms["SAM"], ev.arms["SGD"])])
    assert 10.0 <= results.chance < 15.0  # ten roughly balanced digits
    for v in vals.values():
        values = v.values if isinstance(v, driver.Evidence) else v
        assert len(values) == len(PARAMS.seeds) and np.all(np.isfinite(values))
