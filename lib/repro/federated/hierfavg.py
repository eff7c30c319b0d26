"""HierFAVG (Liu et al.): client-edge-cloud federated averaging, as a Flower strategy.

Clients are attached to edges.  Every round, the sampled clients of each
edge start from their edge's model, train locally, and the edge averages
their replies with Flower's own ``FedAvg`` aggregation.  Every
``cloud_every`` rounds the cloud averages the edge models, weighted by the
samples each edge aggregated since the last cloud round, with Flower's
``aggregate_arrayrecords``, and every edge restarts from the result.  With
one edge and ``cloud_every = 1`` this is exactly FedAvg (tested).

The arrays the strategy returns after a round (what the engine evaluates)
are the cloud model after a cloud round, else the sample-weighted mean of
the edge models, which no edge holds (an evaluation view only).

Communication: the client-edge traffic goes into the per-layer
:class:`~repro.federated.comm.CommLedger`; the edge-cloud traffic (each
edge uploads and downloads the model at a cloud round) is counted apart in
:attr:`HierFAVG.cloud_scalars`.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from repro.federated.replies import metric, ordered_replies, partition_of
from repro.federated.strategies import SeededFedAvg


class HierFAVG(SeededFedAvg):
    """Hierarchical FedAvg over edges.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg` (clients are sampled over all edges).
    edge_of
        The edge of every partition id.
    cloud_every
        Edge rounds between two cloud aggregations.

    Attributes
    ----------
    edge_models
        The current model of every edge.
    cloud_scalars
        Scalars moved between the edges and the cloud, both directions.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], edge_of: Sequence[int], seed: int = 0,
                 cloud_every: int = 1) -> None:
        super().__init__(active_clients, local, seed=seed)
        if cloud_every < 1:
            raise ValueError(f"cloud_every must be >= 1, got {cloud_every}")
        self.edge_of = list(edge_of)
        self.cloud_every = cloud_every
        self.edge_models: dict[int, ArrayRecord] = {}
        self.cloud_scalars = 0
        self._edge_samples: dict[int, float] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Send every sampled client its edge's model (all edges restart from ``arrays`` after a cloud round)."""
        self.ensure_comm(arrays)
        if not self.edge_models or (server_round - 1) % self.cloud_every == 0:
            self.edge_models = {e: arrays for e in sorted(set(self.edge_of))}
        pids = self.sample(server_round)
        keys = list(arrays.keys())
        cfg = ConfigRecord({**dict(config), **self.local, "server-round": server_round, "send-keys": keys})
        self.round_traffic = (server_round, keys, keys)
        return [Message(RecordDict({"arrays": self.edge_models[self.edge_of[p]], "config": cfg}),
                        dst_node_id=self.node_of[p], message_type=MessageType.TRAIN) for p in pids]

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """FedAvg within each edge; at a cloud round, the sample-weighted average of the edges."""
        replies = ordered_replies(server_round, replies)
        by_edge: dict[int, list[Message]] = {}
        for m in replies:
            by_edge.setdefault(self.edge_of[partition_of(m)], []).append(m)
        metrics = None
        for edge, msgs in by_edge.items():
            edge_model, metrics = SeededFedAvg.aggregate_train(self, server_round, msgs)
            assert edge_model is not None  # an edge in by_edge has at least one reply
            self.edge_models[edge] = edge_model
            self._edge_samples[edge] = self._edge_samples.get(edge, 0.0) + sum(metric(m, "num-examples") for m in msgs)
        edges = [e for e in sorted(self.edge_models) if self._edge_samples.get(e, 0.0) > 0]
        merged = aggregate_arrayrecords(
            [RecordDict({"arrays": self.edge_models[e], "metrics": MetricRecord({"num-examples": self._edge_samples[e]})})
             for e in edges], "num-examples")
        if server_round % self.cloud_every == 0:
            size = sum(int(v.numpy().size) for v in merged.values())
            self.cloud_scalars += 2 * size * len(edges)
            self._edge_samples = {}
        return merged, metrics
