"""Templated Vietnamese PET/CT reports, their field extractor and text metrics.

Stands in for ViMed-PET's clinical reports.  A report is generated from a
case's structured findings with a fixed phrase lexicon (diacritics in Unicode
NFC form), for example::

    Nốt kích thước 25 mm ở thùy trên phổi phải, tăng chuyển hóa FDG. Kết
    luận: tổn thương tăng chuyển hóa FDG, nghi ác tính.

:func:`extract` is the rule-based extractor (a regular expression over the
lexicon) that replaces the paper's LLM extractor: it reads back lesion type,
position (site and lobe), size and FDG uptake, and inverts :func:`render`
exactly.  :func:`field_accuracy` scores generated reports field by field
against the true findings.  BLEU-4 comes from sacrebleu and ROUGE-L from
rouge-score with a whitespace tokenizer (rouge-score's default keeps only
``[a-z0-9]`` and would shred Vietnamese words).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import numpy as np
import sacrebleu
from rouge_score import rouge_scorer

from repro.medical.phantom import KINDS, LUNG_SITES, SITES, Findings

KIND_WORDS = {"nodule": "Nốt", "mass": "Khối"}
SITE_WORDS = {
    "right_lung": "phổi phải",
    "left_lung": "phổi trái",
    "liver": "gan",
    "bone": "cột sống",
    "mediastinal_node": "hạch trung thất",
}
LOBE_WORDS = {"upper": "trên", "lower": "dưới"}
FDG_WORDS = {True: "tăng chuyển hóa FDG", False: "không tăng chuyển hóa FDG"}
NORMAL = "Không phát hiện tổn thương khu trú. Kết luận: chưa thấy bất thường trên PET/CT."
CONCLUSION_AVID = "Kết luận: tổn thương tăng chuyển hóa FDG, nghi ác tính."
CONCLUSION_QUIET = "Kết luận: tổn thương không tăng chuyển hóa FDG."


def nfc(text: str) -> str:
    """Unicode NFC form (composed diacritics), the one form reports are stored and compared in."""
    return unicodedata.normalize("NFC", text)


@dataclass(frozen=True, order=True, kw_only=True)
class ReportedLesion:
    """The fields a report states about one lesion (what the extractor reads back).

    Attributes
    ----------
    site, lobe, kind, size_mm, fdg_avid
        As in :class:`repro.medical.phantom.Lesion`, without the voxel position.
    """

    site: str
    lobe: str
    kind: str
    size_mm: int
    fdg_avid: bool

    @property
    def position(self) -> tuple[str, str]:
        """The position field: site and lobe."""
        return (self.site, self.lobe)


def reported_fields(findings: Findings) -> list[ReportedLesion]:
    """The report-level fields of a case's lesions, in the report's (canonical) order."""
    return sorted(
        (
            ReportedLesion(site=les.site, lobe=les.lobe, kind=les.kind, size_mm=les.size_mm, fdg_avid=les.fdg_avid)
            for les in findings.lesions
        ),
        key=lambda r: (SITES.index(r.site), r.lobe, KINDS.index(r.kind), r.size_mm, r.fdg_avid),
    )


def _sentence(r: ReportedLesion) -> str:
    where = f"thùy {LOBE_WORDS[r.lobe]} {SITE_WORDS[r.site]}" if r.site in LUNG_SITES else SITE_WORDS[r.site]
    return f"{KIND_WORDS[r.kind]} kích thước {r.size_mm} mm ở {where}, {FDG_WORDS[r.fdg_avid]}."


def render(findings: Findings) -> str:
    """Write the Vietnamese report of a case (NFC).

    Parameters
    ----------
    findings
        The case's structured findings.

    Returns
    -------
    str
        One sentence per lesion in canonical order, then a conclusion (a fixed
        sentence when there is no lesion).
    """
    fields = reported_fields(findings)
    if not fields:
        return nfc(NORMAL)
    conclusion = CONCLUSION_AVID if any(f.fdg_avid for f in fields) else CONCLUSION_QUIET
    return nfc(" ".join([*(_sentence(f) for f in fields), conclusion]))


_WORD_TO = {
    "kind": {nfc(v): k for k, v in KIND_WORDS.items()},
    "site": {nfc(v): k for k, v in SITE_WORDS.items()},
    "lobe": {nfc(v): k for k, v in LOBE_WORDS.items()},
}
_LESION_RE = re.compile(
    nfc(
        r"(?P<kind>Nốt|Khối) kích thước (?P<size>\d+) mm ở (?:thùy (?P<lobe>trên|dưới) )?"
        r"(?P<site>phổi phải|phổi trái|gan|cột sống|hạch trung thất), (?P<neg>không )?tăng chuyển hóa FDG"
    )
)


def extract(report: str) -> list[ReportedLesion]:
    """Read the lesion fields back from a report (any Unicode normal form).

    Sentences that do not match the lexicon are ignored, so a generated
    report yields whatever well-formed lesion statements it contains.  A lung
    lesion without a lobe gets lobe ``""``.

    Parameters
    ----------
    report
        Report text.

    Returns
    -------
    list of ReportedLesion
        In the order they appear.
    """
    out = []
    for m in _LESION_RE.finditer(nfc(report)):
        site = _WORD_TO["site"][m["site"]]
        lobe = _WORD_TO["lobe"][m["lobe"]] if m["lobe"] and site in LUNG_SITES else ""
        out.append(
            ReportedLesion(
                site=site, lobe=lobe, kind=_WORD_TO["kind"][m["kind"]], size_mm=int(m["size"]), fdg_avid=m["neg"] is None
            )
        )
    return out


_PUNCT = re.compile(r"\s*([.,:])(?=\s|$)")


def tokenize(text: str) -> list[str]:
    """Word tokens of a report: NFC, whitespace split, sentence punctuation as its own token."""
    return _PUNCT.sub(r" \1", nfc(text)).split()


def detokenize(tokens: list[str]) -> str:
    """Join tokens back into text (no space before ``. , :``)."""
    return re.sub(r" ([.,:])(?=\s|$)", r"\1", " ".join(tokens))


class _WordTokenizer:
    """rouge-score tokenizer that keeps Vietnamese words whole (lower-cased, punctuation dropped)."""

    def tokenize(self, text: str) -> list[str]:
        return [t.lower() for t in tokenize(text) if t not in {".", ",", ":"}]


_ROUGE = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_WordTokenizer())


def bleu4(hypotheses: list[str], references: list[str]) -> float:
    """Corpus BLEU-4 from sacrebleu (default 13a tokenisation), as a fraction in ``[0, 1]``."""
    if len(hypotheses) != len(references):
        raise ValueError("one hypothesis per reference")
    return sacrebleu.corpus_bleu([nfc(h) for h in hypotheses], [[nfc(r) for r in references]]).score / 100.0


def rouge_l(hypotheses: list[str], references: list[str]) -> float:
    """Mean ROUGE-L F-measure from rouge-score over pairs, with a Vietnamese-safe tokenizer."""
    if len(hypotheses) != len(references):
        raise ValueError("one hypothesis per reference")
    return float(np.mean([_ROUGE.score(r, h)["rougeL"].fmeasure for h, r in zip(hypotheses, references)]))


@dataclass(frozen=True, kw_only=True)
class FieldScores:
    """Clinical field accuracy of generated reports, per true lesion.

    Each true lesion is matched to at most one reported lesion at the same
    position (site and lobe), preferring one with the same type and FDG
    status.  A missed lesion counts as wrong on every field.

    Attributes
    ----------
    position
        Share of true lesions reported at their position.
    kind
        Share reported at their position with the right type.
    fdg
        Share reported at their position with the right FDG status.
    by_site
        For each site, the share of its lesions with all three fields right.
    normal_cases
        Share of lesion-free cases reported without any lesion.
    """

    position: float
    kind: float
    fdg: float
    by_site: dict[str, float]
    normal_cases: float


def field_accuracy(reports: list[str], truths: list[Findings]) -> FieldScores:
    """Score generated reports against the true findings, field by field.

    Parameters
    ----------
    reports
        Generated reports, one per case.
    truths
        The cases' findings.

    Returns
    -------
    FieldScores
        Per-lesion field accuracies (NaN where there is nothing to score).
    """
    if len(reports) != len(truths):
        raise ValueError("one report per case")
    pos, kind, fdg, normal = [], [], [], []
    site_hits: dict[str, list[bool]] = {s: [] for s in SITES}
    for report, truth in zip(reports, truths):
        predicted = extract(report)
        true = reported_fields(truth)
        if not true:
            normal.append(not predicted)
        for t in true:
            candidates = [p for p in predicted if p.position == t.position]
            best = max(candidates, key=lambda p: (p.kind == t.kind) + (p.fdg_avid == t.fdg_avid), default=None)
            if best is not None:
                predicted.remove(best)
            pos.append(best is not None)
            kind.append(best is not None and best.kind == t.kind)
            fdg.append(best is not None and best.fdg_avid == t.fdg_avid)
            site_hits[t.site].append(best is not None and best.kind == t.kind and best.fdg_avid == t.fdg_avid)

    def share(xs: list[bool]) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    return FieldScores(
        position=share(pos),
        kind=share(kind),
        fdg=share(fdg),
        by_site={s: share(v) for s, v in site_hits.items()},
        normal_cases=share(normal),
    )
