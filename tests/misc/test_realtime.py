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
    a = rt.Component("a", (rt.Action("x", 1.0), rt.Action("y", 1.0)), (("x", "y"), ("y", "x")))
    with pytest.raises(ValueError, match="cycle"):
        rt.precedence_graph(rt.System((a,)))
    b = rt.Component("b", (rt.Action("x", 1.0),))
    with pytest.raises(ValueError, match="unknown"):
        rt.precedence_graph(rt.System((b,), (("b.x", "b.z"),)))


def test_a_violated_bound_would_be_seen():
    """A schedule that idles a processor while work waits can exceed the bound: the check is not vacuous."""
    g = nx.DiGraph()
    g.add_node("long", wcet=10.0)
    g.add_nodes_from((f"s{i}", {"wcet": 1.0}) for i in range(4))
    g.add_edges_from(("s0", f"s{i}") for i in range(1, 4))
    # a non-work-conserving run: everything on one of the two processors
    assert rt.simulate(g, 1).makespan > rt.graham_bound(g, 2)
