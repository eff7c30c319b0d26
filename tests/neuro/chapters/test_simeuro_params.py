"""The simeuro chapter refuses impossible parameters before any kernel starts, naming them."""

from __future__ import annotations

import pytest

from repro import params as rp
from repro.registry import load_registry

CHAPTER = load_registry().get("simeuro")


@pytest.mark.parametrize(("overrides", "named"), [
    ({"mesh": [2, 2]}, "mesh"),  # 64-100-10 on 32 x 32 crossbars needs 2 x 4 + 4 = 12 cores
    ({"mesh": [4, 4, 4]}, "mesh"),
    ({"sigmas": [0.05, 0.1]}, "sigmas"),
    ({"levels": [8, 8]}, "levels"),
    ({"noc_cycles": [1.0, 1.0]}, "noc_cycles"),
    ({"energy_pj": [1.0]}, "energy_pj"),
    ({"seeds": [1, 1]}, "seeds"),
])
def test_impossible_parameters_are_refused_by_name(overrides, named):
    with pytest.raises(rp.ParameterError, match=repr(named)):
        rp.resolve(CHAPTER, "smoke", overrides)
    rp.resolve(CHAPTER, "smoke")  # the profile itself passes
