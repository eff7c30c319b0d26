"""Argument checks: the value comes back converted, and a bad value raises naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

from repro.validation import (
    as_1d,
    as_2d,
    check_choice,
    check_nonneg,
    check_open_interval,
    check_positive,
    check_positive_int,
)


def test_scalar_checks_return_the_value_and_name_the_argument() -> None:
    assert check_positive_int("epochs", np.int64(3)) == 3 and type(check_positive_int("epochs", 3)) is int
    assert check_positive_int("n", 0, minimum=0) == 0
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(ValueError, match="epochs"):
            check_positive_int("epochs", bad)
    assert check_nonneg("eta", 0) == 0.0 and check_positive("lr", "0.5") == 0.5
    for bad in (-1e-9, float("nan"), float("inf"), None):
        with pytest.raises(ValueError, match="eta"):
            check_nonneg("eta", bad)
    with pytest.raises(ValueError, match="lr"):
        check_positive("lr", 0.0)
    assert check_open_interval("decay", 0.5, 0.0, 1.0) == 0.5
    for bad in (0.0, 1.0, float("nan"), "x"):
        with pytest.raises(ValueError, match="decay"):
            check_open_interval("decay", bad, 0.0, 1.0)
    assert check_choice("loss", "l1", ("l1", "l2")) == "l1"
    with pytest.raises(ValueError, match="loss"):
        check_choice("loss", "huber", ("l1", "l2"))


def test_array_checks_shape_and_finiteness() -> None:
    assert as_2d("x", [1.0, 2.0]).shape == (1, 2)
    assert as_1d("y", [[1.0], [2.0]]).shape == (2,)
    with pytest.raises(ValueError, match="3 columns"):
        as_2d("x", np.zeros((4, 2)), dim=3)
    with pytest.raises(ValueError, match="NaN"):
        as_2d("x", [[np.nan, 0.0]])
    with pytest.raises(ValueError, match="length 3"):
        as_1d("y", [1.0, 2.0], n=3)
    with pytest.raises(ValueError, match="shape"):
        as_1d("y", np.zeros((2, 2)))
