"""Driver of the ``cpdm`` chapter: CPDM's ablation on synthetic CT/PET slices.

Per seed: generate phantom slices (a fresh train/test draw), train the
attention segmenter once, then five translators on the same data: the plain
bridge (BBDM), the bridge with the attenuation map, with the attention map,
with both (CPDM), and the L1 regression UNet.  Each is scored on the test
slices (PSNR, SSIM, MAE, whole image and inside lesion masks) and saved as a
checkpoint under ``output_dir/checkpoints/``.  The networks train and sample
on the ``device`` parameter's device; phantoms, batch orders and the bridge's
noise are drawn on the CPU, so every device sees the same ones, and
checkpoints are saved with CPU tensors.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

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
from repro.medical.metrics import TranslationScores, score_translations
from repro.medical.phantom import PhantomConfig, generate_set, hot_spot_mask, normalise_ct, normalise_pet
from repro.medical.regression import predict, train_regression
from repro.medical.runs import SeedJob, sweep_seeds
from repro.medical.unet import UNet, UNetConfig, load_unet, save_unet

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
class CpdmParams:
    """The chapter's parameters (schema in ``chapters/cpdm.yaml``)."""

    image_size: int
    n_train: int
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
    lr: float
    sample_steps: int
    eta: float
    n_examples: int
    seeds: tuple[int, ...]
    workers: int
    device: str = "cpu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if self.image_size % 2**self.levels:
            raise ValueError(f"image_size {self.image_size} must be a multiple of 2**levels = {2**self.levels}")


@dataclass(frozen=True, kw_only=True)
class ArmResult:
    """One translator's scores on one seed's test slices.

    Attributes
    ----------
    arm
        One of :data:`ARMS`.
    seed
        The seed.
    scores
        Whole-image and lesion-level metrics.
    train_seconds
        Training wall time (measured on a shared machine).
    checkpoint
        Path of the saved network.
    """

    arm: str
    seed: int
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
    """Everything one seed produced."""

    seed: int
    arms: tuple[ArmResult, ...]
    segmenter_dice: float
    examples: Examples

    def arm(self, name: str) -> ArmResult:
        """The result of arm ``name``."""
        return next(a for a in self.arms if a.arm == name)


def phantom_config(p: CpdmParams) -> PhantomConfig:
    """The slice generator at this profile."""
    return PhantomConfig(
        shape=(1, p.image_size, p.image_size),
        max_lesions=p.max_lesions,
        attenuation_coupling=p.attenuation_coupling,
        counts_per_suv=p.counts_per_suv,
    )


def run_seed(job: SeedJob[CpdmParams]) -> SeedResult:
    """Train and score every arm on one seed's phantoms (see the module docstring).

    Parameters
    ----------
    job
        Parameters, seed, checkpoint folder and torch threads.

    Returns
    -------
    SeedResult
        Scores per arm, the segmenter's test Dice and example translations.
    """
    dev = job.start()
    p, seed = job.params, job.seed
    data = generate_set(p.n_train + p.n_test, phantom_config(p), seed)
    ct01 = normalise_ct(data.ct_hu[:, 0])
    pet01 = normalise_pet(data.pet[:, 0], p.suv_max)
    train, test = slice(0, p.n_train), slice(p.n_train, None)
    test_masks = [c.lesion_masks[:, 0] for c in data.cases[p.n_train :]]
    ckpt = Path(job.checkpoint_dir)
    meta = {"seed": seed, "params": asdict(p)}

    plain = UNetConfig(base=p.base_channels, levels=p.levels)
    def save(net: UNet, path: Path) -> Path:
        return save_unet(net, path, meta)

    seg = trained(ckpt, f"segmenter_seed{seed}.pt", job.reuse, lambda: (train_segmenter(
        ct01[train], hot_spot_mask(pet01[train], p.hot_threshold), plain,
        epochs=p.seg_epochs, batch_size=p.batch_size, lr=p.lr, seed=seed, device=dev,
    ), {}), save, load_unet).model
    attention = attention_channel(seg, ct01)
    predicted, hot = attention[test] > 0, hot_spot_mask(pet01[test], p.hot_threshold)
    seg_dice = float(2.0 * (predicted & hot).sum() / max(predicted.sum() + hot.sum(), 1))
    attenuation = attenuation_channel(data.ct_hu[:, 0])

    settings = BridgeSettings(
        schedule=BridgeSchedule(n_timesteps=p.n_timesteps), epochs=p.epochs, batch_size=p.batch_size,
        lr=p.lr, sample_steps=p.sample_steps, eta=p.eta,
    )
    results, predictions = [], {}
    for arm in ARMS:
        cond = None if arm == "l1_unet" else condition_stack(ARM_MAPS[arm], attenuation, attention)

        def train_arm(arm: str = arm, cond: np.ndarray | None = cond) -> tuple[UNet, dict]:
            start = time.perf_counter()
            if arm == "l1_unet":
                net = train_regression(ct01[train], pet01[train], plain, epochs=p.epochs, batch_size=p.batch_size, lr=p.lr,
                                       seed=seed, device=dev)
            else:
                net = train_translator(ARM_MAPS[arm], ct01[train], pet01[train], None if cond is None else cond[train], plain,
                                       settings, seed, device=dev)
            synchronize(dev)
            return net, {"train_seconds": time.perf_counter() - start}

        done = trained(ckpt, f"{arm}_seed{seed}.pt", job.reuse, train_arm, save, load_unet)
        net, seconds, path = done.model, float(done.extras["train_seconds"]), str(done.path)
        if arm == "l1_unet":
            estimate = predict(net, ct01[test])
        else:
            estimate = translate(net, ct01[test], None if cond is None else cond[test], settings, seed)
        results.append(
            ArmResult(arm=arm, seed=seed, scores=score_translations(pet01[test], estimate, test_masks, p.suv_max),
                      train_seconds=seconds, checkpoint=path),
        )
        predictions[arm] = estimate[: p.n_examples]
    k = slice(p.n_train, p.n_train + p.n_examples)
    examples = Examples(
        ct01=ct01[k],
        pet01=pet01[k],
        lesions=data.lesion_union[k, 0],
        attention=(attention[k] > 0).astype(np.float32),
        predictions=predictions,
    )
    return SeedResult(seed=seed, arms=tuple(results), segmenter_dice=seg_dice, examples=examples)


def sweep(params: CpdmParams, output_dir: str | Path, reuse: bool = False) -> list[SeedResult]:
    """Run every seed (in ``params.workers`` processes), checkpoints under ``output_dir/checkpoints``.

    With ``reuse`` the networks (and their training times) are loaded from there instead of trained.
    """
    return sweep_seeds(run_seed, params, output_dir, reuse, "cpdm seeds")


def claims(results: list[SeedResult]) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (ids as in ``chapters/cpdm.yaml``)."""

    def diff(a: str, b: str, metric: str) -> list[float]:
        return [getattr(r.arm(a).scores, metric) - getattr(r.arm(b).scores, metric) for r in results]

    return {
        "cpdm_psnr_gain": diff("cpdm", "bbdm", "psnr"),
        "cpdm_ssim_gain": diff("cpdm", "bbdm", "ssim"),
        "attenuation_psnr_gain": diff("bbdm_attenuation", "bbdm", "psnr"),
        "attention_lesion_mae_change": diff("bbdm_attention", "bbdm", "lesion_mae"),
        "cpdm_vs_regression_psnr": diff("cpdm", "l1_unet", "psnr"),
    }


def ablation_table(results: list[SeedResult]) -> pd.DataFrame:
    """Mean ± sd over seeds of every metric, one row per arm."""
    rows = []
    for arm in ARMS:
        vals = pd.DataFrame([asdict(r.arm(arm).scores) for r in results])
        row = {"method": ARM_LABELS[arm]}
        for col in vals.columns:
            row[col] = f"{vals[col].mean():.3f} ± {vals[col].std(ddof=0):.3f}"
        row["train s"] = f"{np.mean([r.arm(arm).train_seconds for r in results]):.1f}"
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")


def phantom_overview(params: CpdmParams, n: int = 4) -> tuple[plt.Figure, pd.DataFrame]:
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


def plot_translations(result: SeedResult) -> plt.Figure:
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


def plot_ablation(results: list[SeedResult]) -> plt.Figure:
    """Bars (mean over seeds) and dots (seeds) of PSNR, SSIM and lesion MAE per arm."""
    metrics = [
        ("psnr", "PSNR, dB (higher better)"),
        ("ssim", "SSIM (higher better)"),
        ("lesion_mae", "MAE inside lesions, SUV (lower better)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    x = np.arange(len(ARMS))
    for ax, (metric, label) in zip(axes, metrics):
        vals = np.array([[getattr(r.arm(a).scores, metric) for a in ARMS] for r in results])
        ax.bar(x, vals.mean(axis=0), color=["C0", "C1", "C2", "C3", "C7"], alpha=0.8)
        for row in vals:
            ax.plot(x, row, "k.", ms=4)
        ax.set_xticks(x, [ARM_LABELS[a] for a in ARMS], rotation=35, ha="right", fontsize=8)
        ax.set_title(label, fontsize=9)
        lo, hi = vals.min(), vals.max()
        pad = 0.15 * (hi - lo + 1e-9)
        ax.set_ylim(max(0.0, lo - 3 * pad) if metric != "psnr" else lo - 3 * pad, hi + pad)
    fig.tight_layout()
    return fig
