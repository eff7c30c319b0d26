"""An integer-coded genetic algorithm on ``deap``: tournament selection, uniform crossover, elitism.

One gene per decision variable in ``{0, ..., high}``.  Each generation keeps the ``elite`` best
individuals unchanged, fills the rest by ``deap.tools.selTournament``, ``deap.tools.cxUniform`` (with
probability ``cx_prob``) and a per-gene mutation that moves a gene one level up or down or, with
probability ``reset_share``, redraws it (``deap.tools.mutUniformInt``).  Whole generations are scored by
one call to the vectorised fitness, and the best-of-generation fitness never decreases.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import numpy as np
from deap import base, creator, tools

_FITNESS = "ReproNetsimFitnessMax"
_INDIVIDUAL = "ReproNetsimIntIndividual"


def _types() -> tuple[type, type]:
    if not hasattr(creator, _FITNESS):
        creator.create(_FITNESS, base.Fitness, weights=(1.0,))
    if not hasattr(creator, _INDIVIDUAL):
        creator.create(_INDIVIDUAL, list, fitness=getattr(creator, _FITNESS))
    return getattr(creator, _FITNESS), getattr(creator, _INDIVIDUAL)


@dataclass(frozen=True, kw_only=True)
class GAConfig:
    """Settings of the integer GA (defaults: the reconstruction in the crowdsense-freq spec).

    Parameters
    ----------
    population, generations
        Population size and number of generations.
    tournament
        Tournament size.
    cx_prob, cx_gene_prob
        Probability that a pair is crossed, and per-gene swap probability of uniform crossover.
    mut_gene_prob
        Per-gene mutation probability (``None``: 1 / number of genes).
    reset_share
        Share of mutations that redraw the gene instead of moving it by one level.
    elite
        Individuals copied unchanged into the next generation.
    """

    population: int = 50
    generations: int = 200
    tournament: int = 3
    cx_prob: float = 0.9
    cx_gene_prob: float = 0.5
    mut_gene_prob: float | None = None
    reset_share: float = 0.2
    elite: int = 2


@dataclass(frozen=True, kw_only=True)
class GAResult:
    """Best individual, its fitness, and the best fitness of every generation (generation 0 = seeds)."""

    best: np.ndarray
    fitness: float
    history: tuple[float, ...]


def integer_ga(fitness: Callable[[np.ndarray], np.ndarray], genes: int, high: int, config: GAConfig, seed: int,
               seeded: list[np.ndarray] | None = None) -> GAResult:
    """Maximise ``fitness`` over integer vectors in ``{0..high}^genes``.

    Parameters
    ----------
    fitness
        ``(k, genes) -> (k,)`` objective to maximise.
    genes, high
        Genome length and the highest level.
    config
        GA settings.
    seed
        Seed of the run (Python's ``random``, which deap's operators use, is seeded and restored).
    seeded
        Individuals placed in the initial population (the rest is uniform random).

    Returns
    -------
    GAResult
        The best individual found and the per-generation best fitness.
    """
    _, individual = _types()
    state = random.getstate()
    random.seed(seed)
    rng = np.random.default_rng(seed)
    try:
        mut_p = config.mut_gene_prob if config.mut_gene_prob is not None else 1.0 / genes
        pop = [individual(int(g) for g in s) for s in (seeded or [])][: config.population]
        while len(pop) < config.population:
            pop.append(individual(int(g) for g in rng.integers(0, high + 1, genes)))

        def evaluate(inds: list) -> None:
            todo = [i for i in inds if not i.fitness.valid]
            if todo:
                for ind, val in zip(todo, fitness(np.array(todo, dtype=int))):
                    ind.fitness.values = (float(val),)

        def mutate(ind: list) -> None:
            for g in range(genes):
                if random.random() < mut_p:
                    if random.random() < config.reset_share:
                        ind[g] = tools.mutUniformInt([ind[g]], 0, high, indpb=1.0)[0][0]
                    else:
                        ind[g] = min(high, max(0, ind[g] + random.choice((-1, 1))))

        evaluate(pop)
        history = [max(i.fitness.values[0] for i in pop)]
        for _ in range(config.generations):
            elite = []
            for src in tools.selBest(pop, config.elite):
                kept = individual(src)
                kept.fitness.values = src.fitness.values
                elite.append(kept)
            parents = [individual(p) for p in tools.selTournament(pop, config.population - config.elite,
                                                                   tournsize=config.tournament)]
            for a, b in zip(parents[::2], parents[1::2]):
                if random.random() < config.cx_prob:
                    tools.cxUniform(a, b, indpb=config.cx_gene_prob)
            for child in parents:
                mutate(child)
            pop = elite + parents
            evaluate(pop)
            history.append(max(i.fitness.values[0] for i in pop))
        best = tools.selBest(pop, 1)[0]
        return GAResult(best=np.array(best, dtype=int), fitness=float(best.fitness.values[0]), history=tuple(history))
    finally:
        random.setstate(state)
