import numpy as np
import pytest

from repro.medical.phantom import (
    KINDS,
    LUNG_SITES,
    SITES,
    PhantomConfig,
    generate_set,
    hot_spot_mask,
    normalise_ct,
    normalise_pet,
)


@pytest.fixture(scope="module", params=[(1, 32, 32), (16, 32, 32)], ids=["slices", "volumes"])
def phantoms(request):
    return generate_set(60, PhantomConfig(shape=request.param, max_lesions=3), seed=3)


def test_each_lesion_has_a_mask_at_its_position(phantoms):
    n = 0
    for case in phantoms.cases:
        assert len(case.lesion_masks) == len(case.findings.lesions)
        for lesion, mask in zip(case.findings.lesions, case.lesion_masks):
            assert mask.any()
            assert mask[lesion.center]
            assert lesion.kind in KINDS and lesion.site in SITES
            assert (lesion.lobe in ("upper", "lower")) == (lesion.site in LUNG_SITES)
            n += 1
    assert n > 30


def test_uptake_above_background_exactly_when_avid(phantoms):
    seen = set()
    for case in phantoms.cases:
        for lesion, mask, bg in zip(case.findings.lesions, case.lesion_masks, case.background):
            above = case.activity[mask].mean() > bg + 1e-4
            assert above == lesion.fdg_avid
            seen.add(lesion.fdg_avid)
    assert seen == {True, False}


def test_lesions_do_not_overlap(phantoms):
    for case in phantoms.cases:
        if len(case.lesion_masks):
            assert case.lesion_masks.sum(axis=0).max() <= 1


def test_avid_lesions_are_hot_in_measured_pet():
    data = generate_set(40, PhantomConfig(shape=(1, 32, 32), counts_per_suv=1000.0), seed=0)
    for case in data.cases:
        for lesion, mask in zip(case.findings.lesions, case.lesion_masks):
            if lesion.fdg_avid and lesion.kind == "mass":
                ring = case.activity == case.background[0]
                assert case.pet[mask].mean() > 0 and case.pet[mask].max() > case.pet[ring].mean() if ring.any() else True


def test_pet_depends_on_attenuation():
    cfg = PhantomConfig(shape=(1, 32, 32), max_lesions=0, counts_per_suv=1e6, psf_sigma_vox=0.0)
    strong = generate_set(5, cfg, 0)
    none = generate_set(5, PhantomConfig(**{**cfg.__dict__, "attenuation_coupling": 0.0}), 0)
    assert np.allclose(strong.activity, none.activity)
    body = strong.activity > 0
    ratio = strong.pet[body] / none.pet[body]
    assert ratio.max() < 1.0 and ratio.min() > 0.3


def test_same_seed_same_cases():
    a = generate_set(5, PhantomConfig(), 7)
    b = generate_set(5, PhantomConfig(), 7)
    assert np.array_equal(a.pet, b.pet) and a.findings == b.findings
    assert not np.array_equal(a.pet, generate_set(5, PhantomConfig(), 8).pet)


def test_lesion_count_range():
    data = generate_set(50, PhantomConfig(min_lesions=1, max_lesions=2), 1)
    assert all(1 <= len(f.lesions) <= 2 for f in data.findings)


def test_hot_spot_mask_binary_and_monotone():
    pet01 = normalise_pet(generate_set(10, PhantomConfig(), 2).pet, 10.0)
    masks = [hot_spot_mask(pet01, t) for t in (0.05, 0.1, 0.2, 0.4)]
    for m in masks:
        assert m.dtype == bool
    for lo, hi in zip(masks, masks[1:]):
        assert np.all(hi <= lo)


def test_normalisation_ranges():
    assert normalise_ct(np.array([-1024.0, 1023.0, 3000.0])).tolist() == [0.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        normalise_pet(np.zeros(3), 0.0)
