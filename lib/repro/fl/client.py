"""The Flower ``ClientApp`` shared by the federated chapters.

A client trains the received model for a fixed number of local SGD steps on
its partition.  It keeps its own copy of the model in ``context.state`` so
strategies that do not synchronise every layer every round (FedLAMA, FedLUAR)
can leave layers on the clients.

Message protocol (all keys optional except ``steps``):

``config["steps"]``, ``["lr"]``, ``["momentum"]``, ``["batch-size"]``, ``["seed"]``
    local training hyper-parameters and the round's seed;
``config["send-keys"]``
    names of the arrays to send back (default: all);
``arrays``
    the arrays to overwrite locally; arrays not sent are taken from the
    client's own state, which must then exist.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from repro.fl.task import TaskSpec, client_data, work_model
from repro.models import get_weights, set_weights

LOCAL_STATE_KEY = "local-model"


def client_seed(round_seed: int, partition_id: int) -> int:
    """Seed of one client's local training in one round (distinct per client and round)."""
    return int(np.random.SeedSequence([round_seed, partition_id]).generate_state(1)[0])


def local_sgd(
    model: torch.nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    steps: int,
    batch_size: int,
    lr: float,
    momentum: float,
    seed: int,
    penalties: Callable[[torch.Tensor, torch.Tensor], list[torch.Tensor]] | None = None,
) -> float:
    """Train ``model`` in place for ``steps`` SGD steps on mini-batches drawn with ``seed``.

    ``penalties``, if given, is called at every step with the batch's logits
    and indices and returns extra loss terms (FedProx, EWC, FedDyn, SCAFFOLD,
    distillation), added to the cross-entropy one after another.

    Returns
    -------
    float
        The mean training loss over the steps.
    """
    gen = np.random.default_rng(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    model.train()
    total = 0.0
    for _ in range(steps):
        idx = torch.from_numpy(gen.choice(len(y), size=min(batch_size, len(y)), replace=False))
        opt.zero_grad()
        out = model(xt[idx])
        ce = torch.nn.functional.cross_entropy(out, yt[idx])
        loss = ce
        for term in penalties(out, idx) if penalties is not None else ():
            loss = loss + term
        loss.backward()
        opt.step()
        total += ce.item()
    return total / max(steps, 1)


def to_arrayrecord(weights: dict[str, np.ndarray]) -> ArrayRecord:
    """Numpy weights to a Flower ``ArrayRecord`` (key order kept)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in weights.items()})


def from_arrayrecord(record: ArrayRecord) -> dict[str, np.ndarray]:
    """A Flower ``ArrayRecord`` to numpy weights."""
    return {k: v.numpy() for k, v in record.items()}


def _train(spec: TaskSpec, msg: Message, context: Context,
           data: Callable[[TaskSpec, int], tuple[np.ndarray, np.ndarray]] = client_data) -> Message:
    torch.set_num_threads(1)  # the same float results in every engine
    pid = int(context.node_config["partition-id"])
    cfg: ConfigRecord = msg.content["config"]
    received = from_arrayrecord(msg.content["arrays"])
    model = work_model(spec)
    names = list(model.state_dict())
    missing = [k for k in names if k not in received]
    if missing:  # layers the server did not send stay as this client left them
        if LOCAL_STATE_KEY not in context.state:
            raise RuntimeError(f"client {pid} has no local state but received only {sorted(received)}")
        local = context.state[LOCAL_STATE_KEY]
        set_weights(model, {k: local[k].numpy() for k in missing})
    set_weights(model, received)
    x, y = data(spec, pid)
    loss = local_sgd(
        model, x, y,
        steps=int(cfg["steps"]),
        batch_size=int(cfg.get("batch-size", 32)),
        lr=float(cfg.get("lr", 0.05)),
        momentum=float(cfg.get("momentum", 0.0)),
        seed=client_seed(int(cfg.get("seed", 0)), pid),
    )
    weights = get_weights(model)
    record = to_arrayrecord(weights)
    context.state[LOCAL_STATE_KEY] = record
    send = list(cfg["send-keys"]) if "send-keys" in cfg else names
    content = RecordDict(
        {
            "arrays": record if send == names else to_arrayrecord({k: weights[k] for k in send}),
            "metrics": MetricRecord({"num-examples": len(y), "train-loss": loss, "partition-id": pid}),
        }
    )
    return Message(content, reply_to=msg)


def make_client_app(spec: TaskSpec) -> ClientApp:
    """Build the ``ClientApp`` for a task.

    It answers ``train`` messages (local SGD, see the module docstring) and
    ``query`` messages (its partition id, which servers use to sample clients
    reproducibly whatever node ids the engine assigned).
    """
    return client_app_with(lambda msg, context: _train(spec, msg, context))


def client_app_with(train_fn: Callable[[Message, Context], Message]) -> ClientApp:
    """A ``ClientApp`` answering ``train`` with ``train_fn`` and ``query`` with its partition id.

    The shared pieces of every client of the book; chapters whose clients
    train differently (penalised local losses, extra replies) pass their own
    ``train_fn``.
    """
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:  # noqa: D401
        return train_fn(msg, context)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        return Message(RecordDict({"info": MetricRecord({"partition-id": pid})}), reply_to=msg)

    return app

