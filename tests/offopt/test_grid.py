"""The shared experiment grid: shape, determinism, surrogate sharing, settings, ranks and paired comparisons."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from repro.offopt import grid as g
from repro.offopt.pipeline import fit_surrogate, method_settings, run_method
from repro.offopt.regularizers import empirical_sensitivity, gradient_norm


def test_grid_is_tidy_one_row_per_task_method_seed(grid: g.GridResult) -> None:
    rows = grid.rows
    assert len(rows) == 2 * 6 * 2
    assert not rows.duplicated(["task", "method", "seed"]).any()
    assert list(dict.fromkeys(rows.method)) == grid.methods
    assert set(rows.task) == {"ackley-3d", "rosenbrock-3d"}
    for key, s in grid.scores.items():
        assert s.shape == (16,) and grid.candidates_z[key].shape == (16, 3)
    row = rows.iloc[5]
    np.testing.assert_allclose(row.p100, grid.scores[(row.task, row.method, row.seed)].max())
    # diagnostics only for surrogate methods, and one surrogate shared by both optimisers
    assert rows[rows.optimizer.isin(["best_offline", "root"])].sharpness_unseen.isna().all()
    sur = rows[rows.optimizer.isin(["grad_ascent", "cma_es"])]
    assert sur.sharpness_unseen.notna().all() and sur.sensitivity_unseen.between(0, 1).all()
    per = sur.groupby(["task", "seed", "regularizer"]).sharpness_offline.nunique()
    assert (per == 1).all()


def test_best_offline_rows_are_the_datasets_best(grid: g.GridResult) -> None:
    bo = grid.rows[grid.rows.method == "best_offline"]
    np.testing.assert_allclose(bo.p100.to_numpy(), bo.best_offline.to_numpy())


def test_grid_is_deterministic_by_seed_and_sharing_changes_nothing(tasks, tiny) -> None:
    a = g.run_grid(tasks[:1], ["grad_ascent", "cma_es"], [3], tiny, progress=False).rows
    b = g.run_grid(tasks[:1], ["cma_es", "grad_ascent"], [3], tiny, progress=False).rows
    key = ["task", "method", "seed"]
    pd.testing.assert_frame_equal(
        a.sort_values(key)[["p100", "p80", "p50"]].reset_index(drop=True),
        b.sort_values(key)[["p100", "p80", "p50"]].reset_index(drop=True),
    )
    # a surrogate trained once and searched twice gives what a fresh pipeline run gives
    solo = run_method(tasks[0], "cma_es", tiny, seed=3)
    assert solo["p100"] == a[a.method == "cma_es"].p100.item()


def test_grid_rejects_bad_input(tasks) -> None:
    with pytest.raises(ValueError, match="labels must be distinct"):
        g.run_grid(tasks, ["grad_ascent", "grad_ascent"], [0], progress=False)
    with pytest.raises(ValueError, match="seeds"):
        g.run_grid(tasks, ["grad_ascent"], [0, 0], progress=False)
    with pytest.raises(ValueError, match="diagnostics"):
        g.Diagnostics(which=("curvature",))
    with pytest.raises(ValueError, match="method"):
        g.MethodSpec(label="x", method="adam")
    with pytest.raises(ValueError, match="tasks"):
        g.build_tasks(["ackley", "sphere"], 3)
    with pytest.raises(ValueError, match="tasks"):
        g.build_tasks(["ackley", "ackley"], 3)


def test_mean_rank_by_seed_and_score_table(rows_from) -> None:
    # seed 0: A best on both tasks, B and C tie on t2; seed 1: C best everywhere
    vals = {
        ("t1", "A", 0): 0.9,
        ("t1", "B", 0): 0.5,
        ("t1", "C", 0): 0.1,
        ("t2", "A", 0): 0.8,
        ("t2", "B", 0): 0.3,
        ("t2", "C", 0): 0.3,
        ("t1", "A", 1): 0.1,
        ("t1", "B", 1): 0.2,
        ("t1", "C", 1): 0.3,
        ("t2", "A", 1): 0.1,
        ("t2", "B", 1): 0.2,
        ("t2", "C", 1): 0.3,
    }
    rows = rows_from(vals)
    ranks = g.mean_rank_by_seed(rows)
    assert list(ranks.columns) == ["A", "B", "C"] and list(ranks.index) == [0, 1]
    np.testing.assert_allclose(ranks.loc[0].to_numpy(), [1.0, 2.25, 2.75])
    np.testing.assert_allclose(ranks.loc[1].to_numpy(), [3.0, 2.0, 1.0])
    np.testing.assert_allclose(ranks.sum(axis=1), 6.0)  # 1 + 2 + 3 on every task
    table = g.score_table(rows)
    assert table.shape == (3, 3) and list(table.columns) == ["t1", "t2", "mean rank"]
    assert table.loc["A", "t1"] == "0.500 ± 0.566"
    assert table.loc["A", "mean rank"] == "2.00 ± 1.41"
    np.testing.assert_allclose(g.mean_table(rows).loc["C"].to_numpy(), [0.2, 0.3])


def test_regulariser_claims_count_pairs_per_seed(rows_from) -> None:
    vals = {
        ("t1", "ga", 0): 0.50,
        ("t1", "ga+boss", 0): 0.55,
        ("t1", "cma", 0): 0.40,
        ("t1", "cma+boss", 0): 0.30,
        ("t2", "ga", 0): 0.80,
        ("t2", "ga+boss", 0): 0.80,
        ("t2", "cma", 0): 0.20,
        ("t2", "cma+boss", 0): 0.25,
        ("t1", "ga", 1): 0.50,
        ("t1", "ga+boss", 1): 0.60,
        ("t1", "cma", 1): 0.40,
        ("t1", "cma+boss", 1): 0.44,
        ("t2", "ga", 1): 0.80,
        ("t2", "ga+boss", 1): 0.88,
        ("t2", "cma", 1): 0.20,
        ("t2", "cma+boss", 1): 0.22,
    }
    rows = rows_from(vals)
    gains = g.paired_gains(rows, "boss")
    assert len(gains) == 8 and set(gains.base) == {"ga", "cma"}
    c = g.regulariser_claims(rows, "boss")
    assert c["frac_improved"] == [0.5, 1.0]  # a tie is not an improvement
    np.testing.assert_allclose(
        c["mean_gain_points"], [100 * (0.05 - 0.10 + 0.0 + 0.05) / 4, 100 * (0.10 + 0.04 + 0.08 + 0.02) / 4]
    )
    np.testing.assert_allclose(c["max_rel_gain_pct"], [25.0, 20.0])
    with pytest.raises(ValueError, match="pair"):
        g.paired_gains(rows, "ignite")


def test_diagnostic_reduction_counts_each_surrogate_once(rows_from) -> None:
    rows = rows_from(
        {
            ("t1", "grad_ascent", 0): 0.5,
            ("t1", "grad_ascent+ignite", 0): 0.5,
            ("t1", "cma_es", 0): 0.5,
            ("t2", "grad_ascent", 0): 0.5,
            ("t2", "grad_ascent+ignite", 0): 0.5,
            ("t2", "cma_es", 0): 0.5,
        }
    )
    rows["sharpness_unseen"] = [4.0, 3.0, 4.0, 2.0, 0.0, 2.0]
    # vanilla mean over tasks (4 + 2) / 2 = 3, regularised (3 + 0) / 2 = 1.5 -> 50 %
    assert g.diagnostic_reduction(rows, "ignite", "sharpness_unseen") == [50.0]
    with pytest.raises(ValueError, match="not logged"):
        g.diagnostic_reduction(rows, "ignite", "sensitivity_unseen")


def test_regularised_methods_order_and_checks() -> None:
    assert g.regularised_methods(["grad_ascent", "cma_es"], ["ignite", "ignite2"]) == [
        "grad_ascent",
        "grad_ascent+ignite",
        "grad_ascent+ignite2",
        "cma_es",
        "cma_es+ignite",
        "cma_es+ignite2",
    ]
    with pytest.raises(ValueError, match="optimizers"):
        g.regularised_methods(["root"], ["boss"])
    with pytest.raises(ValueError, match="method"):
        g.regularised_methods(["grad_ascent"], ["sam"])


def test_unseen_designs_lie_beyond_the_offline_data(tasks) -> None:
    t = tasks[0]
    u = g.unseen_designs(t, 0.1)
    assert u.shape == (30, 3)  # 10 % of a pool of 300
    su = t.score(u)
    assert su.min() >= t.y.max() and np.all(np.diff(su) <= 0)
    assert su.min() >= np.sort(t.y_hidden)[-30]
    with pytest.raises(ValueError, match="fraction"):
        g.unseen_designs(t, 1.5)


def test_best_by_task_picks_the_highest_mean(rows_from) -> None:
    rows = rows_from(
        {
            ("t1", "A", 0): 0.9,
            ("t1", "B", 0): 0.5,
            ("t1", "A", 1): 0.1,
            ("t1", "B", 1): 0.6,
            ("t2", "A", 0): 0.2,
            ("t2", "B", 0): 0.2,
            ("t2", "A", 1): 0.2,
            ("t2", "B", 1): 0.2,
        }
    )
    best = g.best_by_task(rows)
    assert best.to_dict() == {"t1": "B", "t2": "A"}  # means 0.5 vs 0.55; a tie goes to the first in grid order


def test_surrogate_diagnostics_measure_the_named_quantities(tasks) -> None:
    t = tasks[0]
    model, _ = fit_surrogate(t, seed=0, config={"hidden": [8], "epochs": 2})
    d = g.surrogate_diagnostics(model, t, ["sharpness", "sensitivity"], seed=5, sensitivity_kwargs={"sigma": 1e-2, "n_gamma": 20})
    x_off = torch.as_tensor(t.x_z, dtype=torch.float32)
    x_new = torch.as_tensor(t.to_z(g.unseen_designs(t)), dtype=torch.float32)
    assert d["sharpness_offline"] == gradient_norm(model, x_off)
    assert d["sharpness_unseen"] == gradient_norm(model, x_new)
    assert d["sensitivity_unseen"] == empirical_sensitivity(model, x_new, sigma=1e-2, n_gamma=20, seed=5)
    assert set(d) == {"sharpness_offline", "sharpness_unseen", "sensitivity_offline", "sensitivity_unseen"}


def test_grid_rejects_unknown_regulariser_settings(tasks) -> None:
    with pytest.raises(ValueError, match="regularizer_kwargs"):
        method_settings(regularizer_kwargs={"bos": {"weight": 1.0}})


SETTINGS = dict(
    tasks=["ackley", "rosenbrock"],
    dim=3,
    n_pool=300,
    q=50.0,
    n_ref=2000,
    n_candidates=16,
    seeds=[0, 1],
    hidden=[16],
    surrogate_epochs=4,
    grad_steps=8,
    grad_lr=0.01,
    cma_starts=4,
    cma_generations=4,
    ensemble_size=2,
    workers=1,
)


def test_grid_settings_are_frozen_tuples_named_as_the_schema(tasks) -> None:
    s = g.GridSettings(**SETTINGS)
    assert s.tasks == ("ackley", "rosenbrock") and s.seeds == (0, 1) and s.hidden == (16,)
    hash(s)  # hashable: every list became a tuple
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.dim = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        g.GridSettings(tasks="ackley", dim=3)  # keyword-only: no positional records
    assert s.surrogate_config() == {"hidden": [16], "epochs": 4, "ensemble": 2, "device": "cpu"}
    assert s.search_config() == {"grad_steps": 8, "grad_lr": 0.01, "cma_starts": 4, "cma_generations": 4}
    built = s.build_tasks()
    assert [t.name for t in built] == [t.name for t in tasks]
    np.testing.assert_array_equal(built[0].x, tasks[0].x)


def test_paired_mean_gain_is_the_mean_with_a_t_interval(rows_from) -> None:
    vals = {
        ("t1", "ga", 0): 0.50,
        ("t1", "ga+ignite", 0): 0.55,
        ("t2", "ga", 0): 0.40,
        ("t2", "ga+ignite", 0): 0.38,
        ("t1", "ga", 1): 0.50,
        ("t1", "ga+ignite", 1): 0.60,
        ("t2", "ga", 1): 0.40,
        ("t2", "ga+ignite", 1): 0.44,
    }
    rows = rows_from(vals)
    rel = np.array([10.0, -5.0, 20.0, 10.0])  # percent of |vanilla|, pairs in (task, seed) order
    m = g.paired_mean_gain(rows, "ignite")
    half = stats.t.ppf(0.975, df=3) * rel.std(ddof=1) / 2.0
    assert m.n == 4 and m.unit == "%" and m.confidence == 0.95
    assert m.mean == pytest.approx(rel.mean())
    assert (m.low, m.high) == pytest.approx((rel.mean() - half, rel.mean() + half))
    absolute = g.paired_mean_gain(rows, "ignite", relative=False, confidence=0.5)
    assert absolute.unit == "points" and absolute.mean == pytest.approx(100 * (0.05 - 0.02 + 0.10 + 0.04) / 4)
    assert absolute.high - absolute.low < m.high - m.low
    assert g.regulariser_claims(rows, "ignite")["mean_rel_gain_pct"] == pytest.approx([2.5, 15.0])
    one = rows[(rows.seed == 0) & (rows.task == "t1")]
    with pytest.raises(ValueError, match="two"):
        g.paired_mean_gain(one, "ignite")
    with pytest.raises(ValueError, match="confidence"):
        g.paired_mean_gain(rows, "ignite", confidence=1.0)


def test_the_max_of_null_gains_looks_like_a_boost_but_the_paired_mean_does_not(rows_from) -> None:
    """A regulariser that changes nothing, scored with noise: the max over pairs grows, the interval holds 0."""
    rng = np.random.default_rng(0)
    vals = {}
    for task in range(6):
        for seed in range(8):
            base = 0.6 + 0.1 * task / 6
            vals[(f"t{task}", "ga", seed)] = base + 0.03 * rng.standard_normal()
            vals[(f"t{task}", "ga+ignite", seed)] = base + 0.03 * rng.standard_normal()
    rows = rows_from(vals)
    assert max(g.regulariser_claims(rows, "ignite")["max_rel_gain_pct"]) > 5.0  # "a boost" from noise alone
    m = g.paired_mean_gain(rows, "ignite")
    assert m.low < 0.0 < m.high and not m.excludes_zero


def test_chapter_grid_is_the_same_on_one_or_two_workers(tiny) -> None:
    """The (task, seed) cells seed themselves: spreading them over processes changes no row, score or candidate."""
    params = g.GridSettings(**{**SETTINGS, "seeds": [0, 1]})
    methods = ["grad_ascent", "grad_ascent_mean_ens+ignite2"]
    one = g.run_chapter_grid(params, methods, tiny)
    two = g.run_chapter_grid(dataclasses.replace(params, workers=2), methods, tiny)
    pd.testing.assert_frame_equal(one.rows.drop(columns="seconds"), two.rows.drop(columns="seconds"))
    assert list(one.scores) == list(two.scores)
    assert all(np.array_equal(one.candidates_z[k], two.candidates_z[k]) for k in one.candidates_z)
    serial = g.run_grid(params.build_tasks(), methods, params.seeds, tiny, progress=False)
    pd.testing.assert_frame_equal(one.rows.drop(columns="seconds"), serial.rows.drop(columns="seconds"))


def test_grid_settings_checks_name_the_parameters() -> None:
    from repro.params import ParameterError

    with pytest.raises(ParameterError, match="'n_candidates'"):
        g.GridSettings(**{**SETTINGS, "n_candidates": 151}).checks()
    g.GridSettings(**{**SETTINGS, "n_candidates": 150}).checks()
