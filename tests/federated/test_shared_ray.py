"""The Ray tests share one Ray instance, whose start-up (and only it) is retried on a loaded machine."""

from __future__ import annotations

import pytest
import ray

from repro.federated.client import LocalSGD
from repro.federated.fedlama import FedLAMA
from repro.federated.task import TaskSpec

from .conftest import RAY_START_TRIES, start_ray

SPEC = TaskSpec(dataset="digits", num_clients=2, alpha=0.5, hidden=(8,))


def _fake_init(outcomes: list[BaseException | None], calls: list[int]):
    def init(**kwargs) -> None:
        calls.append(1)
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
    return init


def test_a_start_up_timeout_is_retried(monkeypatch):
    calls: list[int] = []
    timeout = Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")
    monkeypatch.setattr(ray, "init", _fake_init([timeout, None], calls))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    start_ray()
    assert len(calls) == 2


def test_other_errors_are_not_retried_and_retries_end(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(ray, "init", _fake_init([ValueError("num_cpus must be >= 0")], calls))
    with pytest.raises(ValueError, match="num_cpus"):
        start_ray()
    assert len(calls) == 1
    calls.clear()
    timeouts = [Exception("The current node timed out during startup.") for _ in range(RAY_START_TRIES)]
    monkeypatch.setattr(ray, "init", _fake_init(timeouts, calls))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    with pytest.raises(RuntimeError, match=f"Ray did not start in {RAY_START_TRIES} tries"):
        start_ray()
    assert len(calls) == RAY_START_TRIES


@pytest.mark.slow
def test_a_ray_run_leaves_the_shared_instance_up_for_the_next(run_rounds):
    """Flower's Ray backend shuts Ray down after each simulation; under the shared instance it ends only its actors."""
    strategy = FedLAMA(SPEC.num_clients, LocalSGD(batch_size=16, lr=0.05).config(1), seed=0, phi=1)
    history = run_rounds(strategy, rounds=1, spec=SPEC, engine="ray")
    assert history.rounds == [0, 1]
    assert ray.is_initialized()
