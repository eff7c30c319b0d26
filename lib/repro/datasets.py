"""Offline datasets: loaders and the one-off conversions into ``data/``.

Nothing here touches the network.  scikit-learn's digits ship inside the
package; Fashion-MNIST comes from Debian's ``dataset-fashion-mnist`` (IDX
files) and is converted once into plain ``.npy`` files under ``data/``, which
DVC tracks through ``data.dvc``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from repro import atomic
from repro.paths import data_dir, repo_root

FASHION_MNIST_SRC = Path("/usr/share/datasets/fashion-mnist")
_FMNIST_FILES = {
    "train_x": "train-images-idx3-ubyte.gz",
    "train_y": "train-labels-idx1-ubyte.gz",
    "test_x": "t10k-images-idx3-ubyte.gz",
    "test_y": "t10k-labels-idx1-ubyte.gz",
}


@dataclass(frozen=True, kw_only=True)
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
    return Dataset(
        name="fashion_mnist",
        x_train=_flat_pixels(xtr),
        y_train=ytr.astype(np.int64),
        x_test=_flat_pixels(xte),
        y_test=yte.astype(np.int64),
        num_classes=10,
    )


def _flat_pixels(images: np.ndarray) -> np.ndarray:
    """Images as rows of float32 pixels in [0, 1]."""
    return images.reshape(len(images), -1).astype(np.float32) / 255.0


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
    return Dataset(name="digits", x_train=xtr, y_train=ytr, x_test=xte, y_test=yte, num_classes=10)


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


class DataIntegrityError(RuntimeError):
    """The files under ``data/`` differ from what ``data.dvc`` records."""


REPAIR = "repair with `git checkout data.dvc && dvc checkout --force data.dvc` (or `rm -rf data && make data`)"


def manifest(root: Path | None = None) -> dict[str, str]:
    """MD5 of every file under ``data/`` by path relative to it, as DVC records them."""
    root = Path(root) if root else data_dir()
    return {
        f.relative_to(root).as_posix(): hashlib.md5(f.read_bytes()).hexdigest()
        for f in sorted(p for p in root.rglob("*") if p.is_file())
    }


def dir_hash(entries: dict[str, str]) -> str:
    """DVC's hash of a folder from its manifest (``<md5>.dir``)."""
    listing = [{"md5": md5, "relpath": rel} for rel, md5 in sorted(entries.items())]
    return hashlib.md5(json.dumps(listing, sort_keys=True).encode()).hexdigest() + ".dir"


def _committed_dvc_file(root: Path) -> str | None:
    """``data.dvc`` as committed in the checkout's HEAD (None outside git or if it is not committed).

    ``dvc repro`` and ``dvc add`` rewrite ``data.dvc`` to whatever ``data/`` holds, so the committed
    version is the record a corruption cannot rewrite.
    """
    try:
        proc = subprocess.run(["git", "-C", str(root), "show", "HEAD:data.dvc"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def recorded_hash(root: Path | None = None) -> str | None:
    """The folder hash recorded for ``data/``: the committed ``data.dvc`` if any, else the file; None if neither."""
    root = root or repo_root()
    text = _committed_dvc_file(root)
    if text is None:
        dvc_file = root / "data.dvc"
        if not dvc_file.is_file():
            return None
        text = dvc_file.read_text()
    return str(next(o["md5"] for o in yaml.safe_load(text)["outs"] if o["path"] == "data"))


def recorded_manifest(root: Path | None = None) -> dict[str, str] | None:
    """The per-file MD5s behind ``data.dvc``'s hash, from the DVC cache (None if not cached)."""
    root = root or repo_root()
    h = recorded_hash(root)
    if h is None:
        return None
    cached = root / ".dvc" / "cache" / "files" / "md5" / h[:2] / h[2:]
    if not cached.is_file():
        return None
    return {e["relpath"]: e["md5"] for e in json.loads(cached.read_text())}


def verify(dataset: str | None = None, root: Path | None = None) -> None:
    """Check the files under ``data/`` (or ``data/<dataset>/``) against ``data.dvc``.

    Parameters
    ----------
    dataset
        A dataset folder under ``data/``; None checks the whole folder.
    root
        The repository root.

    Raises
    ------
    DataIntegrityError
        Naming the dataset, the files that differ and the repair command.
    """
    root = root or repo_root()
    expected = recorded_hash(root)
    if expected is None:
        return
    folder = root / "data"
    if dataset is not None and not (folder / dataset).is_dir():
        raise DataIntegrityError(f"dataset {dataset!r}: {folder / dataset} is missing; run `make data` (or `repro data`)")
    current = manifest(folder)
    if dir_hash(current) == expected:
        return
    recorded = recorded_manifest(root)
    if recorded is None:
        raise DataIntegrityError(f"data/ differs from data.dvc ({expected}); {REPAIR}")
    changed = sorted(k for k in set(current) | set(recorded) if current.get(k) != recorded.get(k))
    if dataset is not None:
        changed = [k for k in changed if k.startswith(f"{dataset}/")]
        if not changed:
            return
    label = f"dataset {dataset!r}" if dataset else "data/"
    raise DataIntegrityError(
        f"{label} differs from data.dvc in {', '.join('data/' + k for k in changed)}; {REPAIR}"
    )


def fingerprint(dataset: str, root: Path | None = None) -> str:
    """A hash of the files of one dataset under ``data/`` (part of a run's input fingerprint)."""
    folder = (root or repo_root()) / "data" / dataset
    if not folder.is_dir():
        return "missing"
    return hashlib.sha256(json.dumps(manifest(folder), sort_keys=True).encode()).hexdigest()[:16]
