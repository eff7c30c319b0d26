"""The pfl-unseen chapter: personal heads for seen clients and for new clients that offer no labels.

:class:`Params` holds the chapter's parameters.  A :class:`Federation`
fixes the clients (Dirichlet label shift, group-wise feature shift, the
seen/unseen split with one shift group held out, a validation and a test
draw per client); :class:`PersonalRun` is one seeded training run of FedAvg,
FedRep or the hypernetwork on the seen clients, and :func:`run_one` trains
it and scores every method that run serves on every client (FedAvg's run
also scores FedAvg with the EM prior correction; FedRep's run also scores
FedRep whose unseen clients fine-tune its head on a labelled share of their
data).  :func:`run` gives each trained method the same learning-rate grid on
a tuning seed, chosen on the seen clients' validation draws (never their
test draws, never an unseen client), runs the tuned methods over the seeds
and returns the :class:`Results`; :func:`claims` gives the ledger's
evidence.  Unseen clients reach the label-free methods only as
:class:`~repro.federated.personal.UnseenClientData`, whose labels raise.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from flwr.app import ArrayRecord
from flwr.clientapp import ClientApp
from matplotlib.figure import Figure

from repro.federated.arrays import from_arrayrecord
from repro.federated.client import LocalSettings, client_app_with, train_shared
from repro.federated.engine import History, RunSummary, initial_arrays
from repro.federated.feature_shift import ImageShift, draw_shifts
from repro.federated.fedrep import FedRep, fine_tune_head, make_fedrep_client_app
from repro.federated.figures import accuracy_curves, mean_sd, seed_sd
from repro.federated.hypernetwork import HyperSpec, build_hypernet, hyper_initial, make_hyper_client_app, personal_logits
from repro.federated.personal import UnseenClientData, em_label_prior, reweight_posteriors, seen_unseen_split
from repro.federated.runs import RunRecord, SeededRun, Simulation, curves_frame, execute, records_frame
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, available_train, build_model, load_task_data
from repro.federated.tuning import Choice, best_settings, chosen, held_out
from repro.models import set_weights
from repro.params import ChapterParams, require
from repro.results import Evidence

TRAINED = ("fedavg", "fedrep", "hypernet")
METHODS = ("fedavg", "fedavg_em", "fedrep", "fedrep_ft", "hypernet")
SERVES = {"fedavg": ("fedavg", "fedavg_em"), "fedrep": ("fedrep", "fedrep_ft"), "hypernet": ("hypernet",)}
"""The methods each trained run scores (they share its model and learning rate)."""
LABELS = {"fedavg": "FedAvg", "fedavg_em": "FedAvg + EM prior", "fedrep": "FedRep (unseen: mean head)",
          "fedrep_ft": "FedRep (unseen: head fine-tuned on labels)", "hypernet": "hypernetwork heads"}
COLOURS = {"fedavg": "tab:gray", "fedavg_em": "tab:brown", "fedrep": "tab:orange", "fedrep_ft": "tab:red",
           "hypernet": "tab:blue"}
TUNING_METRIC = "seen_validation"
"""What the learning rates are chosen on: mean accuracy of the seen clients on their validation draws."""
RECORD_COLUMNS = ("method", "setting", "seed", "seen_accuracy", "unseen_accuracy", TUNING_METRIC)


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``pfl-unseen.yaml``)."""

    num_clients: int
    unseen: int
    groups: int
    alpha: float
    body_width: int
    descriptor: int
    hyper_hidden: int
    test_per_client: int
    validation_share: float
    active_clients: int
    steps: int
    head_steps: int
    finetune_share: float
    finetune_steps: int
    batch_size: int
    lrs: tuple[float, ...]
    momentum: float
    rounds: int
    tune_seed: int
    seeds: tuple[int, ...]
    workers: int
    device: str
    eval_every: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(2 <= self.unseen < self.num_clients, self, ("unseen", "num_clients"),
                "need 2 <= unseen < num_clients (half the unseen clients form the held-out shift group)")
        require(self.active_clients <= self.num_clients - self.unseen, self, ("active_clients", "num_clients", "unseen"),
                "active_clients must not exceed the seen clients")
        require(self.groups - 1 <= self.num_clients - self.unseen, self, ("groups", "num_clients", "unseen"),
                "every seen shift group needs a seen client")
        dealt = int(available_train("digits", None) * (1.0 - self.validation_share))
        require(dealt >= 2 * self.num_clients, self, ("num_clients", "validation_share"),
                "the split needs at least 2 training samples per client after the validation share")
        require(self.tune_seed not in self.seeds, self, ("tune_seed", "seeds"), "tune on a seed that is not reported")

    def federation(self) -> Federation:
        """The clients: digits with a Dirichlet label shift, the feature-shift groups and the seen/unseen split."""
        spec = TaskSpec(dataset="digits", num_clients=self.num_clients, scheme="dirichlet", alpha=self.alpha,
                        hidden=(self.body_width,), model="mlp", data_seed=0, validation_share=self.validation_share)
        return Federation(spec=spec, groups=self.groups, unseen=self.unseen, test_per_client=self.test_per_client)

    def schedule(self) -> Schedule:
        """What every run shares besides method, seed and learning rate."""
        return Schedule(momentum=self.momentum, batch_size=self.batch_size, steps=self.steps, head_steps=self.head_steps,
                        finetune_share=self.finetune_share, finetune_steps=self.finetune_steps, rounds=self.rounds,
                        active_clients=self.active_clients, eval_every=self.eval_every, descriptor=self.descriptor,
                        hyper_hidden=self.hyper_hidden, device=self.device)


@dataclass(frozen=True, kw_only=True)
class Federation:
    """The clients of the chapter.

    Attributes
    ----------
    spec
        Data, Dirichlet label shift, the held-out validation share and the MLP (one hidden layer: the body of
        FedAvg and FedRep).
    groups
        Feature-shift groups; the last one is held out (only unseen clients belong to it).
    unseen
        Number of unseen clients.
    test_per_client
        Test images drawn for each client with its own label mix (and its shift); as many validation images
        are drawn from the held-out training samples.
    seed
        Seed of the split, the shifts and the draws.
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
            raise ValueError(f"parameter 'groups': need at least 2 (one is held out), got {self.groups}")
        seen, unseen = self.split()
        g = np.zeros(self.spec.num_clients, dtype=int)
        g[seen] = np.arange(len(seen)) % (self.groups - 1)
        g[unseen] = [self.groups - 1 if i % 2 == 0 else (i // 2) % (self.groups - 1) for i in range(len(unseen))]
        return g

    def held_out_group(self) -> list[int]:
        """The unseen clients of the held-out shift group."""
        g = self.group_of()
        return [c for c in self.split()[1] if g[c] == self.groups - 1]

    def shifts(self) -> tuple[ImageShift, ...]:
        """The groups' feature shifts (group 0 is the identity)."""
        return draw_shifts(self.groups, self.seed)

    def hyper_spec(self, descriptor: int, hyper_hidden: int) -> HyperSpec:
        """The hypernetwork's sizes on this federation's data."""
        ds, _ = load_task_data(self.spec)
        return HyperSpec(in_features=ds.num_features, body_width=self.spec.hidden[0], descriptor=descriptor,
                         hyper_hidden=hyper_hidden, num_classes=ds.num_classes)


@dataclass(frozen=True, kw_only=True)
class ClientSets:
    """One client's arrays, all with its feature shift: training, validation draw and test draw.

    The validation draw comes from the training samples no client holds, the test draw from the test set, both
    with the client's label mix.
    """

    x: np.ndarray
    y: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def draw_like(labels: np.ndarray, pool_x: np.ndarray, pool_y: np.ndarray, size: int,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``size`` samples of the pool drawn with the label mix of ``labels`` (classes missing from the pool skipped)."""
    classes = int(max(labels.max(), pool_y.max())) + 1
    by_class = [np.flatnonzero(pool_y == c) for c in range(classes)]
    mix = np.bincount(labels, minlength=classes).astype(float)
    mix[[len(b) == 0 for b in by_class]] = 0.0
    picked = np.array([rng.choice(by_class[k]) for k in rng.choice(classes, size=size, p=mix / mix.sum())])
    return pool_x[picked], pool_y[picked]


@functools.lru_cache(maxsize=4)
def client_sets(fed: Federation) -> tuple[ClientSets, ...]:
    """Every client's :class:`ClientSets` (cached per process)."""
    ds, parts = load_task_data(fed.spec)
    shifts, groups = fed.shifts(), fed.group_of()
    lo, hi = float(ds.x_train.min()), float(ds.x_train.max())
    test_rng, val_rng = np.random.default_rng(fed.seed + 1), np.random.default_rng(fed.seed + 2)
    val = held_out(fed.spec)
    out = []
    for c, idx in enumerate(parts):
        y = ds.y_train[idx]
        x_test, y_test = draw_like(y, ds.x_test, ds.y_test, fed.test_per_client, test_rng)
        x_val, y_val = draw_like(y, ds.x_train[val], ds.y_train[val], fed.test_per_client, val_rng)
        shift = shifts[groups[c]]
        out.append(ClientSets(x=shift.apply(ds.x_train[idx], lo, hi), y=y, x_val=shift.apply(x_val, lo, hi), y_val=y_val,
                              x_test=shift.apply(x_test, lo, hi), y_test=y_test))
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
    finetune_share, finetune_steps
        FedRep's labelled variant: the share of an unseen client's samples it labels, and the steps its head is
        fine-tuned for on them (body frozen), at the run's learning rate.
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
    finetune_share: float
    finetune_steps: int
    rounds: int
    active_clients: int
    eval_every: int
    descriptor: int
    hyper_hidden: int
    device: str = "cpu"

    def job(self, method: str, seed: int, fed: Federation, lr: float) -> PersonalRun:
        """One :class:`PersonalRun` with this schedule."""
        return PersonalRun(method=method, seed=seed, rounds=self.rounds, active_clients=self.active_clients,
                           eval_every=self.eval_every, device=self.device, fed=fed, lr=lr, plan=self)


@dataclass(frozen=True, kw_only=True)
class PersonalRun(SeededRun):
    """One training run on the seen clients; the shared fields are :class:`SeededRun`'s (``method`` one of :data:`TRAINED`).

    Attributes
    ----------
    fed
        The federation.
    lr
        Clients' learning rate (the tuned hyper-parameter).
    plan
        Everything else the run shares with the other runs of its sweep.
    """

    fed: Federation
    lr: float
    plan: Schedule

    methods: ClassVar[tuple[str, ...]] = TRAINED
    tuned: ClassVar[dict[str, str]] = {m: "lr" for m in TRAINED}


@dataclass(frozen=True, kw_only=True)
class PersonalRecord(RunRecord):
    """One method's scores from one run (``accuracy`` and ``curve``: mean seen-client test accuracy).

    Attributes
    ----------
    seen_accuracy, unseen_accuracy
        Mean test accuracy (percent) over seen and over unseen clients.
    seen_validation
        Mean accuracy of the seen clients on their validation draws (what tuning reads).
    per_client
        ``(client, seen, test accuracy)`` of every client.
    """

    seen_accuracy: float = math.nan
    unseen_accuracy: float = math.nan
    seen_validation: float = math.nan
    per_client: tuple[tuple[int, bool, float], ...] = ()


# ----- scoring ---------------------------------------------------------------------------
Inputs = ClientSets | UnseenClientData
"""What a predictor receives of a client: a seen client's sets, or an unseen client's sealed inputs."""
Predict = Callable[[Inputs, np.ndarray, int], np.ndarray]
"""``predict(client inputs, x, client id)`` -> logits for ``x``."""


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


def score_clients(fed: Federation, predict: Predict) -> tuple[tuple[int, bool, float], ...]:
    """``(client, seen, test accuracy)`` of every client.

    Unseen clients are scored through their sealed labels after the prediction is fixed.
    """
    seen, unseen = fed.split()
    sets = client_sets(fed)
    rows = [(c, True, _accuracy(predict(sets[c], sets[c].x_test, c), sets[c].y_test)) for c in seen]
    for c in unseen:
        inputs, test = sealed(fed, c)
        rows.append((c, False, test.labels_for_scoring(predict(inputs, test.x, c).argmax(1))))
    return tuple(sorted(rows))


def seen_validation(fed: Federation, predict: Predict) -> float:
    """Mean accuracy of the seen clients on their validation draws (no unseen client, no test image)."""
    sets = client_sets(fed)
    return float(np.mean([_accuracy(predict(sets[c], sets[c].x_val, c), sets[c].y_val) for c in fed.split()[0]]))


def majority_levels(fed: Federation) -> tuple[float, float]:
    """The trivial level of seen and of unseen clients: mean share of each client's most frequent test label (%)."""
    seen, unseen = fed.split()
    sets = client_sets(fed)
    share = {c: 100.0 * np.bincount(sets[c].y_test).max() / len(sets[c].y_test) for c in seen + unseen}
    return float(np.mean([share[c] for c in seen])), float(np.mean([share[c] for c in unseen]))


def global_predictor(fed: Federation, weights: dict[str, np.ndarray], em: bool = False) -> Predict:
    """One global model for every client; with ``em``, its posteriors re-weighted to the client's EM prior."""
    model = build_model(fed.spec, seed=0)
    set_weights(model, weights)
    model.eval()
    prior = training_prior(fed)

    @torch.no_grad()
    def predict(inputs: Inputs, x: np.ndarray, client: int) -> np.ndarray:
        logits = model(torch.from_numpy(x)).numpy()
        if not em:
            return logits
        new = em_label_prior(_softmax(model(torch.from_numpy(inputs.x)).numpy()), prior)
        return np.log(reweight_posteriors(_softmax(logits), prior, new) + 1e-12)

    return predict


def fedrep_predictor(fed: Federation, weights: dict[str, np.ndarray], strategy: FedRep,
                     finetune: LocalSettings | None = None, share: float = 0.0) -> Predict:
    """The shared body with each seen client's own head; an unseen (or never-sampled) client gets the mean head.

    With ``finetune``, an unseen client instead labels a ``share`` of its samples
    (:meth:`~repro.federated.personal.UnseenClientData.offer_labels`) and fits the mean head on them for
    ``finetune.steps`` steps with the body frozen (:func:`repro.federated.fedrep.fine_tune_head`), as FedRep
    serves a new client.
    """
    model = build_model(fed.spec, seed=0)
    seen, _ = fed.split()
    mean = strategy.mean_head()
    partition = {c: i for i, c in enumerate(seen)}
    tuned: dict[int, dict[str, np.ndarray]] = {}

    def head_of(inputs: Inputs, client: int) -> dict[str, np.ndarray]:
        if client in partition or finetune is None or not isinstance(inputs, UnseenClientData):
            return strategy.heads.get(partition.get(client, -1), mean)
        if client not in tuned:
            set_weights(model, {**weights, **mean})
            x, y = inputs.offer_labels(share, seed=finetune.seed + client)
            fine_tune_head(model, x, y, finetune)
            tuned[client] = {k: v.detach().numpy().copy() for k, v in model.state_dict().items() if k in mean}
        return tuned[client]

    def predict(inputs: Inputs, x: np.ndarray, client: int) -> np.ndarray:
        set_weights(model, {**weights, **head_of(inputs, client)})
        model.eval()
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()

    return predict


def hyper_predictor(spec: HyperSpec, weights: dict[str, np.ndarray]) -> Predict:
    """Each client's head generated from its own unlabelled inputs."""
    model = build_hypernet(spec, seed=0)
    set_weights(model, weights)
    return lambda inputs, x, client: personal_logits(model, inputs.x, x)


# ----- runs ------------------------------------------------------------------------------
def setup(job: PersonalRun) -> tuple[SeededFedAvg, ClientApp, ArrayRecord]:
    """The strategy, the client app and the initial global record of ``job``'s method."""
    fed, plan = job.fed, job.plan
    seen, _ = fed.split()
    sets = client_sets(fed)

    def data(_spec: TaskSpec, pid: int) -> tuple[np.ndarray, np.ndarray]:
        return sets[seen[pid]].x, sets[seen[pid]].y

    local = {"steps": plan.steps, "lr": job.lr, "momentum": plan.momentum, "batch-size": plan.batch_size}
    cfg = job.run_config
    if job.method == "hypernet":
        hyper = fed.hyper_spec(plan.descriptor, plan.hyper_hidden)
        return (SeededFedAvg(plan.active_clients, local, seed=job.seed),
                make_hyper_client_app(hyper, lambda pid: data(fed.spec, pid), cfg), hyper_initial(hyper, job.seed))
    if job.method == "fedrep":
        return (FedRep(plan.active_clients, {**local, "head-steps": plan.head_steps}, seed=job.seed),
                make_fedrep_client_app(fed.spec, data, cfg), initial_arrays(fed.spec, job.seed))
    return (SeededFedAvg(plan.active_clients, local, seed=job.seed),
            client_app_with(lambda msg, context: train_shared(fed.spec, msg, context, data), cfg),
            initial_arrays(fed.spec, job.seed))


def predictors(job: PersonalRun, strategy: SeededFedAvg, weights: dict[str, np.ndarray]) -> dict[str, Predict]:
    """The methods ``job``'s run serves (:data:`SERVES`), each as a predictor."""
    fed, plan = job.fed, job.plan
    if job.method == "hypernet":
        return {"hypernet": hyper_predictor(fed.hyper_spec(plan.descriptor, plan.hyper_hidden), weights)}
    if isinstance(strategy, FedRep):
        finetune = LocalSettings(steps=plan.finetune_steps, batch_size=plan.batch_size, lr=job.lr, momentum=plan.momentum,
                                 seed=job.seed)
        return {"fedrep": fedrep_predictor(fed, weights, strategy),
                "fedrep_ft": fedrep_predictor(fed, weights, strategy, finetune, plan.finetune_share)}
    return {"fedavg": global_predictor(fed, weights), "fedavg_em": global_predictor(fed, weights, em=True)}


def run_one(job: PersonalRun) -> list[PersonalRecord]:
    """Train ``job`` on the seen clients (in-process Flower engine) and score its method(s) on every client."""
    fed = job.fed
    strategy, app, initial = setup(job)

    def seen_mean(arrays: ArrayRecord) -> dict[str, float]:
        if isinstance(strategy, FedRep) and not strategy.heads:
            return {"accuracy": math.nan, "loss": math.nan}
        predict = next(iter(predictors(job, strategy, from_arrayrecord(arrays)).values()))
        rows = score_clients(fed, predict)
        return {"accuracy": float(np.mean([a for _, s, a in rows if s])), "loss": math.nan}

    num_rounds, evaluated = job.schedule()
    eval_rounds = tuple(r for r in evaluated if r > 0)  # FedRep has no heads before its first round
    hist = job.play(strategy, app, Simulation(num_clients=len(fed.split()[0]), initial=initial, evaluate=seen_mean,
                                              num_rounds=num_rounds, eval_rounds=eval_rounds))
    assert hist.final_arrays is not None
    out = []
    for method, predict in predictors(job, strategy, from_arrayrecord(hist.final_arrays)).items():
        rows = score_clients(fed, predict)
        seen_acc = float(np.mean([a for _, s, a in rows if s]))
        summary = RunSummary.of(History(rounds=hist.rounds, accuracy=hist.accuracy))
        out.append(PersonalRecord(method=method, seed=job.seed, setting=job.lr, accuracy=seen_acc,
                                  budget_accuracy=summary.budget_accuracy,
                                  curve=tuple((float(r), float(a)) for r, a in summary.curve) if method in TRAINED else (),
                                  seen_accuracy=seen_acc, unseen_accuracy=float(np.mean([a for _, s, a in rows if not s])),
                                  seen_validation=seen_validation(fed, predict), per_client=rows))
    return out


def _flatten(done: list[list[PersonalRecord]]) -> list[PersonalRecord]:
    return [r for rs in done for r in rs]


def tune(params: Params) -> tuple[tuple[Choice, ...], pd.DataFrame]:
    """Each trained method's learning rate with the best mean seen-client validation accuracy on the tuning seed.

    Every method tries the same grid (FedAvg + EM and FedRep's labelled variant share the runs of their
    trained method), chosen by :func:`repro.federated.tuning.best_settings`; no test draw and no unseen client
    plays a part.  A grid of one value is taken without a run.
    """
    grid = tuple(sorted(params.lrs))
    if len(grid) == 1:
        return (tuple(Choice(method=m, value=grid[0], score=math.nan, grid=grid) for m in TRAINED),
                pd.DataFrame(columns=list(RECORD_COLUMNS)))
    fed, schedule = params.federation(), params.schedule()
    done = _flatten(execute(run_one, [schedule.job(m, params.tune_seed, fed, lr) for m in TRAINED for lr in grid],
                            params.workers, desc="pfl-unseen tuning"))
    tried = records_frame(done, RECORD_COLUMNS)
    return best_settings(tried[tried.method.isin(TRAINED)], TUNING_METRIC), tried


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the chapter's comparison produced.

    Attributes
    ----------
    final
        One row per method and seed: :data:`RECORD_COLUMNS`.
    clients
        ``method, seed, client, seen, accuracy`` for every client.
    curves
        ``method, seed, round, accuracy`` (mean seen-client test accuracy at every evaluation, trained methods).
    choices, tuning
        The learning rate each trained method kept, and the tuning runs.
    trivial_seen, trivial_unseen
        The trivial level (mean share of each client's most frequent test label, percent) of seen and of
        unseen clients.
    held_out_group
        The unseen clients of the held-out shift group.
    """

    final: pd.DataFrame
    clients: pd.DataFrame
    curves: pd.DataFrame
    choices: tuple[Choice, ...]
    tuning: pd.DataFrame
    trivial_seen: float
    trivial_unseen: float
    held_out_group: tuple[int, ...]


def run(params: Params) -> Results:
    """Tune every trained method on the tuning seed, then train and score the tuned methods for every seed."""
    choices, tuning = tune(params)
    lr = chosen(choices)
    fed, schedule = params.federation(), params.schedule()
    done = _flatten(execute(run_one, [schedule.job(m, s, fed, lr[m]) for s in params.seeds for m in TRAINED],
                            params.workers, desc="pfl-unseen comparison"))
    clients = pd.DataFrame([{"method": r.method, "seed": r.seed, "client": c, "seen": s, "accuracy": a}
                            for r in done for c, s, a in r.per_client])
    trivial_seen, trivial_unseen = majority_levels(fed)
    return Results(final=records_frame(done, RECORD_COLUMNS), clients=clients,
                   curves=curves_frame([r for r in done if r.method in TRAINED]), choices=choices, tuning=tuning,
                   trivial_seen=trivial_seen, trivial_unseen=trivial_unseen,
                   held_out_group=tuple(fed.held_out_group()))


def _column(final: pd.DataFrame, method: str, column: str) -> pd.Series:
    return final[final.method == method].set_index("seed")[column]


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence: the hypernetwork against each baseline per seed, with both arms (points)."""
    final = results.final
    seeds = sorted(_column(final, "hypernet", "seen_accuracy").index)

    def against(base: str, column: str, trivial: float, reverse: bool = False) -> Evidence:
        a, b = _column(final, "hypernet", column), _column(final, base, column)
        values = [float(b[s] - a[s]) if reverse else float(a[s] - b[s]) for s in seeds]
        return Evidence(values=values, arms={"hypernet": [float(a[s]) for s in seeds], base: [float(b[s]) for s in seeds]},
                        trivial=trivial)

    unseen, seen = results.trivial_unseen, results.trivial_seen
    return {
        "unseen_gain_vs_fedavg": against("fedavg", "unseen_accuracy", unseen),
        "unseen_gain_vs_em": against("fedavg_em", "unseen_accuracy", unseen),
        "unseen_gain_vs_fedrep": against("fedrep", "unseen_accuracy", unseen),
        "unseen_gap_to_fedrep_finetuned": against("fedrep_ft", "unseen_accuracy", unseen, reverse=True),
        "seen_gain_vs_fedavg": against("fedavg", "seen_accuracy", seen),
        "seen_gain_vs_fedrep": against("fedrep", "seen_accuracy", seen),
    }


def unseen_means(results: Results) -> dict[str, float]:
    """Every method's mean unseen-client accuracy over seeds (percent), in :data:`METHODS` order."""
    means = results.final.groupby("method").unseen_accuracy.mean()
    return {m: float(means[m]) for m in METHODS}


def held_out_gain(results: Results) -> float:
    """The hypernetwork's mean gain over FedAvg on the unseen clients of the held-out shift group (points)."""
    c = results.clients
    held = c[~c.seen & c.client.isin(results.held_out_group)]
    return float(held[held.method == "hypernet"].accuracy.mean() - held[held.method == "fedavg"].accuracy.mean())


# ----- figures and tables ----------------------------------------------------------------------
def shift_figure(fed: Federation) -> Figure:
    """One training image seen through every group's feature shift (the last group is held out)."""
    ds, _ = load_task_data(fed.spec)
    side = int(round(math.sqrt(ds.num_features)))
    fig, axes = plt.subplots(1, fed.groups, figsize=(1.5 * fed.groups, 1.8))
    for g, (ax, shift) in enumerate(zip(axes, fed.shifts())):
        ax.imshow(shift.apply(ds.x_train[:1], 0.0, 1.0).reshape(side, side), cmap="gray_r", vmin=0, vmax=1)
        ax.set_title("held out" if g == fed.groups - 1 else f"group {g}", fontsize=8)
        ax.set_axis_off()
    fig.tight_layout()
    return fig


def accuracy_bars(results: Results) -> Figure:
    """Seen and unseen clients' mean accuracy per method (mean over seeds, error bar = sd): the abstract's two columns."""
    final = results.final
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(METHODS)
    for j, m in enumerate(METHODS):
        r = final[final.method == m]
        ax.bar(np.arange(2) + (j - (len(METHODS) - 1) / 2) * width, [r.seen_accuracy.mean(), r.unseen_accuracy.mean()],
               width, yerr=[seed_sd(r.seen_accuracy), seed_sd(r.unseen_accuracy)], capsize=2, color=COLOURS[m],
               label=LABELS[m])
    for x, level in ((0, results.trivial_seen), (1, results.trivial_unseen)):
        ax.hlines(level, x - 0.45, x + 0.45, color="k", lw=0.8, ls=":")
    ax.set_xticks(range(2), ["seen clients", "unseen clients"])
    ax.set_ylabel("mean client accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def unseen_scatter(results: Results) -> Figure:
    """Each unseen client's accuracy under FedAvg against the hypernetwork's (mean over seeds), held-out group marked."""
    c = results.clients
    sel = c[~c.seen].groupby(["client", "method"]).accuracy.mean().unstack()
    held = sel.index.isin(results.held_out_group)
    fig, ax = plt.subplots(figsize=(4.4, 4.2))
    for mask, name, marker in ((held, "held-out shift group", "s"), (~held, "seen shift groups", "o")):
        ax.scatter(sel.fedavg[mask], sel.hypernet[mask], marker=marker, label=name)
    ax.plot([0, 100], [0, 100], color="k", lw=0.8)
    ax.set_xlabel("FedAvg accuracy (%)")
    ax.set_ylabel("hypernetwork accuracy (%)")
    ax.set_title("unseen clients")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def seen_curves(results: Results) -> Figure:
    """Mean seen-client accuracy against rounds per trained method (mean over seeds, band min to max)."""
    return accuracy_curves(results.curves, "method", TRAINED, LABELS, COLOURS, "mean seen-client accuracy (%)")


def tuning_summary(results: Results) -> pd.DataFrame:
    """Per trained method: mean seen-client validation (and test) accuracy at every rate, and the rate kept."""
    lr = chosen(results.choices)
    if results.tuning.empty:
        return pd.DataFrame({"method": [LABELS[m] for m in TRAINED], "chosen on validation": [f"{lr[m]:g}" for m in TRAINED]})
    t = results.tuning[results.tuning.method.isin(TRAINED)]
    val = t.pivot_table(index="method", columns="setting", values=TUNING_METRIC).reindex(list(TRAINED))
    test = t.pivot_table(index="method", columns="setting", values="seen_accuracy").reindex(list(TRAINED))
    return pd.DataFrame({"method": [LABELS[m] for m in TRAINED],
                         "seen validation per lr (%)": [", ".join(f"{v:g}: {a:.1f}" for v, a in val.loc[m].items())
                                                        for m in TRAINED],
                         "seen test per lr (%)": [", ".join(f"{v:g}: {a:.1f}" for v, a in test.loc[m].items())
                                                  for m in TRAINED],
                         "chosen on validation": [f"{lr[m]:g}" for m in TRAINED]})


def summary_table(results: Results) -> pd.DataFrame:
    """Seen and unseen accuracy (mean ± sd over seeds) per method with its tuned learning rate."""
    rows = []
    for m in METHODS:
        r = results.final[results.final.method == m]
        rows.append({"method": LABELS[m], "learning rate": f"{r.setting.iloc[0]:g}",
                     "seen clients (%)": mean_sd(r.seen_accuracy), "unseen clients (%)": mean_sd(r.unseen_accuracy),
                     "seeds": len(r)})
    return pd.DataFrame(rows)
