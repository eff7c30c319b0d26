"""The drivers of the sweep chapters (multileader-allreduce, a2a-2dfc, dln-allreduce).

Sweep points, claim values computed from small hand-made tables, the DLN hop profile and hardware inventory,
and the cross-field checks of their registry entries.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from repro import params
from repro.collectives.algorithms import build_schedule, closed_form_cost
from repro.collectives.chapters import a2a_2dfc, dln_allreduce, hamming_fec, multileader_allreduce
from repro.collectives.sweep import build_platform
from repro.hpc.ir import link_bytes
from repro.hpc.platforms import GpuClusterSettings
from repro.registry import load_registry


@pytest.mark.parametrize("S,p", [(4, 1), (8, 2), (8, 4), (16, 4), (4, 8)])
def test_dln_fixed_path_length_and_mitigation(S: int, p: int) -> None:
    """dln-allreduce invariants.

    For every halving-doubling step all partner pairs have the same route length (2 links inside a switch, 3
    across one chord); with p parallel chords no link carries two flows of one step, with one chord the far
    steps put p flows on a link.
    """
    P = S * p
    for net, want in (("dln_mitigated", 1), ("dln", p)):
        prof = dln_allreduce.hop_profile(P, p, net)
        assert (prof.distinct_lengths == 1).all()
        for row in prof.itertuples():
            assert row.route_links == ([2] if row.distance < p else [3])
            assert row.max_flows_per_link == (1 if row.distance < p else want)


def test_network_inventory_counts_links() -> None:
    """Switch-to-switch links: DLN S * (distinct chord neighbours) * copies; fat tree 2 * leaves * spines.

    The equal-link fat tree is built with as many links as the mitigated DLN, but its D-mod-k routes reach a
    leaf through hosts_per_switch spines only, so fewer of them carry traffic (the inventory once counted only
    those and showed the 'equal' tree with fewer links).
    """
    nets = ["dln", "dln_mitigated", "fat_tree", "fat_tree_tapered", "fat_tree_equal_links"]
    inv = dln_allreduce.network_inventory(32, 4, nets).set_index("network")
    assert inv.loc["dln", "switches"] == 8 and inv.loc["dln", "switch-to-switch links"] == 8 * 5
    assert inv.loc["dln_mitigated", "switch-to-switch links"] == 8 * 5 * 4
    assert inv.loc["fat_tree", "switch-to-switch links"] == 2 * 8 * 4
    assert inv.loc["fat_tree_tapered", "switch-to-switch links"] == 2 * 8 * 2
    spines = dln_allreduce.equal_link_spines(32, 4)
    assert inv.loc["fat_tree_equal_links", "switch-to-switch links"] == 2 * 8 * spines
    assert inv.loc["fat_tree_equal_links", "switches"] == 8 + spines
    assert inv.loc["fat_tree_equal_links", "used by routes"] == 8 * spines + 8 * 4  # every up link, 4 down per leaf
    assert (inv.loc[["dln", "dln_mitigated", "fat_tree"], "used by routes"]
            == inv.loc[["dln", "dln_mitigated", "fat_tree"], "switch-to-switch links"]).all()
    assert (inv["host links"] == 64).all()


@pytest.mark.parametrize("k", [2, 3, 4])
def test_striped_2dfc_is_bandwidth_optimal(k: int) -> None:
    """a2a-2dfc invariants.

    The multi-port lower bound is k m / B for a k x k grid, the striped closed form reaches it at alpha = 0,
    and no directed link carries more than ceil(k m / 2) elements in a phase.
    """
    m, B = 1000, 1e9
    assert a2a_2dfc.lower_bound(k, k, m, B) == pytest.approx(k * m / B)
    assert closed_form_cost("2dfc", k * k, m, 0.0, 1 / B, rows=k) == pytest.approx(k * m / B)
    sched = build_schedule("2dfc", k * k, m, rows=k)
    for step in link_bytes(sched):
        if step:
            assert max(step.values()) == math.ceil(k * m / 2)


def _params(chapter_id: str, **override: object) -> params.ChapterParams:
    """The chapter's checked ``Params`` at the smoke profile with ``override`` applied."""
    ch = load_registry().get(chapter_id)
    built = params.build_params(ch, params.resolve(ch, "smoke", dict(override)))
    assert built is not None
    return built


def test_a2a_claims_are_one_value_at_the_judged_block() -> None:
    """Each claim is one value (deterministic) read at judged_kb, not one per block size.

    The 'existing' speed-up takes the fastest conventional algorithm, with the model's time where the
    algorithm was not simulated. The old claims() returned one value per block size.
    """
    df = pd.DataFrame({"algorithm": ["2dfc:rows=2", "two_phase:rows=2", "linear", "pairwise", "bruck"] * 2,
                       "nbytes": [1024] * 5 + [2048] * 5, "p": 4,
                       "sim_s": [1.0, 2.0, 1.1, 5.0, 3.0, 2.0, 3.0, 2.0, np.nan, 8.0],
                       "model_s": [9.0] * 8 + [9.0, 9.0]})  # pairwise not simulated at 2 KiB: its model time counts
    at2 = _params("a2a-2dfc", rows=2, cols=2, sizes_kb=[1.0, 2.0], judged_kb=2.0, conventional=["pairwise", "bruck"])
    got = a2a_2dfc.claims(a2a_2dfc.Results(params=at2, table=df, exactness=pd.DataFrame()))
    assert got == {"speedup_vs_existing": [4.0], "speedup_vs_topology_aware": [1.5], "speedup_vs_direct": [1.0]}
    at1 = _params("a2a-2dfc", rows=2, cols=2, sizes_kb=[1.0, 2.0], judged_kb=1.0, conventional=["pairwise", "bruck"])
    got = a2a_2dfc.claims(a2a_2dfc.Results(params=at1, table=df, exactness=pd.DataFrame()))
    assert got == {"speedup_vs_existing": [3.0], "speedup_vs_topology_aware": [2.0], "speedup_vs_direct": [1.1]}


def test_multileader_claims_read_the_judged_configuration() -> None:
    """Reductions are percent of the baseline, at judged_nodes and judged_mb only (one value each)."""
    mib = 2**20
    times = {(2, 1.0): (10.0, 6.0, 5.0, 4.5), (4, 1.0): (10.0, 8.0, 7.0, 7.0), (4, 4.0): (10.0, 9.0, 8.0, 8.5)}
    rows = [dict(nodes=nodes, nbytes=int(mb * mib), algorithm=algo, sim_s=t, energy_J=e)
            for (nodes, mb), ts in times.items()
            for algo, t, e in zip(("ring", "lr_lr:k=4", "lr_rab:k=4", "lr_lr_pipe:k=4,segments=2"), ts,
                                  (100.0, 70.0, 60.0, 55.0))]
    df = pd.DataFrame(rows)
    prm = _params("multileader-allreduce", nodes=[2, 4], sizes_mb=[1.0, 4.0], sim_sizes_mb=[1.0, 4.0],
                  judged_nodes=2, judged_mb=1.0, segments=[2])
    res = multileader_allreduce.Results(params=prm, table=df, sweep=pd.DataFrame(), exactness=pd.DataFrame())
    got = multileader_allreduce.claims(res)
    assert got["lr_lr_vs_lr"] == [pytest.approx(40.0)] and got["lr_rab_vs_lr"] == [pytest.approx(50.0)]
    assert got["pipe_vs_lr_lr"] == [pytest.approx(25.0)] and got["energy_lr_rab_vs_lr"] == [pytest.approx(40.0)]
    prm4 = _params("multileader-allreduce", nodes=[2, 4], sizes_mb=[1.0, 4.0], sim_sizes_mb=[1.0, 4.0],
                   judged_nodes=4, judged_mb=4.0, segments=[2])
    got4 = multileader_allreduce.claims(
        multileader_allreduce.Results(params=prm4, table=df, sweep=pd.DataFrame(), exactness=pd.DataFrame()))
    assert got4["lr_lr_vs_lr"] == [pytest.approx(10.0)] and all(len(v) == 1 for v in got4.values())


def test_dln_claims_are_one_value_each() -> None:
    """The structural claims take the worst step over every host count; the saving is read at the judged point."""
    hops = pd.concat([dln_allreduce.hop_profile(p, 4, net) for p in (16, 32) for net in ("dln", "dln_mitigated")])
    nets = ["dln", "dln_mitigated", "fat_tree", "fat_tree_tapered", "fat_tree_equal_links"]
    dl = pd.DataFrame({"algorithm": "rabenseifner", "p": [16] * 5 + [32] * 5, "nbytes": 16 * 2**20,
                       "network": nets * 2, "sim_s": [4.0, 1.0, 1.1, 2.0, 1.25, 4.0, 1.0, 1.1, 2.0, 2.0]})
    prm = _params("dln-allreduce", nodes=[16, 32], judged_nodes=16)
    res = dln_allreduce.Results(params=prm, table=dl, hops=hops, latency_sweep=pd.DataFrame(), exactness=pd.DataFrame())
    assert dln_allreduce.claims(res) == {"fixed_path_length": [1.0], "contention_free": [1.0],
                                         "dln_vs_fat_tree": [pytest.approx(20.0)]}
    prm32 = _params("dln-allreduce", nodes=[16, 32], judged_nodes=32)
    res32 = dln_allreduce.Results(params=prm32, table=dl, hops=hops, latency_sweep=pd.DataFrame(),
                                  exactness=pd.DataFrame())
    assert dln_allreduce.claims(res32)["dln_vs_fat_tree"] == [pytest.approx(50.0)]


def test_sweeps_simulate_only_what_is_asked() -> None:
    """The chapter sweeps flag SimGrid runs exactly as their parameters say (models run everywhere)."""
    pts = a2a_2dfc.points(4, 4, [1.0, 2.0], ["2dfc", "two_phase", "pairwise"], 1e9, 1e-6, model_only=["pairwise"])
    assert [(p.spec, p.nbytes, p.simulate) for p in pts] == [
        ("2dfc:rows=4", 1024, True), ("2dfc:rows=4", 2048, True), ("two_phase:rows=4", 1024, True),
        ("two_phase:rows=4", 2048, True), ("pairwise", 1024, False), ("pairwise", 2048, False)]
    prm = _params("dln-allreduce", nodes=[8, 16], sizes_mb=[1.0, 2.0], sim_sizes_mb=[2.0], networks=["dln", "dln_mitigated",
                  "fat_tree_equal_links", "fat_tree"], ring_nodes=[8], judged_nodes=8, judged_mb=2.0, hosts_per_switch=4)
    pts = dln_allreduce.points(prm, sim_sizes_mb=prm.sim_sizes_mb)
    assert len(pts) == 2 * (4 + 1) * 2
    assert {(p.spec, p.p, p.nbytes) for p in pts if p.simulate and p.tags == (("network", "fat_tree"),)} == {
        ("rabenseifner", 8, 2 * 2**20), ("rabenseifner", 16, 2 * 2**20), ("ring", 8, 2 * 2**20)}
    ml = _params("multileader-allreduce", nodes=[2], sizes_mb=[1.0, 4.0], sim_sizes_mb=[4.0], judged_nodes=2,
                 judged_mb=4.0, segments=[2], baselines=["ring"])
    pts = multileader_allreduce.points(ml)
    assert [p.spec for p in pts if p.simulate] == ["ring", "lr_lr:k=4", "lr_rab:k=4", "lr_lr_pipe:k=4,segments=2"]
    assert all(p.p == 8 for p in pts)


@pytest.mark.parametrize("chapter,override,named", [
    ("multileader-allreduce", {"baselines": ["rabenseifner"]}, "'baselines'"),
    ("multileader-allreduce", {"nics_per_node": 3}, "'nics_per_node'"),
    ("multileader-allreduce", {"judged_nodes": 8}, "'judged_nodes'"),
    ("multileader-allreduce", {"judged_mb": 4.0}, "'judged_mb'"),
    ("a2a-2dfc", {"mpi_rows": 3}, "'mpi_rows'"),
    ("a2a-2dfc", {"sim_algorithms": ["2dfc", "two_phase"]}, "'sim_algorithms'"),
    ("a2a-2dfc", {"judged_kb": 8.0}, "'judged_kb'"),
    ("dln-allreduce", {"nodes": [12, 32]}, "'nodes'"),
    ("dln-allreduce", {"ring_nodes": [64]}, "'ring_nodes'"),
    ("dln-allreduce", {"judged_nodes": 64}, "'judged_nodes'"),
    ("dln-allreduce", {"judged_mb": 4.0}, "'judged_mb'"),
    ("kautz-fpga", {"df_groups": 5}, "'df_groups'"),
    ("kautz-fpga", {"placements": [1, 2]}, "'placements'"),
    ("hamming-fec", {"hosts_per_leaf": 3}, "'hosts_per_leaf'"),
    ("hamming-fec", {"placements": [3]}, "'placements'"),
    ("hamming-fec", {"hosts_per_leaf": 8}, "'hosts_per_leaf'"),
    ("sparse-allreduce", {"judged_density": 0.5}, "'judged_density'"),
    ("sparse-allreduce", {"densities": [0.5, 0.015625]}, "'densities'"),
    ("sparse-allreduce", {"dim": 4}, "'dim'"),
    ("sparse-allreduce", {"mpi_ranks": 6}, "'mpi_ranks'"),
    ("sparse-allreduce", {"algorithms": ["dense_ring_ring", "sparse_ring_ring"]}, "'algorithms'"),
])
def test_params_checks_refuse_inconsistent_parameters(chapter: str, override: dict, named: str) -> None:
    """Every profile passes its chapter's Params.checks(); breaking one names the parameter before any kernel."""
    ch = load_registry().get(chapter)
    profiles = params.load_profiles(ch)
    for values in profiles.values():
        params.validate(ch, values)
    with pytest.raises(params.ParameterError, match=named):
        params.validate(ch, {**profiles["smoke"], **override})


def test_multileader_constant_sweep_follows_the_adapters() -> None:
    """The multi-leader saving comes from using every adapter of a node: it shrinks when the leaders share one."""
    links = GpuClusterSettings(nvlink_bandwidth=50e9, pcie_bandwidth=16e9, nic_bandwidth=12.5e9, nics_per_node=2)
    sweep = multileader_allreduce.constant_sweep(4, 4, 16.0, links, nvlink_gbs=[25.0, 200.0], nics=[1, 4])
    lrlr = sweep[sweep.claim == "lr_lr_vs_lr"].set_index(["constant", "value"]).saving_pct
    assert lrlr[("nics_per_node", 4)] > lrlr[("nics_per_node", 1)]
    assert lrlr[("nvlink_gbs", 200.0)] > lrlr[("nvlink_gbs", 25.0)]
    assert set(sweep.claim) == {"lr_lr_vs_lr", "lr_rab_vs_lr"}


def test_hamming_half_acceptance_ber_interpolates_and_reports_no_crossing() -> None:
    share = pd.Series([100.0, 100.0, 0.0], index=[1e-9, 1e-7, 1e-5])
    assert hamming_fec.half_acceptance_ber(share) == pytest.approx(1e-6)
    assert math.isnan(hamming_fec.half_acceptance_ber(pd.Series([100.0, 80.0], index=[1e-9, 1e-7])))
    acc = pd.DataFrame({"code": "hamming_secded", "raw_ber": [1e-9, 1e-9, 1e-5, 1e-5], "accepted": [True, True, True, False]})
    assert hamming_fec.acceptance_share(acc).tolist() == [100.0, 50.0]
    with pytest.raises(ValueError, match="no rows"):
        hamming_fec.acceptance_share(acc, "rs544")


def test_dln_fair_fat_tree_has_the_dln_link_count_and_one_switch_latency_per_switch() -> None:
    dln_links = dln_allreduce.network_inventory(64, 4, ["dln_mitigated"]).set_index("network").loc[
        "dln_mitigated", "switch-to-switch links"]
    leaves = 64 // 4
    spines = dln_allreduce.equal_link_spines(64, 4)
    assert spines > 4 and abs(2 * leaves * spines - dln_links) <= leaves  # within half a spine's worth of links
    pf = build_platform(dln_allreduce.platform("fat_tree", 16, 4, 1e10, 1e-6, 1e-7))
    assert pf.hops(0, 15) == 4 and pf.route_latency(0, 15) == pytest.approx(4e-6 + 3e-7)  # 3 switches crossed
    assert pf.hops(0, 1) == 2 and pf.route_latency(0, 1) == pytest.approx(2e-6 + 1e-7)  # 1 switch crossed


def test_kautz_claims_are_judged_at_the_contiguous_placement_once() -> None:
    """One value per claim, read at placement 0; the old claims() copied the graph facts once per seed."""
    from repro.collectives.chapters import kautz_fpga

    sp = pd.DataFrame({"bytes": [8, 1024, 8, 1024], "seed": [0, 0, 1, 1], "speedup": [3.0, 5.0, 2.0, 9.0],
                       "multiport_gain": [1.0, 4.0, 1.0, 4.0], "kautz_s": 1.0, "dragonfly_best_s": 1.0,
                       "dragonfly_best": "x"})
    structure = {"nodes": 12.0, "degree": 3.0, "diameter": 2.0, "wavelengths": 3.0, "awgs": 4.0, "collision_free": 1.0}
    prm = _params("kautz-fpga", placements=[0, 1])
    res = kautz_fpga.Results(params=prm, table=pd.DataFrame(), speedups=sp, structure=structure, ports=pd.DataFrame(),
                             exactness=pd.DataFrame())
    assert kautz_fpga.claims(res) == {"speedup_vs_dragonfly_max": [5.0], "speedup_vs_dragonfly_smallest": [3.0],
                                      "multiport_gain_largest": [4.0], "fpgas_diameter2": [12.0],
                                      "wdm_resources_ratio": [1.0]}


def test_hamming_claims_are_judged_at_the_in_order_placement_once() -> None:
    """npb_mean_improvement is the mean over kernels at placement 0, recorded once (not once per placement)."""
    imp = pd.DataFrame({"kernel": ["CG", "LU", "CG", "LU"], "seed": [0, 0, 1, 1],
                        "improvement_pct": [1.0, 3.0, 10.0, 20.0]})
    acc = pd.DataFrame({"code": "hamming_secded", "raw_ber": 1e-9, "kernel": ["CG", "LU"], "accepted": [True, False]})
    prm = _params("hamming-fec", placements=[0, 1], raw_ber=1e-9)
    res = hamming_fec.Results(params=prm, curves=pd.DataFrame(), monte_carlo=pd.DataFrame(), runs=pd.DataFrame(),
                              improvements=imp, acceptability=acc)
    got = hamming_fec.claims(res)
    assert got["npb_mean_improvement"] == [2.0] and got["apps_accept_hamming"] == [50.0]
    assert len(got["rs_fec_vs_switch"]) == 1 and got["rs_fec_vs_switch"][0] > 1


def test_hamming_modelled_claim_far_below_the_paper_is_outside_the_band() -> None:
    """A modelled claim with a paper number is set against it: 1.73% against the paper's 56% is outside the band."""
    from repro.verdicts import MODELLED_OUTSIDE, judge

    claim = load_registry().get("hamming-fec").claim("npb_mean_improvement")
    assert claim.kind == "modelled" and claim.deterministic
    assert judge(claim, [1.73], profile="cpu").verdict == MODELLED_OUTSIDE


def test_sparse_constant_sweep_moves_one_constant_and_keeps_the_run_at_factor_one() -> None:
    """The modelled speed-ups are swept over the NIC bandwidth and the start-up.

    At the run's own constants the sweep also carries SimGrid's values, and a faster NIC shrinks the gain of
    sending fewer bytes.
    """
    from repro.collectives.chapters import sparse_allreduce

    prm = _params("sparse-allreduce")
    sweep = sparse_allreduce.constant_sweep(prm)
    assert set(sweep.constant) == {"nic_gbs", "alpha_us"} and set(sweep.claim) == set(sparse_allreduce.SPEEDUP_CLAIMS)
    own = sweep[np.isclose(sweep.value, prm.nic_gbs) & (sweep.constant == "nic_gbs")]
    assert own.sim.notna().all() and sweep[sweep.value == 4 * prm.nic_gbs].sim.isna().all()
    dense = sweep[(sweep.constant == "nic_gbs") & (sweep.claim == "rr_speedup_vs_dense_low_density")]
    assert dense.model.iloc[-1] < dense.model.iloc[0]  # 4x the NIC bandwidth: less to gain from fewer bytes


def _hamming_runs(compute_s: float) -> pd.DataFrame:
    """Two kernels at the judged placement: RS and Hamming communication 2 s and 1 s, ``compute_s`` of computation."""
    rows = []
    for kernel in ("CG", "LU"):
        for code, comm, hop in (("rs544", 2.0, 163.6), ("hamming_secded", 1.0, 3.7)):
            rows.append(dict(kernel=kernel, seed=0, code=code, hop_ns=hop, comm_s=comm, compute_s=compute_s,
                             time_s=comm + compute_s))
    return pd.DataFrame(rows)


def test_hamming_rs_over_switch_is_modelled_and_swept_over_the_decode_latency() -> None:
    """The RS-to-switch latency ratio is set by assumed constants: modelled (it was structural).

    The ratio flips at the decode latency rs_switch_parity_ns gives.
    """
    claim = load_registry().get("hamming-fec").claim("rs_fec_vs_switch")
    assert claim.kind == "modelled" and claim.deterministic
    prm = _params("hamming-fec", rs_decode_ns=150.0, switch_ns=100.0, link_gbps=400.0)
    parity = hamming_fec.rs_switch_parity_ns(prm.link())
    assert parity == pytest.approx(100.0 - 5440 / 400.0)
    res = hamming_fec.Results(params=prm, curves=pd.DataFrame(), monte_carlo=pd.DataFrame(), runs=_hamming_runs(2.0),
                              improvements=pd.DataFrame(), acceptability=pd.DataFrame())
    sweep = hamming_fec.decode_sweep(res, decode_ns=(parity - 1.0, parity + 1.0)).set_index("rs_decode_ns")
    assert 150.0 in sweep.index  # the run's own value is always evaluated
    assert sweep.rs_over_switch.loc[parity - 1.0] < 1.0 < sweep.rs_over_switch.loc[parity + 1.0]


def test_hamming_compute_sweep_moves_only_the_computation() -> None:
    """At rate r the computation is the run's times (run rate / r); the communication stays as simulated."""
    prm = _params("hamming-fec", gflops_per_rank=5.0)
    res = hamming_fec.Results(params=prm, curves=pd.DataFrame(), monte_carlo=pd.DataFrame(), runs=_hamming_runs(2.0),
                              improvements=pd.DataFrame(), acceptability=pd.DataFrame())
    sweep = hamming_fec.compute_sweep(res, rates=(10.0,)).set_index("gflops_per_rank")
    assert sweep.run_pct.loc[5.0] == pytest.approx(100 * 1.0 / (2.0 + 2.0))  # the run's own rate
    assert sweep.run_pct.loc[10.0] == pytest.approx(100 * 1.0 / (2.0 + 1.0))
    assert sweep.comm_share_pct.loc[10.0] == pytest.approx(100 * 2.0 / 3.0)


def test_hamming_monte_carlo_agreement_can_fail() -> None:
    mc = pd.DataFrame({"z": [0.5, -1.0, 2.0]})
    assert hamming_fec.monte_carlo_agrees(mc)
    assert not hamming_fec.monte_carlo_agrees(mc.assign(z=[0.5, -1.0, 6.0]))
    with pytest.raises(ValueError, match="no Monte-Carlo"):
        hamming_fec.monte_carlo_agrees(mc.iloc[:0])


def test_sparse_claims_read_the_judged_density() -> None:
    """The speed-ups are read at judged_density (not at the lowest density), the overhead at density 1."""
    from repro.collectives.chapters import sparse_allreduce

    rows = []
    for seed in (0, 1):
        for dens, dense_t, sparse_t, split_t in ((1.0, 2.0, 2.2, 3.0), (0.5, 2.0, 1.0, 1.5), (0.25, 2.0, 0.5, 2.0)):
            rows += [dict(algorithm="dense_ring_ring", density=dens, seed=seed, time_s=dense_t),
                     dict(algorithm="sparse_ring_ring", density=dens, seed=seed, time_s=sparse_t),
                     dict(algorithm="sparse_split_ag", density=dens, seed=seed, time_s=split_t)]
    prm = _params("sparse-allreduce", densities=[1.0, 0.5, 0.25], judged_density=0.5)
    got = sparse_allreduce.claims(sparse_allreduce.Results(params=prm, table=pd.DataFrame(rows),
                                                           exactness=pd.DataFrame(), sweep=pd.DataFrame()))
    assert got["rr_speedup_vs_dense_low_density"] == [2.0, 2.0]
    assert got["rr_overhead_at_density_1"] == [pytest.approx(1.1)] * 2
    assert got["rr_speedup_vs_sparcml_low_density"] == [1.5, 1.5]
