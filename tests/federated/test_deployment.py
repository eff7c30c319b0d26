"""Flower's deployment engine: a SuperLink and two SuperNodes on localhost give the in-process engine's model."""

from __future__ import annotations

import sys

import pytest

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.deployment import DeploymentError, FlowerProcess, LocalDeployment, SuperLinkAddress
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.fedlama import FedLAMA
from repro.federated.task import TaskSpec

SPEC = TaskSpec(dataset="digits", num_clients=2, alpha=0.5, hidden=(16,))
"""fedlama's smoke task (digits, an MLP, Dirichlet split) at two clients, one SuperNode each."""
ROUNDS = 2
PHI = 2


def fedlama() -> FedLAMA:
    """FedLAMA over both clients: layers are kept on the clients between aggregations (``context.state``)."""
    return FedLAMA(SPEC.num_clients, LocalSGD(batch_size=16, lr=0.05, momentum=0.9).config(3), seed=0, phi=PHI)


@pytest.mark.slow
def test_superlink_and_two_supernodes_reach_the_inprocess_model(same_weights) -> None:
    runs = {}
    for engine in ("inprocess", "deployment"):
        strategy = fedlama()
        history = run_federated(strategy, make_client_app(SPEC, {"seed": 0}), SPEC.num_clients,
                                initial_arrays(SPEC, 0), ROUNDS, central_evaluator(SPEC), [0, ROUNDS], engine=engine)
        runs[engine] = (history, strategy)
    (local, local_strategy), (deployed, deployed_strategy) = runs["inprocess"], runs["deployment"]
    assert deployed.final_arrays is not None and local.final_arrays is not None
    # replies are aggregated in partition order and clients train single-threaded: bitwise the same model
    assert same_weights(snapshot(deployed.final_arrays), snapshot(local.final_arrays))
    assert deployed.accuracy == local.accuracy
    # the strategy's state came back from the ServerApp process
    assert deployed_strategy.comm.total == local_strategy.comm.total > 0
    assert deployed_strategy.timeline == local_strategy.timeline


def test_a_process_that_dies_is_named(tmp_path) -> None:
    proc = FlowerProcess(role="flower-supernode (partition-id=0)", command=[sys.executable, "-c", "raise SystemExit(3)"],
                         log=tmp_path / "node.log")
    proc.start(dict(), tmp_path)
    with pytest.raises(DeploymentError, match=r"flower-supernode \(partition-id=0\) exited with code 3"):
        proc.wait_listening(1, timeout=30)


def test_addresses_and_node_counts_are_checked() -> None:
    assert str(SuperLinkAddress.parse("10.0.0.5:9093")) == "10.0.0.5:9093"
    with pytest.raises(ValueError, match="HOST:PORT"):
        SuperLinkAddress.parse("10.0.0.5")
    with pytest.raises(ValueError, match="num_nodes"):
        LocalDeployment(num_nodes=0).__enter__()
