"""Driver of the ``cpdm`` chapter: CPDM's ablation on synthetic CT/PET slices.

Per seed: generate phantom slices (a fresh train/validation/test draw), train
the attention segmenter once, then five translators on the same data: the
plain bridge (BBDM), the bridge with the attenuation map, with the attention
map, with both (CPDM), and the L1 regression UNet.  Every translator is tuned
over the same learning-rate grid, chosen by its validation PSNR on the first
seed and then fixed for the other seeds (never on test slices).  Each is
scored on the test slices (PSNR, SSIM, MAE, whole image and inside lesion
masks) beside the trivial prediction (the mean training PET image), and saved
as a checkpoint under ``output_dir/checkpoints/``.  The attenuation map's gain
is fixed by the phantom's attenuation coupling (our constant), so the first
seed is rerun at the couplings of ``coupling_sweep``.  The networks train and
sample on the ``device`` parameter's device; phantoms, batch orders and the
bridge's noise are drawn on the CPU, so every device sees the same ones, and
checkpoints are saved with CPU tensors.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.bridge import BridgeSchedule
from repro.checkpoints import trained
from repro.devices import synchronize
from repro.medical.cpdm import (
    BridgeSettings,
    MapChoice,
    attention_channel,
    attenuation_channel,
    condition_stack,
    train_segmenter,
    train_translator,
    translate,
)
from repro.medical.figures import show_ct, show_pet
from repro.medical.metrics import TranslationScores, psnr, score_translations
from repro.medical.phantom import PhantomConfig, generate_set, hot_spot_mask, normalise_ct, normalise_pet
from repro.medical.regression import predict, train_regression
from repro.medical.runs import SeedJob, run_jobs, seed_jobs, tune_on_first_seed
from repro.medical.unet import UNet, UNetConfig, load_unet, save_unet
from repro.params import ChapterParams, require
from repro.results import Evidence

ARMS = ("bbdm", "bbdm_attenuation", "bbdm_attention", "cpdm", "l1_unet")
ARM_LABELS = {
    "bbdm": "bridge alone (BBDM)",
    "bbdm_attenuation": "+ attenuation map",
    "bbdm_attention": "+ attention map",
    "cpdm": "CPDM (both maps)",
    "l1_unet": "L1 regression UNet",
}
ARM_MAPS = {
    "bbdm": MapChoice(),
    "bbdm_attenuation": MapChoice(attenuation=True),
    "bbdm_attention": MapChoice(attention=True),
    "cpdm": MapChoice(attenuation=True, attention=True),
}


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``chapters/cpdm.yaml``)."""

    image_size: int
    n_train: int
    n_val: int
    n_test: int
    max_lesions: int
    attenuation_coupling: float
    counts_per_suv: float
    suv_max: float
    hot_threshold: float
    base_channels: int
    levels: int
    n_timesteps: int
    epochs: int
    seg_epochs: int
    batch_size: int
    seg_lr: float
    lr_grid: tuple[float, ...]
    sample_steps: int
    eta: float
    coupling_sweep: tuple[float, ...]
    n_examples: int
    seeds: tuple[int, ...]
    workers: int
    reuse_checkpoints: bool = False
    device: str = "cpu"

    def checks(self) -> None:
        """Refuse a slice size the UNet cannot halve, more examples than test slices, a sweep that repeats the coupling."""
        require(self.image_size % 2**self.levels == 0, self, ("image_size", "levels"),
                "image_size must be a multiple of 2**levels")
        require(self.n_examples <= self.n_test, self, ("n_examples", "n_test"), "n_examples must not exceed n_test")
        require(self.sample_steps <= self.n_timesteps, self, ("sample_steps", "n_timesteps"),
                "the sampler cannot take more steps than the bridge has")
        require(self.attenuation_coupling not in self.coupling_sweep, self, ("coupling_sweep", "attenuation_coupling"),
                "the sweep reruns the first seed at other couplings (the profile's own is the main run)")


@dataclass(frozen=True, kw_only=True)
class ArmResult:
    """One translator's scores on one seed's test slices, at the learning rate chosen on validation.

    Attributes
    ----------
    arm
        One of :data:`ARMS`.
    seed
        The seed.
    lr
        The learning rate used (the best validation PSNR of those tried).
    val_psnr
        Validation PSNR of every learning rate tried (one entry when the rate was fixed).
    scores
        Whole-image and lesion-level metrics on the test slices.
    train_seconds
        Training wall time (measured on a shared machine).
    checkpoint
        Path of the saved network.
    """

    arm: str
    seed: int
    lr: float
    val_psnr: dict[float, float]
    scores: TranslationScores
    train_seconds: float
    checkpoint: str


@dataclass(frozen=True, kw_only=True)
class Examples:
    """A few test slices and every arm's translation of them, for the figure.

    Attributes
    ----------
    ct01, pet01, lesions
        ``(k, H, W)`` normalised CT, true PET and lesion union.
    attention
        The predicted attention maps ``(k, H, W)`` (``{0, 1}``).
    predictions
        Arm name -> ``(k, H, W)`` translated PET.
    """

    ct01: np.ndarray
    pet01: np.ndarray
    lesions: np.ndarray
    attention: np.ndarray
    predictions: dict[str, np.ndarray]


@dataclass(frozen=True, kw_only=True)
class SeedResult:
    """Everything one seed produced.

    Attributes
    ----------
    seed
        The seed.
    arms
        The translators trained in this run.
    segmenter_dice
        The attention segmenter's test Dice against the PET hot spots.
    trivial_psnr
        Test PSNR of the trivial prediction: the mean training PET image for every slice.
    coupling
        The phantom's attenuation coupling in this run.
    examples
        A few test slices and the arms' translations.
    """

    seed: int
    arms: tuple[ArmResult, ...]
    segmenter_dice: float
    trivial_psnr: float
    coupling: float
    examples: Examples

    def arm(self, name: str) -> ArmResult:
        """The result of arm ``name``."""
        return next(a for a in self.arms if a.arm == name)


def phantom_config(p: Params) -> PhantomConfig:
    """The slice generator at this profile."""
    return PhantomConfig(
        shape=(1, p.image_size, p.image_size),
        max_lesions=p.max_lesions,
        attenuation_coupling=p.attenuation_coupling,
        counts_per_suv=p.counts_per_suv,
    )


@dataclass(frozen=True, kw_only=True)
class Slices:
    """One seed's normalised slices and the condition maps, split into training, validation and test.

    Attributes
    ----------
    ct01, pet01
        Normalised CT and PET ``(n, H, W)``.
    attenuation, attention
        The condition maps ``(n, H, W)``.
    train, val, test
        The three parts.
    test_masks
        Each test slice's lesion masks.
    """

    ct01: np.ndarray
    pet01: np.ndarray
    attenuation: np.ndarray
    attention: np.ndarray
    train: slice
    val: slice
    test: slice
    test_masks: list[np.ndarray] = field(default_factory=list)


def _train_arm(arm: str, lr: float, data: Slices, job: SeedJob[Params]) -> tuple[UNet, dict[str, float]]:
    """Train one translator at learning rate ``lr`` on the training slices; its wall time as extras."""
    p, dev = job.params, job.start()
    plain = UNetConfig(base=p.base_channels, levels=p.levels)
    start = time.perf_counter()
    if arm == "l1_unet":
        net = train_regression(data.ct01[data.train], data.pet01[data.train], plain, epochs=p.epochs,
                               batch_size=p.batch_size, lr=lr, seed=job.seed, device=dev)
    else:
        cond = condition_stack(ARM_MAPS[arm], data.attenuation, data.attention)
        net = train_translator(ARM_MAPS[arm], data.ct01[data.train], data.pet01[data.train],
                               None if cond is None else cond[data.train], plain, bridge_settings(p, lr), job.seed,
                               device=dev)
    synchronize(dev)
    return net, {"train_seconds": time.perf_counter() - start}


def bridge_settings(p: Params, lr: float) -> BridgeSettings:
    """The bridges' training and sampling settings at learning rate ``lr``."""
    return BridgeSettings(schedule=BridgeSchedule(n_timesteps=p.n_timesteps), epochs=p.epochs, batch_size=p.batch_size,
                          lr=lr, sample_steps=p.sample_steps, eta=p.eta)


def estimate(arm: str, net: UNet, data: Slices, part: slice, job: SeedJob[Params]) -> np.ndarray:
    """Arm ``arm``'s PET estimates of the slices ``part`` (the regression in one pass, a bridge by sampling)."""
    if arm == "l1_unet":
        return predict(net, data.ct01[part])
    cond = condition_stack(ARM_MAPS[arm], data.attenuation, data.attention)
    return translate(net, data.ct01[part], None if cond is None else cond[part], bridge_settings(job.params, 0.0),
                     job.seed)


def run_seed(job: SeedJob[Params]) -> SeedResult:
    """Train every arm of ``job.lrs`` at each of its learning rates, keep the best on validation, score it on test.

    Parameters
    ----------
    job
        Parameters, seed, checkpoint folder, torch threads and, per arm, the learning rates to try.

    Returns
    -------
    SeedResult
        Scores per arm, the segmenter's test Dice, the trivial prediction's PSNR and example translations.
    """
    dev = job.start()
    p, seed = job.params, job.seed
    raw = generate_set(p.n_train + p.n_val + p.n_test, phantom_config(p), seed)
    ct01 = normalise_ct(raw.ct_hu[:, 0])
    pet01 = normalise_pet(raw.pet[:, 0], p.suv_max)
    train, val = slice(0, p.n_train), slice(p.n_train, p.n_train + p.n_val)
    test = slice(p.n_train + p.n_val, None)
    ckpt = Path(job.checkpoint_dir)
    meta = {"seed": seed, "params": asdict(p)}

    def save(net: UNet, path: Path) -> Path:
        return save_unet(net, path, meta)

    attention, seg_dice = -np.ones_like(ct01), float("nan")
    if any(ARM_MAPS[arm].attention for arm in job.lrs if arm in ARM_MAPS):
        seg = trained(ckpt, f"segmenter{job.tag}_seed{seed}.pt", job.reuse, lambda: (train_segmenter(
            ct01[train], hot_spot_mask(pet01[train], p.hot_threshold), UNetConfig(base=p.base_channels, levels=p.levels),
            epochs=p.seg_epochs, batch_size=p.batch_size, lr=p.seg_lr, seed=seed, device=dev,
        ), {}), save, load_unet).model
        attention = attention_channel(seg, ct01)
        predicted, hot = attention[test] > 0, hot_spot_mask(pet01[test], p.hot_threshold)
        seg_dice = float(2.0 * (predicted & hot).sum() / max(predicted.sum() + hot.sum(), 1))
    data = Slices(ct01=ct01, pet01=pet01, attenuation=attenuation_channel(raw.ct_hu[:, 0]), attention=attention,
                  train=train, val=val, test=test, test_masks=[c.lesion_masks[:, 0] for c in raw.cases[test]])
    mean_image = pet01[train].mean(axis=0)
    trivial = float(np.mean([psnr(ref, mean_image) for ref in pet01[test]]))
    results, predictions = [], {}
    for arm, lrs in job.lrs.items():
        tried = {}
        for lr in lrs:
            def train_one(arm: str = arm, lr: float = lr) -> tuple[UNet, dict[str, float]]:
                return _train_arm(arm, lr, data, job)

            done = trained(ckpt, f"{arm}_lr{lr:g}{job.tag}_seed{seed}.pt", job.reuse, train_one, save, load_unet)
            score = (float(np.mean([psnr(r, e) for r, e in zip(pet01[val], estimate(arm, done.model, data, val, job))]))
                     if len(lrs) > 1 else float("nan"))
            tried[lr] = (score, done)
        lr = max(tried, key=lambda v: (tried[v][0], -v)) if len(lrs) > 1 else lrs[0]
        best = tried[lr][1]
        out = estimate(arm, best.model, data, test, job)
        results.append(ArmResult(arm=arm, seed=seed, lr=lr, val_psnr={k: v[0] for k, v in tried.items()},
                                 scores=score_translations(pet01[test], out, data.test_masks, p.suv_max),
                                 train_seconds=float(best.extras["train_seconds"]), checkpoint=str(best.path)))
        predictions[arm] = out[: p.n_examples]
    k = slice(test.start, test.start + p.n_examples)
    examples = Examples(ct01=ct01[k], pet01=pet01[k], lesions=raw.lesion_union[k, 0],
                        attention=(attention[k] > 0).astype(np.float32), predictions=predictions)
    return SeedResult(seed=seed, arms=tuple(results), segmenter_dice=seg_dice, trivial_psnr=trivial,
                      coupling=p.attenuation_coupling, examples=examples)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    seeds
        One result per seed, every arm at its chosen learning rate.
    chosen_lr
        Arm -> the learning rate chosen on the first seed's validation slices.
    coupling
        The attenuation gain (bridge with the attenuation map minus the plain bridge, PSNR, dB) of the first
        seed at each attenuation coupling, the profile's own included.
    """

    seeds: tuple[SeedResult, ...]
    chosen_lr: Mapping[str, float]
    coupling: pd.DataFrame


def attenuation_gain(result: SeedResult) -> float:
    """PSNR of the bridge with the attenuation map minus the plain bridge's, dB."""
    return result.arm("bbdm_attenuation").scores.psnr - result.arm("bbdm").scores.psnr


def run(params: Params, output_dir: str | Path | None = None) -> Results:
    """Tune every arm on the first seed's validation slices, run the other seeds at the chosen rates, sweep the coupling.

    Parameters
    ----------
    params
        The chapter's parameters.
    output_dir
        The run's folder; checkpoints go under ``output_dir/checkpoints`` (default: the notebook's build folder).

    Returns
    -------
    Results
        Every seed's scores, the chosen learning rates and the coupling sweep.
    """
    out = Path(output_dir) if output_dir is not None else Path("build/notebook/cpdm")
    first, chosen = tune_on_first_seed(run_seed, params, out, ARMS, params.lr_grid)
    fixed = {arm: (lr,) for arm, lr in chosen.items()}
    pair = {arm: fixed[arm] for arm in ("bbdm", "bbdm_attenuation")}
    jobs = seed_jobs(params, out, lrs=fixed, seeds=params.seeds[1:])
    for c in params.coupling_sweep:
        jobs += seed_jobs(dataclasses.replace(params, attenuation_coupling=c), out, lrs=pair, seeds=params.seeds[:1],
                          tag=f"_coupling{c:g}")
    rest = run_jobs(run_seed, jobs, params.workers, "cpdm seeds")
    main, swept = [first, *rest[: len(params.seeds) - 1]], rest[len(params.seeds) - 1:]
    table = pd.DataFrame([{"coupling": r.coupling, "attenuation_gain_db": attenuation_gain(r)} for r in (first, *swept)])
    return Results(seeds=tuple(main), chosen_lr=chosen, coupling=table.sort_values("coupling").reset_index(drop=True))


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of the chapter's claims (ids as in ``chapters/cpdm.yaml``), with every compared arm's PSNR."""
    seeds = list(results.seeds)
    trivial = float(np.mean([r.trivial_psnr for r in seeds]))

    def diff(a: str, b: str, metric: str) -> Evidence:
        return Evidence(values=[getattr(r.arm(a).scores, metric) - getattr(r.arm(b).scores, metric) for r in seeds],
                        arms={arm: [r.arm(arm).scores.psnr for r in seeds] for arm in (a, b)}, trivial=trivial)

    return {
        "cpdm_psnr_gain": diff("cpdm", "bbdm", "psnr"),
        "cpdm_ssim_gain": diff("cpdm", "bbdm", "ssim"),
        "attenuation_psnr_gain": [attenuation_gain(r) for r in seeds],
        "attention_lesion_mae_change": diff("bbdm_attention", "bbdm", "lesion_mae"),
        "cpdm_vs_regression_psnr": diff("cpdm", "l1_unet", "psnr"),
    }


def learning_table(results: Results) -> pd.DataFrame:
    """Per arm: the chosen learning rate, its validation PSNR on the first seed, and the test PSNR against the trivial one."""
    first = results.seeds[0]
    trivial = np.mean([r.trivial_psnr for r in results.seeds])
    rows = []
    for arm in ARMS:
        test = [r.arm(arm).scores.psnr for r in results.seeds]
        rows.append({"method": ARM_LABELS[arm], "chosen lr": results.chosen_lr[arm],
                     **{f"val PSNR, lr {lr:g}": v for lr, v in first.arm(arm).val_psnr.items()},
                     "test PSNR (mean)": float(np.mean(test)), "above the mean image (dB)": float(np.mean(test) - trivial)})
    return pd.DataFrame(rows).set_index("method")


def ablation_table(results: Results) -> pd.DataFrame:
    """Mean ± sd over seeds of every metric, one row per arm."""
    rows = []
    for arm in ARMS:
        vals = pd.DataFrame([asdict(r.arm(arm).scores) for r in results.seeds])
        row = {"method": ARM_LABELS[arm]}
        for col in vals.columns:
            row[col] = f"{vals[col].mean():.3f} ± {vals[col].std(ddof=0):.3f}"
        row["train s"] = f"{np.mean([r.arm(arm).train_seconds for r in results.seeds]):.1f}"
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")


def phantom_overview(params: Params, n: int = 4) -> tuple[Figure, pd.DataFrame]:
    """A few training slices (CT, PET, lesion masks) and the lesion statistics of seed 0's training set."""
    data = generate_set(params.n_train, phantom_config(params), params.seeds[0])
    fig, axes = plt.subplots(2, n, figsize=(2.0 * n, 4.2), squeeze=False)
    for i in range(n):
        case = data.cases[i]
        words = ", ".join(
            f"{les.site.replace('_', ' ')} {les.kind}{' (FDG+)' if les.fdg_avid else ''}" for les in case.findings.lesions
        )
        show_ct(axes[0, i], normalise_ct(case.ct_hu[0]), words or "no lesion")
        show_pet(axes[1, i], normalise_pet(case.pet[0], params.suv_max), "", case.lesion_union[0])
    axes[0, 0].set_ylabel("CT")
    axes[1, 0].set_ylabel("PET")
    fig.tight_layout()
    rows = [{"site": les.site, "kind": les.kind, "FDG-avid": les.fdg_avid} for f in data.findings for les in f.lesions]
    table = pd.DataFrame(rows).groupby(["site", "kind"]).agg(lesions=("FDG-avid", "size"), avid_share=("FDG-avid", "mean"))
    return fig, table


def coupling_figure(results: Results, paper_gain: float | None) -> Figure:
    """The first seed's attenuation gain against the phantom's attenuation coupling (our constant)."""
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    table = results.coupling
    ax.plot(table.coupling, table.attenuation_gain_db, marker="o", label="first seed")
    ax.axhline(0.0, color="black", lw=0.8)
    if paper_gain is not None:
        ax.axhline(paper_gain, color="tab:red", ls="--", lw=1, label="paper (clinical data)")
    ax.set_xlabel("attenuation coupling c of the phantom (cm)")
    ax.set_ylabel("attenuation map's PSNR gain (dB)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_translations(result: SeedResult) -> Figure:
    """Example test slices: CT, the attention map, true PET (lesions outlined) and every arm's PET."""
    ex = result.examples
    k = len(ex.ct01)
    cols = 3 + len(ARMS)
    fig, axes = plt.subplots(k, cols, figsize=(1.5 * cols, 1.6 * k), squeeze=False)
    for i in range(k):
        show_ct(axes[i, 0], ex.ct01[i], "CT" if i == 0 else "")
        show_pet(axes[i, 1], ex.attention[i], "attention map" if i == 0 else "", vmax=1.0)
        show_pet(axes[i, 2], ex.pet01[i], "true PET" if i == 0 else "", ex.lesions[i])
        for j, arm in enumerate(ARMS):
            show_pet(axes[i, 3 + j], ex.predictions[arm][i], ARM_LABELS[arm] if i == 0 else "", ex.lesions[i])
    fig.suptitle(f"Synthetic test slices, seed {result.seed} (lesions outlined in cyan)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_ablation(results: Results) -> Figure:
    """Bars (mean over seeds) and dots (seeds) of PSNR, SSIM and lesion MAE per arm; PSNR's trivial level dashed."""
    metrics = [
        ("psnr", "PSNR, dB (higher better)"),
        ("ssim", "SSIM (higher better)"),
        ("lesion_mae", "MAE inside lesions, SUV (lower better)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    x = np.arange(len(ARMS))
    for ax, (metric, label) in zip(axes, metrics):
        vals = np.array([[getattr(r.arm(a).scores, metric) for a in ARMS] for r in results.seeds])
        ax.bar(x, vals.mean(axis=0), color=["C0", "C1", "C2", "C3", "C7"], alpha=0.8)
        for row in vals:
            ax.plot(x, row, "k.", ms=4)
        ax.set_xticks(x, [ARM_LABELS[a] for a in ARMS], rotation=35, ha="right", fontsize=8)
        ax.set_title(label, fontsize=9)
        lo, hi = vals.min(), vals.max()
        pad = 0.15 * (hi - lo + 1e-9)
        if metric == "psnr":
            trivial = float(np.mean([r.trivial_psnr for r in results.seeds]))
            ax.axhline(trivial, color="black", ls="--", lw=1, label="mean training image")
            ax.legend(fontsize=7)
            lo, hi = min(lo, trivial), max(hi, trivial)
        ax.set_ylim(max(0.0, lo - 3 * pad) if metric != "psnr" else lo - 3 * pad, hi + pad)
    fig.tight_layout()
    return fig
