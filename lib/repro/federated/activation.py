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
* :class:`RankSumActivation`: the ``m`` with the highest
  ``rank(loss) + beta * rank(grad norm)``, ranks scaled to [0, 1] over the
  candidates (our reconstruction from the abstract, kept as an ablation;
  ``beta = 0`` is Power-of-Choice).

The multi-metric rule itself, :class:`MultiMetricActivation`, is the authors'
(``client_sampling.multi_metric`` of github.com/jjihyunh/multi-metric-fl at
aa3fdf7): it needs no probe.  The server keeps every client's last reported
training loss (``+inf`` until it first trains) and gradient norm (0 until
then), both means over the client's local steps; each round the ``m + b``
clients with the highest stored loss, and among them the ``m`` with the
*smallest* stored gradient norm, have their weights multiplied by ``r`` (so
the latter by ``r^2``), and ``m`` clients are drawn without replacement with
probabilities proportional to the weights (``b = 8``, ``r = 256``).  Its clients
report the gradient norm with every training reply
(:func:`make_activation_client_app`).

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
from repro.federated.client import RunConfig, begin_round, client_app_with, finish_round, local_sgd, make_client_app
from repro.federated.replies import metric, partition_of
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, client_data, work_model
from repro.models import get_weights, set_weights

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


def gradient_norm(model: torch.nn.Module) -> float:
    """The L2 norm of the model's current gradient (all parameters together; 0 where none)."""
    return float(np.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters() if p.grad is not None)))


def train_reporting_norm(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """The shared client's local SGD, replying also the mean over the steps of the gradient's norm (``grad-norm``).

    The norms are read after each backward pass and before the step, so the training is the shared
    client's exactly; the authors' ``fedavg.py`` reports the same mean with the mean loss.
    """
    rnd = begin_round(spec, msg, context)
    norms: list[float] = []
    loss = local_sgd(rnd.model, rnd.x, rnd.y, rnd.settings, after_backward=lambda m: norms.append(gradient_norm(m)))
    return finish_round(msg, rnd, get_weights(rnd.model), loss, {"grad-norm": float(np.mean(norms)) if norms else 0.0})


def make_activation_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """The activation chapter's client: trains as the shared client, reports its gradient norm, answers probes."""
    app = client_app_with(lambda msg, context: train_reporting_norm(spec, msg, context), run_config)
    add_probe(app, spec)
    return app


def make_probing_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """The shared ``ClientApp`` plus a ``query.probe`` handler returning :func:`probe_metrics` on the client's data."""
    app = make_client_app(spec, run_config)
    add_probe(app, spec)
    return app


def add_probe(app: ClientApp, spec: TaskSpec) -> None:
    """Give ``app`` the ``query.probe`` handler (:func:`probe_metrics` on the client's data at the sent model)."""

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


class RankSumActivation(ActivationPolicy):
    """``rank(loss) + beta * rank(grad norm)`` over probed candidates (our reconstruction from the abstract).

    Parameters
    ----------
    beta
        Weight of the gradient-norm rank; 0 gives Power-of-Choice's choice, a positive ``beta`` favours large
        gradient norms and a negative one small ones (the authors' rule prefers small ones).
    """

    name = "rank-sum"

    def __init__(self, beta: float = 1.0) -> None:
        if not np.isfinite(beta):
            raise ValueError(f"beta must be finite, got {beta}")
        self.beta = beta

    def score(self, loss: np.ndarray, grad_norm: np.ndarray) -> np.ndarray:  # noqa: D102
        return scaled_ranks(loss) + self.beta * scaled_ranks(grad_norm)


LOSS_SHORTLIST = 8
"""``b``: the authors' multi-metric rule shortlists the ``m + b`` clients with the highest stored loss."""
BOOST = 256.0
"""``r``: the factor the authors' rule multiplies a shortlisted client's weight by (twice for the smallest norms)."""


class MultiMetricActivation(ActivationPolicy):
    """The authors' multi-metric rule over every client's stored training loss and gradient norm (no probe).

    Parameters
    ----------
    num_clients
        All clients (partition ids ``0 .. num_clients - 1``).
    shortlist, boost
        ``b`` and ``r`` of the authors' code (8 and 256).
    """

    name = "multi-metric"
    needs_probe = False

    def __init__(self, num_clients: int, shortlist: int = LOSS_SHORTLIST, boost: float = BOOST) -> None:
        if num_clients < 1 or shortlist < 0 or boost <= 0:
            raise ValueError(f"need num_clients >= 1, shortlist >= 0, boost > 0; got {num_clients}, {shortlist}, {boost}")
        self.shortlist, self.boost = shortlist, boost
        self.losses = np.full(num_clients, np.inf)
        self.norms = np.zeros(num_clients)

    def weights(self, m: int) -> np.ndarray:
        """Draw probabilities: the ``m + b`` highest stored losses times ``r``, the ``m`` smallest norms among them again."""
        n = len(self.losses)
        if not 1 <= m <= n:
            raise ValueError(f"m must lie in 1..{n} (the clients), got {m}")
        w = np.ones(n)
        high_loss = np.sort(np.argsort(self.losses, kind="stable")[-min(n, m + self.shortlist):])
        small_norm = high_loss[np.argsort(self.norms[high_loss], kind="stable")[:m]]
        w[high_loss] *= self.boost
        w[small_norm] *= self.boost
        return w / w.sum()

    def draw(self, m: int, rng: np.random.Generator) -> list[int]:
        """``m`` distinct clients drawn with :meth:`weights` (sorted)."""
        return sorted(int(p) for p in rng.choice(len(self.losses), size=m, replace=False, p=self.weights(m)))

    def observe(self, partition_id: int, loss: float, grad_norm: float) -> None:
        """Store what a client reported after training (its mean loss and gradient norm over the local steps)."""
        self.losses[partition_id], self.norms[partition_id] = loss, grad_norm

    def select(self, candidates: Sequence[int], metrics: dict[int, dict[str, float]], m: int) -> list[int]:
        """Not used: the rule draws from every client (:meth:`draw`), not from probed candidates."""
        raise TypeError("the multi-metric rule draws from every client; ActivatedFedAvg calls draw()")


POLICIES = ("uniform", "power-of-choice", "grad-norm", "rank-sum", "multi-metric")


def make_policy(name: str, beta: float = 1.0, num_clients: int = 0) -> ActivationPolicy:
    """A policy by name (:data:`POLICIES`); ``beta`` is the rank-sum's weight, ``num_clients`` the multi-metric's."""
    simple = {"uniform": UniformActivation, "power-of-choice": PowerOfChoice, "grad-norm": GradNormActivation}
    if name == "rank-sum":
        return RankSumActivation(beta)
    if name == "multi-metric":
        return MultiMetricActivation(num_clients)
    if name not in simple:
        raise ValueError(f"policy must be one of {POLICIES}, got {name!r}")
    return simple[name]()


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
        """Draw candidates, probe them if the policy needs it, activate ``m``, then FedAvg's train messages.

        The multi-metric rule draws from every client with its stored metrics instead (no candidates).
        """
        if isinstance(self.policy, MultiMetricActivation):
            if not self.node_of:
                raise RuntimeError("call set_partition_map() before training")
            self.drawn[server_round] = sorted(self.node_of)
            self.probes[server_round] = {}
            self._chosen = self.policy.draw(self.active_clients, self.sampler_rng)
            return super().configure_train(server_round, arrays, config, grid)
        cands = self.draw_candidates()
        metrics = self.probe(grid, arrays, cands) if self.policy.needs_probe else {}
        self.drawn[server_round] = cands
        self.probes[server_round] = metrics
        self._chosen = self.policy.select(cands, metrics, self.active_clients)
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """FedAvg's aggregation; the multi-metric rule also stores each client's reported loss and gradient norm."""
        replies = list(replies)
        out = super().aggregate_train(server_round, replies)
        if isinstance(self.policy, MultiMetricActivation):
            for r in replies:
                self.policy.observe(partition_of(r), metric(r, "train-loss"), metric(r, "grad-norm"))
        return out
