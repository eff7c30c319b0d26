"""Tuning on a tuning seed: every method runs at every value of one grid on a seed no claim reports.

The chapters that cannot afford to run a whole grid on every reported seed
tune once, on a separate tuning seed, and then run every method at the value
it kept for every reported seed.  :func:`tune_on_seed` runs the grid and
chooses with :func:`repro.federated.tuning.best_settings` (the same grid for
every method, chosen on a validation metric, never the test accuracy the
claims compare); a grid of one value runs nothing and chooses it
(:func:`one_value`).  :func:`tuning_summary` is the table a chapter shows.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence, TypeVar

import pandas as pd

from repro.federated.figures import tuning_table
from repro.federated.runs import RunRecord, SeededRun, execute, records_frame
from repro.federated.tuning import Choice, best_settings

J = TypeVar("J", bound=SeededRun)


def one_value(methods: Sequence[str], value: float) -> tuple[Choice, ...]:
    """The choices of a one-value grid: every method keeps ``value`` (no score: nothing was run)."""
    return tuple(Choice(method=m, value=float(value), score=math.nan, grid=(float(value),)) for m in methods)


def tune_on_seed(run_one: Callable[[J], RunRecord], job_of: Callable[[str, float], J], methods: Sequence[str],
                 values: Sequence[float], columns: Sequence[str], metric: str, workers: int = 1,
                 desc: str = "tuning") -> tuple[tuple[Choice, ...], pd.DataFrame]:
    """Every method at every value of one grid (``job_of(method, value)``, on the tuning seed); each keeps its best.

    Parameters
    ----------
    run_one
        Runs one job (a module-level function: the workers receive it pickled) and returns its record
        (a :class:`repro.federated.runs.RunRecord` whose ``setting`` is the tuned value).
    job_of
        The tuning job of a method at a value.
    methods, values
        The methods and the grid every one of them gets.
    columns
        The record columns kept in the returned frame (they include ``method``, ``setting``, ``seed`` and
        ``metric``).
    metric
        What the value is chosen on (the largest mean; the smallest value on ties).
    workers, desc
        Runs at once, and the progress bar's label.

    Returns
    -------
    choices : tuple of Choice
        One per method.
    runs : DataFrame
        The tuning runs (empty for a one-value grid).

    Raises
    ------
    ValueError
        If the grid is empty or holds a value twice.
    """
    grid = tuple(sorted(float(v) for v in values))
    if not grid or len(set(grid)) != len(grid):
        raise ValueError(f"parameter 'values': a grid of distinct values is needed, got {list(values)}")
    if len(grid) == 1:
        return one_value(methods, grid[0]), pd.DataFrame(columns=list(columns))
    done = execute(run_one, [job_of(m, v) for m in methods for v in grid], workers, desc=desc)
    runs = records_frame(done, columns)
    return best_settings(runs, metric), runs


def tuning_summary(runs: pd.DataFrame, choices: Sequence[Choice], labels: dict[str, str],
                   metric: str) -> pd.DataFrame:
    """The tuning table (:func:`repro.federated.figures.tuning_table`), or the one value kept when nothing was run."""
    if runs.empty:
        return pd.DataFrame({"method": [labels.get(c.method, c.method) for c in choices],
                             "chosen on validation": [f"{c.value:g} (the only value)" for c in choices]})
    return tuning_table(runs, choices, labels, metric=metric)
