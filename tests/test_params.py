"""Parameter schemas: bad input fails before any work starts, naming the parameter."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from repro import params
from repro.registry import load_registry

CH = load_registry().get("fedlama")


def test_profiles_validate(root):
    for prof in params.PROFILES:
        values = params.resolve(CH, prof)
        assert set(values) == set(CH.parameters)


@pytest.mark.parametrize(
    "override, fragment",
    [
        ({"bogus": 1}, "unknown parameter 'bogus'"),
        ({"rounds": "abc"}, "parameter 'rounds': expected int"),
        ({"rounds": 2.5}, "parameter 'rounds': expected int"),
        ({"rounds": True}, "parameter 'rounds': expected int, got bool"),
        ({"alpha": -1.0}, "parameter 'alpha': -1.0 is below the minimum"),
        ({"momentum": 1.5}, "parameter 'momentum': 1.5 is above the maximum"),
        ({"dataset": "cifar10"}, "parameter 'dataset': 'cifar10' is not one of"),
        ({"phis": 2}, "parameter 'phis': expected list[int]"),
        ({"phis": [2, 0]}, "parameter 'phis[1]': 0 is below the minimum"),
        ({"seeds": []}, "parameter 'seeds': expected a non-empty"),
        ({"seeds": [3, 1, 3]}, "parameter 'seeds': values must be distinct"),
        ({"phis": [2, 4, 2]}, "parameter 'phis': values must be distinct"),
    ],
)
def test_bad_values_name_the_parameter(override, fragment):
    with pytest.raises(params.ParameterError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        params.resolve(CH, "smoke", override)


def test_int_widens_to_float():
    assert params.resolve(CH, "smoke", {"alpha": 1})["alpha"] == 1.0
    assert isinstance(params.resolve(CH, "smoke", {"alpha": 1})["alpha"], float)


def test_unknown_profile():
    with pytest.raises(params.ParameterError, match="'profile'"):
        params.resolve(CH, "huge")


@pytest.mark.parametrize("text, expected", [("a=3", ("a", 3)), ("a=0.5", ("a", 0.5)), ("a=[1, 2]", ("a", [1, 2])),
                                            ("a=x", ("a", "x")), ("a=", ("a", ""))])
def test_parse_override(text, expected):
    assert params.parse_override(text) == expected


def test_parse_override_needs_equals():
    with pytest.raises(params.ParameterError, match="key=value"):
        params.parse_override("rounds")


def test_cli_refuses_before_kernel(out_root):
    """`repro run` exits 2 with the parameter's name and starts nothing (no staging, no results)."""
    proc = subprocess.run([sys.executable, "-m", "repro.cli", "run", "fedlama", "--profile", "smoke", "-p", "rounds=-3"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "parameter 'rounds'" in proc.stderr
    assert not (out_root / "build").exists() and not (out_root / "results").exists()


def test_dry_run_reports_plan(out_root):
    proc = subprocess.run([sys.executable, "-m", "repro.cli", "run", "fedlama", "--profile", "smoke", "--dry-run",
                           "-p", "rounds=4"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "rounds = 4" in proc.stdout and "expected time" in proc.stdout
    assert not (out_root / "build").exists()


def _chapter_with_checks():
    from repro.registry import parse_registry

    reg = parse_registry({
        "families": {"fam": "Family"},
        "chapters": [{
            "id": "x", "title": "X", "family": "fam", "notebook": "n", "bibtex": "b",
            "parameters": {"rounds": {"type": "int", "min": 1}, "phis": {"type": "list[int]", "min": 1},
                           "num_clients": {"type": "int", "min": 1}, "active_clients": {"type": "int", "min": 1},
                           "lr": {"type": "float", "min": 0.0}, "offset": {"type": "float", "finite": False}},
            "checks": [
                {"params": ["rounds", "phis"], "expr": "all(rounds % p == 0 for p in phis)",
                 "message": "rounds must be a multiple of every phi"},
                {"params": ["active_clients", "num_clients"], "expr": "active_clients <= num_clients",
                 "message": "more active clients than clients"},
            ],
        }],
    })
    return reg.get("x")


def test_cross_field_checks_name_their_parameters():
    ch = _chapter_with_checks()
    ok = {"rounds": 8, "phis": [2, 4], "num_clients": 16, "active_clients": 4, "lr": 0.1, "offset": 0.0}
    assert params.validate(ch, ok) == ok
    with pytest.raises(params.ParameterError, match=r"'rounds', 'phis': rounds must be a multiple.*rounds=6"):
        params.validate(ch, {**ok, "rounds": 6, "phis": [4]})
    with pytest.raises(params.ParameterError, match=r"'active_clients', 'num_clients'.*active_clients=100"):
        params.validate(ch, {**ok, "active_clients": 100})


def test_registered_cross_field_checks_hold_for_every_profile(root):
    for ch in load_registry().chapters:
        for prof in params.PROFILES:
            params.resolve(ch, prof)  # raises naming the parameters if a profile breaks a check


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_refused(bad):
    ch = _chapter_with_checks()
    with pytest.raises(params.ParameterError, match="parameter 'lr'.*not a finite number"):
        params.check_value("lr", ch.parameters["lr"], bad)
    assert params.check_value("offset", ch.parameters["offset"], bad) is bad  # the schema allows it


def test_nan_override_refused_from_the_command_line(out_root):
    proc = subprocess.run([sys.executable, "-m", "repro.cli", "run", "fedlama", "--profile", "smoke", "-p", "lr=.nan"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "parameter 'lr'" in proc.stderr and "finite" in proc.stderr


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("smoke: [1, 2]\ncpu: {}\npaper: {}\n", "profile 'smoke' must be a mapping"),
        ("smoke:\n  lr: 0.1\n cpu: {}\npaper: {}\n", "YAML error at line"),
        ("- smoke\n- cpu\n", "expected a mapping of profiles"),
    ],
)
def test_broken_params_file_is_one_line(tmp_path, text, fragment):
    from dataclasses import replace

    (tmp_path / "params").mkdir()
    ch = replace(_chapter_with_checks(), id="broken")
    (tmp_path / "params" / "broken.yaml").write_text(text)
    with pytest.raises(params.ParameterError, match=fragment) as info:
        params.load_profiles(ch, tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and "broken.yaml" in msg


def test_injected_parameters_are_checked_and_lists_read_from_text():
    ns = {**params.resolve(CH, "smoke"), "phis": "[2, 4]", "profile": "smoke", "output_dir": "x"}
    checked = params.injected("fedlama", ns)
    assert checked["phis"] == [2, 4] and "profile" not in checked
    with pytest.raises(params.ParameterError, match="parameter 'phis\\[0\\]': 0 is below"):
        params.injected("fedlama", {**ns, "phis": "[0]"})
    with pytest.raises(params.ParameterError, match="parameter 'lr'"):
        params.injected("fedlama", {**ns, "lr": "fast"})


def test_a_misspelt_parameter_given_to_papermill_is_refused_by_name():
    """``papermill ... -p roundz 4`` injects ``roundz``; the first setup line refuses it instead of ignoring it."""
    ns = {**params.resolve(CH, "smoke"), "profile": "smoke", "output_dir": "x", "In": [], "Out": {},
          "get_ipython": print, "notebook_params": params.notebook_params, "_i1": "code"}
    assert params.unknown_names(CH, ns) == []
    with pytest.raises(params.ParameterError, match="unknown parameter 'roundz'"):
        params.injected("fedlama", {**ns, "roundz": 4})
    with pytest.raises(params.ParameterError, match="unknown parameter 'roundz'"):
        params.notebook_params("fedlama", {**ns, "roundz": 4})


def test_params_checks_run_before_any_kernel(monkeypatch):
    """A driver's ``Params.checks()`` is part of validation: a failing check names its parameters."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Strict(params.ChapterParams):
        rounds: int = 1

        def checks(self) -> None:
            params.require(self.rounds > 100, self, "rounds", "must exceed 100")

    monkeypatch.setattr(params, "params_class", lambda chapter: Strict)
    with pytest.raises(params.ParameterError, match=r"parameter 'rounds': must exceed 100 \(got rounds=1\)"):
        params.build_params(CH, {"rounds": 1})


REGISTRY = load_registry()


@pytest.mark.parametrize("chapter", REGISTRY.chapters, ids=lambda c: c.id)
def test_every_distinct_list_refuses_a_repeat_by_name_and_every_seeds_list_is_distinct(root, chapter):
    """Repeated seeds, arms or grid points are refused by the schema, before any kernel, in every chapter."""
    if "seeds" in chapter.parameters:
        assert chapter.parameters["seeds"].get("distinct") is True, "a seeds list must declare distinct: true"
    for name, spec in chapter.parameters.items():
        if not spec.get("distinct"):
            continue
        assert spec["type"].startswith("list["), f"{name}: distinct is for lists"
        first = params.resolve(chapter, "smoke")[name][0]
        with pytest.raises(params.ParameterError, match=f"parameter '{name}': values must be distinct"):
            params.resolve(chapter, "smoke", {name: [first, first]})
