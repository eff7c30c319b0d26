"""The Flower ``ClientApp`` shared by the federated chapters, and the local training every client runs.

A client trains the received model for a number of local SGD steps on its
partition.  The shared client keeps its own copy of the model in
``context.state`` so strategies that do not synchronise every layer every
round (FedLAMA, FedLUAR) can leave layers on the clients.

Every train handler of the book is one :func:`begin_round` (load the
arrays, read the settings, fetch the client's data), its own training, and
one :func:`finish_round` (reply with arrays and metrics).

Settings (:class:`LocalSettings`) are read from the message's config first,
then from the run config (Flower's ``context.run_config``; the keys
``steps``, ``lr``, ``momentum``, ``batch-size`` and ``seed``), so a stock
Flower strategy that sends only ``server-round`` trains the same way.  The
mini-batches of a round are drawn from the run seed, the server round and
the partition id (:func:`round_seed`, :func:`client_seed`), whatever the
strategy.

Other message keys:

``config["send-keys"]``
    names of the arrays to send back (default: all);
``arrays``
    the arrays to overwrite locally; model arrays not sent are taken from the
    client's own state, which must then exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, cast

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from repro.devices import resolve_device
from repro.federated.arrays import decode_broadcast, from_array, from_arrayrecord, to_arrayrecord
from repro.federated.replies import number
from repro.federated.task import TaskSpec, client_data, evaluate_on, work_model
from repro.models import get_weights, set_weights

LOCAL_STATE_KEY = "local-model"
RUN_SEED_MULTIPLIER = 1_000_003
"""Round seeds are ``run_seed * RUN_SEED_MULTIPLIER + server_round`` (distinct for every run and round)."""

DataFn = Callable[[TaskSpec, int], tuple[np.ndarray, np.ndarray]]
RunConfig = Mapping[str, "int | float | str | bool"]


@dataclass(frozen=True, kw_only=True)
class LocalSGD:
    """Clients' local training settings."""

    batch_size: int = 16
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0

    def config(self, steps: int) -> dict[str, float | int]:
        """The ``local`` dict strategies send to clients (also a valid run config); ``weight-decay`` only when set."""
        out: dict[str, float | int] = {"steps": steps, "lr": self.lr, "momentum": self.momentum,
                                       "batch-size": self.batch_size}
        if self.weight_decay:
            out["weight-decay"] = self.weight_decay
        return out


def round_seed(run_seed: int, server_round: int) -> int:
    """Seed of one round of a run (the same for every client; :func:`client_seed` makes it per client)."""
    return int(run_seed * RUN_SEED_MULTIPLIER + server_round)


def client_seed(seed_of_round: int, partition_id: int) -> int:
    """Seed of one client's local training in one round (distinct per client and round)."""
    return int(np.random.SeedSequence([seed_of_round, partition_id]).generate_state(1)[0])


@dataclass(frozen=True, kw_only=True)
class LocalSettings:
    """One client's local-training settings for one round.

    Attributes
    ----------
    steps, batch_size, lr, momentum, weight_decay
        Local SGD settings (``weight_decay`` is the L2 penalty torch's SGD adds to the gradients).
    seed
        Seed of the round's mini-batches (from the run seed, the server round and the partition id).
    device
        Where the client trains (the run config's ``device``: ``cpu``, ``cuda`` or ``auto``; default ``cpu``).
    """

    steps: int
    batch_size: int
    lr: float
    momentum: float
    seed: int
    device: str = "cpu"
    weight_decay: float = 0.0

    @classmethod
    def read(cls, cfg: ConfigRecord, context: Context, partition_id: int) -> LocalSettings:
        """Settings from the message config, else the run config; the seed from the run seed and ``server-round``.

        Raises
        ------
        KeyError
            If neither the message nor the run config gives ``steps``, or the
            message lacks ``server-round`` (Flower's strategies always send it).
        """
        run = context.run_config

        def value(key: str, default: float | int | None = None) -> float:
            if key in cfg:
                return number(cfg, key)
            if key in run:
                return number(run, key)
            if default is None:
                raise KeyError(f"client {partition_id}: neither the message config nor the run config sets {key!r}")
            return float(default)

        if "server-round" not in cfg:
            raise KeyError(f"client {partition_id}: the message config lacks 'server-round' "
                           "(needed to seed the batches)")
        run_seed = int(number(run, "seed")) if "seed" in run else 0
        seed = client_seed(round_seed(run_seed, int(number(cfg, "server-round"))), partition_id)
        return cls(steps=int(value("steps")), batch_size=int(value("batch-size", 32)), lr=float(value("lr", 0.05)),
                   momentum=float(value("momentum", 0.0)), seed=seed, device=str(run.get("device", "cpu")),
                   weight_decay=float(value("weight-decay", 0.0)))


def config_of(msg: Message) -> ConfigRecord:
    """The message's config record (``content["config"]``), checked to be one."""
    cfg = msg.content["config"]
    if not isinstance(cfg, ConfigRecord):
        raise TypeError(f"a message's 'config' must be a ConfigRecord, got {type(cfg).__name__}")
    return cfg


def config_number(cfg: ConfigRecord, key: str, default: float) -> float:
    """A number in a config record, ``default`` when the record lacks ``key`` (:func:`~repro.federated.replies.number`)."""
    return number(cfg, key) if key in cfg else float(default)


def config_names(cfg: ConfigRecord, key: str) -> list[str]:
    """A list of names in a config record (``send-keys``), checked to be text."""
    value = cfg[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"config {key!r}: expected a list of names, got {value!r}")
    return [str(v) for v in value]


def local_sgd(
    model: torch.nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    settings: LocalSettings,
    penalties: Callable[[torch.Tensor, torch.Tensor], list[torch.Tensor]] | None = None,
    after_backward: Callable[[torch.nn.Module], None] | None = None,
) -> float:
    """Train ``model`` in place for ``settings.steps`` SGD steps on mini-batches drawn with ``settings.seed``.

    ``penalties``, if given, is called at every step with the batch's logits
    and indices (both on ``settings.device``) and returns extra loss terms (FedProx,
    EWC, FedDyn, SCAFFOLD, distillation), added to the cross-entropy one
    after another.  ``after_backward``, if given, is called at every step with
    the model once its gradients are computed and before the step (to read
    them, not to change them).  The model trains on ``settings.device`` (see
    :func:`repro.devices.resolve_device`) and is back on the CPU on return;
    the batches are drawn on the CPU, so every device sees the same ones.

    Returns
    -------
    float
        The mean training loss over the steps.
    """
    dev = resolve_device(settings.device)
    gen = np.random.default_rng(settings.seed)
    on_cpu = dev.type == "cpu"
    if not on_cpu:
        model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum,
                          weight_decay=settings.weight_decay)
    steps, batch_size = settings.steps, settings.batch_size
    xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
    model.train()
    total = 0.0
    try:
        for _ in range(steps):
            idx = torch.from_numpy(gen.choice(len(y), size=min(batch_size, len(y)), replace=False)).to(dev)
            opt.zero_grad()
            out = model(xt[idx])
            ce = torch.nn.functional.cross_entropy(out, yt[idx])
            loss = ce
            for term in penalties(out, idx) if penalties is not None else ():
                loss = loss + term
            loss.backward()
            if after_backward is not None:
                after_backward(model)
            opt.step()
            total += ce.item()
    finally:
        if not on_cpu:
            model.to("cpu")
    return total / max(steps, 1)


def penalised_sgd(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, settings: LocalSettings,
                  anchor: dict[str, np.ndarray], weight: dict[str, np.ndarray] | float,
                  linear: dict[str, np.ndarray] | None = None) -> float:
    """Local SGD on ``CE + sum weight * (theta - anchor)^2 [+ sum <linear, theta>]``, with :func:`local_sgd`'s batches.

    Parameters
    ----------
    settings
        The round's local-training settings.
    anchor
        The weights the penalty pulls towards (by parameter name).
    weight
        Per-entry penalty weights by name (EWC: ``lambda * F``), or one scalar
        for all (FedProx: ``mu / 2``).  A zero scalar (and no ``linear``) runs
        ``local_sgd`` itself; a zero scalar with ``linear`` drops the quadratic term.
    linear
        Optional per-parameter vectors of a linear term ``<linear, theta>``
        (FedDyn's ``-g_i``, SCAFFOLD's drift correction ``c - c_i``).

    Returns
    -------
    float
        Mean cross-entropy over the steps.
    """
    quadratic = not (isinstance(weight, (int, float)) and weight == 0)
    if not quadratic and linear is None:
        return train_locally(model, x, y, settings)
    named = dict(model.named_parameters())
    dev = resolve_device(settings.device)

    def on_device(values: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(np.asarray(values[k])).to(dev) for k in named}

    anchors = on_device(anchor)
    weights = on_device(weight) if isinstance(weight, dict) else dict.fromkeys(named, float(weight))
    linears = None if linear is None else on_device(linear)

    def terms(out: torch.Tensor, idx: torch.Tensor) -> list[torch.Tensor]:
        extra: list[torch.Tensor] = []
        if quadratic:
            extra.append(cast(torch.Tensor, sum((weights[k] * (p - anchors[k]) ** 2).sum() for k, p in named.items())))
        if linears is not None:
            extra.append(cast(torch.Tensor, sum((linears[k] * p).sum() for k, p in named.items())))
        return extra

    return train_locally(model, x, y, settings, penalties=terms)


train_locally = local_sgd
"""The name the client rounds use for :func:`local_sgd` (one function, two names)."""


# ----- one client round: prologue and epilogue ------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ClientRound:
    """What a train handler starts a round with (:func:`begin_round`).

    Attributes
    ----------
    partition_id
        The client's partition.
    config
        The message's config record.
    received
        Every array the server sent (model arrays and any extra ones, by name).
    model
        The per-process work model, holding the round's starting weights.
    x, y
        The client's training data.
    settings
        The round's local-training settings.
    """

    partition_id: int
    config: ConfigRecord
    received: dict[str, np.ndarray]
    model: torch.nn.Module
    x: np.ndarray
    y: np.ndarray
    settings: LocalSettings


def begin_round(spec: TaskSpec, msg: Message, context: Context, data: DataFn = client_data) -> ClientRound:
    """The prologue of every train handler: load the received model arrays, read the settings, fetch the data.

    Model arrays the server did not send are taken from the client's own
    state (:data:`LOCAL_STATE_KEY`); arrays that are not model arrays
    (importance weights, control variates) stay in ``received`` for the
    handler.
    """
    torch.set_num_threads(1)  # the same float results in every engine
    pid = int(context.node_config["partition-id"])
    cfg = config_of(msg)
    received = decode_broadcast(msg.content["arrays"])
    model = work_model(spec)
    names = list(model.state_dict())
    missing = [k for k in names if k not in received]
    if missing:  # layers the server did not send stay as this client left them
        if LOCAL_STATE_KEY not in context.state:
            raise RuntimeError(f"client {pid} has no local state but received only {sorted(received)}")
        local = context.state[LOCAL_STATE_KEY]
        set_weights(model, {k: from_array(local[k]) for k in missing})
    set_weights(model, {k: v for k, v in received.items() if k in names})
    x, y = data(spec, pid)
    return ClientRound(
        partition_id=pid,
        config=cfg,
        received=received,
        model=model,
        x=x,
        y=y,
        settings=LocalSettings.read(cfg, context, pid),
    )


def own_model_round(
    model: torch.nn.Module, msg: Message, context: Context, data: Callable[[int], tuple[np.ndarray, np.ndarray]]
) -> ClientRound:
    """:func:`begin_round` for a handler that brings its own model (not one built from a ``TaskSpec``).

    Every received array is loaded into ``model`` (the server sends the
    whole model); ``data`` maps the partition id to the client's training arrays.
    """
    torch.set_num_threads(1)  # the same float results in every engine
    pid = int(context.node_config["partition-id"])
    cfg = config_of(msg)
    received = from_arrayrecord(msg.content["arrays"])
    set_weights(model, received)
    x, y = data(pid)
    return ClientRound(
        partition_id=pid, config=cfg, received=received, model=model, x=x, y=y, settings=LocalSettings.read(cfg, context, pid)
    )


def finish_round(
    msg: Message,
    rnd: ClientRound,
    arrays: dict[str, np.ndarray] | ArrayRecord,
    loss: float,
    metrics: Mapping[str, int | float | list[int] | list[float]] | None = None,
) -> Message:
    """The epilogue of every train handler: reply with ``arrays``, the sample count, the loss and ``metrics``."""
    content: dict[str, int | float | list[int] | list[float]] = {
        "num-examples": len(rnd.y), "train-loss": loss, "partition-id": rnd.partition_id, **(metrics or {})}
    record = arrays if isinstance(arrays, ArrayRecord) else to_arrayrecord(arrays)
    return Message(RecordDict({"arrays": record, "metrics": MetricRecord(content)}), reply_to=msg)


def train_shared(spec: TaskSpec, msg: Message, context: Context, data: DataFn = client_data) -> Message:
    """The shared client's round: plain local SGD; keeps the model in ``context.state``; replies ``send-keys``."""
    rnd = begin_round(spec, msg, context, data)
    loss = train_locally(rnd.model, rnd.x, rnd.y, rnd.settings)
    weights = get_weights(rnd.model)
    record = to_arrayrecord(weights)
    context.state[LOCAL_STATE_KEY] = record
    names = list(weights)
    send = config_names(rnd.config, "send-keys") if "send-keys" in rnd.config else names
    return finish_round(msg, rnd, record if send == names else {k: weights[k] for k in send}, loss)


def evaluate_shared(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """Evaluate the received model on the client's training data (Flower's ``evaluate`` message)."""
    torch.set_num_threads(1)
    pid = int(context.node_config["partition-id"])
    model = work_model(spec)
    set_weights(model, from_arrayrecord(msg.content["arrays"]))
    x, y = client_data(spec, pid)
    m = evaluate_on(model, x, y)
    return Message(RecordDict({"metrics": MetricRecord({**m, "num-examples": len(y), "partition-id": pid})}), reply_to=msg)


def make_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """Build the shared ``ClientApp`` for a task.

    It answers ``train`` messages (local SGD, see the module docstring),
    ``evaluate`` messages (the received model on the client's data) and
    ``query`` messages (its partition id, which servers use to sample clients
    reproducibly whatever node ids the engine assigned).

    Parameters
    ----------
    spec
        The task.
    run_config
        Defaults for Flower's run config (``seed``, and local settings a
        strategy may not send), see :func:`client_app_with`.
    """
    return client_app_with(
        lambda msg, context: train_shared(spec, msg, context),
        run_config,
        evaluate_fn=lambda msg, context: evaluate_shared(spec, msg, context),
    )


def run_config_mod(defaults: RunConfig) -> Callable[[Message, Context, Callable], Message]:
    """A Flower client mod that hands the handlers a run config with ``defaults`` where it has no value.

    Flower forbids changing ``context.run_config`` itself, so the handlers get
    a context with the fused run config that shares the node's ``state``
    (what they store there persists).
    """

    def mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        fused = Context(
            run_id=context.run_id,
            node_id=context.node_id,
            node_config=context.node_config,
            state=context.state,
            run_config={**defaults, **context.run_config},
            series_id=context.series_id,
        )
        return call_next(msg, fused)

    return mod


def client_app_with(
    train_fn: Callable[[Message, Context], Message],
    run_config: RunConfig | None = None,
    evaluate_fn: Callable[[Message, Context], Message] | None = None,
) -> ClientApp:
    """A ``ClientApp`` answering ``train`` with ``train_fn`` and ``query`` with its partition id.

    The shared pieces of every client of the book; chapters whose clients
    train differently (penalised local losses, extra replies) pass their own
    ``train_fn``.

    Parameters
    ----------
    train_fn
        The train handler.
    run_config
        Defaults of Flower's run config for this run (e.g. ``{"seed": 3}``),
        set by a client mod on every node (in-process or on Ray); a value a
        deployment's run config already holds wins.
    evaluate_fn
        Optional ``evaluate`` handler.
    """
    app = ClientApp(mods=[run_config_mod(dict(run_config))] if run_config else None)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return train_fn(msg, context)

    if evaluate_fn is not None:

        @app.evaluate()
        def evaluate(msg: Message, context: Context) -> Message:
            return evaluate_fn(msg, context)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        return Message(RecordDict({"info": MetricRecord({"partition-id": pid})}), reply_to=msg)

    return app
