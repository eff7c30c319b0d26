"""Helpers shared by the federated tests: a short evaluated run, bitwise weight equality, one shared Ray.

Ray: every test that runs the ``ray`` engine shares one Ray instance, started once per test process with
retries of the start-up only (Ray gives its node a fixed 30 s to register, which a loaded machine can
exceed: "The current node timed out during startup").  Flower's Ray backend shuts Ray down after every
simulation; while the shared instance is up it ends only its actors.  Where engines are compared, note
that Flower's stock strategies (``FedAvg``) average the replies in arrival order, which Ray does not fix,
so their sums may differ in the last bits (about 6e-8) between runs; the project's strategies sort the
replies by node (``repro.federated.replies.ordered_replies``) and are compared bit for bit.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import sys
from typing import Any, Callable, Iterator

import numpy as np
import pytest
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import Strategy

from repro import datasets
from repro.federated import task
from repro.federated.client import make_client_app
from repro.federated.engine import History, central_evaluator, initial_arrays, run_federated, setup_runtime_dirs
from repro.federated.task import TaskSpec

RAY_ENGINE = re.compile(r"""engine\s*=\s*["']ray["']""")
"""A test whose own source asks for the Ray engine gets the shared Ray instance."""
RAY_START_TRIES = 3
RAY_STARTUP_ERRORS = ("timed out during startup", "GCS has become overloaded", "Failed to connect to GCS")


def start_ray(tries: int = RAY_START_TRIES) -> None:
    """``ray.init`` with the engine's settings, retrying the start-up (and only it) up to ``tries`` times.

    Raises
    ------
    RuntimeError
        If every try timed out; it names the tries and carries Ray's last error.
    """
    import ray

    setup_runtime_dirs()
    pythonpath = os.pathsep.join([*sys.path, *filter(None, [os.environ.get("PYTHONPATH")])])
    last: Exception | None = None
    for _ in range(tries):
        try:
            ray.init(include_dashboard=False, num_cpus=os.cpu_count() or 1, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
            return
        except Exception as exc:  # noqa: BLE001 - only start-up failures are retried
            if not any(m in str(exc) for m in RAY_STARTUP_ERRORS):
                raise
            last = exc
            ray.shutdown()
    raise RuntimeError(f"Ray did not start in {tries} tries: {last}") from last


@pytest.fixture(scope="session")
def shared_ray() -> Iterator[None]:
    """One Ray instance for the session's Ray tests; Flower's backend only ends its actors after a run."""
    import ray
    from flwr.server.superlink.fleet.vce.backend import raybackend

    def end_actors_only(self: Any) -> None:
        if self.pool:
            self.pool.terminate_all_actors()

    start_ray()
    patch = pytest.MonkeyPatch()
    patch.setattr(raybackend.RayBackend, "terminate", end_actors_only)
    try:
        yield
    finally:
        patch.undo()
        ray.shutdown()


@pytest.fixture(autouse=True)
def ray_when_asked(request: pytest.FixtureRequest) -> None:
    """Give a test whose own source runs the Ray engine (``engine="ray"``) the shared Ray instance."""
    try:
        source = inspect.getsource(request.function)
    except (AttributeError, OSError, TypeError):
        return
    if RAY_ENGINE.search(source):
        request.getfixturevalue("shared_ray")


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
