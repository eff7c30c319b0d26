"""HeteroFL (Diao, Ding and Tarokh): clients train nested width slices of one global model.

A client of width ratio ``r`` gets the first ``ceil(r * h)`` units of every
hidden layer of the global MLP (inputs and classes stay whole), trains that
narrower model, and sends it back.  The server averages every entry of
every array over the clients whose slice held it, weighted by sample
counts; entries no client held keep their value.  With every client at
width 1 this is FedAvg.

HeteroFL's scaler (:class:`WidthScaler`, on with ``scaler=True`` in
:func:`make_heterofl_client_app`) divides every hidden layer's output by
``r`` while a width-``r`` client trains and does nothing at evaluation, so
the wide global model is evaluated as it is.  The MLP has no normalisation
layers, so HeteroFL's static batch norm does not arise; its masked
cross-entropy (logits of classes a client lacks set to zero, used in its
non-IID runs) is left out.  The same server serves FjORD
(:mod:`repro.federated.fjord`), whose clients differ only in how they train.

Communication is counted with :class:`~repro.federated.comm.CommLedger`,
one entry per array and width (``"fc1.weight@0.5"``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from repro.federated.client import (
    ClientRound,
    begin_round,
    client_app_with,
    finish_round,
    from_arrayrecord,
    to_arrayrecord,
    train_locally,
)
from repro.federated.comm import CommLedger
from repro.federated.partial import layer_groups
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.federated.tiers import Tier
from repro.models import get_weights

WIDTH_KEY = "width"
"""Config key carrying a client's width ratio."""


def slice_units(units: int, ratio: float) -> int:
    """Units a width-``ratio`` slice keeps of a layer with ``units`` (at least one)."""
    return max(1, math.ceil(ratio * units - 1e-9))


def sliced_hidden(hidden: Sequence[int], ratio: float) -> tuple[int, ...]:
    """Hidden widths of the width-``ratio`` sub-model."""
    return tuple(slice_units(h, ratio) for h in hidden)


def slice_index(weights: dict[str, np.ndarray], ratio: float) -> dict[str, tuple[slice, ...]]:
    """For every array, the leading block a width-``ratio`` client holds (first layer keeps its inputs, last its outputs)."""
    groups = layer_groups(list(weights))
    index: dict[str, tuple[slice, ...]] = {}
    for i, group in enumerate(groups):
        for k in group:
            shape = weights[k].shape
            out = shape[0] if i == len(groups) - 1 else slice_units(shape[0], ratio)
            if len(shape) == 1:
                index[k] = (slice(0, out),)
            else:
                inp = shape[1] if i == 0 else slice_units(shape[1], ratio)
                index[k] = (slice(0, out), slice(0, inp)) + tuple(slice(None) for _ in shape[2:])
    return index


def slice_weights(weights: dict[str, np.ndarray], ratio: float) -> dict[str, np.ndarray]:
    """The width-``ratio`` sub-model's arrays (copies of the leading blocks)."""
    return {k: np.ascontiguousarray(weights[k][s]) for k, s in slice_index(weights, ratio).items()}


def nested_average(current: dict[str, np.ndarray], slices: Sequence[dict[str, np.ndarray]],
                   counts: Sequence[float]) -> dict[str, np.ndarray]:
    """Average every entry over the slices that hold it, weighted by ``counts``; uncovered entries keep ``current``."""
    out = {}
    for k, base in current.items():
        total = np.zeros(base.shape, dtype=np.float64)
        weight = np.zeros(base.shape, dtype=np.float64)
        for arrays, n in zip(slices, counts):
            block = tuple(slice(0, d) for d in arrays[k].shape)
            total[block] += n * arrays[k]
            weight[block] += n
        out[k] = np.where(weight > 0, total / np.maximum(weight, 1e-300), base).astype(base.dtype)
    return out


class WidthReduced(SeededFedAvg):
    """HeteroFL's server (and FjORD's): send each client its width slice, average entries over holders.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    tier_of
        The tier (hence width ratio) of every partition id.
    ordered_dropout
        Ask clients to train with FjORD's ordered dropout (:mod:`repro.federated.fjord`).
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], tier_of: Sequence[Tier], seed: int = 0,
                 ordered_dropout: bool = False) -> None:
        super().__init__(active_clients, local, seed=seed)
        self.tier_of = list(tier_of)
        self.ordered_dropout = ordered_dropout
        self._current: dict[str, np.ndarray] = {}
        self._width_of: dict[int, float] = {}

    def ensure_comm(self, arrays: ArrayRecord) -> CommLedger:
        """A ledger with one entry per array and width in use."""
        if self.comm is None:
            weights = from_arrayrecord(arrays)
            sizes = {}
            for ratio in sorted({t.width for t in self.tier_of}):
                sizes.update({f"{k}@{ratio:g}": int(v.size) for k, v in slice_weights(weights, ratio).items()})
            self.comm = CommLedger(sizes)
        return self.comm

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Send every sampled client its slice and width."""
        self.ensure_comm(arrays)
        self._current = from_arrayrecord(arrays)
        messages, self._width_of = [], {}
        for pid in self.sample(server_round):
            ratio = self.tier_of[pid].width
            self._width_of[pid] = ratio
            cfg = ConfigRecord({**dict(config), **self.local, "server-round": server_round, WIDTH_KEY: ratio,
                                "ordered-dropout": self.ordered_dropout})
            messages.append(Message(RecordDict({"arrays": to_arrayrecord(slice_weights(self._current, ratio)),
                                                "config": cfg}),
                                    dst_node_id=self.node_of[pid], message_type=MessageType.TRAIN))
        return messages

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Entry-wise weighted average over the clients whose slice held each entry."""
        replies = sorted(replies, key=lambda m: int(m.content["metrics"]["partition-id"]))
        errors = [m for m in replies if m.has_error()]
        if errors:
            raise RuntimeError(f"round {server_round}: {len(errors)} client(s) failed: {errors[0].error.reason}")
        assert self.comm is not None
        for m in replies:
            ratio = self._width_of[int(m.content["metrics"]["partition-id"])]
            keys = [f"{k}@{ratio:g}" for k in self._current]
            self.comm.record(server_round, keys, keys, 1)
        merged = nested_average(self._current, [from_arrayrecord(m.content["arrays"]) for m in replies],
                                [float(m.content["metrics"]["num-examples"]) for m in replies])
        metrics = self.train_metrics_aggr_fn([m.content for m in replies], self.weighted_by_key)
        return to_arrayrecord(merged), metrics


Trainer = Callable[[ClientRound, float], float]


def sub_spec(spec: TaskSpec, ratio: float) -> TaskSpec:
    """The task with the width-``ratio`` hidden layers (same data and partition)."""
    return dataclasses.replace(spec, hidden=sliced_hidden(spec.hidden, ratio))


def train_width(spec: TaskSpec, msg: Message, context: Context, trainer: Trainer | None = None) -> Message:
    """A client round on the width slice the server sent; ``trainer(round, ratio)`` trains it (default: plain SGD)."""
    ratio = float(msg.content["config"][WIDTH_KEY])
    rnd = begin_round(sub_spec(spec, ratio), msg, context)
    loss = trainer(rnd, ratio) if trainer is not None else train_locally(rnd.model, rnd.x, rnd.y, rnd.settings)
    return finish_round(msg, rnd, get_weights(rnd.model), loss)


class WidthScaler:
    """HeteroFL's scaler: in training mode every hidden layer's output is divided by the width ratio ``r``.

    The authors' models put a ``Scaler`` right after each hidden convolution
    or linear map, before normalisation and activation, dividing by the
    client's rate relative to the global model's while the module trains and
    passing its input through at evaluation; the output layer has none.  With
    the global model at width 1 that rate is ``r``.  Here a forward hook on
    every linear layer but the last does it (the MLP has ReLU right after,
    and ``relu(z / r) = relu(z) / r`` for ``r > 0``).  A context manager:
    the hooks are removed on exit (the work model is reused by later rounds).

    Parameters
    ----------
    model
        A width-``ratio`` slice of the global MLP.
    ratio
        The client's width ratio ``r`` (``0 < r <= 1``; ``r = 1`` divides by one, the identity).
    """

    def __init__(self, model: torch.nn.Module, ratio: float) -> None:
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"parameter 'ratio': a width ratio in (0, 1], got {ratio}")
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        self.ratio = float(ratio)
        self._handles = [m.register_forward_hook(self._scale) for m in linears[:-1]]

    def _scale(self, module: torch.nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
        return out / self.ratio if module.training else out

    def remove(self) -> None:
        """Detach the hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> WidthScaler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def train_scaled(rnd: ClientRound, ratio: float) -> float:
    """Local SGD on a width-``ratio`` slice with HeteroFL's scaler on (:class:`WidthScaler`)."""
    with WidthScaler(rnd.model, ratio):
        return train_locally(rnd.model, rnd.x, rnd.y, rnd.settings)


def make_heterofl_client_app(spec: TaskSpec, run_config: dict | None = None, scaler: bool = False) -> ClientApp:
    """The HeteroFL ``ClientApp``: local SGD on the received slice, with the authors' scaler if ``scaler``.

    ``scaler=False`` trains the slice with plain SGD (the scaler left out).
    """
    trainer = train_scaled if scaler else None
    return client_app_with(lambda msg, context: train_width(spec, msg, context, trainer), run_config)

