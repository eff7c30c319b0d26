"""The kmeans-phi chapter's scale-out extrapolation and measured speed-up, on hand-made timings."""

from __future__ import annotations

import pytest

from repro.misc import kmeans as km
from repro.misc.chapters import kmeans_phi as chapter
from repro.params import ParameterError, resolve
from repro.registry import load_registry

CFG = chapter.SweepConfig(n=1000, ks=(16,), dims_aligned=(8, 64), dims_unaligned=(9,), repeats=1, lanes=4, threads=1)
MODEL = chapter.ModelConstants(target_lanes=16, reduce_cost=4.0)


def _result(base: float, optimised: float) -> chapter.SweepResult:
    timings = [chapter.TimingRecord(seed=0, d=64, k=16, aligned=True, implementation=km.BASELINE.label, seconds=base),
               chapter.TimingRecord(seed=0, d=64, k=16, aligned=True, implementation=chapter.OPTIMISED.label, seconds=optimised)]
    return chapter.SweepResult(timings=tuple(timings), checks=())


def _scale(latency: float, ranks: int) -> chapter.ScaleOutModel:
    return chapter.ScaleOutModel(n=10**8, node_cores=68, latency=latency, bandwidth=1e10, ranks=ranks)


def test_on_one_node_the_gain_is_the_single_node_model():
    result = _result(1e-2, 5e-3)
    single = km.modelled_improvement(5e-3, 1e-2, chapter.OPTIMISED, 64, CFG.lanes, 16, 4.0)
    assert chapter.scale_out_gain(result, CFG, MODEL, _scale(1e-3, 1), 0) == pytest.approx(single)


def test_the_allreduce_dilutes_the_gain_as_latency_and_ranks_grow():
    result = _result(1e-2, 5e-3)
    gains = [chapter.scale_out_gain(result, CFG, MODEL, _scale(a, 4096), 0) for a in (0.0, 1e-5, 1e-3, 1e-1)]
    assert gains[0] > gains[1] > gains[2] > gains[3] > 0.0
    assert gains[3] < 0.05 * gains[0]
    grid = chapter.scale_out_sweep(result, CFG, MODEL, _scale(1e-4, 1), [1, 64, 4096], [1e-4], [0])
    assert list(grid.gain) == sorted(grid.gain, reverse=True)


def test_a_slower_optimised_kernel_gives_a_negative_gain():
    assert chapter.scale_out_gain(_result(1e-2, 5e-2), CFG, MODEL, _scale(2e-6, 1024), 0) < 0.0


def test_host_speedup_is_fewest_over_most_ranks():
    runs = [
        chapter.MPIRecord(seed=0, ranks=2, centroid_diff=0.0, step_seconds=0.6, allreduce_seconds=0.01),
        chapter.MPIRecord(seed=0, ranks=1, centroid_diff=0.0, step_seconds=1.0, allreduce_seconds=0.0),
        chapter.MPIRecord(seed=1, ranks=1, centroid_diff=0.0, step_seconds=1.0, allreduce_seconds=0.0),
        chapter.MPIRecord(seed=1, ranks=2, centroid_diff=0.0, step_seconds=1.25, allreduce_seconds=0.01),
    ]
    assert chapter.host_speedup(runs, 0) == pytest.approx(1.0 / 0.6)
    assert chapter.host_speedup(runs, 1) == pytest.approx(0.8)


def _runs(one: float, two: float) -> list[chapter.MPIRecord]:
    return [chapter.MPIRecord(seed=0, ranks=1, centroid_diff=0.0, step_seconds=one, allreduce_seconds=0.0),
            chapter.MPIRecord(seed=0, ranks=2, centroid_diff=0.0, step_seconds=two, allreduce_seconds=1e-4)]


def test_a_speedup_above_the_rank_ratio_is_refused():
    """3.68x on 2 ranks (what an earlier version recorded as reproduced) cannot come from equal work."""
    with pytest.raises(chapter.SuperlinearSpeedup, match="3.68x faster on 2 ranks"):
        chapter.host_speedup(_runs(1.0, 1.0 / 3.68), 0)
    assert chapter.host_speedup(_runs(1.0, 0.5), 0) == pytest.approx(2.0)  # ideal is fine
    assert chapter.host_speedup(_runs(1.0, 1.0 / 2.15), 0) == pytest.approx(2.15)  # within the timer slack


def test_more_clusters_than_points_is_refused_before_any_kernel():
    """Issue 26 item 4: ``-p mpi_n=100 -p mpi_k=200`` is refused by Params.checks(), naming both parameters."""
    ch = load_registry().get("kmeans-phi")
    with pytest.raises(ParameterError, match="'mpi_k', 'mpi_n'.*at least as many points as clusters"):
        resolve(ch, "smoke", {"mpi_n": 100, "mpi_k": 200})
    with pytest.raises(ParameterError, match="'dims_aligned'"):
        resolve(ch, "smoke", {"dims_aligned": [km.host_lanes() + 1]})
    with pytest.raises(ParameterError, match="'ks', 'n'"):
        resolve(ch, "smoke", {"n": 1000, "ks": [2000]})
    assert resolve(ch, "smoke", {"mpi_n": 200, "mpi_k": 200})["mpi_k"] == 200


def test_modelled_single_node_claims_are_each_seeds_maximum_over_datasets():
    timings = []
    for d, base, opt in ((8, 1e-2, 5e-3), (64, 1e-2, 2e-3)):
        timings += [chapter.TimingRecord(seed=0, d=d, k=16, aligned=True, implementation=km.BASELINE.label, seconds=base),
                    chapter.TimingRecord(seed=0, d=d, k=16, aligned=True, implementation=chapter.OPTIMISED.label,
                                         seconds=opt)]
    result = chapter.SweepResult(timings=tuple(timings), checks=())
    mod = chapter.modelled(result, CFG, MODEL)
    values = chapter.per_seed_max(mod[mod.aligned], [0])
    assert values == [pytest.approx(mod.improvement.max())] and mod.improvement.max() > mod.improvement.mean()
