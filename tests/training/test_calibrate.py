"""Calibration on this machine, and the oracle's data-parallel step against 2 real gloo ranks."""

from __future__ import annotations

import pytest
import torch

from repro.training.calibrate import (
    DataParallelJob,
    PingPong,
    data_parallel_rank,
    fit_alpha_beta,
    flop_rate,
    held_out_rate,
    pingpong_rank,
    tiny_cnn,
)
from repro.training.launcher import launch
from repro.training.layertable import layer_table
from repro.training.oracle import PlatformConstants, predict


def test_fit_alpha_beta_recovers_a_line():
    pp = PingPong(sizes=(100, 1000, 10000), seconds=(1e-5 + 100 * 2e-9, 1e-5 + 1000 * 2e-9, 1e-5 + 10000 * 2e-9))
    net = fit_alpha_beta(pp)
    assert abs(net.alpha - 1e-5) < 1e-9 and abs(net.beta - 2e-9) < 1e-13


def test_held_out_rate_pools_the_models_flops_over_their_times():
    torch.set_num_threads(1)
    models = [(tiny_cnn(), torch.randn(4, 3, 16, 16)), (tiny_cnn(), torch.randn(8, 3, 16, 16))]
    rate = held_out_rate(models, repeats=2)
    assert rate > 0
    with pytest.raises(ValueError, match="at least one calibration model"):
        held_out_rate([], repeats=2)


def test_data_parallel_prediction_and_measurement_are_positive():
    # how close they are is a timing question: `make bench` reports the ratio
    torch.set_num_threads(1)
    job = DataParallelJob(micro_batch=16, image=16, steps=5, warmup=2)
    model = tiny_cnn()
    rate = flop_rate(model, torch.randn(job.micro_batch, 3, job.image, job.image))
    net = fit_alpha_beta(launch(pingpong_rank, 2, ((64, 4096, 65536, 262144), 5), timeout_s=300)[0])
    plat = PlatformConstants(memory_bytes=1e12, flops_per_s=rate, net=net)
    table = layer_table(model, torch.zeros(1, 3, job.image, job.image))
    pred = predict(table, "data", 2, job.micro_batch, 2 * job.micro_batch, plat)  # one iteration
    measured = max(launch(data_parallel_rank, 2, (job,), timeout_s=300))
    assert pred.communication_s > 0 and pred.compute_s > 0 and measured > 0
