"""CADIS: clustered aggregation and knowledge-distilled local training for cluster-skewed data.

Server side, every round:

1. each returned model's last-layer update ``U_i = W_i - W_global`` (the
   classifier's weight, ``C x d``) is flattened after normalising each class
   row; the clients' pairwise cosine similarities ``s_ij`` update a running
   mean kept over the rounds (the *cluster memory*; with partial
   participation only the pairs seen together are updated);
2. the round's clients are clustered by average-linkage agglomerative
   clustering of ``1 - s`` cut at ``1 - threshold`` (SciPy);
3. the models are averaged with *cluster-equal* weights
   ``w_i = (1 / #clusters) * n_i / n_cluster(i)``, so every cluster gets the
   same total weight whatever its number of clients.

Client side (:func:`make_kd_client_app`): local SGD on
``CE + mu * T^2 * KL(softmax(f_global / T) || softmax(f / T))``, the global
model received at the round's start being the teacher
(:func:`repro.federated.kd.kd_loss`).

The abstract fixes the ideas (a last-layer similarity, cluster-equal
aggregation, KD regularisation); the exact similarity formula, clustering
rule and KD weighting are reconstructed, as no code is public.
"""

from __future__ import annotations

import copy
from typing import Iterable

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord
from flwr.clientapp import ClientApp
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from repro.devices import resolve_device
from repro.federated.arrays import from_array
from repro.federated.client import LocalSettings, RunConfig, begin_round, client_app_with, finish_round, local_sgd
from repro.federated.features import last_layer_updates, row_normalised
from repro.federated.kd import kd_loss
from repro.federated.task import TaskSpec
from repro.federated.weighting import AggregationWeightPolicy, FlowerPolicyFedAvg
from repro.models import get_weights


# ----- similarity and clustering -------------------------------------------------------
def last_layer_features(updates: list[np.ndarray]) -> np.ndarray:
    """Flattened last-layer updates with every class row scaled to unit norm (zero rows stay zero).

    Parameters
    ----------
    updates
        One ``(C, d)`` array per client: its classifier weight minus the global one
        (:func:`repro.federated.features.last_layer_updates` forms them from the replies).
    """
    if not len(updates):
        raise ValueError("updates must not be empty")
    for u in updates:
        if np.ndim(u) != 2:
            raise ValueError(f"each update must be a (classes, features) matrix, got shape {np.shape(u)}")
    return row_normalised(np.stack([np.asarray(u, dtype=np.float64) for u in updates]))


def cosine_similarity_matrix(features: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities of the rows: symmetric, unit diagonal (also for zero rows)."""
    f = np.asarray(features, dtype=np.float64)
    norms = np.linalg.norm(f, axis=1, keepdims=True)
    unit = np.divide(f, norms, out=np.zeros_like(f), where=norms > 0)
    s = np.clip(unit @ unit.T, -1.0, 1.0)
    s = (s + s.T) / 2.0
    np.fill_diagonal(s, 1.0)
    return s


def cluster_by_similarity(similarity: np.ndarray, threshold: float) -> np.ndarray:
    """Average-linkage clusters of ``1 - similarity`` cut at distance ``1 - threshold``; labels ``0..k-1``.

    Labels are numbered by each cluster's first member, so they are stable.
    """
    s = np.asarray(similarity, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise ValueError(f"similarity must be a square matrix, got shape {s.shape}")
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must lie in [-1, 1], got {threshold}")
    n = len(s)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    d = np.clip(1.0 - (s + s.T) / 2.0, 0.0, 2.0)
    np.fill_diagonal(d, 0.0)
    raw = fcluster(linkage(squareform(d, checks=False), method="average"), t=1.0 - threshold, criterion="distance")
    _, first = np.unique(raw, return_index=True)
    rank = {raw[i]: k for k, i in enumerate(sorted(first))}
    return np.array([rank[r] for r in raw], dtype=np.int64)


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
    """Cluster-equal aggregation for clusters given by partition id (set by the strategy, or fixed: the oracle)."""

    name = "cluster-equal"

    def __init__(self, clusters: dict[int, int] | None = None) -> None:
        self.clusters: dict[int, int] = dict(clusters or {})

    def raw_weights(self, server_round, stats):  # noqa: D102
        pids = [int(s["partition-id"]) for s in stats]
        missing = [p for p in pids if p not in self.clusters]
        if missing:
            raise ValueError(f"no cluster known for partition ids {missing}")
        return cluster_equal_weights(np.array([self.clusters[p] for p in pids]),
                                     np.array([s["num-examples"] for s in stats]))


class CADIS(FlowerPolicyFedAvg):
    """CADIS's server: last-layer similarity memory, clustering, cluster-equal aggregation.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    num_clients
        All clients (size of the similarity memory).
    last_layer
        Name of the classifier's weight array (``fc1.weight`` for a one-hidden-layer MLP).
    threshold
        Clients whose (remembered) similarity exceeds it on average end up together.
    kd_mu, kd_temperature
        Sent to the clients (:func:`make_kd_client_app`); ``kd_mu = 0``: plain local SGD.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], num_clients: int, last_layer: str,
                 threshold: float = 0.5, kd_mu: float = 0.0, kd_temperature: float = 2.0, seed: int = 0) -> None:
        super().__init__(active_clients, local, ClusterEqualWeights(), seed=seed)
        if kd_mu < 0 or kd_temperature <= 0:
            raise ValueError(f"kd_mu must be >= 0 and kd_temperature > 0, got {kd_mu}, {kd_temperature}")
        self.last_layer, self.threshold = last_layer, threshold
        self.local.update({"kd-mu": float(kd_mu), "kd-temperature": float(kd_temperature)})
        self.memory = np.zeros((num_clients, num_clients))
        self.seen = np.zeros((num_clients, num_clients), dtype=np.int64)
        self.clusters_used: dict[int, dict[int, int]] = {}
        self._sent: np.ndarray | None = None

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """FedAvg's payload; remembers the sent classifier weight to form the updates."""
        self._sent = from_array(arrays[self.last_layer])
        return super().payload(server_round, arrays)

    def remembered_clusters(self, pids: list[int]) -> np.ndarray:
        """Clusters of ``pids`` from the similarity memory (pairs never seen together count as dissimilar)."""
        sub = np.ix_(pids, pids)
        s = np.where(self.seen[sub] > 0, self.memory[sub] / np.maximum(self.seen[sub], 1), -1.0)
        np.fill_diagonal(s, 1.0)
        return cluster_by_similarity(s, self.threshold)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Update the similarity memory, cluster the round's clients, average cluster-equally."""
        replies = sorted(replies, key=lambda m: int(m.content["metrics"]["partition-id"]))
        if self._sent is None:
            raise RuntimeError("aggregate_train called before configure_train")
        pids = [int(m.content["metrics"]["partition-id"]) for m in replies]
        feats = last_layer_features(last_layer_updates(replies, self._sent, self.last_layer))
        idx = np.ix_(pids, pids)
        self.memory[idx] += cosine_similarity_matrix(feats)
        self.seen[idx] += 1
        labels = self.remembered_clusters(pids)
        self.policy.clusters = dict(zip(pids, (int(c) for c in labels)))
        self.clusters_used[server_round] = dict(self.policy.clusters)
        return super().aggregate_train(server_round, replies)


# ----- the client ---------------------------------------------------------------------
def kd_sgd(model: torch.nn.Module, teacher: torch.nn.Module, x: np.ndarray, y: np.ndarray, settings: LocalSettings,
           mu: float, temperature: float) -> float:
    """Local SGD on ``CE + mu * kd_loss(model, teacher, T)``, with :func:`~repro.federated.client.local_sgd`'s batches.

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

    def distillation(out: torch.Tensor, idx: torch.Tensor) -> list[torch.Tensor]:
        with torch.no_grad():
            t_out = teacher(xt[idx])
        return [mu * kd_loss(out, t_out, temperature)]

    try:
        return local_sgd(model, x, y, settings, penalties=distillation)
    finally:
        teacher.to("cpu")


def train_kd(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """One round of the KD client: local SGD plus ``kd-mu`` times the distillation loss towards the received model."""
    rnd = begin_round(spec, msg, context)
    teacher = copy.deepcopy(rnd.model)
    s = rnd.settings
    loss = kd_sgd(rnd.model, teacher, rnd.x, rnd.y, s, mu=float(rnd.config.get("kd-mu", 0.0)),
                  temperature=float(rnd.config.get("kd-temperature", 1.0)))
    return finish_round(msg, rnd, get_weights(rnd.model), loss)


def make_kd_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """A ``ClientApp`` whose local loss adds ``kd-mu`` times the distillation loss towards the received model.

    Config keys beyond the shared client's: ``kd-mu`` (0: the shared client's
    training exactly) and ``kd-temperature``.
    """
    return client_app_with(lambda msg, context: train_kd(spec, msg, context), run_config)
