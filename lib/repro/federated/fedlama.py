"""FedLAMA: layer-wise adaptive model aggregation (Lee, Zhang and Avestimehr).

Each layer ``l`` has an aggregation interval ``I_l`` in ``{1, phi}`` (in rounds
of ``tau'`` local steps).  After a round, the layers whose interval divides the
round are averaged; for each, the discrepancy ``d_l = mean_i ||u_l - x_l^i||^2``
between the average and the clients' copies is stored as
``dist_l = d_l / (I_l tau')`` and ``eff_l = dist_l / dim_l``.  Every ``phi``
rounds the intervals are reset and the kernel layers with the smallest
discrepancy per parameter are moved to interval ``phi`` until their share of
the discrepancy (of all arrays, biases included) exceeds the share of kernel
parameters left at interval 1 (:func:`select_relaxed_layers`).  Intervals
adapt only after ``warmup`` rounds.  Clients are re-sampled only every ``phi``
rounds so unsynchronised layers stay on the same clients.

Checked against the authors' ``solvers/fedlama.py`` (github.com/swblaster/FedLAMA,
commit 45f7e2d8e492714631c3e4f50e311232dab902e4): interval set ``{1, phi}``, the
stopping rule with the whole model's discrepancy as denominator, non-kernel
parameters always at interval 1, and the warm-up (the authors adapt only
when ``epoch_id > 5``, i.e. after round 6); the aggregation itself is Flower's FedAvg.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord

from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.strategies import SeededFedAvg, StepDecay


def discrepancy(average: np.ndarray, copies: Sequence[np.ndarray]) -> float:
    """Mean squared L2 distance between ``average`` and each client's copy."""
    if not copies:
        raise ValueError("no client copies")
    return float(np.mean([np.sum((np.asarray(c, np.float64) - average) ** 2) for c in copies]))


def select_relaxed_layers(eff: dict[str, float], dist: dict[str, float], dims: dict[str, int],
                          total_dist: float | None = None) -> list[str]:
    """FedLAMA's choice of layers to synchronise less often.

    Layers are visited by increasing discrepancy per parameter (``eff``).  Each
    visited layer joins the set; the walk stops after the first layer at which
    ``1 - lambda < delta``, where ``delta`` is the set's share of the total
    discrepancy and ``lambda`` its share of the parameters.

    Parameters
    ----------
    eff, dist, dims
        Per candidate layer: discrepancy per parameter, discrepancy, and size.
    total_dist
        The discrepancy ``delta`` is a share of: that of every array of the model (the authors'
        ``sum(self.param_dists)``); ``None``: the candidates' own total.

    Returns
    -------
    list of str
        The layers to put at interval ``phi``, in visiting order.
    """
    total_dist = sum(dist.values()) if total_dist is None else total_dist
    total_dim = sum(dims.values())
    if total_dim == 0:
        return []
    chosen: list[str] = []
    acc_dist = acc_dim = 0.0
    for name in sorted(eff, key=lambda k: (eff[k], k)):
        chosen.append(name)
        acc_dist += dist[name]
        acc_dim += dims[name]
        delta = acc_dist / total_dist if total_dist > 0 else 1.0
        lam = acc_dim / total_dim
        if (1.0 - lam) < delta:
            break
    return chosen


class FedLAMA(SeededFedAvg):
    """FedLAMA as a Flower Message-API strategy.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`; ``local["steps"]`` is ``tau'``.
    phi
        Interval multiplier; ``phi = 1`` is exactly FedAvg.
    kernel_only
        Only arrays with two or more dimensions (weights, not biases or
        normalisation parameters) may get a longer interval.
    warmup
        Rounds before the intervals first adapt (all layers at interval 1 until then; the authors use 6).
    lr_decay
        As in :class:`~repro.federated.strategies.SeededFedAvg`.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0, phi: int = 2,
                 kernel_only: bool = True, warmup: int = 6, lr_decay: StepDecay | None = None) -> None:
        if phi < 1:
            raise ValueError(f"phi must be >= 1, got {phi}")
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup}")
        self.warmup = warmup
        super().__init__(active_clients, local, seed=seed, resample_every=phi, lr_decay=lr_decay)
        self.phi = phi
        self.kernel_only = kernel_only
        self.interval: dict[str, int] = {}
        self.dist: dict[str, float] = {}
        self.eff: dict[str, float] = {}
        self.timeline: dict[int, dict[str, int]] = {}
        self._global: dict[str, np.ndarray] = {}
        self._dims: dict[str, int] = {}

    def _init_layers(self, arrays: ArrayRecord) -> None:
        self._global = from_arrayrecord(arrays)
        self._dims = {k: int(v.size) for k, v in self._global.items()}
        self.interval = {k: 1 for k in self._global}

    def candidates(self) -> list[str]:
        """Arrays that may be given interval ``phi``."""
        return [k for k, v in self._global.items() if v.ndim >= 2 or not self.kernel_only]

    def payload(self, server_round: int, arrays: ArrayRecord) -> tuple[ArrayRecord, list[str]]:
        """Send the layers synchronised last round (all at a period start); ask back those due now."""
        if not self._global:
            self._init_layers(arrays)
        self.timeline[server_round] = dict(self.interval)
        period_start = (server_round - 1) % self.phi == 0
        fresh = [k for k in self._global if period_start or (server_round - 1) % self.interval[k] == 0]
        due = [k for k in self._global if server_round % self.interval[k] == 0]
        return to_arrayrecord({k: self._global[k] for k in fresh}), due

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Average the due layers (Flower's FedAvg), track their discrepancy, adapt intervals."""
        replies = list(replies)
        partial, metrics = super().aggregate_train(server_round, replies)
        if partial is None:
            return None, metrics
        avg = from_arrayrecord(partial)
        copies = [from_arrayrecord(m.content["arrays"]) for m in replies if not m.has_error()]
        tau = int(self.local["steps"])
        for k, u in avg.items():
            d = discrepancy(u, [c[k] for c in copies])
            self.dist[k] = d / (self.interval[k] * tau)
            self.eff[k] = self.dist[k] / self._dims[k]
            self._global[k] = u
        if self.phi > 1 and server_round % self.phi == 0 and server_round > self.warmup:
            self.interval = {k: 1 for k in self._global}
            cands = [k for k in self.candidates() if k in self.eff]
            relaxed = select_relaxed_layers(
                {k: self.eff[k] for k in cands}, {k: self.dist[k] for k in cands}, {k: self._dims[k] for k in cands},
                total_dist=sum(self.dist.values()))
            for k in relaxed:
                self.interval[k] = self.phi
        return to_arrayrecord(self._global), metrics

    def fully_synced(self, server_round: int) -> bool:
        """Whether every layer was averaged at the end of ``server_round``."""
        return server_round % self.phi == 0
