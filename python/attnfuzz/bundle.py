"""Load and write attnfuzz repro bundles with numpy (schema: docs/case-json.md).

A bundle is a directory: case.json plus NumPy .npy arrays compressed with zstd
(q.npy.zst, k.npy.zst, v.npy.zst, mask.npy.zst, bool_mask.npy.zst, ref.npy.zst,
out.<backend>.npy.zst, expected.npy.zst, ...; a backward case also do.npy.zst and, per
gradient asked, ref_<g>.npy.zst and <g>.<backend>.npy.zst, g one of dq, dk, dv, dmask;
where a backend returned softmax statistics, ref_lse.npy.zst and lse.<backend>.npy.zst,
[B, Hq, Sq], natural log).

    import attnfuzz.bundle as ab
    b = ab.load("crashes/diverge-0123456789abcdef")
    b["case"]["q_len"], b["q"].shape, b["ref"].dtype, b["out.fused"]
    b["meta"]["tensor"], b["do"], b["ref_dq"], b["dq.fused"]     # a backward finding
    b["ref_lse"], b["lse.fused"]                                 # softmax statistics
    ab.save_array("mybundle/expected.npy.zst", my_output)   # a bundle another tool writes

An FP8 case's q, k and v (case "fp8": format and descales) are uint8 arrays, the stored
bits; attnfuzz.dtypes.fp8_from_bits views them as ml_dtypes float8 arrays and
attnfuzz.reference.dequantized gives their float64 values.

Print a summary: python3 -m attnfuzz.bundle BUNDLE... (or scripts/attnfuzz_bundle.py, which
runs this module under any python3).

Needs only numpy and zstandard (Debian: python3-numpy, python3-zstandard), never
ml_dtypes: Debian's /usr/bin/python3 runs it.
"""

import io
import json
import os
import sys

import numpy as np
import zstandard

SUFFIX = ".npy.zst"
GRADS = ("dq", "dk", "dv", "dmask")
FORMAT = "attnfuzz-bundle"
VERSION = 1


# What a bundle may make us read: as src/bundle (npy.c, bundle_internal.h). A file whose
# header, zstd frame or data claims or produces more is refused with ValueError naming it,
# before more than its header is decompressed.
MAX_JSON = 1 << 20
MAX_ARRAY_BYTES = 4 << 30


def _read_exactly(path, stream, n):
    parts, got = [], 0
    while got < n:
        b = stream.read(min(n - got, 1 << 24))
        if not b:
            raise ValueError("%s: truncated: the .npy header needs %d bytes of data, the file holds %d"
                             % (path, n, got))
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def _read_npy(path, stream, max_numel):
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(stream)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(stream)
        else:
            raise ValueError("unsupported .npy version %r" % (version,))
    except zstandard.ZstdError as e:
        raise ValueError("%s: corrupt zstd data (%s)" % (path, e)) from e
    except ValueError as e:
        raise ValueError("%s: %s" % (path, e)) from e
    if dtype.hasobject:
        raise ValueError("%s: object arrays are not read (descr %s)" % (path, dtype.str))
    numel = 1
    for d in shape:
        numel *= int(d)
    if max_numel is not None and numel > max_numel:
        raise ValueError("%s: shape %s does not match the case (%d elements, at most %d)"
                         % (path, list(shape), numel, max_numel))
    nbytes = numel * dtype.itemsize
    if nbytes > MAX_ARRAY_BYTES:
        raise ValueError("%s: shape %s is too large (over %d bytes of data)" % (path, list(shape), MAX_ARRAY_BYTES))
    try:
        data = _read_exactly(path, stream, nbytes)
    except zstandard.ZstdError as e:
        # zstandard says "Destination buffer is too small" for a frame producing more than
        # it declares
        raise ValueError("%s: corrupt zstd data, or more than its frame declares (%s)" % (path, e)) from e
    try:
        extra = stream.read(1)
    except zstandard.ZstdError:  # a frame producing more than it declares
        extra = True
    if extra:
        raise ValueError("%s: decompresses to more than the %d bytes of data its .npy header needs" % (path, nbytes))
    array = np.frombuffer(bytearray(data), dtype=dtype)
    return array.reshape(shape, order="F" if fortran else "C")


def read_array(path, max_numel=None):
    """One .npy.zst (or plain .npy) file as a numpy array of at most max_numel elements
    (None: only the 4 GiB any array may take). The header is read first; the data is read
    to exactly the size it declares, so a zstd bomb costs what its header admits, no more."""
    with open(path, "rb") as f:
        if not path.endswith(".zst"):
            return _read_npy(path, f, max_numel)
        # a stream: frames written without a content size (streaming writers) read too
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
        except TypeError:  # zstandard < 0.17
            reader = zstandard.ZstdDecompressor().stream_reader(f)
        with reader:
            return _read_npy(path, reader, max_numel)


def case_numel(case, key):
    """The most elements the case gives the array named key ("q", "mask", "out.fused",
    ...), or None when the case does not say (a tool that left fields out)."""
    def prod(*names):
        n = 1
        for name in names:
            v = case.get(name)
            if not isinstance(v, int) or v < 1:
                return None
            n *= v
        return n
    if key == "q":
        return prod("batch", "q_heads", "q_len", "head_dim")
    if key == "k":
        return prod("batch", "kv_heads", "kv_len", "head_dim")
    if key == "v":
        return prod("batch", "kv_heads", "kv_len", "v_head_dim")
    if key in ("mask", "bool_mask"):
        return prod("batch", "q_heads", "q_len", "kv_len")
    if key in ("ref", "expected", "do") or key.startswith("out."):
        return prod("batch", "q_heads", "q_len", "v_head_dim")
    if is_lse(key):
        return prod("batch", "q_heads", "q_len")
    grad = key[4:] if key.startswith("ref_") else key.split(".", 1)[0]
    if grad == "dq":
        return prod("batch", "q_heads", "q_len", "head_dim")
    if grad == "dk":
        return prod("batch", "kv_heads", "kv_len", "head_dim")
    if grad == "dv":
        return prod("batch", "kv_heads", "kv_len", "v_head_dim")
    if grad == "dmask":
        return prod("batch", "q_heads", "q_len", "kv_len")
    return None


def is_lse(key):
    """Whether the array named key holds softmax statistics (ref_lse, lse.<backend>)."""
    return key == "ref_lse" or key.startswith("lse.")


def save_array(path, array):
    """Writes array as a .npy (C order) compressed as one zstd frame, atomically.

    float32, float64, float16 and bool arrays are what attnfuzz reads; q/k/v/mask are
    float32 [B, H, S, D], ref and expected float64 [B, Hq, Sq, Dv]."""
    array = np.asarray(array)
    if not array.flags.c_contiguous:  # np.save would write fortran_order True
        array = np.array(array, order="C")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    comp = zstandard.ZstdCompressor(level=3).compress(buf.getvalue())
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(comp)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def number(x):
    """A number from case.json: non-finite values are the strings "inf", "-inf", "nan"."""
    if isinstance(x, str):
        return float(x)  # float() reads "inf", "-inf", "nan", "Infinity"
    if x is None:
        return float("nan")
    return float(x)


def load(path):
    """The whole bundle as a dict: "case" (the case object), "meta" (all of case.json) and
    one numpy array per .npy.zst file, keyed by its name without .npy.zst ("q", "ref",
    "out.fused", "expected", ...). A merged bundle is a symbolic link that attnfuzz merge
    may point at a smaller version meanwhile: it is resolved once, so every file comes from
    one version."""
    path = os.path.realpath(path)
    cj = os.path.join(path, "case.json")
    with open(cj, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_JSON:
            raise ValueError("%s: file is %d bytes, more than the %d allowed" % (cj, size, MAX_JSON))
        text = f.read(MAX_JSON + 1)
    if len(text) > MAX_JSON:
        raise ValueError("%s: file is more than the %d bytes allowed" % (cj, MAX_JSON))
    meta = json.loads(text.decode("utf-8"))
    if not isinstance(meta, dict) or not isinstance(meta.get("case"), dict):
        raise ValueError("%s/case.json: no \"case\" object" % path)
    out = {"case": meta["case"], "meta": meta}
    for name in sorted(os.listdir(path)):
        if name.endswith(SUFFIX) and not name.startswith("."):
            key = name[: -len(SUFFIX)]
            if key not in out:
                out[key] = read_array(os.path.join(path, name), case_numel(meta["case"], key))
                if is_lse(key):
                    _check_lse(os.path.join(path, name), out[key], meta["case"])
    return out


def _check_lse(path, a, case):
    """Statistics must be float [B, Hq, Sq] (ValueError naming the file)."""
    want = tuple(case.get(n) for n in ("batch", "q_heads", "q_len"))
    if all(isinstance(n, int) for n in want) and a.shape != want:
        raise ValueError("%s: shape %s does not match the case [B, Hq, Sq] %s" % (path, list(a.shape), list(want)))
    if a.dtype.kind != "f":
        raise ValueError("%s: dtype %s, the statistics are float32 or float64" % (path, a.dtype))


def max_abs_error(out, ref):
    """max |out - ref| in float64 over elements finite on both sides (0 when none), the
    oracle's max_abs."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    both = np.isfinite(o) & np.isfinite(r)
    if not both.any():
        return 0.0
    return float(np.max(np.abs(o[both] - r[both])))


def class_mismatches(out, ref):
    """Elements where out and ref differ in class (finite, NaN, +Inf, -Inf)."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)

    def cls(x):
        return np.where(np.isnan(x), 1, np.where(np.isposinf(x), 2, np.where(np.isneginf(x), 3, 0)))

    return int(np.count_nonzero(cls(o) != cls(r)))


def output_files(bundle):
    """{backend name: array key} for every backend of case.json whose output is present,
    plus out.* arrays that case.json does not list (keyed by their own name)."""
    res = {}
    for be in bundle["meta"].get("backends") or []:
        f = be.get("output") if isinstance(be, dict) else None
        if isinstance(f, str) and f.endswith(SUFFIX) and f[: -len(SUFFIX)] in bundle:
            res[be.get("name", f)] = f[: -len(SUFFIX)]
    listed = set(res.values())
    for key in bundle:
        if key.startswith("out.") and key not in listed:
            res[key[4:]] = key
    return res


def grad_files(bundle):
    """{(backend name, gradient): array key} for every gradient case.json records with its
    file present ("dq.fused" for ("fused", "dq"))."""
    res = {}
    for be in bundle["meta"].get("backends") or []:
        if not isinstance(be, dict) or not isinstance(be.get("grads"), dict):
            continue
        for g, rec in be["grads"].items():
            f = rec.get("output") if isinstance(rec, dict) else None
            if g in GRADS and isinstance(f, str) and f.endswith(SUFFIX) and f[: -len(SUFFIX)] in bundle:
                res[(be.get("name", f), g)] = f[: -len(SUFFIX)]
    return res


def grad_summary(bundle):
    """Per backend and gradient, errors against ref_<g>:
    {(backend, g): {"max_abs": float, "mismatches": int, "recorded_max_abs": float or None,
                    "verdict": str or None}}."""
    res = {}
    recorded = {be["name"]: be for be in bundle["meta"].get("backends") or []
                if isinstance(be, dict) and "name" in be}
    for (name, g), key in grad_files(bundle).items():
        rec = ((recorded.get(name) or {}).get("grads") or {}).get(g) or {}
        row = {"verdict": rec.get("verdict"), "recorded_max_abs": None}
        m = rec.get("metrics") or {}
        if "max_abs" in m:
            row["recorded_max_abs"] = number(m["max_abs"])
        ref = bundle.get("ref_" + g)
        if ref is not None and ref.shape == bundle[key].shape:
            row["max_abs"] = max_abs_error(bundle[key], ref)
            row["mismatches"] = class_mismatches(bundle[key], ref)
        res[(name, g)] = row
    return res


def summary(bundle):
    """Per-backend errors against ref (and expected when present):
    {backend: {"max_abs": float, "mismatches": int, "recorded_max_abs": float or None,
               "verdict": str or None, "max_abs_expected": float (if expected)}}."""
    recorded = {}
    for be in bundle["meta"].get("backends") or []:
        if isinstance(be, dict) and "name" in be:
            recorded[be["name"]] = be
    res = {}
    for name, key in output_files(bundle).items():
        out = bundle[key]
        row = {"verdict": None, "recorded_max_abs": None}
        be = recorded.get(name)
        if be is not None:
            row["verdict"] = be.get("verdict")
            m = be.get("metrics") or {}
            if "max_abs" in m:
                row["recorded_max_abs"] = number(m["max_abs"])
        if "ref" in bundle and bundle["ref"].shape == out.shape:
            row["max_abs"] = max_abs_error(out, bundle["ref"])
            row["mismatches"] = class_mismatches(out, bundle["ref"])
        if "expected" in bundle and bundle["expected"].shape == out.shape:
            row["max_abs_expected"] = max_abs_error(out, bundle["expected"])
        res[name] = row
    return res


def _case_line(c):
    keys = ("batch", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim", "v_head_dim", "dtype")
    return " ".join("%s=%s" % (k, c[k]) for k in keys if k in c)


def print_summary(path, file=sys.stdout):
    b = load(path)
    meta = b["meta"]
    p = lambda *a: print(*a, file=file)
    p("bundle   %s" % path)
    p("kind     %s   signature %s   who %s   tensor %s" % (meta.get("kind", "?"), meta.get("signature", "?"),
                                                         meta.get("who", ""), meta.get("tensor", "out")))
    if meta.get("relation"):
        p("relation %s" % meta["relation"])
    p("case     %s" % _case_line(b["case"]))
    if meta.get("features"):
        p("features %s" % meta["features"])
    p("arrays")
    for key in sorted(k for k in b if k not in ("case", "meta")):
        a = b[key]
        p("  %-28s %-8s %s" % (key, a.dtype, list(a.shape)))
    rows = summary(b)
    if rows:
        p("backends (max |out - ref| over finite elements, computed here / as recorded)")
        for name, r in rows.items():
            rec = r["recorded_max_abs"]
            p("  %-28s verdict %-14s max_abs %-24s recorded %-24s mismatched classes %s%s"
              % (name, r["verdict"], repr(r.get("max_abs")), repr(rec), r.get("mismatches"),
                 ("   vs expected %r" % r["max_abs_expected"]) if "max_abs_expected" in r else ""))
    grows = grad_summary(b)
    if grows:
        p("gradients (max |g - ref_g| over finite elements, computed here / as recorded)")
        for (name, g), r in grows.items():
            p("  %-28s %-6s verdict %-14s max_abs %-24s recorded %-24s mismatched classes %s"
              % (name, g, r["verdict"], repr(r.get("max_abs")), repr(r["recorded_max_abs"]), r.get("mismatches")))
    if meta.get("replay"):
        p("replay   %s" % meta["replay"])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: attnfuzz_bundle.py BUNDLE_DIR...", file=sys.stderr)
        return 2
    status = 0
    for path in argv:
        try:
            print_summary(path)
        except (OSError, ValueError, KeyError) as e:
            print("%s: %s" % (path, e), file=sys.stderr)
            status = 2
    return status


if __name__ == "__main__":
    sys.exit(main())
