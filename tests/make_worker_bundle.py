#!/usr/bin/env python3
"""Writes a finding bundle of a worker backend the way another tool would (case.json plus
.npy.zst arrays, docs/case-json.md): the worker's run function on a small f32 case, the
float64 reference computed here independently (plain softmax attention in numpy).

    make_worker_bundle.py CRASHES_DIR "worker:python3 tests/worker_wrong_numpy.py" WORKER_FILE

Prints the bundle directory. Used by the report test while the campaign cannot run a
worker itself; the bundle is what `attnfuzz fuzz --backend worker:...` stores."""
import hashlib
import io
import json
import os
import runpy
import sys

import numpy as np
import zstandard


def save(path, a):
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    with open(path, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=3).compress(buf.getvalue()))


def reference(q, k, v, scale):
    """float64 [B,Hq,Sq,Dv]: softmax(q k^T * scale) v, no masks."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", w / w.sum(axis=-1, keepdims=True), v)


class _Case:
    def __init__(self, raw, scale):
        self.raw, self.scale = raw, scale


def main(argv):
    crashes, backend, worker_file = argv[1], argv[2], argv[3]
    B, H, Sq, Sk, D = 1, 2, 5, 7, 8
    rng = np.random.default_rng(7)
    q = rng.standard_normal((B, H, Sq, D)).astype(np.float32)
    k = rng.standard_normal((B, H, Sk, D)).astype(np.float32)
    v = rng.standard_normal((B, H, Sk, D)).astype(np.float32)
    case = {"batch": B, "q_heads": H, "kv_heads": H, "q_len": Sq, "kv_len": Sk, "head_dim": D, "v_head_dim": D,
            "dtype": "f32", "scale": None, "causal": False}
    scale = 1.0 / np.sqrt(D)
    ref = reference(q, k, v, scale)
    run = runpy.run_path(worker_file, run_name="worker_under_test")["run"]
    out = np.asarray(run(_Case(case, scale), q, k, v), dtype=np.float32)
    atol, rtol = 1e-5 * float(np.abs(v).max()), 1.3e-6
    err = np.abs(out.astype(np.float64) - ref)
    ratio = err / (atol + rtol * np.abs(ref))
    worst = [int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape)]
    kind = "diverge" if ratio.max() > 1 else "ok"
    sig = hashlib.sha256((kind + backend).encode()).hexdigest()[:16]
    name = "%s-%s" % (kind, sig)
    path = os.path.join(crashes, name)
    os.makedirs(path, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "_-+." else "_" for c in backend)[:96]
    files = ["case.json", "q.npy.zst", "k.npy.zst", "v.npy.zst", "ref.npy.zst", "out.%s.npy.zst" % safe]
    save(os.path.join(path, "q.npy.zst"), q)
    save(os.path.join(path, "k.npy.zst"), k)
    save(os.path.join(path, "v.npy.zst"), v)
    save(os.path.join(path, "ref.npy.zst"), ref)
    save(os.path.join(path, files[-1]), out)
    meta = {"format": "attnfuzz-bundle", "version": 1, "tool": "make_worker_bundle.py", "case": case, "kind": kind,
            "signature": sig, "who": backend, "relation": None, "features": "f32 q:bhsd k:bhsd v:bhsd sq!=sk",
            "tolerance": {"atol": atol, "rtol": rtol, "fudge": 4, "honest": False},
            "backends": [{"name": backend, "version": "1.0", "verdict": kind, "error": None,
                          "metrics": {"max_abs": float(err.max()), "worst_ratio": float(ratio.max()),
                                      "worst_index": worst, "worst_out": float(out[tuple(worst)]),
                                      "worst_ref": float(ref[tuple(worst)])},
                          "output": files[-1]}],
            "replay": "attnfuzz replay %s" % path, "files": files}
    with open(os.path.join(path, "case.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(path)
    return 0 if kind != "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
