"""Experiment drivers the federated chapters call (configure, run, collect).

They wire a :class:`~repro.fl.task.TaskSpec`, a strategy and an engine
together and return tidy records; notebooks only choose the settings, plot
and explain.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
from flwr.app import ArrayRecord
from tqdm import tqdm

from repro.fl.client import from_arrayrecord, make_client_app, to_arrayrecord
from repro.fl.engine import History, run_federated
from repro.fl.fedlama import FedLAMA
from repro.fl.strategies import SeededFedAvg
from repro.fl.task import TaskSpec, build_model, evaluate
from repro.models import get_weights, set_weights


def central_evaluator(spec: TaskSpec) -> Callable[[ArrayRecord], dict[str, float]]:
    """A function evaluating a global model on the task's test set."""
    model = build_model(spec, seed=0)

    def _eval(arrays: ArrayRecord) -> dict[str, float]:
        set_weights(model, from_arrayrecord(arrays))
        return evaluate(spec, model)

    return _eval


def initial_arrays(spec: TaskSpec, seed: int) -> ArrayRecord:
    """The initial global model of a run with ``seed``."""
    return to_arrayrecord(get_weights(build_model(spec, seed)))


def eval_schedule(num_rounds: int, every: int, multiple_of: int = 1) -> list[int]:
    """Rounds to evaluate at: 0, then every ``every`` rounds rounded up to ``multiple_of``, and the last."""
    step = max(every, multiple_of)
    step = int(np.ceil(step / multiple_of) * multiple_of)
    rounds = list(range(0, num_rounds + 1, step))
    if rounds[-1] != num_rounds:
        rounds.append(num_rounds)
    return rounds


@dataclass(frozen=True)
class LocalSGD:
    """Clients' local training settings."""

    batch_size: int = 16
    lr: float = 0.05
    momentum: float = 0.0

    def config(self, steps: int) -> dict[str, float | int]:
        """The ``local`` dict strategies send to clients."""
        return {"steps": steps, "lr": self.lr, "momentum": self.momentum, "batch-size": self.batch_size}


def run_method(
    method: str,
    spec: TaskSpec,
    sgd: LocalSGD,
    tau: int,
    phi: int,
    rounds: int,
    active: int,
    seed: int,
    eval_every: int,
    engine: str = "inprocess",
    progress: str | None = None,
) -> tuple[History, SeededFedAvg]:
    """Run one of FedLAMA's comparison methods for the same total local steps.

    Parameters
    ----------
    method
        ``fedavg`` (interval ``tau``), ``fedavg_long`` (interval ``phi*tau``,
        ``rounds/phi`` rounds) or ``fedlama`` (base interval ``tau``, multiplier ``phi``).
    spec, sgd
        Task and local training.
    tau, phi, rounds, active
        Base interval (local steps), multiplier, rounds of ``tau`` steps, clients per round.
    seed
        Run seed (model init, sampling, mini-batches).
    eval_every
        Evaluate every this many rounds of ``tau`` steps.
    engine
        ``inprocess`` or ``ray``.
    progress
        Label of a per-round progress bar (``None``: none).
    """
    if rounds % phi:
        raise ValueError(f"rounds ({rounds}) must be a multiple of phi ({phi})")
    app = make_client_app(spec)
    init = initial_arrays(spec, seed)
    ev = central_evaluator(spec)
    if method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(active, sgd.config(tau), seed=seed)
        n, sched = rounds, eval_schedule(rounds, eval_every)
    elif method == "fedavg_long":
        strat = SeededFedAvg(active, sgd.config(tau * phi), seed=seed, resample_every=1)
        n, sched = rounds // phi, eval_schedule(rounds // phi, max(1, eval_every // phi))
    elif method == "fedlama":
        strat = FedLAMA(active, sgd.config(tau), seed=seed, phi=phi)
        n, sched = rounds, eval_schedule(rounds, eval_every, multiple_of=phi)
    else:
        raise ValueError(f"unknown method {method!r}")
    hist = run_federated(strat, app, spec.num_clients, init, n, ev, sched, engine=engine, progress=progress)
    if method == "fedavg_long":  # report progress in rounds of tau steps, like the others
        hist.rounds = [r * phi for r in hist.rounds]
    return hist, strat


def _sweep_job(job: tuple) -> dict:
    """One run of :func:`fedlama_sweep` (module level, so worker processes can run it)."""
    method, phi, seed, spec, sgd, tau, rounds, active, eval_every, engine, progress = job
    hist, strat = run_method(method, spec, sgd, tau, phi, rounds, active, seed, eval_every, engine,
                             progress=progress)
    assert strat.comm is not None
    return {"method": method, "phi": phi, "seed": seed, "accuracy": hist.final_accuracy, "comm": strat.comm.total,
            "curve": list(zip(hist.rounds, hist.accuracy, hist.comm)),
            "timeline": strat.timeline if isinstance(strat, FedLAMA) else None}


def fedlama_sweep(
    spec: TaskSpec, sgd: LocalSGD, tau: int, phis: list[int], rounds: int, active: int, seeds: list[int],
    eval_every: int, engine: str = "inprocess", workers: int = 1,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[int, int], dict[int, dict[str, int]]]]:
    """FedAvg(tau), FedAvg(phi tau) and FedLAMA(tau, phi) for every phi and seed.

    Parameters
    ----------
    workers
        Independent runs to execute at once in separate processes (``spawn``).
        Every run is seeded on its own, so the results do not depend on it.
        Ignored (1) with the Ray engine, which parallelises clients itself.

    Returns
    -------
    final : DataFrame
        One row per (method, phi, seed): final accuracy and total communication.
    curves : DataFrame
        Accuracy against communication and rounds, for every run.
    timelines : dict
        ``(phi, seed) -> round -> layer -> interval`` of the FedLAMA runs.
    """
    runs = [("fedavg", 1)] + [(m, phi) for phi in phis for m in ("fedavg_long", "fedlama")]
    jobs = [(m, phi, seed, spec, sgd, tau, rounds, active, eval_every, engine, None) for seed in seeds for m, phi in runs]
    if workers > 1 and engine == "inprocess" and len(jobs) > 1:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = [pool.submit(_sweep_job, j) for j in jobs]
            for _ in tqdm(as_completed(futures), total=len(futures), desc="runs", leave=False):
                pass
            done = [f.result() for f in futures]
    else:
        done = [_sweep_job(j[:-1] + (f"{j[0]} phi={j[1]} seed={j[2]}",)) for j in tqdm(jobs, desc="runs", leave=False)]
    rows = [{k: d[k] for k in ("method", "phi", "seed", "accuracy", "comm")} for d in done]
    curves = [{"method": d["method"], "phi": d["phi"], "seed": d["seed"], "round": r, "accuracy": a, "comm": c}
              for d in done for r, a, c in d["curve"]]
    timelines = {(d["phi"], d["seed"]): d["timeline"] for d in done if d["timeline"] is not None}
    return pd.DataFrame(rows), pd.DataFrame(curves), timelines


def fedlama_claims(final: pd.DataFrame, phi: int) -> dict[str, list[float]]:
    """Per-seed values of the chapter's three claims at multiplier ``phi``."""
    base = final[final.method == "fedavg"].set_index("seed")
    lama = final[(final.method == "fedlama") & (final.phi == phi)].set_index("seed")
    long = final[(final.method == "fedavg_long") & (final.phi == phi)].set_index("seed")
    seeds = sorted(base.index)
    return {
        "acc_gain_vs_fedavg_phitau": [lama.accuracy[s] - long.accuracy[s] for s in seeds],
        "comm_reduction_vs_fedavg_tau": [100.0 * (1 - lama.comm[s] / base.comm[s]) for s in seeds],
        "acc_drop_vs_fedavg_tau": [base.accuracy[s] - lama.accuracy[s] for s in seeds],
    }
