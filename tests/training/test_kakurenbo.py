"""KAKURENBO's invariants (spec), its baselines and the chapter driver."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from repro.params import ParameterError, resolve
from repro.registry import load_registry
from repro.training import kakurenbo as hiding
from repro.training.chapters import kakurenbo as driver
from repro.training.forgetting import ForgettingCounter
from repro.training.importance_sampling import importance_draw
from repro.training.launcher import launch
from repro.training.sample_loop import SampleStats
from repro.training.selective_backprop import LossHistory

SETUP = driver.Params(n_samples=1200, n_features=12, n_informative=8, num_classes=4, class_sep=1.5, flip_y=0.02,
                      hidden=(32,), batch_size=32, base_lr=0.05, momentum=0.9, weight_decay=5e-4, epochs=6,
                      max_fraction=0.3, threshold=0.7, sb_keep=1 / 3, forget_epochs=2, seeds=(0,), workers=1,
                      device="cpu")
CHAPTER = load_registry().get("kakurenbo")


@pytest.fixture(scope="module")
def split():
    return driver.data(SETUP, 0)


class Spy(driver.MethodTrainer):
    """Records the state before each epoch's selection."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.before: list[tuple[np.ndarray, np.ndarray]] = []

    def epoch(self, e, hide_count=0):
        self.before.append((self.state.correct.copy(), self.state.confidence.copy()))
        return super().epoch(e, hide_count)


def test_hidden_count_bound_and_move_back_rule(split):
    tr = Spy("kakurenbo", SETUP, split, 0)
    n = len(split.train)
    for e in range(SETUP.epochs):
        sel_before = tr.state.select(hiding.hidden_fraction(e, SETUP.epochs, SETUP.max_fraction))
        rec = tr.epoch(e)
        assert rec.hidden <= int(np.floor(hiding.hidden_fraction(e, SETUP.epochs, SETUP.max_fraction) * n))
        correct, conf = tr.before[e]
        assert np.all(correct[sel_before.hidden]) and np.all(conf[sel_before.hidden] >= SETUP.threshold)
        # training list and hidden list partition the ids; each visible id once per epoch
        assert len(np.intersect1d(sel_before.visible, sel_before.hidden)) == 0
        assert len(sel_before.visible) + len(sel_before.hidden) == n
        # after the refresh pass every hidden sample's loss is finite and stamped with this epoch
        assert np.all(np.isfinite(tr.state.loss[sel_before.hidden])) and np.all(tr.state.updated[sel_before.hidden] == e)
        assert np.all(tr.state.updated == e)
    assert sum(r.hidden for r in tr.log) > 0, "the test must exercise hiding"


def test_visible_sampler_yields_each_visible_id_once():
    state = hiding.HidingState(50)
    state.update(
        SampleStats(index=np.arange(50), loss=np.linspace(0, 1, 50), correct=np.ones(50, bool), confidence=np.full(50, 0.9)), 0
    )
    sel = state.select(0.2)
    ids = list(hiding.visible_sampler(sel, torch.Generator().manual_seed(0)))
    assert sorted(ids) == sel.visible.tolist() and len(sel.hidden) == 10 and sel.hidden.tolist() == list(range(10))


def test_move_back_returns_uncertain_or_wrong_candidates():
    state = hiding.HidingState(6, threshold=0.7)
    state.update(
        SampleStats(
            index=np.arange(6),
            loss=np.array([0.1, 0.2, 0.3, 5, 6, 7.0]),
            correct=np.array([True, False, True, True, True, True]),
            confidence=np.array([0.9, 0.9, 0.5, 1, 1, 1.0]),
        ),
        0,
    )
    sel = state.select(0.5)
    assert sel.candidates == 3 and sel.hidden.tolist() == [0] and sel.moved_back == 2
    assert hiding.HidingState(6, move_back=False).select(0.5).candidates == 3


def test_zero_fraction_is_bitwise_plain_training(split):
    zero = replace(SETUP, max_fraction=0.0)
    base = driver.train_method("baseline", zero, split, 3)
    kak = driver.MethodTrainer("kakurenbo", zero, split, 3)
    ref = driver.MethodTrainer("baseline", zero, split, 3)
    for e in range(zero.epochs):
        kak.epoch(e)
        ref.epoch(e)
    for a, b in zip(kak.model.parameters(), ref.model.parameters()):
        assert torch.equal(a, b)
    assert [r.test_accuracy for r in kak.log] == [r.test_accuracy for r in base.log]


def test_lr_is_scheduled_rate_over_one_minus_fraction(split):
    tr = driver.MethodTrainer("kakurenbo", SETUP, split, 0)
    nolr = driver.MethodTrainer("no_lr_scale", SETUP, split, 0)
    for e in range(SETUP.epochs):
        f = hiding.hidden_fraction(e, SETUP.epochs, SETUP.max_fraction)
        assert tr.epoch(e).lr == pytest.approx(driver.step_lr(e, SETUP) / (1 - f))
        assert nolr.epoch(e).lr == pytest.approx(driver.step_lr(e, SETUP))


def test_fraction_schedule_steps_down():
    fr = [hiding.hidden_fraction(e, 200, 0.3) for e in (0, 1, 59, 60, 119, 120, 159, 160, 199)]
    assert fr == pytest.approx([0.0, 0.3, 0.3, 0.24, 0.24, 0.18, 0.18, 0.12, 0.12])
    with pytest.raises(ValueError):
        hiding.lr_compensation(1.0)


def test_importance_draw_is_proportional_and_unbiased():
    losses = np.array([1.0, 3.0, 0.0, 6.0])
    draw = importance_draw(losses, torch.Generator().manual_seed(0))
    p = 1.0 / (len(losses) * draw.weights)
    assert p.sum() == pytest.approx(1.0) and p[3] > p[1] > p[0] > p[2] > 0
    # the weighted expectation of any per-sample quantity equals its uniform mean
    q = np.array([2.0, -1.0, 5.0, 0.5])
    assert np.sum(p * draw.weights * q) == pytest.approx(q.mean())
    assert np.all(1.0 / (4 * importance_draw(np.full(4, np.inf), torch.Generator()).weights) == 0.25)


def test_loss_history_percentile():
    h = LossHistory(4)
    assert h.percentile(1.0) == 1.0
    h.values.extend([1.0, 2.0, 3.0, 4.0, 5.0])  # keeps the last 4
    assert h.percentile(4.5) == 0.75 and h.percentile(0.0) == 0.0
    batch = np.array([4.5, 0.0, 2.5, 9.0])
    assert h.percentiles(batch).tolist() == [h.percentile(v) for v in batch]


def test_selective_backprop_backprops_about_keep_share(split):
    run = driver.train_method("selective_backprop", replace(SETUP, epochs=3), split, 0)
    n = len(split.train)
    assert 0.2 * n * 3 < run.backward_passes < 0.5 * n * 3
    assert run.forward_passes == 3 * n + run.backward_passes


def _allreduce_stats(ctx, n):
    state = hiding.HidingState(n)
    mine = np.arange(ctx.rank, n, 2)  # each rank trained half the samples; the rest stay zero
    state.loss[:] = 0.0
    state.update(SampleStats(index=mine, loss=mine * 0.5, correct=mine % 3 == 0, confidence=mine / n), 0)
    state.allreduce()
    return state.loss, state.correct, state.confidence


def test_stats_allreduce_across_ranks():
    n = 10
    out = launch(_allreduce_stats, 2, (n,))
    ids = np.arange(n)
    for loss, correct, conf in out:
        np.testing.assert_allclose(loss, ids * 0.5)
        np.testing.assert_array_equal(correct, ids % 3 == 0)
        np.testing.assert_allclose(conf, ids / n)


def test_claims_cover_the_registry_and_pair_the_arms():
    params = replace(SETUP, epochs=3, seeds=(0, 1))
    results = driver.run(params)
    vals = driver.claims(results)
    assert set(vals) == {c.id for c in CHAPTER.claims}
    for v in vals.values():
        values = v.values if isinstance(v, driver.Evidence) else v
        assert len(values) == 2 and np.all(np.isfinite(values))
    ev = vals["forgetting_gap"]
    assert set(ev.arms) == {"kakurenbo", "forgetting"} and ev.trivial == results.chance
    assert list(ev.values) == pytest.approx([a - b for a, b in zip(ev.arms["kakurenbo"], ev.arms["forgetting"])])


def _stats(index, correct):
    n = len(index)
    return SampleStats(index=np.asarray(index), loss=np.zeros(n), correct=np.asarray(correct, dtype=bool),
                       confidence=np.ones(n))


def test_a_forgetting_event_is_correct_then_wrong():
    counter = ForgettingCounter(4)
    counter.update(_stats([0, 1, 2, 3], [False, True, True, False]))  # first presentation: no event
    counter.update(_stats([0, 1, 2, 3], [True, False, True, False]))  # sample 1 forgotten
    counter.update(_stats([1, 2], [True, False]))                    # sample 2 forgotten; 0 and 3 not presented
    counter.update(_stats([1], [False]))                             # sample 1 forgotten again
    assert counter.events.tolist() == [0, 2, 1, 0]


def test_pruning_removes_the_least_forgotten_for_good():
    counter = ForgettingCounter(10)
    counter.events[:] = [3, 0, 5, 0, 1, 2, 0, 4, 1, 0]
    sel = counter.prune(0.3)
    assert sel.hidden.tolist() == [1, 3, 6]  # the fewest events, ties in index order, as torch.sort in the code
    assert counter.selection().hidden.tolist() == [1, 3, 6]
    assert len(sel.visible) == 7 and not set(sel.visible) & set(sel.hidden)


def test_the_forgetting_baseline_trains_on_everything_then_prunes_with_no_rate_compensation(split):
    tr = driver.MethodTrainer("forgetting", SETUP, split, 0)
    base = driver.MethodTrainer("baseline", SETUP, split, 0)
    n = len(split.train)
    for e in range(SETUP.epochs):
        rec, ref = tr.epoch(e), base.epoch(e)
        assert rec.lr == ref.lr
        expected = 0 if e < SETUP.forget_epochs else int(np.floor(SETUP.max_fraction * n))
        assert rec.hidden == expected and rec.backward_passes == n - expected and rec.forward_passes == n - expected
    assert tr.forgetting.events.sum() > 0, "the test must exercise forgetting"


@pytest.mark.parametrize("override,name", [
    ({"n_informative": 50}, "n_informative"),
    ({"forget_epochs": 6}, "forget_epochs"),
    ({"num_classes": 100, "n_informative": 3}, "num_classes"),
    ({"batch_size": 4096, "n_samples": 2000}, "batch_size"),
])
def test_impossible_combinations_are_refused_before_any_work(override, name):
    with pytest.raises(ParameterError, match=repr(name)):
        resolve(CHAPTER, "smoke", override)
