"""Parameter schemas: bad input fails before any work starts, naming the parameter."""

from __future__ import annotations

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
