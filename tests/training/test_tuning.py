"""The one tuning rule: the same grid for every arm, the choice made on validation scores."""

from __future__ import annotations

import math

import pytest

from repro.training.tuning import Trial, choose


def test_each_arm_keeps_its_best_mean_validation_value():
    trials = [Trial(arm="a", value=0.1, score=60.0), Trial(arm="a", value=0.1, score=70.0),
              Trial(arm="a", value=0.2, score=66.0), Trial(arm="b", value=0.1, score=50.0),
              Trial(arm="b", value=0.2, score=80.0)]
    assert choose(trials) == {"a": 0.2, "b": 0.2}


def test_a_tie_goes_to_the_smaller_value():
    assert choose([Trial(arm="a", value=0.4, score=1.0), Trial(arm="a", value=0.1, score=1.0)]) == {"a": 0.1}


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_score_is_refused(bad):
    with pytest.raises(ValueError, match="not finite"):
        choose([Trial(arm="a", value=0.1, score=bad)])


def test_no_trials_is_refused():
    with pytest.raises(ValueError, match="no tuning trials"):
        choose([])
