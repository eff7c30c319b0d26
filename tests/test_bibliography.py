"""Every chapter's bib entry agrees with the shared bibliography record of its paper.

The record is ``shared/papers/bibliography.yaml`` beside the repository root (one
record per chapter id; ``null`` means "not confirmed").  The bib entry named by
the chapter's ``bibtex`` key must carry exactly the confirmed values and must
leave out what the record does not know: a field that is ``null`` there is
absent from the entry, an unidentified paper is marked so in its title, and
the entry's note names every unknown title, author list, venue, year or DOI and
every field the record lists as unverified.
"""

from __future__ import annotations

import codecs
import unicodedata
from pathlib import Path
from typing import Any

import latexcodec  # noqa: F401  (registers the "ulatex" codec)
import pytest
import yaml
from pybtex.database import BibliographyData, Entry, Person, parse_file

from repro.registry import load_registry

ROOT = Path(__file__).resolve().parents[1]
RECORDS_FILE = ROOT.parent / "shared" / "papers" / "bibliography.yaml"
BIB_FILE = ROOT / "book" / "references.bib"
#: Bib fields that name where a paper appeared.
VENUE_FIELDS = ("journal", "booktitle", "howpublished", "series", "publisher", "school", "institution")
#: Record fields compared verbatim with the bib field of the same name.
NUMBERING_FIELDS = ("volume", "number", "pages")
UNIDENTIFIED_PREFIX = "[unidentified paper]"

REGISTRY = load_registry()

def normalise(text: str) -> str:
    r"""Text of a title, venue or name for comparison.

    LaTeX accents and escapes are decoded, braces dropped, dashes and case folded
    and whitespace collapsed, so ``{KAKURENBO}: Fran{\c{c}}ois`` and
    ``KAKURENBO: François`` compare equal.
    """
    decoded = codecs.decode(text, "ulatex")
    decoded = unicodedata.normalize("NFC", decoded).replace("\u2014", "---").replace("\u2013", "--")
    return " ".join(decoded.replace("{", "").replace("}", "").casefold().split())


@pytest.fixture(scope="module")
def shared_records() -> dict[str, dict[str, Any]]:
    """The shared bibliography records by chapter id; skips when the file is absent."""
    if not RECORDS_FILE.is_file():
        pytest.skip(f"the shared bibliography {RECORDS_FILE} is absent (CI keeps shared/ beside the clone)")
    return {rec["id"]: rec for rec in yaml.safe_load(RECORDS_FILE.read_text())}


@pytest.fixture(scope="module")
def bib() -> BibliographyData:
    """``book/references.bib`` as parsed by pybtex, read once."""
    return parse_file(str(BIB_FILE), bib_format="bibtex")


def field(entry: Entry, name: str) -> str | None:
    """The entry's field ``name`` (case-insensitive), or None when absent."""
    for key, value in entry.fields.items():
        if key.lower() == name:
            return str(value)
    return None


def name_tokens(name: str) -> list[str]:
    """The normalised words of a person's name, sorted (name order differs between formats)."""
    return sorted(normalise(name).split())


def person_tokens(person: Person) -> list[str]:
    """The normalised words of a parsed bib author's name, sorted."""
    parts = person.first_names + person.middle_names + person.prelast_names + person.last_names + person.lineage_names
    return name_tokens(" ".join(parts))


def test_every_chapter_has_a_record(shared_records):
    missing = [ch.id for ch in REGISTRY.chapters if ch.id not in shared_records]
    assert not missing, f"chapters without a record in {RECORDS_FILE}: {missing}"


def disagreements(rec: dict[str, Any], entry: Entry) -> list[str]:
    """Every way a bib entry departs from its shared record.

    Parameters
    ----------
    rec : dict
        The chapter's record from ``bibliography.yaml``.
    entry : pybtex.database.Entry
        The chapter's bib entry.

    Returns
    -------
    list of str
        One message per disagreement; empty when the entry agrees.
    """
    found: list[str] = []
    note = normalise(field(entry, "note") or "")

    title = field(entry, "title") or ""
    if rec["title"] is None:
        if not normalise(title).startswith(UNIDENTIFIED_PREFIX):
            found.append(f"title {title!r} is unknown, so it must start with '[Unidentified paper]'")
        if not note:
            found.append("an unidentified paper's note must say which fields are unknown")
    elif normalise(title) != normalise(rec["title"]):
        found.append(f"title {title!r} != {rec['title']!r}")

    for name, bib_name in (("year", "year"), ("arxiv", "eprint"), *((n, n) for n in NUMBERING_FIELDS)):
        value = field(entry, bib_name)
        if rec[name] is None and value is not None:
            found.append(f"{bib_name} {value!r} given but not confirmed")
        elif rec[name] is not None and value != str(rec[name]):
            found.append(f"{bib_name} {value!r} != {rec[name]!r}")

    doi = field(entry, "doi")
    if rec["doi"] is None and doi is not None:
        found.append(f"DOI {doi} given but not confirmed")
    elif rec["doi"] is not None and (doi or "").lower() != str(rec["doi"]).lower():
        found.append(f"DOI {doi} != {rec['doi']}")

    venues = {name: field(entry, name) for name in VENUE_FIELDS if field(entry, name) is not None}
    if rec["venue"] is None and venues:
        found.append(f"venue fields {venues} given but the venue is not confirmed")
    elif rec["venue"] is not None:
        stated = [v for k, v in venues.items() if k in ("journal", "booktitle", "howpublished")]
        if [normalise(v) for v in stated] != [normalise(rec["venue"])]:
            found.append(f"venue {stated} != {rec['venue']!r}")

    if rec["code_repo"] is not None:
        places = normalise(" ".join(filter(None, (field(entry, "note"), field(entry, "url")))))
        if normalise(rec["code_repo"]) not in places:
            found.append(f"code repository {rec['code_repo']} not named in note or url")

    authors = entry.persons.get("author", [])
    if [person_tokens(p) for p in authors] != [name_tokens(a) for a in rec["authors"]]:
        found.append(f"authors {[str(p) for p in authors]} != {rec['authors']}")
    if rec["authors"]:
        surname = normalise(rec["authors"][0]).split()[-1]
        if not authors or normalise(" ".join(authors[0].last_names)).split()[-1:] != [surname]:
            found.append(f"first author's surname is not {surname}")

    unknown = [name for name in ("title", "authors", "venue", "year", "doi") if not rec[name]]
    for name in unknown:
        if name not in note:
            found.append(f"the note does not name the unknown field {name!r}")

    if rec["unverified_fields"]:
        if not ("unverified" in note or "not verified" in note or "not confirmed" in note):
            found.append(f"the note must say that {rec['unverified_fields']} are unverified")
        for unverified in rec["unverified_fields"]:
            word = unverified.split()[0].replace("_", " ")
            if word not in note:
                found.append(f"the note does not name the unverified field {unverified!r}")
    return found


@pytest.mark.parametrize("ch", REGISTRY.chapters, ids=lambda c: c.id)
def test_bib_entry_agrees_with_record(ch, shared_records, bib):
    rec = shared_records.get(ch.id)
    if rec is None:
        pytest.fail(f"{ch.id} has no record in {RECORDS_FILE}")
    assert ch.bibtex in bib.entries, f"{ch.bibtex} missing from {BIB_FILE.name}"
    found = disagreements(rec, bib.entries[ch.bibtex])
    assert not found, f"{ch.id} ({ch.bibtex}) departs from {RECORDS_FILE.name}:\n" + "\n".join(found)


def test_normalise_folds_latex_braces_case_and_space():
    assert normalise("{KAKURENBO}:  Fran{\\c{c}}ois and {R}evisiting") == normalise("KAKURENBO: François and revisiting")
    assert normalise("Re-shuffle -- {I/O}") == "re-shuffle -- i/o"
    assert normalise("A") != normalise("B")


RECORD = {
    "title": "Scalable Low-Latency Inter-FPGA Networks", "authors": ["Kien Trung Pham", "Truong Thao Nguyen"],
    "venue": "2022 IEEE International Parallel and Distributed Processing Symposium (IPDPS)", "year": 2022,
    "volume": None, "number": None, "pages": None, "doi": "10.1109/IPDPS53621.2022.00031", "arxiv": None,
    "code_repo": None, "unverified_fields": [],
}
AGREEING = (
    "@inproceedings{k, title = {Scalable Low-Latency Inter-{FPGA} Networks}, author = {Pham, Kien Trung and Nguyen, "
    "Truong Thao}, booktitle = {2022 IEEE International Parallel and Distributed Processing Symposium (IPDPS)}, "
    "year = {2022}, doi = {10.1109/IPDPS53621.2022.00031}}"
)


def entry_of(text: str) -> Entry:
    """The single entry of BibTeX source held in a string."""
    return next(iter(BibliographyData.from_string(text, "bibtex").entries.values()))


def test_an_agreeing_entry_passes():
    assert disagreements(RECORD, entry_of(AGREEING)) == []


@pytest.mark.parametrize(
    ("change", "record_change", "message"),
    [
        (("Inter-{FPGA} Networks", "Inter-FPGA Fabrics"), {}, "title"),
        (("year = {2022}", "year = {2021}"), {}, "year"),
        (("year = {2022}", "year = {2022}, pages = {1--9}"), {}, "pages"),
        (("Pham, Kien Trung and ", ""), {}, "authors"),
        (("Pham, Kien Trung and Nguyen, Truong Thao", "Nguyen, Truong Thao and Pham, Kien Trung"), {}, "first author"),
        (("", ""), {"doi": None}, "DOI"),
        (("", ""), {"venue": None}, "venue"),
        (("", ""), {"title": None}, "Unidentified"),
        (("", ""), {"arxiv": "2201.00001"}, "eprint"),
        (("", ""), {"code_repo": "https://github.com/x/y"}, "code repository"),
        (("", ""), {"unverified_fields": ["venue"]}, "unverified"),
        ((", doi = {10.1109/IPDPS53621.2022.00031}", ""), {"doi": None}, "unknown field 'doi'"),
    ],
)
def test_a_departing_entry_is_caught(change, record_change, message):
    entry = entry_of(AGREEING.replace(*change))
    found = disagreements({**RECORD, **record_change}, entry)
    assert any(message in f for f in found), found
