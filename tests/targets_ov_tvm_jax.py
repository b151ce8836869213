"""Self-test of the openvino, tvm and jax targets: each variant's run function, called
directly on a handful of cases (layouts packed and not, GQA, masks, causal diagonals, key
padding, windows, f16/bf16 where declared), against the float64 reference
(attnfuzz.reference); plus the measured conventions each variant declares (fully masked
rows, NaN behind masked keys) and a worker round trip through the protocol.

    PYTHONPATH=python .venv/bin/python tests/targets_ov_tvm_jax.py [STACK/VARIANT ...]

Exit 0 when every check passed (an unavailable stack is skipped, said on stdout), 1 when
one failed, 77 when every target named was unavailable. The last line is "N passed, N failed, N skipped".
"""

import importlib
import json
import os
import sys
import time
import traceback

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # jax workers share a GPU with this process

from attnfuzz import dtypes, layouts, masks, protocol, reference, testing
from attnfuzz.case import Case
from attnfuzz.worker import Result, Unsupported

TARGETS = ["openvino/sdpa", "openvino/explicit", "openvino/sdpa_nosnippets", "tvm/torch_sdpa", "tvm/torch_sdpa_decomp", "tvm/explicit", "tvm/relax_attention", "jax/xla", "jax/explicit",
           "jax/cudnn"]

# Variants whose fully masked rows follow neither declared convention: not checked row by
# row; check_conventions pins what they do. jax "xla" replaces masked logits by
# -0.7 * finfo.max (the row averages V over every key); jax "cudnn" adds that number as a
# bias (the row is plain attention over every key).
ODD_ROWS = {"jax/xla": "mean", "jax/cudnn": "unmasked"}

# Real stack bugs the fuzzer found (docs/findings.md): cases needing one of
# these caps must still come out wrong on that variant ("xfail"); a pass means the stack
# changed: update the finding and this table.
KNOWN_BUGS = {
    "tvm/torch_sdpa": {
        "gqa": "tvm's SDPA importer drops enable_gqa; R.nn.attention reads K/V as if Hkv == Hq",
        "scale": "tvm's SDPA importer drops the scale argument",
    },
}

# TVM compiles take 1 to 3 s a structure: its variants run these subsets (together: every
# layout family, GQA, masks, causal diagonals, padding, f16, dropout) to keep the test near
# a minute; `--random N SEED` covers more.
TVM_CASES = {
    "torch_sdpa": ("sbhd gqa bottom-right", "mixed layouts padding window", "qkv_channels_first additive 2-D",
                   "f16 f16 mask"),
    "torch_sdpa_decomp": ("qkv_bs3hd causal", "f16 bshd causal gqa"),
    "explicit": ("bsd additive 4-D mask + scale", "strided stride-0 kv, gqa 4:1", "dv != d explicit diagonal",
                 "dropout"),
    "relax_attention": ("sbhd gqa bottom-right", "qkv_bsh3d padding bottom-right-valid", "f16 bshd causal gqa",
                        "bsd additive 4-D mask + scale"),
}

# Tolerance per dtype: |out - ref| <= ATOL * max|V| + RTOL * |ref| (f16/bf16 outputs carry
# one final rounding plus P rounded to the dtype before P @ V).
ATOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}
RTOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}


def _case(**kw):
    c = {"batch": 2, "q_heads": 4, "kv_heads": 4, "q_len": 7, "kv_len": 7, "head_dim": 16, "dtype": "f32"}
    lay = kw.pop("layout", None)
    c.update(kw)
    if lay is not None:
        c["q"] = {"layout": lay}
        if lay not in ("qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first"):
            c["k"] = {"layout": lay}
            c["v"] = {"layout": lay}
    return c


def _amask(rank=4, full_dims="bhqk", dtype="f32", expanded=False):
    return {"rank": rank, "full_dims": full_dims, "dtype": dtype, "expanded": expanded}


CASES = [
    ("bhsd f32", _case(layout="bhsd")),
    ("bshd cross causal top-left", _case(layout="bshd", q_len=5, kv_len=9, causal=True)),
    ("sbhd gqa bottom-right", _case(layout="sbhd", q_heads=4, kv_heads=2, q_len=5, kv_len=9, causal=True,
                                    diagonal="bottom_right")),
    ("bsd additive 4-D mask + scale", _case(layout="bsd", q_len=6, kv_len=10, scale=0.3,
                                            additive_mask=_amask(full_dims="bqk"))),
    ("channels_first bool 2-D mask", _case(layout="channels_first", q_len=6, kv_len=6,
                                           bool_mask=_amask(rank=2, full_dims="qk"))),
    ("mixed layouts padding window", _case(q={"layout": "bshd"}, k={"layout": "bhsd"}, v={"layout": "sbhd"},
                                           q_len=6, kv_len=12, key_padding=[9, 12], window=[3, 1])),
    ("qkv_bs3hd causal", _case(layout="qkv_bs3hd", q_len=8, kv_len=8, causal=True)),
    ("qkv_bsh3d padding bottom-right-valid", _case(layout="qkv_bsh3d", q_len=8, kv_len=8, causal=True,
                                                   key_padding=[5, 8], diagonal="bottom_right_valid")),
    ("qkv_channels_first additive 2-D", _case(layout="qkv_channels_first", q_len=8, kv_len=8,
                                              additive_mask=_amask(rank=2, full_dims="qk"))),
    ("strided stride-0 kv, gqa 4:1", _case(q={"layout": "bhsd", "perm": 5, "pad": 3},
                                           k={"layout": "bshd", "broadcast": "batch"},
                                           v={"layout": "bhsd", "pad": 2}, q_heads=4, kv_heads=1)),
    ("dv != d explicit diagonal", _case(layout="bhsd", head_dim=16, v_head_dim=8, q_len=5, kv_len=9, causal=True,
                                        diagonal="explicit", diagonal_offset=2)),
    ("softcap", _case(layout="bhsd", softcap=2.0, scale=1.5)),
    ("f16 bshd causal gqa", _case(layout="bshd", dtype="f16", q_heads=4, kv_heads=2, q_len=9, kv_len=9,
                                  causal=True)),
    ("f16 f32 mask", _case(layout="bhsd", dtype="f16", additive_mask=_amask(full_dims="hqk", dtype="f32"))),
    ("f16 f16 mask", _case(layout="bhsd", dtype="f16", additive_mask=_amask(full_dims="bhqk", dtype="f16"))),
    ("bf16 qkv_bs3hd bool mask", _case(layout="qkv_bs3hd", dtype="bf16", q_len=8, kv_len=8,
                                       bool_mask=_amask(full_dims="bqk"))),
    ("dropout", _case(layout="bhsd", dropout_p=0.25, dropout_seed=12345)),
    # half-precision twins of the layout and mask cases (what f16/bf16-only kernels run)
    ("f16 sbhd cross padding", _case(layout="sbhd", dtype="f16", q_len=6, kv_len=10, key_padding=[7, 10])),
    ("f16 bsd 4-D mask + scale", _case(layout="bsd", dtype="f16", q_len=6, kv_len=10, scale=0.3,
                                       additive_mask=_amask(full_dims="bqk", dtype="f16"))),
    ("f16 qkv_channels_first causal window", _case(layout="qkv_channels_first", dtype="f16", q_len=8, kv_len=8,
                                                   causal=True, window=[3, -1])),
    ("f16 window both sides", _case(layout="bshd", dtype="f16", q_len=8, kv_len=8, window=[2, 1])),
    ("bf16 mixed layouts bottom-right gqa", _case(q={"layout": "bhsd"}, k={"layout": "sbhd"}, v={"layout": "bsd"},
                                                  dtype="bf16", q_heads=4, kv_heads=2, q_len=5, kv_len=9,
                                                  causal=True, diagonal="bottom_right")),
]


def needs(c):
    """The caps, dtype and layouts a case needs (what attnfuzz checks before sending)."""
    cs = Case(c)
    caps = {cs.dtype}
    if cs.q_heads != cs.kv_heads:
        caps.add("gqa")
    if cs.q_len != cs.kv_len:
        caps.add("cross")
    if cs.v_head_dim != cs.head_dim:
        caps.add("dv")
    if cs.scale_given:
        caps.add("scale")
    if cs.softcap > 0:
        caps.add("softcap")
    if cs.amask:
        caps.add("amask")
        if cs.amask.get("dtype", "f32") != cs.dtype:
            caps.add("mask_dtype")
    if cs.bmask:
        caps.add("bmask")
    if cs.causal:
        caps.add("causal")
    if cs.key_padding is not None:
        caps.add("padding")
    if cs.has_window:
        caps.add("window")
    if cs.dropout_p > 0:
        caps.add("dropout")
    s = cs.specs
    if any(s[n]["perm"] or s[n]["pad"] or s[n]["broadcast"] != "none" for n in "qkv"):
        caps.add("strided")
    return caps, cs.dtype, set(cs.layouts.values()), cs


def inputs_for(c, seed):
    """Canonical float64 inputs rounded to the case dtype, masks, and the physical arrays."""
    cs = Case(c)
    dt = dtypes.DTYPES[cs.dtype]
    r = np.random.default_rng(seed)
    B, Hq, Hkv, Sq, Sk, D, Dv = (cs.batch, cs.q_heads, cs.kv_heads, cs.q_len, cs.kv_len, cs.head_dim,
                                 cs.v_head_dim)
    q = r.standard_normal((B, Hq, Sq, D)).astype(dt).astype(np.float64)
    k = r.standard_normal((B, Hkv, Sk, D)).astype(dt).astype(np.float64)
    v = r.standard_normal((B, Hkv, Sk, Dv)).astype(dt).astype(np.float64)
    if cs.specs["k"]["broadcast"] == "batch":
        k[1:] = k[:1]
    mask = bmask = None
    full = (B, Hq, Sq, Sk)
    if cs.amask:
        fd = cs.amask.get("full_dims", "qk")
        shape = tuple(n if letter in fd else 1 for n, letter in zip(full, "bhqk"))
        mdt = dtypes.DTYPES[cs.amask.get("dtype", "f32")]
        mask = (r.standard_normal(shape) * 2).astype(mdt)
        mask[r.random(shape) < 0.2] = -np.inf
    if cs.bmask:
        fd = cs.bmask.get("full_dims", "qk")
        shape = tuple(n if letter in fd else 1 for n, letter in zip(full, "bhqk"))
        bmask = r.random(shape) > 0.3
    arrays = testing.physical_inputs(c, q, k, v, mask=mask, bool_mask=bmask)
    return q, k, v, arrays


def call_run(target, c, arrays):
    """Calls a target's run like the worker kit does: a Case with derived values and the
    request's tensor entries, read-only views."""
    cs = Case(c, testing.derived(c))
    cs.qkv = arrays.get("qkv")
    for a in arrays.values():
        a.flags.writeable = False
    res = target.run(cs, arrays["q"], arrays["k"], arrays["v"], mask=arrays.get("mask"),
                     bool_mask=arrays.get("bool_mask"))
    if isinstance(res, Result):
        out, lay = res.out, res.layout
    else:
        out, lay = res, "bhsd"
    out = np.asarray(out)
    want = layouts.out_shape(lay, cs.batch, cs.q_heads, cs.q_len, cs.v_head_dim)
    if out.shape != want:
        raise AssertionError("output shape %s, the %s output is %s" % (list(out.shape), lay, list(want)))
    return layouts.to_bhsd(out, lay, cs.q_heads, cs.v_head_dim), cs, res


def dead_rows(cs, mask, bool_mask):
    """bool [B, Hq, Sq]: query rows every key of which is masked (structural, boolean, or
    an additive -inf)."""
    full = (cs.batch, cs.q_heads, cs.q_len, cs.kv_len)
    ok = masks.live(cs, bool_mask)
    ok = np.ones(full, dtype=bool) if ok is None else np.broadcast_to(ok, full)
    if mask is not None:
        ok = ok & np.broadcast_to(masks.additive_bhsd(cs, mask) != -np.inf, full)
    return ~ok.any(axis=-1)


def check_close(name, out, ref, v, dtype, dead=None, rows="zero"):
    """out against ref within the dtype's tolerance; fully masked rows (dead) must follow
    the declared convention (rows: "zero", "nan", or None: not checked)."""
    out = np.asarray(out, dtype=np.float64)
    if dead is not None and dead.any():
        d = out[dead]
        if rows == "nan" and not (np.isnan(d) | (d == 0)).all():
            # NaN, or 0 where dropout zeroed a weight whatever the softmax gave
            raise AssertionError("%s: a fully masked row is neither NaN nor 0 (declared nan)" % name)
        if rows == "zero" and not (d == 0).all():
            raise AssertionError("%s: a fully masked row is not 0: %r" % (name, d[~(d == 0)][:3]))
        out = out.copy()
        out[dead] = ref[dead]
    scale = max(float(np.max(np.abs(v))), 1.0)
    tol = ATOL[dtype] * scale + RTOL[dtype] * np.abs(ref)
    bad = ~(np.abs(out - ref) <= tol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.abs(out - ref), -1)), out.shape)
        raise AssertionError("%s: %d of %d elements off, worst at %s: got %r, want %r"
                             % (name, int(bad.sum()), bad.size, list(i), out[i], ref[i]))


class Runner:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def ok(self, msg):
        self.passed += 1
        print("ok    " + msg)

    def fail(self, msg):
        self.failed += 1
        print("FAIL  " + msg)

    def skip(self, msg):
        self.skipped += 1
        print("skip  " + msg)


def test_variant(R, stack, variant, mod):
    hello = mod.caps_for(variant)
    caps, lays, dts = set(hello["caps"]), set(hello["layouts"]), set(hello["dtypes"])
    target = mod.Target(variant)
    tname = "%s/%s" % (stack, variant)
    known = KNOWN_BUGS.get(tname, {})
    for i, (label, c) in enumerate(CASES):
        if stack == "tvm" and label not in TVM_CASES.get(variant, ()):
            continue
        need, dt, need_lays, cs = needs(c)
        if not need <= caps or dt not in dts or not need_lays <= lays:
            continue  # attnfuzz would not send it
        lim = hello.get("limits", {})
        mult = lim.get("head_dim_multiple", 1)
        if cs.head_dim % mult or cs.v_head_dim % mult:
            continue
        q, k, v, arrays = inputs_for(c, 1000 + i)
        try:
            out, cs, _ = call_run(target, c, arrays)
        except Unsupported as e:
            R.fail("%s %s: unsupported on a declared case: %s" % (tname, label, e))
            continue
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            R.fail("%s %s: %s: %s" % (tname, label, type(e).__name__, e))
            continue
        ref = reference.attention(cs, q, k, v, mask=arrays.get("mask"), bool_mask=arrays.get("bool_mask"))
        dead = dead_rows(cs, arrays.get("mask"), arrays.get("bool_mask"))
        rows = hello["conventions"].get("masked_rows", "zero")
        if tname in ODD_ROWS:
            rows = None
        bugs = [known[f] for f in sorted(need) if f in known]
        try:
            check_close(label, out, ref, v, dt, dead, rows)
        except AssertionError as e:
            if bugs:
                R.ok("%s %s: wrong as expected (%s)" % (tname, label, "; ".join(bugs)))
            else:
                R.fail("%s %s" % (tname, e))
            continue
        if bugs:
            R.fail("%s %s: passes, but a known bug should break it (%s): update KNOWN_BUGS and the finding"
                   % (tname, label, "; ".join(bugs)))
        else:
            R.ok("%s %s" % (tname, label))
    if stack == "openvino":
        check_ov_precision(R, tname, target)
    check_conventions(R, tname, target, hello)
    check_cache(R, tname, target, "f32" if "f32" in hello["dtypes"] else hello["dtypes"][0])


def check_ov_precision(R, tname, target):
    """Every compiled model computes at its case's precision, read back from the compiled
    model: f32 cases at f32 (the CPU plugin's default is bf16 on AVX512_BF16 / AMX CPUs), bf16
    at bf16, f16 at f16 where the CPU runs f16 natively and at f32 elsewhere, never at the
    bf16 default the plugin keeps when it ignores an f16 hint."""
    import openvino as ov
    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    want = {"f32": "f32", "bf16": "bf16" if "BF16" in caps else "f32", "f16": "f16" if "FP16" in caps else "f32"}
    names = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
    seen = {}
    for compiled, _, cfg in list(target.cache._d.values()):
        hint = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
        w = want[cfg["dtype"]]
        seen[cfg["dtype"]] = seen.get(cfg["dtype"], 0) + 1
        if "'%s'" % names[w] not in hint:
            R.fail("%s: a %s model compiled with INFERENCE_PRECISION_HINT %s, want %s"
                   % (tname, cfg["dtype"], hint, names[w]))
            return
    (R.ok if seen.get("f32") and seen.get("f16") else R.fail)(
        "%s: models compiled at their precision (%s; CPU capabilities %s)"
        % (tname, ", ".join("%d %s at %s" % (n, d, want[d]) for d, n in sorted(seen.items())), " ".join(caps)))


def check_conventions(R, tname, target, hello):
    """A fully masked row (bool mask row all False) must give what the variant declares, and
    NaN behind a masked key must not leak unless it declares masked_values "ieee"."""
    conv = hello.get("conventions", {})
    caps = set(hello["caps"])
    dt = "f32" if "f32" in hello["dtypes"] else hello["dtypes"][0]
    if "bmask" not in caps:
        return
    c = _case(layout="bhsd", dtype=dt, batch=1, q_heads=2, kv_heads=2, q_len=4, kv_len=4,
              bool_mask=_amask(rank=2, full_dims="qk"))
    r = np.random.default_rng(7)
    q, k, v = (r.standard_normal((1, 2, 4, 16)).astype(dtypes.DTYPES[dt]).astype(np.float64) for _ in range(3))
    bm = np.ones((4, 4), dtype=bool)
    bm[2, :] = False          # query row 2 attends to nothing
    bm[:, 1] = False          # key 1 masked for every query
    out, cs, _ = call_run(target, c, testing.physical_inputs(c, q, k, v, bool_mask=bm))
    row = out[0, :, 2, :]
    want_rows = conv.get("masked_rows", "zero")
    if ODD_ROWS.get(tname) == "mean":
        msg, good = "fully masked row = mean of V over all keys", bool(np.allclose(row, v[0].mean(axis=1), atol=1e-2))
    elif ODD_ROWS.get(tname) == "unmasked":
        plain = reference.attention(Case(_case(layout="bhsd", dtype=dt, batch=1, q_heads=2, kv_heads=2, q_len=4,
                                               kv_len=4)), q, k, v)[0, :, 2, :]
        msg, good = "fully masked row = attention over all keys", bool(np.allclose(row, plain, atol=1e-2))
    elif want_rows == "nan":
        msg, good = "fully masked row is NaN (declared)", bool(np.isnan(row).all())
    else:
        msg, good = "fully masked row is 0 (declared)", bool((row == 0).all())
    (R.ok if good else R.fail)("%s %s: got %s" % (tname, msg, row[0, :3]))
    v[:, :, 1, :] = np.nan    # NaN behind the masked key
    out, cs, _ = call_run(target, c, testing.physical_inputs(c, q, k, v, bool_mask=bm))
    live = np.delete(out[0], 2, axis=1)
    leak = bool(np.isnan(live).any())
    if conv.get("masked_values", "exclude") == "ieee":
        # "ieee" allows the leak; it does not require it
        R.ok("%s NaN behind a masked key: %s (declared ieee)" % (tname, "leaks" if leak else "no leak"))
    else:
        (R.fail if leak else R.ok)("%s NaN behind a masked key does not leak (declared exclude)" % tname)


def check_cache(R, tname, target, dtype):
    """A second value draw of one structure reuses the compiled artifact (compile_s 0) and
    runs well above 20 executions per second."""
    c = _case(layout="bshd", q_len=16, kv_len=16, causal=True, dtype=dtype)
    if not hasattr(target, "cache"):
        return
    times = []
    for seed in range(8):
        q, k, v, arrays = inputs_for(c, seed)
        t0 = time.perf_counter()
        try:
            _, _, res = call_run(target, c, arrays)
        except Unsupported:
            return
        times.append(time.perf_counter() - t0)
    n = len(target.cache)
    rate = 1.0 / max(np.median(times[1:]), 1e-9)
    good = rate >= 20 and isinstance(res, Result) and not res.compile_s
    (R.ok if good else R.fail)("%s compiled structure reused: %.0f execs/s, cache %d, compile_s %s"
                               % (tname, rate, n, getattr(res, "compile_s", None)))


def check_snippet(R, name, mod, variant):
    """repro_snippet's attention(case, q, k, v, ...) runs standalone on one packed causal case
    with a mask and matches the reference."""
    ns = {}
    try:
        exec(compile(mod.repro_snippet(variant), "<repro %s>" % name, "exec"), ns)
    except Exception as e:  # noqa: BLE001
        R.fail("%s repro_snippet: %s: %s" % (name, type(e).__name__, e))
        return
    dt = mod.caps_for(variant)["dtypes"][0]
    c = _case(layout="qkv_bs3hd", dtype=dt, q_len=8, kv_len=8, causal=True, bool_mask=_amask(full_dims="bqk"))
    q, k, v, arrays = inputs_for(c, 5)
    cs = Case(c, testing.derived(c))
    cs.qkv = arrays["qkv"]
    try:
        out = ns["attention"](cs, arrays["q"], arrays["k"], arrays["v"], bool_mask=arrays.get("bool_mask"))
        out = layouts.to_bhsd(np.asarray(out), "bshd", cs.q_heads, cs.v_head_dim)
        ref = reference.attention(cs, q, k, v, bool_mask=arrays.get("bool_mask"))
        rows = None if name in ODD_ROWS else mod.caps_for(variant)["conventions"].get("masked_rows", "zero")
        check_close("repro_snippet", out, ref, v, dt, dead_rows(cs, None, arrays.get("bool_mask")), rows)
        R.ok("%s repro_snippet runs standalone and matches" % name)
    except Exception as e:  # noqa: BLE001
        R.fail("%s repro_snippet: %s: %s" % (name, type(e).__name__, e))


def check_protocol(R, stack, variant):
    """The variant as a worker process: hello declares it, a run frame of a packed GQA-free
    causal case comes back right, bye ends it with status 0."""
    tname = "%s/%s" % (stack, variant)
    mod = importlib.import_module("attnfuzz.targets." + stack)
    dt = mod.caps_for(variant)["dtypes"][0]
    c = _case(layout="qkv_bsh3d", dtype=dt, q_len=8, kv_len=8, causal=True)
    q, k, v, arrays = inputs_for(c, 99)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    argv = [sys.executable, "-m", "attnfuzz.targets." + stack, variant]
    try:
        with testing.WorkerProcess(argv, env=env) as w:
            h = w.hello
            good = (h.get("type") == "hello" and h.get("name") == stack and h.get("variant") == variant
                    and set(mod.caps_for(variant)["caps"]) == set(h.get("caps", ())))
            header, payload = w.call(testing.run_frame(c, arrays, rid=5))
            status = w.close()
    except Exception as e:  # noqa: BLE001
        R.fail("%s worker: %s: %s" % (tname, type(e).__name__, e))
        return
    if not good:
        R.fail("%s worker hello: %r" % (tname, h))
        return
    if header.get("status") != "ok" or header.get("id") != 5 or status != 0:
        R.fail("%s worker result: %r, exit %s" % (tname, header, status))
        return
    out = protocol.tensors_from_header(header, payload)["out"]
    cs = Case(c, testing.derived(c))
    out = layouts.to_bhsd(out, header.get("layout", "bhsd"), cs.q_heads, cs.v_head_dim)
    ref = reference.attention(cs, q, k, v)
    try:
        check_close("worker", out, ref, v, dt)
        R.ok("%s worker: hello, one run, bye" % tname)
    except AssertionError as e:
        R.fail("%s %s" % (tname, e))


def random_case(r, hello):
    """A random case within what hello declares (small shapes: each draw may compile)."""
    caps, dts = set(hello["caps"]), hello["dtypes"]
    mult = hello.get("limits", {}).get("head_dim_multiple", 1)
    dt = str(r.choice(dts))
    hkv = int(r.integers(1, 4))
    hq = hkv * (int(r.integers(1, 4)) if "gqa" in caps else 1)
    sq = int(r.integers(1, 13))
    sk = int(r.integers(1, 13)) if "cross" in caps else sq
    d = mult * int(r.integers(1, 4)) * (8 // mult if mult < 8 else 1)
    dv = d if "dv" not in caps or r.random() < 0.5 else mult * int(r.integers(1, 4)) * (8 // mult if mult < 8 else 1)
    c = {"batch": int(r.integers(1, 4)), "q_heads": hq, "kv_heads": hkv, "q_len": sq, "kv_len": sk, "head_dim": d,
         "v_head_dim": dv, "dtype": dt}
    packed_ok = hq == hkv and sq == sk and d == dv
    lays = [x for x in hello["layouts"] if packed_ok or not x.startswith("qkv_")]
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
    if lay.startswith("qkv_"):
        c["q"] = spec(lay)
    else:
        unp = [x for x in lays if not x.startswith("qkv_")]
        c["q"] = spec(lay)
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
            m = {"rank": rank, "full_dims": fd, "expanded": bool(r.random() < 0.2)}
            if name == "additive_mask":
                m["dtype"] = str(r.choice(["f32", "f16", "bf16"])) if "mask_dtype" in caps else dt
            c[name] = m
    if "causal" in caps and r.random() < 0.4:
        c["causal"] = True
    diags = hello.get("conventions", {}).get("causal", ["top_left"])
    c["diagonal"] = str(r.choice(diags))
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
    return c


def random_inputs(c, r):
    """Canonical inputs like inputs_for, with masks drawn for the random case's specs."""
    cs = Case(c)
    dt = dtypes.DTYPES[cs.dtype]
    B, Hq, Hkv, Sq, Sk, D, Dv = (cs.batch, cs.q_heads, cs.kv_heads, cs.q_len, cs.kv_len, cs.head_dim,
                                 cs.v_head_dim)
    mag = 10.0 ** r.uniform(-1, 0)     # well-conditioned scores: this check has no honest-error bound
    q = (r.standard_normal((B, Hq, Sq, D)) * mag).astype(dt).astype(np.float64)
    k = (r.standard_normal((B, Hkv, Sk, D)) * mag).astype(dt).astype(np.float64)
    v = r.standard_normal((B, Hkv, Sk, Dv)).astype(dt).astype(np.float64)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if cs.specs[name]["broadcast"] == "batch":
            x[1:] = x[:1]
    if cs.packed and any(cs.specs[n]["broadcast"] == "batch" for n in "qkv"):
        for x in (q, k, v):
            x[1:] = x[:1]
    full = (B, Hq, Sq, Sk)
    mask = bmask = None
    if cs.amask:
        shape = tuple(n if letter in cs.amask.get("full_dims", "qk") else 1 for n, letter in zip(full, "bhqk"))
        mask = (r.standard_normal(shape) * 2).astype(dtypes.DTYPES[cs.amask.get("dtype", "f32")])
        mask[r.random(shape) < 0.2] = -np.inf
    if cs.bmask:
        shape = tuple(n if letter in cs.bmask.get("full_dims", "qk") else 1 for n, letter in zip(full, "bhqk"))
        bmask = r.random(shape) > 0.3
    return q, k, v, mask, bmask


def random_smoke(names, n, seed):
    """n random cases per variant against the reference; prints each mismatch and a summary."""
    R = Runner()
    r = np.random.default_rng(seed)
    for name in names:
        stack, variant = name.split("/")
        mod = importlib.import_module("attnfuzz.targets." + stack)
        ok, why = mod.available(variant)
        if not ok:
            R.skip("%s: %s" % (name, why))
            continue
        hello = mod.caps_for(variant)
        target = mod.Target(variant)
        rows = None if name in ODD_ROWS else hello["conventions"].get("masked_rows", "zero")
        known = KNOWN_BUGS.get(name, {})
        t0 = time.perf_counter()
        bad = unsup = known_bad = 0
        for i in range(n):
            c = random_case(r, hello)
            q, k, v, mask, bmask = random_inputs(c, r)
            arrays = testing.physical_inputs(c, q, k, v, mask=mask, bool_mask=bmask)
            try:
                out, cs, _ = call_run(target, c, arrays)
            except Unsupported:
                unsup += 1
                continue
            except Exception as e:  # noqa: BLE001
                bad += 1
                print("ERROR %s %s: %s: %s" % (name, json.dumps(c), type(e).__name__, str(e).splitlines()[0][:200]))
                continue
            ref = reference.attention(cs, q, k, v, mask=arrays.get("mask"), bool_mask=arrays.get("bool_mask"))
            try:
                check_close("random", out, ref, v, cs.dtype, dead_rows(cs, arrays.get("mask"),
                                                                        arrays.get("bool_mask")), rows)
            except AssertionError as e:
                if any(f in known for f in needs(c)[0]):
                    known_bad += 1
                    continue
                bad += 1
                print("DIVERGE %s %s: %s" % (name, json.dumps(c), e))
        dt = time.perf_counter() - t0
        msg = "%s random: %d cases, %d bad, %d wrong by a known bug, %d unsupported, %.1f cases/s" % (
            name, n, bad, known_bad, unsup, n / dt)
        (R.fail if bad else R.ok)(msg)
    print("%d passed, %d failed, %d skipped" % (R.passed, R.failed, R.skipped))
    return 1 if R.failed else 0


def main(argv):
    if argv and argv[0] == "--random":
        n, seed = int(argv[1]), int(argv[2])
        return random_smoke(argv[3:] or TARGETS, n, seed)
    names = argv or TARGETS
    R = Runner()
    t0 = time.time()
    round_tripped = set()
    for name in names:
        stack, variant = name.split("/")
        mod = importlib.import_module("attnfuzz.targets." + stack)
        ok, why = mod.available(variant)
        if not ok:
            R.skip("%s: %s" % (name, why))
            continue
        check_snippet(R, name, mod, variant)
        test_variant(R, stack, variant, mod)
        if stack not in round_tripped:     # one worker process per stack: the serve path is shared
            round_tripped.add(stack)
            check_protocol(R, stack, variant)
    print("time %.1f s" % (time.time() - t0))
    print("%d passed, %d failed, %d skipped" % (R.passed, R.failed, R.skipped))
    if R.failed:
        return 1
    return 77 if R.skipped and not R.passed else 0  # 77: ctest's SKIP_RETURN_CODE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
