"""Offline datasets: loaders and the one-off conversions into ``data/``.

Nothing here touches the network.  scikit-learn's digits ship inside the
package; Fashion-MNIST comes from Debian's ``dataset-fashion-mnist`` (IDX
files) and is converted once into plain ``.npy`` files under ``data/``, which
DVC tracks through ``data.dvc``.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repro import atomic
from repro.paths import data_dir

FASHION_MNIST_SRC = Path("/usr/share/datasets/fashion-mnist")
_FMNIST_FILES = {
    "train_x": "train-images-idx3-ubyte.gz",
    "train_y": "train-labels-idx1-ubyte.gz",
    "test_x": "t10k-images-idx3-ubyte.gz",
    "test_y": "t10k-labels-idx1-ubyte.gz",
}


@dataclass(frozen=True)
class Dataset:
    """A supervised dataset split into train and test arrays.

    ``x`` arrays are float32 with features flattened (``n, d``); ``y`` are int64
    labels in ``0..num_classes-1``.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def num_features(self) -> int:
        """Number of input features."""
        return int(self.x_train.shape[1])


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped), the MNIST family's format.

    Parameters
    ----------
    path
        The ``.idx*-ubyte`` or ``.gz`` file.

    Returns
    -------
    numpy.ndarray
        uint8 array with the shape stored in the header.

    Raises
    ------
    ValueError
        If the magic number or the size does not match the header.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape}, found {data.size} bytes")
    return data.reshape(shape)


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as a gzipped IDX file (used to test :func:`read_idx`)."""
    arr = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    atomic.write_bytes(Path(path), gzip.compress(header + arr.tobytes(), mtime=0))


def convert_fashion_mnist(src: Path = FASHION_MNIST_SRC, dst: Path | None = None) -> Path:
    """Convert Debian's Fashion-MNIST IDX files into ``.npy`` files under ``data/``.

    The output is byte-for-byte deterministic, so DVC sees the same hash on
    every machine.  Existing, complete output is left alone.

    Returns
    -------
    Path
        The output folder.
    """
    dst = Path(dst) if dst else data_dir() / "fashion_mnist"
    if all((dst / f"{k}.npy").is_file() for k in _FMNIST_FILES):
        return dst
    missing = [f for f in _FMNIST_FILES.values() if not (Path(src) / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"Fashion-MNIST sources missing in {src}: {missing}; install Debian's dataset-fashion-mnist"
        )
    for key, fname in _FMNIST_FILES.items():
        arr = read_idx(Path(src) / fname)
        tmp = dst / f".{key}.npy.tmp"
        dst.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            np.save(fh, arr, allow_pickle=False)
        tmp.replace(dst / f"{key}.npy")
    return dst


def _subsample(x: np.ndarray, y: np.ndarray, n: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if n is None or n >= len(y):
        return x, y
    idx = np.random.default_rng(seed).permutation(len(y))[:n]
    idx.sort()
    return x[idx], y[idx]


def load_fashion_mnist(n_train: int | None = None, n_test: int | None = None, seed: int = 0,
                       root: Path | None = None) -> Dataset:
    """Load Fashion-MNIST from ``data/fashion_mnist`` (pixels scaled to [0, 1]).

    Parameters
    ----------
    n_train, n_test
        Optional sizes of seeded random subsets.
    seed
        Seed of the subsets.
    root
        Folder holding the converted ``.npy`` files (default ``data/fashion_mnist``).
    """
    root = Path(root) if root else data_dir() / "fashion_mnist"
    if not (root / "train_x.npy").is_file():
        raise FileNotFoundError(f"{root} is empty: run `repro data` (or `make data`) first")
    arrs = {k: np.load(root / f"{k}.npy") for k in _FMNIST_FILES}
    xtr, ytr = _subsample(arrs["train_x"], arrs["train_y"], n_train, seed)
    xte, yte = _subsample(arrs["test_x"], arrs["test_y"], n_test, seed + 1)
    flat = lambda a: (a.reshape(len(a), -1).astype(np.float32) / 255.0)  # noqa: E731
    return Dataset("fashion_mnist", flat(xtr), ytr.astype(np.int64), flat(xte), yte.astype(np.int64), 10)


def load_digits(test_fraction: float = 0.2, seed: int = 0, n_train: int | None = None) -> Dataset:
    """scikit-learn's 8x8 digits, split into a stratified train and test set, pixels scaled to [0, 1]."""
    from sklearn.datasets import load_digits as _load
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    d = _load()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, stratify=y, random_state=seed)
    xtr, ytr = _subsample(xtr, ytr, n_train, seed)
    return Dataset("digits", xtr, ytr, xte, yte, 10)


def load(name: str, n_train: int | None = None, seed: int = 0) -> Dataset:
    """Load a dataset by name (``digits`` or ``fashion_mnist``)."""
    if name == "digits":
        return load_digits(seed=seed, n_train=n_train)
    if name == "fashion_mnist":
        return load_fashion_mnist(n_train=n_train, n_test=2000, seed=seed)
    raise ValueError(f"unknown dataset {name!r}; choose 'digits' or 'fashion_mnist'")


def build_all() -> list[Path]:
    """Create every converted dataset under ``data/`` (idempotent)."""
    return [convert_fashion_mnist()]
