"""Part A of the collectives chapters: GPU-cluster and DLN platforms, the route-aware cost model,
link energy, closed forms and the chapter drivers (multileader-allreduce, a2a-2dfc, dln-allreduce)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from repro.collectives import cost as cm
from repro.collectives.algorithms import build_schedule, closed_form_cost
from repro.collectives.congestion import (LinkPower, congestion_cost, link_bytes_on_platform, link_energy,
                                          max_link_flows, step_link_flows)
from repro.collectives.experiments import (a2a_claims, a2a_lower_bound, dln_claims, halving_doubling_closed_form,
                                           hierarchical_closed_form, hop_profile, mpi_exactness, multileader_claims,
                                           network_inventory, require)
from repro.collectives.ir import link_bytes
from repro.collectives.platforms import _loop_path, distributed_loop, fat_tree, gpu_cluster, loop_offsets
from repro.collectives.executors.simgrid import simgrid_available, simulate

GPU_KW = dict(nvlink_bandwidth=50e9, pcie_bandwidth=16e9, nic_bandwidth=12.5e9, nics_per_node=2)


# ------------------------------------------------------------------ GPU cluster
@pytest.mark.parametrize("nodes,k,nics", [(1, 4, 2), (2, 4, 2), (3, 2, 1), (4, 4, 4)])
def test_gpu_cluster_routes(nodes: int, k: int, nics: int) -> None:
    """Intra-node pairs use their own NVLink link; inter-node routes are GPU->PCIe->NIC->fabric->NIC->PCIe,
    and GPU l sits behind NIC l // (k / nics)."""
    pf = gpu_cluster(nodes, k, nics_per_node=nics)
    pf.check()
    assert len(pf.hosts) == nodes * k
    per_nic = k // nics
    for i, j in itertools.permutations(range(nodes * k), 2):
        (mi, li), (mj, lj) = divmod(i, k), divmod(j, k)
        route = pf.routes[(i, j)]
        if mi == mj:
            assert route == (f"nvl{mi}_{li}->{lj}",)
        else:
            assert route == (f"pcie{mi}_{li}_up", f"nic{mi}_{li // per_nic}_up", "ib_fabric",
                             f"nic{mj}_{lj // per_nic}_down", f"pcie{mj}_{lj}_down")
    nvlinks = [n for n in pf.links if n.startswith("nvl")]
    assert len(nvlinks) == nodes * k * (k - 1)


@pytest.mark.parametrize("kwargs,name", [(dict(nodes=0, gpus_per_node=4), "nodes"),
                                         (dict(nodes=2, gpus_per_node=4, nics_per_node=3), "nics_per_node")])
def test_gpu_cluster_rejects_bad_input(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        gpu_cluster(**kwargs)


@pytest.mark.parametrize("N,k", [(2, 4), (4, 4), (8, 2)])
def test_multileader_closed_forms_equal_route_model(N: int, k: int) -> None:
    """On the GPU cluster no two flows of a step share a link more than the closed forms assume:
    the two-level closed forms of lr, lr_lr and lr_rab equal the step-by-step route-aware model."""
    pf = gpu_cluster(N, k, **GPU_KW)
    kw = dict(nodes=N, gpus_per_node=k, **GPU_KW)
    n = N * k * 1024  # divides evenly into every block
    for name, params in [("ring", {}), ("lr_lr", {"k": k}), ("lr_rab", {"k": k})]:
        sched = build_schedule(name, N * k, n, **params)
        model = congestion_cost(sched, pf, 4)
        assert model == pytest.approx(hierarchical_closed_form(name, kw, 4 * n, **params), rel=1e-9)


def test_lr_lr_injects_ring_volume_with_fewer_startups() -> None:
    """multileader invariant: lr_lr puts 2(N-1)/N * n bytes per node on the network (the flat ring, whose
    wrap-around link leaves every node once per step, 2(P-1)/P * n: about the same) while the start-ups
    drop from 2(P-1) to 2(N-1) + 2(k-1)."""
    N, k, n = 4, 4, 4 * 4 * 64
    P = N * k
    pf = gpu_cluster(N, k, **GPU_KW)
    for name, params, steps, volume in [("ring", {}, 2 * (P - 1), 2 * (P - 1) * 4 * n // P),
                                        ("lr_lr", {"k": k}, 2 * (N - 1) + 2 * (k - 1), 2 * (N - 1) * 4 * n // N)]:
        sched = build_schedule(name, P, n, **params)
        used = link_bytes_on_platform(sched, pf, 4)
        up = [sum(v for key, v in used.items() if key.startswith(f"nic{m}_") and key.endswith("_up"))
              for m in range(N)]
        assert up == [volume] * N
        assert len(sched.comm_steps()) == steps


def test_pipe_with_one_segment_moves_the_same_link_bytes() -> None:
    """lr_lr_pipe with S=1 has the same per-link byte counts as lr_lr; any S moves the same total."""
    N, k, n = 2, 4, 999
    pf = gpu_cluster(N, k, **GPU_KW)
    base = link_bytes_on_platform(build_schedule("lr_lr", N * k, n, k=k), pf)
    assert link_bytes_on_platform(build_schedule("lr_lr_pipe", N * k, n, k=k, segments=1), pf) == base
    for s in (2, 3, 4):
        got = link_bytes_on_platform(build_schedule("lr_lr_pipe", N * k, n, k=k, segments=s), pf)
        assert sum(got.values()) == sum(base.values())


# ------------------------------------------------------------------ DLN
@pytest.mark.parametrize("S", [2, 5, 8, 12, 16, 32])
def test_loop_paths_use_chords_and_reach_the_target(S: int) -> None:
    """Every signed offset is a chord +-2^j (< S) and the offsets add up to the distance mod S;
    partners at distance 2^j take exactly one chord."""
    chords = set(loop_offsets(S))
    for t in range(S):
        path = _loop_path(0, t, S)
        assert sum(path) % S == t
        assert all(abs(o) in chords for o in path)
        if t in chords or (S - t) in chords:
            assert len(path) == 1
    assert len(_loop_path(0, 0, S)) == 0


@pytest.mark.parametrize("S,p", [(4, 1), (8, 2), (8, 4), (16, 4), (4, 8)])
def test_dln_fixed_path_length_and_mitigation(S: int, p: int) -> None:
    """dln-allreduce invariants: for every halving-doubling step all partner pairs have the same route
    length (2 links inside a switch, 3 across one chord); with p parallel chords no link carries two
    flows of one step, with one chord the far steps put p flows on a link."""
    P = S * p
    for net, want in (("dln_mitigated", 1), ("dln", p)):
        prof = hop_profile(P, p, net)
        assert (prof.distinct_lengths == 1).all()
        for row in prof.itertuples():
            assert row.route_links == ([2] if row.distance < p else [3])
            assert row.max_flows_per_link == (1 if row.distance < p else want)


def test_dln_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="switches"):
        distributed_loop(0, 4, 1e9, 1e-6)
    with pytest.raises(ValueError, match="chord_copies"):
        distributed_loop(4, 4, 1e9, 1e-6, chord_copies=0)


@pytest.mark.parametrize("P,n", [(16, 4096), (64, 1 << 16)])
def test_halving_doubling_closed_form(P: int, n: int) -> None:
    """Without contention the closed form is Rabenseifner's 2 log2(P) alpha + 2 (P-1)/P n beta; with
    zero latency it equals the route-aware model on the DLN without mitigation (share p) and on a
    2:1 tapered fat tree (share 2)."""
    a, b = 1e-6, 1e-10
    assert halving_doubling_closed_form(P, n, a, b) == pytest.approx(cm.rabenseifner_cost(P, n, a, b), rel=1e-12)
    assert halving_doubling_closed_form(P, n, a, b) == pytest.approx(2 * math.log2(P) * a + 2 * (P - 1) / P * n * b)
    p, bw = 4, 1e10
    sched = build_schedule("rabenseifner", P, n // 4)
    dln = distributed_loop(P // p, p, bw, 0.0, switch_latency=0.0)
    tap = fat_tree(P, p, p // 2, bw, 0.0)
    assert congestion_cost(sched, dln, 4) == pytest.approx(halving_doubling_closed_form(P, n, 0, 1 / bw, p, p))
    assert congestion_cost(sched, tap, 4) == pytest.approx(halving_doubling_closed_form(P, n, 0, 1 / bw, p, 2))


def test_full_fat_tree_is_contention_free_for_halving_doubling() -> None:
    """With as many spines as hosts per leaf and D-mod-k routing, no step of halving-doubling shares a link."""
    pf = fat_tree(64, 8, 8, 1e10, 1e-6)
    assert max_link_flows(build_schedule("rabenseifner", 64, 64), pf) == [1] * 12


def test_network_inventory_counts_links() -> None:
    """Switch-to-switch links: DLN S * (distinct chord neighbours) * copies; fat tree 2 * leaves * spines."""
    inv = network_inventory(32, 4, ["dln", "dln_mitigated", "fat_tree", "fat_tree_tapered"]).set_index("network")
    assert inv.loc["dln", "switches"] == 8 and inv.loc["dln", "switch-to-switch links"] == 8 * 5
    assert inv.loc["dln_mitigated", "switch-to-switch links"] == 8 * 5 * 4
    assert inv.loc["fat_tree", "switch-to-switch links"] == 2 * 8 * 4
    assert inv.loc["fat_tree_tapered", "switch-to-switch links"] == 2 * 8 * 2
    assert (inv["host links"] == 64).all()


# ------------------------------------------------------------------ model and energy
def test_congestion_cost_counts_shared_links() -> None:
    """Two flows through one link halve each one's bandwidth: a 1-to-2 fan-in on a tapered tree."""
    pf = fat_tree(4, 2, 1, 1e9, 0.0)
    sched = build_schedule("linear", 4, 1000)  # every rank sends 1000 elements to every other rank
    flows = step_link_flows(sched, pf)[0]
    assert flows["L0->S0"] == 4 and flows["h0->L0"] == 3
    assert congestion_cost(sched, pf, 4) == pytest.approx(4 * 4000 / 1e9)


def test_link_energy() -> None:
    """Idle power for the whole run plus the dynamic share while busy (busy = bytes / bandwidth)."""
    pf = gpu_cluster(2, 2, nics_per_node=1, nic_bandwidth=1e9)
    sched = build_schedule("ring", 4, 1000)
    power = {"ib": LinkPower(10.0, 0.5)}
    cls = lambda name: "ib" if name.startswith("nic") else None  # noqa: E731
    used = link_bytes_on_platform(sched, pf, 4)
    T = 1e-3
    want = sum(10.0 * (0.5 * T + 0.5 * min(used.get(n, 0) / 1e9, T)) for n in pf.links if n.startswith("nic"))
    assert link_energy(sched, pf, T, power, cls, 4) == pytest.approx(want)
    assert link_energy(build_schedule("ring", 4, 0), pf, T, power, cls, 4) == pytest.approx(4 * 10.0 * 0.5 * T)


# ------------------------------------------------------------------ a2a-2dfc
@pytest.mark.parametrize("k", [2, 3, 4])
def test_striped_2dfc_is_bandwidth_optimal(k: int) -> None:
    """a2a-2dfc invariants: the multi-port lower bound is k m / B for a k x k grid, the striped closed
    form reaches it at alpha = 0, and no directed link carries more than ceil(k m / 2) elements in a phase."""
    m, B = 1000, 1e9
    assert a2a_lower_bound(k, k, m, B) == pytest.approx(k * m / B)
    assert closed_form_cost("2dfc", k * k, m, 0.0, 1 / B, rows=k) == pytest.approx(k * m / B)
    sched = build_schedule("2dfc", k * k, m, rows=k)
    for step in link_bytes(sched):
        if step:
            assert max(step.values()) == math.ceil(k * m / 2)


def test_chapter_claim_functions() -> None:
    """Claims are computed from the table: the 'existing' speed-up takes the fastest conventional
    algorithm, reductions are percent of the baseline, DLN claims read the hop table."""
    df = pd.DataFrame({"algorithm": ["2dfc:rows=2", "two_phase:rows=2", "linear", "pairwise", "bruck"] * 2,
                       "nbytes": [1] * 5 + [2] * 5, "p": 4,
                       "sim_s": [1.0, 2.0, 1.1, 5.0, 3.0, 2.0, 3.0, 2.0, np.nan, 8.0],
                       "model_s": [9.0] * 8 + [9.0, 9.0]})  # pairwise not simulated at 2: its model time counts
    got = a2a_claims(df, 2, ["pairwise", "bruck"])
    assert got == {"speedup_vs_existing": [3.0, 4.0], "speedup_vs_topology_aware": [2.0, 1.5],
                   "speedup_vs_direct": [1.1, 1.0]}
    ml = pd.DataFrame({"nodes": [2] * 4, "nbytes": 8, "sim_s": [10.0, 6.0, 5.0, 4.5],
                       "energy_J": [100.0, 70.0, 60.0, 55.0],
                       "algorithm": ["ring", "lr_lr:k=4", "lr_rab:k=4", "lr_lr_pipe:k=4,segments=2"]})
    claims = multileader_claims(ml, 4, [2])
    assert claims["lr_lr_vs_lr"] == [pytest.approx(40.0)] and claims["lr_rab_vs_lr"] == [pytest.approx(50.0)]
    assert claims["pipe_vs_lr_lr"] == [pytest.approx(25.0)] and claims["energy_lr_rab_vs_lr"] == [pytest.approx(40.0)]
    hops = pd.concat([hop_profile(16, 4, net) for net in ("dln", "dln_mitigated")])
    dl = pd.DataFrame({"algorithm": "rabenseifner", "p": 16, "nbytes": 8,
                       "network": ["dln", "dln_mitigated", "fat_tree", "fat_tree_tapered"],
                       "sim_s": [4.0, 1.0, 1.25, 2.0]})
    assert dln_claims(dl, hops) == {"fixed_path_length": [1], "contention_free": [1],
                                    "dln_vs_fat_tree": [pytest.approx(20.0)],
                                    "dln_vs_tapered_fat_tree": [pytest.approx(50.0)]}


def test_require_names_the_parameter() -> None:
    require(True, "x", "fine")
    with pytest.raises(ValueError, match="parameter 'sizes_mb'"):
        require(False, "sizes_mb", "bad")


# ------------------------------------------------------------------ engines
needs_simgrid = pytest.mark.skipif(not simgrid_available(),
                                   reason="SimGrid binding missing: run envs/simgrid-setup.sh <venv>")


@needs_simgrid
def test_simgrid_agrees_with_route_model_on_gpu_cluster_and_dln() -> None:
    """SimGrid's flow model and the route-aware alpha-beta model agree within 0.1% where every flow of a
    step is equal: lr_lr / lr_rab on the GPU cluster, halving-doubling on the DLN with and without mitigation."""
    pf = gpu_cluster(2, 4, **GPU_KW)
    for name in ("lr_lr", "lr_rab", "ring"):
        sched = build_schedule(name, 8, 1 << 20, **({"k": 4} if name != "ring" else {}))
        assert simulate(sched, pf, 4).time == pytest.approx(congestion_cost(sched, pf, 4), rel=1e-3)
    sched = build_schedule("rabenseifner", 16, 1 << 20)
    for copies in (1, 4):
        dln = distributed_loop(4, 4, 1e10, 5e-7, chord_copies=copies)
        assert simulate(sched, dln, 4).time == pytest.approx(congestion_cost(sched, dln, 4), rel=1e-3)


def test_mpi_exactness_driver() -> None:
    """The chapters' MPI driver runs the schedules on real MPI and every case equals MPI's own collective."""
    got = mpi_exactness(["lr_lr:k=2", "2dfc:rows=2", "rabenseifner"], 4, [1, 7, 100], ["int64"], timeout=120)
    assert len(got) == 9 and got["equal to MPI"].all()
    assert set(got.algorithm) == {"lr_lr:k=2", "2dfc:rows=2", "rabenseifner"}


def test_sweeps_simulate_only_what_is_asked() -> None:
    """The chapter sweeps flag SimGrid runs exactly as their parameters say (models run everywhere)."""
    from repro.collectives.experiments import a2a_points, dln_points, multileader_points

    pts = a2a_points(4, 4, [1.0, 2.0], ["2dfc", "two_phase", "pairwise"], 1e9, 1e-6, model_only=["pairwise"])
    assert [(p.spec, p.nbytes, p.simulate) for p in pts] == [
        ("2dfc:rows=4", 1024, True), ("2dfc:rows=4", 2048, True), ("two_phase:rows=4", 1024, True),
        ("two_phase:rows=4", 2048, True), ("pairwise", 1024, False), ("pairwise", 2048, False)]
    pts = dln_points([8, 16], 4, [1.0, 2.0], ["dln", "fat_tree"], [8], 1e9, 1e-6, 0.0, sim_sizes_mb=[2.0])
    assert len(pts) == 2 * (2 + 1) * 2
    assert {(p.spec, p.p, p.nbytes) for p in pts if p.simulate} == {
        ("rabenseifner", 8, 2 * 2**20), ("rabenseifner", 16, 2 * 2**20), ("ring", 8, 2 * 2**20)}
    pts = multileader_points([2], 4, [1.0, 4.0], [4.0], [2], ["ring"])
    assert [p.spec for p in pts if p.simulate] == ["ring", "lr_lr:k=4", "lr_rab:k=4", "lr_lr_pipe:k=4,segments=2"]
    assert all(p.p == 8 for p in pts)
