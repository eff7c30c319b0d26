"""The Design-Bench protocol: bottom-q split, z-scoring, normalisation, percentiles, ranks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_diabetes

from repro.offopt.functions import levy, rff_gp_sample
from repro.offopt.tasks import (
    ZScore,
    bottom_q_indices,
    bottom_q_split,
    diabetes_task,
    make_task,
    mean_rank,
    normalised_score,
    score_percentiles,
    synthetic_task,
)


@pytest.mark.parametrize("q", [10.0, 50.0, 73.5, 99.0])
def test_bottom_q_keeps_the_lowest_and_excludes_the_top(q: float) -> None:
    y = np.random.default_rng(0).normal(size=1000)
    kept, dropped = bottom_q_indices(y, q)
    assert len(kept) == int(np.floor(1000 * q / 100))
    assert len(kept) + len(dropped) == 1000
    assert set(kept).isdisjoint(dropped)
    assert y[kept].max() <= y[dropped].min()
    assert np.argmax(y) in dropped


def test_bottom_q_with_ties_still_splits_at_the_count() -> None:
    y = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 3.0])
    kept, dropped = bottom_q_indices(y, 50)
    assert sorted(kept.tolist()) == [0, 1, 2]
    x, yk = bottom_q_split(np.arange(12.0).reshape(6, 2), y, 50)
    assert x.shape == (3, 2) and yk.max() <= y[dropped].min()


@pytest.mark.parametrize("q", [0, 100, -5, 150, float("nan"), "half"])
def test_q_outside_open_interval_is_a_valueerror_naming_q(q: object) -> None:
    with pytest.raises(ValueError, match=r"\bq\b"):
        bottom_q_indices(np.arange(10.0), q)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\bq\b"):
        make_task("ackley", 2, n=50, n_ref=10, q=q)  # type: ignore[arg-type]


def test_q_that_leaves_an_empty_set_is_rejected() -> None:
    with pytest.raises(ValueError, match="q="):
        bottom_q_indices(np.arange(10.0), 5.0)


def test_zscore_round_trip_and_moments() -> None:
    x = np.random.default_rng(1).normal(3.0, 5.0, size=(200, 4))
    x[:, 2] = 7.0  # a constant column must not produce NaN
    sc = ZScore.fit(x)
    z = sc.transform(x)
    np.testing.assert_allclose(sc.inverse_transform(z), x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(z[:, [0, 1, 3]].std(0), 1.0, atol=1e-12)
    assert np.all(z[:, 2] == 0.0)


def test_normalisation_maps_min_to_0_and_max_to_1() -> None:
    out = normalised_score(np.array([-3.0, 1.0, 5.0]), -3.0, 5.0)
    np.testing.assert_array_equal(out, [0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="y_max"):
        normalised_score(1.0, 2.0, 2.0)


def test_percentiles_are_max_80th_and_median() -> None:
    scores = np.random.default_rng(2).permutation(np.arange(101) / 100)
    p = score_percentiles(scores)
    assert p == {"p100": 1.0, "p80": pytest.approx(0.8), "p50": pytest.approx(0.5)}
    assert score_percentiles(np.array([0.3]))["p100"] == 0.3
    with pytest.raises(ValueError, match="percentiles"):
        score_percentiles(scores, [120])


def test_mean_rank_averages_ranks_with_ties() -> None:
    table = {"a": {"t1": 0.9, "t2": 0.5}, "b": {"t1": 0.8, "t2": 0.5}, "c": {"t1": 0.1, "t2": 0.9}}
    r = mean_rank(table)
    # t1: a=1, b=2, c=3 ; t2: c=1, a=b=2.5
    assert r.to_dict() == {"a": 1.75, "c": 2.0, "b": 2.25}
    assert list(r.index) == ["a", "c", "b"]
    assert mean_rank(pd.DataFrame(table).T).equals(r)
    with pytest.raises(ValueError, match="table"):
        mean_rank({"a": {"t1": 1.0}, "b": {"t2": 1.0}})


@pytest.mark.parametrize("name", ["ackley", "rosenbrock", "levy", "branin", "gp_rff"])
def test_synthetic_task_follows_the_protocol(name: str) -> None:
    task = make_task(name, 4, n=600, q=40, seed=3, n_ref=2000)
    assert task.x.shape == (240, 4) and task.y_hidden.shape == (360,)
    assert task.y.max() <= task.y_hidden.min()  # the offline set excludes the top 60%
    assert task.y_min <= min(task.y.min(), task.y_hidden.min())
    # z-scores are the offline set's own, and map back
    np.testing.assert_allclose(task.x_z.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(task.from_z(task.x_z), task.x, atol=1e-12)
    np.testing.assert_allclose(task.y_scaler.inverse_transform(task.y_z), task.y, atol=1e-9)
    # the oracle reproduces the stored scores, and the normalisation range is the known one
    np.testing.assert_allclose(task.evaluate(task.x_z[:20], z_space=True)["raw"], task.y[:20], atol=1e-9)
    assert task.normalise(task.y_max) == 1.0 and task.normalise(task.y_min) == 0.0
    assert np.all(task.normalise(task.y) < 1.0)


def test_evaluating_the_optimum_scores_one() -> None:
    task = make_task("levy", 3, n=300, n_ref=500)
    res = task.evaluate(np.tile(levy(3).optimum_x, (5, 1)))
    assert res["p100"] == pytest.approx(1.0, abs=1e-12) and res["p50"] == pytest.approx(1.0, abs=1e-12)
    assert set(res) >= {"p100", "p80", "p50", "scores", "raw", "best_offline"}


def test_candidates_outside_the_box_are_clipped_before_scoring() -> None:
    task = make_task("ackley", 2, n=100, n_ref=100)
    far = np.array([[50.0, -50.0]])
    assert task.score(far)[0] == task.score(np.array([[2.0, -2.0]]))[0]


def test_make_task_validates_its_name() -> None:
    with pytest.raises(ValueError, match="name"):
        make_task("sphere", 2)


def test_real_data_task_uses_the_dataset_range_and_a_seeded_oracle() -> None:
    y_all = load_diabetes().target
    task = diabetes_task(q=50, seed=0)
    assert task.dim == 10 and len(task.y) == 221
    assert task.y_min == y_all.min() and task.y_max == y_all.max()
    assert task.y.max() <= task.y_hidden.min()
    x = task.best_offline(16)
    again = diabetes_task(q=50, seed=0)
    np.testing.assert_array_equal(task.score(x), again.score(x))
    scores = task.evaluate(task.x_hidden)["scores"]
    assert np.all((scores >= 0) & (scores <= 1))  # a forest never predicts outside the data's range
    with pytest.raises(ValueError, match="oracle"):
        diabetes_task(oracle="svm")


def test_an_estimated_optimum_beaten_by_the_pool_widens_the_range() -> None:
    f = rff_gp_sample(4, seed=1, n_ref=5, n_polish=0)  # a deliberately poor estimate
    task = synthetic_task(f, n=500, n_ref=5)
    assert task.y_max == max(f.optimum_value, task.y_hidden.max())
    assert np.all(task.normalise(task.y_hidden) <= 1.0)
