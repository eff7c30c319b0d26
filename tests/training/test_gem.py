"""The gem chapter's driver: its checks, the budget's unit, the rate tuning and the claims' evidence."""

from __future__ import annotations

import dataclasses

import pytest

from repro.params import ParameterError, resolve
from repro.registry import load_registry
from repro.training.chapters import gem as driver

CHAPTER = load_registry().get("gem")
PARAMS = driver.Params(
    pretrain_epochs=1, steps=4, batch_size=32, lr_grid=(0.01, 0.3), validation_fraction=0.2, calibration_batches=2,
    lora_rank=2, budgets=(0.1,), claim_budget=0.1, methods=driver.CLAIMED, tune_seeds=(100,), seeds=(0, 1), workers=1,
    device="cpu", text_steps=0, text_batch_size=8, text_lr_full=3e-5, text_lr_sparse=1e-3, text_budget=0.1,
    text_methods=("GEM",), text_seeds=(0,), text_sentences=64, text_max_tokens=12)


@pytest.mark.parametrize("override,name", [
    ({"claim_budget": 5.0}, "claim_budget"),
    ({"methods": ["full FT", "GEM"]}, "methods"),
    ({"tune_seeds": [0]}, "tune_seeds"),
    ({"validation_fraction": 0.001}, "validation_fraction"),
    ({"lr_grid": [0.1, 0.1]}, "lr_grid"),
])
def test_impossible_combinations_are_refused_before_any_work(override, name):
    with pytest.raises(ParameterError, match=repr(name)):
        resolve(CHAPTER, "smoke", override)


def test_the_budget_is_a_share_of_all_the_models_parameters_and_covers_body_weights_only():
    init = driver.pretrain(PARAMS, (0,))[0]
    run = driver.fine_tune(driver.FtJob(setup=PARAMS.digits, method="GEM", budget_percent=0.1, seed=0, lr=0.1,
                                        init=init))
    total = sum(v.numel() for v in init.values())  # 429,834: the authors count every parameter of the model
    head = init[f"{driver.HEAD}.weight"].numel() + init[f"{driver.HEAD}.bias"].numel()
    assert run.trainable == round(0.001 * total) + head
    assert run.frozen_max_change == 0.0  # the biases and the unmasked weights did not move


def test_every_method_is_tuned_on_the_same_grid_by_validation_accuracy():
    tuning, rates = driver.tune(PARAMS)
    assert set(rates) == set(driver.arms(PARAMS))
    for method, budget in driver.arms(PARAMS):
        tried = [r for r in tuning if r.method == method and r.budget_percent == budget]
        assert sorted(r.lr for r in tried) == sorted(PARAMS.lr_grid)
        assert rates[(method, budget)] == max(tried, key=lambda r: (r.val_accuracy, -r.lr)).lr


def test_claims_pair_the_arms_by_seed_and_name_them():
    rates = {arm: 0.1 for arm in driver.arms(PARAMS)}
    runs = driver.sweep(PARAMS, rates)
    results = driver.Results(params=PARAMS, tuning=(), rates=rates, runs=tuple(runs), text_runs=(), chance=11.0)
    vals = driver.claims(results)
    assert set(vals) == {c.id for c in CHAPTER.claims}
    full = {r.seed: r.accuracy for r in runs if r.method == "full FT"}
    gem = {r.seed: r.accuracy for r in runs if r.method == "GEM"}
    ev = vals["gem_vs_full"]
    assert list(ev.values) == pytest.approx([gem[s] - full[s] for s in PARAMS.seeds])
    assert set(ev.arms) == {"GEM", "full FT"} and ev.trivial == 11.0
    assert len(vals["frozen_exact"]) == 1 and len(vals["relative_change"]) == len(PARAMS.seeds)


def test_the_minilm_arm_is_skipped_only_at_zero_steps():
    assert driver.text_sweep(PARAMS) == []
    assert dataclasses.replace(PARAMS, text_steps=1).text.steps == 1
