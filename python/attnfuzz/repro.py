"""Standalone repro scripts from attnfuzz bundles: python -m attnfuzz.repro BUNDLE -o FILE.

The script written is what a user attaches to an upstream bug report: it needs numpy and
the target's own stack, never attnfuzz. It holds
  - the bundle's inputs (base64 of .npy; a few KiB for a minimized finding), rebuilt in
    the case's physical layout and strides (what the target received),
  - the function that ran them: a shipped target's `repro_snippet(variant)`
    (`target:STACK/VARIANT`), or the run function of a `worker:python FILE` worker (the
    file's source, executed without its serving loop),
  - the float64 reference output and the recorded tolerance,
and prints the max abs error and the worst index, exiting 1 while the output is beyond
tolerance (an element fails when |out - ref| > atol + rtol |ref|, or when out and ref
differ in class: NaN, +Inf, -Inf, finite).

Exit status of this module: 0 written, 2 the bundle cannot be read or its backend has no
repro (a built-in or mutant backend: `attnfuzz replay` reproduces those)."""

import argparse
import base64
import io
import json
import os
import shlex
import sys

import numpy as np

SUFFIX = ".npy.zst"


def _read_array(path):
    import zstandard

    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".zst"):
        d = zstandard.ZstdDecompressor().decompressobj()
        data = d.decompress(data)
        if not d.eof:
            raise ValueError("%s: truncated zstd frame" % path)
    return np.load(io.BytesIO(data), allow_pickle=False)


def load_bundle(path):
    """case.json and every array of a bundle (a dict: "meta", "case", "q", "ref", ...)."""
    with open(os.path.join(path, "case.json"), "rb") as f:
        meta = json.loads(f.read().decode("utf-8"))
    if not isinstance(meta, dict) or not isinstance(meta.get("case"), dict):
        raise ValueError("%s/case.json: no \"case\" object" % path)
    out = {"meta": meta, "case": meta["case"]}
    for name in sorted(os.listdir(path)):
        if name.endswith(SUFFIX) and not name.startswith("."):
            out[name[: -len(SUFFIX)]] = _read_array(os.path.join(path, name))
    return out


def failing_backend(meta):
    """The first recorded backend whose verdict is a finding, else the first one."""
    backends = meta.get("backends") or []
    for b in backends:
        if b.get("verdict", "ok") != "ok":
            return b
    return backends[0] if backends else None


def _b64_npy(a):
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    text = base64.b64encode(buf.getvalue()).decode("ascii")
    return "\n".join(text[i : i + 96] for i in range(0, len(text), 96))


def _python_file_of(command):
    """FILE when a worker command is `python[3[.x]] [-u] FILE ...`, else None."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if len(argv) < 2 or not os.path.basename(argv[0]).startswith("python"):
        return None
    rest = [a for a in argv[1:] if a not in ("-u", "-B", "-s", "-E")]
    if rest and rest[0].endswith(".py"):
        return rest[0]
    return None


def function_source(backend, search_dirs=()):
    """(source, how) of `attention(case, q, k, v, mask, bool_mask)` for a backend name, or
    raises ValueError saying why there is none."""
    if backend.startswith("target:"):
        stack, _, variant = backend[len("target:") :].partition("/")
        import importlib

        mod = importlib.import_module("attnfuzz.targets." + stack)
        snippet = getattr(mod, "repro_snippet", None)
        if snippet is None:
            raise ValueError("attnfuzz.targets.%s has no repro_snippet" % stack)
        return snippet(variant), "the target's own API (attnfuzz.targets.%s, variant %s)" % (stack, variant)
    if backend.startswith("worker:"):
        command = backend[len("worker:") :]
        path = _python_file_of(command)
        if path is None:
            raise ValueError("worker command %r is not `python FILE`: its run function cannot be embedded" % command)
        candidates = [path] if os.path.isabs(path) else [os.path.join(d, path) for d in search_dirs] + [path]
        for c in candidates:
            if os.path.isfile(c):
                with open(c, "r", encoding="utf-8") as f:
                    src = f.read()
                return _WORKER_WRAPPER % {"src": repr(src), "path": path}, "the worker's run function (%s)" % path
        raise ValueError("worker file %s not found (looked in %s)" % (path, ", ".join(candidates)))
    raise ValueError("backend %r is built in: `attnfuzz replay` reproduces it" % backend)


# The worker's file runs under another __name__, with a stand-in for attnfuzz.worker so a
# kit worker's `serve(...)` does nothing; its `run` is the function under test.
_WORKER_WRAPPER = '''
_WORKER_SOURCE = %(src)s


def attention(case, q, k, v, mask=None, bool_mask=None):
    import types

    kit = types.ModuleType("attnfuzz.worker")

    class Unsupported(Exception):
        pass

    class Result:
        def __init__(self, out, layout="bhsd", dropout_keep=None, compile_s=None, run_s=None):
            self.out, self.layout = out, layout

    kit.serve = lambda *a, **kw: None
    kit.Unsupported, kit.Result = Unsupported, Result
    pkg = types.ModuleType("attnfuzz")
    pkg.worker = kit
    saved = {n: sys.modules.get(n) for n in ("attnfuzz", "attnfuzz.worker")}
    sys.modules.update({"attnfuzz": pkg, "attnfuzz.worker": kit})
    try:
        ns = {"__name__": "attnfuzz_repro_worker", "__file__": %(path)r}
        exec(compile(_WORKER_SOURCE, %(path)r, "exec"), ns)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    out = ns["run"](case, q, k, v, mask=mask, bool_mask=bool_mask)
    if isinstance(out, Result):
        return to_bhsd_output(np.asarray(out.out), out.layout, case)
    return out
'''

# Everything below goes into the script verbatim (it must not import attnfuzz).
_SCRIPT_LIB = r'''
def _arr(text):
    return np.load(io.BytesIO(base64.b64decode("".join(text.split()))), allow_pickle=False)


def _np_dtype(name):
    if name == "bf16":
        import ml_dtypes  # numpy has no bfloat16

        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f16": np.float16, "f64": np.float64, "bool": np.bool_}[name]


class Case:
    """The case as an object: case.json's fields plus derived values (scale in effect,
    diagonal offset and valid keys per batch row)."""

    def __init__(self, raw):
        self.raw = raw
        g = raw.get
        self.batch, self.q_heads, self.kv_heads = g("batch", 1), g("q_heads", 1), g("kv_heads", g("q_heads", 1))
        self.q_len, self.kv_len = g("q_len", 1), g("kv_len", g("q_len", 1))
        self.head_dim = g("head_dim", 1)
        self.v_head_dim = g("v_head_dim", self.head_dim)
        self.dtype, self.allow_tf32 = g("dtype", "f32"), bool(g("allow_tf32", False))
        self.scale_given = g("scale") is not None
        self.scale = float(g("scale")) if self.scale_given else 1.0 / float(np.sqrt(self.head_dim))
        self.placement = g("scale_placement", "scores")
        self.softcap = float(g("softcap", 0) or 0)
        self.causal = bool(g("causal", False))
        self.diagonal = g("diagonal", "top_left")
        self.key_padding = g("key_padding")
        self.valid_keys = list(self.key_padding) if self.key_padding else [self.kv_len] * self.batch
        off = {"top_left": lambda b: 0, "bottom_right": lambda b: self.kv_len - self.q_len,
               "bottom_right_valid": lambda b: self.valid_keys[b] - self.q_len,
               "explicit": lambda b: int(g("diagonal_offset", 0))}[self.diagonal]
        self.diag_offset = [off(b) for b in range(self.batch)]
        self.window = tuple(g("window", [-1, -1]))
        self.amask, self.bmask = g("additive_mask"), g("bool_mask")
        self.dropout_p, self.dropout_seed = float(g("dropout_p", 0) or 0), int(g("dropout_seed", 0) or 0)
        self.layouts = {t: (g(t) or {}).get("layout", "bhsd") for t in "qkv"}
        self.layout = self.layouts["q"]
        self.packed = self.layout.startswith("qkv_")
        self.qkv = None


def _perm_order(perm, ndim):
    """Lehmer code, perm 0 = identity: memory order of the dims (outermost first)."""
    avail, order = list(range(ndim)), []
    for pos in range(ndim):
        f = 1
        for i in range(2, ndim - pos):
            f *= i
        idx, perm = divmod(perm, f)
        order.append(avail.pop(idx))
    return order


def _place(a, spec, bcast_dims):
    """a (physical dim order) into a buffer with the spec's memory order, row padding
    and stride-0 dims, as attnfuzz lays it out."""
    ndim, n_perm = a.ndim, 1
    for i in range(2, a.ndim + 1):
        n_perm *= i
    order = _perm_order(int(spec.get("perm", 0)) % n_perm, ndim)
    pad = int(spec.get("pad", 0))
    strides, stride, innermost = [0] * ndim, 1, True
    for d in reversed(order):
        if d in bcast_dims:
            continue
        strides[d] = stride
        stride *= a.shape[d] + (pad if innermost else 0)
        innermost = False
    span = 1 + sum((n - 1) * s for n, s in zip(a.shape, strides)) if a.size else 0
    buf = np.zeros(span, dtype=a.dtype)
    item = a.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(buf, a.shape, [s * item for s in strides], writeable=True)
    src = a
    for d in bcast_dims:  # one copy along a stride-0 dim (the values agree along it)
        src = np.take(src, [0], axis=d)
    np.copyto(view, np.broadcast_to(src, a.shape))
    return np.lib.stride_tricks.as_strided(buf, a.shape, [s * item for s in strides], writeable=False)


def _physical(x, layout):
    """canonical [B, H, S, D] -> the layout's dim order (unpacked layouts)."""
    B, H, S, D = x.shape
    if layout == "bhsd":
        return x
    if layout == "bshd":
        return x.transpose(0, 2, 1, 3)
    if layout == "sbhd":
        return x.transpose(2, 0, 1, 3)
    if layout == "bsd":
        return x.transpose(0, 2, 1, 3).reshape(B, S, H * D)
    if layout == "channels_first":
        return x.transpose(0, 1, 3, 2).reshape(B, H * D, S)
    raise ValueError("unknown layout " + layout)


_BDIM = {"bhsd": 0, "bshd": 0, "sbhd": 1, "bsd": 0, "channels_first": 0, "qkv_bs3hd": 0, "qkv_bsh3d": 0,
         "qkv_channels_first": 0}
_HDIM = {"bhsd": 1, "bshd": 2, "sbhd": 2, "qkv_bs3hd": 3, "qkv_bsh3d": 2}


def _bcast_dims(layout, spec):
    b = spec.get("broadcast", "none")
    if b == "batch":
        return [_BDIM[layout]]
    if b == "heads" and layout in _HDIM:
        return [_HDIM[layout]]
    return []


def physical_inputs(case, q, k, v):
    """q, k, v (canonical float32 [B,H,S,D]) as the target received them: the case dtype,
    its layouts and strides; packed layouts as three views of one buffer (case.qkv)."""
    dt = _np_dtype(case.dtype)
    q, k, v = (np.asarray(t).astype(dt) for t in (q, k, v))
    raw, lay = case.raw, case.layout
    if case.packed:
        if lay == "qkv_bs3hd":
            whole = np.stack([_physical(t, "bshd") for t in (q, k, v)], axis=2)
        elif lay == "qkv_bsh3d":
            whole = np.stack([_physical(t, "bshd") for t in (q, k, v)], axis=3)
        else:
            whole = np.concatenate([_physical(t, "channels_first") for t in (q, k, v)], axis=1)
        spec = raw.get("q") or {}
        buf = _place(whole, spec, _bcast_dims(lay, spec))
        case.qkv = buf
        if lay == "qkv_bs3hd":
            return buf[:, :, 0], buf[:, :, 1], buf[:, :, 2]
        if lay == "qkv_bsh3d":
            return buf[:, :, :, 0], buf[:, :, :, 1], buf[:, :, :, 2]
        hd = q.shape[1] * q.shape[3]
        return buf[:, :hd], buf[:, hd : 2 * hd], buf[:, 2 * hd :]
    out = []
    for name, t in zip("qkv", (q, k, v)):
        spec = raw.get(name) or {}
        layout = spec.get("layout", "bhsd")
        out.append(_place(_physical(t, layout), spec, _bcast_dims(layout, spec)))
    return tuple(out)


def physical_mask(spec, m, dtype, full_shape):
    """A bundle mask (4-D, size 1 on broadcast dims) as implementations receive it: its
    own dtype, rank 2 or 4, broadcast dims expanded with stride 0 when `expanded`."""
    if m is None or spec is None:
        return None
    m = np.asarray(m).astype(dtype)
    if spec.get("expanded"):
        m = np.broadcast_to(m, full_shape)
    if int(spec.get("rank", 4)) == 2:
        m = m[0, 0]
    return m


def to_bhsd_output(out, layout, case):
    """An output in one of the five unpacked layouts as [B, Hq, Sq, Dv]."""
    B, H, S, D = case.batch, case.q_heads, case.q_len, case.v_head_dim
    if layout == "bhsd":
        return out
    if layout == "bshd":
        return out.transpose(0, 2, 1, 3)
    if layout == "sbhd":
        return out.transpose(1, 2, 0, 3)
    if layout == "bsd":
        return out.reshape(B, S, H, D).transpose(0, 2, 1, 3)
    if layout == "channels_first":
        return out.reshape(B, H, D, S).transpose(0, 1, 3, 2)
    raise ValueError("unknown output layout " + layout)


def compare(out, ref, atol, rtol):
    """(failing elements, max abs error over finite pairs, worst index, out, ref there)."""
    out = np.asarray(out, dtype=np.float64)
    if out.shape != ref.shape:
        raise SystemExit("output shape %s, reference %s" % (out.shape, ref.shape))

    def cls(x):
        return np.where(np.isnan(x), 1, np.where(np.isposinf(x), 2, np.where(np.isneginf(x), 3, 0)))

    class_bad = cls(out) != cls(ref)
    finite = np.isfinite(out) & np.isfinite(ref)
    err = np.where(finite, np.abs(out - ref), 0.0)
    bad = class_bad | (err > atol + rtol * np.abs(np.where(finite, ref, 0.0)))
    score = np.where(class_bad, np.inf, err / (atol + rtol * np.abs(np.where(finite, ref, 0.0))))
    worst = np.unravel_index(int(np.argmax(score)), score.shape) if score.size else ()
    return int(bad.sum()), float(err.max()) if err.size else 0.0, tuple(int(i) for i in worst)
'''

_SCRIPT_MAIN = r'''

def main():
    case = Case(CASE)
    q, k, v = physical_inputs(case, Q, K, V)
    full = (case.batch, case.q_heads, case.q_len, case.kv_len)
    mdt = _np_dtype((case.amask or {}).get("dtype", "f32")) if case.amask else None
    mask = physical_mask(case.amask, MASK, mdt, full) if case.amask else None
    bool_mask = physical_mask(case.bmask, BOOL_MASK, np.bool_, full) if case.bmask else None
    got = np.asarray(attention(case, q, k, v, mask=mask, bool_mask=bool_mask))
    out = got.astype(np.float64)
    bad, max_abs, worst = compare(out, REF, ATOL, RTOL)
    print("%s: %s" % (TITLE, FEATURES))
    print("output %s %s vs float64 reference: max abs error %.6g; %d of %d elements beyond "
          "tolerance (atol %.3g, rtol %.3g)" % (got.dtype, list(out.shape), max_abs, bad, out.size, ATOL, RTOL))
    if worst:
        print("worst element [b, h, i, d] = %s: got %r, reference %r" % (list(worst), float(out[worst]), float(REF[worst])))
    if bad:
        print("MISMATCH (recorded: %s)" % KIND)
        return 1
    print("within tolerance: the finding does not reproduce here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def write_repro(bundle_dir, out_path, search_dirs=()):
    """Writes the standalone script for a bundle's failing backend; raises ValueError
    (with the reason) when it has none."""
    b = load_bundle(bundle_dir)
    meta, case = b["meta"], b["case"]
    rec = failing_backend(meta)
    if rec is None:
        raise ValueError("%s/case.json: no backends recorded" % bundle_dir)
    backend = rec["name"]
    src, how = function_source(backend, search_dirs=tuple(search_dirs) + (os.getcwd(),))
    tol = meta.get("tolerance") or {}
    name = os.path.basename(os.path.normpath(bundle_dir))
    lines = [
        "#!/usr/bin/env python3",
        '"""Repro of attnfuzz finding %s (%s) of %s.' % (name, meta.get("kind", "?"), backend),
        "",
        "Runs %s on the finding's inputs and compares the output with the float64 reference" % how,
        "output recorded by attnfuzz; exit 1 while any element is beyond the recorded tolerance",
        "(|out - ref| > atol + rtol |ref|, or NaN/Inf where the reference has none or the",
        'other way around). Standalone: numpy and the stack under test only."""',
        "import base64",
        "import io",
        "import json",
        "import sys",
        "",
        "import numpy as np",
        "",
        "TITLE = %r" % ("%s %s" % (backend, name)),
        "KIND = %r" % meta.get("kind", "?"),
        "FEATURES = %r" % meta.get("features", ""),
        "CASE = json.loads(%r)" % json.dumps(case, sort_keys=True),
        "ATOL = %r" % float(tol.get("atol", 0.0) or 0.0),
        "RTOL = %r" % float(tol.get("rtol", 0.0) or 0.0),
    ]
    for key, var in (("q", "Q"), ("k", "K"), ("v", "V"), ("mask", "MASK"), ("bool_mask", "BOOL_MASK"), ("ref", "REF")):
        if key in b:
            lines.append('%s = _arr("""\n%s""")' % (var, _b64_npy(b[key])))
        else:
            lines.append("%s = None" % var)
    if b.get("ref") is None:
        raise ValueError("%s: no ref.npy.zst (the reference output)" % bundle_dir)
    body = "\n".join(lines[:13]) + "\n" + _SCRIPT_LIB + "\n" + "\n".join(lines[13:]) + "\n"
    body += "\n# --- the function under test " + "-" * 50 + "\n" + src.strip("\n") + "\n" + _SCRIPT_MAIN
    tmp = "%s.tmp.%d" % (out_path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
    os.chmod(tmp, 0o755)
    os.replace(tmp, out_path)
    return backend


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m attnfuzz.repro", description=__doc__.split("\n\n")[0])
    p.add_argument("bundle", help="a bundle directory (case.json, q/k/v/ref .npy.zst)")
    p.add_argument("-o", "--output", required=True, help="the script to write")
    p.add_argument("--search", action="append", default=[],
                   help="directory where a worker's relative FILE is looked for (repeatable; then the cwd)")
    a = p.parse_args(argv)
    try:
        backend = write_repro(a.bundle, a.output, a.search)
    except (OSError, ValueError, ImportError, KeyError) as e:
        print("attnfuzz.repro: %s: %s" % (a.bundle, e), file=sys.stderr)
        return 2
    print("attnfuzz.repro: %s -> %s (%s)" % (a.bundle, a.output, backend))
    return 0


if __name__ == "__main__":
    sys.exit(main())
