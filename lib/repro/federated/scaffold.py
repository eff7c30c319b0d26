"""SCAFFOLD (Karimireddy et al., 2020), option II, as a Flower Message-API strategy, with its client.

The server sends ``x`` and its control variate ``c``; client ``i`` (variate
``c_i`` in ``context.state``, zero at first) runs ``K`` SGD steps on the
corrected gradient ``grad - c_i + c`` (the gradient of
``CE + <c - c_i, theta>``, trained with :func:`repro.federated.client.penalised_sgd`),
ends at ``y_i``, sets ``c_i+ = c_i - c + (x - y_i) / (K lr)`` and returns
``y_i`` and ``dc_i = c_i+ - c_i``.  The server (built on
:class:`~repro.federated.strategies.SeededFedAvg`) averages the models
(Flower's ``FedAvg``; global step size 1) and sets
``c <- c + (1/N) sum_{i in S} dc_i`` (the mean of the deltas times
``|S|/N``).  With ``correction=False`` the clients train plain SGD (variates
still kept), which is FedAvg bit for bit.  The variates cover every array the
server sends, so the model's arrays must all be trainable parameters (true of
the book's MLPs; a clear error otherwise).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord
from flwr.clientapp import ClientApp

from repro.federated.arrays import arrayrecord, from_array, from_arrayrecord, to_arrayrecord
from repro.federated.client import RunConfig, begin_round, client_app_with, finish_round, penalised_sgd
from repro.federated.comm import CommLedger
from repro.federated.replies import partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.models import get_weights

SERVER_CV = "cv::"
"""Prefix of the server control variate's arrays in SCAFFOLD's messages."""
DELTA_CV = "dcv::"
"""Prefix of a client's control-variate delta in SCAFFOLD's replies."""
SCAFFOLD_STATE = "scaffold-cv"
"""``context.state`` key of a SCAFFOLD client's control variate ``c_i``."""


def scaffold_train(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """One SCAFFOLD client round (option II; see the module docstring).

    ``config["scaffold-correct"]`` switches the drift correction of the
    local gradients (default on); the variates are updated either way.
    """
    rnd = begin_round(spec, msg, context)
    x = {k: v for k, v in rnd.received.items() if not k.startswith(SERVER_CV)}
    c = {k[len(SERVER_CV):]: v for k, v in rnd.received.items() if k.startswith(SERVER_CV)}
    names = [k for k, _ in rnd.model.named_parameters()]
    if set(c) != set(names):
        raise RuntimeError(f"client {rnd.partition_id}: server variate arrays {sorted(c)} do not match the "
                           f"parameters {names}")
    ci = (from_arrayrecord(context.state[SCAFFOLD_STATE]) if SCAFFOLD_STATE in context.state
          else {k: np.zeros_like(c[k]) for k in names})
    correct = bool(rnd.config.get("scaffold-correct", True))
    loss = penalised_sgd(rnd.model, rnd.x, rnd.y, rnd.settings, anchor=x, weight=0.0,
                         linear={k: c[k] - ci[k] for k in names} if correct else None)
    y = get_weights(rnd.model)
    scale = 1.0 / (rnd.settings.steps * rnd.settings.lr)
    ci_new = {k: (ci[k] - c[k] + (x[k] - y[k]) * scale).astype(c[k].dtype) for k in names}
    context.state[SCAFFOLD_STATE] = to_arrayrecord(ci_new)
    out = dict(y)
    out.update({DELTA_CV + k: ci_new[k] - ci[k] for k in names})
    return finish_round(msg, rnd, out, loss)


def make_scaffold_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """The SCAFFOLD ``ClientApp`` (the book's shared client with :func:`scaffold_train`)."""
    return client_app_with(lambda msg, context: scaffold_train(spec, msg, context), run_config)


class SCAFFOLD(SeededFedAvg):
    """SCAFFOLD's server: FedAvg of the models plus the server control variate ``c``.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    num_clients
        ``N``, all clients (``c`` moves by ``1/N`` of the summed deltas).
    correction
        Whether clients correct their gradients with ``c - c_i`` (off: FedAvg's training).
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], num_clients: int, correction: bool = True,
                 seed: int = 0) -> None:
        super().__init__(active_clients, local, seed=seed)
        if num_clients < active_clients:
            raise ValueError(f"num_clients={num_clients} must be >= active_clients={active_clients}")
        self.num_clients, self.correction = num_clients, bool(correction)
        self.local["scaffold-correct"] = self.correction
        self.c: dict[str, np.ndarray] = {}

    def ensure_comm(self, arrays: ArrayRecord) -> CommLedger:
        """The ledger, counting the control variates' arrays as well as the model's."""
        if self.comm is None:
            sizes = {k: int(v.numpy().size) for k, v in arrays.items()}
            sizes.update({SERVER_CV + k: n for k, n in list(sizes.items())})
            sizes.update({DELTA_CV + k: sizes[k] for k in arrays.keys()})
            self.comm = CommLedger(sizes=sizes)
        return self.comm

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """Send the model and ``c``; ask for the model and the variate deltas back."""
        model = from_arrayrecord(arrays)
        if not self.c:
            self.c = {k: np.zeros_like(v) for k, v in model.items()}
        send = dict(model)
        send.update({SERVER_CV + k: v for k, v in self.c.items()})
        return to_arrayrecord(send), list(model) + [DELTA_CV + k for k in model]

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """FedAvg of the models; ``c <- c + (1/N) sum dc_i``."""
        replies = sorted(replies, key=lambda m: partition_of(m))
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is None:
            return arrays, metrics
        for k in self.c:
            total = sum((from_array(arrayrecord(m.content["arrays"])[DELTA_CV + k]).astype(np.float64) for m in replies),
                        np.zeros(self.c[k].shape))
            self.c[k] = (self.c[k].astype(np.float64) + total / self.num_clients).astype(self.c[k].dtype)
        return ArrayRecord({k: v for k, v in arrays.items() if not k.startswith(DELTA_CV)}), metrics
