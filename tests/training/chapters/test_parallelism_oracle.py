"""The parallelism-oracle chapter: projected models, the sweeps, the claims, and one measured seed."""

from __future__ import annotations

import math

import pytest

from repro.registry import load_registry
from repro.training.chapters import parallelism_oracle as driver
from repro.training.oracle import PlatformConstants

SETUP = driver.ProjectionSetup(node=4, max_model_parallel=16, max_micro_batch=64)


@pytest.fixture(scope="module")
def works():
    return driver.workloads(128)


def test_projected_models_have_their_published_sizes(works):
    by_name = {w.name: w for w in works}
    params = {"AlexNet": 61_100_840, "VGG16": 138_357_544, "ResNet-50": 25_557_032}
    for name, n in params.items():
        assert sum(r.params for r in by_name[name].table) == n, name
    # forward multiply-adds: VGG16 15.47 G, ResNet-50 4.09 G (2 FLOPs each)
    assert sum(r.flops for r in by_name["VGG16"].table) == pytest.approx(2 * 15.47e9, rel=0.01)
    assert sum(r.flops for r in by_name["ResNet-50"].table) == pytest.approx(2 * 4.09e9, rel=0.01)
    assert [w.three_d for w in works] == [False, False, False, True]


def test_communication_share_falls_as_bandwidth_rises(works):
    table = driver.bandwidth_sweep(works, 256, [1.0, 12.5, 125.0], SETUP)
    shares = table["data comm share %"].tolist()
    assert shares[0] > shares[1] > shares[2] > 0


def test_hybrid_wins_where_data_parallelism_cannot_hold_a_volume(works):
    table = driver.memory_sweep(works, 256, [0.05, 0.3, 16.0], SETUP)
    row = dict(zip(table["memory GB"], table.to_dict("records")))
    assert row[16.0]["data micro-batch"] >= 1 and math.isfinite(row[16.0]["3-D data / hybrid"])
    assert row[0.3]["data micro-batch"] == 0 and row[0.3]["hybrid micro-batch"] >= 1
    assert row[0.3]["3-D data / hybrid"] == math.inf
    assert math.isnan(row[0.05]["3-D data / hybrid"])  # nothing fits
    assert driver.flip_interval(table["memory GB"].tolist(), table["3-D data / hybrid"].tolist(), 1.0) == (0.3, 16.0)


def test_flip_interval_by_hand():
    assert driver.flip_interval([1, 2, 4, 8], [60, 55, 45, 30], 50.0) == (2.0, 4.0)
    assert driver.flip_interval([1, 2], [60, 55], 50.0) is None


def test_measured_seed_predicts_every_measured_strategy_and_the_claims_are_complete(works):
    # How close prediction and measurement are is a timing question: `make bench` reports the ratios.
    seed = driver.measure_seed(0, ranks=2, micro_batch=16, image=64, width_divisor=8, steps=3, warmup=1,
                               pingpong_repeats=5)
    assert seed.gradient_error < 1e-5
    assert set(seed.measured_s) <= set(seed.predicted) and seed.measured_s
    for s, measured in seed.measured_s.items():
        assert measured > 0 and math.isfinite(seed.predicted[s].total_s) and seed.predicted[s].total_s > 0, s
    assert seed.predicted["data"].communication_s > 0 and seed.platform.flops_per_s > 0
    values = driver.claims([seed], works, 256, SETUP)
    chapter = load_registry().get("parallelism-oracle")
    assert set(values) == {c.id for c in chapter.claims}
    assert all(math.isfinite(v) for vs in values.values() for v in vs)
    assert values["allreduce_limits_data"] == [driver.data_comm_share(works, 256, PlatformConstants.abci(), SETUP)]
