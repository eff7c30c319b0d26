"""Aggregation-weight policies: who counts how much in a round's average.

FedAvg weighs each client by its sample count.  A policy replaces that rule
with any non-negative weights computed from the round's per-client
statistics (sample count, training loss, partition id, ...); FedDRL's agent
is one such policy.  :class:`PolicyFedAvg` applies a policy inside Flower's
FedAvg message handling.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.replies import partition_of, stats_of
from repro.federated.strategies import SeededFedAvg


class AggregationWeightPolicy:
    """Maps the round's client statistics to aggregation weights (non-negative, summing to 1)."""

    name = "policy"

    def raw_weights(self, server_round: int, stats: list[dict[str, float]]) -> np.ndarray:
        """Unnormalised non-negative weights, one per client."""
        raise NotImplementedError

    def weights(self, server_round: int, stats: list[dict[str, float]]) -> np.ndarray:
        """Normalised weights; raises if they are negative, non-finite or all zero."""
        w = checked_raw_weights(self, server_round, stats)
        return w / w.sum()


class SampleSizeWeights(AggregationWeightPolicy):
    """FedAvg's rule: proportional to ``num-examples``."""

    name = "sample size"

    def raw_weights(self, server_round, stats):  # noqa: D102
        return np.array([s["num-examples"] for s in stats], dtype=np.float64)


class UniformWeights(AggregationWeightPolicy):
    """Every client counts the same."""

    name = "uniform"

    def raw_weights(self, server_round, stats):  # noqa: D102
        return np.ones(len(stats))


class PolicyFedAvg(SeededFedAvg):
    """Seeded FedAvg whose average uses an :class:`AggregationWeightPolicy`; keeps the weights per round."""

    def __init__(self, active_clients: int, local: dict[str, float | int], policy: AggregationWeightPolicy,
                 seed: int = 0) -> None:
        super().__init__(active_clients, local, seed=seed)
        self.policy = policy
        self.weights_used: dict[int, dict[int, float]] = {}

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Average the replies with the policy's weights (messages checked and counted as in FedAvg)."""
        replies = sorted(replies, key=lambda m: partition_of(m))
        _, metrics = super().aggregate_train(server_round, replies)
        stats = [stats_of([m])[0] for m in replies]
        w = self.policy.weights(server_round, stats)
        self.weights_used[server_round] = {int(s["partition-id"]): float(x) for s, x in zip(stats, w)}
        models = [from_arrayrecord(m.content["arrays"]) for m in replies]
        out = {k: sum(wi * m[k].astype(np.float64) for wi, m in zip(w, models)).astype(models[0][k].dtype)
               for k in models[0]}
        return to_arrayrecord(out), metrics


def checked_raw_weights(policy: AggregationWeightPolicy, server_round: int,
                        stats: list[dict[str, float]]) -> np.ndarray:
    """``policy.raw_weights`` called once and validated as :meth:`AggregationWeightPolicy.weights` does."""
    w = np.asarray(policy.raw_weights(server_round, stats), dtype=np.float64)
    if w.shape != (len(stats),) or not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"policy {policy.name!r} gave invalid weights {w}")
    return w


class FlowerPolicyFedAvg(PolicyFedAvg):
    """:class:`PolicyFedAvg` whose average is Flower's own ``aggregate_arrayrecords`` over the raw weights.

    Flower normalises the raw weights exactly as FedAvg normalises sample
    counts, so a policy whose raw weights are the sample counts (or equal
    weights over equally sized clients) gives FedAvg's model bit for bit.
    """

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Average the replies with Flower's weighted aggregation, weighting by the policy's raw weights."""
        replies = sorted(replies, key=lambda m: partition_of(m))
        _, metrics = SeededFedAvg.aggregate_train(self, server_round, replies)
        stats = [stats_of([m])[0] for m in replies]
        raw = checked_raw_weights(self.policy, server_round, stats)
        self.weights_used[server_round] = {int(s["partition-id"]): float(x)
                                           for s, x in zip(stats, raw / raw.sum())}
        records = [RecordDict({"arrays": m.content["arrays"], "metrics": MetricRecord({"w": float(x)})})
                   for m, x in zip(replies, raw)]
        return aggregate_arrayrecords(records, "w"), metrics
