"""A per-layer table of any torch model: shapes, parameters and forward FLOPs, read by forward hooks.

:func:`layer_table` runs one forward pass with a hook on every leaf module
and records, per call, the input and output shapes (per sample, batch
dimension dropped), the parameter count and the forward FLOPs per sample.
FLOP convention (documented because papers differ): one multiply-add counts
as 2 FLOPs, so a convolution costs ``2 * (C_in / groups) * prod(K) * C_out *
prod(output spatial)`` and a linear layer ``2 * in * out`` (bias adds and
element-wise layers are not counted).  The layer-wise SAM chapter uses it as
its compute proxy; it is also the input a per-strategy parallelism oracle
needs (per-layer x, w, y and FLOPs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass(frozen=True, kw_only=True)
class LayerRow:
    """One leaf-module call of a forward pass.

    Attributes
    ----------
    name
        The module's qualified name in the model (``"3.0"``, ``"fc1"`` ...).
    kind
        Its class name (``Conv2d``, ``Linear``, ``BatchNorm2d`` ...).
    in_shape, out_shape
        Per-sample shapes of the first input and of the output (batch dimension dropped).
    weight_shape
        Shape of the ``weight`` parameter, or ``()`` when the module has none.
    params
        Number of parameters owned by the module (not counting its children).
    flops
        Forward FLOPs per sample (multiply-add = 2).
    """

    name: str
    kind: str
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    params: int
    flops: float

    @property
    def in_elements(self) -> int:
        """Elements of one sample's input (|x|)."""
        return math.prod(self.in_shape)

    @property
    def out_elements(self) -> int:
        """Elements of one sample's output (|y|)."""
        return math.prod(self.out_shape)

    @property
    def top(self) -> str:
        """The first component of the name: the top-level child of the model that holds this layer."""
        return self.name.split(".")[0]


def forward_flops(module: nn.Module, out_shape: tuple[int, ...]) -> float:
    """Forward FLOPs per sample of a leaf module with per-sample output shape ``out_shape``.

    Parameters
    ----------
    module
        A leaf module.
    out_shape
        Its per-sample output shape (channels first).

    Returns
    -------
    float
        ``2 * (C_in / groups) * prod(kernel) * C_out * prod(out spatial)`` for convolutions,
        ``2 * in_features * out_features`` (times any leading per-sample dimensions) for linear layers,
        0 for everything else.
    """
    if isinstance(module, _CONV):
        k = math.prod(module.kernel_size)
        return 2.0 * module.in_channels // module.groups * k * module.out_channels * math.prod(out_shape[1:])
    if isinstance(module, nn.Linear):
        return 2.0 * module.in_features * module.out_features * math.prod(out_shape[:-1])
    return 0.0


def layer_table(model: nn.Module, example: torch.Tensor) -> list[LayerRow]:
    """Run ``model(example)`` once and tabulate every leaf-module call.

    Parameters
    ----------
    model
        Any torch model; only leaf modules (no children) are recorded.
    example
        A batch of inputs (at least one sample); the table is per sample.

    Returns
    -------
    list of LayerRow
        In call order.  The model's training flag is restored and no gradient is recorded.
    """
    rows: list[LayerRow] = []
    names = {m: n for n, m in model.named_modules()}

    def hook(mod: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        x = inputs[0] if inputs else output
        w = getattr(mod, "weight", None)
        out_shape = tuple(output.shape[1:])
        rows.append(LayerRow(name=names[mod], kind=type(mod).__name__, in_shape=tuple(x.shape[1:]), out_shape=out_shape,
                             weight_shape=tuple(w.shape) if isinstance(w, torch.Tensor) else (),
                             params=sum(p.numel() for p in mod.parameters(recurse=False)), flops=forward_flops(mod, out_shape)))

    handles = [m.register_forward_hook(hook) for m in model.modules() if not list(m.children())]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(example)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return rows


def flops_by_child(model: nn.Sequential, example: torch.Tensor) -> list[float]:
    """Forward FLOPs per sample of each top-level child of a sequential model (0 for parameter-free ones)."""
    table = layer_table(model, example)
    return [sum(r.flops for r in table if r.top == str(i)) for i in range(len(model))]
