"""docs/design.md section 2 in numpy float64, from canonical [B, H, S, D] inputs; the same
rules as the C oracle (src/backends/ref.c):

1. GQA: query head h reads key/value head h / (Hq / Hkv).
2. s = scale * q . k (IEEE: Inf * 0 in a dot product is NaN).
3. softcap c > 0: s = c * tanh(s / c).
4. the additive mask is added; the boolean mask (False) and the structural masks
   (masks.allowed) make a key masked: its score is -inf and it is left out of step 7.
5. softmax over the keys. A NaN score at a live key makes the row's live weights NaN. A
   fully masked row (no NaN, every live score -inf) gives output 0. exp results below
   2^-1022 flush to 0, as the C kernels do.
6. dropout p: kept weights (rng.dropout_keep, or the keep-mask given) are divided by
   1 - p, dropped ones are exactly 0, NaN or not; p = 1 keeps nothing.
7. out[i] = sum over the keys j of nonzero weight of P[i][j] * v[j]: a key of weight
   exactly 0 (masked by any mask, an additive -inf, a score of -inf, an exp flushed to
   0, dropped) contributes nothing, not 0 * NaN (docs/design.md section 2 rule 5); a key of
   nonzero weight (NaN included) meets its value row in IEEE arithmetic.
"""

import numpy as np

from . import masks, rng

_TINY = np.finfo(np.float64).tiny  # 2^-1022


# float64 elements of one [B, Hq, rows, Sk] score block: long sequences go in row blocks
BLOCK_ELEMS = 1 << 21


def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """float64 [B, Hq, Sq, Dv] from canonical q [B, Hq, Sq, D], k [B, Hkv, Sk, D],
    v [B, Hkv, Sk, Dv] (any float dtype; taken as float64), the additive mask and the
    boolean mask as sent or 4-D (broadcastable to [B, Hq, Sq, Sk]; each used only when
    given), and keep: a bool [B, Hq, Sq, Sk] keep-mask replacing the counter RNG's."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    B, Hq, Sq, D = q.shape
    Hkv, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    if k.shape != (B, Hkv, Sk, D) or v.shape != (B, Hkv, Sk, Dv) or Hkv == 0 or Hq % Hkv:
        raise ValueError("reference: shapes q %s k %s v %s do not fit together"
                         % (list(q.shape), list(k.shape), list(v.shape)))
    if Sq != case.q_len or Sk != case.kv_len or B != case.batch or Hq != case.q_heads:
        raise ValueError("reference: q %s and k %s do not match the case" % (list(q.shape), list(k.shape)))
    rows = max(1, BLOCK_ELEMS // max(1, B * Hq * Sk))
    if rows >= Sq:
        return _rows(case, q, k, v, mask, bool_mask, keep, 0, Sq)
    am = None if mask is None else masks.additive_bhsd(case, mask)
    out = np.empty((B, Hq, Sq, Dv))
    for i0 in range(0, Sq, rows):
        i1 = min(Sq, i0 + rows)
        out[:, :, i0:i1] = _rows(case, q[:, :, i0:i1], k, v, None if am is None else am[:, :, i0:i1], bool_mask,
                                 None if keep is None else np.asarray(keep)[:, :, i0:i1], i0, i1)
    return out


def _rows(case, q, k, v, mask, bool_mask, keep, i0, i1):
    """The query rows i0 .. i1 - 1 (q holds just those; mask and keep too, when i0 > 0 or
    i1 < Sq; bool_mask is the whole mask)."""
    B, Hq, Sq, D = q.shape
    Hkv, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    g = Hq // Hkv
    with np.errstate(all="ignore"):
        # 1-2. scores, query heads of one group side by side: [B, Hkv, g*Sq, Sk]
        s = np.matmul(q.reshape(B, Hkv, g * Sq, D), k.swapaxes(-1, -2)).reshape(B, Hq, Sq, Sk)
        s *= case.scale
        # 3. softcap
        if case.softcap > 0.0:
            c = case.softcap
            s = c * np.tanh(s / c)
        # 4. masks (live is None when every key is live)
        if mask is not None:
            full = isinstance(mask, np.ndarray) and mask.dtype == np.float64 and mask.shape == s.shape
            s = s + (mask if full else masks.additive_bhsd(case, mask))
        live = masks.live(case, bool_mask, i0, i1)
        if live is not None:
            s = np.where(live, s, -np.inf)
        # 5. softmax
        isn = np.isnan(s)
        any_nan = isn.any()
        if any_nan:
            has_nan = isn.any(axis=-1, keepdims=True)
            m = np.where(isn, -np.inf, s).max(axis=-1, keepdims=True)
        else:
            m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - m)
        fin = np.isfinite(v)
        allfin = fin.all()
        if not allfin:
            e[e < _TINY] = 0.0  # the C kernels flush; only 0 * Inf can tell
        w = e / e.sum(axis=-1, keepdims=True)
        if any_nan:
            w = np.where(has_nan, np.nan, w)
        if live is not None:
            w = np.where(live, w, 0.0)
        # 6. dropout
        p = case.dropout_p
        if p > 0.0:
            if keep is None:
                keep = rng.dropout_keep(case.dropout_seed, p, B, Hq, Sq, Sk, i0)
            w = np.where(keep, w / (1.0 - p) if p < 1.0 else 0.0, 0.0)
        # 7. P V; V's non-finite entries added back for the keys of nonzero weight only
        vf = v if allfin else np.where(fin, v, 0.0)
        out = np.matmul(w.reshape(B, Hkv, g * Sq, Sk), vf).reshape(B, Hq, Sq, Dv)
        if not allfin:
            jb = np.nonzero(~fin.all(axis=(0, 1, 3)))[0]
            vb = np.where(fin[:, :, jb, :], 0.0, v[:, :, jb, :])          # [B, Hkv, nb, Dv]
            vb = np.repeat(vb, g, axis=1)[:, :, None, :, :]                 # [B, Hq, 1, nb, Dv]
            wb = w[..., jb][..., None]                                      # [B, Hq, Sq, nb, 1]
            # weight exactly 0 (masked, additive -inf, a score of -inf, an exp flushed
            # to 0, dropped): nothing, whatever V holds (0 * NaN counts as 0; rule 5)
            contrib = np.where(wb != 0.0, wb * vb, 0.0)
            out = out + contrib.sum(axis=3)
        # a fully masked row (no NaN, every live score -inf) gives 0
        dead = m == -np.inf
        if any_nan:
            dead &= ~has_nan
        if dead.any():
            out = np.where(dead, 0.0, out)
    return out
