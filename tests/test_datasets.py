"""Offline loaders, tested on data we make."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from repro import datasets


def _fake_fmnist(src, n_train=30, n_test=10, seed=0):
    rng = np.random.default_rng(seed)
    src.mkdir()
    datasets.write_idx(src / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8))
    datasets.write_idx(src / "train-labels-idx1-ubyte.gz", rng.integers(0, 10, n_train, dtype=np.uint8))
    datasets.write_idx(src / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8))
    datasets.write_idx(src / "t10k-labels-idx1-ubyte.gz", rng.integers(0, 10, n_test, dtype=np.uint8))


def test_idx_roundtrip(tmp_path):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    datasets.write_idx(tmp_path / "a.gz", arr)
    assert np.array_equal(datasets.read_idx(tmp_path / "a.gz"), arr)


def test_idx_rejects_corrupt(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05abc")
    with pytest.raises(ValueError, match="header says"):
        datasets.read_idx(bad)


def test_fashion_conversion_is_deterministic_and_loads(tmp_path):
    _fake_fmnist(tmp_path / "src")
    out1 = datasets.convert_fashion_mnist(tmp_path / "src", tmp_path / "o1")
    out2 = datasets.convert_fashion_mnist(tmp_path / "src", tmp_path / "o2")
    digest = lambda d: [hashlib.sha256((d / f).read_bytes()).hexdigest() for f in sorted(p.name for p in d.iterdir())]  # noqa: E731
    assert digest(out1) == digest(out2)  # same bytes: DVC sees the same hash everywhere
    ds = datasets.load_fashion_mnist(root=out1)
    assert ds.x_train.shape == (30, 784) and ds.x_test.shape == (10, 784)
    assert ds.x_train.dtype == np.float32 and 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    raw = datasets.read_idx(tmp_path / "src" / "train-labels-idx1-ubyte.gz")
    assert np.array_equal(ds.y_train, raw)


def test_fashion_missing_sources(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        datasets.convert_fashion_mnist(tmp_path / "nothing", tmp_path / "o")


def test_digits_split_is_stratified():
    ds = datasets.load_digits(test_fraction=0.2, seed=0)
    assert ds.x_train.shape[1] == 64 and ds.num_classes == 10
    assert len(ds.y_train) + len(ds.y_test) == 1797
    tr = np.bincount(ds.y_train) / len(ds.y_train)
    te = np.bincount(ds.y_test) / len(ds.y_test)
    assert np.abs(tr - te).max() < 0.01
    with pytest.raises(ValueError, match="test_fraction"):
        datasets.load_digits(test_fraction=1.5)


def test_real_fashion_mnist_when_present(root):
    """The converted Debian data under data/ (made by `make data`) has the real sizes."""
    if not (root / "data" / "fashion_mnist" / "train_x.npy").is_file():
        pytest.skip("data/ not built")
    ds = datasets.load_fashion_mnist(n_train=500, n_test=100)
    assert ds.x_train.shape == (500, 784) and set(np.unique(ds.y_train)) <= set(range(10))
