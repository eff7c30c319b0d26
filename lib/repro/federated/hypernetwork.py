"""A hypernetwork that writes each client's classifier head from a label-free description of its data.

:class:`HyperHeadNet` holds three parts trained together by FedAvg:
the shared feature extractor ``phi`` (:attr:`HyperHeadNet.body`), a set
encoder ``psi`` (:attr:`HyperHeadNet.encoder`) and the hypernetwork ``h``
(:attr:`HyperHeadNet.hyper`).  A client's descriptor is the mean of
``psi(phi(x))`` over its *unlabelled* inputs
(``z_i = mean over x in D_i of psi(phi(x))``),
a permutation-invariant set embedding, unchanged by duplicating the set;
``h(z_i)`` outputs the weight and bias of the client's linear head.  A seen
client trains all three parts on ``CE(h(z_i)(phi(x)), y)``; a new client
needs one forward pass over its unlabelled inputs to get its own head, and
neither labels nor a gradient step (:func:`personal_logits`).

This is a representative design in the spirit of pFedHN, ODPFL-HN and
PeFLL (the pfl-unseen paper's own method was not available to us).
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message
from flwr.clientapp import ClientApp

from repro.federated.arrays import to_arrayrecord
from repro.federated.client import RunConfig, client_app_with, finish_round, own_model_round, train_locally
from repro.models import get_weights

ClientData = Callable[[int], tuple[np.ndarray, np.ndarray]]
"""Partition id -> the client's training arrays ``(x, y)``."""


@dataclass(frozen=True, kw_only=True)
class HyperSpec:
    """Sizes of a :class:`HyperHeadNet`: inputs, body width, descriptor, hypernetwork hidden width, classes."""

    in_features: int = 64
    body_width: int = 64
    descriptor: int = 16
    hyper_hidden: int = 32
    num_classes: int = 10


class HyperHeadNet(torch.nn.Module):
    """Feature extractor, set encoder and head-generating hypernetwork (see the module docstring).

    ``forward(x)`` classifies ``x`` with the head generated from the
    unlabelled set given to :meth:`conditioned_on`.
    """

    def __init__(self, spec: HyperSpec) -> None:
        super().__init__()
        self.spec = spec
        self.body = torch.nn.Sequential(torch.nn.Linear(spec.in_features, spec.body_width), torch.nn.ReLU())
        self.encoder = torch.nn.Linear(spec.body_width, spec.descriptor)
        self.hyper = torch.nn.Sequential(torch.nn.Linear(spec.descriptor, spec.hyper_hidden), torch.nn.ReLU(),
                                         torch.nn.Linear(spec.hyper_hidden, spec.num_classes * (spec.body_width + 1)))
        self._context: torch.Tensor | None = None

    def descriptor(self, unlabelled: torch.Tensor) -> torch.Tensor:
        """The client descriptor ``z``: the mean of ``psi(phi(x))`` over the set."""
        return self.encoder(self.body(unlabelled)).mean(0)

    def head(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The generated head ``(weight (classes, body_width), bias (classes,))`` for descriptor ``z``."""
        out = self.hyper(z)
        c, w = self.spec.num_classes, self.spec.body_width
        return out[:c * w].view(c, w), out[c * w:]

    @contextmanager
    def conditioned_on(self, unlabelled: torch.Tensor | np.ndarray) -> Iterator[HyperHeadNet]:
        """Within the block, ``forward`` uses the head generated from ``unlabelled`` (recomputed each call)."""
        previous = self._context
        self._context = torch.as_tensor(np.asarray(unlabelled, dtype=np.float32))
        try:
            yield self
        finally:
            self._context = previous

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if self._context is None:
            raise RuntimeError("HyperHeadNet needs a client's unlabelled set: use `with model.conditioned_on(x):`")
        weight, bias = self.head(self.descriptor(self._context))
        return self.body(x) @ weight.T + bias


def build_hypernet(spec: HyperSpec, seed: int) -> HyperHeadNet:
    """A :class:`HyperHeadNet` initialised from ``seed``."""
    torch.manual_seed(seed)
    return HyperHeadNet(spec)


def hyper_initial(spec: HyperSpec, seed: int) -> ArrayRecord:
    """The initial global model of a run with ``seed``."""
    return to_arrayrecord(get_weights(build_hypernet(spec, seed)))


@functools.lru_cache(maxsize=4)
def _work_model(spec: HyperSpec) -> HyperHeadNet:
    return build_hypernet(spec, seed=0)


@torch.no_grad()
def personal_logits(model: HyperHeadNet, unlabelled: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Logits on ``x`` of the head generated from a client's ``unlabelled`` inputs (no labels, no training)."""
    model.eval()
    with model.conditioned_on(unlabelled):
        return model(torch.from_numpy(np.asarray(x, np.float32))).numpy()


def train_hyper(spec: HyperSpec, data: ClientData, msg: Message, context: Context) -> Message:
    """A seen client's round: local SGD of body, encoder and hypernetwork, the head generated from its own inputs."""
    model = _work_model(spec)
    rnd = own_model_round(model, msg, context, data)
    with model.conditioned_on(rnd.x):
        loss = train_locally(model, rnd.x, rnd.y, rnd.settings)
    return finish_round(msg, rnd, get_weights(model), loss)


def make_hyper_client_app(spec: HyperSpec, data: ClientData, run_config: RunConfig | None = None) -> ClientApp:
    """The ``ClientApp`` of the hypernetwork method (any FedAvg-like strategy aggregates every part)."""
    return client_app_with(lambda msg, context: train_hyper(spec, data, msg, context), run_config)
