"""Offline (model-based) optimisation: tasks, surrogates, regularisers, optimisers, GP pairs, bridges.

The Brownian-bridge diffusion that ROOT trains is shared by every family: :mod:`repro.bridge`.

Modules
-------
functions
    Synthetic black boxes with known optima (Ackley, Rosenbrock, Levy, a
    Branin pair sum) and GP samples through random Fourier features.
tasks
    The Design-Bench protocol (bottom-``q`` offline set, z-scoring, normalised
    score, percentiles, mean rank) and task builders, including a real-data
    task (scikit-learn's diabetes data with a fitted oracle).
surrogate
    MLP surrogates and a trainer with a regulariser hook.
regularizers
    BOSS's sensitivity penalty and IGNITE's sharpness penalty.
optimizers
    Gradient ascent (torch), CMA-ES (``cma``), a genetic algorithm (``deap``).
gp
    GP posterior means / RFF posterior samples with sampled hyper-parameters,
    and ROOT's low/high design-pair sampler.
pipeline
    Named methods (``"grad_ascent+boss"``, ``"root"``, ...) run end to end on a task.
experiments
    The chapters' drivers: methods x tasks x seeds grids as tidy tables, mean
    ranks, the main-table miniature and per-seed claim values (import it as
    ``repro.offopt.experiments``).
plots
    The chapters' figures (``repro.offopt.plots``; imports matplotlib).
"""

from repro.bridge import (
    EMA,
    BridgeSchedule,
    MLPDenoiser,
    bridge_marginal,
    bridge_sample,
    q_sample,
    train_bridge,
)
from repro.offopt.functions import (
    SyntheticFunction,
    ackley,
    branin,
    levy,
    make_function,
    rff_gp_sample,
    rosenbrock,
)
from repro.offopt.gp import (
    DesignPairs,
    GPPosteriorMean,
    RFFPosteriorSample,
    build_root_pairs,
    gp_ensemble,
    sample_design_pairs,
)
from repro.offopt.optimizers import (
    as_numpy_fn,
    cma_es,
    genetic_algorithm,
    gradient_ascent,
)
from repro.offopt.pipeline import (
    Proposal,
    RootConfig,
    SearchConfig,
    SurrogateConfig,
    fit_surrogate,
    make_regularizer,
    propose,
    run_method,
)
from repro.offopt.regularizers import (
    SensitivityRegularizer,
    SharpnessRegularizer,
    empirical_sensitivity,
    gradient_norm,
    sam_sharpness,
)
from repro.offopt.surrogate import (
    MLPSurrogate,
    predict,
    seeded,
    torch_threads,
    train_ensemble,
    train_surrogate,
)
from repro.offopt.tasks import (
    OfflineTask,
    ZScore,
    bottom_q_indices,
    bottom_q_split,
    diabetes_task,
    make_task,
    mean_rank,
    normalised_score,
    score_percentiles,
)

__all__ = [
    "EMA",
    "BridgeSchedule",
    "DesignPairs",
    "GPPosteriorMean",
    "MLPDenoiser",
    "MLPSurrogate",
    "OfflineTask",
    "Proposal",
    "RFFPosteriorSample",
    "RootConfig",
    "SearchConfig",
    "SensitivityRegularizer",
    "SharpnessRegularizer",
    "SurrogateConfig",
    "SyntheticFunction",
    "ZScore",
    "ackley",
    "as_numpy_fn",
    "bottom_q_indices",
    "bottom_q_split",
    "branin",
    "bridge_marginal",
    "bridge_sample",
    "build_root_pairs",
    "cma_es",
    "diabetes_task",
    "empirical_sensitivity",
    "fit_surrogate",
    "genetic_algorithm",
    "gp_ensemble",
    "gradient_ascent",
    "gradient_norm",
    "levy",
    "make_function",
    "make_regularizer",
    "make_task",
    "mean_rank",
    "normalised_score",
    "predict",
    "propose",
    "q_sample",
    "rff_gp_sample",
    "rosenbrock",
    "run_method",
    "sam_sharpness",
    "sample_design_pairs",
    "score_percentiles",
    "seeded",
    "torch_threads",
    "train_bridge",
    "train_ensemble",
    "train_surrogate",
]
