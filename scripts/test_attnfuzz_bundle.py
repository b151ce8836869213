#!/usr/bin/python3
"""Tests of scripts/attnfuzz_bundle.py (run by ctest as python_bundle_loader).

1. A bundle written here with plain numpy + zstandard (independently of the module)
   loads back bit-exactly, and the summary's max |out - ref| equals numpy's.
2. save_array round-trips, including frames without a content size.
3. When AF_BUNDLE_FROM_C names a bundle directory (or a directory of bundles) written by
   the C library, its arrays have the shapes of its case, ref is float64, and for each
   backend with an output, max |out - ref| over finite elements equals the recorded
   metrics.max_abs (the C oracle computes it in double from the same values).
4. Reading is bounded: a 64 GiB zstd bomb, a q over its case and a 64 GiB case.json raise
   ValueError naming the file, in milliseconds and without the memory they claim.
"""

import io
import json
import math
import os
import sys
import tempfile

import numpy as np
import zstandard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnfuzz_bundle as ab  # noqa: E402

PASSED = 0
FAILED = 0


def check(cond, what):
    global PASSED, FAILED
    if cond:
        PASSED += 1
    else:
        FAILED += 1
        print("FAIL: %s" % what)


def write_npy_zst(path, array, content_size=True):
    """The file format written by hand: np.save then one zstd frame."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    cctx = zstandard.ZstdCompressor(level=3, write_content_size=content_size)
    if content_size:
        data = cctx.compress(buf.getvalue())
    else:
        out = io.BytesIO()
        with cctx.stream_writer(out, closefd=False) as w:
            w.write(buf.getvalue())
        data = out.getvalue()
    with open(path, "wb") as f:
        f.write(data)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_numpy_bundle():
    rng = np.random.default_rng(7)
    B, Hq, Hkv, Sq, Sk, D, Dv = 2, 4, 2, 5, 7, 8, 6
    case = {"batch": B, "q_heads": Hq, "kv_heads": Hkv, "q_len": Sq, "kv_len": Sk,
            "head_dim": D, "v_head_dim": Dv, "dtype": "f32",
            "additive_mask": {"full_dims": "qk"}, "bool_mask": {"full_dims": "bk"}}
    arrays = {
        "q": rng.standard_normal((B, Hq, Sq, D)).astype(np.float32),
        "k": rng.standard_normal((B, Hkv, Sk, D)).astype(np.float32),
        "v": rng.standard_normal((B, Hkv, Sk, Dv)).astype(np.float32),
        "mask": np.where(rng.random((1, 1, Sq, Sk)) < 0.2, -np.inf, 0.5).astype(np.float32),
        "bool_mask": rng.random((B, 1, 1, Sk)) < 0.8,
        "ref": rng.standard_normal((B, Hq, Sq, Dv)),
    }
    out = (arrays["ref"] + rng.standard_normal(arrays["ref"].shape) * 1e-3).astype(np.float32)
    out[0, 1, 2, 3] = np.nan
    out[1, 0, 0, 0] = np.inf
    arrays["out.fused"] = out
    arrays["expected"] = arrays["ref"] * 2.0
    meta = {"format": "attnfuzz-bundle", "version": 1, "kind": "diverge", "signature": "00000000000000ff",
            "case": case,
            "backends": [{"name": "fused", "version": "1", "verdict": "diverge",
                          "metrics": {"max_abs": "nan"}, "output": "out.fused.npy.zst"}]}
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(meta, f)
        for i, (name, a) in enumerate(arrays.items()):
            write_npy_zst(os.path.join(d, name + ".npy.zst"), a, content_size=(i % 2 == 0))
        b = ab.load(d)
        check(b["case"] == case, "case object loads as written")
        check(b["meta"]["kind"] == "diverge", "meta holds the whole case.json")
        for name, a in arrays.items():
            check(name in b and same_bits(b[name], a), "%s round-trips bit-exactly" % name)
        check(b["bool_mask"].dtype == np.bool_, "bool_mask loads as numpy bool")

        finite = np.isfinite(out.astype(np.float64)) & np.isfinite(arrays["ref"])
        want = float(np.max(np.abs(out.astype(np.float64)[finite] - arrays["ref"][finite])))
        s = ab.summary(b)
        check("fused" in s, "summary lists the backend")
        check(s["fused"]["max_abs"] == want, "summary max_abs %r equals numpy's %r" % (s["fused"]["max_abs"], want))
        check(s["fused"]["mismatches"] == 2, "summary counts the NaN and the Inf")
        check(math.isnan(s["fused"]["recorded_max_abs"]), "\"nan\" strings read as NaN")
        want_e = float(np.max(np.abs(out.astype(np.float64)[finite] - arrays["expected"][finite])))
        check(s["fused"]["max_abs_expected"] == want_e, "summary against expected")

        sink = io.StringIO()
        ab.print_summary(d, file=sink)
        check("out.fused" in sink.getvalue() and "diverge" in sink.getvalue(), "print_summary names arrays and kind")

        # truncated frames are an error, not a silently short array
        path = os.path.join(d, "q.npy.zst")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        try:
            ab.read_array(path)
            check(False, "a truncated array raises")
        except (ValueError, zstandard.ZstdError):
            check(True, "a truncated array raises")


def test_save_array():
    with tempfile.TemporaryDirectory() as d:
        for a in [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(3.5), np.zeros((0, 4)),
                  np.array([True, False, True]), np.array([1.0, -np.inf, np.nan], dtype=np.float64),
                  np.arange(24, dtype=np.float16).reshape(2, 3, 4)]:
            path = os.path.join(d, "x.npy.zst")
            ab.save_array(path, a)
            got = ab.read_array(path)
            check(same_bits(got, a), "save_array round-trips %s %s" % (a.dtype, a.shape))
            with open(path, "rb") as f:
                raw = zstandard.ZstdDecompressor().decompress(f.read())
            check(raw[:6] == b"\x93NUMPY" and (10 + raw[8] + 256 * raw[9]) % 64 == 0,
                  "save_array writes .npy with a 64-byte aligned header")
        check(not [n for n in os.listdir(d) if ".tmp." in n], "save_array leaves no temporary file")


def check_c_bundle(path):
    b = ab.load(path)
    c = b["case"]
    B, Hq, Hkv = c["batch"], c["q_heads"], c.get("kv_heads", c["q_heads"])
    Sq, Sk = c["q_len"], c.get("kv_len", c["q_len"])
    D = c["head_dim"]
    Dv = c.get("v_head_dim", D)
    check(b["meta"].get("format") == "attnfuzz-bundle", "%s: format" % path)
    for name, shape in (("q", (B, Hq, Sq, D)), ("k", (B, Hkv, Sk, D)), ("v", (B, Hkv, Sk, Dv))):
        check(name in b and b[name].shape == shape and b[name].dtype == np.float32,
              "%s: %s is float32 %s" % (path, name, shape))
    check("ref" in b and b["ref"].dtype == np.float64 and b["ref"].shape == (B, Hq, Sq, Dv),
          "%s: ref is float64 [B, Hq, Sq, Dv]" % path)
    for f in b["meta"].get("files", []):
        check(os.path.isfile(os.path.join(path, f)), "%s: listed file %s exists" % (path, f))
    n_out = 0
    for be in b["meta"].get("backends", []):
        f = be.get("output")
        if not f:
            continue
        n_out += 1
        out = b[f[: -len(ab.SUFFIX)]]
        check(out.shape == b["ref"].shape, "%s: %s has the shape of ref" % (path, f))
        got = ab.max_abs_error(out, b["ref"])
        rec = ab.number(be["metrics"]["max_abs"])
        ok = got == rec or abs(got - rec) <= 1e-12 * max(abs(got), abs(rec))
        check(ok, "%s: %s max_abs %r equals the recorded %r" % (path, be["name"], got, rec))
    check(n_out > 0, "%s: has at least one backend output" % path)
    # a backward case: dO and each reference gradient at its shape, each backend's gradient
    # against it as recorded
    grads = (c.get("backward") or {}).get("grads") or []
    if grads:
        check("do" in b and b["do"].shape == (B, Hq, Sq, Dv) and b["do"].dtype == np.float32,
              "%s: do is float32 [B, Hq, Sq, Dv]" % path)
    for g in grads:
        check("ref_" + g in b and b["ref_" + g].dtype == np.float64, "%s: ref_%s is float64" % (path, g))
    for (name, g), row in ab.grad_summary(b).items():
        got, rec = row.get("max_abs"), row["recorded_max_abs"]
        ok = got is not None and rec is not None and (got == rec or abs(got - rec) <= 1e-12 * max(abs(got), abs(rec)))
        check(ok, "%s: %s %s max_abs %r equals the recorded %r" % (path, name, g, got, rec))


def test_from_c():
    root = os.environ.get("AF_BUNDLE_FROM_C")
    if not root:
        print("AF_BUNDLE_FROM_C not set: C-written bundles not checked")
        return
    if os.path.isfile(os.path.join(root, "case.json")):
        dirs = [root]
    elif os.path.isdir(root):
        dirs = sorted(os.path.join(root, n) for n in os.listdir(root)
                      if os.path.isfile(os.path.join(root, n, "case.json")))
    else:
        dirs = []
    check(len(dirs) > 0, "AF_BUNDLE_FROM_C=%s holds at least one bundle" % root)
    for d in dirs:
        check_c_bundle(d)
    print("checked %d C-written bundle(s) under %s" % (len(dirs), root))


def zstd_bomb(head, total, declared=None):
    """A zstd frame by hand (RFC 8878): head as one raw block, then 128 KiB RLE blocks (4
    bytes each) up to total bytes of content; declared (8-byte content size) or nothing."""
    block = 128 << 10
    rest = total - len(head)
    nblocks = -(-rest // block)
    out = bytearray(b"\x28\xb5\x2f\xfd")
    out.append(0xC0 if declared is not None else 0x00)
    out.append((17 - 10) << 3)
    if declared is not None:
        out += int(declared).to_bytes(8, "little")
    out += ((len(head) << 3) | (nblocks == 0)).to_bytes(3, "little") + head
    full = (block << 3 | 1 << 1).to_bytes(3, "little") + b"\x3f"
    out += full * (nblocks - 1)
    last = rest - (nblocks - 1) * block
    out += (last << 3 | 1 << 1 | 1).to_bytes(3, "little") + b"\x3f"
    return bytes(out)


def test_bounded():
    """A bomb of 64 GiB, a header over the case, an oversized case.json: ValueError naming
    the file, at once and without the memory the file claims."""
    import resource
    import time
    gib64 = 64 << 30
    buf = io.BytesIO()
    np.save(buf, np.array([1.0, 2.0], dtype=np.float32))
    head = buf.getvalue()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "q.npy.zst")
        for declared, what in ((gib64, "declares 64 GiB"), (None, "declares nothing"), (len(head), "declares its size")):
            with open(path, "wb") as f:
                f.write(zstd_bomb(head, gib64, declared))
            rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0 = time.monotonic()
            try:
                ab.read_array(path)
                check(False, "a 64 GiB bomb (%s) is refused" % what)
            except ValueError as e:
                check(path in str(e) and "more than" in str(e), "a 64 GiB bomb (%s) is refused naming the file: %s"
                      % (what, e))
            dt = time.monotonic() - t0
            rise = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
            check(dt < 5.0 and rise < 64 * 1024, "a 64 GiB bomb (%s): %.2f s, +%d KiB" % (what, dt, rise))
        # a bundle whose q claims a shape bigger than its case
        case = {"batch": 1, "q_heads": 1, "kv_heads": 1, "q_len": 2, "kv_len": 2, "head_dim": 1, "v_head_dim": 1}
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump({"case": case}, f)
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False,
                                                   "shape": (1, 1, 65536, 8192)})
        with open(path, "wb") as f:
            f.write(zstd_bomb(buf.getvalue(), 2 << 30))
        try:
            ab.load(d)
            check(False, "a q bigger than the case is refused")
        except ValueError as e:
            check(path in str(e) and "does not match the case" in str(e), "a q bigger than the case: %s" % e)
        os.unlink(path)
        check(ab.load(d)["case"]["q_len"] == 2, "the same bundle without q loads")
        with open(os.path.join(d, "case.json"), "wb") as f:
            f.truncate(64 << 30)
        try:
            ab.load(d)
            check(False, "a 64 GiB case.json is refused")
        except ValueError as e:
            check("case.json" in str(e) and "more than" in str(e), "a 64 GiB case.json: %s" % e)


def main():
    for t in (test_numpy_bundle, test_save_array, test_bounded, test_from_c):
        try:
            t()
        except Exception as e:  # a crash in one test is a failure, the others still run
            import traceback
            traceback.print_exc()
            check(False, "%s raised %r" % (t.__name__, e))
    print("%d passed, %d failed" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
