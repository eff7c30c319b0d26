"""An offline text-classification task standing in for AG News.

AG News (four news topics) cannot be downloaded here.  ``doc_topics`` builds
a four-class topic task from text that is on every machine with the
project's environment: the docstrings of four installed libraries whose
subjects differ as news topics do (plotting, machine learning, graphs, data
frames).  Each sample is the first words of one function's or class's
docstring; its label is the library it came from.  The texts are read with
:mod:`ast` (nothing is imported), vectorised with TF-IDF over a vocabulary
learnt on the training split (rows scaled to norm 10), and cached under ``.cache/``.

The package versions are pinned by the environment lock, so the task is the
same on every machine built from it.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

import numpy as np

from repro.datasets import Dataset
from repro.paths import cache_dir

DOC_TOPIC_SOURCES: tuple[tuple[str, str], ...] = (
    ("matplotlib", "plotting"),
    ("sklearn", "machine learning"),
    ("networkx", "graphs"),
    ("pandas", "data frames"),
)
"""``(package, topic)`` pairs; the label of a docstring is its package's index."""

_DIST_NAME = {"sklearn": "scikit-learn"}


def _package_root(pkg: str) -> Path:
    spec = importlib.util.find_spec(pkg)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"package {pkg!r} is not installed; doc_topics needs it")
    return Path(spec.origin).parent


def docstrings(pkg: str, min_words: int = 8, max_words: int = 40) -> list[str]:
    """The docstrings of every function and class in ``pkg``'s source (tests excluded).

    Parameters
    ----------
    pkg
        Importable package name (its files are parsed, not imported).
    min_words
        Docstrings with fewer words are skipped.
    max_words
        Each docstring is cut to its first ``max_words`` words.

    Returns
    -------
    list of str
        One text per documented definition, in file and source order.
    """
    out: list[str] = []
    for path in sorted(_package_root(pkg).rglob("*.py")):
        if "tests" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(errors="ignore"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node)
                words = doc.split() if doc else []
                if len(words) >= min_words:
                    out.append(" ".join(words[:max_words]))
    return out


def _versions() -> str:
    return ",".join(f"{p}={importlib.metadata.version(_DIST_NAME.get(p, p))}" for p, _ in DOC_TOPIC_SOURCES)


def load_doc_topics(n_train: int | None = None, seed: int = 0, per_class: int = 1500, vocab: int = 2000,
                    test_fraction: float = 0.2, row_norm: float = 10.0) -> Dataset:
    """The four-topic docstring task as a :class:`repro.datasets.Dataset` (TF-IDF features).

    Parameters
    ----------
    n_train
        Optional size of a seeded subset of the training split.
    seed
        Seed of the per-class subsample, the split and the subset.
    per_class
        Docstrings drawn per topic (balanced classes).
    vocab
        TF-IDF vocabulary size (the number of features).
    test_fraction
        Share of each class held out for testing.
    row_norm
        L2 norm of every TF-IDF row.  scikit-learn's unit rows are so small
        that a deep ReLU MLP at PyTorch's default initialisation does not start
        learning; 10 lets it.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    if row_norm <= 0:
        raise ValueError(f"row_norm must be > 0, got {row_norm}")
    if per_class < 10:
        raise ValueError(f"per_class must be >= 10, got {per_class}")
    key = hashlib.sha256(f"{_versions()}|{seed}|{per_class}|{vocab}|{test_fraction}".encode()).hexdigest()[:16]
    path = cache_dir() / "doc_topics" / f"{key}.npz"
    if path.is_file():
        z = np.load(path)
        xtr, ytr, xte, yte = z["x_train"], z["y_train"], z["x_test"], z["y_test"]
    else:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.model_selection import train_test_split

        rng = np.random.default_rng(seed)
        texts: list[str] = []
        labels: list[int] = []
        for label, (pkg, _) in enumerate(DOC_TOPIC_SOURCES):
            docs = docstrings(pkg)
            if len(docs) < per_class:
                raise ValueError(f"{pkg} has only {len(docs)} docstrings; lower per_class ({per_class})")
            pick = np.sort(rng.choice(len(docs), per_class, replace=False))
            texts += [docs[i] for i in pick]
            labels += [label] * per_class
        y = np.asarray(labels, dtype=np.int64)
        t_tr, t_te, ytr, yte = train_test_split(texts, y, test_size=test_fraction, stratify=y, random_state=seed)
        vec = TfidfVectorizer(max_features=vocab, sublinear_tf=True, token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z]+\b")
        xtr = vec.fit_transform(t_tr).toarray().astype(np.float32)
        xte = vec.transform(t_te).toarray().astype(np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
        tmp.replace(path)
    if n_train is not None and n_train < len(ytr):
        idx = np.sort(np.random.default_rng(seed).permutation(len(ytr))[:n_train])
        xtr, ytr = xtr[idx], ytr[idx]
    scale = np.float32(row_norm)
    return Dataset(
        name="doc_topics",
        x_train=xtr * scale,
        y_train=ytr.astype(np.int64),
        x_test=xte * scale,
        y_test=yte.astype(np.int64),
        num_classes=len(DOC_TOPIC_SOURCES),
    )
