"""Named methods end to end on a tiny task: shapes, box, determinism, reporting."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from repro.models import torch_threads
from repro.offopt.gp import GPPrior, PairClimb, build_root_pairs
from repro.offopt.optimizers import as_numpy_fn
from repro.offopt.pipeline import fit_surrogate, method_settings, parse_method, propose, reference_score_z, run_method
from repro.offopt.surrogate import EnsembleSurrogate
from repro.offopt.tasks import OfflineTask, make_task


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def task() -> OfflineTask:
    return make_task("ackley", 3, n=300, q=50, seed=0, n_ref=1000)


TINY = dict(
    n_candidates=16,
    surrogate={"hidden": [16], "epochs": 5, "ensemble": 2},
    search={"grad_steps": 10, "cma_starts": 4, "cma_generations": 5, "cma_popsize": 6, "ga_generations": 5},
    root={
        "n_functions": 2,
        "n_seeds": 16,
        "gp_steps": 10,
        "gp_lr": 1e-2,
        "hidden": [16],
        "epochs": 2,
        "n_timesteps": 50,
        "sample_steps": 5,
    },
)


@pytest.mark.parametrize(
    "method",
    ["best_offline", "grad_ascent", "cma_es", "genetic", "grad_ascent_mean_ens", "grad_ascent_min_ens+ignite",
     "grad_ascent+boss", "cma_es+ignite", "genetic+ignite2", "root"],
)
def test_methods_return_k_candidates_in_the_box_deterministically(task: OfflineTask, method: str) -> None:
    settings = method_settings(**TINY, regularizer_kwargs={"boss": {"n_gamma": 5}})
    a = propose(task, method, settings, seed=1)
    b = propose(task, method, settings, seed=1)
    assert a.candidates.shape == (16, 3)
    assert np.all(a.candidates >= task.lower - 1e-9) and np.all(a.candidates <= task.upper + 1e-9)
    np.testing.assert_allclose(task.from_z(a.candidates_z), a.candidates, atol=1e-12)
    assert np.array_equal(a.candidates, b.candidates)
    if "+" in method:
        assert a.extras["regularizer_history"] and len(a.extras["regularizer_history"][0]) > 0


def test_best_offline_returns_the_top_of_the_offline_set(task: OfflineTask) -> None:
    prop = propose(task, "best_offline", method_settings(n_candidates=8))
    top = np.sort(task.y)[-8:][::-1]
    np.testing.assert_allclose(task.score(prop.candidates), top, atol=1e-12)


def test_run_method_reports_percentiles_of_its_scores(task: OfflineTask) -> None:
    row = run_method(task, "grad_ascent", method_settings(**TINY), seed=0)
    assert row["p100"] == pytest.approx(row["scores"].max())
    assert row["p50"] == pytest.approx(np.median(row["scores"]))
    assert row["task"] == task.name and row["method"] == "grad_ascent" and row["seconds"] > 0


def test_gradient_ascent_raises_the_surrogate_value_over_its_starts(task: OfflineTask) -> None:
    prop = propose(task, "grad_ascent", method_settings(**TINY), seed=0)
    fn = as_numpy_fn(prop.surrogate)
    starts = task.to_z(task.best_offline(16))
    assert fn(prop.candidates_z).mean() > fn(starts).mean()


def test_method_names_are_validated() -> None:
    with pytest.raises(ValueError, match="method"):
        parse_method("bayes_opt")
    with pytest.raises(ValueError, match="method"):
        parse_method("root+boss")
    with pytest.raises(ValueError, match="method"):
        parse_method("grad_ascent+sam")
    assert parse_method("cma_es+boss") == ("cma_es", "boss")


def test_unknown_config_fields_are_rejected(task: OfflineTask) -> None:
    with pytest.raises(ValueError, match="epoch"):
        method_settings(surrogate={"epoch": 3})


def test_root_pairs_per_epoch_is_an_option_that_draws_new_pairs(task: OfflineTask) -> None:
    once = propose(task, "root", method_settings(**{**TINY, "root": {**TINY["root"], "epochs": 3}}), seed=2)
    assert once.extras["n_pairs_by_epoch"] == [once.extras["n_pairs"]]  # the default builds the pairs once
    fresh_root = {**TINY["root"], "epochs": 3, "pairs_per_epoch": True}
    fresh = propose(task, "root", method_settings(**{**TINY, "root": fresh_root}), seed=2)
    counts = fresh.extras["n_pairs_by_epoch"]
    assert len(counts) == 3 and counts[0] == once.extras["n_pairs"]  # epoch 0 trains on the same first draw
    assert fresh.extras["bridge_history"][0] == once.extras["bridge_history"][0]
    assert not np.array_equal(fresh.candidates, once.candidates)
    again = propose(task, "root", method_settings(**{**TINY, "root": fresh_root}), seed=2)
    assert np.array_equal(fresh.candidates, again.candidates)


def test_ensemble_optimisers_search_the_mean_or_the_minimum_of_shared_members(task: OfflineTask) -> None:
    settings = method_settings(**TINY)
    model, _ = fit_surrogate(task, seed=3, config=settings.surrogate, kind="ensemble")
    assert isinstance(model, EnsembleSurrogate) and len(model.members) == 2
    mean = propose(task, "grad_ascent_mean_ens", settings, seed=3, model=model)
    low = propose(task, "grad_ascent_min_ens", settings, seed=3, model=model)
    x = torch.as_tensor(task.x_z[:20], dtype=torch.float32)
    preds = torch.stack([m(x) for m in model.members])
    with torch.no_grad():
        torch.testing.assert_close(mean.surrogate(x), preds.mean(0))
        torch.testing.assert_close(low.surrogate(x), preds.min(0).values)
    assert list(low.surrogate.members) == list(model.members)  # the same members, reduced differently
    assert not np.array_equal(mean.candidates, low.candidates)
    fresh = propose(task, "grad_ascent_min_ens", settings, seed=3)  # trained afresh: the same members
    assert np.array_equal(fresh.candidates, low.candidates)
    with pytest.raises(ValueError, match="ensemble"):
        propose(task, "grad_ascent_min_ens", settings, seed=3, model=model.members[0])


def test_root_target_comes_from_the_named_source(task: OfflineTask) -> None:
    """Only ``task_max`` reads the hidden optimum: moving it moves that target and no other."""
    moved = dataclasses.replace(task, y_max=task.y_max + 5.0)
    pairs = build_root_pairs(task.x_z, task.y_z, GPPrior(n_functions=1), PairClimb(n_seeds=8, steps=5, lr=1e-2))
    z = lambda t, v: float(t.y_scaler.transform(np.array(v)))  # noqa: E731
    assert reference_score_z(task, pairs, "task_max") == pytest.approx(z(task, task.y_max))
    assert reference_score_z(moved, pairs, "task_max") == pytest.approx(z(task, task.y_max + 5.0))
    for source in ("offline_max", "gp_max"):
        assert reference_score_z(moved, pairs, source) == reference_score_z(task, pairs, source)
    assert reference_score_z(task, pairs, "offline_max") == pytest.approx(z(task, task.y.max()))
    assert reference_score_z(task, pairs, "gp_max") == float(pairs.y_high.max())
    root = {**TINY["root"], "target_from": "offline_max", "target_scale": 0.8}
    a = propose(task, "root", method_settings(**{**TINY, "root": root}), seed=0)
    b = propose(moved, "root", method_settings(**{**TINY, "root": root}), seed=0)
    assert a.extras["y_target_z"] == pytest.approx(0.8 * z(task, task.y.max()))
    assert np.array_equal(a.candidates, b.candidates)
    oracle = {**root, "target_from": "task_max"}
    c = propose(task, "root", method_settings(**{**TINY, "root": oracle}), seed=0)
    d = propose(moved, "root", method_settings(**{**TINY, "root": oracle}), seed=0)
    assert not np.array_equal(c.candidates, d.candidates)
    with pytest.raises(ValueError, match="target_from"):
        reference_score_z(task, pairs, "oracle")
