"""The EmbracingFL chapter driver: every method tuned over one learning-rate grid on held-out samples."""

from __future__ import annotations

import pytest

from repro.federated.chapters import embracingfl
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec


def tiny_comparison(validation_share: float) -> embracingfl.Comparison:
    spec = TaskSpec(dataset="digits", num_clients=6, alpha=0.5, hidden=(16, 16), n_train=400,
                    validation_share=validation_share)
    plan = embracingfl.TierPlan(layers=3, moderate_layers=2, weak_layers=1, moderate_width=0.5, weak_width=0.25)
    return embracingfl.Comparison(
        spec=spec, sgd=LocalSGD(batch_size=16, lr=0.1, momentum=0.9), plan=plan, steps=2, rounds=2, active_clients=3, eval_every=1
    )


def test_tuning_gives_every_method_the_same_grid_and_chooses_on_validation():
    choices, runs = embracingfl.tune(tiny_comparison(0.2), (0.5, 0.2), [0.05, 0.1], seed=9)
    assert {c.method for c in choices} == set(embracingfl.METHODS)
    assert all(c.grid == (0.05, 0.1) for c in choices)
    assert len(runs) == 2 * len(embracingfl.METHODS) and set(runs.seed) == {9}
    for c in choices:
        scores = runs[runs.method == c.method].set_index("setting").validation_accuracy
        assert scores[c.value] == scores.max()


def test_one_rate_tunes_nothing_and_tuning_needs_held_out_samples():
    choices, runs = embracingfl.tune(tiny_comparison(0.0), (0.5, 0.2), [0.1], seed=9)
    assert runs.empty and {c.value for c in choices} == {0.1}
    with pytest.raises(ValueError, match="validation_share"):
        embracingfl.tune(tiny_comparison(0.0), (0.5, 0.2), [0.05, 0.1], seed=9)
