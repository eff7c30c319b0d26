"""The pfl-unseen chapter: personal heads for seen clients and for new clients that offer no labels.

A :class:`Federation` fixes the clients (Dirichlet label shift, group-wise
feature shift, the seen/unseen split with one shift group held out);
:class:`PersonalRun` is one seeded training run of FedAvg, FedRep or the
hypernetwork on the seen clients, :func:`run` trains it and scores every
method that run serves (FedAvg's run also scores FedAvg with the EM prior
correction) on every client; :func:`tune` gives each trained method the
same learning-rate grid on a tuning seed, :func:`sweep` runs the tuned
methods over the seeds and :func:`claims` turns the records into the
ledger's per-seed values.  Unseen clients reach the methods only as
:class:`~repro.federated.personal.UnseenClientData`, whose labels raise.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.federated.arrays import from_arrayrecord
from repro.federated.client import client_app_with, train_shared
from repro.federated.engine import eval_schedule, initial_arrays, run_federated
from repro.federated.feature_shift import ImageShift, draw_shifts
from repro.federated.fedrep import FedRep, make_fedrep_client_app
from repro.federated.figures import accuracy_curves
from repro.federated.hypernetwork import (
    HyperSpec,
    build_hypernet,
    hyper_initial,
    make_hyper_client_app,
    personal_logits,
)
from repro.federated.personal import UnseenClientData, em_label_prior, reweight_posteriors, seen_unseen_split
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model, load_task_data
from repro.federated.tuning import best_settings, chosen
from repro.models import set_weights
from repro.parallel import parallel_map

TRAINED = ("fedavg", "fedrep", "hypernet")
METHODS = ("fedavg", "fedavg_em", "fedrep", "hypernet")
LABELS = {"fedavg": "FedAvg", "fedavg_em": "FedAvg + EM prior", "fedrep": "FedRep", "hypernet": "hypernetwork heads"}
COLOURS = {"fedavg": "tab:gray", "fedavg_em": "tab:brown", "fedrep": "tab:orange", "hypernet": "tab:blue"}


@dataclass(frozen=True, kw_only=True)
class Federation:
    """The clients of the chapter.

    Attributes
    ----------
    spec
        Data, Dirichlet label shift and the MLP (one hidden layer: the body of FedAvg and FedRep).
    groups
        Feature-shift groups; the last one is held out (only unseen clients belong to it).
    unseen
        Number of unseen clients.
    test_per_client
        Test images drawn for each client with its own label mix (and its shift).
    seed
        Seed of the split, the shifts and the test draws.
    """

    spec: TaskSpec
    groups: int
    unseen: int
    test_per_client: int
    seed: int = 0

    def split(self) -> tuple[list[int], list[int]]:
        """``(seen, unseen)`` client ids."""
        return seen_unseen_split(self.spec.num_clients, self.unseen, self.seed)

    def group_of(self) -> np.ndarray:
        """Every client's shift group.

        Seen clients go round-robin over the first ``groups - 1``; unseen ones alternate between the
        held-out last group and the others.
        """
        if self.groups < 2:
            raise ValueError(f"need at least 2 groups (one is held out), got {self.groups}")
        seen, unseen = self.split()
        g = np.zeros(self.spec.num_clients, dtype=int)
        g[seen] = np.arange(len(seen)) % (self.groups - 1)
        g[unseen] = [self.groups - 1 if i % 2 == 0 else (i // 2) % (self.groups - 1) for i in range(len(unseen))]
        return g

    def shifts(self) -> tuple[ImageShift, ...]:
        """The groups' feature shifts (group 0 is the identity)."""
        return draw_shifts(self.groups, self.seed)

    def hyper_spec(self, descriptor: int, hyper_hidden: int) -> HyperSpec:
        """The hypernetwork's sizes on this federation's data."""
        ds, _ = load_task_data(self.spec)
        return HyperSpec(
            in_features=ds.num_features,
            body_width=self.spec.hidden[0],
            descriptor=descriptor,
            hyper_hidden=hyper_hidden,
            num_classes=ds.num_classes,
        )


@dataclass(frozen=True, kw_only=True)
class ClientSets:
    """One client's arrays: training inputs and labels, and its test draw (all with its feature shift)."""

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@functools.lru_cache(maxsize=4)
def client_sets(fed: Federation) -> tuple[ClientSets, ...]:
    """Every client's :class:`ClientSets` (cached per process)."""
    ds, parts = load_task_data(fed.spec)
    shifts, groups = fed.shifts(), fed.group_of()
    lo, hi = float(ds.x_train.min()), float(ds.x_train.max())
    rng = np.random.default_rng(fed.seed + 1)
    by_class = [np.flatnonzero(ds.y_test == c) for c in range(ds.num_classes)]
    out = []
    for c, idx in enumerate(parts):
        y = ds.y_train[idx]
        mix = np.bincount(y, minlength=ds.num_classes) / len(y)
        labels = rng.choice(ds.num_classes, size=fed.test_per_client, p=mix)
        test = np.array([rng.choice(by_class[k]) for k in labels])
        shift = shifts[groups[c]]
        out.append(
            ClientSets(
                x=shift.apply(ds.x_train[idx], lo, hi), y=y, x_test=shift.apply(ds.x_test[test], lo, hi), y_test=ds.y_test[test]
            )
        )
    return tuple(out)


def sealed(fed: Federation, client: int) -> tuple[UnseenClientData, UnseenClientData]:
    """An unseen client as the methods see it: its unlabelled inputs, and its test draw (labels sealed alike)."""
    s = client_sets(fed)[client]
    return UnseenClientData(client=client, x=s.x, _sealed_y=s.y), UnseenClientData(client=client, x=s.x_test, _sealed_y=s.y_test)


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """What every run of a sweep shares besides the method, seed and learning rate.

    Attributes
    ----------
    momentum, batch_size, steps, head_steps
        Local SGD (FedRep fits its head for ``head_steps`` steps before the body's ``steps``).
    rounds, active_clients, eval_every
        Rounds, seen clients sampled per round, evaluation period.
    descriptor, hyper_hidden
        Sizes of the hypernetwork's descriptor and hidden layer.
    device
        Where the clients train (``cpu``, ``cuda`` or ``auto``).
    """

    momentum: float
    batch_size: int
    steps: int
    head_steps: int
    rounds: int
    active_clients: int
    eval_every: int
    descriptor: int
    hyper_hidden: int
    device: str = "cpu"

    def job(self, method: str, seed: int, fed: Federation, lr: float) -> PersonalRun:
        """One :class:`PersonalRun` with this schedule."""
        return PersonalRun(method=method, seed=seed, fed=fed, lr=lr, schedule=self)


@dataclass(frozen=True, kw_only=True)
class PersonalRun:
    """One training run on the seen clients.

    Attributes
    ----------
    method
        One of :data:`TRAINED`.
    seed
        Run seed (model init, sampling, mini-batches).
    fed
        The federation.
    lr
        Clients' learning rate (the tuned hyper-parameter).
    schedule
        Everything else the run shares with the other runs of its sweep.
    """

    method: str
    seed: int
    fed: Federation
    lr: float
    schedule: Schedule

    def __post_init__(self) -> None:
        if self.method not in TRAINED:
            raise ValueError(f"parameter 'method': must be one of {TRAINED}, got {self.method!r}")


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """One method's scores from one run: mean accuracy (percent) over seen and over unseen clients, and per client."""

    method: str
    seed: int
    lr: float
    seen_accuracy: float
    unseen_accuracy: float
    per_client: tuple[tuple[int, bool, float], ...]
    curve: tuple[tuple[int, float], ...]


# ----- scoring ---------------------------------------------------------------------------
def _accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float(100.0 * np.mean(logits.argmax(1) == y))


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def training_prior(fed: Federation) -> np.ndarray:
    """The label prior of the seen clients' pooled training data (what a FedAvg model was trained under)."""
    sets, (seen, _) = client_sets(fed), fed.split()
    counts = np.bincount(np.concatenate([sets[c].y for c in seen]), minlength=fed.hyper_spec(1, 1).num_classes)
    return counts / counts.sum()


def score_clients(fed: Federation, predict) -> tuple[tuple[int, bool, float], ...]:
    """``(client, seen, accuracy)`` of every client; ``predict(unlabelled_x, test_x, client)`` returns logits.

    Unseen clients are scored through their sealed labels after the prediction is fixed.
    """
    seen, unseen = fed.split()
    sets = client_sets(fed)
    rows = [(c, True, _accuracy(predict(sets[c].x, sets[c].x_test, c), sets[c].y_test)) for c in seen]
    for c in unseen:
        inputs, test = sealed(fed, c)
        rows.append((c, False, test.labels_for_scoring(predict(inputs.x, test.x, c).argmax(1))))
    return tuple(sorted(rows))


def global_predictor(fed: Federation, weights: dict[str, np.ndarray], em: bool = False):
    """One global model for every client; with ``em``, its posteriors re-weighted to the client's EM prior."""
    model = build_model(fed.spec, seed=0)
    set_weights(model, weights)
    model.eval()
    prior = training_prior(fed)

    @torch.no_grad()
    def predict(unlabelled: np.ndarray, x: np.ndarray, client: int) -> np.ndarray:
        logits = model(torch.from_numpy(x)).numpy()
        if not em:
            return logits
        new = em_label_prior(_softmax(model(torch.from_numpy(unlabelled)).numpy()), prior)
        return np.log(reweight_posteriors(_softmax(logits), prior, new) + 1e-12)

    return predict


def fedrep_predictor(fed: Federation, weights: dict[str, np.ndarray], strategy: FedRep):
    """The shared body with each seen client's own head (the mean head for unseen clients and never-sampled ones)."""
    model = build_model(fed.spec, seed=0)
    seen, _ = fed.split()
    mean = strategy.mean_head()
    partition = {c: i for i, c in enumerate(seen)}

    @torch.no_grad()
    def predict(unlabelled: np.ndarray, x: np.ndarray, client: int) -> np.ndarray:
        head = strategy.heads.get(partition.get(client, -1), mean)
        set_weights(model, {**weights, **head})
        model.eval()
        return model(torch.from_numpy(x)).numpy()

    return predict


def hyper_predictor(spec: HyperSpec, weights: dict[str, np.ndarray]):
    """Each client's head generated from its own unlabelled inputs."""
    model = build_hypernet(spec, seed=0)
    set_weights(model, weights)
    return lambda unlabelled, x, client: personal_logits(model, unlabelled, x)


# ----- runs ------------------------------------------------------------------------------
def run(job: PersonalRun) -> list[RunRecord]:
    """Train ``job`` on the seen clients (in-process Flower engine) and score its method(s) on every client."""
    fed, plan = job.fed, job.schedule
    seen, _ = fed.split()
    sets = client_sets(fed)

    def data(_spec: TaskSpec, pid: int) -> tuple[np.ndarray, np.ndarray]:
        return sets[seen[pid]].x, sets[seen[pid]].y

    local = {"steps": plan.steps, "lr": job.lr, "momentum": plan.momentum, "batch-size": plan.batch_size}
    cfg = {"seed": job.seed, "device": plan.device}
    hyper = fed.hyper_spec(plan.descriptor, plan.hyper_hidden)
    if job.method == "hypernet":
        strategy = SeededFedAvg(plan.active_clients, local, seed=job.seed)
        app = make_hyper_client_app(hyper, lambda pid: data(fed.spec, pid), cfg)
        initial = hyper_initial(hyper, job.seed)
    elif job.method == "fedrep":
        strategy = FedRep(plan.active_clients, {**local, "head-steps": plan.head_steps}, seed=job.seed)
        app = make_fedrep_client_app(fed.spec, data, cfg)
        initial = initial_arrays(fed.spec, job.seed)
    else:
        strategy = SeededFedAvg(plan.active_clients, local, seed=job.seed)
        app = client_app_with(lambda msg, context: train_shared(fed.spec, msg, context, data), cfg)
        initial = initial_arrays(fed.spec, job.seed)

    def predictors(weights: dict[str, np.ndarray]) -> dict[str, object]:
        if job.method == "hypernet":
            return {"hypernet": hyper_predictor(hyper, weights)}
        if job.method == "fedrep":
            return {"fedrep": fedrep_predictor(fed, weights, strategy)}
        return {"fedavg": global_predictor(fed, weights), "fedavg_em": global_predictor(fed, weights, em=True)}

    def seen_mean(arrays) -> dict[str, float]:
        weights = from_arrayrecord(arrays)
        if job.method == "fedrep" and not strategy.heads:
            return {"accuracy": float("nan"), "loss": float("nan")}
        rows = score_clients(fed, next(iter(predictors(weights).values())))
        return {"accuracy": float(np.mean([a for _, s, a in rows if s])), "loss": float("nan")}

    hist = run_federated(
        strategy,
        app,
        len(seen),
        initial,
        plan.rounds,
        seen_mean,
        [r for r in eval_schedule(plan.rounds, plan.eval_every) if r > 0],
    )
    weights = from_arrayrecord(hist.final_arrays)
    out = []
    for method, predict in predictors(weights).items():
        rows = score_clients(fed, predict)
        out.append(
            RunRecord(
                method=method,
                seed=job.seed,
                lr=job.lr,
                seen_accuracy=float(np.mean([a for _, s, a in rows if s])),
                unseen_accuracy=float(np.mean([a for _, s, a in rows if not s])),
                per_client=rows,
                curve=tuple(zip(hist.rounds, hist.accuracy)) if method != "fedavg_em" else (),
            )
        )
    return out


def _flatten(done: list[list[RunRecord]]) -> list[RunRecord]:
    return [r for rs in done for r in rs]


def tune(fed: Federation, schedule: Schedule, tune_seed: int, lrs: list[float], workers: int = 1) -> dict[str, float]:
    """Each trained method's learning rate with the best mean seen-client accuracy on ``tune_seed``.

    Every method tries the same grid (FedAvg + EM uses FedAvg's run), chosen by
    :func:`repro.federated.tuning.best_settings`; unseen clients play no part in the choice.  A grid of
    one value is taken without a run.
    """
    if len(lrs) == 1:
        return {m: float(lrs[0]) for m in TRAINED}
    done = _flatten(
        parallel_map(run, [schedule.job(m, tune_seed, fed, lr) for m in TRAINED for lr in lrs], workers, desc="tuning")
    )
    tried = pd.DataFrame(
        [
            {"method": r.method, "setting": r.lr, "seed": r.seed, "seen_accuracy": r.seen_accuracy}
            for r in done
            if r.method in TRAINED
        ]
    )
    return chosen(best_settings(tried, "seen_accuracy"))


def sweep(
    fed: Federation, schedule: Schedule, seeds: list[int], tuned: dict[str, float], workers: int = 1
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Every tuned method on every seed.

    Returns
    -------
    final : DataFrame
        ``method, seed, lr, seen_accuracy, unseen_accuracy``.
    clients : DataFrame
        ``method, seed, client, seen, accuracy``.
    curves : DataFrame
        ``method, seed, round, accuracy`` (mean over seen clients at every evaluation).
    """
    done = _flatten(parallel_map(run, [schedule.job(m, s, fed, tuned[m]) for s in seeds for m in TRAINED], workers))
    final = pd.DataFrame(
        [
            {
                "method": r.method,
                "seed": r.seed,
                "lr": r.lr,
                "seen_accuracy": r.seen_accuracy,
                "unseen_accuracy": r.unseen_accuracy,
            }
            for r in done
        ]
    )
    clients = pd.DataFrame(
        [{"method": r.method, "seed": r.seed, "client": c, "seen": s, "accuracy": a} for r in done for c, s, a in r.per_client]
    )
    curves = pd.DataFrame([{"method": r.method, "seed": r.seed, "round": rd, "accuracy": a} for r in done for rd, a in r.curve])
    return final, clients, curves


def claims(final: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (points of mean client accuracy)."""

    def acc(method: str, column: str) -> pd.Series:
        return final[final.method == method].set_index("seed")[column]

    seeds = sorted(acc("hypernet", "seen_accuracy").index)

    def gain(base: str, column: str) -> list[float]:
        a, b = acc("hypernet", column), acc(base, column)
        return [float(a[s] - b[s]) for s in seeds]

    return {
        "unseen_gain_vs_fedavg": gain("fedavg", "unseen_accuracy"),
        "unseen_gain_vs_em": gain("fedavg_em", "unseen_accuracy"),
        "unseen_gain_vs_fedrep": gain("fedrep", "unseen_accuracy"),
        "seen_gain_vs_fedavg": gain("fedavg", "seen_accuracy"),
        "seen_gain_vs_fedrep": gain("fedrep", "seen_accuracy"),
    }


# ----- figures and tables ----------------------------------------------------------------------
def accuracy_bars(final: pd.DataFrame) -> plt.Figure:
    """Seen and unseen clients' mean accuracy per method (mean over seeds, error bar = sd): the abstract's two columns."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(METHODS)
    for j, m in enumerate(METHODS):
        r = final[final.method == m]
        means = [r.seen_accuracy.mean(), r.unseen_accuracy.mean()]
        sds = [r.seen_accuracy.std(ddof=1), r.unseen_accuracy.std(ddof=1)] if len(r) > 1 else [0.0, 0.0]
        ax.bar(
            np.arange(2) + (j - (len(METHODS) - 1) / 2) * width,
            means,
            width,
            yerr=sds,
            capsize=2,
            color=COLOURS[m],
            label=LABELS[m],
        )
    ax.set_xticks(range(2), ["seen clients", "unseen clients (no labels, no training)"])
    ax.set_ylabel("mean client accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def unseen_scatter(clients: pd.DataFrame, fed: Federation) -> plt.Figure:
    """Each unseen client's accuracy under FedAvg against the hypernetwork's (mean over seeds), held-out group marked."""
    sel = clients[~clients.seen].groupby(["client", "method"]).accuracy.mean().unstack()
    held_out = fed.group_of()[sel.index] == fed.groups - 1
    fig, ax = plt.subplots(figsize=(4.4, 4.2))
    for mask, name, marker in ((held_out, "held-out shift group", "s"), (~held_out, "seen shift groups", "o")):
        ax.scatter(sel.fedavg[mask], sel.hypernet[mask], marker=marker, label=name)
    ax.plot([0, 100], [0, 100], color="k", lw=0.8)
    ax.set_xlabel("FedAvg accuracy (%)")
    ax.set_ylabel("hypernetwork accuracy (%)")
    ax.set_title("unseen clients")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def seen_curves(curves: pd.DataFrame) -> plt.Figure:
    """Mean seen-client accuracy against rounds per trained method (mean over seeds, band min to max)."""
    return accuracy_curves(curves, "method", TRAINED, LABELS, COLOURS, "mean seen-client accuracy (%)")


def summary_table(final: pd.DataFrame, tuned: dict[str, float]) -> pd.DataFrame:
    """Seen and unseen accuracy (mean ± sd over seeds) per method with its tuned learning rate."""
    rows = []
    for m in METHODS:
        r = final[final.method == m]
        sd = lambda c: r[c].std(ddof=1) if len(r) > 1 else 0.0
        rows.append(
            {
                "method": LABELS[m],
                "learning rate": tuned["fedavg" if m == "fedavg_em" else m],
                "seen clients (%)": f"{r.seen_accuracy.mean():.1f} ± {sd('seen_accuracy'):.1f}",
                "unseen clients (%)": f"{r.unseen_accuracy.mean():.1f} ± {sd('unseen_accuracy'):.1f}",
                "seeds": len(r),
            }
        )
    return pd.DataFrame(rows)
