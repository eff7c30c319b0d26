"""SFETEC (reconstructed from its abstract): base models on clients, core models on edges, cores averaged at the cloud.

The model is cut into a base (client side) and a core (edge side) with
:func:`repro.federated.split.split_sequential`.  Each round, every client of
an edge runs ``steps`` split-learning steps (:func:`repro.federated.split.split_step`)
with its edge, which trains its core on the activations pooled from all its
clients; then the edge averages its clients' bases.  Every ``cloud_every``
rounds the cloud averages the edges' cores (and, with ``share_bases``, their
bases), weighted by the edges' samples, and broadcasts them.  Averages are
Flower's ``aggregate_arrayrecords``.  Raw data never leave the clients and
the cloud never sees activations.

SplitFed, the split-learning baseline, is the same loop with one server
(a single "edge" holding every client) synchronised every round
(:meth:`SplitHierarchy.splitfed`).

Everything beyond the abstract is our inference: whether bases are shared
across edges (``share_bases``), the pooled core step, the aggregation
periods.  The loop runs in process (every message of a split step would
be one Flower message; the bytes are counted instead, see :class:`RoundTraffic`).

:class:`CostModel` turns the counted bytes and the model's FLOPs into a
simulated wall-clock time per round.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from flwr.app import MetricRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from repro.devices import resolve_device
from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.client import client_seed, round_seed
from repro.federated.split import Exchange, SplitBatch, split_sequential, split_step
from repro.federated.task import TaskSpec, build_model, client_data, evaluate
from repro.federated.tiers import FLOAT_BYTES
from repro.models import get_weights, set_weights


@dataclass(frozen=True, kw_only=True)
class SplitHierarchy:
    """Who serves whom: the clients of every edge, and how often the cloud aggregates.

    Attributes
    ----------
    edges
        Partition ids of each edge's clients.
    cloud_every
        Rounds between two cloud aggregations.
    share_bases
        Average the bases across edges at the cloud too (else each edge keeps its own base).
    """

    edges: tuple[tuple[int, ...], ...]
    cloud_every: int = 1
    share_bases: bool = True

    @classmethod
    def splitfed(cls, num_clients: int) -> SplitHierarchy:
        """One server for every client, synchronised every round (SplitFed)."""
        return cls(edges=(tuple(range(num_clients)),), cloud_every=1, share_bases=True)


@dataclass(frozen=True, kw_only=True)
class RoundTraffic:
    """Bytes of one round, per kind of link.

    Attributes
    ----------
    client_up, client_down
        Per client (mean over clients): activations and labels up, gradients down, plus the base at aggregation.
    cloud
        Between the edges and the cloud, all edges, both directions.
    """

    client_up: float
    client_down: float
    cloud: float


def weighted_average(models: Sequence[dict[str, np.ndarray]], weights: Sequence[float]) -> dict[str, np.ndarray]:
    """The ``weights``-weighted average of ``models`` (Flower's ``aggregate_arrayrecords``)."""
    records = [RecordDict({"arrays": to_arrayrecord(m), "metrics": MetricRecord({"n": float(w)})})
               for m, w in zip(models, weights)]
    return from_arrayrecord(aggregate_arrayrecords(records, "n"))


@dataclass(kw_only=True)
class SplitHistory:
    """Accuracy at each evaluated round, the traffic of every round, and the cloud's model at the end."""

    rounds: list[int]
    accuracy: list[float]
    traffic: list[RoundTraffic]
    final: dict[str, np.ndarray] = field(default_factory=dict)


def run_split_training(spec: TaskSpec, cut: int, hierarchy: SplitHierarchy, rounds: int, steps: int, batch_size: int,
                       lr: float, seed: int, eval_rounds: Sequence[int], device: str = "cpu") -> SplitHistory:
    """Train with SFETEC's hierarchy (or SplitFed's) and evaluate the cloud's model.

    Parameters
    ----------
    spec
        The task; its MLP is cut after module ``cut``.
    cut
        Index of the first core module in the ``nn.Sequential``.
    hierarchy
        Edges, cloud period and base sharing.
    rounds, steps, batch_size, lr
        Rounds, split steps per round, per-client batch, SGD learning rate (no momentum).
    seed
        Run seed (init; batches are drawn per client and round from it).
    eval_rounds
        Rounds after which to evaluate (0: the initial model).  The evaluated
        model is the sample-weighted average of the edges' bases and cores.
    device
        Where bases and cores train (``cpu``, ``cuda`` or ``auto``); batches
        are drawn on the CPU and evaluation runs there.
    """
    torch.set_num_threads(1)  # as every federated client does (repro.federated.client.begin_round)
    init = get_weights(build_model(spec, seed))
    data = {p: client_data(spec, p) for edge in hierarchy.edges for p in edge}
    size = {p: len(data[p][1]) for p in data}
    edge_size = [sum(size[p] for p in edge) for edge in hierarchy.edges]
    dev = resolve_device(device)
    models = [build_model(spec, seed).to(dev) for _ in hierarchy.edges]  # edge e's base (its clients' start) and core
    for m in models:
        set_weights(m, init)
    history = SplitHistory(rounds=[], accuracy=[], traffic=[])
    probe = build_model(spec, seed)

    def evaluate_cloud(r: int) -> None:
        set_weights(probe, weighted_average([get_weights(m) for m in models], edge_size))
        history.rounds.append(r)
        history.accuracy.append(evaluate(spec, probe)["accuracy"])

    if 0 in eval_rounds:
        evaluate_cloud(0)
    for r in range(1, rounds + 1):
        traffic, cloud_bytes = Exchange(up=0, down=0), 0
        for e, edge in enumerate(hierarchy.edges):
            base, core = split_sequential(models[e], cut)
            bases = {p: copy.deepcopy(base) for p in edge}  # every client starts from its edge's base
            core_opt = torch.optim.SGD(core.parameters(), lr=lr)
            opts = {p: torch.optim.SGD(bases[p].parameters(), lr=lr) for p in edge}
            rngs = {p: np.random.default_rng(client_seed(round_seed(seed, r), p)) for p in edge}
            for _ in range(steps):
                batch = []
                for p in edge:
                    x, y = data[p]
                    idx = rngs[p].choice(len(y), size=min(batch_size, len(y)), replace=False)
                    batch.append(SplitBatch(base=bases[p], optimizer=opts[p], x=torch.from_numpy(x[idx]).to(dev),
                                            y=torch.from_numpy(y[idx]).to(dev)))
                _, exchanged = split_step(batch, core, core_opt)
                for ex in exchanged:
                    traffic = traffic + ex
            base_avg = weighted_average([get_weights(bases[p]) for p in edge], [size[p] for p in edge])
            set_weights(models[e], base_avg)
            base_bytes = len(edge) * sum(v.size for v in base_avg.values()) * FLOAT_BYTES
            traffic = traffic + Exchange(up=base_bytes, down=base_bytes)
        if r % hierarchy.cloud_every == 0 and len(hierarchy.edges) > 1:
            weights = [get_weights(m) for m in models]
            cloud = weighted_average(weights, edge_size)
            shared = [k for k in cloud if hierarchy.share_bases or k not in base_avg]
            for m, w in zip(models, weights):
                set_weights(m, {k: cloud[k] if k in shared else w[k] for k in w})
            cloud_bytes = 2 * len(models) * sum(cloud[k].size for k in shared) * FLOAT_BYTES
        clients = sum(len(edge) for edge in hierarchy.edges)
        history.traffic.append(
            RoundTraffic(client_up=traffic.up / clients, client_down=traffic.down / clients, cloud=cloud_bytes),
        )
        if r in eval_rounds:
            evaluate_cloud(r)
    history.final = weighted_average([get_weights(m) for m in models], edge_size)
    return history


# ----- simulated wall-clock --------------------------------------------------------------------
def training_flops(layers: Sequence, batch_size: int) -> float:
    """FLOPs of one forward and backward pass of ``layers`` (:class:`~repro.federated.tiers.LayerShape`) on a batch.

    Two FLOPs per multiply-add forward, twice that backward (input and weight gradients).
    """
    return 6.0 * batch_size * sum(lay.fan_in * lay.fan_out for lay in layers)


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """Constants of the simulated wall-clock (all assumed; the chapter sweeps the deciding one).

    Attributes
    ----------
    client_flops
        A client's training speed, FLOP/s.
    server_speedup
        An edge server's (and the cloud's) speed relative to a client.
    wan_bandwidth
        Client to cloud link, bytes/s (FedAvg's and SplitFed's clients).
    edge_bandwidth
        Client to edge link, bytes/s (HierFAVG's and SFETEC's clients).
    backbone_bandwidth
        Edge to cloud link, bytes/s.
    """

    client_flops: float = 1e9
    server_speedup: float = 20.0
    wan_bandwidth: float = 1e6
    edge_bandwidth: float = 1e6
    backbone_bandwidth: float = 1e7

    def fedavg_round(
        self, model_bytes: float, step_flops: float, steps: int, hierarchical: bool = False, cloud_bytes: float = 0.0
    ) -> float:
        """Seconds of one round of FedAvg (or, ``hierarchical``, of HierFAVG, whose clients talk to an edge)."""
        link = self.edge_bandwidth if hierarchical else self.wan_bandwidth
        return 2 * model_bytes / link + steps * step_flops / self.client_flops + cloud_bytes / self.backbone_bandwidth

    def split_round(
        self, traffic: RoundTraffic, base_flops: float, core_flops: float, steps: int, clients_per_server: int, at_edge: bool
    ) -> float:
        """Seconds of one split-learning round: per step, the base, the upload, the pooled core, the download.

        ``core_flops`` is one client's batch through the core; the server
        processes ``clients_per_server`` of them per step.  The per-client
        bytes of ``traffic`` cross the client's link (edge link ``at_edge``,
        else the WAN), the cloud bytes the backbone.
        """
        link = self.edge_bandwidth if at_edge else self.wan_bandwidth
        server = self.client_flops * self.server_speedup
        compute = steps * (base_flops / self.client_flops + clients_per_server * core_flops / server)
        return compute + (traffic.client_up + traffic.client_down) / link + traffic.cloud / self.backbone_bandwidth
