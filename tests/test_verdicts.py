"""The book-wide verdict convention, and that no registered rule is unable to fail (or to pass)."""

from __future__ import annotations

import itertools

import pytest

from repro.registry import (
    BAND,
    MEASURED_VERDICTS,
    MODELLED_VERDICTS,
    PRECONDITION_NOT_MET,
    STRUCTURAL_VERDICTS,
    Claim,
    load_registry,
    parse_registry,
)
from repro.results import Ledger

PASSING = {MEASURED_VERDICTS[0], STRUCTURAL_VERDICTS[0], MODELLED_VERDICTS[0]}
FAILING = {MEASURED_VERDICTS[3], STRUCTURAL_VERDICTS[1], MODELLED_VERDICTS[1]}


def _claim(**kw) -> Claim:
    base = dict(id="c", metric="m", paper_value=10.0, paper_text="", unit="", direction="higher")
    return Claim(**{**base, **kw})


def test_measured_claim_with_paper_number_uses_the_band():
    c = _claim()
    assert c.verdict(10.0, 1.0) == "reproduced"
    assert c.verdict(10.0 * BAND[0], 0.0) == "reproduced"
    assert c.verdict(10.0 * BAND[1], 0.0) == "reproduced"
    assert c.verdict(25.0, 1.0) == "exceeds the paper"
    assert c.verdict(3.0, 1.0) == "direction only"
    assert c.verdict(3.0, 3.5) == "not reproduced at this scale"  # mean - sd below zero
    assert c.verdict(-5.0, 0.0) == "not reproduced at this scale"


def test_lower_direction_and_null_value_mirror_the_rule():
    c = _claim(direction="lower", paper_value=-4.0, null_value=1.0)  # a drop of 5 below the margin 1
    assert c.verdict(-4.0, 0.5) == "reproduced"
    assert c.verdict(0.0, 0.5) == "direction only"
    assert c.verdict(0.8, 0.5) == "not reproduced at this scale"
    assert c.verdict(-20.0, 0.5) == "exceeds the paper"


def test_qualitative_claim_needs_only_the_sign():
    c = _claim(paper_value=None, direction="lower", null_value=1.0)
    assert c.verdict(0.2, 0.5) == "reproduced"
    assert c.verdict(0.9, 0.5) == "not reproduced at this scale"


def test_structural_and_modelled_are_never_reproductions():
    s = _claim(kind="structural")
    m = _claim(kind="modelled")
    assert s.verdict(10.0) == "structural check" and s.verdict(-1.0) == "structural check failed"
    assert m.verdict(1000.0) == "modelled" and m.verdict(-1.0) == "modelled, does not hold"


def _registry(claims: list[dict]) -> object:
    return parse_registry({
        "families": {"fam": "Family"},
        "chapters": [{"id": "x", "title": "X", "family": "fam", "notebook": "n", "bibtex": "b", "claims": claims}],
    })


def test_paper_value_on_the_wrong_side_is_refused():
    with pytest.raises(ValueError, match="paper's sign"):
        _registry([{"id": "a", "metric": "m", "paper_value": -3.0, "direction": "higher"}])
    with pytest.raises(ValueError, match="precondition"):
        _registry([{"id": "a", "metric": "m", "paper_value": 3.0, "direction": "higher", "precondition": "zz"}])
    with pytest.raises(ValueError, match="per-claim thresholds"):
        _registry([{"id": "a", "metric": "m", "paper_value": 3.0, "direction": "higher",
                    "reproduced": {"op": ">=", "value": 1.0}, "direction_only": {"op": ">", "value": 0.0}}])
    with pytest.raises(ValueError, match="kind"):
        _registry([{"id": "a", "metric": "m", "paper_value": 3.0, "direction": "higher", "kind": "guess"}])


def test_precondition_not_met(monkeypatch, tmp_path):
    reg = _registry([
        {"id": "attack", "metric": "backdoor accuracy above base rate", "paper_value": None, "null_value": 30.0,
         "direction": "higher"},
        {"id": "defence", "metric": "backdoor accuracy removed", "paper_value": 50.0, "direction": "higher",
         "precondition": "attack"},
    ])
    monkeypatch.setattr("repro.results.load_registry", lambda: reg)
    led = Ledger("x", "smoke", tmp_path)
    led.record("defence", [50.0, 52.0])
    assert led.results["defence"].verdict == "reproduced"  # precondition not recorded yet
    led.record("attack", [10.0, 12.0])  # the attack did not work without defence
    assert led.results["defence"].verdict == PRECONDITION_NOT_MET
    led.record_all({"attack": [60.0, 70.0]})
    assert led.results["defence"].verdict == "reproduced"


def _probe_values(claim: Claim) -> list[tuple[float, float]]:
    anchors = [claim.null_value, 0.0, 1.0, -1.0]
    if claim.paper_value is not None:
        anchors.append(claim.paper_value)
    means = set()
    for a in anchors:
        for d in (0.0, 1e-3, 1.0, 10.0, 1e3, 1e6):
            means.update({a - d, a + d, a * 0.5, a * 1.5})
    return list(itertools.product(sorted(means), (0.0, 0.1, 1.0)))


@pytest.mark.parametrize(
    "chapter_claim",
    [(ch, c) for ch in load_registry().chapters for c in ch.claims],
    ids=lambda cc: f"{cc[0].id}/{cc[1].id}",
)
def test_every_registered_rule_can_fail_and_can_pass(chapter_claim):
    _, claim = chapter_claim
    seen = {claim.verdict(m, s) for m, s in _probe_values(claim)}
    assert seen & FAILING, f"no value of the metric makes {claim.id} fail: the rule cannot fail"
    assert seen & PASSING, f"no value of the metric makes {claim.id} pass"
