"""Training systems: the overlap engine's step time against DDP's, and a KAKURENBO epoch against a plain one.

Rows:

- one training step of VGG-A-mini (64x64 inputs, local batch 16) on 2 local gloo ranks, for
  torch's ``DistributedDataParallel`` (the reference), the overlap engine (per-tensor async
  allreduce from gradient hooks) and allreduce-after-backward; the slower rank's mean step time over
  20 steps after 5 warm-up steps, as a ratio to DDP;
- one epoch of the kakurenbo chapter's MLP on 8000 generated samples: plain uniform SGD against an
  epoch with KAKURENBO hiding (F = 0.3, selection, training on the visible samples and the forward
  refresh of the hidden ones), best of 3, as a ratio to the plain epoch.

On a shared 2-core host both are indicative; the ratios are the targets.
"""

from __future__ import annotations

import numpy as np
import torch
from timing import timed

from repro.models import mlp
from repro.training import kakurenbo as hiding
from repro.training.data import synthetic_classification
from repro.training.launcher import launch
from repro.training.overlap import MODES, TimingJob, timing_rank
from repro.training.sample_loop import forward_stats, train_epoch


def _steps() -> dict[str, float]:
    job = TimingJob(seeds=(0,), local_batch=16, image=64, num_classes=10, width_divisor=8, warmup=5, iterations=20)
    per_rank = launch(timing_rank, 2, (job,), timeout_s=600)
    return {m: max(r.seconds_per_iteration for rows in per_rank for r in rows if r.mode == m) for m in MODES}


def _epochs() -> tuple[float, float]:
    torch.set_num_threads(1)
    split = synthetic_classification(10000, 40, 20, 10, class_sep=1.2, flip_y=0.02, seed=0)
    torch.manual_seed(0)
    model = mlp(split.num_features, (256, 256), split.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    n = len(split.train)
    state = hiding.HidingState(n)
    everything = hiding.Selection(visible=np.arange(n), hidden=np.arange(0), candidates=0, moved_back=0)
    for e in range(3):  # train a little so that confident samples exist
        state.update(train_epoch(model, opt, split.train, hiding.visible_sampler(everything, gen), 64, 0.05), e)

    def plain() -> None:
        train_epoch(model, opt, split.train, hiding.visible_sampler(everything, gen), 64, 0.01)

    def hidden() -> None:
        sel = state.select(0.3)
        state.update(train_epoch(model, opt, split.train, hiding.visible_sampler(sel, gen), 64, 0.01 / 0.7), 3)
        if len(sel.hidden):
            state.update(forward_stats(model, split.train, sel.hidden), 3)

    return timed(plain), timed(hidden)


def run() -> list[tuple[str, float, str]]:
    """Rows ``(name, seconds, ratio)``."""
    steps = _steps()
    plain, hidden = _epochs()
    ddp = steps["ddp"]
    return [
        ("training: VGG-A-mini step, 2 gloo ranks, DDP", ddp, "1.00x"),
        ("training: same step, overlap engine", steps["overlap"], f"{steps['overlap'] / ddp:.2f}x DDP"),
        ("training: same step, allreduce after backward", steps["no_overlap"], f"{steps['no_overlap'] / ddp:.2f}x DDP"),
        ("training: MLP epoch, plain uniform SGD", plain, "1.00x"),
        ("training: MLP epoch, KAKURENBO hiding (F=0.3)", hidden, f"{hidden / plain:.2f}x plain"),
    ]


if __name__ == "__main__":
    for name, sec, ratio in run():
        print(f"{name:<50} {sec:8.4f}  {ratio}")
