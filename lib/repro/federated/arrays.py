"""The array codec of the federated family: numpy weights to Flower ``Array``/``ArrayRecord`` and back.

Flower serialises an array as an ``.npy`` file; :func:`to_array` and
:func:`from_array` build and read that file with a header cached per dtype
and shape, bit for bit what ``Array(ndarray)`` and ``Array.numpy()`` give.
:func:`decode_broadcast` decodes a record the server sent once, however many
in-process clients receive it.  Clients, strategies and engines all encode
and decode through this module.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from io import BytesIO
from typing import Union

import numpy as np
import numpy.lib.format as npy_format
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord
from flwr.common.constant import SType

RecordValue = Union[Array, int, float, str, bytes, bool, list[int], list[float], list[str], list[bytes], list[bool]]
"""What a Flower record's item may hold (an ``Array`` in an ``ArrayRecord``, a number or list in the others)."""
AnyRecord = Union[ArrayRecord, MetricRecord, ConfigRecord]
"""What indexing a ``RecordDict`` gives."""

_NPY_HEADERS: dict[tuple[str, tuple[int, ...]], bytes] = {}


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header ``np.save`` writes for a C-contiguous array of ``dtype`` and ``shape`` (cached)."""
    key = (dtype.str, shape)
    head = _NPY_HEADERS.get(key)
    if head is None:
        buffer = BytesIO()
        npy_format.write_array_header_1_0(
            buffer, {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
        head = _NPY_HEADERS[key] = buffer.getvalue()
    return head


def _plain(dtype: np.dtype) -> bool:
    return not dtype.hasobject and dtype.fields is None


def to_array(a: np.ndarray) -> Array:
    """A Flower ``Array`` holding exactly the bytes ``Array(a)`` would, without ``np.save``'s per-call work.

    Flower serialises an array as an ``.npy`` file (``np.save``); for a
    C-contiguous numeric array that file is a header fixed by dtype and shape
    followed by the raw bytes, so the header is built once per dtype and
    shape.  Object and structured dtypes go through Flower.
    """
    a = np.ascontiguousarray(a)
    if not _plain(a.dtype):
        return Array(a)
    shape = tuple(int(n) for n in a.shape)
    return Array(dtype=str(a.dtype), shape=shape, stype=SType.NUMPY, data=_npy_header(a.dtype, shape) + a.tobytes())


def from_array(array: Array | RecordValue) -> np.ndarray:
    """``array.numpy()``: a writable array, read straight behind the header when it is the one :func:`to_array` writes.

    Raises
    ------
    TypeError
        If ``array`` is not an ``Array`` (a number or list read from a metric or config record).
    """
    if not isinstance(array, Array):
        raise TypeError(f"expected a Flower Array, got {type(array).__name__}")
    if array.stype == SType.NUMPY:
        dtype, shape = np.dtype(array.dtype), tuple(array.shape)
        if _plain(dtype):
            head = _npy_header(dtype, shape)
            if array.data.startswith(head) and len(array.data) == len(head) + dtype.itemsize * math.prod(shape):
                return np.frombuffer(array.data, dtype=dtype, offset=len(head)).reshape(shape).copy()
    return array.numpy()


def to_arrayrecord(weights: dict[str, np.ndarray]) -> ArrayRecord:
    """Numpy weights to a Flower ``ArrayRecord`` (key order kept; bytes as Flower's own ``Array(ndarray)``).

    The arrays are set item by item: ``ArrayRecord(dict_of_arrays)`` would
    copy every ``Array`` it is given.
    """
    record = ArrayRecord()
    for k, v in weights.items():
        record[k] = to_array(v)
    return record


def from_arrayrecord(record: AnyRecord) -> dict[str, np.ndarray]:
    """A Flower ``ArrayRecord`` to numpy weights.

    Raises
    ------
    TypeError
        If ``record`` is a metric or config record (``message.content[key]`` may be any of the three).
    """
    return {k: from_array(v) for k, v in arrayrecord(record).items()}


def arrayrecord(record: AnyRecord) -> ArrayRecord:
    """``record`` itself, checked to be an ``ArrayRecord`` (what ``message.content["arrays"]`` should hold)."""
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"expected an ArrayRecord, got {type(record).__name__}")
    return record


_BROADCASTS: OrderedDict[int, tuple[ArrayRecord, dict[str, np.ndarray]]] = OrderedDict()
BROADCAST_CACHE = 4
"""How many received ``ArrayRecord`` objects :func:`decode_broadcast` keeps decoded."""


def decode_broadcast(record: AnyRecord) -> dict[str, np.ndarray]:
    """:func:`from_arrayrecord` for a record the server sent, decoded once however many clients receive it.

    Flower's strategies put one ``ArrayRecord`` object into every message of a
    round; the in-process grid hands that very object to each client, so it
    is decoded once and its arrays shared (read-only: a handler that tried to
    change them in place would raise).  Under Ray or a deployment every client
    gets its own copy and this is plain :func:`from_arrayrecord`.
    """
    record = arrayrecord(record)
    key = id(record)
    hit = _BROADCASTS.get(key)
    if hit is not None and hit[0] is record:
        _BROADCASTS.move_to_end(key)
        return dict(hit[1])
    arrays = from_arrayrecord(record)
    for v in arrays.values():
        v.flags.writeable = False
    _BROADCASTS[key] = (record, arrays)  # the record is held, so its id is not reused while cached
    while len(_BROADCASTS) > BROADCAST_CACHE:
        _BROADCASTS.popitem(last=False)
    return dict(arrays)
