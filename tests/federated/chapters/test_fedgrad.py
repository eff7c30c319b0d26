"""The FedGrad chapter driver: one run's record, the attack that the claims presuppose, claims that can fail."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.federated.chapters.fedgrad import BackdoorRun
from repro.federated.chapters.fedgrad import claims as fedgrad_claims
from repro.federated.chapters.fedgrad import run as backdoor_run
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec
from repro.registry import load_registry
from repro.verdicts import judge

SPEC = TaskSpec(dataset="digits", num_clients=10, alpha=0.5, hidden=(16,))


def test_backdoor_run_reports_main_and_backdoor_accuracy_and_rates():
    sgd = LocalSGD(batch_size=16, lr=0.05, momentum=0.0)
    clean = backdoor_run(
        BackdoorRun(
            defence="multi-krum",
            spec=SPEC,
            sgd=sgd,
            tau=3,
            rounds=2,
            active_clients=4,
            seed=0,
            attackers=(),
            pdr=0.3,
            clip_bound=1.0,
            switch_round=1,
            eval_every=2,
        )
    )
    assert clean["attacked"] is False and np.isnan(clean["tpr"]) and clean["fpr"] == pytest.approx(0.25)
    hit = backdoor_run(
        BackdoorRun(
            defence="none",
            spec=SPEC,
            sgd=sgd,
            tau=3,
            rounds=2,
            active_clients=4,
            seed=0,
            attackers=(0, 1, 2),
            pdr=0.3,
            clip_bound=1.0,
            switch_round=1,
            eval_every=2,
        )
    )
    assert hit["tpr"] == 0.0 and hit["fpr"] == 0.0 and hit["accuracy"] > 0.0
    with pytest.raises(ValueError, match="defence"):
        backdoor_run(
            BackdoorRun(
                defence="krum-ish",
                spec=SPEC,
                sgd=sgd,
                tau=3,
                rounds=1,
                active_clients=4,
                seed=0,
                attackers=(),
                pdr=0.3,
                clip_bound=1.0,
                switch_round=1,
            )
        )


def test_a_detector_that_excludes_everyone_fails_the_detection_claim():
    rows = [
        {
            "defence": d,
            "attacked": a,
            "seed": s,
            "accuracy": 80.0,
            "backdoor": 90.0 if a and d == "none" else 5.0,
            "tpr": 1.0,
            "fpr": 1.0 if d == "fedgrad" else 0.0,
        }
        for d in ("none", "fedgrad")
        for a in (True, False)
        for s in (0, 1, 2)
    ]
    values = fedgrad_claims(pd.DataFrame(rows))
    claim = load_registry().get("fedgrad").claim("detection_tpr_minus_fpr")
    assert values["detection_tpr_minus_fpr"] == [0.0, 0.0, 0.0]
    assert judge(claim, values["detection_tpr_minus_fpr"], profile="cpu").sign_holds is False
    # a perfect detector passes the same rule
    assert judge(claim, [100.0, 100.0, 100.0], profile="cpu").sign_holds is True


def test_edge_case_attack_implants_a_backdoor_without_defence():
    sgd = LocalSGD(batch_size=16, lr=0.05, momentum=0.0)
    common = dict(
        defence="none",
        spec=SPEC,
        sgd=sgd,
        tau=5,
        rounds=6,
        active_clients=10,
        seed=0,
        pdr=0.33,
        clip_bound=1.0,
        switch_round=1,
        eval_every=6,
    )
    attacked = backdoor_run(BackdoorRun(attackers=(0, 1, 2), **common))
    clean = backdoor_run(BackdoorRun(attackers=(), **common))
    assert attacked["backdoor"] - clean["backdoor"] >= 30.0
