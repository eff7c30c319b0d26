"""A federated task: dataset, client partition and model, built from a frozen spec.

The spec is small and picklable, so every engine (in-process, Ray workers, a
real SuperNode) rebuilds exactly the same data from it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.model_selection import train_test_split

from repro import datasets, models, partition
from repro.federated.textdata import load_doc_topics


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """What a federated run trains on.

    Parameters
    ----------
    dataset
        ``digits``, ``fashion_mnist`` or ``doc_topics`` (the offline text task).
    num_clients
        Number of clients the training set is split over.
    scheme
        Partitioner: ``iid``, ``dirichlet``, ``shards`` or ``sparse_and_scarce``.
    alpha
        Dirichlet concentration (``scheme='dirichlet'``).
    hidden
        Hidden widths of the MLP.
    model
        ``mlp`` or ``resnet20`` (He et al.'s CIFAR ResNet on the images, for the paper profile).
    n_train
        Training samples drawn from the dataset (``None``: all).
    data_seed
        Seed of the subsample and the partition.
    usage
        Share of the samples the clients hold (``scheme='sparse_and_scarce'``,
        see :func:`repro.partition.sparse_and_scarce`; the other schemes use all).
    cluster_sizes, samples_per_client
        Client groups and per-client volume of ``scheme='cluster_skew'``
        (see :func:`repro.partition.cluster_skew`; ``alpha`` is the groups' label concentration).
    validation_share
        Share of the training samples held out, stratified by label, before
        the partition: no client holds them, and
        :func:`repro.federated.tuning.held_out` returns them to choose
        hyper-parameters on (0: every sample goes to the partition).
    init
        How the MLP's weights are drawn (:data:`repro.models.MLP_INITS`): ``torch`` (``nn.Linear``'s default)
        or ``he``; ``resnet20`` takes only ``torch``.
    """

    dataset: str = "digits"
    num_clients: int = 10
    scheme: str = "dirichlet"
    alpha: float = 0.1
    hidden: tuple[int, ...] = (64,)
    model: str = "mlp"
    n_train: int | None = None
    data_seed: int = 0
    usage: float = 1.0
    cluster_sizes: tuple[int, ...] = ()
    samples_per_client: int = 0
    validation_share: float = 0.0
    init: str = "torch"


FL_DATASETS = ("doc_topics",)
"""Datasets the federated tasks add to :func:`repro.datasets.load` (see :mod:`repro.federated.textdata`)."""

TRAIN_SAMPLES = {"digits": 1437, "fashion_mnist": 60000, "doc_topics": 4800}
"""Training samples each dataset holds before any ``n_train`` subsample (checked against the loaders by a test),
so that parameter checks can refuse an impossible split before any data are loaded."""


def available_train(dataset: str, n_train: int | None) -> int:
    """Training samples a task on ``dataset`` with ``n_train`` really holds (``n_train`` capped at the dataset)."""
    full = TRAIN_SAMPLES[dataset]
    return full if n_train is None else min(n_train, full)


def load_dataset(name: str, n_train: int | None = None, seed: int = 0) -> datasets.Dataset:
    """Load ``name`` from :func:`repro.datasets.load`, or one of :data:`FL_DATASETS`."""
    if name == "doc_topics":
        return load_doc_topics(n_train=n_train, seed=seed)
    return datasets.load(name, n_train=n_train, seed=seed)


@functools.lru_cache(maxsize=8)
def load_task_data(spec: TaskSpec) -> tuple[datasets.Dataset, tuple[np.ndarray, ...]]:
    """The dataset and the client partition of ``spec`` (cached per process)."""
    ds = load_dataset(spec.dataset, n_train=spec.n_train, seed=spec.data_seed)
    dealt = partition_pool(ds.y_train, spec.validation_share, spec.data_seed)
    labels = ds.y_train[dealt]
    if spec.scheme == "sparse_and_scarce":
        parts = partition.sparse_and_scarce(labels, spec.num_clients, usage=spec.usage, alpha=spec.alpha,
                                            seed=spec.data_seed)
    elif spec.scheme == "cluster_skew":
        if sum(spec.cluster_sizes) != spec.num_clients:
            raise ValueError(f"cluster_sizes {spec.cluster_sizes} must sum to num_clients={spec.num_clients}")
        parts = partition.cluster_skew(labels, list(spec.cluster_sizes), spec.samples_per_client,
                                       alpha=spec.alpha, seed=spec.data_seed)
    else:
        parts = partition.partition(labels, spec.num_clients, spec.scheme, seed=spec.data_seed, alpha=spec.alpha)
    return ds, tuple(dealt[p] for p in parts)


def partition_pool(labels: np.ndarray, validation_share: float, seed: int) -> np.ndarray:
    """Sorted indices of the training samples the partition deals out.

    All of them when ``validation_share`` is 0; otherwise all but a
    stratified ``validation_share`` of them (scikit-learn's
    ``train_test_split`` with ``seed``), which stay out of every client.

    Raises
    ------
    ValueError
        If ``validation_share`` is outside ``[0, 1)``.
    """
    if not 0.0 <= validation_share < 1.0:
        raise ValueError(f"validation_share must be in [0, 1), got {validation_share}")
    everything = np.arange(len(labels))
    if validation_share == 0.0:
        return everything
    dealt, _ = train_test_split(everything, test_size=validation_share, stratify=labels, random_state=seed)
    return np.sort(dealt)


def client_data(spec: TaskSpec, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Training arrays ``(x, y)`` of client ``partition_id``."""
    ds, parts = load_task_data(spec)
    if not 0 <= partition_id < len(parts):
        raise ValueError(f"partition_id {partition_id} outside 0..{len(parts) - 1}")
    idx = parts[partition_id]
    return ds.x_train[idx], ds.y_train[idx]


def build_model(spec: TaskSpec, seed: int) -> torch.nn.Module:
    """The task's model, initialised from ``seed``."""
    ds, _ = load_task_data(spec)
    torch.manual_seed(seed)
    if spec.model == "mlp":
        return models.mlp(ds.num_features, spec.hidden, ds.num_classes, init=spec.init)
    if spec.model == "resnet20":
        if spec.init != "torch":
            raise ValueError(f"init: resnet20 takes only 'torch', got {spec.init!r}")
        side = int(round(ds.num_features**0.5))
        if side * side != ds.num_features:
            raise ValueError(f"resnet20 needs square single-channel images; {spec.dataset} has "
                             f"{ds.num_features} features")
        return torch.nn.Sequential(torch.nn.Unflatten(1, (1, side, side)), models.resnet_cifar(20, ds.num_classes, 1))
    raise ValueError(f"unknown model {spec.model!r}; choose 'mlp' or 'resnet20'")


_WORK_MODELS: dict[TaskSpec, torch.nn.Module] = {}


def work_model(spec: TaskSpec) -> torch.nn.Module:
    """A per-process model instance for clients to load weights into (avoids re-initialising)."""
    if spec not in _WORK_MODELS:
        _WORK_MODELS[spec] = build_model(spec, seed=0)
    return _WORK_MODELS[spec]


@torch.no_grad()
def evaluate_on(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Accuracy (percent) and mean cross-entropy of ``model`` on ``(x, y)``."""
    model.eval()
    logits = model(torch.from_numpy(x))
    labels = torch.from_numpy(y)
    loss = torch.nn.functional.cross_entropy(logits, labels).item()
    acc = (logits.argmax(1) == labels).float().mean().item() * 100.0
    return {"accuracy": acc, "loss": loss}


def evaluate(spec: TaskSpec, model: torch.nn.Module) -> dict[str, float]:
    """Test accuracy (percent) and mean cross-entropy of ``model`` on the task's test set."""
    ds, _ = load_task_data(spec)
    return evaluate_on(model, ds.x_test, ds.y_test)


def majority_accuracy(spec: TaskSpec) -> float:
    """Test accuracy (percent) of always predicting the test set's most frequent class: the trivial level."""
    ds, _ = load_task_data(spec)
    return float(100.0 * np.bincount(ds.y_test).max() / len(ds.y_test))


def planted_clusters(spec: TaskSpec) -> np.ndarray:
    """The planted group of every client of a ``cluster_skew`` task."""
    if spec.scheme != "cluster_skew":
        raise ValueError(f"spec.scheme must be 'cluster_skew', got {spec.scheme!r}")
    return np.repeat(np.arange(len(spec.cluster_sizes)), spec.cluster_sizes)
