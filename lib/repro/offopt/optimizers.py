"""Optimisers that search a learned surrogate for high-scoring designs.

* :func:`gradient_ascent` - Adam (or SGD) ascent on a differentiable surrogate
  from many starts at once (design-baselines' "Grad." baseline).
* :func:`cma_es` - one CMA-ES run (PyPI ``cma``) per start, run in lock-step so
  the surrogate is evaluated on all populations in one batch.
* :func:`genetic_algorithm` - a real-coded (mu + lambda) genetic algorithm
  built from ``deap`` operators (blend crossover, Gaussian mutation, tournament
  selection).

All three work in the space the surrogate was trained in (normally z-scored
designs), accept optional box bounds there, and are deterministic given
``seed``.  ``cma`` seeds NumPy's global RNG and ``deap`` uses Python's
``random``; both global states are saved and restored around each call.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

from repro.offopt.seeds import derive_seed
from repro.validation import (
    as_2d,
    check_choice,
    check_nonneg,
    check_open_interval,
    check_positive,
    check_positive_int,
)

ArrayFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True, kw_only=True)
class Box:
    """The box the designs must stay in (in the optimiser's space); a missing side is unbounded.

    Attributes
    ----------
    lower, upper
        Bounds, scalars or arrays of shape ``(d,)``.
    """

    lower: np.ndarray | float | None = None
    upper: np.ndarray | float | None = None


def _bounds(box: Box | None, dim: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    box = box or Box()
    lo = None if box.lower is None else np.broadcast_to(np.asarray(box.lower, dtype=np.float64), (dim,)).copy()
    hi = None if box.upper is None else np.broadcast_to(np.asarray(box.upper, dtype=np.float64), (dim,)).copy()
    if lo is not None and hi is not None and np.any(hi <= lo):
        raise ValueError("upper must exceed lower in every coordinate")
    return lo, hi


def _clip(x: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None) -> np.ndarray:
    if lo is None and hi is None:
        return x
    return np.asarray(np.clip(x, lo, hi))


def as_numpy_fn(model: nn.Module | Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype | None = None) -> ArrayFn:
    """Wrap a torch surrogate as ``f(np.ndarray (n, d)) -> np.ndarray (n,)`` (no grad).

    Parameters
    ----------
    model
        A module or tensor function returning shape ``(n,)``.
    dtype
        Input dtype; defaults to the module's parameter dtype (or float32).

    Returns
    -------
    callable
        The numpy function.
    """
    if dtype is None:
        try:
            dtype = next(model.parameters()).dtype  # type: ignore[union-attr]
        except (AttributeError, StopIteration):
            dtype = torch.float32

    @torch.no_grad()
    def fn(x: np.ndarray) -> np.ndarray:
        return model(torch.as_tensor(np.asarray(x), dtype=dtype)).double().numpy().reshape(-1)

    return fn


def gradient_ascent(
    model: nn.Module | Callable[[torch.Tensor], torch.Tensor],
    x0: np.ndarray,
    *,
    steps: int = 100,
    lr: float = 1e-2,
    optimizer: str = "adam",
    box: Box | None = None,
) -> np.ndarray:
    """Maximise a differentiable surrogate from each row of ``x0``.

    Every start is updated independently (the objective is the sum of
    predictions, whose gradient w.r.t. one row is that row's gradient).  After
    each step the designs are clipped to the box, if one is given.

    Parameters
    ----------
    model
        Surrogate: tensor ``(n, d)`` -> ``(n,)``.
    x0
        Starting designs, shape ``(n, d)``.
    steps
        Number of ascent steps (>= 0).
    lr
        Step size.
    optimizer
        ``"adam"`` or ``"sgd"``.
    box
        Optional box.

    Returns
    -------
    numpy.ndarray
        Final designs, shape ``(n, d)``.
    """
    x0 = as_2d("x0", x0)
    steps = check_positive_int("steps", steps, minimum=0)
    lr = check_positive("lr", lr)
    check_choice("optimizer", optimizer, ("adam", "sgd"))
    lo, hi = _bounds(box, x0.shape[1])
    try:
        dtype = next(model.parameters()).dtype  # type: ignore[union-attr]
    except (AttributeError, StopIteration):
        dtype = torch.float32
    x = torch.as_tensor(x0, dtype=dtype).clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr) if optimizer == "adam" else torch.optim.SGD([x], lr=lr)
    lo_t = None if lo is None else torch.as_tensor(lo, dtype=dtype)
    hi_t = None if hi is None else torch.as_tensor(hi, dtype=dtype)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        (-model(x).sum()).backward()
        opt.step()
        if lo_t is not None or hi_t is not None:
            with torch.no_grad():
                x.copy_(torch.clamp(x, lo_t, hi_t))
    return x.detach().double().numpy()


@contextmanager
def _preserve_global_rngs() -> Iterator[None]:
    np_state = np.random.get_state()
    py_state = random.getstate()
    try:
        yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


def cma_es(
    fn: ArrayFn,
    starts: np.ndarray,
    *,
    sigma0: float = 0.5,
    popsize: int = 16,
    generations: int = 30,
    n_best: int = 1,
    seed: int = 0,
    box: Box | None = None,
) -> np.ndarray:
    """Maximise ``fn`` with one CMA-ES run per start; return each run's best designs.

    The runs advance in lock-step: each generation asks every run for its
    population, evaluates all of them with one call to ``fn`` and tells each run
    its fitness (``cma`` minimises ``-fn``).  A run that meets a ``cma`` stopping
    criterion stops asking.  Each run keeps the ``n_best`` best designs it has
    evaluated (its start included); design-baselines uses ``n_best=1`` with 128
    starts, and a CPU budget may use e.g. 32 starts with ``n_best=4``.

    Parameters
    ----------
    fn
        Objective to maximise, ``(n, d) -> (n,)``.
    starts
        Initial means, shape ``(k, d)``.
    sigma0
        Initial step size.
    popsize
        Population size per run.
    generations
        Maximum generations per run.
    n_best
        Designs returned per run (<= ``popsize * generations``).
    seed
        Seed (each run's ``cma`` seed is derived from it).
    box
        Optional box, passed to ``cma``'s ``bounds`` option.

    Returns
    -------
    numpy.ndarray
        Shape ``(k * n_best, d)``: run 0's designs (best first), then run 1's, ...
    """
    import cma

    starts = as_2d("starts", starts)
    sigma0 = check_positive("sigma0", sigma0)
    popsize = check_positive_int("popsize", popsize, minimum=2)
    generations = check_positive_int("generations", generations)
    n_best = check_positive_int("n_best", n_best)
    if n_best > popsize * generations:
        raise ValueError(f"n_best must be <= popsize * generations = {popsize * generations}, got {n_best}")
    k, d = starts.shape
    lo, hi = _bounds(box, d)
    opts_base: dict[str, Any] = {"popsize": popsize, "maxiter": generations, "verbose": -9, "verb_log": 0, "verb_disp": 0}
    if lo is not None or hi is not None:
        opts_base["bounds"] = [None if lo is None else lo.tolist(), None if hi is None else hi.tolist()]
    x_start = _clip(starts.copy(), lo, hi)
    f_start = fn(x_start)
    keep_x = [x_start[i : i + 1] for i in range(k)]
    keep_f = [f_start[i : i + 1] for i in range(k)]
    with _preserve_global_rngs():
        runs = [
            cma.CMAEvolutionStrategy(x_start[i].tolist(), sigma0, {**opts_base, "seed": derive_seed(seed, 20, i)})
            for i in range(k)
        ]
        for _ in range(generations):
            active = [i for i, es in enumerate(runs) if not es.stop()]
            if not active:
                break
            pops = [np.asarray(runs[i].ask()) for i in active]
            vals = fn(np.concatenate(pops, axis=0))
            for j, i in enumerate(active):
                f = vals[j * popsize : (j + 1) * popsize]
                runs[i].tell(list(pops[j]), list(-f))
                xs = np.concatenate([keep_x[i], _clip(pops[j], lo, hi)])
                fs = np.concatenate([keep_f[i], f])
                top = np.argsort(-fs, kind="stable")[:n_best]
                keep_x[i], keep_f[i] = xs[top], fs[top]
    if any(len(kx) < n_best for kx in keep_x):
        raise ValueError("a CMA-ES run stopped before evaluating n_best designs; lower n_best")
    return np.concatenate(keep_x, axis=0)


_FITNESS = "ReproOffoptFitnessMax"
_INDIVIDUAL = "ReproOffoptIndividual"


def _deap_types() -> tuple[type, type]:
    from deap import base, creator

    if not hasattr(creator, _FITNESS):
        creator.create(_FITNESS, base.Fitness, weights=(1.0,))
    if not hasattr(creator, _INDIVIDUAL):
        creator.create(_INDIVIDUAL, list, fitness=getattr(creator, _FITNESS))
    return getattr(creator, _FITNESS), getattr(creator, _INDIVIDUAL)


@dataclass(frozen=True, kw_only=True)
class GAOperators:
    """The genetic algorithm's operator settings.

    Attributes
    ----------
    cx_prob, mut_prob
        Crossover and mutation probabilities (sum <= 1, as ``deap`` requires).
    blend_alpha
        ``alpha`` of the blend crossover.
    mut_sigma
        Standard deviation of the Gaussian mutation.
    indpb
        Per-gene mutation probability (default ``1/d``).
    tournament
        Tournament size.
    """

    cx_prob: float = 0.5
    mut_prob: float = 0.3
    blend_alpha: float = 0.3
    mut_sigma: float = 0.1
    indpb: float | None = None
    tournament: int = 3


def genetic_algorithm(
    fn: ArrayFn,
    init_pop: np.ndarray,
    *,
    generations: int = 30,
    operators: GAOperators | None = None,
    seed: int = 0,
    box: Box | None = None,
) -> np.ndarray:
    """Maximise ``fn`` with a (mu + lambda) GA from ``deap``; return the final population, best first.

    Operators (:class:`GAOperators`): ``deap.tools.cxBlend`` (``blend_alpha``), ``deap.tools.mutGaussian``
    (``mut_sigma``, per-gene probability ``indpb``, default ``1/d``),
    ``deap.tools.selTournament``; generations by
    ``deap.algorithms.eaMuPlusLambda`` with ``mu = lambda = len(init_pop)``
    (elitist: the best design never gets worse).  Offspring are clipped to the
    box.  All individuals of a generation are scored by one call to ``fn``.

    Parameters
    ----------
    fn
        Objective to maximise, ``(n, d) -> (n,)``.
    init_pop
        Initial population, shape ``(mu, d)``; the result has ``mu`` rows.
    generations
        Number of generations.
    operators
        Operator settings (default :class:`GAOperators`).
    seed
        Seed of Python's ``random`` during the run.
    box
        Optional box.

    Returns
    -------
    numpy.ndarray
        Final population sorted by ``fn`` (descending), shape ``(mu, d)``.
    """
    from deap import algorithms, base, tools

    init_pop = as_2d("init_pop", init_pop)
    mu, d = init_pop.shape
    if mu < 2:
        raise ValueError(f"init_pop must hold at least 2 designs, got {mu}")
    generations = check_positive_int("generations", generations)
    ops = operators or GAOperators()
    cx_prob = check_nonneg("cx_prob", ops.cx_prob)
    mut_prob = check_nonneg("mut_prob", ops.mut_prob)
    if cx_prob + mut_prob > 1.0:
        raise ValueError(f"cx_prob + mut_prob must be <= 1, got cx_prob={cx_prob}, mut_prob={mut_prob}")
    indpb = 1.0 / d if ops.indpb is None else check_open_interval("indpb", ops.indpb, 0.0, 1.0 + 1e-12)
    tournament = check_positive_int("tournament", ops.tournament)
    lo, hi = _bounds(box, d)
    _, individual = _deap_types()

    def clipped(op: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
        def wrapper(*args: object, **kw: object) -> tuple[Any, ...]:
            children = op(*args, **kw)
            for child in children:
                child[:] = _clip(np.asarray(child, dtype=np.float64), lo, hi).tolist()
            return children

        return wrapper

    def batch_map(_func: Callable[..., Any], inds: list[Any]) -> list[tuple[float]]:
        inds = list(inds)
        if not inds:
            return []
        vals = fn(np.asarray(inds, dtype=np.float64))
        return [(float(v),) for v in vals]

    tb = base.Toolbox()
    tb.register("evaluate", lambda ind: (0.0,))  # not called: batch_map scores whole generations
    tb.register("map", batch_map)
    tb.register("mate", clipped(tools.cxBlend), alpha=float(ops.blend_alpha))
    tb.register("mutate", clipped(tools.mutGaussian), mu=0.0, sigma=float(ops.mut_sigma), indpb=indpb)
    tb.register("select", tools.selTournament, tournsize=tournament)
    pop = [individual(_clip(row, lo, hi).tolist()) for row in init_pop]
    with _preserve_global_rngs():
        random.seed(derive_seed(seed, 30))
        pop, _ = algorithms.eaMuPlusLambda(
            pop, tb, mu=mu, lambda_=mu, cxpb=cx_prob, mutpb=mut_prob, ngen=generations, verbose=False
        )
    pop = sorted(pop, key=lambda ind: ind.fitness.values[0], reverse=True)
    return np.asarray(pop, dtype=np.float64)
