"""Chapter ``iptf-bayes``: run-time prediction for a sky-survey pipeline from spatial and temporal history.

For each seed :func:`run_seed` draws a synthetic survey (:mod:`repro.misc.iptf`),
builds the no-look-ahead features of every stage, splits the nights
chronologically and fits, for every stage and feature set, a Bayesian network
(pgmpy), a linear regression and a random forest (scikit-learn); it records
their mean absolute errors, the within-batch boundary on the test nights and
the run-time node's learned Markov blanket.  :func:`claims` and the figures
read the records.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LinearRegression

from repro.misc import iptf
from repro.parallel import parallel_map

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


def _regressor(model: str, job: SeedJob):
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
                    blanket, edges = tuple(reg.markov_blanket()), tuple(reg.model_.edges())
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


def claims(results: list[SeedResult]) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (see its registry file)."""
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


def error_figure(results: list[SeedResult]) -> plt.Figure:
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


def network_figure(stage: StageRecord) -> plt.Figure:
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
