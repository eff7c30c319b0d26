"""Two engines for the same Flower apps, and what every run needs around them.

``inprocess`` (the default) drives the ``ClientApp`` directly through a small
:class:`InProcessGrid` that implements Flower's ``Grid`` interface in memory,
one client after another, and returns the replies in node order.  ``ray``
runs the very same ``ServerApp`` and ``ClientApp`` through Flower's
simulation runtime on Ray, for scale.  ``deployment`` runs them on Flower's
deployment engine, a SuperLink and SuperNodes as separate processes
(:mod:`repro.federated.deployment`).  With the same seeds all give
identical metrics for the book's strategies (tested).  Any Flower strategy
runs on both (stock ``flwr.serverapp.strategy.FedAvg`` included); the book's
:class:`~repro.federated.strategies.SeededFedAvg` family additionally gets
the partition map and reports its communication.

Around a run: the initial model (:func:`initial_arrays`), the central
evaluation (:func:`central_evaluator`, :func:`eval_schedule`), and the
per-run summary the chapters tabulate (:class:`RunSummary`,
:func:`per_client_accuracy`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypedDict, Unpack, cast
from uuid import uuid4

import numpy as np
import pandas as pd
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from tqdm import tqdm

from repro.federated.arrays import from_array, from_arrayrecord, to_arrayrecord
from repro.federated.deployment import run_deployed
from repro.federated.replies import ClientFailed, raise_on_failed
from repro.federated.strategies import SeededFedAvg, discover_partitions
from repro.federated.task import TaskSpec, build_model, evaluate, load_task_data
from repro.models import get_weights, set_weights
from repro.partition import label_histogram
from repro.paths import cache_dir

ENGINES = ("inprocess", "ray", "deployment")
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
                       ttl: float | None = None) -> Message:
        """A message to ``dst_node_id`` (Flower's ``Grid`` interface)."""
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

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The replies to ``message_ids``, in node order (so aggregation order does not depend on sampling order)."""
        replies = [self._replies.pop(m) for m in message_ids if m in self._replies]
        return sorted(replies, key=lambda r: r.metadata.src_node_id)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Deliver ``messages`` and return every reply (in-process calls never time out)."""
        return self.pull_messages(self.push_messages(messages))


@dataclass(kw_only=True)
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


class EngineOptions(TypedDict, total=False):
    """Keyword options of :func:`run_federated`.

    Attributes
    ----------
    engine
        ``inprocess`` (default), ``ray`` or ``deployment`` (a local SuperLink with ``num_clients``
        SuperNodes, or the SuperLink named by ``$REPRO_SUPERLINK``).
    progress
        Label of a tqdm progress bar (``None``, the default: no bar).
    """

    engine: str
    progress: str | None


class StrictGrid:
    """A Flower ``Grid`` whose ``send_and_receive`` refuses failed or missing replies.

    Flower's strategies log a failed client and aggregate the others, so a
    crash on one node would quietly change the result.  Every other call is
    passed to the wrapped grid.
    """

    def __init__(self, grid: Grid) -> None:
        self._grid = grid

    def __getattr__(self, name: str) -> object:
        return getattr(self._grid, name)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Deliver ``messages``; raise :class:`ClientFailed` naming the node if any reply failed or is missing."""
        sent = list(messages)
        replies = raise_on_failed(self._grid.send_and_receive(sent, timeout=timeout))
        if len(replies) != len(sent):
            raise ClientFailed(f"{len(sent) - len(replies)} of {len(sent)} clients sent no reply within the timeout")
        return replies


def _server_main(strategy: Strategy, num_clients: int, initial: ArrayRecord, num_rounds: int, evaluate: EvalFn,
                 eval_rounds: set[int], history: History, progress: str | None) -> Callable[[Grid, Context], None]:
    def main(engine_grid: Grid, context: Context) -> None:
        grid = cast(Grid, StrictGrid(engine_grid))  # a Grid by delegation
        seeded = strategy if isinstance(strategy, SeededFedAvg) else None
        if seeded is not None:  # the book's strategies sample partition ids; map them to this engine's node ids
            seeded.set_partition_map(discover_partitions(grid, expected=num_clients))
        bar = tqdm(total=num_rounds, desc=progress, leave=False, disable=progress is None)

        def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            bar.update(1 if server_round else 0)
            if server_round not in eval_rounds:
                return None
            m = evaluate(arrays)
            history.rounds.append(server_round)
            history.accuracy.append(m["accuracy"])
            history.loss.append(m["loss"])
            history.comm.append(seeded.comm.total if seeded is not None and seeded.comm is not None else 0)
            return MetricRecord(dict(m))

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
    strategy: Strategy,
    client_app: ClientApp,
    num_clients: int,
    initial: ArrayRecord,
    num_rounds: int,
    evaluate: EvalFn,
    eval_rounds: Iterable[int],
    **options: Unpack[EngineOptions],
) -> History:
    """Run ``strategy`` against ``num_clients`` clients running ``client_app``.

    Parameters
    ----------
    strategy
        Any Flower Message-API strategy; one built on :class:`SeededFedAvg` also
        gets the partition map and has its communication recorded.
    client_app
        The ``ClientApp`` (see :func:`repro.federated.client.make_client_app`;
        its ``run_config`` carries the run seed and, for strategies that do
        not send them, the local-training settings).
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
    **options
        ``engine`` and ``progress`` (:class:`EngineOptions`), by keyword.

    Returns
    -------
    History
        Accuracy, loss and cumulative communication (0 for strategies that
        do not count it) at each evaluated round.
    """
    engine, progress = options.get("engine", "inprocess"), options.get("progress")
    unknown = sorted(set(options) - set(EngineOptions.__annotations__))
    if unknown:
        raise TypeError(f"run_federated: unknown option(s) {unknown}; the options are {list(EngineOptions.__annotations__)}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    history = History()
    main = _server_main(strategy, num_clients, initial, num_rounds, evaluate, set(eval_rounds), history, progress)
    if engine == "inprocess":
        grid = InProcessGrid(client_app, num_clients)
        main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
        return history
    if engine == "deployment":  # the strategy and history come back with the server's final state
        run_deployed(main, client_app, num_clients, carried=(history, strategy))
        return history
    setup_runtime_dirs()
    from flwr.simulation import run_simulation  # 2.5 s to import; only the Ray engine needs it

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
    return {k: from_array(v) for k, v in arrays.items()}


# ----- around a run -----------------------------------------------------------------------
def central_evaluator(spec: TaskSpec) -> EvalFn:
    """A function evaluating a global model on the task's test set."""
    model = build_model(spec, seed=0)

    def evaluate_global(arrays: ArrayRecord) -> dict[str, float]:
        set_weights(model, from_arrayrecord(arrays))
        return evaluate(spec, model)

    return evaluate_global


def initial_arrays(spec: TaskSpec, seed: int) -> ArrayRecord:
    """The initial global model of a run with ``seed``."""
    return to_arrayrecord(get_weights(build_model(spec, seed)))


def eval_schedule(num_rounds: int, every: int, multiple_of: int = 1) -> list[int]:
    """Rounds to evaluate at: 0, then every ``every`` rounds rounded up to ``multiple_of``, and the last."""
    step = max(every, multiple_of)
    step = int(np.ceil(step / multiple_of) * multiple_of)
    rounds = list(range(0, num_rounds + 1, step))
    if rounds[-1] != num_rounds:
        rounds.append(num_rounds)
    return rounds


def per_client_accuracy(spec: TaskSpec, arrays: ArrayRecord) -> np.ndarray:
    """Test accuracy (percent) of a global model on each client's label distribution.

    Client ``i``'s accuracy is the test accuracy per class weighted by the
    client's own training label histogram, i.e. how well the model serves that client.
    """
    ds, parts = load_task_data(spec)
    model = build_model(spec, seed=0)
    set_weights(model, from_arrayrecord(arrays))
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(ds.x_test)).argmax(1).numpy()
    per_class = np.array([(pred[ds.y_test == c] == c).mean() if (ds.y_test == c).any() else 0.0
                          for c in range(ds.num_classes)])
    h = label_histogram(ds.y_train, list(parts), ds.num_classes).astype(float)
    return 100.0 * (h @ per_class) / h.sum(1)


BUDGET_EVALUATIONS = 3
"""Evaluations averaged into a run's accuracy at the budget (less sensitive to the last round's clients)."""


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """What the chapters tabulate of one run.

    Attributes
    ----------
    accuracy
        Test accuracy at the last evaluation (percent).
    budget_accuracy
        Mean of the last :data:`BUDGET_EVALUATIONS` evaluations.
    curve
        ``(round, accuracy)`` at every evaluation.
    client_acc_std
        Spread (sd) of :func:`per_client_accuracy` of the final model, if computed (else NaN).
    """

    accuracy: float
    budget_accuracy: float
    curve: tuple[tuple[int, float], ...]
    client_acc_std: float = float("nan")

    @classmethod
    def of(cls, history: History, spec: TaskSpec | None = None) -> RunSummary:
        """Summarise ``history``; with ``spec``, also the spread of per-client accuracy."""
        spread = float("nan")
        if spec is not None:
            if history.final_arrays is None:
                raise ValueError("the run kept no final model to compute per-client accuracy from")
            spread = float(per_client_accuracy(spec, history.final_arrays).std())
        return cls(accuracy=history.final_accuracy,
                   budget_accuracy=float(np.mean(history.accuracy[-BUDGET_EVALUATIONS:])),
                   curve=tuple(zip(history.rounds, history.accuracy)), client_acc_std=spread)


def seed_differences(final: pd.DataFrame, method: str, base: str, column: str = "budget_accuracy",
                     key: str = "method") -> list[float]:
    """Per seed (sorted), ``column`` of ``method`` minus that of ``base`` (rows told apart by ``key``)."""
    a, b = (final[final[key] == m].set_index("seed")[column] for m in (method, base))
    return [float(a[s] - b[s]) for s in sorted(b.index)]
