"""Chapter ``pnetcdf-compress``: chunked, compressed variables with multi-request aggregation (Hou et al., 2021).

:func:`runs` writes ``n`` synthetic 2-D variables, block-cyclically
decomposed over 4 to 8 MPI ranks (oversubscribed, local files), with our
re-implementation of the PnetCDF design (:mod:`repro.pario.mpi_chunked`) one
request (variable) at a time and all requests in one round, and as plain
uncompressed contiguous variables with MPI's ``Write_at_all``; then every
rank reads its hyperslabs back with the collective read path
(:func:`~repro.pario.mpi_chunked.chunked_read`, per request and aggregated,
as PnetCDF requires collective reads of chunked variables), and rank 0 also
reads every file with the independent reader.  :func:`hdf5_checks` writes the
same variables with HDF5's own gzip filter (h5py, serial) and compares the
chunks one by one.  One launch per rank count runs every variable count and
seed.  :class:`Params`, :func:`run` and :func:`claims` are the chapter's contract.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.params import ChapterParams, require
from repro.pario.chunked import Variable, synthetic_field
from repro.pario.hdf5_ref import Hdf5Comparison, hdf5_reference
from repro.pario.mpi_worker import launch

PER_REQUEST, AGGREGATED = "per-request", "aggregated"
PHASES = ("owners_s", "exchange_s", "compress_s", "io_s")
READ_PHASES = ("read_owners_s", "read_exchange_s", "read_decode_s", "read_io_s")


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    ranks: tuple[int, ...]
    n_vars: tuple[int, ...]
    rows: int
    cols: int
    chunk_rows: int
    chunk_cols: int
    tile_rows: int
    tile_cols: int
    filter: str
    level: int
    repeats: int
    seeds: tuple[int, ...]

    def checks(self) -> None:
        """Refuse impossible combinations before any MPI job starts."""
        require(self.chunk_rows <= self.rows and self.chunk_cols <= self.cols, self,
                ("chunk_rows", "chunk_cols", "rows", "cols"), "a chunk must fit in the variable")
        require(self.tile_rows <= self.rows and self.tile_cols <= self.cols, self,
                ("tile_rows", "tile_cols", "rows", "cols"), "a tile must fit in the variable")
        tiles = -(-self.rows // self.tile_rows) * -(-self.cols // self.tile_cols)
        require(max(self.ranks) <= tiles, self, ("ranks", "rows", "cols", "tile_rows", "tile_cols"),
                "every rank needs at least one tile of the block-cyclic decomposition")

    @property
    def pair_mib(self) -> float:
        """MiB of one float32 and one float64 variable (the workload alternates them)."""
        return self.rows * self.cols * (4 + 8) / 2**20

    def workload(self) -> WorkloadConfig:
        """The synthetic workload of the run."""
        return WorkloadConfig(shape=(self.rows, self.cols), chunk=(self.chunk_rows, self.chunk_cols),
                              tile=(self.tile_rows, self.tile_cols), filter=self.filter, level=self.level,
                              repeats=self.repeats)


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
    read_owners_s: float
    read_exchange_s: float
    read_decode_s: float
    read_io_s: float
    read_total_s: float
    read_faults: int


def _case(cfg: WorkloadConfig, p: int, n: int, seed: int) -> dict:
    """The worker's job for ``n`` variables of seed ``seed`` on ``p`` ranks."""
    return {"variables": [v.__dict__ for v in cfg.variables(n)], "grid": list(process_grid(p)), "tile": list(cfg.tile),
            "seed": seed, "modes": [PER_REQUEST, AGGREGATED], "repeats": cfg.repeats}


def runs(
    cfg: WorkloadConfig, ranks: list[int], n_vars: list[int], seeds: list[int], keep: Path | None = None, timeout: float = 900.0
) -> list[WriteRecord]:
    """Write and read back every (rank count, variable count, seed) in both modes, and write uncompressed.

    One MPI launch per rank count runs every variable count and seed.  ``faults`` counts variables the
    independent reader reads back differently, overlapping or out-of-file chunk extents, and a mode whose
    file differs from the other mode's; ``read_faults`` the variables some rank's collective read got
    wrong.  With ``keep``, the aggregated file of the largest run of each seed is kept there (for
    :func:`hdf5_checks`).
    """
    out = []
    for p in tqdm(ranks, desc="MPI launches (one per rank count)"):
        cases = [(n, s) for n in n_vars for s in seeds]
        jobs = [_case(cfg, p, n, seed) | ({"keep": str(keep / f"seed{seed}.bin")}
                                           if keep is not None and p == max(ranks) and n == max(n_vars) else {})
                for n, seed in cases]
        rep = launch(p, {"chunked_cases": jobs}, timeout=timeout)
        for (n, seed), case in zip(cases, rep["cases"]):
            mismatch = int(not case["modes_identical"])
            for m in case["modes"]:
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
                        raw_bytes=case["raw_bytes"],
                        faults=faults + int(not case["contiguous"]["equals_fields"]),
                        contiguous_s=case["contiguous"]["write_s"],
                        read_owners_s=m["read_owners_s"],
                        read_exchange_s=m["read_exchange_s"],
                        read_decode_s=m["read_decode_s"],
                        read_io_s=m["read_io_s"],
                        read_total_s=m["read_total_s"],
                        read_faults=m["read_differing"],
                    )
                )
    return out


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params:
        The parameters of the run.
    records:
        Every write and collective read (rank count, variable count, seed, mode).
    hdf5:
        Per seed, HDF5's gzip chunks against ours (the largest run's aggregated file).
    """

    params: Params
    records: list[WriteRecord]
    hdf5: dict[int, Hdf5Comparison]

    @property
    def table(self) -> pd.DataFrame:
        """The runs as a table (:func:`frame`)."""
        return frame(self.records)


def run(params: Params) -> Results:
    """Every write and collective read, then HDF5's chunks against ours."""
    cfg = params.workload()
    with tempfile.TemporaryDirectory(prefix="repro-pnetcdf-keep-") as kept:
        records = runs(cfg, list(params.ranks), list(params.n_vars), list(params.seeds), keep=Path(kept))
        hdf5 = hdf5_checks(cfg, max(params.n_vars), list(params.seeds), Path(kept))
    return Results(params=params, records=records, hdf5=hdf5)


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


def claims(results: Results) -> dict[str, list[float]]:
    """Per-seed values of every claim of the chapter (see its registry file), at the largest variable and rank count."""
    df, seeds = results.table, list(results.params.seeds)
    top = df[(df.p == df.p.max()) & (df.n_vars == df.n_vars.max())].set_index(["seed", "mode"])
    return {
        "aggregation_speedup": [float(top.total_s[s, PER_REQUEST] / top.total_s[s, AGGREGATED]) for s in seeds],
        "read_aggregation_speedup": [float(top.read_total_s[s, PER_REQUEST] / top.read_total_s[s, AGGREGATED])
                                     for s in seeds],
        "round_trip": [float(df[df.seed == s].faults.sum() + df[df.seed == s].read_faults.sum()) for s in seeds],
        "hdf5_agree": [float(results.hdf5[s].differing) for s in seeds],
    }


def read_figure(results: Results) -> plt.Figure:
    """Collective read time per phase against the number of variables, both modes, at the largest rank count."""
    df = results.table
    top = df[df.p == df.p.max()]
    mean = top.groupby(["n_vars", "mode"])[list(READ_PHASES)].mean()
    ns = sorted(top.n_vars.unique())
    fig, ax = plt.subplots(figsize=(6.5, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    x = np.arange(len(ns))
    for j, mode in enumerate((PER_REQUEST, AGGREGATED)):
        bottom = np.zeros(len(ns))
        for k, ph in enumerate(READ_PHASES):
            vals = np.array([mean.loc[(n, mode), ph] for n in ns])
            ax.bar(x + (j - 0.5) * 0.4, vals, 0.38, bottom=bottom, color=colors[k],
                   hatch="//" if mode == AGGREGATED else None, edgecolor="white",
                   label=ph.removeprefix("read_").removesuffix("_s") if j == 0 else None)
            bottom += vals
    ax.set_xticks(x)
    ax.set_xticklabels([f"{n} vars\n(left: per request,\nright: aggregated)" for n in ns], fontsize=7)
    ax.set(ylabel="collective read time, s (slowest rank; indicative)", title=f"{int(df.p.max())} ranks")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def breakdown_figure(results: Results) -> plt.Figure:
    """Write time per phase against the number of variables, both modes, per rank count (stacked bars)."""
    df = results.table
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
