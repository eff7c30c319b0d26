"""Named methods end to end on a tiny task: shapes, box, determinism, reporting."""

from __future__ import annotations

import numpy as np
import pytest

from repro.models import torch_threads
from repro.offopt.optimizers import as_numpy_fn
from repro.offopt.pipeline import parse_method, propose, run_method
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
    surrogate={"hidden": [16], "epochs": 5},
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
    "method", ["best_offline", "grad_ascent", "cma_es", "genetic", "grad_ascent+boss", "cma_es+ignite", "genetic+ignite2", "root"]
)
def test_methods_return_k_candidates_in_the_box_deterministically(task: OfflineTask, method: str) -> None:
    kw = {k: v for k, v in TINY.items()}
    if method.startswith("grad_ascent+boss"):
        kw["regularizer_kwargs"] = {"n_gamma": 5}
    a = propose(task, method, seed=1, **kw)
    b = propose(task, method, seed=1, **kw)
    assert a.candidates.shape == (16, 3)
    assert np.all(a.candidates >= task.lower - 1e-9) and np.all(a.candidates <= task.upper + 1e-9)
    np.testing.assert_allclose(task.from_z(a.candidates_z), a.candidates, atol=1e-12)
    assert np.array_equal(a.candidates, b.candidates)
    if "+" in method:
        assert a.extras["regularizer_history"] and len(a.extras["regularizer_history"][0]) > 0


def test_best_offline_returns_the_top_of_the_offline_set(task: OfflineTask) -> None:
    prop = propose(task, "best_offline", n_candidates=8)
    top = np.sort(task.y)[-8:][::-1]
    np.testing.assert_allclose(task.score(prop.candidates), top, atol=1e-12)


def test_run_method_reports_percentiles_of_its_scores(task: OfflineTask) -> None:
    row = run_method(task, "grad_ascent", seed=0, **TINY)
    assert row["p100"] == pytest.approx(row["scores"].max())
    assert row["p50"] == pytest.approx(np.median(row["scores"]))
    assert row["task"] == task.name and row["method"] == "grad_ascent" and row["seconds"] > 0


def test_gradient_ascent_raises_the_surrogate_value_over_its_starts(task: OfflineTask) -> None:
    prop = propose(task, "grad_ascent", seed=0, **TINY)
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
        propose(task, "grad_ascent", surrogate={"epoch": 3})


def test_root_pairs_per_epoch_is_an_option_that_draws_new_pairs(task: OfflineTask) -> None:
    once = propose(task, "root", seed=2, **{**TINY, "root": {**TINY["root"], "epochs": 3}})
    assert once.extras["n_pairs_by_epoch"] == [once.extras["n_pairs"]]  # the default builds the pairs once
    fresh_root = {**TINY["root"], "epochs": 3, "pairs_per_epoch": True}
    fresh = propose(task, "root", seed=2, **{**TINY, "root": fresh_root})
    counts = fresh.extras["n_pairs_by_epoch"]
    assert len(counts) == 3 and counts[0] == once.extras["n_pairs"]  # epoch 0 trains on the same first draw
    assert fresh.extras["bridge_history"][0] == once.extras["bridge_history"][0]
    assert not np.array_equal(fresh.candidates, once.candidates)
    assert np.array_equal(fresh.candidates, propose(task, "root", seed=2, **{**TINY, "root": fresh_root}).candidates)
