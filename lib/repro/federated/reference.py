"""A hand-written FedAvg loop with no Flower in it.

It is the yardstick for the Flower path: the tests check that
:class:`~repro.federated.strategies.SeededFedAvg` on the in-process engine gives the
same weights bit for bit, and ``make bench`` times both.
"""

from __future__ import annotations

import numpy as np
import torch

from repro.federated.client import LocalSettings, client_seed, local_sgd, round_seed
from repro.federated.task import TaskSpec, build_model, client_data, work_model
from repro.models import get_weights, set_weights


def fedavg_loop(spec: TaskSpec, local: dict[str, float | int], rounds: int, active_clients: int,
                seed: int) -> dict[str, np.ndarray]:
    """Run FedAvg for ``rounds`` rounds with the same sampling and seeds as ``SeededFedAvg``.

    Returns
    -------
    dict
        The final global weights.
    """
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    weights = get_weights(build_model(spec, seed))
    model = work_model(spec)
    for rnd in range(1, rounds + 1):
        pids = sorted(int(p) for p in rng.choice(np.arange(spec.num_clients), active_clients, replace=False))
        updates, counts = [], []
        for pid in pids:
            set_weights(model, weights)
            x, y = client_data(spec, pid)
            local_sgd(model, x, y, LocalSettings(steps=int(local["steps"]), batch_size=int(local["batch-size"]),
                                                 lr=float(local["lr"]), momentum=float(local["momentum"]),
                                                 seed=client_seed(round_seed(seed, rnd), pid)))
            updates.append(get_weights(model))
            counts.append(len(y))
        total = float(sum(counts))
        new: dict[str, np.ndarray] = {}
        for upd, n in zip(updates, counts):
            for k, v in upd.items():
                new[k] = v * (n / total) if k not in new else new[k] + v * (n / total)
        weights = new
    return weights
