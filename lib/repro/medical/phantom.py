"""Procedural CT/PET torso phantoms with labelled lesions.

Stands in for the clinical PET/CT studies of CPDM and ViMed-PET, which cannot
be downloaded here.  A phantom is a small volume ``(D, H, W)`` (``D = 1`` for
the 2D slices of CPDM) in normalised coordinates ``z, y, x`` in ``[-1, 1]``
(``z`` runs from the abdomen up to the thorax, ``y`` from front to back).

Anatomy (CT in Hounsfield units, PET activity in SUV-like units):

- air outside an elliptical body (-1000 HU, no activity);
- soft tissue (40 HU, activity about 1);
- two lungs in the upper half (-800 HU, activity 0.3), shrinking towards
  the diaphragm;
- heart and mediastinum between the lungs (heart with high, variable uptake);
- liver in the lower half (60 HU, activity about 2);
- a vertebra (cortical ring about 1000 HU, marrow 250 HU) and ribs
  (700-1200 HU) in the thorax.

Lesions (0 to ``max_lesions`` per case) have a kind (``nodule`` or ``mass``), a
site (right or left lung, liver, bone, mediastinal node), a size and an FDG
status.  FDG-avid lesions take an activity above their organ's; non-avid ones
take exactly the organ's activity.  Their CT contrast depends on the site:
lung lesions are solid tissue in air (obvious), bone lesions are lytic
(moderate), liver lesions are 20 HU darker (subtle) and mediastinal nodes 5
HU brighter (nearly invisible on CT), so some lesions are found only on PET.

PET formation (a modelling choice, stated in the chapters): the activity is
blurred by a Gaussian point-spread function, multiplied by an
attenuation-dependent factor ``exp(-c mu(HU))`` (``mu`` from
:mod:`repro.medical.attenuation`; without it CPDM's attenuation map would
carry nothing to learn) and turned into Poisson counts.  CT gets Gaussian
noise.  Masks and structured findings are kept for evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.ndimage import gaussian_filter

from repro.medical.attenuation import hu_to_mu

SITES = ("right_lung", "left_lung", "liver", "bone", "mediastinal_node")
KINDS = ("nodule", "mass")
LOBES = ("upper", "lower")
LUNG_SITES = ("right_lung", "left_lung")

HU_AIR = -1000.0
HU_MIN, HU_MAX = -1024.0, 3071.0
CT_NORM_SPAN = 2047.0  # CPDM's code: HU = 2047 ct - 1024


@dataclass(frozen=True, kw_only=True)
class PhantomConfig:
    """Settings of the phantom generator.

    Attributes
    ----------
    shape
        ``(D, H, W)`` voxels; ``D = 1`` gives a 2D slice at a random height.
    fov_mm
        Field of view across ``[-1, 1]`` along every axis, in mm (sizes in
        reports are computed from it).
    min_lesions, max_lesions
        Lesions per case, drawn uniformly in this range.
    site_weights
        Relative probability of each site in :data:`SITES`.
    avid_probability
        Probability that a lesion is FDG-avid, per kind in :data:`KINDS`.
    attenuation_coupling
        ``c`` (cm) in the PET factor ``exp(-c mu)``.
    counts_per_suv
        Expected counts per voxel per unit activity (Poisson noise level).
    psf_sigma_vox
        Gaussian point-spread of the PET in voxels.
    ct_noise_hu
        Standard deviation of the CT noise.
    hu_offset
        Calibration shift added to every CT value (a scanner difference).
    pet_gain
        Calibration factor on the PET (a scanner or protocol difference).
    """

    shape: tuple[int, int, int] = (1, 32, 32)
    fov_mm: float = 240.0
    min_lesions: int = 0
    max_lesions: int = 3
    site_weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0)
    avid_probability: tuple[float, float] = (0.5, 0.8)
    attenuation_coupling: float = 4.0
    counts_per_suv: float = 40.0
    psf_sigma_vox: float = 0.6
    ct_noise_hu: float = 15.0
    hu_offset: float = 0.0
    pet_gain: float = 1.0

    def __post_init__(self) -> None:
        if len(self.shape) != 3 or min(self.shape) < 1 or min(self.shape[1:]) < 8:
            raise ValueError(f"shape must be (D, H, W) with D >= 1 and H, W >= 8, got {self.shape}")
        if not 0 <= self.min_lesions <= self.max_lesions:
            raise ValueError(f"need 0 <= min_lesions <= max_lesions, got {self.min_lesions}, {self.max_lesions}")
        if len(self.site_weights) != len(SITES) or min(self.site_weights) < 0 or sum(self.site_weights) <= 0:
            raise ValueError(f"site_weights needs {len(SITES)} non-negative weights with a positive sum")
        if self.counts_per_suv <= 0 or self.attenuation_coupling < 0 or self.ct_noise_hu < 0:
            raise ValueError("counts_per_suv must be > 0, attenuation_coupling and ct_noise_hu >= 0")


@dataclass(frozen=True, kw_only=True)
class Lesion:
    """One lesion of a phantom: what a report states about it, and where it is.

    Attributes
    ----------
    kind
        ``"nodule"`` or ``"mass"``.
    site
        One of :data:`SITES`.
    lobe
        ``"upper"`` or ``"lower"`` for lung lesions, ``""`` otherwise.
    size_mm
        Diameter rounded to 5 mm.
    fdg_avid
        Whether the lesion's activity exceeds its organ's.
    center
        Voxel index ``(z, y, x)`` of its centre (always inside its mask).
    """

    kind: str
    site: str
    lobe: str
    size_mm: int
    fdg_avid: bool
    center: tuple[int, int, int]


@dataclass(frozen=True, kw_only=True)
class Findings:
    """The structured findings of a case (the ground truth behind its report)."""

    lesions: tuple[Lesion, ...]


@dataclass(frozen=True, kw_only=True)
class Phantom:
    """One generated case.

    Attributes
    ----------
    ct_hu
        CT in HU, ``(D, H, W)`` float32, with noise.
    activity
        Noise-free tracer activity before blur and attenuation, ``(D, H, W)``.
    pet
        Measured PET (blurred, attenuated, Poisson counts), ``(D, H, W)``.
    lesion_masks
        One boolean mask per lesion, ``(n_lesions, D, H, W)``.
    background
        Activity of the organ each lesion sits in, ``(n_lesions,)``.
    findings
        The lesions' findings, in the order of ``lesion_masks``.
    """

    ct_hu: np.ndarray
    activity: np.ndarray
    pet: np.ndarray
    lesion_masks: np.ndarray
    background: np.ndarray
    findings: Findings

    @property
    def lesion_union(self) -> np.ndarray:
        """Union of the lesion masks, ``(D, H, W)`` bool."""
        if len(self.lesion_masks) == 0:
            return np.zeros(self.ct_hu.shape, dtype=bool)
        return np.asarray(self.lesion_masks.any(axis=0))


def _ellipse(x: np.ndarray, y: np.ndarray, cx: float, cy: float, ax: float | np.ndarray, ay: float | np.ndarray
             ) -> np.ndarray:
    return ((x - cx) / ax) ** 2 + ((y - cy) / ay) ** 2 <= 1.0


def _profile(z: np.ndarray, start: float, ramp: float) -> np.ndarray:
    """Cross-section scale of an organ that begins at ``start`` and widens over ``ramp``."""
    return np.sqrt(np.clip((z - start) / ramp, 0.0, 1.0))


def _anatomy(
    z: np.ndarray, y: np.ndarray, x: np.ndarray, rng: np.random.Generator
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Organ masks and per-case organ values on the grid."""
    s = rng.uniform(0.9, 1.02)
    body = _ellipse(x, y, 0.0, 0.0, 0.85 * s, 0.62 * s)
    lung_scale = _profile(z, -0.2, 0.35) + 1e-9
    right_lung = _ellipse(x, y, -0.4 * s, -0.02, 0.28 * s * lung_scale, 0.42 * s * lung_scale) & body
    left_lung = _ellipse(x, y, 0.4 * s, -0.02, 0.26 * s * lung_scale, 0.40 * s * lung_scale) & body
    thorax = z >= -0.2
    heart = _ellipse(x, y, 0.1 * s, -0.15, 0.2 * s, 0.18 * s) & (z >= -0.15) & (z <= 0.45) & ~right_lung & ~left_lung
    mediastinum = _ellipse(x, y, 0.0, -0.05, 0.13 * s, 0.38 * s) & thorax & ~heart & ~right_lung & ~left_lung
    liver_scale = _profile(-z, -0.15, 0.35) + 1e-9
    liver = _ellipse(x, y, -0.33 * s, 0.0, 0.42 * s * liver_scale, 0.45 * s * liver_scale) & body
    r_spine = np.sqrt(x**2 + ((y - 0.43 * s) / 1.0) ** 2)
    vertebra = r_spine <= 0.12 * s
    cortex = vertebra & (r_spine > 0.085 * s)
    r_body = np.sqrt((x / (0.85 * s)) ** 2 + (y / (0.62 * s)) ** 2)
    theta = np.arctan2(y, x)
    ribs = thorax & (r_body > 0.86) & (r_body < 0.93) & (np.cos(10.0 * theta) > 0.1) & ~vertebra
    masks = {
        "body": body,
        "right_lung": right_lung,
        "left_lung": left_lung,
        "heart": heart,
        "mediastinum": mediastinum,
        "liver": liver & ~right_lung & ~left_lung & ~heart,
        "marrow": vertebra & ~cortex,
        "cortex": cortex,
        "ribs": ribs,
    }
    values = {
        "tissue_hu": rng.uniform(30.0, 50.0),
        "lung_hu": rng.uniform(-850.0, -750.0),
        "liver_hu": rng.uniform(55.0, 65.0),
        "rib_hu": rng.uniform(700.0, 1200.0),
        "tissue_act": rng.uniform(0.8, 1.2),
        "lung_act": rng.uniform(0.25, 0.35),
        "heart_act": rng.uniform(2.5, 3.5),
        "liver_act": rng.uniform(1.8, 2.4),
        "marrow_act": rng.uniform(1.0, 1.4),
    }
    return masks, values


def _site_region(site: str, masks: dict[str, np.ndarray]) -> np.ndarray:
    return {
        "right_lung": masks["right_lung"],
        "left_lung": masks["left_lung"],
        "liver": masks["liver"],
        "bone": masks["marrow"],
        "mediastinal_node": masks["mediastinum"],
    }[site]


LOBE_SPLIT_Z = 0.4  # lungs span z in [-0.2, 1]; above mid-height is the upper lobe


def _lobe(site: str, zc: float) -> str:
    if site not in LUNG_SITES:
        return ""
    return "upper" if zc >= LOBE_SPLIT_Z else "lower"


def generate(config: PhantomConfig, rng: np.random.Generator) -> Phantom:
    """Draw one phantom.

    Parameters
    ----------
    config
        Generator settings.
    rng
        Random generator (the case is a function of its state).

    Returns
    -------
    Phantom
        CT, activity, PET, lesion masks and findings.
    """
    d, h, w = config.shape
    zs = np.array([rng.uniform(-0.9, 0.9)]) if d == 1 else np.linspace(-1.0, 1.0, d)
    zc_, yc_, xc_ = np.linspace(-1.0, 1.0, h), np.linspace(-1.0, 1.0, w), zs
    z, y, x = np.meshgrid(xc_, zc_, yc_, indexing="ij")
    masks, v = _anatomy(z, y, x, rng)

    hu = np.full(config.shape, HU_AIR)
    act = np.zeros(config.shape)
    hu[masks["body"]], act[masks["body"]] = v["tissue_hu"], v["tissue_act"]
    for lung in LUNG_SITES:
        hu[masks[lung]], act[masks[lung]] = v["lung_hu"], v["lung_act"]
    hu[masks["liver"]], act[masks["liver"]] = v["liver_hu"], v["liver_act"]
    hu[masks["heart"]], act[masks["heart"]] = v["tissue_hu"], v["heart_act"]
    hu[masks["mediastinum"]], act[masks["mediastinum"]] = v["tissue_hu"], v["tissue_act"]
    hu[masks["marrow"]], act[masks["marrow"]] = 250.0, v["marrow_act"]
    hu[masks["cortex"]], act[masks["cortex"]] = 1000.0, 0.4
    hu[masks["ribs"]], act[masks["ribs"]] = v["rib_hu"], 0.4

    lesion_hu = {
        "right_lung": 30.0, "left_lung": 30.0, "liver": v["liver_hu"] - 20.0, "bone": 120.0,
        "mediastinal_node": v["tissue_hu"] + 5.0,
    }
    organ_act = {
        "right_lung": v["lung_act"], "left_lung": v["lung_act"], "liver": v["liver_act"], "bone": v["marrow_act"],
        "mediastinal_node": v["tissue_act"],
    }

    n_lesions = int(rng.integers(config.min_lesions, config.max_lesions + 1))
    weights = np.asarray(config.site_weights, dtype=float)
    occupied = np.zeros(config.shape, dtype=bool)
    lesions: list[Lesion] = []
    lesion_masks: list[np.ndarray] = []
    background: list[float] = []
    half_mm = config.fov_mm / 2.0
    for _ in range(50 * max(n_lesions, 1)):
        if len(lesions) == n_lesions:
            break
        available = np.array([_site_region(s, masks).any() for s in SITES])
        p = weights * available
        if p.sum() == 0:
            break
        site = SITES[int(rng.choice(len(SITES), p=p / p.sum()))]
        kind = KINDS[int(rng.integers(2))]
        radius = rng.uniform(0.1, 0.14) if kind == "nodule" else rng.uniform(0.18, 0.25)
        if site == "bone":
            radius = min(radius, 0.1)
        region = _site_region(site, masks) & ~occupied
        idx = np.argwhere(region)
        if len(idx) == 0:
            continue
        picked = idx[rng.integers(len(idx))]
        c = (int(picked[0]), int(picked[1]), int(picked[2]))
        cz, cy, cx = z[c], y[c], x[c]
        mask = (((z - cz) ** 2 + (y - cy) ** 2 + (x - cx) ** 2) <= radius**2) & masks["body"]
        mask[c] = True
        if (mask & occupied).any():
            continue
        avid = bool(rng.random() < config.avid_probability[KINDS.index(kind)])
        bg = organ_act[site]
        uptake = bg + (rng.uniform(4.0, 8.0) if kind == "nodule" else rng.uniform(6.0, 10.0)) if avid else bg
        hu[mask], act[mask] = lesion_hu[site], uptake
        occupied |= mask
        size_mm = int(5 * round(2.0 * radius * half_mm / 5.0))
        lobe = _lobe(site, float(cz))
        lesions.append(Lesion(kind=kind, site=site, lobe=lobe, size_mm=size_mm, fdg_avid=avid, center=c))
        lesion_masks.append(mask)
        background.append(bg)

    ct = hu + config.hu_offset + rng.normal(0.0, config.ct_noise_hu, size=hu.shape) * (config.ct_noise_hu > 0)
    ct = np.clip(ct, HU_MIN, HU_MAX)
    sigma = (0.0, config.psf_sigma_vox, config.psf_sigma_vox) if d == 1 else config.psf_sigma_vox
    expected = gaussian_filter(act, sigma) * np.exp(-config.attenuation_coupling * hu_to_mu(hu)) * config.pet_gain
    pet = rng.poisson(np.clip(expected, 0.0, None) * config.counts_per_suv) / config.counts_per_suv
    return Phantom(
        ct_hu=ct.astype(np.float32),
        activity=act.astype(np.float32),
        pet=pet.astype(np.float32),
        lesion_masks=np.array(lesion_masks, dtype=bool).reshape(len(lesions), *config.shape),
        background=np.asarray(background, dtype=np.float32),
        findings=Findings(lesions=tuple(lesions)),
    )


@dataclass(frozen=True, kw_only=True)
class PhantomSet:
    """A batch of phantoms stacked into arrays.

    Attributes
    ----------
    ct_hu, pet, activity
        ``(n, D, H, W)`` float32.
    lesion_union
        ``(n, D, H, W)`` bool, the union of each case's lesion masks.
    cases
        The phantoms themselves (per-lesion masks and findings).
    """

    ct_hu: np.ndarray
    pet: np.ndarray
    activity: np.ndarray
    lesion_union: np.ndarray
    cases: tuple[Phantom, ...]

    def __len__(self) -> int:
        return len(self.cases)

    @property
    def findings(self) -> list[Findings]:
        """Findings of every case, in order."""
        return [c.findings for c in self.cases]


def generate_set(n: int, config: PhantomConfig, seed: int) -> PhantomSet:
    """Generate ``n`` phantoms; case ``i`` depends only on ``(seed, i)``.

    Parameters
    ----------
    n
        Number of cases.
    config
        Generator settings.
    seed
        Seed of the set.

    Returns
    -------
    PhantomSet
        The cases and their stacked arrays.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    cases = tuple(generate(config, np.random.default_rng([int(seed), i])) for i in range(n))
    return PhantomSet(
        ct_hu=np.stack([c.ct_hu for c in cases]),
        pet=np.stack([c.pet for c in cases]),
        activity=np.stack([c.activity for c in cases]),
        lesion_union=np.stack([c.lesion_union for c in cases]),
        cases=cases,
    )


def normalise_ct(hu: np.ndarray) -> np.ndarray:
    """CPDM's CT scaling ``(HU + 1024) / 2047``, clipped to ``[0, 1]``."""
    return np.clip((np.asarray(hu, dtype=np.float32) + 1024.0) / CT_NORM_SPAN, 0.0, 1.0)


def normalise_pet(pet: np.ndarray, suv_max: float) -> np.ndarray:
    """PET divided by ``suv_max`` and clipped to ``[0, 1]``."""
    if suv_max <= 0:
        raise ValueError(f"suv_max must be > 0, got {suv_max}")
    return np.clip(np.asarray(pet, dtype=np.float32) / suv_max, 0.0, 1.0)


def hot_spot_mask(pet01: np.ndarray, threshold: float) -> np.ndarray:
    """CPDM's attention target: ``1[PET > threshold]`` on normalised PET (code: 100/255)."""
    return np.asarray(pet01) > threshold
