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
layers, so HeteroFL's static batch norm does not arise.  Its masked
cross-entropy (:class:`LabelMask`, on with ``masked_ce=True``) sets the
logits of the classes a client's local data lacks to zero while it trains;
such a client also sends its label set, and the server averages each
class's output row only over the clients that hold the class, as the
authors' server does.  The global model is evaluated unmasked.  The same server serves FjORD
(:mod:`repro.federated.fjord`), whose clients differ only in how they train.

Communication is counted with :class:`~repro.federated.comm.CommLedger`,
one entry per array and width (``"fc1.weight@0.5"``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.client import ClientRound, begin_round, client_app_with, finish_round, train_locally
from repro.federated.comm import CommLedger
from repro.federated.partial import layer_groups
from repro.federated.replies import metric, number, ordered_replies, partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.federated.tiers import Tier
from repro.models import get_weights

WIDTH_KEY = "width"
"""Config key carrying a client's width ratio."""
LABEL_SPLIT_KEY = "label-split"
"""Reply array of a masked-cross-entropy client: 1 for each class its local data holds, 0 otherwise."""


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
                   counts: Sequence[float], label_splits: Sequence[np.ndarray | None] | None = None,
                   ) -> dict[str, np.ndarray]:
    """Average every entry over the slices that hold it, weighted by ``counts``; uncovered entries keep ``current``.

    Parameters
    ----------
    current
        The global arrays.
    slices
        Each client's trained slice (the leading block of every array).
    counts
        Each client's weight (its sample count).
    label_splits
        Per client, ``None`` or a 0/1 vector over the classes: a client with a
        vector counts only towards the output layer's rows of the classes it
        holds, as HeteroFL's server combines the rows of masked clients (the
        authors' ``fed.py``, ``combine``).  Without it every client counts for
        every row it holds.
    """
    output_keys = set(layer_groups(list(current))[-1])
    splits = list(label_splits) if label_splits is not None else [None] * len(slices)
    out = {}
    for k, base in current.items():
        total = np.zeros(base.shape, dtype=np.float64)
        weight = np.zeros(base.shape, dtype=np.float64)
        for arrays, n, split in zip(slices, counts, splits):
            block = tuple(slice(0, d) for d in arrays[k].shape)
            if split is not None and k in output_keys:
                rows = np.asarray(split, dtype=np.float64).reshape((-1,) + (1,) * (arrays[k].ndim - 1))
                total[block] += n * rows * arrays[k]
                weight[block] += n * np.broadcast_to(rows, arrays[k].shape)
            else:
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
            self.comm = CommLedger(sizes=sizes)
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
        replies = ordered_replies(server_round, replies)
        assert self.comm is not None
        for m in replies:
            ratio = self._width_of[partition_of(m)]
            keys = [f"{k}@{ratio:g}" for k in self._current]
            self.comm.record(server_round, keys, keys, 1)
        slices = [from_arrayrecord(m.content["arrays"]) for m in replies]
        splits = [arrays.pop(LABEL_SPLIT_KEY, None) for arrays in slices]
        merged = nested_average(self._current, slices, [metric(m, "num-examples") for m in replies], splits)
        metrics = self.train_metrics_aggr_fn([m.content for m in replies], self.weighted_by_key)
        return to_arrayrecord(merged), metrics


Trainer = Callable[[ClientRound, float], float]


def sub_spec(spec: TaskSpec, ratio: float) -> TaskSpec:
    """The task with the width-``ratio`` hidden layers (same data and partition)."""
    return dataclasses.replace(spec, hidden=sliced_hidden(spec.hidden, ratio))


def train_width(spec: TaskSpec, msg: Message, context: Context, trainer: Trainer | None = None,
                send_label_split: bool = False) -> Message:
    """A client round on the width slice the server sent; ``trainer(round, ratio)`` trains it (default: plain SGD).

    With ``send_label_split`` the reply also carries :data:`LABEL_SPLIT_KEY`,
    the classes the client's data holds, for the server's per-class average
    of the output rows (:func:`nested_average`).
    """
    cfg = msg.content["config"]
    if not isinstance(cfg, ConfigRecord):
        raise TypeError(f"a width client's message 'config' must be a ConfigRecord, got {type(cfg).__name__}")
    ratio = number(cfg, WIDTH_KEY)
    rnd = begin_round(sub_spec(spec, ratio), msg, context)
    loss = trainer(rnd, ratio) if trainer is not None else train_locally(rnd.model, rnd.x, rnd.y, rnd.settings)
    arrays = get_weights(rnd.model)
    if send_label_split:
        classes = next(reversed(arrays.values())).shape[0]  # the output layer's bias: one entry per class
        arrays[LABEL_SPLIT_KEY] = np.isin(np.arange(classes), rnd.y).astype(np.int64)
    return finish_round(msg, rnd, arrays, loss)


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


class LabelMask:
    """HeteroFL's masked cross-entropy: in training mode the logits of classes outside ``labels`` are set to zero.

    The authors' models (``src/models/conv.py``) fill the output entries of
    every class missing from the client's label set with zero before the
    cross-entropy, when the ``mask`` switch of their ``control_name`` is on;
    the label set is that of the client's whole local training split, fixed
    for all its batches.  Zeroed logits carry no gradient, so the output
    layer's rows of absent classes receive none, yet they still enter the
    softmax with logit zero.  Here a forward hook on the last linear layer
    does it while the module trains; at evaluation the logits pass through.
    A context manager: the hook is removed on exit.

    Parameters
    ----------
    model
        The client's model (its last ``torch.nn.Linear`` gives the logits).
    labels
        The classes present in the client's local data.
    """

    def __init__(self, model: torch.nn.Module, labels: Sequence[int] | np.ndarray) -> None:
        output = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
        present = torch.zeros(output.out_features, dtype=torch.bool)
        present[torch.as_tensor(np.asarray(labels, dtype=np.int64))] = True
        self.present = present
        self._handle: torch.utils.hooks.RemovableHandle | None = output.register_forward_hook(self._mask)

    def _mask(self, module: torch.nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
        return out.masked_fill(~self.present.to(out.device), 0.0) if module.training else out

    def remove(self) -> None:
        """Detach the hook."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def __enter__(self) -> LabelMask:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeteroFLTraining:
    """How a HeteroFL client trains its slice: local SGD with the authors' options.

    Attributes
    ----------
    scaler
        Divide hidden outputs by the width ratio while training (:class:`WidthScaler`).
    masked_ce
        Zero the logits of classes absent from the client's local data while training (:class:`LabelMask`).
    """

    scaler: bool = False
    masked_ce: bool = False

    def __call__(self, rnd: ClientRound, ratio: float) -> float:
        """Train ``rnd.model`` (a width-``ratio`` slice) in place; the mean training loss."""
        with contextlib.ExitStack() as hooks:
            if self.scaler:
                hooks.enter_context(WidthScaler(rnd.model, ratio))
            if self.masked_ce:
                hooks.enter_context(LabelMask(rnd.model, np.unique(rnd.y)))
            return train_locally(rnd.model, rnd.x, rnd.y, rnd.settings)


def make_heterofl_client_app(spec: TaskSpec, run_config: dict | None = None, scaler: bool = False,
                             masked_ce: bool = False) -> ClientApp:
    """The HeteroFL ``ClientApp``: local SGD on the received slice, with the authors' scaler and masked cross-entropy.

    With both off the slice trains with plain SGD (:func:`~repro.federated.client.train_locally`).
    """
    training = HeteroFLTraining(scaler=scaler, masked_ce=masked_ce)
    trainer = training if (scaler or masked_ce) else None
    return client_app_with(lambda msg, context: train_width(spec, msg, context, trainer, send_label_split=masked_ce),
                           run_config)
