"""The one failed-reply guard: every strategy's aggregation refuses a failed client and orders the rest."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
from flwr.app import MetricRecord

from repro.federated.replies import ClientFailed, ordered_replies


def _reply(node: int, partition: int, reason: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(has_error=lambda: reason is not None, metadata=SimpleNamespace(src_node_id=node),
                           error=SimpleNamespace(reason=reason),
                           content={"metrics": MetricRecord({"partition-id": partition})})


def test_ordered_replies_sorts_by_partition_and_names_the_failed_node():
    got = ordered_replies(3, [_reply(7, 2), _reply(5, 0), _reply(6, 1)])
    assert [r.metadata.src_node_id for r in got] == [5, 6, 7]
    with pytest.raises(ClientFailed, match="round 3: client on node 6 failed: out of memory"):
        ordered_replies(3, [_reply(5, 0), _reply(6, 1, "out of memory")])


def test_no_strategy_keeps_its_own_failed_reply_check():
    """``has_error()`` is read in the guard module only (and where a strategy skips, not refuses, a reply)."""
    pkg = Path(__file__).resolve().parents[2] / "lib" / "repro" / "federated"
    copies = []
    for path in sorted(pkg.rglob("*.py")):
        if path.name == "replies.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "errors"
                    and any(isinstance(s, ast.Raise) for s in node.body)):
                copies.append(path.name)
    assert not copies, f"failed-reply guards copied outside repro.federated.replies: {copies}"
