#!/usr/bin/env python3
"""A deliberately wrong attention worker for the tests: numpy only, standalone (stdlib +
numpy, the protocol of docs/worker-protocol.md written out by hand).

Its bug: the softmax scale is applied twice (scores * scale^2), the kind of slip a
hand-written kernel makes when both the caller and the kernel scale. Unmasked f32 BHSD
cases only; everything else is declared unsupported in the hello.

    attnfuzz fuzz --backend "worker:python3 tests/worker_wrong_numpy.py"
"""
import json
import struct
import sys

import numpy as np


def run(case, q, k, v, mask=None, bool_mask=None):
    """q [B,Hq,Sq,D], k [B,Hkv,Sk,D], v [B,Hkv,Sk,Dv] -> [B,Hq,Sq,Dv] float32."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scale = case.scale
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale * scale  # BUG: scaled twice
    s -= s.max(axis=-1, keepdims=True)
    w = np.exp(s)
    w /= w.sum(axis=-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", w, v).astype(np.float32)


# --- the protocol (only what this worker needs) ----------------------------------------

_DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "bool": np.bool_}


def _read_exact(f, n):
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_frame(f):
    head = _read_exact(f, 4)
    if head is None:
        return None, None
    (n,) = struct.unpack("<I", head)
    body = _read_exact(f, n)
    if body is None:
        return None, None
    nl = body.index(b"\n")
    return json.loads(body[:nl].decode("utf-8")), memoryview(body)[nl + 1 :]


def _write_frame(f, header, payload=b""):
    h = json.dumps(header).encode("utf-8") + b"\n"
    f.write(struct.pack("<I", len(h) + len(payload)) + h + payload)
    f.flush()


def _tensor(entry, payload):
    return np.ndarray(entry["shape"], dtype=_DTYPES[entry["dtype"]], buffer=payload, offset=entry["offset"],
                      strides=entry["strides"])


class _Case:
    def __init__(self, raw, derived):
        self.raw = raw
        self.scale = float(derived.get("scale", 1.0 / np.sqrt(raw.get("head_dim", 1))))


def main():
    fin, fout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    _write_frame(fout, {"type": "hello", "protocol": 1, "name": "wrong_numpy", "version": "1.0", "variant": "",
                        "caps": ["f32", "gqa", "cross", "dv"], "layouts": ["bhsd"], "dtypes": ["f32"],
                        "conventions": {"causal": []}, "compile_key": []})
    while True:
        header, payload = _read_frame(fin)
        if header is None or header.get("type") == "bye":
            return 0
        t = {e["name"]: _tensor(e, payload) for e in header.get("tensors", [])}
        try:
            out = np.ascontiguousarray(run(_Case(header["case"], header.get("derived", {})), t["q"], t["k"], t["v"]))
        except Exception as e:  # noqa: BLE001 - reported to attnfuzz as the protocol says
            _write_frame(fout, {"type": "result", "id": header.get("id"), "status": "error",
                                "message": "%s: %s" % (type(e).__name__, e)})
            continue
        entry = {"name": "out", "dtype": "f32", "shape": list(out.shape), "strides": list(out.strides), "offset": 0}
        _write_frame(fout, {"type": "result", "id": header.get("id"), "status": "ok", "layout": "bhsd",
                            "tensors": [entry]}, out.tobytes())


if __name__ == "__main__":
    sys.exit(main())
