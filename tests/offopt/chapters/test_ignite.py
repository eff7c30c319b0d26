"""The IGNITE chapter's driver: parameters and their checks, the grid it runs, its claims."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from repro.offopt.chapters import ignite
from repro.offopt.grid import Diagnostics, regulariser_claims, run_grid
from repro.params import ParameterError

VALUES = dict(tasks=("ackley",), dim=3, n_pool=300, q=50.0, n_ref=2000, n_candidates=16, seeds=(0,), hidden=(16,),
              surrogate_epochs=4, grad_steps=8, grad_lr=0.01, cma_starts=4, cma_generations=4, ensemble_size=2,
              workers=1, optimizers=("grad_ascent", "grad_ascent_min_ens"), variants=("ignite2", "ignite"),
              ignite_rho=0.05, ignite_eps=0.1, ignite_dual_lr=1e-3, device="cpu")


def test_judged_variant_prefers_dual_ascent() -> None:
    p = ignite.Params(**VALUES)
    assert p.judged_variant == "ignite"
    assert dataclasses.replace(p, variants=("ignite2",)).judged_variant == "ignite2"
    assert p.methods() == ["grad_ascent", "grad_ascent+ignite2", "grad_ascent+ignite", "grad_ascent_min_ens",
                           "grad_ascent_min_ens+ignite2", "grad_ascent_min_ens+ignite"]


def test_checks_name_the_parameters() -> None:
    with pytest.raises(ParameterError, match="'n_candidates'"):  # 300 * 50% = 150 offline designs < 200 starts
        ignite.Params(**{**VALUES, "n_candidates": 200}).checks()
    ignite.Params(**VALUES).checks()


def test_run_and_claims() -> None:
    p = ignite.Params(**VALUES)
    tasks = p.build_tasks()
    ours = ignite.run(p, tasks)
    settings = p.method_settings(regularizer_kwargs={"ignite": {"rho": 0.05, "eps": 0.1, "dual_lr": 1e-3}})
    direct = run_grid(tasks, p.methods(), p.seeds, settings, diagnostics=Diagnostics(which=("sharpness",)),
                      progress=False)
    np.testing.assert_array_equal(ours.grid.rows.p100.to_numpy(), direct.rows.p100.to_numpy())
    c = ignite.claims(ours)
    assert list(c) == ["mean_rel_gain_pct", "max_rel_gain_pct", "frac_improved", "sharpness_reduction_unseen_pct"]
    paired = regulariser_claims(ours.grid.rows, "ignite")
    assert c["mean_rel_gain_pct"] == paired["mean_rel_gain_pct"]
    assert c["max_rel_gain_pct"] == paired["max_rel_gain_pct"] and c["max_rel_gain_pct"][0] >= c["mean_rel_gain_pct"][0]
    # the ensembles are searched but their sharpness is not measured (one surrogate per regulariser is)
    ens = ours.grid.rows[ours.grid.rows.optimizer == "grad_ascent_min_ens"]
    assert ens.sharpness_unseen.isna().all() and len(ens) == 3
