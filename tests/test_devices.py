"""The ``device`` parameter: refused before any work where the machine lacks it, resolved by the drivers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from repro import params
from repro.devices import DEVICES, DeviceError, check_device, resolve_device
from repro.registry import load_registry

NO_CUDA = not torch.cuda.is_available()
DEVICE_SPEC = {"type": "device"}


@pytest.mark.skipif(not NO_CUDA, reason="this machine has a CUDA device")
def test_cuda_is_refused_naming_the_parameter_where_there_is_none():
    with pytest.raises(params.ParameterError, match=r"parameter 'device'.*no CUDA device"):
        params.check_value("device", DEVICE_SPEC, "cuda")
    with pytest.raises(DeviceError, match="'device'"):
        resolve_device("cuda")


def test_unknown_device_is_refused():
    with pytest.raises(params.ParameterError, match=r"parameter 'device'.*'tpu' is not one of"):
        params.check_value("device", DEVICE_SPEC, "tpu")
    with pytest.raises(DeviceError, match="not one of"):
        check_device("dev", "gpu")


def test_auto_takes_cuda_only_where_there_is_one():
    assert params.check_value("device", DEVICE_SPEC, "auto") == "auto"
    assert resolve_device("auto").type == ("cpu" if NO_CUDA else "cuda")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(not NO_CUDA, reason="this machine has a CUDA device")
def test_a_chapter_asking_for_cuda_fails_before_its_kernel_starts(out_root, tmp_path):
    """``repro run -p device=cuda`` on a machine without a GPU ends at the parameter check."""
    chapter = next(ch for ch in load_registry().chapters if ch.parameters.get("device", {}).get("type") == "device")
    with pytest.raises(params.ParameterError, match="parameter 'device'"):
        params.resolve(chapter, "smoke", {"device": "cuda"})


def test_every_profile_of_every_torch_chapter_names_a_device_it_knows(root):
    """Each chapter with a ``device`` parameter gives it a known value in every profile; cpu and smoke stay on cpu."""
    for ch in load_registry().chapters:
        if "device" not in ch.parameters:
            continue
        assert ch.parameters["device"]["type"] == "device", ch.id
        profiles = params.load_profiles(ch)
        for name, values in profiles.items():
            assert values["device"] in DEVICES, (ch.id, name)
        assert profiles["smoke"]["device"] == profiles["cpu"]["device"] == "cpu", ch.id


def _pins(path: Path) -> dict[str, str]:
    """``name -> version`` of a lock file's ``name==version`` lines (names lower-cased, ``_`` as ``-``)."""
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_gpu_lock_is_the_cpu_lock_with_cuda_torch(root):
    """envs/gpu.lock pins every package of envs/cpu.lock at the same version, torch as its CUDA build."""
    cpu, gpu = _pins(root / "envs" / "cpu.lock"), _pins(root / "envs" / "gpu.lock")
    assert cpu["torch"].endswith("+cpu") and gpu["torch"] == cpu["torch"].removesuffix("+cpu")
    differ = {k: (v, gpu.get(k)) for k, v in cpu.items() if k != "torch" and gpu.get(k) != v}
    assert not differ, f"gpu.lock departs from cpu.lock: {differ}"
    cuda = [k for k in gpu if k.startswith("nvidia-")]
    assert any(k.startswith("nvidia-cudnn") for k in cuda) and any(k.startswith("nvidia-nccl") for k in cuda)
    assert not [v for v in gpu.values() if "+cpu" in v]
