"""Image-translation metrics: PSNR and SSIM from scikit-image, and MAE.

Images are normalised PET in ``[0, 1]`` (``data_range = 1``, as CPDM's
``metric.py``).  MAE is reported in PET activity units: the mean absolute
error of the normalised images times ``suv_max``, applied once here and
nowhere else (CPDM multiplies by 32767, its PET scale, in the same way).

Each metric exists for the whole image and for the inside of a lesion mask.
PSNR of identical images is infinite; it is capped at :data:`PSNR_CAP` so that
means over images stay finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

PSNR_CAP = 100.0


def psnr(reference: np.ndarray, estimate: np.ndarray, mask: np.ndarray | None = None) -> float:
    """PSNR in dB (data range 1), over the whole image or the pixels in ``mask``; capped at :data:`PSNR_CAP`."""
    ref, est = np.asarray(reference, dtype=np.float64), np.asarray(estimate, dtype=np.float64)
    if mask is not None:
        ref, est = ref[mask], est[mask]
    if np.array_equal(ref, est):
        return PSNR_CAP
    return float(min(peak_signal_noise_ratio(ref, est, data_range=1.0), PSNR_CAP))


def ssim(reference: np.ndarray, estimate: np.ndarray, mask: np.ndarray | None = None) -> float:
    """SSIM of 2D images (data range 1): the mean of scikit-image's SSIM map, over ``mask`` when given."""
    ref, est = np.asarray(reference, dtype=np.float64), np.asarray(estimate, dtype=np.float64)
    value, smap = structural_similarity(ref, est, data_range=1.0, full=True)
    return float(value) if mask is None else float(smap[mask].mean())


def mae(reference: np.ndarray, estimate: np.ndarray, scale: float, mask: np.ndarray | None = None) -> float:
    """Mean absolute error of normalised images times ``scale`` (PET units), over ``mask`` when given."""
    err = np.abs(np.asarray(reference, dtype=np.float64) - np.asarray(estimate, dtype=np.float64))
    return float((err if mask is None else err[mask]).mean() * scale)


@dataclass(frozen=True, kw_only=True)
class TranslationScores:
    """Mean scores of a set of translated images.

    Attributes
    ----------
    psnr, ssim, mae
        Whole-image means over images.
    lesion_psnr, lesion_ssim, lesion_mae
        Means over lesions of the metric inside each lesion mask (NaN when
        the set has no lesion).
    """

    psnr: float
    ssim: float
    mae: float
    lesion_psnr: float
    lesion_ssim: float
    lesion_mae: float


def score_translations(
    reference: np.ndarray, estimate: np.ndarray, lesion_masks: list[np.ndarray], scale: float
) -> TranslationScores:
    """Score a batch of 2D translations.

    Parameters
    ----------
    reference, estimate
        Normalised PET images ``(n, H, W)``.
    lesion_masks
        For each image, its lesion masks ``(k, H, W)`` (``k`` may be 0).
    scale
        PET units per normalised unit (for MAE).

    Returns
    -------
    TranslationScores
        Whole-image and lesion-level means.
    """
    if reference.shape != estimate.shape or reference.ndim != 3 or len(lesion_masks) != len(reference):
        raise ValueError("reference and estimate must be (n, H, W) and there must be one mask stack per image")
    whole = np.array([(psnr(r, e), ssim(r, e), mae(r, e, scale)) for r, e in zip(reference, estimate)])
    lesion = [
        (psnr(r, e, m), ssim(r, e, m), mae(r, e, scale, m))
        for r, e, masks in zip(reference, estimate, lesion_masks)
        for m in masks
    ]
    lesion_mean = np.array(lesion).mean(axis=0) if lesion else np.full(3, np.nan)
    w, les = whole.mean(axis=0).tolist(), lesion_mean.tolist()
    return TranslationScores(psnr=w[0], ssim=w[1], mae=w[2], lesion_psnr=les[0], lesion_ssim=les[1], lesion_mae=les[2])
