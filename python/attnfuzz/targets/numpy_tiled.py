"""numpy_tiled: the forward pass of FlashAttention-2 written in numpy, the worked example of
docs/adding-a-target.md.

Variant (`python -m attnfuzz.targets.numpy_tiled online_softmax`,
`--backend target:numpy_tiled/online_softmax`):
  online_softmax  keys in blocks of 16; per block the scores in float32 (scale on the
                  scores, softcap, the masks), the running row maximum and sum rescaled
                  (online softmax), dropout by the counter RNG's keep mask on the block's
                  weights, P V accumulated in float32; the output divided by the row sum
                  once and rounded to the case dtype

Conventions: a fully masked row gives 0 (its row sum stays 0: guarded, as FlashAttention
does); P V runs over every key of a block, so a NaN behind a zero-weight key reaches the
output (masked_values "ieee").
"""

import sys

import numpy as np

from attnfuzz import layouts
from attnfuzz.targets import _base, _common
from attnfuzz.worker import Result

STACK = _base.Stack("numpy_tiled", imports=("numpy",), pip=(), variants=(
    _base.Variant("online_softmax", "FlashAttention-2 forward in numpy: key blocks of 16, online softmax, f32"),))

BLOCK = 16


def attention(req, with_lse=False):
    """req: an attnfuzz.request.Request (q, k, v: the physical views of a case; the additive
    and boolean masks as sent; keep: the dropout keep mask [B, Hq, Sq, Sk], None without
    dropout). Returns [B, Hq, Sq, Dv] in the inputs' dtype; with_lse: (out, lse), lse the
    float32 [B, Hq, Sq] statistics the running maximum and sum leave, m + log(l) (-inf for
    a fully masked row, NaN for a NaN one)."""
    case, q, k, v, mask, bool_mask = req.case, req.q, req.k, req.v, req.mask, req.bool_mask
    B, Hq, Sq, Sk, Dv = case.batch, case.q_heads, case.q_len, case.kv_len, case.v_head_dim
    f32 = np.float32
    qb = layouts.to_bhsd(q, case.layouts["q"], Hq, case.head_dim).astype(f32)
    kb = layouts.to_bhsd(k, case.layouts["k"], case.kv_heads, case.head_dim).astype(f32)
    vb = layouts.to_bhsd(v, case.layouts["v"], case.kv_heads, Dv).astype(f32)
    if Hq != case.kv_heads:                     # GQA: query head h reads kv head h / (Hq / Hkv)
        kb = np.repeat(kb, Hq // case.kv_heads, axis=1)
        vb = np.repeat(vb, Hq // case.kv_heads, axis=1)
    full = (B, Hq, Sq, Sk)
    add = None if mask is None else np.broadcast_to(np.asarray(mask, f32).reshape((1,) * (4 - mask.ndim) + mask.shape), full)
    allowed = _common.structural_allowed(case)  # [B, 1, Sq, Sk] or None
    if bool_mask is not None:
        bm = np.broadcast_to(np.asarray(bool_mask).reshape((1,) * (4 - bool_mask.ndim) + bool_mask.shape), full)
        allowed = bm if allowed is None else allowed & bm
    p_drop = case.dropout_p
    rescale = f32(0.0 if p_drop >= 1.0 else 1.0 / (1.0 - p_drop))
    m = np.full((B, Hq, Sq, 1), -np.inf, f32)  # running row maximum
    l = np.zeros((B, Hq, Sq, 1), f32)          # running row sum of exp(s - m)
    acc = np.zeros((B, Hq, Sq, Dv), f32)       # running sum of exp(s - m) v (after dropout)
    kept = np.zeros((B, Hq, Sq, 1), bool)      # any key neither masked nor dropped
    with np.errstate(all="ignore"):
        for j0 in range(0, Sk, BLOCK):
            j1 = min(Sk, j0 + BLOCK)
            # 1. the block's scores
            s = (qb @ kb[:, :, j0:j1].swapaxes(-1, -2)) * f32(case.scale)
            if case.softcap > 0:
                c = f32(case.softcap)
                s = c * np.tanh(s / c)
            if add is not None:
                s = s + add[..., j0:j1]
            if allowed is not None:
                s = np.where(allowed[..., j0:j1], s, f32(-np.inf))
            # 2. online softmax: new maximum, the old sums rescaled by exp(m_old - m_new)
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
            alpha = np.where(m_new == -np.inf, f32(1.0), np.exp(m - m_new))
            e = np.where(s == -np.inf, f32(0.0), np.exp(s - np.where(m_new == -np.inf, f32(0.0), m_new)))
            l = l * alpha + e.sum(axis=-1, keepdims=True)
            # 3. dropout on the block's weights (the row sum keeps every weight)
            # (a NaN row sum makes every weight of the row NaN, 0 / NaN included, but those
            # of keys a structural or boolean mask masks, and those dropout drops)
            live = np.broadcast_to(allowed[..., j0:j1], s.shape) if allowed is not None else np.ones(s.shape, bool)
            if p_drop > 0.0:
                kb_ = req.keep[..., j0:j1] if req.keep is not None else np.zeros(s.shape, bool)
                e = np.where(kb_, e * rescale, f32(0.0))
                live = live & kb_
            kept |= live.any(axis=-1, keepdims=True)
            acc = acc * alpha + e @ vb[:, :, j0:j1]
            m = m_new
        # 4. one division at the end; a row whose every key is masked or dropped gives 0
        # (their weights are exactly 0 even where the row's sum is NaN, docs/design.md
        # section 2), a NaN sum otherwise stays NaN
        out = np.where(kept, acc / np.where(l == 0, f32(1.0), l), f32(0.0))
        lse = np.where(m == -np.inf, f32(-np.inf), m + np.log(l))[..., 0]
    return (out.astype(q.dtype), lse) if with_lse else out.astype(q.dtype)


class Target(_base.Target):
    STACK = STACK

    def declare(self):
        return {"caps": ["f32", "f16", "bf16", "gqa", "cross", "dv", "scale", "softcap", "amask", "bmask",
                         "causal", "padding", "window", "dropout", "strided", "mask_dtype", "lse"],
                "conventions": {"dropout": "counter", "masked_values": "ieee"}}

    def execute(self, art, req):
        if req.want_lse:
            out, lse = attention(req, with_lse=True)
            return Result(out, lse=lse)
        return Result(attention(req))


def repro_snippet(variant):
    return _common.snippet([], (attention,), consts={"BLOCK": BLOCK})


if __name__ == "__main__":
    sys.exit(_base.main(STACK))
