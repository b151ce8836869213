"""A worker that checks the serving tensors attnfuzz sends against attnfuzz.serving's
mirror of them (tables, sinks, slopes, strides, the null page, THD and cache contents
through gather and back), then answers with the reference on the gathered views. A
mismatch raises: an `error` finding. With AF_SERVING_TALLY set, appends each case's forms
(a line of names, "dense" for none) to that file. Used by campaign_serving.py."""

import os
import sys

import numpy as np

import _util  # noqa: F401

from attnfuzz import dtypes, reference, serving
from attnfuzz.worker import Result, serve


def same(name, got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want, equal_nan=True):
        raise ValueError("%s differs from attnfuzz.serving's: got %s %s %r, want %s %s %r"
                         % (name, got.dtype, list(got.shape), got.ravel()[:6], want.dtype, list(want.shape),
                            want.ravel()[:6]))


def check(case, q, k, v):
    t = dict(case.serving_tensors, q=q, k=k, v=v)
    B = case.batch
    if case.thd:
        same("cu_seqlens_q", t["cu_seqlens_q"], serving.cu_seqlens([case.seg_q(b) for b in range(B)]))
        same("cu_seqlens_k", t["cu_seqlens_k"], serving.cu_seqlens([case.seg_k(b) for b in range(B)]))
    if case.kv_lens is not None:
        same("seqlens_k", t["seqlens_k"], np.asarray([case.seg_k(b) for b in range(B)], dtype=np.int32))
    if case.paged:
        tab, _, null = serving.block_table(case)
        same("block_table", t["block_table"], tab)
        fill = np.full((), serving.poison(case))
        for n, x in (("k", k), ("v", v)):
            same("%s's null page %d" % (n, null), np.asarray(x[null], dtype=np.float64),
                 np.broadcast_to(fill, x[null].shape))
    if "sinks" in case.forms:
        same("sinks", t["sinks"], serving.sinks(case, dtype_of=dtypes.DTYPES.__getitem__))
    if "alibi" in case.forms:
        same("alibi_slopes", t["alibi_slopes"], serving.slopes(case))
    qb, kb, vb = serving.gather(case, t)
    mirror = serving.physical(case, qb, kb, vb, dtype_of=dtypes.DTYPES.__getitem__)
    for n in ("q", "k", "v"):
        if n not in mirror:
            continue
        got, want = np.asarray(t[n]), mirror[n]
        if got.strides != want.strides and got.size:
            raise ValueError("%s strides %s, attnfuzz.serving lays it out %s" % (n, got.strides, want.strides))
        same(n, got, want)  # a cache's page tails and null page too: poisoned alike
    return qb, kb, vb


def run(case, q, k, v, mask=None, bool_mask=None):
    tally = os.environ.get("AF_SERVING_TALLY")
    if tally:
        with open(tally, "a") as f:
            f.write(" ".join(sorted(case.forms)) or "dense")
            f.write("\n")
    if case.forms:
        qb, kb, vb = check(case, q, k, v)
    else:
        from attnfuzz import layouts
        qb, kb, vb = layouts.case_inputs_bhsd(case, q, k, v)
    out = reference.attention(case, qb, kb, vb, mask=mask, bool_mask=bool_mask)
    if case.thd:
        return Result(np.concatenate([out[b, :, :case.seg_q(b)].transpose(1, 0, 2) for b in range(case.batch)]),
                      layout="thd")
    return out


if __name__ == "__main__":
    sys.exit(serve(run, name="serving_mirror", version="1",
                   caps=["f32", "f16", "bf16", "gqa", "cross", "dv", "scale", "softcap", "amask", "bmask", "causal",
                         "padding", "window", "strided", "mask_dtype", "packed", "paged", "sinks", "alibi"],
                   layouts=["bhsd", "bshd", "sbhd", "bsd", "channels_first", "qkv_bs3hd", "qkv_bsh3d",
                            "qkv_channels_first"]))
