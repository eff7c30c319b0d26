"""K-means kernels: every layout, padding and reduction computes the same Lloyd step as scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest

from repro.misc import kmeans as km

LANES = km.HOST_LANES


@pytest.fixture(scope="module", params=[(3000, 5, 7), (3000, 17, 16), (2500, 16, 4)], ids=lambda p: f"n{p[0]}d{p[1]}k{p[2]}")
def data(request):
    n, d, k = request.param
    return km.make_dataset(n, d, k, seed=3)


def test_every_variant_gives_the_same_step(data):
    base = km.lloyd_step(data.points, km.pack(data.points, km.BASELINE, LANES), data.init)
    for variant in km.standard_variants():
        step = km.lloyd_step(data.points, km.pack(data.points, variant, LANES), data.init)
        assert np.array_equal(step.labels, base.labels), variant.label
        assert np.array_equal(step.centroids, base.centroids), variant.label


def test_labels_do_not_depend_on_the_chunk_count(data):
    packed = km.pack(data.points, km.Variant(layout="soa", padded=True), LANES)
    ref = km.assign(packed, data.init, chunks=1)
    for chunks in (2, 3, 7):
        assert np.array_equal(km.assign(packed, data.init, chunks=chunks), ref)
    sums1 = km.reduce_centroids(data.points, ref, data.init.shape[0], "serial", chunks=1)
    sums5 = km.reduce_centroids(data.points, ref, data.init.shape[0], "parallel", chunks=5)
    np.testing.assert_allclose(sums5.sums, sums1.sums, rtol=1e-12, atol=1e-9)
    assert np.array_equal(sums5.counts, sums1.counts)


def _sequential_distances(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Squared distances summed dimension by dimension, in order (as the kernels do)."""
    acc = np.zeros((x.shape[0], c.shape[0]))
    for j in range(x.shape[1]):
        acc += (x[:, None, j] - c[None, :, j]) ** 2
    return acc


def test_padding_adds_only_zeros_and_keeps_every_distance(data):
    packed = km.pack(data.points, km.Variant(layout="aos", padded=True), LANES)
    d = data.points.shape[1]
    assert packed.data.shape[1] % LANES == 0
    assert np.array_equal(packed.data[:, :d], data.points) and not packed.data[:, d:].any()
    cpad = km.pad_centroids(data.init, packed)
    assert np.array_equal(_sequential_distances(packed.data, cpad), _sequential_distances(data.points, data.init))
    blocked = km.pack(data.points, km.Variant(layout="aosoa", padded=True), LANES)
    n = data.points.shape[0]
    flat = blocked.data.transpose(0, 2, 1).reshape(-1, d)
    assert np.array_equal(flat[:n], data.points) and not flat[n:].any()


def test_one_step_matches_scikit_learn(data):
    ours = km.lloyd_step(
        data.points, km.pack(data.points, km.Variant(layout="aosoa", padded=True, reduction="parallel"), LANES), data.init
    )
    ref = km.sklearn_step(data)
    np.testing.assert_allclose(ours.centroids, ref.centroids, rtol=0, atol=1e-9)
    relabel = km.assign(km.pack(data.points, km.BASELINE, LANES), ours.centroids)
    assert np.array_equal(relabel, ref.labels)


def test_a_wrong_step_is_caught():
    data = km.make_dataset(2000, 6, 5, seed=1)
    ref = km.sklearn_step(data)
    shifted = km.lloyd_step(data.points, km.pack(data.points, km.BASELINE, LANES), data.init[::-1].copy())
    assert np.abs(shifted.centroids - ref.centroids).max() > 1e-3


def test_empty_cluster_keeps_its_centroid():
    points = np.zeros((10, 3))
    init = np.array([[0.0, 0.0, 0.0], [100.0, 100.0, 100.0]])
    step = km.lloyd_step(points, km.pack(points, km.BASELINE, LANES), init)
    assert np.array_equal(step.centroids[1], init[1]) and (step.labels == 0).all()


def test_variant_validation():
    with pytest.raises(ValueError):
        km.Variant(layout="aosoa", padded=False)
    with pytest.raises(ValueError):
        km.Variant(layout="csr")
    with pytest.raises(ValueError):
        km.Variant(layout="aos", reduction="atomic")


def test_instruction_count_model():
    assert km.vector_ops(km.BASELINE, 17, 16, 4.0) == 1 + 1 + 4
    assert km.vector_ops(km.Variant(layout="aos", padded=True), 17, 16, 4.0) == 2 + 4
    assert km.vector_ops(km.Variant(layout="soa"), 17, 16, 4.0) == pytest.approx(17 / 16)
    # same widths on host and target: the model returns the measured improvement unchanged
    v = km.Variant(layout="aosoa", padded=True)
    assert km.modelled_improvement(1.0, 2.0, v, 16, 8, 8, 4.0) == pytest.approx(50.0)
    # doubling the lanes halves the blocked layout's count, not the aligned baseline's horizontal sum
    assert km.modelled_improvement(1.0, 1.0, v, 64, 8, 16, 0.0) == pytest.approx(0.0)
    assert km.modelled_improvement(1.0, 1.0, v, 64, 8, 16, 4.0) > 0.0


def test_rank_slices_cover_every_point_once():
    for n, size in ((10, 3), (7, 7), (100, 4)):
        idx = np.concatenate([np.arange(n)[km.rank_slice(n, r, size)] for r in range(size)])
        assert np.array_equal(idx, np.arange(n))


@pytest.mark.parametrize("ranks", [1, 2])
def test_mpi_step_equals_the_single_process_step(ranks):
    n, d, k, seed, steps = 4000, 9, 6, 2, 2
    data = km.make_dataset(n, d, k, seed)
    packed = km.pack(data.points, km.BASELINE, LANES)
    centroids = data.init
    for _ in range(steps):
        centroids = km.lloyd_step(data.points, packed, centroids).centroids
    rep = km.run_lloyd_mpi(km.MPIRun(ranks=ranks, n=n, d=d, k=k, seed=seed, steps=steps, repeats=1))
    assert rep.ranks == ranks
    np.testing.assert_allclose(np.asarray(rep.centroids), centroids, rtol=0, atol=1e-9)


def test_allreduce_model_counts_recursive_doubling_rounds():
    assert km.allreduce_model_seconds(1, 1e6, 1e-3, 1e9) == 0.0
    assert km.allreduce_model_seconds(2, 1e6, 1e-3, 1e9) == pytest.approx(1e-3 + 1e-3)
    assert km.allreduce_model_seconds(5, 1e6, 1e-3, 1e9) == pytest.approx(3 * 2e-3)  # ceil(log2 5) = 3
    with pytest.raises(ValueError):
        km.allreduce_model_seconds(0, 1.0, 1.0, 1.0)


def test_strong_scaling_model_divides_the_work_and_pays_the_allreduce():
    one = km.strong_scaling_seconds(1e-6, 10**6, 1, 16, 64, 1e-4, 1e9)
    assert one == pytest.approx(1.0)
    four = km.strong_scaling_seconds(1e-6, 10**6, 4, 16, 64, 1e-4, 1e9)
    comm = 2 * (2 * 1e-4) + 2 * (8 * 16 * 64 + 8 * 16) / 1e9
    assert four == pytest.approx(0.25 + comm)
    # with a large latency, more ranks eventually cost more than they save
    times = [km.strong_scaling_seconds(1e-6, 10**6, p, 16, 64, 1e-2, 1e9) for p in (1, 16, 4096)]
    assert times[1] < times[0] and times[2] > times[1]
