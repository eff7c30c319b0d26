"""Chapter ``component-embedded``: from component models to a multithreaded design and its analysis.

:func:`analyse_system` turns one component model into the three thread
designs of :mod:`repro.misc.realtime`, bounds each design's response time on
``m`` processors with the Graham bound and simulates it with simpy (WCETs, and
``instances`` draws of shorter actual execution times).  :func:`sweep` does
this for random layered models (one job per seed and model, spread over
processes); :func:`schedulability` turns the results into schedulability
ratios against utilisation.  :func:`federated_sweep` puts several periodic
activities on ``m`` shared processors with federated scheduling and
fixed-priority response-time analysis, checks the analysis against simulation
and sizes the dedicated processors by simulation for comparison.
:func:`run` takes the chapter's :class:`Params` and returns its :class:`Results`;
:func:`claims` computes the chapter's claims from them.  The gain over the
sequential design and the case study's speed-up are true by construction
(a list schedule of a DAG is never slower than its sequential order), so
they are structural and modelled checks, not findings.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.misc import realtime as rt
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence

LINESTYLE = {"simulation": "-", "analysis": "--"}
SCORED_LAYOUT = "side_by_side"
"""The layout the gain over one thread per component is judged on: there components run concurrently, so that
design is not the sequential one in disguise (in a pipeline of components, one activation, it nearly is)."""
ACTIVITY_LAYOUT = "pipeline"
"""The layout of the random activities of the federated task sets (components as pipeline stages)."""
DESIGN_COLOURS = dict(zip(rt.DESIGNS, ("tab:grey", "tab:orange", "tab:blue")))


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """How random component models are drawn.

    Attributes
    ----------
    actions
        ``(low, high)`` number of actions (inclusive).
    components
        ``(low, high)`` number of components.
    edge_prob
        Extra-edge probability between consecutive layers.
    loop_share
        Share of actions that are loops with independent iterations.
    loop_chunks
        Chunks each loop is split into.
    """

    actions: tuple[int, int]
    components: tuple[int, int]
    edge_prob: float
    loop_share: float
    loop_chunks: int


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``chapters/component-embedded.yaml``)."""

    case_study: str
    loop_chunks: int
    processors: tuple[int, ...]
    n_models: int
    actions: tuple[int, ...]
    components: tuple[int, ...]
    edge_prob: float
    loop_share: float
    layouts: tuple[str, ...]
    utilisations: tuple[float, ...]
    instances: int
    low_fraction: float
    task_sets: int
    activities: int
    seeds: tuple[int, ...]
    workers: int

    def checks(self) -> None:
        """Refuse ranges that are not ``[low, high]``, more components than actions, a missing scored layout."""
        for name in ("actions", "components"):
            pair = getattr(self, name)
            require(len(pair) == 2 and pair[0] <= pair[1], self, name, f"{name} must be [low, high]")
        require(self.components[-1] <= self.actions[0], self, ("components", "actions"),
                "a model cannot have more components than actions (each component holds at least one action)")
        require(SCORED_LAYOUT in self.layouts, self, "layouts",
                f"layouts must hold {SCORED_LAYOUT!r}: the gain over one thread per component is judged there")

    def model_spec(self) -> ModelSpec:
        """How the random component models are drawn."""
        return ModelSpec(actions=(self.actions[0], self.actions[1]), components=(self.components[0], self.components[1]),
                         edge_prob=self.edge_prob, loop_share=self.loop_share, loop_chunks=self.loop_chunks)


@dataclass(frozen=True, kw_only=True)
class AnalysisJob:
    """One random model to analyse: its seed, index and layout, the model spec and the simulation settings."""

    seed: int
    index: int
    layout: str
    spec: ModelSpec
    processors: tuple[int, ...]
    instances: int
    low_fraction: float


@dataclass(frozen=True, kw_only=True)
class DesignResult:
    """One design of one model on ``m`` processors.

    Attributes
    ----------
    seed, layout, model, m, design
        Which run (``layout`` is the random model's, see :func:`repro.misc.realtime.random_system`; empty for
        the case study).
    actions, threads, width
        Nodes of the precedence DAG, threads of the design, largest antichain of the DAG.
    volume, critical_path
        ``C`` of the DAG and ``L`` of the design's graph.
    bound
        Graham bound of the design.
    sim_wcet
        Simulated response time with every action at its WCET.
    sim_max
        Largest simulated response time over the WCET run and the random-execution-time instances.
    """

    seed: int
    layout: str
    model: int
    m: int
    design: str
    actions: int
    threads: int
    width: int
    volume: float
    critical_path: float
    bound: float
    sim_wcet: float
    sim_max: float


def analyse_system(system: rt.System, seed: int, model: int, processors: tuple[int, ...], loop_chunks: int,
                   instances: int, low_fraction: float, layout: str = "") -> list[DesignResult]:
    """Every design of ``system`` on every processor count: bound and simulated response times."""
    g = rt.precedence_graph(system, loop_chunks)
    w = rt.width(g)
    rng = np.random.default_rng([seed, model, 7])
    draws = [rt.random_exec_times(g, low_fraction, rng) for _ in range(instances)]
    out = []
    for name in rt.DESIGNS:
        design = rt.thread_design(g, name)
        length = rt.critical_path(design.graph)
        for m in processors:
            wcet_run = rt.simulate(design.graph, m).makespan
            worst = max([wcet_run] + [rt.simulate(design.graph, m, d).makespan for d in draws])
            out.append(
                DesignResult(
                    seed=seed,
                    layout=layout,
                    model=model,
                    m=m,
                    design=name,
                    actions=g.number_of_nodes(),
                    threads=len(design.threads),
                    width=w,
                    volume=rt.volume(g),
                    critical_path=length,
                    bound=rt.graham_bound(design.graph, m),
                    sim_wcet=wcet_run,
                    sim_max=worst,
                )
            )
    return out


def _analyse_job(job: AnalysisJob) -> list[DesignResult]:
    rng = np.random.default_rng([job.seed, job.index])
    n = int(rng.integers(job.spec.actions[0], job.spec.actions[1] + 1))
    comps = int(rng.integers(job.spec.components[0], job.spec.components[1] + 1))
    layers = int(rng.integers(max(comps, 4), max(comps, 4) + 8))
    system = rt.random_system(n, comps, min(layers, n), job.spec.edge_prob, job.spec.loop_share, rng, layout=job.layout)
    return analyse_system(system, job.seed, job.index, job.processors, job.spec.loop_chunks, job.instances,
                          job.low_fraction, layout=job.layout)


def sweep(params: Params) -> pd.DataFrame:
    """Analyse ``params.n_models`` random models per seed and layout; one row per model, design and processor count.

    A model's draws depend on its seed and index only, so the two layouts deal the same layered graphs to their
    components differently.
    """
    jobs = [
        AnalysisJob(seed=s, index=i, layout=layout, spec=params.model_spec(), processors=params.processors,
                    instances=params.instances, low_fraction=params.low_fraction)
        for s in params.seeds
        for layout in params.layouts
        for i in range(params.n_models)
    ]
    rows = [r for res in parallel_map(_analyse_job, jobs, workers=params.workers, desc="models") for r in res]
    return pd.DataFrame([r.__dict__ for r in rows])


def schedulability(results: pd.DataFrame, utilisations: list[float]) -> pd.DataFrame:
    """Schedulable share of models per seed, layout, design, ``m``, utilisation and method (analysis or simulation).

    A model at utilisation ``U`` on ``m`` processors has period and deadline
    ``T = C / (m U)``; it is schedulable by analysis if the Graham bound is at
    most ``T``, by simulation if every simulated response time is.
    """
    rows = []
    for u in utilisations:
        deadline = results.volume / (results.m * u)
        for method, col in (("analysis", "bound"), ("simulation", "sim_max")):
            ok = results.assign(ok=(results[col] <= deadline * (1 + 1e-12)).astype(float))
            for (seed, layout, design, m), grp in ok.groupby(["seed", "layout", "design", "m"]):
                rows.append({"seed": seed, "layout": layout, "design": design, "m": m, "utilisation": u, "method": method,
                             "ratio": float(grp.ok.mean())})
    return pd.DataFrame(rows)


@dataclass(frozen=True, kw_only=True)
class TaskSetJob:
    """One random set of periodic activities: its seed and index, how activities are drawn, the grid to judge it on."""

    seed: int
    index: int
    spec: ModelSpec
    activities: int
    processors: tuple[int, ...]
    utilisations: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Activity:
    """One activity of a task set: volume, each design's critical path, and its share of the set's utilisation.

    Attributes
    ----------
    volume
        ``C``.
    critical_path
        Design name -> ``L`` of that design's graph.
    makespan
        Simulated response time of the chain-based design at WCETs on ``n`` processors, index ``n - 1``.
    share
        Fraction of the task set's total utilisation that this activity carries.
    """

    volume: float
    critical_path: dict[str, float]
    makespan: tuple[float, ...]
    share: float


@dataclass(frozen=True, kw_only=True)
class TaskSetResult:
    """One task set at one processor count and utilisation, for one design and one way of sizing.

    Attributes
    ----------
    seed, task_set, m, utilisation, design
        Which run.
    method
        ``analysis``: heavy activities get ``ceil((C - L) / (D - L))`` processors (Graham's bound);
        ``simulation``: the fewest processors on which the simulated response meets the deadline.
        Light activities are admitted by response-time analysis in both.
    heavy
        Activities whose volume exceeds their deadline.
    schedulable
        Every activity found its processors.
    worst_ratio
        Largest simulated response over its analytical bound, over the activities (analysis of the
        chain-based design only, when schedulable; NaN otherwise).
    """

    seed: int
    task_set: int
    m: int
    utilisation: float
    design: str
    method: str
    heavy: int
    schedulable: bool
    worst_ratio: float


def draw_activities(job: TaskSetJob) -> list[Activity]:
    """The task set's activities: random component models, their designs and their utilisation shares."""
    rng = np.random.default_rng([job.seed, job.index, 11])
    shares = rng.dirichlet(np.ones(job.activities))
    out = []
    for share in shares:
        n = int(rng.integers(job.spec.actions[0], job.spec.actions[1] + 1))
        comps = int(rng.integers(job.spec.components[0], job.spec.components[1] + 1))
        layers = int(rng.integers(max(comps, 4), max(comps, 4) + 8))
        system = rt.random_system(n, comps, min(layers, n), job.spec.edge_prob, job.spec.loop_share, rng,
                                  layout=ACTIVITY_LAYOUT)
        g = rt.precedence_graph(system, job.spec.loop_chunks)
        designs = {name: rt.thread_design(g, name) for name in rt.DESIGNS}
        chains = designs["chains"].graph
        out.append(
            Activity(
                volume=rt.volume(g),
                critical_path={name: rt.critical_path(d.graph) for name, d in designs.items()},
                makespan=tuple(rt.simulate(chains, k).makespan for k in range(1, max(job.processors) + 1)),
                share=float(share),
            )
        )
    return out


def simulated_worst_ratio(schedule: rt.FederatedSchedule, activities: dict[str, Activity]) -> float:
    """Largest simulated response over the analytical bound in a federated schedule of chain-based designs.

    Heavy activities run alone on their dedicated processors (their first
    activation is their worst); each processor of light activities is
    simulated with preemptive fixed priorities from a synchronous release up
    to its longest period.
    """
    ratios = [activities[name].makespan[n - 1] / schedule.bounds[name] for name, n in schedule.dedicated.items()]
    for core in schedule.partitions:
        worst = rt.simulate_fixed_priority(core, max(t.period for t in core))
        ratios += [worst[t.name] / schedule.bounds[t.name] for t in core]
    return max(ratios)


def _task_set_job(job: TaskSetJob) -> list[TaskSetResult]:
    activities = draw_activities(job)
    names = [f"activity{i}" for i in range(len(activities))]
    by_name = dict(zip(names, activities))
    out = []
    for m in job.processors:
        for u in job.utilisations:
            periods = [a.volume / (a.share * u * m) for a in activities]
            heavy = sum(a.volume > p for a, p in zip(activities, periods))
            for design in rt.DESIGNS:
                tasks = [
                    rt.DagTask(name=nm, volume=a.volume, critical_path=a.critical_path[design], period=p, deadline=p)
                    for nm, a, p in zip(names, activities, periods)
                ]
                schedule = rt.federated_schedule(tasks, m)
                ratio = np.nan
                if design == "chains" and schedule.schedulable:
                    ratio = simulated_worst_ratio(schedule, by_name)
                out.append(
                    TaskSetResult(
                        seed=job.seed,
                        task_set=job.index,
                        m=m,
                        utilisation=u,
                        design=design,
                        method="analysis",
                        heavy=heavy,
                        schedulable=schedule.schedulable,
                        worst_ratio=ratio,
                    )
                )
            sized = [
                rt.DagTask(name=nm, volume=a.volume, critical_path=a.critical_path["chains"], period=p, deadline=p)
                for nm, a, p in zip(names, activities, periods)
            ]
            out.append(
                TaskSetResult(
                    seed=job.seed,
                    task_set=job.index,
                    m=m,
                    utilisation=u,
                    design="chains",
                    method="simulation",
                    heavy=heavy,
                    schedulable=simulation_sized(sized, by_name, m),
                    worst_ratio=np.nan,
                )
            )
    return out


def simulation_sized(tasks: list[rt.DagTask], activities: dict[str, Activity], processors: int) -> bool:
    """Federated scheduling with each heavy activity given the fewest processors its simulated response needs.

    Light activities are partitioned as in :func:`repro.misc.realtime.federated_schedule`
    (the response-time analysis is exact for them, so simulation would admit the same sets).
    """
    need = 0
    for t in tasks:
        if t.heavy:
            fits = [k + 1 for k, span in enumerate(activities[t.name].makespan) if span <= t.deadline * (1 + 1e-12)]
            if not fits:
                return False
            need += fits[0]
    light = [rt.PeriodicTask(name=t.name, wcet=t.volume, period=t.period, deadline=t.deadline) for t in tasks if not t.heavy]
    left = processors - need
    if left < 0 or (light and left == 0):
        return False
    return rt.partition_first_fit(light, left) is not None


def federated_sweep(params: Params) -> pd.DataFrame:
    """Judge ``params.task_sets`` random sets of periodic activities per seed; one row per set, m, U, design, method.

    A set at utilisation ``U`` on ``m`` processors has total utilisation
    ``U m``, split over its activities by a uniform draw from the simplex
    (UUniFast's distribution, drawn as a flat Dirichlet); activity ``i`` has
    period and deadline ``T_i = C_i / u_i``.
    """
    jobs = [
        TaskSetJob(seed=s, index=i, spec=params.model_spec(), activities=params.activities,
                   processors=params.processors, utilisations=params.utilisations)
        for s in params.seeds
        for i in range(params.task_sets)
    ]
    rows = [r for res in parallel_map(_task_set_job, jobs, workers=params.workers, desc="task sets") for r in res]
    return pd.DataFrame([r.__dict__ for r in rows])


def case_study(params: Params) -> pd.DataFrame:
    """The hand-built case study analysed for every seed (seeds vary the actual execution times)."""
    rows = []
    for s in params.seeds:
        rows += analyse_system(rt.CASE_STUDIES[params.case_study](), s, 0, params.processors, params.loop_chunks,
                               params.instances, params.low_fraction)
    return pd.DataFrame([r.__dict__ for r in rows])


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    designs
        One row per random model, design and processor count (bounds and simulated responses).
    schedulability
        Schedulable share per seed, design, ``m``, utilisation and method.
    case
        The case study's rows, per seed.
    federated
        One row per task set, ``m``, utilisation, design and sizing method.
    seeds
        The seeds.
    """

    designs: pd.DataFrame
    schedulability: pd.DataFrame
    case: pd.DataFrame
    federated: pd.DataFrame
    seeds: tuple[int, ...]


def run(params: Params) -> Results:
    """Analyse the random models, the case study and the sets of periodic activities."""
    designs = sweep(params)
    return Results(designs=designs, schedulability=schedulability(designs, list(params.utilisations)),
                   case=case_study(params), federated=federated_sweep(params), seeds=params.seeds)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims (see its registry file)."""
    sched, case, federated, seeds = results.schedulability, results.case, results.federated, list(results.seeds)
    designs = results.designs
    sim = sched[sched.method == "simulation"]
    federated_chains = federated[federated.design == "chains"]
    share = federated_chains.groupby(["seed", "method"]).schedulable.mean().unstack()

    def gain(seed: int, other: str, layouts: tuple[str, ...]) -> float:
        s = sim[(sim.seed == seed) & sim.layout.isin(layouts)]
        return 100.0 * float(s[s.design == "chains"].ratio.mean() - s[s.design == other].ratio.mean())

    every = tuple(sim.layout.unique())

    chains = designs[designs.design == "chains"]
    case_m = case.m.max()
    case_chains = case[(case.design == "chains") & (case.m == case_m)]
    both = pd.concat([designs, case])
    return {
        "analysis_safe": [float((both[both.seed == s].sim_max / both[both.seed == s].bound).max() - 1.0) for s in seeds],
        "sim_gain_vs_per_component": [gain(s, "per_component", (SCORED_LAYOUT,)) for s in seeds],
        "sim_gain_vs_sequential": [gain(s, "sequential", every) for s in seeds],
        "bound_pessimism": [
            float(
                100.0
                * ((chains[chains.seed == s].bound - chains[chains.seed == s].sim_wcet) / chains[chains.seed == s].bound).mean()
            )
            for s in seeds
        ],
        "case_speedup": [
            float((case_chains[case_chains.seed == s].volume / case_chains[case_chains.seed == s].sim_max).iloc[0]) for s in seeds
        ],
        "rta_safe": [
            float(np.nanmax(federated_chains[federated_chains.seed == s].worst_ratio.to_numpy(), initial=0.0)) - 1.0
            for s in seeds
        ],
        "federated_tightness": [float(100.0 * (share.loc[s, "simulation"] - share.loc[s, "analysis"])) for s in seeds],
    }


def gain_by_layout(results: Results, other: str = "per_component") -> pd.Series:
    """Simulated schedulable share of the chain-based design minus ``other``'s, points, per layout (mean over seeds)."""
    sim = results.schedulability[results.schedulability.method == "simulation"]
    share = sim.groupby(["layout", "design"]).ratio.mean().unstack()
    return 100.0 * (share["chains"] - share[other])


def schedulability_figure(sched: pd.DataFrame) -> Figure:
    """Schedulable share against utilisation, a row of panels per layout and a column per processor count.

    Solid: simulation, dashed: analysis; mean over seeds.
    """
    ms, layouts = sorted(sched.m.unique()), [lay for lay in rt.LAYOUTS if lay in set(sched.layout)]
    fig, axes = plt.subplots(len(layouts), len(ms), figsize=(4 * len(ms), 3.4 * len(layouts)), sharey=True, squeeze=False)
    mean = sched.groupby(["layout", "design", "m", "utilisation", "method"]).ratio.mean().reset_index()
    for (row, layout), (col, m) in itertools.product(enumerate(layouts), enumerate(ms)):
        ax = axes[row][col]
        here = mean[(mean.m == m) & (mean.layout == layout)]
        for (design, method), grp in here.groupby(["design", "method"]):
            ax.plot(
                grp.utilisation,
                grp.ratio,
                LINESTYLE[method],
                color=DESIGN_COLOURS[design],
                marker=".",
                label=f"{design} ({method})",
            )
        ax.set_title(f"{layout.replace('_', '-')} components, m = {m}")
        ax.set_xlabel("utilisation C / (m T)")
    for row in axes:
        row[0].set_ylabel("schedulable share of models")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def federated_figure(federated: pd.DataFrame) -> Figure:
    """Schedulable share of task sets against total utilisation / m, one panel per processor count.

    Dashed: federated scheduling judged by the analysis (Graham's bound for
    heavy activities, response-time analysis for light ones), per design;
    solid: the chain-based design with heavy activities sized by simulation.
    """
    ms = sorted(federated.m.unique())
    fig, axes = plt.subplots(1, len(ms), figsize=(4 * len(ms), 3.4), sharey=True, squeeze=False)
    mean = federated.groupby(["design", "method", "m", "utilisation"]).schedulable.mean().reset_index()
    for ax, m in zip(axes[0], ms):
        for (design, method), grp in mean[mean.m == m].groupby(["design", "method"]):
            ax.plot(
                grp.utilisation,
                grp.schedulable,
                LINESTYLE[method],
                color=DESIGN_COLOURS[design],
                marker="x" if method == "analysis" else ".",
                alpha=0.7,
                label=f"{design} ({method})",
            )
        ax.set_title(f"m = {m} processors")
        ax.set_xlabel("total utilisation / m")
    axes[0][0].set_ylabel("schedulable share of task sets")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def gantt_figure(system: rt.System, processors: int, loop_chunks: int) -> Figure:
    """Simulated schedule of the chain-based design (rows: threads), with the Graham bound marked."""
    g = rt.precedence_graph(system, loop_chunks)
    design = rt.thread_design(g, "chains")
    sched = rt.simulate(design.graph, processors)
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(design.threads) + 1.5))
    comps = sorted({g.nodes[v]["component"] for v in g})
    cmap = plt.get_cmap("tab10")
    for row, thread in enumerate(design.threads):
        for v in thread:
            c = comps.index(g.nodes[v]["component"])
            ax.barh(row, sched.finish[v] - sched.start[v], left=sched.start[v], color=cmap(c % 10), edgecolor="k", lw=0.4)
    ax.axvline(rt.graham_bound(design.graph, processors), color="tab:red", ls="--", label="Graham bound")
    ax.axvline(rt.critical_path(g), color="k", ls=":", label="critical path L")
    for c, name in enumerate(comps):
        ax.barh(-10, 0, color=cmap(c % 10), label=name)
    ax.set_ylim(-0.7, len(design.threads) - 0.3)
    ax.set_yticks(range(len(design.threads)))
    ax.set_yticklabels([f"thread {i}" for i in range(len(design.threads))], fontsize=7)
    ax.set_xlabel("time (WCET units)")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    return fig
