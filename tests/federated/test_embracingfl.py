"""Partial training (EmbracingFL), the width-reduction baselines (HeteroFL, FjORD) and the tiers' memory model."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from repro.federated.client import ClientRound, LocalSettings, LocalSGD, make_client_app, train_locally
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.fjord import (
    AUTHORS_DISTILLATION,
    OrderedDropout,
    SelfDistillation,
    fjord_step_loss,
    ladder_up_to,
    train_ordered_dropout,
)
from repro.federated.heterofl import (
    LABEL_SPLIT_KEY,
    HeteroFLTraining,
    LabelMask,
    WidthReduced,
    WidthScaler,
    make_heterofl_client_app,
    nested_average,
    slice_weights,
    sliced_hidden,
)
from repro.federated.kd import kd_loss
from repro.federated.partial import PartialTraining, layerwise_average, make_partial_client_app, output_side_keys
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model, load_task_data
from repro.federated.tiers import Tier, assign_tiers, linear_layers, measure_step_memory, memory_fractions, step_memory
from repro.models import linear_input_rms, mlp

SPEC = TaskSpec(dataset="digits", num_clients=6, alpha=0.5, hidden=(32, 24, 16), n_train=600)
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.9).config(3)
STRONG = Tier(name="strong", trained_layers=4, width=1.0)


def final_weights(strategy, app, rounds: int = 3) -> dict[str, np.ndarray]:
    hist = run_federated(strategy, app, SPEC.num_clients, initial_arrays(SPEC, 1), rounds, central_evaluator(SPEC),
                         [rounds])
    return snapshot(hist.final_arrays)


def test_all_strong_partial_training_is_fedavg():
    fedavg = final_weights(SeededFedAvg(3, LOCAL, seed=1), make_client_app(SPEC, {"seed": 1}))
    partial = final_weights(PartialTraining(3, LOCAL, [STRONG] * SPEC.num_clients, seed=1),
                            make_partial_client_app(SPEC, {"seed": 1}))
    for k in fedavg:
        np.testing.assert_array_equal(fedavg[k], partial[k])


@pytest.mark.parametrize("scaler", [False, True])
def test_heterofl_at_full_width_is_fedavg(scaler):
    fedavg = final_weights(SeededFedAvg(3, LOCAL, seed=1), make_client_app(SPEC, {"seed": 1}))
    hetero = final_weights(WidthReduced(3, LOCAL, [STRONG] * SPEC.num_clients, seed=1),
                           make_heterofl_client_app(SPEC, {"seed": 1}, scaler=scaler))
    for k in fedavg:
        np.testing.assert_allclose(fedavg[k], hetero[k], rtol=1e-5, atol=1e-6)


def test_weak_clients_leave_frozen_layers_untouched():
    weak = Tier(name="weak", trained_layers=1, width=0.25)
    start = snapshot(initial_arrays(SPEC, 1))
    strategy = PartialTraining(3, LOCAL, [weak] * SPEC.num_clients, seed=1)
    end = final_weights(strategy, make_partial_client_app(SPEC, {"seed": 1}))
    trained = output_side_keys(list(start), 1)
    assert trained == ["fc3.weight", "fc3.bias"]
    for k in start:
        if k in trained:
            assert not np.array_equal(start[k], end[k])
        else:
            np.testing.assert_array_equal(start[k], end[k])
    # only the trained layer went up: 3 clients x 3 rounds of fc3
    assert strategy.comm.up["fc3.weight"] == 9 and strategy.comm.up["fc0.weight"] == 0


def test_strong_only_contacts_no_weak_client():
    tiers = [STRONG, Tier(name="weak", trained_layers=0, width=0.25)] * 3
    strategy = PartialTraining(4, LOCAL, tiers, seed=2)
    final_weights(strategy, make_partial_client_app(SPEC, {"seed": 2}), rounds=2)
    strong_count = [sum(tiers[p].name == "strong" for p in strategy.sampled[r]) for r in (1, 2)]
    assert [strategy.contributors[r]["fc0.weight"] for r in (1, 2)] == strong_count


def reply(arrays: dict[str, np.ndarray], n: int) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                       "metrics": MetricRecord({"num-examples": n})})


def test_layerwise_average_over_contributors_only():
    current = ArrayRecord({"a.w": Array(np.zeros(2, np.float32)), "b.w": Array(np.ones(2, np.float32)),
                           "c.w": Array(np.full(2, 7.0, np.float32))})
    out = layerwise_average(current, [reply({"a.w": np.full(2, 3.0, np.float32), "b.w": np.full(2, 2.0, np.float32)}, 1),
                                      reply({"b.w": np.full(2, 5.0, np.float32)}, 3)])
    np.testing.assert_allclose(out["a.w"].numpy(), 3.0)
    np.testing.assert_allclose(out["b.w"].numpy(), (2.0 + 3 * 5.0) / 4)
    np.testing.assert_array_equal(out["c.w"].numpy(), 7.0)  # trained by no client: unchanged


def test_nested_average_covers_slices_only():
    current = {"fc0.weight": np.zeros((4, 3), np.float32), "fc1.weight": np.zeros((2, 4), np.float32)}
    half = slice_weights({k: v + 1 for k, v in current.items()}, 0.5)
    assert half["fc0.weight"].shape == (2, 3) and half["fc1.weight"].shape == (2, 2)
    out = nested_average(current, [half], [5])
    assert out["fc0.weight"][:2].min() == 1 and out["fc0.weight"][2:].max() == 0
    assert out["fc1.weight"][:, :2].min() == 1 and out["fc1.weight"][:, 2:].max() == 0


def test_masked_clients_count_only_towards_the_output_rows_of_their_classes():
    """HeteroFL's server averages a class's output row over the clients that hold the class, the rest as before."""
    current = {"fc0.weight": np.zeros((2, 3)), "fc1.weight": np.zeros((3, 2)), "fc1.bias": np.full(3, 9.0)}
    a = {k: np.full(v.shape, 1.0) for k, v in current.items()}
    b = {k: np.full(v.shape, 4.0) for k, v in current.items()}
    holds_0, holds_0_1 = np.array([1, 0, 0]), np.array([1, 1, 0])
    out = nested_average(current, [a, b], [1.0, 3.0], [holds_0, holds_0_1])
    np.testing.assert_allclose(out["fc0.weight"], (1 + 3 * 4) / 4)  # hidden layers: every client counts
    np.testing.assert_allclose(out["fc1.weight"][0], (1 + 3 * 4) / 4)  # class 0: both hold it
    np.testing.assert_allclose(out["fc1.weight"][1], 4.0)  # class 1: only b
    np.testing.assert_allclose(out["fc1.bias"], [(1 + 3 * 4) / 4, 4.0, 9.0])  # class 2: nobody, kept
    every = nested_average(current, [a, b], [1.0, 3.0], [np.ones(3, int), None])
    plain = nested_average(current, [a, b], [1.0, 3.0])
    assert all(np.array_equal(every[k], plain[k]) for k in plain)  # all classes present: the plain average


def test_a_masked_client_reports_the_classes_its_data_holds():
    spec = TaskSpec(dataset="digits", num_clients=4, scheme="dirichlet", alpha=0.1, hidden=(8,), n_train=200)
    strategy = WidthReduced(
        4, LocalSGD(batch_size=8, lr=0.1, momentum=0.0).config(2), [Tier(name="weak", trained_layers=1, width=0.5)] * 4, seed=0
    )
    seen: list[dict] = []
    aggregate = strategy.aggregate_train

    def spy(server_round, replies):
        replies = list(replies)
        seen.extend(
            {"pid": int(m.content["metrics"]["partition-id"]), "split": m.content["arrays"][LABEL_SPLIT_KEY].numpy()}
            for m in replies
        )
        return aggregate(server_round, replies)

    strategy.aggregate_train = spy
    run_federated(
        strategy, make_heterofl_client_app(spec, masked_ce=True), 4, initial_arrays(spec, 0), 1, central_evaluator(spec), [1]
    )
    ds, parts = load_task_data(spec)
    assert len(seen) == 4
    for r in seen:
        assert r["split"].tolist() == np.isin(np.arange(ds.num_classes), ds.y_train[parts[r["pid"]]]).astype(int).tolist()


def test_ordered_dropout_masks_late_units():
    torch.manual_seed(0)
    model = mlp(5, [8, 8], 3)
    dropout = OrderedDropout(model, [8, 8], ladder_up_to(0.5), seed=0)
    model(torch.randn(4, 5)).sum().backward()
    keep = 2 if dropout.drawn[0] == 0.25 else 4
    assert set(dropout.drawn) <= {0.25, 0.5}
    assert model.fc0.weight.grad[keep:].abs().max() == 0 and model.fc2.weight.grad[:, keep:].abs().max() == 0
    assert model.fc0.weight.grad[:keep].abs().max() > 0
    dropout.remove()


def hidden_outputs(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The ReLU outputs of one forward pass."""
    seen = []
    handles = [
        m.register_forward_hook(lambda mod, args, out: seen.append(out.detach().clone()))
        for m in model.modules()
        if isinstance(m, torch.nn.ReLU)
    ]
    model(x)
    for h in handles:
        h.remove()
    return seen


def test_scaler_at_full_width_is_the_identity():
    torch.manual_seed(0)
    model, x = mlp(5, [8, 8], 3), torch.randn(4, 5)
    model.train()
    plain = model(x)
    with WidthScaler(model, 1.0):
        torch.testing.assert_close(model(x), plain, rtol=0, atol=0)


def test_scaler_doubles_hidden_activations_at_half_width_while_training_only():
    torch.manual_seed(0)
    model, x = mlp(5, [8, 6], 3), torch.randn(4, 5)
    model.train()
    plain = hidden_outputs(model, x)
    with WidthScaler(model, 0.5):
        first = hidden_outputs(model, x)[0]
        torch.testing.assert_close(first, 2 * plain[0], rtol=0, atol=0)  # division by 0.5 is exact
        model.eval()
        torch.testing.assert_close(hidden_outputs(model, x)[0], plain[0], rtol=0, atol=0)
        model.train()
    torch.testing.assert_close(hidden_outputs(model, x)[0], plain[0], rtol=0, atol=0)  # hooks removed on exit
    assert plain[0].abs().max() > 0


def test_scaler_leaves_the_output_layer_alone():
    torch.manual_seed(0)
    model, x = mlp(5, [8], 3), torch.randn(4, 5)
    model.train()
    with WidthScaler(model, 0.25):
        scaled = model(x)
    hidden = torch.relu(model.fc0(x))
    # one hidden layer: the logits are the last layer applied to 4x the hidden output, not 4x the logits
    torch.testing.assert_close(scaled, model.fc1(hidden / 0.25))
    assert not torch.allclose(scaled, model(x) / 0.25)


def test_masked_loss_matches_a_hand_computation_with_absent_logits_at_zero():
    torch.manual_seed(0)
    model, x, y = mlp(3, [5], 4), torch.randn(3, 3), torch.tensor([0, 2, 2])
    model.train()
    raw = model(x).detach().double()
    with LabelMask(model, [0, 2]):
        masked = torch.nn.functional.cross_entropy(model(x), y).item()
    # classes 1 and 3 are absent: their logits are 0, so each contributes exp(0) = 1 to the partition function
    by_hand = np.mean([math.log(math.exp(raw[i, 0]) + math.exp(raw[i, 2]) + 2.0) - float(raw[i, y[i]]) for i in range(3)])
    assert masked == pytest.approx(by_hand, rel=1e-6)
    # the authors zero the absent logits rather than drop them: not the cross-entropy over classes 0 and 2 alone
    dropped = torch.nn.functional.cross_entropy(raw[:, [0, 2]], torch.tensor([0, 1, 1])).item()
    assert abs(masked - dropped) > 1e-3


def test_mask_with_every_class_present_or_at_evaluation_is_plain_cross_entropy():
    torch.manual_seed(0)
    model, x = mlp(3, [5], 4), torch.randn(6, 3)
    model.train()
    plain = model(x)
    with LabelMask(model, np.arange(4)):
        torch.testing.assert_close(model(x), plain, rtol=0, atol=0)
    with LabelMask(model, [1]):
        assert torch.count_nonzero(model(x)[:, [0, 2, 3]]) == 0
        model.eval()
        torch.testing.assert_close(model(x), plain, rtol=0, atol=0)  # the global model is evaluated unmasked
        model.train()
    torch.testing.assert_close(model(x), plain, rtol=0, atol=0)  # hook removed on exit


def client_round(y: np.ndarray, seed: int = 0) -> ClientRound:
    torch.manual_seed(seed)
    x = np.random.default_rng(seed).normal(size=(len(y), 6)).astype(np.float32)
    return ClientRound(
        partition_id=0,
        config=ConfigRecord({}),
        received={},
        model=mlp(6, [8, 4], 5),
        x=x,
        y=y.astype(np.int64),
        settings=LocalSettings(steps=4, batch_size=8, lr=0.1, momentum=0.9, seed=seed),
    )


def test_masked_client_leaves_output_rows_of_absent_classes_unchanged():
    rnd = client_round(np.array([0, 3] * 10))
    before = {k: v.detach().clone() for k, v in rnd.model.state_dict().items()}
    HeteroFLTraining(scaler=True, masked_ce=True)(rnd, 0.5)
    after = rnd.model.state_dict()
    absent, present = [1, 2, 4], [0, 3]
    torch.testing.assert_close(after["fc2.weight"][absent], before["fc2.weight"][absent], rtol=0, atol=0)
    torch.testing.assert_close(after["fc2.bias"][absent], before["fc2.bias"][absent], rtol=0, atol=0)
    assert not torch.equal(after["fc2.weight"][present], before["fc2.weight"][present])
    # without the mask, the absent classes' rows are pushed down
    plain = client_round(np.array([0, 3] * 10))
    HeteroFLTraining(scaler=True)(plain, 0.5)
    assert not torch.equal(plain.model.state_dict()["fc2.weight"][absent], before["fc2.weight"][absent])


@pytest.mark.parametrize("scaler", [False, True])
def test_unmasked_client_trains_as_before_bit_for_bit(scaler):
    labels = np.array([0, 1, 3] * 8)
    option, reference = client_round(labels), client_round(labels)
    option_loss = HeteroFLTraining(scaler=scaler, masked_ce=False)(option, 0.5)
    if scaler:
        with WidthScaler(reference.model, 0.5):
            reference_loss = train_locally(reference.model, reference.x, reference.y, reference.settings)
    else:
        reference_loss = train_locally(reference.model, reference.x, reference.y, reference.settings)
    assert option_loss == reference_loss
    for k, v in reference.model.state_dict().items():
        torch.testing.assert_close(option.model.state_dict()[k], v, rtol=0, atol=0)


def test_masked_heterofl_at_full_width_differs_from_fedavg_on_skewed_clients():
    fedavg = final_weights(SeededFedAvg(3, LOCAL, seed=1), make_client_app(SPEC, {"seed": 1}))
    masked = final_weights(
        WidthReduced(3, LOCAL, [STRONG] * SPEC.num_clients, seed=1), make_heterofl_client_app(SPEC, {"seed": 1}, masked_ce=True)
    )
    assert any(not np.allclose(fedavg[k], masked[k], rtol=1e-5, atol=1e-6) for k in fedavg)


def test_distillation_term_vanishes_when_widths_agree():
    torch.manual_seed(0)
    logits, labels = torch.randn(6, 4), torch.randint(0, 4, (6,))
    loss = fjord_step_loss(logits, logits, labels, SelfDistillation(weight=1.0, temperature=2.0))
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits, labels), rtol=0, atol=0)


def test_step_loss_weights():
    torch.manual_seed(1)
    student, teacher, labels = torch.randn(6, 4), torch.randn(6, 4), torch.randint(0, 4, (6,))
    ce = torch.nn.functional.cross_entropy
    none = fjord_step_loss(student, teacher, labels, SelfDistillation(weight=0.0, temperature=3.0))
    torch.testing.assert_close(none, ce(teacher, labels) + ce(student, labels))
    only = fjord_step_loss(student, teacher, labels, SelfDistillation(weight=1.0, temperature=3.0))
    torch.testing.assert_close(only, ce(teacher, labels) + kd_loss(student, teacher, 3.0))
    with pytest.raises(ValueError):
        SelfDistillation(weight=1.5)


def fjord_round(p_max: float, steps: int = 6) -> tuple[ClientRound, tuple[int, ...]]:
    full = (12, 8)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 5)).astype(np.float32), rng.integers(0, 3, 40)
    model = mlp(5, list(sliced_hidden(full, p_max)), 3)
    settings = LocalSettings(steps=steps, batch_size=8, lr=0.1, momentum=0.9, seed=7)
    return ClientRound(partition_id=0, config=ConfigRecord(), received={}, model=model, x=x, y=y, settings=settings), full


def trained(
    monkeypatch, p_max: float, distillation: SelfDistillation | None, steps: int = 6
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The client's weights after :func:`train_ordered_dropout`, and the widths its ordered dropout drew."""
    rnd, full = fjord_round(p_max, steps)
    spec = TaskSpec(dataset="digits", num_clients=2, hidden=full)
    made = []
    original = OrderedDropout.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(OrderedDropout, "__init__", record)
    train_ordered_dropout(spec, rnd, p_max, distillation)
    monkeypatch.undo()
    return {k: v.detach().clone() for k, v in rnd.model.state_dict().items()}, made[0].drawn


def test_distillation_changes_nothing_for_a_client_at_its_narrowest_width(monkeypatch):
    plain, drawn_plain = trained(monkeypatch, 0.25, None)
    distilled, drawn = trained(monkeypatch, 0.25, AUTHORS_DISTILLATION)
    assert set(drawn) == {0.25} and drawn == drawn_plain
    for k in plain:
        torch.testing.assert_close(distilled[k], plain[k], rtol=1e-5, atol=1e-6)


def test_distillation_draws_the_same_widths(monkeypatch):
    _, drawn_plain = trained(monkeypatch, 1.0, None)
    _, drawn = trained(monkeypatch, 1.0, AUTHORS_DISTILLATION)
    assert drawn == drawn_plain and len(drawn) == 6  # the teacher's passes draw nothing


def test_distilled_step_follows_the_step_loss(monkeypatch):
    """One distilled step of a full-width client is SGD on fjord_step_loss at the drawn width (student) and at 1."""
    distillation = SelfDistillation(weight=0.7, temperature=2.0)
    after, drawn = trained(monkeypatch, 1.0, distillation, steps=1)
    assert drawn[0] < 1.0  # the round's seed draws a narrower width first, so the teacher pass runs
    rnd, full = fjord_round(1.0, steps=1)
    model = rnd.model
    idx = torch.from_numpy(np.random.default_rng(rnd.settings.seed).choice(len(rnd.y), size=8, replace=False))
    xb, yb = torch.from_numpy(rnd.x)[idx], torch.from_numpy(rnd.y)[idx]
    dropout = OrderedDropout(model, full, [1.0], seed=0)
    with dropout.pinned(drawn[0]):
        student = model(xb)
    with dropout.pinned(1.0):
        teacher = model(xb)
    dropout.remove()
    fjord_step_loss(student, teacher, yb, distillation).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= rnd.settings.lr * p.grad  # momentum adds nothing at the first step
    for k, v in model.state_dict().items():
        torch.testing.assert_close(after[k], v, rtol=1e-5, atol=1e-6)
    plain, _ = trained(monkeypatch, 1.0, None, steps=1)
    assert any(not torch.allclose(plain[k], after[k]) for k in plain)


def test_assign_tiers_follows_shares():
    tiers = assign_tiers(
        40,
        (0.1, 0.2, 0.7),
        (STRONG, Tier(name="moderate", trained_layers=2, width=0.5), Tier(name="weak", trained_layers=1, width=0.25)),
        seed=0,
    )
    assert [sum(t.name == n for t in tiers) for n in ("strong", "moderate", "weak")] == [4, 8, 28]


@pytest.mark.parametrize("trained_layers", [1, 2, 3, 4])
def test_memory_model_matches_torch_within_one_percent(trained_layers):
    model = build_model(SPEC, seed=0)
    names = [k for k, _ in model.named_parameters()]
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    measured = measure_step_memory(model, output_side_keys(names, trained_layers), x, y, momentum=0.9)
    modelled = step_memory(linear_layers(model), trained_layers, 32, optimizer_slots=1).trained
    assert abs(measured - modelled) / modelled < 0.01
    assert all(p.requires_grad for p in model.parameters())


def test_memory_fractions_monotone_in_trained_layers():
    fractions = memory_fractions(linear_layers(mlp(64, [128, 128, 128, 64], 10)), batch_size=16)
    assert fractions[-1] == 1.0 and all(a < b for a, b in zip(fractions, fractions[1:]))


def test_he_init_keeps_the_scale_that_torchs_default_loses_with_depth():
    x = torch.randn(512, 64)
    torch.manual_seed(0)
    default = linear_input_rms(mlp(64, (128, 128, 128, 64), 10), x)
    torch.manual_seed(0)
    he = linear_input_rms(mlp(64, (128, 128, 128, 64), 10, init="he"), x)
    assert list(default) == list(he) == [f"fc{i}" for i in range(5)]
    assert default["fc0"] == pytest.approx(1.0, rel=0.05) and he["fc0"] == default["fc0"]
    # weights uniform in +-1/sqrt(fan_in) with a ReLU scale the root mean square by about 1/sqrt(6) a layer
    assert default["fc1"] == pytest.approx(6**-0.5, rel=0.15)
    assert default["fc4"] < 0.1 * default["fc0"]
    # He's variance 2/fan_in with a ReLU keeps it
    assert all(v == pytest.approx(1.0, rel=0.2) for v in he.values())


def test_he_init_draws_normal_weights_of_variance_two_over_fan_in_and_zero_biases():
    torch.manual_seed(1)
    net = mlp(256, (512,), 10, init="he")
    assert net.fc0.weight.var().item() == pytest.approx(2 / 256, rel=0.02)
    assert net.fc1.weight.var().item() == pytest.approx(2 / 512, rel=0.1)
    assert not net.fc0.bias.any() and not net.fc1.bias.any()


def test_the_task_builds_its_mlp_with_its_init_and_refuses_an_unknown_one():
    spec = TaskSpec(dataset="digits", num_clients=4, hidden=(32,), n_train=200)
    assert build_model(spec, seed=3).fc0.bias.any()
    assert not build_model(dataclasses.replace(spec, init="he"), seed=3).fc0.bias.any()
    with pytest.raises(ValueError, match="init"):
        build_model(dataclasses.replace(spec, init="xavier"), seed=3)
    with pytest.raises(ValueError, match="init"):
        build_model(dataclasses.replace(spec, init="he", model="resnet20"), seed=3)
