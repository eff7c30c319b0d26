"""The component-embedded chapter's federated sweep: safe bounds and the dominance the theory predicts."""

from __future__ import annotations

import pytest

from repro.misc.chapters import component_embedded as chapter

PARAMS = chapter.Params(case_study="sensor_filter_controller", loop_chunks=4, processors=(2, 4, 8), n_models=2,
                        actions=(15, 40), components=(2, 3), edge_prob=0.15, loop_share=0.2,
                        layouts=("pipeline", "side_by_side"),
                        utilisations=(0.3, 0.6, 0.9), instances=1, low_fraction=0.5, task_sets=3, activities=3,
                        seeds=(0, 1), workers=1)
SPEC = PARAMS.model_spec()


@pytest.fixture(scope="module")
def federated():
    return chapter.federated_sweep(PARAMS)


def test_every_simulated_response_stays_within_its_bound(federated):
    ratios = federated.worst_ratio.dropna()
    assert len(ratios) > 0 and ratios.max() <= 1.0 + 1e-9


def test_sizing_by_simulation_never_fits_fewer_sets_than_the_analysis(federated):
    chains = federated[federated.design == "chains"].pivot_table(
        index=["seed", "task_set", "m", "utilisation"], columns="method", values="schedulable")
    assert (chains.simulation >= chains.analysis).all()


def test_designs_and_heavy_activities(federated):
    analysis = federated[federated.method == "analysis"].pivot_table(
        index=["seed", "task_set", "m", "utilisation"], columns="design", values="schedulable")
    assert (analysis.chains >= analysis.per_component).all()  # a shorter critical path never needs more cores
    assert (analysis.per_component >= analysis.sequential).all()
    seq = federated[(federated.design == "sequential") & federated.schedulable]
    assert (seq.heavy == 0).all()  # a one-thread activity cannot exceed one processor
    assert federated.heavy.max() > 0


def test_utilisation_split_is_reproducible():
    job = chapter.TaskSetJob(seed=4, index=0, spec=SPEC, activities=3, processors=(2,), utilisations=(0.5,))
    first, second = chapter.draw_activities(job), chapter.draw_activities(job)
    assert [a.volume for a in first] == [a.volume for a in second]
    assert sum(a.share for a in first) == pytest.approx(1.0)
    assert all(a.makespan[0] == pytest.approx(a.volume) and min(a.makespan) >= a.critical_path["chains"] - 1e-9
               for a in first)


def test_checks_refuse_more_components_than_actions():
    import dataclasses

    from repro.params import ParameterError

    PARAMS.checks()
    with pytest.raises(ParameterError, match="'components', 'actions'"):
        dataclasses.replace(PARAMS, components=(2, 20)).checks()
    with pytest.raises(ParameterError, match="'actions'"):
        dataclasses.replace(PARAMS, actions=(40, 15)).checks()


def test_the_gain_over_the_sequential_design_is_never_negative():
    """Structural: a list schedule of a DAG is never slower than its sequential order."""
    results = chapter.run(PARAMS)
    sim = results.schedulability[results.schedulability.method == "simulation"]
    table = sim.pivot_table(index=["seed", "layout", "m", "utilisation"], columns="design", values="ratio")
    assert (table.chains >= table.sequential).all()
    c = chapter.claims(results)
    assert all(v >= 0 for v in c["sim_gain_vs_sequential"]) and all(v >= 1 for v in c["case_speedup"])


def test_checks_need_the_layout_the_per_component_gain_is_judged_on():
    import dataclasses

    from repro.params import ParameterError

    with pytest.raises(ParameterError, match="'layouts'"):
        dataclasses.replace(PARAMS, layouts=("pipeline",)).checks()


def test_one_thread_per_component_is_scored_where_it_is_not_the_sequential_design():
    """Side by side, one thread per component beats the sequential design's response on every model.

    The claim takes only those models: a pipeline's near-sequential baseline would prove little.
    """
    results = chapter.run(PARAMS)
    designs = results.designs[results.designs.layout == chapter.SCORED_LAYOUT]
    wcet = designs.pivot_table(index=["seed", "model", "m"], columns="design", values="sim_wcet")
    assert (wcet.per_component < wcet.sequential).all()
    by_layout = chapter.gain_by_layout(results)
    assert set(by_layout.index) == {"pipeline", "side_by_side"}
    sim = results.schedulability[(results.schedulability.method == "simulation")]
    side = sim[sim.layout == chapter.SCORED_LAYOUT]
    per_seed = {s: 100.0 * (g[g.design == "chains"].ratio.mean() - g[g.design == "per_component"].ratio.mean())
                for s, g in side.groupby("seed")}
    assert chapter.claims(results)["sim_gain_vs_per_component"] == pytest.approx([per_seed[s] for s in PARAMS.seeds])
