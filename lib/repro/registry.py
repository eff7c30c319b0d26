"""The chapter registry: chapters, their parameter schemas and their claims.

The registry is ``registry.yaml`` beside this module (the families and the
book-wide verdict convention) joined with one file per chapter,
``<family>/chapters/<id>.yaml``, which sits beside the chapter's driver module.
Everything that lists chapters (``dvc.yaml``, the table of contents, the
scoreboard, the tests) reads it through :func:`load_registry`.

A claim states the sign of the effect the paper reports against a null
value, the range its metric can reach, the paper's number where there is one
(with its source) and any precondition; :mod:`repro.verdicts` judges it, the
same way for every claim, with one reproduction band (:data:`BAND`) for the
whole book.  Parsing refuses a claim whose rule cannot both hold and fail
over its range, and a margin without a source in the paper or a sweep.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_REGISTRY_FILE = Path(__file__).with_name("registry.yaml")
_PACKAGE_DIR = Path(__file__).parent

#: The reproduction band (``verdict_band`` in registry.yaml): our effect over the paper's must lie in it.
_BAND_RAW = yaml.safe_load(_REGISTRY_FILE.read_text())["verdict_band"]
BAND: tuple[float, float] = (float(_BAND_RAW[0]), float(_BAND_RAW[1]))
KINDS = ("measured", "structural", "modelled", "precondition")
PAPER_STATS = ("value", "mean", "max")
RATIO_UNITS = ("x",)
"""Units of ratio claims, whose natural null value is 1 (every other claim's is 0)."""
FIDELITY_PARTS = ("method", "baseline", "data", "metric", "experiment")
FIDELITY_STATUSES = ("implemented", "substituted", "omitted")


@dataclass(frozen=True, kw_only=True)
class Learning:
    """The learning precondition of an accuracy or quality claim.

    Every arm the claim compares must clear the trivial level of its task
    (chance, the majority class, the identity prediction) by ``margin``, in
    the unit of ``quality``, or the claim is "precondition not met".

    Attributes
    ----------
    quality
        What each arm reports, e.g. ``"test accuracy, %"``.
    trivial
        The trivial level in words, e.g. ``"chance: 1 of 10 balanced classes"``.
    margin
        How far every arm must be beyond the trivial level.
    higher
        Whether a higher quality is better (accuracy, PSNR) or a lower one (a loss, an error).
    trivial_value
        The trivial level when it is fixed by the task; otherwise the driver computes it.
    """

    quality: str
    trivial: str
    margin: float
    higher: bool = True
    trivial_value: float | None = None

    def clears(self, arm: float, trivial: float) -> bool:
        """Whether an arm's mean quality is at least ``margin`` beyond ``trivial``."""
        return arm - trivial >= self.margin if self.higher else trivial - arm >= self.margin


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One claim of a paper and how its verdict is decided (see :mod:`repro.verdicts`).

    A claim is a signed effect: ``direction`` says whether the paper reports
    the metric above (``higher``) or below (``lower``) ``null_value``, the
    value that means "no effect" (or the margin a no-worse-than claim must
    clear, whose source or sweep the claim names).  ``kind`` is ``measured``
    (counted on the scoreboard), ``structural`` (true by construction),
    ``modelled`` (fixed by constants the chapter assumed) or ``precondition``
    (what another claim needs; not counted).  ``range`` is what the metric can
    reach.  ``precondition`` names a claim of the same chapter that must hold
    for this one to be judged; ``learning`` is the learning precondition of an
    accuracy or quality claim.
    """

    id: str
    metric: str
    paper_value: float | None
    paper_text: str
    unit: str
    direction: str
    range: tuple[float, float]
    kind: str = "measured"
    null_value: float = 0.0
    precondition: str | None = None
    paper_source: str = ""
    paper_stat: str = "value"
    paper_config: str = ""
    our_config: str = ""
    null_source: str = ""
    null_sweep: tuple[float, ...] = ()
    deterministic: bool = False
    configuration: str = ""
    learning: Learning | None = None

    @property
    def natural_null(self) -> float:
        """The null value that means no effect: 1 for a ratio, else 0."""
        return 1.0 if self.unit in RATIO_UNITS else 0.0

    def ratio(self, mean: float) -> float | None:
        """Our effect over the paper's, both measured from the null value (None without a paper number)."""
        if self.paper_value is None:
            return None
        return (mean - self.null_value) / (self.paper_value - self.null_value)

    @property
    def paper_display(self) -> str:
        """The paper's value as shown in tables (its words when it gives no number)."""
        if self.paper_value is None:
            return f"no number: {self.paper_text}"
        up_to = "up to " if self.paper_stat == "max" else ""
        return f"{up_to}{self.paper_value:g} {self.unit}".strip()


@dataclass(frozen=True, kw_only=True)
class FidelityItem:
    """One part of a paper (a method component, a baseline, a dataset, a metric, an experiment) and how we treat it.

    Attributes
    ----------
    part
        One of :data:`FIDELITY_PARTS`.
    name
        The part, in a few words.
    status
        ``implemented``, ``substituted`` or ``omitted``.
    by
        What stands in for a substituted part.
    reason
        Why a part is substituted or omitted.
    cpu_only
        Substituted or omitted only to fit the cpu budget (the paper profile implements it).
    """

    part: str
    name: str
    status: str
    by: str = ""
    reason: str = ""
    cpu_only: bool = False

    @property
    def weight(self) -> float:
        """The item's share in the fidelity score: 1 implemented, 1/2 substituted, 0 omitted."""
        return {"implemented": 1.0, "substituted": 0.5}.get(self.status, 0.0)


def fidelity_score(items: tuple[FidelityItem, ...]) -> float | None:
    """Implemented plus half of substituted, over all items (``None`` without items)."""
    return sum(i.weight for i in items) / len(items) if items else None


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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
    fidelity: tuple[FidelityItem, ...] = field(default_factory=tuple)

    @property
    def fidelity_score(self) -> float | None:
        """Implemented plus half of substituted over the paper's parts (``None`` before the table is drawn up)."""
        return fidelity_score(self.fidelity)

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


@dataclass(frozen=True, kw_only=True)
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


def _range(where: str, raw: Any) -> tuple[float, float]:
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        raise ValueError(f"{where}: range must be [lo, hi], the values the metric can reach (use .inf for no bound)")
    lo, hi = float(raw[0]), float(raw[1])
    if not lo < hi:
        raise ValueError(f"{where}: range [{lo:g}, {hi:g}] is empty")
    return lo, hi


def _learning(where: str, raw: dict[str, Any] | None) -> Learning | None:
    if raw is None:
        return None
    missing = [k for k in ("quality", "trivial", "margin") if k not in raw]
    if missing:
        raise ValueError(f"{where}: learning needs {missing} (what the arms report, the trivial level in words, "
                         "and the margin every arm must clear it by)")
    unknown = sorted(set(raw) - {"quality", "trivial", "margin", "higher", "trivial_value"})
    if unknown:
        raise ValueError(f"{where}: unknown learning field(s) {unknown}")
    margin = float(raw["margin"])
    if margin < 0:
        raise ValueError(f"{where}: learning margin must be >= 0, got {margin:g}")
    tv = raw.get("trivial_value")
    return Learning(quality=str(raw["quality"]), trivial=str(raw["trivial"]), margin=margin,
                    higher=bool(raw.get("higher", True)), trivial_value=None if tv is None else float(tv))


_CLAIM_FIELDS = {"id", "metric", "paper_value", "paper_text", "unit", "direction", "range", "kind", "null_value",
                 "precondition", "paper_source", "paper_stat", "paper_config", "our_config", "null_source",
                 "null_sweep", "deterministic", "configuration", "learning"}


def _claim(chapter_id: str, d: dict[str, Any]) -> Claim:
    where = f"claim {chapter_id}/{d.get('id')}"
    own_rules = sorted(k for k in ("reproduced", "direction_only") if k in d)
    if own_rules:
        raise ValueError(f"{where}: {own_rules} are per-claim thresholds; state the claim in the book's convention "
                         "(direction, null_value, paper_value, kind)")
    unknown = sorted(set(d) - _CLAIM_FIELDS)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}")
    kind = d.get("kind", "measured")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    if d.get("direction") not in ("higher", "lower"):
        raise ValueError(f"{where}: direction must be 'higher' or 'lower'")
    if d.get("paper_stat", "value") not in PAPER_STATS:
        raise ValueError(f"{where}: paper_stat must be one of {PAPER_STATS}")
    claim = Claim(
        id=d["id"],
        metric=d["metric"],
        paper_value=None if d.get("paper_value") is None else float(d["paper_value"]),
        paper_text=d.get("paper_text", ""),
        unit=d.get("unit", ""),
        direction=d["direction"],
        range=_range(where, d.get("range")),
        kind=kind,
        null_value=float(d.get("null_value", 0.0)),
        precondition=d.get("precondition"),
        paper_source=str(d.get("paper_source", "")),
        paper_stat=d.get("paper_stat", "value"),
        paper_config=str(d.get("paper_config", "")),
        our_config=str(d.get("our_config", "")),
        null_source=str(d.get("null_source", "")),
        null_sweep=tuple(float(v) for v in d.get("null_sweep", ()) or ()),
        deterministic=bool(d.get("deterministic", False)),
        configuration=str(d.get("configuration", "")),
        learning=_learning(where, d.get("learning")),
    )
    _check_claim(where, claim)
    return claim


def _check_claim(where: str, claim: Claim) -> None:
    """The rules a claim must meet to be judged by the convention (see registry.yaml)."""
    lo, hi = claim.range
    null = claim.null_value
    can_fail = lo <= null < hi if claim.direction == "higher" else lo < null <= hi
    if not can_fail:
        raise ValueError(f"{where}: null_value {null:g} with direction {claim.direction} over the metric's range "
                         f"[{lo:g}, {hi:g}] gives a rule that cannot both hold and fail")
    if claim.paper_value is not None:
        gap = claim.paper_value - null
        if gap == 0 or (gap > 0) != (claim.direction == "higher"):
            raise ValueError(
                f"{where}: paper_value {claim.paper_value:g} does not lie on the {claim.direction} side of "
                f"null_value {null:g}; the claim's effect must have the paper's sign"
            )
        if not lo <= claim.paper_value <= hi:
            raise ValueError(f"{where}: paper_value {claim.paper_value:g} lies outside the range [{lo:g}, {hi:g}]")
    if claim.kind in ("measured", "modelled") and null != claim.natural_null and not (claim.null_source or claim.null_sweep):
        raise ValueError(f"{where}: null_value {null:g} is a margin (the natural null is {claim.natural_null:g}); "
                         "name its source in the paper (null_source) or sweep it (null_sweep)")
    outside = [v for v in claim.null_sweep if not lo <= v <= hi]
    if outside:
        raise ValueError(f"{where}: null_sweep values {outside} lie outside the range [{lo:g}, {hi:g}]")
    if claim.deterministic and claim.kind not in ("modelled", "structural"):
        raise ValueError(f"{where}: a deterministic claim (a simulator or an analytic model) is modelled or structural")
    if claim.deterministic and not claim.configuration:
        raise ValueError(f"{where}: a deterministic claim names the configuration it is judged at (configuration)")
    if claim.learning is not None and claim.kind != "measured":
        raise ValueError(f"{where}: a learning precondition belongs to a measured claim")


def _fidelity(chapter_id: str, raw: list[dict[str, Any]]) -> tuple[FidelityItem, ...]:
    out = []
    for d in raw:
        where = f"chapter {chapter_id}: fidelity item {d.get('name')!r}"
        unknown = sorted(set(d) - {"part", "name", "status", "by", "reason", "cpu_only"})
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {unknown}")
        if d.get("part") not in FIDELITY_PARTS:
            raise ValueError(f"{where}: part must be one of {FIDELITY_PARTS}")
        if d.get("status") not in FIDELITY_STATUSES:
            raise ValueError(f"{where}: status must be one of {FIDELITY_STATUSES}")
        item = FidelityItem(part=d["part"], name=str(d["name"]), status=d["status"], by=str(d.get("by") or ""),
                            reason=str(d.get("reason") or ""), cpu_only=bool(d.get("cpu_only", False)))
        if item.status != "implemented" and not item.reason:
            raise ValueError(f"{where}: a {item.status} item says why (reason)")
        if item.status == "substituted" and not item.by:
            raise ValueError(f"{where}: a substituted item says by what (by)")
        out.append(item)
    return tuple(out)


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
                fidelity=_fidelity(d["id"], d.get("fidelity", []) or []),
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
