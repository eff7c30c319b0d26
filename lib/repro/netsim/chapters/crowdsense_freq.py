"""Driver of the crowdsense-freq chapter: monitoring frequencies of a vehicle fleet chosen by a GA on deap.

Each :class:`FrequencyJob` (fleet size, coverage weight, seed) builds the city's trajectories, the
coverage model, and compares the GA with uniform plans (``f_max`` and the middle level), a random plan
and the marginal-gain-per-cost greedy.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.netsim.crowdsensing import CoverageModel, PlanScore, Weights, greedy_plan, random_plan, uniform_plan
from repro.netsim.figures import learning_curves
from repro.netsim.genetic import GAConfig, integer_ga
from repro.netsim.mobility import CitySpec, generate_fleet
from repro.parallel import parallel_map

METHODS = ("GA", "greedy", "uniform f_max", "uniform mid", "random")


@dataclass(frozen=True, kw_only=True)
class FrequencyJob:
    """One instance: fleet size, objective weights, seed, city and GA settings.

    Attributes
    ----------
    vehicles
        Fleet size (2/3 buses, 1/3 taxis).
    w_coverage
        Coverage weight; cost and balance share the rest equally.
    seed
        Seed of the city, the random plan and the GA.
    grid, horizon_s, sample_dt_s, slot_s, cell_m, f_max
        City and sensing discretisation.
    ga
        GA settings.
    """

    vehicles: int
    w_coverage: float
    seed: int
    grid: int
    horizon_s: float
    sample_dt_s: float
    slot_s: float
    cell_m: float
    f_max: int
    ga: GAConfig


@dataclass(frozen=True, kw_only=True)
class FrequencyResult:
    """Every method's plan score, and the GA's best objective per generation."""

    job: FrequencyJob
    scores: dict[str, PlanScore]
    history: tuple[float, ...]
    seeded_best: float


def city_for(job: FrequencyJob) -> CitySpec:
    """The city and fleet of a job: buses on 6 routes (2/3 of the fleet), taxis, 8-12 m/s."""
    buses = int(round(2 * job.vehicles / 3))
    return CitySpec(grid=job.grid, buses=buses, taxis=job.vehicles - buses, routes=min(6, buses), speed_min=8.0,
                    speed_max=12.0, stop_s=20.0, horizon_s=job.horizon_s, dt=job.sample_dt_s)


def run(job: FrequencyJob) -> FrequencyResult:
    """Build the coverage model of one instance and score every method."""
    city = city_for(job)
    model = CoverageModel(generate_fleet(city, job.seed), city, job.cell_m, job.slot_s, job.f_max)
    weights = Weights.from_coverage(job.w_coverage)
    greedy = greedy_plan(model, weights)
    uniforms = [uniform_plan(model, level) for level in range(job.f_max + 1)]
    seeded = [*uniforms, greedy]
    ga = integer_ga(lambda plans: model.objective(plans, weights), model.vehicles, job.f_max, job.ga, job.seed,
                    seeded=seeded)
    plans = {"GA": ga.best, "greedy": greedy, "uniform f_max": uniforms[-1],
             "uniform mid": uniforms[job.f_max // 2], "random": random_plan(model, np.random.default_rng(job.seed))}
    scores = {name: model.score(plan, weights)[0] for name, plan in plans.items()}
    return FrequencyResult(
        job=job, scores=scores, history=ga.history, seeded_best=float(model.objective(np.array(seeded), weights).max())
    )


def sweep(
    vehicles: list[int],
    w_coverages: list[float],
    seeds: list[int],
    grid: int,
    horizon_s: float,
    sample_dt_s: float,
    slot_s: float,
    cell_m: float,
    f_max: int,
    ga: GAConfig,
    workers: int = 1,
) -> list[FrequencyResult]:
    """Every (fleet size, weight, seed)."""
    jobs = [
        FrequencyJob(
            vehicles=v,
            w_coverage=w,
            seed=s,
            grid=grid,
            horizon_s=horizon_s,
            sample_dt_s=sample_dt_s,
            slot_s=slot_s,
            cell_m=cell_m,
            f_max=f_max,
            ga=ga,
        )
        for v in vehicles
        for w in w_coverages
        for s in seeds
    ]
    return parallel_map(run, jobs, workers=workers, desc="crowdsense-freq instances")


def table(results: list[FrequencyResult]) -> pd.DataFrame:
    """One row per (instance, method)."""
    rows = []
    for r in results:
        for name, sc in r.scores.items():
            rows.append(
                {
                    "vehicles": r.job.vehicles,
                    "w_c": r.job.w_coverage,
                    "seed": r.job.seed,
                    "method": name,
                    "J": sc.objective,
                    "coverage": sc.coverage,
                    "cost": sc.cost,
                    "balance": sc.balance,
                    "samples": sc.samples,
                }
            )
    return pd.DataFrame(rows)


def _at(t: pd.DataFrame, method: str, vehicles: int, w_c: float) -> pd.Series:
    part = t[(t["method"] == method) & (t["vehicles"] == vehicles) & (t["w_c"] == w_c)]
    return part.set_index("seed").sort_index()["J"]


def claims(results: list[FrequencyResult], vehicles: int, w_c: float) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims at the default instance."""
    t = table(results)
    ga = _at(t, "GA", vehicles, w_c)
    others = pd.concat([_at(t, m, vehicles, w_c) for m in METHODS[1:]], axis=1)
    part = t[(t["vehicles"] == vehicles) & (t["w_c"] == w_c)]
    samples = part.pivot(index="seed", columns="method", values="samples").sort_index()
    coverage = part.pivot(index="seed", columns="method", values="coverage").sort_index()
    return {
        "factor_vs_strongest": list(ga / others.max(axis=1)),
        "factor_vs_weakest": list(ga / others.min(axis=1)),
        "coverage_gap_vs_fmax": list(100.0 * (coverage["uniform f_max"] - coverage["GA"])),
        "samples_saved_vs_fmax": list(100.0 * (1 - samples["GA"] / samples["uniform f_max"])),
    }


def summary(results: list[FrequencyResult]) -> pd.DataFrame:
    """Mean over seeds of J and its components, per instance and method."""
    t = table(results)
    return (
        t.groupby(["vehicles", "w_c", "method"], sort=False)[["J", "coverage", "cost", "balance"]].mean().round(3).reset_index()
    )


def figure_convergence(results: list[FrequencyResult], vehicles: int, w_c: float) -> plt.Figure:
    """Best objective per GA generation at the default instance (the dashed line: best seeded plan)."""
    rs = [r for r in results if r.job.vehicles == vehicles and r.job.w_coverage == w_c]
    fig = learning_curves(
        {"GA best J": [r.history for r in rs]},
        ylabel="best objective J",
        title=f"GA convergence ({vehicles} vehicles, w_c = {w_c:g})",
        xlabel="generation",
    )
    fig.axes[0].axhline(np.mean([r.seeded_best for r in rs]), ls="--", c="grey", label="best seeded plan")
    fig.axes[0].legend(fontsize=8)
    return fig


def figure_methods(results: list[FrequencyResult]) -> plt.Figure:
    """Objective J of every method against fleet size, one panel per coverage weight."""
    t = table(results)
    weights = sorted(t["w_c"].unique())
    fig, axes = plt.subplots(1, len(weights), figsize=(4.2 * len(weights), 3.4), squeeze=False)
    for ax, w in zip(axes[0], weights):
        stats = t[t["w_c"] == w].groupby(["method", "vehicles"], sort=False)["J"].agg(["mean", "std"]).reset_index()
        for name, p in stats.groupby("method", sort=False):
            ax.errorbar(p["vehicles"], p["mean"], yerr=p["std"].fillna(0), marker="o", ms=4, capsize=3, label=name)
        ax.set_xlabel("vehicles")
        ax.set_ylabel("objective J")
        ax.set_title(f"w_c = {w:g}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig
