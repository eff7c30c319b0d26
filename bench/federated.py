"""Aggregation cost of the federated strategies, per round, against Flower's FedAvg.

Each strategy runs a few rounds of the same small task on the in-process
engine; only the server's ``aggregate_train`` is timed (client training and,
for the activation policies, the probes sent from ``configure_train`` are
excluded).  ``make bench`` imports :func:`run`.

Before them, the engine's own overhead (:func:`engine_overhead`): FedAvg
through Flower on the in-process grid and on Ray against a hand-written
loop doing the same work (same clients, seeds and final weights).
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

import numpy as np
from flwr.app import ArrayRecord
from flwr.clientapp import ClientApp

from repro.federated.activation import ActivatedFedAvg, MultiMetricActivation, make_probing_client_app
from repro.federated.cadis import CADIS, make_kd_client_app
from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import EvalFn, central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.feddrl import DDPGSettings, DDPGWeights, make_loss_reporting_client_app
from repro.federated.feddyn import FedDyn, make_feddyn_client_app
from repro.federated.fedlama import FedLAMA
from repro.federated.fedluar import FedLUAR, TopKSparsified
from repro.federated.fedopt import SeededFedAdagrad, SeededFedAdam, SeededFedAvgM, SeededFedYogi
from repro.federated.fedrep import FedRep, make_fedrep_client_app
from repro.federated.reference import fedavg_loop
from repro.federated.regularised import make_regularised_client_app
from repro.federated.safa import SAFA
from repro.federated.scaffold import SCAFFOLD, make_scaffold_client_app
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, load_task_data
from repro.federated.weighting import FlowerPolicyFedAvg

SPEC = TaskSpec(dataset="digits", num_clients=16, alpha=0.5, hidden=(256, 128, 64))
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.9).config(2)
ROUNDS = 6
ACTIVE = 8


def aggregation_seconds(factory: Callable[[], SeededFedAvg], app: Callable[[TaskSpec], ClientApp] = make_client_app,
                        rounds: int = ROUNDS, initial: ArrayRecord | None = None, evaluate: EvalFn | None = None) -> float:
    """Mean wall time of one ``aggregate_train`` call over a short run of the strategy ``factory`` builds.

    ``initial`` and ``evaluate`` replace the task model's initial arrays and central evaluation for
    strategies whose global record is not that model (an ensemble, a pair of models).
    """
    strategy = factory()
    inner = strategy.aggregate_train
    spent: list[float] = []

    def timed(server_round, replies):
        t = time.perf_counter()
        out = inner(server_round, replies)
        spent.append(time.perf_counter() - t)
        return out

    strategy.aggregate_train = timed  # type: ignore[method-assign]
    run_federated(strategy, app(SPEC), SPEC.num_clients, initial_arrays(SPEC, 0) if initial is None else initial, rounds,
                  central_evaluator(SPEC) if evaluate is None else evaluate, [rounds])
    return sum(spent) / len(spent)


STRATEGIES: dict[str, tuple[Callable[[], SeededFedAvg], Callable[[TaskSpec], ClientApp]]] = {
    "FedAvg (Flower)": (lambda: SeededFedAvg(ACTIVE, LOCAL, seed=0), make_client_app),
    "FedLAMA phi=2": (lambda: FedLAMA(ACTIVE, LOCAL, seed=0, phi=2), make_client_app),
    "FedLUAR delta=2": (lambda: FedLUAR(ACTIVE, LOCAL, seed=0, delta=2), make_client_app),
    "FedLUAR drop delta=2": (lambda: FedLUAR(ACTIVE, LOCAL, seed=0, delta=2, mode="drop"), make_client_app),
    "top-k keep=0.2": (lambda: TopKSparsified(ACTIVE, LOCAL, seed=0, keep=0.2), make_client_app),
    "FedProx mu=0.01": (lambda: SeededFedProx(ACTIVE, LOCAL, seed=0, mu=0.01), make_regularised_client_app),
    "SAFA (K models, importance)": (lambda: SAFA(ACTIVE, LOCAL, seed=0, period=3), make_regularised_client_app),
    "multi-metric activation": (lambda: ActivatedFedAvg(ACTIVE, LOCAL, seed=0, policy=MultiMetricActivation(1.0),
                                                        candidates=12), make_probing_client_app),
}

# FedDRL (the agent acts and trains 10 steps a round once its buffer holds a batch) and CADIS (clustering)
STRATEGIES["FedDRL (DDPG weights)"] = (
    lambda: FlowerPolicyFedAvg(ACTIVE, LOCAL,
                               DDPGWeights(ACTIVE, updates=10, seed=0, settings=DDPGSettings(batch_size=4)), seed=0),
    make_loss_reporting_client_app)
STRATEGIES["CADIS (clustered aggregation)"] = (
    lambda: CADIS(ACTIVE, LOCAL, SPEC.num_clients, f"fc{len(SPEC.hidden)}.weight", seed=0), make_kd_client_app)

# FedDyn (server state h) and SCAFFOLD (server control variate; twice the arrays each way)
STRATEGIES["FedDyn alpha=0.01"] = (
    lambda: FedDyn(ACTIVE, LOCAL, SPEC.num_clients, alpha=0.01, seed=0), make_feddyn_client_app)
STRATEGIES["SCAFFOLD (control variates)"] = (
    lambda: SCAFFOLD(ACTIVE, LOCAL, SPEC.num_clients, seed=0), make_scaffold_client_app)


# FedOpt: Flower's own server optimisers (seeded sampling), and FedRep (body averaged, heads kept per client)
STRATEGIES["FedAdam (Flower)"] = (lambda: SeededFedAdam(ACTIVE, LOCAL, seed=0, eta=0.01), make_client_app)
STRATEGIES["FedYogi (Flower)"] = (lambda: SeededFedYogi(ACTIVE, LOCAL, seed=0, eta=0.01), make_client_app)
STRATEGIES["FedAdagrad (Flower)"] = (lambda: SeededFedAdagrad(ACTIVE, LOCAL, seed=0, eta=0.01), make_client_app)
STRATEGIES["FedAvgM momentum=0.9 (Flower)"] = (
    lambda: SeededFedAvgM(ACTIVE, LOCAL, seed=0, server_momentum=0.9), make_client_app)
STRATEGIES["FedRep (personal heads)"] = (
    lambda: FedRep(ACTIVE, {**LOCAL, "head-steps": 2}, seed=0), lambda spec: make_fedrep_client_app(spec))

# ----- the engine's overhead against a hand-written loop --------------------------------------
ENGINE_SPEC = TaskSpec(dataset="digits", num_clients=10, alpha=0.5, hidden=(64,))
ENGINE_LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.0).config(10)
ENGINE_ROUNDS = 20
ENGINE_TARGET = 1.2
"""The in-process engine's target: at most this many times the hand-written loop's time."""


class Timing(NamedTuple):
    """Best wall time and best CPU time of this process (seconds) over the repeats of one workload.

    A ``NamedTuple``, not a dataclass: ``make bench`` loads this file without
    registering it in ``sys.modules``, which dataclasses need.
    """

    wall: float
    cpu: float


def fedavg_by_hand() -> dict[str, np.ndarray]:
    """FedAvg on :data:`ENGINE_SPEC` with every client every round, no Flower (the yardstick)."""
    return fedavg_loop(ENGINE_SPEC, ENGINE_LOCAL, ENGINE_ROUNDS, ENGINE_SPEC.num_clients, seed=0)


def fedavg_on(engine: str) -> dict[str, np.ndarray]:
    """The same FedAvg through Flower's ``FedAvg`` (seeded sampling) on ``engine``, one evaluation at the end."""
    history = run_federated(SeededFedAvg(ENGINE_SPEC.num_clients, ENGINE_LOCAL, seed=0), make_client_app(ENGINE_SPEC),
                            ENGINE_SPEC.num_clients, initial_arrays(ENGINE_SPEC, 0), ENGINE_ROUNDS,
                            central_evaluator(ENGINE_SPEC), [ENGINE_ROUNDS], engine=engine)
    assert history.final_arrays is not None
    return snapshot(history.final_arrays)


def interleaved(workloads: dict[str, Callable[[], dict[str, np.ndarray]]], repeat: int) -> dict[str, Timing]:
    """Best-of-``repeat`` wall and CPU times, the workloads taking turns (so a burst of load hits all alike).

    Every workload must return the same final weights, so the times compare the same work.
    """
    wall = {name: float("inf") for name in workloads}
    cpu = dict(wall)
    reference: dict[str, np.ndarray] | None = None
    for _ in range(repeat):
        for name, fn in workloads.items():
            w0, c0 = time.perf_counter(), time.process_time()
            weights = fn()
            wall[name] = min(wall[name], time.perf_counter() - w0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
            if reference is None:
                reference = weights
            elif set(weights) != set(reference) or not all(np.array_equal(weights[k], reference[k]) for k in weights):
                raise AssertionError(f"{name} did not reach the hand-written loop's weights; the times are not comparable")
    return {name: Timing(wall[name], cpu[name]) for name in workloads}


def engine_overhead(repeat: int = 5) -> list[tuple[str, float, str]]:
    """FedAvg by hand, on the in-process grid and on Ray: seconds and the ratio to the hand-written loop.

    The in-process engine runs in this process on one thread, so its CPU-time
    ratio is the overhead even on a loaded machine; its wall ratio is what the
    target is stated in.  Ray's workers are other processes, so only wall time
    tells its cost (one run: its start-up dominates).
    """
    load_task_data(ENGINE_SPEC)
    times = interleaved({"hand": fedavg_by_hand, "inprocess": lambda: fedavg_on("inprocess")}, repeat)
    ray = interleaved({"hand": fedavg_by_hand, "ray": lambda: fedavg_on("ray")}, 1)["ray"].wall
    hand, inproc = times["hand"], times["inprocess"]
    per_round = 1e3 * (inproc.wall - hand.wall) / ENGINE_ROUNDS
    size = f"{ENGINE_SPEC.num_clients} clients x {ENGINE_ROUNDS} rounds"
    return [
        (f"FedAvg, hand-written loop ({size})", hand.wall, f"1.00x (CPU {hand.cpu:.2f} s)"),
        ("FedAvg, Flower in-process grid", inproc.wall,
         f"{inproc.wall / hand.wall:.2f}x hand loop wall, {inproc.cpu / hand.cpu:.2f}x CPU "
         f"(target <= {ENGINE_TARGET}x; {per_round:+.0f} ms a round)"),
        ("FedAvg, Flower Ray simulation", ray, f"{ray / hand.wall:.1f}x hand loop, {ray / inproc.wall:.1f}x in-process"),
    ]


def run() -> list[tuple[str, float, str]]:
    """The engine's overhead, then one row per strategy: seconds per aggregation and the ratio to FedAvg's."""
    times = {name: min(aggregation_seconds(f, app) for _ in range(2)) for name, (f, app) in STRATEGIES.items()}
    base = times["FedAvg (Flower)"]
    return engine_overhead() + [
        (f"federated aggregate_train: {name}", t, f"{t / base:.2f}x FedAvg") for name, t in times.items()]


if __name__ == "__main__":
    for name, seconds, ratio in run():
        print(f"{name:45s} {seconds * 1e3:8.2f} ms  {ratio}")
