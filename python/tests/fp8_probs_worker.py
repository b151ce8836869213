"""A worker for campaign_fp8_probs.py: cuDNN's sdpa_fp8 emulated in numpy, as the frontend's
own test reference computes it (test/python/sdpa/fp8_ref.py of cudnn-frontend, with its
default rescale threshold 4): scores in f32 from the dequantized FP8 Q and K, an online
softmax over blocks of 128 keys whose running max moves only when a block's max passes it by
more than 4, the numerator exp(s - running max) (so up to e^4) times scale_s 2^-4 (scale_s
64 for e4m3, 16384 for e5m2: cudnn.py's FP8_S_SCALE) rounded to the case's FP8 format before
P @ V, the row sum taken before that rounding and dividing O at the end; with "fp8_out" O
times scale_o (cudnn.py's power of two from the largest |V|) rounded to the format too, as on
Hopper; the result in the case dtype. It declares those roundings as cudnn.py does
(conventions fp8_probs with scale_s / 16, and fp8_out "v_amax" with "fp8_out") unless given
"undeclared". A case with a non-finite input is answered by the reference (the
emulation follows finite arithmetic only); each case's kind is appended to the file named by
AF_FP8_TALLY ("emulated_e4m3", "emulated_e5m2", "reference").
Usage: fp8_probs_worker.py [fp8_out] [undeclared] (frames on stdin/stdout)."""

import math
import os
import sys

import _util  # noqa: F401 (puts python/ on sys.path)

import numpy as np

from attnfuzz import dtypes, layouts, reference
from attnfuzz.worker import serve

S_SCALE = {"e4m3": 64.0, "e5m2": 16384.0}   # cudnn.py's FP8_S_SCALE
PO2 = {"e4m3": 256.0, "e5m2": 32768.0}      # cudnn.py's FP8_PO2
BLOCK = 128
THRESHOLD = 4.0                             # fp8_ref.py's default rescale_threshold

_tally = open(os.environ["AF_FP8_TALLY"], "a", buffering=1)
_fp8_out = "fp8_out" in sys.argv[1:]
_declared = "undeclared" not in sys.argv[1:]


def emulate(case, q, k, v, mask, bool_mask):
    """float64 [B, Hq, Sq, Dv]: the sdpa_fp8 pipeline on canonical FP8 q, k, v."""
    fmt = dtypes.DTYPES[case.fp8]
    qd, kd, vd = (reference.dequantized(case, x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    # the scores (Q K^T in f32, descales and scale applied, masks as -inf): the reference's rules
    _, s, _ = reference._scores(case, qd, kd, mask, bool_mask, 0, case.q_len, None)
    s = s.astype(np.float32)
    B, Hq, Sq, Sk = s.shape
    g = Hq // vd.shape[1]
    vv = np.repeat(vd, g, axis=1).astype(np.float32)
    sc = np.float32(S_SCALE[case.fp8] * 2.0 ** -THRESHOLD)
    m = np.full((B, Hq, Sq, 1), -np.inf, np.float32)
    l = np.zeros((B, Hq, Sq, 1), np.float32)
    o = np.zeros((B, Hq, Sq, vv.shape[-1]), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for j0 in range(0, Sk, BLOCK):
            sb = s[..., j0:j0 + BLOCK]
            mb = sb.max(axis=-1, keepdims=True)
            m_new = np.where((m == -np.inf) | (mb - m > THRESHOLD), mb, m)
            corr = np.where(m - m_new < -THRESHOLD, np.nan_to_num(np.exp(m - m_new)), 1.0).astype(np.float32)
            p = np.nan_to_num(np.exp(sb - m_new)).astype(np.float32)
            l = l * corr + p.sum(axis=-1, keepdims=True, dtype=np.float32)
            pq = (p * sc).astype(fmt).astype(np.float32)    # P in the FP8 format
            o = o * corr + (pq @ vv[..., j0:j0 + BLOCK, :]) / sc
            m = m_new
    o = (o / np.maximum(l, np.float32(1.0))).astype(np.float64)
    if _fp8_out:
        fin = np.abs(vd[np.isfinite(vd)])
        amax = float(fin.max()) if fin.size else 0.0
        so = 2.0 ** math.floor(math.log2(PO2[case.fp8] / 2 / amax)) if amax > 0 else 1.0
        o = (o * so).astype(fmt).astype(np.float64) / so
    return o


def run(case, q, k, v, mask=None, bool_mask=None):
    qb, kb, vb = layouts.case_inputs_bhsd(case, q, k, v)
    finite = all(np.isfinite(reference.dequantized(case, x, n)).all() for x, n in ((qb, "q"), (kb, "k"), (vb, "v")))
    if not case.fp8 or case.fp8_kv or not finite:
        _tally.write("reference\n")
        return reference.attention(case, qb, kb, vb, mask=mask, bool_mask=bool_mask)
    _tally.write("emulated_%s\n" % case.fp8)
    return emulate(case, qb, kb, vb, mask, bool_mask).astype(dtypes.DTYPES[case.dtype])   # as cudnn.py returns it


if __name__ == "__main__":
    # cudnn/sdpa_fp8's capabilities and layouts
    caps = ["f16", "bf16", "e4m3", "e5m2", "gqa", "cross", "scale", "amask", "causal", "padding", "strided"]
    conv = {"dropout": "none"}
    if _declared:
        conv.update(fp8_probs={f: s / 16 for f, s in S_SCALE.items()}, fp8_out="v_amax" if _fp8_out else "dtype")
    serve(run, name="fp8_probs", version="1", caps=caps, layouts=layouts.UNPACKED, conventions=conv)
