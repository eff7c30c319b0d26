"""The book-wide verdict convention (v2), and that no registered rule is unable to fail (or to pass) over its range."""

from __future__ import annotations

import math

import pytest

from repro import verdicts as v
from repro.registry import BAND, Claim, load_registry, parse_registry
from repro.results import Evidence, Ledger

FIVE = (-2.0, -1.0, 0.0, 1.0, 2.0)  # offsets with mean 0 and sd sqrt(2.5)


def _claim(**kw) -> Claim:
    base = dict(id="c", metric="m", paper_value=10.0, paper_text="", unit="", direction="higher",
                range=(-math.inf, math.inf))
    return Claim(**{**base, **kw})


def _seeds(mean: float, sd: float, n: int = 5) -> list[float]:
    """``n`` values with exactly this mean and sample sd."""
    offsets = [i - (n - 1) / 2 for i in range(n)]
    scale = math.sqrt(sum(o * o for o in offsets) / (n - 1))
    return [mean + sd * o / scale for o in offsets]


def _verdict(claim: Claim, values, profile: str = "cpu") -> str:
    return v.judge(claim, values, profile=profile).verdict


def test_interval_is_student_t_on_the_per_seed_values():
    lo, hi = v.confidence_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.7764451051977987 * math.sqrt(2.5) / math.sqrt(5)  # t(0.975, 4) by hand
    assert lo == pytest.approx(3.0 - half) and hi == pytest.approx(3.0 + half)
    plo, phi = v.prediction_interval([1.0, 2.0, 3.0, 4.0, 5.0], 5)
    assert phi - 3.0 == pytest.approx(2.7764451051977987 * math.sqrt(2.5) * math.sqrt(2 / 5))


def test_measured_claim_is_judged_on_the_interval_then_the_band():
    c = _claim()
    assert _verdict(c, _seeds(10.0, 1.0)) == v.REPRODUCED
    assert _verdict(c, _seeds(10.0 * BAND[0], 0.0)) == v.REPRODUCED
    assert _verdict(c, _seeds(10.0 * BAND[1], 0.0)) == v.REPRODUCED
    assert _verdict(c, _seeds(25.0, 1.0)) == v.EXCEEDS
    assert _verdict(c, _seeds(3.0, 1.0)) == v.SMALLER
    # mean - sd > 0 (the old rule's pass) but the 95% interval reaches zero: not reproduced
    assert _verdict(c, _seeds(3.0, 2.5)) == v.NOT_REPRODUCED
    assert _verdict(c, _seeds(-5.0, 0.0)) == v.NOT_REPRODUCED


def test_ignite_like_case_is_not_reproduced():
    """The old rule passed mean 0.88 with sd 0.86 over 3 seeds; its 95% interval includes zero."""
    c = _claim(paper_value=None)
    values = _seeds(0.88, 0.86, n=3)
    assert 0.88 - 0.86 > 0 and v.confidence_interval(values)[0] < 0
    assert _verdict(c, values) == v.NOT_REPRODUCED


def test_lower_direction_and_null_value_mirror_the_rule():
    c = _claim(direction="lower", paper_value=-4.0, null_value=1.0, null_source="the paper's own gap")
    assert _verdict(c, _seeds(-4.0, 0.5)) == v.REPRODUCED
    assert _verdict(c, _seeds(0.0, 0.5)) == v.SMALLER
    assert _verdict(c, _seeds(0.8, 0.5)) == v.NOT_REPRODUCED
    assert _verdict(c, _seeds(-20.0, 0.5)) == v.EXCEEDS


def test_no_paper_number_is_never_reproduced():
    c = _claim(paper_value=None)
    assert _verdict(c, _seeds(50.0, 1.0)) == v.DIRECTION_ONLY
    assert v.verdict_class(v.DIRECTION_ONLY) != "reproduced"


def test_smoke_and_one_seed_are_not_judged():
    c = _claim()
    assert _verdict(c, _seeds(10.0, 1.0), profile="smoke") == v.SMOKE_NOT_JUDGED
    assert _verdict(c, [10.0]) == v.ONE_SEED


def test_deterministic_claims_take_one_value_at_a_named_configuration():
    m = _claim(kind="modelled", deterministic=True, configuration="64 nodes, 32 MiB")
    assert _verdict(m, [10.0]) == v.MODELLED_IN_BAND
    assert _verdict(m, [40.0]) == v.MODELLED_OUTSIDE
    assert _verdict(m, [-1.0]) == v.MODELLED_FAILS
    assert _verdict(_claim(kind="modelled", paper_value=None, deterministic=True, configuration="x"), [3.0]) == \
        v.MODELLED_HOLDS
    with pytest.raises(ValueError, match="record its value once"):
        v.judge(m, [10.0, 10.0, 10.0], profile="cpu")


def test_structural_claims_hold_on_every_seed():
    s = _claim(kind="structural")
    assert _verdict(s, [1.0, 2.0, 3.0]) == v.STRUCTURAL_HOLDS
    assert _verdict(s, [1.0, 2.0, -0.1]) == v.STRUCTURAL_FAILS


def _registry(claims: list[dict], fidelity: list[dict] | None = None) -> object:
    return parse_registry({
        "families": {"fam": "Family"},
        "chapters": [{"id": "x", "title": "X", "family": "fam", "notebook": "n", "bibtex": "b", "claims": claims,
                      "fidelity": fidelity or []}],
    })


def _raw(**kw) -> dict:
    return {"id": "a", "metric": "m", "paper_value": 3.0, "direction": "higher", "range": [-100, 100], **kw}


def test_the_registry_refuses_what_cannot_be_judged():
    with pytest.raises(ValueError, match="paper's sign"):
        _registry([_raw(paper_value=-3.0)])
    with pytest.raises(ValueError, match="precondition"):
        _registry([_raw(precondition="zz")])
    with pytest.raises(ValueError, match="per-claim thresholds"):
        _registry([_raw(reproduced={"op": ">=", "value": 1.0})])
    with pytest.raises(ValueError, match="kind"):
        _registry([_raw(kind="guess")])
    with pytest.raises(ValueError, match="range"):
        _registry([{k: val for k, val in _raw().items() if k != "range"}])
    with pytest.raises(ValueError, match="margin"):  # a margin with neither a source nor a sweep
        _registry([_raw(null_value=2.0, paper_value=5.0)])
    _registry([_raw(null_value=2.0, paper_value=5.0, null_sweep=[0, 1, 2, 4])])
    _registry([_raw(null_value=2.0, paper_value=5.0, null_source="Table 2: the paper's own 2-point gap")])
    with pytest.raises(ValueError, match="configuration"):
        _registry([_raw(kind="modelled", deterministic=True)])
    with pytest.raises(ValueError, match="modelled or structural"):
        _registry([_raw(deterministic=True, configuration="c")])
    with pytest.raises(ValueError, match="reason"):
        _registry([_raw()], fidelity=[{"part": "baseline", "name": "FedProx", "status": "omitted"}])
    with pytest.raises(ValueError, match="by what"):
        _registry([_raw()], fidelity=[{"part": "data", "name": "CIFAR-10", "status": "substituted", "reason": "offline"}])


def test_planted_share_above_minus_half_cannot_fail_and_is_refused():
    """A share in [0, 1] "above -0.5" holds for every value the metric can reach."""
    with pytest.raises(ValueError, match="cannot both hold and fail"):
        _registry([_raw(metric="a share", paper_value=None, null_value=-0.5, range=[0, 1],
                        null_sweep=[-0.5])])
    planted = _claim(paper_value=None, null_value=-0.5, range=(0.0, 1.0))
    assert not _can_fail_and_pass(planted)[0]


def test_fidelity_score_counts_substituted_as_half():
    reg = _registry([_raw()], fidelity=[
        {"part": "method", "name": "m", "status": "implemented"},
        {"part": "data", "name": "d", "status": "substituted", "by": "digits", "reason": "offline"},
        {"part": "baseline", "name": "b", "status": "omitted", "reason": "no code"},
        {"part": "metric", "name": "acc", "status": "implemented"},
    ])
    assert reg.chapters[0].fidelity_score == pytest.approx(2.5 / 4)


def test_named_and_learning_preconditions(monkeypatch, tmp_path):
    reg = _registry([
        {"id": "attack", "metric": "backdoor accuracy above base rate", "paper_value": None, "direction": "higher",
         "kind": "precondition", "range": [-100, 100]},
        {"id": "defence", "metric": "backdoor accuracy removed", "paper_value": 50.0, "direction": "higher",
         "precondition": "attack", "range": [-100, 100]},
        {"id": "gain", "metric": "accuracy gain", "paper_value": 4.0, "direction": "higher", "range": [-100, 100],
         "learning": {"quality": "test accuracy, %", "trivial": "chance: 1 of 10", "trivial_value": 10.0,
                      "margin": 5.0}},
    ])
    monkeypatch.setattr("repro.results.load_registry", lambda: reg)
    led = Ledger("x", "cpu", tmp_path)
    led.record("defence", _seeds(50.0, 1.0))
    assert led.results["defence"].verdict == v.REPRODUCED  # precondition not recorded yet
    led.record("attack", _seeds(0.0, 1.0))  # the attack did not work without defence
    assert led.results["attack"].verdict == v.PRECONDITION_FAILS
    assert led.results["defence"].verdict == v.PRECONDITION_NOT_MET
    led.record_all({"attack": _seeds(60.0, 1.0)})
    assert led.results["defence"].verdict == v.REPRODUCED
    with pytest.raises(ValueError, match="arms"):
        led.record("gain", _seeds(4.0, 0.5))
    at_chance = Evidence(values=_seeds(4.0, 0.5), arms={"ours": _seeds(14.0, 1.0), "fedavg": _seeds(10.0, 1.0)})
    assert led.record("gain", at_chance).verdict == v.PRECONDITION_NOT_MET
    learned = Evidence(values=_seeds(4.0, 0.5), arms={"ours": _seeds(64.0, 1.0), "fedavg": _seeds(60.0, 1.0)})
    assert led.record("gain", learned).verdict == v.REPRODUCED
    smoke = Ledger("x", "smoke", tmp_path)
    assert smoke.record("gain", at_chance).verdict == v.SMOKE_NOT_JUDGED


def test_a_swept_margin_records_where_the_sign_flips(monkeypatch, tmp_path):
    reg = _registry([_raw(paper_value=None, direction="lower", null_value=1.0, null_sweep=[0.0, 1.0, 2.0, 4.0])])
    monkeypatch.setattr("repro.results.load_registry", lambda: reg)
    res = Ledger("x", "cpu", tmp_path).record("a", _seeds(1.5, 0.2))
    assert [s["sign_holds"] for s in res.margin_sweep] == [False, False, True, True]


def _can_fail_and_pass(claim: Claim) -> tuple[bool, bool]:
    """Probe the claim's rule over the range its metric can reach (five seeds, several spreads)."""
    lo, hi = claim.range
    finite_lo = lo if math.isfinite(lo) else min(claim.null_value, claim.paper_value or 0.0, 0.0) - 1e6
    finite_hi = hi if math.isfinite(hi) else max(claim.null_value, claim.paper_value or 0.0, 0.0) + 1e6
    anchors = {finite_lo, finite_hi, claim.null_value, (finite_lo + finite_hi) / 2}
    if claim.paper_value is not None:
        anchors.add(claim.paper_value)
    width = finite_hi - finite_lo
    means = set()
    for a in anchors:
        for d in (0.0, 1e-9 * max(1.0, abs(a)), 1e-3 * width, 0.1 * width):
            means.update(m for m in (a - d, a + d) if finite_lo <= m <= finite_hi)
    seen = set()
    for m in means:
        for sd in (0.0, 1e-3 * width):
            values = _seeds(m, sd)
            if claim.deterministic:
                values = [m]
            if all(lo <= x <= hi for x in values):
                seen.add(_verdict(claim, values))
    return bool(seen & set(v.FAILING)), bool(seen & set(v.HOLDING))


@pytest.mark.parametrize(
    "chapter_claim",
    [(ch, c) for ch in load_registry().chapters for c in ch.claims],
    ids=lambda cc: f"{cc[0].id}/{cc[1].id}",
)
def test_every_registered_rule_can_fail_and_can_pass_within_its_range(chapter_claim):
    _, claim = chapter_claim
    can_fail, can_pass = _can_fail_and_pass(claim)
    assert can_fail, f"no value in {claim.range} makes {claim.id} fail: the rule cannot fail"
    assert can_pass, f"no value in {claim.range} makes {claim.id} pass"
