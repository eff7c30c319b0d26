"""Driver of the ``hamming-fec`` chapter: low-latency Hamming FEC instead of RS(544,514) for HPC networks.

* :func:`ber_curves` and :func:`monte_carlo_points`: frame failure against raw
  BER per code, closed form and Monte-Carlo with the real codecs.
* :func:`npb_sweep`: every NPB-like kernel simulated (SimGrid) on a fat tree
  whose hops pay the RS(544,514) or the Hamming decode latency, per seed
  (rank placement), plus the computation estimate; run times and improvements.
* :func:`acceptability`: expected silently corrupted frames per run;
  :func:`acceptance_share` and :func:`half_acceptance_ber`: the share of kernels
  that accept a code against the assumed raw BER, and the BER at which half do
  (where the ``apps_accept_hamming`` verdict flips).
* :func:`claims`: the values the ledger records, one per claim: the network is
  simulated deterministically, so every claim is judged at one named
  configuration (ranks in order on the fat tree, placement 0); other placements
  and the swept constants are figures.  The claims are modelled: :func:`decode_sweep`
  moves the assumed RS decode latency (the run-time reduction and the RS-to-switch
  latency ratio), :func:`compute_sweep` the assumed computation rate, and
  :func:`rs_switch_parity_ns` gives the decode latency at which RS stops costing more
  than the switch.  :func:`plot_ber`, :func:`plot_npb`, :func:`plot_sensitivity` and
  :func:`plot_acceptance`: the figures.

:class:`Params` holds the chapter's parameters; :func:`run` runs the chapter and
returns :class:`Results`.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats
from tqdm import tqdm

from repro.collectives import fec
from repro.collectives.npb_skeletons import KERNELS, bytes_hops, fec_fat_tree, kernel_schedule, placement_for
from repro.hpc.dragonfly import with_endpoint_overhead
from repro.hpc.simgrid import simulate
from repro.params import ChapterParams, require
from repro.registry import BAND, load_registry
from repro.verdicts import in_band

CHAPTER = "hamming-fec"
JUDGED_PLACEMENT = 0
"""The rank placement every claim is judged at: ranks in order on the fat tree's hosts."""

CODES = ("rs544", "hamming_sec", "hamming_secded", "none")
FRAME_BYTES = fec.DATA_BITS_PER_FRAME / 8
BER_GRID = np.logspace(-12, -1.5, 60)
"""Raw bit error rates of the closed-form failure curves."""
RS_DECODE_SWEEP_NS = (50.0, 100.0, 150.0, 250.0, 500.0, 1000.0)
"""RS decode latencies of the sensitivity figure (the run's own value is marked on it)."""
GFLOPS_SWEEP = (1.0, 5.0, 20.0, 50.0, 200.0, 1000.0)
"""Computation rates per rank (Gop/s) of the sensitivity figure (the run's own value is always added)."""


def acceptance_bers(raw_ber: float) -> list[float]:
    """Raw BERs at which acceptability is tabulated: every half decade from 1e-15 to 1e-3, plus ``raw_ber``."""
    return sorted({*np.logspace(-15, -3, 25).tolist(), float(raw_ber)})


@dataclass(frozen=True, kw_only=True)
class LinkModel:
    """Constants of the simulated network (stated assumptions).

    Attributes
    ----------
    link_gbps, wire_ns, switch_ns:
        Link rate, wire latency per hop, switch pipeline (routing, allocation, crossbar).
    rs_decode_ns, hamming_decode_ns:
        Decoder pipeline once the codeword (block) has arrived.
    alpha_us:
        Per-message software start-up at the end points.
    """

    link_gbps: float = 400.0
    wire_ns: float = 5.0
    switch_ns: float = 100.0
    rs_decode_ns: float = 150.0
    hamming_decode_ns: float = 3.0
    alpha_us: float = 0.5

    def fec_ns(self, code: str) -> float:
        """Per-hop FEC latency of ``code`` (buffering at line rate + decode)."""
        dec = {"rs544": self.rs_decode_ns, "hamming_sec": self.hamming_decode_ns,
               "hamming_secded": self.hamming_decode_ns, "none": 0.0}[code]
        return fec.fec_latency_ns(code, self.link_gbps, dec)


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    kernels: tuple[str, ...]
    p: int
    hosts_per_leaf: int
    spines: int
    link_gbps: float
    wire_ns: float
    switch_ns: float
    rs_decode_ns: float
    hamming_decode_ns: float
    alpha_us: float
    gflops_per_rank: float
    raw_ber: float
    accept_errors: float
    mc_bers: tuple[float, ...]
    mc_frames: int
    mc_rs_codewords: int
    placements: tuple[int, ...]
    seeds: tuple[int, ...]

    def checks(self) -> None:
        """Refuse impossible combinations before any simulation starts."""
        require(self.p % self.hosts_per_leaf == 0, self, ("p", "hosts_per_leaf"), "hosts_per_leaf must divide p")
        require(self.p // self.hosts_per_leaf >= 2, self, ("p", "hosts_per_leaf"),
                "the fat tree needs at least two leaves (p / hosts_per_leaf >= 2)")
        require(JUDGED_PLACEMENT in self.placements, self, "placements",
                "placements must contain 0, the in-order placement every claim is judged at")
        require(all(0 < b < 0.5 for b in self.mc_bers), self, "mc_bers",
                "Monte-Carlo bit error rates must lie strictly between 0 and 0.5")

    def link(self) -> LinkModel:
        """The network constants of the run."""
        return LinkModel(link_gbps=self.link_gbps, wire_ns=self.wire_ns, switch_ns=self.switch_ns,
                         rs_decode_ns=self.rs_decode_ns, hamming_decode_ns=self.hamming_decode_ns,
                         alpha_us=self.alpha_us)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params:
        The parameters of the run.
    curves, monte_carlo:
        :func:`ber_curves` and :func:`monte_carlo_points` (the closed forms checked against the real codecs).
    runs:
        :func:`npb_sweep`, every kernel, placement and code.
    improvements:
        :func:`improvements` per kernel and placement.
    acceptability:
        :func:`acceptability` per kernel, code and raw BER.
    """

    params: Params
    curves: pd.DataFrame
    monte_carlo: pd.DataFrame
    runs: pd.DataFrame
    improvements: pd.DataFrame
    acceptability: pd.DataFrame

    @property
    def share(self) -> pd.Series:
        """Percent of kernels accepting Hamming SECDED per raw BER."""
        return acceptance_share(self.acceptability)

    @property
    def flip_ber(self) -> float:
        """The raw BER at which half of the kernels accept SECDED (``nan`` if the share never crosses half)."""
        return half_acceptance_ber(self.share)

    @property
    def judged(self) -> pd.DataFrame:
        """The improvements of the judged placement."""
        return self.improvements[self.improvements.seed == JUDGED_PLACEMENT]


def run(params: Params, *, progress: bool = True) -> Results:
    """Closed forms and Monte-Carlo, the NPB-like sweep on the fat tree, improvements and acceptability."""
    prm, link = params, params.link()
    runs = npb_sweep(list(prm.kernels), prm.p, prm.hosts_per_leaf, prm.spines, link, prm.gflops_per_rank,
                     list(prm.placements), progress=progress)
    return Results(params=prm, curves=ber_curves(BER_GRID),
                   monte_carlo=monte_carlo_points(list(prm.mc_bers), prm.mc_frames, prm.mc_rs_codewords, list(prm.seeds)),
                   runs=runs, improvements=improvements(runs),
                   acceptability=acceptability(runs, acceptance_bers(prm.raw_ber), prm.accept_errors))


def ber_curves(bers: np.ndarray) -> pd.DataFrame:
    """Closed-form per-frame detected / silent failure probabilities for every code and raw BER."""
    rows = []
    for code in CODES:
        for p in bers:
            out = fec.frame_outcomes(code, float(p))
            rows.append(dict(code=code, raw_ber=float(p), detected=out["detected"], silent=out["silent"],
                             failed=out["detected"] + out["silent"]))
    return pd.DataFrame(rows)


def monte_carlo_points(bers: list[float], frames: int, rs_codewords: int, seeds: list[int]) -> pd.DataFrame:
    """Monte-Carlo frame failure with the real codecs, one row per (code, BER, seed), with the closed form.

    Hamming: per-block outcomes lifted to frames with the block independence
    the closed form also uses; RS: decoded codewords (= frames).
    """
    rows = []
    for p in bers:
        for seed in seeds:
            for secded in (False, True):
                code = "hamming_secded" if secded else "hamming_sec"
                mc = fec.monte_carlo_hamming(p, frames, secded, seed)
                blk = fec.hamming_block_outcomes(p, fec.BLOCK_BITS + (10 if secded else 9), secded)
                for what in ("detected", "silent"):
                    if not secded and what == "detected":
                        continue
                    sigma = np.sqrt(blk[what] * (1 - blk[what]) / mc["blocks"])
                    rows.append(dict(code=code, raw_ber=p, seed=seed, outcome=f"block {what}", mc=mc[what],
                                     closed_form=blk[what], trials=mc["blocks"],
                                     z=(mc[what] - blk[what]) / sigma if sigma > 0 else 0.0))
            mc = fec.monte_carlo_rs(p, rs_codewords, seed)
            cf = fec.rs_frame_failure(p)
            sigma = np.sqrt(cf * (1 - cf) / rs_codewords)
            rows.append(dict(code="rs544", raw_ber=p, seed=seed, outcome="codeword failed", mc=mc["failure"],
                             closed_form=cf, trials=rs_codewords,
                             z=(mc["failure"] - cf) / sigma if sigma > 0 else 0.0))
    return pd.DataFrame(rows)


def monte_carlo_agrees(mc: pd.DataFrame, level: float = 0.95) -> bool:
    """Whether every Monte-Carlo point lies within the closed form's two-sided ``level`` band, Bonferroni-corrected.

    Each row's ``z`` is its deviation from the closed form in binomial standard errors; with ``n`` rows
    the bound is the normal quantile at ``1 - (1 - level) / (2 n)``.
    """
    if mc.empty:
        raise ValueError("no Monte-Carlo points")
    bound = float(stats.norm.ppf(1 - (1 - level) / (2 * len(mc))))
    return bool((mc.z.abs() <= bound).all())


def npb_sweep(kernels: list[str], p: int, hosts_per_leaf: int, spines: int, link: LinkModel,
              gflops_per_rank: float, seeds: list[int], progress: bool = True) -> pd.DataFrame:
    """Run time of every kernel with RS and with Hamming (SECDED) FEC on every hop.

    One iteration's communication is simulated with SimGrid for each code and
    seed; the run time is ``iterations x comm + flops / (p x rate)``.  The
    no-FEC network is added by linear extrapolation in the per-hop latency
    (exact while no messages contend, an estimate otherwise).

    Returns
    -------
    pandas.DataFrame
        ``kernel, seed, code, hop_ns, comm_s, compute_s, time_s, bytes_hops``.
    """
    if gflops_per_rank <= 0:
        raise ValueError(f"gflops_per_rank must be > 0, got {gflops_per_rank}")
    if not seeds:
        raise ValueError("seeds must not be empty")
    unknown = set(kernels) - set(KERNELS)
    if unknown:
        raise ValueError(f"kernels: unknown {sorted(unknown)}; choose from {sorted(KERNELS)}")
    codes = ("rs544", "hamming_secded")
    platforms = {c: with_endpoint_overhead(
        fec_fat_tree(p, hosts_per_leaf, spines, link.link_gbps, link.wire_ns, link.switch_ns, link.fec_ns(c)),
        link.alpha_us * 1e-6) for c in codes}
    raw = fec_fat_tree(p, hosts_per_leaf, spines, link.link_gbps, link.wire_ns, link.switch_ns, 0.0)
    rows = []
    bar = tqdm(total=len(kernels) * len(seeds) * len(codes), desc="simulations", disable=not progress)
    for name in kernels:
        k = KERNELS[name]
        sched = kernel_schedule(name, p)
        compute = k.flops / (p * gflops_per_rank * 1e9)
        for seed in seeds:
            place = placement_for(p, seed)
            bh = bytes_hops(sched, raw, place) * k.iterations
            comm = {}
            for code in codes:
                res = simulate(sched, platforms[code], 1, placement=place)
                comm[code] = res.time * k.iterations
                bar.update()
            h_rs, h_h = link.fec_ns("rs544"), link.fec_ns("hamming_secded")
            slope = (comm["rs544"] - comm["hamming_secded"]) / (h_rs - h_h) if h_rs != h_h else 0.0
            comm["none"] = max(comm["hamming_secded"] - slope * h_h, 0.0)
            for code, c in comm.items():
                rows.append(dict(kernel=name, seed=seed, code=code, hop_ns=link.fec_ns(code), comm_s=c,
                                 compute_s=compute, time_s=c + compute, bytes_hops=bh,
                                 how="simgrid" if code in codes else "extrapolated"))
    bar.close()
    return pd.DataFrame(rows)


def improvements(df: pd.DataFrame, rs_decode_ns: float | None = None, link: LinkModel | None = None) -> pd.DataFrame:
    """Per kernel and seed: Hamming's improvement over RS in run time and in communication time (%).

    With ``rs_decode_ns`` (and ``link``), the RS communication time is moved
    along the line through the two simulated points to that decode latency
    (sensitivity analysis).
    """
    rows = []
    for (kernel, seed), g in df.groupby(["kernel", "seed"]):
        by = g.set_index("code")
        rs_c, h_c = by.loc["rs544", "comm_s"], by.loc["hamming_secded", "comm_s"]
        if rs_decode_ns is not None and link is not None:
            h_rs, h_h = by.loc["rs544", "hop_ns"], by.loc["hamming_secded", "hop_ns"]
            new_h = fec.fec_latency_ns("rs544", link.link_gbps, rs_decode_ns)
            rs_c = h_c + (rs_c - h_c) * (new_h - h_h) / (h_rs - h_h)
        comp = by.loc["rs544", "compute_s"]
        rows.append(dict(kernel=kernel, seed=seed, rs_s=rs_c + comp, hamming_s=h_c + comp,
                         improvement_pct=100 * (rs_c - h_c) / (rs_c + comp),
                         comm_improvement_pct=100 * (rs_c - h_c) / rs_c if rs_c > 0 else 0.0,
                         comm_share_pct=100 * rs_c / (rs_c + comp)))
    return pd.DataFrame(rows)


def acceptability(df: pd.DataFrame, bers: list[float], accept_errors: float) -> pd.DataFrame:
    """Expected silently corrupted frames per run, per kernel, code and raw BER (the first placement's hop counts).

    A frame crossing ``h`` hops is decoded ``h`` times; the exposure is
    ``sum(bytes x hops) / bytes per frame`` frame-hops per run.
    """
    first = df[df.seed == df.seed.min()].drop_duplicates("kernel").set_index("kernel")
    rows = []
    for kernel, r in first.iterrows():
        frame_hops = r.bytes_hops / FRAME_BYTES
        for code in ("rs544", "hamming_sec", "hamming_secded", "none"):
            for p in bers:
                out = fec.frame_outcomes(code, p)
                silent = frame_hops * out["silent"]
                rows.append(dict(kernel=kernel, code=code, raw_ber=p, frame_hops=frame_hops,
                                 expected_silent=silent, expected_retransmissions=frame_hops * out["detected"],
                                 accepted=bool(silent < accept_errors)))
    return pd.DataFrame(rows)


def acceptance_share(acc: pd.DataFrame, code: str = "hamming_secded") -> pd.Series:
    """Percent of kernels that accept ``code``, per raw BER (ascending), from :func:`acceptability`'s table."""
    rows = acc[acc.code == code]
    if rows.empty:
        raise ValueError(f"no rows for code {code!r}")
    return 100.0 * rows.groupby("raw_ber").accepted.mean().sort_index()


TABLE_EVERY = 4
"""The silent-frames table shows every fourth BER of :func:`acceptance_bers` (every two decades) and the assumed one."""


def silent_frames_table(results: Results) -> pd.DataFrame:
    """Expected silently corrupted frames per run, per code and raw BER (rows) and kernel (columns)."""
    acc, share, raw_ber = results.acceptability, results.share, results.params.raw_ber
    shown = acc[acc.raw_ber.isin(share.index[::TABLE_EVERY].tolist() + [raw_ber])]
    return (shown.assign(raw_ber=shown.raw_ber.map("{:.0e}".format))
            .pivot_table(index=["code", "raw_ber"], columns="kernel", values="expected_silent", sort=False))


def half_acceptance_ber(share: pd.Series) -> float:
    """The raw BER at which the share of accepting kernels falls through 50%, log-interpolated.

    Parameters
    ----------
    share
        :func:`acceptance_share`'s series (percent, indexed by ascending raw BER).

    Returns
    -------
    float
        The crossing BER; ``nan`` if the share never crosses 50% on the grid
        (all above: the flip lies beyond the largest BER; all below: below the
        smallest).
    """
    bers, pct = share.index.to_numpy(dtype=float), share.to_numpy(dtype=float)
    above = pct > 50.0
    for i in range(len(bers) - 1):
        if above[i] and not above[i + 1]:
            lo, hi = np.log10(bers[i]), np.log10(bers[i + 1])
            frac = (pct[i] - 50.0) / (pct[i] - pct[i + 1])
            return float(10 ** (lo + frac * (hi - lo)))
    return float("nan")


def claims(results: Results) -> dict[str, list[float]]:
    """One value per claim at the judged configuration (ranks in order; deterministic)."""
    prm, link, acc = results.params, results.params.link(), results.acceptability
    at = acc[(acc.code == "hamming_secded") & np.isclose(acc.raw_ber, prm.raw_ber)]
    ratio = link.fec_ns("rs544") / link.switch_ns if link.switch_ns > 0 else float("inf")
    return {
        "npb_mean_improvement": [float(results.judged.improvement_pct.mean())],
        "rs_fec_vs_switch": [float(ratio)],
        "apps_accept_hamming": [float(100.0 * at.accepted.mean())],
    }


def decode_sweep(results: Results, decode_ns: tuple[float, ...] = RS_DECODE_SWEEP_NS) -> pd.DataFrame:
    """Mean run-time and communication reductions at the judged placement for each assumed RS decode latency.

    Returns
    -------
    pandas.DataFrame
        ``rs_decode_ns, run_pct, comm_pct``, ``in_band`` (the run-time reduction over the paper's number in the
        book's band, :data:`repro.registry.BAND`) and ``rs_over_switch`` (the ``rs_fec_vs_switch`` claim's value
        at that decode latency).
    """
    claim = load_registry().get(CHAPTER).claim("npb_mean_improvement")
    link = results.params.link()
    judged = results.runs[results.runs.seed == JUDGED_PLACEMENT]
    rows = []
    for ns in sorted({*decode_ns, results.params.rs_decode_ns}):
        imp = improvements(judged, ns, link)
        run_pct = float(imp.improvement_pct.mean())
        rows.append(dict(rs_decode_ns=ns, run_pct=run_pct, comm_pct=float(imp.comm_improvement_pct.mean()),
                         in_band=in_band(claim.ratio(run_pct)),
                         rs_over_switch=fec.fec_latency_ns("rs544", link.link_gbps, ns) / link.switch_ns
                         if link.switch_ns > 0 else float("inf")))
    return pd.DataFrame(rows)


def rs_switch_parity_ns(link: LinkModel) -> float:
    """The RS decode latency (ns) at which the per-hop RS latency equals the switch pipeline.

    Below it the ``rs_fec_vs_switch`` claim fails; 0 when buffering the codeword alone already exceeds the switch.
    """
    return max(link.switch_ns - fec.fec_latency_ns("rs544", link.link_gbps, 0.0), 0.0)


def compute_sweep(results: Results, rates: tuple[float, ...] = GFLOPS_SWEEP) -> pd.DataFrame:
    """Mean run-time reduction at the judged placement for each assumed computation rate per rank.

    The communication times stay as simulated; only the computation estimate (operations over the rate)
    moves, so the figure shows how much of the gap to the paper the assumed rate explains.

    Returns
    -------
    pandas.DataFrame
        ``gflops_per_rank, run_pct, comm_share_pct`` and ``in_band`` (as in :func:`decode_sweep`).
    """
    claim = load_registry().get(CHAPTER).claim("npb_mean_improvement")
    prm = results.params
    judged = results.runs[results.runs.seed == JUDGED_PLACEMENT]
    rows = []
    for rate in sorted({*rates, prm.gflops_per_rank}):
        imp = improvements(judged.assign(compute_s=judged.compute_s * prm.gflops_per_rank / rate))
        run_pct = float(imp.improvement_pct.mean())
        rows.append(dict(gflops_per_rank=rate, run_pct=run_pct, comm_share_pct=float(imp.comm_share_pct.mean()),
                         in_band=in_band(claim.ratio(run_pct))))
    return pd.DataFrame(rows)


def plot_ber(curves: pd.DataFrame, mc: pd.DataFrame) -> plt.Figure:
    """Per-frame failure probability against raw BER (lines: closed form; markers: Monte-Carlo)."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    labels = {"rs544": "RS(544,514)", "hamming_sec": "Hamming SEC", "hamming_secded": "Hamming SECDED",
              "none": "no FEC"}
    for code, g in curves.groupby("code", sort=False):
        line, = ax.plot(g.raw_ber, g.failed.clip(lower=1e-300), label=f"{labels[code]}: flagged or wrong")
        if code.startswith("hamming_secded"):
            ax.plot(g.raw_ber, g.silent.clip(lower=1e-300), ls=":", color=line.get_color(),
                    label=f"{labels[code]}: silently wrong")
    rs = mc[mc.code == "rs544"].groupby("raw_ber").mc.mean()
    ax.plot(rs.index, rs.values, "kx", ms=8, label="Monte-Carlo, RS codewords")
    blk = mc[(mc.code == "hamming_secded") & (mc.outcome == "block detected")].groupby("raw_ber").mc.mean()
    frame = 1 - (1 - blk) ** fec.BLOCKS_PER_FRAME
    ax.plot(frame.index, frame.values, "k+", ms=9, label="Monte-Carlo, SECDED frames")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-30, 2)
    ax.set_xlabel("raw bit error rate")
    ax.set_ylabel("probability per 5140-bit frame")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def plot_npb(results: Results) -> plt.Figure:
    """Headline figure: run time with Hamming FEC relative to RS-FEC, per kernel (and communication only).

    Bars are the judged placement (ranks in order); the error bars span every placement of the run.
    """
    imp = results.improvements
    paper_value = load_registry().get(CHAPTER).claim("npb_mean_improvement").paper_value
    judged = results.judged.set_index("kernel")
    agg = imp.groupby("kernel").agg(run=("improvement_pct", "mean"), run_sd=("improvement_pct", "std"),
                                    comm=("comm_improvement_pct", "mean"), comm_sd=("comm_improvement_pct", "std"))
    fig, ax = plt.subplots(figsize=(7, 3.8))
    x = np.arange(len(agg))
    lo = imp.groupby("kernel")[["improvement_pct", "comm_improvement_pct"]].min().loc[agg.index]
    hi = imp.groupby("kernel")[["improvement_pct", "comm_improvement_pct"]].max().loc[agg.index]
    run, comm = judged.improvement_pct.loc[agg.index], judged.comm_improvement_pct.loc[agg.index]
    ax.bar(x - 0.2, run, 0.4, yerr=[run - lo.improvement_pct, hi.improvement_pct - run],
           label="run time (computation included)")
    ax.bar(x + 0.2, comm, 0.4, yerr=[comm - lo.comm_improvement_pct, hi.comm_improvement_pct - comm],
           label="communication time only")
    if paper_value is not None:
        ax.axhline(paper_value, color="crimson", ls="--", label=f"paper: {paper_value:g}% (average)")
    ax.set_xticks(x, agg.index)
    ax.set_ylabel("reduction with Hamming vs RS-FEC (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_sensitivity(results: Results) -> plt.Figure:
    """How the modelled claims move with the constants we assumed (judged placement).

    Left: the mean reduction over kernels against the RS decode latency; middle: against the computation
    rate per rank; the band of run-time reductions that would count as matching the paper (the book's band,
    from the registry) is shaded, so the panels show where the verdict of ``npb_mean_improvement`` would
    change.  Right: the RS hop latency over the switch pipeline (``rs_fec_vs_switch``) against the decode
    latency, with the line where that claim flips.
    """
    prm = results.params
    decode, compute = decode_sweep(results), compute_sweep(results)
    paper_value = load_registry().get(CHAPTER).claim("npb_mean_improvement").paper_value
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(14, 3.6))
    ax.plot(decode.rs_decode_ns, decode.run_pct, "-o", label="run time")
    ax.plot(decode.rs_decode_ns, decode.comm_pct, "-s", label="communication only")
    ax.axvline(prm.rs_decode_ns, color="grey", ls=":", label="this run's assumption")
    bx.plot(compute.gflops_per_rank, compute.run_pct, "-o", label="run time")
    bx.axvline(prm.gflops_per_rank, color="grey", ls=":", label="this run's assumption")
    if paper_value is not None:
        for a in (ax, bx):
            a.axhspan(BAND[0] * paper_value, BAND[1] * paper_value, color="crimson", alpha=0.12,
                      label=f"{BAND[0]:g}–{BAND[1]:g}× the paper's {paper_value:g}%")
    for a, xlabel in ((ax, "RS decode latency per hop (ns)"), (bx, "computation rate per rank (Gop/s)")):
        a.set_xscale("log")
        a.set_xlabel(xlabel)
        a.set_ylabel("mean reduction (%)")
        a.legend(fontsize=7)
    claim = load_registry().get(CHAPTER).claim("rs_fec_vs_switch")
    cx.plot(decode.rs_decode_ns, decode.rs_over_switch, "-o")
    cx.axhline(claim.null_value, color="crimson", ls="--",
               label=f"claim flips (RS decode {rs_switch_parity_ns(prm.link()):.0f} ns)")
    cx.axvline(prm.rs_decode_ns, color="grey", ls=":", label="this run's assumption")
    cx.set(xscale="log", xlabel="RS decode latency per hop (ns)", ylabel="RS hop latency / switch pipeline")
    cx.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_acceptance(results: Results) -> plt.Figure:
    """Share of kernels accepting Hamming SECDED against the raw BER, with the 50% line and the assumed BER."""
    share, raw_ber, flip_ber = results.share, results.params.raw_ber, results.flip_ber
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(share.index, share.values, "-o")
    ax.axhline(50.0, color="crimson", ls="--", label="half of the kernels")
    ax.axvline(raw_ber, color="grey", ls=":", label=f"assumed raw BER {raw_ber:.0e}")
    if np.isfinite(flip_ber):
        ax.axvline(flip_ber, color="crimson", ls=":", label=f"verdict flips at {flip_ber:.1e}")
    ax.set_xscale("log")
    ax.set_ylim(-5, 105)
    ax.set_xlabel("raw bit error rate")
    ax.set_ylabel("kernels accepting SECDED (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
