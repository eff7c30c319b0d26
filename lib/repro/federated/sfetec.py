"""SFETEC (reconstructed from its abstract): base models on clients, core models on edges, cores averaged at the cloud.

The model is cut into a base (client side) and a core (edge side) with
:func:`repro.federated.split.split_sequential`.  Each round, every client of
an edge runs ``steps`` split-learning steps (:func:`repro.federated.split.split_step`)
with its edge, which trains its core on the activations pooled from all its
clients while each client's base descends its own loss; then the edge
averages its clients' bases (:func:`edge_round`).  Every ``cloud_every``
rounds the cloud averages the edges' cores (and, with ``share_bases``, their
bases), weighted by the edges' samples, and broadcasts them.  Averages are
Flower's ``aggregate_arrayrecords``.  Raw data never leave the clients and
the cloud never sees activations.

SplitFed, the split-learning baseline, is the same loop with one server
(a single "edge" holding every client) synchronised every round, where the
server keeps one copy of the core per client, trained on that client's
activations and averaged with the bases at the end of each round
(:meth:`SplitHierarchy.splitfed`; SplitFed's SFLV1, as the FedDCT authors'
``train_splitfed.py`` does).

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
    server_copies
        The server keeps one copy of the core per client, trained on that client's activations alone and
        averaged with the bases at the end of the round (SplitFed's SFLV1, as the FedDCT authors'
        ``train_splitfed.py``); else one core per edge descends the pooled loss of all its clients every step
        (our reading of SFETEC).
    """

    edges: tuple[tuple[int, ...], ...]
    cloud_every: int = 1
    share_bases: bool = True
    server_copies: bool = False

    def __post_init__(self) -> None:
        if not self.edges or any(not edge for edge in self.edges):
            raise ValueError(f"parameter 'edges': every edge needs at least one client, got {self.edges}")
        if self.cloud_every < 1:
            raise ValueError(f"parameter 'cloud_every': must be >= 1, got {self.cloud_every}")

    @classmethod
    def splitfed(cls, num_clients: int) -> SplitHierarchy:
        """SplitFed (SFLV1): one server for every client, a core copy per client, synchronised every round."""
        return cls(edges=(tuple(range(num_clients)),), cloud_every=1, share_bases=True, server_copies=True)


@dataclass(frozen=True, kw_only=True)
class SplitSchedule:
    """The local training of a split run.

    Attributes
    ----------
    rounds
        Rounds (each: ``steps`` split steps per client, then the edge's averages).
    steps, batch_size, lr
        Split steps per round, per-client batch, SGD learning rate (no momentum).
    """

    rounds: int
    steps: int
    batch_size: int
    lr: float

    def __post_init__(self) -> None:
        for name in ("rounds", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"parameter {name!r}: must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"parameter 'lr': must be > 0, got {self.lr}")


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


Batch = tuple[torch.Tensor, torch.Tensor]
"""One client's ``(inputs, labels)`` for one split step."""


def edge_round(model: torch.nn.Module, cut: int, batches: Sequence[Sequence[Batch]], weights: Sequence[float],
               lr: float, server_copies: bool = False) -> Exchange:
    """One round of one edge: every client's split steps, then the sample-weighted averages, in place in ``model``.

    Parameters
    ----------
    model
        The edge's model (base and core), which every client starts from; it ends as the average.
    cut
        Index of the first core module.
    batches
        ``batches[i][t]``: client ``i``'s batch at step ``t`` (every client the same number of steps).
    weights
        Each client's weight in the averages (its samples).
    lr
        SGD learning rate (no momentum) of bases and cores.
    server_copies
        One core copy per client trained on its own activations and averaged at the end
        (:attr:`SplitHierarchy.server_copies`); else one core descends the pooled loss every step.

    Returns
    -------
    Exchange
        Bytes moved between the clients and the server this round, all clients: the split steps' activations,
        labels and gradients, and each client's base up and down at the average.
    """
    if len({len(b) for b in batches}) != 1:
        raise ValueError("parameter 'batches': every client must run the same number of steps")
    base, core = split_sequential(model, cut)
    bases = [copy.deepcopy(base) for _ in batches]
    opts = [torch.optim.SGD(b.parameters(), lr=lr) for b in bases]
    cores = [copy.deepcopy(core) for _ in batches] if server_copies else [core]
    core_opts = [torch.optim.SGD(c.parameters(), lr=lr) for c in cores]
    traffic = Exchange(up=0, down=0)
    for step in range(len(batches[0])):
        clients = [SplitBatch(base=bases[i], optimizer=opts[i], x=b[step][0], y=b[step][1]) for i, b in enumerate(batches)]
        groups = [([c], i) for i, c in enumerate(clients)] if server_copies else [(clients, 0)]
        for members, k in groups:
            _, exchanged = split_step(members, cores[k], core_opts[k])
            for ex in exchanged:
                traffic = traffic + ex
    averaged = weighted_average([get_weights(b) for b in bases], weights)
    if server_copies:
        averaged.update(weighted_average([get_weights(c) for c in cores], weights))
    set_weights(model, averaged)
    base_bytes = len(batches) * sum(v.size for v in get_weights(base).values()) * FLOAT_BYTES
    return traffic + Exchange(up=base_bytes, down=base_bytes)


@dataclass(kw_only=True)
class SplitHistory:
    """Accuracy at each evaluated round, the traffic of every round, and the cloud's model at the end."""

    rounds: list[int]
    accuracy: list[float]
    traffic: list[RoundTraffic]
    final: dict[str, np.ndarray] = field(default_factory=dict)


def run_split_training(spec: TaskSpec, *, cut: int, hierarchy: SplitHierarchy, schedule: SplitSchedule, seed: int,
                       eval_rounds: Sequence[int], device: str = "cpu") -> SplitHistory:
    """Train with SFETEC's hierarchy (or SplitFed's) and evaluate the cloud's model.

    Parameters
    ----------
    spec
        The task; its MLP is cut after module ``cut``.
    cut
        Index of the first core module in the ``nn.Sequential``.
    hierarchy
        Edges, cloud period, base sharing and whether the server keeps a core copy per client.
    schedule
        Rounds, split steps per round, per-client batch and learning rate.
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
    base_keys = set(get_weights(split_sequential(models[0], cut)[0]))
    history = SplitHistory(rounds=[], accuracy=[], traffic=[])
    probe = build_model(spec, seed)

    def evaluate_cloud(r: int) -> None:
        set_weights(probe, weighted_average([get_weights(m) for m in models], edge_size))
        history.rounds.append(r)
        history.accuracy.append(evaluate(spec, probe)["accuracy"])

    def draw(p: int, r: int) -> list[Batch]:
        x, y = data[p]
        rng = np.random.default_rng(client_seed(round_seed(seed, r), p))
        picks = [rng.choice(len(y), size=min(schedule.batch_size, len(y)), replace=False) for _ in range(schedule.steps)]
        return [(torch.from_numpy(x[i]).to(dev), torch.from_numpy(y[i]).to(dev)) for i in picks]

    if 0 in eval_rounds:
        evaluate_cloud(0)
    for r in range(1, schedule.rounds + 1):
        traffic, cloud_bytes = Exchange(up=0, down=0), 0
        for e, edge in enumerate(hierarchy.edges):
            traffic = traffic + edge_round(models[e], cut, [draw(p, r) for p in edge], [size[p] for p in edge],
                                           schedule.lr, hierarchy.server_copies)
        if r % hierarchy.cloud_every == 0 and len(hierarchy.edges) > 1:
            weights = [get_weights(m) for m in models]
            cloud = weighted_average(weights, edge_size)
            shared = [k for k in cloud if hierarchy.share_bases or k not in base_keys]
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
