"""attnfuzz triage: the hypotheses an engineer tests by hand on a new bundle, as a command
(docs/triage.md). For each bundle:

- models: the recorded output judged again against the float64 reference computed under
  each convention and precision model the project knows (subnormals flushed in the inputs,
  the weights or the output; scores or scores and softmax in the case dtype; TF32; masks
  as finite biases, replacing or added; each masked-row convention; IEEE 0 * Inf through
  zero-weight keys; dropout conventions), with the tolerance the bundle records; the model
  of fewest assumptions that passes every element explains the output;
- sharing: the case replayed on the built-ins, the stack's other variants and one of each
  other installed stack (`attnfuzz replay --backend`; `--share-with SPEC` instead), each
  within `--timeout` (`--no-share` skips it);
- neighbours: the known entry that matches (`attnfuzz known`, with an entry left out by
  `--blind`/`--known-without`) and the nearest entries by backend, kind and features;
- sensitivity: which simplifications of the case keep the finding (replay probes, with
  sharing), else what the minimizer kept;
- a draft known.json entry and an upstream page (Markdown, with the standalone repro).

The verdict is one of the project's classes (real_bug, convention, precision, target_bug)
with a confidence and the evidence that decided it.

    python -m attnfuzz.triage BUNDLE... [--json] [--no-share] [--share-with SPEC]... [--blind] [--out DIR]
                              [--cached-versions]

`attnfuzz triage` runs this module with the project's Python.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from . import bundle as bundle_mod
from . import case as case_mod
from . import known as known_mod
from . import masks, reference

# exceptions that a wrapper's own code raises (a stack raises its own types, or RuntimeError)
WRAPPER_ERRORS = ("AttributeError", "NameError", "KeyError", "IndexError", "TypeError", "UnboundLocalError",
                  "AssertionError", "ZeroDivisionError")
F32_TINY = float(np.finfo(np.float32).tiny)    # 2^-126
F32_MAX = float(np.finfo(np.float32).max)
EPS = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}
SUBNORMAL_STEP = {"f32": 2.0 ** -149, "f16": 2.0 ** -24, "bf16": 2.0 ** -133}
PRODUCTS_MAX = 1 << 26   # the products model's Q K^T products (B Hq Sq Sk D) at most
GPU_ONLY = ("tf32", "tf32_split_inf", "exp2_overflow")   # modes of GPU kernels (cuBLAS, cuDNN, flash)

# The finite values stacks put at masked scores (docs/findings.md): f16's lowest, jax's
# -0.7 * finfo.max, finfo.min, the -1e4 of older HF code, cuDNN-in-jax's -2^15 (f16) and
# -2^41 (bf16), -1e9 of many model zoos.
MASK_BIASES = (("f16_lowest", -65504.0), ("jax_large_negative", -0.7 * F32_MAX), ("f32_lowest", -F32_MAX),
               ("minus_1e4", -1e4), ("minus_2^15", -32768.0), ("minus_2^40", -2.0 ** 40), ("minus_2^41", -2.0 ** 41),
               ("minus_1e9", -1e9))


def _model_table():
    """(name, class, what it assumes, knobs) for every single model."""
    t = [("reference", None, "design.md section 2 in float64 (what the oracle compared with)", {}),
         ("daz_inputs", "precision", "f32-subnormal inputs (Q, K, V, mask) flushed to 0 (DAZ)", {"daz": True}),
         ("ftz_weights", "precision", "softmax weights below 2^-126 flushed to 0 (FTZ), keys of weight 0 skipped",
          {"ftz_w": True}),
         ("ftz_weights_ieee", "precision", "softmax weights below 2^-126 flushed to 0 and still multiplied by V "
          "(0 * Inf = NaN)", {"ftz_w": True, "zero_ieee": True}),
         ("ftz_output", "precision", "output values below 2^-126 flushed to 0", {"ftz_out": True}),
         ("daz_ftz", "precision", "inputs, weights and output flushed below 2^-126", {"daz": True, "ftz_w": True,
                                                                                    "ftz_out": True}),
         ("scores_dtype", "precision", "scores (Q K^T, scale, mask) rounded to the case dtype", {"scores_dt": True}),
         ("softmax_dtype", "precision", "scores and softmax weights in the case dtype",
          {"scores_dt": True, "p_dt": True}),
         ("qk_dtype", "precision", "Q K^T (before the scale), scores and weights in the case dtype (f16 overflows "
          "before the scale)", {"qk_dt": True, "scores_dt": True, "p_dt": True}),
         ("qk_products_dtype", "precision", "each product q_d k_d of Q K^T rounded to the case dtype (an f16 "
          "product past 65504 is Inf), summed wide; scores and weights in the case dtype",
          {"qk_prod_dt": True, "scores_dt": True, "p_dt": True}),
         ("tf32", "precision", "Q K^T and P V with TF32 inputs (10-bit mantissa)", {"tf32": True}),
         ("tf32_split_inf", "precision", "GEMMs split into TF32 parts (3xTF32): an Inf input makes its products NaN",
          {"inf_nan": True}),
         ("exp2_overflow", "precision", "scores times log2(e) in f32 (an exp2 softmax): below -FLT_MAX/log2(e) "
          "they overflow to -inf and a row of such scores is 0", {"log2e": True}),
         ("zero_weight_ieee", "convention", "keys of weight 0 still multiply V (masked_values ieee: 0 * NaN = NaN)",
          {"zero_ieee": True}),
         ("masked_rows_nan", "convention", "a fully masked row is NaN", {"dead": "nan"}),
         ("masked_rows_mean", "convention", "a fully masked row is the mean of V over all keys", {"dead": "mean"}),
         ("masked_rows_unmasked", "convention", "a fully masked row attends as if unmasked", {"dead": "unmasked"}),
         ("dropout_unscaled", "convention", "kept weights not divided by 1 - p", {"drop": "unscaled"}),
         ("dropout_ieee", "convention", "dropped weights still multiply V (0 * NaN = NaN)", {"drop": "ieee"})]
    for n in (16, 32, 64, 128):
        t.append(("bias_replace_jax_large_negative_block%d" % n, "convention",
                  "masked scores replaced by -0.7 f32-max, keys padded with zero keys to a block of %d (a kernel "
                  "that reads whole key blocks)" % n, {"bias": -0.7 * F32_MAX, "bias_how": "replace", "pad": n}))
    for name, val in MASK_BIASES:
        t.append(("bias_replace_%s" % name, "convention", "masked scores replaced by the finite %g" % val,
                  {"bias": val, "bias_how": "replace"}))
        t.append(("bias_add_%s" % name, "convention", "the finite %g added to masked scores" % val,
                  {"bias": val, "bias_how": "add"}))
    return t


MODELS = _model_table()


# --- the models ----------------------------------------------------------------------------


def _round_dtype(x, dtype):
    """x (float64) rounded to the case dtype and back: f16 overflows to Inf."""
    import ml_dtypes
    with np.errstate(all="ignore"):
        if dtype == "f16":
            return x.astype(np.float16).astype(np.float64)
        if dtype == "bf16":
            return x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
        return x.astype(np.float32).astype(np.float64)


def _tf32(x):
    """x rounded to TF32 (f32 with a 10-bit mantissa, round to nearest even)."""
    with np.errstate(all="ignore"):
        f = np.asarray(x, dtype=np.float32).copy()
        u = f.view(np.uint32)
        fin = np.isfinite(f)
        r = (u + np.uint32(0xFFF) + ((u >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
        u[fin] = r[fin]
        return f.astype(np.float64)


def _flush(x, tiny=F32_TINY):
    x = np.array(x, dtype=np.float64)
    x[np.abs(x) < tiny] = 0.0
    return x


def model_output(case, b, knobs):
    """The output under knobs (see MODELS), float64 [B, Hq, Sq, Dv], or None when the model
    does not apply to the case (it has nothing to change)."""
    q, k, v = (np.asarray(b[n], dtype=np.float64) for n in ("q", "k", "v"))
    mask, bmask = b.get("mask"), b.get("bool_mask")
    if knobs.get("daz"):
        q, k, v = _flush(q), _flush(k), _flush(v)
        mask = None if mask is None else _flush(mask)
    if knobs.get("tf32"):
        q, k, v = _tf32(q), _tf32(k), _tf32(v)
    if knobs.get("inf_nan"):
        if not any(np.isinf(x).any() for x in (q, k, v)):
            return None
        q, k, v = (np.where(np.isinf(x), np.nan, x) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    Hkv, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    g = Hq // Hkv
    with np.errstate(all="ignore"):
        s0, s, live = reference._scores(case, q, k, mask, bmask, 0, Sq, reference._serving_tables(case, None, None)[1])
        # masked by a mask (structural, boolean, an additive -inf), not by its own score
        masked = np.zeros(s.shape, dtype=bool) if live is None else ~np.broadcast_to(live, s.shape)
        if mask is not None:
            masked = masked | np.isneginf(np.broadcast_to(masks.additive_bhsd(case, mask), s.shape))
        if knobs.get("qk_dt") and case.scale != 0.0:
            r = _round_dtype(s0 / case.scale, case.dtype) * case.scale
            s = np.where(np.isfinite(r) | np.isnan(s), s - s0 + r, r)
        if knobs.get("qk_prod_dt"):
            if case.dtype == "f32" or B * Hq * Sq * Sk * D > PRODUCTS_MAX:
                return None
            kr = np.repeat(k, g, axis=1)
            r = np.zeros(s0.shape)
            for d in range(D):   # one column at a time: [B, Hq, Sq, Sk] products, rounded
                r += _round_dtype(q[..., :, None, d] * kr[..., None, :, d], case.dtype)
            r *= case.scale
            s = np.where(np.isfinite(r) | np.isnan(s), s - s0 + r, r)
        if knobs.get("scores_dt"):
            s = _round_dtype(s, case.dtype)
        if knobs.get("log2e"):
            t = (s * np.log2(np.e)).astype(np.float32).astype(np.float64)
            if not (np.isneginf(t) & np.isfinite(s)).any():
                return None
            s = np.where(np.isneginf(t), -np.inf, s)
        if "bias" in knobs:
            if not masked.any():
                return None
            base = s0 if knobs["bias_how"] == "add" else 0.0
            s = np.where(masked, base + knobs["bias"], s)
            live = None
        if knobs.get("pad"):
            npad = (-Sk) % knobs["pad"]
            if npad == 0 or case.dropout_p > 0.0:
                return None
            s = np.concatenate([s, np.full(s.shape[:3] + (npad,), knobs["bias"])], axis=-1)
            v = np.concatenate([v, np.zeros(v.shape[:2] + (npad, Dv))], axis=2)
            Sk += npad
        isn = np.isnan(s)
        m = np.where(isn, -np.inf, s).max(axis=-1, keepdims=True)
        e = np.exp(s - m)
        w = e / e.sum(axis=-1, keepdims=True)
        w = np.where(isn.any(axis=-1, keepdims=True), np.nan, w)
        if live is not None:
            w = np.where(live, w, 0.0)
        dead = (m == -np.inf) & ~isn.any(axis=-1, keepdims=True)
        w = np.where(dead, 0.0, w)
        dead_how = knobs.get("dead")
        if dead_how and not dead.any():
            return None
        if dead_how == "unmasked":
            am = None if mask is None else np.broadcast_to(masks.additive_bhsd(case, mask), s0.shape)
            su = s0 if am is None else s0 + np.where(np.isneginf(am), 0.0, am)   # the additive mask kept
            eu = np.exp(su - su.max(axis=-1, keepdims=True))
            w = np.where(dead, eu / eu.sum(axis=-1, keepdims=True), w)
        elif dead_how == "mean":
            w = np.where(dead, 1.0 / Sk, w)
        if knobs.get("ftz_w"):
            if not ((w > 0) & (w < F32_TINY)).any():
                return None
            w = np.where(np.abs(w) < F32_TINY, 0.0, w)
        if knobs.get("p_dt"):
            w = _round_dtype(w, case.dtype)
        if knobs.get("tf32"):
            w = _tf32(w)
        drop = knobs.get("drop")
        if case.dropout_p > 0.0:
            p = case.dropout_p
            keep = reference.rng.dropout_keep(case.dropout_seed, p, B, Hq, Sq, Sk, 0)
            scale = 1.0 if drop == "unscaled" else (1.0 / (1.0 - p) if p < 1.0 else 0.0)
            wk = np.where(keep, w * scale, 0.0)
            nz = (wk != 0.0) | (~keep if drop == "ieee" else False)
        elif drop:
            return None
        else:
            wk, nz = w, w != 0.0
        if knobs.get("zero_ieee"):
            nz = np.ones_like(nz, dtype=bool) if live is None else np.broadcast_to(live, wk.shape)
        if knobs.get("weights"):      # the weights the output multiplies V by (dropout's 1/(1-p) in)
            return np.where(nz, wk, 0.0)
        vr = np.repeat(v, g, axis=1)                                          # [B, Hq, Sk, Dv]
        fin = np.isfinite(vr)
        out = np.matmul(np.where(nz, wk, 0.0), np.where(fin, vr, 0.0))
        if not fin.all():
            bad = np.nonzero(~fin.all(axis=(0, 1, 3)))[0]
            wb = np.where(nz[..., bad], wk[..., bad], 0.0)[..., None]        # [B, Hq, Sq, nb, 1]
            vb = np.where(fin[:, :, bad, :], 0.0, vr[:, :, bad, :])[:, :, None]
            contrib = np.where(nz[..., bad][..., None], wb * vb, 0.0)
            out = out + contrib.sum(axis=3)
        if dead_how == "nan":
            out = np.where(dead, np.nan, out)
        if knobs.get("ftz_out"):
            out = _flush(out)
    return out


def _row_atol(b, tol, metrics):
    """The absolute tolerance of each query row [B, Hq, Sq, 1]: the recorded atol (the worst
    element's row's) scaled by each row's largest finite |V| (docs/case-json.md: atol is
    vscale[row] times a per-dtype floor or the honest error)."""
    atol = float(tol.get("atol", 0.0) or 0.0)
    v = np.asarray(b["v"], dtype=np.float64)
    ref = b["ref"]
    Hq, Hkv = ref.shape[1], v.shape[1]
    vs = np.where(np.isfinite(v), np.abs(v), 0.0).max(axis=(2, 3))               # [B, Hkv]
    vs = np.repeat(vs, Hq // Hkv, axis=1)[:, :, None, None] * np.ones(ref.shape[:3] + (1,))
    wi = metrics.get("worst_index") or [0, 0, 0, 0]
    try:
        w = vs[wi[0], wi[1], wi[2], 0]
    except (IndexError, TypeError):
        w = 0.0
    return atol * vs / w if w > 0 else np.full(vs.shape, atol)


def _classes(x):
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf (the oracle's element classes)."""
    return np.where(np.isnan(x), 1, np.where(np.isposinf(x), 2, np.where(np.isneginf(x), 3, 0)))


def _bad(o, r, bound):
    """(failing elements: another class, or a finite pair further apart than bound;
    the class mismatches; |o - r| over finite pairs, 0 elsewhere)."""
    with np.errstate(all="ignore"):
        cbad = _classes(o) != _classes(r)
        fin = np.isfinite(o) & np.isfinite(r)
        err = np.where(fin, np.abs(o - r), 0.0)
        return cbad | (err > bound), cbad, err


def judge(out, model, atol, rtol, dtype=None):
    """How out compares with a model: {"fail": failing elements (class or beyond
    atol + rtol |model|), "class": class mismatches, "max_abs", "exact": every element
    equal to the model rounded to dtype (NaN to NaN)}."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(model, dtype=np.float64)
    if o.shape != r.shape:
        return {"fail": int(o.size), "class": int(o.size), "max_abs": float("inf"), "exact": False}
    rf = np.where(np.isfinite(r), r, 0.0)
    bad, cbad, err = _bad(o, r, atol + rtol * np.abs(rf))
    exact = not cbad.any() and bool(np.all(np.where(np.isfinite(o), o == _round_dtype(rf, dtype or "f32"), True)))
    return {"fail": int(bad.sum()), "class": int(cbad.sum()), "max_abs": float(err.max()) if err.size else 0.0,
            "exact": exact}


def _dtype_precision(out, ref, dtype, sk):
    """The accumulation-in-the-dtype bound: every element within 4 sqrt(Sk) ulps of the
    dtype at the scale of its row's largest |ref| (what a kernel that rounds its partial
    sums to the dtype may be off by). Returns the failing count under that bound."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    scale = np.where(np.isfinite(r), np.abs(r), 0.0).max(axis=-1, keepdims=True)
    bound = 4.0 * np.sqrt(max(sk, 1)) * (EPS.get(dtype, EPS["f32"]) * scale
                                         + SUBNORMAL_STEP.get(dtype, SUBNORMAL_STEP["f32"]))
    bad, _, _ = _bad(o, r, bound)
    return int(bad.sum())


# The kinds of the checks beyond one output against the reference (docs/design.md section
# 4): no value model applies; what each means for the verdict.
CHECK_KINDS = {
    "nondeterministic": "two runs of one case differed bitwise (a second run into fresh NaN-filled buffers): "
                        "no model of a value explains a run-to-run difference",
    "guard_write": "the backend wrote outside its output buffer (a NaN guard band changed): no value model applies",
    "batch_variant": "a batch row alone differs from itself inside the batch: no value model applies",
}


def kind_of(meta):
    return meta.get("kind") or ""


def _lse_models(b, rec):
    """A finding on the softmax statistics: the recorded LSE against the float64 one under
    the two forms a stack's statistics take that the oracle does not model: base 2 handed on
    as natural log (x / ln 2), and 0 or +inf for a fully masked row (-inf in the reference)."""
    key = next((k for k in b if k.startswith("lse.")), None)
    if key is None or "ref_lse" not in b:
        return [], "a finding on the softmax statistics, but the bundle holds no lse arrays"
    got, ref = np.asarray(b[key], dtype=np.float64), np.asarray(b["ref_lse"], dtype=np.float64)
    fin = np.isfinite(ref)
    rows = []
    for name, cls, what, model in (
            ("reference", None, "the float64 statistics", ref),
            ("lse_base2", "real_bug", "base-2 statistics (log2 sum exp) declared natural log", ref / np.log(2.0)),
            ("lse_masked_zero", "convention", "0 for a fully masked row where the reference is -inf",
             np.where(np.isneginf(ref), 0.0, ref))):
        close = np.isclose(got, model, rtol=1e-5, atol=1e-5, equal_nan=True)
        fail = int((~close).sum())
        rows.append({"name": name, "class": cls, "what": what, "fail": fail, "class_mismatches": 0,
                     "max_abs": float(np.nanmax(np.abs(np.where(fin, got - model, 0.0)))) if got.size else 0.0,
                     "exact": bool(np.array_equal(got, model, equal_nan=True)), "where": ""})
    return rows, None


def models(b, meta):
    """Every model judged on the failing backend's recorded output: a list of {"name",
    "class", "what", "fail", "class_mismatches", "max_abs", "exact", "where"} in MODELS
    order (models that change nothing on this case left out; pairs after them when no
    single model explains), and a note when the output cannot be judged (no output, a
    gradient, a serving case, dropout with the backend's own keep mask)."""
    case = case_mod.Case(b["case"])
    rec = _failing(meta) or {}
    tensor = meta.get("tensor") or "out"
    if tensor == "lse":
        return _lse_models(b, rec)
    if kind_of(meta) in CHECK_KINDS:
        return [], CHECK_KINDS[kind_of(meta)]
    if tensor != "out":
        return _grad_models(case, b, meta, rec, tensor)
    key = (rec.get("output") or "")[: -len(bundle_mod.SUFFIX)] or None
    if not key or key not in b:
        return [], "no recorded output (%s): nothing to judge" % meta.get("kind")
    tol = meta.get("tolerance") or {}
    metrics = rec.get("metrics") or {}
    rtol = float(tol.get("rtol", 0.0) or 0.0)
    out = b[key]
    atol = _row_atol(b, tol, metrics)
    res = []
    note = None
    where = _failing_rows(case, b, out, atol, rtol)
    if case.forms:  # the serving forms, sinks and ALiBi among them
        note = "a serving case: only the recorded reference and the dtype's accumulation bound are judged"
        table = [MODELS[0]]
    elif not _own_keep(case, rec):
        note = ("dropout with the backend's own keep mask (not in the bundle): only the recorded reference and the "
                "dtype's accumulation bound are judged")
        table = [MODELS[0]]
    else:
        table = MODELS
    gpu = _on_gpu(rec)
    for name, cls, what, knobs in table:
        if name in GPU_ONLY and not gpu:
            continue
        if name == "reference":
            m = b["ref"]
        else:
            try:
                m = model_output(case, b, knobs)
            except (ValueError, IndexError) as e:  # a case this pipeline does not take
                note = "models skipped: %s" % e
                break
            if m is None:
                continue
        res.append(_row(name, cls, what, judge(out, m, atol, rtol, case.dtype)))
        if cls in (None, "precision"):
            # the model and partial sums in the case dtype (a precision mode seldom comes alone)
            n = _dtype_precision(out, m, case.dtype, case.kv_len)
            if n < res[-1]["fail"]:
                res.append(_row(name + "+accumulation", "precision", what + ", and partial sums in the case dtype",
                                dict(res[-1], fail=n, exact=False)))
    if res and res[0]["fail"] and not any(r["fail"] == 0 for r in res[1:]) and out.size <= PAIR_LIMIT:
        res += _pairs(case, b, out, atol, rtol, res, {n: (c, w, k) for n, c, w, k in table})
    for r in res:
        r["where"] = where
    return res, note


PAIR_LIMIT = 1 << 20   # output elements up to which pairs of models are tried


# --- gradients -----------------------------------------------------------------------------


def _grad_parts(case, b, tensor):
    """Each query head's share of dK or dV, float64 [B, Hq, Sk, D or Dv] (the exact backward
    of design.md section 5): dV_h = P_h^T dO_h, dK_h = scale dS_h^T Q_h with dS = P (dP -
    rowsum(dO O)); summed over the query heads of a group it is the gradient. None where
    this does not model the case (softcap, a scale placed on Q or K, dK under dropout)."""
    if case.softcap > 0 or (tensor == "dk" and (case.placement != "scores" or case.dropout_p > 0.0)):
        return None
    w = model_output(case, b, {"weights": True})                          # [B, Hq, Sq, Sk]
    do = np.asarray(b["do"], dtype=np.float64)
    with np.errstate(all="ignore"):
        if tensor == "dv":
            return np.einsum("bhij,bhid->bhjd", w, do)
        q, v = (np.asarray(b[n], dtype=np.float64) for n in ("q", "v"))
        vr = np.repeat(v, q.shape[1] // v.shape[1], axis=1)
        o = w @ vr
        ds = w * (do @ np.swapaxes(vr, -1, -2) - (do * o).sum(axis=-1, keepdims=True))
        return case.scale * np.einsum("bhij,bhid->bhjd", ds, q)


def _grad_row_atol(case, b, atol, metrics, tensor, ref):
    """The absolute tolerance of each row of the gradient (its last dim one): the recorded
    atol, the worst element's row's, scaled for dV by each row's scale as the oracle's
    (ref.h af_ref_grad_opts.gscale: sum over the group's queries of P_ij max|dO_i|, finite
    terms of nonzero weight). For dQ, dK and dmask, whose row scales involve the oracle's
    bound on dS, the worst row alone has its tolerance (the recorded one); every other row's
    is infinite: judged on its classes (NaN, Inf) only."""
    wi = metrics.get("worst_index") or [0, 0, 0, 0]
    flat = np.full(ref.shape[:-1] + (1,), np.inf)
    try:
        flat[wi[0], wi[1], wi[2], 0] = atol
    except (IndexError, TypeError):
        flat[...] = atol
    if tensor != "dv":
        return flat
    try:
        w = model_output(case, b, {"weights": True})
    except (ValueError, IndexError):
        return flat
    do = np.asarray(b["do"], dtype=np.float64)
    dmax = np.where(np.isfinite(do), np.abs(do), 0.0).max(axis=-1)               # [B, Hq, Sq]
    with np.errstate(all="ignore"):
        gs = np.einsum("bhij,bhi->bhj", np.where(np.isfinite(w), np.abs(w), 0.0), dmax)
    B, Hq, Sk = gs.shape
    Hkv = ref.shape[1]
    gs = np.maximum(gs.reshape(B, Hkv, Hq // Hkv, Sk).sum(axis=2), 1e-300)[..., None]
    try:
        worst = gs[wi[0], wi[1], wi[2], 0]
    except (IndexError, TypeError):
        return flat
    return atol * gs / worst


def _grad_models(case, b, meta, rec, tensor):
    """A finding on a gradient: the recorded gradient judged, with its recorded tolerance,
    against the recorded float64 reference; against it with partial sums in the case dtype
    (the accumulation bound over the terms a row adds up); and, for dK and dV of a GQA case,
    against the exact shares of the query heads added across the group in the case dtype
    (`grad_group_sum_dtype`: the per-head sums exact, their sum rounded as it goes, a
    precision limit: torch's CPU flash backward in f16)."""
    g = (rec.get("grads") or {}).get(tensor) or {}
    key = (g.get("output") or "")[: -len(bundle_mod.SUFFIX)] or None
    if not key or key not in b or ("ref_" + tensor) not in b:
        return [], "a finding on %s, but the bundle holds no %s arrays: nothing to judge" % (tensor, tensor)
    tol = g.get("tolerance") or meta.get("tolerance") or {}
    metrics = g.get("metrics") or {}
    out = np.asarray(b[key], dtype=np.float64)
    ref = np.asarray(b["ref_" + tensor], dtype=np.float64)
    rtol = float(tol.get("rtol", 0.0) or 0.0)
    own = _own_keep(case, rec)   # else the weights follow a keep mask the bundle does not keep
    atol = _grad_row_atol(case, b, float(tol.get("atol", 0.0) or 0.0), metrics, tensor if own else "", ref)
    group = case.q_heads // max(case.kv_heads, 1)
    terms = {"dq": case.kv_len, "dk": group * case.q_len, "dv": group * case.q_len}.get(tensor, case.q_len)
    res = [_row("reference", None, "design.md section 5's backward in float64 (what the oracle compared with)",
                judge(out, ref, atol, rtol, case.dtype))]
    n = _dtype_precision(out, ref, case.dtype, terms)
    if n < res[0]["fail"]:
        res.append(_row("reference+accumulation", "precision", "the reference, and partial sums in the case dtype",
                        dict(res[0], fail=n, exact=False)))
    note = None if own else ("dropout with the backend's own keep mask (not in the bundle): the reference and the "
                             "accumulation bound only")
    if tensor != "dv" or not own:
        note = (note + "; " if note else "") + ("rows other than the worst judged on their classes only (their "
                                                "tolerance is not recorded)")
    if own and tensor in ("dk", "dv") and group > 1 and case.dtype in ("f16", "bf16") and not case.forms:
        try:
            parts = _grad_parts(case, b, tensor)
        except (ValueError, IndexError) as e:
            parts, note = None, "the group-sum model skipped: %s" % e
        if parts is not None and parts.shape[1] == case.q_heads:
            B, Hq = parts.shape[:2]
            parts = parts.reshape((B, case.kv_heads, group) + parts.shape[2:])
            acc = np.zeros(parts[:, :, 0].shape)
            for h in range(group):
                acc = _round_dtype(acc + parts[:, :, h], case.dtype)
            res.append(_row("grad_group_sum_dtype", "precision",
                            "each query head's share exact, added across the group in the case dtype",
                            judge(out, acc, atol, rtol, case.dtype)))
    for r in res:
        r["where"] = ""
    return res, note


def _pairs(case, b, out, atol, rtol, rows, table):
    """Pairs of the single models that each fix some failing elements (two modes at once:
    an exp2 overflow and a NaN masked row), knobs merged; a pair of conflicting knobs is
    skipped. Named "A+B", of A's class (A the earlier in MODELS)."""
    ref_fail = rows[0]["fail"]
    good = [r["name"] for r in rows[1:] if r["fail"] < ref_fail and r["name"] in table]
    res = []
    for i, a in enumerate(good):
        for bname in good[i + 1:]:
            ka, kb = table[a][2], table[bname][2]
            if any(k in ka and ka[k] != kb[k] for k in kb):
                continue
            m = model_output(case, b, dict(ka, **kb))
            if m is None:
                continue
            res.append(_row(a + "+" + bname, table[a][0], table[a][1] + "; " + table[bname][1],
                            judge(out, m, atol, rtol, case.dtype)))
    return res


def _failing_rows(case, b, out, atol, rtol):
    """Where the output fails the reference: "live" (some failing element in a row with a
    live key of finite score), "dead_mask" (every one in a row whose keys are all masked,
    some in a row the masks mask whole), "dead_scores" (in rows whose live keys all score
    -inf), or "none"."""
    ref = b["ref"]
    if not judge(out, ref, atol, rtol, case.dtype)["fail"]:
        return "none"
    try:
        with np.errstate(all="ignore"):
            q, k = (reference.dequantized(case, b[n], n) for n in ("q", "k"))
            _, s, live = reference._scores(case, q, k, b.get("mask"), b.get("bool_mask"), 0, case.q_len,
                                           reference._serving_tables(case, None, None)[1])
            dead = np.where(np.isnan(s), -np.inf, s).max(axis=-1, keepdims=True) == -np.inf
            by_mask = np.ones(dead.shape, dtype=bool) if live is None else ~np.broadcast_to(
                live, s.shape).any(axis=-1, keepdims=True)
            by_mask = by_mask & dead if live is not None else np.zeros(dead.shape, dtype=bool)
    except (ValueError, IndexError):
        return "live"
    r = np.asarray(ref, dtype=np.float64)
    bad, _, _ = _bad(np.asarray(out, dtype=np.float64), r, atol + rtol * np.abs(np.where(np.isfinite(r), r, 0.0)))
    if (bad & ~dead).any():
        return "live"
    return "dead_mask" if (bad & by_mask).any() else "dead_scores"
def _own_keep(case, rec):
    """Can the models redraw the case's dropout? Yes without dropout, or where the backend
    uses attnfuzz's counter RNG (conventions dropout "counter"); a backend that returns its
    own keep mask ("keep_mask") was judged with a mask the bundle does not keep."""
    return not case.dropout_p > 0.0 or (rec.get("conventions") or {}).get("dropout") == "counter"


def _on_gpu(rec):
    """Does the backend run on a GPU (its name or worker line says CUDA or cuDNN)?"""
    text = ("%s %s" % (rec.get("name", ""), rec.get("worker", ""))).lower()
    return any(w in text for w in ("cuda", "cudnn", "gpu", "triton"))


def _row(name, cls, what, j):
    return {"name": name, "class": cls, "what": what, "fail": j["fail"], "class_mismatches": j["class"],
            "max_abs": j["max_abs"], "exact": j["exact"]}


def best_model(rows):
    """The model that explains the output: the first (fewest assumptions: MODELS order) of
    those failing no element, exact ones first; None when the reference itself passes or
    none passes."""
    if not rows or rows[0]["name"] == "reference" and rows[0]["fail"] == 0:
        return None
    passing = [r for r in rows[1:] if r["fail"] == 0]
    if not passing:
        return None
    exact = [r for r in passing if r["exact"]]
    return (exact or passing)[0]


# --- neighbours ----------------------------------------------------------------------------


def _failing(meta):
    for be in meta.get("backends") or []:
        if isinstance(be, dict) and be.get("verdict", "ok") not in ("ok", "pass"):
            return be
    return (meta.get("backends") or [None])[0]


def _own_entry(path, entries):
    rel = os.path.normpath(os.path.relpath(os.path.realpath(path), known_mod.ROOT))
    for e in entries:
        bs = e.get("bundle")
        for x in ([bs] if isinstance(bs, str) else bs or []):
            if os.path.normpath(x) == rel:
                return e
    return None


# the case variables of docs/known.md ("Clauses") that case_vars() computes; a name in a
# clause that is none of KNOWN_VARS is a value name (f16, bottom_right, near_overflow ...)
KNOWN_VARS = set("""dtype tf32 b hq hkv sq sk d dv group gqa cross scale scale_set placement softcap dropout causal diag
diag_offset key_padding valid_min valid_max window window_left window_right amask amask.dtype amask.rank amask.dims
amask.pattern amask.fill amask.expanded amask.live_zero amask.mag bmask bmask.rank bmask.dims bmask.pattern
bmask.expanded mask_dtype packed strided specials denormal near_overflow backward segments paged page_size sinks alibi
kind tensor n_nan n_nan_ref n_nan_out n_inf n_masked_row_nan n_masked_value_leak n_diverge n_unstable n_fail
n_fail_masked masked_only worst_ratio max_abs max_rel rel_fro worst_out worst_ref score_max product_max do.perm do.pad do.bcast
do.dist do.special""".split()) | {"%s.%s" % (t, f) for t in "qkv" for f in (
    "layout", "perm", "pad", "bcast", "dist", "mag", "special", "contig", "row_stride", "align")}


class _Unknown(Exception):
    pass


def case_vars(meta):
    """The case variables of docs/known.md that case.json gives directly (the rest, layout
    strides and result metrics but the kind and tensor, are unknown here)."""
    c = meta["case"]
    cs = case_mod.Case(c)
    feats = (meta.get("features") or "").split()
    am, bm = c.get("additive_mask"), c.get("bool_mask")
    v = {"dtype": c.get("dtype", "f32"), "tf32": bool(c.get("allow_tf32")), "b": cs.batch, "hq": cs.q_heads,
         "hkv": cs.kv_heads, "sq": cs.q_len, "sk": cs.kv_len, "d": cs.head_dim, "dv": cs.v_head_dim,
         "group": cs.q_heads // max(cs.kv_heads, 1), "gqa": cs.q_heads != cs.kv_heads, "cross": cs.q_len != cs.kv_len,
         "scale": cs.scale, "scale_set": c.get("scale") is not None, "placement": c.get("scale_placement", "scores"),
         "softcap": float(c.get("softcap") or 0), "dropout": float(c.get("dropout_p") or 0),
         "causal": bool(c.get("causal")), "diag": c.get("diagonal", "bottom_right"),
         "diag_offset": (cs.diag_offset or [0])[0],
         "key_padding": c.get("key_padding") is not None, "window": list(c.get("window") or [-1, -1]) != [-1, -1],
         "window_left": (c.get("window") or [-1, -1])[0], "window_right": (c.get("window") or [-1, -1])[1],
         "amask": am is not None, "bmask": bm is not None, "backward": bool(c.get("backward")),
         "specials": "specials" in feats, "denormal": "denormal" in feats, "near_overflow": "near_overflow" in feats,
         "segments": "packed" in feats or "segments" in feats, "paged": "paged" in feats,
         "sinks": "sinks" in feats, "alibi": "alibi" in feats, "kind": meta.get("kind"),
         "tensor": meta.get("tensor") or "out"}
    if am is not None:
        v.update({"amask.dtype": am.get("dtype", c.get("dtype")), "amask.fill": am.get("fill"),
                  "amask.pattern": am.get("pattern"), "amask.rank": am.get("rank"),
                  "amask.expanded": bool(am.get("expanded")), "amask.live_zero": bool(am.get("live_zero")),
                  "mask_dtype": am.get("dtype", c.get("dtype")) != c.get("dtype")})
    else:
        v["mask_dtype"] = False
    if bm is not None:
        v.update({"bmask.pattern": bm.get("pattern"), "bmask.rank": bm.get("rank")})
    for t in "qkv":
        spec = c.get(t) or {}
        v.update({"%s.layout" % t: spec.get("layout", "bhsd"), "%s.dist" % t: spec.get("dist", "normal"),
                  "%s.special" % t: spec.get("special", "none"), "%s.pad" % t: spec.get("pad", 0),
                  "%s.perm" % t: spec.get("perm", 0), "%s.bcast" % t: spec.get("broadcast", "none"),
                  "%s.mag" % t: spec.get("log10_magnitude", 0)})
    return v


_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|([A-Za-z_][A-Za-z0-9_.]*)|(\|\||&&|==|!=|<=|>=|[-+*/%<>()!\[\],]))")


def clause_holds(clause, v):
    """True/False for one clause of docs/known.md's grammar over the variables v; None when
    it reads a variable v does not hold (or does not parse here)."""
    out, pos = [], 0
    try:
        while pos < len(clause):
            m = _TOKEN.match(clause, pos)
            if not m or m.end() == pos:
                if clause[pos:].strip() == "":
                    break
                return None
            pos = m.end()
            num, name, op = m.groups()
            if num:
                out.append(num)
            elif name:
                if name in ("true", "false"):
                    out.append("True" if name == "true" else "False")
                elif name in ("inf", "nan"):
                    out.append("float(%r)" % name)
                elif name in ("abs", "in"):
                    out.append(" %s " % name)
                elif name in KNOWN_VARS:
                    if name not in v:
                        raise _Unknown(name)
                    out.append(repr(v[name]))
                else:
                    out.append(repr(name))    # a value name
            else:
                out.append({"||": " or ", "&&": " and ", "!": " not ", "[": "(", "]": ",)", "%": "%"}.get(op, op))
        return bool(eval("".join(out), {"__builtins__": {}, "float": float, "abs": abs}))  # noqa: S307
    except _Unknown:
        return None
    except Exception:  # noqa: BLE001 - a clause this small evaluator does not read
        return None


def neighbours(meta, entries, n=3):
    """The n nearest entries: the backend (glob match, else the same stack), the kind, and
    how many of the entry's `when` clauses the case meets (clause_holds); each {"id",
    "class", "score", "holds", "differs": the clauses the case does not meet}."""
    who = meta.get("who") or ""
    kind = meta.get("kind")
    v = case_vars(meta)
    out = []
    for e in entries:
        score = 0.0
        if any(fnmatch.fnmatch(who, pat) for pat in e.get("backends", [])):
            score += 3
        elif who.split("/")[0] and any(p.split("/")[0] == who.split("/")[0] for p in e.get("backends", [])):
            score += 1
        if kind in e.get("kinds", []):
            score += 2
        clauses = e.get("when") or []
        clauses = [clauses] if isinstance(clauses, str) else clauses
        res = [(c, clause_holds(c, v)) for c in clauses]
        holds = [c for c, h in res if h]
        differs = [c for c, h in res if h is False]
        score += 1.5 * len(holds) - 1.5 * len(differs)
        out.append({"id": e["id"], "class": e["class"], "score": score, "holds": holds, "differs": differs,
                    "issue": e.get("issue"), "title": e.get("title", "")})
    out.sort(key=lambda r: -r["score"])
    return out[:n]


def attnfuzz_exe():
    """The attnfuzz executable: $ATTNFUZZ_EXE (the C command sets it), else build/attnfuzz
    under the project root, else attnfuzz on PATH."""
    env = os.environ.get("ATTNFUZZ_EXE")
    if env:
        return env
    p = os.path.join(known_mod.ROOT, "build", "attnfuzz")
    return p if os.access(p, os.X_OK) else shutil.which("attnfuzz")


def known_match(path, entries, tmp):
    """The id of the entry `attnfuzz known` matches among entries only, or None. `--no-known`
    drops `--known` files too, so the set is given as the only known.json of a shadow
    project root in tmp (its python/attnfuzz/__init__.py marks it; the executable, linked or
    copied there, finds it first)."""
    exe = attnfuzz_exe()
    if not exe:
        return None
    root = os.path.join(tmp, "root")
    shadow = os.path.join(root, "build", "attnfuzz")
    if not os.path.exists(shadow):
        os.makedirs(os.path.join(root, "python", "attnfuzz"))
        os.makedirs(os.path.join(root, "build"))
        os.makedirs(os.path.join(root, "corpus", "findings", "triage"))
        open(os.path.join(root, "python", "attnfuzz", "__init__.py"), "w").close()
        try:
            os.link(os.path.realpath(exe), shadow)
        except OSError:
            shutil.copy2(os.path.realpath(exe), shadow)
    with open(os.path.join(root, "corpus", "findings", "triage", "known.json"), "w") as fh:
        json.dump({"format": "attnfuzz-known", "version": 1,
                   "entries": [{k: v for k, v in e.items() if k != "file"} for e in entries]}, fh)
    try:
        r = subprocess.run([shadow, "known", os.path.realpath(path)], capture_output=True, text=True, timeout=120,
                           cwd=root)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"known bug (\S+) \(", r.stdout)
    return m.group(1) if m else None


# --- sharing and sensitivity ---------------------------------------------------------------


def _replay(path, backend, timeout):
    """'fails', 'passes', or 'error: ...' for one backend on a bundle."""
    exe = attnfuzz_exe()
    if not exe:
        return "error: no attnfuzz executable"
    try:
        r = subprocess.run([exe, "replay", "-q", "--no-known", "--timeout", str(int(timeout)), "--backend", backend,
                            path], capture_output=True, text=True, timeout=timeout * 3 + 60)
    except subprocess.TimeoutExpired:
        return "error: timed out"
    if r.returncode == 0:
        return "passes"
    if r.returncode == 1:
        line = next((ln for ln in r.stdout.splitlines() if backend in ln), "")
        kind = re.search(r"\b(diverge|nan_mismatch|inf_mismatch|masked_row_nan|masked_value_leak|crash|error|timeout)\b",
                         line)
        return "fails" + (" (%s)" % kind.group(1) if kind else "")
    tail = (r.stderr.strip().splitlines() or [""])[-1]
    return "error: " + tail[:160]


def share_backends(meta):
    """The backends the case is replayed on: the built-in explicit and fused, every other
    variant of the failing target's stack, and the first variant of each other installed
    stack; variants left out of their stack's smoke campaign (one compile would not fit
    seconds: torch.compile, flex) are left out, and GPU ones on a host without a GPU. A
    stack is installed when its modules can be found (nothing is imported)."""
    from . import targets
    who = meta.get("who") or ""
    m = re.match(r"target:([a-z0-9_]+)/([a-z0-9_]+)", who)
    own = m.groups() if m else (None, None)
    out = ["explicit", "fused"]
    for name in targets.stack_names():
        mod, _ = targets.load(name)
        st = getattr(mod, "STACK", None)
        if st is None:
            continue
        if st.reference or not all(_installed(i) for i in st.imports):
            continue
        vs = [v for v in st.variants.values()
              if v.smoke and (not v.gpu or _have_gpu()) and all(_installed(i) for i in v.needs)]
        if name != own[0]:
            vs = vs[:1]
        out += ["target:%s/%s" % (name, v.name) for v in vs if (name, v.name) != own]
    return out


def _installed(module):
    import importlib.util
    return importlib.util.find_spec(module.split(".")[0]) is not None


def _have_gpu():
    return os.path.exists("/dev/nvidiactl")


def sharing(path, meta, timeout, backends=None):
    """[{"backend", "result"}] for each of backends (default share_backends(meta))."""
    rows = []
    for be in backends or share_backends(meta):
        rows.append({"backend": be, "result": _replay(path, be, timeout)})
    return rows


# (field, what a probe sets it to): the simplifications the minimizer also tries
PROBES = (("dtype", "f32"), ("layout", "bhsd"), ("scale", None), ("dropout_p", 0), ("causal", False),
          ("additive_mask", None), ("bool_mask", None), ("softcap", 0), ("window", [-1, -1]), ("key_padding", None))


def sensitivity(path, meta, timeout, tmp):
    """Each probe that changes the case: does the finding stay on the failing backend?
    [{"field", "to", "keeps": bool or None, "result"}]."""
    who = meta.get("who") or ""
    if not who or "," in who or "@" in who:
        return []
    c = meta["case"]
    rows = []
    for field, to in PROBES:
        if field == "layout":
            if all((c.get(t) or {}).get("layout", "bhsd") == "bhsd" and not (c.get(t) or {}).get("pad")
                   for t in "qkv"):
                continue
        elif c.get(field) == to or (field == "dtype" and c.get("dtype") == "f32"):
            continue
        d = os.path.join(tmp, "probe-" + field)
        shutil.copytree(os.path.realpath(path), d)
        with open(os.path.join(d, "case.json")) as f:
            m = json.load(f)
        if field == "layout":
            for t in "qkv":
                if isinstance(m["case"].get(t), dict):
                    m["case"][t].update(layout="bhsd", pad=0, perm=0, broadcast="none")
        else:
            m["case"][field] = to
        for drop in {"additive_mask": ["mask"], "bool_mask": ["bool_mask"]}.get(field, []):
            p = os.path.join(d, drop + bundle_mod.SUFFIX)
            if os.path.exists(p):
                os.unlink(p)
        gone = {"additive_mask": "mask", "bool_mask": "bool_mask"}.get(field)
        if gone and isinstance(m.get("files"), list):
            m["files"] = [x for x in m["files"] if x != gone + bundle_mod.SUFFIX]
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(m, f)
        res = _replay(d, who, timeout)
        rows.append({"field": field, "to": to, "keeps": res.startswith("fails") if not res.startswith("error") else None,
                     "result": res})
        shutil.rmtree(d, ignore_errors=True)
    return rows


# --- the draft entry and the upstream page -------------------------------------------------


def _when_clauses(c, meta):
    w = []
    if c.get("dtype") and c["dtype"] != "f32":
        w.append("dtype == %s" % c["dtype"])
    feats = (meta.get("features") or "").split()
    flags = [("causal", c.get("causal")), ("dropout > 0", (c.get("dropout_p") or 0) > 0),
             ("amask", c.get("additive_mask")), ("bmask", c.get("bool_mask")), ("key_padding", c.get("key_padding")),
             ("window", list(c.get("window") or [-1, -1]) != [-1, -1]), ("softcap > 0", (c.get("softcap") or 0) > 0),
             ("backward", c.get("backward")), ("specials", "specials" in feats), ("denormal", "denormal" in feats),
             ("near_overflow", "near_overflow" in feats), ("segments", "packed" in feats), ("cross", "sq!=sk" in feats)]
    w += [name for name, on in flags if on]
    if c.get("scale") is not None and isinstance(c.get("scale"), (int, float)) and c["scale"] <= 0:
        w.append("scale <= 0")
    return w


def draft_entry(meta, verdict, sens):
    """A known.json entry for the bundle (docs/known.md's format), narrowed by the probes
    that lost the finding when sensitivity ran."""
    c = meta["case"]
    who = meta.get("who") or "?"
    kind = meta.get("kind") or "?"
    when = _when_clauses(c, meta)
    kept = {r["field"] for r in sens if r.get("keeps")}
    drop = {"dtype": "dtype ==", "causal": "causal", "dropout_p": "dropout", "additive_mask": "amask",
            "bool_mask": "bmask", "softcap": "softcap", "window": "window", "key_padding": "key_padding"}
    when = [w for w in when if not any(w.startswith(drop[f]) for f in kept if f in drop)]
    rec = _failing(meta) or {}
    e = {"id": re.sub(r"[^a-z0-9-]+", "-", ("%s-%s" % (who.split(":", 1)[-1], kind)).lower())[:63],
         "class": verdict["class"],
         "title": "%s: %s%s (draft: say what is wrong)" % (who.split(":", 1)[-1], kind,
                                                          " when " + ", ".join(when) if when else ""),
         "backends": [who], "kinds": [kind]}
    if when:
        e["when"] = when
    m = rec.get("metrics") or {}
    tensor = meta.get("tensor") or "out"
    sym = []
    if tensor != "out":
        sym.append("tensor == %s" % tensor)
    if kind in ("diverge", "nan_mismatch", "inf_mismatch", "masked_row_nan", "masked_value_leak"):
        if m.get("n_fail_masked") and m.get("n_fail_masked") == (m.get("n_diverge", 0) + m.get("n_nan", 0)
                                                                 + m.get("n_inf", 0)):
            sym.append("masked_only")
        if m.get("n_nan") and not m.get("n_nan_ref"):
            sym.append("n_nan_ref == 0")
    if sym:
        e["symptom"] = sym
    if kind in ("error", "crash") and rec.get("error"):
        msg = str(rec["error"]).split("stderr:")[-1].strip().splitlines()[-1] if rec.get("error") else ""
        e["message"] = msg[-60:]
    return e


def upstream_page(meta, verdict, near, repro_path):
    c = meta["case"]
    rec = _failing(meta) or {}
    m = rec.get("metrics") or {}
    tol = meta.get("tolerance") or {}
    tensor = meta.get("tensor") or "out"
    if tensor != "out":   # a gradient finding: the gradient's worst element and tolerance
        g = (rec.get("grads") or {}).get(tensor) or {}
        m, tol = g.get("metrics") or {}, g.get("tolerance") or tol
    who = meta.get("who") or "?"
    lines = ["# %s: %s on %s" % (who.split(":", 1)[-1], meta.get("kind"), meta.get("features") or ""), "",
             "## Environment", "",
             "- %s %s (%s)" % (who, rec.get("version", "?"), rec.get("worker", "")),
             "- conventions declared: `%s`" % json.dumps(rec.get("conventions") or {}),
             "- case: batch %s, heads %s/%s, Sq %s, Sk %s, D %s, Dv %s, %s" % tuple(
                 c.get(k) for k in ("batch", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim", "v_head_dim",
                                    "dtype")),
             "", "## Expected against actual", ""]
    if meta.get("kind") in ("crash", "error", "timeout"):
        lines.append("Expected: an output. Actual: `%s`" % str(rec.get("error", ""))[:400])
    else:
        lines.append("%sAt index %s: expected %s (float64 reference), got %s; max |out - ref| over finite pairs %s, "
                     "NaN on one side only at %s elements, Inf at %s; tolerance atol %s rtol %s." % (
                         "In the gradient %s. " % tensor if tensor != "out" else "",
                         m.get("worst_index"), m.get("worst_ref"), m.get("worst_out"), m.get("max_abs"),
                         m.get("n_nan", 0), m.get("n_inf", 0), tol.get("atol"), tol.get("rtol")))
    lines += ["", "Triage: **%s** (confidence %.2f): %s" % (verdict["class"], verdict["confidence"],
                                                             verdict["evidence"]), ""]
    lines += ["## Repro", ""]
    if repro_path and os.path.exists(repro_path):
        with open(repro_path) as f:
            lines += ["```python", f.read().rstrip("\n"), "```"]
    else:
        lines.append("(no standalone script: %s)" % (repro_path or "none written"))
    lines += ["", "## Before filing: nearest known entries and issues to search", ""]
    for r in near:
        lines.append("- `%s` (%s): %s%s" % (r["id"], r["class"], r["title"],
                                           "; issue: %s" % r["issue"] if r.get("issue") else ""))
    stack = who.split(":", 1)[-1].split("/")[0]
    lines.append("- search the %s tracker for: %s" % (stack, ", ".join(repr(t) for t in _search_terms(meta))))
    return "\n".join(lines) + "\n"


def _search_terms(meta):
    c = meta["case"]
    terms = ["scaled_dot_product_attention" if "torch" in (meta.get("who") or "") else "dot_product_attention"]
    kind = meta.get("kind")
    terms.append({"nan_mismatch": "NaN", "inf_mismatch": "inf", "crash": "crash", "error": "error"}.get(kind, "wrong"))
    if c.get("dtype") in ("f16", "bf16"):
        terms.append({"f16": "float16", "bf16": "bfloat16"}[c["dtype"]])
    for f in ("causal", "dropout_p", "additive_mask", "bool_mask", "backward"):
        if c.get(f):
            terms.append(f.replace("_p", "").replace("_", " "))
    return terms


# --- the verdict ---------------------------------------------------------------------------


def verdict(meta, rows, note, match, shared, near=()):
    """{"class", "confidence", "evidence"} from the models, the known match and sharing."""
    kind = meta.get("kind")
    rec = _failing(meta) or {}
    who = meta.get("who") or ""
    if match is not None:
        return {"class": match["class"], "confidence": 0.95,
                "evidence": "the known entry %s matches (attnfuzz known)" % match["id"]}
    if kind in CHECK_KINDS:
        return {"class": "real_bug", "confidence": 0.7 if kind != "batch_variant" else 0.55,
                "evidence": CHECK_KINDS[kind] + (" (undeclared: the backend's hello does not waive it)"
                                                 if kind != "guard_write" else "")}
    if kind in ("crash", "error", "timeout"):
        st = meta.get("_stderr", "")
        frames = re.findall(r'File "([^"]+)", line \d+', st)
        exc = re.findall(r"^(\w+): ", st, re.M)
        if frames and "/attnfuzz/" in frames[-1] and exc and exc[-1] in WRAPPER_ERRORS:
            return {"class": "target_bug", "confidence": 0.6,
                    "evidence": "the %s's traceback ends in attnfuzz's own code (%s)" % (kind, frames[-1])}
        return {"class": "real_bug", "confidence": 0.75 if kind != "timeout" else 0.5,
                "evidence": "a %s of the stack (%s)" % (kind, str(rec.get("error", "")).strip()[-120:])}
    best = best_model(rows)
    ref = rows[0] if rows else None
    if best is not None:
        conf = 0.9 if best["exact"] else 0.75
        if best["name"].endswith("+accumulation"):
            conf = 0.6
        ev = "model %s reproduces the output %s (%s); the reference fails %d elements" % (
            best["name"], "exactly" if best["exact"] else "within the tolerance", best["what"], ref["fail"] if ref else -1)
        cls, why = _model_class(best, rec, meta["case"].get("dtype"))
        return {"class": cls, "confidence": round(conf - (0.2 if why else 0.0), 2), "evidence": ev + (why or "")}
    if ref is None:
        if near:
            return {"class": near[0]["class"], "confidence": 0.35,
                    "evidence": "%s; by analogy with the nearest known entry %s" % (note or "nothing to judge",
                                                                                   near[0]["id"])}
        return {"class": "real_bug", "confidence": 0.3, "evidence": note or "nothing to judge"}
    conf = 0.7 if not note else 0.5     # fewer models were tried: a weaker "none explains"
    ev = "no model explains the output (the closest, %s, still fails %d of the reference's %d elements)" % (
        min(rows, key=lambda r: r["fail"])["name"], min(r["fail"] for r in rows), ref["fail"])
    others = [s for s in shared if s["backend"].startswith("target:")]
    if others and all(s["result"].startswith("fails") for s in others):
        conf -= 0.15
        ev += "; every other variant of the stack fails it too (a bug they share)"
    elif any(s["result"] == "passes" for s in shared):
        conf += 0.1
        ev += "; %s pass it" % ", ".join(s["backend"] for s in shared if s["result"] == "passes")
    if note:
        ev += "; %s" % note
    if who.startswith("mutant:"):
        ev += "; a seeded mutant of attnfuzz's reference"
    return {"class": "real_bug", "confidence": round(conf, 2), "evidence": ev}


def _declared_rows(rec, dtype):
    mr = (rec.get("conventions") or {}).get("masked_rows", "zero")
    return mr.get(dtype, "zero") if isinstance(mr, dict) else mr


# finite mask values that a stack uses by design (docs/findings.md): jax's -0.7 * finfo.max
# (`_get_large_negative`, pallas' DEFAULT_MASK_VALUE), cuDNN-in-jax's -2^15 / -2^41 biases
BY_DESIGN = (("target:jax/xla*", ("jax_large_negative",)), ("target:jax/pallas*", ("jax_large_negative",)),
             ("target:jax/explicit*", ("jax_large_negative",)),
             ("target:jax/cudnn*", ("minus_2^15", "minus_2^41", "jax_large_negative")))


def _by_design(backend, best):
    """Is the bias of an explaining bias model the one the backend's stack uses by design?"""
    return any(fnmatch.fnmatch(backend, pat) and any(("_%s" % v) in best["name"] for v in vals)
               for pat, vals in BY_DESIGN)


def _model_class(best, rec, dtype):
    """(class, why or None) of an explaining model: its own class, except where the project
    calls the behaviour a bug (docs/findings.md): a finite mask bias that changes a row with
    live keys leaks a masked key (ORT's, cuDNN-in-jax's f16 bias: real bugs), and a
    masked-row behaviour other than the one the backend declares for its other rows (ORT's
    NaN for a row of -inf scores where it zeroes masked rows) is inconsistent."""
    name, where = best["name"], best.get("where")
    declared = _declared_rows(rec, dtype)
    if name.startswith("bias_") and where == "live":
        return "real_bug", "; but the finite bias changes rows with live keys: a masked key keeps its weight (a leak)"
    if name.startswith("bias_") and _by_design(rec.get("name", ""), best):
        return best["class"], None
    if name.startswith("bias_") and declared == "zero":
        return "real_bug", ("; but the backend declares masked_rows zero, and its finite bias gives a fully masked "
                            "row weights (inconsistent with its own convention)")
    if name.startswith("masked_rows_") and name[len("masked_rows_"):] != declared:
        return "real_bug", "; but the backend declares masked_rows %s for its other rows" % declared
    return best["class"], None


def versions(meta):
    """{backend: {"version": ..., "libs": {...}}} as the bundle recorded them: what an upstream
    report must state and what bisect starts from."""
    out = {}
    for b in meta.get("backends") or []:
        row = {"version": b.get("version")}
        if b.get("libs"):
            row["libs"] = b["libs"]
        out[b.get("name")] = row
    return out


def cached_versions(package):
    """The versions of package that bisect's cache holds installed (bisect.install: under
    cache_dir()/PACKAGE[+ALSO]/VERSION, marked .attnfuzz-installed), in release order, as
    (version, directory)."""
    from . import bisect as bisect_mod
    root = bisect_mod.cache_dir()
    out = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if name.split("+")[0].lower().replace("-", "_") != package.lower().replace("-", "_"):
            continue
        for v in os.listdir(os.path.join(root, name)):
            d = os.path.join(root, name, v)
            if os.path.exists(os.path.join(d, ".attnfuzz-installed")):
                out.append((v, d))
    return sorted(out, key=lambda x: known_mod._release(x[0]) or ())


def versions_showing(path, timeout=600, package=None, script=None):
    """Which of the cached versions of the bundle's stack show it: its standalone repro (or
    script) run with each one first on PYTHONPATH, as bisect runs it. A list of {"version",
    "verdict" (bug, good, skip, error), "line"}; [] when the stack's package is unknown or
    none is cached."""
    from . import bisect as bisect_mod
    package = package or bisect_mod.package_of(path)
    cached = cached_versions(package) if package else []
    if not cached:
        return []
    with tempfile.TemporaryDirectory(prefix="attnfuzz-triage-versions-") as tmp:
        try:
            script = script or bisect_mod.script_of(path, tmp)
        except RuntimeError as e:
            return [{"version": v, "verdict": bisect_mod.ERROR, "line": str(e)[:200]} for v, _ in cached]
        rows = []
        for v, site in cached:
            verdict_, line = bisect_mod.run_script(script, site, timeout=timeout)
            rows.append({"version": v, "verdict": verdict_, "line": line})
    return rows


def triage(path, entries, share=True, timeout=30, out_dir=None, blind=False, without=(), share_with=None,
           cached=False):
    """The triage of one bundle as a JSON-able dict: share=False makes no replay;
    share_with names the backends to replay on (default: share_backends)."""
    b = bundle_mod.load(path)
    meta = b["meta"]
    st = os.path.join(os.path.realpath(path), "stderr.txt")
    if os.path.exists(st):
        with open(st, errors="replace") as f:
            meta["_stderr"] = f.read()[-4000:]
    own = _own_entry(path, entries) if blind else None
    left_out = set(without) | ({own["id"]} if own else set())
    pool = [e for e in entries if e["id"] not in left_out]
    rows, note = models(b, meta)
    with tempfile.TemporaryDirectory(prefix="attnfuzz-triage-") as tmp:
        mid = known_match(path, pool, tmp)
        match = next((e for e in pool if e["id"] == mid), None) if mid else None
        shared = sharing(path, meta, timeout, share_with) if share else []
        sens = sensitivity(path, meta, timeout, tmp) if share else []
    near = neighbours(meta, pool)
    v = verdict(meta, rows, note, match, shared, near)
    res = {"bundle": path, "kind": meta.get("kind"), "who": meta.get("who"), "tensor": meta.get("tensor") or "out",
           "verdict": v, "models": rows, "models_note": note, "best_model": (best_model(rows) or {}).get("name"),
           "known_match": mid, "left_out": sorted(left_out), "neighbours": near, "sharing": shared,
           "sensitivity": sens, "minimized": meta.get("minimized"), "versions": versions(meta),
           "cached_versions": versions_showing(path) if cached else None}
    res["draft_entry"] = draft_entry(meta, v, sens)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        name = os.path.basename(os.path.normpath(path))
        repro_path = os.path.join(out_dir, name + ".py")
        try:
            from . import repro
            repro.write_repro(path, repro_path)
        except (OSError, ValueError, ImportError, KeyError) as e:
            repro_path = "repro not written: %s" % e
        page = os.path.join(out_dir, name + ".md")
        with open(page, "w") as f:
            f.write(upstream_page(meta, v, near, repro_path))
        with open(os.path.join(out_dir, name + ".known.json"), "w") as f:
            json.dump({"format": "attnfuzz-known", "version": 1, "entries": [res["draft_entry"]]}, f, indent=2)
        res["upstream_page"] = page
    return res


def render(r, file=sys.stdout):
    p = lambda *a: print(*a, file=file)
    v = r["verdict"]
    p("%s: %s %s%s" % (r["bundle"], r["kind"], r["who"], "" if r["tensor"] == "out" else " (%s)" % r["tensor"]))
    p("  verdict    %s (confidence %.2f): %s" % (v["class"], v["confidence"], v["evidence"]))
    if r["models"]:
        p("  models     (failing elements under each; * exact)")
        ref_fail = r["models"][0]["fail"]
        shown = [m for m in r["models"] if m["name"] == "reference" or m["fail"] < ref_fail]
        for m in sorted(shown, key=lambda m: (m["name"] != "reference", m["fail"]))[:8]:
            p("    %-34s %-10s fails %6d%s  %s" % (m["name"], m["class"] or "-", m["fail"], " *" if m["exact"] else "  ",
                                               m["what"]))
        if len(shown) < len(r["models"]):
            p("    (%d other models fail as many elements as the reference or more)" % (len(r["models"]) - len(shown)))
    if r["models_note"]:
        p("  note       %s" % r["models_note"])
    for name, row in sorted(r["versions"].items()):
        libs = ", ".join("%s %s" % kv for kv in sorted((row.get("libs") or {}).items()))
        p("  version    %-40s %s%s" % (name, row["version"] or "-", " (%s)" % libs if libs else ""))
    if r.get("cached_versions") == []:
        p("  cached     no version of the stack in bisect's cache (attnfuzz bisect installs them)")
    for c in r.get("cached_versions") or []:
        p("  cached     %-14s %-5s  %s" % (c["version"], c["verdict"], c["line"]))
    p("  known      %s%s" % (r["known_match"] or "no entry matches",
                            " (left out: %s)" % ", ".join(r["left_out"]) if r["left_out"] else ""))
    for n in r["neighbours"]:
        p("  neighbour  %-48s %-10s meets %s%s" % (n["id"], n["class"], "; ".join(n["holds"]) or "-",
                                                   "; differs: %s" % "; ".join(n["differs"]) if n["differs"] else ""))
    for s in r["sharing"]:
        p("  sharing    %-40s %s" % (s["backend"], s["result"]))
    for s in r["sensitivity"]:
        p("  probe      %-14s -> %-10s %s" % (s["field"], json.dumps(s["to"]),
                                              "keeps the finding" if s["keeps"] else
                                              ("loses it: needed" if s["keeps"] is False else s["result"])))
    p("  draft      %s" % json.dumps(r["draft_entry"]))
    if r.get("upstream_page"):
        p("  page       %s" % r["upstream_page"])


def _json_safe(x):
    """x with non-finite numbers as the strings "inf", "-inf", "nan" (as case.json writes
    them) and numpy scalars as Python numbers: strict JSON."""
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if np.isfinite(x) else ("nan" if np.isnan(x) else ("inf" if x > 0 else "-inf"))
    if isinstance(x, np.integer):
        return int(x)
    return x


def main(argv=None):
    ap = argparse.ArgumentParser(prog="attnfuzz triage", description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="+", metavar="BUNDLE")
    ap.add_argument("--json", action="store_true", help="one JSON object per bundle, a list")
    ap.add_argument("--no-share", action="store_true", help="no replays: models and neighbours only")
    ap.add_argument("--timeout", type=float, default=30, help="seconds per replay (default 30)")
    ap.add_argument("--share-with", action="append", metavar="SPEC",
                    help="replay on this backend instead of the default set (repeatable)")
    ap.add_argument("--blind", action="store_true", help="leave the entry that lists the bundle out of the known set")
    ap.add_argument("--known-without", action="append", default=[], metavar="ID", help="leave entry ID out (repeatable)")
    ap.add_argument("--no-known", action="store_true", help="no known entries at all")
    ap.add_argument("--out", metavar="DIR", help="write NAME.md (upstream page), NAME.py (repro), NAME.known.json")
    ap.add_argument("--cached-versions", action="store_true",
                    help="run the repro with each version of the stack in bisect's cache: which show it")
    a = ap.parse_args(argv)
    try:
        entries = [] if a.no_known else known_mod.load()
    except ValueError as e:
        print("attnfuzz triage: %s" % e, file=sys.stderr)
        return 2
    results, status = [], 0
    for path in a.bundles:
        try:
            r = triage(path, entries, share=not a.no_share, timeout=a.timeout, out_dir=a.out, blind=a.blind,
                       without=a.known_without, share_with=a.share_with, cached=a.cached_versions)
        except (OSError, ValueError, KeyError) as e:
            print("attnfuzz triage: %s: %s" % (path, e), file=sys.stderr)
            status = 2
            continue
        results.append(r)
        if not a.json:
            render(r)
    if a.json:
        json.dump(_json_safe(results), sys.stdout, indent=1)
        print()
    return status


if __name__ == "__main__":
    sys.exit(main())
