"""Reference records and ``repro check``: the committed cpu records, and a rerun set against them."""

from __future__ import annotations

import json
import math

import pytest

from repro import atomic
from repro.cli import main
from repro.reference import compare, load_reference, reference_file, rejudged, write_reference
from repro.registry import load_registry
from repro.verdicts import DIRECTION_ONLY, REPRODUCED, prediction_interval

REG = load_registry()
CH = REG.get("fedlama")


def _record(values: dict[str, list[float]], chapter: str = "fedlama") -> dict:
    claims = {}
    for cid, vals in values.items():
        mean = sum(vals) / len(vals)
        claims[cid] = {"values": vals, "mean": mean, "std": 0.0, "n": len(vals), "ci_low": None, "ci_high": None,
                       "verdict": "x"}
    return {"chapter": chapter, "profile": "cpu", "claims": claims, "parameters": {},
            "provenance": {"git_sha": "abc", "hardware": "hw", "env_lock_sha256": "e"},
            "run": {"finished_at": "now", "wall_time_s": 1.0}}


def test_prediction_interval_widens_with_fewer_new_seeds():
    ref = [1.0, 2.0, 3.0, 4.0, 5.0]
    lo1, hi1 = prediction_interval(ref, 1)
    lo5, hi5 = prediction_interval(ref, 5)
    assert lo1 < lo5 < 3.0 < hi5 < hi1
    assert prediction_interval([7.0], 5) == (7.0, 7.0)


def test_compare_flags_a_claim_that_left_the_interval():
    cid = CH.claims[0].id
    ref = _record({cid: [1.0, 2.0, 3.0, 4.0, 5.0]})
    assert all(c.inside for c in compare(ref, _record({cid: [2.5, 3.0, 3.5, 3.0, 3.0]})))
    far = compare(ref, _record({cid: [40.0, 41.0, 42.0, 43.0, 44.0]}))
    assert not far[0].inside and "OUTSIDE" in far[0].line()
    one = _record({cid: [7.0]})  # a deterministic value comes back unchanged or fails
    assert compare(one, _record({cid: [7.0]}))[0].inside
    assert not compare(one, _record({cid: [7.0 + 1e-6]}))[0].inside
    with pytest.raises(ValueError, match="no claim"):
        compare(ref, _record({}))


def test_write_and_check_a_reference(out_root, tmp_path, monkeypatch):
    values = {c.id: [1.0, 1.5, 2.0, 2.5, 3.0] for c in CH.claims}
    record = _record(values)
    atomic.write_json(out_root / "results" / "fedlama" / "cpu" / "record.json", record)
    atomic.write_json(out_root / "results" / "fedlama" / "cpu" / "run.json", record["run"])
    monkeypatch.setattr("repro.reference.repo_root", lambda: tmp_path)
    path = write_reference("fedlama")
    assert path == tmp_path / "reference" / "fedlama.json"
    ref = json.loads(path.read_text())
    assert ref["git_sha"] == "abc" and ref["claims"][CH.claims[0].id]["values"] == values[CH.claims[0].id]
    monkeypatch.setattr("repro.cli.load_reference", lambda cid: load_reference(cid, tmp_path))
    assert main(["check", "fedlama", "--no-run"]) == 0
    moved = _record({c.id: [v + 100.0 for v in values[c.id]] for c in CH.claims})
    atomic.write_json(out_root / "results" / "fedlama" / "cpu" / "record.json", moved)
    assert main(["check", "fedlama", "--no-run"]) == 1
    assert main(["check", "fedlama", "--profile", "smoke", "--no-run"]) == 2


@pytest.mark.parametrize("chapter", REG.chapters, ids=lambda c: c.id)
def test_every_chapter_has_a_reference_record_that_meets_the_convention(chapter):
    ref = load_reference(chapter.id)
    assert ref is not None, f"no {reference_file(chapter.id)}: run the chapter at cpu, then `repro reference {chapter.id}`"
    assert ref["profile"] == "cpu" and set(ref["claims"]) == {c.id for c in chapter.claims}
    assert not ref["git_sha"].endswith("-dirty"), "a reference comes from a committed tree"
    again = rejudged(chapter, ref)
    for claim in chapter.claims:
        got = ref["claims"][claim.id]
        assert all(math.isfinite(v) for v in got["values"])
        if claim.kind == "measured":
            assert got["n"] >= 5, f"{claim.id}: {got['n']} seeds; the evidence needs at least five"
        if claim.deterministic:
            assert got["n"] == 1
        if claim.paper_value is None:
            assert got["verdict"] != REPRODUCED
        # the stored verdict is the current rule's (or a precondition's, applied on top)
        assert got["verdict"] in (again[claim.id], "precondition not met"), (
            f"{claim.id}: stored {got['verdict']!r}, the registry now says {again[claim.id]!r}: "
            f"rerun `repro reference {chapter.id}` after the chapter's cpu run")
        if again[claim.id] == DIRECTION_ONLY:
            assert claim.paper_value is None


@pytest.mark.parametrize("chapter", REG.chapters, ids=lambda c: c.id)
def test_no_judged_claim_repeats_another_claims_values(chapter):
    """A baseline that degenerates into another proves nothing: no two judged claims share their per-seed values.

    Two claims whose values agree to 1e-9 score one comparison twice (feddct's SplitFed was FedAvg-large;
    component-embedded's one-thread-per-component design was the sequential one on pipeline models).
    Exact-agreement checks (all zeros) may coincide.
    """
    ref = load_reference(chapter.id)
    assert ref is not None
    seen: dict[tuple[float, ...], str] = {}
    for claim in chapter.claims:
        values = tuple(round(v, 9) for v in ref["claims"][claim.id]["values"])
        if len(values) < 2 or not any(values):
            continue
        other = seen.setdefault(values, claim.id)
        judged = {claim.kind, chapter.claim(other).kind} - {"structural", "precondition"}
        assert other == claim.id or not judged, f"{claim.id} repeats {other}'s values {values}"
