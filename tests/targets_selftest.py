"""Self-test of the real targets, driven by their declarations (attnfuzz.targets._base): for
each variant, its run function called directly on a set of cases (every layout, packed
ones included, GQA, masks of every rank and dtype, causal diagonals, key padding, windows,
softcap, dropout, strided and stride-0 tensors, f16/bf16 where declared) against the float64
reference (attnfuzz.reference, itself checked against an independent computation in
python/tests/test_reference.py; an FP8 case's tolerance grows by the bound of the FP8
roundings the variant declares, reference.fp8_bound, as the C oracle's does); its repro snippet run standalone; the conventions it
declares (fully masked rows, NaN behind masked keys) measured; a compiled variant's cache
reused; its own self-checks; and a worker round trip through the protocol with strided
tensors.

    targets_selftest.py STACK/VARIANT [STACK/VARIANT ...]    self-test of these variants
    targets_selftest.py --random N SEED STACK/VARIANT ...    N random cases each vs the reference
    targets_selftest.py --unavailable                        every stack's unavailable paths

A case a variant does not declare (caps, layouts, dtypes, limits) is not sent, as attnfuzz
would not send it; a variant declared `quick` (compiles that take seconds) runs the quick
subset (and one protocol case). Exit 0 when every check passed, 1 when one failed, 77 (ctest's skip) when every
variant named is unavailable here. The last line is "N passed, N failed, N skipped".
"""

import importlib
import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # jax workers share a GPU with this process

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from attnfuzz import dtypes, known as known_entries, layouts, masks, probes, protocol, reference, rng, serving, testing  # noqa: E402,E501
from attnfuzz import targets as registry  # noqa: E402
from attnfuzz.case import Case  # noqa: E402
from attnfuzz.request import Request, caller  # noqa: E402
from attnfuzz.worker import Result, Unsupported  # noqa: E402

# Tolerance per dtype: |out - ref| <= ATOL * max(max|V|, 1) + RTOL * |ref| (inputs N(0,1)): a
# few units of the dtype's rounding on an output of size ~1 (f16/bf16 outputs carry one final
# rounding plus P rounded to the dtype before P @ V), as PyTorch's SDPA tests use.
ATOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}
RTOL = ATOL

# Real stack bugs (docs/findings.md): the case must still go wrong the documented way ("wrong"
# or "raise" with a message); the test says so when it starts to pass (fixed upstream). Keyed
# by target and case label, or by target and a feature the case needs (any case needing it).
KNOWN = {
    ("torch/flex", "bsd additive 4-D mask + scale"): ("raise", "not enough values to unpack",
                                                      "corpus/findings/torch/flex_cpu_reshaped_query.py"),
    ("torch/flex", "layout bsd"): ("raise", "not enough values to unpack",
                                   "corpus/findings/torch/flex_cpu_reshaped_query.py"),
    ("torch/sdpa_flash", "causal, negative scale"): (
        "wrong", "", "corpus/findings/torch/sdpa_cpu_flash_causal_negative_scale.py"),
    ("torch/sdpa_flash_lse", "causal, negative scale"): (  # the same kernel, its op called directly
        "wrong", "", "corpus/findings/torch/sdpa_cpu_flash_causal_negative_scale.py"),
    ("cudnn/sdpa", "causal, negative scale"): ("wrong", "", "corpus/findings/cudnn/sdpa_nonpositive_scale_nan.py"),
    ("cudnn/serving", "causal, negative scale"): ("wrong", "", "corpus/findings/cudnn/sdpa_nonpositive_scale_nan.py"),
    ("torch/cuda_sdpa_efficient", "strided: perm q, stride-0 k, padded v"): (
        "raise", "misaligned address", "corpus/findings/torch-cuda/sdpa_cuda_efficient_padded_value_misaligned.py"),
    ("torch/cuda_sdpa_cudnn", "f16 f32 mask"): (
        "wrong", "", "corpus/findings/torch-cuda/sdpa_cudnn_mask_dtype_and_masked_rows.py"),
    # the backward twins: dO padded (its rows past the head dim), and the f32 mask's backward
    ("torch/cuda_sdpa_cudnn", "backward f16 bshd causal gqa"): (
        "raise", "mha_graph.execute", "corpus/findings/torch-cuda/sdpa_cudnn_backward_grad_out_strides.py"),
    ("torch/cuda_sdpa_cudnn", "backward f16 f32 mask"): (
        "raise", "misaligned address", "corpus/findings/torch-cuda/sdpa_cudnn_mask_dtype_and_masked_rows.py"),
    ("ort/exported_sdpa", "causal, negative scale"): (
        "wrong", "", "corpus/findings/torch/onnx_export_sdpa_negative_scale.py"),
    ("tvm/torch_sdpa", "gqa"): ("wrong", "", "tvm's SDPA importer drops enable_gqa (corpus/findings/tvm)"),
    ("tvm/torch_sdpa", "scale"): ("wrong", "", "tvm's SDPA importer drops the scale (corpus/findings/tvm)"),
}

# Behaviour that depends on the host, judged through a known entry's `needs` (its
# corpus/findings/*/known.json entry, read by attnfuzz.known: CPU flags, $ATTNFUZZ_CPU_FLAGS
# in their place, and the target's libs): on a host that meets them, a check of the target
# that goes wrong the entry's way (symptom, below) is "known (entry ID, needs ...)"; on a
# host that does not, the check must pass as anywhere. Keyed by target: (entry id, symptom),
# the symptom a predicate over the wrong elements (bool [B, ...]).
# A symptom of None: any failure of the target's checks, exceptions included.
SCOPED = {
    # Inductor's CPU flex template on its AVX2 path: batch rows after the first wrong (0, NaN,
    # stale), a different count each call; once a process has run it, other cases of the
    # same compiled kernels go wrong too (row 0, a fully masked row's probe, an Inductor
    # bounds assertion "index out of bounds"), as clean clones on an AMX host forced to AVX2
    # showed (2026-12-02), flex_paged (the same template over a page table) included
    "torch/flex": ("torch-flex-cpu-avx2-batch-rows", None),
    "torch/flex_paged": ("torch-flex-cpu-avx2-batch-rows", None),
}


class Mismatch(AssertionError):
    """check_close's failure; bad: bool, where the output is off (None: not elementwise)."""

    def __init__(self, msg, bad=None):
        super().__init__(msg)
        self.bad = bad


def scoped(target, tname, err):
    """"known (entry ID, needs ...)" when err (a check's AssertionError) is the behaviour of
    tname's host-dependent entry (SCOPED) and this host meets the entry's needs; else None
    (the check fails)."""
    if tname not in SCOPED:
        return None
    eid, symptom = SCOPED[tname]
    if symptom is not None and getattr(err, "bad", None) is None:
        return None
    entry = known_entries.find(eid)
    if entry is None or (symptom is not None and not symptom(err.bad)):
        return None
    needs = entry.get("needs") or {}
    if known_entries.unmet(needs, libs=target.libs()):
        return None      # this host lacks what the bug needs: the check must pass here
    return "known (entry %s, needs %s)" % (eid, known_entries.describe(needs) or "nothing")


def judged(R, target, tname, good, msg):
    """R.ok(msg) when good; else "known (...)" where a host-scoped entry explains tname's
    failures (SCOPED), R.fail(msg) otherwise."""
    why = None if good else scoped(target, tname, AssertionError(msg))
    (R.ok if good or why else R.fail)(msg + (": " + why if why else ""))


def guarded(R, target, tname, what, check, *args):
    """check(*args); an exception out of it (a probe's compiled kernel asserting, a worker
    that died) is "known (...)" where a host-scoped entry explains tname's failures
    (SCOPED), a failure otherwise."""
    try:
        check(*args)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        judged(R, target, tname, False, "%s %s: %s: %s" % (tname, what, type(e).__name__,
                                                          str(e).splitlines()[0] if str(e) else ""))


# The fully masked rows of these variants were measured as follows before a convention
# could say so; each now declares it (masked_rows "mean" / "unmasked") and check_conventions
# checks that the declaration and the measurement still agree. jax "xla" replaces masked
# logits by -0.7 * finfo.max (the row averages V over every masked key); jax "cudnn" adds
# that number as a bias (the row is plain attention over every key).
# In bf16 jax "cudnn"'s bias (-2 << 40) swamps every score: the row averages V.
ODD_ROWS = {"jax/xla": "mean", "jax/cudnn": {"f16": "unmasked", "bf16": "mean"}}


def declared_rows(rows, dtype):
    """A masked_rows value (a name, or a dict of names by dtype: "zero" where it names none)
    for a case of dtype."""
    return rows.get(dtype, "zero") if isinstance(rows, dict) else rows


def rows_checked(conv, dtype):
    """The masked_rows value check_close can check row by row ("zero", "nan") in a case of
    dtype, else None (check_conventions checks "mean" and "unmasked" on its probe)."""
    rows = declared_rows(conv.get("masked_rows", "zero"), dtype)
    return rows if rows in ("zero", "nan") else None


# -- cases ---------------------------------------------------------------------------------

def _case(**kw):
    c = {"batch": 2, "q_heads": 4, "kv_heads": 4, "q_len": 7, "kv_len": 7, "head_dim": 16, "dtype": "f32"}
    lay = kw.pop("layout", None)
    c.update(kw)
    if lay is not None:
        c["q"] = {"layout": lay}
        if lay not in layouts.PACKED:
            c["k"] = {"layout": lay}
            c["v"] = {"layout": lay}
    return c


def _mask(rank=4, full_dims="bhqk", dtype="f32", expanded=False):
    return {"rank": rank, "full_dims": full_dims, "dtype": dtype, "expanded": expanded}


CASES = [
    ("bhsd f32", _case(layout="bhsd")),
    ("layout bsd", _case(layout="bsd", q_len=5, kv_len=5)),
    ("bshd cross causal top-left", _case(layout="bshd", q_len=5, kv_len=9, causal=True)),
    ("sbhd gqa bottom-right", _case(layout="sbhd", q_heads=4, kv_heads=2, q_len=5, kv_len=9, causal=True,
                                    diagonal="bottom_right")),
    ("bsd additive 4-D mask + scale", _case(layout="bsd", q_len=6, kv_len=10, scale=0.3,
                                            additive_mask=_mask(full_dims="bqk"))),
    ("channels_first bool 2-D mask", _case(layout="channels_first", q_len=6, kv_len=6,
                                           bool_mask=_mask(rank=2, full_dims="qk"))),
    ("mixed layouts padding window", _case(q={"layout": "bshd"}, k={"layout": "bhsd"}, v={"layout": "sbhd"},
                                           q_len=6, kv_len=12, key_padding=[9, 12], window=[3, 1])),
    ("qkv_bs3hd causal", _case(layout="qkv_bs3hd", q_len=8, kv_len=8, causal=True)),
    ("qkv_bsh3d padding bottom-right-valid", _case(layout="qkv_bsh3d", q_len=8, kv_len=8, causal=True,
                                                   key_padding=[5, 8], diagonal="bottom_right_valid")),
    ("qkv_channels_first additive 2-D", _case(layout="qkv_channels_first", q_len=8, kv_len=8,
                                              additive_mask=_mask(rank=2, full_dims="qk"))),
    ("strided stride-0 kv, gqa 4:1", _case(q={"layout": "bhsd", "perm": 5, "pad": 3},
                                           k={"layout": "bshd", "broadcast": "batch"},
                                           v={"layout": "bhsd", "pad": 2}, q_heads=4, kv_heads=1)),
    ("dv != d explicit diagonal", _case(layout="bhsd", head_dim=16, v_head_dim=8, q_len=5, kv_len=9, causal=True,
                                        diagonal="explicit", diagonal_offset=2)),
    ("explicit diagonal + window", _case(layout="bhsd", diagonal="explicit", diagonal_offset=2, q_len=4, kv_len=8,
                                         window=[2, 1])),
    ("fully masked rows", _case(layout="bhsd", causal=True, diagonal="explicit", diagonal_offset=-2)),
    ("causal, negative scale", _case(layout="bhsd", causal=True, scale=-0.3, q_len=5, kv_len=5)),
    ("softcap", _case(layout="bhsd", softcap=2.0, scale=1.5)),
    ("softcap sqrt_qk placement", _case(layout="bhsd", softcap=2.0, scale=1.5, scale_placement="sqrt_qk")),
    ("f16 bshd causal gqa", _case(layout="bshd", dtype="f16", q_heads=4, kv_heads=2, q_len=9, kv_len=9,
                                  causal=True)),
    ("f16 f32 mask", _case(layout="bhsd", dtype="f16", additive_mask=_mask(full_dims="hqk", dtype="f32"))),
    ("f16 f16 mask", _case(layout="bhsd", dtype="f16", additive_mask=_mask(full_dims="bhqk", dtype="f16"))),
    ("both masks, bf16 mask dtype", _case(layout="bhsd", additive_mask=_mask(rank=2, full_dims="qk", dtype="bf16"),
                                          bool_mask=_mask(full_dims="bhqk"))),
    ("bool mask [1,H,Sq,Sk] expanded + causal", _case(layout="bhsd", causal=True,
                                                      bool_mask=_mask(full_dims="hqk", expanded=True))),
    ("bf16 qkv_bs3hd bool mask", _case(layout="qkv_bs3hd", dtype="bf16", q_len=8, kv_len=8,
                                       bool_mask=_mask(full_dims="bqk"))),
    ("dropout", _case(layout="bhsd", dropout_p=0.25, dropout_seed=12345)),
    ("dropout p=1", _case(layout="bhsd", dropout_p=1.0, dropout_seed=7)),
    ("dropout f16 causal, longer rows", _case(layout="bhsd", dtype="f16", dropout_p=0.3, dropout_seed=9,
                                              causal=True, q_len=33, kv_len=33)),
    ("dropout bf16 gqa, bool mask", _case(layout="bhsd", dtype="bf16", dropout_p=0.5, dropout_seed=3, q_heads=4,
                                          kv_heads=2, bool_mask=_mask(full_dims="bqk"))),
    # half-precision twins of the layout and mask cases (what f16/bf16-only kernels run)
    ("f16 sbhd cross padding", _case(layout="sbhd", dtype="f16", q_len=6, kv_len=10, key_padding=[7, 10])),
    ("f16 bsd 4-D mask + scale", _case(layout="bsd", dtype="f16", q_len=6, kv_len=10, scale=0.3,
                                       additive_mask=_mask(full_dims="bqk", dtype="f16"))),
    ("f16 qkv_channels_first causal window", _case(layout="qkv_channels_first", dtype="f16", q_len=8, kv_len=8,
                                                   causal=True, window=[3, -1])),
    ("f16 window both sides", _case(layout="bshd", dtype="f16", q_len=8, kv_len=8, window=[2, 1])),
    ("bf16 mixed layouts bottom-right gqa", _case(q={"layout": "bhsd"}, k={"layout": "sbhd"}, v={"layout": "bsd"},
                                                  dtype="bf16", q_heads=4, kv_heads=2, q_len=5, kv_len=9,
                                                  causal=True, diagonal="bottom_right")),
    # last: CUDA's memory-efficient kernel faults on it and loses the process's context
    ("strided: perm q, stride-0 k, padded v", _case(q={"layout": "bhsd", "perm": 2},
                                                    k={"layout": "bhsd", "broadcast": "batch"},
                                                    v={"layout": "bhsd", "pad": 3}, q_len=5, kv_len=5)),
]

def _serving(forms, **kw):
    """A serving part (docs/case-json.md "serving"): forms and their fields."""
    return dict(kw, forms=list(forms))


# The serving forms (docs/design.md section 2): segments of 0, 1 and many tokens, queries and
# keys of different lengths, shared and partly filled pages, page sizes of 1, 3 and over 16,
# decode steps of 1 and 4 queries against a long cache, sinks and both ALiBi forms, GQA, f16.
SERVING_CASES = [
    ("packed self segments", _case(layout="bshd", q_len=6, kv_len=6, batch=3,
                                   serving=_serving(["packed"], q_lens=[6, 1, 4], kv_lens=[6, 1, 4]))),
    ("packed cross, empty segments", _case(layout="bshd", q_len=5, kv_len=9, batch=4,
                                           serving=_serving(["packed"], q_lens=[5, 0, 3, 2], kv_lens=[9, 4, 0, 7]))),
    ("packed causal bottom-right gqa", _case(layout="bshd", q_len=4, kv_len=8, batch=2, q_heads=4, kv_heads=2,
                                             causal=True, diagonal="bottom_right",
                                             serving=_serving(["packed"], q_lens=[4, 2], kv_lens=[8, 5]))),
    ("packed self causal f16", _case(layout="bshd", dtype="f16", q_len=16, kv_len=16, batch=2, head_dim=16,
                                     causal=True, serving=_serving(["packed"], q_lens=[16, 9], kv_lens=[16, 9]))),
    ("paged pages of 4, shared", _case(q_len=3, kv_len=13, batch=3, causal=True, diagonal="bottom_right",
                                       serving=_serving(["paged"], kv_lens=[13, 9, 5], page_size=4,
                                                        shared_pages=2, page_seed=7))),
    ("paged pages of 16, window", _case(q_len=4, kv_len=40, batch=2, window=[6, 0], diagonal="bottom_right",
                                        serving=_serving(["paged"], kv_lens=[40, 17], page_size=16, page_seed=9))),
    ("paged pages of 1", _case(q_len=2, kv_len=5, batch=2,
                               serving=_serving(["paged"], kv_lens=[5, 3], page_size=1, page_seed=3))),
    ("packed queries, paged keys f16", _case(layout="bshd", dtype="f16", q_len=4, kv_len=20, batch=2, head_dim=16,
                                             causal=True, diagonal="bottom_right",
                                             serving=_serving(["packed", "paged"], q_lens=[4, 1], kv_lens=[20, 11],
                                                              page_size=16, page_seed=5))),
    ("decode of 1 query, 300 keys", _case(q_len=1, kv_len=300, batch=3, head_dim=16, causal=True,
                                          diagonal="bottom_right_valid",
                                          serving=_serving(["paged"], kv_lens=[300, 129, 257], page_size=16,
                                                           page_seed=11))),
    ("decode of 4 queries, bf16", _case(q_len=4, kv_len=272, batch=2, head_dim=16, dtype="bf16", causal=True,
                                        diagonal="bottom_right")),
    ("sinks", _case(q_len=5, kv_len=5, serving=_serving(["sinks"], sink_seed=4, sink_log10_magnitude=0.5))),
    ("alibi causal", _case(q_len=6, kv_len=6, causal=True, serving=_serving(["alibi"]))),
    ("alibi symmetric random slopes", _case(q_len=4, kv_len=7, diagonal="bottom_right",
                                            serving=_serving(["alibi"], alibi_symmetric=True, alibi_slopes="random",
                                                             alibi_log10_magnitude=-0.5, alibi_seed=8))),
    ("paged with sinks and alibi", _case(q_len=2, kv_len=20, batch=2, causal=True, diagonal="bottom_right",
                                         serving=_serving(["paged", "sinks", "alibi"], kv_lens=[20, 6], page_size=16,
                                                          page_seed=2, sink_seed=6))),
]

# FP8 cases (docs/case-json.md, "fp8"): Q, K, V in e4m3 or e5m2 with per-tensor descales, or
# only K and V (an FP8 KV cache, kv_only); the output in f16 or bf16. Sent to the variants that
# declare the format (and fp8_kv for the KV-cache form), as attnfuzz sends them.
def _fp8(fmt, descale, kv_only=False):
    return {"format": fmt, "descale": descale, "kv_only": kv_only}


FP8_CASES = [
    ("fp8 e4m3 bshd gqa causal bottom-right", _case(layout="bshd", dtype="f16", q_heads=4, kv_heads=2, q_len=5,
                                                    kv_len=9, head_dim=64, causal=True, diagonal="bottom_right",
                                                    fp8=_fp8("e4m3", [0.5, 0.25, 2.0]))),
    ("fp8 e5m2 bhsd cross padding bf16", _case(layout="bhsd", dtype="bf16", q_len=6, kv_len=10, head_dim=64,
                                               key_padding=[7, 10], fp8=_fp8("e5m2", [2.0, 0.125, 0.5]))),
    ("fp8_kv e4m3 bshd gqa causal bottom-right", _case(layout="bshd", dtype="f16", q_heads=4, kv_heads=2, q_len=3,
                                                       kv_len=21, head_dim=64, causal=True, diagonal="bottom_right",
                                                       fp8=_fp8("e4m3", [1.0, 0.5, 4.0], kv_only=True))),
    ("fp8_kv e5m2 bhsd decode bf16", _case(layout="bhsd", dtype="bf16", q_len=1, kv_len=40, head_dim=64,
                                           fp8=_fp8("e5m2", [1.0, 2.0, 0.25], kv_only=True))),
]

# What a `quick` variant runs (every layout family, GQA, masks, causal diagonals, padding,
# f16, dropout, FP8: each compile takes seconds).
QUICK = ("sbhd gqa bottom-right", "mixed layouts padding window", "qkv_channels_first additive 2-D",
         "f16 bshd causal gqa", "bsd additive 4-D mask + scale", "qkv_bsh3d padding bottom-right-valid",
         "dropout") + tuple(label for label, _ in FP8_CASES)

# What a `quick` variant runs of the serving cases (each compile takes seconds).
QUICK_SERVING = ("packed cross, empty segments", "paged pages of 4, shared", "decode of 1 query, 300 keys",
                 "paged with sinks and alibi", "alibi symmetric random slopes")

# The cases a variant that declares "backward" runs again as backward cases (every gradient,
# dmask with an additive mask, dO with its own strides): the quick set and the features whose
# gradients have their own code (softcap's derivative, GQA sums, stride-0 inputs, the masks'
# gradient in another dtype, packed buffers, fully masked rows).
BACKWARD = QUICK + ("softcap", "strided stride-0 kv, gqa 4:1", "f16 f32 mask", "both masks, bf16 mask dtype",
                    "qkv_bs3hd causal", "fully masked rows", "bhsd f32")

# Gradient tolerance per dtype, times the gradient's largest magnitude (plus RTOL * |ref|): a
# backward at the dtype's precision, P and dS rounded once more than the forward.
GTOL = {"f32": 1e-4, "f16": 2e-2, "bf16": 1.2e-1}


def backward_twin(c, i):
    """Case c asking for every gradient, dO drawn with a memory order and padding of its own."""
    grads = ["dq", "dk", "dv"] + (["dmask"] if c.get("additive_mask") else [])
    return dict(c, backward={"grads": grads, "do": {"perm": i % 3, "pad": i % 2} if i % 2 else {}})


# Cases whose tensors travel over the protocol with real strides: permuted memory orders,
# padded rows, stride-0 batch/head broadcast, packed buffers, expanded masks.
PROTOCOL_CASES = [
    ("strided gqa cross causal bottom_right, expanded mask",
     _case(q={"layout": "bshd", "perm": 5, "pad": 3}, k={"layout": "bhsd", "broadcast": "batch", "perm": 2},
           v={"layout": "bsd", "pad": 1, "perm": 1}, q_heads=4, kv_heads=2, q_len=6, kv_len=9, causal=True,
           diagonal="bottom_right", additive_mask=_mask(full_dims="bqk", expanded=True))),
    ("packed channels_first f16 permuted+padded, bool mask",
     _case(q={"layout": "qkv_channels_first", "perm": 2, "pad": 1}, dtype="f16", bool_mask=_mask(full_dims="hqk"))),
    ("packed bsh3d permuted, key padding",
     _case(q={"layout": "qkv_bsh3d", "perm": 7}, q_heads=3, kv_heads=3, key_padding=[3, 5])),
    ("sbhd/channels_first/bhsd, broadcast heads, 2-D bool mask",
     _case(q={"layout": "sbhd"}, k={"layout": "channels_first", "perm": 1, "pad": 2},
           v={"layout": "bhsd", "broadcast": "heads"}, scale=0.7, q_len=1, kv_len=4,
           bool_mask=_mask(rank=2, full_dims="k"))),
    # serving forms: THD with permuted, padded strides; page caches with a shuffled table
    ("packed THD permuted + padded, empty segment",
     _case(q={"layout": "bshd", "perm": 3, "pad": 2}, k={"layout": "bshd", "pad": 1}, v={"layout": "bshd", "perm": 1},
           batch=3, q_len=5, kv_len=7, serving=_serving(["packed"], q_lens=[5, 0, 2], kv_lens=[7, 3, 2]))),
    ("paged pages of 4, sinks, alibi",
     _case(batch=2, q_len=2, kv_len=11, causal=True, diagonal="bottom_right",
           serving=_serving(["paged", "sinks", "alibi"], kv_lens=[11, 6], page_size=4, page_seed=12, sink_seed=1))),
    # what kernels of one form run: self-attention segments (segment ids), single queries
    # against long keys with a sink (decode), a page cache alone (paged decode)
    ("packed THD self segments permuted, gqa causal",
     _case(q={"layout": "bshd", "perm": 4, "pad": 1}, k={"layout": "bshd", "perm": 2}, v={"layout": "bshd", "pad": 2},
           batch=3, q_heads=4, kv_heads=2, q_len=6, kv_len=6, causal=True,
           serving=_serving(["packed"], q_lens=[6, 0, 3], kv_lens=[6, 0, 3]))),
    ("packed single queries, long keys, sinks",
     _case(q={"layout": "bshd", "pad": 1}, k={"layout": "bshd", "perm": 3}, v={"layout": "bshd"}, batch=3,
           q_len=1, kv_len=300, causal=True, diagonal="bottom_right",
           serving=_serving(["packed", "sinks"], q_lens=[1, 1, 0], kv_lens=[9, 300, 4], sink_seed=5,
                            sink_log10_magnitude=0.25))),
    ("paged pages of 8, two queries",
     _case(batch=2, q_len=2, kv_len=21, causal=True, diagonal="bottom_right",
           serving=_serving(["paged"], kv_lens=[21, 5], page_size=8, page_seed=4))),
]


def needs(c):
    """(caps, Case): the caps a case needs (Case.required_caps: what attnfuzz checks
    before sending)."""
    cs = Case(c)
    return cs.required_caps(), cs


def declared_case(c, hello):
    """Case c in the variant's declared dtype and head dims where it is outside them: the first
    declared dtype for an undeclared one, head dims rounded up to the declared multiple (a
    kernel of fixed head dims, FlashInfer's bucket, runs the same checks at its own size)."""
    if c.get("dtype", "f32") not in hello["dtypes"]:
        c = dict(c, dtype=hello["dtypes"][0])
    mult = hello.get("limits", {}).get("head_dim_multiple", 1)
    if mult > 1:
        d, dv = c.get("head_dim", 16), c.get("v_head_dim", c.get("head_dim", 16))
        c = dict(c, head_dim=-(-d // mult) * mult, v_head_dim=-(-dv // mult) * mult)
    return c


def sendable(c, hello):
    """Would attnfuzz send case c to a variant that said hello?"""
    caps, cs = needs(c)
    conv = hello["conventions"]
    lim = hello.get("limits", {})
    mult = lim.get("head_dim_multiple", 1)
    uses_diag = cs.causal or cs.has_window
    # tensors in THD or page-cache form travel in no layout of section 3
    travel = [n for n in ("q", "k", "v") if not (cs.thd or (n != "q" and cs.paged))]
    return (caps <= set(hello["caps"]) and cs.dtype in hello["dtypes"]
            and {cs.layouts[n] for n in travel} <= set(hello["layouts"])
            and cs.q_len <= lim.get("max_q_len", 1 << 30)
            and not (uses_diag and cs.diagonal not in conv.get("causal", ()))
            and cs.head_dim % mult == 0 and cs.v_head_dim % mult == 0
            and cs.head_dim <= lim.get("max_head_dim", 1 << 30))


def inputs_for(c, seed, magnitude=1.0):
    """Canonical float64 inputs rounded to the case dtype (equal along stride-0 dims, as one
    copy travels), masks as [B', Hq', Sq', Sk'] in the spec's dims, and the physical arrays."""
    cs = Case(c)
    dt = dtypes.DTYPES[cs.dtype]
    r = np.random.default_rng(seed)
    B, Hq, Hkv, Sq, Sk, D, Dv = (cs.batch, cs.q_heads, cs.kv_heads, cs.q_len, cs.kv_len, cs.head_dim,
                                 cs.v_head_dim)
    q = (r.standard_normal((B, Hq, Sq, D)) * magnitude).astype(dt).astype(np.float64)
    k = (r.standard_normal((B, Hkv, Sk, D)) * magnitude).astype(dt).astype(np.float64)
    v = r.standard_normal((B, Hkv, Sk, Dv)).astype(dt).astype(np.float64)
    for name, x in (("q", q), ("k", k), ("v", v)):
        b = cs.specs[name]["broadcast"]
        if b == "batch" or (cs.packed and any(cs.specs[n]["broadcast"] == "batch" for n in "qkv")):
            x[1:] = x[:1]
        elif b == "heads" and layouts.batch_head_dims(cs.specs[name]["layout"])[1] >= 0:
            x[:, 1:] = x[:, :1]
    full = (B, Hq, Sq, Sk)
    mask = bmask = None
    if cs.amask:
        shape = tuple(n if letter in cs.amask.get("full_dims", "qk") else 1 for n, letter in zip(full, "bhqk"))
        mask = (r.standard_normal(shape) * 2).astype(dtypes.DTYPES[cs.amask.get("dtype", "f32")])
        mask[r.random(shape) < 0.2] = -np.inf
    if cs.bmask:
        shape = tuple(n if letter in cs.bmask.get("full_dims", "qk") else 1 for n, letter in zip(full, "bhqk"))
        bmask = r.random(shape) > 0.3
    if cs.paged:  # rows sharing pages hold row 0's keys there (one copy in the cache)
        k, v = serving.share(cs, k, v)
    dout = None
    if cs.grads:
        dout = r.standard_normal((B, Hq, Sq, Dv)).astype(dt).astype(np.float64)
        b = cs.specs["do"]["broadcast"]
        if b == "batch":
            dout[1:] = dout[:1]
        elif b == "heads":
            dout[:, 1:] = dout[:, :1]
    arrays = testing.physical_inputs(c, q, k, v, mask=mask, bool_mask=bmask, dout=dout)
    if cs.fp8:  # the stored values in the format: exact in f16 (the physical arrays' step)
        fmt = dtypes.DTYPES[cs.fp8]
        for n in ("q", "k", "v") if not cs.fp8_kv else ("k", "v"):
            x = {"q": q, "k": k, "v": v}[n]
            x[...] = x.astype(fmt).astype(np.float64)
        arrays = testing.physical_inputs(c, q, k, v, mask=mask, bool_mask=bmask, dout=dout)
        for n in ("q", "k", "v") if not cs.fp8_kv else ("k", "v"):
            arrays[n] = np.asarray(arrays[n]).astype(fmt)
    return q, k, v, arrays


def request(c, arrays, want_lse=False):
    """A run request as the worker kit hands it to a target: a Request of the Case with
    derived values and the views (read-only), its keep mask the counter RNG's; want_lse as
    attnfuzz sets it for a variant with cap lse."""
    for a in arrays.values():
        a.flags.writeable = False
    return Request.from_arrays(Case(c, testing.derived(c)), arrays, keep=rng.case_keep, want_lse=want_lse)


def call_run(target, c, arrays):
    """Calls a target's run like the worker kit does (request()). Returns (output
    [B, Hq, Sq, Dv], Case, Result)."""
    # the statistics, asked as attnfuzz asks them (src/backends/worker_proto.c af_wp_want_lse)
    want_lse = "lse" in target.hello()["caps"] and not c.get("grads") and "packed" not in (c.get("serving") or {}).get("forms", ())
    req = request(c, arrays, want_lse)
    cs = req.case
    res = target.run(req)
    if not isinstance(res, Result):
        res = Result(res)
    out = np.asarray(res.out)
    if res.layout == "thd" and cs.thd:
        want = (sum(cs.seg_q(b) for b in range(cs.batch)), cs.q_heads, cs.v_head_dim)
    else:
        want = layouts.out_shape(res.layout, cs.batch, cs.q_heads, cs.q_len, cs.v_head_dim)
    if out.shape != want:
        raise AssertionError("output shape %s, the %s output is %s" % (list(out.shape), res.layout, list(want)))
    if cs.forms:  # as attnfuzz reads it: THD scattered, rows past a segment 0
        return serving.padded_out(cs, out, res.layout), cs, res
    return layouts.to_bhsd(out, res.layout, cs.q_heads, cs.v_head_dim), cs, res


def dead_rows(cs, mask, bool_mask):
    """bool [B, Hq, Sq]: query rows every key of which is masked (structural, boolean, or
    an additive -inf)."""
    full = (cs.batch, cs.q_heads, cs.q_len, cs.kv_len)
    ok = masks.live(cs, bool_mask)
    ok = np.ones(full, dtype=bool) if ok is None else np.broadcast_to(ok, full)
    if mask is not None:
        ok = ok & np.broadcast_to(masks.additive_bhsd(cs, mask) != -np.inf, full)
    return ~ok.any(axis=-1)


def check_close(name, out, ref, v, dtype, dead=None, rows="zero", extra=None):
    """out against ref within the dtype's tolerance (plus extra, per element: the FP8
    roundings a variant declares); fully masked rows (dead) must follow the declared
    convention (rows: "zero", "nan", or None: not checked)."""
    out = np.asarray(out, dtype=np.float64)
    if dead is not None and dead.any():
        d = out[dead]
        if rows == "nan" and not (np.isnan(d) | (d == 0)).all():
            # NaN, or 0 where dropout zeroed a weight whatever the softmax gave
            raise Mismatch("%s: a fully masked row is neither NaN nor 0 (declared nan)" % name)
        if rows == "zero" and not (d == 0).all():
            raise Mismatch("%s: a fully masked row is not 0: %r" % (name, d[~(d == 0)][:3]))
        out = out.copy()
        out[dead] = ref[dead]
    v = np.asarray(v, dtype=np.float64)
    scale = max(float(np.max(np.abs(v[np.isfinite(v)]), initial=0.0)), 1.0)  # a paged tail's poison aside
    tol = ATOL[dtype] * scale + RTOL[dtype] * np.abs(ref)
    if extra is not None:
        tol = tol + extra
    bad = ~(np.abs(out - ref) <= tol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.abs(out - ref), -1)), out.shape)
        raise Mismatch("%s: %d of %d elements off, worst at %s: got %r, want %r"
                       % (name, int(bad.sum()), bad.size, list(i), out[i], ref[i]), bad)


def check_result(tname, label, target, c, q, k, v, arrays, out, cs, res):
    """out against the reference (the variant's own keep mask when it returns one)."""
    hello = target.hello()
    ref = reference.attention(cs, q, k, v, mask=arrays.get("mask"), bool_mask=arrays.get("bool_mask"),
                              keep=res.dropout_keep)
    rows = rows_checked(hello["conventions"], cs.dtype)
    dead = dead_rows(cs, arrays.get("mask"), arrays.get("bool_mask"))
    out = tail_leaks(cs, hello["conventions"], out, ref, v)
    # the tolerance scales with V's values: an FP8 case's dequantized ones; it grows by the bound
    # of the FP8 roundings the variant declares (fp8_probs, fp8_out), as the C oracle's does
    extra = (reference.fp8_bound(cs, q, k, v, hello["conventions"], mask=arrays.get("mask"),
                                 bool_mask=arrays.get("bool_mask")) if cs.fp8 else None)
    check_close(label, out, ref, reference.dequantized(cs, v, "v"), cs.dtype, dead, rows, extra)
    if getattr(res, "lse", None) is not None:
        check_lse(label, res.lse, reference.lse(cs, q, k, mask=arrays.get("mask"), bool_mask=arrays.get("bool_mask")),
                  cs, dead, hello.get("lse_base"))


def check_lse(name, got, ref, cs, dead, base):
    """A variant's softmax statistics ([B, Hq, Sq], base 2 where its hello says lse_base 2)
    against reference.lse: within the dtype's tolerance in log units, ATOL (1 + |ref|) (the
    scores' rounding moves the statistics by at most the largest score error). Fully masked
    rows (-inf in the reference) are not held to it here: attnfuzz's oracle judges them, and
    what the variant gives there is printed."""
    got = np.asarray(got, dtype=np.float64)
    want = (cs.batch, cs.q_heads, cs.q_len)
    if got.shape != want:
        raise Mismatch("%s: lse has shape %s, not %s" % (name, list(got.shape), list(want)))
    if base == 2:
        got = got * np.log(2.0)
    if dead.any() and not (got[dead] == -np.inf).all():
        print("  note: %s: lse of a fully masked row is %r (the reference's -inf)" % (name, got[dead][:3]))
    live = ~dead
    tol = ATOL[cs.dtype] * (1.0 + np.abs(ref[live]))
    bad = ~(np.abs(got[live] - ref[live]) <= tol)
    if bad.any():
        raise Mismatch("%s: lse: %d of %d rows off, e.g. got %r, want %r"
                       % (name, int(bad.sum()), bad.size, got[live][bad][:3], ref[live][bad][:3]))


def tail_leaks(cs, conv, out, ref, v):
    """out with the NaN a declared masked_values "ieee" explains in a paged case taken as the
    reference's: a row b whose pages or table reach serving.poison (a last page's unused slots,
    the null page: masked keys with a non-finite value) may be NaN, as the C oracle waives its
    masked_value_leak for such a target."""
    if not cs.paged or conv.get("masked_values", "exclude") != "ieee":
        return out
    out = np.array(out, dtype=np.float64)
    for b in range(cs.batch):
        if serving.poison_reach(cs, b):
            leak = np.isnan(out[b])
            out[b][leak] = ref[b][leak]
    return out


def check_grads(tname, label, target, q, k, v, arrays, cs, res):
    """A backward case's gradients (validated and normalized as the worker kit does) against
    reference.backward; not checked (False returned) where fully masked rows follow a NaN or
    odd convention, which the gradients inherit. Raises AssertionError on a mismatch."""
    from attnfuzz.worker import _grad_arrays, mask_grad
    dead = dead_rows(cs, arrays.get("mask"), arrays.get("bool_mask"))
    rows = declared_rows(target.hello()["conventions"].get("masked_rows", "zero"), cs.dtype)
    if dead.any() and (rows != "zero" or tname in ODD_ROWS):
        return False
    do = layouts.to_bhsd(arrays["do"], cs.out_layout, cs.q_heads, cs.v_head_dim).astype(np.float64)
    want = reference.backward(cs, q, k, v, do, mask=arrays.get("mask"), bool_mask=arrays.get("bool_mask"),
                              keep=res.dropout_keep)
    heads = {"dq": (cs.q_heads, cs.head_dim), "dk": (cs.kv_heads, cs.head_dim), "dv": (cs.kv_heads, cs.v_head_dim)}
    for name, got in _grad_arrays(cs, res.layout, res.grads):
        if name == "dmask":
            exp = mask_grad(cs, want[name])
            # summed over the dims the mask broadcasts, where it may cancel to exactly 0 (a
            # row's dS sums to 0 over the keys): the scale is that of the summands
            full = (cs.batch, cs.q_heads, cs.q_len, cs.kv_len)
            m4 = np.asarray(arrays["mask"]).reshape((1,) * (4 - arrays["mask"].ndim) + arrays["mask"].shape)
            per = reference.backward(cs, q, k, v, do, mask=np.broadcast_to(m4, full),
                                     bool_mask=arrays.get("bool_mask"), keep=res.dropout_keep)["dmask"]
            scale = float(np.abs(mask_grad(cs, np.abs(per))).max())
        else:
            got = layouts.to_bhsd(got, res.layout, *heads[name])
            exp = want[name]
        # a gradient returned in f16/bf16 (a mask's gradient comes in the mask's dtype) carries
        # that final rounding
        final = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}.get(np.asarray(res.grads[name]).dtype.name, 0.0)
        got = np.asarray(got, dtype=np.float64)
        if name != "dmask":
            scale = float(np.abs(exp).max())
        tol = (GTOL[cs.dtype] * max(scale, 1e-30)
               + (RTOL[cs.dtype] + final) * np.abs(exp))
        bad = ~(np.abs(got - exp) <= tol)
        if bad.any():
            i = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(np.abs(got - exp), nan=np.inf), -1)), got.shape)
            raise AssertionError("%s: %s: %d of %d elements off, worst at %s: got %r, want %r"
                                 % (label, name, int(bad.sum()), bad.size, list(i), got[i], exp[i]))
    return True


class Runner:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def ok(self, msg):
        self.passed += 1
        print("ok    " + msg, flush=True)

    def fail(self, msg):
        self.failed += 1
        print("FAIL  " + msg, flush=True)

    def skip(self, msg):
        self.skipped += 1
        print("skip  " + msg, flush=True)


def raised(R, tname, label, known, e, target=None):
    """Judges exception e of a case: the known bug's documented raise, a host-scoped entry's
    (SCOPED), or a failure. False when it lost the CUDA context (the variant's process can
    run no more)."""
    why = scoped(target, tname, e) if target is not None else None
    if known and known[0] == "raise" and known[1] in str(e):
        R.ok("%s %s: raises as %s shows" % (tname, label, known[2]))
    elif why:
        R.ok("%s %s: %s: %s: %s" % (tname, label, why, type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
    else:
        traceback.print_exc()
        R.fail("%s %s: %s: %s" % (tname, label, type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
    if "CUDA error" in str(e):
        print("note  %s: the CUDA context is lost: the rest of its cases are not run" % tname)
        return False
    return True


def known_bug(tname, label, caps):
    hits = [KNOWN[(tname, x)] for x in [label] + sorted(caps) if (tname, x) in KNOWN]
    return hits[0] if hits else None


def test_cases(R, tname, target):
    """False when the variant's process can run no more (a CUDA context lost)."""
    hello = target.hello()
    quick = target.decl.quick
    for i, (label, c) in enumerate(CASES + SERVING_CASES + FP8_CASES):
        if quick and label not in QUICK and label not in QUICK_SERVING:
            continue
        c = declared_case(c, hello)
        if not sendable(c, hello):
            continue
        caps, _ = needs(c)
        known = known_bug(tname, label, caps)
        q, k, v, arrays = inputs_for(c, 1000 + i)
        try:
            out, cs, res = call_run(target, c, arrays)
        except Unsupported as e:
            R.ok("%s %s: unsupported: %s" % (tname, label, e))
            continue
        except Exception as e:  # noqa: BLE001
            if not raised(R, tname, label, known, e, target):
                return False
            continue
        try:
            check_result(tname, label, target, c, q, k, v, arrays, out, cs, res)
        except AssertionError as e:
            if known and known[0] == "wrong":
                R.ok("%s %s: wrong as %s shows" % (tname, label, known[2]))
            elif scoped(target, tname, e):
                R.ok("%s %s: %s: %s" % (tname, label, scoped(target, tname, e), e))
            else:
                R.fail("%s %s" % (tname, e))
            continue
        if known:
            R.fail("%s %s: passes, but a known bug should break it (%s): fixed upstream? Update the finding and "
                   "KNOWN" % (tname, label, known[2]))
        else:
            R.ok("%s %s" % (tname, label))
    return True


# Batches whose rows differ in length (valid keys), for a variant that declares
# batch_invariant: each row run alone must give bitwise its row of the batch.
INVARIANCE_CASES = [
    ("rows of 40, 17 and 33 keys, causal", _case(layout="bshd", dtype="f16", batch=3, q_len=5, kv_len=40,
                                                 head_dim=64, causal=True, diagonal="bottom_right_valid",
                                                 key_padding=[40, 17, 33])),
    ("rows of 300, 1 and 129 keys, gqa", _case(layout="bhsd", dtype="bf16", batch=3, q_heads=4, kv_heads=2,
                                               q_len=3, kv_len=300, head_dim=64, key_padding=[300, 1, 129])),
]


def check_batch_invariant(R, tname, target):
    """A variant declaring batch_invariant (docs/worker-protocol.md): every row of a batch
    (INVARIANCE_CASES) run alone, as a batch of one with its own inputs and valid keys, gives
    bitwise the same output as its row in the batch (the batch_split relation's bitwise form)."""
    hello = target.hello()
    if not hello.get("batch_invariant"):
        return
    for i, (label, c) in enumerate(INVARIANCE_CASES):
        c = declared_case(c, hello)
        if not sendable(c, hello):
            R.skip("%s batch invariance %s: not a case it declares" % (tname, label))
            continue
        q, k, v, arrays = inputs_for(c, 3000 + i)
        try:
            whole, _, _ = call_run(target, c, arrays)
        except Unsupported as e:
            R.skip("%s batch invariance %s: unsupported: %s" % (tname, label, e))
            continue
        differ = []
        for b in range(c["batch"]):
            row = dict(c, batch=1, key_padding=[c["key_padding"][b]])
            alone, _, _ = call_run(target, row, testing.physical_inputs(row, q[b:b + 1], k[b:b + 1], v[b:b + 1]))
            if not np.array_equal(np.asarray(alone)[0], np.asarray(whole)[b], equal_nan=True):
                differ.append(b)
        (R.fail if differ else R.ok)("%s batch invariance %s: %s" % (
            tname, label, "rows %s differ alone from their row in the batch" % differ if differ
            else "each row alone bitwise equal to its row in the batch"))


def check_batch(R, tname, target, most=12):
    """The first `most` forward cases (no known bug, no dropout) sent as one batch, as a batch
    frame's requests reach run_batch (a CUDA variant uploads them in one copy): each answer
    checked against the reference, and equal to the same case run alone."""
    hello = target.hello()
    picked = []
    for i, (label, c) in enumerate(CASES):
        if len(picked) == most:
            break
        c = declared_case(c, hello)  # f16/bf16-only kernels: the same case in theirs
        if not sendable(c, hello) or c.get("dropout_p", 0) > 0 or known_bug(tname, label, needs(c)[0]):
            continue
        q, k, v, arrays = inputs_for(c, 1000 + i)
        try:
            alone, _, _ = call_run(target, c, arrays)
        except Exception:  # noqa: BLE001 - refused or failing alone: test_cases judged it
            continue
        picked.append((label, c, q, k, v, arrays, alone))
    if len(picked) < 2:
        R.skip("%s batch: fewer than two cases run alone" % tname)
        return
    reqs = [request(c, arrays) for _, c, _, _, _, arrays, _ in picked]
    outs = target.run_batch(reqs)
    same = 0
    varying = None   # the scoped entry (SCOPED) a batch answer went wrong by
    for (label, c, q, k, v, arrays, alone), req, res in zip(picked, reqs, outs):
        cs = req.case
        if isinstance(res, BaseException):
            R.fail("%s batch %s: raised %s" % (tname, label, res))
            continue
        if not isinstance(res, Result):
            res = Result(res)
        out = layouts.to_bhsd(np.asarray(res.out), res.layout, cs.q_heads, cs.v_head_dim)
        try:
            check_result(tname, label, target, c, q, k, v, arrays, out, cs, res)
        except AssertionError as e:
            why = scoped(target, tname, e)
            (R.ok if why else R.fail)("%s batch %s%s" % (tname, e, ": " + why if why else ""))
            varying = varying or why
            continue
        same += np.array_equal(out, alone, equal_nan=True)
    if same == len(picked):
        R.ok("%s batch of %d: every answer right and equal to its case run alone" % (tname, len(picked)))
    elif varying:   # the scoped entry's wrong values change from call to call
        R.ok("%s batch of %d: %d answers differ from their case run alone: %s"
             % (tname, len(picked), len(picked) - same, varying))
    else:
        R.fail("%s batch of %d: %d answers differ from their case run alone" % (tname, len(picked), len(picked) - same))


def check_backward(R, tname, target):
    """The BACKWARD cases as backward twins: output and gradients against the reference."""
    hello = target.hello()
    if "backward" not in hello["caps"]:
        return True
    labels = QUICK if target.decl.quick else BACKWARD
    for i, (label, c) in enumerate(CASES):
        if label not in labels:
            continue
        c = backward_twin(c, i)
        if not sendable(c, hello):
            continue
        label = "backward " + label
        # a bug of the backward ("backward LABEL"), else the forward's
        known = known_bug(tname, label, ()) or known_bug(tname, label[len("backward "):], needs(c)[0])
        q, k, v, arrays = inputs_for(c, 3000 + i)
        try:
            out, cs, res = call_run(target, c, arrays)
            check_result(tname, label, target, c, q, k, v, arrays, out, cs, res)
            checked = check_grads(tname, label, target, q, k, v, arrays, cs, res)
        except Unsupported as e:
            R.ok("%s %s: unsupported: %s" % (tname, label, e))
            continue
        except AssertionError as e:
            if known and known[0] == "wrong":
                R.ok("%s %s: wrong as %s shows" % (tname, label, known[2]))
            else:
                R.fail("%s %s" % (tname, e))
            continue
        except Exception as e:  # noqa: BLE001
            if not raised(R, tname, label, known, e):
                return False
            continue
        R.ok("%s %s%s" % (tname, label, "" if checked else " (output only: its fully masked rows follow its "
                                                                "convention, which the gradients inherit)"))
    return True


def _probe_masked_row(R, tname, target, conv, dt):
    """check_conventions' fully masked row in dtype dt (attnfuzz.probes: row 2 of a boolean
    mask, the probe a target that measures its convention at start-up runs too): what
    masked_rows declares for dt. Returns the probe's case, inputs and mask (c, q, k, v, bm),
    None when the variant does not run it."""
    c, q, k, v, bm = probes.masked_row_probe(dt)
    try:
        out, cs, _ = call_run(target, c, testing.physical_inputs(c, q, k, v, bool_mask=bm))
    except Unsupported as e:
        R.skip("%s conventions: the probe case is unsupported: %s" % (tname, e))
        return None
    row = out[0, :, 2, :]
    want_rows = declared_rows(conv.get("masked_rows", "zero"), dt)
    if tname in ODD_ROWS and declared_rows(ODD_ROWS[tname], dt) != want_rows:
        R.fail("%s declares masked_rows %r in %s, measured %r" % (tname, want_rows, dt,
                                                                  declared_rows(ODD_ROWS[tname], dt)))
    msg = {"mean": "fully masked row = mean of V over its masked keys (declared mean)",
           "unmasked": "fully masked row = attention over all keys (declared unmasked)",
           # "nan" allows NaN there; 0 stays right (the exporter's bool-mask path zeroes the row)
           "nan": "fully masked row is NaN or 0 (declared nan)",
           "zero": "fully masked row is 0 (declared)"}[want_rows]
    good = probes.fits(row, want_rows, q, k, v, dt)
    judged(R, target, tname, good, "%s %s %s: got %s%s" % (tname, dt, msg, row[0, :3], "" if good else
                                                            " (measured %s)" % probes.classify(row, q, k, v, dt)))
    return c, q, k, v, bm


def check_conventions(R, tname, target):
    """What the variant declares in its hello `conventions`, measured on probes: a fully
    masked row (bool mask row all False) gives what masked_rows says; NaN behind a masked
    key's value does not leak unless masked_values is "ieee"; an Inf in a masked key's K row
    does not make its query NaN unless masked_keys is "ieee"; subnormal f32 values survive
    unless denormals is "flush"."""
    hello = target.hello()
    conv = hello["conventions"]
    if "bmask" not in hello["caps"]:
        return
    dt = "f32" if "f32" in hello["dtypes"] else hello["dtypes"][0]
    # masked_rows declared by dtype: the fully masked row is probed in each dtype it runs
    others = [x for x in hello["dtypes"] if x != dt] if isinstance(conv.get("masked_rows"), dict) else []
    for d in others:
        if _probe_masked_row(R, tname, target, conv, d) is None:
            return
    probe = _probe_masked_row(R, tname, target, conv, dt)
    if probe is None:
        return
    c, q, k, v, bm = probe
    vn = v.copy()
    vn[:, :, 1, :] = np.nan   # NaN behind the masked key
    out, cs, _ = call_run(target, c, testing.physical_inputs(c, q, k, vn, bool_mask=bm))
    leak = bool(np.isnan(np.delete(out[0], 2, axis=1)).any())
    if conv.get("masked_values", "exclude") == "ieee":
        # "ieee" allows the leak; it does not require it
        R.ok("%s NaN behind a masked key: %s (declared ieee)" % (tname, "leaks" if leak else "no leak"))
    else:
        judged(R, target, tname, not leak, "%s NaN behind a masked key does not leak (declared exclude)" % tname)
    # an Inf in the K row of the masked key: its score is Inf, and Inf + -inf is NaN where the
    # mask is added (masked_keys "ieee"); excluding the key exactly gives the live keys' answer
    ki = k.copy()
    ki[:, :, 1, :] = np.inf
    out, cs, _ = call_run(target, c, testing.physical_inputs(c, q, ki, v, bool_mask=bm))
    live = np.delete(out[0], 2, axis=1)
    nan = bool(np.isnan(live).any())
    if conv.get("masked_keys", "exclude") == "ieee":
        R.ok("%s Inf in a masked key's K: %s (declared ieee)" % (tname, "NaN rows" if nan else "no NaN"))
    else:
        judged(R, target, tname, not nan, "%s Inf in a masked key's K leaves the live rows finite (declared exclude)"
               % tname)
    # subnormal f32 values in V (a case without masks): kept, unless declared flushed
    if "f32" not in hello["dtypes"]:
        return
    c0 = _case(layout="bhsd", dtype="f32", batch=1, q_heads=2, kv_heads=2, q_len=4, kv_len=4)
    vd = (np.sign(v) * 1e-39).astype(np.float32).astype(np.float64)
    out, cs, _ = call_run(target, c0, testing.physical_inputs(c0, q, k, vd))
    ref = reference.attention(Case(c0), q, k, vd)
    kept = bool(np.all(np.abs(out - ref) <= 1e-2 * np.abs(ref) + 2e-45))
    flush = conv.get("denormals", "keep")
    if flush == "flush" or (isinstance(flush, (list, tuple)) and "f32" in flush):
        R.ok("%s subnormal V: %s (declared flush)" % (tname, "kept" if kept else "flushed"))
    else:
        (R.ok if kept else R.fail)("%s subnormal V kept (declared keep): got %s, want %s"
                                   % (tname, out[0, 0, 0, :2], ref[0, 0, 0, :2]))


def check_cache(R, tname, target):
    """A compiled variant: later value draws of one structure reuse the compiled artifact:
    none of them compiles (compile_s 0) and the cache holds what it held after the first.
    The rate is printed, not judged (a machine's load must not fail a test)."""
    if not target.decl.compiled:
        return
    hello = target.hello()
    c = declared_case(_case(layout="bshd", q_len=16, kv_len=16, causal=True), hello)
    times, compiled, cached = [], [], None
    for seed in range(8):
        q, k, v, arrays = inputs_for(c, seed)
        t0 = time.perf_counter()
        try:
            _, _, res = call_run(target, c, arrays)
        except Unsupported:
            return
        times.append(time.perf_counter() - t0)
        if seed == 0:
            cached = len(target.cache)
        else:
            compiled.append(res.compile_s)
    rate = 1.0 / max(np.median(times[1:]), 1e-9)
    good = not any(compiled) and len(target.cache) == cached
    (R.ok if good else R.fail)("%s compiled structure reused: cache %d after the first run, %d after 8; "
                               "compile_s of the later 7 %s (%.0f execs/s)"
                               % (tname, cached, len(target.cache), compiled, rate))


def check_snippet(R, tname, mod, target):
    """repro_snippet's attention(req) runs standalone (no attnfuzz import for a stack under
    test) on a causal case the variant runs (packed with a bool mask where it takes those)
    and matches the reference; the snippet is the one of the module whose class runs the
    variant (Stack.repro_snippet)."""
    src = mod.STACK.repro_snippet(target.variant)
    if not mod.STACK.reference and ("import attnfuzz" in src or "from attnfuzz" in src):
        R.fail("%s repro_snippet imports attnfuzz" % tname)
        return
    hello = target.hello()
    dt = hello["dtypes"][0]
    # the first of these the variant runs (a kernel may take no mask, or no packed layout)
    probes = [_case(layout=lay, dtype=dt, q_len=8, kv_len=8, causal=True, **extra)
              for lay, extra in (("qkv_bs3hd", {"bool_mask": _mask(full_dims="bqk")}), ("bsd", {}), ("bhsd", {}))]
    # a variant of the serving forms: one of its serving cases first, then a non-causal case
    serving_probes = [dict(c, dtype=dt) for _, c in SERVING_CASES
                      if set(c.get("serving", {}).get("forms", ())) & set(hello["caps"])]
    probes = serving_probes + probes + [_case(layout="bhsd", dtype=dt, q_len=8, kv_len=8)]
    for c in probes:
        if not sendable(c, hello):
            continue
        q, k, v, arrays = inputs_for(c, 5)
        try:
            call_run(target, c, arrays)
        except Unsupported:
            continue
        except Exception:  # noqa: BLE001 - the snippet below shows what happens
            pass
        break
    else:
        R.skip("%s repro_snippet: the variant runs none of the probe cases" % tname)
        return
    lay = c.get("q", {}).get("layout", "bhsd")
    req = Request.from_arrays(Case(c, testing.derived(c)), arrays, keep=rng.case_keep)
    cs = req.case
    ns = {}
    try:
        exec(compile(src, "<repro %s>" % tname, "exec"), ns)
        out = caller(ns["attention"])(req)
        ref = reference.attention(cs, q, k, v, bool_mask=arrays.get("bool_mask"))
        rows = rows_checked(hello["conventions"], dt)
        check_close("repro_snippet", out, ref, v, dt, dead_rows(cs, None, arrays.get("bool_mask")), rows)
        R.ok("%s repro_snippet runs standalone and matches" % tname)
    except Exception as e:  # noqa: BLE001
        known = known_bug(tname, "layout " + lay, ())
        if known and known[0] == "raise" and known[1] in str(e):
            R.ok("%s repro_snippet raises as %s shows" % (tname, known[2]))
            return
        if scoped(target, tname, e):
            R.ok("%s repro_snippet: %s: %s" % (tname, scoped(target, tname, e), e))
            return
        traceback.print_exc()
        R.fail("%s repro_snippet: %s: %s" % (tname, type(e).__name__, e))


def check_protocol(R, stack, variant, target):
    """The variant as a worker process (python -m attnfuzz.targets.STACK VARIANT): its hello
    says what the Target declares, run frames with real strides come back right, bye ends
    it with status 0."""
    tname = "%s/%s" % (stack, variant)
    hello = target.hello()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    argv = [sys.executable, "-m", "attnfuzz.targets." + stack, variant]
    try:
        w = testing.WorkerProcess(argv, env=env)
    except Exception as e:  # noqa: BLE001
        R.fail("%s worker: %s: %s" % (tname, type(e).__name__, e))
        return
    with w:
        h = w.hello
        if not (h.get("type") == "hello" and h.get("name") == stack and h.get("variant") == variant
                and set(hello["caps"]) == set(h.get("caps", ())) and h.get("dtypes") == hello["dtypes"]):
            R.fail("%s worker hello %r differs from the Target's declarations %r" % (tname, h, hello))
            return
        sent = 0
        for rid, (label, c) in enumerate(PROTOCOL_CASES, start=1):
            if sent and target.decl.quick:
                break        # one compile is enough to check the worker's path
            if not sendable(c, hello):
                c = dict(c, dtype=hello["dtypes"][0])
                if not sendable(c, hello):
                    continue
            sent += 1
            q, k, v, arrays = inputs_for(c, 100 + rid)
            header, payload = w.call(testing.run_frame(c, arrays, rid))
            if header.get("id") != rid:
                R.fail("%s worker: answered id %r to run %d" % (tname, header.get("id"), rid))
                return
            if header.get("status") == "unsupported":
                R.ok("%s worker %s: unsupported: %s" % (tname, label, header.get("reason")))
                continue
            if header.get("status") != "ok":
                R.fail("%s worker %s: %r" % (tname, label, header))
                continue
            out = protocol.tensors_from_header(header, payload)["out"]
            cs = Case(c, testing.derived(c))
            if cs.forms:
                out = serving.padded_out(cs, out, header.get("layout", "bhsd"))
            else:
                out = layouts.to_bhsd(out, header.get("layout", "bhsd"), cs.q_heads, cs.v_head_dim)
            keep = protocol.tensors_from_header(header, payload).get("dropout_keep")
            try:
                check_result(tname, label, target, c, q, k, v, arrays, out, cs, Result(out, dropout_keep=keep))
                R.ok("%s worker %s" % (tname, label))
            except AssertionError as e:
                known = known_bug(tname, label, needs(c)[0])
                why = scoped(target, tname, e)
                (R.ok if (known and known[0] == "wrong") or why else R.fail)(
                    "%s worker %s%s" % (tname, e, ": " + why if why else ""))
        status = w.close()
    if status != 0:
        R.fail("%s worker: exit status %s after bye" % (tname, status))
    elif not sent:
        R.skip("%s worker: no protocol case is declared" % tname)


def rest_in_a_new_process(R, names):
    """Self-tests names in a fresh process (this one lost its CUDA context: the next
    variant's first CUDA call would abort it) and adds its counts to R."""
    if not names:
        return
    print("note  the variants after it run in a new process: %s" % " ".join(names), flush=True)
    p = subprocess.run([sys.executable, os.path.abspath(__file__)] + list(names), stdout=subprocess.PIPE, text=True)
    sys.stdout.write(p.stdout)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    try:
        passed, failed, skipped = (int(w) for w in last.replace(",", "").split()[0::2][:3])
    except ValueError:
        R.fail("%s: their self-test process ended with exit %d and no summary" % (" ".join(names), p.returncode))
        return
    R.passed += passed
    R.failed += failed
    R.skipped += skipped


def self_test(R, names):
    for i, name in enumerate(names):
        stack, variant = name.split("/")
        mod = importlib.import_module("attnfuzz.targets." + stack)
        ok, why = mod.STACK.available(variant)
        if not ok:
            R.skip("%s: %s" % (name, why))
            continue
        t0 = time.time()
        target = mod.STACK.target(variant)
        if not test_cases(R, name, target) or not check_backward(R, name, target):
            rest_in_a_new_process(R, names[i + 1:])
            return
        if target.BATCH > 1:
            check_batch(R, name, target)
        check_batch_invariant(R, name, target)
        guarded(R, target, name, "conventions", check_conventions, R, name, target)
        check_cache(R, name, target)
        for good, msg in (target.self_check() if hasattr(target, "self_check") else ()):
            (R.ok if good else R.fail)("%s %s" % (name, msg))
        check_snippet(R, name, mod, target)
        guarded(R, target, name, "worker", check_protocol, R, stack, variant, target)
        print("%s: %.1f s" % (name, time.time() - t0), flush=True)


# -- random cases ----------------------------------------------------------------------------

def random_case(r, hello):
    """A random case within what hello declares (small shapes: each draw may compile)."""
    caps, dts = set(hello["caps"]), hello["dtypes"]
    mult = hello.get("limits", {}).get("head_dim_multiple", 1)
    dt = str(r.choice(dts))
    hkv = int(r.integers(1, 4))
    hq = hkv * (int(r.integers(1, 4)) if "gqa" in caps else 1)
    sq = int(r.integers(1, 13))
    sk = int(r.integers(1, 13)) if "cross" in caps else sq

    def dim():
        return mult * int(r.integers(1, 4)) * (8 // mult if mult < 8 else 1)
    d = dim()
    dv = d if "dv" not in caps or r.random() < 0.5 else dim()
    c = {"batch": int(r.integers(1, 4)), "q_heads": hq, "kv_heads": hkv, "q_len": sq, "kv_len": sk, "head_dim": d,
         "v_head_dim": dv, "dtype": dt}
    packed_ok = hq == hkv and sq == sk and d == dv
    lays = [x for x in hello["layouts"] if packed_ok or x not in layouts.PACKED]
    lay = str(r.choice(lays))
    strided = "strided" in caps

    def spec(layout):
        t = {"layout": layout}
        if strided and r.random() < 0.3:
            t["perm"] = int(r.integers(0, 6))
            t["pad"] = int(r.integers(0, 3))
            if r.random() < 0.3:
                t["broadcast"] = "batch"
        return t
    c["q"] = spec(lay)
    if lay not in layouts.PACKED:
        unp = [x for x in lays if x not in layouts.PACKED]
        c["k"] = spec(str(r.choice(unp)) if r.random() < 0.3 else lay)
        c["v"] = spec(str(r.choice(unp)) if r.random() < 0.3 else lay)
    if "scale" in caps and r.random() < 0.3:
        c["scale"] = float(r.choice([0.05, 0.1, 0.2, 0.3, -0.2]))
        c["scale_placement"] = str(r.choice(["scores", "q", "k", "sqrt_qk"]))
    if "softcap" in caps and r.random() < 0.2:
        c["softcap"] = float(r.choice([1.0, 5.0, 30.0]))
    for name, cap in (("additive_mask", "amask"), ("bool_mask", "bmask")):
        if cap in caps and r.random() < 0.3:
            rank = 2 if r.random() < 0.3 else 4
            fd = "qk" if rank == 2 else "".join(x for x in "bhqk" if r.random() < 0.6)
            m = {"rank": rank, "full_dims": fd, "expanded": bool(strided and r.random() < 0.2)}
            if name == "additive_mask":
                m["dtype"] = str(r.choice(["f32", "f16", "bf16"])) if "mask_dtype" in caps else dt
            c[name] = m
    if "causal" in caps and r.random() < 0.4:
        c["causal"] = True
    c["diagonal"] = str(r.choice(hello["conventions"].get("causal", ["top_left"])))
    if c["diagonal"] == "explicit":
        c["diagonal_offset"] = int(r.integers(-3, 4))
    if "padding" in caps and r.random() < 0.3:
        c["key_padding"] = [int(r.integers(0, sk + 1)) for _ in range(c["batch"])]
    elif c["diagonal"] == "bottom_right_valid":
        c["diagonal"] = "bottom_right"
    if "window" in caps and r.random() < 0.25:
        c["window"] = [int(r.integers(-1, 4)), int(r.integers(-1, 4))]
    if "dropout" in caps and r.random() < 0.15:
        c["dropout_p"] = float(r.choice([0.1, 0.5, 1.0]))
        c["dropout_seed"] = int(r.integers(0, 1 << 31))
    if "backward" in caps and r.random() < 0.3:
        grads = [g for g in ("dq", "dk", "dv") if r.random() < 0.7] or ["dq"]
        if "additive_mask" in c and r.random() < 0.5:
            grads.append("dmask")
        do = spec(c["q"]["layout"])
        do.pop("layout")
        c["backward"] = {"grads": grads, "do": do}
    return c


def random_smoke(names, n, seed):
    """n random cases per variant against the reference; prints each mismatch and a summary."""
    R = Runner()
    r = np.random.default_rng(seed)
    for name in names:
        stack, variant = name.split("/")
        mod = importlib.import_module("attnfuzz.targets." + stack)
        ok, why = mod.STACK.available(variant)
        if not ok:
            R.skip("%s: %s" % (name, why))
            continue
        target = mod.STACK.target(variant)
        hello = target.hello()
        t0 = time.perf_counter()
        bad = unsup = known_bad = 0
        for i in range(n):
            c = random_case(r, hello)
            # well-conditioned scores: this check has no honest-error bound
            q, k, v, arrays = inputs_for(c, int(r.integers(1 << 31)), magnitude=10.0 ** r.uniform(-1, 0))
            try:
                out, cs, res = call_run(target, c, arrays)
            except Unsupported:
                unsup += 1
                continue
            except Exception as e:  # noqa: BLE001
                bad += 1
                print("ERROR %s %s: %s: %s" % (name, json.dumps(c), type(e).__name__, str(e).splitlines()[0][:200]))
                continue
            try:
                check_result(name, "random", target, c, q, k, v, arrays, out, cs, res)
                if cs.grads:
                    check_grads(name, "random backward", target, q, k, v, arrays, cs, res)
            except AssertionError as e:
                if known_bug(name, "", needs(c)[0]):
                    known_bad += 1
                    continue
                bad += 1
                print("DIVERGE %s %s: %s" % (name, json.dumps(c), e))
        dt = time.perf_counter() - t0
        (R.fail if bad else R.ok)("%s random: %d cases, %d bad, %d wrong by a known bug, %d unsupported, "
                                  "%.1f cases/s" % (name, n, bad, known_bad, unsup, n / dt))
    return R


# -- stacks that cannot run here -------------------------------------------------------------

def check_unavailable(R):
    """Every stack: an unknown variant exits 2 with nothing on stdout; a variant that cannot
    run here (its stack missing, no GPU) is unavailable with a reason and its worker exits 3
    saying why; a GPU variant is unavailable where the stack sees no GPU."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    rows = registry.list_targets()
    for stack in registry.stack_names():
        p = subprocess.run([sys.executable, "-m", "attnfuzz.targets." + stack, "no_such_variant"], env=env,
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
        good = p.returncode == 2 and not p.stdout and "no_such_variant" in p.stderr
        (R.ok if good else R.fail)("%s: an unknown variant exits 2 (%d: %s)" % (stack, p.returncode,
                                                                             p.stderr.strip()[-200:]))
    tried = set()
    for r in rows:
        if r["available"]:
            continue
        if not r["reason"]:
            R.fail("%s: unavailable without a reason" % r["target"])
            continue
        stack = r["target"].split("/")[0]
        if stack in tried or "/" not in r["target"]:
            continue
        tried.add(stack)
        p = subprocess.run([sys.executable, "-m", "attnfuzz.targets." + stack, r["target"].split("/")[1]], env=env,
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
        good = p.returncode == 3 and not p.stdout and r["reason"].split(":")[0] in p.stderr
        (R.ok if good else R.fail)("%s: unavailable here (%s); its worker exits %d: %s"
                                   % (r["target"], r["reason"][:80], p.returncode, p.stderr.strip()[-200:]))


# -- main ------------------------------------------------------------------------------------

def main(argv):
    R = Runner()
    t0 = time.time()
    if argv and argv[0] == "--unavailable":
        check_unavailable(R)
    elif argv and argv[0] == "--random":
        R = random_smoke(argv[3:], int(argv[1]), int(argv[2]))
    elif argv and all("/" in a for a in argv):
        self_test(R, argv)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print("time %.1f s" % (time.time() - t0))
    print("%d passed, %d failed, %d skipped" % (R.passed, R.failed, R.skipped))
    if R.failed:
        return 1
    return 77 if R.skipped and not R.passed else 0  # 77: ctest's SKIP_RETURN_CODE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
