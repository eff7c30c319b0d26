"""Chapter ``iptf-bayes``: run-time prediction for a sky-survey pipeline from spatial and temporal history.

For each seed :func:`run_seed` draws a synthetic survey (:mod:`repro.misc.iptf`),
builds the no-look-ahead features of every stage, splits the nights
chronologically and fits, for every stage and feature set, a Bayesian network
(pgmpy), a linear regression and a random forest (scikit-learn); it records
their mean absolute errors, the within-batch boundary on the test nights and
the run-time node's learned Markov blanket.  :func:`run` takes the chapter's
:class:`Params` and returns its :class:`Results`; :func:`claims` and the
figures read them.

The survey generator is ours and was built to hold the paper's two
correlations, so every claim here is *modelled*: it holds because of the
generator's constants.  :func:`run` also reruns the first seed with the
run time's dependence on object counts and on the machine load scaled by the
profile's ``effect_scales`` (0: no spatial or temporal signal at all), and
the chapter's sweep figure shows the claims follow that constant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LinearRegression

from repro.misc import iptf
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence

MODELS = ("bayes_net", "linear", "random_forest")
SPATIAL = ("space_runtime", "space_objects")
TEMPORAL = ("lag_runtime", "recent_runtime")
DOMINANT = {"object_bound": (SPATIAL,), "io_bound": (TEMPORAL,), "mixed": (SPATIAL, TEMPORAL)}


@dataclass(frozen=True, kw_only=True)
class SeedJob:
    """One seed's run: the survey constants, the split and the models' settings."""

    seed: int
    survey: iptf.SurveyConfig
    train_share: float
    feature_bins: int
    target_bins: int
    learn_structure: bool
    trees: int


@dataclass(frozen=True, kw_only=True)
class ErrorRecord:
    """Test error of one model with one feature set on one stage."""

    seed: int
    stage: str
    features: str
    model: str
    mae: float
    mape: float


@dataclass(frozen=True, kw_only=True)
class StageRecord:
    """Per stage: the within-batch boundary on the test nights and the learned Markov blanket (all features)."""

    seed: int
    stage: str
    boundary: float
    blanket: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    train_images: int
    test_images: int


@dataclass(frozen=True, kw_only=True)
class SeedResult:
    """Everything one seed produced."""

    errors: tuple[ErrorRecord, ...]
    stages: tuple[StageRecord, ...]


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``chapters/iptf-bayes.yaml``)."""

    nights: int
    fields: int
    exposures: tuple[int, ...]
    batch_sd: float
    image_sd: float
    load_sd: float
    jump_prob: float
    train_share: float
    feature_bins: int
    target_bins: int
    learn_structure: bool
    trees: int
    effect_scales: tuple[float, ...]
    seeds: tuple[int, ...]
    workers: int

    def checks(self) -> None:
        """Refuse exposures that are not ``[low, high]`` and a split that leaves no test night."""
        require(len(self.exposures) == 2 and self.exposures[0] <= self.exposures[1], self, "exposures",
                "exposures must be [low, high]")
        train = int(round(self.train_share * self.nights))
        require(2 <= train <= self.nights - 1, self, ("train_share", "nights"),
                "the chronological split must leave at least two training nights and one test night")
        require(1.0 in self.effect_scales, self, "effect_scales",
                "the sweep must include the generator as run (scale 1)")

    def survey(self, scale: float = 1.0) -> iptf.SurveyConfig:
        """The survey generator's constants, its stages' object and load coefficients scaled by ``scale``."""
        stages = tuple(dataclasses.replace(st, per_object=st.per_object * scale, load_coef=st.load_coef * scale)
                       for st in iptf.STAGES)
        return iptf.SurveyConfig(fields=self.fields, nights=self.nights, exposures=(self.exposures[0], self.exposures[1]),
                                 batch_sd=self.batch_sd, image_sd=self.image_sd, load_sd=self.load_sd,
                                 jump_prob=self.jump_prob, stages=stages)

    def job(self, seed: int, scale: float = 1.0) -> SeedJob:
        """One seed's run (on the generator scaled by ``scale``)."""
        return SeedJob(seed=seed, survey=self.survey(scale), train_share=self.train_share,
                       feature_bins=self.feature_bins, target_bins=self.target_bins,
                       learn_structure=self.learn_structure, trees=self.trees)


def _regressor(model: str, job: SeedJob) -> iptf.BayesNetRegressor | LinearRegression | RandomForestRegressor:
    if model == "bayes_net":
        return iptf.BayesNetRegressor(
            feature_bins=job.feature_bins, target_bins=job.target_bins, learn_structure=job.learn_structure
        )
    if model == "linear":
        return LinearRegression()
    return RandomForestRegressor(n_estimators=job.trees, min_samples_leaf=5, random_state=job.seed, n_jobs=1)


def run_seed(job: SeedJob) -> SeedResult:
    """Fit and test every stage, feature set and model on one seed's survey."""
    survey = iptf.make_survey(job.survey, job.seed)
    errors, stages = [], []
    for stage in job.survey.stages:
        data = iptf.add_features(survey, stage.name).dropna()
        train, test = iptf.chronological_split(data, job.train_share)
        y = test[iptf.TARGET].to_numpy()
        for fs, cols in iptf.FEATURE_SETS.items():
            for model in MODELS:
                reg = _regressor(model, job).fit(train[list(cols)], train[iptf.TARGET])
                pred = reg.predict(test[list(cols)])
                errors.append(
                    ErrorRecord(
                        seed=job.seed,
                        stage=stage.name,
                        features=fs,
                        model=model,
                        mae=float(np.abs(pred - y).mean()),
                        mape=float(100.0 * np.mean(np.abs(pred - y) / y)),
                    )
                )
                if model == "bayes_net" and fs == "spatial+temporal":
                    blanket, edges = tuple(reg.markov_blanket()), tuple(reg.network().edges())
        stages.append(
            StageRecord(
                seed=job.seed,
                stage=stage.name,
                boundary=iptf.within_batch_boundary(test),
                blanket=blanket,
                edges=edges,
                train_images=len(train),
                test_images=len(test),
            )
        )
    return SeedResult(errors=tuple(errors), stages=tuple(stages))


def sweep(jobs: list[SeedJob], workers: int = 1) -> list[SeedResult]:
    """Run every seed (in ``workers`` processes)."""
    return parallel_map(run_seed, jobs, workers=workers, desc="seeds")


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    seeds
        One result per seed, on the generator as run.
    sweep
        The first seed's claims on the generator with its effects scaled, one row per scale.
    """

    seeds: tuple[SeedResult, ...]
    sweep: pd.DataFrame


def sweep_table(scales: list[float], runs: list[SeedResult]) -> pd.DataFrame:
    """One row per effect scale: the claims of that scale's run (sorted by scale)."""
    rows = [{"scale": s, **{k: v[0] for k, v in claim_values([r]).items()}} for s, r in zip(scales, runs)]
    return pd.DataFrame(rows).sort_values("scale").reset_index(drop=True)


def run(params: Params) -> Results:
    """Fit and test every model on every seed's survey, and the first seed on each scaled generator.

    All runs go to the workers at once; the first seed on the generator as run serves the sweep too.
    """
    scales = [s for s in params.effect_scales if s != 1.0]
    jobs = [params.job(s) for s in params.seeds] + [params.job(params.seeds[0], x) for x in scales]
    runs = sweep(jobs, workers=params.workers)
    main, scaled = runs[: len(params.seeds)], runs[len(params.seeds):]
    return Results(seeds=tuple(main), sweep=sweep_table([1.0, *scales], [main[0], *scaled]))


def error_table(results: list[SeedResult]) -> pd.DataFrame:
    """All errors, with the stage's boundary and the error's ratio to it."""
    err = pd.DataFrame([e.__dict__ for r in results for e in r.errors])
    bnd = pd.DataFrame([s.__dict__ for r in results for s in r.stages])[["seed", "stage", "boundary"]]
    err = err.merge(bnd, on=["seed", "stage"])
    err["over_boundary"] = err.mae / err.boundary
    return err


def blanket_hits(stage: StageRecord) -> bool:
    """Whether the learned blanket holds a variable of every feature group the generator makes dominant."""
    return all(any(v in stage.blanket for v in group) for group in DOMINANT[stage.stage])


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims (see its registry file)."""
    return dict(claim_values(list(results.seeds)))


def claim_values(results: list[SeedResult]) -> dict[str, list[float]]:
    """The claims' per-seed values from seed results (one value per result, in order)."""
    err = error_table(results)
    bn = err[err.model == "bayes_net"].set_index(["seed", "stage", "features"])
    seeds = sorted(err.seed.unique())

    def gain(seed: int, stage: str, fs: str) -> float:
        meta = bn.loc[(seed, stage, "meta"), "mae"]
        return float(100.0 * (meta - bn.loc[(seed, stage, fs), "mae"]) / meta)

    def above(seed: int, model: str) -> float:
        sub = err[(err.seed == seed) & (err.model == model) & (err.features == "spatial+temporal")]
        return float(100.0 * (sub.over_boundary.mean() - 1.0))

    return {
        "bn_near_boundary": [above(s, "bayes_net") for s in seeds],
        "forest_near_boundary": [above(s, "random_forest") for s in seeds],
        "spatial_gain_object_stage": [gain(s, "object_bound", "spatial") for s in seeds],
        "temporal_gain_io_stage": [gain(s, "io_bound", "temporal") for s in seeds],
        "blanket_recovers_parents": [
            float(np.mean([blanket_hits(st) for r in results for st in r.stages if st.seed == s])) for s in seeds
        ],
    }


def error_figure(results: list[SeedResult]) -> Figure:
    """MAE per feature set and model, one panel per stage, with the within-batch boundary as a line."""
    err = error_table(results)
    stages = list(dict.fromkeys(err.stage))
    fig, axes = plt.subplots(1, len(stages), figsize=(4.2 * len(stages), 3.6), squeeze=False)
    sets = list(iptf.FEATURE_SETS)
    width = 0.8 / len(MODELS)
    for ax, stage in zip(axes[0], stages):
        sub = err[err.stage == stage]
        for i, model in enumerate(MODELS):
            agg = sub[sub.model == model].groupby("features").mae.agg(["mean", "std"]).reindex(sets)
            ax.bar(np.arange(len(sets)) + i * width, agg["mean"], width, yerr=agg["std"].fillna(0.0), label=model)
        ax.axhline(sub.boundary.mean(), color="tab:red", ls="--", label="within-batch boundary")
        ax.set_xticks(np.arange(len(sets)) + 0.4 - width / 2)
        ax.set_xticklabels(sets, rotation=20, fontsize=8)
        ax.set_title(stage)
    axes[0][0].set_ylabel("test MAE (s)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def survey_figure(survey: pd.DataFrame) -> Figure:
    """The latent machine load over batches, and two stages' run times against the image's object count."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3))
    axes[0].plot(survey.groupby("batch").load.first().to_numpy())
    axes[0].set_xlabel("batch")
    axes[0].set_ylabel("latent machine load L(t)")
    axes[1].scatter(survey.n_obj, survey.runtime_object_bound, s=2, alpha=0.3, label="object-bound")
    axes[1].scatter(survey.n_obj, survey.runtime_io_bound, s=2, alpha=0.3, label="I/O-bound")
    axes[1].set_xlabel("objects in the image")
    axes[1].set_ylabel("stage run time (s)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def sweep_figure(table: pd.DataFrame, labels: dict[str, str]) -> Figure:
    """Each claim of the first seed against the scale of the generator's object and load coefficients.

    Parameters
    ----------
    table
        :attr:`Results.sweep`.
    labels
        Claim id -> axis label.
    """
    fig, axes = plt.subplots(1, len(labels), figsize=(3.2 * len(labels), 3.0), squeeze=False)
    for ax, (claim, label) in zip(axes[0], labels.items()):
        ax.plot(table.scale, table[claim], marker="o")
        ax.axvline(1.0, color="grey", ls=":", lw=1)
        ax.set_xlabel("effect scale (1 = as run)")
        ax.set_title(label, fontsize=8)
    fig.tight_layout()
    return fig


def network_figure(stage: StageRecord) -> Figure:
    """The learned Bayesian network of one stage (all features), the run-time node and its blanket highlighted."""
    g = nx.DiGraph(list(stage.edges))
    g.add_nodes_from(("seeing", "airmass", *SPATIAL, *TEMPORAL, iptf.TARGET))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    pos = nx.circular_layout(sorted(g.nodes))
    colours = ["tab:red" if v == iptf.TARGET else "tab:orange" if v in stage.blanket else "lightgrey" for v in g]
    nx.draw_networkx(g, pos, ax=ax, node_color=colours, node_size=900, font_size=7, arrowsize=12)
    ax.set_title(f"learned network, {stage.stage} (seed {stage.seed}); orange: Markov blanket")
    ax.axis("off")
    return fig
