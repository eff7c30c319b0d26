"""FedDCT's divide-and-co-train pieces (Nguyen et al.; mechanics from the authors' code, vinuni-vishc/fedDCT).

A large model is replaced by ``S`` narrower sub-models; the ensemble's
output is the mean of their logits (:class:`CoTrainedEnsemble`).  Each
round the clients are grouped at random into clusters of ``S``
(:func:`random_clusters`); client ``s`` of a cluster trains sub-model ``s``.
The training loss of a batch is ``sum_s CE(p_s, y) + w_cot * JS`` where
``JS = H(mean_s p_s) - mean_s H(p_s)`` (:func:`co_training_loss`), and
``w_cot`` rises linearly to its final value over a warm-up
(:func:`cot_weight`, with the code's floor).

Sub-model widths follow SplitNet's rule that keeps the total parameter count
about constant: width ``/ sqrt(S)`` (:func:`sub_width`).

Federated rounds run on Flower: :class:`FedDCT` is a
:class:`~repro.federated.strategies.SeededFedAvg` that groups the sampled
clients into clusters and sends one message per cluster; the cluster's
``ClientApp`` (:func:`make_feddct_client_app`) trains the ensemble over each
member's data in turn, as the authors' simulation does (``fed_epochs=1``
over each member's loader), and the server takes Flower's sample-weighted
FedAvg of the cluster ensembles (the paper's weighted average; the code
takes a plain mean).  In a deployment member ``s`` holds only sub-model
``s``; the simulation runs the members in one process.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from repro import models
from repro.devices import resolve_device
from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.client import LOCAL_STATE_KEY, LocalSettings, RunConfig, client_app_with
from repro.federated.engine import EvalFn
from repro.federated.replies import number
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, client_data, evaluate, load_task_data
from repro.models import get_weights, set_weights

COT_FLOOR = 0.005
"""The smallest co-training weight during warm-up (the authors' code)."""


def sub_width(width: int, split_factor: int) -> int:
    """Width of each of ``split_factor`` sub-models of a layer of ``width`` units (SplitNet: ``/ sqrt(S)``)."""
    if split_factor < 1:
        raise ValueError(f"split_factor must be >= 1, got {split_factor}")
    return max(1, int(round(width / math.sqrt(split_factor))))


class CoTrainedEnsemble(torch.nn.Module):
    """``S`` sub-models whose ensemble output is the mean of their logits.

    Parameters
    ----------
    members
        The sub-models (same input and output shapes).
    """

    def __init__(self, members: Sequence[torch.nn.Module]) -> None:
        super().__init__()
        self.members = torch.nn.ModuleList(members)

    def member_logits(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each sub-model's logits."""
        return [m(x) for m in self.members]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The ensemble's logits: the mean of the members'."""
        return torch.stack(self.member_logits(x)).mean(0)


def js_divergence(logits: Sequence[torch.Tensor]) -> torch.Tensor:
    """Generalised Jensen-Shannon divergence ``H(mean_s p_s) - mean_s H(p_s)`` of the members' softmaxes, batch mean."""
    probs = [torch.softmax(z, dim=1) for z in logits]
    log_probs = [torch.log_softmax(z, dim=1) for z in logits]
    mean = torch.stack(probs).mean(0)
    entropy_of_mean = -(mean * torch.log(mean.clamp_min(1e-12))).sum(1)
    mean_entropy = torch.stack([-(p * lp).sum(1) for p, lp in zip(probs, log_probs)]).mean(0)
    return (entropy_of_mean - mean_entropy).mean()


def co_training_loss(logits: Sequence[torch.Tensor], y: torch.Tensor, weight: float) -> torch.Tensor:
    """``sum_s CE(logits_s, y) + weight * JS``."""
    ce = sum((torch.nn.functional.cross_entropy(z, y) for z in logits), logits[0].new_zeros(()))
    return ce + weight * js_divergence(logits) if len(logits) > 1 else ce


def cot_weight(epoch: int, final: float = 0.5, warmup: int = 40) -> float:
    """The co-training weight at ``epoch``: linear warm-up to ``final`` over ``warmup`` epochs, floored at :data:`COT_FLOOR`."""
    if warmup <= 0:
        return final
    return max(COT_FLOOR, final * min(1.0, epoch / warmup))


def random_clusters(clients: Sequence[int], split_factor: int, seed: int) -> list[list[int]]:
    """A seeded grouping of ``clients`` into clusters of ``split_factor`` (leftover clients sit the round out)."""
    order = np.random.default_rng(seed).permutation(np.asarray(clients))
    n = len(order) // split_factor
    return [sorted(int(c) for c in order[i * split_factor:(i + 1) * split_factor]) for i in range(n)]


# ----- the ensemble of a task, and its federated rounds on Flower --------------------------------
CLUSTER_KEY = "cluster"
"""Config key listing a cluster's partition ids; member ``s`` trains sub-model ``s``."""
COT_KEY = "cot-weight"
"""Config key of the round's co-training weight."""


def sub_hidden(hidden: Sequence[int], split_factor: int) -> tuple[int, ...]:
    """Hidden widths of each of ``split_factor`` sub-models of an MLP with ``hidden`` widths."""
    return tuple(sub_width(h, split_factor) for h in hidden)


def build_ensemble(spec: TaskSpec, split_factor: int, seed: int) -> CoTrainedEnsemble:
    """``split_factor`` MLPs of width ``spec.hidden / sqrt(S)`` on the task, initialised from ``seed`` in order.

    With ``split_factor=1`` the one member is :func:`repro.federated.task.build_model`'s model for the same seed.
    """
    if spec.model != "mlp":
        raise ValueError(f"FedDCT's ensemble is built of MLPs; spec.model is {spec.model!r}")
    ds, _ = load_task_data(spec)
    torch.manual_seed(seed)
    widths = sub_hidden(spec.hidden, split_factor)
    return CoTrainedEnsemble([models.mlp(ds.num_features, widths, ds.num_classes) for _ in range(split_factor)])


def ensemble_arrays(spec: TaskSpec, split_factor: int, seed: int) -> ArrayRecord:
    """The initial global ensemble of a run."""
    return to_arrayrecord(get_weights(build_ensemble(spec, split_factor, seed)))


def ensemble_evaluator(spec: TaskSpec, split_factor: int) -> EvalFn:
    """Test accuracy and loss of a global ensemble (mean logits of its members)."""
    model = build_ensemble(spec, split_factor, seed=0)

    def evaluate_ensemble(arrays: ArrayRecord) -> dict[str, float]:
        set_weights(model, from_arrayrecord(arrays))
        return evaluate(spec, model)

    return evaluate_ensemble


def member_keys(keys: Sequence[str], member: int) -> list[str]:
    """State-dict keys of sub-model ``member`` (what device ``member`` of a cluster holds)."""
    prefix = f"members.{member}."
    return [k for k in keys if k.startswith(prefix)]


def train_cluster(ensemble: CoTrainedEnsemble, data: Sequence[tuple[np.ndarray, np.ndarray]],
                  settings: Sequence[LocalSettings], weight: float) -> float:
    """Train ``ensemble`` in place over each member's data in turn with the co-training loss.

    Member ``i``'s ``settings[i]`` give its steps, batch, learning rate,
    momentum and the seed of its mini-batches (drawn as
    :func:`repro.federated.client.local_sgd` draws them).  One optimiser
    spans the ensemble for the whole round.  It trains on the first
    member's ``device`` and is back on the CPU on return.

    Returns
    -------
    float
        Mean co-training loss over every step.
    """
    first = settings[0]
    dev = resolve_device(first.device)
    on_cpu = dev.type == "cpu"
    if not on_cpu:
        ensemble.to(dev)
    opt = torch.optim.SGD(ensemble.parameters(), lr=first.lr, momentum=first.momentum)
    ensemble.train()
    total, steps = 0.0, 0
    try:
        for (x, y), st in zip(data, settings):
            gen = np.random.default_rng(st.seed)
            xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
            for _ in range(st.steps):
                idx = torch.from_numpy(gen.choice(len(y), size=min(st.batch_size, len(y)), replace=False)).to(dev)
                opt.zero_grad()
                loss = co_training_loss(ensemble.member_logits(xt[idx]), yt[idx], weight)
                loss.backward()
                opt.step()
                total += loss.item()
                steps += 1
    finally:
        if not on_cpu:
            ensemble.to("cpu")
    return total / max(steps, 1)


_ENSEMBLES: dict[tuple[TaskSpec, int], CoTrainedEnsemble] = {}


def train_feddct(spec: TaskSpec, split_factor: int, msg: Message, context: Context) -> Message:
    """A cluster's round: load the ensemble, train it over the members' data (:func:`train_cluster`), reply with it."""
    torch.set_num_threads(1)
    pid = int(number(context.node_config, "partition-id"))
    cfg = msg.content["config"]
    if not isinstance(cfg, ConfigRecord):
        raise TypeError(f"a FedDCT message's 'config' must be a ConfigRecord, got {type(cfg).__name__}")
    members = cfg[CLUSTER_KEY] if CLUSTER_KEY in cfg else [pid]
    if not isinstance(members, list):
        raise TypeError(f"config {CLUSTER_KEY!r}: expected a list of partition ids, got {members!r}")
    cluster = [int(p) for p in members]
    key = (spec, split_factor)
    if key not in _ENSEMBLES:
        _ENSEMBLES[key] = build_ensemble(spec, split_factor, seed=0)
    ensemble = _ENSEMBLES[key]
    set_weights(ensemble, from_arrayrecord(msg.content["arrays"]))
    data = [client_data(spec, p) for p in cluster]
    settings = [LocalSettings.read(cfg, context, p) for p in cluster]
    loss = train_cluster(ensemble, data, settings, number(cfg, COT_KEY) if COT_KEY in cfg else 0.0)
    record = to_arrayrecord(get_weights(ensemble))
    context.state[LOCAL_STATE_KEY] = record
    metrics: dict[str, int | float | list[int] | list[float]] = {
        "num-examples": sum(len(y) for _, y in data), "train-loss": loss, "partition-id": pid}
    return Message(RecordDict({"arrays": record, "metrics": MetricRecord(metrics)}), reply_to=msg)


def make_feddct_client_app(spec: TaskSpec, split_factor: int, run_config: RunConfig | None = None) -> ClientApp:
    """The ``ClientApp`` of a FedDCT cluster (see :func:`train_feddct`)."""
    return client_app_with(lambda msg, context: train_feddct(spec, split_factor, msg, context), run_config)


class FedDCT(SeededFedAvg):
    """FedDCT's server: random clusters of ``split_factor`` clients each round, FedAvg of the cluster ensembles.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg` (the paper:
        every client, ``num_clusters * S``).
    split_factor
        Sub-models ``S``.
    cot_final, cot_warmup
        Final co-training weight and its warm-up in rounds (:func:`cot_weight`).
    cluster_size
        Clients per cluster (default ``S``, as in FedDCT); sampled clients
        beyond a multiple of it sit the round out.  ``split_factor=1`` with
        ``cluster_size=k`` trains the undivided model over clusters of ``k``
        clients in turn: the schedule without the division (an ablation).

    Communication is counted per device: member ``s`` of a cluster downloads
    and uploads sub-model ``s`` only, so a cluster moves one ensemble each way.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], split_factor: int, seed: int = 0,
                 cot_final: float = 0.5, cot_warmup: int = 40, cluster_size: int | None = None) -> None:
        super().__init__(active_clients, local, seed=seed)
        if split_factor < 1:
            raise ValueError(f"split_factor must be >= 1, got {split_factor}")
        self.cluster_size = split_factor if cluster_size is None else cluster_size
        if not 1 <= self.cluster_size <= active_clients:
            raise ValueError(f"active_clients={active_clients} cannot form one cluster of {self.cluster_size}")
        self.split_factor = split_factor
        self.cot_final = cot_final
        self.cot_warmup = cot_warmup
        self.clusters: dict[int, list[list[int]]] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Group the sampled clients into clusters; send each cluster's first member the ensemble and the cluster."""
        self.ensure_comm(arrays)
        pids = self.sample(server_round)
        clusters = random_clusters(pids, self.cluster_size, seed=int(self.sampler_rng.integers(2**31)))
        self.clusters[server_round] = clusters
        keys = list(arrays.keys())
        self.round_traffic = (server_round, keys, keys)
        weight = cot_weight(server_round - 1, self.cot_final, self.cot_warmup)
        messages = []
        for members in clusters:
            cfg = ConfigRecord({**dict(config), **self.local, "server-round": server_round, CLUSTER_KEY: members,
                                COT_KEY: weight})
            messages.append(Message(RecordDict({"arrays": arrays, "config": cfg}), dst_node_id=self.node_of[members[0]],
                                    message_type=MessageType.TRAIN))
        return messages
