"""Labelled/unlabelled splits and distillation on unlabelled data."""

from __future__ import annotations

import copy

import numpy as np
import torch

from repro.federated.feddf import DistillSteps, distill, ensemble_logits, labelled_split, server_distill
from repro.federated.kd import kd_loss
from repro.models import mlp


def test_labelled_split_partitions_and_respects_share():
    s = labelled_split(50, 0.2, seed=0)
    assert len(s.labelled) == 10 and sorted(np.concatenate([s.labelled, s.unlabelled]).tolist()) == list(range(50))


def test_ensemble_is_mean_logit():
    torch.manual_seed(0)
    models, x = [mlp(4, [5], 3) for _ in range(3)], torch.randn(6, 4)
    with torch.no_grad():
        expected = sum(m(x) for m in models) / 3
    torch.testing.assert_close(ensemble_logits(models)(x), expected)


def test_student_equal_to_teacher_stays_put():
    torch.manual_seed(1)
    teacher = mlp(4, [5], 3)
    student = copy.deepcopy(teacher)
    x = np.random.default_rng(0).standard_normal((32, 4)).astype(np.float32)
    loss = server_distill(student, [teacher], x, DistillSteps(steps=3, batch_size=8, lr=0.01, temperature=3.0, seed=0))
    assert loss < 1e-10
    for a, b in zip(student.parameters(), teacher.parameters()):
        torch.testing.assert_close(a, b)


def test_distillation_moves_student_towards_teacher():
    torch.manual_seed(2)
    teacher, student = mlp(4, [16], 3), mlp(4, [16], 3)
    x = np.random.default_rng(1).standard_normal((256, 4)).astype(np.float32)
    xt = torch.from_numpy(x)
    before = kd_loss(student(xt), teacher(xt), 2.0).item()
    distill(student, ensemble_logits([teacher]), x, DistillSteps(steps=200, batch_size=32, lr=0.1, temperature=2.0, seed=0))
    assert kd_loss(student(xt), teacher(xt), 2.0).item() < 0.5 * before
