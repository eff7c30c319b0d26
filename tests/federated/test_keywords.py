"""The federated keyword task: speakers as clients, noise conditions, batched log-mel, and a Flower run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from flwr.serverapp.strategy import FedAvg

from repro.federated.audio import Speaker, keyword_clip, log_mel, log_mel_batch
from repro.federated.engine import run_federated
from repro.federated.keywords import KeywordTask, keyword_data, keyword_evaluator, keyword_initial, make_keyword_client_app

TASK = KeywordTask(num_speakers=6, train_clips=24, test_clips=8, imbalance=0.5, seed=3)


def test_batched_log_mel_equals_one_clip_at_a_time():
    clips = np.stack([keyword_clip(c, Speaker.draw(c), seed=c) for c in range(8)])
    batch = log_mel_batch(clips)
    for clip, row in zip(clips, batch):
        np.testing.assert_allclose(row, log_mel(clip), atol=1e-4)
    assert batch.max() == 0.0 and batch.min() >= -80.0


def test_each_speaker_is_one_client_and_conditions_share_the_clips():
    clean = keyword_data(TASK)
    assert len(clean.x_train) == TASK.num_speakers
    assert all(len(x) == len(y) == TASK.train_clips for x, y in zip(clean.x_train, clean.y_train))
    assert len(clean.y_test) == TASK.num_speakers * TASK.test_clips
    noisy = keyword_data(replace(TASK, snr=0.0))
    assert all(np.array_equal(a, b) for a, b in zip(clean.true_train, noisy.true_train))
    assert not np.allclose(clean.x_train[0], noisy.x_train[0])
    # speakers differ: the same class said by two speakers gives different features
    assert not np.allclose(clean.x_test[0], clean.x_test[TASK.test_clips])


def test_validation_clips_are_their_own_and_leave_the_other_clips_unchanged():
    plain, held = keyword_data(TASK), keyword_data(replace(TASK, valid_clips=4))
    assert len(plain.y_valid) == 0 and len(held.y_valid) == TASK.num_speakers * 4
    np.testing.assert_array_equal(plain.x_test, held.x_test)
    assert all(np.array_equal(a, b) for a, b in zip(plain.x_train, held.x_train))
    assert not any(np.allclose(v, t) for v in held.x_valid for t in held.x_test)
    assert keyword_evaluator(replace(TASK, valid_clips=4), "validation")(keyword_initial(0))["accuracy"] >= 0.0
    with pytest.raises(ValueError, match="no validation clips"):
        keyword_evaluator(TASK, "validation")


def test_label_noise_changes_about_eps_of_the_labels_and_zero_changes_none():
    assert keyword_data(TASK).label_noise_rate == 0.0
    big = KeywordTask(num_speakers=10, train_clips=200, test_clips=1, seed=1)
    rate = keyword_data(replace(big, label_noise=0.3)).label_noise_rate
    assert abs(rate - 0.3) < 0.05
    np.testing.assert_array_equal(keyword_data(replace(TASK, label_noise=0.3)).y_test, keyword_data(TASK).y_test)


def test_stock_flower_fedavg_trains_the_keyword_cnn():
    """The client takes its settings from the run config, so Flower's own FedAvg drives it."""
    app = make_keyword_client_app(TASK, {"seed": 0, "steps": 3, "lr": 0.1, "batch-size": 8})
    strategy = FedAvg(fraction_evaluate=0.0, min_available_nodes=TASK.num_speakers, min_train_nodes=2)
    hist = run_federated(strategy, app, TASK.num_speakers, keyword_initial(0), 8, keyword_evaluator(TASK), [0, 8])
    assert hist.accuracy[-1] > hist.accuracy[0] + 20.0
