"""Typed chapter parameters: profiles, overrides, their validation, and the driver's ``Params``.

Each chapter declares a schema in the registry (``type``, and optionally
``min``, ``max``, ``choices``).  Profiles live in ``params/<id>.yaml`` with a
``smoke``, a ``cpu`` and a ``paper`` section.  Every value that reaches a
notebook goes through :func:`validate` first, so a wrong name, type or range
fails before any kernel starts, with a message naming the parameter.

The contract between schema, notebook and driver: each chapter driver
defines a frozen, keyword-only ``Params`` dataclass (a :class:`ChapterParams`)
whose fields are the schema's parameters, with its cross-field checks in
``Params.checks()``.  :func:`validate` builds it and runs the checks, so they
too fail before a kernel starts; the notebook's setup is one line,
``p = notebook_params("<id>", globals())``, which hands it the checked
``Params``; the driver's ``run(p)`` returns its typed ``Results`` and
``claims(results)`` the ledger's evidence.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml

from repro.devices import DeviceError, check_device
from repro.paths import repo_root
from repro.registry import Chapter, load_registry

PROFILES = ("smoke", "cpu", "paper")
DEFAULT_PROFILE = "cpu"
_SCALARS: dict[str, type[Any]] = {"int": int, "float": float, "str": str, "bool": bool, "device": str}


class ParameterError(ValueError):
    """A parameter is unknown, of the wrong type or out of range."""


RUNTIME_NAMES = ("profile", "output_dir")
"""Values the runner hands a notebook beside the chapter's parameters (not part of ``Params``)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChapterParams:
    """The base of every chapter driver's ``Params``: frozen, keyword-only, checked before any work.

    A driver subclasses it with one field per schema parameter (the structure
    test checks that they match) and overrides :meth:`checks` with its
    cross-field checks, each raising through :func:`require`.
    """

    def checks(self) -> None:
        """Cross-field checks over the parameters; raise :class:`ParameterError` naming them (none by default)."""

    def values(self) -> dict[str, Any]:
        """The parameters as a plain mapping (for records and tables)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def require(ok: bool, params: ChapterParams, names: tuple[str, ...] | str, message: str) -> None:
    """Raise :class:`ParameterError` naming ``names`` and their values unless ``ok``.

    Parameters
    ----------
    ok
        The check's outcome.
    params
        The parameters checked (their values go into the message).
    names
        The parameter(s) the check is about.
    message
        What must hold, in words.
    """
    if ok:
        return
    names = (names,) if isinstance(names, str) else names
    got = ", ".join(f"{n}={getattr(params, n)!r}" for n in names)
    label = "parameter" if len(names) == 1 else "parameters"
    raise ParameterError(f"{label} {', '.join(repr(n) for n in names)}: {message} (got {got})")


P = TypeVar("P", bound=ChapterParams)


def params_class(chapter: Chapter) -> type[ChapterParams] | None:
    """The ``Params`` class of the chapter's driver (``None`` for a driver that has none yet)."""
    if not chapter.driver:
        return None
    cls = getattr(importlib.import_module(chapter.driver), "Params", None)
    return cls if isinstance(cls, type) and issubclass(cls, ChapterParams) else None


def build_params(chapter: Chapter, values: Mapping[str, Any]) -> ChapterParams | None:
    """The driver's ``Params`` from checked values, its cross-field checks run (``None`` without a ``Params``).

    Raises
    ------
    ParameterError
        From a failing cross-field check, naming its parameters.
    """
    cls = params_class(chapter)
    if cls is None:
        return None
    params = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
    params.checks()
    return params


def _check_scalar(name: str, kind: str, value: Any, spec: dict[str, Any]) -> Any:
    py = _SCALARS[kind]
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) and kind != "bool":
        raise ParameterError(f"parameter {name!r}: expected {kind}, got bool {value!r}")
    if not isinstance(value, py):
        raise ParameterError(f"parameter {name!r}: expected {kind}, got {type(value).__name__} {value!r}")
    if kind == "float" and spec.get("finite", True) and not math.isfinite(value):
        raise ParameterError(f"parameter {name!r}: {value!r} is not a finite number")
    if kind == "device":
        try:
            check_device(name, str(value))
        except DeviceError as exc:
            raise ParameterError(str(exc)) from None
    if "choices" in spec and value not in spec["choices"]:
        raise ParameterError(f"parameter {name!r}: {value!r} is not one of {spec['choices']}")
    if "min" in spec and value < spec["min"]:
        raise ParameterError(f"parameter {name!r}: {value!r} is below the minimum {spec['min']}")
    if "max" in spec and value > spec["max"]:
        raise ParameterError(f"parameter {name!r}: {value!r} is above the maximum {spec['max']}")
    return value


def check_value(name: str, spec: dict[str, Any], value: Any) -> Any:
    """Validate (and lightly coerce: int to float) one parameter value.

    Parameters
    ----------
    name
        The parameter's name, used in error messages.
    spec
        Its schema entry: ``type`` plus optional ``min``, ``max``, ``choices`` and,
        for a list, ``distinct`` (no value may repeat: seeds, arms, grid points).
        The type ``device`` (``cpu``, ``cuda`` or ``auto``) also refuses
        ``cuda`` where torch sees no CUDA device.
    value
        The value to check.

    Returns
    -------
    Any
        The value, with ints widened to floats where the type is ``float``.

    Raises
    ------
    ParameterError
        If the value has the wrong type or is out of range.
    """
    kind = spec["type"]
    if kind.startswith("list[") and kind.endswith("]"):
        inner = kind[5:-1]
        if not isinstance(value, (list, tuple)):
            raise ParameterError(f"parameter {name!r}: expected {kind}, got {type(value).__name__} {value!r}")
        if len(value) == 0:
            raise ParameterError(f"parameter {name!r}: expected a non-empty {kind}")
        if spec.get("distinct") and len(set(value)) != len(value):
            repeated = sorted({v for v in value if list(value).count(v) > 1}, key=str)
            raise ParameterError(f"parameter {name!r}: values must be distinct (each is one seed, arm or grid point), "
                                 f"got {list(value)!r}, repeating {repeated!r}")
        return [_check_scalar(f"{name}[{i}]", inner, v, spec) for i, v in enumerate(value)]
    if kind not in _SCALARS:
        raise ValueError(f"schema of {name!r} has unknown type {kind!r}")
    return _check_scalar(name, kind, value, spec)


def validate(chapter: Chapter, values: dict[str, Any], *, complete: bool = True) -> dict[str, Any]:
    """Validate a full set of parameter values against a chapter's schema.

    Parameters
    ----------
    chapter
        The chapter whose schema applies.
    values
        Parameter name to value.
    complete
        Also require every schema parameter to be present.

    Returns
    -------
    dict
        The checked (and coerced) values.

    Raises
    ------
    ParameterError
        Naming the first unknown, missing, mistyped or out-of-range parameter.
    """
    schema = chapter.parameters
    unknown = sorted(set(values) - set(schema))
    if unknown:
        raise ParameterError(
            f"chapter {chapter.id!r}: unknown parameter {unknown[0]!r}; known parameters: {', '.join(schema)}"
        )
    if complete:
        missing = [k for k in schema if k not in values]
        if missing:
            raise ParameterError(f"chapter {chapter.id!r}: parameter {missing[0]!r} has no value")
    checked = {k: check_value(k, schema[k], v) for k, v in values.items()}
    check_cross_fields(chapter, checked)
    if complete:
        try:
            build_params(chapter, checked)
        except ParameterError as exc:
            raise ParameterError(f"chapter {chapter.id!r}: {exc}") from None
    return checked


def check_cross_fields(chapter: Chapter, values: dict[str, Any]) -> None:
    """Apply the chapter's cross-field checks to the parameters they name that are present.

    Raises
    ------
    ParameterError
        Naming the parameters of the first check that fails, with their values.
    """
    for check in chapter.checks:
        if not all(p in values for p in check.params):
            continue
        if not check.holds(values):
            got = ", ".join(f"{p}={values[p]!r}" for p in check.params)
            names = ", ".join(repr(p) for p in check.params)
            raise ParameterError(f"chapter {chapter.id!r}: parameters {names}: {check.message} (got {got})")


def parse_override(text: str) -> tuple[str, Any]:
    """Parse a ``key=value`` override; the value is read as YAML (``3``, ``0.1``, ``[1, 2]``, ``abc``)."""
    if "=" not in text:
        raise ParameterError(f"override {text!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ParameterError(f"parameter {key!r}: cannot parse {raw!r}: {exc}") from exc
    return key, value


def load_profiles(chapter: Chapter, root: Path | None = None) -> dict[str, dict[str, Any]]:
    """Read ``params/<id>.yaml`` and return its profile sections.

    Raises
    ------
    ParameterError
        In one line naming the file (and the profile) when the file is not valid
        YAML, is not a mapping, lacks a profile or has a profile that is not a mapping.
    """
    path = (root or repo_root()) / chapter.params_file
    if not path.is_file():
        raise ParameterError(f"chapter {chapter.id!r} has no profile file {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ParameterError(f"{path}: YAML error{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParameterError(f"{path}: expected a mapping of profiles, got {type(data).__name__}")
    missing = [p for p in PROFILES if p not in data]
    if missing:
        raise ParameterError(f"{path}: missing profile section(s) {missing}")
    for p in PROFILES:
        if data[p] is not None and not isinstance(data[p], dict):
            raise ParameterError(f"{path}: profile {p!r} must be a mapping of parameter: value, got {type(data[p]).__name__}")
    return {p: dict(data[p] or {}) for p in PROFILES}


def resolve(
    chapter: Chapter, profile: str, overrides: dict[str, Any] | None = None, root: Path | None = None
) -> dict[str, Any]:
    """Return the validated parameters of ``chapter`` at ``profile`` with ``overrides`` applied."""
    if profile not in PROFILES:
        raise ParameterError(f"parameter 'profile': {profile!r} is not one of {list(PROFILES)}")
    values = load_profiles(chapter, root)[profile]
    values.update(overrides or {})
    return validate(chapter, values)


def _from_text(name: str, spec: dict[str, Any], value: Any) -> Any:
    """A list given as text (``papermill -p phis "[2, 4]"``) parsed as YAML; other values unchanged."""
    if spec["type"].startswith("list[") and isinstance(value, str):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ParameterError(f"parameter {name!r}: cannot read {value!r} as a list: {exc}") from None
    return value


_IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython", "open"})
_PLAIN = (str, int, float, bool, list, tuple, dict, type(None))


def unknown_names(chapter: Chapter, namespace: Mapping[str, Any]) -> list[str]:
    """Plain values in a notebook's globals that are neither a parameter of the chapter nor a runtime value.

    Papermill injects every ``-p name value`` it is given, known or not; at the
    first line of the setup cell the globals hold only the parameters, what
    papermill injected and IPython's own names, so a plain value with another
    name is a misspelt or unknown parameter.
    """
    return sorted(k for k, v in namespace.items()
                  if not k.startswith("_") and k not in chapter.parameters and k not in RUNTIME_NAMES
                  and k not in _IPYTHON_NAMES and isinstance(v, _PLAIN))


def notebook_params(chapter_id: str, namespace: Mapping[str, Any]) -> ChapterParams:
    """The chapter's checked ``Params`` from the values a notebook was given, however it was started.

    ``repro run`` validates before the kernel starts; a reader who runs the
    notebook with papermill directly (``papermill nb.ipynb out.ipynb -p phis
    "[2]"``) reaches this check instead, as the first line of the setup cell.

    Parameters
    ----------
    chapter_id
        The chapter's registry id.
    namespace
        The notebook's globals, holding the parameters cell's (and papermill's injected) values.

    Raises
    ------
    ParameterError
        Naming an unknown (misspelt) parameter, the first missing, mistyped or out-of-range one, or the
        parameters of a failing cross-field check.
    """
    chapter = load_registry().get(chapter_id)
    unknown = unknown_names(chapter, namespace)
    if unknown:
        raise ParameterError(f"chapter {chapter.id!r}: unknown parameter {unknown[0]!r}; known parameters: "
                             f"{', '.join(chapter.parameters)}")
    values = validate(chapter, {k: _from_text(k, spec, namespace[k]) for k, spec in chapter.parameters.items()
                                if k in namespace})
    params = build_params(chapter, values)
    if params is None:
        raise ParameterError(f"chapter {chapter.id!r}: its driver {chapter.driver} defines no Params")
    return params


def injected(chapter_id: str, namespace: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the parameters a chapter notebook was given, however it was started.

    ``repro run`` validates before the kernel starts; a reader who runs the
    notebook with papermill directly (``papermill nb.ipynb out.ipynb -p phis
    "[2]"``) reaches this check instead, as the first call of the setup cell.

    Parameters
    ----------
    chapter_id
        The chapter's registry id.
    namespace
        The notebook's globals, holding the parameters cell's (and papermill's
        injected) values.

    Returns
    -------
    dict
        The checked values, lists given as text parsed; update the notebook's
        globals with them.

    Raises
    ------
    ParameterError
        Naming the first missing, mistyped or out-of-range parameter, or the
        parameters of a failing cross-field check.
    """
    chapter = load_registry().get(chapter_id)
    unknown = unknown_names(chapter, namespace)
    if unknown:
        raise ParameterError(f"chapter {chapter.id!r}: unknown parameter {unknown[0]!r}; known parameters: "
                             f"{', '.join(chapter.parameters)}")
    values = {k: _from_text(k, spec, namespace[k]) for k, spec in chapter.parameters.items() if k in namespace}
    return validate(chapter, values)
