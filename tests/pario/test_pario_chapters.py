"""The pario chapter drivers.

Their Params checks, claims computed from small hand-made records, the async-io latency model and the
tpio-intranode participants check.
"""

from __future__ import annotations

import pytest

from repro import params
from repro.pario.chapters import async_io, pnetcdf_compress, tpio_intranode
from repro.registry import load_registry


def _params(chapter_id: str, **override: object) -> params.ChapterParams:
    ch = load_registry().get(chapter_id)
    built = params.build_params(ch, params.resolve(ch, "smoke", dict(override)))
    assert built is not None
    return built


@pytest.mark.parametrize("chapter,override,named", [
    ("async-io", {"samples": 8, "batch": 8}, "'samples'"),
    ("async-io", {"ks": [1]}, "'ks'"),
    ("pnetcdf-compress", {"chunk_rows": 1000}, "'chunk_rows'"),
    ("pnetcdf-compress", {"ranks": [64], "rows": 16, "cols": 16, "tile_rows": 8, "tile_cols": 8, "chunk_rows": 8,
                          "chunk_cols": 8}, "'ranks'"),
    ("tpio-intranode", {"exact_per_node": [3]}, "'exact_per_node'"),
    ("tpio-intranode", {"sim_nodes": [64], "sim_ranks_per_node": 32}, "'sim_nodes'"),
    ("tpio-spreadout", {"exact_kernels": ["balanced"]}, "'exact_kernels'"),
    ("tpio-spreadout", {"exact_kernels": ["alltoallw:2"]}, "'exact_kernels'"),
    ("tpio-spreadout", {"windows": [64]}, "'windows'"),
])
def test_params_checks_refuse_inconsistent_parameters(chapter: str, override: dict, named: str) -> None:
    """Every profile passes Params.checks(); breaking a cross-field rule names the parameter before any work."""
    ch = load_registry().get(chapter)
    profiles = params.load_profiles(ch)
    for values in profiles.values():
        params.validate(ch, values)
    with pytest.raises(params.ParameterError, match=named):
        params.validate(ch, {**profiles["smoke"], **override})


def _epochs(latency: float, seed: int, strategy: str, k: int, threaded: bool, epoch_s: float, wait_s: float,
            ops: int) -> list[async_io.EpochRecord]:
    return [async_io.EpochRecord(latency=latency, seed=seed, rank=rank, strategy=strategy, k=k, threaded=threaded,
                                 epoch=0, epoch_s=epoch_s, wait_s=wait_s, ops=ops, expected_ops=ops, train_loss=1.0,
                                 val_loss=0.2 if strategy == async_io.SYNC else 0.21, samples=(rank,))
            for rank in (0, 1)]


def _async_results() -> async_io.Results:
    prm = _params("async-io", samples=48, procs=2, batch=8, ks=[3], latencies_ms=[5.0, 30.0], seeds=[0, 1],
                  bandwidth_mbs=100.0)
    records = []
    for seed in (0, 1):
        for lat in (0.005, 0.03):
            # synchronous: 3 reads per rank; bulk k=3 + thread: 1 read per rank; 1 s of compute in both
            records += _epochs(lat, seed, async_io.SYNC, 1, False, 1.0 + 3 * lat, 3 * lat, 3)
            records += _epochs(lat, seed, "bulk k=3 + thread", 3, True, 1.0 + lat, lat, 1)
    return async_io.Results(params=prm, records=records, trivial_loss=0.3)


def test_async_io_claims_carry_the_loaders_arms_and_the_trivial_loss() -> None:
    res = _async_results()
    got = async_io.claims(res)
    expect = 100 * (1 - 1.03 / 1.09)
    assert got["epoch_time_reduction"] == [pytest.approx(expect)] * 2
    vl = got["val_loss_change"]
    assert isinstance(vl, async_io.Evidence)
    assert list(vl.values) == [pytest.approx(5.0)] * 2 and vl.trivial == 0.3
    assert set(vl.arms) == {async_io.SYNC, "bulk k=3 + thread"}


def test_async_io_latency_model_grows_with_the_emulated_latency() -> None:
    """The saving is set by the storage latency: none without latency beyond the bandwidth term, more at 30 ms."""
    res = _async_results()
    model = async_io.latency_model(res, (0.0, 5.0, 30.0, 100.0)).set_index("latency_ms")
    assert model.saving_pct.is_monotonic_increasing
    assert model.saving_pct[0.0] < model.saving_pct[5.0] < model.saving_pct[30.0]
    # synchronous at L: compute (1 s measured outside waiting) + 3 reads of 8 samples; method: 1 read exposed
    sample = res.params.sample_bytes
    r_sync = 0.03 + 8 * sample / 100e6
    assert model.synchronous_s[30.0] == pytest.approx(1.0 + 3 * r_sync)


def test_pnetcdf_claims_count_collective_read_faults() -> None:
    prm = _params("pnetcdf-compress", ranks=[4], n_vars=[4], seeds=[0, 1])

    def rec(seed: int, mode: str, total: float, read_total: float, read_faults: int) -> pnetcdf_compress.WriteRecord:
        return pnetcdf_compress.WriteRecord(p=4, n_vars=4, seed=seed, mode=mode, rounds=1, owners_s=0.0,
                                            exchange_s=0.0, compress_s=0.0, io_s=0.0, total_s=total, stored_bytes=10,
                                            raw_bytes=40, faults=0, contiguous_s=0.1, read_owners_s=0.0,
                                            read_exchange_s=0.0, read_decode_s=0.0, read_io_s=0.0,
                                            read_total_s=read_total, read_faults=read_faults)

    records = [rec(0, pnetcdf_compress.PER_REQUEST, 2.0, 3.0, 0), rec(0, pnetcdf_compress.AGGREGATED, 1.0, 1.0, 0),
               rec(1, pnetcdf_compress.PER_REQUEST, 4.0, 2.0, 1), rec(1, pnetcdf_compress.AGGREGATED, 1.0, 1.0, 0)]
    hdf5 = {s: pnetcdf_compress.Hdf5Comparison(chunks=4, differing=0, ours_bytes=10, hdf5_bytes=10, hdf5_write_s=0.0)
            for s in (0, 1)}
    got = pnetcdf_compress.claims(pnetcdf_compress.Results(params=prm, records=records, hdf5=hdf5))
    assert got["aggregation_speedup"] == [2.0, 4.0]
    assert got["read_aggregation_speedup"] == [3.0, 2.0]
    assert got["round_trip"] == [0.0, 1.0]  # a wrong collective read is a fault


def test_tpio_intranode_participants_check_can_fail() -> None:
    """A TAM write that more ranks opened than the N k aggregators gives a non-zero participants value."""
    prm = _params("tpio-intranode", seeds=[0, 1])

    def rec(seed: int, participants: int) -> tpio_intranode.ExactRecord:
        return tpio_intranode.ExactRecord(p=8, seed=seed, per_node=1, nodes=2, participants=participants,
                                          layer1_messages=0, layer1_bytes=0, pieces_in=1, pieces_out=1,
                                          identical_to_mpi=True, read_back_ok=True, tam_s=0.1, mpi_write_s=0.1)

    ind = [tpio_intranode.IndependentRecord(p=8, seed=s, participants=8, writes=20, identical_to_mpi=s == 0,
                                            read_back_ok=True, write_s=0.1, mpi_write_s=0.1) for s in (0, 1)]
    res = tpio_intranode.Results(params=prm, exact=[rec(0, 2), rec(1, 8)], independent=ind, sims=[],
                                 sweep=tpio_intranode.pd.DataFrame())
    checks = tpio_intranode.real_run_checks(res)
    assert checks["participants"] == [0.0, 6.0]
    assert checks["files_identical"] == [0.0, 1.0]  # seed 1's independent file differs
    table = tpio_intranode.write_table(res)
    assert table.loc[(8, "independent I/O (Write_at per extent)"), "participants"] == 8
    assert not table.loc[(8, "independent I/O (Write_at per extent)"), "identical"]
