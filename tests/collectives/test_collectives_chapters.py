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
    """Switch-to-switch links: DLN S * (distinct chord neighbours) * copies; fat tree 2 * leaves * spines."""
    inv = dln_allreduce.network_inventory(32, 4, ["dln", "dln_mitigated", "fat_tree", "fat_tree_tapered"]).set_index("network")
    assert inv.loc["dln", "switches"] == 8 and inv.loc["dln", "switch-to-switch links"] == 8 * 5
    assert inv.loc["dln_mitigated", "switch-to-switch links"] == 8 * 5 * 4
    assert inv.loc["fat_tree", "switch-to-switch links"] == 2 * 8 * 4
    assert inv.loc["fat_tree_tapered", "switch-to-switch links"] == 2 * 8 * 2
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


def test_chapter_claim_functions() -> None:
    """Claims are computed from the table.

    The 'existing' speed-up takes the fastest conventional algorithm, reductions are percent of the baseline,
    DLN claims read the hop table.
    """
    df = pd.DataFrame({"algorithm": ["2dfc:rows=2", "two_phase:rows=2", "linear", "pairwise", "bruck"] * 2,
                       "nbytes": [1] * 5 + [2] * 5, "p": 4,
                       "sim_s": [1.0, 2.0, 1.1, 5.0, 3.0, 2.0, 3.0, 2.0, np.nan, 8.0],
                       "model_s": [9.0] * 8 + [9.0, 9.0]})  # pairwise not simulated at 2: its model time counts
    got = a2a_2dfc.claims(df, 2, ["pairwise", "bruck"])
    assert got == {"speedup_vs_existing": [3.0, 4.0], "speedup_vs_topology_aware": [2.0, 1.5],
                   "speedup_vs_direct": [1.1, 1.0]}
    ml = pd.DataFrame({"nodes": [2] * 4, "nbytes": 8, "sim_s": [10.0, 6.0, 5.0, 4.5],
                       "energy_J": [100.0, 70.0, 60.0, 55.0],
                       "algorithm": ["ring", "lr_lr:k=4", "lr_rab:k=4", "lr_lr_pipe:k=4,segments=2"]})
    claims = multileader_allreduce.claims(ml, 4, [2])
    assert claims["lr_lr_vs_lr"] == [pytest.approx(40.0)] and claims["lr_rab_vs_lr"] == [pytest.approx(50.0)]
    assert claims["pipe_vs_lr_lr"] == [pytest.approx(25.0)] and claims["energy_lr_rab_vs_lr"] == [pytest.approx(40.0)]
    hops = pd.concat([dln_allreduce.hop_profile(16, 4, net) for net in ("dln", "dln_mitigated")])
    dl = pd.DataFrame({"algorithm": "rabenseifner", "p": 16, "nbytes": 8,
                       "network": ["dln", "dln_mitigated", "fat_tree", "fat_tree_tapered", "fat_tree_equal_links"],
                       "sim_s": [4.0, 1.0, 1.1, 2.0, 1.25]})
    assert dln_allreduce.claims(dl, hops) == {"fixed_path_length": [1], "contention_free": [1],
                                    "dln_vs_fat_tree": [pytest.approx(20.0)]}


def test_sweeps_simulate_only_what_is_asked() -> None:
    """The chapter sweeps flag SimGrid runs exactly as their parameters say (models run everywhere)."""
    pts = a2a_2dfc.points(4, 4, [1.0, 2.0], ["2dfc", "two_phase", "pairwise"], 1e9, 1e-6, model_only=["pairwise"])
    assert [(p.spec, p.nbytes, p.simulate) for p in pts] == [
        ("2dfc:rows=4", 1024, True), ("2dfc:rows=4", 2048, True), ("two_phase:rows=4", 1024, True),
        ("two_phase:rows=4", 2048, True), ("pairwise", 1024, False), ("pairwise", 2048, False)]
    pts = dln_allreduce.points([8, 16], 4, [1.0, 2.0], ["dln", "fat_tree"], [8], 1e9, 1e-6, 0.0, sim_sizes_mb=[2.0])
    assert len(pts) == 2 * (2 + 1) * 2
    assert {(p.spec, p.p, p.nbytes) for p in pts if p.simulate} == {
        ("rabenseifner", 8, 2 * 2**20), ("rabenseifner", 16, 2 * 2**20), ("ring", 8, 2 * 2**20)}
    pts = multileader_allreduce.points([2], 4, [1.0, 4.0], [4.0], [2], ["ring"])
    assert [p.spec for p in pts if p.simulate] == ["ring", "lr_lr:k=4", "lr_rab:k=4", "lr_lr_pipe:k=4,segments=2"]
    assert all(p.p == 8 for p in pts)


@pytest.mark.parametrize("chapter,override,named", [
    ("multileader-allreduce", {"baselines": ["rabenseifner"]}, "'baselines'"),
    ("multileader-allreduce", {"nics_per_node": 3}, "'nics_per_node'"),
    ("a2a-2dfc", {"mpi_rows": 3}, "'mpi_rows'"),
    ("a2a-2dfc", {"sim_algorithms": ["2dfc", "two_phase"]}, "'sim_algorithms'"),
    ("dln-allreduce", {"nodes": [12, 32]}, "'nodes'"),
    ("dln-allreduce", {"ring_nodes": [64]}, "'ring_nodes'"),
    ("kautz-fpga", {"df_groups": 5}, "'df_groups'"),
])
def test_registry_checks_refuse_inconsistent_parameters(chapter: str, override: dict, named: str) -> None:
    """Every profile passes its chapter's cross-field checks; breaking one names the parameter before any kernel."""
    ch = load_registry().get(chapter)
    profiles = params.load_profiles(ch)
    for values in profiles.values():
        params.validate(ch, values)
    with pytest.raises(params.ParameterError, match=named):
        params.validate(ch, {**profiles["smoke"], **override})


def test_multileader_constant_sweep_follows_the_adapters() -> None:
    """The multi-leader saving comes from using every adapter of a node: it shrinks when the leaders share one."""
    kw = dict(nvlink_bandwidth=50e9, pcie_bandwidth=16e9, nic_bandwidth=12.5e9, nics_per_node=2)
    sweep = multileader_allreduce.constant_sweep(4, 4, 16.0, kw, nvlink_gbs=[25.0, 200.0], nics=[1, 4])
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
