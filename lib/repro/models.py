"""Small torch models written by hand (torchvision is not installable beside torch 2.13)."""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from repro.validation import check_positive_int

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "leaky_relu": lambda: nn.LeakyReLU(0.3),
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
}
"""Activation factories by name (``"silu"`` is Swish)."""


MLP_INITS = ("torch", "he")
"""Initialisations :func:`mlp` knows: torch's default for ``nn.Linear``, or He et al.'s for ReLU layers."""


def mlp(in_features: int, hidden: Sequence[int], num_classes: int, *, init: str = "torch") -> nn.Sequential:
    """A ReLU multilayer perceptron ``in -> hidden... -> classes`` with named layers ``fc0, fc1, ...``.

    Parameters
    ----------
    in_features, hidden, num_classes
        Input width, hidden widths, output width.
    init
        ``"torch"``: ``nn.Linear``'s default (weights uniform in ``±1/sqrt(fan_in)``, variance
        ``1/(3 fan_in)``: with the ReLU's halving, the weights scale the features' root mean square by about
        ``1/sqrt(6)`` a layer); ``"he"``: every weight from He et al.'s normal initialisation for ReLU
        (variance ``2/fan_in``, which keeps the scale), every bias zero.
    """
    if init not in MLP_INITS:
        raise ValueError(f"init: expected one of {MLP_INITS}, got {init!r}")
    dims = [in_features, *hidden, num_classes]
    layers: list[tuple[str, nn.Module]] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        linear = nn.Linear(a, b)
        if init == "he":
            nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")
            nn.init.zeros_(linear.bias)
        layers.append((f"fc{i}", linear))
        if i < len(dims) - 2:
            layers.append((f"relu{i}", nn.ReLU()))
    return nn.Sequential(OrderedDict(layers))


@torch.no_grad()
def linear_input_rms(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """Root mean square of what every ``nn.Linear`` of ``model`` receives on the batch ``x``, by layer name.

    It shows how the scale of the features changes with depth: the input of the last layer is what a
    client that trains only that layer learns from.
    """
    seen: dict[str, float] = {}

    def recorder(name: str) -> Callable[..., None]:
        def record(_module: nn.Module, args: tuple[torch.Tensor, ...], _out: torch.Tensor) -> None:
            seen[name] = float(args[0].pow(2).mean().sqrt())
        return record

    hooks = [module.register_forward_hook(recorder(name))
             for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    try:
        model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


class BasicBlock(nn.Module):
    """ResNet basic block (two 3x3 convolutions and a shortcut)."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.short(x))


def resnet_cifar(depth: int = 20, num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """He et al.'s CIFAR ResNet (depth = 6n+2; 20 gives ResNet20), for the paper profiles."""
    if (depth - 2) % 6:
        raise ValueError(f"depth must be 6n+2, got {depth}")
    n = (depth - 2) // 6
    layers: list[nn.Module] = [nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(n):
            layers.append(BasicBlock(cin, cout, stride if i == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes)]
    return nn.Sequential(*layers)


def get_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """The model's state as numpy arrays (copies), keyed by parameter name."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def set_weights(model: nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Load numpy arrays (a full or partial state) into ``model`` in place."""
    state = model.state_dict()
    for k, v in weights.items():
        if k not in state:
            raise KeyError(f"model has no parameter {k!r}")
        arr = np.asarray(v)
        if arr.size != state[k].numel():
            raise ValueError(f"parameter {k!r}: got {arr.size} values for shape {tuple(state[k].shape)}")
        if state[k].device.type == "cpu":  # numpy copies in place, read-only sources included
            np.copyto(state[k].numpy(), arr.reshape(state[k].shape), casting="same_kind")
        else:
            state[k].copy_(torch.from_numpy(np.array(arr).reshape(state[k].shape)))


def count_parameters(model: nn.Module) -> dict[str, int]:
    """Number of scalars in each entry of the state dict."""
    return {k: int(v.numel()) for k, v in model.state_dict().items()}


@contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Run a block with ``torch.set_num_threads(n)``, restoring the old value after.

    The models here are tiny; on a busy 2-core machine one intra-op thread is
    often many times faster than two.

    Parameters
    ----------
    n
        Number of intra-op threads inside the block.
    """
    n = check_positive_int("n", n)
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
