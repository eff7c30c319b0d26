"""Partial-model training (EmbracingFL): clients train only output-side layers, layers are averaged over who trained them.

Each client trains as many consecutive output-side layers as its tier
allows (:class:`~repro.federated.tiers.Tier`); the input-side layers are
frozen on it (``requires_grad`` off, so autograd keeps no activations for
them) and run forward only.  The client uploads only the layers it trained.
The server averages each layer, weighted by sample counts, over the clients
that trained it this round (:func:`layerwise_average`, Flower's own
``aggregate_arrayrecords`` on each group of layers with the same
contributors); a layer no client trained keeps its value.  With every
client strong this is exactly Flower's FedAvg.

Communication is counted per layer with :class:`~repro.federated.comm.CommLedger`:
every sampled client downloads the whole model (it needs the frozen layers
for its forward pass) and uploads its trained layers.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from repro.federated.client import begin_round, client_app_with, finish_round, train_locally
from repro.federated.replies import ordered_replies, partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.federated.tiers import Tier
from repro.models import get_weights

TRAIN_KEYS = "train-keys"
"""Config key listing the parameter names a client trains (and sends back)."""


def layer_groups(keys: Sequence[str]) -> list[list[str]]:
    """State-dict keys grouped by layer (the module prefix before the last dot), input side first."""
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(k.rsplit(".", 1)[0], []).append(k)
    return list(groups.values())


def output_side_keys(keys: Sequence[str], trained_layers: int) -> list[str]:
    """Keys of the last ``trained_layers`` layers (all keys when it covers every layer)."""
    groups = layer_groups(keys)
    if not 0 <= trained_layers <= len(groups):
        raise ValueError(f"trained_layers must be in 0..{len(groups)}, got {trained_layers}")
    return [k for g in groups[len(groups) - trained_layers:] for k in g]


def layerwise_average(current: ArrayRecord, replies: Sequence[RecordDict], weight_key: str = "num-examples",
                      ) -> ArrayRecord:
    """Average each array over the replies that contain it; arrays in no reply keep their current value.

    Arrays are grouped by the set of replies that hold them and each group is
    averaged with Flower's ``aggregate_arrayrecords`` (weights: ``weight_key``
    of each reply's metrics), so when every reply holds every array the result
    is exactly Flower's FedAvg.
    """
    holders: dict[tuple[int, ...], list[str]] = {}
    for key in current.keys():
        who = tuple(i for i, r in enumerate(replies) if key in r["arrays"])
        if who:
            holders.setdefault(who, []).append(key)
    merged = dict(current.items())
    for who, keys in holders.items():
        subset = [RecordDict({"arrays": ArrayRecord({k: replies[i]["arrays"][k] for k in keys}),
                              "metrics": replies[i]["metrics"]}) for i in who]
        merged.update(aggregate_arrayrecords(subset, weight_key).items())
    return ArrayRecord({k: merged[k] for k in current.keys()})


class PartialTraining(SeededFedAvg):
    """EmbracingFL's server: per-client trained layers by tier, layer-wise aggregation over contributors.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    tier_of
        The tier of every partition id.  A sampled client whose tier trains
        no layer is not contacted (FedAvg that drops weak clients).
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], tier_of: Sequence[Tier],
                 seed: int = 0) -> None:
        super().__init__(active_clients, local, seed=seed)
        self.tier_of = list(tier_of)
        self.contributors: dict[int, dict[str, int]] = {}
        self._current: ArrayRecord | None = None
        self._keys_of: dict[int, list[str]] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Send the whole model to each sampled client that can train, with the keys it trains."""
        self.ensure_comm(arrays)
        self._current = arrays
        keys = list(arrays.keys())
        messages, self._keys_of = [], {}
        for pid in self.sample(server_round):
            trained = output_side_keys(keys, self.tier_of[pid].trained_layers)
            if not trained:
                continue
            cfg = ConfigRecord({**dict(config), **self.local, "server-round": server_round, TRAIN_KEYS: trained})
            self._keys_of[pid] = trained
            messages.append(Message(RecordDict({"arrays": arrays, "config": cfg}), dst_node_id=self.node_of[pid],
                                    message_type=MessageType.TRAIN))
        return messages

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Layer-wise average over the clients that trained each layer; count each client's traffic."""
        replies = ordered_replies(server_round, replies)
        assert self._current is not None and self.comm is not None
        keys = list(self._current.keys())
        counts = {k: 0 for k in keys}
        for m in replies:
            pid = partition_of(m)
            self.comm.record(server_round, keys, self._keys_of[pid], 1)
            for k in m.content["arrays"].keys():
                counts[k] += 1
        self.contributors[server_round] = counts
        if not replies:
            return self._current, None
        arrays = layerwise_average(self._current, [m.content for m in replies])
        metrics = self.train_metrics_aggr_fn([m.content for m in replies], self.weighted_by_key)
        return arrays, metrics


def train_partial(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """A client round that trains only the parameters listed in ``config["train-keys"]`` and sends them back."""
    rnd = begin_round(spec, msg, context)
    keys = rnd.config[TRAIN_KEYS] if TRAIN_KEYS in rnd.config else None
    if keys is not None and not isinstance(keys, list):
        raise TypeError(f"config {TRAIN_KEYS!r}: expected a list of parameter names, got {keys!r}")
    trained = None if keys is None else {str(k) for k in keys}
    params = dict(rnd.model.named_parameters())
    try:
        for k, p in params.items():
            p.requires_grad_(trained is None or k in trained)
        loss = train_locally(rnd.model, rnd.x, rnd.y, rnd.settings)
    finally:
        for p in params.values():
            p.requires_grad_(True)
    weights = get_weights(rnd.model)
    send = weights if trained is None else {k: v for k, v in weights.items() if k in trained}
    return finish_round(msg, rnd, send, loss)


def make_partial_client_app(spec: TaskSpec, run_config: dict | None = None) -> ClientApp:
    """The ``ClientApp`` of partial training (see :func:`train_partial`)."""
    return client_app_with(lambda msg, context: train_partial(spec, msg, context), run_config)

