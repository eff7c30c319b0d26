"""Chapter ``pnetcdf-compress``: chunked, compressed variables with multi-request aggregation (Hou et al., 2021).

:func:`runs` writes ``n`` synthetic 2-D variables, block-cyclically
decomposed over 4 to 8 MPI ranks (oversubscribed, local files), with our
re-implementation of the PnetCDF design (:mod:`repro.pario.mpi_chunked`) one
request (variable) at a time and all requests in one round, and as plain
uncompressed contiguous variables with MPI's ``Write_at_all``; rank 0 reads
every file back with the independent reader.  :func:`hdf5_checks` writes the
same variables with HDF5's own gzip filter (h5py, serial) and compares the
chunks one by one.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.pario.chunked import Variable, synthetic_field
from repro.pario.hdf5_ref import Hdf5Comparison, hdf5_reference
from repro.pario.mpi_worker import launch

PER_REQUEST, AGGREGATED = "per-request", "aggregated"
PHASES = ("owners_s", "exchange_s", "compress_s", "io_s")


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    """The synthetic E3SM-like workload.

    Attributes
    ----------
    shape, chunk, tile:
        Variable shape, chunk shape and the block-cyclic tile (elements).
    filter, level:
        ``"zlib"`` or ``"identity"``, and the zlib level.
    repeats:
        Timed repetitions per write (median kept).
    """

    shape: tuple[int, int]
    chunk: tuple[int, int]
    tile: tuple[int, int]
    filter: str
    level: int
    repeats: int

    def variables(self, n: int) -> list[Variable]:
        """``n`` float32 variables of the configured shape; every other one is a float64 variable."""
        return [
            Variable(
                name=f"var{i:03d}",
                shape=self.shape,
                chunk=self.chunk,
                dtype="<f4" if i % 2 == 0 else "<f8",
                filter=self.filter,
                level=self.level,
            )
            for i in range(n)
        ]


def process_grid(p: int) -> tuple[int, int]:
    """A near-square ``pr x pc`` grid of ``p`` ranks."""
    pr = int(np.sqrt(p))
    while p % pr:
        pr -= 1
    return pr, p // pr


@dataclass(frozen=True, kw_only=True)
class WriteRecord:
    """One mode's write in one run; times are the slowest rank's, in seconds, on a shared host."""

    p: int
    n_vars: int
    seed: int
    mode: str
    rounds: int
    owners_s: float
    exchange_s: float
    compress_s: float
    io_s: float
    total_s: float
    stored_bytes: int
    raw_bytes: int
    faults: int
    contiguous_s: float


def runs(
    cfg: WorkloadConfig, ranks: list[int], n_vars: list[int], seeds: list[int], keep: Path | None = None, timeout: float = 300.0
) -> list[WriteRecord]:
    """Write every (rank count, variable count, seed) in both modes and uncompressed.

    ``faults`` counts variables read back differently, overlapping or
    out-of-file chunk extents, and a mode whose file differs from the other
    mode's.  With ``keep``, the aggregated file of the largest run of each
    seed is kept there (for :func:`hdf5_checks`).
    """
    out = []
    points = [(p, n, s) for p in ranks for n in n_vars for s in seeds]
    for p, n, seed in tqdm(points, desc="MPI runs"):
        variables = cfg.variables(n)
        job = {
            "chunked": {
                "variables": [v.__dict__ for v in variables],
                "grid": list(process_grid(p)),
                "tile": list(cfg.tile),
                "seed": seed,
                "modes": [PER_REQUEST, AGGREGATED],
                "repeats": cfg.repeats,
            }
        }
        with tempfile.TemporaryDirectory(prefix="repro-pnetcdf-") as tmp:
            rep = launch(p, job | {"workdir": tmp}, timeout=timeout)
            if keep is not None and p == max(ranks) and n == max(n_vars):
                (Path(tmp) / f"chunked_{AGGREGATED}.bin").replace(keep / f"seed{seed}.bin")
        mismatch = int(not rep["modes_identical"])
        for m in rep["modes"]:
            faults = m["variables_differing"] + m["overlapping_extents"] + m["extents_outside"] + mismatch
            out.append(
                WriteRecord(
                    p=p,
                    n_vars=n,
                    seed=seed,
                    mode=m["mode"],
                    rounds=m["rounds"],
                    owners_s=m["owners_s"],
                    exchange_s=m["exchange_s"],
                    compress_s=m["compress_s"],
                    io_s=m["io_s"],
                    total_s=m["total_s"],
                    stored_bytes=m["stored_bytes"],
                    raw_bytes=rep["raw_bytes"],
                    faults=faults + int(not rep["contiguous"]["equals_fields"]),
                    contiguous_s=rep["contiguous"]["write_s"],
                )
            )
    return out


def hdf5_checks(cfg: WorkloadConfig, n_vars: int, seeds: list[int], kept: Path) -> dict[int, Hdf5Comparison]:
    """HDF5's gzip chunks against ours, per seed, for the kept aggregated files."""
    out = {}
    variables = cfg.variables(n_vars)
    for seed in seeds:
        fields = [synthetic_field(v, seed + i) for i, v in enumerate(variables)]
        out[seed] = hdf5_reference(kept / f"seed{seed}.bin", kept / f"seed{seed}.h5", variables, fields)
    return out


def frame(records: list[WriteRecord]) -> pd.DataFrame:
    """The runs as a table with the compression ratio."""
    df = pd.DataFrame([r.__dict__ for r in records])
    df["compression_ratio"] = df.raw_bytes / df.stored_bytes
    return df


def claims(records: list[WriteRecord], hdf5: dict[int, Hdf5Comparison], seeds: list[int]) -> dict[str, list[float]]:
    """Per-seed values of every claim of the chapter (see its registry file)."""
    df = frame(records)
    top = df[(df.p == df.p.max()) & (df.n_vars == df.n_vars.max())].set_index(["seed", "mode"]).total_s
    return {
        "aggregation_speedup": [float(top[s, PER_REQUEST] / top[s, AGGREGATED]) for s in seeds],
        "round_trip": [float(df[df.seed == s].faults.sum()) for s in seeds],
        "hdf5_agree": [float(hdf5[s].differing) for s in seeds],
    }


def breakdown_figure(records: list[WriteRecord]) -> plt.Figure:
    """Write time per phase against the number of variables, both modes, per rank count (stacked bars)."""
    df = frame(records)
    mean = df.groupby(["p", "n_vars", "mode"])[[*PHASES, "contiguous_s"]].mean().reset_index()
    ps = sorted(mean.p.unique())
    fig, axes = plt.subplots(1, len(ps), figsize=(5.5 * len(ps), 4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, p in zip(axes[0], ps):
        sub = mean[mean.p == p]
        ns = sorted(sub.n_vars.unique())
        x = np.arange(len(ns))
        for j, mode in enumerate((PER_REQUEST, AGGREGATED)):
            rows = sub[sub["mode"] == mode].set_index("n_vars").loc[ns]
            bottom = np.zeros(len(ns))
            for k, ph in enumerate(PHASES):
                ax.bar(
                    x + (j - 0.5) * 0.4,
                    rows[ph].to_numpy(),
                    0.38,
                    bottom=bottom,
                    color=colors[k],
                    hatch="//" if mode == AGGREGATED else None,
                    edgecolor="white",
                    label=f"{ph[:-2]}" if j == 0 else None,
                )
                bottom += rows[ph].to_numpy()
        cont = sub[sub["mode"] == AGGREGATED].set_index("n_vars").loc[ns].contiguous_s
        ax.plot(x, cont.to_numpy(), "k_", ms=30, mew=2, label="uncompressed contiguous")
        ax.set_xticks(x)
        ax.set_xticklabels([f"{n} vars\n(left: per request,\nright: aggregated)" for n in ns], fontsize=7)
        ax.set(ylabel="write time, s (slowest rank; indicative)", title=f"{p} ranks")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig
