"""FedAudio's noise pieces: the SNR injector and the per-client label-noise matrix."""

from __future__ import annotations

import numpy as np
import pytest

from repro.federated.audio import KEYWORD_CLASSES, Speaker, add_noise, keyword_clip, log_mel, snr_db
from repro.federated.label_noise import noisy_labels, transition_matrix


@pytest.mark.parametrize("target", [20.0, 10.0, 0.0, -5.0])
def test_snr_injection_hits_target_within_a_tenth_of_a_db(target):
    t = np.arange(4000) / 8000.0
    clean = np.sin(2 * np.pi * 440 * t) * np.exp(-3 * t)
    noisy = add_noise(clean, target, seed=8)
    assert abs(snr_db(clean, noisy) - target) < 0.1


@pytest.mark.parametrize("eps", [0.1, 0.3, 0.5])
def test_label_noise_matrix_shape(eps):
    t = transition_matrix(10, eps, seed=0)
    np.testing.assert_allclose(t.sum(1), 1.0)
    np.testing.assert_allclose(np.diag(t), 1 - eps)
    off = ~np.eye(10, dtype=bool)
    assert (t[off] == 0).sum() == 10 * 3  # floor(0.4 * 9) = 3 zeroed cells per row


def test_label_noise_rate_and_identity():
    y = np.random.default_rng(1).integers(0, 10, 20000)
    np.testing.assert_array_equal(noisy_labels(y, transition_matrix(10, 0.0, seed=0), seed=2), y)
    t = transition_matrix(10, 0.3, seed=0)
    flipped = noisy_labels(y, t, seed=2)
    assert abs((flipped != y).mean() - 0.3) < 0.02
    assert (t[y, flipped] > 0).all()  # never lands on a zeroed cell


def test_keyword_clips_are_deterministic_and_features_have_the_stated_shape():
    speaker = Speaker.draw(3)
    clips = [keyword_clip(c, speaker, seed=5) for c in range(len(KEYWORD_CLASSES))]
    np.testing.assert_array_equal(clips[1], keyword_clip(1, speaker, seed=5))
    assert all(c.shape == (4000,) and np.abs(c).max() == pytest.approx(1.0) for c in clips)
    features = log_mel(clips[0])
    assert features.shape == (32, 32) and features.max() == pytest.approx(0.0)
    # a tone's energy sits in a low mel band; an upward chirp's moves up over time
    chirp = log_mel(clips[1])
    loud = chirp.max(axis=0) > -20
    bands = chirp.argmax(axis=0)[loud]
    assert bands[-1] > bands[0]
