"""Typed chapter parameters: profiles, overrides and their validation.

Each chapter declares a schema in the registry (``type``, and optionally
``min``, ``max``, ``choices``).  Profiles live in ``params/<id>.yaml`` with a
``smoke``, a ``cpu`` and a ``paper`` section.  Every value that reaches a
notebook goes through :func:`validate` first, so a wrong name, type or range
fails before any kernel starts, with a message naming the parameter.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import yaml

from repro.devices import DeviceError, check_device
from repro.paths import repo_root
from repro.registry import Chapter, load_registry

PROFILES = ("smoke", "cpu", "paper")
DEFAULT_PROFILE = "cpu"
_SCALARS = {"int": int, "float": float, "str": str, "bool": bool, "device": str}


class ParameterError(ValueError):
    """A parameter is unknown, of the wrong type or out of range."""


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
            check_device(name, value)
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
        Its schema entry: ``type`` plus optional ``min``, ``max``, ``choices``.
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
    values = {k: _from_text(k, spec, namespace[k]) for k, spec in chapter.parameters.items() if k in namespace}
    return validate(chapter, values)
