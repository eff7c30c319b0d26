"""GPU-cluster, DLN and fat-tree platforms, the route-aware cost model and link energy.

The platform-level closed forms are checked against the model, and the model against SimGrid.
"""

from __future__ import annotations

import itertools
import math

import pytest

from repro.collectives import cost as cm
from repro.collectives.algorithms import build_schedule
from repro.collectives.congestion import (
    LinkPower,
    congestion_cost,
    link_bytes_on_platform,
    link_energy,
    max_link_flows,
    step_link_flows,
)
from repro.collectives.cost import halving_doubling_closed_form, hierarchical_closed_form
from repro.hpc.platforms import GpuClusterSettings, distributed_loop, fat_tree, gpu_cluster, loop_offsets, loop_path
from repro.hpc.simgrid import simgrid_available, simulate

GPU_LINKS = GpuClusterSettings(nvlink_bandwidth=50e9, pcie_bandwidth=16e9, nic_bandwidth=12.5e9, nics_per_node=2)


# ------------------------------------------------------------------ GPU cluster
@pytest.mark.parametrize("nodes,k,nics", [(1, 4, 2), (2, 4, 2), (3, 2, 1), (4, 4, 4)])
def test_gpu_cluster_routes(nodes: int, k: int, nics: int) -> None:
    """Intra-node pairs use their own NVLink link.

    Inter-node routes are GPU->PCIe->NIC->fabric->NIC->PCIe, and GPU l sits behind NIC l // (k / nics).
    """
    pf = gpu_cluster(nodes, k, GpuClusterSettings(nics_per_node=nics))
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
                                         (dict(nodes=2, gpus_per_node=4,
                                               settings=GpuClusterSettings(nics_per_node=3)), "nics_per_node")])
def test_gpu_cluster_rejects_bad_input(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        gpu_cluster(**kwargs)


def test_gpu_cluster_settings_set_every_link() -> None:
    """Each constant of the settings record lands on its links (and the defaults are the record's own)."""
    links = GpuClusterSettings(nvlink_bandwidth=1e9, nvlink_latency=2e-6, pcie_bandwidth=3e9, pcie_latency=4e-6,
                               nic_bandwidth=5e9, nic_latency=6e-6, nics_per_node=1, switch_latency=7e-6, switch_hops=2)
    pf = gpu_cluster(2, 2, links)
    got = {name: (link.bandwidth, link.latency) for name, link in pf.links.items()}
    assert got["nvl0_0->1"] == (1e9, 2e-6)
    assert got["pcie0_1_up"] == (3e9, 4e-6)
    assert got["nic1_0_down"] == (5e9, 6e-6)
    assert got["ib_fabric"][1] == pytest.approx(2 * 7e-6)
    assert pf.route_latency(0, 2) == pytest.approx(links.inter_node_latency)
    assert gpu_cluster(2, 4).links["nic0_1_up"].bandwidth == GpuClusterSettings().nic_bandwidth


@pytest.mark.parametrize("N,k", [(2, 4), (4, 4), (8, 2)])
def test_multileader_closed_forms_equal_route_model(N: int, k: int) -> None:
    """On the GPU cluster no two flows of a step share a link more than the closed forms assume.

    The two-level closed forms of lr, lr_lr and lr_rab equal the step-by-step route-aware model.
    """
    pf = gpu_cluster(N, k, GPU_LINKS)
    kw = dict(nodes=N, gpus_per_node=k, settings=GPU_LINKS)
    n = N * k * 1024  # divides evenly into every block
    for name, params in [("ring", {}), ("lr_lr", {"k": k}), ("lr_rab", {"k": k})]:
        sched = build_schedule(name, N * k, n, **params)
        model = congestion_cost(sched, pf, 4)
        assert model == pytest.approx(hierarchical_closed_form(name, kw, 4 * n, **params), rel=1e-9)


def test_lr_lr_injects_ring_volume_with_fewer_startups() -> None:
    """Multileader invariant.

    ``lr_lr`` puts 2(N-1)/N * n bytes per node on the network (the flat ring, whose wrap-around link leaves every
    node once per step, 2(P-1)/P * n: about the same) while the start-ups drop from 2(P-1) to 2(N-1) + 2(k-1).
    """
    N, k, n = 4, 4, 4 * 4 * 64
    P = N * k
    pf = gpu_cluster(N, k, GPU_LINKS)
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
    pf = gpu_cluster(N, k, GPU_LINKS)
    base = link_bytes_on_platform(build_schedule("lr_lr", N * k, n, k=k), pf)
    assert link_bytes_on_platform(build_schedule("lr_lr_pipe", N * k, n, k=k, segments=1), pf) == base
    for s in (2, 3, 4):
        got = link_bytes_on_platform(build_schedule("lr_lr_pipe", N * k, n, k=k, segments=s), pf)
        assert sum(got.values()) == sum(base.values())


# ------------------------------------------------------------------ DLN
@pytest.mark.parametrize("S", [2, 5, 8, 12, 16, 32])
def testloop_paths_use_chords_and_reach_the_target(S: int) -> None:
    """Every signed offset is a chord +-2^j (< S) and the offsets add up to the distance mod S.

    Partners at distance 2^j take exactly one chord.
    """
    chords = set(loop_offsets(S))
    for t in range(S):
        path = loop_path(0, t, S)
        assert sum(path) % S == t
        assert all(abs(o) in chords for o in path)
        if t in chords or (S - t) in chords:
            assert len(path) == 1
    assert len(loop_path(0, 0, S)) == 0


def test_dln_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="switches"):
        distributed_loop(0, 4, 1e9, 1e-6)
    with pytest.raises(ValueError, match="chord_copies"):
        distributed_loop(4, 4, 1e9, 1e-6, chord_copies=0)


@pytest.mark.parametrize("P,n", [(16, 4096), (64, 1 << 16)])
def test_halving_doubling_closed_form(P: int, n: int) -> None:
    """Without contention the closed form is Rabenseifner's 2 log2(P) alpha + 2 (P-1)/P n beta.

    With zero latency it equals the route-aware model on the DLN without mitigation (share p) and on a 2:1
    tapered fat tree (share 2).
    """
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
    pf = gpu_cluster(2, 2, GpuClusterSettings(nics_per_node=1, nic_bandwidth=1e9))
    sched = build_schedule("ring", 4, 1000)
    power = {"ib": LinkPower(peak_w=10.0, idle_fraction=0.5)}
    cls = lambda name: "ib" if name.startswith("nic") else None  # noqa: E731
    used = link_bytes_on_platform(sched, pf, 4)
    T = 1e-3
    want = sum(10.0 * (0.5 * T + 0.5 * min(used.get(n, 0) / 1e9, T)) for n in pf.links if n.startswith("nic"))
    assert link_energy(sched, pf, T, power, cls, 4) == pytest.approx(want)
    assert link_energy(build_schedule("ring", 4, 0), pf, T, power, cls, 4) == pytest.approx(4 * 10.0 * 0.5 * T)


# ------------------------------------------------------------------ a2a-2dfc


# ------------------------------------------------------------------ engines
needs_simgrid = pytest.mark.skipif(not simgrid_available(),
                                   reason="SimGrid binding missing: run envs/simgrid-setup.sh <venv>")


@needs_simgrid
def test_simgrid_agrees_with_route_model_on_gpu_cluster_and_dln() -> None:
    """SimGrid's flow model and the route-aware alpha-beta model agree within 0.1% where every flow of a step is equal.

    ``lr_lr`` / ``lr_rab`` on the GPU cluster, halving-doubling on the DLN with and without mitigation.
    """
    pf = gpu_cluster(2, 4, GPU_LINKS)
    for name in ("lr_lr", "lr_rab", "ring"):
        sched = build_schedule(name, 8, 1 << 20, **({"k": 4} if name != "ring" else {}))
        assert simulate(sched, pf, 4).time == pytest.approx(congestion_cost(sched, pf, 4), rel=1e-3)
    sched = build_schedule("rabenseifner", 16, 1 << 20)
    for copies in (1, 4):
        dln = distributed_loop(4, 4, 1e10, 5e-7, chord_copies=copies)
        assert simulate(sched, dln, 4).time == pytest.approx(congestion_cost(sched, dln, 4), rel=1e-3)


