"""The chapter registry: chapters, their parameter schemas and their claims.

The registry is ``registry.yaml`` beside this module (the families and the
book-wide verdict convention) joined with one file per chapter,
``<family>/chapters/<id>.yaml``, which sits beside the chapter's driver module.
Everything that lists chapters (``dvc.yaml``, the table of contents, the
scoreboard, the tests) reads it through :func:`load_registry`.

The verdict convention is applied by :meth:`Claim.verdict` to every claim
alike: a claim states the sign of the effect the paper reports against a
null value, and the paper's number where there is one; the verdict follows
from the mean and standard deviation over seeds, with one reproduction band
(:data:`BAND`) for the whole book.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_REGISTRY_FILE = Path(__file__).with_name("registry.yaml")
_PACKAGE_DIR = Path(__file__).parent

#: Verdicts of measured claims, best first.
MEASURED_VERDICTS = ("reproduced", "exceeds the paper", "direction only", "not reproduced at this scale")
#: Verdicts of claims true by construction; never counted as reproductions.
STRUCTURAL_VERDICTS = ("structural check", "structural check failed")
#: Verdicts of claims whose value is fixed by constants the chapter assumed; counted apart.
MODELLED_VERDICTS = ("modelled", "modelled, does not hold")
PRECONDITION_NOT_MET = "precondition not met"
VERDICTS = (*MEASURED_VERDICTS, PRECONDITION_NOT_MET, *STRUCTURAL_VERDICTS, *MODELLED_VERDICTS)
#: Scoreboard classes, in display order, and the verdicts each holds (structural and modelled apart).
VERDICT_CLASSES: dict[str, tuple[str, ...]] = {
    "reproduced": (MEASURED_VERDICTS[0],),
    "exceeds the paper": (MEASURED_VERDICTS[1],),
    "direction only": (MEASURED_VERDICTS[2],),
    "not reproduced at this scale": (MEASURED_VERDICTS[3],),
    "precondition not met": (PRECONDITION_NOT_MET,),
    "structural": STRUCTURAL_VERDICTS,
    "modelled": MODELLED_VERDICTS,
}


def verdict_class(verdict: str) -> str:
    """The scoreboard class of a verdict.

    Raises
    ------
    ValueError
        For a string that is no verdict.
    """
    for name, members in VERDICT_CLASSES.items():
        if verdict in members:
            return name
    raise ValueError(f"unknown verdict {verdict!r}")


#: The reproduction band (``verdict_band`` in registry.yaml): our effect over the paper's must lie in it.
BAND: tuple[float, float] = tuple(yaml.safe_load(_REGISTRY_FILE.read_text())["verdict_band"])  # type: ignore[assignment]
KINDS = ("measured", "structural", "modelled")
@dataclass(frozen=True)
class Claim:
    """One claim of a paper and how its verdict is decided.

    A claim is a signed effect: ``direction`` says whether the paper reports
    the metric above (``higher``) or below (``lower``) ``null_value``, the
    value that means "no effect" (or the margin a no-worse-than claim must
    clear).  ``kind`` is ``measured`` (counted on the scoreboard),
    ``structural`` (true by construction) or ``modelled`` (fixed by constants
    the chapter assumed).  ``precondition`` names a claim of the same chapter
    that must hold for this one to be judged.
    """

    id: str
    metric: str
    paper_value: float | None
    paper_text: str
    unit: str
    direction: str
    kind: str = "measured"
    null_value: float = 0.0
    precondition: str | None = None

    def sign_holds(self, mean: float, std: float = 0.0) -> bool:
        """Whether the effect has the paper's sign across seeds (mean - sd beyond the null value)."""
        if self.direction == "higher":
            return mean - std > self.null_value
        return mean + std < self.null_value

    def ratio(self, mean: float) -> float | None:
        """Our effect over the paper's, both measured from the null value (None without a paper number)."""
        if self.paper_value is None:
            return None
        return (mean - self.null_value) / (self.paper_value - self.null_value)

    def verdict(self, mean: float, std: float = 0.0) -> str:
        """Return the verdict for a reproduced value.

        Parameters
        ----------
        mean
            The mean of the claim's metric over seeds.
        std
            Its standard deviation over seeds.

        Returns
        -------
        str
            One of :data:`VERDICTS` (the precondition is applied by the ledger,
            which knows the other claims).
        """
        holds = self.sign_holds(mean, std)
        if self.kind == "structural":
            return STRUCTURAL_VERDICTS[0 if holds else 1]
        if self.kind == "modelled":
            return MODELLED_VERDICTS[0 if holds else 1]
        if not holds:
            return MEASURED_VERDICTS[3]
        ratio = self.ratio(mean)
        if ratio is None or BAND[0] <= ratio <= BAND[1]:
            return MEASURED_VERDICTS[0]
        return MEASURED_VERDICTS[1] if ratio > BAND[1] else MEASURED_VERDICTS[2]

    @property
    def rule(self) -> str:
        """The verdict rule in words, for tables."""
        op = ">" if self.direction == "higher" else "<"
        sign = f"mean {'−' if op == '>' else '+'} sd {op} {self.null_value:g}"
        if self.kind != "measured":
            return f"{self.kind}: holds if {sign}"
        if self.paper_value is None:
            return f"reproduced if {sign}"
        return f"sign: {sign}; reproduced if the effect is {BAND[0]:g}–{BAND[1]:g}× the paper's"

    @property
    def paper_display(self) -> str:
        """The paper's value as shown in tables (its words when qualitative)."""
        if self.paper_value is None:
            return f"qualitative: {self.paper_text}"
        return f"{self.paper_value:g} {self.unit}".strip()


@dataclass(frozen=True)
class Check:
    """A cross-field check over a chapter's parameters, evaluated before any kernel starts.

    ``expr`` is a Python expression over the parameter names in ``params``
    (with ``all``, ``any``, ``len``, ``min``, ``max``, ``sum``, ``abs``,
    ``set``, ``sorted`` and ``range`` available); it must be true.
    """

    params: tuple[str, ...]
    expr: str
    message: str

    def holds(self, values: dict[str, Any]) -> bool:
        """Evaluate the check on ``values`` (which must hold every name in ``params``)."""
        scope = {"__builtins__": _CHECK_BUILTINS, **{k: values[k] for k in self.params}}
        return bool(eval(self.expr, scope))  # noqa: S307 - the expression is registry text, not user input


_CHECK_BUILTINS = {f.__name__: f for f in (all, any, len, min, max, sum, abs, set, sorted, range)}


@dataclass(frozen=True)
class Chapter:
    """One chapter of the book."""

    id: str
    title: str
    family: str
    notebook: str
    bibtex: str
    parameters: dict[str, dict[str, Any]]
    claims: tuple[Claim, ...]
    datasets: tuple[str, ...] = field(default_factory=tuple)
    source: str = ""
    driver: str = ""
    checks: tuple[Check, ...] = field(default_factory=tuple)

    def claim(self, claim_id: str) -> Claim:
        """Return the claim called ``claim_id``."""
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"chapter {self.id!r} has no claim {claim_id!r}; it has {[c.id for c in self.claims]}")

    @property
    def params_file(self) -> str:
        """Path of the chapter's profile file, relative to the repo root."""
        return f"params/{self.id}.yaml"


@dataclass(frozen=True)
class Registry:
    """All chapters and the family names."""

    families: dict[str, str]
    chapters: tuple[Chapter, ...]

    def get(self, chapter_id: str) -> Chapter:
        """Return the chapter ``chapter_id`` or raise a ``KeyError`` naming the known ids."""
        for ch in self.chapters:
            if ch.id == chapter_id:
                return ch
        raise KeyError(f"unknown chapter {chapter_id!r}; known: {', '.join(c.id for c in self.chapters)}")

    def by_family(self) -> dict[str, list[Chapter]]:
        """Chapters grouped by family, in the registry's family order."""
        out: dict[str, list[Chapter]] = {f: [] for f in self.families}
        for ch in self.chapters:
            out[ch.family].append(ch)
        return {f: chs for f, chs in out.items() if chs}


def _claim(chapter_id: str, d: dict[str, Any]) -> Claim:
    where = f"claim {chapter_id}/{d.get('id')}"
    own_rules = sorted(k for k in ("reproduced", "direction_only") if k in d)
    if own_rules:
        raise ValueError(f"{where}: {own_rules} are per-claim thresholds; state the claim in the book's convention "
                         "(direction, null_value, paper_value, kind)")
    kind = d.get("kind", "measured")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    if d.get("direction") not in ("higher", "lower"):
        raise ValueError(f"{where}: direction must be 'higher' or 'lower'")
    claim = Claim(
        id=d["id"],
        metric=d["metric"],
        paper_value=None if d.get("paper_value") is None else float(d["paper_value"]),
        paper_text=d.get("paper_text", ""),
        unit=d.get("unit", ""),
        direction=d["direction"],
        kind=kind,
        null_value=float(d.get("null_value", 0.0)),
        precondition=d.get("precondition"),
    )
    if claim.paper_value is not None:
        gap = claim.paper_value - claim.null_value
        if gap == 0 or (gap > 0) != (claim.direction == "higher"):
            raise ValueError(
                f"{where}: paper_value {claim.paper_value:g} does not lie on the {claim.direction} side of "
                f"null_value {claim.null_value:g}; the claim's effect must have the paper's sign"
            )
    return claim


def _checks(chapter_id: str, raw: list[dict[str, Any]], schema: dict[str, Any]) -> tuple[Check, ...]:
    out = []
    for d in raw:
        check = Check(params=tuple(d["params"]), expr=d["expr"], message=d["message"])
        unknown = [p for p in check.params if p not in schema]
        if unknown:
            raise ValueError(f"chapter {chapter_id!r}: check {check.expr!r} names unknown parameter(s) {unknown}")
        compile(check.expr, f"<check of {chapter_id}>", "eval")
        out.append(check)
    return tuple(out)


def parse_registry(raw: dict[str, Any]) -> Registry:
    """Build a :class:`Registry` from the parsed YAML, checking its structure.

    Raises
    ------
    ValueError
        On a duplicate id, an unknown family, a bad claim direction or kind, a
        paper value on the wrong side of the null value, a precondition that
        names no claim, or a check over unknown parameters.
    """
    families = dict(raw["families"])
    chapters = []
    seen: set[str] = set()
    order = {f: i for i, f in enumerate(families)}
    for d in sorted(raw["chapters"], key=lambda c: (order.get(c.get("family"), -1), c.get("_order", 0))):
        if d["id"] in seen:
            raise ValueError(f"duplicate chapter id {d['id']!r}")
        seen.add(d["id"])
        if d["family"] not in families:
            raise ValueError(f"chapter {d['id']!r}: unknown family {d['family']!r}")
        claims = tuple(_claim(d["id"], c) for c in d.get("claims", []))
        ids = {c.id for c in claims}
        for c in claims:
            if c.precondition is not None and (c.precondition not in ids or c.precondition == c.id):
                raise ValueError(f"claim {d['id']}/{c.id}: precondition {c.precondition!r} is not another claim of the chapter")
        parameters = dict(d.get("parameters", {}))
        chapters.append(
            Chapter(
                id=d["id"],
                title=d["title"],
                family=d["family"],
                notebook=d["notebook"],
                bibtex=d["bibtex"],
                parameters=parameters,
                claims=claims,
                datasets=tuple(d.get("datasets", [])),
                source=d.get("_source", ""),
                driver=d.get("driver", ""),
                checks=_checks(d["id"], d.get("checks", []) or [], parameters),
            )
        )
    return Registry(families=families, chapters=tuple(chapters))


def chapter_files() -> list[Path]:
    """The chapters' registry files, ``<family>/chapters/<id>.yaml``."""
    return sorted(_PACKAGE_DIR.glob("*/chapters/*.yaml"))


def registry_files() -> list[Path]:
    """The files the registry is read from: ``registry.yaml`` and every chapter file."""
    return [_REGISTRY_FILE, *chapter_files()]


@functools.cache
def load_registry() -> Registry:
    """Load and parse the registry (cached): the families, then every chapter's file."""
    raw = yaml.safe_load(_REGISTRY_FILE.read_text())
    raw.setdefault("chapters", [])
    for i, f in enumerate(chapter_files()):
        d = yaml.safe_load(f.read_text()) or {}
        d["_source"] = f"lib/repro/{f.relative_to(_PACKAGE_DIR).as_posix()}"
        d["_order"] = i
        raw["chapters"].append(d)
    return parse_registry(raw)
