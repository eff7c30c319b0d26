"""The BOSS chapter's driver: methods, the grid it runs, and its claims."""

from __future__ import annotations

import numpy as np

from repro.offopt.chapters import sensitivity
from repro.offopt.grid import diagnostic_reduction, regulariser_claims, run_grid

SETTINGS = dict(tasks=["ackley"], dim=3, n_pool=300, q=50.0, n_ref=2000, n_candidates=16, seeds=[0, 1], hidden=[16],
                surrogate_epochs=4, grad_steps=8, grad_lr=0.01, cma_starts=4, cma_generations=4,
                optimizers=["grad_ascent"], boss_weight=1e-3, boss_alpha=0.1, n_gamma=10, sensitivity_sigma=0.01)


def test_run_and_claims() -> None:
    s = sensitivity.SensitivitySettings(**SETTINGS)
    assert s.methods() == ["grad_ascent", "grad_ascent+boss"]
    tasks = s.build_tasks()
    ours = sensitivity.run(s, tasks)
    direct = run_grid(tasks, s.methods(), s.seeds, n_candidates=16, surrogate=s.surrogate_config(),
                      search=s.search_config(), regularizer_kwargs={"boss": {"weight": 1e-3, "alpha": 0.1, "n_gamma": 10}},
                      diagnostics=["sensitivity"], sensitivity_kwargs={"alpha": 0.1, "sigma": 0.01}, progress=False)
    np.testing.assert_array_equal(ours.rows.p100.to_numpy(), direct.rows.p100.to_numpy())
    np.testing.assert_array_equal(ours.rows.sensitivity_unseen.to_numpy(), direct.rows.sensitivity_unseen.to_numpy())
    c = sensitivity.claims(ours)
    assert list(c) == ["frac_improved", "mean_gain_points", "sensitivity_reduction_pct"]
    paired = regulariser_claims(ours.rows, "boss")
    assert c["mean_gain_points"] == paired["mean_gain_points"] and len(c["frac_improved"]) == 2
    assert c["sensitivity_reduction_pct"] == diagnostic_reduction(ours.rows, "boss", "sensitivity_unseen")
