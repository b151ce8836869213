"""docs/design.md section 2 in numpy float64, from canonical [B, H, S, D] inputs; the same
rules as the C oracle (src/backends/ref.c):

1. GQA: query head h reads key/value head h / (Hq / Hkv).
2. s = scale * q . k (IEEE: Inf * 0 in a dot product is NaN).
3. softcap c > 0: s = c * tanh(s / c); ALiBi (a serving form) adds -slope_h (d(b, i) - j)
   (symmetric: -slope_h |d(b, i) - j|).
4. the additive mask is added; the boolean mask (False) and the structural masks
   (masks.allowed) make a key masked: its score is -inf and it is left out of step 7.
5. softmax over the keys. A NaN score at a live key makes the row's live weights NaN. A
   fully masked row (no NaN, every live score -inf) gives output 0. exp results below
   2^-1022 flush to 0, as the C kernels do. A sink logit z_h (a serving form) joins the
   denominator only: sum_j exp(s_j - m) + exp(z_h - m), m the larger of the row max and z_h.
6. dropout p: kept weights (rng.dropout_keep, or the keep-mask given) are divided by
   1 - p, dropped ones are exactly 0, NaN or not; p = 1 keeps nothing.
7. out[i] = sum over the keys j of nonzero weight of P[i][j] * v[j]: a key of weight
   exactly 0 (masked by any mask, an additive -inf, a score of -inf, an exp flushed to
   0, dropped) contributes nothing, not 0 * NaN (docs/design.md section 2 rule 5); a key of
   nonzero weight (NaN included) meets its value row in IEEE arithmetic.

An FP8 case (case.fp8 set) computes all this on the dequantized inputs x * descale (exact
in float64): its q, k, v are the stored values, ml_dtypes float8 arrays (a worker's views)
or their uint8 bits (a bundle's arrays); with fp8_kv, q is in the case dtype as usual.
"""

import math

import numpy as np

from . import masks, rng, serving

_TINY = np.finfo(np.float64).tiny  # 2^-1022


# float64 elements of one [B, Hq, rows, Sk] score block: long sequences go in row blocks
BLOCK_ELEMS = 1 << 21


def attention(case, q, k, v, mask=None, bool_mask=None, keep=None, sinks=None, slopes=None):
    """float64 [B, Hq, Sq, Dv] from canonical q [B, Hq, Sq, D], k [B, Hkv, Sk, D],
    v [B, Hkv, Sk, Dv] (any float dtype; taken as float64), the additive mask and the
    boolean mask as sent or 4-D (broadcastable to [B, Hq, Sq, Sk]; each used only when
    given), and keep: a bool [B, Hq, Sq, Sk] keep-mask replacing the counter RNG's; sinks and
    slopes: a run request's sink logits and ALiBi slopes (float32 [Hq]; None: the case's
    own, attnfuzz.serving's, which is what attnfuzz sends)."""
    sinks, slopes = _serving_tables(case, sinks, slopes)
    q, k, v = (dequantized(case, x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    B, Hq, Sq, D = q.shape
    Hkv, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    if k.shape != (B, Hkv, Sk, D) or v.shape != (B, Hkv, Sk, Dv) or Hkv == 0 or Hq % Hkv:
        raise ValueError("reference: shapes q %s k %s v %s do not fit together"
                         % (list(q.shape), list(k.shape), list(v.shape)))
    if Sq != case.q_len or Sk != case.kv_len or B != case.batch or Hq != case.q_heads:
        raise ValueError("reference: q %s and k %s do not match the case" % (list(q.shape), list(k.shape)))
    rows = max(1, BLOCK_ELEMS // max(1, B * Hq * Sk))
    if rows >= Sq:
        return _rows(case, q, k, v, mask, bool_mask, keep, 0, Sq, sinks, slopes)
    am = None if mask is None else masks.additive_bhsd(case, mask)
    out = np.empty((B, Hq, Sq, Dv))
    for i0 in range(0, Sq, rows):
        i1 = min(Sq, i0 + rows)
        out[:, :, i0:i1] = _rows(case, q[:, :, i0:i1], k, v, None if am is None else am[:, :, i0:i1], bool_mask,
                                 None if keep is None else np.asarray(keep)[:, :, i0:i1], i0, i1, sinks, slopes)
    return out


def lse(case, q, k, mask=None, bool_mask=None, sinks=None, slopes=None):
    """float64 [B, Hq, Sq]: each query row's softmax statistics, the natural log of the sum of
    exp of its scores after rules 1-4 (a sink logit's exp in the sum), from the same max the
    weights use: -inf for a fully masked row, NaN for a NaN score at a live key, +inf for a
    +Inf score (whose weights are NaN). Arguments as attention's."""
    sinks, slopes = _serving_tables(case, sinks, slopes)
    q, k = dequantized(case, q, "q"), dequantized(case, k, "k")
    B, Hq, Sq = q.shape[0], q.shape[1], q.shape[2]
    rows = max(1, BLOCK_ELEMS // max(1, B * Hq * k.shape[2]))
    am = None if mask is None else masks.additive_bhsd(case, mask)
    z = None if sinks is None else np.asarray(sinks, dtype=np.float64).reshape(1, Hq, 1, 1)
    out = np.empty((B, Hq, Sq))
    with np.errstate(all="ignore"):
        for i0 in range(0, Sq, rows):
            i1 = min(Sq, i0 + rows)
            _, s, _ = _scores(case, q[:, :, i0:i1], k, None if am is None else am[:, :, i0:i1], bool_mask, i0, i1,
                              slopes)
            isn = np.isnan(s).any(axis=-1)
            m = np.where(np.isnan(s), -np.inf, s).max(axis=-1, keepdims=True)
            ms = m if z is None else np.maximum(m, z)
            tot = np.exp(s - ms).sum(axis=-1, keepdims=True) + (0.0 if z is None else np.exp(z - ms))
            l = (ms + np.log(tot))[..., 0]
            m = m[..., 0]
            out[:, :, i0:i1] = np.where(isn, np.nan, np.where(np.isinf(m), m, l))
    return out


# FP8 formats: unit roundoff u_F, half the smallest subnormal h_F, the largest power of two
FP8_ROUNDING = {"e4m3": (2.0 ** -4, 2.0 ** -10, 256.0), "e5m2": (2.0 ** -3, 2.0 ** -17, 32768.0)}


def fp8_bound(case, q, k, v, conventions, mask=None, bool_mask=None):
    """float64 [B, Hq, Sq, Dv]: how far the FP8 roundings a backend declares (conventions
    fp8_probs, fp8_out: docs/worker-protocol.md) may move each output element of an FP8 case,
    the C oracle's bound (conventions.h): for P rounded with scale s,
        sum_j (u_F P_ij + min(h_F / s max_k P_ik, P_ij)) |v_jd|   (j: the row's live keys),
    for O rounded with scale_o (fp8_out "v_amax"), u_F |out| + h_F / scale_o; 0 where the case
    is not FP8 or nothing is declared. Arguments as attention's (canonical q, k, v)."""
    fmt = getattr(case, "fp8", None)
    conventions = conventions or {}
    B, Hq, Sq, Dv = case.batch, case.q_heads, case.q_len, case.v_head_dim
    out = np.zeros((B, Hq, Sq, Dv))
    scale = (conventions.get("fp8_probs") or {}).get(fmt) if fmt else None
    o_fp8 = bool(fmt) and conventions.get("fp8_out") == "v_amax"
    if not scale and not o_fp8:
        return out
    u, h, po2 = FP8_ROUNDING[fmt]
    qd, kd, vd = (dequantized(case, x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    va = np.where(np.isfinite(vd), np.abs(vd), 0.0)
    g = Hq // vd.shape[1]
    with np.errstate(all="ignore"):
        _, s, live = _scores(case, qd, kd, mask, bool_mask, 0, Sq, None)
        w, _ = _softmax(s, live, flush=False)
        w = np.nan_to_num(w, nan=0.0)
        vr = va if g == 1 else np.repeat(va, g, axis=1)
        if scale:
            cap = h / float(scale) * w.max(axis=-1, keepdims=True)
            out += u * (w @ vr) + np.minimum(cap, w) @ vr
        if o_fp8:
            amax = float(va.max(initial=0.0))
            so = 2.0 ** math.floor(math.log2(po2 / 2 / amax)) if amax > 0 else 1.0
            ref = attention(case, q, k, v, mask=mask, bool_mask=bool_mask)
            out += u * np.nan_to_num(np.abs(ref), nan=0.0, posinf=0.0) + h / so
    return out


def dequantized(case, x, name):
    """Input name ("q", "k" or "v") as float64: an FP8 case's stored values (ml_dtypes float8,
    or uint8 bits) times the tensor's descale, exactly; any other case's values as they are."""
    fmt = getattr(case, "fp8", None)
    if not fmt or (name == "q" and case.fp8_kv):
        return np.asarray(x, dtype=np.float64)
    x = np.asarray(x)
    if x.dtype == np.uint8:
        from .dtypes import fp8_from_bits  # ml_dtypes, only for FP8 bits

        x = fp8_from_bits(x, fmt)
    return x.astype(np.float64) * case.descale[name]


def _serving_tables(case, sinks, slopes):
    """(sinks, slopes) of a case with those forms: the ones given, else the case's own."""
    if sinks is None and "sinks" in case.forms:
        sinks = serving.sinks(case)
    if slopes is None and "alibi" in case.forms:
        slopes = serving.slopes(case)
    return sinks, slopes


def _scores(case, q, k, mask, bool_mask, i0, i1, slopes):
    """Rules 1-4 for the query rows i0 .. i1 - 1 (q holds just those; mask too, when i0 > 0
    or i1 < Sq; bool_mask is the whole mask): (s0, s, live) with s0 = scale q . k before
    softcap [B, Hq, rows, Sk], s the scores after softcap and the additive mask with -inf at
    keys a structural or boolean mask masks, live those keys' complement (None: all live)."""
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    g = Hq // Hkv
    # 1-2. scores, query heads of one group side by side: [B, Hkv, g*Sq, Sk]
    s0 = np.matmul(q.reshape(B, Hkv, g * Sq, D), k.swapaxes(-1, -2)).reshape(B, Hq, Sq, Sk)
    s0 *= case.scale
    s = s0
    # 3. softcap, then ALiBi's bias
    if case.softcap > 0.0:
        c = case.softcap
        s = c * np.tanh(s0 / c)
    if "alibi" in case.forms:
        d = np.arange(i0, i0 + Sq, dtype=np.float64).reshape(1, 1, Sq, 1) + np.asarray(
            case.diag_offset, dtype=np.float64).reshape(B, 1, 1, 1)
        dist = d - np.arange(Sk, dtype=np.float64).reshape(1, 1, 1, Sk)
        slopes = np.asarray(slopes, dtype=np.float64).reshape(1, Hq, 1, 1)
        s = s - slopes * (np.abs(dist) if case.alibi_symmetric else dist)
    # 4. masks (live is None when every key is live)
    if mask is not None:
        full = isinstance(mask, np.ndarray) and mask.dtype == np.float64 and mask.shape == s.shape
        s = s + (mask if full else masks.additive_bhsd(case, mask))
    live = masks.live(case, bool_mask, i0, i1)
    if live is not None:
        s = np.where(live, s, -np.inf)
    return s0, s, live


def _softmax(s, live, flush, z=None):
    """Rule 5: the weights over the keys (NaN on a row with a NaN score at a live key, 0 at
    masked keys and on fully masked rows); exp below 2^-1022 flushed to 0 when flush; z
    (broadcast to [..., 1]): a sink logit in each row's denominator.
    Returns (w, dead): dead marks fully masked rows [..., 1]."""
    isn = np.isnan(s)
    any_nan = isn.any()
    if any_nan:
        has_nan = isn.any(axis=-1, keepdims=True)
        m = np.where(isn, -np.inf, s).max(axis=-1, keepdims=True)
    else:
        m = s.max(axis=-1, keepdims=True)
    ms = m if z is None else np.maximum(m, z)
    e = np.exp(s - ms)
    if flush:
        e[e < _TINY] = 0.0  # the C kernels flush; only 0 * Inf can tell
    w = e / (e.sum(axis=-1, keepdims=True) + (0.0 if z is None else np.exp(z - ms)))
    if any_nan:
        w = np.where(has_nan, np.nan, w)
    if live is not None:
        w = np.where(live, w, 0.0)
    # a fully masked row (no NaN, every live score -inf) gives 0
    dead = m == -np.inf
    if any_nan:
        dead &= ~has_nan
    return np.where(dead, 0.0, w), dead


def _dropout(case, w, keep, B, Hq, Sq, Sk, i0):
    """Rule 6 on weights w: (the kept weights rescaled, the keep mask or None)."""
    p = case.dropout_p
    if not p > 0.0:
        return w, None
    if keep is None:
        keep = rng.dropout_keep(case.dropout_seed, p, B, Hq, Sq, Sk, i0)
    return np.where(keep, w / (1.0 - p) if p < 1.0 else 0.0, 0.0), np.asarray(keep, dtype=bool)


def _rows(case, q, k, v, mask, bool_mask, keep, i0, i1, sinks, slopes):
    """The query rows i0 .. i1 - 1 (q holds just those; mask and keep too, when i0 > 0 or
    i1 < Sq; bool_mask is the whole mask)."""
    B, Hq, Sq, D = q.shape
    Hkv, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    g = Hq // Hkv
    with np.errstate(all="ignore"):
        _, s, live = _scores(case, q, k, mask, bool_mask, i0, i1, slopes)
        fin = np.isfinite(v)
        allfin = fin.all()
        z = None if sinks is None else np.asarray(sinks, dtype=np.float64).reshape(1, Hq, 1, 1)
        w, _ = _softmax(s, live, flush=not allfin, z=z)
        w, _ = _dropout(case, w, keep, B, Hq, Sq, Sk, i0)
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
    return out


# --- backward -------------------------------------------------------------------------------


def _wmm(w, x, nz):
    """sum_j w[..., i, j] x[..., j, :] over the terms with nz[..., i, j] (the others give
    nothing, whatever x holds: 0 * NaN counts as 0); IEEE arithmetic otherwise."""
    fin = np.isfinite(x)
    wz = np.where(nz, w, 0.0)
    if fin.all():
        return wz @ x
    out = wz @ np.where(fin, x, 0.0)
    jb = np.nonzero(~fin.all(axis=tuple(range(x.ndim - 2)) + (x.ndim - 1,)))[0]
    xb = np.where(fin[..., jb, :], 0.0, x[..., jb, :])[..., None, :, :]       # [..., 1, nb, D]
    wb = w[..., :, jb][..., None]                                              # [..., I, nb, 1]
    return out + np.where(nz[..., :, jb][..., None], wb * xb, 0.0).sum(axis=-2)


def backward(case, q, k, v, dout, mask=None, bool_mask=None, keep=None):
    """The float64 gradients of sum(out * dout) (docs/design.md section 2, "Backward"), from
    canonical q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv], dout [B, Hq, Sq, Dv],
    the masks as attention() takes them and a keep mask replacing the counter RNG's:
    {"dq", "dk", "dv"} (canonical shapes; a key/value head's sums over its query group), and
    "dmask" in the additive mask's own shape (summed over the dims it broadcasts) when there
    is one. A fully masked row gives nothing; a key of weight exactly 0 in a row (masked, an
    additive -inf, a score of -inf, an exp below 2^-1022 flushed to 0) gives that row nothing
    (0 * NaN counts as 0), and a dropped key's dV row gets nothing from it. Dropout p = 1
    drops every weight: the output is the constant 0, and every gradient is 0."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    do = np.asarray(dout, dtype=np.float64)
    B, Hq, Sq, D = q.shape
    Hkv, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    g = Hq // Hkv
    if case.dropout_p >= 1.0:
        grads = {"dq": np.zeros_like(q), "dk": np.zeros_like(k), "dv": np.zeros_like(v)}
        if mask is not None:
            grads["dmask"] = np.zeros(np.shape(mask))
        return grads
    with np.errstate(all="ignore"):
        s0, s, live = _scores(case, q, k, mask, bool_mask, 0, Sq, _serving_tables(case, None, None)[1])
        # exp below 2^-1022 flushed always, as the C kernels do: a subnormal weight meets NaN
        # or Inf in dO and V here, and a huge dP (subnormal x 1e38 is 1e-270, not 0) elsewhere
        w, _ = _softmax(s, live, flush=True)
        p, kp = _dropout(case, w, keep, B, Hq, Sq, Sk, 0)
        nz = w != 0.0                                                 # the keys of nonzero weight
        kr = np.repeat(k, g, axis=1)
        vr = np.repeat(v, g, axis=1)
        # dV[j] = sum_i P[i, j] dO[i] (the kept, rescaled weights)
        dv = _wmm(p.swapaxes(-1, -2), do, (p != 0.0).swapaxes(-1, -2))
        # dP[i, j] = dO[i] . v[j], times the keep mask and 1 / (1 - p)
        dp = do @ vr.swapaxes(-1, -2)
        if kp is not None:
            dp = np.where(kp, dp / (1.0 - case.dropout_p) if case.dropout_p < 1.0 else 0.0, 0.0)
        # dS = P_soft (dP - rowsum(P_soft dP)) over the softmax weights
        delta = np.where(nz, w * dp, 0.0).sum(axis=-1, keepdims=True)
        ds = np.where(nz, w * (dp - delta), 0.0)
        grads = {}
        if mask is not None:
            # the additive mask is added after softcap: its gradient is dS itself, summed over
            # the dims where the mask broadcasts
            m = np.asarray(mask)
            shape4 = (1,) * (4 - m.ndim) + m.shape
            red = tuple(a for a in range(4) if shape4[a] == 1 and ds.shape[a] != 1)
            grads["dmask"] = ds.sum(axis=red, keepdims=True).reshape(m.shape)
        # through softcap: s = c tanh(s0 / c), ds0 = ds (1 - tanh^2(s0 / c)), computed as
        # 1 / cosh^2(s0 / c): exact in relative terms where tanh saturates (1 - t t cancels to
        # 0 in float64 from |s0 / c| = 19 on)
        if case.softcap > 0.0:
            ch = np.cosh(s0 / case.softcap)
            ds = np.where(nz, ds / (ch * ch), 0.0)
        # the scale: dQ[i] = scale sum_j dS[i, j] k[j], dK[j] = scale sum_i dS[i, j] q[i]
        grads["dq"] = case.scale * _wmm(ds, kr, nz)
        dk = case.scale * _wmm(ds.swapaxes(-1, -2), q, nz.swapaxes(-1, -2))
        # GQA: a key/value head's gradients summed over its query group
        grads["dk"] = dk.reshape(B, Hkv, g, Sk, D).sum(axis=2)
        grads["dv"] = dv.reshape(B, Hkv, g, Sk, Dv).sum(axis=2)
    return grads
