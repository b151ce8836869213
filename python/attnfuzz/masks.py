"""Which keys a query may attend to (docs/design.md section 2, step 4).

The structural masks share one diagonal d(b, i) = i + offset(b):
  key padding  j >= valid_keys[b] is masked (a serving row's kv_lens[b]; a packed segment's
               rows i >= q_lens[b] do not exist: every key is masked there)
  causal       j > d(b, i) is masked
  window       (left, right), -1 unbounded: j < d - left and j > d + right are masked
The additive and boolean masks arrive 2-D [Sq', Sk'] or 4-D [B', Hq', Sq', Sk'], each dim
full or 1 (or full with stride 0): they broadcast to [B, Hq, Sq, Sk] like numpy arrays
aligned from the right."""

import numpy as np


def allowed(case, i0=0, i1=None):
    """bool [B, 1, Sq, Sk]: True where no structural mask (key padding, causal, window)
    masks key j for query i of batch row b; with i0, i1 the query rows i0 .. i1 - 1."""
    B, Sk = case.batch, case.kv_len
    i1 = case.q_len if i1 is None else i1
    Sq = i1 - i0
    j = np.arange(Sk, dtype=np.int64).reshape(1, 1, 1, Sk)
    i = np.arange(i0, i1, dtype=np.int64).reshape(1, 1, Sq, 1)
    valid = np.asarray(case.valid_keys, dtype=np.int64).reshape(B, 1, 1, 1)
    ok = np.broadcast_to(j < valid, (B, 1, Sq, Sk))
    if case.thd:
        rows = np.asarray([case.seg_q(b) for b in range(B)], dtype=np.int64).reshape(B, 1, 1, 1)
        ok = ok & (i < rows)
    left, right = case.window
    if case.causal or left >= 0 or right >= 0:
        d = i + np.asarray(case.diag_offset, dtype=np.int64).reshape(B, 1, 1, 1)
        if case.causal:
            ok = ok & (j <= d)
        if left >= 0:
            ok = ok & (j >= d - left)
        if right >= 0:
            ok = ok & (j <= d + right)
    return np.ascontiguousarray(ok)


def _bhsd(case, m, what):
    m = np.asarray(m)
    if m.ndim > 4:
        raise ValueError("%s has %d dims, at most 4" % (what, m.ndim))
    full = (case.batch, case.q_heads, case.q_len, case.kv_len)
    shape = (1,) * (4 - m.ndim) + m.shape
    for n, f, letter in zip(shape, full, "bhqk"):
        if n != 1 and n != f:
            raise ValueError("%s of shape %s does not broadcast to %s (dim %s)"
                             % (what, list(m.shape), list(full), letter))
    return np.broadcast_to(m.reshape(shape), full)


def additive_bhsd(case, mask):
    """The additive mask as float64, broadcast (a read-only view) to [B, Hq, Sq, Sk]."""
    return _bhsd(case, np.asarray(mask).astype(np.float64, copy=False), "additive mask")


def bool_bhsd(case, bool_mask):
    """The boolean mask (True = attend; any nonzero value attends) broadcast to
    [B, Hq, Sq, Sk]."""
    m = np.asarray(bool_mask)
    if m.dtype != np.bool_:
        m = m != 0
    return _bhsd(case, m, "boolean mask")


def has_structural(case):
    """Does any structural mask (key padding, causal, window) apply?"""
    return (case.causal or case.key_padding is not None or case.kv_lens is not None or case.window[0] >= 0
            or case.window[1] >= 0)


def live(case, bool_mask=None, i0=0, i1=None):
    """bool [B, Hq, Sq, Sk] (or [B, 1, Sq, Sk] without a boolean mask): the keys that no
    structural or boolean mask masks; None when no mask applies at all (every key live).
    With i0, i1: the query rows i0 .. i1 - 1 only."""
    ok = allowed(case, i0, i1) if has_structural(case) else None
    if bool_mask is not None:
        bm = bool_bhsd(case, bool_mask)
        if i0 != 0 or (i1 is not None and i1 != case.q_len):
            bm = bm[:, :, i0:i1]
        ok = bm if ok is None else ok & bm
    return ok
