"""Data, filter, channel and spatial parallelism on 2 gloo ranks compute one process's step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from repro.training.launcher import launch
from repro.training.model_parallel import STRATEGIES, ShardedCNN, StrategyJob, gradients_rank, serial_batch
from repro.training.overlap import vgg_mini


def test_every_strategy_gives_the_serial_gradients():
    torch.manual_seed(0)
    model = vgg_mini(10, 16, 64)
    job = StrategyJob(model=model, image=64, micro_batch=4, strategies=STRATEGIES, steps=1, warmup=0, seed=3)
    per_rank = launch(gradients_rank, 2, (job,), timeout_s=300)
    for s in STRATEGIES:
        x, y = serial_batch(job, s, 2)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        for grads in per_rank:
            assert len(grads[s]) == len(list(model.parameters()))
            for p, g in zip(model.parameters(), grads[s]):
                np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=s)


def test_data_parallel_batch_is_both_ranks_samples_and_model_parallel_batch_is_one():
    job = StrategyJob(model=vgg_mini(10, 16, 64), image=64, micro_batch=4, strategies=STRATEGIES, steps=1, warmup=0)
    assert len(serial_batch(job, "data", 2)[0]) == 8
    assert len(serial_batch(job, "filter", 2)[0]) == 4


def test_shapes_the_strategies_cannot_split_are_refused():
    model = vgg_mini(10, 16, 64)  # 4 channels in the first layer
    with pytest.raises(ValueError, match="divisible"):
        ShardedCNN(model, "filter", 0, 3)
    strided = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.Flatten(), nn.Linear(4, 2))
    with pytest.raises(ValueError, match="stride-1"):
        ShardedCNN(strided, "spatial", 0, 2)
    with pytest.raises(ValueError, match="unknown strategy"):
        ShardedCNN(model, "pipeline", 0, 2)
