"""The client's array encoding: the very bytes Flower's own ``Array(ndarray)`` writes, read back exactly."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array

from repro.federated.client import from_array, to_array

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
