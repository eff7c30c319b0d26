"""Driver of the crowdsense-freq chapter: monitoring frequencies of a vehicle fleet chosen by a GA on deap.

Each :class:`FrequencyJob` (fleet size, coverage weight, seed, objective form) builds the city's
trajectories and the coverage model, and compares the GA with the greedy plan, uniform plans (``f_max``
and the middle level) and a random plan.  The GA starts from a random population: it is not seeded with
its competitors, so whether it ends above them is measured, not built in.  At the default instance every
method is also run under the other form of the objective, to show how the factors depend on the form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.netsim.crowdsensing import FORMS, CoverageModel, PlanScore, Weights, greedy_plan, random_plan, uniform_plan
from repro.netsim.figures import learning_curves
from repro.netsim.genetic import GAConfig, integer_ga
from repro.netsim.mobility import CitySpec, generate_fleet
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence

GA = "GA"
METHODS = (GA, "greedy", "uniform f_max", "uniform mid", "random")
OTHERS = METHODS[1:]


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    vehicles: tuple[int, ...]
    vehicles_default: int
    w_coverages: tuple[float, ...]
    w_coverage_default: float
    objective: str
    grid: int
    horizon_s: float
    sample_dt_s: float
    slot_s: float
    cell_m: float
    f_max: int
    population: int
    generations: int
    seeds: tuple[int, ...]
    workers: int

    def checks(self) -> None:
        """Refuse impossible combinations before any kernel starts."""
        require(self.vehicles_default in self.vehicles, self, ("vehicles_default", "vehicles"),
                "vehicles must contain vehicles_default")
        require(self.w_coverage_default in self.w_coverages, self, ("w_coverage_default", "w_coverages"),
                "w_coverages must contain w_coverage_default")
        require(self.w_coverage_default > 0, self, "w_coverage_default",
                "the multiplicative form (run at the default instance) needs a positive coverage weight")
        require(self.objective != "multiplicative" or min(self.w_coverages) > 0, self, ("objective", "w_coverages"),
                "a multiplicative objective needs a positive coverage weight at every instance")
        ga = GAConfig()
        require(self.population > max(ga.elite, ga.tournament), self, "population",
                f"the GA keeps {ga.elite} elites and draws tournaments of {ga.tournament}: a larger population is needed")
        require(self.sample_dt_s <= self.slot_s <= self.horizon_s, self, ("sample_dt_s", "slot_s", "horizon_s"),
                "positions must be sampled within every slot, and a slot must fit in the horizon")

    @property
    def ga(self) -> GAConfig:
        """The GA's settings: the profile's population and generations, the operators' defaults."""
        return GAConfig(population=self.population, generations=self.generations)

    def job(self, vehicles: int, w_coverage: float, seed: int, form: str | None = None) -> "FrequencyJob":
        """One instance of the sweep (the chapter's objective form unless another is given)."""
        return FrequencyJob(vehicles=vehicles, w_coverage=w_coverage, seed=seed, form=form or self.objective,
                            params=self)


@dataclass(frozen=True, kw_only=True)
class FrequencyJob:
    """One instance: fleet size, coverage weight, seed and objective form, in a chapter's city.

    Attributes
    ----------
    vehicles
        Fleet size (2/3 buses, 1/3 taxis).
    w_coverage
        Coverage weight; cost and balance share the rest equally.
    seed
        Seed of the city, the random plan and the GA.
    form
        The objective's form (``additive`` or ``multiplicative``).
    params
        The chapter's parameters (city, sensing discretisation, GA).
    """

    vehicles: int
    w_coverage: float
    seed: int
    form: str
    params: Params


@dataclass(frozen=True, kw_only=True)
class FrequencyResult:
    """Every method's plan score, and the GA's best objective per generation."""

    job: FrequencyJob
    scores: dict[str, PlanScore]
    history: tuple[float, ...]


def city_for(params: Params, vehicles: int) -> CitySpec:
    """The city and fleet of an instance: buses on 6 routes (2/3 of the fleet), taxis, 8-12 m/s."""
    buses = int(round(2 * vehicles / 3))
    return CitySpec(grid=params.grid, buses=buses, taxis=vehicles - buses, routes=min(6, buses), speed_min=8.0,
                    speed_max=12.0, stop_s=20.0, horizon_s=params.horizon_s, dt=params.sample_dt_s)


def run_job(job: FrequencyJob) -> FrequencyResult:
    """Build the coverage model of one instance and score every method (the GA from a random population)."""
    prm = job.params
    city = city_for(prm, job.vehicles)
    model = CoverageModel(generate_fleet(city, job.seed), city, prm.cell_m, prm.slot_s, prm.f_max)
    weights = Weights.from_coverage(job.w_coverage, job.form)
    ga = integer_ga(lambda plans: model.objective(plans, weights), model.vehicles, prm.f_max, prm.ga, job.seed)
    plans = {GA: ga.best, "greedy": greedy_plan(model, weights), "uniform f_max": uniform_plan(model, prm.f_max),
             "uniform mid": uniform_plan(model, prm.f_max // 2),
             "random": random_plan(model, np.random.default_rng(job.seed))}
    scores = {name: model.score(plan, weights)[0] for name, plan in plans.items()}
    return FrequencyResult(job=job, scores=scores, history=ga.history)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    table
        One row per (instance, objective form, method): J and its components.
    histories
        The GA's best objective per generation at the default instance (chosen form), one per seed.
    vehicles, w_coverage, objective
        The default instance and the chosen objective form, where the claims are read.
    """

    table: pd.DataFrame
    histories: tuple[tuple[float, ...], ...]
    vehicles: int
    w_coverage: float
    objective: str


def run(params: Params) -> Results:
    """Every (fleet size, weight, seed) under the chosen form, and the default instance under the other form."""
    other = next(f for f in FORMS if f != params.objective)
    jobs = [params.job(v, w, s) for v in params.vehicles for w in params.w_coverages for s in params.seeds]
    jobs += [params.job(params.vehicles_default, params.w_coverage_default, s, other) for s in params.seeds]
    done = parallel_map(run_job, jobs, workers=params.workers, desc="crowdsense-freq instances")
    default = [r for r in done if (r.job.vehicles, r.job.w_coverage, r.job.form)
               == (params.vehicles_default, params.w_coverage_default, params.objective)]
    return Results(table=table(done), histories=tuple(r.history for r in sorted(default, key=lambda r: r.job.seed)),
                   vehicles=params.vehicles_default, w_coverage=params.w_coverage_default, objective=params.objective)


def table(results: Sequence[FrequencyResult]) -> pd.DataFrame:
    """One row per (instance, objective form, method)."""
    rows = []
    for r in results:
        for name, sc in r.scores.items():
            rows.append({"vehicles": r.job.vehicles, "w_c": r.job.w_coverage, "objective": r.job.form,
                         "seed": r.job.seed, "method": name, "J": sc.objective, "coverage": sc.coverage,
                         "cost": sc.cost, "balance": sc.balance, "samples": sc.samples})
    return pd.DataFrame(rows)


def _pivot(results: Results, column: str, form: str | None = None) -> pd.DataFrame:
    """``column`` at the default instance: rows seeds, columns methods."""
    t = results.table
    part = t[(t["vehicles"] == results.vehicles) & (t["w_c"] == results.w_coverage)
             & (t["objective"] == (form or results.objective))]
    return part.pivot(index="seed", columns="method", values=column).sort_index()


def factors(results: Results, form: str | None = None) -> pd.DataFrame:
    """Per seed at the default instance: the GA's objective over the best and over the worst other method."""
    j = _pivot(results, "J", form)
    return pd.DataFrame({"over the strongest": j[GA] / j[list(OTHERS)].max(axis=1),
                         "over the weakest": j[GA] / j[list(OTHERS)].min(axis=1)})


def largest_factor_vs_weakest(results: Results) -> pd.Series:
    """Per seed, the GA's largest objective ratio to the worst other method over every instance (chosen form)."""
    t = results.table[results.table["objective"] == results.objective]
    j = t.pivot_table(index=["seed", "vehicles", "w_c"], columns="method", values="J")
    ratio = j[GA] / j[list(OTHERS)].min(axis=1)
    return ratio.groupby(level="seed").max().sort_index()


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims (at the default instance unless said otherwise)."""
    samples, coverage = _pivot(results, "samples"), _pivot(results, "coverage")
    return {
        "factor_vs_strongest": list(factors(results)["over the strongest"]),
        "factor_vs_weakest": list(largest_factor_vs_weakest(results)),
        "coverage_gap_vs_fmax": list(100.0 * (coverage["uniform f_max"] - coverage[GA])),
        "samples_saved_vs_fmax": list(100.0 * (1 - samples[GA] / samples["uniform f_max"])),
    }


def form_comparison(results: Results) -> pd.DataFrame:
    """Mean over seeds of the GA's factors at the default instance under both forms of the objective."""
    rows = {form: factors(results, form).mean() for form in FORMS}
    return pd.DataFrame(rows).T.rename_axis("objective").round(3).reset_index()


def summary(results: Results) -> pd.DataFrame:
    """Mean over seeds of J and its components, per instance and method (chosen objective form)."""
    t = results.table[results.table["objective"] == results.objective]
    return (t.groupby(["vehicles", "w_c", "method"], sort=False)[["J", "coverage", "cost", "balance"]].mean()
            .round(3).reset_index())


def figure_convergence(results: Results) -> plt.Figure:
    """Best objective per GA generation at the default instance (dashed: the best other method)."""
    fig = learning_curves(
        {"GA best J (random start)": [list(h) for h in results.histories]},
        ylabel="best objective J",
        title=f"GA convergence ({results.vehicles} vehicles, w_c = {results.w_coverage:g})",
        xlabel="generation",
    )
    best_other = _pivot(results, "J")[list(OTHERS)].max(axis=1).mean()
    fig.axes[0].axhline(best_other, ls="--", c="grey", label="best other method (mean)")
    fig.axes[0].legend(fontsize=8)
    return fig


def figure_methods(results: Results) -> plt.Figure:
    """Objective J of every method against fleet size, one panel per coverage weight (chosen form)."""
    t = results.table[results.table["objective"] == results.objective]
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


def figure_tracks(params: Params) -> plt.Figure:
    """The default fleet's tracks in the first seed's city: buses and taxis."""
    city = city_for(params, params.vehicles_default)
    fleet = generate_fleet(city, params.seeds[0])
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for v in range(fleet.vehicles):
        ax.plot(fleet.positions[:, v, 0], fleet.positions[:, v, 1], lw=0.5, alpha=0.6,
                c="C0" if fleet.is_bus[v] else "C1")
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_title("tracks: buses (blue), taxis (orange)")
    return fig
