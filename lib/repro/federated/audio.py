"""Audio pieces for federated chapters: additive noise at a target signal-to-noise ratio.

The noise is scaled so that its power on the produced clip is exactly
``P_signal / 10^(SNR / 10)`` (FedAudio's rule, applied to the drawn noise's
measured power rather than its expected power), so the measured SNR of the
result hits the target.
"""

from __future__ import annotations

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
