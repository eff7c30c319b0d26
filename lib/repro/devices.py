"""Where a chapter's torch code computes: the ``device`` parameter.

Every torch-based chapter declares ``device: {type: device}`` in its schema.
Its values are ``cpu`` (every profile's default here), ``cuda`` (fails
before any work where torch sees no CUDA device, naming the parameter) and
``auto`` (``cuda`` where there is one, else ``cpu``).  Parameter checking
(:mod:`repro.params`) calls :func:`check_device`; drivers turn the value into
a :class:`torch.device` with :func:`resolve_device`.

torch is imported inside the functions, so checking parameters that name no
CUDA device does not load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICES = ("cpu", "cuda", "auto")
"""The values a ``device`` parameter takes."""


class DeviceError(ValueError):
    """A device was requested that this machine does not have."""


def cuda_available() -> bool:
    """Whether torch sees a CUDA device."""
    import torch

    return bool(torch.cuda.is_available())


def check_device(name: str, value: str) -> str:
    """Return ``value`` if it is a device this machine can run, else raise naming ``name``.

    Parameters
    ----------
    name
        The parameter's name, used in the message.
    value
        ``cpu``, ``cuda`` or ``auto``.

    Returns
    -------
    str
        ``value`` unchanged (``auto`` is resolved later, by :func:`resolve_device`).

    Raises
    ------
    DeviceError
        If ``value`` is not one of :data:`DEVICES`, or is ``cuda`` where torch sees no CUDA device.
    """
    if value not in DEVICES:
        raise DeviceError(f"parameter {name!r}: {value!r} is not one of {list(DEVICES)}")
    if value == "cuda" and not cuda_available():
        raise DeviceError(f"parameter {name!r}: 'cuda' was requested but torch sees no CUDA device on this "
                          "machine; use 'cpu', or 'auto' to take a GPU only where there is one")
    return value


def resolve_device(value: str) -> torch.device:
    """The :class:`torch.device` a ``device`` parameter names.

    Parameters
    ----------
    value
        ``cpu``, ``cuda`` or ``auto`` (``cuda`` where available, else ``cpu``).

    Returns
    -------
    torch.device
        The device to put models and batches on.

    Raises
    ------
    DeviceError
        As :func:`check_device` does.
    """
    import torch

    check_device("device", value)
    if value == "auto":
        value = "cuda" if cuda_available() else "cpu"
    return torch.device(value)


def synchronize(device: torch.device) -> None:
    """Wait for the kernels queued on ``device`` (CUDA runs them asynchronously); a no-op on the CPU.

    Call it before reading a clock around GPU work, so that the time covers the work itself.

    Parameters
    ----------
    device
        The device the timed work ran on.
    """
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
