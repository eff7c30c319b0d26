"""FEC codecs and models of ``repro.collectives.fec`` and the NPB-like skeletons.

Real codecs (exhaustive single/double errors for SECDED, up to 15 symbol errors
for RS(544,514)), closed forms against Monte-Carlo within 3 sigma, frame-format
compatibility, model invariants (zero BER, monotonicity), skeleton structure
(every all-to-all pair exactly once) and the simulated effect of a slower FEC.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from repro.collectives import fec
from repro.collectives import npb_skeletons as N
from repro.collectives.chapters.hamming_fec import LinkModel, acceptability, improvements, npb_sweep
from repro.hpc.ir import validate
from repro.hpc.simgrid import simgrid_available, simulate


@pytest.mark.parametrize("secded", [False, True])
def test_hamming_corrects_every_single_error(secded: bool) -> None:
    code = fec.Hamming(257, secded)
    assert code.n == 257 + (10 if secded else 9)
    data = np.random.default_rng(1).integers(0, 2, 257).astype(np.uint8)
    cw = code.encode(data)
    words = np.tile(cw, (code.n + 1, 1))
    words[np.arange(code.n), np.arange(code.n)] ^= 1  # row n: no error
    out, detected = code.decode(words)
    assert (out == data).all() and not detected.any()


def test_secded_detects_every_double_error() -> None:
    """All C(267, 2) double-error patterns of one block are flagged, none silently accepted."""
    code = fec.Hamming(257, True)
    data = np.random.default_rng(2).integers(0, 2, 257).astype(np.uint8)
    cw = code.encode(data)
    pairs = np.array(list(itertools.combinations(range(code.n), 2)))
    words = np.tile(cw, (len(pairs), 1))
    words[np.arange(len(pairs)), pairs[:, 0]] ^= 1
    words[np.arange(len(pairs)), pairs[:, 1]] ^= 1
    _, detected = code.decode(words)
    assert detected.all() and len(pairs) == 267 * 266 // 2


def test_frame_format_compatibility() -> None:
    """RS(544,514) carries exactly 5140 data bits = 20 x 257; the Hamming layouts fit in its 300 parity bits."""
    assert fec.RS_K * fec.RS_M == fec.DATA_BITS_PER_FRAME == fec.BLOCKS_PER_FRAME * fec.BLOCK_BITS
    assert fec.redundancy_bits("rs544") == 300
    for code in ("hamming_sec", "hamming_secded"):
        assert fec.redundancy_bits(code) <= 300
    assert fec.Hamming(257, True).check_bits * 20 == fec.redundancy_bits("hamming_secded")


@pytest.mark.parametrize("nerr", [0, 1, 2, 8, 15])
def test_rs_corrects_up_to_15_symbol_errors(nerr: int) -> None:
    rs = fec.ReedSolomon()
    rng = np.random.default_rng(nerr)
    for _ in range(3):
        cw = rs.encode(rng.integers(0, 1024, 514))
        assert not rs.syndromes(cw).any()
        word = cw.copy()
        pos = rng.choice(544, nerr, replace=False)
        word[pos] ^= rng.integers(1, 1024, nerr)
        dec, ok = rs.decode(word)
        assert ok and np.array_equal(dec, cw)


def test_rs_flags_16_symbol_errors() -> None:
    rs = fec.ReedSolomon()
    rng = np.random.default_rng(16)
    cw = rs.encode(rng.integers(0, 1024, 514))
    word = cw.copy()
    pos = rng.choice(544, 16, replace=False)
    word[pos] ^= rng.integers(1, 1024, 16)
    dec, ok = rs.decode(word)
    assert not np.array_equal(dec, cw)  # beyond t: never silently "repaired" to the sent word


def test_hamming_closed_form_matches_monte_carlo_within_3_sigma() -> None:
    p, frames = 1e-3, 1000
    for secded in (False, True):
        mc = fec.monte_carlo_hamming(p, frames, secded, seed=11)
        cf = fec.hamming_block_outcomes(p, 257 + (10 if secded else 9), secded)
        for what in ("detected", "silent") if secded else ("silent",):
            sigma = np.sqrt(cf[what] * (1 - cf[what]) / mc["blocks"])
            assert abs(mc[what] - cf[what]) <= 3 * sigma, (secded, what, mc[what], cf[what])


def test_rs_closed_form_matches_monte_carlo_within_3_sigma() -> None:
    p, n = 4e-3, 60
    mc = fec.monte_carlo_rs(p, n, seed=5)
    cf = fec.rs_frame_failure(p)
    assert abs(mc["failure"] - cf) <= 3 * np.sqrt(cf * (1 - cf) / n)


@pytest.mark.parametrize("code", ["rs544", "hamming_sec", "hamming_secded", "none"])
def test_zero_ber_gives_no_errors_and_failure_is_monotone(code: str) -> None:
    assert fec.frame_outcomes(code, 0.0) == {"detected": 0.0, "silent": 0.0}
    bers = np.logspace(-12, -2, 30)
    fail = [sum(fec.frame_outcomes(code, float(p)).values()) for p in bers]
    assert all(b >= a for a, b in zip(fail, fail[1:]))


def test_bad_inputs_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="raw_ber"):
        fec.frame_outcomes("rs544", 1.5)
    with pytest.raises(ValueError, match="code must be one of"):
        fec.frame_outcomes("ldpc", 1e-6)
    with pytest.raises(ValueError, match="lane_gbps"):
        fec.fec_latency_ns("rs544", 0.0, 100.0)
    with pytest.raises(ValueError, match="kernel"):
        N.kernel_schedule("BT", 16)


def test_latency_monotone_in_code_length_and_rate() -> None:
    """Same decoder delay: the longer the word to buffer, the longer the hop; faster lanes help."""
    lat = [fec.fec_latency_ns(c, 400.0, 10.0) for c in ("none", "hamming_sec", "hamming_secded", "rs544")]
    assert lat == sorted(lat) and lat[0] == 0.0
    assert fec.fec_latency_ns("rs544", 800.0, 10.0) < fec.fec_latency_ns("rs544", 400.0, 10.0)
    assert LinkModel().fec_ns("rs544") > LinkModel().fec_ns("hamming_secded")


@pytest.mark.parametrize("p", [4, 8, 16])
@pytest.mark.parametrize("kernel", sorted(N.KERNELS))
def test_skeletons_are_valid_schedules(kernel: str, p: int) -> None:
    sched = N.kernel_schedule(kernel, p)
    validate(sched)
    assert sched.num_steps >= 1


@pytest.mark.parametrize("p", [4, 8, 16])
def test_every_alltoall_delivers_each_block_exactly_once(p: int) -> None:
    """FT's all-to-all and IS's two all-to-alls: every ordered pair exchanges exactly one block."""
    ft = N.ft_steps(p)
    pairs = [(s, d) for step in ft for s, d, _ in step]
    assert sorted(pairs) == sorted(itertools.permutations(range(p), 2))
    is_ = N.is_steps(p)
    n_ar = len(N._allreduce(p, 4096))
    for a2a in (is_[n_ar:n_ar + p - 1], is_[n_ar + p - 1:]):
        pairs = [(s, d) for step in a2a for s, d, _ in step]
        assert sorted(pairs) == sorted(itertools.permutations(range(p), 2))


def test_lu_wavefront_order() -> None:
    """In the lower sweep a rank sends plane k only after its north and west neighbours sent it."""
    rows, cols = N.grid2(16)
    steps = N.lu_steps(16, n=6)
    first_send = {}
    for t, step in enumerate(steps[:6 + rows + cols - 3]):  # the corner rank's last step sends nothing
        for src, _, _ in step:
            first_send.setdefault(src, t)
    assert set(first_send) == set(range(rows * cols - 1))
    for r, t in first_send.items():
        i, j = divmod(r, cols)
        assert t == i + j


def test_zero_ber_acceptability_and_no_retransmissions() -> None:
    import pandas as pd

    df = pd.DataFrame([dict(kernel="CG", seed=0, code="rs544", bytes_hops=1e9)])
    acc = acceptability(df, [0.0, 1e-9], accept_errors=0.01)
    zero = acc[acc.raw_ber == 0.0]
    assert (zero.expected_silent == 0).all() and (zero.expected_retransmissions == 0).all() and zero.accepted.all()


@pytest.mark.skipif(not simgrid_available(), reason="SimGrid not installed (envs/simgrid-setup.sh)")
def test_slower_fec_never_speeds_a_kernel_up() -> None:
    """Simulated per-iteration time grows with the per-hop FEC latency.

    The sweep's RS runs are slower than its Hamming runs for every kernel and placement.
    """
    sched = N.kernel_schedule("LU", 8)
    times = [simulate(sched, N.fec_fat_tree(8, 4, 2, 400, 5, 100, f), 1).time for f in (0.0, 20.0, 200.0)]
    assert times[0] < times[1] < times[2]
    df = npb_sweep(["CG", "IS"], 8, 4, 2, LinkModel(), 5.0, [0, 1], progress=False)
    imp = improvements(df)
    assert (imp.improvement_pct > 0).all() and (imp.comm_improvement_pct >= imp.improvement_pct).all()
    none = df[df.code == "none"].set_index(["kernel", "seed"]).comm_s
    ham = df[df.code == "hamming_secded"].set_index(["kernel", "seed"]).comm_s
    assert (none <= ham).all()
