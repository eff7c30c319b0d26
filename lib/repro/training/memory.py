"""Out-of-core execution of a chain of blocks: swap, recompute, and a tensor-level memory accountant.

Each block of an ``nn.Sequential`` gets a policy:

- ``keep``: ordinary autograd, the tensors saved for backward stay where they are;
- ``swap``: the tensors saved for backward are packed into a store (host memory, or files on disk) by
  ``torch.autograd.graph.saved_tensors_hooks`` and unpacked when backward needs them;
- ``recompute``: ``torch.utils.checkpoint`` keeps only the block's input and reruns its forward during
  backward.

:class:`Accountant` records every tensor autograd saves (block, shape, bytes, whether it is a
parameter); :func:`profile_chain` measures each block's forward and backward time and its saved bytes,
the inputs of the two-stream model in :mod:`repro.training.ooc_sim`.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from repro.devices import synchronize

POLICIES = ("keep", "swap", "recompute")


class HostStore:
    """Swapped tensors kept as copies in ordinary (host) memory; counts the bytes moved each way.

    A tensor from a GPU is copied to the host and returned to its device by :meth:`get`.
    """

    def __init__(self) -> None:
        self._data: dict[int, tuple[torch.Tensor, torch.device]] = {}
        self._next = 0
        self.bytes_out = 0
        self.bytes_in = 0

    def put(self, t: torch.Tensor) -> int:
        """Store a host copy of ``t``; returns its key."""
        key = self._next
        self._next += 1
        self._data[key] = (t.detach().to("cpu", copy=True), t.device)
        self.bytes_out += t.numel() * t.element_size()
        return key

    def get(self, key: int) -> torch.Tensor:
        """Return (and forget) the tensor stored under ``key``, on the device it came from."""
        t, device = self._data.pop(key)
        self.bytes_in += t.numel() * t.element_size()
        return t.to(device)


class DiskStore(HostStore):
    """Swapped tensors written to raw files in a folder (``numpy.tofile``) and read back on demand."""

    def __init__(self, folder: str | Path | None = None) -> None:
        super().__init__()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if folder is None:
            self._tmp = tempfile.TemporaryDirectory()
            folder = self._tmp.name
        self.folder = Path(folder)
        self._meta: dict[int, tuple[torch.dtype, tuple[int, ...], torch.device]] = {}

    def put(self, t: torch.Tensor) -> int:
        """Write ``t`` to a file (through host memory); returns its key."""
        key = self._next
        self._next += 1
        a = t.detach().contiguous().cpu().numpy()
        a.tofile(self.folder / f"{key}.bin")
        self._meta[key] = (t.dtype, tuple(t.shape), t.device)
        self.bytes_out += a.nbytes
        return key

    def get(self, key: int) -> torch.Tensor:
        """Read the tensor stored under ``key`` back from its file onto its device (and delete the file)."""
        dtype, shape, device = self._meta.pop(key)
        path = self.folder / f"{key}.bin"
        a = np.fromfile(path, dtype=torch.empty(0, dtype=dtype).numpy().dtype).reshape(shape)
        path.unlink()
        self.bytes_in += a.nbytes
        return torch.from_numpy(a).to(device)


@dataclass(frozen=True, kw_only=True)
class SavedTensor:
    """One tensor saved for backward: the block that saved it, its shape, bytes and whether it is a parameter."""

    block: int
    shape: tuple[int, ...]
    nbytes: int
    is_parameter: bool


class Accountant:
    """Records every tensor autograd saves for backward while :meth:`watch` is active."""

    def __init__(self, model: nn.Module) -> None:
        self.params = {p.data_ptr() for p in model.parameters()}
        self.records: list[SavedTensor] = []
        self.block = -1

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Record the saved tensors of the code inside the block (set :attr:`block` as blocks run)."""
        def pack(t: torch.Tensor) -> torch.Tensor:
            self.records.append(SavedTensor(block=self.block, shape=tuple(t.shape), nbytes=t.numel() * t.element_size(),
                                            is_parameter=t.data_ptr() in self.params))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield

    def activation_bytes(self, num_blocks: int) -> list[int]:
        """Bytes saved per block, parameters excluded (a tensor saved twice is counted twice)."""
        out = [0] * num_blocks
        for r in self.records:
            if not r.is_parameter and 0 <= r.block < num_blocks:
                out[r.block] += r.nbytes
        return out


def _swap_hooks(store: HostStore, params: set[int]):
    def pack(t: torch.Tensor):
        if t.data_ptr() in params:  # weights live on the device anyway
            return ("param", t)
        return ("stored", store.put(t))

    def unpack(packed):
        kind, value = packed
        return value if kind == "param" else store.get(value)

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def run_chain(model: nn.Sequential, x: torch.Tensor, policy: Sequence[str], store: HostStore | None = None,
              accountant: Accountant | None = None) -> torch.Tensor:
    """Forward through the blocks with a per-block policy; backward through the result works as usual.

    Parameters
    ----------
    model
        The chain of blocks.
    x
        Input batch.
    policy
        One of :data:`POLICIES` per block.
    store
        Where ``swap`` blocks put their saved tensors (a new :class:`HostStore` if omitted).
    accountant
        Optional: records the tensors the ``keep`` blocks save (with their block index).

    Returns
    -------
    torch.Tensor
        The chain's output.
    """
    if len(policy) != len(model):
        raise ValueError(f"policy has {len(policy)} entries for {len(model)} blocks")
    bad = set(policy) - set(POLICIES)
    if bad:
        raise ValueError(f"unknown policies {sorted(bad)}; choose from {POLICIES}")
    store = store if store is not None else HostStore()
    params = {p.data_ptr() for p in model.parameters()}
    out = x
    for i, (block, pol) in enumerate(zip(model, policy)):
        if accountant is not None:
            accountant.block = i
        if pol == "swap":
            with _swap_hooks(store, params):
                out = block(out)
        elif pol == "recompute":
            out = checkpoint(block, out, use_reentrant=False)
        else:
            out = block(out)
    return out


@dataclass(frozen=True, kw_only=True)
class BlockProfile:
    """Measured costs of one block at a given batch.

    Attributes
    ----------
    forward_s, backward_s
        Median forward and backward (input and weight gradients) times in seconds.
    activation_bytes
        Bytes the block saves for backward (parameters excluded).
    input_bytes
        Bytes of its input (what recomputation keeps).
    weight_bytes
        Bytes of its parameters.
    """

    forward_s: float
    backward_s: float
    activation_bytes: int
    input_bytes: int
    weight_bytes: int


def profile_chain(model: nn.Sequential, x: torch.Tensor, repeats: int = 5) -> list[BlockProfile]:
    """Time each block's forward and backward (median of ``repeats``) and measure its saved bytes.

    Parameters
    ----------
    model
        The chain.
    x
        An input batch.
    repeats
        Timed repetitions per block (after one warm-up).

    Returns
    -------
    list of BlockProfile
        One per block, input side first.  On a GPU each clock reading waits for the queued kernels.
    """
    acct = Accountant(model)
    with acct.watch():
        run_chain(model, x, ["keep"] * len(model), accountant=acct)
    act = acct.activation_bytes(len(model))
    out = []
    h = x.detach()
    for i, block in enumerate(model):
        inp = h.clone().requires_grad_(True)
        fwd, bwd = [], []
        for r in range(repeats + 1):
            synchronize(x.device)
            t0 = time.perf_counter()
            y = block(inp)
            synchronize(x.device)
            t1 = time.perf_counter()
            grad = torch.ones_like(y)
            synchronize(x.device)
            t2 = time.perf_counter()
            torch.autograd.backward(y, grad)
            synchronize(x.device)
            t3 = time.perf_counter()
            if r:
                fwd.append(t1 - t0)
                bwd.append(t3 - t2)
        block.zero_grad(set_to_none=True)
        out.append(
            BlockProfile(
                forward_s=float(np.median(fwd)),
                backward_s=float(np.median(bwd)),
                activation_bytes=act[i],
                input_bytes=h.numel() * h.element_size(),
                weight_bytes=sum(p.numel() * p.element_size() for p in block.parameters()),
            )
        )
        with torch.no_grad():
            h = block(h)
    return out


def gradients(
    model: nn.Sequential, x: torch.Tensor, y: torch.Tensor, policy: Sequence[str], store: HostStore | None = None
) -> list[torch.Tensor]:
    """Parameter gradients of the cross-entropy loss of one batch under ``policy`` (for equality checks)."""
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(run_chain(model, x, policy, store), y).backward()
    return [_grad(p).detach().clone() for p in model.parameters()]


def _grad(p: torch.Tensor) -> torch.Tensor:
    """A parameter's gradient, which back-propagation must have produced."""
    if p.grad is None:
        raise RuntimeError(f"a parameter of shape {tuple(p.shape)} received no gradient")
    return p.grad
