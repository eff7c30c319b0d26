"""Medical imaging: cost of CPDM's condition maps per bridge training step, and of the report generator.

Rows: seconds per training step of the cpu-profile bridge denoiser (32 x 32
slices, batch 32, 8 base channels) without maps, with one and with both
condition channels, and of the L1 regression UNet; and seconds per epoch of
the report generator on 64 volumes of 16 x 32 x 32.  Best of 3, one torch
thread.  Timings live here, never in the tests.
"""

from __future__ import annotations

import numpy as np
import torch
from timing import timed

from repro.bridge import BridgeSchedule
from repro.medical.cpdm import BridgeSettings, MapChoice, attenuation_channel, condition_stack, train_translator
from repro.medical.phantom import PhantomConfig, generate_set, normalise_ct, normalise_pet
from repro.medical.regression import train_regression
from repro.medical.report_generator import ChannelScaling, GeneratorConfig, ReportGenerator, Vocabulary, train_generator
from repro.medical.reports import render
from repro.medical.unet import UNetConfig

N_SLICES = 64
BATCH = 32


def run() -> list[tuple[str, float, str]]:
    """Rows ``(name, seconds, ratio)``."""
    torch.set_num_threads(1)
    data = generate_set(N_SLICES, PhantomConfig(shape=(1, 32, 32)), 0)
    hu, ct01, pet01 = data.ct_hu[:, 0], normalise_ct(data.ct_hu[:, 0]), normalise_pet(data.pet[:, 0], 10.0)
    attention = np.where(pet01 > 0.18, 1.0, -1.0).astype(np.float32)
    plain = UNetConfig(base=8, levels=2)
    settings = BridgeSettings(schedule=BridgeSchedule(n_timesteps=200), epochs=1, batch_size=BATCH, lr=2e-3, sample_steps=20)
    steps = N_SLICES // BATCH
    rows = []
    base = None
    arms = [
        ("bridge alone", MapChoice()),
        ("+ attenuation", MapChoice(attenuation=True)),
        ("CPDM, both maps", MapChoice(attenuation=True, attention=True)),
    ]
    for name, maps in arms:
        cond = condition_stack(maps, attenuation_channel(hu), attention)
        s = timed(lambda: train_translator(maps, ct01, pet01, cond, plain, settings, seed=0), 3) / steps
        base = base or s
        rows.append((f"medical: bridge step, {name}", s, f"{s / base:.2f}x bridge alone"))
    s = timed(lambda: train_regression(ct01, pet01, plain, epochs=1, batch_size=BATCH, lr=2e-3, seed=0), 3) / steps
    rows.append(("medical: L1 regression UNet step", s, f"{s / base:.2f}x bridge alone"))
    vols = generate_set(64, PhantomConfig(shape=(16, 32, 32), max_lesions=2), 0)
    x = np.stack([normalise_ct(vols.ct_hu), normalise_pet(vols.pet, 10.0)], axis=1)
    reports = [render(f) for f in vols.findings]
    vocab = Vocabulary.build(reports)
    model = ReportGenerator(
        GeneratorConfig(volume_shape=(16, 32, 32), vocab_size=len(vocab), channels=(8, 16, 32), hidden=96, embed=48)
    )
    s = timed(
        lambda: train_generator(
            model, ChannelScaling.fit(x).apply(x), vocab.encode(reports, 49), epochs=1, batch_size=BATCH, lr=2e-3, seed=0
        ),
        3,
    )
    rows.append(("medical: report generator epoch (64 volumes)", s, "-"))
    return rows


if __name__ == "__main__":
    for name, sec, ratio in run():
        print(f"{name:<48} {sec:8.4f}  {ratio}")
