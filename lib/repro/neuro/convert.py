"""ANN-to-SNN conversion of a ReLU MLP (rate coding, integrate-and-fire with subtractive reset).

Data-based normalisation (Diehl et al. 2015; Rueckauer et al. 2017): with
``lambda_l`` a high percentile of layer ``l``'s ReLU activations on training
data (``lambda_0 = 1`` for inputs in [0, 1]), layer ``l``'s weights become
``W_l * lambda_{l-1} / lambda_l`` and its biases ``b_l / lambda_l``, so every
layer's activations stay below the firing threshold's rate limit of one spike
per tick.  The normalised weights are then scaled by ``scale`` and rounded to
integers, with the threshold set to ``scale``: every membrane sum is then an
exact integer in floating point, whatever the order of summation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from repro.datasets import Dataset
from repro.models import mlp


@dataclass(frozen=True, kw_only=True)
class SpikingNetwork:
    """An integer-weight spiking MLP.

    Attributes
    ----------
    weights
        Per layer ``(fan_in, fan_out)`` integer-valued float64 matrices.
    biases
        Per layer ``(fan_out,)`` integer-valued currents added every tick.
    threshold
        Firing threshold (the same integer for every neuron).
    """

    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    threshold: float

    @property
    def sizes(self) -> list[int]:
        """Neurons per layer, inputs first."""
        return [self.weights[0].shape[0]] + [w.shape[1] for w in self.weights]


def train_mlp(data: Dataset, hidden: list[int], epochs: int, seed: int, lr: float = 0.05) -> nn.Sequential:
    """Train a ReLU MLP with SGD (momentum 0.9, batch 32) on ``data``'s training split."""
    torch.manual_seed(seed)
    model = mlp(data.num_features, hidden, data.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model


def ann_accuracy(model: nn.Sequential, data: Dataset, n_test: int | None = None) -> float:
    """Accuracy of the ANN on the first ``n_test`` test images (all by default)."""
    x, y = data.x_test[:n_test], data.y_test[:n_test]
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def convert(model: nn.Sequential, x_train: np.ndarray, percentile: float, scale: int) -> SpikingNetwork:
    """Normalise ``model``'s layers on ``x_train`` and round them to an integer-weight SNN.

    Parameters
    ----------
    model
        A ReLU MLP from :func:`repro.models.mlp`.
    x_train
        Inputs for the activation percentiles.
    percentile
        Percentile of each layer's activations used as its scale (99.9 is usual).
    scale
        Integer weight resolution: the threshold, and the value a normalised weight of 1 becomes.
    """
    linears = [m for m in model if isinstance(m, nn.Linear)]
    acts, h = [], torch.from_numpy(x_train)
    with torch.no_grad():
        for i, lin in enumerate(linears):
            h = lin(h)
            if i < len(linears) - 1:
                h = torch.relu(h)
            acts.append(h.numpy())
    weights, biases, prev = [], [], 1.0
    for lin, a in zip(linears, acts):
        lam = float(np.percentile(np.maximum(a, 0.0), percentile)) or 1.0
        w = lin.weight.detach().numpy().T.astype(np.float64) * prev / lam
        b = lin.bias.detach().numpy().astype(np.float64) / lam
        weights.append(np.round(w * scale))
        biases.append(np.round(b * scale))
        prev = lam
    return SpikingNetwork(weights=tuple(weights), biases=tuple(biases), threshold=float(scale))


def input_spikes(x: np.ndarray, ticks: int) -> np.ndarray:
    """Deterministic rate coding: an integrate-and-fire encoder per pixel, ``(ticks, batch, features)`` 0/1."""
    v = np.zeros_like(x, dtype=np.float64)
    out = np.zeros((ticks, *x.shape))
    for t in range(ticks):
        v += x
        fired = v >= 1.0
        out[t] = fired
        v -= fired
    return out
