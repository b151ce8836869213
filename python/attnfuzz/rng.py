"""Philox4x32-10 and the dropout keep rule of docs/design.md section 2, vectorized in numpy;
bit for bit what src/core/rng.c computes.

Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11; Random123): ten rounds of
    (c0, c1, c2, c3) <- (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0))
with the key bumped by (W0, W1) after each round.

Dropout: keep(b, h, i, j) <=> w * 2^-32 >= p, where w is word j % 4 of
philox((j / 4, i, h, b), (seed & 0xffffffff, seed >> 32)); kept weights are divided by
1 - p; p = 1 keeps nothing."""

import math

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def philox4x32(ctr, key):
    """Philox4x32-10 of counters ctr (four arrays or ints, broadcast together, each
    0..2^32-1) under key (two ints). Returns four uint32 arrays (the output words)."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in ctr)
    k0, k1 = int(key[0]) & 0xFFFFFFFF, int(key[1]) & 0xFFFFFFFF
    m0, m1 = np.uint64(M0), np.uint64(M1)
    for _ in range(10):
        p0 = c0 * m0
        p1 = c2 * m1
        c0, c1, c2, c3 = ((p1 >> _S32) ^ c1 ^ np.uint64(k0), p1 & _MASK,
                          (p0 >> _S32) ^ c3 ^ np.uint64(k1), p0 & _MASK)
        k0 = (k0 + W0) & 0xFFFFFFFF
        k1 = (k1 + W1) & 0xFFFFFFFF
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def dropout_threshold(p):
    """The smallest word kept: ceil(p * 2^32) (exact), 0 for p <= 0 or NaN, 2^32 for p >= 1."""
    p = float(p)
    if not p > 0.0:
        return 0
    if p >= 1.0:
        return 1 << 32
    return math.ceil(p * 4294967296.0)


def dropout_words(seed, B, Hq, Sq, Sk, i0=0):
    """The 32-bit words u(seed, b, h, i, j) as uint32 [B, Hq, Sq, Sk]; with i0, the query
    rows i0 .. i0 + Sq - 1."""
    seed = int(seed)
    nblk = (Sk + 3) // 4
    c0 = np.arange(nblk, dtype=np.uint64).reshape(1, 1, 1, nblk)
    c1 = np.arange(i0, i0 + Sq, dtype=np.uint64).reshape(1, 1, Sq, 1)
    c2 = np.arange(Hq, dtype=np.uint64).reshape(1, Hq, 1, 1)
    c3 = np.arange(B, dtype=np.uint64).reshape(B, 1, 1, 1)
    shape = (B, Hq, Sq, nblk)
    w = philox4x32([np.broadcast_to(c, shape) for c in (c0, c1, c2, c3)],
                   (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF))
    words = np.stack(w, axis=-1).reshape(B, Hq, Sq, nblk * 4)
    return words[..., :Sk]


def dropout_keep(seed, p, B, Hq, Sq, Sk, i0=0):
    """bool [B, Hq, Sq, Sk]: which weights dropout keeps (True everywhere for p <= 0); with
    i0, the query rows i0 .. i0 + Sq - 1."""
    thr = dropout_threshold(p)
    if thr == 0:
        return np.ones((B, Hq, Sq, Sk), dtype=np.bool_)
    if thr > 0xFFFFFFFF:
        return np.zeros((B, Hq, Sq, Sk), dtype=np.bool_)
    return dropout_words(seed, B, Hq, Sq, Sk, i0) >= np.uint32(thr)


def case_keep(case):
    """The counter rule's keep mask of a case, bool [B, Hq, Sq, Sk] (docs/design.md section 2
    rule 6): None without dropout, all False for p >= 1. What a request's keep holds for a
    target that applies the rule itself (attnfuzz.request)."""
    if not case.dropout_p > 0:
        return None
    return dropout_keep(case.dropout_seed, case.dropout_p, case.batch, case.q_heads, case.q_len, case.kv_len)
