"""The experiment grid every offline-optimisation chapter runs (ROOT, BOSS, IGNITE).

One grid runner serves the three chapters: methods x tasks x seeds under the
Design-Bench protocol, returned as a tidy table (one row per run) plus the
candidates and their normalised scores.  The helpers below turn that table into
the main-table miniatures (mean and spread per task, mean rank), and into the
paired regularised-against-vanilla comparisons that the BOSS and IGNITE
chapters both judge.  :class:`GridSettings` holds the settings the chapters
share, named as in their parameter schemas; each chapter's driver in
:mod:`repro.offopt.chapters` extends it with its own.

Surrogate sharing: within one ``(task, seed)`` the surrogate of an optimiser
depends only on the regulariser, so :func:`run_grid` trains it once and lets
``grad_ascent``, ``cma_es`` and ``genetic`` search the same model (as
design-baselines does when it reuses a trained model); likewise the mean- and
min-ensemble optimisers share one set of members.  The ``seconds`` column
counts the training time for every method that uses the model.

:func:`run_chapter_grid` spreads the ``(task, seed)`` cells over worker
processes; every cell seeds itself, so the grid does not depend on the number
of workers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from scipy import stats
from tqdm import tqdm

from repro.models import torch_threads
from repro.offopt.pipeline import (
    SINGLE_OPTIMIZERS,
    SURROGATE_OPTIMIZERS,
    MethodSettings,
    fit_surrogate,
    method_settings,
    parse_method,
    propose,
    surrogate_kind,
)
from repro.offopt.regularizers import empirical_sensitivity, gradient_norm
from repro.offopt.seeds import derive_seed
from repro.offopt.tasks import TASK_NAMES, OfflineTask, make_task, mean_rank
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.validation import check_choice, check_open_interval, check_positive_int

DIAGNOSTICS = ("sensitivity", "sharpness")
"""Surrogate diagnostics :func:`run_grid` can log (see :func:`surrogate_diagnostics`)."""

METRICS = ("p100", "p80", "p50")


@dataclass(frozen=True, kw_only=True)
class MethodSpec:
    """A method of a grid: a display label, a pipeline method name and its overrides.

    Attributes
    ----------
    label
        Name in tables and figures (unique within a grid), e.g. ``"root (F=1)"``.
    method
        A :func:`repro.offopt.pipeline.propose` method, e.g. ``"cma_es+boss"``.
    root
        Overrides of :class:`~repro.offopt.pipeline.RootConfig` for this method only
        (merged over the grid's).
    regularizer_kwargs
        Overrides of the regulariser's defaults for this method only.
    """

    label: str
    method: str
    root: Mapping[str, Any] = field(default_factory=dict)
    regularizer_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parse_method(self.method)
        if not self.label:
            raise ValueError("MethodSpec label must be non-empty")


def as_method_spec(method: str | MethodSpec) -> MethodSpec:
    """A :class:`MethodSpec` from a method name (label = name) or a spec."""
    if isinstance(method, MethodSpec):
        return method
    if not isinstance(method, str):
        raise ValueError(f"methods must be names or MethodSpec objects, got {type(method).__name__}")
    return MethodSpec(label=method, method=method)


@dataclass(frozen=True, kw_only=True)
class GridSettings(ChapterParams):
    """The parameters every offline-optimisation chapter shares, named as in the chapters' schemas.

    Each chapter's ``Params`` extends it with its own fields.  Lists are stored
    as tuples, so a record is hashable and cannot change after it is built.

    Attributes
    ----------
    tasks
        Task names (:data:`repro.offopt.tasks.TASK_NAMES`).
    dim
        Design dimension of the synthetic tasks.
    n_pool, q, n_ref
        Pool size, percent of the pool kept as the offline set, and the extra
        draws that fix each task's normalisation range.
    n_candidates
        Designs each method proposes (``K``).
    seeds
        Run seeds.
    hidden, surrogate_epochs
        Surrogate MLP widths and training epochs.
    grad_steps, grad_lr
        Gradient ascent's Adam steps and step size in z-space.
    cma_starts, cma_generations
        CMA-ES runs (from the best offline designs) and generations per run.
    ensemble_size
        Members of the ensembles the mean- and min-ensemble gradient ascents search.
    workers
        Processes the ``(task, seed)`` cells are spread over.
    device
        Where the surrogates train (``cpu``, ``cuda`` or ``auto``); searches and diagnostics use them on the CPU.
    """

    tasks: tuple[str, ...]
    dim: int
    n_pool: int
    q: float
    n_ref: int
    n_candidates: int
    seeds: tuple[int, ...]
    hidden: tuple[int, ...]
    surrogate_epochs: int
    grad_steps: int
    grad_lr: float
    cma_starts: int
    cma_generations: int
    ensemble_size: int
    workers: int
    device: str = "cpu"

    def __post_init__(self) -> None:
        for name in ("tasks", "seeds", "hidden"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def checks(self) -> None:
        """Refuse an offline set smaller than ``n_candidates`` (the schema's ``distinct`` refuses repeats)."""
        offline = int(self.n_pool * self.q / 100.0)
        require(offline >= self.n_candidates, self, ("n_pool", "q", "n_candidates"),
                f"the offline set (n_pool * q / 100 = {offline} designs) must hold at least n_candidates designs, "
                "the starts of the searches")

    def method_settings(self, **extra: Any) -> MethodSettings:
        """The pipeline's settings for this chapter (``extra``: ``root``, ``regularizer_kwargs``)."""
        return method_settings(n_candidates=self.n_candidates, surrogate=self.surrogate_config(),
                               search=self.search_config(), **extra)

    def build_tasks(self) -> list[OfflineTask]:
        """The chapter's tasks (:func:`build_tasks` with the pool settings)."""
        return build_tasks(self.tasks, self.dim, n=self.n_pool, q=self.q, n_ref=self.n_ref)

    def surrogate_config(self) -> dict[str, Any]:
        """Overrides of :class:`repro.offopt.pipeline.SurrogateConfig`."""
        return {"hidden": list(self.hidden), "epochs": self.surrogate_epochs, "ensemble": self.ensemble_size,
                "device": self.device}

    def search_config(self) -> dict[str, Any]:
        """Overrides of :class:`repro.offopt.pipeline.SearchConfig`."""
        return {
            "grad_steps": self.grad_steps,
            "grad_lr": self.grad_lr,
            "cma_starts": self.cma_starts,
            "cma_generations": self.cma_generations,
        }


@dataclass(frozen=True, kw_only=True)
class GridResult:
    """What :func:`run_grid` returns.

    Attributes
    ----------
    rows
        One row per (task, method, seed): ``task, method`` (the label),
        ``optimizer, regularizer`` (``"none"`` if vanilla), ``seed, p100, p80,
        p50, best_offline, seconds`` and, where logged, the surrogate diagnostics
        ``sensitivity_offline``, ``sensitivity_unseen``, ``sharpness_offline``,
        ``sharpness_unseen`` (NaN for methods without a surrogate).
    scores
        ``(task, method, seed) -> `` normalised scores of the ``K`` candidates.
    candidates_z
        ``(task, method, seed) -> `` the candidates in the task's z-space.
    tasks
        The tasks by name.
    methods
        The method labels in grid order.
    """

    rows: pd.DataFrame
    scores: dict[tuple[str, str, int], np.ndarray]
    candidates_z: dict[tuple[str, str, int], np.ndarray]
    tasks: dict[str, OfflineTask]
    methods: list[str]


def build_tasks(
    names: Sequence[str], dim: int, *, n: int = 2000, q: float = 50.0, seed: int = 0, n_ref: int = 20_000
) -> list[OfflineTask]:
    """Build the chapters' tasks (the same pool seed for all of them).

    Parameters
    ----------
    names
        Task names accepted by :func:`repro.offopt.tasks.make_task`.
    dim
        Design dimension of the synthetic tasks.
    n, q, seed, n_ref
        Pool size, kept percentage, pool seed and reference draws.

    Returns
    -------
    list of OfflineTask
        In the order of ``names``.
    """
    if not names:
        raise ValueError("tasks must name at least one task")
    for name in names:
        check_choice("tasks", name, TASK_NAMES)
    if len(set(names)) != len(names):
        raise ValueError(f"tasks must not repeat, got {list(names)}")
    check_positive_int("dim", dim)
    return [make_task(name, dim, n=n, q=q, seed=seed, n_ref=n_ref) for name in names]


def unseen_designs(task: OfflineTask, fraction: float = 0.1) -> np.ndarray:
    """The best ``fraction`` of the task's whole pool, all from its hidden part (raw units).

    These designs lie beyond the offline data (they score higher than every
    offline design); the chapters measure surrogate diagnostics there.

    Parameters
    ----------
    task
        The task.
    fraction
        Share of the pool, in ``(0, 1)``; at most the hidden part is returned.

    Returns
    -------
    numpy.ndarray
        Shape ``(m, d)``, best first.
    """
    fraction = check_open_interval("fraction", fraction, 0.0, 1.0)
    pool = task.x.shape[0] + task.x_hidden.shape[0]
    m = max(1, min(task.x_hidden.shape[0], int(round(fraction * pool))))
    order = np.argsort(-task.y_hidden, kind="stable")[:m]
    return task.x_hidden[order]


def surrogate_diagnostics(
    model: torch.nn.Module,
    task: OfflineTask,
    which: Sequence[str],
    *,
    seed: int = 0,
    unseen_fraction: float = 0.1,
    sensitivity_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Sensitivity (BOSS) and/or sharpness (IGNITE) of a trained surrogate.

    Both are measured on the offline set ("offline") and on the unseen top
    designs of :func:`unseen_designs` ("unseen"), in z-space.

    * ``sensitivity``: :func:`repro.offopt.regularizers.empirical_sensitivity`,
      the Monte-Carlo fraction of parameter shifts ``gamma * 1`` that move the
      mean prediction by more than ``alpha`` times its size (true perturbed
      forward passes).
    * ``sharpness``: :func:`repro.offopt.regularizers.gradient_norm`,
      ``||grad_beta G_B||`` with ``G_B`` the mean prediction (IGNITE's proxy
      without the ``rho``).

    Parameters
    ----------
    model
        The surrogate.
    task
        Its task.
    which
        Subset of :data:`DIAGNOSTICS`.
    seed
        Seed of the sensitivity draws.
    unseen_fraction
        See :func:`unseen_designs`.
    sensitivity_kwargs
        Overrides of ``empirical_sensitivity`` (``alpha``, ``sigma``, ``n_gamma``).

    Returns
    -------
    dict
        ``{"<diag>_offline": ..., "<diag>_unseen": ...}`` for each requested diagnostic.
    """
    for w in which:
        check_choice("diagnostics", w, DIAGNOSTICS)
    dtype = next(model.parameters()).dtype
    sets = {
        "offline": torch.as_tensor(task.x_z, dtype=dtype),
        "unseen": torch.as_tensor(task.to_z(unseen_designs(task, unseen_fraction)), dtype=dtype),
    }
    out: dict[str, float] = {}
    for w in which:
        for where, x in sets.items():
            if w == "sensitivity":
                out[f"{w}_{where}"] = empirical_sensitivity(model, x, seed=seed, **dict(sensitivity_kwargs or {}))
            else:
                out[f"{w}_{where}"] = gradient_norm(model, x)
    return out


@dataclass(frozen=True, kw_only=True)
class Diagnostics:
    """Which surrogate diagnostics :func:`run_grid` logs, and how.

    Attributes
    ----------
    which
        Subset of :data:`DIAGNOSTICS`, measured on every single surrogate (not on the ensembles).
    sensitivity_kwargs
        Overrides of :func:`~repro.offopt.regularizers.empirical_sensitivity` (``alpha``, ``sigma``, ``n_gamma``).
    """

    which: tuple[str, ...] = ()
    sensitivity_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for d in self.which:
            check_choice("diagnostics", d, DIAGNOSTICS)


def run_grid(
    tasks: Sequence[OfflineTask],
    methods: Sequence[str | MethodSpec],
    seeds: Sequence[int],
    settings: MethodSettings | None = None,
    *,
    diagnostics: Diagnostics | None = None,
    progress: bool = True,
) -> GridResult:
    """Run every method on every task for every seed and score the candidates.

    Parameters
    ----------
    tasks
        The tasks (distinct names).
    methods
        Method names or :class:`MethodSpec` objects (distinct labels).
    seeds
        Run seeds (distinct).  A run's seed seeds its surrogate, search and ROOT
        model, so a row is a pure function of ``(task, method, seed)`` and the
        settings.
    settings
        The pipeline's settings, shared by all methods (a :class:`MethodSpec` overrides some for itself).
    diagnostics
        Surrogate diagnostics to log (default: none).
    progress
        Show a progress bar.

    Returns
    -------
    GridResult
        Rows, candidate scores and candidates.
    """
    specs = [as_method_spec(m) for m in methods]
    labels = [s.label for s in specs]
    if not specs:
        raise ValueError("methods must hold at least one method")
    if len(set(labels)) != len(labels):
        raise ValueError(f"method labels must be distinct, got {labels}")
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct integers, got {seeds}")
    names = [t.name for t in tasks]
    if not names or len(set(names)) != len(names):
        raise ValueError(f"tasks must be a non-empty list with distinct names, got {names}")
    base = settings or MethodSettings()
    diag = diagnostics or Diagnostics()
    rows: list[dict[str, Any]] = []
    scores: dict[tuple[str, str, int], np.ndarray] = {}
    cands: dict[tuple[str, str, int], np.ndarray] = {}
    bar = tqdm(total=len(tasks) * len(seeds) * len(specs), desc="runs", disable=not progress)
    for task in tasks:
        for seed in seeds:
            models: dict[tuple[str, str | None, str], tuple[torch.nn.Module, float, dict[str, float]]] = {}
            for spec in specs:
                row, sc, cz = _run_cell(task, spec, base, seed=seed, models=models, diagnostics=diag)
                scores[(task.name, spec.label, seed)] = sc
                cands[(task.name, spec.label, seed)] = cz
                rows.append(row)
                bar.update(1)
    bar.close()
    return GridResult(rows=pd.DataFrame(rows), scores=scores, candidates_z=cands, tasks={t.name: t for t in tasks},
                      methods=labels)


def _run_cell(
    task: OfflineTask,
    spec: MethodSpec,
    base: MethodSettings,
    *,
    seed: int,
    models: dict[tuple[str, str | None, str], tuple[torch.nn.Module, float, dict[str, float]]],
    diagnostics: Diagnostics,
) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """One method on one task and seed: its row, candidate scores and candidates.

    ``models`` caches the ``(task, seed)``'s trained surrogates by (kind, regulariser, its settings).
    """
    opt, reg = parse_method(spec.method)
    cfg = base.with_overrides(spec.root, {reg: spec.regularizer_kwargs} if reg else {})
    rkw = dict(cfg.regularizer_kwargs.get(reg or "", {}))
    t0 = time.perf_counter()
    model, train_s = None, 0.0
    diag: dict[str, float] = {}
    kind = surrogate_kind(opt)
    if kind is not None:
        key = (kind, reg, repr(sorted(rkw.items())))
        if key not in models:
            m, _ = fit_surrogate(task, seed=seed, regularizer=reg, config=cfg.surrogate, regularizer_kwargs=rkw, kind=kind)
            trained = time.perf_counter() - t0
            d: dict[str, float] = {}
            if diagnostics.which and kind == "single":
                d = surrogate_diagnostics(m, task, diagnostics.which, seed=derive_seed(seed, 90),
                                          sensitivity_kwargs=diagnostics.sensitivity_kwargs)
            models[key] = (m, trained, d)
        model, train_s, diag = models[key]
    t1 = time.perf_counter()
    prop = propose(task, spec.method, cfg, seed=seed, model=model)
    seconds = train_s + time.perf_counter() - t1
    ev = task.evaluate(prop.candidates)
    row = {"task": task.name, "method": spec.label, "optimizer": opt, "regularizer": reg or "none", "seed": seed,
           "p100": ev["p100"], "p80": ev["p80"], "p50": ev["p50"], "best_offline": ev["best_offline"], "seconds": seconds}
    for name in DIAGNOSTICS:
        if name in diagnostics.which:
            row[f"{name}_offline"] = diag.get(f"{name}_offline", np.nan)
            row[f"{name}_unseen"] = diag.get(f"{name}_unseen", np.nan)
    return row, ev["scores"], prop.candidates_z


@dataclass(frozen=True, kw_only=True)
class CellJob:
    """One ``(task, seed)`` cell of a chapter's grid, for a worker process (which builds its own task)."""

    params: GridSettings
    methods: tuple[str | MethodSpec, ...]
    task: str
    seed: int
    settings: MethodSettings
    diagnostics: Diagnostics


def _run_cell_job(job: CellJob) -> GridResult:
    """Build the job's task and run every method on it for the job's seed (one torch thread)."""
    p = job.params
    (task,) = build_tasks([job.task], p.dim, n=p.n_pool, q=p.q, n_ref=p.n_ref)
    with torch_threads(1):
        return run_grid([task], job.methods, [job.seed], job.settings, diagnostics=job.diagnostics, progress=False)


def run_chapter_grid(
    params: GridSettings,
    methods: Sequence[str | MethodSpec],
    settings: MethodSettings,
    *,
    diagnostics: Diagnostics | None = None,
    tasks: Sequence[OfflineTask] | None = None,
) -> GridResult:
    """Run a chapter's grid, one ``(task, seed)`` cell per job, in ``params.workers`` processes.

    Parameters
    ----------
    params
        The chapter's parameters; they give the tasks, the seeds and the workers.
    methods
        The chapter's methods.
    settings
        The pipeline's settings (:meth:`GridSettings.method_settings`, with the chapter's own).
    diagnostics
        Surrogate diagnostics to log.
    tasks
        The tasks, if already built (they are returned with the grid; the workers rebuild their own).

    Returns
    -------
    GridResult
        The same rows, scores and candidates, in the same order, as :func:`run_grid` over all cells.
    """
    built = list(tasks) if tasks is not None else params.build_tasks()
    jobs = [CellJob(params=params, methods=tuple(methods), task=name, seed=seed, settings=settings,
                    diagnostics=diagnostics or Diagnostics())
            for name in params.tasks for seed in params.seeds]
    parts = parallel_map(_run_cell_job, jobs, workers=params.workers, desc="task x seed cells")
    rows = pd.concat([p.rows for p in parts], ignore_index=True)
    return GridResult(rows=rows, scores={k: v for p in parts for k, v in p.scores.items()},
                      candidates_z={k: v for p in parts for k, v in p.candidates_z.items()},
                      tasks={t.name: t for t in built}, methods=parts[0].methods)


def _check_metric(metric: str) -> str:
    return check_choice("metric", metric, METRICS)


def mean_table(rows: pd.DataFrame, metric: str = "p100") -> pd.DataFrame:
    """Mean over seeds of ``metric``: methods as rows (grid order), tasks as columns (grid order)."""
    _check_metric(metric)
    g = rows.groupby(["method", "task"], sort=False)[metric].mean().unstack("task")
    return g.loc[list(dict.fromkeys(rows.method)), list(dict.fromkeys(rows.task))]


def mean_rank_by_seed(rows: pd.DataFrame, metric: str = "p100") -> pd.DataFrame:
    """Each seed's mean rank of every method across tasks (1 = best; ties averaged).

    Returns
    -------
    pandas.DataFrame
        Index: seed; columns: methods in grid order.
    """
    _check_metric(metric)
    methods = list(dict.fromkeys(rows.method))
    out = {}
    for seed, sub in rows.groupby("seed", sort=True):
        table = sub.pivot(index="method", columns="task", values=metric)
        out[seed] = mean_rank(table).reindex(methods)
    df = pd.DataFrame(out).T
    df.index.name = "seed"
    return df


def score_table(rows: pd.DataFrame, metric: str = "p100") -> pd.DataFrame:
    """The main-table miniature: ``mean ± sd`` over seeds per task, then the mean rank.

    The mean rank is computed per seed (across tasks) and then averaged over
    seeds, ``mean ± sd``; the best offline design's score heads the table's
    ``best offline`` row when ``best_offline`` is not itself a method.

    Returns
    -------
    pandas.DataFrame
        Rows: methods; columns: tasks and ``mean rank``; cells are strings.
    """
    _check_metric(metric)
    mean = mean_table(rows, metric)
    sd = rows.groupby(["method", "task"], sort=False)[metric].std(ddof=1).unstack("task").reindex_like(mean).fillna(0.0)
    out = pd.DataFrame(index=mean.index)
    for task in mean.columns:
        out[task] = [f"{m:.3f} ± {s:.3f}" for m, s in zip(mean[task], sd[task])]
    ranks = mean_rank_by_seed(rows, metric)
    r_sd = ranks.std(ddof=1).fillna(0.0) if len(ranks) > 1 else ranks.mean() * 0.0
    out["mean rank"] = [f"{ranks[m].mean():.2f} ± {r_sd[m]:.2f}" for m in mean.index]
    out.index.name = "method"
    return out


def paired_gains(rows: pd.DataFrame, regularizer: str, metric: str = "p100") -> pd.DataFrame:
    """Regularised against vanilla, per (task, base optimiser, seed).

    A pair is a base method ``b`` and ``b+<regularizer>`` present in the grid.

    Returns
    -------
    pandas.DataFrame
        ``task, base, seed, vanilla, regularised, gain`` (``gain`` =
        regularised - vanilla, normalised-score units) and ``rel_gain_pct``
        (``100 * gain / |vanilla|``).
    """
    _check_metric(metric)
    methods = set(rows.method)
    bases = [m for m in dict.fromkeys(rows.method) if f"{m}+{regularizer}" in methods]
    if not bases:
        raise ValueError(f"no (base, base+{regularizer}) method pair in the grid; methods: {sorted(methods)}")
    out = []
    idx = rows.set_index(["task", "method", "seed"])[metric]
    for task in dict.fromkeys(rows.task):
        for base in bases:
            for seed in sorted(set(rows.seed)):
                v, r = float(idx[(task, base, seed)]), float(idx[(task, f"{base}+{regularizer}", seed)])
                out.append(
                    {
                        "task": task,
                        "base": base,
                        "seed": seed,
                        "vanilla": v,
                        "regularised": r,
                        "gain": r - v,
                        "rel_gain_pct": 100.0 * (r - v) / max(abs(v), 1e-12),
                    }
                )
    return pd.DataFrame(out)


def regulariser_claims(rows: pd.DataFrame, regularizer: str, metric: str = "p100") -> dict[str, list[float]]:
    """Per-seed values of "the regulariser improves the base optimisers".

    Returns
    -------
    dict
        ``frac_improved``: share of (task, base) pairs whose ``metric`` rose;
        ``mean_gain_points``: mean gain over pairs, in points (100 x normalised
        score); ``max_rel_gain_pct``: the largest relative gain over pairs, percent;
        ``mean_rel_gain_pct``: the mean relative gain over pairs, percent (see
        :func:`paired_mean_gain` for its interval).  One value per seed, seeds
        ascending.
    """
    g = paired_gains(rows, regularizer, metric)
    by = g.groupby("seed", sort=True)
    return {
        "frac_improved": [float((s.gain > 0).mean()) for _, s in by],
        "mean_gain_points": [float(100.0 * s.gain.mean()) for _, s in by],
        "max_rel_gain_pct": [float(s.rel_gain_pct.max()) for _, s in by],
        "mean_rel_gain_pct": [float(s.rel_gain_pct.mean()) for _, s in by],
    }


@dataclass(frozen=True, kw_only=True)
class PairedMean:
    """The mean of paired regularised-against-vanilla gains, with a Student-t confidence interval.

    Attributes
    ----------
    mean
        Mean gain over the pairs.
    low, high
        The interval's ends.
    n
        Number of pairs.
    confidence
        The interval's confidence level.
    unit
        ``"%"`` (relative gains) or ``"points"`` (absolute gains, 100 x normalised score).
    """

    mean: float
    low: float
    high: float
    n: int
    confidence: float
    unit: str

    @property
    def excludes_zero(self) -> bool:
        """Whether the whole interval lies on one side of zero."""
        return self.low > 0.0 or self.high < 0.0


def paired_mean_gain(
    rows: pd.DataFrame, regularizer: str, metric: str = "p100", *, relative: bool = True, confidence: float = 0.95
) -> PairedMean:
    """Mean paired gain of the regulariser over every (task, base optimiser, seed) pair, with a t-interval.

    This is the robust counterpart of ``max_rel_gain_pct`` in
    :func:`regulariser_claims`: the largest of many noisy paired gains grows
    with the number of pairs even when the regulariser does nothing, while the
    mean and its interval do not.

    Parameters
    ----------
    rows
        Grid rows holding ``base`` and ``base+regularizer`` methods.
    regularizer
        ``"boss"``, ``"ignite"`` or ``"ignite2"``.
    metric
        Score percentile.
    relative
        Relative gains in percent of ``|vanilla|`` (``rel_gain_pct`` of
        :func:`paired_gains`) if ``True``, else absolute gains in points.
    confidence
        Confidence level of the interval, in ``(0, 1)``.

    Returns
    -------
    PairedMean
        Mean, interval (:func:`scipy.stats.ttest_1samp`'s), number of pairs and unit.

    Raises
    ------
    ValueError
        With fewer than two pairs (no interval), or a bad ``confidence``.
    """
    confidence = check_open_interval("confidence", confidence, 0.0, 1.0)
    g = paired_gains(rows, regularizer, metric)
    values = g.rel_gain_pct.to_numpy() if relative else 100.0 * g.gain.to_numpy()
    if len(values) < 2:
        raise ValueError(f"a confidence interval needs at least two (task, base, seed) pairs, got {len(values)}")
    ci = stats.ttest_1samp(values, 0.0).confidence_interval(confidence)
    return PairedMean(
        mean=float(values.mean()),
        low=float(ci.low),
        high=float(ci.high),
        n=len(values),
        confidence=confidence,
        unit="%" if relative else "points",
    )


def diagnostic_reduction(rows: pd.DataFrame, regularizer: str, column: str) -> list[float]:
    """Per seed, the percent reduction of a surrogate diagnostic by the regulariser.

    The diagnostic (e.g. ``"sharpness_unseen"``) is averaged over tasks for the
    vanilla single surrogate and for the regularised one (each surrogate counted once,
    whichever optimisers searched it; the ensembles are not measured); the value is ``100 * (1 - reg / vanilla)``.
    """
    if column not in rows.columns:
        raise ValueError(f"column {column!r} was not logged; run the grid with the matching diagnostics")
    sur = rows[rows.optimizer.isin(SINGLE_OPTIMIZERS)]
    per = sur.groupby(["seed", "task", "regularizer"], sort=True)[column].first().unstack("regularizer")
    if "none" not in per or regularizer not in per:
        raise ValueError(f"need vanilla and +{regularizer} surrogates in the grid")
    means = per.groupby("seed").mean()
    return [float(100.0 * (1.0 - r / v)) for v, r in zip(means["none"], means[regularizer])]


def regularised_methods(optimizers: Sequence[str], regularizers: Sequence[str]) -> list[str]:
    """Method names ``opt, opt+reg1, opt+reg2, ...`` for each base optimiser, in order.

    Parameters
    ----------
    optimizers
        Surrogate optimisers (``grad_ascent``, ``cma_es``, ``genetic``).
    regularizers
        Regulariser names (``boss``, ``ignite``, ``ignite2``).

    Returns
    -------
    list of str
        Validated method names.
    """
    if not optimizers or not regularizers:
        raise ValueError("optimizers and regularizers must both be non-empty")
    out = []
    for opt in optimizers:
        check_choice("optimizers", opt, SURROGATE_OPTIMIZERS)
        out.append(opt)
        for reg in regularizers:
            out.append(f"{opt}+{reg}")
            parse_method(out[-1])
    if len(set(out)) != len(out):
        raise ValueError(f"optimizers and regularizers must not repeat, got {list(optimizers)} and {list(regularizers)}")
    return out


def task_summary(tasks: Sequence[OfflineTask]) -> pd.DataFrame:
    """One row per task: dimension, offline and hidden sizes, and the best offline design's normalised score.

    Returns
    -------
    pandas.DataFrame
        Columns ``task, dim, offline designs, hidden designs, best offline (normalised), y range``.
    """
    return pd.DataFrame(
        [
            {
                "task": t.name,
                "dim": t.dim,
                "offline designs": t.x.shape[0],
                "hidden designs": t.x_hidden.shape[0],
                "best offline (normalised)": round(float(t.normalise(t.y.max())), 3),
                "y range": f"[{t.y_min:.3g}, {t.y_max:.3g}]",
            }
            for t in tasks
        ]
    )


def best_by_task(rows: pd.DataFrame, metric: str = "p100") -> pd.Series:
    """The method with the highest mean ``metric`` over seeds on each task (first in grid order on ties).

    Returns
    -------
    pandas.Series
        Index: tasks in grid order; values: method labels.
    """
    mean = mean_table(rows, metric)
    return pd.Series({task: mean[task].idxmax() for task in mean.columns}, name=f"best {metric}")
