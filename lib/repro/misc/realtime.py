"""Component models to multithreaded designs, Graham-bound analysis and a simpy scheduler simulation.

A *system* is a set of components; each component's behaviour is an activity
(a small stand-in for a UML activity diagram): actions with worst-case
execution times (WCET), control/data-flow edges inside the component, and
edges to actions of other components (required/provided interfaces).  An
action may be a loop whose iterations are independent.

From a system this module builds

* the precedence DAG (:func:`precedence_graph`, ``networkx``), with
  independent loops split into chunks (data parallelism);
* three thread designs (:func:`thread_design`): ``sequential`` (one thread),
  ``per_component`` (one thread per component) and ``chains`` (a minimum
  chain cover of the DAG, i.e. as many threads as the DAG's widest antichain,
  by Dilworth's theorem; computed as a maximum bipartite matching on the
  transitive closure);
* the Graham bound ``L + (C - L) / m`` on the response time of the design on
  ``m`` processors under any work-conserving scheduler (:func:`graham_bound`),
  where ``C`` is the total WCET and ``L`` the longest path of the design's
  graph (the DAG plus each thread's order);
* a discrete-event simulation (:func:`simulate`, ``simpy``) of the design on
  ``m`` processors, ready actions served first come first served;
* for several periodic activities sharing ``m`` processors, federated
  scheduling (:func:`federated_schedule`): an activity whose volume exceeds its
  deadline gets ``ceil((C - L) / (D - L))`` dedicated processors, the others run
  as sequential tasks partitioned first fit onto the remaining processors under
  deadline-monotonic fixed priorities, admitted by the exact response-time
  analysis of Joseph and Pandya / Audsley et al. (:func:`response_time`:
  ``R = C + B + sum_j ceil(R / T_j) C_j`` over the higher-priority tasks ``j``),
  checked by a preemptive fixed-priority simulation (:func:`simulate_fixed_priority`).

A thread design is represented by the precedence DAG plus an edge between
consecutive actions of each thread: a thread runs its actions in order, and an
edge from another thread is a synchronisation (semaphore or message queue).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import simpy

DESIGNS = ("sequential", "per_component", "chains")
LAYOUTS = ("pipeline", "side_by_side")


@dataclass(frozen=True, kw_only=True)
class Action:
    """One action of an activity.

    Attributes
    ----------
    name
        Unique within its component.
    wcet
        Worst-case execution time of the whole action (all iterations).
    iterations
        Loop iterations; above 1 the iterations are independent and can be
        split into chunks.
    """

    name: str
    wcet: float
    iterations: int = 1


@dataclass(frozen=True, kw_only=True)
class Component:
    """A component: its activity's actions and the control/data-flow edges between them."""

    name: str
    actions: tuple[Action, ...]
    flows: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class System:
    """Components and the edges between their actions (``"component.action"`` names).

    Attributes
    ----------
    components
        The components.
    connections
        Cross-component edges, e.g. ``("sensor.sample", "filter.fir")``.
    """

    components: tuple[Component, ...]
    connections: tuple[tuple[str, str], ...] = ()


def precedence_graph(system: System, loop_chunks: int = 1) -> nx.DiGraph:
    """The system's precedence DAG.

    Nodes are ``"component.action"`` (or ``"component.action#i"`` for chunk
    ``i`` of a split loop) with attributes ``wcet`` and ``component``.  A loop
    of ``n`` iterations becomes ``min(n, loop_chunks)`` chunks of nearly equal
    iteration counts, each inheriting the loop's predecessors and successors.

    Raises
    ------
    ValueError
        If the edges form a cycle or name an unknown action.
    """
    g = nx.DiGraph()
    chunks: dict[str, list[str]] = {}
    for comp in system.components:
        for a in comp.actions:
            key = f"{comp.name}.{a.name}"
            k = max(1, min(a.iterations, loop_chunks))
            counts = np.diff(np.linspace(0, a.iterations, k + 1).round().astype(int)) if k > 1 else [a.iterations]
            names = [key] if k == 1 else [f"{key}#{i}" for i in range(k)]
            for nm, cnt in zip(names, counts):
                g.add_node(nm, wcet=a.wcet * cnt / a.iterations, component=comp.name)
            chunks[key] = names
    edges = [(f"{c.name}.{u}", f"{c.name}.{v}") for c in system.components for u, v in c.flows]
    for u, v in edges + list(system.connections):
        if u not in chunks or v not in chunks:
            raise ValueError(f"edge {u} -> {v} names an unknown action")
        g.add_edges_from(itertools.product(chunks[u], chunks[v]))
    if not nx.is_directed_acyclic_graph(g):
        raise ValueError("the activity edges form a cycle")
    return g


def volume(g: nx.DiGraph) -> float:
    """Total WCET ``C`` of the graph."""
    return float(sum(w for _, w in g.nodes(data="wcet")))


def critical_path(g: nx.DiGraph) -> float:
    """Length ``L`` of the longest path, counting node WCETs."""
    finish: dict[str, float] = {}
    for v in nx.topological_sort(g):
        finish[v] = g.nodes[v]["wcet"] + max((finish[u] for u in g.predecessors(v)), default=0.0)
    return max(finish.values(), default=0.0)


def topological_order(g: nx.DiGraph) -> list[str]:
    """A deterministic topological order (ties by node name)."""
    return list(nx.lexicographical_topological_sort(g))


def minimum_chain_cover(g: nx.DiGraph) -> list[list[str]]:
    """A minimum set of chains covering every node (consecutive nodes are comparable).

    Maximum bipartite matching (Hopcroft-Karp) between "out" and "in" copies of
    the nodes over the transitive closure; each unmatched "in" copy starts a
    chain.  The number of chains equals the largest antichain (Dilworth).
    """
    closure = nx.transitive_closure_dag(g)
    bip = nx.DiGraph()
    left = [("out", v) for v in g]
    bip.add_nodes_from(left)
    bip.add_nodes_from(("in", v) for v in g)
    bip.add_edges_from((("out", u), ("in", v)) for u, v in closure.edges)
    match = nx.bipartite.hopcroft_karp_matching(bip.to_undirected(), top_nodes=left)
    succ = {u: match[("out", u)][1] for u in g if ("out", u) in match}
    has_pred = set(succ.values())
    order = {v: i for i, v in enumerate(topological_order(g))}
    chains = []
    for v in sorted(g, key=lambda node: order[node]):
        if v in has_pred:
            continue
        chain = [v]
        while chain[-1] in succ:
            chain.append(succ[chain[-1]])
        chains.append(chain)
    return chains


def width(g: nx.DiGraph) -> int:
    """Size of the largest antichain (the most actions that may run at once)."""
    return len(minimum_chain_cover(g))


@dataclass(frozen=True, kw_only=True)
class ThreadDesign:
    """A multithreaded design of a system.

    Attributes
    ----------
    name
        ``sequential``, ``per_component`` or ``chains``.
    threads
        Each thread's actions, in execution order.
    graph
        The precedence DAG plus an edge between consecutive actions of each thread.
    """

    name: str
    threads: tuple[tuple[str, ...], ...]
    graph: nx.DiGraph = field(compare=False)

    @property
    def synchronisations(self) -> int:
        """Precedence edges between actions of different threads (semaphores or queues)."""
        where = {v: i for i, t in enumerate(self.threads) for v in t}
        return sum(1 for u, v in self.graph.edges if where[u] != where[v])


def thread_design(g: nx.DiGraph, design: str) -> ThreadDesign:
    """Build one of the :data:`DESIGNS` for the precedence DAG ``g``."""
    order = topological_order(g)
    if design == "sequential":
        threads = [order]
    elif design == "per_component":
        comps = dict.fromkeys(g.nodes[v]["component"] for v in order)
        threads = [[v for v in order if g.nodes[v]["component"] == c] for c in comps]
    elif design == "chains":
        threads = minimum_chain_cover(g)
    else:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    h = g.copy()
    for t in threads:
        h.add_edges_from(zip(t[:-1], t[1:]))
    return ThreadDesign(name=design, threads=tuple(tuple(t) for t in threads), graph=h)


def graham_bound(g: nx.DiGraph, processors: int) -> float:
    """``L + (C - L) / m``: an upper bound on the makespan of any work-conserving schedule of ``g``."""
    c, length = volume(g), critical_path(g)
    return length + (c - length) / processors


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A simulated run: start and finish time of every action, and the makespan (response time)."""

    start: dict[str, float]
    finish: dict[str, float]
    makespan: float


def simulate(g: nx.DiGraph, processors: int, exec_times: dict[str, float] | None = None) -> Schedule:
    """Run the DAG ``g`` on ``processors`` identical processors in a simpy simulation.

    Each action waits for all its predecessors, then queues for a processor
    (first come, first served; a ``simpy.Resource`` never idles while a
    request waits, so the schedule is work-conserving) and runs
    non-preemptively for its execution time.

    Parameters
    ----------
    g
        A precedence DAG (or a thread design's graph).
    processors
        ``m``.
    exec_times
        Actual execution times (default: the WCETs).

    Returns
    -------
    Schedule
    """
    env = simpy.Environment()
    cpus = simpy.Resource(env, capacity=processors)
    done = {v: env.event() for v in g}
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    times = exec_times or {v: g.nodes[v]["wcet"] for v in g}

    def run(v: str):
        yield env.all_of([done[u] for u in g.predecessors(v)])
        with cpus.request() as req:
            yield req
            start[v] = env.now
            yield env.timeout(times[v])
        finish[v] = env.now
        done[v].succeed()

    for v in topological_order(g):
        env.process(run(v))
    env.run()
    return Schedule(start=start, finish=finish, makespan=max(finish.values(), default=0.0))


def random_exec_times(g: nx.DiGraph, low_fraction: float, rng: np.random.Generator) -> dict[str, float]:
    """Actual execution times drawn uniformly in ``[low_fraction, 1] x WCET``."""
    return {v: g.nodes[v]["wcet"] * rng.uniform(low_fraction, 1.0) for v in topological_order(g)}


def random_system(n_actions: int, n_components: int, layers: int, edge_prob: float, loop_share: float,
                  rng: np.random.Generator, layout: str = "pipeline") -> System:
    """A random layered component model.

    ``n_actions`` actions are spread over ``layers`` layers; each action of a
    layer gets at least one predecessor in the layer before and every other
    one with probability ``edge_prob``.  WCETs are log-uniform in [1, 100]; a
    share ``loop_share`` of the actions are loops of 4-32 independent
    iterations.  ``layout`` (one of :data:`LAYOUTS`) says how actions belong
    to components: ``pipeline``, components are blocks of consecutive layers
    (stages, each with internal parallelism, each fed by the one before);
    ``side_by_side``, the actions of every layer are dealt to the components
    in turn, so every component spans all layers and components run
    concurrently, exchanging data at each layer.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layers < n_components and layout == "pipeline":
        raise ValueError("need at least one layer per component")
    if n_actions < n_components:
        raise ValueError("need at least one action per component")
    sizes = np.bincount(rng.integers(0, layers, size=n_actions - layers), minlength=layers) + 1
    layer_of = np.repeat(np.arange(layers), sizes)
    if layout == "pipeline":
        comp_of = np.minimum(np.arange(layers) * n_components // layers, n_components - 1)[layer_of]
    else:
        comp_of = np.arange(n_actions) % n_components
    names = [f"a{i}" for i in range(n_actions)]
    wcet = np.exp(rng.uniform(0.0, math.log(100.0), size=n_actions))
    iters = np.where(rng.random(n_actions) < loop_share, rng.integers(4, 33, size=n_actions), 1)
    by_layer = [np.flatnonzero(layer_of == lay) for lay in range(layers)]
    edges = []
    for lay in range(1, layers):
        prev = by_layer[lay - 1]
        for v in by_layer[lay]:
            preds = set(prev[rng.random(prev.size) < edge_prob]) | {int(rng.choice(prev))}
            edges += [(int(u), int(v)) for u in sorted(preds)]
    comps = []
    for c in range(n_components):
        members = [i for i in range(n_actions) if comp_of[i] == c]
        inner = tuple((names[u], names[v]) for u, v in edges if u in members and v in members)
        comps.append(
            Component(name=f"c{c}", flows=inner,
                      actions=tuple(Action(name=names[i], wcet=float(wcet[i]), iterations=int(iters[i])) for i in members)),
        )
    comp_name = {i: f"c{comp_of[i]}" for i in range(n_actions)}
    cross = tuple((f"{comp_name[u]}.{names[u]}", f"{comp_name[v]}.{names[v]}") for u, v in edges if comp_name[u] != comp_name[v])
    return System(components=tuple(comps), connections=cross)


def sensor_filter_controller() -> System:
    """The toy case study: a sensor feeding a filter with a fork/join and a data-parallel loop, then a controller."""
    sensor = Component(
        name="sensor",
        actions=(Action(name="sample", wcet=2.0), Action(name="timestamp", wcet=1.0)),
        flows=(("sample", "timestamp"),),
    )
    filt = Component(
        name="filter",
        actions=(
            Action(name="split", wcet=1.0),
            Action(name="fir", wcet=12.0, iterations=8),
            Action(name="median", wcet=6.0),
            Action(name="merge", wcet=2.0),
        ),
        flows=(("split", "fir"), ("split", "median"), ("fir", "merge"), ("median", "merge")),
    )
    ctrl = Component(
        name="controller",
        actions=(Action(name="estimate", wcet=4.0), Action(name="log", wcet=3.0), Action(name="actuate", wcet=2.0)),
        flows=(("estimate", "actuate"),),
    )
    return System(
        components=(sensor, filt, ctrl),
        connections=(
            ("sensor.timestamp", "filter.split"),
            ("filter.merge", "controller.estimate"),
            ("sensor.sample", "controller.log"),
        ),
    )


def jpeg_encoder() -> System:
    """The hand-built case study: a JPEG-like encoder pipeline of five components.

    WCETs are illustrative units (ours, not the paper's): colour conversion,
    DCT and quantisation are loops over independent 8x8 blocks; entropy coding
    is sequential.
    """
    cam = Component(
        name="camera",
        actions=(Action(name="capture", wcet=5.0), Action(name="debayer", wcet=20.0, iterations=16)),
        flows=(("capture", "debayer"),),
    )
    colour = Component(
        name="colour",
        actions=(Action(name="rgb_to_ycc", wcet=24.0, iterations=16), Action(name="subsample", wcet=8.0, iterations=8)),
        flows=(("rgb_to_ycc", "subsample"),),
    )
    dct = Component(
        name="transform",
        actions=(
            Action(name="dct_luma", wcet=48.0, iterations=32),
            Action(name="dct_chroma", wcet=24.0, iterations=16),
            Action(name="quant_luma", wcet=12.0, iterations=32),
            Action(name="quant_chroma", wcet=6.0, iterations=16),
        ),
        flows=(("dct_luma", "quant_luma"), ("dct_chroma", "quant_chroma")),
    )
    entropy = Component(
        name="entropy",
        actions=(
            Action(name="zigzag", wcet=6.0, iterations=8),
            Action(name="huffman", wcet=30.0),
            Action(name="stats", wcet=4.0),
        ),
        flows=(("zigzag", "huffman"),),
    )
    out = Component(
        name="writer", actions=(Action(name="header", wcet=2.0), Action(name="write", wcet=6.0)), flows=(("header", "write"),)
    )
    return System(
        components=(cam, colour, dct, entropy, out),
        connections=(
            ("camera.debayer", "colour.rgb_to_ycc"),
            ("colour.rgb_to_ycc", "transform.dct_luma"),
            ("colour.subsample", "transform.dct_chroma"),
            ("transform.quant_luma", "entropy.zigzag"),
            ("transform.quant_chroma", "entropy.zigzag"),
            ("transform.quant_luma", "entropy.stats"),
            ("entropy.huffman", "writer.write"),
            ("camera.capture", "writer.header"),
        ),
    )


CASE_STUDIES = {"sensor_filter_controller": sensor_filter_controller, "jpeg_encoder": jpeg_encoder}


@dataclass(frozen=True, kw_only=True)
class PeriodicTask:
    """A sequential periodic task under fixed-priority scheduling.

    Attributes
    ----------
    name
        Unique within a task set.
    wcet
        Worst-case execution time ``C``.
    period
        Minimum inter-release time ``T``.
    deadline
        Relative deadline ``D`` (constrained: ``D <= T``).
    blocking
        Longest time ``B`` a lower-priority task can block it (a non-preemptive
        section or a shared resource under a priority-ceiling protocol).
    """

    name: str
    wcet: float
    period: float
    deadline: float
    blocking: float = 0.0

    @property
    def utilisation(self) -> float:
        """``C / T``."""
        return self.wcet / self.period


@dataclass(frozen=True, kw_only=True)
class ResponseTime:
    """Result of the response-time iteration for one task.

    Attributes
    ----------
    task
        The task's name.
    response
        The fixed point ``R`` when schedulable; otherwise the first iterate above the deadline.
    iterations
        Iterations of the recurrence that were evaluated.
    schedulable
        ``R <= D``.
    """

    task: str
    response: float
    iterations: int
    schedulable: bool


def deadline_monotonic(tasks: Sequence[PeriodicTask]) -> list[PeriodicTask]:
    """Tasks in deadline-monotonic priority order, highest first (ties by period, then name)."""
    return sorted(tasks, key=lambda t: (t.deadline, t.period, t.name))


def response_time(task: PeriodicTask, higher: Sequence[PeriodicTask], tolerance: float = 1e-9) -> ResponseTime:
    """Worst-case response time of ``task`` below the tasks ``higher`` on one preemptive processor.

    Iterates ``R <- C + B + sum_j ceil(R / T_j) C_j`` from ``R = C + B + sum_j C_j``
    until it stops changing (the least fixed point, exact for independent
    tasks released together, the critical instant) or exceeds the deadline.

    Parameters
    ----------
    task
        The task under analysis.
    higher
        Every task of higher priority on the same processor.
    tolerance
        Relative slack in the ceiling, so that ``R`` equal to a multiple of a
        period up to rounding does not count one more release.

    Returns
    -------
    ResponseTime
    """
    if task.deadline > task.period:
        raise ValueError(f"task {task.name}: deadline {task.deadline} exceeds its period {task.period}")
    own = task.wcet + task.blocking
    response = own + sum(t.wcet for t in higher)
    iterations = 1
    while response <= task.deadline * (1 + tolerance):
        nxt = own + sum(math.ceil(response / t.period - tolerance) * t.wcet for t in higher)
        iterations += 1
        if nxt <= response:
            return ResponseTime(task=task.name, response=response, iterations=iterations, schedulable=True)
        response = nxt
    return ResponseTime(task=task.name, response=response, iterations=iterations, schedulable=False)


def response_time_analysis(tasks: Sequence[PeriodicTask]) -> list[ResponseTime]:
    """:func:`response_time` of every task, ``tasks`` given in priority order (highest first)."""
    return [response_time(t, tasks[:i]) for i, t in enumerate(tasks)]


def simulate_fixed_priority(
    tasks: Sequence[PeriodicTask], horizon: float, exec_times: dict[str, float] | None = None
) -> dict[str, float]:
    """Worst response time of each task in a preemptive fixed-priority simulation on one processor (``simpy``).

    All tasks release their first job at time 0 and then strictly
    periodically until ``horizon``; a released job preempts any job of lower
    priority (``tasks`` are in priority order, highest first).  Blocking
    terms are not simulated.

    Parameters
    ----------
    tasks
        The task set in priority order.
    horizon
        Last release instant considered; every released job is run to completion.
    exec_times
        Actual execution time per task name (default: the WCETs).

    Returns
    -------
    dict
        Task name -> largest response time over its simulated jobs.
    """
    env = simpy.Environment()
    cpu = simpy.PreemptiveResource(env, capacity=1)
    worst = {t.name: 0.0 for t in tasks}
    times = exec_times or {t.name: t.wcet for t in tasks}
    scale = max((t.period for t in tasks), default=1.0)

    def job(priority: int, task: PeriodicTask):
        released, remaining = env.now, times[task.name]
        while remaining > 1e-12 * scale:
            with cpu.request(priority=priority, preempt=True) as req:
                started = None
                try:
                    yield req
                    started = env.now
                    yield env.timeout(remaining)
                    remaining = 0.0
                except simpy.Interrupt:  # preempted, possibly in the instant it was granted the processor
                    if started is not None:
                        remaining -= env.now - started
        worst[task.name] = max(worst[task.name], env.now - released)

    def releases(priority: int, task: PeriodicTask):
        while env.now <= horizon:
            env.process(job(priority, task))
            yield env.timeout(task.period)

    for i, t in enumerate(tasks):
        env.process(releases(i, t))
    env.run()
    return worst


def partition_first_fit(tasks: Sequence[PeriodicTask], processors: int) -> list[list[PeriodicTask]] | None:
    """First-fit-decreasing partitioning admitted by response-time analysis.

    Tasks are taken by decreasing utilisation; each goes to the first
    processor on which every task, in deadline-monotonic order, stays
    schedulable.

    Returns
    -------
    list or None
        Each processor's tasks in priority order, or ``None`` if a task fits nowhere.
    """
    cores: list[list[PeriodicTask]] = [[] for _ in range(processors)]
    for task in sorted(tasks, key=lambda t: (-t.utilisation, t.name)):
        for i, core in enumerate(cores):
            trial = deadline_monotonic(core + [task])
            if all(r.schedulable for r in response_time_analysis(trial)):
                cores[i] = trial
                break
        else:
            return None
    return cores


def federated_cores(volume_: float, length: float, deadline: float) -> int | None:
    """Dedicated processors a heavy DAG task needs under federated scheduling: ``ceil((C - L) / (D - L))``.

    ``None`` if the critical path alone misses the deadline (``L >= D``).
    Chosen so that Graham's bound ``L + (C - L) / n`` is at most ``D``.
    """
    if length >= deadline:
        return None
    return max(1, math.ceil((volume_ - length) / (deadline - length) - 1e-12))


@dataclass(frozen=True, kw_only=True)
class DagTask:
    """A periodic activity: a thread design's graph, released every ``period``, due ``deadline`` after release."""

    name: str
    volume: float
    critical_path: float
    period: float
    deadline: float

    @property
    def heavy(self) -> bool:
        """Its volume exceeds its deadline, so one processor cannot meet it."""
        return self.volume > self.deadline


@dataclass(frozen=True, kw_only=True)
class FederatedSchedule:
    """Outcome of federated scheduling of DAG tasks on ``m`` processors.

    Attributes
    ----------
    schedulable
        Every heavy task got its dedicated processors and every light task a processor.
    dedicated
        Heavy task name -> number of dedicated processors.
    partitions
        The light tasks (as sequential :class:`PeriodicTask`) on each remaining processor, in priority order.
    bounds
        Task name -> analytical response-time bound (Graham's bound on the dedicated
        processors for a heavy task, the response-time analysis for a light one); empty if not schedulable.
    """

    schedulable: bool
    dedicated: dict[str, int]
    partitions: tuple[tuple[PeriodicTask, ...], ...]
    bounds: dict[str, float]


def federated_schedule(tasks: Sequence[DagTask], processors: int) -> FederatedSchedule:
    """Federated scheduling (Li et al., 2014) with fixed-priority partitioning of the light tasks.

    A heavy task gets :func:`federated_cores` dedicated processors; the light
    tasks run sequentially (their volume as WCET) and are partitioned first fit
    onto the processors left, admitted by :func:`response_time`.
    """
    dedicated: dict[str, int] = {}
    for t in tasks:
        if t.heavy:
            n = federated_cores(t.volume, t.critical_path, t.deadline)
            if n is None:
                return FederatedSchedule(schedulable=False, dedicated=dedicated, partitions=(), bounds={})
            dedicated[t.name] = n
    left = processors - sum(dedicated.values())
    light = [PeriodicTask(name=t.name, wcet=t.volume, period=t.period, deadline=t.deadline) for t in tasks if not t.heavy]
    if left < 0 or (light and left == 0):
        return FederatedSchedule(schedulable=False, dedicated=dedicated, partitions=(), bounds={})
    cores = partition_first_fit(light, left)
    if cores is None:
        return FederatedSchedule(schedulable=False, dedicated=dedicated, partitions=(), bounds={})
    bounds = {t.name: t.critical_path + (t.volume - t.critical_path) / dedicated[t.name] for t in tasks if t.heavy}
    for core in cores:
        bounds.update({r.task: r.response for r in response_time_analysis(core)})
    return FederatedSchedule(schedulable=True, dedicated=dedicated, partitions=tuple(tuple(c) for c in cores if c), bounds=bounds)
