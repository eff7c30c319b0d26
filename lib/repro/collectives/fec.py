"""Forward error correction on HPC links: RS(544,514) against Hamming codes (chapter ``hamming-fec``).

Frame format (400GbE-style, IEEE 802.3bs): 20 transcoded blocks of 257 bits
(256b/257b) = 5140 data bits per frame, protected by 300 parity bits of the
Reed-Solomon code RS(544,514) over GF(2^10) (corrects up to 15 symbols).
The alternative keeps the frame and the redundancy budget but protects each
257-bit block with a Hamming code: SEC (9 check bits, 266-bit blocks) or
SECDED (10 check bits, 267-bit blocks); 20 x 10 = 200 <= 300 bits.

Contents

* real codecs: :class:`ReedSolomon` (systematic encoder, Berlekamp-Massey /
  Chien / Forney decoder) and :class:`Hamming` (SEC / SECDED, numpy bit
  matrices);
* closed forms of the post-decoding failure probabilities under i.i.d. bit
  errors (:func:`rs_frame_failure`, :func:`hamming_block_outcomes`,
  :func:`frame_outcomes`) and Monte-Carlo estimators to check them;
* a latency model of one hop (:func:`fec_latency_ns`, :class:`HopLatency`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

DATA_BITS_PER_FRAME = 5140
BLOCK_BITS = 257
BLOCKS_PER_FRAME = 20
RS_N, RS_K, RS_M = 544, 514, 10
RS_T = (RS_N - RS_K) // 2
RS_PRIMITIVE = 0b10000001001  # x^10 + x^3 + 1 (the KP4 field of 802.3)


# --------------------------------------------------------------------- GF(2^10)
@lru_cache(maxsize=None)
def _gf_tables(m: int = RS_M, prim: int = RS_PRIMITIVE) -> tuple[np.ndarray, np.ndarray]:
    """Exponential (doubled length) and logarithm tables of GF(2^m)."""
    size = 1 << m
    exp = np.zeros(2 * size, dtype=np.int64)
    log = np.zeros(size, dtype=np.int64)
    x = 1
    for i in range(size - 1):
        exp[i] = x
        log[x] = i
        x <<= 1
        if x & size:
            x ^= prim
    exp[size - 1:2 * size - 2] = exp[:size - 1]
    return exp, log


def _mul(a: int, b: int) -> int:
    if a == 0 or b == 0:
        return 0
    exp, log = _gf_tables()
    return int(exp[log[a] + log[b]])


def _inv(a: int) -> int:
    exp, log = _gf_tables()
    if a == 0:
        raise ZeroDivisionError("0 has no inverse in GF(2^m)")
    return int(exp[(RS_N_FIELD - log[a]) % RS_N_FIELD])


RS_N_FIELD = (1 << RS_M) - 1


def _poly_mul(p: list[int], q: list[int]) -> list[int]:
    out = [0] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        if a:
            for j, b in enumerate(q):
                out[i + j] ^= _mul(a, b)
    return out


class ReedSolomon:
    """Systematic RS(n, k) over GF(2^10), roots ``alpha^0 .. alpha^(n-k-1)``.

    Codewords are arrays of ``n`` symbols (ints ``< 1024``), highest power first:
    the ``k`` message symbols followed by ``n-k`` parity symbols.
    """

    def __init__(self, n: int = RS_N, k: int = RS_K) -> None:
        if not 0 < k < n <= RS_N_FIELD:
            raise ValueError(f"need 0 < k < n <= {RS_N_FIELD}, got n={n}, k={k}")
        self.n, self.k, self.t = n, k, (n - k) // 2
        exp, _ = _gf_tables()
        g = [1]
        for i in range(n - k):
            g = _poly_mul(g, [1, int(exp[i])])
        self.gen = g  # highest power first, monic

    def encode(self, msg: np.ndarray) -> np.ndarray:
        """Append ``n-k`` parity symbols to ``k`` message symbols."""
        msg = np.asarray(msg, dtype=np.int64)
        if msg.shape != (self.k,) or msg.min(initial=0) < 0 or msg.max(initial=0) > RS_N_FIELD:
            raise ValueError(f"message must be {self.k} symbols in [0, {RS_N_FIELD}]")
        rem = list(msg) + [0] * (self.n - self.k)
        for i in range(self.k):
            coef = rem[i]
            if coef:
                for j in range(1, len(self.gen)):
                    rem[i + j] ^= _mul(self.gen[j], coef)
        return np.concatenate([msg, np.array(rem[self.k:], dtype=np.int64)])

    def syndromes(self, word: np.ndarray) -> np.ndarray:
        """``S_i = r(alpha^i)`` for ``i = 0 .. n-k-1`` (all zero iff ``word`` is a codeword)."""
        exp, log = _gf_tables()
        word = np.asarray(word, dtype=np.int64)
        powers = np.arange(self.n - 1, -1, -1, dtype=np.int64)  # degree of each position
        nz = word != 0
        out = np.zeros(self.n - self.k, dtype=np.int64)
        lw = log[word[nz]]
        for i in range(self.n - self.k):
            vals = exp[(lw + i * powers[nz]) % RS_N_FIELD]
            out[i] = np.bitwise_xor.reduce(vals) if vals.size else 0
        return out

    def decode(self, word: np.ndarray) -> tuple[np.ndarray, bool]:
        """Correct up to ``t`` symbol errors.

        Returns
        -------
        (numpy.ndarray, bool)
            The corrected codeword and ``True``, or the received word and
            ``False`` when the decoder detects more errors than it can correct.
            (Like any bounded-distance decoder it may also miscorrect a word
            with more than ``t`` errors into another codeword.)
        """
        word = np.array(word, dtype=np.int64)
        synd = [int(s) for s in self.syndromes(word)]
        if not any(synd):
            return word, True
        # Berlekamp-Massey: error locator sigma (lowest power first)
        sigma, prev = [1], [1]
        L, m, b = 0, 1, 1
        for r in range(len(synd)):
            delta = synd[r]
            for i in range(1, L + 1):
                if i < len(sigma):
                    delta ^= _mul(sigma[i], synd[r - i])
            if delta == 0:
                m += 1
                continue
            coef = _mul(delta, _inv(b))
            shifted = [0] * m + [_mul(coef, c) for c in prev]
            new = [(sigma[i] if i < len(sigma) else 0) ^ (shifted[i] if i < len(shifted) else 0)
                   for i in range(max(len(sigma), len(shifted)))]
            if 2 * L <= r:
                prev, L, b, m = sigma, r + 1 - L, delta, 1
            else:
                m += 1
            sigma = new
        while len(sigma) > 1 and sigma[-1] == 0:
            sigma.pop()
        if L > self.t or len(sigma) - 1 != L:
            return word, False
        # Chien search over the n positions: position j (degree) is an error if sigma(alpha^-j) = 0
        exp, log = _gf_tables()
        positions = []
        for deg in range(self.n):
            x_inv = int(exp[(RS_N_FIELD - deg) % RS_N_FIELD])
            acc, xp = 0, 1
            for c in sigma:
                acc ^= _mul(c, xp)
                xp = _mul(xp, x_inv)
            if acc == 0:
                positions.append(deg)
        if len(positions) != L:
            return word, False
        # Forney: omega = S(x) sigma(x) mod x^(2t); error value e_j = X_j omega(X_j^-1) / sigma'(X_j^-1)
        omega = [0] * (self.n - self.k)
        for i, s in enumerate(synd):
            for j, c in enumerate(sigma):
                if i + j < len(omega):
                    omega[i + j] ^= _mul(s, c)
        for deg in positions:
            x = int(exp[deg % RS_N_FIELD])
            x_inv = _inv(x)
            num, xp = 0, 1
            for c in omega:
                num ^= _mul(c, xp)
                xp = _mul(xp, x_inv)
            den, xp = 0, 1
            for i in range(1, len(sigma), 2):  # formal derivative: odd terms
                den ^= _mul(sigma[i], _pow(x_inv, i - 1))
            if den == 0:
                return word, False
            err = _mul(_mul(x, num), _inv(den))
            word[self.n - 1 - deg] ^= err
        if any(self.syndromes(word)):
            return np.array(word), False
        return word, True


def _pow(a: int, e: int) -> int:
    if e == 0:
        return 1
    if a == 0:
        return 0
    exp, log = _gf_tables()
    return int(exp[(log[a] * e) % RS_N_FIELD])


# ----------------------------------------------------------------------- Hamming
class Hamming:
    """Shortened Hamming code over ``k`` data bits: SEC, or SECDED with an overall parity bit.

    Check bits sit at the power-of-two positions ``1, 2, 4, ...`` of a 1-based
    codeword (classic layout); SECDED appends one overall parity bit.

    Parameters
    ----------
    k:
        Data bits per block (257 for a transcoded block).
    secded:
        Add the overall parity bit (detects every double error).
    """

    def __init__(self, k: int = BLOCK_BITS, secded: bool = True) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        r = 1
        while (1 << r) < k + r + 1:
            r += 1
        self.k, self.r, self.secded = k, r, secded
        self.n = k + r + (1 if secded else 0)
        n_inner = k + r
        pos = np.arange(1, n_inner + 1)
        self.data_pos = pos[(pos & (pos - 1)) != 0] - 1  # 0-based indices of data bits
        self.check_pos = pos[(pos & (pos - 1)) == 0] - 1
        self.H = ((pos[None, :] >> np.arange(r)[:, None]) & 1).astype(np.uint8)  # r x n_inner

    @property
    def check_bits(self) -> int:
        """Redundant bits per block."""
        return self.n - self.k

    def encode(self, data: np.ndarray) -> np.ndarray:
        """Encode ``(..., k)`` bits into ``(..., n)`` bits."""
        data = np.asarray(data, dtype=np.uint8)
        if data.shape[-1] != self.k:
            raise ValueError(f"blocks must have {self.k} bits, got {data.shape[-1]}")
        inner = np.zeros(data.shape[:-1] + (self.k + self.r,), dtype=np.uint8)
        inner[..., self.data_pos] = data
        synd = (inner @ self.H.T) % 2  # (..., r): check bits are still zero
        inner[..., self.check_pos] = synd
        if not self.secded:
            return inner
        return np.concatenate([inner, inner.sum(axis=-1, keepdims=True) % 2], axis=-1).astype(np.uint8)

    def decode(self, word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Decode ``(..., n)`` bits.

        Returns
        -------
        (numpy.ndarray, numpy.ndarray)
            The data bits ``(..., k)`` after correction, and a boolean array that
            is ``True`` where the decoder flags an uncorrectable (detected) error
            (SECDED only: even-weight non-zero error patterns).
        """
        word = np.array(word, dtype=np.uint8)
        inner = word[..., :self.k + self.r]
        synd = (inner @ self.H.T) % 2
        loc = (synd * (1 << np.arange(self.r))).sum(axis=-1)  # 1-based position, 0 = no error
        if self.secded:
            parity = word.sum(axis=-1) % 2
            detected = (loc != 0) & (parity == 0)
            fix = (parity == 1) & (loc != 0) & (loc <= self.k + self.r)
        else:
            detected = np.zeros(loc.shape, dtype=bool)
            fix = (loc != 0) & (loc <= self.k + self.r)
        flat = inner.reshape(-1, inner.shape[-1])
        idx = np.nonzero(fix.reshape(-1))[0]
        flat[idx, loc.reshape(-1)[idx] - 1] ^= 1
        inner = flat.reshape(inner.shape)
        return inner[..., self.data_pos], detected


# ---------------------------------------------------------------- closed forms
def _check_ber(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"raw_ber must be in [0, 1], got {p}")


def rs_frame_failure(p: float, n: int = RS_N, t: int = RS_T, m: int = RS_M) -> float:
    """Probability that an RS(n, n-2t) codeword over GF(2^m) has more than ``t`` symbol errors.

    Bits fail independently with probability ``p``; a symbol is wrong if any of
    its ``m`` bits is.
    """
    _check_ber(p)
    s = -math.expm1(m * math.log1p(-p)) if p < 1 else 1.0
    return float(stats.binom.sf(t, n, s))


def hamming_block_outcomes(p: float, n: int, secded: bool) -> dict[str, float]:
    """Probabilities that one Hamming block decodes clean, is flagged, or is silently wrong.

    SEC: 0 or 1 error -> correct; 2 or more -> silently wrong (it is miscorrected
    or left wrong). SECDED: odd weight 1 -> correct; even weight >= 2 -> detected;
    odd weight >= 3 -> silently wrong.
    """
    _check_ber(p)
    p0 = float(stats.binom.pmf(0, n, p))
    p1 = float(stats.binom.pmf(1, n, p))
    if not secded:
        return {"ok": p0 + p1, "detected": 0.0, "silent": float(stats.binom.sf(1, n, p))}
    k = np.arange(0, n + 1)
    pmf = stats.binom.pmf(k, n, p)
    detected = float(pmf[(k >= 2) & (k % 2 == 0)].sum())
    silent = float(pmf[(k >= 3) & (k % 2 == 1)].sum())
    return {"ok": p0 + p1, "detected": detected, "silent": silent}


def frame_outcomes(code: str, p: float) -> dict[str, float]:
    """Per-frame probabilities (5140 data bits) that a frame is flagged or silently wrong.

    ``code``: ``"rs544"`` (failures counted as flagged: the decoder detects almost
    all of them), ``"hamming_sec"``, ``"hamming_secded"`` or ``"none"``.
    """
    if code == "rs544":
        return {"detected": rs_frame_failure(p), "silent": 0.0}
    if code == "none":
        _check_ber(p)
        return {"detected": 0.0, "silent": float(-math.expm1(DATA_BITS_PER_FRAME * math.log1p(-p))) if p < 1 else 1.0}
    if code in ("hamming_sec", "hamming_secded"):
        secded = code == "hamming_secded"
        blk = hamming_block_outcomes(p, BLOCK_BITS + (10 if secded else 9), secded)
        # log-domain so that tiny probabilities (raw BER 1e-12) do not cancel out
        log_no_silent = BLOCKS_PER_FRAME * math.log1p(-blk["silent"])
        log_none_bad = BLOCKS_PER_FRAME * math.log1p(-(blk["detected"] + blk["silent"]))
        detected = math.exp(log_no_silent) * -math.expm1(log_none_bad - log_no_silent)
        return {"detected": float(max(detected, 0.0)) + 0.0, "silent": float(-math.expm1(log_no_silent))}
    raise ValueError(f"code must be one of rs544, hamming_sec, hamming_secded, none; got {code!r}")


def redundancy_bits(code: str) -> int:
    """Redundant bits per 5140-data-bit frame."""
    return {"rs544": (RS_N - RS_K) * RS_M, "hamming_sec": 9 * BLOCKS_PER_FRAME,
            "hamming_secded": 10 * BLOCKS_PER_FRAME, "none": 0}[code]


# ----------------------------------------------------------------- Monte-Carlo
def monte_carlo_hamming(p: float, frames: int, secded: bool, seed: int) -> dict[str, float]:
    """Encode random frames with the real Hamming codec, flip i.i.d. bits, decode; count outcomes per block."""
    _check_ber(p)
    rng = np.random.default_rng(seed)
    code = Hamming(BLOCK_BITS, secded)
    data = rng.integers(0, 2, size=(frames * BLOCKS_PER_FRAME, BLOCK_BITS), dtype=np.uint8)
    cw = code.encode(data)
    flips = (rng.random(cw.shape) < p).astype(np.uint8)
    out, detected = code.decode(cw ^ flips)
    wrong = np.any(out != data, axis=1)
    blocks = data.shape[0]
    return {"blocks": blocks, "detected": float(detected.mean()), "silent": float((wrong & ~detected).mean())}


def monte_carlo_rs(p: float, codewords: int, seed: int) -> dict[str, float]:
    """Encode random words with the real RS(544,514) codec, flip i.i.d. bits, decode; failure rate."""
    _check_ber(p)
    rng = np.random.default_rng(seed)
    rs = ReedSolomon()
    fails = 0
    for _ in range(codewords):
        msg = rng.integers(0, 1 << RS_M, size=RS_K)
        cw = rs.encode(msg)
        bits = (rng.random((RS_N, RS_M)) < p)
        err = (bits * (1 << np.arange(RS_M))).sum(axis=1)
        dec, ok = rs.decode(cw ^ err)
        fails += int(not ok or not np.array_equal(dec, cw))
    return {"codewords": codewords, "failure": fails / codewords}


# -------------------------------------------------------------------- latency
def fec_latency_ns(code: str, lane_gbps: float, decode_ns: float) -> float:
    """Added latency of one FEC decode: buffer one codeword (or block) at line rate, then decode.

    ``code`` as in :func:`frame_outcomes`; ``decode_ns`` the decoder pipeline
    (syndrome, error location and correction) once the word is in.
    """
    if lane_gbps <= 0:
        raise ValueError(f"lane_gbps must be > 0, got {lane_gbps}")
    if decode_ns < 0:
        raise ValueError(f"decode_ns must be >= 0, got {decode_ns}")
    bits = {"rs544": RS_N * RS_M, "hamming_sec": BLOCK_BITS + 9, "hamming_secded": BLOCK_BITS + 10,
            "none": 0}
    if code not in bits:
        raise ValueError(f"code must be one of {sorted(bits)}; got {code!r}")
    if code == "none":
        return 0.0
    return bits[code] / lane_gbps + decode_ns


@dataclass(frozen=True, kw_only=True)
class HopLatency:
    """Latency of one link hop: wire, FEC at the receiver and the switch pipeline.

    Attributes
    ----------
    wire_ns, switch_ns, fec_ns:
        Components in ns (``switch_ns``: routing, allocation and crossbar).
    """

    wire_ns: float
    switch_ns: float
    fec_ns: float

    @property
    def total_ns(self) -> float:
        """Sum of the components."""
        return self.wire_ns + self.switch_ns + self.fec_ns
