"""The fedaudio driver: equal tuning budgets, the noise ladders and the claims read from them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from repro.federated.arrays import to_arrayrecord
from repro.federated.audio import KEYWORD_CLASSES
from repro.federated.chapters import fedaudio as driver
from repro.federated.engine import History
from repro.federated.keywords import keyword_cnn, keyword_initial
from repro.models import get_weights
from repro.params import ParameterError
from repro.results import Evidence

TINY = driver.Params(num_speakers=4, train_clips=8, test_clips=8, valid_clips=8, imbalance=1.0, active_clients=2,
                     steps=1, batch_size=8, rounds=2, lr=0.1, client_lrs=(0.05, 0.1), server_lrs=(0.01, 0.1),
                     tune_seed=9, snrs=(0.0,), label_noises=(0.5,), seeds=(0, 1), workers=1, device="cpu",
                     eval_every=1)


def test_tuning_gives_every_aggregator_the_same_number_of_settings_and_drops_a_diverging_one():
    # a planted diverging setting: a client learning rate of 1e6 blows the CNN's weights up in one step
    tuned = driver.tune(replace(TINY, client_lrs=(0.05, 1e6)))
    assert {len(t.candidates) for t in tuned.values()} == {2}
    avg = tuned["fedavg"]
    assert [c.lr for c in avg.diverged] == [1e6] and avg.lr == 0.05
    assert all(tuned[a].lr == 0.1 for a in ("fedadam", "fedyogi")) and tuned["fedadam"].server_lr in (0.01, 0.1)
    table = driver.tuning_table(tuned)
    assert table[table.setting == "client lr 1e+06"].diverged.tolist() == ["yes"]
    assert table[table.aggregator == "FedAvg"].chosen.tolist() == ["yes", ""]
    final = pd.DataFrame([{"aggregator": "fedavg", "condition": "snr", "level": 0.0, "seed": 1, "diverged": True},
                          {"aggregator": "fedavg", "condition": "clean", "level": 0.0, "seed": 1, "diverged": False}])
    text = driver.divergence_text(tuned, final)
    assert "FedAvg at client lr 1e+06" in text and "FedAvg snr 0 seed 1" in text
    with pytest.raises(ValueError, match="grids of one length"):
        driver.candidates("fedavg", 0.1, [0.1, 0.2], [0.01])
    with pytest.raises(ValueError, match="valid_clips"):
        driver.tune(replace(TINY, valid_clips=0))


def test_a_run_with_non_finite_weights_or_loss_is_diverged():
    history = History(rounds=[0, 1], accuracy=[10.0, 12.5], loss=[2.0, 1.9], final_arrays=keyword_initial(0))
    assert not driver.diverged(history)
    assert driver.diverged(replace(history, loss=[2.0, float("nan")]))
    broken = get_weights(keyword_cnn(0))
    first = next(iter(broken))
    broken[first] = np.full_like(broken[first], np.inf)
    assert driver.diverged(replace(history, final_arrays=to_arrayrecord(broken)))


def frame(clean: list[float], snr: dict[float, list[float]], eps: dict[float, list[float]]) -> pd.DataFrame:
    rows = [{"aggregator": "fedavg", "condition": "clean", "level": 0.0, "seed": s, "budget_accuracy": a}
            for s, a in enumerate(clean)]
    rows += [{"aggregator": "fedadam", "condition": "clean", "level": 0.0, "seed": s, "budget_accuracy": a - 2}
             for s, a in enumerate(clean)]
    for condition, levels in (("snr", snr), ("label_noise", eps)):
        rows += [{"aggregator": "fedavg", "condition": condition, "level": v, "seed": s, "budget_accuracy": a}
                 for v, accs in levels.items() for s, a in enumerate(accs)]
    return pd.DataFrame(rows)


def test_ladders_run_from_clean_to_noisiest_and_claims_read_them():
    final = frame([90, 80], {0.0: [40, 30], 20.0: [85, 79], 10.0: [70, 60]}, {0.1: [88, 81], 0.5: [50, 50]})
    assert list(driver.ladder(final, "snr").columns) == ["clean", 20.0, 10.0, 0.0]
    assert list(driver.ladder(final, "label_noise").columns) == ["clean", 0.1, 0.5]
    c = driver.claims(driver.Results(final=final, curves=pd.DataFrame(), tuned={}, trivial=12.5))
    values = {k: list(v.values) for k, v in c.items() if isinstance(v, Evidence)}
    assert values["snr_drop"] == [50.0, 50.0]
    assert values["snr_monotone"] == [5.0, 1.0]
    assert values["label_noise_monotone"] == [2.0, -1.0]  # the second seed rises from clean to 0.1
    assert values["fedadam_shortfall"] == [2.0, 2.0]
    shortfall = c["fedadam_shortfall"]
    assert isinstance(shortfall, Evidence) and shortfall.arms == {"FedAvg": [90.0, 80.0], "FedAdam": [88.0, 78.0]}
    assert shortfall.trivial == 12.5


def test_the_trivial_level_is_chance_on_the_class_balanced_test_set():
    assert driver.majority_share(TINY.task()) == pytest.approx(100.0 / len(KEYWORD_CLASSES))


@pytest.mark.parametrize(("change", "named"), [
    ({"active_clients": 5}, "active_clients"),
    ({"server_lrs": (0.01,)}, "client_lrs"),
    ({"client_lrs": (), "server_lrs": ()}, "client_lrs"),
    ({"tune_seed": 1}, "tune_seed"),
    ({"label_noises": (0.0,)}, "label_noises"),
    ({"label_noises": (1.0,)}, "label_noises"),
    ({"eval_every": 3}, "eval_every"),
])
def test_impossible_combinations_are_refused_naming_the_parameter(change, named):
    with pytest.raises(ParameterError, match=named):
        replace(TINY, **change).checks()
