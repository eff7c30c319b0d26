"""Fair tuning: every tuned method gets a grid of the same size, and keeps its best value over seeds.

A comparison's result frame has one row per run with the columns ``method``,
``setting`` (the value of the method's tuned hyper-parameter; NaN for a
method that runs at one setting), ``seed``, a metric to choose on, and any
columns that name the experimental condition (a split's ``alpha``, say).
:func:`best_settings` picks, for each tuned method and each condition, the
grid value with the best mean of that metric over seeds; it refuses grids of
unequal size (one method would get more tuning than another) and values not
run for every seed.  A run may fail (a diverged training, say): with
``failed`` naming a boolean column, a value that failed on any seed loses
the tuning whatever its metric, and the choice records it.  :func:`keep_best`
then keeps the rows of the untuned methods and of each tuned method's chosen
value, and the claims are computed on those.

The metric to choose on should not be the one the claims report.  For
splits that leave training samples unused (the cluster-skewed ones, and
any task with a ``validation_share``, see
:class:`repro.federated.task.TaskSpec`), :func:`validation_accuracy`
scores a model on those held-out samples, which no client trains on and no
claim reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from flwr.app import ArrayRecord

from repro.federated.arrays import from_arrayrecord
from repro.federated.task import TaskSpec, build_model, load_task_data
from repro.models import set_weights


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The grid value kept for one tuned method in one condition.

    Attributes
    ----------
    method
        The tuned method.
    value
        The chosen value of its hyper-parameter.
    score
        Mean over seeds of the metric chosen on, at ``value``.
    grid
        Every value that was tried, ascending.
    condition
        ``(column, value)`` pairs naming the experimental condition (empty for one condition).
    failed
        The values of the grid that failed on at least one seed (they cannot be chosen), ascending.
    """

    method: str
    value: float
    score: float
    grid: tuple[float, ...]
    condition: tuple[tuple[str, float], ...] = ()
    failed: tuple[float, ...] = ()

    @property
    def grid_end(self) -> str:
        """``"lowest"`` or ``"highest"`` when the choice is an end of a grid of two or more values, else ``""``.

        A choice at an end says the grid may not bracket the method's best
        value: a wider grid might move it.
        """
        if len(self.grid) < 2:
            return ""
        return "lowest" if self.value == self.grid[0] else "highest" if self.value == self.grid[-1] else ""


def best_settings(final: pd.DataFrame, metric: str, by: Sequence[str] = (),
                  failed: str | None = None) -> tuple[Choice, ...]:
    """For every tuned method (a non-NaN ``setting``) and condition, the value with the best mean ``metric``.

    Parameters
    ----------
    final
        One row per run: ``method``, ``setting``, ``seed``, ``metric`` and the columns of ``by``.
    metric
        The column to maximise (mean over seeds).
    by
        Columns naming the experimental condition; each condition is tuned on its own.
    failed
        A boolean column marking failed runs (``None``: no run fails).  A value that failed on any
        seed is never chosen (its ``metric`` may be NaN) and is listed in :attr:`Choice.failed`.

    Returns
    -------
    tuple of Choice
        Sorted by condition, then method.

    Raises
    ------
    ValueError
        If the tuned methods of a condition have grids of different sizes, if a value was not run for
        every seed its method was run for, if the mean ``metric`` of a value that did not fail is NaN, if every
        value of a method failed, or if ``metric``, ``failed`` or a column of ``by`` is missing.
    """
    missing = [c for c in ("method", "setting", "seed", metric, *by, *([failed] if failed else [])) if c not in final]
    if missing:
        raise ValueError(f"parameter 'final': lacks the columns {missing}")
    tuned = final[final.setting.notna()]
    choices = []
    for key, cond in (tuned.groupby(list(by), sort=True) if by else [((), tuned)]):
        condition = tuple(zip(by, (key if isinstance(key, tuple) else (key,))))
        grids = {m: sorted(g.setting.unique()) for m, g in cond.groupby("method")}
        if len({len(v) for v in grids.values()}) > 1:
            raise ValueError(f"tuning grids of unequal size {({m: len(v) for m, v in grids.items()})} "
                             f"in condition {dict(condition)}: every tuned method must get the same budget")
        for method, g in sorted(cond.groupby("method"), key=lambda mg: mg[0]):
            seeds = g.groupby("setting").seed.apply(frozenset)
            if seeds.nunique() != 1:
                raise ValueError(f"method {method!r} in condition {dict(condition)}: not every value of its grid "
                                 f"ran for the same seeds ({ {v: sorted(s) for v, s in seeds.items()} })")
            means = g.groupby("setting")[metric].mean()
            lost = (g.groupby("setting")[failed].any().astype(bool) if failed
                    else pd.Series(False, index=means.index))
            if lost.all():
                raise ValueError(f"method {method!r} in condition {dict(condition)}: every value of its grid failed "
                                 f"({sorted(lost.index)}); there is nothing to choose")
            means = means[~lost]
            if means.isna().any():
                raise ValueError(f"method {method!r}: metric {metric!r} is NaN for settings "
                                 f"{means[means.isna()].index.tolist()}")
            best = means.idxmax()  # the first (smallest) value among equal means
            choices.append(
                Choice(
                    method=method,
                    value=float(best),
                    score=float(means[best]),
                    grid=tuple(float(v) for v in grids[method]),
                    condition=condition,
                    failed=tuple(float(v) for v in lost.index[lost]),
                )
            )
    return tuple(choices)


def grid_end_note(choices: Sequence[Choice], labels: dict[str, str]) -> str:
    """A sentence naming the methods whose choice is an end of their grid, or ``""`` when none is.

    Parameters
    ----------
    choices
        The choices of :func:`best_settings`.
    labels
        Method -> the name the chapter prints.
    """
    ends = [f"{labels.get(c.method, c.method)} ({c.grid_end}, {c.value:g})" for c in choices if c.grid_end]
    if not ends:
        return ""
    return f"The choice lies at an end of the grid for {', '.join(ends)}: a wider grid might move it."


def chosen(choices: Sequence[Choice], **condition: float) -> dict[str, float]:
    """``method -> value`` of the ``choices`` made in ``condition`` (all of them when no condition is given)."""
    return {c.method: c.value for c in choices if all(np.isclose(dict(c.condition)[k], v) for k, v in condition.items())}


def keep_best(frame: pd.DataFrame, choices: Sequence[Choice]) -> pd.DataFrame:
    """The rows of ``frame`` (final or curves) of untuned methods and of each tuned method's chosen value.

    A row is kept if its ``setting`` is NaN, or if a choice for its method and its condition (the
    choice's ``condition`` columns) names its ``setting``.  Rows of a tuned value not chosen are dropped.
    """
    keep = frame.setting.isna().to_numpy().copy()
    for c in choices:
        match = (frame.method == c.method).to_numpy() & np.isclose(frame.setting.to_numpy(dtype=float), c.value)
        for column, value in c.condition:
            match &= np.isclose(frame[column].to_numpy(dtype=float), value)
        keep |= match
    return frame[keep]


# ----- a validation metric on the training samples no client holds -------------------------
def held_out(spec: TaskSpec) -> np.ndarray:
    """Indices of the training samples no client of ``spec`` holds.

    Raises
    ------
    ValueError
        If every training sample is held by some client (then there is nothing to validate on).
    """
    ds, parts = load_task_data(spec)
    used = np.zeros(len(ds.y_train), dtype=bool)
    used[np.concatenate(parts)] = True
    if used.all():
        raise ValueError(
            f"the {spec.scheme!r} split of {spec.dataset!r} leaves no training sample unused; "
            "there is no held-out set to validate on (TaskSpec.validation_share holds one out)"
        )
    return np.flatnonzero(~used)


def model_validation_accuracy(spec: TaskSpec, model: torch.nn.Module) -> float:
    """Class-balanced accuracy (percent) of ``model`` (weights loaded) on the held-out training samples.

    The mean over classes of per-class accuracy, over the classes the held-out set contains: the
    leftovers of a skewed split under-represent the classes the clients hold most, and the balancing
    keeps that from deciding the choice.  Any model mapping the task's inputs to class logits will
    do (an ensemble, one model of a pair); only training samples are read, never the test set.
    """
    ds, _ = load_task_data(spec)
    idx = held_out(spec)
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(ds.x_train[idx])).argmax(1).cpu().numpy()
    y = ds.y_train[idx]
    return float(100.0 * np.mean([(pred[y == c] == c).mean() for c in np.unique(y)]))


def validation_accuracy(spec: TaskSpec, arrays: ArrayRecord) -> float:
    """:func:`model_validation_accuracy` of the task's model holding the global ``arrays``."""
    model = build_model(spec, seed=0)
    set_weights(model, from_arrayrecord(arrays))
    return model_validation_accuracy(spec, model)
