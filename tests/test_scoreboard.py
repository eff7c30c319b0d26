"""The scoreboard: counts per verdict class and the two figures, generated from ledger files."""

from __future__ import annotations

from repro.atomic import write_json
from repro.book import class_counts, ours_vs_paper_svg, scoreboard_markdown, scored_claims
from repro.registry import Claim, Registry, parse_registry
from repro.verdicts import VERDICTS, judge, verdict_class


def _registry() -> Registry:
    claims = [
        {"id": "gain", "metric": "gain", "paper_value": 10.0, "direction": "higher", "range": [-100, 100]},
        {"id": "diameter", "metric": "diameter below a ring's", "paper_value": 3.0, "direction": "higher",
         "kind": "structural", "range": [-100, 100]},
        {"id": "energy", "metric": "energy saved", "paper_value": 20.0, "direction": "higher", "kind": "modelled",
         "range": [-100, 100]},
    ]
    return parse_registry({"families": {"fam": "A family", "other": "Another"}, "chapters": [
        {"id": "one", "title": "One", "family": "fam", "notebook": "n", "bibtex": "b", "claims": claims},
        {"id": "two", "title": "Two", "family": "other", "notebook": "n", "bibtex": "b", "claims": claims[:1]},
    ]})


def _publish(reg: Registry, out_root, chapter_id: str, values: dict[str, float]) -> None:
    ch = reg.get(chapter_id)
    claims = {}
    for cid, mean in values.items():
        c: Claim = ch.claim(cid)
        values = [mean - 0.1, mean, mean + 0.1, mean - 0.05, mean + 0.05]
        claims[cid] = {"mean": mean, "std": 0.08, "n": 5, "values": values, "verdict": judge(c, values, profile="cpu").verdict}
    write_json(out_root / "results" / chapter_id / "cpu" / "record.json", {"claims": claims, "parameters": {}})


def test_every_verdict_has_a_class():
    assert {verdict_class(v) for v in VERDICTS} >= {"reproduced", "structural", "modelled"}


def test_counts_keep_structural_and_modelled_apart(out_root):
    reg = _registry()
    _publish(reg, out_root, "one", {"gain": 9.0, "diameter": 3.0, "energy": 50.0})
    _publish(reg, out_root, "two", {"gain": 40.0})
    counts = class_counts(reg, "cpu")
    assert counts["reproduced"] == 1 and counts["exceeds the paper"] == 1
    assert counts["structural"] == 1 and counts["modelled"] == 1 and counts["not run"] == 0
    page = scoreboard_markdown(reg, "cpu")
    assert "**1 of 4 counted claims are reproduced within the band**" in page
    assert page.index("exceeds the paper: 1") < page.index("structural: 1") < page.index("modelled: 1")


def test_ours_against_paper_links_each_point_to_its_chapter(out_root):
    reg = _registry()
    _publish(reg, out_root, "one", {"gain": 9.0, "diameter": 3.0, "energy": 50.0})
    _publish(reg, out_root, "two", {"gain": -1.0})  # opposite sign: cannot sit on log axes
    svg = ours_vs_paper_svg(scored_claims(reg, "cpu"))
    assert svg.count('xlink:href="chapters/fam/one.html"') == 3
    assert "chapters/other/two.html" not in svg and "1 with our effect of the opposite sign not shown" in svg
