"""serve(): an attention implementation as an attnfuzz worker (docs/design.md section 7,
docs/worker-protocol.md).

    from attnfuzz.worker import serve, Unsupported, Result

    def run(req):
        return my_attention(req.q, req.k, req.v)     # numpy [B, Hq, Sq, Dv] ("bhsd")

    serve(run, name="mine", version="1.0", caps=["f32", "gqa", "causal"], layouts=["bhsd"])

run gets one attnfuzz.request.Request: req.case (attnfuzz.case.Case), req.q, req.k, req.v as
numpy views with the case's physical layout and strides (float32, float16 or
ml_dtypes.bfloat16; for packed layouts three views of one buffer, req.qkv the whole buffer),
req.mask, the additive mask as sent (its own dtype, 2-D or 4-D, maybe stride 0), and
req.bool_mask, the boolean mask as sent. The views are read-only and valid only during the
call. It returns an array [B, Hq, Sq, Dv] in any float dtype, or Result(out, layout=...,
dropout_keep=..., compile_s=..., run_s=...); raise Unsupported("why") for a case it does not
run. Any other exception becomes status "error" with "ExcType: message" (traceback on
stderr). req.keep is the counter RNG's dropout keep mask (computed when first read).

The old positional form run(case, q, k, v, mask=None, bool_mask=None) keeps working: serve()
reads run's signature (attnfuzz.request.takes_request: one parameter is a request) and
calls an old-form run with the request's arguments, its case answering qkv, dout and
serving_tensors from the request (attnfuzz.request.CaseView).

Backward cases (a worker that declares the cap "backward"): req.case.grads names the
gradients asked for ("dq", "dk", "dv", "dmask"), req.dout is the upstream gradient dO in the
output layout (case.out_layout) with its strides; run returns Result(out, grads={"dq": ...})
with every gradient asked: dq, dk, dv in the result's layout like out (Hkv heads and Sk for
dk, dv), dmask at the additive mask's shape as sent (2-D or 4-D; a dimension the mask
broadcasts may come back full and is summed here).

Serving cases (caps "packed", "paged", "sinks", "alibi"; docs/worker-protocol.md): q, k, v
arrive in their physical forms (THD [T, H, D] when packed, the page caches
[P, page_size, H, D] when paged), req.tables holds the tables of the request
(cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, sinks, alibi_slopes: attnfuzz.serving),
and a packed case's output may come back as Result(out, layout="thd"), [Tq, Hq, Dv].

Softmax statistics (a worker that declares the cap "lse"): req.want_lse says the run asks for
them, and run returns Result(out, lse=...) with lse [B, Hq, Sq] (float32 or float64): per
query row the log of the sum of exp of its scaled, masked, soft-capped scores (a sink's term
included), -inf for a fully masked row; natural log, or base 2 where serve(lse_base=2)
declared it (the hello's "lse_base": attnfuzz converts). Statistics a run was not asked for
are not sent; a run asked may still return none.
"""

import math
import os
import sys
import time
import traceback

import numpy as np

from . import dtypes, layouts, protocol, rng
from .case import Case
from .request import Request, caller, old_form, takes_request

_FLOAT_NAMES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", dtypes.DTYPES["bf16"]: "bf16",
                np.dtype(np.float64): "f64"}


class Unsupported(Exception):
    """Raised by a run function for a case outside what it runs (not a finding)."""


class Result:
    """What a run function may return instead of a bare array.

    out: the output in layout (one of bhsd, bshd, sbhd, bsd, channels_first; its shape is
    that layout's output shape); dropout_keep: bool [B, Hq, Sq, Sk], the keep-mask the
    worker's own RNG drew (conventions dropout "keep_mask"); grads: {name: array} for a
    backward case (the module's doc); lse: [B, Hq, Sq] softmax statistics (the module's doc);
    compile_s, run_s: seconds (the kit reports compile_s 0 and measures run_s when they are
    None); guard_writes: the guard bands the run changed, attnfuzz.guard.writes() of the
    buffers the target handed the kernel (empty: none)."""

    __slots__ = ("out", "layout", "dropout_keep", "grads", "compile_s", "run_s", "lse", "guard_writes")

    def __init__(self, out, layout="bhsd", dropout_keep=None, compile_s=None, run_s=None, grads=None, lse=None,
                 guard_writes=None):
        self.out = out
        self.lse = lse
        self.guard_writes = guard_writes
        self.layout = layout
        self.dropout_keep = dropout_keep
        self.grads = grads
        self.compile_s = compile_s
        self.run_s = run_s


# The conventions a hello may declare and their values (docs/worker-protocol.md; the first
# is the default). "causal" is a list of diagonals; "scores", "products" and "denormals" may also be a
# list of dtypes (the case dtypes the convention holds for); "masked_rows" may also be a
# dict of values by dtype (a dtype it leaves out: "zero"); "fp8_probs" is a dict of FP8 format
# to its scale (a power of two).
CONVENTIONS = {
    "causal": ("top_left", "bottom_right", "bottom_right_valid", "explicit"),
    "masked_rows": ("zero", "nan", "mean", "unmasked"),
    "masked_values": ("exclude", "ieee"),
    "masked_keys": ("exclude", "ieee"),
    "lse_masked_rows": ("-inf", "zero", "inf", "nan"),
    "denormals": ("keep", "flush"),
    "scores": ("f32", "dtype"),
    "products": ("f32", "dtype"),
    "tf32": ("case", "always"),
    "dropout": ("counter", "keep_mask", "none"),
    "fp8_out": ("dtype", "v_amax"),
    # a dict of FP8 format to scale, a power of two (checked below)
    "fp8_probs": ("e4m3", "e5m2"),
}


def check_conventions(conventions):
    """Raises ValueError for a convention or value attnfuzz does not know (it would refuse
    the hello): a typo fails here, in the worker, not as a protocol error."""
    for key, value in (conventions or {}).items():
        if key not in CONVENTIONS:
            raise ValueError("unknown convention %r (known: %s)" % (key, ", ".join(CONVENTIONS)))
        allowed = CONVENTIONS[key]
        if key in ("scores", "products", "denormals") and isinstance(value, (list, tuple)):
            allowed, values = ("f32", "f16", "bf16"), value
        elif key == "masked_rows" and isinstance(value, dict):
            for dtype in value:
                if dtype not in ("f32", "f16", "bf16"):
                    raise ValueError("conventions masked_rows: %r is no case dtype" % (dtype,))
            values = list(value.values())
        elif key == "causal":
            values = value
        elif key == "fp8_probs":
            if not isinstance(value, dict):
                raise ValueError("conventions fp8_probs: %r is no dict of FP8 format to scale" % (value,))
            for fmt, scale in value.items():
                ok = isinstance(scale, (int, float)) and not isinstance(scale, bool) and 2.0 ** -30 <= scale <= 2.0 ** 30
                if not ok or math.frexp(scale)[0] != 0.5:
                    raise ValueError("conventions fp8_probs: the scale of %s, %r, is no power of two in [2^-30, 2^30]"
                                     % (fmt, scale))
            values = list(value)
        else:
            values = [value]
        for v in values:
            if v not in allowed:
                raise ValueError("conventions %s: %r is none of %s" % (key, v, ", ".join(allowed)))


def hello_header(name, version, caps, layouts, variant="", dtypes=None, limits=None, conventions=None,
                 compile_key=None, batch=None, libs=None, lse_base=None, deterministic=None, batch_invariant=None,
                 compile_timeout=None):
    """The hello frame's header serve() writes (conventions checked: check_conventions).
    libs: {name: version} of the stack and the libraries under it, and "sm" for the GPU in
    use ({"torch": "2.11.0", "cudnn": "9.19.0", "sm": "90"}): what known entries' needs
    are judged on (docs/known.md); values become strings, None values are left out.
    lse_base: 2 when the statistics it returns (cap "lse") are in base 2; None: natural log.
    deterministic: {"forward": bool, "backward": bool}, the passes two runs of one case give
    bitwise-equal results in (None: both; a pass left out: true), as the stack documents
    (e.g. a backward that accumulates with atomics); batch_invariant: True when a batch row's
    result is bitwise the same alone and in any batch (the determinism check and the
    batch_split relation, docs/worker-protocol.md). compile_timeout: seconds a first build
    may take (a JIT compiling with nvcc for minutes): attnfuzz raises its default
    --compile-timeout to it (an explicit --compile-timeout stays)."""
    check_conventions(conventions)
    h = {"type": "hello", "protocol": protocol.PROTOCOL, "name": str(name), "version": str(version),
         "variant": str(variant or ""), "caps": list(caps), "layouts": list(layouts)}
    if dtypes is None:
        dtypes = [d for d in ("f32", "f16", "bf16") if d in h["caps"]]
    h["dtypes"] = list(dtypes)
    if limits:
        h["limits"] = dict(limits)
    if conventions:
        h["conventions"] = dict(conventions)
    if compile_key is not None:
        h["compile_key"] = list(compile_key)
    if batch and int(batch) > 1:
        h["batch"] = int(batch)
    if libs:
        h["libs"] = {str(k): str(v) for k, v in dict(libs).items() if v is not None}
    if lse_base is not None:
        if lse_base != 2:
            raise ValueError("lse_base must be 2 (base-2 statistics) or None (natural log), not %r" % (lse_base,))
        h["lse_base"] = 2
    if deterministic is not None:
        bad = set(deterministic) - {"forward", "backward"}
        if bad or not all(isinstance(v, bool) for v in deterministic.values()):
            raise ValueError("deterministic must be {\"forward\": bool, \"backward\": bool}, not %r" % (deterministic,))
        h["deterministic"] = dict(deterministic)
    if batch_invariant:
        h["batch_invariant"] = True
    if compile_timeout is not None:
        if not isinstance(compile_timeout, (int, float)) or not 0 < compile_timeout <= 86400:
            raise ValueError("compile_timeout must be seconds in (0, 86400], not %r" % (compile_timeout,))
        h["compile_timeout"] = float(compile_timeout)
    return h


def _as_output(x):
    """x as a numpy float array the protocol can carry."""
    a = np.asarray(x)
    if a.dtype not in _FLOAT_NAMES:
        if a.dtype.kind == "f":
            a = a.astype(np.float64)
        else:
            raise TypeError("the output has dtype %s, not a float dtype" % a.dtype)
    return a


def _request(header, payload):
    """(id, Request) of one run request (a frame's header, or an item of a batch), its
    tensors views into payload, its keep mask the counter RNG's (computed when read)."""
    rid = header.get("id")
    views = protocol.tensors_from_header(header, payload)
    case = Case(header.get("case") or {}, header.get("derived"), header.get("tensors"))
    if case.grads and views.get("do") is None:
        raise protocol.ProtocolError("run %s: a backward case without tensor do" % (rid,))
    for n in ("q", "k", "v"):
        if n not in views:
            raise protocol.ProtocolError("run %s: tensor %s is missing" % (rid, n))
    return rid, Request.from_arrays(case, views, keep=rng.case_keep, want_lse=bool(header.get("want_lse")))


def lse_array(case, lse):
    """lse as the float32/float64 [B, Hq, Sq] array a result carries (other float dtypes
    become float32); ValueError for another shape."""
    a = np.asarray(lse)
    if a.dtype.kind != "f":
        raise TypeError("lse has dtype %s, not a float dtype" % a.dtype)
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float32)
    want = (case.batch, case.q_heads, case.q_len)
    if a.shape != want:
        raise ValueError("lse has shape %s, not [B, Hq, Sq] %s" % (list(a.shape), list(want)))
    return a


def _answer(rid, case, res, seconds, want_lse=False):
    """(result header without tensors, [(name, array)]) for what a run function returned
    (its statistics only when the run asked for them, want_lse)."""
    if isinstance(res, Result):
        out, lay, keep, compile_s, run_s = res.out, res.layout, res.dropout_keep, res.compile_s, res.run_s
    else:
        out, lay, keep, compile_s, run_s = res, "bhsd", None, None, None
    out = _as_output(out)
    if lay == "thd" and case.thd:   # a packed case's output in THD form
        want = (sum(case.seg_q(b) for b in range(case.batch)), case.q_heads, case.v_head_dim)
    else:
        want = layouts.out_shape(lay, case.batch, case.q_heads, case.q_len, case.v_head_dim)
    if out.shape != want:
        raise ValueError("the output has shape %s, the case's %s output is %s"
                         % (list(out.shape), lay, list(want)))
    arrays = [("out", out)]
    if keep is not None:
        keep = np.asarray(keep)
        kshape = (case.batch, case.q_heads, case.q_len, case.kv_len)
        if keep.shape != kshape:
            raise ValueError("dropout_keep has shape %s, not %s" % (list(keep.shape), list(kshape)))
        arrays.append(("dropout_keep", keep.astype(np.bool_, copy=False)))
    if case.grads:
        arrays += _grad_arrays(case, lay, res.grads if isinstance(res, Result) else None)
    if want_lse and isinstance(res, Result) and res.lse is not None:
        arrays.append(("lse", lse_array(case, res.lse)))
    h = {"id": rid, "status": "ok", "layout": lay,
         "timings": {"compile_s": float(compile_s or 0.0), "run_s": float(run_s if run_s is not None else seconds)}}
    gw = res.guard_writes if isinstance(res, Result) else None
    if gw:
        h["guard_writes"] = _guard_writes(gw)
    return h, arrays


_MARGINS = ("before", "after", "null_page", "page_tail")


def _guard_writes(gw):
    """The result member guard_writes (docs/worker-protocol.md) checked: at most 8 entries
    {"buffer": name, "margin": one of _MARGINS, "offset": N >= 0, "count": M >= 1}."""
    gw = list(gw)
    if len(gw) > 8:
        raise ValueError("guard_writes has %d entries, at most 8" % len(gw))
    out = []
    for e in gw:
        buf, margin, off, count = e["buffer"], e["margin"], int(e["offset"]), int(e["count"])
        if not isinstance(buf, str) or not buf or margin not in _MARGINS or off < 0 or count < 1:
            raise ValueError("guard_writes entry %r is not {buffer, margin (%s), offset >= 0, count >= 1}"
                             % (e, ", ".join(_MARGINS)))
        out.append({"buffer": buf, "margin": margin, "offset": off, "count": count})
    return out


def mask_grad_shape(case):
    """The 4-D shape of dmask: the additive mask's [B', Hq', Sq', Sk'] (1 where it broadcasts)."""
    full = case.amask.get("full_dims", "qk") if case.amask else ""
    dims = (case.batch, case.q_heads, case.q_len, case.kv_len)
    return tuple(n if c in full else 1 for n, c in zip(dims, "bhqk"))


def mask_grad(case, g):
    """A gradient of the additive mask at mask_grad_shape: given 2-D (a rank-2 mask's) or
    4-D with full dimensions where the mask broadcasts (an expanded mask's), which are summed."""
    want = mask_grad_shape(case)
    shape = g.shape
    if g.ndim == 2:
        g = g.reshape((1, 1) + g.shape)
    full = (case.batch, case.q_heads, case.q_len, case.kv_len)
    if g.ndim != 4 or any(n not in (w, f) for n, w, f in zip(g.shape, want, full)):
        raise ValueError("dmask has shape %s, the mask's is %s" % (list(shape), list(want)))
    axes = tuple(i for i, (n, w) in enumerate(zip(g.shape, want)) if n != w)
    return g.astype(np.float64).sum(axis=axes, keepdims=True) if axes else g


def _grad_arrays(case, lay, grads):
    """[(name, array)] of the gradients a backward case asked for, checked and in order:
    dq, dk, dv at their tensors' shapes in layout lay, dmask at mask_grad_shape (a full
    dimension where the mask broadcasts summed, a 2-D gradient given its leading 1s)."""
    grads = grads or {}
    extra = set(grads) - set(case.grads)
    if extra:
        raise ValueError("gradients %s were not asked for (asked: %s)" % (", ".join(sorted(extra)), ", ".join(case.grads)))
    B, Sq, Sk = case.batch, case.q_len, case.kv_len
    shapes = {"dq": layouts.out_shape(lay, B, case.q_heads, Sq, case.head_dim),
              "dk": layouts.out_shape(lay, B, case.kv_heads, Sk, case.head_dim),
              "dv": layouts.out_shape(lay, B, case.kv_heads, Sk, case.v_head_dim)}
    out = []
    for name in case.grads:
        if grads.get(name) is None:
            raise ValueError("the backward case asks for %s and the result has none" % name)
        g = _as_output(grads[name])
        if name == "dmask":
            g = mask_grad(case, g)
        elif g.shape != shapes[name]:
            raise ValueError("%s has shape %s, the case's %s %s is %s" % (name, list(g.shape), lay, name,
                                                                       list(shapes[name])))
        out.append((name, g))
    return out


class Fault(Exception):
    """What a batch function returns for the case that left the process unable to run
    another (a device fault: the CUDA context is lost), as its last result: that item is
    answered `crash` with the cause as its message, the items after it `not_run`, and
    serve() ends the process (exit 70) once the answer is written. attnfuzz then charges
    the crash to that case alone and sends the rest to a fresh worker."""

    def __init__(self, cause):
        super().__init__(_message(cause))


FAULT_EXIT = 70


def _refusal(rid, e):
    """The result header for an exception a run function raised."""
    if isinstance(e, Unsupported):
        return {"id": rid, "status": "unsupported", "reason": str(e)}
    traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    sys.stderr.flush()
    return {"id": rid, "status": "error", "message": _message(e)}


def _run_one(fn, header, payload):
    """The result header and payload parts for one run request (fn takes a request)."""
    rid, req = _request(header, payload)
    t0 = time.perf_counter()
    res = fn(req)
    h, arrays = _answer(rid, req.case, res, time.perf_counter() - t0, req.want_lse)
    entries, parts = protocol.entries_for(arrays)
    h.update(type="result", tensors=entries)
    return h, parts


def _run_batch(fn, batch_fn, items, payload):
    """The result frame (header, parts) for a batch's items: every item answered, in order,
    a failing one with its own status; batch_fn(requests) -> [result or exception] runs
    them all at once when given, else fn (which takes a request) one by one."""
    reqs = [_request(it, payload) if isinstance(it, dict) else None for it in items]
    if any(r is None for r in reqs):
        raise protocol.ProtocolError("a batch item is not an object")
    t0 = time.perf_counter()
    if batch_fn is not None:
        outs = list(batch_fn([r[1] for r in reqs]))
        short = len(outs) < len(reqs) and outs and isinstance(outs[-1], Fault)
        if len(outs) != len(reqs) and not short:
            raise RuntimeError("run_batch answered %d of %d cases" % (len(outs), len(reqs)))
    else:
        outs = []
        for r in reqs:
            try:
                outs.append(fn(r[1]))
            except Exception as e:  # noqa: BLE001 - a failing case is that item's status
                outs.append(e)
    per_case = (time.perf_counter() - t0) / max(1, len(outs))
    heads, arrays = [], []
    fault = False
    for i, r in enumerate(reqs):
        res = outs[i] if i < len(outs) else None
        if fault:
            h, a = {"id": r[0], "status": "not_run"}, []
        elif isinstance(res, Fault):
            fault = True
            h, a = {"id": r[0], "status": "crash", "message": str(res)}, []
        else:
            try:
                if isinstance(res, BaseException):
                    raise res
                h, a = _answer(r[0], r[1].case, res, per_case, r[1].want_lse)
            except Exception as e:  # noqa: BLE001
                h, a = _refusal(r[0], e), []
        heads.append(h)
        arrays.append(a)
    entries, parts = protocol.entries_for_items(arrays)
    for h, e in zip(heads, entries):
        if h["status"] == "ok":
            h["tensors"] = e
    return {"type": "result", "batch": heads}, parts, fault


def _message(e):
    msg = str(e)
    return "%s: %s" % (type(e).__name__, msg) if msg else type(e).__name__


def _frame_streams():
    """(input, output) binary streams for frames. stdout's descriptor is moved away and fd 1
    pointed at stderr, so a stray print (or a library writing to fd 1) cannot corrupt the
    stream."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, os.fdopen(fd, "wb", buffering=1 << 16)


def serve(run, name, version, caps, layouts, variant="", dtypes=None, limits=None, conventions=None,
          compile_key=None, stdin=None, stdout=None, batch=None, run_batch=None, libs=None, lse_base=None,
          deterministic=None, batch_invariant=None, compile_timeout=None):
    """Writes hello, then answers run frames with result frames until bye or end of input.

    run(req), or the old form run(case, q, k, v, mask=None, bool_mask=None): see the
    module's doc. dtypes defaults to the float caps among f32/f16/bf16. batch: the most
    cases a run frame may hold (declared in the hello; None or 1: one case per frame); a
    batch is answered case by case with run, or all at once by run_batch(items) -> [result
    or exception per case], items in run's form: requests (attnfuzz.request.Request) for
    run(req), tuples (case, q, k, v, mask, bool_mask) for the old form; a run_batch that
    meets a fault the process cannot go on from ends
    its list with a Fault: the rest is answered not_run and the process exits FAULT_EXIT.
    stdin/stdout (binary streams) default to the process's, with fd 1 moved so that nothing
    but frames reaches the real stdout. libs: the versions under it, lse_base: 2 for base-2
    statistics, deterministic and batch_invariant: what two runs may differ in, compile_timeout:
    how long a first build may take (hello_header). Returns 0 (a process exit status)."""
    if stdin is None or stdout is None:
        fin, fout = _frame_streams()
        stdin = stdin or fin
        stdout = stdout or fout
    hello = hello_header(name, version, caps, layouts, variant, dtypes, limits, conventions, compile_key, batch,
                         libs, lse_base, deterministic, batch_invariant, compile_timeout)
    try:
        if run_batch is not None and not takes_request(run):
            old_batch = run_batch
            run_batch = lambda reqs: old_batch([old_form(r) for r in reqs])  # noqa: E731
        return _loop(caller(run), run_batch, hello, stdin, stdout)
    except (BrokenPipeError, KeyboardInterrupt):
        # attnfuzz went away (or the campaign was interrupted): nobody reads an answer
        return 1
    except protocol.ProtocolError as e:
        # a frame that cannot be read leaves the stream out of step: stop
        print("attnfuzz worker %s: protocol: %s" % (name, e), file=sys.stderr)
        return 2


def _loop(run, run_batch, hello, stdin, stdout):
    protocol.write_frame(stdout, hello)
    reader = protocol.FrameReader(stdin)
    write = protocol.write_frame
    while True:
        frame = reader.read()
        if frame is None:
            return 0
        header, payload = frame
        typ = header.get("type")
        if typ == "bye":
            return 0
        rid = header.get("id")
        if typ != "run":
            write(stdout, {"type": "result", "id": rid, "status": "error",
                           "message": "protocol: unknown frame type %r" % (typ,)})
            continue
        items = header.get("batch")
        if items is not None:
            if not isinstance(items, list):
                raise protocol.ProtocolError("run: batch is not a list")
            h, parts, fault = _run_batch(run, run_batch, items, payload)
            write(stdout, h, parts)
            if fault:       # the process can run no other case: the answer said so
                stdout.flush()
                sys.stderr.flush()
                os._exit(FAULT_EXIT)
            del header, payload, h, parts
            continue
        try:
            h, parts = _run_one(run, header, payload)
        except Exception as e:  # noqa: BLE001 - every failure of the run becomes an error result
            write(stdout, dict(_refusal(rid, e), type="result"))
            continue
        write(stdout, h, parts)
        del header, payload, h, parts  # views into the frame buffer end here
