"""The results ledger: verdict rules, summaries and atomic writes."""

from __future__ import annotations

import json

import pytest

from repro import atomic
from repro.registry import VERDICTS, Condition, load_registry
from repro.results import Ledger, summarise

CH = load_registry().get("fedlama")


def test_verdicts_follow_rules():
    claim = CH.claim("acc_gain_vs_fedavg_phitau")  # reproduced: mean - sd >= 1; direction: mean > 0
    assert claim.verdict(1.0) == "reproduced"
    assert claim.verdict(3.0, std=1.5) == "reproduced"
    assert claim.verdict(3.0, std=2.5) == "direction only"  # not consistent across seeds
    assert claim.verdict(0.5) == "direction only"
    assert claim.verdict(0.0) == "not reproduced at this scale"
    lower = CH.claim("acc_drop_vs_fedavg_tau")  # reproduced <= 1, direction <= 3
    assert lower.verdict(-2.0) == "reproduced"
    assert lower.verdict(2.0) == "direction only"
    assert lower.verdict(5.0) == "not reproduced at this scale"


def test_condition_rejects_unknown_operator():
    with pytest.raises(ValueError, match="operator"):
        Condition("=~", 1.0)


def test_summarise():
    assert summarise([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert summarise([4.0]) == (4.0, 0.0)
    with pytest.raises(ValueError):
        summarise([])


def test_ledger_records_and_saves(tmp_path):
    led = Ledger("fedlama", "smoke", tmp_path)
    led.record("acc_gain_vs_fedavg_phitau", [2.0, 2.0])
    with pytest.raises(ValueError, match="not recorded"):
        led.save()
    led.record("comm_reduction_vs_fedavg_tau", [10.0])
    led.record("acc_drop_vs_fedavg_tau", [0.5, 0.7, 0.9])
    data = json.loads(led.save().read_text())
    assert data["claims"]["acc_gain_vs_fedavg_phitau"]["mean"] == 2.0
    assert data["claims"]["acc_gain_vs_fedavg_phitau"]["verdict"] == "reproduced"
    assert all(c["verdict"] in VERDICTS for c in data["claims"].values())
    assert [r["verdict"] for r in led.rows()][1] == "direction only"
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
