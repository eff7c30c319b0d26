"""Driver of the ``vimedpet`` chapter: report generation from synthetic PET/CT volumes.

Per seed: a "general" phantom distribution (another scanner calibration and
a different mix of lesion sites) stands in for the data a vision-language
model saw before ViMed-PET, and an in-domain distribution for ViMed-PET
itself.  A report generator is pre-trained on the general CT+PET data
(the **no fine-tuning** arm) and then fine-tuned on in-domain CT+PET (the
**in-domain CT+PET** arm); a second generator sees the CT only, with the PET
channel blanked, in pre-training and in fine-tuning (the **CT only** arm).
Every arm is tuned over the same learning-rate grid, chosen by its BLEU-4 on
in-domain validation volumes of the first seed and then fixed for the other
seeds.  All three write reports for the same in-domain test volumes, scored by
BLEU-4, ROUGE-L and per-field clinical accuracy read by the rule-based
extractor, beside the trivial prediction (the most frequent training report
written for every case).  Networks are saved under
``output_dir/checkpoints/`` (with CPU tensors).  They train and decode on the
``device`` parameter's device; weights are initialised and batches ordered on
the CPU, so every device starts from the same ones.  The paper's second task,
visual question answering, is stood in for by templated yes/no questions from
the phantoms' findings (:mod:`repro.medical.vqa`), answered by a linear head
on each arm's frozen image features: trained on the general cases for the
no-fine-tuning arm and on the in-domain training cases for the others.
"""

from __future__ import annotations

import copy
import textwrap
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

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
from repro.medical.runs import SeedJob, run_jobs, seed_jobs, tune_on_first_seed
from repro.medical.vqa import QUESTIONS, answers, majority_accuracy, qa_accuracy, train_qa_head
from repro.params import ChapterParams, require
from repro.results import Evidence

ARMS = ("no_finetune", "finetune_ct_only", "finetune_ctpet")
ARM_LABELS = {
    "no_finetune": "no fine-tuning (general data only)",
    "finetune_ct_only": "fine-tuned, CT only",
    "finetune_ctpet": "fine-tuned, in-domain CT+PET",
}
LUNGS = ("right_lung", "left_lung")
GENERAL_SEED_OFFSET = 1_000_003  # the general data never share a case stream with the in-domain data


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``chapters/vimedpet.yaml``)."""

    depth: int
    size: int
    n_general: int
    n_train: int
    n_val: int
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
    lr_grid: tuple[float, ...]
    max_len: int
    n_examples: int
    seeds: tuple[int, ...]
    workers: int
    reuse_checkpoints: bool = False
    device: str = "cpu"

    def checks(self) -> None:
        """Refuse volumes the encoder cannot stride, a wrong number of widths, too many examples."""
        require(self.depth % 8 == 0 and self.size % 8 == 0, self, ("depth", "size"), "depth and size must be multiples of 8")
        require(len(self.channels) == 3, self, "channels", "channels needs exactly three widths")
        require(self.n_examples <= self.n_test, self, ("n_examples", "n_test"), "n_examples must not exceed n_test")


@dataclass(frozen=True, kw_only=True)
class ArmResult:
    """One arm's scores on one seed's in-domain test volumes, at the learning rate chosen on validation.

    Attributes
    ----------
    arm
        One of :data:`ARMS`.
    seed
        The seed.
    lr
        The learning rate of all the arm's training (the best validation BLEU-4 of those tried).
    val_bleu4
        Validation BLEU-4 of every learning rate tried (NaN when the rate was fixed).
    bleu4, rouge_l
        Corpus BLEU-4 and mean ROUGE-L F, fractions.
    fields
        Per-field clinical accuracy.
    vqa
        Per question of :data:`repro.medical.vqa.QUESTIONS`, the share of test cases answered right.
    checkpoint
        Path of the saved network.
    """

    arm: str
    seed: int
    lr: float
    val_bleu4: dict[float, float]
    vqa: dict[str, float]
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
    """Everything one seed produced.

    Attributes
    ----------
    seed
        The seed.
    arms
        The three arms.
    examples
        A few test cases with every arm's report.
    pretrain_loss
        The CT+PET generator's pre-training loss per epoch (at the no-fine-tuning arm's rate).
    trivial
        The trivial prediction: the most frequent training report written for every test case, scored
        like an arm (``bleu4``, ``fields``).
    """

    seed: int
    arms: tuple[ArmResult, ...]
    examples: tuple[ReportExample, ...]
    pretrain_loss: tuple[float, ...]
    trivial: ArmResult

    def arm(self, name: str) -> ArmResult:
        """The result of arm ``name``."""
        return next(a for a in self.arms if a.arm == name)


def in_domain_config(p: Params) -> PhantomConfig:
    """The phantom distribution standing in for ViMed-PET."""
    return PhantomConfig(shape=(p.depth, p.size, p.size), max_lesions=p.max_lesions)


def general_config(p: Params) -> PhantomConfig:
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


@dataclass(frozen=True, kw_only=True)
class Corpus:
    """One seed's volumes and reports, standardised, split into general, training, validation and test.

    Attributes
    ----------
    vocab, scaling
        The word vocabulary and the channel standardisation (fitted on the general volumes).
    x_general, x_train, x_val, x_test
        Standardised two-channel volumes.
    general_ids, train_ids
        Token ids of the general and training reports.
    val_reports, test_reports
        The validation and test reports (references).
    test_truth
        The test cases' findings.
    train_reports
        The in-domain training reports.
    general_truth, train_truth
        The general and the in-domain training cases' findings (the question answers).
    """

    vocab: Vocabulary
    scaling: ChannelScaling
    x_general: np.ndarray
    x_train: np.ndarray
    x_val: np.ndarray
    x_test: np.ndarray
    general_ids: np.ndarray
    train_ids: np.ndarray
    val_reports: list[str]
    test_reports: list[str]
    test_truth: list
    train_reports: list[str]
    general_truth: list
    train_truth: list


def corpus(p: Params, seed: int) -> tuple[Corpus, PhantomSet]:
    """The seed's general and in-domain phantoms as a :class:`Corpus` (and the in-domain set, for the figures)."""
    general = generate_set(p.n_general, general_config(p), GENERAL_SEED_OFFSET + seed)
    domain = generate_set(p.n_train + p.n_val + p.n_test, in_domain_config(p), seed)
    general_reports = [render(f) for f in general.findings]
    reports = [render(f) for f in domain.findings]
    n, v = p.n_train, p.n_train + p.n_val
    vocab = Vocabulary.build(general_reports + reports[:n])
    scaling = ChannelScaling.fit(volumes(general, p.suv_max))
    x = scaling.apply(volumes(domain, p.suv_max))
    data = Corpus(vocab=vocab, scaling=scaling, x_general=scaling.apply(volumes(general, p.suv_max)), x_train=x[:n],
                  x_val=x[n:v], x_test=x[v:], general_ids=vocab.encode(general_reports, p.max_len + 1),
                  train_ids=vocab.encode(reports[:n], p.max_len + 1), val_reports=reports[n:v],
                  test_reports=reports[v:], test_truth=domain.findings[v:], train_reports=reports[:n],
                  general_truth=general.findings, train_truth=domain.findings[:n])
    return data, domain


def _inputs(arm: str, x: np.ndarray) -> np.ndarray:
    """What arm ``arm`` sees of standardised volumes (the CT-only arm: the PET channel blanked)."""
    return blank_pet(x) if arm == "finetune_ct_only" else x


def _train_at(lr: float, arms: tuple[str, ...], data: Corpus, job: SeedJob[Params]
              ) -> tuple[dict[str, ReportGenerator], dict[str, list[float]]]:
    """Pre-train and fine-tune, at learning rate ``lr``, the generators the arms ``arms`` need."""
    p, seed, dev = job.params, job.seed, job.start()
    widths = (p.channels[0], p.channels[1], p.channels[2])
    config = GeneratorConfig(volume_shape=(p.depth, p.size, p.size), vocab_size=len(data.vocab), channels=widths,
                             hidden=p.hidden, embed=p.embed)
    variants = {"ctpet" for arm in arms if arm != "finetune_ct_only"} | {"ct_only" for arm in arms
                                                                          if arm == "finetune_ct_only"}
    pretrained, losses = {}, {}
    for variant in sorted(variants):
        torch.manual_seed(seed)
        pretrained[variant] = ReportGenerator(config).to(dev)
        x_pre = blank_pet(data.x_general) if variant == "ct_only" else data.x_general
        losses[variant] = train_generator(pretrained[variant], x_pre, data.general_ids, epochs=p.pretrain_epochs,
                                          batch_size=p.batch_size, lr=lr, seed=seed, desc=f"pre-training ({variant})")
    models: dict[str, ReportGenerator] = {}
    for arm in arms:
        if arm == "no_finetune":
            models[arm] = pretrained["ctpet"]
            continue
        model = copy.deepcopy(pretrained["ct_only" if arm == "finetune_ct_only" else "ctpet"])
        train_generator(model, _inputs(arm, data.x_train), data.train_ids, epochs=p.finetune_epochs,
                        batch_size=p.batch_size, lr=lr, seed=seed + 1, desc=f"fine-tuning ({arm})")
        models[arm] = model
    return models, {"pretraining_loss": [float(v) for v in losses.get("ctpet", [])]}


def _trained_at(lr: float, arms: tuple[str, ...], data: Corpus, job: SeedJob[Params]
                ) -> tuple[dict[str, ReportGenerator], dict[str, list[float]], dict[str, str]]:
    """:func:`_train_at` through the checkpoints (one file per arm), with each arm's checkpoint path."""
    meta = {"seed": job.seed, "params": asdict(job.params), "lr": lr}

    def path(first: Path, arm: str) -> Path:
        return first.with_name(f"{arm}_lr{lr:g}_seed{job.seed}.pt")

    def save(models: dict[str, ReportGenerator], first: Path) -> Path:
        for arm in arms:
            save_generator(models[arm], data.vocab, data.scaling, path(first, arm), meta)
        return first

    done = trained(Path(job.checkpoint_dir), f"{arms[0]}_lr{lr:g}_seed{job.seed}.pt", job.reuse,
                   lambda: _train_at(lr, arms, data, job), save,
                   lambda first: {arm: load_generator(path(first, arm))[0] for arm in arms})
    first = done.path if done.path is not None else Path(job.checkpoint_dir) / "unsaved.pt"
    return done.model, done.extras, {arm: str(path(first, arm)) for arm in arms}


@torch.no_grad()
def image_features(model: ReportGenerator, x: np.ndarray) -> torch.Tensor:
    """The generator's image features ``(n, hidden)`` of standardised volumes, on the CPU."""
    dev = next(model.parameters()).device
    return model.encode(torch.as_tensor(x).to(dev)).cpu()


def answer_questions(arm: str, model: ReportGenerator, data: Corpus, seed: int) -> dict[str, float]:
    """The arm's templated VQA accuracy per question on the test cases.

    The head is trained on the cases the arm's generator was trained on last: the general cases for the
    no-fine-tuning arm, the in-domain training cases for the fine-tuned arms.
    """
    fit_x, fit_truth = ((data.x_general, data.general_truth) if arm == "no_finetune"
                        else (_inputs(arm, data.x_train), data.train_truth))
    head = train_qa_head(image_features(model, fit_x), answers(fit_truth), seed=seed)
    acc = qa_accuracy(head, image_features(model, _inputs(arm, data.x_test)), answers(data.test_truth))
    return {q.id: float(a) for q, a in zip(QUESTIONS, acc)}


def trivial_report(train_reports: list[str]) -> str:
    """The most frequent training report (the first of the most frequent on ties): the trivial prediction."""
    return Counter(train_reports).most_common(1)[0][0]


def run_seed(job: SeedJob[Params]) -> SeedResult:
    """Train every arm of ``job.lrs`` at each of its learning rates, keep the best on validation, score it on test.

    Parameters
    ----------
    job
        Parameters, seed, checkpoint folder, torch threads and, per arm, the learning rates to try.

    Returns
    -------
    SeedResult
        Scores per arm, example reports, the pre-training loss curve and the trivial prediction's scores.
    """
    p, seed = job.params, job.seed
    data, domain = corpus(p, seed)
    by_lr: dict[float, list[str]] = {}
    for arm, lrs in job.lrs.items():
        for lr in lrs:
            by_lr.setdefault(lr, []).append(arm)
    runs = {lr: _trained_at(lr, tuple(a for a in ARMS if a in arms), data, job) for lr, arms in by_lr.items()}
    results, generated, losses = [], {}, []
    for arm, lrs in job.lrs.items():
        val = {lr: (bleu4(generate_reports(runs[lr][0][arm], data.vocab, _inputs(arm, data.x_val), p.max_len),
                          data.val_reports) if len(lrs) > 1 else float("nan")) for lr in lrs}
        lr = max(val, key=lambda v: (val[v], -v)) if len(lrs) > 1 else lrs[0]
        model, extras, paths = runs[lr]
        reports = generate_reports(model[arm], data.vocab, _inputs(arm, data.x_test), p.max_len)
        generated[arm] = reports
        if arm == "no_finetune":
            losses = list(extras.get("pretraining_loss", []))
        results.append(ArmResult(arm=arm, seed=seed, lr=lr, val_bleu4=val, bleu4=bleu4(reports, data.test_reports),
                                 rouge_l=rouge_l(reports, data.test_reports),
                                 fields=field_accuracy(reports, data.test_truth),
                                 vqa=answer_questions(arm, model[arm], data, seed), checkpoint=paths[arm]))
    constant = [trivial_report(data.train_reports)] * len(data.test_reports)
    majority = majority_accuracy(answers(data.train_truth), answers(data.test_truth))
    trivial = ArmResult(arm="constant report", seed=seed, lr=float("nan"), val_bleu4={},
                        bleu4=bleu4(constant, data.test_reports), rouge_l=rouge_l(constant, data.test_reports),
                        fields=field_accuracy(constant, data.test_truth),
                        vqa={q.id: float(a) for q, a in zip(QUESTIONS, majority)}, checkpoint="")
    start = p.n_train + p.n_val
    raw = volumes(domain, p.suv_max)[start: start + p.n_examples]
    examples = tuple(
        ReportExample(ct_projection=raw[i, 0][:, p.size // 2], pet_projection=raw[i, 1].max(axis=1),
                      truth=data.test_reports[i], generated={a: generated[a][i] for a in generated})
        for i in range(len(raw))
    )
    return SeedResult(seed=seed, arms=tuple(results), examples=examples, pretrain_loss=tuple(losses), trivial=trivial)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    seeds
        One result per seed, every arm at its chosen learning rate.
    chosen_lr
        Arm -> the learning rate chosen on the first seed's validation volumes.
    """

    seeds: tuple[SeedResult, ...]
    chosen_lr: Mapping[str, float]


def run(params: Params, output_dir: str | Path | None = None) -> Results:
    """Tune every arm on the first seed's validation volumes, then run the other seeds at the chosen rates.

    Parameters
    ----------
    params
        The chapter's parameters.
    output_dir
        The run's folder; checkpoints go under ``output_dir/checkpoints`` (default: the notebook's build folder).
    """
    out = Path(output_dir) if output_dir is not None else Path("build/notebook/vimedpet")
    first, chosen = tune_on_first_seed(run_seed, params, out, ARMS, params.lr_grid)
    rest = run_jobs(run_seed, seed_jobs(params, out, lrs={a: (lr,) for a, lr in chosen.items()}, seeds=params.seeds[1:]),
                    params.workers, "vimedpet seeds")
    return Results(seeds=(first, *rest), chosen_lr=chosen)


def lung_gap(fields: FieldScores) -> float:
    """Mean all-fields accuracy over the lung sites minus that over the other sites, points (NaNs skipped)."""
    lung = np.nanmean([fields.by_site[s] for s in LUNGS])
    other = np.nanmean([fields.by_site[s] for s in SITES if s not in LUNGS])
    return float(100.0 * (lung - other))


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims (ids as in ``chapters/vimedpet.yaml``), with the arms' quality.

    The learning precondition reads each compared arm's BLEU-4 (the text claims) or lesion-position accuracy
    (the field claims), in points, against the constant report's.
    """
    seeds = list(results.seeds)

    def points(get: str, arms: tuple[str, ...]) -> dict[str, list[float]]:
        return {a: [100.0 * _quality(r.arm(a), get) for r in seeds] for a in arms}

    def trivial(get: str) -> float:
        return float(np.mean([100.0 * _quality(r.trivial, get) for r in seeds]))

    gain = ("finetune_ctpet", "no_finetune")
    return {
        "finetune_bleu_gain": Evidence(values=[100.0 * (r.arm(gain[0]).bleu4 - r.arm(gain[1]).bleu4) for r in seeds],
                                       arms=points("bleu4", gain), trivial=trivial("bleu4")),
        "finetune_fields_gain": Evidence(
            values=[100.0 * (r.arm(gain[0]).fields.position - r.arm(gain[1]).fields.position) for r in seeds],
            arms=points("position", gain), trivial=trivial("position")),
        "pet_fdg_gain": [100.0 * (r.arm("finetune_ctpet").fields.fdg - r.arm("finetune_ct_only").fields.fdg) for r in seeds],
        "lung_gap": Evidence(values=[lung_gap(r.arm("finetune_ctpet").fields) for r in seeds],
                             arms=points("position", ("finetune_ctpet",)), trivial=trivial("position")),
        "vqa_finetune_gain": Evidence(values=[100.0 * (vqa_accuracy(r.arm(gain[0])) - vqa_accuracy(r.arm(gain[1])))
                                              for r in seeds],
                                      arms=points("vqa", gain), trivial=trivial("vqa")),
    }


def vqa_accuracy(arm: ArmResult) -> float:
    """An arm's templated VQA accuracy, the mean over the questions, as a fraction."""
    return float(np.mean(list(arm.vqa.values())))


def _quality(arm: ArmResult, get: str) -> float:
    """An arm's BLEU-4, lesion-position accuracy or VQA accuracy, as a fraction (0 where there is nothing to score)."""
    value = {"bleu4": arm.bleu4, "position": arm.fields.position, "vqa": vqa_accuracy(arm)}[get]
    return 0.0 if np.isnan(value) else float(value)


def benchmark_table(results: Results) -> pd.DataFrame:
    """Mean ± sd over seeds of the text metrics and field accuracies (percent), one row per arm."""
    rows = []
    for arm in (*ARMS, "constant report"):
        vals = pd.DataFrame(
            [
                {
                    "BLEU-4": 100 * a.bleu4,
                    "ROUGE-L": 100 * a.rouge_l,
                    "position": 100 * a.fields.position,
                    "type": 100 * a.fields.kind,
                    "FDG uptake": 100 * a.fields.fdg,
                    "normal cases": 100 * a.fields.normal_cases,
                    "VQA": 100 * vqa_accuracy(a),
                }
                for a in (r.trivial if arm == "constant report" else r.arm(arm) for r in results.seeds)
            ]
        )
        cells = {c: f"{vals[c].mean():.1f} ± {vals[c].std(ddof=0):.1f}" for c in vals.columns}
        rows.append({"arm": ARM_LABELS.get(arm, arm), **cells})
    return pd.DataFrame(rows).set_index("arm")


def site_table(results: Results) -> pd.DataFrame:
    """All-fields accuracy (percent) per lesion site and arm, mean over seeds."""
    return pd.DataFrame(
        {ARM_LABELS[a]: [100 * np.nanmean([r.arm(a).fields.by_site[s] for r in results.seeds]) for s in SITES] for a in ARMS},
        index=[s.replace("_", " ") for s in SITES],
    ).round(1)


def vqa_table(results: Results) -> pd.DataFrame:
    """Per question, the share of test cases answered right (percent, mean over seeds) by each arm and by the majority."""
    columns = {ARM_LABELS[a]: [r.arm(a) for r in results.seeds] for a in ARMS}
    columns["majority answer (trivial)"] = [r.trivial for r in results.seeds]
    return pd.DataFrame(
        {label: [100 * np.mean([a.vqa[q.id] for a in arms]) for q in QUESTIONS] for label, arms in columns.items()},
        index=[q.text for q in QUESTIONS],
    ).round(1)


def volume_overview(params: Params, n: int = 4) -> Figure:
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


def plot_benchmark(results: Results) -> Figure:
    """Bars (mean over seeds) and dots (seeds) of BLEU-4, ROUGE-L, the three field accuracies and VQA per arm.

    The trivial prediction's values (the constant report; the majority answers for VQA) are drawn as short
    black lines.
    """
    metrics: list[tuple[str, Callable[[ArmResult], float]]] = [
        ("BLEU-4", lambda a: a.bleu4),
        ("ROUGE-L", lambda a: a.rouge_l),
        ("position", lambda a: a.fields.position),
        ("type", lambda a: a.fields.kind),
        ("FDG uptake", lambda a: a.fields.fdg),
        ("VQA", vqa_accuracy),
    ]
    fig, ax = plt.subplots(figsize=(10, 3.4))
    width = 0.8 / len(ARMS)
    for j, arm in enumerate(ARMS):
        vals = np.array([[100 * get(r.arm(arm)) for _, get in metrics] for r in results.seeds])
        x = np.arange(len(metrics)) + (j - 1) * width
        ax.bar(x, vals.mean(axis=0), width, label=ARM_LABELS[arm], alpha=0.85)
        for row in vals:
            ax.plot(x, row, "k.", ms=3)
    trivial = np.nanmean([[100 * get(r.trivial) for _, get in metrics] for r in results.seeds], axis=0)
    ax.hlines(trivial, np.arange(len(metrics)) - 0.45, np.arange(len(metrics)) + 0.45, color="black", lw=1.5,
              label="constant report (trivial)")
    ax.set_xticks(np.arange(len(metrics)), [m for m, _ in metrics])
    ax.set_ylabel("percent")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def plot_report_examples(result: SeedResult) -> Figure:
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
