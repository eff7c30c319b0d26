"""Helpers shared by the federated tests: a short evaluated run, and bitwise weight equality."""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

import numpy as np
import pytest
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import Strategy

from repro import datasets
from repro.federated import task
from repro.federated.client import make_client_app
from repro.federated.engine import History, central_evaluator, initial_arrays, run_federated
from repro.federated.task import TaskSpec


@pytest.fixture()
def run_rounds(request: pytest.FixtureRequest) -> Callable[..., History]:
    """``run(strategy, rounds=6, engine="inprocess", spec=None, app=None, seed=0)``: a run evaluated every round.

    ``spec`` defaults to the test module's ``SPEC``; ``app`` to the shared
    client with run seed ``seed``; the initial model is built with seed 0.
    """
    module_spec = getattr(request.module, "SPEC", None)

    def run(strategy: Strategy, rounds: int = 6, engine: str = "inprocess", spec: TaskSpec | None = None,
            app: ClientApp | None = None, seed: int = 0) -> History:
        task = module_spec if spec is None else spec
        client = make_client_app(task, {"seed": seed}) if app is None else app
        return run_federated(strategy, client, task.num_clients, initial_arrays(task, 0), rounds,
                             central_evaluator(task), range(rounds + 1), engine=engine)

    return run


def equal_weights(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Whether two weight dicts have the same names and bitwise equal arrays."""
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.fixture()
def same_weights() -> Callable[[dict[str, np.ndarray], dict[str, np.ndarray]], bool]:
    """:func:`equal_weights` as a fixture."""
    return equal_weights


@pytest.fixture()
def shuffled_test_labels(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """``shuffle()``: from then on every task loads its dataset with the test labels permuted (seeded).

    The task-data cache is cleared on the way in and out, so no other test sees the permuted labels.
    """
    original = task.load_dataset

    def with_shuffled_test(name: str, n_train: int | None = None, seed: int = 0) -> datasets.Dataset:
        ds = original(name, n_train=n_train, seed=seed)
        return dataclasses.replace(ds, y_test=np.random.default_rng(123).permutation(ds.y_test))

    def shuffle() -> None:
        task.load_task_data.cache_clear()
        monkeypatch.setattr(task, "load_dataset", with_shuffled_test)

    yield shuffle
    task.load_task_data.cache_clear()
