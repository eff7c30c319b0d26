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

from repro.fl.activation import ActivatedFedAvg, make_policy, make_probing_client_app
from repro.fl.client import make_client_app
from repro.fl.engine import run_federated
from repro.fl.experiments import LocalSGD, central_evaluator, eval_schedule, initial_arrays
from repro.fl.fedluar import FedLUAR, TopKSparsified, uplink_ratio
from repro.fl.strategies import SeededFedAvg
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
                  deltas: list[int], delta: int, eval_every: int, engine: str = "inprocess", workers: int = 1,
                  ) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[int, int], dict[int, list[str]]]]:
    """FedAvg, FedLUAR at every ``deltas``, and at ``delta`` the drop and uniform ablations and top-k.

    The top-k runs come last: each keeps the fraction of the update that the
    FedLUAR run with the same seed at ``delta`` actually uploaded, so the two
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
        raise ValueError(f"deltas must all be >= 1, got {deltas}")
    if delta not in deltas:
        raise ValueError(f"delta ({delta}) must be one of deltas {deltas}")
    w = workers if engine == "inprocess" else 1
    common = (spec, sgd, tau, rounds, active)
    first = [("fedavg", *common, s, 0, 1.0, eval_every, engine) for s in seeds]
    first += [("fedluar", *common, s, d, 1.0, eval_every, engine) for d in deltas for s in seeds]
    first += [(m, *common, s, delta, 1.0, eval_every, engine) for m in ("drop", "uniform") for s in seeds]
    done = parallel_map(_fedluar_job, first, w, desc="FedAvg, FedLUAR and ablations")
    keep = {r["seed"]: r["uplink"] for r in done if r["method"] == "fedluar" and r["delta"] == delta}
    second = [("topk", *common, s, delta, keep[s], eval_every, engine) for s in seeds]
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


# ----- biased client activation ---------------------------------------------
def activation_run(policy: str, beta: float, spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int,
                   candidates: int, seed: int, eval_every: int = 10, engine: str = "inprocess") -> dict:
    """One FedAvg run whose clients are activated by ``policy`` (see :mod:`repro.fl.activation`).

    Returns
    -------
    dict
        ``policy, beta, seed, accuracy`` (final), ``budget_accuracy`` (mean of
        the last three evaluations, less sensitive to the last round's
        clients), ``curve`` (round, accuracy) and ``probe_downloads``.
    """
    strat = ActivatedFedAvg(active, sgd.config(tau), seed=seed, policy=make_policy(policy, beta),
                            num_candidates=candidates)
    hist = run_federated(strat, make_probing_client_app(spec), spec.num_clients, initial_arrays(spec, seed), rounds,
                         central_evaluator(spec), eval_schedule(rounds, eval_every), engine=engine)
    return {"policy": policy, "beta": beta if policy == "multi-metric" else 0.0, "seed": seed,
            "accuracy": hist.final_accuracy, "budget_accuracy": float(np.mean(hist.accuracy[-3:])),
            "curve": list(zip(hist.rounds, hist.accuracy)), "probe_downloads": strat.probe_downloads}


def _activation_job(job: tuple) -> dict:
    return activation_run(*job)


def activation_sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int, candidates: int,
                     seeds: list[int], betas: list[float], eval_every: int, engine: str = "inprocess",
                     workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Uniform, Power-of-Choice, gradient-norm and multi-metric (every ``beta``) activation, every seed.

    Returns
    -------
    final : DataFrame
        One row per run: ``policy, beta, seed, accuracy, budget_accuracy``.
    curves : DataFrame
        Accuracy at each evaluated round, every run.
    """
    if not betas:
        raise ValueError("betas must not be empty")
    common = (spec, sgd, tau, rounds, active, candidates)
    jobs = [(p, 0.0, *common, s, eval_every, engine) for p in ("uniform", "power-of-choice", "grad-norm")
            for s in seeds]
    jobs += [("multi-metric", b, *common, s, eval_every, engine) for b in betas for s in seeds]
    done = parallel_map(_activation_job, jobs, workers if engine == "inprocess" else 1, desc="activation runs")
    final = pd.DataFrame([{k: r[k] for k in ("policy", "beta", "seed", "accuracy", "budget_accuracy")}
                          for r in done])
    curves = pd.DataFrame([{"policy": r["policy"], "beta": r["beta"], "seed": r["seed"], "round": rd, "accuracy": a}
                           for r in done for rd, a in r["curve"]])
    return final, curves


def activation_claims(final: pd.DataFrame, beta: float) -> dict[str, list[float]]:
    """Per-seed values of the biased-activation chapter's claims for multi-metric at ``beta`` (budget accuracy)."""
    def pick(policy: str, b: float = 0.0) -> pd.Series:
        return final[(final.policy == policy) & np.isclose(final.beta, b)].set_index("seed").budget_accuracy

    if not np.isclose(final[final.policy == "multi-metric"].beta, beta).any():
        raise ValueError(f"beta={beta} was not run; choose one of the swept betas")
    mm, uni, poc = pick("multi-metric", beta), pick("uniform"), pick("power-of-choice")
    seeds = sorted(uni.index)
    return {"acc_gain_vs_uniform": [mm[s] - uni[s] for s in seeds],
            "acc_gain_vs_power_of_choice": [mm[s] - poc[s] for s in seeds]}


# ----- SAFA -------------------------------------------------------------------
SAFA_METHODS = ("fedavg", "fedprox", "feddyn", "feddc", "safa")


def safa_run(method: str, spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int, seed: int,
             lam: float = 0.1, a: float = 0.95, period: int = 15, mu: float = 0.01, eval_every: int = 10,
             engine: str = "inprocess", feddyn_alpha: float = 0.01) -> dict:
    """One run of the SAFA comparison: ``fedavg``, ``fedprox`` (``mu``), ``feddyn`` (``feddyn_alpha``),
    ``feddc`` (``period``) or ``safa``.

    Returns
    -------
    dict
        ``method, alpha, seed, accuracy`` (final), ``budget_accuracy`` (mean of
        the last three evaluations) and ``curve`` (round, accuracy).
    """
    from repro.fl.baselines import FedDyn, make_feddyn_client_app
    from repro.fl.safa import SAFA, SeededFedProx, feddc, make_regularised_client_app

    local = sgd.config(tau)
    strategies = {
        "fedavg": lambda: SeededFedAvg(active, local, seed=seed),
        "fedprox": lambda: SeededFedProx(active, local, seed=seed, mu=mu),
        "feddyn": lambda: FedDyn(active, local, num_clients=spec.num_clients, alpha=feddyn_alpha, seed=seed),
        "feddc": lambda: feddc(active, local, seed=seed, period=period),
        "safa": lambda: SAFA(active, local, seed=seed, lam=lam, a=a, period=period),
    }
    if method not in strategies:
        raise ValueError(f"method must be one of {SAFA_METHODS}, got {method!r}")
    app = make_feddyn_client_app(spec) if method == "feddyn" else make_regularised_client_app(spec)
    hist = run_federated(strategies[method](), app, spec.num_clients,
                         initial_arrays(spec, seed), rounds, central_evaluator(spec), eval_schedule(rounds, eval_every),
                         engine=engine)
    return {"method": method, "alpha": spec.alpha, "seed": seed, "accuracy": hist.final_accuracy,
            "budget_accuracy": float(np.mean(hist.accuracy[-3:])), "curve": list(zip(hist.rounds, hist.accuracy))}


def _safa_job(job: tuple) -> dict:
    return safa_run(*job)


def safa_sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int, seeds: list[int], lam: float,
               a: float, period: int, mu: float, eval_every: int, dense_alpha: float | None = None,
               engine: str = "inprocess", workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """FedAvg, FedProx, FedDyn, FedDC and SAFA on ``spec``'s split; FedAvg and SAFA again at ``dense_alpha`` (if given).

    Returns
    -------
    final : DataFrame
        One row per run: ``method, alpha, seed, accuracy, budget_accuracy``.
    curves : DataFrame
        Accuracy at each evaluated round, every run.
    """
    from dataclasses import replace

    rest = (lam, a, period, mu, eval_every, engine)
    jobs = [(m, spec, sgd, tau, rounds, active, s, *rest) for m in SAFA_METHODS for s in seeds]
    if dense_alpha is not None:
        dense = replace(spec, alpha=dense_alpha)
        jobs += [(m, dense, sgd, tau, rounds, active, s, *rest) for m in ("fedavg", "safa") for s in seeds]
    done = parallel_map(_safa_job, jobs, workers if engine == "inprocess" else 1, desc="SAFA comparison")
    final = pd.DataFrame([{k: r[k] for k in ("method", "alpha", "seed", "accuracy", "budget_accuracy")}
                          for r in done])
    curves = pd.DataFrame([{"method": r["method"], "alpha": r["alpha"], "seed": r["seed"], "round": rd,
                            "accuracy": acc} for r in done for rd, acc in r["curve"]])
    return final, curves


def safa_claims(final: pd.DataFrame, alpha: float) -> dict[str, list[float]]:
    """Per-seed values of the SAFA chapter's claims on the sparse-and-scarce split (``alpha``)."""
    sel = final[np.isclose(final.alpha, alpha)]

    def acc(method: str) -> pd.Series:
        return sel[sel.method == method].set_index("seed").budget_accuracy

    safa, avg, dc, prox = acc("safa"), acc("fedavg"), acc("feddc"), acc("fedprox")
    seeds = sorted(avg.index)
    return {"acc_gain_vs_fedavg": [safa[s] - avg[s] for s in seeds],
            "acc_gain_vs_feddc": [safa[s] - dc[s] for s in seeds],
            "fedprox_gain_vs_fedavg": [prox[s] - avg[s] for s in seeds]}


# ----- FedGrad and the backdoor defences -----------------------------------------
DEFENCES = ("none", "norm-clipping", "multi-krum", "rfa", "flame-lite", "fedgrad")


def make_defence(name: str, spec: TaskSpec, num_malicious: int, clip_bound: float, switch_round: int):
    """A defence of :mod:`repro.fl.robust` by name; FedGrad inspects the MLP's last layer."""
    from repro.fl import robust

    last = f"fc{len(spec.hidden)}"
    makers = {
        "none": lambda: robust.NoDefence(),
        "norm-clipping": lambda: robust.NormClipping(clip_bound),
        "multi-krum": lambda: robust.MultiKrumDefence(num_malicious),
        "rfa": lambda: robust.RFA(),
        "flame-lite": lambda: robust.FlameLite(),
        "fedgrad": lambda: robust.FedGradFilter(f"{last}.weight", f"{last}.bias", switch_round=switch_round),
    }
    if name not in makers:
        raise ValueError(f"defence must be one of {DEFENCES}, got {name!r}")
    return makers[name]()


def backdoor_run(defence: str, spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int, seed: int,
                 attackers: tuple[int, ...], pdr: float, clip_bound: float, switch_round: int,
                 eval_every: int = 10, engine: str = "inprocess") -> dict:
    """One run under the edge-case attack (``attackers`` may be empty: a clean run).

    Returns
    -------
    dict
        ``defence, attacked, seed``, main-task ``accuracy`` (final), backdoor
        accuracy ``backdoor`` (percent of rotated test 7s called 1), and the
        detection rates ``tpr``, ``fpr`` over all rounds.
    """
    import torch

    from repro.fl.robust import (EdgeCaseAttack, RobustFedAvg, backdoor_accuracy, detection_rates,
                                 make_attacked_client_app, tail_sets)
    from repro.fl.task import build_model

    attack = EdgeCaseAttack(spec, attackers=tuple(attackers), pdr=pdr, seed=seed)
    strat = RobustFedAvg(active, sgd.config(tau), make_defence(defence, spec, max(1, round(active * len(attackers)
                                                                                             / spec.num_clients)),
                                                              clip_bound, switch_round), seed=seed)
    hist = run_federated(strat, make_attacked_client_app(attack), spec.num_clients, initial_arrays(spec, seed),
                         rounds, central_evaluator(spec), eval_schedule(rounds, eval_every), engine=engine)
    model = build_model(spec, seed=0)
    from repro.fl.client import from_arrayrecord
    from repro.models import set_weights

    set_weights(model, from_arrayrecord(hist.final_arrays))
    with torch.no_grad():
        pred = model(torch.from_numpy(tail_sets(attack)[1])).argmax(1).numpy()
    rates = detection_rates(strat.sampled, strat.flagged, attackers)
    return {"defence": defence, "attacked": bool(attackers), "seed": seed, "accuracy": hist.final_accuracy,
            "backdoor": backdoor_accuracy(pred, attack), "tpr": rates["tpr"], "fpr": rates["fpr"]}


def _backdoor_job(job: tuple) -> dict:
    return backdoor_run(*job)


def backdoor_sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int, seeds: list[int],
                   attacker_share: float, pdr: float, clip_bound: float, switch_round: int, eval_every: int,
                   defences: Sequence[str] = DEFENCES, engine: str = "inprocess", workers: int = 1) -> pd.DataFrame:
    """Every defence under the attack, and every defence on the same task without attackers (false positives).

    The attackers are the first ``round(attacker_share * num_clients)`` partition ids (a fixed pool; the
    Dirichlet split is random, so they are not special otherwise).
    """
    n_bad = int(round(attacker_share * spec.num_clients))
    bad = tuple(range(n_bad))
    rest = (clip_bound, switch_round, eval_every, engine)
    jobs = [(d, spec, sgd, tau, rounds, active, s, atk, pdr, *rest) for atk in (bad, ()) for d in defences
            for s in seeds]
    done = parallel_map(_backdoor_job, jobs, workers if engine == "inprocess" else 1, desc="defences")
    return pd.DataFrame(done)


def backdoor_claims(results: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the FedGrad chapter's claims."""
    def pick(defence: str, attacked: bool) -> pd.DataFrame:
        return results[(results.defence == defence) & (results.attacked == attacked)].set_index("seed")

    grad, grad_clean, none = pick("fedgrad", True), pick("fedgrad", False), pick("none", True)
    seeds = sorted(grad.index)
    return {"detection_tpr_pct": [100.0 * grad.tpr[s] for s in seeds],
            "backdoor_acc_pct": [grad.backdoor[s] for s in seeds],
            "main_acc_drop": [none.accuracy[s] - grad.accuracy[s] for s in seeds],
            "clean_fpr_pct": [100.0 * grad_clean.fpr[s] for s in seeds]}
