"""Driver of the ``vimedpet`` chapter: report generation from synthetic PET/CT volumes.

Per seed: a "general" phantom distribution (another scanner calibration and
a different mix of lesion sites) stands in for the data a vision-language
model saw before ViMed-PET, and an in-domain distribution for ViMed-PET
itself.  A report generator is pre-trained on the general CT+PET data
(the **no fine-tuning** arm) and then fine-tuned on in-domain CT+PET (the
**in-domain CT+PET** arm); a second generator sees the CT only, with the PET
channel blanked, in pre-training and in fine-tuning (the **CT only** arm).  All three write reports for the same in-domain test
volumes, scored by BLEU-4, ROUGE-L and per-field clinical accuracy read by
the rule-based extractor.  Networks are saved under ``output_dir/checkpoints/``
(with CPU tensors).  They train and decode on the ``device`` parameter's
device; weights are initialised and batches ordered on the CPU, so every
device starts from the same ones.
"""

from __future__ import annotations

import copy
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from repro.checkpoints import trained
from repro.medical.figures import show_ct, show_pet
from repro.medical.phantom import SITES, PhantomConfig, PhantomSet, generate_set, normalise_ct, normalise_pet
from repro.medical.report_generator import (
    ChannelScaling,
    GeneratorConfig,
    ReportGenerator,
    Vocabulary,
    generate_reports,
    load_generator,
    save_generator,
    train_generator,
)
from repro.medical.reports import FieldScores, bleu4, field_accuracy, render, rouge_l
from repro.medical.runs import SeedJob, sweep_seeds

ARMS = ("no_finetune", "finetune_ct_only", "finetune_ctpet")
ARM_LABELS = {
    "no_finetune": "no fine-tuning (general data only)",
    "finetune_ct_only": "fine-tuned, CT only",
    "finetune_ctpet": "fine-tuned, in-domain CT+PET",
}
LUNGS = ("right_lung", "left_lung")
GENERAL_SEED_OFFSET = 1_000_003  # the general data never share a case stream with the in-domain data


@dataclass(frozen=True, kw_only=True)
class VimedpetParams:
    """The chapter's parameters (schema in ``chapters/vimedpet.yaml``)."""

    depth: int
    size: int
    n_general: int
    n_train: int
    n_test: int
    max_lesions: int
    suv_max: float
    general_hu_offset: float
    general_pet_gain: float
    general_lung_weight: float
    channels: tuple[int, ...]
    hidden: int
    embed: int
    pretrain_epochs: int
    finetune_epochs: int
    batch_size: int
    lr: float
    max_len: int
    n_examples: int
    seeds: tuple[int, ...]
    workers: int
    device: str = "cpu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "channels", tuple(int(c) for c in self.channels))
        if len(self.channels) != 3:
            raise ValueError(f"channels needs three widths, got {self.channels}")
        if self.depth % 8 or self.size % 8:
            raise ValueError(f"depth and size must be multiples of 8, got {self.depth}, {self.size}")


@dataclass(frozen=True, kw_only=True)
class ArmResult:
    """One arm's scores on one seed's in-domain test volumes.

    Attributes
    ----------
    arm
        One of :data:`ARMS`.
    seed
        The seed.
    bleu4, rouge_l
        Corpus BLEU-4 and mean ROUGE-L F, fractions.
    fields
        Per-field clinical accuracy.
    checkpoint
        Path of the saved network.
    """

    arm: str
    seed: int
    bleu4: float
    rouge_l: float
    fields: FieldScores
    checkpoint: str


@dataclass(frozen=True, kw_only=True)
class ReportExample:
    """One test case for the figure: its images and the true and generated reports.

    Attributes
    ----------
    ct_projection, pet_projection
        Central coronal slice of the CT and maximum-intensity projection of the PET (normalised).
    truth
        The ground-truth report.
    generated
        Arm name -> generated report.
    """

    ct_projection: np.ndarray
    pet_projection: np.ndarray
    truth: str
    generated: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class SeedResult:
    """Everything one seed produced."""

    seed: int
    arms: tuple[ArmResult, ...]
    examples: tuple[ReportExample, ...]
    pretrain_loss: tuple[float, ...]  # of the CT+PET generator

    def arm(self, name: str) -> ArmResult:
        """The result of arm ``name``."""
        return next(a for a in self.arms if a.arm == name)


def in_domain_config(p: VimedpetParams) -> PhantomConfig:
    """The phantom distribution standing in for ViMed-PET."""
    return PhantomConfig(shape=(p.depth, p.size, p.size), max_lesions=p.max_lesions)


def general_config(p: VimedpetParams) -> PhantomConfig:
    """The shifted "general" distribution: another calibration and mostly lung findings."""
    lung = p.general_lung_weight
    return PhantomConfig(
        shape=(p.depth, p.size, p.size), max_lesions=p.max_lesions, hu_offset=p.general_hu_offset,
        pet_gain=p.general_pet_gain, site_weights=(lung, lung, 1.0, 1.0, 1.0),
    )


def volumes(data: PhantomSet, suv_max: float) -> np.ndarray:
    """Two-channel inputs ``(n, 2, D, H, W)``: normalised CT and PET."""
    return np.stack([normalise_ct(data.ct_hu), normalise_pet(data.pet, suv_max)], axis=1)


def blank_pet(x: np.ndarray) -> np.ndarray:
    """Copy of standardised inputs with the PET channel at its mean (0): the CT-only arm."""
    out = x.copy()
    out[:, 1] = 0.0
    return out


def run_seed(job: SeedJob[VimedpetParams]) -> SeedResult:
    """Pre-train, fine-tune and score the three arms on one seed's phantoms.

    Parameters
    ----------
    job
        Parameters, seed, checkpoint folder and torch threads.

    Returns
    -------
    SeedResult
        Scores per arm, example reports and the pre-training loss curve.
    """
    dev = job.start()
    p, seed = job.params, job.seed
    general = generate_set(p.n_general, general_config(p), GENERAL_SEED_OFFSET + seed)
    domain = generate_set(p.n_train + p.n_test, in_domain_config(p), seed)
    general_reports = [render(f) for f in general.findings]
    domain_reports = [render(f) for f in domain.findings]
    train_reports, test_reports = domain_reports[: p.n_train], domain_reports[p.n_train :]
    test_truth = domain.findings[p.n_train :]
    vocab = Vocabulary.build(general_reports + train_reports)
    scaling = ChannelScaling.fit(volumes(general, p.suv_max))
    x_general = scaling.apply(volumes(general, p.suv_max))
    x_domain = scaling.apply(volumes(domain, p.suv_max))
    x_train, x_test = x_domain[: p.n_train], x_domain[p.n_train :]
    ckpt, meta = Path(job.checkpoint_dir), {"seed": seed, "params": asdict(p)}

    config = GeneratorConfig(
        volume_shape=(p.depth, p.size, p.size),
        vocab_size=len(vocab),
        channels=p.channels,
        hidden=p.hidden,
        embed=p.embed,
    )
    inputs = {"no_finetune": x_test, "finetune_ct_only": blank_pet(x_test), "finetune_ctpet": x_test}

    def train_arms() -> tuple[dict[str, ReportGenerator], dict]:
        general_ids = vocab.encode(general_reports, p.max_len + 1)
        pretrained, losses = {}, {}
        for variant, x_pre in (("ctpet", x_general), ("ct_only", blank_pet(x_general))):
            torch.manual_seed(seed)
            pretrained[variant] = ReportGenerator(config).to(dev)
            losses[variant] = train_generator(
                pretrained[variant],
                x_pre,
                general_ids,
                epochs=p.pretrain_epochs,
                batch_size=p.batch_size,
                lr=p.lr,
                seed=seed,
                desc=f"pre-training ({variant})",
            )
        save_generator(pretrained["ct_only"], vocab, scaling, ckpt / f"pretrained_ct_only_seed{seed}.pt", meta)
        train_ids = vocab.encode(train_reports, p.max_len + 1)
        models = {"no_finetune": pretrained["ctpet"]}
        for arm, (start, fit_x) in {
            "finetune_ct_only": (pretrained["ct_only"], blank_pet(x_train)),
            "finetune_ctpet": (pretrained["ctpet"], x_train),
        }.items():
            model = copy.deepcopy(start)
            train_generator(
                model,
                fit_x,
                train_ids,
                epochs=p.finetune_epochs,
                batch_size=p.batch_size,
                lr=p.lr,
                seed=seed + 1,
                desc=f"fine-tuning ({arm})",
            )
            models[arm] = model
        return models, {"pretraining_loss": [float(v) for v in losses["ctpet"]]}

    def arm_path(first: Path, arm: str) -> Path:
        return first.with_name(f"{arm}_seed{seed}.pt")

    def save_arms(models: dict[str, ReportGenerator], first: Path) -> Path:
        for arm in ARMS:
            save_generator(models[arm], vocab, scaling, arm_path(first, arm), meta)
        return first

    done = trained(
        ckpt,
        f"{ARMS[0]}_seed{seed}.pt",
        job.reuse,
        train_arms,
        save_arms,
        lambda first: {arm: load_generator(arm_path(first, arm))[0] for arm in ARMS},
    )
    models, losses = done.model, done.extras["pretraining_loss"]

    results, generated = [], {}
    for arm in ARMS:
        reports = generate_reports(models[arm], vocab, inputs[arm], p.max_len)
        generated[arm] = reports
        path = str(arm_path(done.path, arm))
        results.append(
            ArmResult(
                arm=arm,
                seed=seed,
                bleu4=bleu4(reports, test_reports),
                rouge_l=rouge_l(reports, test_reports),
                fields=field_accuracy(reports, test_truth),
                checkpoint=path,
            )
        )
    raw = volumes(domain, p.suv_max)[p.n_train : p.n_train + p.n_examples]
    examples = tuple(
        ReportExample(
            ct_projection=raw[i, 0][:, p.size // 2],
            pet_projection=raw[i, 1].max(axis=1),
            truth=test_reports[i],
            generated={a: generated[a][i] for a in ARMS},
        )
        for i in range(len(raw))
    )
    return SeedResult(seed=seed, arms=tuple(results), examples=examples, pretrain_loss=tuple(losses))


def sweep(params: VimedpetParams, output_dir: str | Path, reuse: bool = False) -> list[SeedResult]:
    """Run every seed (in ``params.workers`` processes), checkpoints under ``output_dir/checkpoints``.

    With ``reuse`` each seed's generators (and pre-training curve) are loaded from there instead of trained.
    """
    return sweep_seeds(run_seed, params, output_dir, reuse, "vimedpet seeds")


def lung_gap(fields: FieldScores) -> float:
    """Mean all-fields accuracy over the lung sites minus that over the other sites, points (NaNs skipped)."""
    lung = np.nanmean([fields.by_site[s] for s in LUNGS])
    other = np.nanmean([fields.by_site[s] for s in SITES if s not in LUNGS])
    return float(100.0 * (lung - other))


def claims(results: list[SeedResult]) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (ids as in ``chapters/vimedpet.yaml``)."""
    return {
        "finetune_bleu_gain": [100.0 * (r.arm("finetune_ctpet").bleu4 - r.arm("no_finetune").bleu4) for r in results],
        "finetune_fields_gain": [
            100.0 * (r.arm("finetune_ctpet").fields.position - r.arm("no_finetune").fields.position) for r in results
        ],
        "pet_fdg_gain": [100.0 * (r.arm("finetune_ctpet").fields.fdg - r.arm("finetune_ct_only").fields.fdg) for r in results],
        "lung_gap": [lung_gap(r.arm("finetune_ctpet").fields) for r in results],
    }


def benchmark_table(results: list[SeedResult]) -> pd.DataFrame:
    """Mean ± sd over seeds of the text metrics and field accuracies (percent), one row per arm."""
    rows = []
    for arm in ARMS:
        vals = pd.DataFrame(
            [
                {
                    "BLEU-4": 100 * a.bleu4,
                    "ROUGE-L": 100 * a.rouge_l,
                    "position": 100 * a.fields.position,
                    "type": 100 * a.fields.kind,
                    "FDG uptake": 100 * a.fields.fdg,
                    "normal cases": 100 * a.fields.normal_cases,
                }
                for a in (r.arm(arm) for r in results)
            ]
        )
        rows.append({"arm": ARM_LABELS[arm], **{c: f"{vals[c].mean():.1f} ± {vals[c].std(ddof=0):.1f}" for c in vals.columns}})
    return pd.DataFrame(rows).set_index("arm")


def site_table(results: list[SeedResult]) -> pd.DataFrame:
    """All-fields accuracy (percent) per lesion site and arm, mean over seeds."""
    return pd.DataFrame(
        {ARM_LABELS[a]: [100 * np.nanmean([r.arm(a).fields.by_site[s] for r in results]) for s in SITES] for a in ARMS},
        index=[s.replace("_", " ") for s in SITES],
    ).round(1)


def volume_overview(params: VimedpetParams, n: int = 4) -> plt.Figure:
    """A few in-domain and general training volumes: central coronal CT slice and PET maximum-intensity projection."""
    fig, axes = plt.subplots(2, 2 * n, figsize=(2.0 * n * 2, 3.6), squeeze=False)
    for row, (name, cfg, seed) in enumerate(
        [
            ("in-domain", in_domain_config(params), params.seeds[0]),
            ("general", general_config(params), GENERAL_SEED_OFFSET + params.seeds[0]),
        ]
    ):
        data = generate_set(n, cfg, seed)
        x = volumes(data, params.suv_max)
        for i in range(n):
            lesions = data.cases[i].findings.lesions
            words = "; ".join(f"{les.site.replace('_', ' ')}{' FDG+' if les.fdg_avid else ''}" for les in lesions)
            show_ct(axes[row, 2 * i], x[i, 0][:, params.size // 2][::-1], f"{name}: {words or 'no lesion'}")
            show_pet(axes[row, 2 * i + 1], x[i, 1].max(axis=1)[::-1], "PET MIP")
    fig.tight_layout()
    return fig


def plot_benchmark(results: list[SeedResult]) -> plt.Figure:
    """Bars (mean over seeds) and dots (seeds) of BLEU-4, ROUGE-L and the three field accuracies per arm."""
    metrics = [
        ("BLEU-4", lambda a: a.bleu4),
        ("ROUGE-L", lambda a: a.rouge_l),
        ("position", lambda a: a.fields.position),
        ("type", lambda a: a.fields.kind),
        ("FDG uptake", lambda a: a.fields.fdg),
    ]
    fig, ax = plt.subplots(figsize=(10, 3.4))
    width = 0.8 / len(ARMS)
    for j, arm in enumerate(ARMS):
        vals = np.array([[100 * get(r.arm(arm)) for _, get in metrics] for r in results])
        x = np.arange(len(metrics)) + (j - 1) * width
        ax.bar(x, vals.mean(axis=0), width, label=ARM_LABELS[arm], alpha=0.85)
        for row in vals:
            ax.plot(x, row, "k.", ms=3)
    ax.set_xticks(np.arange(len(metrics)), [m for m, _ in metrics])
    ax.set_ylabel("percent")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def plot_report_examples(result: SeedResult) -> plt.Figure:
    """Test volumes with their true report beside each arm's generated report."""
    k = len(result.examples)
    fig = plt.figure(figsize=(13, 2.2 * k))
    grid = fig.add_gridspec(k, 3, width_ratios=(1, 1, 8), wspace=0.05, hspace=0.25)
    for i, ex in enumerate(result.examples):
        show_ct(fig.add_subplot(grid[i, 0]), ex.ct_projection[::-1], "CT (coronal)" if i == 0 else "")
        show_pet(fig.add_subplot(grid[i, 1]), ex.pet_projection[::-1], "PET MIP" if i == 0 else "")
        ax = fig.add_subplot(grid[i, 2])
        ax.axis("off")
        lines = [("ground truth", ex.truth)] + [(ARM_LABELS[a], ex.generated[a]) for a in ARMS]
        for j, (label, text) in enumerate(lines):
            y = 1.0 - j / len(lines)
            ax.text(0.0, y, label, fontsize=7, weight="bold", va="top", transform=ax.transAxes)
            ax.text(0.3, y, textwrap.fill(text or "(empty)", 100), fontsize=7, va="top", transform=ax.transAxes)
    return fig
