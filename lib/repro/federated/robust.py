"""Backdoor attacks and robust aggregation: the edge-case attack, defences and their detection rates.

Attack (:class:`EdgeCaseAttack`): a fixed pool of attacker clients add
*tail* samples of one class, drawn from the edge of its distribution
(digits of ``source`` rotated by a large angle), relabelled as ``target``;
the backdoor accuracy is the share of held-out tail samples the global
model labels ``target``.  Attackers train like everyone else
(:func:`make_attacked_client_app`).

Defences (all ``Defence.aggregate(prev, models, counts) -> (new, flagged)``):

* :class:`NoDefence`: FedAvg;
* :class:`NormClipping`: updates clipped to a norm bound, then averaged;
* :class:`MultiKrumDefence`: Flower's ``select_multikrum`` keeps the ``m``
  models closest to their neighbours; the rest are flagged;
* :class:`RFA`: the geometric median of the models (Weiszfeld iterations);
* :class:`RobustLR`: RLR's per-coordinate sign vote turns the server step
  back where too few clients agree;
* :class:`Flame`: HDBSCAN on the cosine distances of the updates admits
  the majority cluster, whose updates are clipped to the median norm and
  averaged; Gaussian noise of ``noise_factor`` times that norm is added
  (``noise_factor=0``: no noise);
* :class:`FedGradFilter`: FedGrad's two filters on the ultimate layer
  (following the authors' ``defense.py``, :data:`FEDGRAD_REFERENCE_COMMIT`).

:class:`RobustFedAvg` runs any of them as a Flower strategy and records which
clients each round flagged; :func:`detection_rates` turns that into the true-
and false-positive rates.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy.multikrum import select_multikrum

from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.client import RunConfig, client_app_with, train_shared
from repro.federated.features import last_layer_deviations, last_layer_stack
from repro.federated.replies import metric, partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, client_data, load_task_data

Weights = dict[str, np.ndarray]


# ----- the edge-case backdoor ---------------------------------------------------------------
def rotate_images(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Rotate flattened square single-channel images by ``angles`` (degrees), keeping their size."""
    from scipy.ndimage import rotate

    side = int(round(np.sqrt(x.shape[1])))
    if side * side != x.shape[1]:
        raise ValueError(f"images must be square; got {x.shape[1]} features")
    out = [rotate(img.reshape(side, side), float(a), reshape=False, order=1, mode="constant").ravel()
           for img, a in zip(x, angles)]
    return np.clip(np.asarray(out, dtype=np.float32), 0.0, x.max())


@dataclass(frozen=True, kw_only=True)
class EdgeCaseAttack:
    """An edge-case backdoor on a task.

    Parameters
    ----------
    spec
        The task.
    attackers
        Partition ids of the attacker clients (a fixed pool).
    source, target
        Tail samples are rotated ``source`` digits, relabelled ``target``.
    pdr
        Poisoned share of an attacker's training set (0 < pdr < 1).
    angles
        Range of rotation angles in degrees (the tail of the distribution).
    seed
        Seed of the angles.
    """

    spec: TaskSpec
    attackers: tuple[int, ...]
    source: int = 7
    target: int = 1
    pdr: float = 0.33
    angles: tuple[float, float] = (25.0, 35.0)
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.pdr < 1.0:
            raise ValueError(f"pdr must lie in (0, 1), got {self.pdr}")
        if self.source == self.target:
            raise ValueError("source and target must differ")
        bad = [a for a in self.attackers if not 0 <= a < self.spec.num_clients]
        if bad:
            raise ValueError(f"attackers {bad} outside 0..{self.spec.num_clients - 1}")


@functools.lru_cache(maxsize=8)
def tail_sets(attack: EdgeCaseAttack) -> tuple[np.ndarray, np.ndarray]:
    """The rotated ``source`` images: (training tail for attackers, test tail for the backdoor accuracy)."""
    ds, _ = load_task_data(attack.spec)
    rng = np.random.default_rng(attack.seed)
    lo, hi = attack.angles

    def tail(x: np.ndarray) -> np.ndarray:
        signs = rng.choice([-1.0, 1.0], size=len(x))
        return rotate_images(x, signs * rng.uniform(lo, hi, size=len(x)))

    return tail(ds.x_train[ds.y_train == attack.source]), tail(ds.x_test[ds.y_test == attack.source])


def attacked_client_data(attack: EdgeCaseAttack, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """A client's training data; an attacker's also holds tail samples labelled ``target`` (share ``pdr``)."""
    x, y = client_data(attack.spec, partition_id)
    if partition_id not in attack.attackers:
        return x, y
    tail, _ = tail_sets(attack)
    n_poison = max(1, int(round(attack.pdr * len(y) / (1.0 - attack.pdr))))
    pick = np.random.default_rng([attack.seed, partition_id]).choice(len(tail), size=n_poison,
                                                                     replace=n_poison > len(tail))
    return (np.concatenate([x, tail[pick]]),
            np.concatenate([y, np.full(n_poison, attack.target, dtype=y.dtype)]))


def make_attacked_client_app(attack: EdgeCaseAttack, run_config: RunConfig | None = None) -> ClientApp:
    """The shared client, training on :func:`attacked_client_data` (honest clients are unchanged)."""
    return client_app_with(lambda msg, context: train_shared(
        attack.spec, msg, context, data=lambda spec, pid: attacked_client_data(attack, pid)), run_config)


def backdoor_accuracy(predict: np.ndarray, attack: EdgeCaseAttack) -> float:
    """Share (percent) of the test tail that ``predict`` (labels of :func:`tail_sets`' test part) puts in ``target``."""
    return 100.0 * float(np.mean(np.asarray(predict) == attack.target))


# ----- defences -----------------------------------------------------------------------------
def _flat(w: Weights) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in w.values()])


def _weighted_mean(models: Sequence[Weights], weights: Sequence[float]) -> Weights:
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    return {k: sum(wi * m[k].astype(np.float64) for wi, m in zip(w, models)).astype(models[0][k].dtype)
            for k in models[0]}


class Defence:
    """Robust aggregation: returns the new global model and the indices of the models it flagged."""

    name = "defence"

    def aggregate(self, prev: Weights, models: list[Weights], counts: list[int],
                  pids: list[int] | None = None) -> tuple[Weights, list[int]]:
        """Aggregate ``models`` (trained from ``prev`` on ``counts`` samples by clients ``pids``)."""
        raise NotImplementedError


class NoDefence(Defence):
    """FedAvg (example-weighted mean); flags nobody."""

    name = "none"

    def aggregate(self, prev, models, counts, pids=None):  # noqa: D102
        return _weighted_mean(models, counts), []


class NormClipping(Defence):
    """Clip each update ``w_i - prev`` to L2 norm ``bound``, then average; flags nobody.

    Parameters
    ----------
    bound
        The norm bound (> 0).
    """

    name = "norm clipping"

    def __init__(self, bound: float) -> None:
        if bound <= 0:
            raise ValueError(f"bound must be > 0, got {bound}")
        self.bound = bound

    def aggregate(self, prev, models, counts, pids=None):  # noqa: D102
        clipped = []
        for m in models:
            upd = {k: m[k].astype(np.float64) - prev[k] for k in prev}
            scale = min(1.0, self.bound / max(float(np.linalg.norm(_flat(upd))), 1e-12))
            clipped.append({k: (prev[k] + scale * upd[k]).astype(prev[k].dtype) for k in prev})
        return _weighted_mean(clipped, counts), []


class MultiKrumDefence(Defence):
    """Flower's Multi-Krum selection: keep the ``keep`` models with the lowest Krum scores, flag the rest.

    Parameters
    ----------
    num_malicious
        ``f``, the attackers assumed per round.
    keep
        ``m``, the models averaged (``None``: ``n - f``).
    """

    name = "Multi-Krum"

    def __init__(self, num_malicious: int, keep: int | None = None) -> None:
        if num_malicious < 0:
            raise ValueError(f"num_malicious must be >= 0, got {num_malicious}")
        self.f, self.keep = num_malicious, keep

    def aggregate(self, prev, models, counts, pids=None):  # noqa: D102
        m = len(models) - self.f if self.keep is None else self.keep
        if not 1 <= m <= len(models):
            raise ValueError(f"keep={m} must lie in 1..{len(models)}")
        contents = [RecordDict({"arrays": to_arrayrecord(w)}) for w in models]
        chosen = select_multikrum(contents, self.f, m)
        idx = sorted(next(i for i, c in enumerate(contents) if c is ch) for ch in chosen)
        return _weighted_mean([models[i] for i in idx], [counts[i] for i in idx]), \
            [i for i in range(len(models)) if i not in idx]


def geometric_median(points: np.ndarray, weights: np.ndarray, iters: int = 100, eps: float = 1e-8) -> np.ndarray:
    """Weighted geometric median of the rows of ``points`` by Weiszfeld's iterations."""
    w = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    z = w @ points
    for _ in range(iters):
        d = np.maximum(np.linalg.norm(points - z, axis=1), eps)
        beta = w / d
        z_new = beta @ points / beta.sum()
        if np.linalg.norm(z_new - z) <= eps * max(1.0, float(np.linalg.norm(z))):
            return z_new
        z = z_new
    return z


class RFA(Defence):
    """Robust federated aggregation: the weighted geometric median of the models; flags nobody."""

    name = "RFA"

    def aggregate(self, prev, models, counts, pids=None):  # noqa: D102
        z = geometric_median(np.stack([_flat(m) for m in models]), np.asarray(counts, dtype=float))
        out, i = {}, 0
        for k, v in prev.items():
            out[k] = z[i:i + v.size].reshape(v.shape).astype(v.dtype)
            i += v.size
        return out, []


class RobustLR(Defence):
    """RLR, the robust learning rate of Ozdayi et al. (AAAI 2021): a sign vote per coordinate; flags nobody.

    Each coordinate of the example-weighted mean update moves the model forward
    where at least ``threshold`` more clients agree on its sign than disagree
    (``|sum_i sign(u_i)| >= threshold``), and backward otherwise (server
    learning rate 1, so agreement everywhere is FedAvg).  The default threshold
    is the authors' (``robustLR_threshold=4`` in ``rlr_avg`` of FedGrad's
    ``defense.py``); unlike that function, no knowledge of who attacks is used.

    Parameters
    ----------
    threshold
        The sign agreement a coordinate needs (>= 0).
    """

    name = "RLR"

    def __init__(self, threshold: float = 4.0) -> None:
        if threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {threshold}")
        self.threshold = threshold

    def aggregate(self, prev, models, counts, pids=None):  # noqa: D102
        mean = _weighted_mean(models, counts)
        out = {}
        for k, v in prev.items():
            upd = np.stack([m[k].astype(np.float64) - v for m in models])
            rate = np.where(np.abs(np.sign(upd).sum(axis=0)) >= self.threshold, 1.0, -1.0)
            out[k] = (v + rate * (mean[k].astype(np.float64) - v)).astype(v.dtype)
        return out, []


FLAME_NOISE_FACTOR = 0.001
"""FLAME's noise level: the noise's sd over the clipping bound (the authors' ``FLAME`` class in ``defense.py``
at :data:`FEDGRAD_REFERENCE_COMMIT`, there "as specified from paper")."""


class Flame(Defence):
    """FLAME: clustering, clipping and noise.

    HDBSCAN (scikit-learn, precomputed cosine distances of the updates,
    ``min_cluster_size = n//2 + 1``) admits the models of the largest
    cluster; their updates are clipped to the median update norm ``s`` of all
    models and averaged, and every coordinate of the result gets Gaussian
    noise of sd ``noise_factor * s``.  Models outside the cluster are flagged.

    Parameters
    ----------
    noise_factor
        The noise's sd over the clipping bound (>= 0; 0 leaves the noise out).
    seed
        Seed of the noise, drawn afresh every round from one generator.
    """

    name = "FLAME"

    def __init__(self, noise_factor: float = FLAME_NOISE_FACTOR, seed: int = 0) -> None:
        if not noise_factor >= 0:
            raise ValueError(f"noise_factor must be >= 0, got {noise_factor}")
        self.noise_factor = noise_factor
        self.rng = np.random.default_rng(seed)

    def aggregate(self, prev, models, counts, pids=None):  # noqa: D102
        from sklearn.cluster import HDBSCAN

        upd = np.stack([_flat(m) - _flat(prev) for m in models])
        unit = upd / np.maximum(np.linalg.norm(upd, axis=1, keepdims=True), 1e-12)
        dist = np.clip(1.0 - unit @ unit.T, 0.0, 2.0)
        labels = HDBSCAN(min_cluster_size=len(models) // 2 + 1, min_samples=1, metric="precomputed",
                         allow_single_cluster=True, copy=True).fit(dist).labels_
        valid = labels[labels >= 0]
        admitted = list(range(len(models))) if len(valid) == 0 else \
            [i for i in range(len(models)) if labels[i] == np.bincount(valid).argmax()]
        bound = float(np.median(np.linalg.norm(upd, axis=1)))
        agg, _ = NormClipping(max(bound, 1e-12)).aggregate(prev, [models[i] for i in admitted],
                                                            [counts[i] for i in admitted])
        if self.noise_factor > 0:
            sd = self.noise_factor * bound
            agg = {k: (v + self.rng.normal(0.0, sd, size=v.shape)).astype(v.dtype) for k, v in agg.items()}
        return agg, [i for i in range(len(models)) if i not in admitted]


#: The authors' ``defense.py`` (FedGrad class) at commit 12f33bcc35402cfb1983f49b0eae92eb4d65ef36 of
#: github.com/judydnguyen/FedGrad_Backdoor_Attack, which :class:`FedGradFilter` follows.
FEDGRAD_REFERENCE_COMMIT = "12f33bcc35402cfb1983f49b0eae92eb4d65ef36"


def _column_minmax(matrix: np.ndarray) -> np.ndarray:
    """Scale every column of ``matrix`` to [0, 1] (scikit-learn's ``MinMaxScaler``, as the authors do)."""
    from sklearn.preprocessing import MinMaxScaler

    return MinMaxScaler().fit_transform(matrix)


class FedGradFilter(Defence):
    """FedGrad's soft and hard filters on the ultimate layer, with trust scores, as in the authors' ``defense.py``.

    Soft filter: ``g = W_avg - W_prev``, ``u_i = W_i - W_avg``; the cosine of
    ``u_i`` with ``g``, min-max scaled over the round and averaged per client
    over the rounds it took part in; clients above ``min(0.5, median)`` are
    suspicious.  Hard filter, computed every round so that its history is
    complete: each client's ``u_i`` summed per class row and normalised, and
    each client's bias normalised; the round's pairwise cosines of both,
    min-max scaled per column, are averaged per pair of clients over the
    rounds both took part in; KMeans with two clusters on the rows of the two
    running matrices side by side; the cluster without the client of lowest
    Krum score (``n - f - 2`` nearest neighbours) is suspicious.  Before
    ``switch_round`` only the soft filter decides; from it on, the union of
    both.  Trust records start at 0.5 and get 0.25 for a round in which the
    client was suspicious and 1 otherwise; from ``switch_round`` on (and only
    with ``use_trust``), suspicious clients whose mean trust is at least 0.75
    are let back in, and if that empties the set the soft filter's suspects
    stand.  Excluded models are left out of a data-size-weighted mean; when
    every model is excluded the previous global model is kept.

    Parameters
    ----------
    weight_key, bias_key
        Names of the ultimate layer's weight ``(C, d)`` and bias.
    switch_round
        First round in which the hard filter's suspects are excluded as well.
    num_malicious
        ``f``, the attackers assumed per round (Krum's neighbourhood is ``n - f - 2``).
    use_trust
        Whether the trust rule may let suspicious clients back in (the authors' ``use_trustworthy``).
    """

    name = "FedGrad"
    eta = 0.5
    trust_threshold = 0.75
    trust_flagged, trust_clear, trust_initial = 0.25, 1.0, 0.5

    def __init__(self, weight_key: str, bias_key: str, switch_round: int = 1, num_malicious: int = 1,
                 use_trust: bool = True) -> None:
        if num_malicious < 0:
            raise ValueError(f"num_malicious must be >= 0, got {num_malicious}")
        self.weight_key, self.bias_key, self.switch_round = weight_key, bias_key, switch_round
        self.num_malicious, self.use_trust = num_malicious, use_trust
        self.round = 0
        self._soft: dict[int, list[float]] = {}
        self._pairs_weight: dict[tuple[int, int], list[float]] = {}
        self._pairs_bias: dict[tuple[int, int], list[float]] = {}
        self.trust: dict[int, list[float]] = {}

    def soft_scores(self, prev: Weights, models: list[Weights]) -> np.ndarray:
        """Min-max-scaled cosine of each client's deviation with the round's mean update (ultimate layer)."""
        W = last_layer_stack(models, self.weight_key).reshape(len(models), -1)
        avg = W.mean(0)
        g = avg - prev[self.weight_key].astype(np.float64).ravel()
        u = W - avg
        c = u @ g / np.maximum(np.linalg.norm(u, axis=1) * np.linalg.norm(g), 1e-12)
        span = c.max() - c.min()
        return (c - c.min()) / span if span > 0 else np.zeros_like(c)

    def krum_scores(self, models: list[Weights]) -> np.ndarray:
        """Krum score of each model: its summed squared distances to its ``n - f - 2`` nearest others."""
        flat = np.stack([_flat(m) for m in models])
        d2 = ((flat[:, None, :] - flat[None, :, :]) ** 2).sum(-1)
        k = min(len(models) - 1, max(1, len(models) - self.num_malicious - 2))
        return np.array([np.sort(row)[1:k + 1].sum() for row in d2])

    @staticmethod
    def _running(history: dict[tuple[int, int], list[float]], round_matrix: np.ndarray,
                 pids: list[int]) -> np.ndarray:
        """Append the round's pairwise values to each ordered pair's history; return the running means."""
        n = len(pids)
        for i in range(n):
            for j in range(n):
                history.setdefault((pids[i], pids[j]), []).append(float(round_matrix[i, j]))
        return np.array([[np.mean(history[(pids[i], pids[j])]) for j in range(n)] for i in range(n)])

    def hard_suspects(self, models: list[Weights], pids: list[int]) -> list[int]:
        """Indices in the KMeans cluster (on running pairwise cosines) without the lowest-Krum-score client."""
        from sklearn.cluster import KMeans

        rows = last_layer_deviations(models, self.weight_key).sum(axis=2)  # (n, C): per-class-row sums
        rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        bias = last_layer_stack(models, self.bias_key)
        bias /= np.maximum(np.linalg.norm(bias, axis=1, keepdims=True), 1e-12)
        run_w = self._running(self._pairs_weight, _column_minmax(rows @ rows.T), pids)
        run_b = self._running(self._pairs_bias, _column_minmax(bias @ bias.T), pids)
        labels = KMeans(n_clusters=2, n_init=10, random_state=0).fit(np.hstack([run_w, run_b])).labels_
        trusted = labels[int(np.argmin(self.krum_scores(models)))]
        return [i for i in range(len(models)) if labels[i] != trusted]

    def suspects(self, prev: Weights, models: list[Weights], pids: list[int]) -> set[int]:
        """The round's excluded clients (indices), updating every history (soft, pairwise, trust)."""
        self.round += 1
        running = []
        for p, s in zip(pids, self.soft_scores(prev, models)):
            self._soft.setdefault(p, []).append(float(s))
            running.append(float(np.mean(self._soft[p])))
        eps1 = min(self.eta, float(np.median(running)))
        soft = {i for i, r in enumerate(running) if r > eps1}
        hard = set(self.hard_suspects(models, pids)) if len(models) >= 3 else set()
        gated = self.round >= self.switch_round
        suspicious = soft | hard if gated else soft
        if self.use_trust and gated:
            suspicious = {i for i in suspicious
                          if np.mean(self.trust.get(pids[i], [self.trust_initial])) < self.trust_threshold} or soft
        for i, p in enumerate(pids):
            record = self.trust.setdefault(p, [self.trust_initial])
            record.append(self.trust_flagged if i in suspicious else self.trust_clear)
        return suspicious

    def aggregate(self, prev, models, counts, pids=None):  # noqa: D102
        pids = list(range(len(models))) if pids is None else list(pids)
        excluded = self.suspects(prev, models, pids)
        keep = [i for i in range(len(models)) if i not in excluded]
        if not keep:
            return {k: v.copy() for k, v in prev.items()}, sorted(excluded)
        return _weighted_mean([models[i] for i in keep], [counts[i] for i in keep]), sorted(excluded)


class RobustFedAvg(SeededFedAvg):
    """Seeded FedAvg whose aggregation is a :class:`Defence`; records the flagged partition ids per round."""

    def __init__(self, active_clients: int, local: dict[str, float | int], defence: Defence, seed: int = 0) -> None:
        super().__init__(active_clients, local, seed=seed)
        self.defence = defence
        self.flagged: dict[int, list[int]] = {}
        self._prev: Weights = {}

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """Broadcast the model and remember it as the round's reference."""
        self._prev = from_arrayrecord(arrays)
        return arrays, list(arrays.keys())

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Aggregate with the defence (messages checked and counted as in FedAvg)."""
        replies = sorted(replies, key=lambda m: partition_of(m))
        _, metrics = super().aggregate_train(server_round, replies)
        pids = [partition_of(m) for m in replies]
        models = [from_arrayrecord(m.content["arrays"]) for m in replies]
        counts = [int(metric(m, "num-examples")) for m in replies]
        new, flagged = self.defence.aggregate(self._prev, models, counts, pids)
        self.flagged[server_round] = [pids[i] for i in flagged]
        return to_arrayrecord(new), metrics


def detection_rates(sampled: dict[int, list[int]], flagged: dict[int, list[int]],
                    attackers: Iterable[int]) -> dict[str, float]:
    """True-positive rate (attackers flagged / attackers sampled) and false-positive rate.

    The false-positive rate is honest clients flagged over honest clients sampled.

    A rate whose denominator is zero is reported as NaN.
    """
    bad = set(attackers)
    tp = fp = pos = neg = 0
    for r, pids in sampled.items():
        f = set(flagged.get(r, []))
        for p in pids:
            if p in bad:
                pos += 1
                tp += p in f
            else:
                neg += 1
                fp += p in f
    return {"tpr": tp / pos if pos else float("nan"), "fpr": fp / neg if neg else float("nan")}

