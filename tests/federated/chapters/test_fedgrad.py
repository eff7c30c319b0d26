"""The FedGrad chapter driver: one run's record under attack and without attackers."""

from __future__ import annotations

import numpy as np
import pytest
from repro.federated.chapters.fedgrad import BackdoorRun
from repro.federated.chapters.fedgrad import run as backdoor_run
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec

SPEC = TaskSpec(dataset="digits", num_clients=10, alpha=0.5, hidden=(16,))


def test_backdoor_run_reports_main_and_backdoor_accuracy_and_rates():
    sgd = LocalSGD(batch_size=16, lr=0.05, momentum=0.0)
    clean = backdoor_run(BackdoorRun("multi-krum", SPEC, sgd, 3, 2, 4, 0, (), 0.3, 1.0, 1, eval_every=2))
    assert clean["attacked"] is False and np.isnan(clean["tpr"]) and clean["fpr"] == pytest.approx(0.25)
    hit = backdoor_run(BackdoorRun("none", SPEC, sgd, 3, 2, 4, 0, (0, 1, 2), 0.3, 1.0, 1, eval_every=2))
    assert hit["tpr"] == 0.0 and hit["fpr"] == 0.0 and 0.0 <= hit["backdoor"] <= 100.0
    with pytest.raises(ValueError, match="defence"):
        backdoor_run(BackdoorRun("krum-ish", SPEC, sgd, 3, 1, 4, 0, (), 0.3, 1.0, 1))
