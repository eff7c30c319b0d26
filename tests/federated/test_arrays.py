"""The array encoding: the very bytes Flower's own ``Array(ndarray)`` writes, read back exactly, and averaged as Flower does."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from repro.federated.arrays import from_array, to_array
from repro.federated.strategies import average_arrays

RNG = np.random.default_rng(0)
ARRAYS = {
    "float32 matrix": RNG.normal(size=(3, 4)).astype(np.float32),
    "int64 vector": np.arange(5),
    "0-d float64": np.array(3.5),
    "Fortran-ordered 3-d": RNG.normal(size=(2, 3, 4)).T,
    "empty": np.zeros((0, 3), np.float32),
    "big-endian int32": np.array([1, 2], dtype=">i4"),
    "bool": np.array([True, False]),
}


@pytest.mark.parametrize("name", ARRAYS)
def test_encoding_equals_flowers_and_decodes_to_a_writable_copy(name):
    a = np.ascontiguousarray(ARRAYS[name])  # what the client sends (a 0-d array becomes shape (1,), as before)
    ours, flowers = to_array(ARRAYS[name]), Array(a)
    assert (ours.data, ours.dtype, tuple(ours.shape), ours.stype) == \
        (flowers.data, flowers.dtype, tuple(flowers.shape), flowers.stype)
    back = from_array(flowers)
    assert back.dtype == a.dtype and back.shape == a.shape and np.array_equal(back, a) and back.flags.writeable


def test_an_array_with_another_header_is_read_through_flower():
    a = RNG.normal(size=(4, 2)).T  # Fortran order: np.save writes a different header
    flowers = Array.from_numpy_ndarray(a)
    assert flowers.data != to_array(a).data  # Fortran-order header: the direct read does not apply
    assert np.array_equal(from_array(flowers), a)


def _reply(arrays: dict[str, np.ndarray], examples: int) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord({k: to_array(v) for k, v in arrays.items()}),
                       "metrics": MetricRecord({"num-examples": examples, "train-loss": 0.5})})


def test_server_average_is_flowers_to_the_bit():
    """Three replies of uneven weight: the same bytes as Flower's ``aggregate_arrayrecords``."""
    replies = [_reply({"w": RNG.normal(size=(5, 3)).astype(np.float32), "b": RNG.normal(size=3)}, n)
               for n in (7, 1, 13)]
    ours, flowers = average_arrays(replies, "num-examples"), aggregate_arrayrecords(replies, "num-examples")
    assert list(ours) == list(flowers) == ["w", "b"]
    for key in ours:
        assert ours[key].data == flowers[key].data


def test_the_fast_average_runs_only_where_flowers_fedavg_would():
    """FedAdam's step comes after FedAvg's average: the strategy must defer to it, not skip it."""
    from repro.federated.fedopt import SeededFedAdam
    from repro.federated.strategies import SeededFedAvg, SeededFedProx

    local = {"steps": 1, "lr": 0.1, "momentum": 0.0, "batch-size": 4}
    assert SeededFedAvg(2, local)._next_aggregation() is FedAvg.aggregate_train
    assert SeededFedProx(2, local)._next_aggregation() is FedAvg.aggregate_train
    assert SeededFedAdam(2, local)._next_aggregation() is not FedAvg.aggregate_train
