"""FedRep (Collins et al., 2021): a shared representation, a personal head on every client.

Each round a sampled client first fits its own head for ``head-steps`` SGD
steps with the body frozen, then trains the body for ``steps`` steps with
the head frozen (:func:`train_fedrep`).  The server averages the bodies
with Flower's FedAvg (:class:`FedRep`); heads never leave their clients in
the method (here the server sends their mean to clients that have none
yet).  For evaluation the strategy keeps a copy of each client's
latest head (what the client itself would use with the new body) and
their mean, the head a client that never trained receives.

With ``head-steps = 0`` the heads stay at the shared initial one and FedRep
is FedAvg of the body under a frozen head (tested).
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord
from flwr.clientapp import ClientApp

from repro.federated.arrays import from_array, from_arrayrecord, to_arrayrecord
from repro.federated.client import (
    LOCAL_STATE_KEY,
    LocalSettings,
    RunConfig,
    begin_round,
    client_app_with,
    client_data,
    finish_round,
    train_locally,
)
from repro.federated.replies import number, partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.models import get_weights, set_weights

DataFn = Callable[[TaskSpec, int], tuple[np.ndarray, np.ndarray]]


def head_keys(names: Iterable[str]) -> list[str]:
    """The head of a sequential MLP: the arrays of its last layer (the last weight and the bias after it)."""
    names = list(names)
    prefix = names[-1].rsplit(".", 1)[0]
    return [k for k in names if k.rsplit(".", 1)[0] == prefix]


class FedRep(SeededFedAvg):
    """FedRep's server: average the bodies; keep every client's head and send their mean as the shared head.

    The whole model goes down every round; a client that has a head of its
    own keeps it (:func:`train_fedrep`), one that never trained starts from
    the mean head.

    Parameters
    ----------
    active_clients, local, seed
        As :class:`~repro.federated.strategies.SeededFedAvg`; ``local`` may set ``head-steps``.

    Attributes
    ----------
    heads
        Partition id -> the client's latest personal head (by array name), for evaluation.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0) -> None:
        super().__init__(active_clients, local, seed=seed)
        self.heads: dict[int, dict[str, np.ndarray]] = {}
        self._head: list[str] = []

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """FedAvg of the bodies; the heads are recorded per client, and their average kept as the shared head."""
        replies = list(replies)
        self._head = head_keys(list(from_arrayrecord(replies[0].content["arrays"]))) if replies else self._head
        for m in replies:
            if not m.has_error():
                arrays = from_arrayrecord(m.content["arrays"])
                self.heads[partition_of(m)] = {k: arrays[k].copy() for k in self._head}
        merged, metrics = super().aggregate_train(server_round, replies)
        if merged is None:
            return None, metrics
        weights = from_arrayrecord(merged)
        weights.update(self.mean_head())
        return to_arrayrecord(weights), metrics

    def mean_head(self) -> dict[str, np.ndarray]:
        """The mean of every client's latest head (what an unseen client receives)."""
        if not self.heads:
            raise RuntimeError("no client has trained yet")
        return {k: np.asarray(np.mean([h[k] for h in self.heads.values()], axis=0, dtype=np.float64), dtype=np.float32)
                for k in self._head}


def train_part(model: torch.nn.Module, trained: set[str], x: np.ndarray, y: np.ndarray, settings: LocalSettings) -> float:
    """Local SGD of ``model``'s parameters named in ``trained``, every other parameter frozen; the mean loss.

    Raises
    ------
    ValueError
        If ``trained`` names no parameter of ``model``.
    """
    params = dict(model.named_parameters())
    if not set(trained) & set(params):
        raise ValueError(f"parameter 'trained': names none of the model's parameters {sorted(params)}")
    try:
        for k, p in params.items():
            p.requires_grad_(k in trained)
        return train_locally(model, x, y, settings)
    finally:
        for p in params.values():
            p.requires_grad_(True)


def fine_tune_head(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, settings: LocalSettings) -> float:
    """FedRep's new client: fit the head on its labelled samples with the shared body frozen (in place); the loss.

    FedRep (Collins et al., 2021) serves a client that joins after training this way: the representation is
    kept and only the head is learned from the client's own labels.
    """
    return train_part(model, set(head_keys(list(model.state_dict()))), x, y, settings)


def train_fedrep(spec: TaskSpec, msg: Message, context: Context, data: DataFn = client_data) -> Message:
    """One FedRep round: ``head-steps`` steps on the head (body frozen), then ``steps`` on the body (head frozen)."""
    own = context.state[LOCAL_STATE_KEY] if LOCAL_STATE_KEY in context.state else None
    rnd = begin_round(spec, msg, context, data)
    head = set(head_keys(list(rnd.model.state_dict())))
    if own is not None:  # the client's personal head replaces the shared one it received
        set_weights(rnd.model, {k: from_array(own[k]) for k in head})
    head_steps = int(number(rnd.config, "head-steps")) if "head-steps" in rnd.config else int(
        number({"head-steps": context.run_config.get("head-steps", 0)}, "head-steps"))
    if head_steps > 0:
        s = rnd.settings
        head_fit = LocalSettings(
            steps=head_steps, batch_size=s.batch_size, lr=s.lr, momentum=s.momentum, seed=s.seed + 1, device=s.device
        )
        train_part(rnd.model, head, rnd.x, rnd.y, head_fit)
    body = {k for k in rnd.model.state_dict() if k not in head}
    loss = train_part(rnd.model, body, rnd.x, rnd.y, rnd.settings)
    weights = get_weights(rnd.model)
    context.state[LOCAL_STATE_KEY] = to_arrayrecord(weights)
    return finish_round(msg, rnd, weights, loss)


def make_fedrep_client_app(spec: TaskSpec, data: DataFn = client_data, run_config: RunConfig | None = None) -> ClientApp:
    """The FedRep ``ClientApp`` (its personal head persists in the node's ``context.state``)."""
    return client_app_with(lambda msg, context: train_fedrep(spec, msg, context, data), run_config)


def personal_model_weights(body: dict[str, np.ndarray], head: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A client's model: the shared body with its own head."""
    return {**body, **head}
