"""The results ledger: verdict rules, summaries and atomic writes."""

from __future__ import annotations

import json

import pytest

from repro import atomic
from repro.registry import load_registry
from repro.results import Evidence, Ledger, summarise
from repro.verdicts import SMOKE_NOT_JUDGED, VERDICTS

CH = load_registry().get("fedlama")


def test_summarise():
    assert summarise([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert summarise([4.0]) == (4.0, 0.0)
    with pytest.raises(ValueError):
        summarise([])


def _evidence(claim, values: list[float]) -> Evidence | list[float]:
    """``values``, with arms well above any trivial level where the claim has a learning precondition."""
    return Evidence(values=values, arms={"a": [90.0] * len(values), "b": [91.0] * len(values)}, trivial=10.0) \
        if claim.learning else values


def test_ledger_records_and_saves(tmp_path):
    led = Ledger("fedlama", "smoke", tmp_path)
    first, *rest = CH.claims
    led.record(first.id, _evidence(first, [2.0, 2.0]))
    with pytest.raises(ValueError, match="not recorded"):
        led.save()
    led.record_all({c.id: _evidence(c, [0.5, 0.7, 0.9]) for c in rest})
    data = json.loads(led.save().read_text())
    assert data["claims"][first.id]["mean"] == 2.0
    assert data["claims"][first.id]["verdict"] == SMOKE_NOT_JUDGED
    assert all(c["verdict"] == SMOKE_NOT_JUDGED and c["verdict"] in VERDICTS for c in data["claims"].values())
    assert [r["verdict"] for r in led.rows()] == [data["claims"][c.id]["verdict"] for c in CH.claims]
    assert list(tmp_path.iterdir()) == [tmp_path / "claims.json"]


def test_ledger_rejects_unknown_claim_and_nan(tmp_path):
    led = Ledger("fedlama", "smoke", tmp_path)
    with pytest.raises(KeyError, match="no claim"):
        led.record("made_up", [1.0])
    with pytest.raises(ValueError, match="non-finite"):
        led.record("acc_gain_vs_fedavg_phitau", [float("nan")])


def test_atomic_write_keeps_old_content_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    atomic.write_json(target, {"v": 1})

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        atomic.write_json(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_replace_dir_swaps_whole_folder(tmp_path):
    dst = tmp_path / "figs"
    dst.mkdir()
    (dst / "old.png").write_text("old")
    src = tmp_path / "new"
    src.mkdir()
    (src / "new.png").write_text("new")
    atomic.replace_dir(src, dst)
    assert [p.name for p in dst.iterdir()] == ["new.png"]
    assert not src.exists()
