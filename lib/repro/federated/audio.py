"""Audio pieces for federated chapters: noise at a target SNR, synthetic keyword clips, log-mel features.

The noise is scaled so that its power on the produced clip is exactly
``P_signal / 10^(SNR / 10)`` (FedAudio's rule, applied to the drawn noise's
measured power rather than its expected power), so the measured SNR of the
result hits the target.

:func:`keyword_clip` generates FedAudio's substitute data: eight keyword-like
sound classes (tones, chirps, AM, FM, two-tone, noise bursts, pulse trains)
voiced by a :class:`Speaker` (pitch, speed, timbre), one speaker per client;
:func:`log_mel` and :func:`log_mel_batch` compute log-mel features with librosa.
"""

from __future__ import annotations

from dataclasses import dataclass

import librosa
import numpy as np


def power(signal: np.ndarray) -> float:
    """Mean power of a signal."""
    return float(np.mean(np.asarray(signal, dtype=np.float64) ** 2))


def snr_db(clean: np.ndarray, noisy: np.ndarray) -> float:
    """Measured SNR (dB) of ``noisy`` against ``clean`` (the noise is their difference)."""
    return 10.0 * np.log10(power(clean) / power(np.asarray(noisy, np.float64) - clean))


def add_noise(clean: np.ndarray, snr: float, seed: int, noise: np.ndarray | None = None) -> np.ndarray:
    """``clean`` plus noise scaled to the target ``snr`` (dB).

    Parameters
    ----------
    clean
        The signal.
    snr
        Target SNR in dB.
    seed
        Seed of the Gaussian noise (when ``noise`` is not given).
    noise
        Background noise to use instead of Gaussian noise (same length as ``clean``).
    """
    clean = np.asarray(clean, dtype=np.float64)
    base = np.random.default_rng(seed).standard_normal(clean.shape) if noise is None else np.asarray(noise, np.float64)
    if base.shape != clean.shape:
        raise ValueError(f"noise shape {base.shape} differs from the signal's {clean.shape}")
    target = power(clean) / 10.0 ** (snr / 10.0)
    return clean + base * np.sqrt(target / power(base))


# ----- synthetic keyword-like clips and their features -------------------------------------------
KEYWORD_CLASSES = ("tone", "chirp_up", "chirp_down", "am", "fm", "two_tone", "noise_burst", "pulse_train")
"""The eight synthetic 'keywords' (FedAudio's Speech Commands substituted by generated sounds)."""


@dataclass(frozen=True, kw_only=True)
class Speaker:
    """A client's voice: pitch and speed factors and a timbre (weight of the second harmonic)."""

    pitch: float
    speed: float
    timbre: float

    @classmethod
    def draw(cls, seed: int) -> Speaker:
        """A random speaker (pitch 0.8-1.25x, speed 0.85-1.15x, timbre 0-0.6)."""
        rng = np.random.default_rng(seed)
        return cls(pitch=float(rng.uniform(0.8, 1.25)), speed=float(rng.uniform(0.85, 1.15)), timbre=float(rng.uniform(0.0, 0.6)))


def keyword_clip(label: int, speaker: Speaker, seed: int, sample_rate: int = 8000, seconds: float = 0.5) -> np.ndarray:
    """One clip of class ``KEYWORD_CLASSES[label]`` as said by ``speaker`` (float32, peak-normalised).

    The sound occupies ``seconds / speaker.speed`` of the clip at a random onset; base frequencies are
    scaled by the speaker's pitch, and the second harmonic by its timbre.
    """
    rng = np.random.default_rng(seed)
    n = int(sample_rate * seconds)
    length = min(n, int(n * 0.6 / speaker.speed))
    t = np.arange(length) / sample_rate
    f0 = 400.0 * speaker.pitch
    kind = KEYWORD_CLASSES[label]
    if kind == "tone":
        phase = 2 * np.pi * f0 * t
    elif kind in ("chirp_up", "chirp_down"):
        f1 = 3 * f0
        start, end = (f0, f1) if kind == "chirp_up" else (f1, f0)
        phase = 2 * np.pi * (start * t + (end - start) * t**2 / (2 * t[-1]))
    elif kind == "fm":
        phase = 2 * np.pi * f0 * 1.5 * t + 4.0 * np.sin(2 * np.pi * 12 * t)
    else:
        phase = 2 * np.pi * f0 * t
    wave = np.sin(phase) + speaker.timbre * np.sin(2 * phase)
    if kind == "am":
        wave *= 0.5 * (1 + np.sin(2 * np.pi * 15 * t))
    elif kind == "two_tone":
        wave = np.where(t < t[-1] / 2, wave, np.sin(2.5 * phase))
    elif kind == "noise_burst":
        wave = rng.standard_normal(length)
    elif kind == "pulse_train":
        wave *= (np.sin(2 * np.pi * 8 * t) > 0.6)
    wave *= np.hanning(length)
    clip = np.zeros(n)
    onset = int(rng.integers(0, n - length + 1))
    clip[onset:onset + length] = wave
    return (clip / max(np.abs(clip).max(), 1e-9)).astype(np.float32)


def log_mel(clip: np.ndarray, sample_rate: int = 8000, n_mels: int = 32, frames: int = 32) -> np.ndarray:
    """Log-mel spectrogram ``(n_mels, frames)`` in dB (librosa), the hop chosen to give ``frames`` frames."""
    return log_mel_batch(np.asarray(clip)[None], sample_rate, n_mels, frames)[0]


TOP_DB = 80.0
"""Dynamic range kept below each spectrogram's peak (librosa's ``top_db``)."""


def log_mel_batch(clips: np.ndarray, sample_rate: int = 8000, n_mels: int = 32, frames: int = 32) -> np.ndarray:
    """Log-mel spectrograms ``(clips, n_mels, frames)`` of equal-length clips, each in dB below its own peak.

    One librosa call for the whole batch (its filterbank is built once);
    every spectrogram is referred to its own maximum and floored at
    :data:`TOP_DB` below it, as ``librosa.power_to_db(mel, ref=np.max)`` does for one clip.
    """
    clips = np.asarray(clips, np.float32)
    if clips.ndim != 2:
        raise ValueError(f"clips must have shape (clips, samples), got {clips.shape}")
    hop = max(1, clips.shape[1] // frames)
    mel = librosa.feature.melspectrogram(y=clips, sr=sample_rate, n_fft=256, hop_length=hop, n_mels=n_mels,
                                         fmax=sample_rate / 2)
    peak = np.maximum(mel.max(axis=(1, 2), keepdims=True), 1e-10)
    db = librosa.power_to_db(mel[:, :, :frames] / peak, ref=1.0, top_db=None)
    return np.maximum(db, -TOP_DB).astype(np.float32)
