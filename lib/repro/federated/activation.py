"""Client activation: which clients train in a round.

A round first draws ``d`` *candidates* uniformly from all clients.  Each
candidate is *probed*: it evaluates the current global model on its own
data and reports the mean loss and the norm of the full-batch gradient
(:func:`probe_metrics`, served by the ``query.probe`` handler that
:func:`make_probing_client_app` adds to the shared ``ClientApp``).  An
:class:`ActivationPolicy` then activates ``m`` of them:

* :class:`UniformActivation`: the first ``m`` candidates (unbiased);
* :class:`PowerOfChoice` (Cho et al.): the ``m`` with the highest loss;
* :class:`GradNormActivation`: the ``m`` with the largest gradient norm;
* :class:`MultiMetricActivation`: the ``m`` with the highest
  ``rank(loss) + beta * rank(grad norm)``, ranks scaled to [0, 1] over the
  candidates.  ``beta = 0`` is Power-of-Choice.  The sign of the
  gradient-norm term is our guess (the abstract names the metric, not how
  it enters); a negative ``beta`` is the opposite sign, kept as an ablation.

Ties are broken by partition id.  :class:`ActivatedFedAvg` is Flower's
FedAvg (through :class:`~repro.federated.strategies.SeededFedAvg`) with a policy
choosing the clients.  The probing traffic (one model download and two
scalars up per candidate) is counted separately in ``probe_downloads``.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from repro.federated.arrays import from_arrayrecord
from repro.federated.client import RunConfig, make_client_app
from repro.federated.replies import metric, partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, client_data, work_model
from repro.models import set_weights

PROBE = MessageType.QUERY + ".probe"


def probe_metrics(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Mean cross-entropy and the L2 norm of its full-batch gradient, at ``model``'s current weights."""
    model.zero_grad(set_to_none=True)
    model.eval()
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()
    sq = sum(float((p.grad.double() ** 2).sum()) for p in model.parameters() if p.grad is not None)
    model.zero_grad(set_to_none=True)
    return {"loss": float(loss.item()), "grad-norm": float(np.sqrt(sq))}


def make_probing_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """The shared ``ClientApp`` plus a ``query.probe`` handler returning :func:`probe_metrics` on the client's data."""
    app = make_client_app(spec, run_config)

    @app.query("probe")
    def probe(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        pid = int(context.node_config["partition-id"])
        model = work_model(spec)
        set_weights(model, from_arrayrecord(msg.content["arrays"]))
        x, y = client_data(spec, pid)
        m = probe_metrics(model, x, y)
        return Message(RecordDict({"metrics": MetricRecord({**m, "partition-id": pid, "num-examples": len(y)})}),
                       reply_to=msg)

    return app


def scaled_ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Ranks of ``values`` scaled to [0, 1] (0: smallest, 1: largest; ties share their mean rank)."""
    v = np.asarray(values, dtype=float)
    if len(v) == 1:
        return np.ones(1)
    order = v.argsort(kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=float)
    for val in np.unique(v):  # average ties
        same = v == val
        ranks[same] = ranks[same].mean()
    return ranks / (len(v) - 1)


class ActivationPolicy:
    """Chooses ``m`` of the probed candidates.  Subclasses define :meth:`score` (higher = activated first)."""

    name = "policy"
    needs_probe = True

    def score(self, loss: np.ndarray, grad_norm: np.ndarray) -> np.ndarray:
        """One score per candidate."""
        raise NotImplementedError

    def select(self, candidates: Sequence[int], metrics: dict[int, dict[str, float]], m: int) -> list[int]:
        """The ``m`` candidates with the highest score, ties broken by partition id (sorted output).

        Parameters
        ----------
        candidates
            Partition ids drawn this round.
        metrics
            ``partition id -> {"loss", "grad-norm"}`` of each candidate.
        m
            Clients to activate.
        """
        if not 1 <= m <= len(candidates):
            raise ValueError(f"m must lie in 1..{len(candidates)} (the candidates), got {m}")
        if len(set(candidates)) != len(candidates):
            raise ValueError(f"candidates must be distinct, got {list(candidates)}")
        cands = sorted(int(c) for c in candidates)
        loss = np.array([metrics[c]["loss"] for c in cands])
        gnorm = np.array([metrics[c]["grad-norm"] for c in cands])
        s = self.score(loss, gnorm)
        order = sorted(range(len(cands)), key=lambda i: (-s[i], cands[i]))
        return sorted(cands[i] for i in order[:m])


class UniformActivation(ActivationPolicy):
    """Unbiased: the candidates drawn first (the sampler's order), no probing."""

    name = "uniform"
    needs_probe = False

    def select(self, candidates: Sequence[int], metrics: dict[int, dict[str, float]], m: int) -> list[int]:
        """The first ``m`` candidates in draw order."""
        if not 1 <= m <= len(candidates):
            raise ValueError(f"m must lie in 1..{len(candidates)} (the candidates), got {m}")
        return sorted(int(c) for c in list(candidates)[:m])


class PowerOfChoice(ActivationPolicy):
    """Cho et al.'s Power-of-Choice: the highest local losses."""

    name = "power-of-choice"

    def score(self, loss: np.ndarray, grad_norm: np.ndarray) -> np.ndarray:  # noqa: D102
        return loss


class GradNormActivation(ActivationPolicy):
    """The largest local gradient norms."""

    name = "grad-norm"

    def score(self, loss: np.ndarray, grad_norm: np.ndarray) -> np.ndarray:  # noqa: D102
        return grad_norm


class MultiMetricActivation(ActivationPolicy):
    """The multi-metric bias: ``rank(loss) + beta * rank(grad norm)`` (reconstructed combination).

    Parameters
    ----------
    beta
        Weight of the gradient-norm rank; 0 gives Power-of-Choice's choice.  Positive (favouring large
        gradient norms) is our guess at the paper's sign; negative (favouring small ones) is its ablation.
    """

    name = "multi-metric"

    def __init__(self, beta: float = 1.0) -> None:
        if not np.isfinite(beta):
            raise ValueError(f"beta must be finite, got {beta}")
        self.beta = beta

    def score(self, loss: np.ndarray, grad_norm: np.ndarray) -> np.ndarray:  # noqa: D102
        return scaled_ranks(loss) + self.beta * scaled_ranks(grad_norm)


def make_policy(name: str, beta: float = 1.0) -> ActivationPolicy:
    """A policy by name: ``uniform``, ``power-of-choice``, ``grad-norm`` or ``multi-metric``."""
    policies = {"uniform": UniformActivation, "power-of-choice": PowerOfChoice, "grad-norm": GradNormActivation}
    if name == "multi-metric":
        return MultiMetricActivation(beta)
    if name not in policies:
        raise ValueError(f"policy must be one of {sorted(policies) + ['multi-metric']}, got {name!r}")
    return policies[name]()


class ActivatedFedAvg(SeededFedAvg):
    """FedAvg whose active clients are chosen by an :class:`ActivationPolicy` from ``candidates`` probed ones.

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg` (``active_clients`` is ``m``).
    policy
        The activation policy.
    candidates
        Candidates ``d`` drawn uniformly each round (``>= active_clients``).

    Attributes
    ----------
    drawn, probes
        Per round: the candidates drawn and their probe metrics.
    probe_downloads
        Model downloads spent on probing so far.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0,
                 policy: ActivationPolicy | None = None, candidates: int | None = None) -> None:
        super().__init__(active_clients, local, seed=seed)
        self.policy = policy or UniformActivation()
        self.candidates = active_clients if candidates is None else candidates
        if self.candidates < active_clients:
            raise ValueError(f"candidates ({self.candidates}) must be >= active_clients ({active_clients})")
        self.drawn: dict[int, list[int]] = {}
        self.probes: dict[int, dict[int, dict[str, float]]] = {}
        self.probe_downloads = 0
        self._chosen: list[int] = []

    def draw_candidates(self) -> list[int]:
        """``candidates`` distinct partition ids in draw order (uniform, from the seeded sampler)."""
        if not self.node_of:
            raise RuntimeError("call set_partition_map() before training")
        if self.candidates > len(self.node_of):
            raise ValueError(f"candidates={self.candidates} exceeds the {len(self.node_of)} clients")
        return [int(p) for p in self.sampler_rng.choice(sorted(self.node_of), self.candidates, replace=False)]

    def probe(self, grid: Grid, arrays: ArrayRecord, pids: list[int]) -> dict[int, dict[str, float]]:
        """Ask each candidate for its loss and gradient norm at ``arrays``."""
        msgs = [Message(RecordDict({"arrays": arrays, "config": ConfigRecord({})}), dst_node_id=self.node_of[p],
                        message_type=PROBE) for p in pids]
        out: dict[int, dict[str, float]] = {}
        for reply in grid.send_and_receive(msgs):
            if reply.has_error():
                raise RuntimeError(f"probe failed on node {reply.metadata.src_node_id}: {reply.error.reason}")
            out[partition_of(reply)] = {"loss": metric(reply, "loss"), "grad-norm": metric(reply, "grad-norm")}
        self.probe_downloads += len(pids)
        return out

    def sample(self, server_round: int) -> list[int]:
        """The clients the policy chose in :meth:`configure_train`."""
        self.sampled[server_round] = list(self._chosen)
        return self._chosen

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Draw candidates, probe them if the policy needs it, activate ``m``, then FedAvg's train messages."""
        cands = self.draw_candidates()
        metrics = self.probe(grid, arrays, cands) if self.policy.needs_probe else {}
        self.drawn[server_round] = cands
        self.probes[server_round] = metrics
        self._chosen = self.policy.select(cands, metrics, self.active_clients)
        return super().configure_train(server_round, arrays, config, grid)
