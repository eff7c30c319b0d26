"""The one guard against failed client replies, used by the grid and by every strategy.

Flower's strategies log a failed client and aggregate the others, so a crash
on one node would quietly change a result.  :func:`raise_on_failed` stops the
run instead, naming the node and its error; :func:`ordered_replies` applies it
and puts the replies in partition order, the order in which every strategy of
the book aggregates (so results do not depend on arrival order).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from flwr.app import Message, MetricRecord


class ClientFailed(RuntimeError):
    """A client's reply carried an error, or never came; the run stops instead of averaging fewer clients."""


def raise_on_failed(replies: Iterable[Message], where: str = "") -> list[Message]:
    """Return ``replies`` as a list; raise :class:`ClientFailed` naming the node if one carries an error.

    Parameters
    ----------
    replies
        The replies of one round (or one query).
    where
        Prefix of the error message, such as ``"round 3: "``.
    """
    out = list(replies)
    for r in out:
        if r.has_error():
            raise ClientFailed(f"{where}client on node {r.metadata.src_node_id} failed: {r.error.reason}")
    return out


def number(record: Mapping[str, object], key: str) -> float:
    """``record[key]`` as a float, checked to be a number (a metric or config record's value may be a list or text).

    Raises
    ------
    KeyError
        If ``record`` lacks ``key``.
    TypeError
        If the value is not an int or a float.
    """
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{key!r}: expected a number, got {type(value).__name__} {value!r}")
    return float(value)


def metrics_of(reply: Message) -> MetricRecord:
    """The reply's metric record (``content["metrics"]``), checked to be one."""
    metrics = reply.content["metrics"]
    if not isinstance(metrics, MetricRecord):
        raise TypeError(f"a reply's 'metrics' must be a MetricRecord, got {type(metrics).__name__}")
    return metrics


def metric(reply: Message, key: str) -> float:
    """One number the client reports in its reply's metrics."""
    return number(metrics_of(reply), key)


def partition_of(reply: Message) -> int:
    """The partition id a client reports in its reply's metrics."""
    return int(metric(reply, "partition-id"))


def stats_of(replies: Iterable[Message]) -> list[dict[str, float]]:
    """Each reply's numeric metrics as a plain dict (what aggregation-weight policies read)."""
    return [{k: float(v) for k, v in metrics_of(r).items() if isinstance(v, (int, float))} for r in replies]


def ordered_replies(server_round: int, replies: Iterable[Message]) -> list[Message]:
    """The round's replies, checked by :func:`raise_on_failed`, sorted by partition id."""
    return sorted(raise_on_failed(replies, f"round {server_round}: "), key=partition_of)
