"""CADIS: clustered aggregation and knowledge-distilled local training for cluster-skewed data.

Follows the authors' code (AIoT-Lab-BKAI/ORO-CCGRID2023-CADIS, ``algorithm/cadis.py`` at
df1a72f2).  Server side, every round:

1. each returned model's classifier update ``U_i = W_i - W_global`` (the weight of
   the model's last parameterised layer, which the authors' ``get_penultimate_layer``
   returns) is flattened; the round's clients' pairwise cosine similarities are
   added to a running sum ``Q`` and their pair counts to ``F`` (a client's
   similarity with itself is 1);
2. the mean similarities ``Q / F`` are min-max scaled over their positive
   entries (absolute values, pairs never seen together at 0), thresholded at
   the round's threshold into ``A``, and ``C = (A^T A > 0)`` relates clients
   that share a similar client (:func:`cluster_matrix`);
3. a client's impact factor is ``1 / (number of clients related to it)``
   (:func:`impact_factors`) and the round's models are averaged with those
   factors, normalised: every group of related clients gets about the same
   weight whatever its size;
4. the threshold grows as ``min(thr * 1.0005^t, 0.985)`` after round ``t``
   (:class:`ClusterRule`; the chapter can hold it fixed instead, see there).

Client side (:func:`make_kd_client_app`): local SGD on ``CE + kd_mu * KL``,
where the KL compares, on every batch, the distributions of pairwise distances
of the batch's representations (the input of the classifier layer) under the
received global model (the teacher) and under the training model
(:func:`relational_kd`, the authors' ``KL_divergence``).

What differs from that code is said where it happens: the clients' weights
are those of the round's replies (Flower's weighted average, normalised), and
the scaling guards a matrix whose positive entries are all equal.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord
from flwr.clientapp import ClientApp
from scipy.sparse.csgraph import connected_components

from repro.devices import resolve_device
from repro.federated.arrays import from_array
from repro.federated.client import LocalSettings, RunConfig, begin_round, client_app_with, config_number, finish_round, local_sgd
from repro.federated.features import last_layer_updates
from repro.federated.replies import partition_of
from repro.federated.task import TaskSpec
from repro.federated.weighting import AggregationWeightPolicy, FlowerPolicyFedAvg
from repro.models import get_weights

THRESHOLD_GROWTH = 1.0005
"""The threshold is multiplied by ``THRESHOLD_GROWTH ** t`` after round ``t`` (the authors' ``update_threshold``)."""
THRESHOLD_CAP = 0.985
"""The threshold never grows above this (the authors' cap)."""


# ----- similarity and clustering -------------------------------------------------------
def pairwise_cosine(updates: list[np.ndarray] | np.ndarray) -> np.ndarray:
    """Cosine similarities of the clients' flattened updates: symmetric, unit diagonal, 0 against a zero update.

    Parameters
    ----------
    updates
        One array per client (its classifier update), any shape, all the same.
    """
    if not len(updates):
        raise ValueError("updates must not be empty")
    f = np.stack([np.asarray(u, dtype=np.float64).ravel() for u in updates])
    norms = np.linalg.norm(f, axis=1, keepdims=True)
    unit = np.divide(f, norms, out=np.zeros_like(f), where=norms > 0)
    s = np.clip(unit @ unit.T, -1.0, 1.0)
    s = (s + s.T) / 2.0
    np.fill_diagonal(s, 1.0)
    return s


def scaled_mean_similarity(total: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The mean similarities ``total / count`` min-max scaled over their positive entries, as the authors do.

    Pairs never seen together (``count == 0``) are 0.  Entries are ``|(m - min) / (max - min)|`` (the
    absolute value is the authors': a strongly negative mean maps high); when every positive mean is the
    same, every seen pair is 1 (the authors' code would divide by zero).
    """
    total, count = np.asarray(total, dtype=np.float64), np.asarray(count, dtype=np.float64)
    if total.shape != count.shape or total.ndim != 2 or total.shape[0] != total.shape[1]:
        raise ValueError(f"total and count must be square matrices of one shape, got {total.shape}, {count.shape}")
    seen = count > 0
    mean = np.divide(total, count, out=np.zeros_like(total), where=seen)
    positive = mean[mean > 0]
    if positive.size == 0 or positive.max() == positive.min():
        return seen.astype(np.float64)
    lo, hi = positive.min(), positive.max()
    return np.abs((mean - lo) / (hi - lo)) * seen


def cluster_matrix(scaled: np.ndarray, threshold: float) -> np.ndarray:
    """``C = (A^T A > 0)`` with ``A = scaled > threshold``: clients related through a similar client (0/1 matrix)."""
    a = (np.asarray(scaled) > threshold).astype(np.int64)
    return ((a.T @ a) > 0).astype(np.int64)


def impact_factors(related: np.ndarray) -> np.ndarray:
    """Each client's impact factor ``1 / (clients related to it)`` (column sums of ``related``; 0 for none)."""
    sums = np.asarray(related, dtype=np.float64).sum(axis=0)
    return np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)


def cluster_labels(related: np.ndarray) -> np.ndarray:
    """Labels ``0..k-1`` of the connected groups of the relation ``related``, numbered by their first member."""
    _, raw = connected_components(np.asarray(related) > 0, directed=False)
    _, first = np.unique(raw, return_index=True)
    rank = {raw[i]: k for k, i in enumerate(sorted(first))}
    return np.array([rank[r] for r in raw], dtype=np.int64)


def grown_threshold(threshold: float, server_round: int) -> float:
    """The threshold after round ``server_round``: ``min(threshold * 1.0005^t, 0.985)`` (the authors' schedule)."""
    return min(threshold * THRESHOLD_GROWTH**server_round, THRESHOLD_CAP)


def cluster_equal_weights(clusters: np.ndarray, num_examples: np.ndarray) -> np.ndarray:
    """``w_i = (1/#clusters) * n_i / n_cluster(i)``: each cluster's clients share an equal total weight."""
    clusters = np.asarray(clusters)
    n = np.asarray(num_examples, dtype=np.float64)
    if clusters.shape != n.shape:
        raise ValueError(f"clusters and num_examples differ in shape: {clusters.shape} vs {n.shape}")
    if (n < 0).any() or n.sum() <= 0:
        raise ValueError(f"num_examples must be non-negative with a positive sum, got {n}")
    labels = np.unique(clusters)
    per = {c: n[clusters == c].sum() for c in labels}
    return np.array([n[i] / per[c] / len(labels) if per[c] > 0 else 0.0 for i, c in enumerate(clusters)])


class ClusterEqualWeights(AggregationWeightPolicy):
    """Cluster-equal aggregation for clusters given by partition id (the oracle of the planted clusters)."""

    name = "cluster-equal"

    def __init__(self, clusters: dict[int, int] | None = None) -> None:
        self.clusters: dict[int, int] = dict(clusters or {})

    def raw_weights(self, server_round: int, stats: list[dict[str, float]]) -> np.ndarray:  # noqa: D102
        pids = [int(s["partition-id"]) for s in stats]
        missing = [p for p in pids if p not in self.clusters]
        if missing:
            raise ValueError(f"no cluster known for partition ids {missing}")
        return cluster_equal_weights(np.array([self.clusters[p] for p in pids]),
                                     np.array([s["num-examples"] for s in stats]))


class ImpactFactorWeights(AggregationWeightPolicy):
    """Weights from impact factors given by partition id (set by :class:`CADIS` every round)."""

    name = "impact factor"

    def __init__(self) -> None:
        self.factors: dict[int, float] = {}

    def raw_weights(self, server_round: int, stats: list[dict[str, float]]) -> np.ndarray:  # noqa: D102
        pids = [int(s["partition-id"]) for s in stats]
        missing = [p for p in pids if p not in self.factors]
        if missing:
            raise ValueError(f"no impact factor known for partition ids {missing}")
        return np.array([self.factors[p] for p in pids])


@dataclass(frozen=True, kw_only=True)
class ClusterRule:
    """How CADIS thresholds the scaled similarities.

    Attributes
    ----------
    threshold
        The starting threshold on the scaled mean similarity (the authors' ``sthr``, 0.975 by default).
    grow
        Grow it after every round by :func:`grown_threshold`, as the authors' code does (``False``: hold it fixed).
    """

    threshold: float = 0.975
    grow: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= THRESHOLD_CAP:
            raise ValueError(f"parameter 'threshold': must lie in [0, {THRESHOLD_CAP}], got {self.threshold}")


class CADIS(FlowerPolicyFedAvg):
    """CADIS's server: the similarity memory of classifier updates, related clients, impact-factor aggregation.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    num_clients
        All clients (size of the similarity memory).
    last_layer
        Name of the classifier's weight array (``fc1.weight`` for a one-hidden-layer MLP).
    rule
        The threshold and whether it grows (:class:`ClusterRule`; the authors' by default).
    kd_mu
        Weight of the relational distillation term sent to the clients (:func:`make_kd_client_app`;
        0: plain local SGD).
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], num_clients: int, last_layer: str,
                 rule: ClusterRule = ClusterRule(), kd_mu: float = 0.0, seed: int = 0) -> None:
        self.factors = ImpactFactorWeights()
        super().__init__(active_clients, local, self.factors, seed=seed)
        if kd_mu < 0:
            raise ValueError(f"kd_mu must be >= 0, got {kd_mu}")
        self.last_layer, self.threshold, self.rule = last_layer, rule.threshold, rule
        self.local.update({"kd-mu": float(kd_mu)})
        self.total = np.zeros((num_clients, num_clients))
        self.count = np.zeros((num_clients, num_clients))
        self.related = np.eye(num_clients, dtype=np.int64)
        self.clusters_used: dict[int, dict[int, int]] = {}
        self._sent: np.ndarray | None = None

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """FedAvg's payload; remembers the sent classifier weight to form the updates."""
        self._sent = from_array(arrays[self.last_layer])
        return super().payload(server_round, arrays)

    def final_clusters(self) -> np.ndarray:
        """Every client's group under the current relation (:func:`cluster_labels`), for comparing with planted ones."""
        return cluster_labels(self.related)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Update the similarity memory, relate the clients, average with their impact factors, grow the threshold."""
        replies = sorted(replies, key=lambda m: partition_of(m))
        if self._sent is None:
            raise RuntimeError("aggregate_train called before configure_train")
        pids = [partition_of(m) for m in replies]
        idx = np.ix_(pids, pids)
        self.total[idx] += pairwise_cosine(list(last_layer_updates(replies, self._sent, self.last_layer)))
        self.count[idx] += 1
        self.related = cluster_matrix(scaled_mean_similarity(self.total, self.count), self.threshold)
        factors = impact_factors(self.related)
        self.factors.factors = {p: float(factors[p]) for p in pids}
        labels = self.final_clusters()
        self.clusters_used[server_round] = {p: int(labels[p]) for p in pids}
        out = super().aggregate_train(server_round, replies)
        if self.rule.grow:
            self.threshold = grown_threshold(self.threshold, server_round)
        return out

    def scaled_similarity(self) -> np.ndarray:
        """The scaled mean similarity of every pair of clients so far (:func:`scaled_mean_similarity`)."""
        return scaled_mean_similarity(self.total, self.count)


# ----- the client ---------------------------------------------------------------------
def _off_diagonal_kernel(rep: torch.Tensor) -> torch.Tensor:
    """Row-normalised Gaussian kernel of the standardised pairwise distances of a batch, diagonal dropped."""
    n = rep.shape[0]
    dist = torch.cdist(rep.unsqueeze(0), rep.unsqueeze(0)).squeeze(0)
    off = dist[~torch.eye(n, dtype=torch.bool, device=rep.device)].reshape(n, n - 1)
    k = torch.exp(-0.5 * (off - off.mean()) ** 2 / (off.std() ** 2 + 0.001))
    return k / k.sum(dim=1, keepdim=True)


def relational_kd(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """The authors' ``KL_divergence``: KL of the teacher's from the student's pairwise-distance kernels, summed.

    For a batch of ``N`` representations, each row holds a Gaussian kernel of
    the distances to the other ``N - 1`` (standardised by the batch's mean and
    spread of distances), normalised to sum to 1; the loss is
    ``sum k_t * log(k_t / k_s)`` over every row and column.  Batches of fewer
    than three samples give 0 (no spread to standardise by).

    Parameters
    ----------
    teacher, student
        ``(N, d)`` representations; the teacher's are not differentiated.
    """
    if teacher.shape[0] != student.shape[0]:
        raise ValueError(f"batch sizes differ: {teacher.shape[0]} vs {student.shape[0]}")
    if student.shape[0] < 3:
        return student.sum() * 0.0
    k_t, k_s = _off_diagonal_kernel(teacher.detach()), _off_diagonal_kernel(student)
    return torch.sum(k_t * torch.log(k_t / k_s))


def classifier_layer(model: torch.nn.Module) -> torch.nn.Module:
    """The model's last module holding parameters (the classifier; its input is the representation)."""
    leaves = [m for m in model.modules() if not list(m.children()) and list(m.parameters(recurse=False))]
    if not leaves:
        raise ValueError("the model has no parameterised layer")
    return leaves[-1]


def representation(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The input of ``model``'s classifier layer for ``x`` (the representation the distillation compares)."""
    seen: list[torch.Tensor] = []
    handle = classifier_layer(model).register_forward_pre_hook(lambda _m, inputs: seen.append(inputs[0]))
    try:
        model(x)
    finally:
        handle.remove()
    return seen[0]


def kd_sgd(model: torch.nn.Module, teacher: torch.nn.Module, x: np.ndarray, y: np.ndarray, settings: LocalSettings,
           mu: float) -> float:
    """Local SGD on ``CE + mu * relational_kd(teacher, model)``, with :func:`~repro.federated.client.local_sgd`'s batches.

    ``mu = 0`` runs ``local_sgd`` itself.  Both models compute on ``settings.device``
    and are back on the CPU on return.  Returns the mean cross-entropy over the steps.
    """
    if mu < 0:
        raise ValueError(f"mu must be >= 0, got {mu}")
    if mu == 0:
        return local_sgd(model, x, y, settings)
    dev = resolve_device(settings.device)
    xt = torch.from_numpy(x).to(dev)
    teacher.to(dev).eval()
    seen: list[torch.Tensor] = []
    handle = classifier_layer(model).register_forward_pre_hook(lambda _m, inputs: seen.append(inputs[0]))

    def distillation(out: torch.Tensor, idx: torch.Tensor) -> list[torch.Tensor]:
        with torch.no_grad():
            t_rep = representation(teacher, xt[idx])
        student = seen.pop()
        seen.clear()
        return [mu * relational_kd(t_rep, student)]

    try:
        return local_sgd(model, x, y, settings, penalties=distillation)
    finally:
        handle.remove()
        teacher.to("cpu")


def train_kd(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """One round of the KD client: local SGD plus ``kd-mu`` times the relational distillation towards the received model."""
    rnd = begin_round(spec, msg, context)
    teacher = copy.deepcopy(rnd.model)
    loss = kd_sgd(rnd.model, teacher, rnd.x, rnd.y, rnd.settings, mu=config_number(rnd.config, "kd-mu", 0.0))
    return finish_round(msg, rnd, get_weights(rnd.model), loss)


def make_kd_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """A ``ClientApp`` whose local loss adds ``kd-mu`` times the relational distillation towards the received model.

    Config key beyond the shared client's: ``kd-mu`` (0: the shared client's training exactly).
    """
    return client_app_with(lambda msg, context: train_kd(spec, msg, context), run_config)
