"""Named offline-optimisation methods on an :class:`~repro.offopt.tasks.OfflineTask`.

A method name is ``<optimiser>`` or ``<optimiser>+<regulariser>``:

================  ==========================================================
``best_offline``  the ``K`` best offline designs (no model)
``grad_ascent``   gradient ascent on an MLP surrogate (design-baselines "Grad.")
``grad_ascent_mean_ens``  gradient ascent on the mean of an ensemble of surrogates ("Grad. Mean")
``grad_ascent_min_ens``   gradient ascent on the minimum of the same ensemble ("Grad. Min")
``cma_es``        CMA-ES on the surrogate (PyPI ``cma``)
``genetic``       a (mu + lambda) genetic algorithm on the surrogate (``deap``)
``root``          ROOT: GP-ensemble pairs -> Brownian bridge with CFG
================  ==========================================================

Regulariser suffixes for the surrogate optimisers: ``+boss``
(:class:`~repro.offopt.regularizers.SensitivityRegularizer`), ``+ignite`` and
``+ignite2`` (:class:`~repro.offopt.regularizers.SharpnessRegularizer`).
Example: ``"grad_ascent+boss"``.

All optimisation happens in z-space (the offline set's own z-scoring) inside
the task's box; candidates are returned in raw units.  Defaults are sized for a
2-core CPU (see :class:`SurrogateConfig`, :class:`SearchConfig`,
:class:`RootConfig`); the chapter params override them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from repro.bridge import BridgeSampling, BridgeSchedule, BridgeTraining, MLPDenoiser, bridge_sample, train_bridge
from repro.devices import resolve_device
from repro.offopt.gp import DesignPairs, GPPrior, PairClimb, build_root_pairs
from repro.offopt.optimizers import Box, GAOperators, as_numpy_fn, cma_es, genetic_algorithm, gradient_ascent
from repro.offopt.regularizers import SensitivityRegularizer, SharpnessRegularizer
from repro.offopt.seeds import derive_seed
from repro.offopt.surrogate import EnsembleSurrogate, TrainSettings, seeded, train_members, train_surrogate
from repro.offopt.tasks import OfflineTask
from repro.validation import check_choice, check_positive_int

SINGLE_OPTIMIZERS = ("grad_ascent", "cma_es", "genetic")
"""Optimisers that search one trained surrogate."""
ENSEMBLE_OPTIMIZERS = {"grad_ascent_mean_ens": "mean", "grad_ascent_min_ens": "min"}
"""Gradient ascent on an ensemble of surrogates, and how the members' predictions are reduced."""
SURROGATE_OPTIMIZERS = (*SINGLE_OPTIMIZERS, *ENSEMBLE_OPTIMIZERS)
"""Optimisers that search trained surrogates (and so take a regulariser)."""
OPTIMIZERS = ("best_offline", *SURROGATE_OPTIMIZERS, "root")
REGULARIZERS = ("boss", "ignite", "ignite2")
TARGETS = ("task_max", "offline_max", "gp_max")
"""Where ROOT's sampling target comes from (see :func:`reference_score_z`)."""


@dataclass(frozen=True, kw_only=True)
class SurrogateConfig:
    """Surrogate training settings (spec: MLP 2x64 smoke / 2x128 full).

    Attributes
    ----------
    hidden, loss, epochs, batch_size, lr
        See :class:`repro.offopt.surrogate.TrainSettings`.
    ensemble
        Members of the ensemble that ``grad_ascent_mean_ens`` and ``grad_ascent_min_ens`` search (the
        authors' code: 5); the single-surrogate optimisers ignore it.
    device
        Where the surrogates train (``cpu``, ``cuda`` or ``auto``); they are used on the CPU.
    """

    hidden: tuple[int, ...] = (64, 64)
    loss: str = "mse"
    epochs: int = 50
    batch_size: int = 128
    lr: float = 1e-3
    ensemble: int = 5
    device: str = "cpu"

    def training(self) -> TrainSettings:
        """The trainer's settings of one surrogate (one member)."""
        return TrainSettings(hidden=self.hidden, loss=self.loss, epochs=self.epochs, batch_size=self.batch_size,
                             lr=self.lr, device=self.device)


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """Settings of the three surrogate optimisers.

    Attributes
    ----------
    grad_steps, grad_lr
        Gradient ascent: Adam steps and step size in z-space (spec: 100, 1e-2).
    cma_starts, cma_popsize, cma_generations, cma_sigma0
        CMA-ES: runs from the best ``cma_starts`` offline designs, each
        contributing its ``ceil(K / cma_starts)`` best designs (32 x 4 = 128;
        design-baselines runs 128 x 1); if that exceeds ``K`` the surrogate's
        top ``K`` are kept.  Spec: popsize 16, 30 generations.
    ga_generations, ga_cx_prob, ga_mut_prob, ga_mut_sigma
        Genetic algorithm, population = the ``K`` best offline designs.
    """

    grad_steps: int = 100
    grad_lr: float = 1e-2
    cma_starts: int = 32
    cma_popsize: int = 16
    cma_generations: int = 30
    cma_sigma0: float = 0.5
    ga_generations: int = 30
    ga_cx_prob: float = 0.5
    ga_mut_prob: float = 0.3
    ga_mut_sigma: float = 0.2


@dataclass(frozen=True, kw_only=True)
class RootConfig:
    """ROOT settings.  Defaults are CPU-sized; the spec's code values are in brackets.

    Attributes
    ----------
    n_functions, n_seeds, gp_steps, gp_lr, threshold, gp_kind
        GP-ensemble pairs [8, 1024, 100, 1e-3, 1e-3, posterior_mean].
    gp_max_points
        Fit the GPs to a random subset of at most this many offline points
        (``None``: all) [all; a subset only for TF-Bind-10].
    lengthscale, outputscale, delta, noise
        GP hyper-parameter centres, perturbation half-width and noise [1, 1, 0.25, 0.01].
    hidden
        Denoiser widths [3 x 1024].
    epochs, batch_size, lr, p_uncond, ema_decay
        Bridge training [100, 64, 1e-3, 0.15, 0.995].
    n_timesteps, sample_steps, eta, guidance
        Bridge schedule and sampler [1000, 200, 0.2, -1.5].
    target_scale, target_from
        The sampling target ``y = target_scale * z(y_ref)``, ``y_ref`` from
        :func:`reference_score_z`: the task's known maximum (``"task_max"``, the code's
        choice), the best offline score (``"offline_max"``) or the highest value the GP
        climbs reach (``"gp_max"``) [0.8, task_max].
    faithful_to_code
        If ``True``, swap the two ``y`` slots at sampling as the ROOT code does
        (train ``(y_high, y_low)``, sample ``(y_low, y_high)``).
    pairs_per_epoch
        If ``True``, draw a fresh GP ensemble and fresh pairs before every
        bridge epoch, as the ROOT code does; ``False`` (the default, today's
        chapter) builds the pairs once and trains every epoch on them.
    device
        Where the bridge's denoiser trains and samples (``cpu``, ``cuda`` or
        ``auto``); the GP ensemble that makes the pairs stays on the CPU.
    """

    n_functions: int = 8
    n_seeds: int = 256
    gp_steps: int = 100
    gp_lr: float = 1e-3
    threshold: float = 1e-3
    gp_kind: str = "posterior_mean"
    gp_max_points: int | None = 1000
    lengthscale: float = 1.0
    outputscale: float = 1.0
    delta: float = 0.25
    noise: float = 0.01
    hidden: tuple[int, ...] = (256, 256)
    epochs: int = 20
    batch_size: int = 64
    lr: float = 1e-3
    p_uncond: float = 0.15
    ema_decay: float = 0.995
    n_timesteps: int = 1000
    sample_steps: int = 100
    eta: float = 0.2
    guidance: float = -1.5
    target_scale: float = 0.8
    target_from: str = "task_max"
    faithful_to_code: bool = False
    pairs_per_epoch: bool = False
    device: str = "cpu"


@dataclass(kw_only=True)
class Proposal:
    """What a method proposed, with its by-products.

    Attributes
    ----------
    method
        The method name.
    candidates
        Raw-unit designs, shape ``(K, d)``.
    candidates_z
        The same in z-space.
    surrogate
        The trained surrogate (``None`` for ``best_offline`` and ``root``).
    extras
        Method-specific logs (regulariser history, number of ROOT pairs, ...).
    """

    method: str
    candidates: np.ndarray
    candidates_z: np.ndarray
    surrogate: nn.Module | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def parse_method(method: str) -> tuple[str, str | None]:
    """Split ``"opt+reg"`` into ``("opt", "reg")`` and validate both parts."""
    opt, _, reg = method.partition("+")
    check_choice("method", opt, OPTIMIZERS)
    if reg:
        check_choice("method", reg, REGULARIZERS)
        if opt not in SURROGATE_OPTIMIZERS:
            raise ValueError(f"method {method!r}: a regulariser only applies to {', '.join(SURROGATE_OPTIMIZERS)}")
    return opt, reg or None


def surrogate_kind(optimizer: str) -> str | None:
    """``"single"`` or ``"ensemble"``: what an optimiser searches (``None``: no surrogate)."""
    if optimizer in SINGLE_OPTIMIZERS:
        return "single"
    return "ensemble" if optimizer in ENSEMBLE_OPTIMIZERS else None


def _config(cls: type, values: Any) -> Any:
    if values is None:
        return cls()
    if isinstance(values, cls):
        return values
    if not isinstance(values, Mapping):
        raise ValueError(f"expected a {cls.__name__} or a mapping, got {type(values).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {sorted(unknown)}; known: {sorted(names)}")
    vals = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    return replace(cls(), **vals)


def make_regularizer(name: str, seed: int = 0, **overrides: Any) -> SensitivityRegularizer | SharpnessRegularizer:
    """Build a regulariser by name with its paper defaults, overridden by ``overrides``.

    Parameters
    ----------
    name
        ``"boss"``, ``"ignite"`` or ``"ignite2"``.
    seed
        Seed (BOSS draws).
    **overrides
        Constructor arguments.

    Returns
    -------
    SensitivityRegularizer or SharpnessRegularizer
        The regulariser.
    """
    check_choice("name", name, REGULARIZERS)
    if name == "boss":
        return SensitivityRegularizer(**{"seed": seed, **overrides})
    if name == "ignite":
        return SharpnessRegularizer.ignite(**overrides)
    return SharpnessRegularizer.ignite2(**overrides)


def fit_surrogate(
    task: OfflineTask,
    *,
    seed: int = 0,
    regularizer: str | None = None,
    config: SurrogateConfig | Mapping[str, Any] | None = None,
    regularizer_kwargs: Mapping[str, Any] | None = None,
    kind: str = "single",
) -> tuple[nn.Module, list[Any]]:
    """Train the surrogate (or the ensemble's members) on the task's z-scored offline data.

    Parameters
    ----------
    task
        The task.
    seed
        Seed of the weights, the batch order and the regulariser's draws.
    regularizer
        ``None`` or a name of :data:`REGULARIZERS`; every member gets its own.
    config
        Surrogate settings.
    regularizer_kwargs
        Overrides of the regulariser's defaults.
    kind
        ``"single"`` (one surrogate) or ``"ensemble"`` (``config.ensemble`` members, returned as
        their mean :class:`~repro.offopt.surrogate.EnsembleSurrogate`).

    Returns
    -------
    model, regularizers
        The surrogate and the regulariser objects used (for their histories).
    """
    cfg = _config(SurrogateConfig, config)
    check_choice("kind", kind, ("single", "ensemble"))
    regs: list[Any] = []

    def reg_factory(i: int) -> Any:
        if regularizer is None:
            return None
        reg = make_regularizer(regularizer, seed=derive_seed(seed, 50, i), **dict(regularizer_kwargs or {}))
        regs.append(reg)
        return reg

    if kind == "ensemble":
        members = train_members(task.x_z, task.y_z, cfg.ensemble, cfg.training(), seed=seed, regularizer_factory=reg_factory)
        return EnsembleSurrogate(members, "mean").eval(), regs
    return train_surrogate(task.x_z, task.y_z, cfg.training(), seed=seed, regularizer=reg_factory(0)).model, regs


def _finish(
    task: OfflineTask, method: str, cz: np.ndarray, model: nn.Module | None = None, extras: dict[str, Any] | None = None
) -> Proposal:
    """Clip z-space designs to the task's box in raw units and package them."""
    raw = np.clip(task.from_z(cz), task.lower, task.upper)
    return Proposal(method=method, candidates=raw, candidates_z=task.to_z(raw), surrogate=model, extras=extras or {})


def _top_z(task: OfflineTask, k: int) -> np.ndarray:
    return task.to_z(task.best_offline(min(k, task.x.shape[0])))


@dataclass(frozen=True, kw_only=True)
class MethodSettings:
    """Everything a named method is run with, besides the task and the seed.

    Attributes
    ----------
    n_candidates
        ``K`` (Design-Bench: 128).
    surrogate, search, root
        The surrogate, the searches' and ROOT's settings.
    regularizer_kwargs
        Per regulariser name (``"boss"``, ``"ignite"``, ``"ignite2"``), overrides of its defaults.
    """

    n_candidates: int = 128
    surrogate: SurrogateConfig = field(default_factory=SurrogateConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    root: RootConfig = field(default_factory=RootConfig)
    regularizer_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_positive_int("n_candidates", self.n_candidates)
        for name in self.regularizer_kwargs:
            check_choice("regularizer_kwargs", name, REGULARIZERS)

    def with_overrides(self, root: Mapping[str, Any], regularizer_kwargs: Mapping[str, Mapping[str, Any]]) -> MethodSettings:
        """A copy with some ROOT fields and some regulariser defaults overridden (one method's own settings)."""
        merged = {name: {**dict(self.regularizer_kwargs.get(name, {})), **dict(kw)}
                  for name, kw in regularizer_kwargs.items()}
        return replace(self, root=_config(RootConfig, {**asdict(self.root), **dict(root)}),
                       regularizer_kwargs={**dict(self.regularizer_kwargs), **merged})


def method_settings(
    *,
    n_candidates: int = 128,
    surrogate: SurrogateConfig | Mapping[str, Any] | None = None,
    search: SearchConfig | Mapping[str, Any] | None = None,
    root: RootConfig | Mapping[str, Any] | None = None,
    regularizer_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> MethodSettings:
    """:class:`MethodSettings` from config objects or mappings of overrides of their defaults.

    Raises
    ------
    ValueError
        For an unknown field of a config or an unknown regulariser name.
    """
    return MethodSettings(n_candidates=n_candidates, surrogate=_config(SurrogateConfig, surrogate),
                          search=_config(SearchConfig, search), root=_config(RootConfig, root),
                          regularizer_kwargs={k: dict(v) for k, v in (regularizer_kwargs or {}).items()})


def propose(
    task: OfflineTask,
    method: str,
    settings: MethodSettings | None = None,
    *,
    seed: int = 0,
    model: nn.Module | None = None,
) -> Proposal:
    """Run a named method on ``task`` and return its ``settings.n_candidates`` designs.

    Parameters
    ----------
    task
        The task.
    method
        See the module docstring.
    settings
        The method's settings (default :class:`MethodSettings`).
    seed
        Seed of everything the method draws.
    model
        A surrogate already trained for this ``(task, seed, regulariser)`` by :func:`fit_surrogate`
        with the same arguments (for an ensemble optimiser: ``kind="ensemble"``); the optimiser then
        searches it instead of training a new one, so optimisers can share one surrogate.  Ignored
        by ``best_offline`` and ``root``.

    Returns
    -------
    Proposal
        The candidates and by-products.
    """
    opt, reg = parse_method(method)
    cfg = settings or MethodSettings()
    k = cfg.n_candidates
    box = Box(lower=task.z_lower, upper=task.z_upper)
    if opt == "best_offline":
        return _finish(task, method, _top_z(task, k))
    if opt == "root":
        return propose_root(task, method, seed=seed, k=k, cfg=cfg.root)
    kind = surrogate_kind(opt) or "single"
    regs: list[Any] = []
    if model is None:
        model, regs = fit_surrogate(task, seed=seed, regularizer=reg, config=cfg.surrogate,
                                    regularizer_kwargs=cfg.regularizer_kwargs.get(reg or "", {}), kind=kind)
    if opt in ENSEMBLE_OPTIMIZERS:
        if not isinstance(model, EnsembleSurrogate):
            raise ValueError(f"method {method!r} searches an ensemble; pass a model fitted with kind='ensemble'")
        model = EnsembleSurrogate(list(model.members), ENSEMBLE_OPTIMIZERS[opt]).eval()
    cz = _search(task, opt, model, cfg.search, k=k, seed=seed, box=box)
    extras = {"regularizer_history": [r.history for r in regs]} if regs else {}
    return _finish(task, method, cz, model, extras)


def _search(task: OfflineTask, opt: str, model: nn.Module, scfg: SearchConfig, *, k: int, seed: int, box: Box
            ) -> np.ndarray:
    """The designs (z-space) that optimiser ``opt`` finds on the surrogate ``model``."""
    fn = as_numpy_fn(model)
    if opt == "cma_es":
        starts = _top_z(task, min(scfg.cma_starts, k))
        cz = cma_es(fn, starts, sigma0=scfg.cma_sigma0, popsize=scfg.cma_popsize, generations=scfg.cma_generations,
                    n_best=int(np.ceil(k / starts.shape[0])), seed=seed, box=box)
        return cz[np.argsort(-fn(cz), kind="stable")[:k]]
    if opt == "genetic":
        ops = GAOperators(cx_prob=scfg.ga_cx_prob, mut_prob=scfg.ga_mut_prob, mut_sigma=scfg.ga_mut_sigma)
        return genetic_algorithm(fn, _top_z(task, k), generations=scfg.ga_generations, operators=ops, seed=seed,
                                 box=box)[:k]
    return gradient_ascent(model, _top_z(task, k), steps=scfg.grad_steps, lr=scfg.grad_lr, box=box)


def _root_pairs(task: OfflineTask, cfg: RootConfig, seed: int) -> DesignPairs:
    """ROOT's GP-ensemble pairs on the task's z-scored offline data, drawn from ``seed``."""
    prior = GPPrior(n_functions=cfg.n_functions, lengthscale=cfg.lengthscale, outputscale=cfg.outputscale,
                    delta_lengthscale=cfg.delta, delta_outputscale=cfg.delta, noise=cfg.noise, kind=cfg.gp_kind)
    climb = PairClimb(n_seeds=cfg.n_seeds, steps=cfg.gp_steps, lr=cfg.gp_lr, threshold=cfg.threshold,
                      max_points=cfg.gp_max_points)
    pairs = build_root_pairs(task.x_z, task.y_z, prior, climb, seed=seed)
    if len(pairs) == 0:
        raise ValueError("ROOT kept no GP pairs; raise gp_lr or gp_steps, or lower threshold")
    return pairs


def _bridge_tensors(pairs: DesignPairs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x_low, x_high, cond)`` float32 tensors: the bridge's source, target and ``(y_high, y_low)`` condition."""
    f32 = torch.float32
    x_low = torch.as_tensor(pairs.x_low, dtype=f32)
    x_high = torch.as_tensor(pairs.x_high, dtype=f32)
    cond = torch.as_tensor(np.stack([pairs.y_high, pairs.y_low], axis=1), dtype=f32)
    return x_low, x_high, cond


def reference_score_z(task: OfflineTask, pairs: DesignPairs, source: str) -> float:
    """The score ROOT's sampling target is a fraction of, in the offline set's z-units.

    Parameters
    ----------
    task
        The task.
    pairs
        ROOT's first set of GP pairs (their ``y_high`` are GP values in z-units).
    source
        ``"task_max"``: the task's known maximum, the hidden optimum (the authors' code,
        ``BaseRunner.test``); ``"offline_max"``: the best offline score; ``"gp_max"``: the
        highest value the GP climbs reach, an estimate of the maximum from the offline data
        alone.  Only ``task_max`` uses information the surrogate baselines do not get.

    Returns
    -------
    float
        The reference score, z-scored with the offline set's statistics.
    """
    check_choice("target_from", source, TARGETS)
    if source == "gp_max":
        return float(np.max(pairs.y_high))
    y_ref = task.y_max if source == "task_max" else float(task.y.max())
    return float(task.y_scaler.transform(np.array(y_ref)))


def propose_root(task: OfflineTask, method: str, *, seed: int, k: int, cfg: RootConfig) -> Proposal:
    """ROOT: GP-ensemble pairs, a Brownian bridge trained on them, and guided sampling from the best offline designs.

    Parameters
    ----------
    task
        The task.
    method
        The method's name (recorded in the proposal).
    seed
        Seed of the GP ensembles, the bridge's training and its sampling noise.
    k
        Designs to propose: the bridge starts at the ``k`` best offline designs.
    cfg
        ROOT's settings; the target is ``cfg.target_scale`` times :func:`reference_score_z`.

    Returns
    -------
    Proposal
        The candidates, with the pair counts, the bridge's loss log and the target in ``extras``.
    """
    check_choice("target_from", cfg.target_from, TARGETS)
    pairs = _root_pairs(task, cfg, derive_seed(seed, 60))
    x_low, x_high, cond = _bridge_tensors(pairs)
    pair_counts = [len(pairs)]

    def fresh_pairs(epoch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        drawn = _root_pairs(task, cfg, derive_seed(seed, 60, epoch))
        pair_counts.append(len(drawn))
        return _bridge_tensors(drawn)

    f32 = torch.float32
    schedule = BridgeSchedule(n_timesteps=cfg.n_timesteps)
    denoiser = seeded(
        lambda: MLPDenoiser(task.dim, cond_dim=2, hidden=cfg.hidden, n_timesteps=cfg.n_timesteps), derive_seed(seed, 61)
    ).to(resolve_device(cfg.device))
    training = BridgeTraining(schedule=schedule, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                              p_uncond=cfg.p_uncond, ema_decay=cfg.ema_decay, seed=derive_seed(seed, 62))
    res = train_bridge(denoiser, x_low, x_high, cond, training, pairs_for_epoch=fresh_pairs if cfg.pairs_per_epoch else None)
    order = np.argsort(-task.y, kind="stable")[: min(k, task.x.shape[0])]
    start_z = task.x_z[order]
    y_start = task.y_z[order]
    y_target = cfg.target_scale * reference_score_z(task, pairs, cfg.target_from)
    slots = [np.full_like(y_start, y_target), y_start]
    if cfg.faithful_to_code:
        slots = slots[::-1]
    c = torch.as_tensor(np.stack(slots, axis=1), dtype=f32)
    sampling = BridgeSampling(schedule=schedule, n_steps=cfg.sample_steps, eta=cfg.eta, guidance=cfg.guidance,
                              seed=derive_seed(seed, 63))
    out = bridge_sample(res.ema_model, torch.as_tensor(start_z, dtype=f32), c, sampling)
    extras = {
        "n_pairs": len(pairs),
        "n_pairs_by_epoch": pair_counts,
        "bridge_history": res.history,
        "y_target_z": y_target,
        "config": asdict(cfg),
    }
    return _finish(task, method, out.double().numpy(), None, extras)


def run_method(task: OfflineTask, method: str, settings: MethodSettings | None = None, *, seed: int = 0
               ) -> dict[str, Any]:
    """:func:`propose` then :meth:`OfflineTask.evaluate`; one result row.

    Returns
    -------
    dict
        ``task``, ``method``, ``seed``, ``seconds``, ``p100``, ``p80``, ``p50``,
        ``best_offline`` and the per-candidate normalised ``scores``.
    """
    t0 = time.perf_counter()
    prop = propose(task, method, settings, seed=seed)
    seconds = time.perf_counter() - t0
    ev = task.evaluate(prop.candidates)
    return {"task": task.name, "method": method, "seed": seed, "seconds": seconds, **ev, "extras": prop.extras}
