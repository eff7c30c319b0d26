"""The BOSS chapter's driver: methods, the grid it runs, and its claims."""

from __future__ import annotations

import numpy as np

from repro.offopt.chapters import sensitivity
from repro.offopt.grid import Diagnostics, diagnostic_reduction, regulariser_claims, run_grid

VALUES = dict(tasks=("ackley",), dim=3, n_pool=300, q=50.0, n_ref=2000, n_candidates=16, seeds=(0, 1), hidden=(16,),
              surrogate_epochs=4, grad_steps=8, grad_lr=0.01, cma_starts=4, cma_generations=4, ensemble_size=2,
              workers=1, optimizers=("grad_ascent",), boss_weight=1e-3, boss_alpha=0.1, n_gamma=10,
              sensitivity_sigma=0.01, device="cpu")


def test_run_and_claims() -> None:
    p = sensitivity.Params(**VALUES)
    assert p.methods() == ["grad_ascent", "grad_ascent+boss"]
    tasks = p.build_tasks()
    ours = sensitivity.run(p, tasks)
    settings = p.method_settings(regularizer_kwargs={"boss": {"weight": 1e-3, "alpha": 0.1, "n_gamma": 10}})
    direct = run_grid(tasks, p.methods(), p.seeds, settings, progress=False,
                      diagnostics=Diagnostics(which=("sensitivity",), sensitivity_kwargs={"alpha": 0.1, "sigma": 0.01}))
    rows = ours.grid.rows
    np.testing.assert_array_equal(rows.p100.to_numpy(), direct.rows.p100.to_numpy())
    np.testing.assert_array_equal(rows.sensitivity_unseen.to_numpy(), direct.rows.sensitivity_unseen.to_numpy())
    c = sensitivity.claims(ours)
    assert list(c) == ["frac_improved", "mean_gain_points", "sensitivity_reduction_pct"]
    paired = regulariser_claims(rows, "boss")
    assert c["mean_gain_points"] == paired["mean_gain_points"] and len(c["frac_improved"]) == 2
    assert c["sensitivity_reduction_pct"] == diagnostic_reduction(rows, "boss", "sensitivity_unseen")
