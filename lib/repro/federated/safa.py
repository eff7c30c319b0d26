"""SAFA (accumulative learning for sparse-and-scarce data), FedDC-style daisy chaining and FedProx.

SAFA keeps ``K`` *accumulative* models on the server, one per client slot
of a round.  Each model ``k`` carries weights ``theta_k``, a diagonal
importance ``F_k`` (summed squared full-batch gradients, as in EWC) and a
volume ``n_k`` (samples it has seen since its last reset).  A round:

1. ``K`` clients are sampled and the models are shuffled over them (daisy
   chaining: a model visits a new client every round);
2. the client holding model ``k`` trains it on
   ``CE + lambda * sum F_k (theta - theta_k)^2``, then reports the squared
   full-batch gradient at its result, which the server adds to ``F_k``;
   ``n_k`` grows by the client's sample count;
3. the evaluated global model is ``theta_g = sum_k n_k theta_k / sum_k n_k``
   (Flower's weighted aggregation over the ``K`` models);
4. every ``u`` rounds the models are pulled towards the global one:
   ``theta_k <- (1-a) theta_g + a theta_k``, ``F_k <- (1-a) F_g + a F_k``
   (``F_g`` the ``n``-weighted mean), and the volumes are reset.

With ``lambda = 0`` and ``a = 0`` the models are plain daisy chains averaged
every ``u`` rounds, which is FedDC's scheme in its partial-participation form
(:func:`feddc`); with ``u = 1`` as well it is FedAvg exactly (tested bit
for bit).

The period ``u`` is fixed unless the strategy is given a :class:`PeriodRule`;
then it adapts as in the authors' code (``algorithm/SAFA.py`` and
``algorithm/utils/SAFA_supports/ewc.py`` of github.com/HungNguyen20/SAFA,
commit 4b9a8a2), through a :class:`PeriodTracker`:

- the clients are grouped once, by the label pattern each reports the first
  time it trains (:func:`repro.federated.regularised.label_pattern`: the signs
  of its full-batch last-layer gradient);
- each model remembers the groups it visited since the last pull and the
  accuracy it left each client with; when it reaches a group again after
  ``d`` rounds, *forget* is that departure accuracy minus the accuracy it
  arrives with now (both on the clients' own data), filed under ``d - 1``;
- *gain* is a round's mean accuracy after minus before local training, filed
  under the round's position ``j`` in the period's clock;
- both are exponential moving averages (weight :attr:`PeriodRule.smoothing`
  for the new value); the forget tracker moves, each round, towards the mean
  of every revisit since the last pull, where those sum to a positive value;
- every :attr:`PeriodRule.retain` pulls (while ``u >= 3``), :func:`next_period`
  sets ``u`` from the cumulative advantage ``sum(gain) - sum(forget)``.

Where we depart from that code: the label pattern is taken at the model a
client first receives, not at the initial model in a round before training
(for a ReLU network an absent label never shows either way; a rare held one
may show at one model and not at the other), and
the accuracies are percentages rather than fractions (which moves no argmax
and no sign).

The clients run :func:`repro.federated.regularised.make_regularised_client_app`, which also serves
FedProx (:class:`~repro.federated.strategies.SeededFedProx`, Flower's ``FedProx`` with seeded sampling).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.regularised import FISHER
from repro.federated.replies import metric, metrics_of, ordered_replies, partition_of
from repro.federated.strategies import SeededFedAvg


@dataclass(frozen=True, kw_only=True)
class PeriodRule:
    """The constants of SAFA's adaptive period, as the authors' code sets them.

    Attributes
    ----------
    retain
        Pulls between two adaptations (the code's ``--retain``, default 20).
    smoothing
        Weight of the new value in the trackers' moving averages (0.15 in the code).
    shift
        Added to the argmax of the cumulative advantage to give the new ``u`` (3 in the code:
        the tracker slice starts at position 1, plus 2).
    step
        Added when the new ``u`` equals the current one (the code's ``advanced_stepsize``, 5).
    patience
        Adaptations in a row without a positive advantage after which ``u`` falls to 1 for good
        (the code's ``confidence_thr``, 10).
    floor
        Adaptation runs only while ``u`` is at least this (3 in the code; below it the tracker
        slice would be empty).
    """

    retain: int = 20
    smoothing: float = 0.15
    shift: int = 3
    step: int = 5
    patience: int = 10
    floor: int = 3

    def __post_init__(self) -> None:
        if self.retain < 1 or self.patience < 1 or self.floor < 3:
            raise ValueError(f"retain and patience must be >= 1 and floor >= 3, got {self}")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"smoothing must lie in (0, 1], got {self.smoothing}")


@dataclass(frozen=True, kw_only=True)
class PeriodChoice:
    """What one adaptation decided (:func:`next_period`).

    Attributes
    ----------
    period
        The new ``u``.
    misses
        Adaptations in a row without a positive cumulative advantage, this one included.
    advantage
        ``cumsum(gain[1:-1]) - cumsum(forget[1:-1])``, the curve ``u`` was read from.
    """

    period: int
    misses: int
    advantage: np.ndarray


def next_period(forget: np.ndarray, gain: np.ndarray, period: int, misses: int, rule: PeriodRule) -> PeriodChoice:
    """SAFA's new period from its trackers (``forget[d-1]``: revisits after ``d`` rounds; ``gain[j]``: clock ``j``).

    With ``A = cumsum(gain[1:-1]) - cumsum(forget[1:-1])``: if ``max A > 0`` the candidate is
    ``argmax A + shift`` (``+ step`` if that is the current ``u``) and the misses restart at 0;
    otherwise the candidate is ``shift`` and the misses grow by one.  The new ``u`` is
    ``max(candidate, u // 2)``, or 1 once the misses reach ``patience``.
    """
    advantage = np.cumsum(gain[1:-1]) - np.cumsum(forget[1:-1])
    if advantage.size == 0:
        raise ValueError(f"the trackers need at least 3 entries, got {len(gain)}")
    if advantage.max() > 0:
        misses, candidate = 0, int(np.argmax(advantage)) + rule.shift
        if candidate == period:
            candidate += rule.step
    else:
        misses, candidate = misses + 1, rule.shift
    new = 1 if misses >= rule.patience else max(candidate, period // 2)
    return PeriodChoice(period=new, misses=misses, advantage=advantage)


@dataclass(kw_only=True)
class ModelTrail:
    """What one accumulative model remembers since the last pull: groups visited and the accuracy it left each with."""

    groups: list[tuple[int, ...]] = field(default_factory=list)
    departures: list[float] = field(default_factory=list)
    revisits: list[tuple[int, float]] = field(default_factory=list)
    """``(d, forget)`` for every return to a group after ``d`` rounds."""

    def visit(self, group: tuple[int, ...], arrival: float, departure: float) -> None:
        """Record a round at a client of ``group``; a return to a group files the accuracy lost since."""
        if group in self.groups:
            last = len(self.groups) - 1 - self.groups[::-1].index(group)
            self.revisits.append((len(self.groups) - last, self.departures[last] - arrival))
        self.groups.append(group)
        self.departures.append(departure)


class PeriodTracker:
    """SAFA's forgetting and gain trackers and the period they choose (see the module docstring).

    Parameters
    ----------
    rule
        The constants.
    period
        The starting ``u``; the trackers start with this many entries and grow with ``u``.
    models
        ``K``, the number of accumulative models.
    """

    def __init__(self, rule: PeriodRule, period: int, models: int) -> None:
        self.rule, self.period = rule, period
        self.forget = np.zeros(period)
        self.gain = np.zeros(period)
        self.trails = [ModelTrail() for _ in range(models)]
        self.groups: dict[int, tuple[int, ...]] = {}
        self.clock = 0
        self.pulls = 0
        self.misses = 0
        self.choices: dict[int, PeriodChoice] = {}
        """The adaptations made, by the round they were made at."""

    def begin_round(self) -> int:
        """Advance the period's clock (restarted by an adaptation) and return its position this round."""
        self.clock = (self.clock + 1) % self.period
        return self.clock

    def observe(self, model: int, client: int, pattern: Iterable[int] | None, arrival: float, departure: float) -> None:
        """One client's report: model ``model`` trained at ``client``, grouped by its first ``pattern``.

        ``pattern`` may be ``None`` for a client already grouped (the server asks for it only once).
        """
        if client not in self.groups:
            if pattern is None:
                raise ValueError(f"client {client} has no group yet and reported no label pattern")
            self.groups[client] = tuple(int(v) for v in pattern)
        self.trails[model].visit(self.groups[client], arrival, departure)

    def end_round(self, gains: Iterable[float]) -> None:
        """Move the trackers: forget towards the mean forget per revisit distance, gain at the clock's position."""
        total, count = np.zeros_like(self.forget), np.zeros_like(self.forget)
        for trail in self.trails:
            for d, lost in trail.revisits:
                total[d - 1] += lost
                count[d - 1] += 1
        moved = total > 0  # as the authors' code: only where the revisits sum to a positive loss
        a = self.rule.smoothing
        self.forget[moved] = (1 - a) * self.forget[moved] + a * total[moved] / count[moved]
        self.gain[self.clock] = (1 - a) * self.gain[self.clock] + a * float(np.mean(list(gains)))

    def pulled(self, server_round: int) -> None:
        """A pull happened: the trails restart, and every ``retain`` pulls (while ``u >= floor``) ``u`` adapts."""
        self.trails = [ModelTrail() for _ in self.trails]
        self.pulls += 1
        if self.pulls % self.rule.retain or self.period < self.rule.floor:
            return
        choice = next_period(self.forget, self.gain, self.period, self.misses, self.rule)
        self.choices[server_round] = choice
        self.period, self.misses, self.clock, self.pulls = choice.period, choice.misses, 0, 0
        if self.period > len(self.gain):
            self.forget = np.pad(self.forget, (0, self.period - len(self.forget)))
            self.gain = np.pad(self.gain, (0, self.period - len(self.gain)))


class SAFA(SeededFedAvg):
    """SAFA as a Flower Message-API strategy (period ``u`` fixed, or adapted by a :class:`PeriodRule`).

    Parameters
    ----------
    active_clients, local, seed
        As in :class:`~repro.federated.strategies.SeededFedAvg`; ``active_clients`` is also ``K``, the number of models.
    lam
        Weight ``lambda`` of the importance penalty (0: none).
    mix
        Share ``a`` of its own state a model keeps at a period's end (0: reset to the global model).
    period
        ``u``: rounds between pulls towards the global model (the starting value when ``adaptive``).
    adaptive
        The rule that adapts ``u`` (``None``: ``u`` stays fixed, and the clients are asked for nothing more).

    Attributes
    ----------
    periods
        The ``u`` in force at each round (a pull falls on rounds that are multiples of it, as in the code).
    tracker
        The :class:`PeriodTracker` (``None`` when ``u`` is fixed).
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0, lam: float = 0.1,
                 mix: float = 0.95, period: int = 15, adaptive: PeriodRule | None = None) -> None:
        super().__init__(active_clients, local, seed=seed)
        if lam < 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        if not 0.0 <= mix <= 1.0:
            raise ValueError(f"mix must lie in [0, 1], got {mix}")
        if period < 1:
            raise ValueError(f"period must be >= 1, got {period}")
        self.lam, self.mix, self.period = lam, mix, period
        self._chain_rng = np.random.default_rng([seed, 0x5AFA])
        self.models: list[dict[str, np.ndarray]] = []
        self.fisher: list[dict[str, np.ndarray]] = []
        self.volume = np.zeros(active_clients, dtype=np.int64)
        self.assignment: dict[int, dict[int, int]] = {}
        self.tracker = None if adaptive is None else PeriodTracker(adaptive, period, active_clients)
        self.periods: dict[int, int] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Sample ``K`` clients and send each one of the models (shuffled), with its importance if ``lam > 0``."""
        comm = self.ensure_comm(arrays)
        if not self.models:
            base = from_arrayrecord(arrays)
            self.models = [{k: v.copy() for k, v in base.items()} for _ in range(self.active_clients)]
            self.fisher = [{k: np.zeros_like(v) for k, v in base.items()} for _ in range(self.active_clients)]
        pids = self.sample(server_round)
        order = [int(k) for k in self._chain_rng.permutation(self.active_clients)]
        self.assignment[server_round] = dict(zip(pids, order))
        cfg = ConfigRecord(dict(config))
        cfg.update({k: v for k, v in self.local.items()})
        cfg["server-round"] = server_round
        cfg["ewc-lambda"] = float(self.lam)
        cfg["want-fisher"] = self.lam > 0
        if self.tracker is not None:
            cfg["want-tracking"] = True
        keys = list(comm.sizes)
        self.round_traffic = (server_round, keys, keys)
        msgs = []
        for pid, k in zip(pids, order):
            send = dict(self.models[k])
            if self.lam > 0:
                send.update({FISHER + n: v for n, v in self.fisher[k].items()})
            c = ConfigRecord(dict(cfg))
            c["model-index"] = k
            if self.tracker is not None:  # a client's group is read once, the first time it is sampled
                c["want-label-pattern"] = pid not in self.tracker.groups
            msgs.append(Message(RecordDict({"arrays": to_arrayrecord(send), "config": c}),
                                dst_node_id=self.node_of[pid], message_type=MessageType.TRAIN))
        return msgs

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Store each trained model, grow its importance and volume, form the global model, pull every ``u`` rounds."""
        replies = ordered_replies(server_round, replies)
        records = []
        for m in replies:
            k = int(metric(m, "model-index"))
            got = from_arrayrecord(m.content["arrays"])
            self.models[k] = {n: v for n, v in got.items() if not n.startswith(FISHER)}
            if self.lam > 0:
                for n, v in got.items():
                    if n.startswith(FISHER):
                        self.fisher[k][n[len(FISHER):]] += v
            self.volume[k] += int(metric(m, "num-examples"))
            records.append((k, m))
        self.periods[server_round] = self.period
        if self.tracker is not None:
            self._track(replies)
        # the global model: Flower's weighted aggregation over the models, in reply order (as FedAvg)
        trained = {k for k, _ in records}
        contents = [RecordDict({"arrays": to_arrayrecord(self.models[k]),
                                "metrics": MetricRecord({"n": int(self.volume[k])})}) for k, _ in records]
        contents += [RecordDict({"arrays": to_arrayrecord(self.models[k]),
                                 "metrics": MetricRecord({"n": int(self.volume[k])})})
                     for k in range(self.active_clients) if k not in trained and self.volume[k] > 0]
        glob = from_arrayrecord(aggregate_arrayrecords(contents, "n"))
        rnd, down, up = self.round_traffic
        assert self.comm is not None
        self.comm.record(rnd, down, up, len(replies))
        if server_round % self.period == 0:
            self._pull(glob)
            if self.tracker is not None:
                self.tracker.pulled(server_round)
                self.period = self.tracker.period
        return to_arrayrecord(glob), MetricRecord({"num-examples": int(sum(
            int(metric(m, "num-examples")) for m in replies))})

    def _track(self, replies: list[Message]) -> None:
        assert self.tracker is not None
        self.tracker.begin_round()
        gains = []
        for m in replies:
            got = metrics_of(m)
            arrival, departure = metric(m, "arrival-accuracy"), metric(m, "departure-accuracy")
            pattern = got["label-pattern"] if "label-pattern" in got else None
            if pattern is not None and not isinstance(pattern, list):
                raise TypeError(f"metric 'label-pattern': expected a list of class ids, got {pattern!r}")
            self.tracker.observe(int(metric(m, "model-index")), partition_of(m),
                                 None if pattern is None else [int(c) for c in pattern], arrival, departure)
            gains.append(departure - arrival)
        self.tracker.end_round(gains)

    def _pull(self, glob: dict[str, np.ndarray]) -> None:
        w = self.volume / max(int(self.volume.sum()), 1)
        f_glob = {n: sum(w[k] * self.fisher[k][n] for k in range(self.active_clients)) for n in glob}
        for k in range(self.active_clients):
            if self.mix == 0.0:
                self.models[k] = {n: v.copy() for n, v in glob.items()}
                self.fisher[k] = {n: np.asarray(v, dtype=glob[n].dtype).copy() for n, v in f_glob.items()}
            else:
                self.models[k] = {n: ((1 - self.mix) * glob[n] + self.mix * self.models[k][n]).astype(glob[n].dtype)
                                  for n in glob}
                self.fisher[k] = {n: ((1 - self.mix) * f_glob[n] + self.mix * self.fisher[k][n]).astype(glob[n].dtype)
                                  for n in glob}
        self.volume[:] = 0


def feddc(active_clients: int, local: dict[str, float | int], seed: int = 0, period: int = 15) -> SAFA:
    """FedDC's daisy chaining with periodic averaging, as SAFA without importance or memory (``lam = a = 0``)."""
    return SAFA(active_clients, local, seed=seed, lam=0.0, mix=0.0, period=period)
