"""Component models, thread designs, the Graham bound and the simpy scheduler simulation."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from repro.misc import realtime as rt


def _random_graph(seed: int, n: int = 40) -> nx.DiGraph:
    rng = np.random.default_rng(seed)
    system = rt.random_system(n, 3, 6, 0.2, 0.3, rng)
    return rt.precedence_graph(system, loop_chunks=3)


def _brute_force_width(g: nx.DiGraph) -> int:
    closure = nx.transitive_closure_dag(g)
    nodes = list(g)
    for size in range(len(nodes), 0, -1):
        for subset in itertools.combinations(nodes, size):
            if not any(closure.has_edge(u, v) or closure.has_edge(v, u) for u, v in itertools.combinations(subset, 2)):
                return size
    return 0


@pytest.mark.parametrize("seed", range(6))
def test_minimum_chain_cover_equals_largest_antichain(seed):
    rng = np.random.default_rng(seed)
    g = nx.gnp_random_graph(10, 0.25, seed=seed, directed=True)
    g = nx.DiGraph([(u, v) for u, v in g.edges if u < v])
    g.add_nodes_from(range(10))
    nx.set_node_attributes(g, {v: float(rng.uniform(1, 5)) for v in g}, "wcet")
    chains = rt.minimum_chain_cover(g)
    assert len(chains) == _brute_force_width(g)
    assert sorted(v for c in chains for v in c) == sorted(g)
    closure = nx.transitive_closure_dag(g)
    assert all(closure.has_edge(u, v) for c in chains for u, v in zip(c[:-1], c[1:]))


@pytest.mark.parametrize("seed", range(4))
def test_simulation_respects_every_edge_and_never_exceeds_the_bound(seed):
    g = _random_graph(seed)
    rng = np.random.default_rng(seed)
    for name in rt.DESIGNS:
        design = rt.thread_design(g, name)
        assert set(g.edges) <= set(design.graph.edges) and nx.is_directed_acyclic_graph(design.graph)
        for m in (1, 2, 3, 5):
            for times in (None, rt.random_exec_times(g, 0.2, rng)):
                s = rt.simulate(design.graph, m, times)
                assert all(s.start[v] >= s.finish[u] - 1e-9 for u, v in design.graph.edges)
                assert s.makespan <= rt.graham_bound(design.graph, m) + 1e-9


def test_one_processor_and_enough_processors():
    g = _random_graph(11)
    c, length, w = rt.volume(g), rt.critical_path(g), rt.width(g)
    assert rt.graham_bound(g, 1) == pytest.approx(c)
    assert rt.simulate(g, 1).makespan == pytest.approx(c)
    assert rt.simulate(g, w).makespan == pytest.approx(length)
    assert rt.simulate(rt.thread_design(g, "chains").graph, w).makespan == pytest.approx(length)


def test_designs_order_their_critical_paths():
    g = _random_graph(5, n=60)
    lengths = {name: rt.critical_path(rt.thread_design(g, name).graph) for name in rt.DESIGNS}
    assert lengths["chains"] == pytest.approx(rt.critical_path(g))
    assert lengths["sequential"] == pytest.approx(rt.volume(g))
    assert lengths["chains"] <= lengths["per_component"] <= lengths["sequential"]
    assert len(rt.thread_design(g, "chains").threads) == rt.width(g)


def test_loop_splitting_keeps_the_volume():
    system = rt.jpeg_encoder()
    whole = rt.precedence_graph(system, loop_chunks=1)
    split = rt.precedence_graph(system, loop_chunks=8)
    assert rt.volume(split) == pytest.approx(rt.volume(whole))
    assert split.number_of_nodes() > whole.number_of_nodes()
    assert rt.critical_path(split) < rt.critical_path(whole)


def test_a_cycle_and_an_unknown_action_are_refused():
    a = rt.Component(
        name="a", actions=(rt.Action(name="x", wcet=1.0), rt.Action(name="y", wcet=1.0)), flows=(("x", "y"), ("y", "x"))
    )
    with pytest.raises(ValueError, match="cycle"):
        rt.precedence_graph(rt.System(components=(a,)))
    b = rt.Component(name="b", actions=(rt.Action(name="x", wcet=1.0),))
    with pytest.raises(ValueError, match="unknown"):
        rt.precedence_graph(rt.System(components=(b,), connections=(("b.x", "b.z"),)))


def test_a_violated_bound_would_be_seen():
    """A schedule that idles a processor while work waits can exceed the bound: the check is not vacuous."""
    g = nx.DiGraph()
    g.add_node("long", wcet=10.0)
    g.add_nodes_from((f"s{i}", {"wcet": 1.0}) for i in range(4))
    g.add_edges_from(("s0", f"s{i}") for i in range(1, 4))
    # a non-work-conserving run: everything on one of the two processors
    assert rt.simulate(g, 1).makespan > rt.graham_bound(g, 2)


# ---- fixed-priority response-time analysis, partitioning and federated scheduling ----


def _tasks(*specs: tuple[float, float]) -> list[rt.PeriodicTask]:
    """Tasks named t0, t1, ... with (C, T) and D = T, in the given priority order."""
    return [rt.PeriodicTask(name=f"t{i}", wcet=c, period=t, deadline=t) for i, (c, t) in enumerate(specs)]


def test_response_times_of_a_textbook_task_set():
    """(3, 7), (3, 12), (5, 20): the lowest task iterates 11, 14, 17, 20, 20."""
    rts = rt.response_time_analysis(_tasks((3, 7), (3, 12), (5, 20)))
    assert [r.response for r in rts] == [3, 6, 20]
    assert all(r.schedulable for r in rts)
    assert rts[2].iterations == 5


def test_the_iteration_runs_several_steps_before_its_fixed_point():
    """(1, 4), (2, 6), (3, 13): 6, 7, 9, 10, 10 for the lowest task."""
    rts = rt.response_time_analysis(_tasks((1, 4), (2, 6), (3, 13)))
    assert [r.response for r in rts] == [1, 3, 10]
    assert rts[2].iterations == 5


def test_an_unschedulable_task_is_reported_with_its_first_late_iterate():
    """(2, 4), (3, 6): U = 1 but the second task needs 3 + 2 * 2 = 7 > 6."""
    tasks = _tasks((2, 4), (3, 6))
    high, low = rt.response_time_analysis(tasks)
    assert high.schedulable and high.response == 2
    assert not low.schedulable and low.response == 7
    assert rt.simulate_fixed_priority(tasks, 24)["t1"] == pytest.approx(7)


def test_blocking_adds_to_the_recurrence():
    """(3, 7), then (3, 12) blocked for 2: 8, 11, 11."""
    high, low = _tasks((3, 7), (3, 12))
    r = rt.response_time(
        rt.PeriodicTask(name=low.name, wcet=low.wcet, period=low.period, deadline=low.deadline, blocking=2.0), [high]
    )
    assert r.response == 11 and r.schedulable and r.iterations == 3


def test_a_deadline_beyond_the_period_is_refused():
    with pytest.raises(ValueError, match="exceeds its period"):
        rt.response_time(rt.PeriodicTask(name="x", wcet=1.0, period=5.0, deadline=6.0), [])


def test_deadline_monotonic_order():
    tasks = [
        rt.PeriodicTask(name="a", wcet=1, period=10, deadline=9),
        rt.PeriodicTask(name="b", wcet=1, period=8, deadline=8),
        rt.PeriodicTask(name="c", wcet=1, period=10, deadline=9),
    ]
    assert [t.name for t in rt.deadline_monotonic(tasks)] == ["b", "a", "c"]


def _random_task_set(seed: int, n: int, utilisation: float) -> list[rt.PeriodicTask]:
    rng = np.random.default_rng(seed)
    periods = rng.choice([5, 8, 10, 12, 20, 25, 40], size=n)
    utils = rng.dirichlet(np.ones(n)) * utilisation
    return rt.deadline_monotonic(
        [
            rt.PeriodicTask(name=f"t{i}", wcet=float(u * p), period=float(p), deadline=float(p))
            for i, (u, p) in enumerate(zip(utils, periods))
        ]
    )


@pytest.mark.parametrize("seed", range(8))
def test_analysis_equals_the_simulated_critical_instant_and_bounds_shorter_jobs(seed):
    tasks = _random_task_set(seed, 5, 0.85)
    rts = rt.response_time_analysis(tasks)
    horizon = 2 * max(t.period for t in tasks)
    worst = rt.simulate_fixed_priority(tasks, horizon)
    early = rt.simulate_fixed_priority(tasks, horizon, {t.name: t.wcet * 0.6 for t in tasks})
    for r in rts:
        if r.schedulable:
            assert worst[r.task] == pytest.approx(r.response, rel=1e-9)
            assert early[r.task] <= r.response * (1 + 1e-9)
        else:
            assert worst[r.task] > next(t.deadline for t in tasks if t.name == r.task)


def test_a_bound_that_leaves_out_interference_is_caught_by_the_simulation():
    tasks = _tasks((1, 4), (2, 6), (3, 13))
    without_top = rt.response_time(tasks[2], tasks[1:2])
    assert rt.simulate_fixed_priority(tasks, 26)["t2"] > without_top.response


def test_first_fit_partitioning_admits_by_response_time():
    tasks = _tasks((2, 4), (3, 6), (1, 4))  # the first two cannot share a processor
    assert rt.partition_first_fit(tasks, 1) is None
    cores = rt.partition_first_fit(tasks, 2)
    assert cores is not None and sorted(t.name for c in cores for t in c) == ["t0", "t1", "t2"]
    for core in cores:
        assert all(r.schedulable for r in rt.response_time_analysis(core))
        assert {t.name for t in core} != {"t0", "t1"}


def test_federated_cores_meet_the_deadline_with_graham():
    assert rt.federated_cores(10.0, 4.0, 6.0) == 3  # 4 + 6 / 3 = 6 <= 6, 4 + 6 / 2 > 6
    assert rt.federated_cores(10.0, 6.0, 6.0) is None
    heavy = rt.DagTask(name="h", volume=10.0, critical_path=4.0, period=6.0, deadline=6.0)
    light = rt.DagTask(name="l", volume=2.0, critical_path=1.0, period=5.0, deadline=5.0)
    assert heavy.heavy and not light.heavy
    fs = rt.federated_schedule([heavy, light], 4)
    assert fs.schedulable and fs.dedicated == {"h": 3} and fs.bounds == {"h": pytest.approx(6.0), "l": 2.0}
    assert not rt.federated_schedule([heavy, light], 3).schedulable


@pytest.mark.parametrize("seed", range(3))
def test_federated_schedules_of_random_designs_hold_in_simulation(seed):
    rng = np.random.default_rng(seed)
    graphs = [rt.thread_design(_random_graph(10 * seed + i, n=30), "chains").graph for i in range(4)]
    utils = rng.dirichlet(np.ones(4)) * 2.5
    tasks = [
        rt.DagTask(
            name=f"a{i}",
            volume=rt.volume(g),
            critical_path=rt.critical_path(g),
            period=rt.volume(g) / u,
            deadline=rt.volume(g) / u,
        )
        for i, (g, u) in enumerate(zip(graphs, utils))
    ]
    fs = rt.federated_schedule(tasks, 32)
    assert fs.schedulable and fs.dedicated and fs.partitions
    for name, n in fs.dedicated.items():
        assert rt.simulate(graphs[int(name[1:])], n).makespan <= fs.bounds[name] * (1 + 1e-9)
    for core in fs.partitions:
        worst = rt.simulate_fixed_priority(core, max(t.period for t in core))
        assert all(worst[t.name] <= fs.bounds[t.name] * (1 + 1e-9) for t in core)


@pytest.mark.parametrize("layout", rt.LAYOUTS)
def test_layouts_deal_the_same_graph_to_components(layout):
    """A pipeline's components are blocks of consecutive layers; side by side, every component spans the layers.

    Either way the same layered graph is drawn, with every action in exactly one component.
    """
    graphs = {}
    for lay in rt.LAYOUTS:
        system = rt.random_system(30, 3, 6, 0.2, 0.0, np.random.default_rng(3), layout=lay)
        graphs[lay] = rt.precedence_graph(system)
        assert sorted(a.name for c in system.components for a in c.actions) == sorted(f"a{i}" for i in range(30))
    def action_edges(g: nx.DiGraph) -> set[tuple[str, str]]:
        return {(u.split(".")[1], v.split(".")[1]) for u, v in g.edges}

    assert action_edges(graphs["pipeline"]) == action_edges(graphs["side_by_side"])
    g = graphs[layout]
    first_layer = [v for v in g if g.in_degree(v) == 0]
    comps_in_first_layer = {g.nodes[v]["component"] for v in first_layer}
    if layout == "pipeline":
        assert len(comps_in_first_layer) == 1
    else:
        assert len(comps_in_first_layer) == min(3, len(first_layer))


def test_an_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="layout"):
        rt.random_system(30, 3, 6, 0.2, 0.0, np.random.default_rng(3), layout="ring")
