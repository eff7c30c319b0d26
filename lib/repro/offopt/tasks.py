"""Offline-optimisation tasks and the Design-Bench evaluation protocol.

Protocol (after Design-Bench / design-baselines)
------------------------------------------------
1. A *pool* of designs with scores: ``n`` uniform draws from the box of a
   synthetic function, or the rows of a real dataset.
2. The *offline set* is the bottom ``q`` percent of the pool by score
   (:func:`bottom_q_indices`); the top ``100 - q`` percent is hidden.
3. Optimisers see ``x`` and ``y`` z-scored with the offline set's own mean and
   standard deviation (:class:`ZScore`).
4. They propose ``K = 128`` candidates, which are mapped back to raw units,
   clipped to the task's box and scored by the oracle.
5. Scores are normalised ``(f - f_min) / (f_max - f_min)``
   (:func:`normalised_score`) with the task's fixed range: for synthetic
   functions ``f_max`` is the known optimum and ``f_min`` the minimum over the
   pool and ``n_ref`` reference draws; for real data, the min and max of the
   full dataset's scores.
6. Report the 100th, 80th and 50th percentiles of the normalised candidate
   scores (:func:`score_percentiles`) and, across tasks, each method's mean
   rank (:func:`mean_rank`).

Every task is stated as a *maximisation* problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from repro.offopt.functions import FUNCTIONS, SyntheticFunction, make_function
from repro.offopt.seeds import derive_seed
from repro.validation import (
    as_1d,
    as_2d,
    check_choice,
    check_open_interval,
    check_positive_int,
)

DEFAULT_PERCENTILES: tuple[float, ...] = (100.0, 80.0, 50.0)
"""The percentiles Design-Bench reports."""


def bottom_q_indices(y: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into the bottom ``q`` percent by score and the rest.

    The ``floor(n * q / 100)`` lowest-scoring points are kept (a stable sort
    breaks ties by position), so every kept score is <= every dropped score.

    Parameters
    ----------
    y
        Scores, shape ``(n,)``.
    q
        Percentage kept, strictly between 0 and 100.

    Returns
    -------
    kept, dropped
        Index arrays (sorted ascending by score).
    """
    q = check_open_interval("q", q, 0.0, 100.0)
    y = as_1d("y", y)
    n_keep = int(np.floor(y.shape[0] * q / 100.0))
    if n_keep < 1 or n_keep >= y.shape[0]:
        raise ValueError(f"q={q} keeps {n_keep} of {y.shape[0]} points; the offline and hidden sets must both be non-empty")
    order = np.argsort(y, kind="stable")
    return order[:n_keep], order[n_keep:]


def bottom_q_split(x: np.ndarray, y: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Keep the bottom ``q`` percent of ``(x, y)`` by score.

    Parameters
    ----------
    x
        Designs, shape ``(n, d)``.
    y
        Scores, shape ``(n,)``.
    q
        Percentage kept, in ``(0, 100)``.

    Returns
    -------
    x_kept, y_kept
        The offline set.
    """
    x = as_2d("x", x)
    y = as_1d("y", y, n=x.shape[0])
    kept, _ = bottom_q_indices(y, q)
    return x[kept], y[kept]


@dataclass(frozen=True, kw_only=True)
class ZScore:
    """Column-wise z-scoring ``(a - mean) / std``; a zero std is replaced by 1.

    Attributes
    ----------
    mean, std
        Arrays broadcastable against the data (shape ``(d,)`` or ``()``).
    """

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, a: np.ndarray) -> "ZScore":
        """Fit to data of shape ``(n,)`` or ``(n, d)``.

        Parameters
        ----------
        a
            The data.

        Returns
        -------
        ZScore
            The fitted scaler.
        """
        a = np.asarray(a, dtype=np.float64)
        if a.shape[0] < 1:
            raise ValueError("a must contain at least one row")
        std = a.std(axis=0)
        std = np.where(std > 0, std, 1.0)
        return cls(mean=a.mean(axis=0), std=std)

    def transform(self, a: np.ndarray) -> np.ndarray:
        """Map raw values to z-scores."""
        return (np.asarray(a, dtype=np.float64) - self.mean) / self.std

    def inverse_transform(self, z: np.ndarray) -> np.ndarray:
        """Map z-scores back to raw values."""
        return np.asarray(z, dtype=np.float64) * self.std + self.mean


def normalised_score(y: np.ndarray | float, y_min: float, y_max: float) -> np.ndarray:
    """Normalise scores to ``(y - y_min) / (y_max - y_min)``.

    Parameters
    ----------
    y
        Raw scores (maximisation sense).
    y_min, y_max
        The task's fixed range; ``y_max`` must exceed ``y_min``.

    Returns
    -------
    numpy.ndarray
        Normalised scores: ``y_min`` maps to 0, ``y_max`` to 1.
    """
    if not (np.isfinite(y_min) and np.isfinite(y_max)):
        raise ValueError(f"y_min and y_max must be finite, got y_min={y_min}, y_max={y_max}")
    if y_max <= y_min:
        raise ValueError(f"y_max must exceed y_min, got y_min={y_min}, y_max={y_max}")
    return (np.asarray(y, dtype=np.float64) - y_min) / (y_max - y_min)


def score_percentiles(
    scores: np.ndarray, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> dict[str, float]:
    """Percentiles of candidate scores, as Design-Bench reports them.

    Uses :func:`numpy.percentile` with linear interpolation (as design-baselines
    does), so the 100th percentile is the maximum and the 50th the median.

    Parameters
    ----------
    scores
        Scores of the candidates, shape ``(k,)``.
    percentiles
        Percentiles in ``[0, 100]``.

    Returns
    -------
    dict
        ``{"p100": ..., "p80": ..., "p50": ...}`` (keys ``f"p{p:g}"``).
    """
    scores = as_1d("scores", scores)
    if scores.size == 0:
        raise ValueError("scores must not be empty")
    out: dict[str, float] = {}
    for p in percentiles:
        if not 0.0 <= float(p) <= 100.0:
            raise ValueError(f"percentiles must lie in [0, 100], got {p!r}")
        out[f"p{float(p):g}"] = float(np.percentile(scores, p))
    return out


def mean_rank(table: pd.DataFrame | Mapping[str, Mapping[str, float]], higher_is_better: bool = True) -> pd.Series:
    """Mean rank of each method across tasks (1 = best; ties share the average rank).

    Parameters
    ----------
    table
        Scores with methods as rows and tasks as columns: a DataFrame or a
        mapping ``{method: {task: score}}``.
    higher_is_better
        Whether a higher score ranks better.

    Returns
    -------
    pandas.Series
        Mean rank per method, sorted ascending (best first).
    """
    df = pd.DataFrame(table).T if isinstance(table, Mapping) else pd.DataFrame(table)
    if df.empty:
        raise ValueError("table must hold at least one method and one task")
    values = df.to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError("table has missing or non-finite scores; every method needs a score on every task")
    ranks = np.column_stack([rankdata(-c if higher_is_better else c, method="average") for c in values.T])
    return pd.Series(ranks.mean(axis=1), index=df.index, name="mean_rank").sort_values(kind="stable")


@dataclass(kw_only=True)
class OfflineTask:
    """An offline-optimisation task under the Design-Bench protocol (maximise).

    Attributes
    ----------
    name
        Task identifier, e.g. ``"ackley-8d"``.
    lower, upper
        The design box in raw units, shape ``(d,)``.
    x, y
        The offline set (bottom ``q`` percent of the pool), raw units.
    x_hidden, y_hidden
        The hidden top of the pool (never shown to optimisers; for analysis).
    y_min, y_max
        The fixed normalisation range.
    oracle
        Scores raw designs, shape ``(n, d) -> (n,)``, maximisation sense.
    q
        The kept percentage.
    info
        Free-form provenance (function, seeds, oracle type, ...).
    """

    name: str
    lower: np.ndarray
    upper: np.ndarray
    x: np.ndarray
    y: np.ndarray
    x_hidden: np.ndarray
    y_hidden: np.ndarray
    y_min: float
    y_max: float
    oracle: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    q: float = 50.0
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.x_scaler = ZScore.fit(self.x)
        self.y_scaler = ZScore.fit(self.y)

    @property
    def dim(self) -> int:
        """Design dimension ``d``."""
        return int(self.x.shape[1])

    @property
    def x_z(self) -> np.ndarray:
        """Offline designs, z-scored."""
        return self.x_scaler.transform(self.x)

    @property
    def y_z(self) -> np.ndarray:
        """Offline scores, z-scored."""
        return self.y_scaler.transform(self.y)

    @property
    def z_lower(self) -> np.ndarray:
        """The box's lower corner in z-space."""
        return self.x_scaler.transform(self.lower)

    @property
    def z_upper(self) -> np.ndarray:
        """The box's upper corner in z-space."""
        return self.x_scaler.transform(self.upper)

    def to_z(self, x: np.ndarray) -> np.ndarray:
        """Raw designs to z-space."""
        return self.x_scaler.transform(as_2d("x", x, self.dim))

    def from_z(self, x_z: np.ndarray) -> np.ndarray:
        """z-space designs to raw units (not clipped)."""
        return self.x_scaler.inverse_transform(as_2d("x_z", x_z, self.dim))

    def score(self, x: np.ndarray) -> np.ndarray:
        """Oracle scores of raw designs, after clipping them to the box.

        Parameters
        ----------
        x
            Raw designs, shape ``(n, d)``.

        Returns
        -------
        numpy.ndarray
            Raw scores, shape ``(n,)``.
        """
        x = np.clip(as_2d("x", x, self.dim), self.lower, self.upper)
        return np.asarray(self.oracle(x), dtype=np.float64).reshape(-1)

    def normalise(self, y: np.ndarray | float) -> np.ndarray:
        """Normalise raw scores with the task's range."""
        return normalised_score(y, self.y_min, self.y_max)

    def best_offline(self, k: int = 128) -> np.ndarray:
        """The ``k`` highest-scoring offline designs (raw units), best first."""
        k = check_positive_int("k", k)
        order = np.argsort(-self.y, kind="stable")[:k]
        return self.x[order]

    def evaluate(
        self, candidates: np.ndarray, *, z_space: bool = False, percentiles: Sequence[float] = DEFAULT_PERCENTILES
    ) -> dict[str, Any]:
        """Score candidates and summarise them as Design-Bench does.

        Parameters
        ----------
        candidates
            Designs, shape ``(k, d)``.
        z_space
            ``True`` if ``candidates`` are z-scored (they are mapped back first).
        percentiles
            Which percentiles of the normalised scores to report.

        Returns
        -------
        dict
            ``p100``/``p80``/``p50`` (normalised), ``scores`` (normalised, per
            candidate), ``raw`` (oracle scores) and ``best_offline`` (the
            normalised best offline score, for reference).
        """
        cand = self.from_z(candidates) if z_space else as_2d("candidates", candidates, self.dim)
        raw = self.score(cand)
        norm = self.normalise(raw)
        out: dict[str, Any] = score_percentiles(norm, percentiles)
        out.update(scores=norm, raw=raw, best_offline=float(self.normalise(self.y.max())))
        return out


def synthetic_task(
    function: SyntheticFunction,
    *,
    n: int = 4000,
    q: float = 50.0,
    seed: int = 0,
    n_ref: int = 100_000,
) -> OfflineTask:
    """Build a task from a synthetic function by uniform sampling of its box.

    Parameters
    ----------
    function
        The black box; it is maximised in :meth:`SyntheticFunction.objective` form.
    n
        Pool size (uniform draws).
    q
        Kept percentage (the offline set is the bottom ``q`` percent).
    seed
        Seed of the pool and reference draws.
    n_ref
        Extra uniform draws used only to estimate ``f_min``.

    Returns
    -------
    OfflineTask
        The task; ``y_max`` is ``function.objective_max`` (for an estimated
        optimum, the larger of it and the pool's best score).
    """
    n = check_positive_int("n", n, minimum=2)
    n_ref = check_positive_int("n_ref", n_ref)
    rng = np.random.default_rng(derive_seed(seed, 2))
    x_pool = function.sample_uniform(n, rng)
    y_pool = function.objective(x_pool)
    kept, dropped = bottom_q_indices(y_pool, q)
    ref = function.sample_uniform(n_ref, np.random.default_rng(derive_seed(seed, 3)))
    y_min = float(min(function.objective(ref).min(), y_pool.min()))
    y_max = float(function.objective_max)
    if y_pool.max() > y_max + 1e-9 * max(1.0, abs(y_max)):
        if function.optimum_exact:
            raise ValueError(f"the pool holds a score above the stated optimum of {function.name}; check the function")
        y_max = float(y_pool.max())  # an estimated optimum (GP sample) beaten by a pool draw
    return OfflineTask(
        name=f"{function.name}-{function.dim}d",
        lower=function.lower.copy(),
        upper=function.upper.copy(),
        x=x_pool[kept],
        y=y_pool[kept],
        x_hidden=x_pool[dropped],
        y_hidden=y_pool[dropped],
        y_min=y_min,
        y_max=y_max,
        oracle=function.objective,
        q=q,
        info={"function": function.name, "optimum_exact": function.optimum_exact, "n": n, "seed": seed, "n_ref": n_ref},
    )


class SklearnOracle:
    """A fitted scikit-learn regressor used as a black-box oracle.

    Parameters
    ----------
    model
        A fitted estimator with ``predict``.
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Predict scores, shape ``(n,)``."""
        return np.asarray(self.model.predict(np.asarray(x, dtype=np.float64)), dtype=np.float64).reshape(-1)


ORACLES = ("rf", "gp")


def _fit_oracle(kind: str, x: np.ndarray, y: np.ndarray, seed: int) -> SklearnOracle:
    if kind == "rf":
        from sklearn.ensemble import RandomForestRegressor

        rf = RandomForestRegressor(n_estimators=100, min_samples_leaf=2, random_state=seed, n_jobs=1)
        rf.fit(x, y)
        return SklearnOracle(rf)
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    col_scale = 1.0 / np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
    kernel = ConstantKernel(1.0) * RBF(length_scale=np.ones(x.shape[1])) + WhiteKernel(0.1)
    gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, random_state=seed)
    gp.fit(x * col_scale, y)
    return _ScaledOracle(gp, col_scale)


class _ScaledOracle(SklearnOracle):
    """An oracle whose model was fitted on column-rescaled inputs ``x * col_scale``."""

    def __init__(self, model: Any, col_scale: np.ndarray) -> None:
        super().__init__(model)
        self.col_scale = col_scale

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Predict scores, shape ``(n,)``."""
        return super().__call__(np.asarray(x, dtype=np.float64) * self.col_scale)


def diabetes_task(*, q: float = 50.0, oracle: str = "rf", seed: int = 0) -> OfflineTask:
    """A real-data task: scikit-learn's diabetes data (442 x 10) with a fitted oracle.

    Design-Bench style: the dataset's own targets (disease progression) are the
    pool's scores; an oracle (random forest, or GP) is fitted to the *full*
    dataset and scores candidates; ``y_min``/``y_max`` are the full dataset's
    min/max target.  The box is the features' observed range.  The binary
    ``sex`` feature is treated as continuous *[inferred]*.

    Parameters
    ----------
    q
        Kept percentage.
    oracle
        ``"rf"`` (random forest, 100 trees) or ``"gp"`` (ARD-RBF GP).
    seed
        Seed of the oracle fit.

    Returns
    -------
    OfflineTask
        The task ``"diabetes-<oracle>"``.
    """
    check_choice("oracle", oracle, ORACLES)
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    x_all = np.asarray(data.data, dtype=np.float64)
    y_all = np.asarray(data.target, dtype=np.float64)
    kept, dropped = bottom_q_indices(y_all, q)
    fitted = _fit_oracle(oracle, x_all, y_all, seed)
    return OfflineTask(
        name=f"diabetes-{oracle}",
        lower=x_all.min(axis=0),
        upper=x_all.max(axis=0),
        x=x_all[kept],
        y=y_all[kept],
        x_hidden=x_all[dropped],
        y_hidden=y_all[dropped],
        y_min=float(y_all.min()),
        y_max=float(y_all.max()),
        oracle=fitted,
        q=q,
        info={"dataset": "sklearn.datasets.load_diabetes", "oracle": oracle, "seed": seed},
    )


TASK_NAMES: tuple[str, ...] = (*FUNCTIONS, "diabetes")
"""Names accepted by :func:`make_task`."""

TASK_BOUNDS: tuple[float, float] = (-2.0, 2.0)
"""Default box of the synthetic tasks except Branin (the spec's ``[-2, 2]^d``)."""


def make_task(
    name: str,
    dim: int = 8,
    *,
    n: int = 4000,
    q: float = 50.0,
    seed: int = 0,
    n_ref: int = 100_000,
    oracle: str = "rf",
    **function_kwargs: Any,
) -> OfflineTask:
    """Build a task by name.

    Synthetic tasks default to the box ``[-2, 2]^d`` (:data:`TASK_BOUNDS`, as
    the chapter specs use), except Branin, whose box is fixed; pass
    ``bounds=(lo, hi)`` to override.  For ``"gp_rff"``, ``seed`` also seeds the
    GP sample and ``n_ref`` is also the number of draws that estimate its
    maximum.

    Parameters
    ----------
    name
        A synthetic function name (``"ackley"``, ``"rosenbrock"``, ``"levy"``,
        ``"branin"``, ``"gp_rff"``) or ``"diabetes"``.
    dim
        Design dimension (synthetic tasks only).
    n, q, seed, n_ref
        See :func:`synthetic_task` (``q`` and ``seed`` also apply to ``"diabetes"``).
    oracle
        Oracle kind for ``"diabetes"``.
    **function_kwargs
        Passed to the function factory (e.g. ``bounds=(-5, 5)``, ``lengthscale``).

    Returns
    -------
    OfflineTask
        The task.
    """
    check_choice("name", name, TASK_NAMES)
    if name == "diabetes":
        return diabetes_task(q=q, oracle=oracle, seed=seed)
    kwargs = dict(function_kwargs)
    if name != "branin":
        kwargs.setdefault("bounds", TASK_BOUNDS)
    if name == "gp_rff":
        kwargs.setdefault("n_ref", n_ref)
    fn = make_function(name, dim, seed=seed, **kwargs)
    return synthetic_task(fn, n=n, q=q, seed=seed, n_ref=n_ref)
