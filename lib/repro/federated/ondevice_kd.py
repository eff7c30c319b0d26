"""On-device knowledge distillation with a small auxiliary model (Lim, Jo, Zhang and Lee; the authors' HeteroKDFL code).

Two models share one global record: a small auxiliary model ``A`` (keys
``aux.*``) that every client can train, and a large target model ``L``
(keys ``large.*``) that only strong clients can hold.  One round of the
method is two Flower rounds of :class:`TwoModelFedAvg`:

1. *aux step* (odd Flower rounds): every sampled client trains ``A`` on
   its **labelled** local data; the server averages ``A``;
2. *large step* (even Flower rounds): every strong client receives the
   new ``A`` (teacher) and ``L`` (student), trains ``L`` with cross-entropy
   on its labelled data and then distils ``A`` into ``L`` on its
   **unlabelled** local data with the weighted loss
   ``w(r) T^2 KL(softmax(A(x)/T) || softmax(L(x)/T))``
   (:func:`repro.federated.kd.kd_loss`, :func:`kd_weight`); the server
   averages ``L`` over them.  This is the authors' ``distill_round``
   (``solvers/fedavg.py`` of jjihyunh/HeteroKDFL: the private-data CE steps,
   then the KD steps with ``T = 3``, ``l_max = 0.5``); as there, every strong
   client takes part in step 2 (``train.py``), not only the sampled ones.
   ``kd`` alone (no CE on ``L``) is the abstract's reading, kept as a variant.

Weak clients never receive or send ``L`` (the strategy's
:attr:`TwoModelFedAvg.traffic` records every message's keys).  Both
averages are Flower's sample-weighted ``aggregate_arrayrecords``
(:func:`repro.federated.partial.layerwise_average`, which leaves the other
model's arrays as they are).

A :class:`Recipe` also expresses the baselines in the same loop: FedAvg of
``L`` on the strong clients' labelled data (no aux step), FedAvg of ``A``
over every client (no large step), and FedDF-style server distillation,
where the strong clients train ``L`` with cross-entropy and the server then
distils the round's client models' mean logits into ``L`` on a central
unlabelled pool (:func:`repro.federated.feddf.server_distill`).

Each client's data are split once into a labelled and an unlabelled part
(:func:`repro.federated.feddf.labelled_split`, seeded by the data seed and
the partition id, so every engine and method sees the same split).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from repro import models
from repro.devices import resolve_device
from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.client import LocalSettings, RunConfig, client_app_with, client_seed, train_locally
from repro.federated.engine import EvalFn
from repro.federated.feddf import DistillSteps, distill, labelled_split, server_distill
from repro.federated.partial import layerwise_average
from repro.federated.replies import number, ordered_replies, partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model, client_data, evaluate, load_task_data
from repro.federated.tiers import Tier
from repro.models import get_weights, set_weights

AUX, LARGE = "aux", "large"
"""Prefixes of the two models' arrays in the global record."""
LARGE_LOSSES = ("none", "ce", "kd", "ce-then-kd")
"""What strong clients train ``L`` with: nothing, labelled cross-entropy, distillation from ``A``, or CE then KD."""
DISTILLING = ("kd", "ce-then-kd")
PHASE_KEY, LOSS_KEY, TEMPERATURE_KEY, WEIGHT_KEY = "phase", "large-loss", "temperature", "kd-weight"


def kd_weight(server_round: int, final: float = 0.5, rampup: int = 300) -> float:
    """The authors' KD weight at round ``server_round``: ``final * exp(-5 (1 - r / rampup)^2)``, then ``final``."""
    if rampup <= 0 or server_round >= rampup:
        return final
    return float(final * np.exp(-5.0 * (1.0 - server_round / rampup) ** 2))


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """Which steps a round runs.

    Attributes
    ----------
    train_aux
        Step 1: every sampled client trains ``A`` on its labelled data.
    large_loss
        Step 2 on strong clients, one of :data:`LARGE_LOSSES`.
    server_pool_steps
        FedDF-style server distillation steps into ``L`` after step 2 (0: none).
    """

    train_aux: bool
    large_loss: str
    server_pool_steps: int = 0

    def __post_init__(self) -> None:
        if self.large_loss not in LARGE_LOSSES:
            raise ValueError(f"large_loss must be one of {LARGE_LOSSES}, got {self.large_loss!r}")
        if self.large_loss in DISTILLING and not self.train_aux:
            raise ValueError("distillation from A needs the aux step (train_aux=True)")
        if self.server_pool_steps < 0:
            raise ValueError(f"server_pool_steps must be >= 0, got {self.server_pool_steps}")


def build_aux(spec: TaskSpec, aux_hidden: Sequence[int]) -> torch.nn.Module:
    """The auxiliary model ``A``: an MLP of ``aux_hidden`` on the task (initialised from torch's current state)."""
    ds, _ = load_task_data(spec)
    return models.mlp(ds.num_features, aux_hidden, ds.num_classes)


def build_pair(spec: TaskSpec, aux_hidden: Sequence[int], seed: int) -> torch.nn.ModuleDict:
    """``{"large": L, "aux": A}``: ``L`` is the task's model for ``seed`` (built first), then ``A``."""
    large = build_model(spec, seed)
    return torch.nn.ModuleDict({LARGE: large, AUX: build_aux(spec, aux_hidden)})


def pair_arrays(spec: TaskSpec, aux_hidden: Sequence[int], seed: int) -> ArrayRecord:
    """The initial global record of a run (both models)."""
    return to_arrayrecord(get_weights(build_pair(spec, aux_hidden, seed)))


def keys_of(keys: Iterable[str], model: str) -> list[str]:
    """The keys of ``model`` (:data:`AUX` or :data:`LARGE`) among ``keys``."""
    return [k for k in keys if k.startswith(model + ".")]


def strip(weights: dict[str, np.ndarray], model: str) -> dict[str, np.ndarray]:
    """``model``'s arrays with their prefix removed (a plain model's state dict)."""
    n = len(model) + 1
    return {k[n:]: v for k, v in weights.items() if k.startswith(model + ".")}


def pair_evaluator(spec: TaskSpec, aux_hidden: Sequence[int], model: str = LARGE) -> EvalFn:
    """Test accuracy and loss of one model of the global record (``L`` by default)."""
    pair = build_pair(spec, aux_hidden, seed=0)

    def evaluate_model(arrays: ArrayRecord) -> dict[str, float]:
        set_weights(pair[model], strip(from_arrayrecord(arrays), model))
        return evaluate(spec, pair[model])

    return evaluate_model


def local_parts(spec: TaskSpec, partition_id: int, labelled_share: float
                ) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """A client's labelled ``(x, y)`` and its unlabelled ``x`` (the labels of the latter are never returned)."""
    x, y = client_data(spec, partition_id)
    split = labelled_split(len(y), labelled_share, seed=client_seed(spec.data_seed, partition_id))
    return (x[split.labelled], y[split.labelled]), x[split.unlabelled]


_PAIRS: dict[tuple[TaskSpec, tuple[int, ...]], torch.nn.ModuleDict] = {}


def train_two_model(spec: TaskSpec, aux_hidden: Sequence[int], labelled_share: float, msg: Message,
                    context: Context) -> Message:
    """One client step: train ``A`` (aux phase) or ``L`` (large phase) as the config says; reply with that model.

    In the large phase ``ce`` trains ``L`` on the labelled part, ``kd``
    distils the received ``A`` into ``L`` on the unlabelled part (the
    round's local settings, loss weight 1), and ``ce-then-kd`` runs the CE
    steps and then the KD steps weighted by the config's ``kd-weight`` (under
    SGD with momentum a loss weight ``w`` is the learning rate times ``w``).
    """
    torch.set_num_threads(1)
    pid = int(number(context.node_config, "partition-id"))
    cfg = msg.content["config"]
    if not isinstance(cfg, ConfigRecord):
        raise TypeError(f"an on-device KD message's 'config' must be a ConfigRecord, got {type(cfg).__name__}")
    key = (spec, tuple(aux_hidden))
    if key not in _PAIRS:
        _PAIRS[key] = build_pair(spec, aux_hidden, seed=0)
    pair = _PAIRS[key]
    received = from_arrayrecord(msg.content["arrays"])
    for name in (AUX, LARGE):
        if keys_of(received, name):
            set_weights(pair[name], strip(received, name))
    settings = LocalSettings.read(cfg, context, pid)
    (xl, yl), xu = local_parts(spec, pid, labelled_share)
    phase, loss_kind = str(cfg[PHASE_KEY]), str(cfg.get(LOSS_KEY, "none"))
    temperature = number(cfg, TEMPERATURE_KEY) if TEMPERATURE_KEY in cfg else 1.0
    if phase == AUX:
        trained, used = AUX, len(yl)
        loss = train_locally(pair[AUX], xl, yl, settings)
    elif loss_kind == "ce":
        trained, used = LARGE, len(yl)
        loss = train_locally(pair[LARGE], xl, yl, settings)
    elif loss_kind in DISTILLING:
        if len(xu) == 0:
            raise ValueError(f"client {pid} has no unlabelled sample to distil on")
        teacher = pair[AUX].to(resolve_device(settings.device)).eval()

        def soft_targets(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return teacher(x)

        trained, used, weight, loss = LARGE, len(xu), 1.0, 0.0
        if loss_kind == "ce-then-kd":
            loss = train_locally(pair[LARGE], xl, yl, settings)
            used, weight = len(xu) + len(yl), number(cfg, WEIGHT_KEY) if WEIGHT_KEY in cfg else 1.0
        try:
            kd = distill(pair[LARGE], soft_targets, xu,
                         DistillSteps(steps=settings.steps, batch_size=settings.batch_size, lr=weight * settings.lr,
                                      temperature=temperature, seed=settings.seed + 1, momentum=settings.momentum,
                                      device=settings.device))
        finally:
            teacher.to("cpu")
        loss = kd if loss_kind == "kd" else loss
    else:
        raise ValueError(f"client {pid}: phase {phase!r} with large loss {loss_kind!r} trains nothing")
    weights = {f"{trained}.{k}": v for k, v in get_weights(pair[trained]).items()}
    metrics: dict[str, int | float | list[int] | list[float]] = {"num-examples": used, "train-loss": loss,
                                                                  "partition-id": pid}
    return Message(RecordDict({"arrays": to_arrayrecord(weights), "metrics": MetricRecord(metrics)}), reply_to=msg)


def make_two_model_client_app(spec: TaskSpec, aux_hidden: Sequence[int], labelled_share: float,
                              run_config: RunConfig | None = None) -> ClientApp:
    """The ``ClientApp`` of the two-model rounds (see :func:`train_two_model`)."""
    hidden = tuple(aux_hidden)
    return client_app_with(lambda msg, context: train_two_model(spec, hidden, labelled_share, msg, context),
                           run_config)


@dataclass(frozen=True, kw_only=True)
class Traffic:
    """One message of a run: who, in which Flower round, and the arrays it carried each way."""

    server_round: int
    partition_id: int
    down: tuple[str, ...]
    up: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class KdSchedule:
    """The distillation of the large step: temperature ``T``, and the KD weight of ``ce-then-kd`` with its ramp-up.

    Attributes
    ----------
    temperature
        Distillation temperature ``T``.
    kd_final, kd_rampup
        The KD weight of ``ce-then-kd`` and its ramp-up in rounds (:func:`kd_weight`).
    """

    temperature: float = 3.0
    kd_final: float = 0.5
    kd_rampup: int = 300


@dataclass(frozen=True, kw_only=True)
class ServerPool:
    """FedDF's server side: its central unlabelled inputs and what it needs to rebuild the clients' models.

    Attributes
    ----------
    pool
        The central unlabelled inputs.
    spec, aux_hidden
        The task and ``A``'s widths.
    """

    pool: np.ndarray
    spec: TaskSpec
    aux_hidden: tuple[int, ...]


class TwoModelFedAvg(SeededFedAvg):
    """The two-step rounds of on-device KD (and of its baselines, by :class:`Recipe`) as one Flower strategy.

    Flower round ``2r - 1`` is step 1 of round ``r`` (the aux step) with the
    ``active_clients`` sampled clients, Flower round ``2r`` its step 2 (the
    large step) with every strong client; the clients seed their batches
    from ``r``.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    tier_of
        Every partition id's tier; only ``strong`` clients take part in step 2.
    recipe
        The steps to run.
    kd
        The large step's distillation (:class:`KdSchedule`).
    server
        FedDF's pool and task (:class:`ServerPool`; needed when ``recipe.server_pool_steps > 0``).
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], tier_of: Sequence[Tier], recipe: Recipe,
                 seed: int = 0, kd: KdSchedule = KdSchedule(), server: ServerPool | None = None) -> None:
        super().__init__(active_clients, local, seed=seed, resample_every=2)
        if recipe.server_pool_steps and (server is None or not len(server.pool)):
            raise ValueError("parameter 'server': server distillation needs the task spec and a non-empty pool")
        self.tier_of = list(tier_of)
        self.recipe = recipe
        self.kd = kd
        self.server = server
        self.traffic: list[Traffic] = []
        self._current: ArrayRecord | None = None
        self._aux_replies: list[dict[str, np.ndarray]] = []
        self._sent: dict[int, Traffic] = {}

    @staticmethod
    def phase(server_round: int) -> str:
        """:data:`AUX` on odd Flower rounds, :data:`LARGE` on even ones."""
        return AUX if server_round % 2 == 1 else LARGE

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Step 1: ``A`` to every sampled client; step 2: ``L`` (and ``A`` as teacher) to every strong client."""
        self.ensure_comm(arrays)
        self._current = arrays
        pids = self.sample(server_round)
        phase = self.phase(server_round)
        keys = list(arrays.keys())
        aux, large = keys_of(keys, AUX), keys_of(keys, LARGE)
        if phase == AUX:
            targets = pids if self.recipe.train_aux else []
            down, up = aux, aux
        else:
            strong = [p for p in sorted(self.node_of) if self.tier_of[p].name == "strong"]
            targets = strong if self.recipe.large_loss != "none" else []
            down = large + (aux if self.recipe.large_loss in DISTILLING else [])
            up = large
        r = (server_round + 1) // 2
        cfg = ConfigRecord({**dict(config), **self.local, "server-round": r, PHASE_KEY: phase,
                            LOSS_KEY: self.recipe.large_loss, TEMPERATURE_KEY: float(self.kd.temperature),
                            WEIGHT_KEY: kd_weight(r - 1, self.kd.kd_final, self.kd.kd_rampup)})
        send = ArrayRecord({k: arrays[k] for k in down})
        self._sent = {}
        messages = []
        for p in targets:
            self._sent[p] = Traffic(server_round=server_round, partition_id=p, down=tuple(down), up=tuple(up))
            self.traffic.append(Traffic(server_round=server_round, partition_id=p, down=tuple(down), up=tuple(up)))
            messages.append(Message(RecordDict({"arrays": send, "config": cfg}), dst_node_id=self.node_of[p],
                                    message_type=MessageType.TRAIN))
        return messages

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Average the trained model over the replies; after step 2, FedDF's server distillation if asked."""
        replies = ordered_replies(server_round, replies)
        assert self._current is not None and self.comm is not None
        for m in replies:
            sent = self._sent[partition_of(m)]
            self.comm.record(server_round, list(sent.down), list(sent.up), 1)
        if self.phase(server_round) == AUX:
            self._aux_replies = [from_arrayrecord(m.content["arrays"]) for m in replies]
        if not replies:
            return self._current, None
        arrays = layerwise_average(self._current, [m.content for m in replies])
        if self.phase(server_round) == LARGE and self.recipe.server_pool_steps:
            arrays = self.distil_on_server(server_round, arrays, [from_arrayrecord(m.content["arrays"]) for m in replies])
        metrics = self.train_metrics_aggr_fn([m.content for m in replies], self.weighted_by_key)
        return arrays, metrics

    def distil_on_server(self, server_round: int, arrays: ArrayRecord,
                         large_replies: list[dict[str, np.ndarray]]) -> ArrayRecord:
        """FedDF: distil the mean logits of this round's client models (``A``s and ``L``s) into the averaged ``L``."""
        assert self.server is not None
        spec = self.server.spec
        teachers = []
        for reply in self._aux_replies + large_replies:
            name = AUX if keys_of(reply, AUX) else LARGE
            model = build_aux(spec, self.server.aux_hidden) if name == AUX else build_model(spec, seed=0)
            set_weights(model, strip(reply, name))
            teachers.append(model)
        weights = from_arrayrecord(arrays)
        student = build_model(spec, seed=0)
        set_weights(student, strip(weights, LARGE))
        how = DistillSteps(steps=self.recipe.server_pool_steps, batch_size=int(self.local["batch-size"]),
                           lr=float(self.local["lr"]), temperature=self.kd.temperature,
                           seed=client_seed(self.seed, server_round), momentum=float(self.local["momentum"]))
        server_distill(student, teachers, self.server.pool, how)
        weights.update({f"{LARGE}.{k}": v for k, v in get_weights(student).items()})
        return to_arrayrecord({k: weights[k] for k in arrays.keys()})
