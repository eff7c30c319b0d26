"""Registry of algorithms: name -> schedule builder, closed-form cost, parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from repro.collectives import allreduce as ar
from repro.collectives import alltoall as a2a
from repro.collectives import cost as cm
from repro.hpc.ir import Schedule


@dataclass(frozen=True, kw_only=True)
class Algorithm:
    """One collective algorithm.

    Attributes
    ----------
    name:
        Registry key.
    kind:
        ``"allreduce"`` or ``"alltoall"``.
    build:
        ``build(p, n, **params) -> Schedule`` (``n``: vector length, or block
        length ``m`` for an all-to-all, in elements).
    cost:
        ``cost(p, nbytes, alpha, beta, gamma, **params) -> seconds``.
    params:
        Names of the extra parameters ``build`` and ``cost`` accept.
    """

    name: str
    kind: str
    build: Callable[..., Schedule]
    cost: Callable[..., float]
    params: tuple[str, ...] = ()


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in [
        Algorithm(name="ring", kind="allreduce", build=ar.ring, cost=cm.ring_cost),
        Algorithm(name="recursive_doubling", kind="allreduce", build=ar.recursive_doubling, cost=cm.recursive_doubling_cost),
        Algorithm(name="rabenseifner", kind="allreduce", build=ar.rabenseifner, cost=cm.rabenseifner_cost),
        Algorithm(name="binomial", kind="allreduce", build=ar.binomial, cost=cm.binomial_cost),
        Algorithm(name="lr_lr", kind="allreduce", build=ar.lr_lr, cost=cm.lr_lr_cost, params=("k",)),
        Algorithm(name="lr_rab", kind="allreduce", build=ar.lr_rab, cost=cm.lr_rab_cost, params=("k",)),
        Algorithm(name="lr_lr_pipe", kind="allreduce", build=ar.lr_lr_pipe, cost=cm.lr_lr_pipe_cost, params=("k", "segments")),
        Algorithm(name="linear", kind="alltoall", build=a2a.linear, cost=cm.linear_a2a_cost),
        Algorithm(name="pairwise", kind="alltoall", build=a2a.pairwise, cost=cm.pairwise_cost),
        Algorithm(name="bruck", kind="alltoall", build=a2a.bruck, cost=cm.bruck_cost),
        Algorithm(name="two_phase", kind="alltoall", build=a2a.two_phase,
                  cost=lambda p, m, alpha, beta, gamma=0.0, rows=None: cm.two_dim_cost(
                      p, m, alpha, beta, gamma, rows=rows, striped=False), params=("rows",)),
        Algorithm(name="2dfc", kind="alltoall", build=a2a.two_dim_fc,
                  cost=lambda p, m, alpha, beta, gamma=0.0, rows=None: cm.two_dim_cost(
                      p, m, alpha, beta, gamma, rows=rows, striped=True), params=("rows",)),
    ]
}
"""All algorithms by name.  Aliases: ``lr`` = ring, ``rdb``, ``rab``."""

ALIASES = {"lr": "ring", "rdb": "recursive_doubling", "rab": "rabenseifner",
           "halving_doubling": "rabenseifner"}

ALLREDUCE_ALGORITHMS = tuple(n for n, a in ALGORITHMS.items() if a.kind == "allreduce")
ALLTOALL_ALGORITHMS = tuple(n for n, a in ALGORITHMS.items() if a.kind == "alltoall")


def get_algorithm(name: str) -> Algorithm:
    """Look an algorithm up by name or alias; ``KeyError`` with the known names if absent."""
    key = ALIASES.get(name, name)
    if key not in ALGORITHMS:
        raise KeyError(f"unknown algorithm {name!r}; known: {sorted(ALGORITHMS)}")
    return ALGORITHMS[key]


def default_node_size(p: int) -> int:
    """Ranks per node for the hierarchical algorithms when none is given.

    The divisor of ``p`` closest to ``sqrt(p)`` (ties: the smaller), but at
    least 2 whenever ``p`` has a proper divisor; a prime ``p`` gets ``k = 1``
    (one rank per node).  E.g. 8 -> 2, 16 -> 4, 12 -> 3, 13 -> 1.
    """
    divs = [d for d in range(1, p + 1) if p % d == 0]
    proper = [d for d in divs if 1 < d < p] or [1]
    return min(proper, key=lambda d: (abs(d - math.sqrt(p)), d))


def resolve_params(name: str, p: int, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Fill defaults for an algorithm's parameters (``k`` from :func:`default_node_size`)."""
    algo = get_algorithm(name)
    out = {k: v for k, v in (params or {}).items() if k in algo.params}
    unknown = set(params or {}) - set(algo.params)
    if unknown:
        raise ValueError(f"{algo.name} takes {algo.params}, not {sorted(unknown)}")
    if "k" in algo.params and out.get("k") is None:
        out["k"] = default_node_size(p)
    return out


def inapplicable(name: str, p: int, params: Mapping[str, Any]) -> str | None:
    """Why algorithm ``name`` with resolved ``params`` cannot run on ``p`` ranks, or ``None``.

    A case does not apply when its node size ``k`` or grid ``rows`` does not
    divide ``p`` (the same spec fits other rank counts).  Anything else wrong
    with the parameters is not a reason to skip: :func:`build_schedule` raises.

    Parameters
    ----------
    name:
        Algorithm name or alias.
    p:
        Ranks.
    params:
        Parameters as :func:`resolve_params` returns them.

    Returns
    -------
    str or None
        The reason, or ``None`` when the case applies.
    """
    get_algorithm(name)
    for key in ("k", "rows"):
        value = params.get(key)
        if isinstance(value, int) and value >= 1 and p % value:
            return f"{key}={value} does not divide p={p}"
    return None


def build_schedule(name: str, p: int, n: int, **params: Any) -> Schedule:
    """Build the schedule of algorithm ``name`` for ``p`` ranks and ``n`` elements."""
    return get_algorithm(name).build(p, n, **resolve_params(name, p, params))


def closed_form_cost(name: str, p: int, nbytes: float, alpha: float, beta: float,
                     gamma: float = 0.0, **params: Any) -> float:
    """Closed-form alpha-beta-gamma time (seconds) of algorithm ``name``.

    ``nbytes`` is the allreduce vector size, or the per-pair block size of an
    all-to-all, in bytes.
    """
    return get_algorithm(name).cost(p, nbytes, alpha, beta, gamma, **resolve_params(name, p, params))


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Parse ``"name"`` or ``"name:key=value,key=value"`` (integer values) into (name, params)."""
    name, _, rest = spec.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, val = item.partition("=")
        params[key.strip()] = int(val)
    return get_algorithm(name.strip()).name, params


def parameter_grid(name: str, p: int, max_segments: int = 4) -> list[dict[str, Any]]:
    """Every valid parameterisation of algorithm ``name`` for ``p`` ranks.

    Node sizes ``k`` and grid rows run over all divisors of ``p``; pipeline
    segments over ``1 .. max_segments``.  Algorithms without parameters give
    ``[{}]``.
    """
    algo = get_algorithm(name)
    divisors = [d for d in range(1, p + 1) if p % d == 0]
    grid: list[dict[str, Any]] = [{}]
    if "k" in algo.params:
        grid = [{**g, "k": k} for g in grid for k in divisors]
    if "segments" in algo.params:
        grid = [{**g, "segments": s} for g in grid for s in range(1, max_segments + 1)]
    if "rows" in algo.params:
        grid = [{**g, "rows": r} for g in grid for r in divisors]
    return grid
