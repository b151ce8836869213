"""Standalone repro scripts from attnfuzz bundles: python -m attnfuzz.repro BUNDLE -o FILE.

The script written is what a user attaches to an upstream bug report: it needs numpy and
the target's own stack, never attnfuzz. It holds
  - the bundle's inputs (base64 of .npy; a few KiB for a minimized finding), rebuilt in
    the case's physical layout and strides (what the target received),
  - the function that ran them: a shipped target's `repro_snippet(variant)`
    (`target:STACK/VARIANT`: the snippet of the module whose class runs the variant,
    attnfuzz.targets._base.Stack.repro_snippet), or the run function of a `worker:python
    FILE` worker (the file's source, executed without its serving loop),
  - the float64 reference output and the recorded tolerance; for a backward finding also
    dO and each gradient's reference, and the snippet's `gradients(...)` runs the backward
    the way a training step does (a snippet without one: the forward alone),
  - copies of attnfuzz.case, attnfuzz.layouts, attnfuzz.rng and attnfuzz.request (numpy and
    math only) that rebuild the request (the case object, the physical inputs, the dropout
    keep mask) exactly as the worker kit hands it to a target; the function under test is
    called as attention(req) (gradients(req)), or in the old positional form
    attention(case, q, k, v, mask=, bool_mask=, keep=) (gradients(case, q, k, v, dout, ...))
    where it takes more than one parameter (attnfuzz.request.takes_request),
and prints the max abs error and the worst index, exiting 1 while the output is beyond
tolerance (an element fails when |out - ref| > atol + rtol |ref|, or when out and ref
differ in class: NaN, +Inf, -Inf, finite).

Exit status of this module: 0 written, 2 the bundle cannot be read or its backend has no
repro (a built-in or mutant backend: `attnfuzz replay` reproduces those)."""

import argparse
import ast
import base64
import inspect
import io
import json
import os
import shlex
import sys

import numpy as np

from attnfuzz import bundle, case as case_module, layouts, request as request_module, rng


def load_bundle(path):
    """case.json and every array of a bundle (attnfuzz.bundle.load: every read bounded by
    what the case allows): a dict with "meta", "case", "q", "ref", ..."""
    return bundle.load(path)


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
    """(source, how) of `attention(req)` (or the old form) for a backend name, or raises
    ValueError saying why there is none."""
    if backend.startswith("target:"):
        stack, _, variant = backend[len("target:") :].partition("/")
        import importlib

        decl = importlib.import_module("attnfuzz.targets." + stack).STACK
        try:
            src = decl.repro_snippet(variant)
        except AttributeError:
            raise ValueError("the module that runs %s/%s has no repro_snippet" % (stack, variant)) from None
        return src, "the target's own API (attnfuzz.targets.%s, variant %s)" % (stack, variant)
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


def attention(req):
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
    out = _request.caller(ns["run"])(req)
    layout = out.layout if isinstance(out, Result) else "bhsd"
    out = np.asarray(out.out if isinstance(out, Result) else out)
    return _layouts.to_bhsd(out, layout, req.case.q_heads, req.case.v_head_dim)
'''

# The script's library: attnfuzz.case, attnfuzz.layouts, attnfuzz.rng and attnfuzz.request
# copied as module objects (_case, _layouts, _rng, _request: their names stay apart from the
# function under test's), and the glue. Nothing here imports attnfuzz.
LIBRARY = (("_case", case_module), ("_layouts", layouts), ("_rng", rng), ("_request", request_module))

_SCRIPT_GLUE = r'''
def _arr(text):
    return np.load(io.BytesIO(base64.b64decode("".join(text.split()))), allow_pickle=False)


def _module(name, source):
    """A module object from source (a copy of one of attnfuzz's numpy-only modules)."""
    import types
    m = types.ModuleType(name)
    exec(compile(source, "<attnfuzz.%s, copied>" % name.lstrip("_"), "exec"), m.__dict__)
    return m


def compare(out, ref, atol, rtol):
    """(failing elements, max abs error over finite pairs, worst index)."""
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


def as_mask_grad(g, ref):
    """A mask gradient as the function under test gives it (the mask's shape as sent: 2-D,
    4-D, or full where an expanded mask broadcasts) at the reference's 4-D shape."""
    g = np.asarray(g, dtype=np.float64)
    g = g.reshape((1,) * (4 - g.ndim) + g.shape)
    axes = tuple(i for i in range(4) if g.shape[i] != ref.shape[i])
    return g.sum(axis=axes, keepdims=True) if axes else g


def inputs(raw, q, k, v, mask, bool_mask, dout=None):
    """The request the target received: physical q, k, v in the case's dtype, layouts and
    strides (req.qkv the packed buffer), the masks in their own dtype, rank and stride-0
    form, a backward case's dO in the output layout (req.dout), and the dropout keep mask
    (None without dropout)."""
    case = _case.Case(raw)
    arrays = _layouts.physical_inputs(case, q, k, v, mask, bool_mask, dout=dout)
    keep = None
    if 0 < case.dropout_p < 1:
        keep = _rng.dropout_keep(case.dropout_seed, case.dropout_p, case.batch, case.q_heads, case.q_len,
                                 case.kv_len)
    return _request.Request.from_arrays(case, arrays, keep=keep)


def call_under_test(fn, req, grads=False):
    """fn (attention or gradients) on the request: fn(req), or the old positional form
    fn(case, q, k, v[, dout], mask=, bool_mask=, keep=) with the case answering qkv and
    dout (attnfuzz.request.takes_request decides)."""
    if _request.takes_request(fn):
        return fn(req)
    case, q, k, v, mask, bool_mask = _request.old_form(req)
    lead = (case, q, k, v, req.dout) if grads else (case, q, k, v)
    return fn(*lead, mask=mask, bool_mask=bool_mask, keep=req.keep)
'''


def _module_source(mod):
    """A module's source without its docstring (kept as the first line's comment)."""
    src = inspect.getsource(mod)
    tree = ast.parse(src)
    doc = ast.get_docstring(tree)
    body = src
    if doc is not None:
        end = tree.body[0].end_lineno
        body = "\n".join(src.splitlines()[end:]) + "\n"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("attnfuzz")):
            raise ValueError("%s imports %s: a repro cannot copy it" % (mod.__name__, node.module))
    return body


def script_library():
    """The library every repro script holds (glue plus the copied modules), as source."""
    parts = [_SCRIPT_GLUE]
    for name, mod in LIBRARY:
        parts.append("%s = _module(%r, %r)\n" % (name, name, _module_source(mod)))
    return "\n".join(parts)


_SCRIPT_MAIN = r'''

def report(name, got, ref, atol, rtol):
    """Prints one tensor's comparison with its float64 reference; True when it fails."""
    out = np.asarray(got).astype(np.float64)
    bad, max_abs, worst = compare(out, ref, atol, rtol)
    print("%s %s %s vs float64 reference: max abs error %.6g; %d of %d elements beyond "
          "tolerance (atol %.3g, rtol %.3g)" % (name, np.asarray(got).dtype, list(out.shape), max_abs, bad, out.size,
                                                atol, rtol))
    if worst:
        print("  worst element %s: got %r, reference %r" % (list(worst), float(out[worst]), float(ref[worst])))
    return bad > 0


def main():
    req = inputs(CASE, Q, K, V, MASK, BOOL_MASK, DO)
    print("%s: %s" % (TITLE, FEATURES))
    got = call_under_test(attention, req)
    failed = report("output", got, REF, ATOL, RTOL)
    if GRADS and "gradients" not in globals():
        print("(the function under test has no gradients(): the backward is not run here)")
    elif GRADS:
        # the backward a training step runs, on the same inputs and dO
        g = call_under_test(gradients, req, grads=True)
        for name, (ref, atol, rtol) in GRADS.items():
            x = as_mask_grad(g[name], ref) if name == "dmask" else g[name]
            failed |= report(name, x, ref, atol, rtol)
    if failed:
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
    for key, var in (("q", "Q"), ("k", "K"), ("v", "V"), ("mask", "MASK"), ("bool_mask", "BOOL_MASK"), ("ref", "REF"),
                     ("do", "DO")):
        if key in b:
            lines.append('%s = _arr("""\n%s""")' % (var, _b64_npy(b[key])))
        else:
            lines.append("%s = None" % var)
    if b.get("ref") is None:
        raise ValueError("%s: no ref.npy.zst (the reference output)" % bundle_dir)
    # a backward finding: each gradient's float64 reference and the tolerance recorded for it
    grads = [g for g in (case.get("backward") or {}).get("grads") or () if "ref_" + g in b]
    if grads and "do" not in b:
        raise ValueError("%s: a backward case without do.npy.zst (the upstream gradient)" % bundle_dir)
    tols = meta.get("tolerances") or {}
    lines.append("GRADS = {")
    for g in grads:
        t = tols.get(g) or tol
        lines.append('    %r: (_arr("""\n%s"""), %r, %r),' % (g, _b64_npy(b["ref_" + g]), float(t.get("atol", 0.0) or 0.0),
                                                           float(t.get("rtol", 0.0) or 0.0)))
    lines.append("}")
    body = "\n".join(lines[:13]) + "\n" + script_library() + "\n" + "\n".join(lines[13:]) + "\n"
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
