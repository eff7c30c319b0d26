"""All-to-many kernels of the two-phase exchange, as round tables and as shared-IR schedules.

A kernel decides in which *round* each sender sends its pieces to each
aggregator.  Within a round every rank posts all its receives and sends and
waits for all of them (one step of :mod:`repro.hpc.ir`), so a
round's message count per rank is the number of outstanding requests.

A :class:`RoundTable` holds ``round[s, a]`` for every sender ``s`` and
aggregator (domain) ``a``; ``-1`` means no message (nothing to send, or the
sender is the aggregator itself: that data is already local).  Kernels
(after Kang et al., SC'20, and the authors' ``mpi_test.c``):

``unordered``
    ROMIO's default: every message in one round (``P x A`` requests at once).
``pairwise``
    ``P - 1`` rounds; in round ``i`` rank ``r`` sends to ``r + i`` and
    receives from ``r - i`` (mod ``P``).
``scattered(W)``
    MPICH's throttled exchange: the same distances as pairwise, ``W`` per round,
    so every rank has at most ``W`` sends and ``W`` receives outstanding.
``alltoallw``
    One ``MPI_Alltoallw`` call with per-rank counts and displacements (the
    authors' ``mpi_test.c`` methods 5 and 8).  MPICH implements it by posting
    every ``Isend``/``Irecv`` at once, so its round table (and its cost in the
    models) is the unordered kernel's; on a real MPI the library runs it.
``balanced(W)``
    Generalised spread-out: aggregator ``j`` starts at sender ``floor(j P / A)``
    and walks the senders ``W`` per round, so every aggregator receives from
    at most ``W`` senders per round and, when ``W <= floor(P / A)``, every
    sender has at most one target per round (no hot spot).

:func:`to_schedule` writes a table as a :class:`repro.hpc.ir.Schedule`
(block ``s * A + a`` holds the bytes from ``s`` to aggregator ``a``), which the
shared reference, mpi4py and SimGrid executors run.  :func:`endpoint_model`
costs a table under a per-round endpoint model with an MPI queue-search term.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.hpc.ir import Recv, Schedule, Send, Step

KERNELS = ("unordered", "pairwise", "scattered", "balanced", "alltoallw")
#: ROMIO's default kernel, in text form.
UNORDERED_TEXT = "unordered"
WINDOWED = ("scattered", "balanced")


@dataclass(frozen=True, kw_only=True)
class KernelSpec:
    """A kernel name and its window (``None`` for unwindowed kernels)."""

    name: str
    window: int | None = None

    def __post_init__(self) -> None:
        if self.name not in KERNELS:
            raise ValueError(f"unknown kernel {self.name!r}; known: {KERNELS}")
        if (self.name in WINDOWED) != (self.window is not None):
            raise ValueError(f"kernel {self.name!r} {'needs' if self.name in WINDOWED else 'takes no'} a window")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")

    @classmethod
    def parse(cls, text: str) -> "KernelSpec":
        """Parse ``"unordered"``, ``"pairwise"``, ``"scattered:8"`` or ``"balanced:4"``."""
        name, _, win = text.partition(":")
        return cls(name=name, window=int(win) if win else None)

    @property
    def label(self) -> str:
        """``name`` or ``name(W)``."""
        return self.name if self.window is None else f"{self.name}({self.window})"

    def __str__(self) -> str:
        return self.name if self.window is None else f"{self.name}:{self.window}"


@dataclass(frozen=True, kw_only=True)
class RoundTable:
    """Round of every (sender, aggregator) message; ``-1`` for no message.

    Attributes
    ----------
    kernel:
        The kernel that built it.
    aggregators:
        Rank of each aggregator.
    rounds:
        ``int64`` array ``p x A``; rounds are numbered ``0 .. num_rounds - 1``
        without gaps.
    """

    kernel: KernelSpec
    aggregators: tuple[int, ...]
    rounds: np.ndarray

    @property
    def p(self) -> int:
        """Number of ranks."""
        return int(self.rounds.shape[0])

    @property
    def num_rounds(self) -> int:
        """Number of rounds with at least one message."""
        return int(self.rounds.max(initial=-1)) + 1

    @property
    def busiest_round(self) -> int:
        """Messages of the round that has the most: the flows one round puts in flight."""
        return int(np.bincount(self.rounds[self.rounds >= 0]).max(initial=0))

    def outstanding(self) -> tuple[np.ndarray, np.ndarray]:
        """Posted sends and receives per rank per round, each ``num_rounds x p``."""
        R, p = self.num_rounds, self.p
        s_idx, a_idx = np.nonzero(self.rounds >= 0)
        t = self.rounds[s_idx, a_idx]
        sends = np.zeros((R, p), dtype=np.int64)
        recvs = np.zeros((R, p), dtype=np.int64)
        np.add.at(sends, (t, s_idx), 1)
        np.add.at(recvs, (t, np.asarray(self.aggregators)[a_idx]), 1)
        return sends, recvs


def _distance(p: int, aggregators: np.ndarray) -> np.ndarray:
    """``(agg - s) mod p`` for every sender ``s`` (rows) and aggregator (columns)."""
    return (aggregators[None, :] - np.arange(p)[:, None]) % p


def raw_rounds(spec: KernelSpec, p: int, aggregators: np.ndarray) -> np.ndarray:
    """The round of every (sender, aggregator) pair under ``spec``, before empty messages and rounds are dropped."""
    A = aggregators.size
    if spec.name in ("unordered", "alltoallw"):  # MPICH's Alltoallw posts every message at once
        return np.zeros((p, A), dtype=np.int64)
    if spec.name == "pairwise":
        return _distance(p, aggregators) - 1
    window = spec.window or 1  # KernelSpec guarantees a window for the windowed kernels
    if spec.name == "scattered":
        return (_distance(p, aggregators) - 1) // window
    # balanced: aggregator j walks the senders from its own start, W per round
    starts = np.arange(A, dtype=np.int64) * p // A
    rel = (np.arange(p)[:, None] - starts[None, :]) % p
    return rel // window


def round_table(spec: KernelSpec | str, counts: np.ndarray, aggregators: tuple[int, ...] | list[int]) -> RoundTable:
    """Schedule the messages of a ``p x A`` byte-count matrix with a kernel.

    Parameters
    ----------
    spec:
        The kernel (or its text form, see :meth:`KernelSpec.parse`).
    counts:
        ``counts[s, a]`` bytes from sender ``s`` to aggregator ``a``.
    aggregators:
        Rank of each aggregator (distinct).

    Returns
    -------
    RoundTable
        Messages only where ``counts > 0`` and the sender is not the
        aggregator; rounds without any message are removed.
    """
    spec = KernelSpec.parse(spec) if isinstance(spec, str) else spec
    agg = np.asarray(aggregators, dtype=np.int64)
    counts = np.asarray(counts)
    p = counts.shape[0]
    if counts.shape != (p, agg.size) or len(set(agg.tolist())) != agg.size:
        raise ValueError("counts must be p x A and aggregators distinct")
    rounds = raw_rounds(spec, p, agg)
    live = (counts > 0) & (np.arange(p)[:, None] != agg[None, :])
    rounds = np.where(live, rounds, -1)
    used = np.unique(rounds[rounds >= 0])
    remap = np.full(int(rounds.max(initial=-1)) + 2, -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    return RoundTable(kernel=spec, aggregators=tuple(int(a) for a in agg), rounds=remap[rounds])


def to_schedule(table: RoundTable, counts: np.ndarray) -> Schedule:
    """The table as a shared-IR schedule that moves the bytes of ``counts``.

    Every rank's work buffer holds one block per (sender, aggregator) pair,
    block ``s * A + a`` of ``counts[s, a]`` bytes (the IR cuts every rank's
    buffer the same way); input and output are the whole buffer.  Rank ``s``
    fills its blocks ``s * A + a``; after the schedule, aggregator ``a``'s
    rank holds every block ``s * A + a``.
    """
    p, A = table.rounds.shape
    counts = np.asarray(counts, dtype=np.int64)
    blocks = tuple(int(c) for c in counts.ravel())
    steps = []
    by_round: list[list[tuple[int, int]]] = [[] for _ in range(table.num_rounds)]
    for s, a in zip(*np.nonzero(table.rounds >= 0)):
        by_round[int(table.rounds[s, a])].append((int(s), int(a)))
    for t, pairs in enumerate(by_round):
        sends: dict[int, list[Send]] = {}
        recvs: dict[int, list[Recv]] = {}
        for s, a in sorted(pairs):
            sends.setdefault(s, []).append(Send(peer=table.aggregators[a], blocks=(s * A + a,)))
            recvs.setdefault(table.aggregators[a], []).append(Recv(peer=s, blocks=(s * A + a,)))
        steps.append(tuple(Step(rank=r, index=t, sends=tuple(sends.get(r, ())), recvs=tuple(recvs.get(r, ())))
                           for r in range(p)))
    everything = tuple(range(len(blocks)))
    return Schedule(name=f"two-phase exchange, {table.kernel.label}", kind="all-to-many", p=p,
                    n=int(counts.sum()), block_lengths=blocks, input_blocks=everything,
                    output_blocks=everything, steps=tuple(steps),
                    params={"kernel": table.kernel.label, "aggregators": table.aggregators})


@dataclass(frozen=True, kw_only=True)
class EndpointModel:
    """Constants of the per-round endpoint cost model (all in seconds or bytes/s).

    A round costs its slowest rank; a rank's time in a round is the larger of
    its send side ``alpha + out_bytes / bandwidth`` and its receive side
    ``alpha + in_bytes / bandwidth + n * (o0 + o1 * n)``, where ``n`` is the
    number of receives it has posted in the round: each arriving message
    searches a posted-receive queue of length ``n`` (MPI's matching cost),
    which is the contention term the paper attributes to all-at-once kernels.

    Attributes
    ----------
    alpha:
        Start-up latency per round (s).
    bandwidth:
        Injection and ejection bandwidth per rank (bytes/s).
    o0:
        Fixed receive overhead per message (s).
    o1:
        Queue-search cost per message and per posted receive (s).
    """

    alpha: float
    bandwidth: float
    o0: float
    o1: float


@dataclass(frozen=True, kw_only=True)
class RoundLoads:
    """What the endpoint model needs of a kernel's rounds, computed once per table.

    Attributes
    ----------
    max_out_bytes:
        Per round, the most bytes any one rank sends.
    in_bytes, n_recv:
        Per round and aggregator (``rounds x A``), bytes received and receives posted.
    """

    max_out_bytes: np.ndarray
    in_bytes: np.ndarray
    n_recv: np.ndarray

    def time(self, model: EndpointModel) -> float:
        """Exchange time under ``model`` (s): the sum over rounds of the slowest endpoint."""
        if self.max_out_bytes.size == 0:
            return 0.0
        send_side = np.where(self.max_out_bytes > 0, model.alpha + self.max_out_bytes / model.bandwidth, 0.0)
        n = self.n_recv
        recv = np.where(n > 0, model.alpha + self.in_bytes / model.bandwidth + n * (model.o0 + model.o1 * n), 0.0)
        return float(np.maximum(send_side, recv.max(axis=1)).sum())


def round_loads(table: RoundTable, counts: np.ndarray) -> RoundLoads:
    """Per-round loads of ``table`` moving ``counts`` (sparse over messages, so 16k ranks fit)."""
    R, p = table.num_rounds, table.p
    A = len(table.aggregators)
    s_idx, a_idx = np.nonzero(table.rounds >= 0)
    t = table.rounds[s_idx, a_idx]
    nbytes = np.asarray(counts, dtype=np.float64)[s_idx, a_idx]
    keys, inverse = np.unique(t * p + s_idx, return_inverse=True)
    per_sender = np.bincount(inverse, weights=nbytes)
    max_out = np.zeros(R)
    np.maximum.at(max_out, keys // p, per_sender)
    in_bytes = np.zeros((R, A))
    n_recv = np.zeros((R, A))
    np.add.at(in_bytes, (t, a_idx), nbytes)
    np.add.at(n_recv, (t, a_idx), 1.0)
    return RoundLoads(max_out_bytes=max_out, in_bytes=in_bytes, n_recv=n_recv)


def endpoint_model(table: RoundTable, counts: np.ndarray, model: EndpointModel) -> float:
    """Exchange time of ``table`` moving ``counts`` under ``model`` (seconds)."""
    return round_loads(table, counts).time(model)

