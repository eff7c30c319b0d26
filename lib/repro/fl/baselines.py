"""FedDyn and SCAFFOLD as Flower Message-API strategies, with their clients.

Both are built on :class:`~repro.fl.strategies.SeededFedAvg` (seeded sampling
over partition ids, communication accounting) and train locally with
:func:`repro.fl.safa.penalised_sgd`, whose loss
``CE + sum weight * (theta - anchor)^2 + sum <linear, theta>`` covers both.

**FedDyn** (Acar et al., 2021).  Client ``i`` keeps the vector ``g_i`` (in
Flower's ``context.state``; zero at first) and, from the global model ``x``,
minimises ``CE(theta) - <g_i, theta> + alpha/2 ||theta - x||^2``; then
``g_i <- g_i - alpha (theta_i - x)``.  The server keeps
``h <- h - alpha/N sum_{i in S} (theta_i - x)`` (``N`` all clients) and sets
the next global model to ``mean(theta_i) - h / alpha``.  The mean is Flower's
``FedAvg`` aggregation (weighted by the clients' sample counts), so with
``alpha = 0`` (no penalty, no ``h`` correction) FedDyn is FedAvg bit for bit.

**SCAFFOLD** (Karimireddy et al., 2020), option II.  The server sends ``x``
and its control variate ``c``; client ``i`` (variate ``c_i`` in
``context.state``, zero at first) runs ``K`` SGD steps on the corrected
gradient ``grad - c_i + c`` (the gradient of ``CE + <c - c_i, theta>``),
ends at ``y_i``, sets ``c_i+ = c_i - c + (x - y_i) / (K lr)`` and returns
``y_i`` and ``dc_i = c_i+ - c_i``.  The server averages the models (Flower's
``FedAvg``; global step size 1) and sets ``c <- c + (1/N) sum_{i in S} dc_i``
(the mean of the deltas times ``|S|/N``).  With ``correction=False`` the
clients train plain SGD (variates still kept), which is FedAvg bit for bit.
The variates cover every array the server sends, so the model's arrays must
all be trainable parameters (true of the book's MLPs; a clear error otherwise).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from repro.fl.client import client_app_with, client_seed, from_arrayrecord, to_arrayrecord
from repro.fl.comm import CommLedger
from repro.fl.safa import penalised_sgd
from repro.fl.strategies import SeededFedAvg
from repro.fl.task import TaskSpec, client_data, work_model
from repro.models import get_weights, set_weights

SERVER_CV = "cv::"
"""Prefix of the server control variate's arrays in SCAFFOLD's messages."""
DELTA_CV = "dcv::"
"""Prefix of a client's control-variate delta in SCAFFOLD's replies."""
FEDDYN_STATE = "feddyn-grad"
"""``context.state`` key of a FedDyn client's linear term ``g_i``."""
SCAFFOLD_STATE = "scaffold-cv"
"""``context.state`` key of a SCAFFOLD client's control variate ``c_i``."""


def _local_settings(cfg: ConfigRecord) -> dict[str, float | int]:
    return {"steps": int(cfg["steps"]), "batch_size": int(cfg.get("batch-size", 32)),
            "lr": float(cfg.get("lr", 0.05)), "momentum": float(cfg.get("momentum", 0.0))}


def _reply(msg: Message, arrays: dict[str, np.ndarray], n: int, loss: float, pid: int) -> Message:
    metrics = MetricRecord({"num-examples": n, "train-loss": loss, "partition-id": pid})
    return Message(RecordDict({"arrays": to_arrayrecord(arrays), "metrics": metrics}), reply_to=msg)


# ----- FedDyn -------------------------------------------------------------------------
def feddyn_train(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """One FedDyn client round (see the module docstring); ``config["feddyn-alpha"]`` is ``alpha``."""
    torch.set_num_threads(1)
    pid = int(context.node_config["partition-id"])
    cfg: ConfigRecord = msg.content["config"]
    x = from_arrayrecord(msg.content["arrays"])
    alpha = float(cfg.get("feddyn-alpha", 0.0))
    model = work_model(spec)
    set_weights(model, x)
    names = [k for k, _ in model.named_parameters()]
    g = (from_arrayrecord(context.state[FEDDYN_STATE]) if FEDDYN_STATE in context.state
         else {k: np.zeros_like(x[k]) for k in names})
    data_x, data_y = client_data(spec, pid)
    loss = penalised_sgd(model, data_x, data_y, **_local_settings(cfg), seed=client_seed(int(cfg.get("seed", 0)), pid),
                         anchor=x, weight=alpha / 2.0,
                         linear=None if alpha == 0 else {k: -g[k] for k in names})
    theta = get_weights(model)
    if alpha != 0:
        g = {k: (g[k] - alpha * (theta[k] - x[k])).astype(x[k].dtype) for k in names}
    context.state[FEDDYN_STATE] = to_arrayrecord(g)
    return _reply(msg, theta, len(data_y), loss, pid)


def make_feddyn_client_app(spec: TaskSpec) -> ClientApp:
    """The FedDyn ``ClientApp`` (the book's shared client with :func:`feddyn_train`)."""
    return client_app_with(lambda msg, context: feddyn_train(spec, msg, context))


class FedDyn(SeededFedAvg):
    """FedDyn's server: FedAvg's mean corrected by the running state ``h``.

    Parameters
    ----------
    num_active, local, seed
        As in :class:`~repro.fl.strategies.SeededFedAvg`.
    num_clients
        ``N``, all clients (``h`` is updated with ``alpha / N``).
    alpha
        The dynamic regulariser's weight (``>= 0``; 0 is FedAvg).
    """

    def __init__(self, num_active: int, local: dict[str, float | int], num_clients: int, alpha: float = 0.01,
                 seed: int = 0) -> None:
        super().__init__(num_active, local, seed=seed)
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if num_clients < num_active:
            raise ValueError(f"num_clients={num_clients} must be >= num_active={num_active}")
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

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Update ``h`` from the clients' deltas; return FedAvg's mean minus ``h / alpha``."""
        replies = sorted(replies, key=lambda m: int(m.content["metrics"]["partition-id"]))
        arrays, metrics = super().aggregate_train(server_round, replies)
        if self.alpha == 0 or arrays is None:
            return arrays, metrics
        mean = from_arrayrecord(arrays)
        for k, x in self._sent.items():
            total = sum(m.content["arrays"][k].numpy().astype(np.float64) - x.astype(np.float64) for m in replies)
            self.h[k] = self.h[k] - self.alpha / self.num_clients * total
        return to_arrayrecord({k: (mean[k].astype(np.float64) - self.h[k] / self.alpha).astype(mean[k].dtype)
                               for k in mean}), metrics


# ----- SCAFFOLD -----------------------------------------------------------------------
def scaffold_train(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """One SCAFFOLD client round (option II; see the module docstring).

    ``config["scaffold-correct"]`` switches the drift correction of the
    local gradients (default on); the variates are updated either way.
    """
    torch.set_num_threads(1)
    pid = int(context.node_config["partition-id"])
    cfg: ConfigRecord = msg.content["config"]
    received = from_arrayrecord(msg.content["arrays"])
    x = {k: v for k, v in received.items() if not k.startswith(SERVER_CV)}
    c = {k[len(SERVER_CV):]: v for k, v in received.items() if k.startswith(SERVER_CV)}
    model = work_model(spec)
    set_weights(model, x)
    names = [k for k, _ in model.named_parameters()]
    if set(c) != set(names):
        raise RuntimeError(f"client {pid}: server variate arrays {sorted(c)} do not match the parameters {names}")
    ci = (from_arrayrecord(context.state[SCAFFOLD_STATE]) if SCAFFOLD_STATE in context.state
          else {k: np.zeros_like(c[k]) for k in names})
    local = _local_settings(cfg)
    correct = bool(cfg.get("scaffold-correct", True))
    data_x, data_y = client_data(spec, pid)
    loss = penalised_sgd(model, data_x, data_y, **local, seed=client_seed(int(cfg.get("seed", 0)), pid),
                         anchor=x, weight=0.0, linear={k: c[k] - ci[k] for k in names} if correct else None)
    y = get_weights(model)
    scale = 1.0 / (local["steps"] * local["lr"])
    ci_new = {k: (ci[k] - c[k] + (x[k] - y[k]) * scale).astype(c[k].dtype) for k in names}
    context.state[SCAFFOLD_STATE] = to_arrayrecord(ci_new)
    out = dict(y)
    out.update({DELTA_CV + k: ci_new[k] - ci[k] for k in names})
    return _reply(msg, out, len(data_y), loss, pid)


def make_scaffold_client_app(spec: TaskSpec) -> ClientApp:
    """The SCAFFOLD ``ClientApp`` (the book's shared client with :func:`scaffold_train`)."""
    return client_app_with(lambda msg, context: scaffold_train(spec, msg, context))


class SCAFFOLD(SeededFedAvg):
    """SCAFFOLD's server: FedAvg of the models plus the server control variate ``c``.

    Parameters
    ----------
    num_active, local, seed
        As in :class:`~repro.fl.strategies.SeededFedAvg`.
    num_clients
        ``N``, all clients (``c`` moves by ``1/N`` of the summed deltas).
    correction
        Whether clients correct their gradients with ``c - c_i`` (off: FedAvg's training).
    """

    def __init__(self, num_active: int, local: dict[str, float | int], num_clients: int, correction: bool = True,
                 seed: int = 0) -> None:
        super().__init__(num_active, local, seed=seed)
        if num_clients < num_active:
            raise ValueError(f"num_clients={num_clients} must be >= num_active={num_active}")
        self.num_clients, self.correction = num_clients, bool(correction)
        self.local["scaffold-correct"] = self.correction
        self.c: dict[str, np.ndarray] = {}

    def _ensure_comm(self, arrays: ArrayRecord) -> CommLedger:
        if self.comm is None:
            sizes = {k: int(v.numpy().size) for k, v in arrays.items()}
            sizes.update({SERVER_CV + k: n for k, n in list(sizes.items())})
            sizes.update({DELTA_CV + k: sizes[k] for k in arrays.keys()})
            self.comm = CommLedger(sizes)
        return self.comm

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """Send the model and ``c``; ask for the model and the variate deltas back."""
        model = from_arrayrecord(arrays)
        if not self.c:
            self.c = {k: np.zeros_like(v) for k, v in model.items()}
        send = dict(model)
        send.update({SERVER_CV + k: v for k, v in self.c.items()})
        return to_arrayrecord(send), list(model) + [DELTA_CV + k for k in model]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """FedAvg of the models; ``c <- c + (1/N) sum dc_i``."""
        replies = sorted(replies, key=lambda m: int(m.content["metrics"]["partition-id"]))
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is None:
            return arrays, metrics
        for k in self.c:
            total = sum(m.content["arrays"][DELTA_CV + k].numpy().astype(np.float64) for m in replies)
            self.c[k] = (self.c[k].astype(np.float64) + total / self.num_clients).astype(self.c[k].dtype)
        return ArrayRecord({k: v for k, v in arrays.items() if not k.startswith(DELTA_CV)}), metrics
