"""The iptf-bayes chapter's parameters, its effect sweep and its claims, on a tiny survey."""

from __future__ import annotations

import dataclasses

import pytest

from repro.misc.chapters import iptf_bayes as chapter
from repro.params import ParameterError

PARAMS = chapter.Params(nights=8, fields=30, exposures=(4, 6), batch_sd=0.5, image_sd=0.5, load_sd=0.3, jump_prob=0.02,
                        train_share=0.7, feature_bins=3, target_bins=4, learn_structure=True, trees=5,
                        effect_scales=(0.0, 1.0), seeds=(0, 1), workers=1)


def test_scaled_generator_and_checks():
    zero = PARAMS.survey(0.0)
    assert all(s.per_object == 0.0 and s.load_coef == 0.0 for s in zero.stages)
    assert PARAMS.survey().stages == chapter.iptf.STAGES
    with pytest.raises(ParameterError, match="'effect_scales'"):
        dataclasses.replace(PARAMS, effect_scales=(0.0, 2.0)).checks()
    with pytest.raises(ParameterError, match="'train_share', 'nights'"):
        dataclasses.replace(PARAMS, nights=4, train_share=0.95).checks()
    with pytest.raises(ParameterError, match="'exposures'"):
        dataclasses.replace(PARAMS, exposures=(6, 4)).checks()
    PARAMS.checks()


def test_run_gives_per_seed_claims_and_the_first_seed_on_every_scale():
    results = chapter.run(PARAMS)
    assert [r.stages[0].seed for r in results.seeds] == [0, 1]
    assert list(results.sweep.scale) == [0.0, 1.0]
    claims = chapter.claims(results)
    first = {k: v[0] for k, v in claims.items()}
    row = results.sweep[results.sweep.scale == 1.0].iloc[0]
    assert all(row[k] == pytest.approx(v) for k, v in first.items())  # scale 1 is the main run's first seed
    assert all(len(v) == 2 for v in claims.values())
