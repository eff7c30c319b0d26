"""FedGKT, group knowledge transfer (He, Annavaram and Avestimehr, NeurIPS 2020), on Flower's message API.

Each client holds a small model, a feature extractor followed by a small
classifier head, that is never averaged with anyone's.  Every round a client
trains it for its local steps on ``CE + w * KD(server logits)`` (the
distillation term only once the server has sent logits for its samples;
:func:`train_fedgkt`), then sends the server, for every one of its samples,
the extracted features, the label and its own logits.  The server trains a
large model that takes those features as input on ``CE + w * KD(client
logits)`` over everything it received, for a few epochs
(:func:`train_server`), and sends each client the large model's logits for
its samples, the teacher of the client's next round (:class:`FedGKT`).  The
distillation loss is :func:`repro.federated.kd.kd_loss`.

Client ``i``'s model at test time is its own extractor followed by the
server's model (:class:`GktTask.pair`); the method's accuracy is the mean
over clients (:func:`pair_evaluator`).  In FedGKT the clients extract the
test features and the server scores them; the simulation gets the same
numbers by having each reply carry the client's weights too, which the
server keeps for evaluation only (they are not counted as traffic and never
train anything).

The mechanics follow the authors' code (FedML's ``fedgkt``), whose defaults
for the constants are a temperature of 3 (:data:`TEMPERATURE`), a
distillation weight of 1 (:data:`KD_WEIGHT`) and 3 server epochs per round
(:data:`SERVER_EPOCHS`).  There the server weighs ``KD + alpha * CE`` and
the client ``CE + alpha * KD``; at the default ``alpha = 1`` both are the
``CE + w * KD`` used here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from repro.federated.arrays import from_arrayrecord, to_array, to_arrayrecord
from repro.federated.client import (
    LOCAL_STATE_KEY,
    RunConfig,
    begin_round,
    client_app_with,
    finish_round,
    train_locally,
)
from repro.federated.comm import CommLedger
from repro.federated.engine import EvalFn
from repro.federated.kd import kd_loss
from repro.federated.replies import metric, number, ordered_replies, partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model, evaluate, load_task_data
from repro.models import get_weights, mlp, set_weights

TEMPERATURE = 3.0
"""Distillation temperature, both ways (FedML's ``fedgkt`` default)."""
KD_WEIGHT = 1.0
"""Weight of the distillation term beside the cross-entropy, both ways (FedML's ``alpha`` default)."""
SERVER_EPOCHS = 3
"""Epochs the server trains over the received features each round (FedML's ``epochs_server`` default)."""

FEATURES_KEY, LABELS_KEY, LOGITS_KEY = "features", "labels", "client-logits"
"""Arrays of a client's reply: its samples' extracted features, their labels and its own logits."""
SERVER_LOGITS_KEY = "server-logits"
"""The array the server sends a client: the large model's logits for each of its samples, in partition order."""
KD_WEIGHT_KEY, TEMPERATURE_KEY = "kd-weight", "kd-temperature"
"""Config keys of the distillation weight and temperature."""
SERVER_PREFIX = "server."
"""Prefix of the server model's arrays in the global record (client ``i``'s are prefixed ``client{i}.``)."""


def client_prefix(partition_id: int) -> str:
    """Prefix of client ``partition_id``'s arrays in the global record."""
    return f"client{partition_id}."


@dataclass(frozen=True, kw_only=True)
class GktTask:
    """The task and FedGKT's two models on it.

    Attributes
    ----------
    spec
        The task (data and partition; its ``hidden`` is not used).
    client_hidden
        Hidden widths of a client's MLP; the extractor is every hidden layer
        (with its ReLU), the head the last linear layer.
    server_hidden
        Hidden widths of the server's MLP, whose input is a client's features
        (:attr:`feature_width` of them).
    """

    spec: TaskSpec
    client_hidden: tuple[int, ...]
    server_hidden: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.client_hidden:
            raise ValueError("client_hidden needs a layer: the extractor's output is what the server learns from")

    @property
    def client_spec(self) -> TaskSpec:
        """The task whose model (:func:`repro.federated.task.build_model`) is a client's small model."""
        return dataclasses.replace(self.spec, hidden=tuple(self.client_hidden))

    @property
    def feature_width(self) -> int:
        """Width of the features a client's extractor sends (its last hidden layer)."""
        return self.client_hidden[-1]

    @property
    def num_classes(self) -> int:
        """Classes of the task."""
        return load_task_data(self.spec)[0].num_classes

    def client_model(self, seed: int) -> torch.nn.Sequential:
        """A client's small model (extractor + head), initialised from ``seed``."""
        model = build_model(self.client_spec, seed)
        assert isinstance(model, torch.nn.Sequential)
        return model

    def server_model(self, seed: int) -> torch.nn.Sequential:
        """The server's large model on the features, initialised from ``seed``."""
        torch.manual_seed(seed)
        return mlp(self.feature_width, self.server_hidden, self.num_classes)

    def pair(self, client: torch.nn.Sequential, server: torch.nn.Module) -> torch.nn.Sequential:
        """Client ``client``'s extractor followed by ``server``: the model a client is scored with."""
        return torch.nn.Sequential(extractor(client), server)

    def initial_arrays(self, seed: int) -> ArrayRecord:
        """The global record at round 0: the server model and every client's model (all the same), from ``seed``."""
        server, client = get_weights(self.server_model(seed)), get_weights(self.client_model(seed))
        record = {SERVER_PREFIX + k: v for k, v in server.items()}
        for pid in range(self.spec.num_clients):
            record.update({client_prefix(pid) + k: v for k, v in client.items()})
        return to_arrayrecord(record)

    def pairs(self, arrays: ArrayRecord | dict[str, np.ndarray]) -> Iterator[torch.nn.Sequential]:
        """Every client's extractor followed by the server model, loaded from a global record, in partition order.

        One model is reloaded for each client: a pair is valid until the next one is drawn.
        """
        weights = from_arrayrecord(arrays) if isinstance(arrays, ArrayRecord) else arrays
        server, client = self.server_model(0), self.client_model(0)
        set_weights(server, unprefixed(weights, SERVER_PREFIX))
        pair = self.pair(client, server)
        for pid in range(self.spec.num_clients):
            set_weights(client, unprefixed(weights, client_prefix(pid)))
            yield pair



def unprefixed(weights: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The entries of ``weights`` whose name starts with ``prefix``, named without it."""
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}


def extractor(model: torch.nn.Module) -> torch.nn.Sequential:
    """A client model's feature extractor: every layer but the last (shares the model's parameters).

    Raises
    ------
    TypeError
        If ``model`` is not an ``nn.Sequential``.
    """
    if not isinstance(model, torch.nn.Sequential):
        raise TypeError(f"parameter 'model': a FedGKT client model is an nn.Sequential, got {type(model).__name__}")
    body = model[:-1]
    assert isinstance(body, torch.nn.Sequential)
    return body


def pair_evaluator(task: GktTask) -> EvalFn:
    """Mean over clients of the test accuracy and loss of client ``i``'s extractor followed by the server model."""
    def evaluate_pairs(arrays: ArrayRecord) -> dict[str, float]:
        scores = [evaluate(task.spec, pair) for pair in task.pairs(arrays)]
        return {k: float(np.mean([s[k] for s in scores])) for k in ("accuracy", "loss")}

    return evaluate_pairs


# ----- the client ---------------------------------------------------------------------------
def train_fedgkt(task: GktTask, msg: Message, context: Context) -> Message:
    """A client's round: local SGD on ``CE + w * KD(server logits)``, then its samples' features, labels and logits.

    The small model comes from the message the first time (the server's
    initial one) and from ``context.state`` after that; the distillation
    term is added only when the message carries :data:`SERVER_LOGITS_KEY`
    and the weight is positive, so without it the round is
    :func:`repro.federated.client.train_locally` itself.
    """
    rnd = begin_round(task.client_spec, msg, context)
    model = rnd.model
    weight = number(rnd.config, KD_WEIGHT_KEY) if KD_WEIGHT_KEY in rnd.config else KD_WEIGHT
    temperature = number(rnd.config, TEMPERATURE_KEY) if TEMPERATURE_KEY in rnd.config else TEMPERATURE
    teacher = rnd.received.get(SERVER_LOGITS_KEY)
    penalties = None
    if teacher is not None and weight > 0:
        if teacher.shape != (len(rnd.y), task.num_classes):
            raise ValueError(f"client {rnd.partition_id}: server logits of shape {teacher.shape} for {len(rnd.y)} samples")
        target = torch.from_numpy(np.array(teacher))  # a writable copy of the received array

        def penalties(out: torch.Tensor, idx: torch.Tensor) -> list[torch.Tensor]:
            return [weight * kd_loss(out, target.to(out.device)[idx], temperature)]

    loss = train_locally(model, rnd.x, rnd.y, rnd.settings, penalties=penalties)
    state = to_arrayrecord(get_weights(model))
    context.state[LOCAL_STATE_KEY] = state
    model.eval()
    with torch.no_grad():
        features = extractor(model)(torch.from_numpy(rnd.x))
        logits = list(model.children())[-1](features)  # the head: the model's last layer
    reply = to_arrayrecord({FEATURES_KEY: features.numpy(), LABELS_KEY: rnd.y, LOGITS_KEY: logits.numpy()})
    for k, v in state.items():  # the model's arrays, shared with the state (nothing changes them)
        reply[k] = v
    return finish_round(msg, rnd, reply, loss)


def make_fedgkt_client_app(task: GktTask, run_config: RunConfig | None = None) -> ClientApp:
    """The ``ClientApp`` of a FedGKT client (see :func:`train_fedgkt`)."""
    return client_app_with(lambda msg, context: train_fedgkt(task, msg, context), run_config)


# ----- the server ---------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Received:
    """What the server trains on in one round: every client's samples, concatenated in partition order.

    Attributes
    ----------
    features
        Extracted features, ``(samples, features)``.
    labels
        Labels, ``(samples,)``.
    logits
        The clients' own logits, ``(samples, classes)``: the server's distillation targets.
    """

    features: np.ndarray
    labels: np.ndarray
    logits: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.labels)
        if len(self.features) != n or len(self.logits) != n:
            raise ValueError(f"features ({len(self.features)}), labels ({n}) and logits ({len(self.logits)}) differ in length")


def server_loss(server: torch.nn.Module, data: Received, temperature: float, weight: float) -> float:
    """``CE + weight * KD(client logits)`` of ``server`` over all of ``data`` (no training)."""
    server.eval()
    with torch.no_grad():
        out = server(torch.from_numpy(data.features))
        loss = torch.nn.functional.cross_entropy(out, torch.from_numpy(data.labels))
        if weight > 0:
            loss = loss + weight * kd_loss(out, torch.from_numpy(data.logits), temperature)
    return float(loss)


def train_server(server: torch.nn.Module, data: Received, epochs: int, lr: float, batch_size: int,
                 temperature: float, weight: float, seed: int) -> float:
    """Train ``server`` in place for ``epochs`` epochs of plain SGD on ``CE + weight * KD(client logits)``.

    Each epoch visits every received sample once in a seeded random order,
    ``batch_size`` at a time.

    Returns
    -------
    float
        Mean loss over the steps (NaN when ``epochs`` is 0).
    """
    gen = np.random.default_rng(seed)
    x, y, teacher = (torch.from_numpy(a) for a in (data.features, data.labels, data.logits))
    opt = torch.optim.SGD(server.parameters(), lr=lr)
    server.train()
    losses = []
    for _ in range(epochs):
        order = torch.from_numpy(gen.permutation(len(y)))
        for idx in order.split(batch_size):
            opt.zero_grad()
            out = server(x[idx])
            loss = torch.nn.functional.cross_entropy(out, y[idx])
            if weight > 0:
                loss = loss + weight * kd_loss(out, teacher[idx], temperature)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return float(np.mean(losses)) if losses else float("nan")


class FedGKT(SeededFedAvg):
    """FedGKT's server: collects the clients' features, trains the large model on them, returns its logits.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg` (``local``'s
        ``lr`` and ``batch-size`` are the server's SGD settings too).
    server
        The server's large model (trained in place; on the CPU).
    temperature, kd_weight
        Distillation temperature and weight, both ways.
    server_epochs
        Epochs over the received features per round (0: the server never trains).

    Attributes
    ----------
    server_logits
        Partition id -> the server's logits for that client's samples, sent in the next round.
    server_losses
        Round -> the server's mean training loss.

    The global record the engine evaluates holds the server model
    (:data:`SERVER_PREFIX`) and each client's last reported model
    (:func:`client_prefix`); only the client models' first download,
    the features, labels and logits, and the server's logits are FedGKT's
    traffic and are counted.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], server: torch.nn.Module, seed: int = 0,
                 temperature: float = TEMPERATURE, kd_weight: float = KD_WEIGHT,
                 server_epochs: int = SERVER_EPOCHS) -> None:
        super().__init__(active_clients, local, seed=seed)
        if temperature <= 0 or kd_weight < 0 or server_epochs < 0:
            raise ValueError(f"need temperature > 0, kd_weight >= 0 and server_epochs >= 0; got {temperature}, "
                             f"{kd_weight}, {server_epochs}")
        self.server = server
        self.temperature = float(temperature)
        self.kd_weight = float(kd_weight)
        self.server_epochs = int(server_epochs)
        self.server_logits: dict[int, np.ndarray] = {}
        self.server_losses: dict[int, float] = {}
        self.model_sent: set[int] = set()
        self.sent: dict[int, list[str]] = {}
        self.model_size = 0

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Send each sampled client the settings and its server logits (its initial model the first time)."""
        pids = self.sample(server_round)
        cfg = ConfigRecord({**dict(config), **self.local, "server-round": server_round,
                            KD_WEIGHT_KEY: self.kd_weight, TEMPERATURE_KEY: self.temperature})
        messages, self.sent = [], {}
        for pid in pids:
            record, sent = ArrayRecord(), []
            if pid not in self.model_sent:
                prefix = client_prefix(pid)
                for k, v in arrays.items():
                    if k.startswith(prefix):
                        record[k[len(prefix):]] = v
                sent.append("model")
                self.model_sent.add(pid)
            if pid in self.server_logits:
                record[SERVER_LOGITS_KEY] = to_array(self.server_logits[pid])
                sent.append(SERVER_LOGITS_KEY)
            self.sent[pid] = sent
            messages.append(Message(RecordDict({"arrays": record, "config": cfg}), dst_node_id=self.node_of[pid],
                                    message_type=MessageType.TRAIN))
        self.model_size = sum(int(np.prod(v.shape)) for k, v in arrays.items() if k.startswith(client_prefix(pids[0])))
        return messages

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Train the server model on every reply's features; keep its logits per client; return the global record."""
        replies = ordered_replies(server_round, replies)  # the server trains on every client's samples or on none
        pids = [partition_of(m) for m in replies]
        received = [from_arrayrecord(m.content["arrays"]) for m in replies]
        joined = {k: np.concatenate([r[k] for r in received]) for k in (FEATURES_KEY, LABELS_KEY, LOGITS_KEY)}
        data = Received(features=joined[FEATURES_KEY], labels=joined[LABELS_KEY], logits=joined[LOGITS_KEY])
        self.server_losses[server_round] = train_server(
            self.server, data, self.server_epochs, float(self.local["lr"]), int(self.local["batch-size"]),
            self.temperature, self.kd_weight, seed=int(np.random.SeedSequence([self.seed, server_round]).generate_state(1)[0]))
        self.server.eval()
        with torch.no_grad():
            for pid, r in zip(pids, received):
                self.server_logits[pid] = self.server(torch.from_numpy(r[FEATURES_KEY])).numpy()
        self.record_traffic(server_round, pids, received)
        record = {SERVER_PREFIX + k: v for k, v in get_weights(self.server).items()}
        for pid, r in zip(pids, received):
            record.update({client_prefix(pid) + k: v for k, v in r.items()
                           if k not in (FEATURES_KEY, LABELS_KEY, LOGITS_KEY)})
        losses = [metric(m, "train-loss") for m in replies]
        return to_arrayrecord(record), MetricRecord({"train-loss": float(np.mean(losses)),
                                                     "server-loss": self.server_losses[server_round]})

    def record_traffic(self, server_round: int, pids: list[int], received: list[dict[str, np.ndarray]]) -> None:
        """Count the round's scalars: what went down (:attr:`sent`) and each client's features, labels and logits."""
        sizes: dict[str, int] = {}
        down: list[str] = []
        up: list[str] = []
        for pid, r in zip(pids, received):
            shapes = {"model": self.model_size, SERVER_LOGITS_KEY: r[LOGITS_KEY].size,
                      **{k: r[k].size for k in (FEATURES_KEY, LABELS_KEY, LOGITS_KEY)}}
            sizes.update({f"{pid}/{k}": int(v) for k, v in shapes.items()})
            down += [f"{pid}/{k}" for k in self.sent.get(pid, [])]
            up += [f"{pid}/{k}" for k in (FEATURES_KEY, LABELS_KEY, LOGITS_KEY)]
        if self.comm is None:
            self.comm = CommLedger(sizes=sizes)
        self.comm.record(server_round, down, up, 1)
