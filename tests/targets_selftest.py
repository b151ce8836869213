"""Self-test of real targets: each variant's run function called directly on a handful of
cases (every layout, packed ones included, GQA, masks, causal diagonals, f16/bf16) against an
independent float64 reference written here, plus the unavailable-stack path.

usage: targets_selftest.py STACK VARIANT [VARIANT...] [--quick] [--protocol]
       targets_selftest.py --unavailable

Exit 0 when every case passes, 77 (ctest's skip) when the stack does not import, 1 otherwise.
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import ml_dtypes  # noqa: E402

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
# Per-dtype tolerance on |out - ref| <= ATOL * max|V| + RTOL * |ref| (inputs N(0,1)): a few
# units of the dtype's rounding on an output of size ~1, as PyTorch's SDPA tests use.
TOL = {"f32": (2e-5, 2e-5), "f16": (4e-3, 4e-3), "bf16": (3e-2, 3e-2)}


# -- cases -------------------------------------------------------------------------------

def tensor(layout, seed, **kw):
    d = {"layout": layout, "perm": 0, "pad": 0, "broadcast": "none", "dist": "normal",
         "log10_magnitude": 0, "special": "none", "seed": seed}
    d.update(kw)
    return d


def base_case(**kw):
    c = {"batch": 2, "q_heads": 2, "kv_heads": 2, "q_len": 5, "kv_len": 5, "head_dim": 8,
         "v_head_dim": 8, "dtype": "f32", "allow_tf32": False, "scale": None,
         "scale_placement": "scores", "softcap": 0, "causal": False, "diagonal": "top_left",
         "diagonal_offset": 0, "key_padding": None, "window": [-1, -1], "additive_mask": None,
         "bool_mask": None, "dropout_p": 0, "dropout_seed": 0}
    lay = kw.pop("layout", "bhsd")
    lays = kw.pop("layouts", (lay, lay, lay))
    c.update(kw)
    for i, (t, lt) in enumerate(zip("qkv", lays)):
        c[t] = tensor(lt, 11 + i)
    return c


def mask_spec(full_dims="qk", rank=4, expanded=False, dtype="f32"):
    return {"full_dims": full_dims, "rank": rank, "expanded": expanded, "dtype": dtype,
            "pattern": "random", "density": 60, "fill": "neg_inf", "log10_magnitude": 0,
            "live_zero": False, "seed": 5}


def cases(quick: bool):
    """(name, raw case, extras) — extras: 'perm' for a transposed-memory q, 'bcast' for a
    stride-0 batch k, 'pad' for padded v rows."""
    out = []
    for lay in ("bhsd", "bshd", "sbhd", "bsd", "channels_first",
                "qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first"):
        out.append((f"layout {lay}", base_case(layout=lay), ()))
    out += [
        ("mixed layouts, cross, dv", base_case(layouts=("sbhd", "bsd", "bshd"), q_len=3, kv_len=7,
                                               v_head_dim=4), ()),
        ("gqa 4/2 f16", base_case(q_heads=4, kv_heads=2, dtype="f16"), ()),
        ("bf16 scale", base_case(dtype="bf16", scale=0.3), ()),
        ("causal top_left sq>sk", base_case(causal=True, q_len=6, kv_len=4), ()),
        ("causal bottom_right", base_case(causal=True, diagonal="bottom_right", q_len=3, kv_len=7), ()),
        ("causal bottom_right_valid + padding", base_case(causal=True, diagonal="bottom_right_valid",
                                                          q_len=3, kv_len=7, key_padding=[5, 7]), ()),
        ("explicit diagonal + window", base_case(causal=False, diagonal="explicit", diagonal_offset=2,
                                                 q_len=4, kv_len=8, window=[2, 1]), ()),
        ("key padding only", base_case(key_padding=[3, 5]), ()),
        ("additive 2-D mask", base_case(additive_mask=mask_spec(rank=2)), ()),
        ("f32 mask with f16 q, [B,1,Sq,Sk]", base_case(dtype="f16", additive_mask=mask_spec("bqk")), ()),
        ("bool mask [1,H,Sq,Sk] expanded + causal", base_case(bool_mask=mask_spec("hqk", expanded=True),
                                                            causal=True), ()),
        ("both masks, bf16 mask dtype", base_case(additive_mask=mask_spec("qk", dtype="bf16"),
                                                  bool_mask=mask_spec("bhqk")), ()),
        ("fully masked rows", base_case(causal=True, diagonal="explicit", diagonal_offset=-2), ()),
        ("causal, negative scale", base_case(causal=True, scale=-0.3), ()),
        ("head_dim 16, causal bottom_right, f16", base_case(head_dim=16, v_head_dim=16, dtype="f16",
                                                           causal=True, diagonal="bottom_right",
                                                           q_len=3, kv_len=7), ()),
        ("softcap sqrt_qk placement", base_case(softcap=2.0, scale=1.5, scale_placement="sqrt_qk"), ()),
        ("dropout", base_case(dropout_p=0.3, dropout_seed=7), ()),
        ("dropout p=1", base_case(dropout_p=1.0, dropout_seed=7), ()),
        ("dropout f16 causal, longer rows", base_case(dtype="f16", dropout_p=0.3, dropout_seed=9, causal=True,
                                                      q_len=33, kv_len=33, head_dim=16, v_head_dim=16), ()),
        ("dropout bf16 gqa, bool mask", base_case(dtype="bf16", dropout_p=0.5, dropout_seed=3, q_heads=4,
                                                  kv_heads=2, head_dim=16, v_head_dim=16,
                                                  bool_mask=mask_spec("bqk")), ()),
        # Last: on CUDA's memory-efficient kernel this one faults and loses the context.
        ("strided: perm q, stride-0 k, padded v", base_case(layout="bhsd"), ("perm", "bcast", "pad")),
    ]
    if quick:
        keep = {"layout bshd", "layout bsd", "layout qkv_channels_first", "gqa 4/2 f16",
                "head_dim 16, causal bottom_right, f16",
                "causal bottom_right_valid + padding", "both masks, bf16 mask dtype"}
        out = [c for c in out if c[0] in keep]
    return out


# -- the case object and its derived values ----------------------------------------------

def derived(raw):
    B, Sq, Sk = raw["batch"], raw["q_len"], raw["kv_len"]
    kp = raw["key_padding"]
    valid = list(kp) if kp is not None else [Sk] * B
    diag = raw["diagonal"]
    off = {"top_left": [0] * B, "bottom_right": [Sk - Sq] * B,
           "bottom_right_valid": [x - Sq for x in valid],
           "explicit": [raw["diagonal_offset"]] * B}[diag]
    scale = raw["scale"] if raw["scale"] is not None else 1.0 / math.sqrt(raw["head_dim"])
    return {"scale": scale, "diag_offset": off, "valid_keys": valid}


def make_case(raw, qkv=None):
    from attnfuzz.case import Case
    try:
        c = Case(raw, derived(raw))
    except TypeError:
        c = Case({"case": raw, "derived": derived(raw)})
    if qkv is not None:
        try:
            c.qkv = qkv
        except AttributeError:
            c._qkv = qkv
    return c


# -- inputs --------------------------------------------------------------------------------

def physical(x, layout):
    """Canonical [B,H,S,D] -> a contiguous array in an unpacked layout."""
    B, H, S, D = x.shape
    if layout == "bhsd":
        return np.ascontiguousarray(x)
    if layout == "bshd":
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    if layout == "sbhd":
        return np.ascontiguousarray(x.transpose(2, 0, 1, 3))
    if layout == "bsd":
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(B, S, H * D)
    if layout == "channels_first":
        return np.ascontiguousarray(x.transpose(0, 1, 3, 2)).reshape(B, H * D, S)
    raise ValueError(layout)


def canonical_out(o, layout, H, Dv):
    o = np.asarray(o)
    if layout == "bhsd":
        return o
    if layout == "bshd":
        return o.transpose(0, 2, 1, 3)
    if layout == "sbhd":
        return o.transpose(1, 2, 0, 3)
    if layout == "bsd":
        B, S, _ = o.shape
        return o.reshape(B, S, H, Dv).transpose(0, 2, 1, 3)
    if layout == "channels_first":
        B, _, S = o.shape
        return o.reshape(B, H, Dv, S).transpose(0, 1, 3, 2)
    raise ValueError(layout)


def draw_mask(raw, spec, kind, B, H, Sq, Sk, rng):
    dims = [B if "b" in spec["full_dims"] else 1, H if "h" in spec["full_dims"] else 1,
            Sq if "q" in spec["full_dims"] else 1, Sk if "k" in spec["full_dims"] else 1]
    if kind == "add":
        m = rng.standard_normal(dims)
        m[rng.random(dims) < 0.25] = -np.inf
        m = m.astype(NP[spec["dtype"]])
    else:
        m = rng.random(dims) >= 0.25
    if spec["rank"] == 2:
        return m.reshape(dims[2], dims[3])
    if spec["expanded"]:
        return np.broadcast_to(m, (B, H, Sq, Sk))
    return m


def make_inputs(raw, extras, seed=0):
    rng = np.random.default_rng(seed)
    B, Hq, Hkv, Sq, Sk = raw["batch"], raw["q_heads"], raw["kv_heads"], raw["q_len"], raw["kv_len"]
    D, Dv, dt = raw["head_dim"], raw["v_head_dim"], NP[raw["dtype"]]
    q = rng.standard_normal((B, Hq, Sq, D)).astype(dt)
    k = rng.standard_normal((B, Hkv, Sk, D)).astype(dt)
    v = rng.standard_normal((B, Hkv, Sk, Dv)).astype(dt)
    if "bcast" in extras:
        k = np.broadcast_to(k[:1], k.shape)
    lay = raw["q"]["layout"]
    qkv = None
    if lay == "qkv_bs3hd":
        qkv = np.stack([physical(t, "bshd") for t in (q, k, v)], axis=2)
        pq, pk, pv = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    elif lay == "qkv_bsh3d":
        qkv = np.stack([physical(t, "bshd") for t in (q, k, v)], axis=3)
        pq, pk, pv = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
    elif lay == "qkv_channels_first":
        qkv = np.concatenate([physical(t, "channels_first") for t in (q, k, v)], axis=1)
        c = Hq * D
        pq, pk, pv = qkv[:, :c], qkv[:, c:2 * c], qkv[:, 2 * c:]
    else:
        pq = physical(q, raw["q"]["layout"])
        pk = physical(k, raw["k"]["layout"]) if "bcast" not in extras else k
        pv = physical(v, raw["v"]["layout"])
        if "perm" in extras:       # bhsd shape, bshd memory order
            pq = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
        if "pad" in extras:        # rows padded by 3 elements holding NaN
            buf = np.full(pv.shape[:-1] + (pv.shape[-1] + 3,), np.nan, dtype=dt)
            buf[..., :pv.shape[-1]] = pv
            pv = buf[..., :pv.shape[-1]]
    for a in (pq, pk, pv) + ((qkv,) if qkv is not None else ()):
        if a.flags.writeable:
            a.flags.writeable = False      # the kit's views are read-only
    mask = bmask = None
    if raw["additive_mask"]:
        mask = draw_mask(raw, raw["additive_mask"], "add", B, Hq, Sq, Sk, rng)
    if raw["bool_mask"]:
        bmask = draw_mask(raw, raw["bool_mask"], "bool", B, Hq, Sq, Sk, rng)
    return (q, k, v), (pq, pk, pv), qkv, mask, bmask


# -- the independent reference ---------------------------------------------------------------

def reference(raw, q, k, v, mask, bmask, keep):
    """DESIGN.md section 2 in float64, by loops over the structural masks."""
    d = derived(raw)
    B, Hq, Hkv, Sq, Sk = raw["batch"], raw["q_heads"], raw["kv_heads"], raw["q_len"], raw["kv_len"]
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    rep = Hq // Hkv
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    s = d["scale"] * np.einsum("bhid,bhjd->bhij", q, k)
    c = raw["softcap"]
    if c > 0:
        s = c * np.tanh(s / c)
    allowed = np.ones((B, Hq, Sq, Sk), dtype=bool)
    if mask is not None:
        m = np.asarray(mask, dtype=np.float64)
        s = s + (m.reshape((1, 1) + m.shape) if m.ndim == 2 else m)
        allowed &= np.isfinite(s) | (s > 0)
    if bmask is not None:
        bm = np.asarray(bmask)
        allowed &= bm.reshape((1, 1) + bm.shape) if bm.ndim == 2 else bm
    left, right = raw["window"]
    for b in range(B):
        for i in range(Sq):
            di = i + d["diag_offset"][b]
            for j in range(Sk):
                ok = True
                if raw["causal"] and j > di:
                    ok = False
                if left >= 0 and j < di - left:
                    ok = False
                if right >= 0 and j > di + right:
                    ok = False
                if raw["key_padding"] is not None and j >= raw["key_padding"][b]:
                    ok = False
                if not ok:
                    allowed[b, :, i, j] = False
    s = np.where(allowed, s, -np.inf)
    mx = np.max(s, axis=-1, keepdims=True)
    dead = ~np.isfinite(mx)
    e = np.where(allowed, np.exp(s - np.where(dead, 0, mx)), 0.0)
    tot = e.sum(-1, keepdims=True)
    p = np.where(dead, 0.0, e / np.where(tot == 0, 1, tot))
    dp = raw["dropout_p"]
    if dp >= 1:
        p = np.zeros_like(p)
    elif dp > 0:
        p = np.where(keep, p / (1 - dp), 0.0)
    live = p != 0
    vv = np.where(np.isnan(v), 0.0, v)   # inputs here hold no NaN in live positions
    out = np.einsum("bhij,bhjd->bhid", p, vv)
    return out, dead[..., 0] | ~live.any(-1)


def kit_reference(case, q, k, v, mask, bmask, keep):
    """attnfuzz.reference's answer (None when the kit lacks it): the test's own reference
    must agree with it, so both are checked."""
    try:
        from attnfuzz import reference as kit
    except ImportError:
        return None
    return kit.attention(case, np.asarray(q, np.float64), np.asarray(k, np.float64),
                         np.asarray(v, np.float64), mask, bmask, keep)


# -- the check ------------------------------------------------------------------------------

# Real stack bugs (docs/findings.md): the case must still go wrong the documented way; the
# test then counts it as known, and says so when it starts to pass (fixed upstream).
KNOWN = {
    ("torch", "flex", "layout bsd"): ("raise", "not enough values to unpack",
                                      "corpus/findings/torch/flex_cpu_reshaped_query.py"),
    ("torch", "sdpa_flash", "causal, negative scale"): (
        "wrong", "", "corpus/findings/torch/sdpa_cpu_flash_causal_negative_scale.py"),
    ("torch", "cuda_sdpa_efficient", "strided: perm q, stride-0 k, padded v"): (
        "raise", "misaligned address",
        "corpus/findings/torch-cuda/sdpa_cuda_efficient_padded_value_misaligned.py"),
    ("torch", "cuda_sdpa_cudnn", "f32 mask with f16 q, [B,1,Sq,Sk]"): (
        "wrong", "", "corpus/findings/torch-cuda/sdpa_cudnn_mask_dtype_and_masked_rows.py"),
    ("ort", "exported_sdpa", "causal, negative scale"): (
        "wrong", "", "corpus/findings/torch/onnx_export_sdpa_negative_scale.py"),
}

def run_variant(stack, variant, quick):
    mod = importlib.import_module(f"attnfuzz.targets.{stack}")
    ok, why = mod.available(variant)
    if not ok:
        print(f"SKIP {stack}/{variant}: {why}")
        return None
    from attnfuzz.worker import Result, Unsupported
    target = mod.make_target(variant) if hasattr(mod, "make_target") else None
    hello = target.hello()
    caps = set(hello["caps"])
    conv = hello.get("conventions") or {}
    failures = 0
    ran = 0
    snippet = None
    if not any(w in variant for w in ("compile", "flex")):
        # repro_snippet() must be standalone (no attnfuzz import) and compute what run() does.
        src = mod.repro_snippet(variant)
        if "import attnfuzz" in src or "from attnfuzz" in src:
            print(f"  FAIL {stack}/{variant}: repro_snippet imports attnfuzz")
            failures += 1
        snippet = {}
        exec(compile(src, f"repro_{stack}_{variant}.py", "exec"), snippet)
    for name, raw, extras in cases(quick):
        need = _needed_caps(raw, extras)
        lays = {raw[t]["layout"] for t in "qkv"}
        causal_conv = conv.get("causal", ["top_left", "bottom_right", "bottom_right_valid", "explicit"])
        uses_diag = raw["causal"] or raw["window"] != [-1, -1]
        if (need - caps or lays - set(hello["layouts"]) or raw["dtype"] not in hello["dtypes"]
                or (uses_diag and raw["diagonal"] not in causal_conv)):
            continue
        (q, k, v), (pq, pk, pv), qkv, mask, bmask = make_inputs(raw, extras)
        case = make_case(raw, qkv)
        known = KNOWN.get((stack, variant, name))
        try:
            res = target.run(case, pq, pk, pv, mask, bmask)
        except Unsupported as e:
            print(f"  unsupported  {stack}/{variant}: {name}: {e}")
            continue
        except Exception as e:  # noqa: BLE001
            lost = "CUDA error" in str(e)
            if known and known[0] == "raise" and known[1] in str(e):
                print(f"  known {stack}/{variant}: {name}: raises as {known[2]} shows")
            else:
                print(f"  FAIL {stack}/{variant}: {name}: raised {type(e).__name__}: {str(e).splitlines()[0]}")
                failures += 1
            if lost:
                print(f"  (CUDA context lost: the rest of {stack}/{variant} is not run)")
                return failures
            continue
        ran += 1
        keep = None
        if isinstance(res, Result):
            out, layout, keep = res.out, res.layout, res.dropout_keep
        else:
            out, layout = res, "bhsd"
        if keep is None and 0 < raw["dropout_p"] < 1:
            from attnfuzz.rng import dropout_keep
            keep = dropout_keep(raw["dropout_seed"], raw["dropout_p"], raw["batch"], raw["q_heads"],
                                raw["q_len"], raw["kv_len"])
        if snippet is not None and ran <= 4 and getattr(res, "dropout_keep", None) is None:
            s_out = snippet["attention"](case, pq, pk, pv, mask, bmask, keep)
            mine = canonical_out(out, layout, raw["q_heads"], raw["v_head_dim"])
            if not np.array_equal(np.asarray(s_out, np.float64), np.asarray(mine, np.float64),
                                  equal_nan=True):
                print(f"  FAIL {stack}/{variant}: {name}: repro_snippet's output differs from run's")
                failures += 1
        ref, dead = reference(raw, q, k, v, mask, bmask, keep)
        kit_ref = kit_reference(case, q, k, v, mask, bmask, keep)
        if kit_ref is not None and not np.allclose(kit_ref, ref, rtol=1e-9, atol=1e-12, equal_nan=True):
            print(f"  FAIL {stack}/{variant}: {name}: attnfuzz.reference and this test's reference disagree")
            failures += 1
        o = canonical_out(out, layout, raw["q_heads"], raw["v_head_dim"]).astype(np.float64)
        if o.shape != ref.shape:
            print(f"  FAIL {stack}/{variant}: {name}: shape {o.shape} != {ref.shape}")
            failures += 1
            continue
        atol, rtol = TOL[raw["dtype"]]
        if conv.get("masked_rows") == "nan":
            o = np.where(dead[..., None] & np.isnan(o), 0.0, o)
        vmax = float(np.max(np.abs(np.asarray(v, dtype=np.float64))))
        err = np.abs(o - ref)
        bad = ~(err <= atol * vmax + rtol * np.abs(ref))
        if known and known[0] == "wrong":
            print(f"  known {stack}/{variant}: {name}: " + (
                f"wrong as {known[2]} shows" if bad.any() else
                f"now right: fixed upstream? ({known[2]})"))
        elif known:
            print(f"  FAIL {stack}/{variant}: {name}: ran, but {known[2]} says it raises")
            failures += 1
        elif bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            print(f"  FAIL {stack}/{variant}: {name}: {int(bad.sum())} elements off, first {idx}: "
                  f"out {o[idx]!r} ref {ref[idx]!r}")
            failures += 1
        else:
            print(f"  ok   {stack}/{variant}: {name} (max err {float(np.nanmax(err)) if err.size else 0:.3g})")
    if ran == 0:
        print(f"  FAIL {stack}/{variant}: no case ran")
        failures += 1
    return failures


def _needed_caps(raw, extras):
    caps = {raw["dtype"]}
    if raw["allow_tf32"]:
        caps.add("tf32")
    if raw["q_heads"] != raw["kv_heads"]:
        caps.add("gqa")
    if raw["q_len"] != raw["kv_len"]:
        caps.add("cross")
    if raw["head_dim"] != raw["v_head_dim"]:
        caps.add("dv")
    if raw["scale"] is not None:
        caps.add("scale")
    if raw["softcap"] > 0:
        caps.add("softcap")
    if raw["additive_mask"]:
        caps.add("amask")
        if raw["additive_mask"]["dtype"] != raw["dtype"]:
            caps.add("mask_dtype")
        if raw["additive_mask"]["expanded"]:
            caps.add("strided")
    if raw["bool_mask"]:
        caps.add("bmask")
        if raw["bool_mask"]["expanded"]:
            caps.add("strided")
    if raw["causal"]:
        caps.add("causal")
    if raw["key_padding"] is not None:
        caps.add("padding")
    if raw["window"] != [-1, -1]:
        caps.add("window")
    if raw["dropout_p"] > 0:
        caps.add("dropout")
    if extras:
        caps.add("strided")
    return caps


def protocol_cases():
    """Cases whose tensors travel with real strides: permuted memory orders, padded rows,
    stride-0 batch/head broadcast, packed buffers, expanded masks."""
    c1 = base_case(layouts=("bshd", "bhsd", "bsd"), q_heads=4, kv_heads=2, q_len=6, kv_len=9,
                   causal=True, diagonal="bottom_right", additive_mask=mask_spec("bqk", expanded=True))
    c1["q"].update(perm=5, pad=3)
    c1["k"].update(broadcast="batch", perm=2)
    c1["v"].update(pad=1, perm=1)
    c2 = base_case(layout="qkv_channels_first", dtype="f16", bool_mask=mask_spec("hqk"))
    c2["q"].update(perm=2, pad=1)
    c3 = base_case(layout="qkv_bsh3d", key_padding=[3, 5], q_heads=3, kv_heads=3)
    c3["q"].update(perm=7)
    c4 = base_case(layouts=("sbhd", "channels_first", "bhsd"), scale=0.7, q_len=1, kv_len=4,
                   bool_mask=mask_spec("k", rank=2))
    c4["k"].update(perm=1, pad=2)
    c4["v"].update(broadcast="heads")
    return [("strided gqa cross causal bottom_right, expanded mask", c1),
            ("packed channels_first f16 permuted+padded, bool mask", c2),
            ("packed bsh3d permuted, key padding", c3),
            ("sbhd/channels_first/bhsd, broadcast heads, 2-D bool mask", c4)]


def protocol_check(stack, variant):
    """The worker end to end: `python -m attnfuzz.targets.STACK VARIANT` over pipes, hello,
    run frames built by attnfuzz.testing (the C side's strides), results checked against
    the float64 reference, bye."""
    try:
        from attnfuzz import layouts, protocol, testing
        from attnfuzz.case import Case
    except ImportError as e:
        print(f"  FAIL {stack}/{variant}: the protocol check needs the worker kit: {e}")
        return 1
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    failures = 0
    with testing.WorkerProcess([sys.executable, "-m", f"attnfuzz.targets.{stack}", variant], env=env) as w:
        h = w.hello
        if h.get("type") != "hello" or h.get("variant") != variant or not h.get("caps"):
            print(f"  FAIL {stack}/{variant}: bad hello {h}")
            return 1
        for rid, (name, raw) in enumerate(protocol_cases(), start=1):
            case = Case(raw)
            if T_needed(raw) - set(h["caps"]) or raw["dtype"] not in h.get("dtypes", [raw["dtype"]]):
                continue
            rng = np.random.default_rng(rid)
            B, Hq, Hkv, Sq, Sk = case.batch, case.q_heads, case.kv_heads, case.q_len, case.kv_len
            q = rng.standard_normal((B, Hq, Sq, case.head_dim))
            k = rng.standard_normal((B, Hkv, Sk, case.head_dim))
            v = rng.standard_normal((B, Hkv, Sk, case.v_head_dim))
            m = rng.standard_normal((B, Hq, Sq, Sk)) if case.amask else None
            bm = rng.random((B, Hq, Sq, Sk)) > 0.3 if case.bmask else None
            arrays = testing.physical_inputs(case, q, k, v, m, bm)
            # The canonical values as sent (a stride-0 dim keeps one copy).
            canon = [layouts.to_bhsd(arrays[n], case.layouts[n], hh, dd) for n, hh, dd in
                     (("q", Hq, case.head_dim), ("k", Hkv, case.head_dim), ("v", Hkv, case.v_head_dim))]
            header, payload = w.call(testing.run_frame(case, arrays, rid))
            if header.get("status") == "unsupported" and header.get("id") == rid:
                print(f"  unsupported  {stack}/{variant}: {name}: {header.get('reason')} (over the protocol)")
                continue
            if header.get("status") != "ok" or header.get("id") != rid:
                print(f"  FAIL {stack}/{variant}: {name}: {header}")
                failures += 1
                continue
            ent = {e["name"]: e for e in header["tensors"]}
            out = protocol.tensor_from_entry(ent["out"], payload)
            o = canonical_out(out, header.get("layout", "bhsd"), Hq, case.v_head_dim).astype(np.float64)
            raw_ref = dict(raw)
            ref, dead = reference(raw_ref, *canon, arrays.get("mask"), arrays.get("bool_mask"), None)
            if (h.get("conventions") or {}).get("masked_rows") == "nan":
                o = np.where(dead[..., None] & np.isnan(o), 0.0, o)
            atol, rtol = TOL[raw["dtype"]]
            vmax = float(np.max(np.abs(np.asarray(canon[2], np.float64))))
            bad = ~(np.abs(o - ref) <= atol * vmax + rtol * np.abs(ref))
            if bad.any():
                print(f"  FAIL {stack}/{variant}: {name}: {int(bad.sum())} elements off over the protocol")
                failures += 1
            else:
                print(f"  ok   {stack}/{variant}: {name} (over the protocol)")
        w.send(testing.BYE)
    return failures


def T_needed(raw):
    return _needed_caps(raw, ("strided",))


def check_unavailable():
    """A stack that does not import: available() is false with a reason, main exits 3."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(HERE, "..", "python") + os.pathsep + env.get("PYTHONPATH", "")
    failures = 0
    trt = importlib.import_module("attnfuzz.targets.tensorrt")
    for variant in trt.VARIANTS:
        ok, why = trt.available(variant)
        try:
            import tensorrt  # noqa: F401
            has = True
        except Exception:  # noqa: BLE001
            has = False
        if not has and (ok or "tensorrt" not in why.lower()):
            print(f"  FAIL tensorrt/{variant}: available() = {ok, why} without tensorrt")
            failures += 1
        if not has:
            p = subprocess.run([sys.executable, "-m", "attnfuzz.targets.tensorrt", variant],
                               env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if p.returncode != 3 or "tensorrt" not in p.stderr.lower() or p.stdout:
                print(f"  FAIL tensorrt/{variant}: exit {p.returncode}, stderr {p.stderr!r}, stdout {p.stdout!r}")
                failures += 1
            else:
                print(f"  ok   tensorrt/{variant}: exit 3: {p.stderr.strip()}")
    # A variant name nobody knows: exit 2.
    for stack in ("torch", "ort", "tensorrt"):
        p = subprocess.run([sys.executable, "-m", f"attnfuzz.targets.{stack}", "no_such_variant"],
                           env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if p.returncode != 2 or p.stdout:
            print(f"  FAIL {stack}: unknown variant exits {p.returncode}: {p.stderr!r}")
            failures += 1
        else:
            print(f"  ok   {stack}: unknown variant exits 2")
    # CUDA variants on a machine without a GPU: unavailable with a reason.
    tm = importlib.import_module("attnfuzz.targets.torch")
    import torch
    if not torch.cuda.is_available():
        for variant in tm.VARIANTS:
            if variant.startswith("cuda_"):
                ok, why = tm.available(variant)
                if ok or "cuda" not in why.lower():
                    print(f"  FAIL torch/{variant}: available() = {ok, why} without a GPU")
                    failures += 1
        print("  ok   torch/cuda_*: unavailable without a GPU")
    return failures


def main(argv):
    quick = "--quick" in argv
    proto = "--protocol" in argv
    argv = [a for a in argv if a not in ("--quick", "--protocol")]
    if argv and argv[0] == "--unavailable":
        f = check_unavailable()
        print("FAILED" if f else "PASSED")
        return 1 if f else 0
    stack, variants = argv[0], argv[1:]
    try:
        import attnfuzz.case  # noqa: F401
        import attnfuzz.worker  # noqa: F401
    except ImportError as e:
        print(f"SKIP: the worker kit is missing ({e})")
        return 77
    if len(variants) > 1 and any(v.startswith("cuda_") for v in variants):
        # One process per CUDA variant: a device fault poisons the whole process.
        rcs = [subprocess.call([sys.executable, os.path.abspath(__file__), stack, v]
                               + (["--quick"] if quick else []) + (["--protocol"] if proto else []))
               for v in variants]
        if all(rc == 77 for rc in rcs):
            return 77
        return 1 if any(rc not in (0, 77) for rc in rcs) else 0
    total = 0
    skipped = 0
    for variant in variants:
        f = run_variant(stack, variant, quick)
        if f is None:
            skipped += 1
            continue
        total += f
        if proto:
            total += protocol_check(stack, variant)
    if skipped == len(variants):
        return 77
    print("FAILED" if total else "PASSED")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
