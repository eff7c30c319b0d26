"""Predicting pipeline-stage run times of a sky survey from spatial and temporal history.

A synthetic stand-in for the iPTF real-time pipeline's timing data (which are
not public), with the two correlations the paper builds on:

* **space** -- each sky field (and each CCD within it) has its own object
  density, high near a synthetic Galactic plane and modulated by a smooth
  Gaussian random field, so images of the same patch of sky carry similar
  object counts;
* **time** -- a latent machine/storage load follows an AR(1) process over
  exposures with rare regime jumps, so stages run in the recent past take
  similar times.

:func:`make_survey` draws the workload (one row per CCD image: night,
exposure = batch, field, CCD, seeing, airmass, object count and the run time
of three stages: object-bound, I/O-bound and mixed).  :func:`add_features`
builds, for every image, features that use only strictly earlier batches.
:func:`within_batch_boundary` is the "random variance boundary": the mean
absolute deviation of run times from their batch mean.  :class:`BayesNetRegressor`
discretises, learns a structure with ``pgmpy``'s hill climbing (BIC), fits
BDeu parameters and predicts the posterior mean of the run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pgmpy.causal_discovery import HillClimbSearch
from pgmpy.inference import VariableElimination
from pgmpy.models import DiscreteBayesianNetwork
from pgmpy.parameter_estimator import DiscreteBayesianEstimator
from sklearn.gaussian_process.kernels import RBF

N_CCDS = 11
TARGET = "runtime"
FEATURE_SETS = {
    "meta": ("seeing", "airmass"),
    "spatial": ("seeing", "airmass", "space_runtime", "space_objects"),
    "temporal": ("seeing", "airmass", "lag_runtime", "recent_runtime"),
    "spatial+temporal": ("seeing", "airmass", "space_runtime", "space_objects", "lag_runtime", "recent_runtime"),
}


@dataclass(frozen=True, kw_only=True)
class Stage:
    """Run-time model of one pipeline stage: ``T = base + per_object * n_obj + load_coef * L(t) + noise``."""

    name: str
    base: float
    per_object: float
    load_coef: float


STAGES = (
    Stage(name="object_bound", base=4.0, per_object=0.02, load_coef=1.0),
    Stage(name="io_bound", base=4.0, per_object=0.002, load_coef=8.0),
    Stage(name="mixed", base=4.0, per_object=0.01, load_coef=4.0),
)


@dataclass(frozen=True, kw_only=True)
class SurveyConfig:
    """Constants of the synthetic survey.

    Attributes
    ----------
    fields
        Sky fields on an RA/Dec grid.
    nights
        Observing nights.
    exposures
        ``(low, high)`` exposures per night.
    rho0
        Objects per CCD far from the plane, before seeing/airmass losses.
    grf_sd, grf_scale_deg
        Standard deviation and correlation length of the log-density random field.
    load_phi, load_sd, jump_prob, jump_sd
        AR(1) coefficient and innovation sd of the machine load, probability and sd of regime jumps.
    batch_sd, image_sd
        Noise shared by a batch and noise per image (seconds).
    stages
        The stages' run-time models.
    """

    fields: int = 150
    nights: int = 60
    exposures: tuple[int, int] = (20, 40)
    rho0: float = 300.0
    grf_sd: float = 0.4
    grf_scale_deg: float = 30.0
    load_phi: float = 0.9
    load_sd: float = 0.3
    jump_prob: float = 0.02
    jump_sd: float = 1.0
    batch_sd: float = 0.5
    image_sd: float = 0.5
    stages: tuple[Stage, ...] = field(default_factory=lambda: STAGES)


def _field_grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    cols = int(np.ceil(np.sqrt(n * 3)))
    rows = int(np.ceil(n / cols))
    ra, dec = np.meshgrid(np.linspace(0, 360, cols, endpoint=False), np.linspace(-20, 80, rows))
    return ra.ravel()[:n], dec.ravel()[:n]


def make_survey(cfg: SurveyConfig, seed: int) -> pd.DataFrame:
    """Draw the synthetic survey: one row per CCD image, in time order.

    Columns: ``night, batch, field, ccd, seeing, airmass, n_obj, load`` and
    ``runtime_<stage>`` for every stage.  The synthetic Galactic latitude of a
    field is ``b = dec - 40 sin(ra)`` (a tilted plane on the grid; not the sky's).
    """
    rng = np.random.default_rng(seed)
    ra, dec = _field_grid(cfg.fields)
    b = dec - 40.0 * np.sin(np.radians(ra))
    xyz = np.stack([np.cos(np.radians(dec)) * np.cos(np.radians(ra)), np.cos(np.radians(dec)) * np.sin(np.radians(ra)),
                    np.sin(np.radians(dec))], axis=1)
    cov = RBF(length_scale=np.radians(cfg.grf_scale_deg))(xyz) * cfg.grf_sd ** 2
    grf = rng.multivariate_normal(np.zeros(cfg.fields), cov + 1e-9 * np.eye(cfg.fields))
    rho_field = cfg.rho0 * (1.0 + 8.0 * np.exp(-np.abs(b) / 10.0)) * np.exp(grf)
    rho_ccd = rho_field[:, None] * np.exp(rng.normal(0.0, 0.15, size=(cfg.fields, N_CCDS)))
    rows = []
    load, regime, batch = 0.0, 0.0, 0
    for night in range(cfg.nights):
        for _ in range(int(rng.integers(cfg.exposures[0], cfg.exposures[1] + 1))):
            if rng.random() < cfg.jump_prob:
                regime = rng.normal(0.0, cfg.jump_sd)
            load = cfg.load_phi * load + rng.normal(0.0, cfg.load_sd)
            f = int(rng.integers(cfg.fields))
            seeing = float(np.exp(rng.normal(np.log(2.0), 0.25)))
            airmass = float(rng.uniform(1.0, 2.0))
            efficiency = 1.0 / np.sqrt(seeing * airmass / 2.0)
            n_obj = rng.poisson(rho_ccd[f] * efficiency)
            shared = {s.name: rng.normal(0.0, cfg.batch_sd) for s in cfg.stages}
            for ccd in range(N_CCDS):
                row = {"night": night, "batch": batch, "field": f, "ccd": ccd, "seeing": seeing, "airmass": airmass,
                       "n_obj": int(n_obj[ccd]), "load": load + regime}
                for s in cfg.stages:
                    t = (s.base + s.per_object * n_obj[ccd] + s.load_coef * (load + regime) + shared[s.name]
                         + rng.normal(0.0, cfg.image_sd))
                    row[f"runtime_{s.name}"] = max(t, 0.1)
                rows.append(row)
            batch += 1
    return pd.DataFrame(rows)


def add_features(survey: pd.DataFrame, stage: str, recent: int = 5) -> pd.DataFrame:
    """Features of every image built from strictly earlier batches only.

    * ``space_runtime`` / ``space_objects`` -- mean run time of ``stage`` and
      mean object count over earlier images of the same field and CCD (else
      of the same field, else of all earlier images);
    * ``lag_runtime`` -- mean run time of ``stage`` over the previous batch;
    * ``recent_runtime`` -- mean over the previous ``recent`` batches.

    The first batch has no history; its history features are NaN (callers drop it).

    Returns
    -------
    pandas.DataFrame
        ``survey``'s columns plus the features and ``runtime`` (the stage's run time).
    """
    col = f"runtime_{stage}"
    out = survey.copy()
    out[TARGET] = survey[col]
    feats = {k: np.full(len(survey), np.nan) for k in ("space_runtime", "space_objects", "lag_runtime",
                                                        "recent_runtime")}
    by_ccd: dict[tuple[int, int], list[float]] = {}
    by_field: dict[int, list[float]] = {}
    total = [0.0, 0.0, 0]
    batch_means: list[float] = []
    for _, idx in survey.groupby("batch", sort=True).indices.items():
        rows = survey.iloc[idx]
        if batch_means:
            feats["lag_runtime"][idx] = batch_means[-1]
            feats["recent_runtime"][idx] = float(np.mean(batch_means[-recent:]))
            for i, (f, c) in zip(idx, zip(rows["field"], rows["ccd"])):
                hist = by_ccd.get((f, c)) or by_field.get(f)
                if hist:
                    feats["space_runtime"][i] = hist[0] / hist[2]
                    feats["space_objects"][i] = hist[1] / hist[2]
                else:
                    feats["space_runtime"][i] = total[0] / total[2]
                    feats["space_objects"][i] = total[1] / total[2]
        for f, c, t, n in zip(rows["field"], rows["ccd"], rows[col], rows["n_obj"]):
            for acc in (by_ccd.setdefault((f, c), [0.0, 0.0, 0]), by_field.setdefault(f, [0.0, 0.0, 0]), total):
                acc[0] += t
                acc[1] += n
                acc[2] += 1
        batch_means.append(float(rows[col].mean()))
    for k, v in feats.items():
        out[k] = v
    return out


def chronological_split(data: pd.DataFrame, train_share: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split by night: the first ``train_share`` of the nights train, the rest test (no batch straddles)."""
    nights = np.sort(data.night.unique())
    cut = nights[int(round(train_share * len(nights))) - 1]
    return data[data.night <= cut], data[data.night > cut]


def within_batch_boundary(data: pd.DataFrame, column: str = TARGET) -> float:
    """Mean absolute deviation of ``column`` from its batch mean: the intrinsic error floor of a per-batch predictor."""
    return float((data[column] - data.groupby("batch")[column].transform("mean")).abs().mean())


@dataclass(kw_only=True)
class BayesNetRegressor:
    """A discrete Bayesian network over quantile-binned features and run time, predicting the posterior mean.

    Parameters
    ----------
    feature_bins, target_bins
        Quantile bins per feature and for the run time.
    learn_structure
        Hill-climbing structure search with BIC (``pgmpy``), else the expert
        structure "every feature -> run time".
    equivalent_sample_size
        BDeu prior strength.
    """

    feature_bins: int = 5
    target_bins: int = 8
    learn_structure: bool = True
    equivalent_sample_size: float = 5.0
    edges_: dict[str, np.ndarray] = field(default_factory=dict, init=False)
    centres_: np.ndarray | None = field(default=None, init=False)
    model_: DiscreteBayesianNetwork | None = field(default=None, init=False)
    features_: tuple[str, ...] = field(default=(), init=False)

    def _discretise(self, x: pd.DataFrame) -> pd.DataFrame:
        out = {}
        for c in x.columns:
            codes = np.clip(np.searchsorted(self.edges_[c], x[c].to_numpy(), side="right") - 1, 0,
                            len(self.edges_[c]) - 2)
            out[c] = pd.Categorical(codes, categories=range(len(self.edges_[c]) - 1))
        return pd.DataFrame(out, index=x.index)

    def fit(self, x: pd.DataFrame, y: pd.Series) -> "BayesNetRegressor":
        """Bin the columns, learn (or set) the structure and fit BDeu parameters."""
        self.features_ = tuple(x.columns)
        table = x.assign(**{TARGET: y.to_numpy()})
        for c in table.columns:
            bins = self.target_bins if c == TARGET else self.feature_bins
            edges = np.unique(np.quantile(table[c], np.linspace(0, 1, bins + 1)))
            edges[0], edges[-1] = -np.inf, np.inf
            self.edges_[c] = edges
        disc = self._discretise(table)
        codes = disc[TARGET].cat.codes.to_numpy()
        self.centres_ = np.array([y.to_numpy()[codes == k].mean() if (codes == k).any() else np.nan
                                  for k in range(len(self.edges_[TARGET]) - 1)])
        if self.learn_structure:
            search = HillClimbSearch(scoring_method="bic-d", return_type="dag", show_progress=False).fit(disc)
            arcs = list(search.causal_graph_.edges())
        else:
            arcs = [(c, TARGET) for c in self.features_]
        model = DiscreteBayesianNetwork(arcs)
        model.add_nodes_from(disc.columns)
        self.model_ = model.fit(disc, estimator=DiscreteBayesianEstimator(
            prior_type="BDeu", equivalent_sample_size=self.equivalent_sample_size))
        return self

    def _fitted(self) -> tuple[DiscreteBayesianNetwork, np.ndarray]:
        """The fitted network and the run-time bins' centres, or an error before :meth:`fit`."""
        if self.model_ is None or self.centres_ is None:
            raise ValueError("the network is not fitted; call fit first")
        return self.model_, self.centres_

    def network(self) -> DiscreteBayesianNetwork:
        """The fitted network."""
        return self._fitted()[0]

    def markov_blanket(self) -> list[str]:
        """The run-time node's Markov blanket in the fitted network."""
        return sorted(self._fitted()[0].get_markov_blanket(TARGET))

    def posterior(self, x: pd.DataFrame) -> np.ndarray:
        """``P(run-time bin | the Markov blanket's observed features)`` for every row, ``(n, target_bins)``."""
        blanket = [c for c in self.markov_blanket() if c in self.features_]
        disc = self._discretise(x[list(self.features_)])
        model, centres = self._fitted()
        infer = VariableElimination(model)
        out = np.empty((len(x), len(centres)))
        keys = disc[blanket].apply(lambda col: col.cat.codes).to_numpy() if blanket else np.zeros((len(x), 0), int)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        for i, combo in enumerate(uniq):
            evidence = {c: int(v) for c, v in zip(blanket, combo)}
            q = infer.query([TARGET], evidence=evidence or None, show_progress=False)
            out[inverse.ravel() == i] = q.values
        return out

    def predict(self, x: pd.DataFrame) -> np.ndarray:
        """Posterior mean of the run time, with each bin at the mean training run time inside it."""
        raw = self._fitted()[1]
        centres = np.nan_to_num(raw, nan=float(np.nanmean(raw)))
        return self.posterior(x) @ centres
