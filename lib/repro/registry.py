"""The chapter registry: chapters, their parameter schemas and their claims.

The registry is ``registry.yaml`` beside this module (the families) joined with
``chapters/<family>.yaml`` (each family's chapters).  Everything that lists
chapters (``dvc.yaml``, the table of contents, the scoreboard, the tests) reads
it through :func:`load_registry`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_REGISTRY_FILE = Path(__file__).with_name("registry.yaml")
_CHAPTERS_DIR = Path(__file__).with_name("chapters")

VERDICTS = ("reproduced", "direction only", "not reproduced at this scale")
_OPS = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
}


_STATS = ("mean", "lower", "upper")


@dataclass(frozen=True)
class Condition:
    """A threshold condition ``stat <op> value`` used by verdict rules.

    ``of`` picks the statistic compared: ``mean`` (the mean over seeds),
    ``lower`` (mean minus one standard deviation) or ``upper`` (mean plus one),
    so a rule can demand that an effect holds across seeds, not only on average.
    """

    op: str
    value: float
    of: str = "mean"

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"unknown operator {self.op!r}; use one of {sorted(_OPS)}")
        if self.of not in _STATS:
            raise ValueError(f"unknown statistic {self.of!r}; use one of {_STATS}")

    def holds(self, mean: float, std: float = 0.0) -> bool:
        """Return whether the statistic of (``mean``, ``std``) satisfies the condition."""
        x = {"mean": mean, "lower": mean - std, "upper": mean + std}[self.of]
        return bool(_OPS[self.op](x, self.value))

    def __str__(self) -> str:
        stat = {"mean": "mean", "lower": "mean − sd", "upper": "mean + sd"}[self.of]
        return f"{stat} {self.op} {self.value:g}"


@dataclass(frozen=True)
class Claim:
    """One claim of a paper and the rule that decides whether we reproduced it."""

    id: str
    metric: str
    paper_value: float | None
    paper_text: str
    unit: str
    direction: str
    reproduced: Condition
    direction_only: Condition

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
            One of :data:`VERDICTS`.
        """
        if self.reproduced.holds(mean, std):
            return VERDICTS[0]
        if self.direction_only.holds(mean, std):
            return VERDICTS[1]
        return VERDICTS[2]

    @property
    def paper_display(self) -> str:
        """The paper's value as shown in tables (its words when qualitative)."""
        if self.paper_value is None:
            return f"qualitative: {self.paper_text}"
        return f"{self.paper_value:g} {self.unit}".strip()


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


def _claim(d: dict[str, Any]) -> Claim:
    return Claim(
        id=d["id"],
        metric=d["metric"],
        paper_value=None if d.get("paper_value") is None else float(d["paper_value"]),
        paper_text=d.get("paper_text", ""),
        unit=d.get("unit", ""),
        direction=d["direction"],
        reproduced=Condition(**d["reproduced"]),
        direction_only=Condition(**d["direction_only"]),
    )


def parse_registry(raw: dict[str, Any]) -> Registry:
    """Build a :class:`Registry` from the parsed YAML, checking its structure.

    Raises
    ------
    ValueError
        On a duplicate id, an unknown family or a bad claim direction.
    """
    families = dict(raw["families"])
    chapters = []
    seen: set[str] = set()
    order = {f: i for i, f in enumerate(families)}
    for d in sorted(raw["chapters"], key=lambda c: order.get(c.get("family"), -1)):
        if d["id"] in seen:
            raise ValueError(f"duplicate chapter id {d['id']!r}")
        seen.add(d["id"])
        if d["family"] not in families:
            raise ValueError(f"chapter {d['id']!r}: unknown family {d['family']!r}")
        claims = tuple(_claim(c) for c in d.get("claims", []))
        for c in claims:
            if c.direction not in ("higher", "lower"):
                raise ValueError(f"claim {d['id']}/{c.id}: direction must be 'higher' or 'lower'")
        chapters.append(
            Chapter(
                id=d["id"],
                title=d["title"],
                family=d["family"],
                notebook=d["notebook"],
                bibtex=d["bibtex"],
                parameters=dict(d.get("parameters", {})),
                claims=claims,
                datasets=tuple(d.get("datasets", [])),
                source=d.get("_source", ""),
            )
        )
    return Registry(families=families, chapters=tuple(chapters))


def registry_files() -> list[Path]:
    """The files the registry is read from: ``registry.yaml`` and ``chapters/*.yaml``."""
    return [_REGISTRY_FILE, *sorted(_CHAPTERS_DIR.glob("*.yaml"))]


@functools.cache
def load_registry() -> Registry:
    """Load and parse the registry (cached): the families, then every family's chapter file."""
    raw = yaml.safe_load(_REGISTRY_FILE.read_text())
    raw.setdefault("chapters", [])
    pkg = Path(__file__).parent
    for f in sorted(_CHAPTERS_DIR.glob("*.yaml")):
        for d in (yaml.safe_load(f.read_text()) or {}).get("chapters", []) or []:
            d["_source"] = f"lib/repro/{f.relative_to(pkg).as_posix()}"
            raw["chapters"].append(d)
    return parse_registry(raw)
