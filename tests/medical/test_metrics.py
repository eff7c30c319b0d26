import numpy as np
import pytest

from repro.medical.metrics import PSNR_CAP, mae, psnr, score_translations, ssim


@pytest.fixture()
def image():
    return np.random.default_rng(0).random((32, 32))


def test_identical_images(image):
    mask = np.zeros_like(image, dtype=bool)
    mask[4:9, 4:9] = True
    assert psnr(image, image) == PSNR_CAP
    assert ssim(image, image) == pytest.approx(1.0)
    assert mae(image, image, 10.0) == 0.0
    assert psnr(image, image, mask) == PSNR_CAP
    assert ssim(image, image, mask) == pytest.approx(1.0)
    assert mae(image, image, 10.0, mask) == 0.0


def test_mae_scaled_exactly_once(image):
    assert mae(image, image + 0.1, 1.0) == pytest.approx(0.1)
    assert mae(image, image + 0.1, 32767.0) == pytest.approx(3276.7)


def test_psnr_of_known_error(image):
    assert psnr(image, image + 0.1) == pytest.approx(20.0)


def test_worse_estimate_scores_worse(image):
    rng = np.random.default_rng(1)
    small = np.clip(image + rng.normal(0, 0.02, image.shape), 0, 1)
    large = np.clip(image + rng.normal(0, 0.2, image.shape), 0, 1)
    assert psnr(image, small) > psnr(image, large)
    assert ssim(image, small) > ssim(image, large)


def test_lesion_scores_use_only_the_masks(image):
    ref = np.stack([image, image])
    est = ref.copy()
    est[0, 20:, 20:] += 0.5  # error outside the lesion
    masks = [np.zeros((1, 32, 32), bool), np.zeros((0, 32, 32), bool)]
    masks[0][0, 2:6, 2:6] = True
    s = score_translations(ref, est, masks, scale=1.0)
    assert s.lesion_mae == 0.0 and s.mae > 0.0
    none = score_translations(ref, est, [np.zeros((0, 32, 32), bool)] * 2, scale=1.0)
    assert np.isnan(none.lesion_mae)
