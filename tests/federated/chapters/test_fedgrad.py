"""The FedGrad chapter driver: one run's record, the attack that the claims presuppose, claims that can fail."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.federated import robust
from repro.federated.chapters import fedgrad
from repro.federated.chapters.fedgrad import BackdoorRun, Params, Results, claims, run_one
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec
from repro.params import ParameterError
from repro.registry import load_registry
from repro.verdicts import judge

SPEC = TaskSpec(dataset="digits", num_clients=10, alpha=0.5, hidden=(16,))
SGD = LocalSGD(batch_size=16, lr=0.05, momentum=0.0)
BASE = dict(dataset="digits", num_clients=10, active_clients=5, alpha=0.5, attacker_share=0.2, pdr=0.33,
            hidden=(16,), tau=2, rounds=2, batch_size=16, lr=0.05, clip_bound=0.3, switch_round=1,
            defences=("none", "fedgrad"), seeds=(0, 1), eval_every=2, engine="inprocess", device="cpu", workers=1)


def _job(**change) -> BackdoorRun:
    return BackdoorRun(**{**dict(method="none", spec=SPEC, sgd=SGD, tau=3, rounds=2, active_clients=4, seed=0,
                                 attackers=(), pdr=0.3, clip_bound=1.0, switch_round=1, eval_every=2), **change})


def test_backdoor_run_reports_main_and_backdoor_accuracy_and_rates():
    clean = run_one(_job(method="multi-krum"))
    assert clean.attacked is False and np.isnan(clean.tpr) and clean.fpr == pytest.approx(0.25)
    hit = run_one(_job(attackers=(0, 1, 2)))
    assert hit.tpr == 0.0 and hit.fpr == 0.0 and hit.accuracy > 0.0
    with pytest.raises(ValueError, match="method"):
        _job(method="krum-ish")


def _results(rows: list[dict]) -> Results:
    return Results(final=pd.DataFrame(rows), trivial=11.0, tail=np.zeros((1, 64)))


def test_a_detector_that_excludes_everyone_fails_the_detection_claim():
    rows = [{"defence": d, "attacked": a, "seed": s, "accuracy": 80.0,
             "backdoor": 90.0 if a and d == "none" else 5.0, "tpr": 1.0, "fpr": 1.0 if d == "fedgrad" else 0.0}
            for d in ("none", "fedgrad") for a in (True, False) for s in (0, 1, 2)]
    values = claims(_results(rows))
    claim = load_registry().get("fedgrad").claim("detection_tpr_minus_fpr")
    assert values["detection_tpr_minus_fpr"] == [0.0, 0.0, 0.0]
    assert judge(claim, values["detection_tpr_minus_fpr"], profile="cpu").sign_holds is False
    # a perfect detector passes the same rule
    assert judge(claim, [100.0, 100.0, 100.0], profile="cpu").sign_holds is True
    assert values["main_acc_drop"].arms == {"no defence": [80.0] * 3, "FedGrad": [80.0] * 3}
    assert values["backdoor_acc_pct"].arms == {"FedGrad": [80.0] * 3} and values["backdoor_acc_pct"].trivial == 11.0
    assert fedgrad.clean_false_alarms(_results(rows)) == 100.0


def test_attack_works_is_a_precondition_and_the_backdoor_bound_is_the_papers():
    chapter = load_registry().get("fedgrad")
    assert chapter.claim("attack_works").kind == "precondition"
    assert chapter.claim("backdoor_acc_pct").null_source and chapter.claim("backdoor_acc_pct").null_value == 8.0
    assert "clean_fpr_pct" not in {c.id for c in chapter.claims}


def test_edge_case_attack_implants_a_backdoor_without_defence():
    common = dict(tau=5, rounds=6, active_clients=10, pdr=0.33, eval_every=6)
    attacked = run_one(_job(attackers=(0, 1, 2), **common))
    clean = run_one(_job(**common))
    assert attacked.backdoor - clean.backdoor >= 30.0


@pytest.mark.parametrize("change, names", [
    ({"active_clients": 11}, "'active_clients', 'num_clients'"),
    ({"defences": ("none", "rfa")}, "'defences'"),
    ({"attacker_share": 0.01}, "'attacker_share', 'num_clients'"),
    ({"switch_round": 3}, "'switch_round', 'rounds'"),
    ({"num_clients": 800, "active_clients": 5}, "'dataset', 'num_clients'"),
])
def test_impossible_combinations_are_refused_by_name(change, names):
    Params(**BASE).checks()
    with pytest.raises(ParameterError, match=names):
        Params(**{**BASE, **change}).checks()


def test_jobs_pair_every_attacked_run_with_a_clean_one():
    js = fedgrad.jobs(Params(**BASE))
    assert len(js) == 2 * 2 * 2 and {j.attackers for j in js} == {(0, 1), ()}


def test_rlr_steps_back_where_too_few_clients_agree_on_the_sign():
    prev = {"w": np.zeros(3, np.float32)}
    # coordinate 0: all four agree (+); coordinate 1: split 2 to 2; coordinate 2: three agree (-), one disagrees
    ups = [(1.0, 1.0, -1.0), (1.0, 1.0, -1.0), (1.0, -1.0, -1.0), (1.0, -1.0, 1.0)]
    models = [{"w": np.asarray(u, np.float32)} for u in ups]
    new, flagged = robust.RobustLR(threshold=3).aggregate(prev, models, [1, 1, 1, 1])
    np.testing.assert_allclose(new["w"], [1.0, 0.0, 0.5])  # |votes| 4 >= 3 forward, 0 and 2 < 3 backward
    new, _ = robust.RobustLR(threshold=2).aggregate(prev, models, [1, 1, 1, 1])
    np.testing.assert_allclose(new["w"], [1.0, 0.0, -0.5])
    # agreement everywhere (threshold 0) is FedAvg, and nobody is flagged
    fedavg, _ = robust.NoDefence().aggregate(prev, models, [1, 2, 3, 4])
    np.testing.assert_allclose(robust.RobustLR(threshold=0).aggregate(prev, models, [1, 2, 3, 4])[0]["w"], fedavg["w"])
    assert flagged == []
    with pytest.raises(ValueError, match="threshold"):
        robust.RobustLR(threshold=-1)
