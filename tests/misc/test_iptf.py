"""Synthetic sky-survey workload, no-look-ahead features, the boundary and the Bayesian-network regressor."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression

from repro.misc import iptf

SMALL = iptf.SurveyConfig(fields=40, nights=6, exposures=(15, 20))
HISTORY = ["space_runtime", "space_objects", "lag_runtime", "recent_runtime"]


@pytest.fixture(scope="module")
def survey():
    return iptf.make_survey(SMALL, seed=4)


def test_features_use_no_future_batch(survey):
    cut = int(survey.batch.max() // 2)
    base = iptf.add_features(survey, "mixed")
    rng = np.random.default_rng(0)
    future = survey.copy()
    later = future.batch >= cut  # the cut batch itself is "future" for its own features too
    for col in ("runtime_mixed", "n_obj"):
        future.loc[later, col] = rng.permutation(future.loc[later, col].to_numpy()) * 3.0
    changed = iptf.add_features(future, "mixed")
    upto = survey.batch <= cut
    pd.testing.assert_frame_equal(base.loc[upto, HISTORY], changed.loc[upto, HISTORY])
    assert not np.allclose(base.loc[survey.batch > cut + 1, "lag_runtime"],
                           changed.loc[survey.batch > cut + 1, "lag_runtime"])


def test_boundary_is_zero_without_within_batch_differences():
    df = pd.DataFrame({"batch": np.repeat(np.arange(5), 11), "runtime": np.repeat(np.arange(5) * 2.0 + 1.0, 11)})
    assert iptf.within_batch_boundary(df) == 0.0
    df["runtime"] += np.random.default_rng(0).normal(0, 1, len(df))
    assert iptf.within_batch_boundary(df) > 0.5


def test_boundary_is_zero_for_a_noise_free_content_free_stage():
    flat = iptf.Stage(name="flat", base=3.0, per_object=0.0, load_coef=2.0)
    cfg = iptf.SurveyConfig(fields=20, nights=3, exposures=(10, 10), image_sd=0.0, stages=(flat,))
    data = iptf.add_features(iptf.make_survey(cfg, 1), "flat")
    assert iptf.within_batch_boundary(data) == pytest.approx(0.0, abs=1e-12)


def test_chronological_split(survey):
    data = iptf.add_features(survey, "io_bound").dropna()
    train, test = iptf.chronological_split(data, 0.7)
    assert train.night.max() < test.night.min() and train.batch.max() < test.batch.min()
    assert len(train) + len(test) == len(data)


def test_posterior_is_a_distribution_and_the_prediction_stays_in_range(survey):
    data = iptf.add_features(survey, "object_bound").dropna()
    train, test = iptf.chronological_split(data, 0.7)
    cols = list(iptf.FEATURE_SETS["spatial+temporal"])
    bn = iptf.BayesNetRegressor(learn_structure=True).fit(train[cols], train[iptf.TARGET])
    post = bn.posterior(test[cols])
    assert post.shape == (len(test), len(bn.centres_))
    np.testing.assert_allclose(post.sum(axis=1), 1.0, atol=1e-9)
    pred = bn.predict(test[cols])
    y = train[iptf.TARGET]
    assert (pred >= y.min() - 1e-9).all() and (pred <= y.max() + 1e-9).all()
    assert iptf.TARGET not in bn.markov_blanket()


def test_temporal_features_do_not_help_without_a_machine_state_effect():
    inert = iptf.Stage(name="inert", base=5.0, per_object=0.0, load_coef=0.0)
    cfg = iptf.SurveyConfig(fields=40, nights=12, exposures=(20, 25), stages=(inert,))
    data = iptf.add_features(iptf.make_survey(cfg, 2), "inert").dropna()
    train, test = iptf.chronological_split(data, 0.7)

    def mae(cols):
        pred = LinearRegression().fit(train[cols], train[iptf.TARGET]).predict(test[cols])
        return float(np.abs(pred - test[iptf.TARGET]).mean())

    meta, temporal = mae(list(iptf.FEATURE_SETS["meta"])), mae(list(iptf.FEATURE_SETS["temporal"]))
    assert temporal >= 0.97 * meta


def test_temporal_features_help_when_the_load_matters(survey):
    data = iptf.add_features(survey, "io_bound").dropna()
    train, test = iptf.chronological_split(data, 0.7)

    def mae(cols):
        pred = LinearRegression().fit(train[cols], train[iptf.TARGET]).predict(test[cols])
        return float(np.abs(pred - test[iptf.TARGET]).mean())

    assert mae(list(iptf.FEATURE_SETS["temporal"])) < 0.7 * mae(list(iptf.FEATURE_SETS["meta"]))
