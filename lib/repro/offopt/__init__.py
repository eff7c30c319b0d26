"""Offline (model-based) optimisation: tasks, surrogates, regularisers, optimisers, GP pairs.

A map of the family; import the modules themselves (this package re-exports
nothing).  The Brownian-bridge diffusion that ROOT trains is shared by every
family: :mod:`repro.bridge`.

Core modules
------------
functions
    Synthetic black boxes with known optima (Ackley, Rosenbrock, Levy, a
    Branin pair sum) and GP samples through random Fourier features.
tasks
    The Design-Bench protocol (bottom-``q`` offline set, z-scoring, normalised
    score, percentiles, mean rank) and task builders, including a real-data
    task (scikit-learn's diabetes data with a fitted oracle).
surrogate
    MLP surrogates and a trainer with a regulariser hook.
seeds
    Child seeds for a run's independent random streams.
pipeline
    Named methods (``"grad_ascent+boss"``, ``"root"``, ...) run end to end on a task.
grid
    The experiment grid the chapters share: methods x tasks x seeds as tidy
    tables, mean ranks, the main-table miniature and paired
    regularised-against-vanilla comparisons.
figures
    Figures drawn by two or more chapters (imports matplotlib).

Methods
-------
regularizers
    BOSS's sensitivity penalty and IGNITE's sharpness penalty.
optimizers
    Gradient ascent (torch), CMA-ES (``cma``), a genetic algorithm (``deap``).
gp
    GP posterior means / RFF posterior samples with sampled hyper-parameters,
    and ROOT's low/high design-pair sampler.

Chapters
--------
chapters.root, chapters.sensitivity, chapters.ignite
    One driver per chapter (settings, ``run``, ``claims``, its own figures),
    beside its registry file ``chapters/<id>.yaml``.
"""
