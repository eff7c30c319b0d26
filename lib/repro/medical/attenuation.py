"""Hounsfield units to linear attenuation coefficients at 511 keV.

CPDM's attenuation map follows the bilinear (piecewise-linear) conversion used
for CT-based attenuation correction of PET: below water the coefficient rises
with the air-water mixture, above water with a shallower bone slope.  The
constants are those of the authors' code at 140 kVp (their code fixes the tube
voltage at 140 kVp whatever the DICOM header says; so do we):

    knots (HU, mu in 1/cm): (-1000, b0 - 1000 a0), (0, b1),
                            (1000, b1 + 1000 a1), (3000, b1 + 1000 a1 + 2000 a2)
    a = (9.3e-5, 5.59e-5, 0.698e-5),  b = (0.093, 0.093, 0.142)

Between knots the coefficient is linear; it is clamped to the end knots
outside ``[-1000, 3000]`` HU.  The map handed to the network is
``A = exp(-mu)``, which is 1 in air.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class BilinearModel:
    """Slopes ``a`` (1/(cm HU)) and intercepts ``b`` (1/cm) of the bilinear model.

    Attributes
    ----------
    slopes
        ``(a0, a1, a2)``: below water, water to 1000 HU, 1000 to 3000 HU.
    intercepts
        ``(b0, b1, b2)``; ``b0`` and ``b1`` fix the knots (``b2`` is kept for
        fidelity to the code's table, which does not use it for the knots).
    """

    slopes: tuple[float, float, float] = (9.3e-5, 5.59e-5, 0.698e-5)
    intercepts: tuple[float, float, float] = (0.093, 0.093, 0.142)

    @property
    def knots(self) -> tuple[np.ndarray, np.ndarray]:
        """The knots ``(hu, mu)`` of the piecewise-linear conversion, each of length 4."""
        a0, a1, a2 = self.slopes
        b0, b1, _ = self.intercepts
        hu = np.array([-1000.0, 0.0, 1000.0, 3000.0])
        mu = np.array([b0 - 1000.0 * a0, b1, b1 + 1000.0 * a1, b1 + 1000.0 * a1 + 2000.0 * a2])
        return hu, mu


KVP_140 = BilinearModel()


def hu_to_mu(hu: np.ndarray, model: BilinearModel = KVP_140) -> np.ndarray:
    """Linear attenuation coefficient at 511 keV (1/cm) of CT values in HU.

    Parameters
    ----------
    hu
        CT values in Hounsfield units, any shape.
    model
        The bilinear model (default: the code's 140 kVp constants).

    Returns
    -------
    numpy.ndarray
        ``mu`` with the shape of ``hu``, non-negative and non-decreasing in HU.
    """
    knot_hu, knot_mu = model.knots
    return np.interp(np.asarray(hu, dtype=np.float64), knot_hu, knot_mu)


def attenuation_map(hu: np.ndarray, model: BilinearModel = KVP_140) -> np.ndarray:
    """CPDM's attenuation map ``exp(-mu(HU))``: 1 in air, below 1 in tissue and bone."""
    return np.exp(-hu_to_mu(hu, model))
