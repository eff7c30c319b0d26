"""The biased-activation chapter driver: claims from a known frame."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.federated.chapters.biased_activation import claims as activation_claims
from repro.federated.chapters.biased_activation import sign_ablation


def test_activation_claims_from_a_known_frame():
    rows = [{"policy": p, "beta": b, "seed": s, "accuracy": 0.0, "budget_accuracy": acc + s}
            for s in (0, 1) for p, b, acc in (("uniform", 0.0, 70.0), ("power-of-choice", 0.0, 74.0),
                                              ("multi-metric", 1.0, 75.0), ("multi-metric", 2.0, 60.0))]
    c = activation_claims(pd.DataFrame(rows), 1.0)
    assert c == {"acc_gain_vs_uniform": [5.0, 5.0], "acc_gain_vs_power_of_choice": [1.0, 1.0]}
    with pytest.raises(ValueError, match="beta"):
        activation_claims(pd.DataFrame(rows), 0.5)


def test_sign_ablation_needs_the_opposite_beta():
    rows = [{"policy": "multi-metric", "beta": b, "seed": s, "accuracy": 0.0, "budget_accuracy": acc}
            for s in (0, 1) for b, acc in ((1.0, 75.0), (-1.0, 70.0))]
    assert sign_ablation(pd.DataFrame(rows), 1.0) == [5.0, 5.0]
    with pytest.raises(ValueError, match="opposite sign"):
        sign_ablation(pd.DataFrame(rows), 2.0)
