"""The IGNITE chapter's driver: the judged variant, the grid it runs, and its claims."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from repro.offopt.chapters import ignite
from repro.offopt.grid import regulariser_claims, run_grid

SETTINGS = dict(tasks=["ackley"], dim=3, n_pool=300, q=50.0, n_ref=2000, n_candidates=16, seeds=[0], hidden=[16],
                surrogate_epochs=4, grad_steps=8, grad_lr=0.01, cma_starts=4, cma_generations=4,
                optimizers=["grad_ascent"], variants=["ignite2", "ignite"], ignite_rho=0.05, ignite_eps=0.1,
                ignite_dual_lr=1e-3)


def test_judged_variant_prefers_dual_ascent() -> None:
    s = ignite.IgniteSettings(**SETTINGS)
    assert s.judged_variant == "ignite"
    assert dataclasses.replace(s, variants=("ignite2",)).judged_variant == "ignite2"
    assert s.methods() == ["grad_ascent", "grad_ascent+ignite2", "grad_ascent+ignite"]
    with pytest.raises(ValueError, match="variants"):
        ignite.IgniteSettings(**{**SETTINGS, "variants": []})


def test_run_and_claims() -> None:
    s = ignite.IgniteSettings(**SETTINGS)
    tasks = s.build_tasks()
    ours = ignite.run(s, tasks)
    direct = run_grid(tasks, s.methods(), s.seeds, n_candidates=16, surrogate=s.surrogate_config(),
                      search=s.search_config(), regularizer_kwargs={"ignite": {"rho": 0.05, "eps": 0.1, "dual_lr": 1e-3}},
                      diagnostics=["sharpness"], progress=False)
    np.testing.assert_array_equal(ours.rows.p100.to_numpy(), direct.rows.p100.to_numpy())
    c = ignite.claims(ours, s)
    assert list(c) == ["mean_rel_gain_pct", "frac_improved", "sharpness_reduction_unseen_pct"]
    assert c["mean_rel_gain_pct"] == regulariser_claims(ours.rows, "ignite")["mean_rel_gain_pct"]
