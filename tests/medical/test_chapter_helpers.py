import math

import numpy as np
import pytest

from repro.medical.chapters import cpdm, vimedpet
from repro.medical.chapters.vimedpet import blank_pet, general_config, in_domain_config, lung_gap
from repro.medical.reports import FieldScores
from repro.params import ParameterError
from repro.results import Evidence


def _params(**kw):
    base = dict(depth=8, size=16, n_general=8, n_train=8, n_val=4, n_test=4, max_lesions=2, suv_max=10.0,
                general_hu_offset=60.0, general_pet_gain=0.6, general_lung_weight=3.0, channels=(4, 8, 8), hidden=16,
                embed=8, pretrain_epochs=1, finetune_epochs=1, batch_size=4, lr_grid=(1e-3, 1e-2), max_len=48,
                n_examples=1, seeds=(0, 1), workers=1)
    return vimedpet.Params(**{**base, **kw})


def _cpdm(**kw):
    base = dict(image_size=16, n_train=16, n_val=4, n_test=4, max_lesions=2, attenuation_coupling=4.0,
                counts_per_suv=40.0, suv_max=10.0, hot_threshold=0.18, base_channels=4, levels=1, n_timesteps=20,
                epochs=1, seg_epochs=1, batch_size=8, seg_lr=2e-3, lr_grid=(1e-3, 1e-2), sample_steps=2, eta=1.0,
                coupling_sweep=(0.0,), n_examples=1, seeds=(0, 1), workers=1)
    return cpdm.Params(**{**base, **kw})


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


def test_trivial_report_is_the_most_frequent_training_report():
    assert vimedpet.trivial_report(["b", "a", "b", "c", "a", "b"]) == "b"
    assert vimedpet.trivial_report(["x", "y"]) == "x"  # ties: the first


def test_checks_name_the_parameters():
    with pytest.raises(ParameterError, match="'coupling_sweep', 'attenuation_coupling'"):
        _cpdm(coupling_sweep=(4.0,)).checks()
    with pytest.raises(ParameterError, match="'sample_steps', 'n_timesteps'"):
        _cpdm(sample_steps=40).checks()
    with pytest.raises(ParameterError, match="'depth', 'size'"):
        _params(depth=12).checks()
    _cpdm().checks()
    _params().checks()


def test_cpdm_tunes_every_arm_on_validation_and_fixes_the_choice(tmp_path):
    """Every translator tries the same grid on the first seed's validation slices; later seeds reuse the choice."""
    results = cpdm.run(_cpdm(), tmp_path)
    first, second = results.seeds
    assert set(results.chosen_lr) == set(cpdm.ARMS)
    for arm in first.arms:
        assert set(arm.val_psnr) == {1e-3, 1e-2}
        assert arm.lr == max(arm.val_psnr, key=arm.val_psnr.get) == results.chosen_lr[arm.arm]
        assert second.arm(arm.arm).lr == arm.lr and list(second.arm(arm.arm).val_psnr) == [arm.lr]
    assert list(results.coupling.coupling) == [0.0, 4.0]
    claims = cpdm.claims(results)
    ev = claims["cpdm_psnr_gain"]
    assert isinstance(ev, Evidence) and set(ev.arms) == {"cpdm", "bbdm"}
    assert ev.trivial == pytest.approx(np.mean([r.trivial_psnr for r in results.seeds]))
    assert claims["attenuation_psnr_gain"] == [cpdm.attenuation_gain(r) for r in results.seeds]


def test_vimedpet_tunes_every_arm_on_validation_and_scores_the_constant_report(tmp_path):
    results = vimedpet.run(_params(), tmp_path)
    first, second = results.seeds
    for arm in first.arms:
        assert set(arm.val_bleu4) == {1e-3, 1e-2}
        assert arm.lr == max(arm.val_bleu4, key=arm.val_bleu4.get) == results.chosen_lr[arm.arm]
        assert second.arm(arm.arm).lr == arm.lr
    claims = vimedpet.claims(results)
    ev = claims["finetune_bleu_gain"]
    assert set(ev.arms) == {"finetune_ctpet", "no_finetune"}
    assert ev.trivial == pytest.approx(np.mean([100 * r.trivial.bleu4 for r in results.seeds]))
    assert first.trivial.arm == "constant report"


def test_vqa_answers_follow_the_findings_and_a_head_learns_them():
    import torch

    from repro.medical import vqa
    from repro.medical.phantom import Findings, Lesion

    liver = Lesion(kind="mass", site="liver", lobe="", size_mm=40, fdg_avid=True, center=(0, 0, 0))
    cases = [Findings(lesions=()), Findings(lesions=(liver,))]
    table = vqa.answers(cases)
    ids = [q.id for q in vqa.QUESTIONS]
    assert table[0].sum() == 0
    assert {ids[j] for j in np.flatnonzero(table[1])} == {"any_lesion", "fdg_avid", "mass", "lesion_liver"}
    # a feature that carries the answers is learned; the majority answerer is right on the majority only
    targets = np.tile(table, (20, 1))
    feats = torch.as_tensor(targets * 2 - 1)
    head = vqa.train_qa_head(feats, targets, steps=200)
    assert vqa.qa_accuracy(head, feats, targets).min() == 1.0
    assert vqa.majority_accuracy(targets, targets).min() == 0.5
