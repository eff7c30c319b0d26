"""The component-embedded chapter's federated sweep: safe bounds and the dominance the theory predicts."""

from __future__ import annotations

import pytest

from repro.misc.chapters import component_embedded as chapter

SPEC = chapter.ModelSpec(actions=(15, 40), components=(2, 3), edge_prob=0.15, loop_share=0.2, loop_chunks=4)


@pytest.fixture(scope="module")
def federated():
    return chapter.federated_sweep(SPEC, [0, 1], task_sets=3, activities=3, processors=[2, 4, 8],
                                   utilisations=[0.3, 0.6, 0.9])


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
