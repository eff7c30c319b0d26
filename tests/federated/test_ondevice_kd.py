"""On-device KD's two-model rounds: the reduction to FedAvg, the weak clients' traffic, the labelled split."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.kd import kd_loss
from repro.federated.ondevice_kd import (
    AUX,
    LARGE,
    KdSchedule,
    Recipe,
    ServerPool,
    TwoModelFedAvg,
    kd_weight,
    keys_of,
    local_parts,
    make_two_model_client_app,
    pair_arrays,
    pair_evaluator,
)
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, client_data
from repro.federated.tiers import Tier, assign_tiers

SPEC = TaskSpec(dataset="digits", num_clients=8, alpha=0.5, hidden=(32, 16), n_train=500)
AUX_HIDDEN = (8,)
LOCAL = LocalSGD(batch_size=8, lr=0.05, momentum=0.9).config(3)
STRONG, WEAK = Tier(name="strong", trained_layers=3, width=1.0), Tier(name="weak", trained_layers=0, width=1.0)


def two_model_run(strategy: TwoModelFedAvg, rounds: int, share: float, seed: int = 0) -> dict[str, np.ndarray]:
    hist = run_federated(strategy, make_two_model_client_app(SPEC, AUX_HIDDEN, share, {"seed": seed}),
                         SPEC.num_clients, pair_arrays(SPEC, AUX_HIDDEN, seed), 2 * rounds,
                         pair_evaluator(SPEC, AUX_HIDDEN), [2 * rounds])
    return snapshot(hist.final_arrays)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 3.0])
def test_kd_loss_is_zero_when_student_equals_teacher(temperature):
    z = torch.randn(6, 10)
    assert abs(kd_loss(z.clone(), z, temperature).item()) < 1e-6
    assert kd_loss(torch.randn(6, 10), z, temperature).item() > 0


def test_all_strong_labelled_only_without_kd_is_fedavg_on_the_large_model():
    rounds, active = 3, SPEC.num_clients  # step 2 goes to every strong client, as in the authors' code
    fedavg = run_federated(SeededFedAvg(active, LOCAL, seed=1), make_client_app(SPEC, {"seed": 1}), SPEC.num_clients,
                           initial_arrays(SPEC, 1), rounds, central_evaluator(SPEC), [rounds])
    reference = snapshot(fedavg.final_arrays)
    strategy = TwoModelFedAvg(active, LOCAL, [STRONG] * SPEC.num_clients, Recipe(train_aux=False, large_loss="ce"),
                              seed=1)
    pair = two_model_run(strategy, rounds, share=1.0, seed=1)
    for k, v in reference.items():
        np.testing.assert_array_equal(v, pair[f"{LARGE}.{k}"])


def test_weak_clients_never_move_the_large_model():
    tiers = assign_tiers(SPEC.num_clients, [0.25, 0.75], [STRONG, WEAK], seed=0)
    strategy = TwoModelFedAvg(6, LOCAL, tiers, Recipe(train_aux=True, large_loss="ce-then-kd"), seed=0,
                              kd=KdSchedule(kd_rampup=2))
    init = pair_arrays(SPEC, AUX_HIDDEN, 0)
    after = two_model_run(strategy, rounds=3, share=0.2)
    weak = {p for p, t in enumerate(tiers) if t.name == "weak"}
    weak_msgs = [t for t in strategy.traffic if t.partition_id in weak]
    assert weak_msgs and all(not keys_of(t.down + t.up, LARGE) for t in weak_msgs)
    strong_msgs = [t for t in strategy.traffic if t.partition_id not in weak]
    assert all(keys_of(t.up, LARGE) and not keys_of(t.up, AUX) for t in strong_msgs if t.server_round % 2 == 0)
    assert any(t.server_round % 2 == 0 for t in strong_msgs)
    assert all(not np.array_equal(after[k], init[k].numpy()) for k in init.keys())  # both models learned


def test_labelled_split_covers_the_client_and_keeps_labels_out():
    x, y = client_data(SPEC, 3)
    (xl, yl), xu = local_parts(SPEC, 3, 0.2)
    assert len(yl) + len(xu) == len(y) and len(yl) == max(1, round(0.2 * len(y)))
    rows = {r.tobytes() for r in x}
    assert all(r.tobytes() in rows for r in np.concatenate([xl, xu]))


def test_server_distillation_moves_the_large_model_towards_the_ensemble():
    tiers = [STRONG] * SPEC.num_clients
    pool = client_data(SPEC, 0)[0]
    plain = two_model_run(TwoModelFedAvg(4, LOCAL, tiers, Recipe(train_aux=True, large_loss="ce"), seed=0), rounds=2, share=0.5)
    feddf = two_model_run(
        TwoModelFedAvg(
            4,
            LOCAL,
            tiers,
            Recipe(train_aux=True, large_loss="ce", server_pool_steps=5),
            seed=0,
            server=ServerPool(pool=pool, spec=SPEC, aux_hidden=AUX_HIDDEN),
        ),
        rounds=2,
        share=0.5,
    )
    for k in keys_of(plain, AUX):
        np.testing.assert_array_equal(plain[k], feddf[k])  # A is untouched by the server step
    assert any(not np.array_equal(plain[k], feddf[k]) for k in keys_of(plain, LARGE))


def test_recipe_refuses_distillation_without_the_aux_step():
    with pytest.raises(ValueError, match="aux step"):
        Recipe(train_aux=False, large_loss="kd")


def test_kd_weight_ramps_up_to_its_final_value():
    ramp = [kd_weight(r, 0.5, 10) for r in range(12)]
    assert ramp[0] == pytest.approx(0.5 * np.exp(-5.0)) and ramp[10] == ramp[11] == 0.5
    assert all(a < b for a, b in zip(ramp[:10], ramp[1:11]))


def test_kd_weight_zero_leaves_only_the_cross_entropy_steps():
    # equal clients (60 samples, 30 labelled), so the sample weights of CE (30) and CE-then-KD (60) average alike
    spec = TaskSpec(dataset="digits", num_clients=8, scheme="iid", hidden=(32, 16), n_train=480)
    tiers = assign_tiers(spec.num_clients, [0.5, 0.5], [STRONG, WEAK], seed=1)

    def final_large(recipe: Recipe, kd_final: float) -> dict[str, np.ndarray]:
        strategy = TwoModelFedAvg(4, LOCAL, tiers, recipe, seed=0, kd=KdSchedule(kd_final=kd_final, kd_rampup=0))
        hist = run_federated(
            strategy,
            make_two_model_client_app(spec, AUX_HIDDEN, 0.5, {"seed": 0}),
            spec.num_clients,
            pair_arrays(spec, AUX_HIDDEN, 0),
            4,
            pair_evaluator(spec, AUX_HIDDEN),
            [4],
        )
        return {k: v for k, v in snapshot(hist.final_arrays).items() if k.startswith(LARGE)}

    ce = final_large(Recipe(train_aux=True, large_loss="ce"), 0.5)
    muted, distilled = (
        final_large(Recipe(train_aux=True, large_loss="ce-then-kd"), 0.0),
        final_large(Recipe(train_aux=True, large_loss="ce-then-kd"), 0.5),
    )
    for k in ce:
        np.testing.assert_array_equal(ce[k], muted[k])
    assert any(not np.allclose(ce[k], distilled[k]) for k in ce)
