"""FedDyn (Acar et al., 2021) as a Flower Message-API strategy, with its client.

Client ``i`` keeps the vector ``g_i`` (in Flower's ``context.state``; zero at
first) and, from the global model ``x``, minimises
``CE(theta) - <g_i, theta> + alpha/2 ||theta - x||^2`` with
:func:`repro.federated.client.penalised_sgd`; then
``g_i <- g_i - alpha (theta_i - x)``.  The server (built on
:class:`~repro.federated.strategies.SeededFedAvg`) keeps
``h <- h - alpha/N sum_{i in S} (theta_i - x)`` (``N`` all clients) and sets
the next global model to ``mean(theta_i) - h / alpha``.  The mean is Flower's
``FedAvg`` aggregation (weighted by the clients' sample counts), so with
``alpha = 0`` (no penalty, no ``h`` correction) FedDyn is FedAvg bit for bit.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord
from flwr.clientapp import ClientApp

from repro.federated.arrays import arrayrecord, from_array, from_arrayrecord, to_arrayrecord
from repro.federated.client import RunConfig, begin_round, client_app_with, config_number, finish_round, penalised_sgd
from repro.federated.replies import partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.models import get_weights

FEDDYN_STATE = "feddyn-grad"
"""``context.state`` key of a FedDyn client's linear term ``g_i``."""


def feddyn_train(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """One FedDyn client round (see the module docstring); ``config["feddyn-alpha"]`` is ``alpha``."""
    rnd = begin_round(spec, msg, context)
    x = rnd.received
    alpha = config_number(rnd.config, "feddyn-alpha", 0.0)
    names = [k for k, _ in rnd.model.named_parameters()]
    g = (from_arrayrecord(context.state[FEDDYN_STATE]) if FEDDYN_STATE in context.state
         else {k: np.zeros_like(x[k]) for k in names})
    loss = penalised_sgd(rnd.model, rnd.x, rnd.y, rnd.settings, anchor=x, weight=alpha / 2.0,
                         linear=None if alpha == 0 else {k: -g[k] for k in names})
    theta = get_weights(rnd.model)
    if alpha != 0:
        g = {k: (g[k] - alpha * (theta[k] - x[k])).astype(x[k].dtype) for k in names}
    context.state[FEDDYN_STATE] = to_arrayrecord(g)
    return finish_round(msg, rnd, theta, loss)


def make_feddyn_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """The FedDyn ``ClientApp`` (the book's shared client with :func:`feddyn_train`)."""
    return client_app_with(lambda msg, context: feddyn_train(spec, msg, context), run_config)


class FedDyn(SeededFedAvg):
    """FedDyn's server: FedAvg's mean corrected by the running state ``h``.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    num_clients
        ``N``, all clients (``h`` is updated with ``alpha / N``).
    alpha
        The dynamic regulariser's weight (``>= 0``; 0 is FedAvg).
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], num_clients: int, alpha: float = 0.01,
                 seed: int = 0) -> None:
        super().__init__(active_clients, local, seed=seed)
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if num_clients < active_clients:
            raise ValueError(f"num_clients={num_clients} must be >= active_clients={active_clients}")
        self.alpha, self.num_clients = float(alpha), num_clients
        self.local["feddyn-alpha"] = self.alpha
        self.h: dict[str, np.ndarray] = {}
        self._sent: dict[str, np.ndarray] = {}

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """Broadcast the model (all arrays both ways) and remember it as ``x``."""
        self._sent = from_arrayrecord(arrays)
        if not self.h:
            self.h = {k: np.zeros(v.shape, dtype=np.float64) for k, v in self._sent.items()}
        return super().payload(server_round, arrays)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Update ``h`` from the clients' deltas; return FedAvg's mean minus ``h / alpha``."""
        replies = sorted(replies, key=lambda m: partition_of(m))
        arrays, metrics = super().aggregate_train(server_round, replies)
        if self.alpha == 0 or arrays is None:
            return arrays, metrics
        mean = from_arrayrecord(arrays)
        for k, x in self._sent.items():
            total = sum((from_array(arrayrecord(m.content["arrays"])[k]).astype(np.float64) - x.astype(np.float64)
                         for m in replies), np.zeros(x.shape))
            self.h[k] = self.h[k] - self.alpha / self.num_clients * total
        return to_arrayrecord({k: (mean[k].astype(np.float64) - self.h[k] / self.alpha).astype(mean[k].dtype)
                               for k in mean}), metrics
