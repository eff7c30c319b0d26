"""The on-device KD chapter: weak clients train a small auxiliary model, strong clients distil it into a large one.

:class:`Params` holds the chapter's parameters.  :func:`run` first gives
every method the same learning-rate grid on a tuning seed and keeps, per
method, the value whose evaluated model scores best on a validation set:
training samples that no client holds (``TaskSpec.validation_share``;
:mod:`repro.federated.tuning`); the test accuracy the claims compare plays
no part in the choice.  Then every method runs at its rate for every seed
(one :class:`KdRun` each, through :func:`run_one` into a :class:`KdRecord`)
and :func:`run` returns the :class:`Results`; :func:`claims` gives the
ledger's evidence and :func:`memory_table` shows why weak clients can train
only the auxiliary model; the figures and tables are the chapter's own.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.arrays import from_arrayrecord
from repro.federated.client import LocalSGD
from repro.federated.engine import RunSummary
from repro.federated.figures import accuracy_band, mean_sd, seed_sd
from repro.federated.ondevice_kd import (
    AUX,
    LARGE,
    KdSchedule,
    Recipe,
    ServerPool,
    TwoModelFedAvg,
    build_pair,
    keys_of,
    make_two_model_client_app,
    pair_arrays,
    pair_evaluator,
    strip,
)
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, execute, records_frame
from repro.federated.seed_tuning import tune_on_seed
from repro.federated.seed_tuning import tuning_summary as tuning_summary_table
from repro.federated.task import TaskSpec, available_train, load_task_data, majority_accuracy
from repro.federated.tiers import Tier, assign_tiers, count_step
from repro.federated.tuning import Choice, best_settings, chosen, model_validation_accuracy
from repro.models import set_weights
from repro.params import ChapterParams, require
from repro.results import Evidence

METHODS = ("strong_only", "aux_all", "feddf", "kd_only", "ondevice_kd")
LABELS = {"strong_only": "FedAvg of L, strong clients, labelled data", "aux_all": "FedAvg of A, all clients (A's accuracy)",
          "feddf": "FedDF-style server KD into L", "kd_only": "on-device KD, KD loss only (abstract's reading)",
          "ondevice_kd": "on-device KD (authors' code: CE, then KD)"}
COLOURS = {"strong_only": "tab:brown", "aux_all": "tab:gray", "feddf": "tab:orange", "kd_only": "tab:green",
           "ondevice_kd": "tab:blue"}
TUNING_METRIC = "validation_accuracy"
"""What every method's learning rate is chosen on: the evaluated model's final accuracy on the held-out samples."""


RECORD_COLUMNS = ("method", "setting", "seed", "accuracy", "budget_accuracy", TUNING_METRIC, "weak_large_scalars",
                  "large_scalars")


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``ondevice-kd.yaml``)."""

    dataset: str
    n_train: int
    validation_share: float
    num_clients: int
    active_clients: int
    alpha: float
    hidden: tuple[int, ...]
    aux_hidden: tuple[int, ...]
    strong_share: float
    labelled_share: float
    steps: int
    rounds: int
    batch_size: int
    lrs: tuple[float, ...]
    momentum: float
    temperature: float
    kd_final: float
    kd_rampup: int
    pool_size: int
    server_steps: int
    memory_batch: int
    tuning_seed: int
    seeds: tuple[int, ...]
    workers: int
    device: str
    eval_every: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(self.active_clients <= self.num_clients, self, ("active_clients", "num_clients"),
                "active_clients must not exceed num_clients")
        require(round(self.strong_share * self.num_clients) >= 1, self, ("strong_share", "num_clients"),
                "need at least one strong client")
        require(0.0 < self.labelled_share < 1.0, self, "labelled_share", "clients need both labelled and unlabelled samples")
        dealt = int(available_train(self.dataset, self.n_train) * (1.0 - self.validation_share))
        require(dealt >= 2 * self.num_clients, self, ("dataset", "n_train", "validation_share", "num_clients"),
                "the split needs at least 2 training samples per client after the validation share")
        require(self.pool_size <= dealt, self, ("pool_size", "n_train", "validation_share"),
                "FedDF's pool draws from the clients' training samples; it cannot exceed them")
        require(self.tuning_seed not in self.seeds, self, ("tuning_seed", "seeds"), "the tuning seed must not be a reported seed")

    def spec(self) -> TaskSpec:
        """The task: the dataset over the clients by a Dirichlet label skew, a validation share held out; ``L``'s MLP."""
        return TaskSpec(dataset=self.dataset, num_clients=self.num_clients, scheme="dirichlet", alpha=self.alpha,
                        hidden=self.hidden, model="mlp", n_train=self.n_train, data_seed=0,
                        validation_share=self.validation_share)

    def job(self, method: str, lr: float, seed: int) -> KdRun:
        """One run of ``method`` at learning rate ``lr``."""
        return KdRun(method=method, spec=self.spec(), sgd=LocalSGD(batch_size=self.batch_size, lr=lr, momentum=self.momentum),
                     tau=self.steps, rounds=self.rounds, seed=seed, active_clients=self.active_clients,
                     eval_every=self.eval_every, device=self.device, aux_hidden=self.aux_hidden,
                     strong_share=self.strong_share, labelled_share=self.labelled_share, temperature=self.temperature,
                     kd_final=self.kd_final, kd_rampup=self.kd_rampup, pool_size=self.pool_size,
                     server_steps=self.server_steps,
                     progress=None if self.workers > 1 else f"{method} lr={lr:g} seed={seed}")


@dataclass(frozen=True, kw_only=True)
class KdRun(FederatedRun):
    """One run; the shared fields are :class:`~repro.federated.runs.FederatedRun`'s.

    ``spec.hidden`` are ``L``'s widths; ``sgd`` holds the learning rate the
    sweep tunes; ``tau`` is the local steps per step (CE and KD each);
    ``rounds`` and ``eval_every`` count two-step rounds; ``active_clients``
    are sampled for the aux step of a round (every strong client takes the
    large step); the server's FedDF step stays on the CPU whatever ``device``.

    Attributes
    ----------
    aux_hidden
        ``A``'s widths.
    strong_share, labelled_share
        Share of strong clients; share of each client's samples that carry a label.
    temperature, kd_final, kd_rampup
        Distillation temperature, and the KD weight of the authors' loss with its ramp-up in rounds.
    pool_size, server_steps
        FedDF's central unlabelled pool (training images of the clients) and its distillation steps per round.
    """

    aux_hidden: tuple[int, ...]
    strong_share: float
    labelled_share: float
    temperature: float
    kd_final: float
    kd_rampup: int
    pool_size: int
    server_steps: int

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = {m: "sgd.lr" for m in METHODS}

    @property
    def evaluated(self) -> str:
        """The model the run is scored on: ``A`` for FedAvg of ``A``, ``L`` for every other method."""
        return AUX if self.method == "aux_all" else LARGE

    def recipe(self) -> Recipe:
        """The steps of a round for this method."""
        return {
            "strong_only": Recipe(train_aux=False, large_loss="ce"),
            "aux_all": Recipe(train_aux=True, large_loss="none"),
            "feddf": Recipe(train_aux=True, large_loss="ce", server_pool_steps=self.server_steps),
            "kd_only": Recipe(train_aux=True, large_loss="kd"),
            "ondevice_kd": Recipe(train_aux=True, large_loss="ce-then-kd"),
        }[self.method]

    def client_tiers(self) -> list[Tier]:
        """Strong or weak, per client (the same for every method of a seed)."""
        return client_tiers(self.spec, self.strong_share, self.seed)

    def pool(self) -> np.ndarray:
        """FedDF's central unlabelled pool: ``pool_size`` of the clients' training images drawn with the seed.

        Samples held out for validation are never drawn.
        """
        ds, parts = load_task_data(self.spec)
        dealt = np.sort(np.concatenate(parts))
        pick = np.random.default_rng(self.seed).choice(len(dealt), size=min(self.pool_size, len(dealt)), replace=False)
        return ds.x_train[dealt[np.sort(pick)]]


def client_tiers(spec: TaskSpec, strong_share: float, seed: int) -> list[Tier]:
    """Each client strong (can train ``L``) or weak (only ``A``), in the shares asked, shuffled with ``seed``."""
    layers = len(spec.hidden) + 1
    return assign_tiers(
        spec.num_clients,
        [strong_share, 1.0 - strong_share],
        [Tier(name="strong", trained_layers=layers, width=1.0), Tier(name="weak", trained_layers=0, width=1.0)],
        seed=seed,
    )


@dataclass(frozen=True, kw_only=True)
class KdRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields (the curve in two-step rounds) and these.

    Attributes
    ----------
    validation_accuracy
        The evaluated model's accuracy on the held-out training samples (what tuning reads).
    weak_large_scalars
        Scalars of ``L`` that weak clients downloaded or uploaded (0 by design).
    large_scalars
        Scalars of ``L`` moved in all, both directions.
    """

    validation_accuracy: float = math.nan
    weak_large_scalars: int = 0
    large_scalars: int = 0


def run_one(job: KdRun) -> KdRecord:
    """Run ``job`` on Flower's in-process engine (two Flower rounds per round of the method)."""
    tiers = job.client_tiers()
    recipe = job.recipe()
    kd = KdSchedule(temperature=job.temperature, kd_final=job.kd_final, kd_rampup=job.kd_rampup)
    server = ServerPool(pool=job.pool(), spec=job.spec, aux_hidden=job.aux_hidden) if recipe.server_pool_steps else None
    strategy = TwoModelFedAvg(job.clients_per_round, job.local, tiers, recipe, seed=job.seed, kd=kd, server=server)
    app = make_two_model_client_app(job.spec, job.aux_hidden, job.labelled_share, job.run_config)
    hist = job.simulate(strategy, app, pair_arrays(job.spec, job.aux_hidden, job.seed),
                        pair_evaluator(job.spec, job.aux_hidden, job.evaluated), flower_rounds=2)
    s = RunSummary.of(hist)
    sizes = strategy.comm.sizes if strategy.comm is not None else {}
    moved = {t.partition_id: 0 for t in strategy.traffic}
    for t in strategy.traffic:
        moved[t.partition_id] += sum(sizes[k] for k in keys_of(t.down + t.up, LARGE))
    assert hist.final_arrays is not None
    model = build_pair(job.spec, job.aux_hidden, seed=0)[job.evaluated]
    set_weights(model, strip(from_arrayrecord(hist.final_arrays), job.evaluated))
    return KdRecord.of(job, dataclasses.replace(s, curve=tuple((r // 2, a) for r, a in s.curve)),
                       validation_accuracy=model_validation_accuracy(job.spec, model),
                       weak_large_scalars=sum(v for p, v in moved.items() if tiers[p].name != "strong"),
                       large_scalars=sum(moved.values()))


def tune(params: Params) -> tuple[tuple[Choice, ...], pd.DataFrame]:
    """Every method at every rate of ``lrs`` on the tuning seed; each keeps the best on the validation set.

    See :func:`repro.federated.seed_tuning.tune_on_seed` (a one-value grid runs nothing and chooses it).
    """
    return tune_on_seed(run_one, lambda m, lr: params.job(m, lr, params.tuning_seed), METHODS, params.lrs,
                        RECORD_COLUMNS, TUNING_METRIC, params.workers, desc="on-device KD tuning")


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the chapter's comparison produced.

    Attributes
    ----------
    final
        One row per reported run: :data:`RECORD_COLUMNS` (``setting`` is the learning rate).
    curves
        ``method, seed, round, accuracy`` at every evaluation (rounds of the method).
    choices, tuning
        The learning rate each method kept, and the tuning runs.
    memory
        :func:`memory_table`'s table.
    trivial
        Test accuracy of always predicting the majority class (percent): the task's trivial level.
    strong_clients
        Number of strong clients.
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    choices: tuple[Choice, ...]
    tuning: pd.DataFrame
    memory: pd.DataFrame
    trivial: float
    strong_clients: int


def run(params: Params) -> Results:
    """Tune every method's rate on the tuning seed, then run every method at its rate for every seed."""
    choices, tuning = tune(params)
    lr = chosen(choices)
    done = execute(run_one, [params.job(m, lr[m], s) for s in params.seeds for m in METHODS], params.workers,
                   desc="on-device KD comparison")
    spec = params.spec()
    strong = sum(t.name == "strong" for t in client_tiers(spec, params.strong_share, params.seeds[0]))
    return Results(final=records_frame(done, RECORD_COLUMNS), curves=curves_frame(done), choices=choices, tuning=tuning,
                   memory=memory_table(spec, params.aux_hidden, params.memory_batch, params.momentum),
                   trivial=majority_accuracy(spec), strong_clients=strong)


def accuracies(results: Results) -> dict[str, pd.Series]:
    """Every method's accuracy at the budget, indexed by seed."""
    return {m: g.set_index("seed").budget_accuracy for m, g in results.final.groupby("method")}


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence: on-device KD's large model against each baseline per seed, with both arms."""
    acc = accuracies(results)
    seeds = sorted(acc["ondevice_kd"].index)
    kd = acc["ondevice_kd"]

    def gain(base: str) -> Evidence:
        return Evidence(values=[float(kd[s] - acc[base][s]) for s in seeds], trivial=results.trivial,
                        arms={m: [float(acc[m][s]) for s in seeds] for m in ("ondevice_kd", base)})

    return {"gain_vs_strong_only": gain("strong_only"), "gain_vs_aux": gain("aux_all"), "gain_vs_feddf": gain("feddf")}


def moved_on_test(results: Results) -> list[str]:
    """The methods whose learning rate choosing on the tuning seed's test accuracy would have changed."""
    if results.tuning.empty:
        return []
    on_test = chosen(best_settings(results.tuning, "budget_accuracy"))
    return [c.method for c in results.choices if not np.isclose(on_test[c.method], c.value)]


def tuning_summary(results: Results) -> pd.DataFrame:
    """Per method: validation and test accuracy at every rate on the tuning seed, and the rate kept."""
    return tuning_summary_table(results.tuning, results.choices, LABELS, TUNING_METRIC)


def memory_table(spec: TaskSpec, aux_hidden: tuple[int, ...], batch_size: int, momentum: float) -> pd.DataFrame:
    """One local step of ``A`` and of ``L``: parameters and peak bytes (the tiers' model and torch's count)."""
    pair = build_pair(spec, aux_hidden, seed=0)
    rows = []
    for name, label in ((AUX, "A (every client)"), (LARGE, "L (strong clients)")):
        step = count_step(pair[name], batch_size, momentum)
        rows.append(
            {
                "model": label,
                "parameters": step.parameters,
                "step memory, model (kB)": step.modelled.trained / 1e3,
                "step memory, torch (kB)": step.measured / 1e3,
            }
        )
    table = pd.DataFrame(rows)
    return table.assign(**{"relative to A": table["step memory, model (kB)"] / table["step memory, model (kB)"].iloc[0]})


# ----- figures and tables ----------------------------------------------------------------------
def accuracy_curves(results: Results) -> Figure:
    """Test accuracy against rounds per method at its chosen learning rate (mean over seeds, band min to max)."""
    fig, ax = plt.subplots(figsize=(8.8, 4.0))
    for m in METHODS:
        accuracy_band(ax, results.curves[results.curves.method == m], None, COLOURS[m], LABELS[m])
    ax.axhline(results.trivial, color="k", lw=0.8, ls=":", label="majority class")
    ax.set_xlabel("round (aux step + large step)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def accuracy_bars(results: Results) -> Figure:
    """The miniature of the paper's main table: accuracy at the budget per method (error bar = sd over seeds)."""
    acc = accuracies(results)
    fig, ax = plt.subplots(figsize=(8.8, 3.6))
    for i, m in enumerate(METHODS):
        ax.barh(i, acc[m].mean(), xerr=seed_sd(acc[m]), color=COLOURS[m], capsize=3)
    ax.axvline(results.trivial, color="k", lw=0.8, ls=":")
    ax.set_yticks(range(len(METHODS)), [LABELS[m] for m in METHODS], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("test accuracy at the budget (%)")
    fig.tight_layout()
    return fig


def summary_table(results: Results) -> pd.DataFrame:
    """Per method: learning rate chosen on validation, test accuracy (mean ± sd), ``L``'s traffic (all, weak clients)."""
    lr = chosen(results.choices)
    rows = []
    for m in METHODS:
        r = results.final[results.final.method == m]
        rows.append({"method": LABELS[m], "lr (chosen on validation)": f"{lr[m]:g}",
                     "test accuracy (%)": mean_sd(r.budget_accuracy),
                     "L scalars moved (millions)": round(r.large_scalars.mean() / 1e6, 2),
                     "of which by weak clients": int(r.weak_large_scalars.max()), "seeds": len(r)})
    return pd.DataFrame(rows)
