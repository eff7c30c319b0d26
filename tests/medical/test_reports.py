import unicodedata

import pytest

from repro.medical.phantom import PhantomConfig, generate_set
from repro.medical.report_generator import Vocabulary
from repro.medical.reports import (
    bleu4,
    detokenize,
    extract,
    field_accuracy,
    render,
    reported_fields,
    rouge_l,
    tokenize,
)


@pytest.fixture(scope="module")
def cases():
    return generate_set(150, PhantomConfig(shape=(16, 32, 32), max_lesions=2), seed=5).findings


def test_extractor_inverts_the_generator_on_every_case(cases):
    for findings in cases:
        report = render(findings)
        assert extract(report) == reported_fields(findings)
        assert extract(unicodedata.normalize("NFD", report)) == reported_fields(findings)


def test_reports_are_nfc(cases):
    for findings in cases[:50]:
        report = render(findings)
        assert unicodedata.normalize("NFC", report) == report
        assert "phổi" in report or "gan" in report or "cột sống" in report or "trung thất" in report or "Không" in report


def test_tokenize_round_trip(cases):
    for findings in cases[:50]:
        report = render(findings)
        assert detokenize(tokenize(report)) == report


def test_vocabulary_round_trip(cases):
    reports = [render(f) for f in cases]
    vocab = Vocabulary.build(reports)
    ids = vocab.encode(reports, 80)
    assert [vocab.decode(row[1:]) for row in ids] == reports


def test_text_metrics_self_and_empty(cases):
    refs = [render(f) for f in cases[:40]]
    assert bleu4(refs, refs) == pytest.approx(1.0)
    assert rouge_l(refs, refs) == pytest.approx(1.0)
    assert bleu4([""] * len(refs), refs) == 0.0
    assert rouge_l([""] * len(refs), refs) == 0.0


def test_rouge_keeps_vietnamese_words_whole():
    # with rouge-score's default tokenizer these two differ only in shredded diacritics and would tie
    assert rouge_l(["phổi phải"], ["phổi trái"]) == pytest.approx(0.5)


def test_field_accuracy(cases):
    reports = [render(f) for f in cases]
    perfect = field_accuracy(reports, cases)
    assert perfect.position == perfect.kind == perfect.fdg == perfect.normal_cases == 1.0
    flipped = [
        r.replace("không tăng", "TMP").replace("tăng chuyển hóa FDG", "không tăng chuyển hóa FDG").replace("TMP", "tăng")
        for r in reports
    ]
    worse = field_accuracy(flipped, cases)
    assert worse.position == 1.0 and worse.fdg < 0.1  # only same-position pairs of opposite status can still match
    empty = field_accuracy([""] * len(cases), cases)
    assert empty.position == 0.0 and empty.normal_cases == 1.0
