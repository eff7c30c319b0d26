"""The ROOT chapter's driver: settings, methods and ablations, claims, and its own figures."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pytest

from repro.offopt.chapters import root
from repro.offopt.grid import GridResult, MethodSpec, run_grid
from repro.params import ParameterError

VALUES = dict(tasks=("ackley",), dim=3, n_pool=300, q=50.0, n_ref=2000, n_candidates=16, seeds=(0,), hidden=(16,),
              surrogate_epochs=4, grad_steps=8, grad_lr=0.01, cma_starts=4, cma_generations=4, ensemble_size=2,
              workers=1, baselines=("best_offline", "grad_ascent"), n_functions=2, gp_seeds=16, gp_steps=10,
              gp_max_points=200, bridge_hidden=(16,), bridge_epochs=2, sample_steps=5, guidance=-1.5, target_scale=0.8,
              target_from="task_max", ablations=False, pairs_per_epoch=False, device="cpu")


def test_params_map_the_schema_onto_the_pipeline() -> None:
    p = root.Params(**VALUES)
    assert p.root_config() == {"n_functions": 2, "n_seeds": 16, "gp_steps": 10, "gp_max_points": 200, "hidden": [16],
                               "epochs": 2, "sample_steps": 5, "guidance": -1.5, "target_scale": 0.8,
                               "target_from": "task_max", "pairs_per_epoch": False, "device": "cpu"}
    assert p.surrogate_config()["device"] == "cpu"
    assert dataclasses.replace(p, device="auto").root_config()["device"] == "auto"
    assert dataclasses.replace(p, pairs_per_epoch=True).root_config()["pairs_per_epoch"] is True
    offline = MethodSpec(label=root.OFFLINE_ARM, method="root", root={"target_from": "offline_max"})
    assert p.methods() == ["best_offline", "grad_ascent", "root", offline]
    with_ablations = dataclasses.replace(p, ablations=True).methods()
    assert with_ablations[4:] == [MethodSpec(label="root (F=1)", method="root", root={"n_functions": 1}),
                                  MethodSpec(label="root (w=0)", method="root", root={"guidance": 0.0})]


def test_the_known_maximum_is_a_parameter_and_the_offline_arm_runs_beside_it() -> None:
    """ROOT on the task's known maximum (the authors' code) always comes with ROOT on offline information."""
    p = root.Params(**VALUES)
    assert p.offline_arm == root.OFFLINE_ARM
    fair = dataclasses.replace(p, target_from="offline_max")
    assert fair.offline_arm == "root" and fair.methods() == ["best_offline", "grad_ascent", "root"]
    assert fair.root_config()["target_from"] == "offline_max"
    with pytest.raises(ParameterError, match="'target_from'"):
        dataclasses.replace(p, target_from="oracle").checks()
    with pytest.raises(ParameterError, match="'baselines'"):
        dataclasses.replace(p, baselines=("best_offline", "cma_es")).checks()


def test_run_is_the_grid_with_the_chapter_settings() -> None:
    p = root.Params(**VALUES)
    tasks = p.build_tasks()
    ours = root.run(p, tasks)
    direct = run_grid(tasks, p.methods(), p.seeds, p.method_settings(root=p.root_config()), progress=False)
    assert list(ours.grid.rows.method) == ["best_offline", "grad_ascent", "root", root.OFFLINE_ARM]
    np.testing.assert_array_equal(ours.grid.rows.p100.to_numpy(), direct.rows.p100.to_numpy())
    c = root.claims(ours)
    assert set(c) == {"rank_gap_vs_best_other", "frac_tasks_beyond_offline", "gain_vs_baseline_points",
                      "rank_gap_offline_target", "gain_offline_target_points"}
    assert all(len(v) == 1 for v in c.values())
    rows = ours.grid.rows.set_index("method").p100
    assert c["gain_offline_target_points"] == pytest.approx([100 * (rows[root.OFFLINE_ARM] - rows["grad_ascent"])])
    assert c["gain_vs_baseline_points"] == pytest.approx([100 * (rows["root"] - rows["grad_ascent"])])
    assert list(root.main_rows(ours).method) == ["best_offline", "grad_ascent", "root", root.OFFLINE_ARM]


def test_root_claims_exclude_ablations_from_the_ranking(rows_from) -> None:
    vals = {("t1", "best_offline", 0): 0.5, ("t1", "grad_ascent", 0): 0.7, ("t1", "root", 0): 0.8, ("t1", "root (F=1)", 0): 0.9,
            ("t2", "best_offline", 0): 0.4, ("t2", "grad_ascent", 0): 0.6, ("t2", "root", 0): 0.3, ("t2", "root (F=1)", 0): 0.9}
    rows = rows_from(vals)
    rows["best_offline"] = rows.task.map({"t1": 0.5, "t2": 0.4})
    c = root.root_claims(rows, compare=["best_offline", "grad_ascent"])
    # ranks: root 1 and 3 -> 2; grad_ascent 2 and 1 -> 1.5; best_offline 3 and 2 -> 2.5
    assert c["rank_gap_vs_best_other"] == [0.5]
    assert c["frac_tasks_beyond_offline"] == [0.5]
    np.testing.assert_allclose(c["gain_vs_baseline_points"], [100 * (0.1 - 0.3) / 2])
    everyone = root.root_claims(rows)  # the F=1 ablation ranks first on both tasks
    assert everyone["rank_gap_vs_best_other"] == [2.0]  # root: ranks 2 and 4; F=1: 1 and 1
    with pytest.raises(ValueError, match="not in the grid"):
        root.root_claims(rows, baseline="cma_es")


def test_chapter_figures(grid: GridResult) -> None:
    fig = root.candidate_distributions(grid.scores, list(grid.tasks), grid.methods, seed=0)
    assert len(fig.axes) == 2
    t = grid.tasks["ackley-3d"]
    start = t.to_z(t.best_offline(16))
    fig = root.bridge_translation(t, start, grid.candidates_z[("ackley-3d", "root (F=1)", 0)])
    assert len(fig.axes) == 3  # map, colour bar, start-vs-candidate scores
    with pytest.raises(ValueError, match="same shape"):
        root.bridge_translation(t, start, start[:3])
    plt.close("all")
