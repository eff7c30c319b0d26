"""Offline optimisation: cost of the BOSS and IGNITE regularisers per training epoch, relative to vanilla.

Each row trains the chapters' cpu-profile surrogate (2 x 64 MLP, batch 128) on
the same 1000-design offline set for a few epochs and reports the best-of-3
seconds per epoch, with the ratio to the vanilla epoch.  Timings live here,
never in the tests.
"""

from __future__ import annotations

from timing import timed

from repro.models import torch_threads
from repro.offopt.pipeline import make_regularizer
from repro.offopt.surrogate import TrainSettings, train_surrogate
from repro.offopt.tasks import OfflineTask, make_task

EPOCHS = 5


def _epoch_seconds(task: OfflineTask, reg: str | None, repeat: int = 3) -> float:
    settings = TrainSettings(hidden=(64, 64), epochs=EPOCHS, batch_size=128)
    return timed(lambda: train_surrogate(task.x_z, task.y_z, settings, seed=0,
                                         regularizer=None if reg is None else make_regularizer(reg, seed=0)),
                 repeat) / EPOCHS


def run() -> list[tuple[str, float, str]]:
    """Rows ``(name, seconds per epoch, ratio to vanilla)``."""
    task = make_task("ackley", 8, n=2000, seed=0, n_ref=20_000)
    rows = []
    with torch_threads(1):
        base = _epoch_seconds(task, None)
        rows.append(("offopt: surrogate epoch, vanilla", base, "1.00x"))
        for reg in ("boss", "ignite", "ignite2"):
            s = _epoch_seconds(task, reg)
            rows.append((f"offopt: surrogate epoch, +{reg}", s, f"{s / base:.2f}x vanilla"))
    return rows


if __name__ == "__main__":
    for name, sec, ratio in run():
        print(f"{name:<40} {sec:8.4f}  {ratio}")
