"""FedLUAR: layer-wise update aggregation with recycling, and the baselines it is compared with.

The server keeps, for every kernel layer ``l`` (arrays with two or more
dimensions), the current global weights ``w_l`` and the last aggregated
update ``D_l``.  In a round, the active clients upload every array except the
layers in the round's *recycled* set ``R``:

* ``l`` not in ``R``: ``w_l' = FedAvg_i(w_l^i)``, ``D_l = w_l' - w_l`` and the
  score ``s_l = ||D_l|| / (||w_l|| + 1e-6)`` (how much the aggregated update
  moves the layer relative to its size);
* ``l`` in ``R``: nothing is uploaded and ``w_l' = w_l + D_l`` (the previous
  update is reused).

Biases and normalisation parameters are always averaged.  The next round's
``R`` holds ``delta`` kernel layers drawn without replacement with
probability proportional to ``1 / s_l`` (:func:`recycle_probabilities`), so
layers whose updates barely change them are the likeliest to be recycled.

Read from the authors' public code as summarised in our spec; the averaging
itself is Flower's ``FedAvg`` (example-weighted).  Two ablations share the
class: ``mode="drop"`` skips the recycled layers' update instead of reusing
it, and ``selection="uniform"`` draws ``R`` uniformly.  :class:`TopKSparsified`
is the magnitude-based baseline the paper argues against: each client's
update keeps only its largest entries.

Communication is counted on the uplink, as in the paper's cost metric; every
strategy here broadcasts the full model.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord

from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.replies import metric, partition_of
from repro.federated.strategies import SeededFedAvg

MODES = ("recycle", "drop")
SELECTIONS = ("score", "uniform")


def update_score(update: np.ndarray, weights: np.ndarray, eps: float = 1e-6) -> float:
    """FedLUAR's layer score ``||D_l|| / (||w_l|| + eps)`` (``weights``: the layer before the update)."""
    return float(np.linalg.norm(update) / (np.linalg.norm(weights) + eps))


def recycle_probabilities(scores: dict[str, float], eps: float = 1e-12) -> dict[str, float]:
    """Selection probabilities proportional to ``1 / score`` (normalised to sum to 1).

    Raises
    ------
    ValueError
        If ``scores`` is empty or holds a negative or non-finite score.
    """
    if not scores:
        raise ValueError("scores is empty")
    bad = {k: v for k, v in scores.items() if not (math.isfinite(v) and v >= 0)}
    if bad:
        raise ValueError(f"scores must be finite and >= 0, got {bad}")
    inv = {k: 1.0 / max(v, eps) for k, v in scores.items()}
    total = sum(inv.values())
    return {k: v / total for k, v in inv.items()}


def select_recycled(scores: dict[str, float], delta: int, rng: np.random.Generator,
                    selection: str = "score") -> list[str]:
    """Draw ``delta`` layers to recycle, without replacement.

    Parameters
    ----------
    scores
        Score of each candidate layer.
    delta
        Layers to draw (capped at the number of candidates).
    rng
        The draw's generator.
    selection
        ``score`` (probability proportional to ``1/score``) or ``uniform``.

    Returns
    -------
    list of str
        The chosen layer names, sorted.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    if delta < 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    names = sorted(scores)
    k = min(delta, len(names))
    if k == 0:
        return []
    if selection == "uniform":
        p = None
    else:
        probs = recycle_probabilities(scores)
        p = np.array([probs[n] for n in names])
    return sorted(str(n) for n in rng.choice(names, size=k, replace=False, p=p))


class FedLUAR(SeededFedAvg):
    """FedLUAR as a Flower Message-API strategy.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    delta
        Kernel layers recycled per round; ``delta = 0`` is exactly FedAvg.
    mode
        ``recycle`` (FedLUAR: reuse ``D_l``) or ``drop`` (ablation: leave the layer unchanged).
    selection
        ``score`` (FedLUAR) or ``uniform`` (ablation).

    Attributes
    ----------
    recycled
        ``round -> layers`` recycled in that round.
    scores
        The latest score of each kernel layer.
    uplink
        Scalars uploaded per round (all clients together).
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0, delta: int = 1,
                 mode: str = "recycle", selection: str = "score") -> None:
        super().__init__(active_clients, local, seed=seed)
        if delta < 0:
            raise ValueError(f"delta must be >= 0, got {delta}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
        self.delta, self.mode, self.selection = delta, mode, selection
        self._select_rng = np.random.default_rng([seed, 0x1DA])  # apart from the client sampler
        self._global: dict[str, np.ndarray] = {}
        self._update: dict[str, np.ndarray] = {}
        self.scores: dict[str, float] = {}
        self._next: list[str] = []
        self.recycled: dict[int, list[str]] = {}
        self.uplink: list[int] = []

    def kernels(self) -> list[str]:
        """The layers that may be recycled (arrays with two or more dimensions)."""
        return [k for k, v in self._global.items() if v.ndim >= 2]

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """Broadcast the full model; ask back every array except the recycled layers."""
        if not self._global:
            self._global = from_arrayrecord(arrays)
        self.recycled[server_round] = list(self._next)
        back = [k for k in self._global if k not in self._next]
        return arrays, back

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Average the uploaded arrays (Flower's FedAvg), recycle or drop the rest, pick the next set."""
        replies = list(replies)
        partial, metrics = super().aggregate_train(server_round, replies)
        if partial is None:
            return None, metrics
        avg = from_arrayrecord(partial)
        recycled = self.recycled[server_round]
        sizes = {k: int(v.size) for k, v in self._global.items()}
        self.uplink.append(len(replies) * sum(sizes[k] for k in avg))
        kernels = set(self.kernels())
        for k, new in avg.items():
            if k in kernels:
                self._update[k] = new - self._global[k]
                self.scores[k] = update_score(self._update[k], self._global[k])
            self._global[k] = new
        for k in recycled:
            if self.mode == "recycle":
                self._global[k] = self._global[k] + self._update[k]
        self._next = select_recycled({k: self.scores[k] for k in self.kernels() if k in self.scores},
                                     self.delta, self._select_rng, self.selection) if self.delta else []
        return to_arrayrecord(self._global), metrics


def top_k_mask(update: np.ndarray, keep: float) -> np.ndarray:
    """Boolean mask of the ``ceil(keep * size)`` largest-magnitude entries of ``update`` (ties: lowest index)."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must lie in (0, 1], got {keep}")
    flat = np.abs(update).ravel()
    k = int(math.ceil(keep * flat.size))
    mask = np.zeros(flat.size, dtype=bool)
    mask[np.argsort(-flat, kind="stable")[:k]] = True
    return mask.reshape(update.shape)


class TopKSparsified(SeededFedAvg):
    """FedAvg on top-k sparsified client updates, with error feedback.

    Each client's update ``w^i - w`` plus its residual ``e^i`` (what it has
    not yet sent) keeps, in every array, the ``ceil(keep * size)`` entries of
    largest magnitude; the rest becomes the new residual, and the server adds
    the example-weighted mean of the sparse updates to ``w``.  The
    sparsification is applied to each reply as it arrives, and the residuals
    are kept per partition id, which gives the same model as sparsifying with
    a residual memory on the client; the uplink counts the kept values only
    (their indices are not charged, which favours this baseline).

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    keep
        Fraction of each array's entries uploaded, in (0, 1].
    error_feedback
        Whether each client's unsent remainder is added to its next update (off: plain top-k).
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0, keep: float = 0.2,
                 error_feedback: bool = True) -> None:
        super().__init__(active_clients, local, seed=seed)
        if not 0.0 < keep <= 1.0:
            raise ValueError(f"keep must lie in (0, 1], got {keep}")
        self.keep, self.error_feedback = keep, bool(error_feedback)
        self.residual: dict[int, dict[str, np.ndarray]] = {}
        self._global: dict[str, np.ndarray] = {}
        self.uplink: list[int] = []

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """Broadcast and ask back every array (they are sparsified on arrival)."""
        if not self._global:
            self._global = from_arrayrecord(arrays)
        return arrays, list(arrays.keys())

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Sparsify every client's update (plus its residual), then average them example-weighted."""
        replies = sorted(replies, key=lambda m: partition_of(m))
        _, metrics = super().aggregate_train(server_round, replies)  # checks errors, records the messages
        counts = np.array([metric(m, "num-examples") for m in replies])
        weights = counts / counts.sum()
        total: dict[str, np.ndarray] = {k: np.zeros_like(v) for k, v in self._global.items()}
        sent = 0
        for w_i, m in zip(weights, replies):
            pid = partition_of(m)
            residual = self.residual.setdefault(pid, {})
            for k, v in from_arrayrecord(m.content["arrays"]).items():
                upd = v - self._global[k]
                if self.error_feedback and k in residual:
                    upd = upd + residual[k]
                mask = top_k_mask(upd, self.keep)
                sent += int(mask.sum())
                if self.error_feedback:
                    residual[k] = np.where(mask, 0.0, upd).astype(upd.dtype)
                total[k] += np.where(mask, upd, 0.0).astype(upd.dtype) * np.asarray(w_i, dtype=upd.dtype)
        self.uplink.append(sent)
        self._global = {k: self._global[k] + total[k] for k in self._global}
        return to_arrayrecord(self._global), metrics


def uplink_ratio(strategy: FedLUAR | TopKSparsified, full_model: int, rounds: int) -> float:
    """Scalars uploaded over the run as a fraction of FedAvg's (``rounds * active_clients * full_model``)."""
    return float(sum(strategy.uplink)) / float(rounds * strategy.active_clients * full_model)
