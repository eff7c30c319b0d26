"""Fixtures of the offline-optimisation tests: one thread, tiny grid settings, a tiny grid and row tables."""

from __future__ import annotations

from typing import Callable

import matplotlib

matplotlib.use("Agg")  # tests only; notebooks never set a backend

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from repro.models import torch_threads  # noqa: E402
from repro.offopt.grid import Diagnostics, GridResult, MethodSpec, build_tasks, run_grid  # noqa: E402
from repro.offopt.pipeline import MethodSettings, method_settings  # noqa: E402
from repro.offopt.tasks import OfflineTask  # noqa: E402

TINY = method_settings(
    n_candidates=16,
    surrogate={"hidden": [16], "epochs": 4, "ensemble": 2},
    search={"grad_steps": 8, "cma_starts": 4, "cma_generations": 4, "cma_popsize": 6},
    root={
        "n_functions": 2,
        "n_seeds": 16,
        "gp_steps": 10,
        "gp_lr": 1e-2,
        "hidden": [16],
        "epochs": 2,
        "n_timesteps": 50,
        "sample_steps": 5,
    },
)
"""Pipeline settings small enough for unit tests."""


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="session")
def tiny() -> MethodSettings:
    """Settings of :func:`repro.offopt.grid.run_grid` for a fast grid."""
    return TINY


@pytest.fixture(scope="session")
def tasks() -> list[OfflineTask]:
    return build_tasks(["ackley", "rosenbrock"], 3, n=300, n_ref=2000)


@pytest.fixture(scope="session")
def grid(tasks) -> GridResult:
    methods = [
        "best_offline",
        "grad_ascent",
        "grad_ascent+ignite2",
        "cma_es",
        "cma_es+ignite2",
        MethodSpec(label="root (F=1)", method="root", root={"n_functions": 1}),
    ]
    return run_grid(tasks, methods, [0, 1], TINY, diagnostics=Diagnostics(which=("sharpness", "sensitivity")), progress=False)


@pytest.fixture(scope="session")
def rows_from() -> Callable[..., pd.DataFrame]:
    """Build grid rows from ``{(task, method, seed): score}`` (all percentiles equal to the score)."""

    def build(values: dict[tuple[str, str, int], float], best: float = 0.5) -> pd.DataFrame:
        out = []
        for (task, method, seed), v in values.items():
            opt, _, reg = method.partition("+")
            out.append(
                {
                    "task": task,
                    "method": method,
                    "optimizer": opt,
                    "regularizer": reg or "none",
                    "seed": seed,
                    "p100": v,
                    "p80": v,
                    "p50": v,
                    "best_offline": best,
                }
            )
        return pd.DataFrame(out)

    return build
