import math

import numpy as np

from repro.medical.chapters.vimedpet import VimedpetParams, blank_pet, general_config, in_domain_config, lung_gap
from repro.medical.reports import FieldScores


def _params(**kw):
    base = dict(depth=8, size=16, n_general=8, n_train=8, n_test=4, max_lesions=2, suv_max=10.0, general_hu_offset=60.0,
                general_pet_gain=0.6, general_lung_weight=3.0, channels=[4, 8, 8], hidden=16, embed=8, pretrain_epochs=1,
                finetune_epochs=1, batch_size=4, lr=1e-3, max_len=48, n_examples=1, seeds=[0], workers=1)
    return VimedpetParams(**{**base, **kw})


def test_lung_gap_sign_and_nan_sites():
    by_site = {"right_lung": 0.2, "left_lung": 0.4, "liver": 0.8, "bone": float("nan"), "mediastinal_node": 0.6}
    assert math.isclose(lung_gap(FieldScores(position=1, kind=1, fdg=1, by_site=by_site, normal_cases=1)), 100 * (0.3 - 0.7))


def test_blank_pet_keeps_ct():
    x = np.random.default_rng(0).normal(size=(3, 2, 8, 8, 8)).astype(np.float32)
    y = blank_pet(x)
    assert np.array_equal(y[:, 0], x[:, 0]) and not y[:, 1].any() and x[:, 1].any()


def test_general_distribution_is_shifted_only_where_asked():
    p = _params()
    g, d = general_config(p), in_domain_config(p)
    assert g.hu_offset == 60.0 and d.hu_offset == 0.0 and g.pet_gain == 0.6 and d.pet_gain == 1.0
    assert g.shape == d.shape and g.site_weights[:2] == (3.0, 3.0)
    assert general_config(_params(general_hu_offset=0.0, general_pet_gain=1.0, general_lung_weight=1.0)) == d
