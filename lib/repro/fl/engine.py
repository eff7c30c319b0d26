"""Two engines for the same Flower apps.

``inprocess`` (the default) drives the ``ClientApp`` directly through a small
:class:`InProcessGrid` that implements Flower's ``Grid`` interface in memory,
one client after another.  ``ray`` runs the very same ``ServerApp`` and
``ClientApp`` through Flower's simulation runtime on Ray, for scale.  With the
same seeds both give identical metrics (tested).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable
from uuid import uuid4

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from tqdm import tqdm

from repro.fl.strategies import SeededFedAvg, discover_partitions
from repro.paths import cache_dir

ENGINES = ("inprocess", "ray")
logging.getLogger("flwr").setLevel(logging.ERROR)


class InProcessGrid(Grid):
    """A Flower ``Grid`` that delivers messages to ``ClientApp`` calls in this process.

    Each node keeps its own ``Context`` (and so its ``context.state``) for the
    whole run, as a SuperNode would.

    Parameters
    ----------
    client_app
        The ``ClientApp`` every node runs.
    num_nodes
        Number of nodes; node ``i`` serves partition ``i``.
    run_id
        The run id stamped on messages.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_id: int = 1) -> None:
        self._app = client_app
        self._run = Run.create_empty(run_id)
        TaskIdentity.run_id = run_id
        TaskIdentity.node_id = 0
        TaskIdentity.task_id = 1
        self._contexts = {
            nid: Context(
                run_id=run_id,
                node_id=nid,
                node_config={"partition-id": nid - 1, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config={},
            )
            for nid in range(1, num_nodes + 1)
        }
        self._replies: dict[str, Message] = {}

    def set_run(self, run: Run) -> None:  # noqa: D102
        self._run = run

    @property
    def run(self) -> Run:  # noqa: D102
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:  # noqa: D102
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return list(self._contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Run the ``ClientApp`` on each message now; keep the replies for :meth:`pull_messages`."""
        ids = []
        for msg in messages:
            mid = uuid4().hex
            msg.metadata.__dict__["_message_id"] = mid
            ctx = self._contexts[msg.metadata.dst_node_id]
            self._replies[mid] = self._app(msg, ctx)
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        return [self._replies.pop(m) for m in message_ids if m in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Deliver ``messages`` and return every reply (in-process calls never time out)."""
        return self.pull_messages(self.push_messages(messages))


@dataclass
class History:
    """What a federated run produced."""

    rounds: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    comm: list[int] = field(default_factory=list)
    final_arrays: ArrayRecord | None = None

    @property
    def final_accuracy(self) -> float:
        """Accuracy at the last evaluation."""
        return self.accuracy[-1]


EvalFn = Callable[[ArrayRecord], dict[str, float]]


def _server_main(strategy: SeededFedAvg, num_clients: int, initial: ArrayRecord, num_rounds: int, evaluate: EvalFn,
                 eval_rounds: set[int], history: History, progress: str | None) -> Callable[[Grid, Context], None]:
    def main(grid: Grid, context: Context) -> None:
        strategy.set_partition_map(discover_partitions(grid, expected=num_clients))
        bar = tqdm(total=num_rounds, desc=progress, leave=False, disable=progress is None)

        def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            bar.update(1 if server_round else 0)
            if server_round not in eval_rounds:
                return None
            m = evaluate(arrays)
            history.rounds.append(server_round)
            history.accuracy.append(m["accuracy"])
            history.loss.append(m["loss"])
            history.comm.append(0 if strategy.comm is None else strategy.comm.total)
            return MetricRecord(m)

        result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=num_rounds, evaluate_fn=evaluate_fn)
        bar.close()
        history.final_arrays = result.arrays

    return main


def setup_runtime_dirs() -> None:
    """Point Ray's and Flower's scratch folders into the repo's ignored ``.cache``."""
    base = cache_dir()
    for var, sub in (("RAY_TMPDIR", "ray"), ("FLWR_HOME", "flwr")):
        path = os.environ.setdefault(var, str(base / sub))
        os.makedirs(path, exist_ok=True)


def run_federated(
    strategy: SeededFedAvg,
    client_app: ClientApp,
    num_clients: int,
    initial: ArrayRecord,
    num_rounds: int,
    evaluate: EvalFn,
    eval_rounds: Iterable[int],
    engine: str = "inprocess",
    progress: str | None = None,
) -> History:
    """Run ``strategy`` against ``num_clients`` clients running ``client_app``.

    Parameters
    ----------
    strategy
        A Flower strategy built on :class:`SeededFedAvg`.
    client_app
        The ``ClientApp`` (see :func:`repro.fl.client.make_client_app`).
    num_clients
        Number of simulated clients (partition ids ``0..num_clients-1``).
    initial
        The initial global model.
    num_rounds
        Rounds to run.
    evaluate
        Central evaluation of a global model, returning ``accuracy`` and ``loss``.
    eval_rounds
        Rounds after which to evaluate (0 is the initial model).
    engine
        ``inprocess`` or ``ray``.
    progress
        Label of a tqdm progress bar (``None``: no bar).

    Returns
    -------
    History
        Accuracy, loss and cumulative communication at each evaluated round.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    history = History()
    main = _server_main(strategy, num_clients, initial, num_rounds, evaluate, set(eval_rounds), history, progress)
    if engine == "inprocess":
        grid = InProcessGrid(client_app, num_clients)
        main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
        return history
    setup_runtime_dirs()
    from flwr.simulation import run_simulation

    server_app = ServerApp()
    server_app.main()(main)
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=num_clients,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                        "init_args": {"include_dashboard": False, "num_cpus": os.cpu_count() or 1,
                                      "log_to_driver": False}},
    )
    if not history.rounds:
        raise RuntimeError("the Ray simulation produced no evaluations; see Flower's log above")
    return history


def snapshot(arrays: ArrayRecord) -> dict[str, np.ndarray]:
    """Numpy copy of an ``ArrayRecord`` (for comparing runs)."""
    return {k: v.numpy().copy() for k, v in arrays.items()}
