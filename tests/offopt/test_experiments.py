"""The chapters' experiment drivers: grid shape, determinism, surrogate sharing, ranks and claim values."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # tests only; notebooks never set a backend

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import repro.offopt as oo  # noqa: E402
from repro.offopt import experiments as ex  # noqa: E402
from repro.offopt import plots  # noqa: E402
from repro.offopt.pipeline import run_method  # noqa: E402
from repro.offopt.surrogate import torch_threads  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


TINY = dict(
    n_candidates=16,
    surrogate={"hidden": [16], "epochs": 4},
    search={"grad_steps": 8, "cma_starts": 4, "cma_generations": 4, "cma_popsize": 6},
    root={"n_functions": 2, "n_seeds": 16, "gp_steps": 10, "gp_lr": 1e-2, "hidden": [16], "epochs": 2, "n_timesteps": 50, "sample_steps": 5},
    progress=False,
)


@pytest.fixture(scope="module")
def tasks() -> list[oo.OfflineTask]:
    return ex.build_tasks(["ackley", "rosenbrock"], 3, n=300, n_ref=2000)


@pytest.fixture(scope="module")
def grid(tasks) -> ex.GridResult:
    methods = ["best_offline", "grad_ascent", "grad_ascent+ignite2", "cma_es", "cma_es+ignite2",
               ex.MethodSpec("root (F=1)", "root", root={"n_functions": 1})]
    return ex.run_grid(tasks, methods, [0, 1], diagnostics=["sharpness", "sensitivity"], **TINY)


def test_grid_is_tidy_one_row_per_task_method_seed(grid: ex.GridResult) -> None:
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


def test_best_offline_rows_are_the_datasets_best(grid: ex.GridResult) -> None:
    bo = grid.rows[grid.rows.method == "best_offline"]
    np.testing.assert_allclose(bo.p100.to_numpy(), bo.best_offline.to_numpy())


def test_grid_is_deterministic_by_seed_and_sharing_changes_nothing(tasks) -> None:
    a = ex.run_grid(tasks[:1], ["grad_ascent", "cma_es"], [3], **TINY).rows
    b = ex.run_grid(tasks[:1], ["cma_es", "grad_ascent"], [3], **TINY).rows
    key = ["task", "method", "seed"]
    pd.testing.assert_frame_equal(a.sort_values(key)[["p100", "p80", "p50"]].reset_index(drop=True),
                                  b.sort_values(key)[["p100", "p80", "p50"]].reset_index(drop=True))
    # a surrogate trained once and searched twice gives what a fresh pipeline run gives
    kw = {k: v for k, v in TINY.items() if k != "progress"}
    solo = run_method(tasks[0], "cma_es", seed=3, **kw)
    assert solo["p100"] == a[a.method == "cma_es"].p100.item()


def test_grid_rejects_bad_input(tasks) -> None:
    with pytest.raises(ValueError, match="labels must be distinct"):
        ex.run_grid(tasks, ["grad_ascent", "grad_ascent"], [0], progress=False)
    with pytest.raises(ValueError, match="seeds"):
        ex.run_grid(tasks, ["grad_ascent"], [0, 0], progress=False)
    with pytest.raises(ValueError, match="diagnostics"):
        ex.run_grid(tasks, ["grad_ascent"], [0], diagnostics=["curvature"], progress=False)
    with pytest.raises(ValueError, match="method"):
        ex.MethodSpec("x", "adam")
    with pytest.raises(ValueError, match="tasks"):
        ex.build_tasks(["ackley", "sphere"], 3)
    with pytest.raises(ValueError, match="tasks"):
        ex.build_tasks(["ackley", "ackley"], 3)


def _rows(values: dict[tuple[str, str, int], float], best: float = 0.5) -> pd.DataFrame:
    out = []
    for (task, method, seed), v in values.items():
        opt, _, reg = method.partition("+")
        out.append({"task": task, "method": method, "optimizer": opt, "regularizer": reg or "none", "seed": seed,
                    "p100": v, "p80": v, "p50": v, "best_offline": best})
    return pd.DataFrame(out)


def test_mean_rank_by_seed_and_score_table() -> None:
    # seed 0: A best on both tasks, B and C tie on t2; seed 1: C best everywhere
    vals = {("t1", "A", 0): 0.9, ("t1", "B", 0): 0.5, ("t1", "C", 0): 0.1,
            ("t2", "A", 0): 0.8, ("t2", "B", 0): 0.3, ("t2", "C", 0): 0.3,
            ("t1", "A", 1): 0.1, ("t1", "B", 1): 0.2, ("t1", "C", 1): 0.3,
            ("t2", "A", 1): 0.1, ("t2", "B", 1): 0.2, ("t2", "C", 1): 0.3}
    rows = _rows(vals)
    ranks = ex.mean_rank_by_seed(rows)
    assert list(ranks.columns) == ["A", "B", "C"] and list(ranks.index) == [0, 1]
    np.testing.assert_allclose(ranks.loc[0].to_numpy(), [1.0, 2.25, 2.75])
    np.testing.assert_allclose(ranks.loc[1].to_numpy(), [3.0, 2.0, 1.0])
    np.testing.assert_allclose(ranks.sum(axis=1), 6.0)  # 1 + 2 + 3 on every task
    table = ex.score_table(rows)
    assert table.shape == (3, 3) and list(table.columns) == ["t1", "t2", "mean rank"]
    assert table.loc["A", "t1"] == "0.500 ± 0.566"
    assert table.loc["A", "mean rank"] == "2.00 ± 1.41"
    np.testing.assert_allclose(ex.mean_table(rows).loc["C"].to_numpy(), [0.2, 0.3])


def test_regulariser_claims_count_pairs_per_seed() -> None:
    vals = {("t1", "ga", 0): 0.50, ("t1", "ga+boss", 0): 0.55, ("t1", "cma", 0): 0.40, ("t1", "cma+boss", 0): 0.30,
            ("t2", "ga", 0): 0.80, ("t2", "ga+boss", 0): 0.80, ("t2", "cma", 0): 0.20, ("t2", "cma+boss", 0): 0.25,
            ("t1", "ga", 1): 0.50, ("t1", "ga+boss", 1): 0.60, ("t1", "cma", 1): 0.40, ("t1", "cma+boss", 1): 0.44,
            ("t2", "ga", 1): 0.80, ("t2", "ga+boss", 1): 0.88, ("t2", "cma", 1): 0.20, ("t2", "cma+boss", 1): 0.22}
    rows = _rows(vals)
    gains = ex.paired_gains(rows, "boss")
    assert len(gains) == 8 and set(gains.base) == {"ga", "cma"}
    c = ex.regulariser_claims(rows, "boss")
    assert c["frac_improved"] == [0.5, 1.0]  # a tie is not an improvement
    np.testing.assert_allclose(c["mean_gain_points"], [100 * (0.05 - 0.10 + 0.0 + 0.05) / 4, 100 * (0.10 + 0.04 + 0.08 + 0.02) / 4])
    np.testing.assert_allclose(c["max_rel_gain_pct"], [25.0, 20.0])
    with pytest.raises(ValueError, match="pair"):
        ex.paired_gains(rows, "ignite")


def test_diagnostic_reduction_counts_each_surrogate_once() -> None:
    rows = _rows({("t1", "grad_ascent", 0): 0.5, ("t1", "grad_ascent+ignite", 0): 0.5, ("t1", "cma_es", 0): 0.5,
                  ("t2", "grad_ascent", 0): 0.5, ("t2", "grad_ascent+ignite", 0): 0.5, ("t2", "cma_es", 0): 0.5})
    rows["sharpness_unseen"] = [4.0, 3.0, 4.0, 2.0, 0.0, 2.0]
    # vanilla mean over tasks (4 + 2) / 2 = 3, regularised (3 + 0) / 2 = 1.5 -> 50 %
    assert ex.diagnostic_reduction(rows, "ignite", "sharpness_unseen") == [50.0]
    with pytest.raises(ValueError, match="not logged"):
        ex.diagnostic_reduction(rows, "ignite", "sensitivity_unseen")


def test_root_claims_exclude_ablations_from_the_ranking() -> None:
    vals = {("t1", "best_offline", 0): 0.5, ("t1", "grad_ascent", 0): 0.7, ("t1", "root", 0): 0.8, ("t1", "root (F=1)", 0): 0.9,
            ("t2", "best_offline", 0): 0.4, ("t2", "grad_ascent", 0): 0.6, ("t2", "root", 0): 0.3, ("t2", "root (F=1)", 0): 0.9}
    rows = _rows(vals)
    rows["best_offline"] = rows.task.map({"t1": 0.5, "t2": 0.4})
    c = ex.root_claims(rows, compare=["best_offline", "grad_ascent"])
    # ranks: root 1 and 3 -> 2; grad_ascent 2 and 1 -> 1.5; best_offline 3 and 2 -> 2.5
    assert c["rank_gap_vs_best_other"] == [0.5]
    assert c["frac_tasks_beyond_offline"] == [0.5]
    np.testing.assert_allclose(c["gain_vs_baseline_points"], [100 * (0.1 - 0.3) / 2])
    everyone = ex.root_claims(rows)  # the F=1 ablation ranks first on both tasks
    assert everyone["rank_gap_vs_best_other"] == [2.0]  # root: ranks 2 and 4; F=1: 1 and 1


def test_regularised_methods_order_and_checks() -> None:
    assert ex.regularised_methods(["grad_ascent", "cma_es"], ["ignite", "ignite2"]) == [
        "grad_ascent", "grad_ascent+ignite", "grad_ascent+ignite2", "cma_es", "cma_es+ignite", "cma_es+ignite2"]
    with pytest.raises(ValueError, match="optimizers"):
        ex.regularised_methods(["root"], ["boss"])
    with pytest.raises(ValueError, match="method"):
        ex.regularised_methods(["grad_ascent"], ["sam"])


def test_unseen_designs_lie_beyond_the_offline_data(tasks) -> None:
    t = tasks[0]
    u = ex.unseen_designs(t, 0.1)
    assert u.shape == (30, 3)  # 10 % of a pool of 300
    su = t.score(u)
    assert su.min() >= t.y.max() and np.all(np.diff(su) <= 0)
    assert su.min() >= np.sort(t.y_hidden)[-30]
    with pytest.raises(ValueError, match="fraction"):
        ex.unseen_designs(t, 1.5)


def test_plots_have_one_panel_per_task(grid: ex.GridResult) -> None:
    fig = plots.scores_by_task(grid.rows)
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == len(grid.methods)
    fig2 = plots.candidate_distributions(grid.scores, list(grid.tasks), grid.methods, seed=0)
    assert len(fig2.axes) == 2
    t = grid.tasks["ackley-3d"]
    start = t.to_z(t.best_offline(16))
    fig3 = plots.bridge_translation(t, start, grid.candidates_z[("ackley-3d", "root (F=1)", 0)])
    assert len(fig3.axes) == 3  # map, colour bar, start-vs-candidate scores
    fig4 = plots.diagnostic_pairs(grid.rows, "ignite2", "sharpness_unseen", "gradient norm")
    assert len(fig4.axes) == 2 and len(fig4.axes[0].collections) == 2  # one scatter per task
    fig5 = plots.paired_gain_bars(ex.paired_gains(grid.rows, "ignite2"), "ignite2")
    assert len(fig5.axes[0].patches) == 2 * 2  # tasks x bases
    plt.close("all")


def test_best_by_task_picks_the_highest_mean() -> None:
    rows = _rows({("t1", "A", 0): 0.9, ("t1", "B", 0): 0.5, ("t1", "A", 1): 0.1, ("t1", "B", 1): 0.6,
                  ("t2", "A", 0): 0.2, ("t2", "B", 0): 0.2, ("t2", "A", 1): 0.2, ("t2", "B", 1): 0.2})
    best = ex.best_by_task(rows)
    assert best.to_dict() == {"t1": "B", "t2": "A"}  # means 0.5 vs 0.55; a tie goes to the first in grid order


def test_surrogate_diagnostics_measure_the_named_quantities(tasks) -> None:
    import torch

    from repro.offopt.regularizers import empirical_sensitivity, gradient_norm

    t = tasks[0]
    model, _ = oo.fit_surrogate(t, seed=0, config={"hidden": [8], "epochs": 2})
    d = ex.surrogate_diagnostics(model, t, ["sharpness", "sensitivity"], seed=5, sensitivity_kwargs={"sigma": 1e-2, "n_gamma": 20})
    x_off = torch.as_tensor(t.x_z, dtype=torch.float32)
    x_new = torch.as_tensor(t.to_z(ex.unseen_designs(t)), dtype=torch.float32)
    assert d["sharpness_offline"] == gradient_norm(model, x_off)
    assert d["sharpness_unseen"] == gradient_norm(model, x_new)
    assert d["sensitivity_unseen"] == empirical_sensitivity(model, x_new, sigma=1e-2, n_gamma=20, seed=5)
    assert set(d) == {"sharpness_offline", "sharpness_unseen", "sensitivity_offline", "sensitivity_unseen"}


def test_grid_rejects_unknown_regulariser_settings(tasks) -> None:
    with pytest.raises(ValueError, match="regularizer_kwargs"):
        ex.run_grid(tasks, ["grad_ascent+boss"], [0], regularizer_kwargs={"bos": {"weight": 1.0}}, progress=False)
