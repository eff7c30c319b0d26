"""Drivers of the newer federated chapters: independent runs in worker processes, and their sweeps.

:func:`parallel_map` is the one place that spreads seeded, independent runs
over processes; the chapter drivers below build the job lists and tidy the
records into data frames for the notebooks.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.fl.client import make_client_app
from repro.fl.engine import run_federated
from repro.fl.experiments import LocalSGD, central_evaluator, eval_schedule, initial_arrays
from repro.fl.fedluar import FedLUAR, TopKSparsified, uplink_ratio
from repro.fl.task import TaskSpec, build_model
from repro.models import count_parameters


def parallel_map(fn: Callable[[Any], dict], jobs: Sequence[Any], workers: int = 1, desc: str = "runs") -> list[dict]:
    """Apply ``fn`` to every job, in ``workers`` spawned processes when ``workers > 1``; results in job order.

    ``fn`` must be a module-level function and each job picklable.  Every run
    is seeded on its own, so the results do not depend on ``workers``.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1 or len(jobs) <= 1:
        return [fn(j) for j in tqdm(jobs, desc=desc, leave=False)]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        return list(tqdm(pool.map(fn, jobs), total=len(jobs), desc=desc, leave=False))


# ----- FedLUAR ---------------------------------------------------------------
FEDLUAR_METHODS = ("fedavg", "fedluar", "drop", "uniform", "topk")


def fedluar_run(method: str, spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int, seed: int,
                delta: int = 0, keep: float = 1.0, eval_every: int = 10, engine: str = "inprocess") -> dict:
    """One run of FedLUAR's comparison.

    Parameters
    ----------
    method
        ``fedavg``, ``fedluar`` (recycle, score selection), ``drop`` (score
        selection, updates dropped), ``uniform`` (recycle, uniform selection)
        or ``topk`` (top-k sparsified updates keeping fraction ``keep``).
    spec, sgd, tau, rounds, active, seed
        Task, local training, local steps per round, rounds, clients per round, run seed.
    delta
        Layers recycled (or dropped) per round.
    keep
        Fraction of each update kept by ``topk``.
    eval_every, engine
        Evaluation period (rounds) and engine.

    Returns
    -------
    dict
        ``method, delta, seed, accuracy, uplink`` (fraction of FedAvg's upload),
        ``curve`` (round, accuracy, uplink so far in units of one FedAvg round's upload) and, for the
        recycling runs, ``recycled`` (round -> layers).
    """
    if method not in FEDLUAR_METHODS:
        raise ValueError(f"method must be one of {FEDLUAR_METHODS}, got {method!r}")
    local = sgd.config(tau)
    if method == "topk":
        strat: FedLUAR | TopKSparsified = TopKSparsified(active, local, seed=seed, keep=keep)
    else:
        d = 0 if method == "fedavg" else delta
        strat = FedLUAR(active, local, seed=seed, delta=d, mode="drop" if method == "drop" else "recycle",
                        selection="uniform" if method == "uniform" else "score")
    full = sum(count_parameters(build_model(spec, seed=0)).values())
    hist = run_federated(strat, make_client_app(spec), spec.num_clients, initial_arrays(spec, seed), rounds,
                         central_evaluator(spec), eval_schedule(rounds, eval_every), engine=engine)
    cum = np.cumsum(strat.uplink) / (active * full)
    curve = [(r, a, float(cum[r - 1]) if r else 0.0) for r, a in zip(hist.rounds, hist.accuracy)]
    return {"method": method, "delta": 0 if method == "fedavg" else delta, "seed": seed,
            "accuracy": hist.final_accuracy, "uplink": uplink_ratio(strat, full, rounds), "curve": curve,
            "recycled": getattr(strat, "recycled", None)}


def _fedluar_job(job: tuple) -> dict:
    return fedluar_run(*job)


def fedluar_sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int, seeds: list[int],
                  deltas: list[int], eval_every: int, engine: str = "inprocess", workers: int = 1,
                  ) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[int, int], dict[int, list[str]]]]:
    """FedAvg, then for each ``delta``: FedLUAR, the drop and uniform ablations, and top-k at FedLUAR's uplink.

    The top-k runs come second: each keeps the fraction of the update that the
    FedLUAR run with the same seed and ``delta`` actually uploaded, so the two
    are compared at equal uplink.

    Returns
    -------
    final : DataFrame
        One row per run: ``method, delta, seed, accuracy, uplink``.
    curves : DataFrame
        Accuracy and uplink so far (in FedAvg rounds' worth of uploads) at each evaluation.
    recycled : dict
        ``(delta, seed) -> round -> layers`` of the FedLUAR runs.
    """
    if any(d < 1 for d in deltas):
        raise ValueError(f"deltas must be >= 1, got {deltas}")
    w = workers if engine == "inprocess" else 1
    first = [("fedavg", spec, sgd, tau, rounds, active, s, 0, 1.0, eval_every, engine) for s in seeds]
    first += [(m, spec, sgd, tau, rounds, active, s, d, 1.0, eval_every, engine)
              for d in deltas for m in ("fedluar", "drop", "uniform") for s in seeds]
    done = parallel_map(_fedluar_job, first, w, desc="FedAvg, FedLUAR and ablations")
    keep = {(r["delta"], r["seed"]): r["uplink"] for r in done if r["method"] == "fedluar"}
    second = [("topk", spec, sgd, tau, rounds, active, s, d, keep[(d, s)], eval_every, engine)
              for d in deltas for s in seeds]
    done += parallel_map(_fedluar_job, second, w, desc="top-k at FedLUAR's uplink")
    final = pd.DataFrame([{k: r[k] for k in ("method", "delta", "seed", "accuracy", "uplink")} for r in done])
    curves = pd.DataFrame([{"method": r["method"], "delta": r["delta"], "seed": r["seed"], "round": rd,
                            "accuracy": a, "uplink": u} for r in done for rd, a, u in r["curve"]])
    recycled = {(r["delta"], r["seed"]): r["recycled"] for r in done if r["method"] == "fedluar"}
    return final, curves, recycled


def fedluar_claims(final: pd.DataFrame, delta: int) -> dict[str, list[float]]:
    """Per-seed values of the FedLUAR chapter's claims at ``delta``."""
    def pick(method: str) -> pd.DataFrame:
        d = 0 if method == "fedavg" else delta
        return final[(final.method == method) & (final.delta == d)].set_index("seed")

    avg, luar, drop, topk = pick("fedavg"), pick("fedluar"), pick("drop"), pick("topk")
    seeds = sorted(avg.index)
    return {
        "uplink_cost_pct": [100.0 * luar.uplink[s] for s in seeds],
        "acc_drop_vs_fedavg": [avg.accuracy[s] - luar.accuracy[s] for s in seeds],
        "acc_gain_vs_drop": [luar.accuracy[s] - drop.accuracy[s] for s in seeds],
        "acc_gain_vs_topk": [luar.accuracy[s] - topk.accuracy[s] for s in seeds],
    }
