"""Weak-client, hierarchical and split strategies: aggregation per round against FedAvg, split step against unsplit.

The aggregation rows time only the server's ``aggregate_train`` over a short
run (:func:`federated.aggregation_seconds`, shared with ``bench/federated.py``).
FedDCT aggregates cluster ensembles (one reply per cluster of 4); on-device
KD's rounds alternate between the auxiliary model over the sampled clients
and the large model over the strong ones, and its row is the mean of both.
The split row times one split-learning step of one client
(:func:`repro.federated.split.split_step`: base, cut, core, gradient back)
against one plain SGD step of the unsplit model on the same batch.
``make bench`` imports :func:`run`.
"""

from __future__ import annotations

import copy
from typing import Callable, NamedTuple

import torch
from federated import ACTIVE, LOCAL, SPEC, aggregation_seconds
from flwr.app import ArrayRecord
from flwr.clientapp import ClientApp
from timing import timed

from repro.federated.client import make_client_app
from repro.federated.engine import EvalFn
from repro.federated.feddct import FedDCT, ensemble_arrays, ensemble_evaluator, make_feddct_client_app
from repro.federated.fjord import make_fjord_client_app
from repro.federated.heterofl import WidthReduced, make_heterofl_client_app
from repro.federated.hierfavg import HierFAVG
from repro.federated.ondevice_kd import Recipe, TwoModelFedAvg, make_two_model_client_app, pair_arrays, pair_evaluator
from repro.federated.partial import PartialTraining, make_partial_client_app
from repro.federated.split import SplitBatch, split_sequential, split_step
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.federated.tiers import Tier
from repro.models import mlp

LAYERS = len(SPEC.hidden) + 1
MIX = [
    Tier(name="strong", trained_layers=LAYERS, width=1.0),
    Tier(name="moderate", trained_layers=2, width=0.5),
    Tier(name="weak", trained_layers=1, width=0.25),
    Tier(name="weak", trained_layers=1, width=0.25),
] * (SPEC.num_clients // 4)

AUX_HIDDEN = (32,)


class Row(NamedTuple):
    """One timed strategy: its factory, its ``ClientApp`` builder, and its own initial arrays and evaluation.

    The last two are given where the global record is not the task model (a ``NamedTuple``, not a
    dataclass: ``make bench`` loads this file without registering it).
    """

    factory: Callable[[], SeededFedAvg]
    app: Callable[[TaskSpec], ClientApp]
    initial: ArrayRecord | None = None
    evaluate: EvalFn | None = None


STRATEGIES = {
    "FedAvg (Flower)": (lambda: SeededFedAvg(ACTIVE, LOCAL, seed=0), make_client_app),
    "EmbracingFL (layer-wise over contributors)": (lambda: PartialTraining(ACTIVE, LOCAL, MIX, seed=0), make_partial_client_app),
    "HeteroFL (nested widths)": (lambda: WidthReduced(ACTIVE, LOCAL, MIX, seed=0), make_heterofl_client_app),
    "FjORD (ordered dropout)": (lambda: WidthReduced(ACTIVE, LOCAL, MIX, seed=0, ordered_dropout=True), make_fjord_client_app),
    "HierFAVG (4 edges)": (lambda: HierFAVG(ACTIVE, LOCAL, [p % 4 for p in range(SPEC.num_clients)], seed=0), make_client_app),
    "FedDCT (S=4, cluster ensembles)": (
        lambda: FedDCT(ACTIVE, LOCAL, split_factor=4, seed=0),
        lambda spec: make_feddct_client_app(spec, 4),
        ensemble_arrays(SPEC, 4, 0),
        ensemble_evaluator(SPEC, 4),
    ),
    "on-device KD (aux and large steps)": (
        lambda: TwoModelFedAvg(ACTIVE, LOCAL, MIX, Recipe(train_aux=True, large_loss="ce-then-kd"), seed=0),
        lambda spec: make_two_model_client_app(spec, AUX_HIDDEN, 0.2),
        pair_arrays(SPEC, AUX_HIDDEN, 0),
        pair_evaluator(SPEC, AUX_HIDDEN),
    ),
}


def split_vs_unsplit() -> tuple[float, float]:
    """Seconds of one split step (one client) and of one unsplit SGD step, same model and batch."""
    torch.manual_seed(0)
    model = mlp(64, [256, 128, 64], 10)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    whole = copy.deepcopy(model)
    opt = torch.optim.SGD(whole.parameters(), lr=0.01)

    def unsplit() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(whole(x), y).backward()
        opt.step()

    base, core = split_sequential(model, 2)
    client = SplitBatch(base=base, optimizer=torch.optim.SGD(base.parameters(), lr=0.01), x=x, y=y)
    core_opt = torch.optim.SGD(core.parameters(), lr=0.01)
    return timed(lambda: split_step([client], core, core_opt), repeat=200), timed(unsplit, repeat=200)


def run() -> list[tuple[str, float, str]]:
    """One row per strategy (seconds per aggregation, ratio to FedAvg's) and the split step's row."""
    times = {
        name: min(aggregation_seconds(row.factory, row.app, initial=row.initial, evaluate=row.evaluate) for _ in range(2))
        for name, row in ((n, Row(*r)) for n, r in STRATEGIES.items())
    }
    base = times["FedAvg (Flower)"]
    rows = [
        (f"federated aggregate_train: {name}", t, f"{t / base:.2f}x FedAvg")
        for name, t in times.items()
        if name != "FedAvg (Flower)"
    ]
    split, plain = split_vs_unsplit()
    rows.append(("split-learning step (1 client, cut after layer 1)", split, f"{split / plain:.2f}x unsplit SGD step"))
    return rows


if __name__ == "__main__":
    for name, seconds, ratio in run():
        print(f"{name:55s} {seconds * 1e3:8.3f} ms  {ratio}")
