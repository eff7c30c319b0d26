"""Seeded Flower strategies.

:class:`SeededFedAvg` is Flower's own ``FedAvg`` (``flwr.serverapp.strategy``)
with two additions every chapter needs: client sampling from a seeded
generator over *partition ids* (so every engine picks the same clients,
whatever node ids it assigned), and per-layer communication accounting.  It
can be dropped into a Flower deployment like any other strategy.
:class:`SeededFedProx` is Flower's ``FedProx`` with the same sampling.

The clients' mini-batches do not depend on the strategy: clients seed them
from the run seed and the server round (:mod:`repro.federated.client`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, cast

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, FedProx

from repro.federated.arrays import from_array, to_arrayrecord
from repro.federated.comm import CommLedger
from repro.federated.replies import number, ordered_replies


def average_arrays(contents: list[RecordDict], weighted_by_key: str) -> ArrayRecord:
    """Flower's ``aggregate_arrayrecords``, with each reply's arrays read by :func:`~repro.federated.arrays.from_array`.

    The same weights (each reply's ``weighted_by_key`` over their sum), the
    same order of operations (``a * w``, then ``+= a * w`` reply by reply), so
    the same bits as Flower's function (tested); only the decoding of the
    replies skips ``np.load``'s header parsing, which dominated the server's
    time for small models.

    Parameters
    ----------
    contents
        The valid replies' contents, each with one ``MetricRecord`` and its array records.
    weighted_by_key
        The metric that weights each reply (``num-examples`` in Flower's FedAvg).
    """
    weights = [cast(float, next(iter(c.metric_records.values()))[weighted_by_key]) for c in contents]
    total = sum(weights)
    average: dict[str, np.ndarray] = {}
    for content, weight in zip(contents, [w / total for w in weights], strict=True):
        for record in content.array_records.values():
            for key, value in record.items():
                if key not in average:
                    average[key] = from_array(value) * weight
                else:
                    average[key] += from_array(value) * weight
    return to_arrayrecord(average)


@dataclass(frozen=True, kw_only=True)
class StepDecay:
    """A step schedule of the clients' learning rate: multiplied by ``factor`` after each milestone round.

    Attributes
    ----------
    milestones
        Server rounds after which the rate drops (round ``m + 1`` is the first at the lower rate).
    factor
        The multiplier at each milestone, in ``(0, 1]``.
    """

    milestones: tuple[int, ...]
    factor: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 < self.factor <= 1.0:
            raise ValueError(f"factor must be in (0, 1], got {self.factor}")
        if any(m < 1 for m in self.milestones):
            raise ValueError(f"milestones must be rounds >= 1, got {self.milestones}")

    def scale(self, server_round: int) -> float:
        """The multiplier of the base rate in ``server_round``."""
        return float(self.factor ** sum(server_round > m for m in self.milestones))


class SeededFedAvg(FedAvg):
    """FedAvg with seeded sampling of ``active_clients`` clients and communication accounting.

    Parameters
    ----------
    active_clients
        Clients sampled each period.
    local
        Local-training settings sent to clients: ``steps``, ``lr``,
        ``momentum``, ``batch-size``.
    seed
        Seed of the client sampler (the clients seed their mini-batches from the run seed).
    resample_every
        Draw a new set of clients every this many rounds (1 = every round).
    lr_decay
        A step schedule of ``local["lr"]`` over the server rounds (``None``: a constant rate).

    Attributes
    ----------
    node_of
        Partition id -> node id on the engine (set by :meth:`set_partition_map`).
    sampler_rng
        The seeded generator that draws clients.
    round_traffic
        ``(round, arrays sent, arrays asked back)`` of the round in progress, for the ledger.
    comm
        The communication ledger (``None`` before the first round).
    sampled
        Round -> partition ids that trained.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0,
                 resample_every: int = 1, lr_decay: StepDecay | None = None) -> None:
        super().__init__(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=1, min_train_nodes=1)
        if active_clients < 1:
            raise ValueError(f"active_clients must be >= 1, got {active_clients}")
        if resample_every < 1:
            raise ValueError(f"resample_every must be >= 1, got {resample_every}")
        self.active_clients = active_clients
        self.local = dict(local)
        self.seed = seed
        self.resample_every = resample_every
        self.lr_decay = lr_decay
        self.sampler_rng = np.random.default_rng(seed)
        self.node_of: dict[int, int] = {}
        self._active: list[int] = []
        self.comm: CommLedger | None = None
        self.sampled: dict[int, list[int]] = {}

    # ----- setup ---------------------------------------------------------
    def set_partition_map(self, node_of_partition: dict[int, int]) -> None:
        """Tell the strategy which node id serves each partition id."""
        if self.active_clients > len(node_of_partition):
            raise ValueError(f"active_clients={self.active_clients} exceeds the {len(node_of_partition)} clients")
        self.node_of = dict(node_of_partition)

    def ensure_comm(self, arrays: ArrayRecord) -> CommLedger:
        """The communication ledger, created on first use with the sizes of ``arrays``."""
        if self.comm is None:
            self.comm = CommLedger(sizes={k: int(v.numpy().size) for k, v in arrays.items()})
        return self.comm

    # ----- hooks for subclasses -------------------------------------------
    def sample(self, server_round: int) -> list[int]:
        """Partition ids active in ``server_round`` (redrawn every ``resample_every`` rounds)."""
        if not self.node_of:
            raise RuntimeError("call set_partition_map() before training")
        if (server_round - 1) % self.resample_every == 0 or not self._active:
            pids = sorted(self.node_of)
            self._active = sorted(int(p) for p in self.sampler_rng.choice(pids, self.active_clients, replace=False))
        self.sampled[server_round] = list(self._active)
        return self._active

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """Arrays to send this round and the keys clients must send back (FedAvg: all, both ways)."""
        return arrays, list(arrays.keys())

    # ----- Flower API -----------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample clients and send each the round's arrays and settings."""
        self.ensure_comm(arrays)
        pids = self.sample(server_round)
        send, back = self.payload(server_round, arrays)
        cfg = ConfigRecord(dict(config))
        cfg.update({k: v for k, v in self.local.items()})
        if self.lr_decay is not None:
            cfg["lr"] = float(self.local["lr"]) * self.lr_decay.scale(server_round)
        cfg["server-round"] = server_round
        cfg["send-keys"] = back
        self.round_traffic = (server_round, list(send.keys()), back)
        return [
            Message(RecordDict({"arrays": send, "config": cfg}), dst_node_id=self.node_of[p],
                    message_type=MessageType.TRAIN)
            for p in pids
        ]

    def _next_aggregation(self) -> object:
        """The ``aggregate_train`` that ``super()`` reaches from this class in ``type(self)``'s MRO."""
        mro = type(self).__mro__
        return next(vars(c)["aggregate_train"] for c in mro[mro.index(SeededFedAvg) + 1:] if "aggregate_train" in vars(c))

    def _fedavg_aggregate(self, replies: list[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's ``FedAvg.aggregate_train`` (its checks, logs and metric average) with :func:`average_arrays`."""
        valid, _ = self._check_and_log_replies(replies, is_train=True)
        if not valid:
            return None, None
        contents = [m.content for m in valid]
        return average_arrays(contents, self.weighted_by_key), self.train_metrics_aggr_fn(contents, self.weighted_by_key)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's FedAvg aggregation (arrays read by :func:`average_arrays`), plus the round's communication record."""
        replies = ordered_replies(server_round, replies)
        if self._next_aggregation() is FedAvg.aggregate_train:
            arrays, metrics = self._fedavg_aggregate(replies)
        else:  # a Flower strategy between us and FedAvg (FedProx's is FedAvg's; FedAdam steps after it) goes first
            arrays, metrics = super().aggregate_train(server_round, replies)
        rnd, down, up = self.round_traffic
        assert self.comm is not None
        self.comm.record(rnd, down, up, len(replies))
        return arrays, metrics


class SeededFedProx(SeededFedAvg, FedProx):
    """Flower's ``FedProx`` with :class:`SeededFedAvg`'s seeded sampling.

    The server side of FedProx is FedAvg plus ``proximal-mu`` in the clients'
    config; the regularised client (:func:`repro.federated.regularised.make_regularised_client_app`)
    adds the term ``mu/2 ||theta - theta_global||^2`` to the local loss.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0, mu: float = 0.01) -> None:
        super().__init__(active_clients, local, seed=seed)
        if mu < 0:
            raise ValueError(f"mu must be >= 0, got {mu}")
        self.proximal_mu = float(mu)
        self.local["proximal-mu"] = float(mu)


def discover_partitions(grid: Grid, expected: int | None = None, timeout: float = 600.0) -> dict[int, int]:
    """Ask every node for its partition id; return ``{partition_id: node_id}``.

    Parameters
    ----------
    grid
        The grid the nodes are connected to.
    expected
        Wait (up to ``timeout`` seconds) until this many nodes have connected.
    timeout
        Seconds to wait for nodes and for their answers.
    """
    deadline = time.monotonic() + timeout
    nodes = sorted(grid.get_node_ids())
    while expected is not None and len(nodes) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(nodes)} of {expected} nodes connected within {timeout} s")
        time.sleep(0.05)
        nodes = sorted(grid.get_node_ids())
    msgs = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]
    out: dict[int, int] = {}
    for reply in grid.send_and_receive(msgs, timeout=timeout):
        if reply.has_error():
            raise RuntimeError(f"node {reply.metadata.src_node_id} failed the query: {reply.error.reason}")
        out[int(number(reply.content["info"], "partition-id"))] = int(reply.metadata.src_node_id)
    if len(out) != len(nodes):
        raise RuntimeError(f"only {len(out)} of {len(nodes)} nodes answered the partition query")
    return out

