"""Argument checks for library functions of any family.

Every public function validates its inputs with these helpers so that a bad
value fails early with a :class:`ValueError` whose message names the argument.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def check_positive_int(name: str, value: Any, *, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise if it is not an integer >= ``minimum``.

    Parameters
    ----------
    name
        The argument's name, used in the error message.
    value
        The value to check.
    minimum
        The smallest allowed value.

    Returns
    -------
    int
        The checked value.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_open_interval(name: str, value: Any, low: float, high: float) -> float:
    """Return ``value`` as a float, or raise if it is not strictly inside ``(low, high)``.

    Parameters
    ----------
    name
        The argument's name, used in the error message.
    value
        The value to check.
    low, high
        The open interval's ends.

    Returns
    -------
    float
        The checked value.
    """
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in ({low}, {high}), got {value!r}") from None
    if not (low < v < high) or not np.isfinite(v):
        raise ValueError(f"{name} must be in the open interval ({low}, {high}), got {value!r}")
    return v


def check_nonneg(name: str, value: Any) -> float:
    """Return ``value`` as a float, or raise if it is negative or not finite.

    Parameters
    ----------
    name
        The argument's name, used in the error message.
    value
        The value to check.

    Returns
    -------
    float
        The checked value.
    """
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}") from None
    if not np.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def check_positive(name: str, value: Any) -> float:
    """Return ``value`` as a float, or raise if it is not finite and > 0.

    Parameters
    ----------
    name
        The argument's name, used in the error message.
    value
        The value to check.

    Returns
    -------
    float
        The checked value.
    """
    v = check_nonneg(name, value)
    if v == 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """Raise unless ``value`` is one of ``choices``.

    Parameters
    ----------
    name
        The argument's name, used in the error message.
    value
        The value to check.
    choices
        The allowed values.

    Returns
    -------
    str
        The checked value.
    """
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def as_2d(name: str, x: Any, dim: int | None = None) -> np.ndarray:
    """Convert ``x`` to a float64 array of shape ``(n, d)``.

    A 1-D input is treated as a single point.

    Parameters
    ----------
    name
        The argument's name, used in the error message.
    x
        Array-like of points.
    dim
        The required number of columns, if known.

    Returns
    -------
    numpy.ndarray
        The points, shape ``(n, d)``.
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d), got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} must have {dim} columns, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def as_1d(name: str, y: Any, n: int | None = None) -> np.ndarray:
    """Convert ``y`` to a float64 vector, accepting ``(n,)`` or ``(n, 1)``.

    Parameters
    ----------
    name
        The argument's name, used in the error message.
    y
        Array-like of values.
    n
        The required length, if known.

    Returns
    -------
    numpy.ndarray
        The values, shape ``(n,)``.
    """
    arr = np.asarray(y, dtype=np.float64)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must have shape (n,) or (n, 1), got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} must have length {n}, got {arr.shape[0]}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr
