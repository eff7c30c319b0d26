"""Training systems II: out-of-core swap and recompute against plain training, sparse fine-tuning against full.

Rows:

- one training step (forward, backward) of the out-of-core chapter's 8-block MLP (width 512, batch 256) on
  one thread: plain, every block swapped to host memory through ``saved_tensors_hooks``, every block
  swapped to files on disk, and every block recomputed with ``torch.utils.checkpoint``; ratios to plain;
- one AdamW step of the gem chapter's MLP (64-512-512-256-10, batch 32): full fine-tuning against sparse
  fine-tuning with a 1% gradient mask (same dense optimiser, masked gradients); ratio to full;
- the parallelism oracle's measured seed (the chapter's cpu profile, fewer steps): one step per strategy and
  data-parallel micro-batch on two gloo ranks, measured and predicted from the calibrated platform constants
  (the FLOP rate measured on held-out models); ratio predicted / measured (target: within a factor 4 either way,
  which needs an idle host, since the calibration and the steps are timed at different moments).

On a shared 2-core host the numbers are indicative; the ratios are the targets.
"""

from __future__ import annotations

import torch
from timing import timed
from torch import nn

from repro.models import mlp
from repro.params import build_params, load_profiles, validate
from repro.registry import load_registry
from repro.training.chapters import parallelism_oracle
from repro.training.chapters.out_of_core import mlp_chain
from repro.training.memory import DiskStore, HostStore, run_chain
from repro.training.sparse_ft import GradientMask, build_masks

CHAPTER = load_registry().get("parallelism-oracle")


def _out_of_core() -> dict[str, float]:
    torch.set_num_threads(1)
    work = mlp_chain(512, 8, 256, 0)
    n = len(work.model)

    def step(policy: list[str], store: HostStore | None) -> None:
        work.model.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(run_chain(work.model, work.batch, policy, store), work.labels).backward()

    return {"plain": timed(lambda: step(["keep"] * n, None), repeat=5),
            "swap (host)": timed(lambda: step(["swap"] * n, HostStore()), repeat=5),
            "swap (disk)": timed(lambda: step(["swap"] * n, DiskStore()), repeat=5),
            "recompute": timed(lambda: step(["recompute"] * n, None), repeat=5)}


def _sparse_step() -> tuple[float, float]:
    torch.set_num_threads(1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def make(sparse: bool):
        torch.manual_seed(0)
        model = mlp(64, (512, 512, 256), 10)
        if sparse:
            body = {n: p for n, p in model.named_parameters() if not n.startswith("6.")}
            GradientMask(model, build_masks(body, {}, "random", "uniform", sum(p.numel() for p in body.values()) // 100))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return step

    full, sparse = make(False), make(True)
    return timed(lambda: [full() for _ in range(20)], repeat=3) / 20, timed(lambda: [sparse() for _ in range(20)], repeat=3) / 20


def run() -> list[tuple[str, float, str]]:
    """Rows ``(name, seconds, ratio)``."""
    ooc = _out_of_core()
    full, sparse = _sparse_step()
    plain = ooc["plain"]
    rows = [("training-systems: 8-block MLP step, plain", plain, "1.00x")]
    rows += [(f"training-systems: same step, {k} every block", v, f"{v / plain:.2f}x plain")
             for k, v in ooc.items() if k != "plain"]
    rows += [("training-systems: MLP AdamW step, full fine-tuning", full, "1.00x"),
             ("training-systems: same step, 1% gradient mask", sparse, f"{sparse / full:.2f}x full")]
    params = build_params(CHAPTER, validate(CHAPTER, {**load_profiles(CHAPTER)["cpu"], "steps": 3, "warmup": 1,
                                                      "pingpong_repeats": 5, "seeds": [0]}))
    seed = parallelism_oracle.measure_seed(params, 0)
    rows += [(f"parallelism-oracle: {s.strategy} step (b={s.micro_batch}), measured on 2 gloo ranks", s.measured_s,
              f"predicted/measured {s.predicted.total_s / s.measured_s:.2f}")
             for s in seed.steps]
    return rows


if __name__ == "__main__":
    for name, sec, ratio in run():
        print(f"{name:<58} {sec:8.4f}  {ratio}")
