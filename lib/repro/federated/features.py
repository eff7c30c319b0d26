"""Server-side client features from the last layer's weights and updates.

Several servers of the book judge clients by their classifier layer alone:
CADIS clusters clients on the cosine similarity of their last-layer updates
(:mod:`repro.federated.cadis`), FedGrad filters them on the deviations of their
last layer from the round's mean (:mod:`repro.federated.robust`).  The pieces they
share live here, once.

Every function accepts the clients' results in any of the forms a server
holds them: Flower reply ``Message`` objects (their ``arrays`` record),
``ArrayRecord`` objects, or ``{name: ndarray}`` dictionaries.  The layer is
named explicitly or, by default, detected as the *last weight layer*: the
last array with two or more dimensions in the model's order (for the book's
MLPs ``fc<L>.weight``).
"""

from __future__ import annotations

from typing import Mapping, Sequence, Union

import numpy as np
from flwr.app import ArrayRecord, Message

ClientArrays = Union[Message, ArrayRecord, Mapping[str, np.ndarray]]


def _record(item: ClientArrays) -> Mapping:
    if isinstance(item, Message):
        if item.has_error():
            raise ValueError(f"a reply carries an error instead of arrays: {item.error.reason}")
        return item.content["arrays"]
    if isinstance(item, (ArrayRecord, Mapping)):
        return item
    raise TypeError(f"expected a reply Message, an ArrayRecord or a dict of arrays, got {type(item).__name__}")


def _array(record: Mapping, key: str) -> np.ndarray:
    if key not in record:
        raise KeyError(f"layer {key!r} not among the arrays {sorted(record)}")
    value = record[key]
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def last_weight_layer(arrays: ClientArrays) -> str:
    """Name of the last array with at least two dimensions (the classifier's weight).

    Parameters
    ----------
    arrays
        A model's arrays, in the model's own order (``state_dict`` order).

    Raises
    ------
    ValueError
        If no array has two or more dimensions.
    """
    record = _record(arrays)
    names = [k for k in record if _array(record, k).ndim >= 2]
    if not names:
        raise ValueError(f"no weight layer (array with >= 2 dimensions) among {list(record)}")
    return names[-1]


def _layer_name(models: Sequence[ClientArrays], layer: str | None) -> str:
    if len(models) == 0:
        raise ValueError("models must not be empty")
    return last_weight_layer(models[0]) if layer is None else layer


def last_layer_stack(models: Sequence[ClientArrays], layer: str | None = None) -> np.ndarray:
    """The clients' last layers stacked in float64: shape ``(n, *layer_shape)``.

    Parameters
    ----------
    models
        One entry per client (replies, ``ArrayRecord`` or dicts).
    layer
        The layer's name; ``None``: :func:`last_weight_layer` of the first model.
    """
    key = _layer_name(models, layer)
    return np.stack([_array(_record(m), key).astype(np.float64) for m in models])


def last_layer_updates(models: Sequence[ClientArrays], global_arrays: ClientArrays | np.ndarray,
                       layer: str | None = None) -> np.ndarray:
    """Each client's last-layer update ``W_i - W_global``, shape ``(n, *layer_shape)``, in float64.

    The difference is taken in the arrays' own precision (it is the update a
    client would transmit) and then widened to float64.

    Parameters
    ----------
    models
        One entry per client (replies, ``ArrayRecord`` or dicts).
    global_arrays
        The model the clients started from (its arrays, or the layer itself as an array).
    layer
        The layer's name; ``None``: :func:`last_weight_layer` of the first model.
    """
    key = _layer_name(models, layer)
    ref = global_arrays if isinstance(global_arrays, np.ndarray) else _array(_record(global_arrays), key)
    out = []
    for m in models:
        w = _array(_record(m), key)
        if w.shape != ref.shape:
            raise ValueError(f"layer {key!r}: a client's shape {w.shape} differs from the global {ref.shape}")
        out.append((w - ref).astype(np.float64))
    return np.stack(out)


def last_layer_deviations(models: Sequence[ClientArrays], layer: str | None = None) -> np.ndarray:
    """Each client's last layer minus the round's mean of them (float64), shape ``(n, *layer_shape)``."""
    w = last_layer_stack(models, layer)
    return w - w.mean(0)


def row_normalised(updates: np.ndarray) -> np.ndarray:
    """Flatten each client's ``(C, d)`` update after scaling every class row to unit norm (zero rows stay zero).

    Parameters
    ----------
    updates
        Shape ``(n, C, d)`` (as :func:`last_layer_updates` returns for a weight matrix).

    Returns
    -------
    np.ndarray
        Shape ``(n, C * d)``.
    """
    updates = np.asarray(updates, dtype=np.float64)
    if updates.ndim != 3:
        raise ValueError(f"updates must have shape (clients, classes, features), got {updates.shape}")
    norms = np.linalg.norm(updates, axis=2, keepdims=True)
    return np.divide(updates, norms, out=np.zeros_like(updates), where=norms > 0).reshape(len(updates), -1)
