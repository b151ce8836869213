"""Building run frames by hand and talking to a worker process: what attnfuzz's worker
backend does, in Python, for tests and benchmarks of workers.

    arrays = physical_inputs(case, q, k, v)          # canonical -> the case's layouts
    frame = run_frame(case, arrays, rid=1)
    with WorkerProcess([sys.executable, "my_worker.py"]) as w:
        hello = w.hello
        header, payload = w.call(frame)

Strides follow the C library's rule (src/core/layout.c, af_strides_for): the tensor
spec's perm is a Lehmer code giving the memory order of the layout's dims (0 = row
major), pad adds elements after each innermost row (padding holds NaN), broadcast makes
the batch or heads dim stride 0."""

import math
import subprocess

import numpy as np

from . import dtypes, layouts, protocol
from .case import Case

_PACKED_WHICH = {"q": 0, "k": 1, "v": 2}


def physical_shape(layout, B, H, S, D):
    """The physical shape of one tensor (packed layouts: the whole buffer)."""
    if layout == "qkv_bs3hd":
        return (B, S, 3, H, D)
    if layout == "qkv_bsh3d":
        return (B, S, H, 3, D)
    if layout == "qkv_channels_first":
        return (B, 3 * H * D, S)
    return layouts.out_shape(layout, B, H, S, D)


def batch_head_dims(layout):
    """(index of the batch dim, index of the heads dim or -1 when folded) in the physical
    shape."""
    return {"bhsd": (0, 1), "bshd": (0, 2), "sbhd": (1, 2), "bsd": (0, -1), "channels_first": (0, -1),
            "qkv_bs3hd": (0, 3), "qkv_bsh3d": (0, 2), "qkv_channels_first": (0, -1)}[layout]


def lehmer_order(perm, ndim):
    """Memory order of the dims (outermost first) for Lehmer code perm."""
    avail = list(range(ndim))
    order = []
    perm %= math.factorial(ndim)
    for pos in range(ndim):
        f = math.factorial(ndim - 1 - pos)
        idx, perm = divmod(perm, f)
        order.append(avail.pop(idx))
    return order


def strided_empty(shape, dtype, perm=0, pad=0, bcast_dims=(), fill=np.nan):
    """An array of shape whose strides follow (perm, pad, broadcast dims), over a fresh
    buffer filled with fill (the padding keeps it)."""
    dt = np.dtype(dtype)
    order = lehmer_order(perm, len(shape))
    strides = [0] * len(shape)
    stride = dt.itemsize
    innermost = True
    for d in reversed(order):
        if d in bcast_dims:
            strides[d] = 0
            continue
        strides[d] = stride
        stride *= shape[d] + (pad if innermost else 0)
        innermost = False
    span = dt.itemsize + sum((n - 1) * s for n, s in zip(shape, strides))
    buf = np.full(span // dt.itemsize + 1, fill, dtype=dt)
    return np.ndarray(tuple(shape), dt, buffer=buf, offset=0, strides=tuple(strides))


def _spec(case, name):
    return case.specs[name]


def _bcast_dims(layout, broadcast):
    bd, hd = batch_head_dims(layout)
    if broadcast == "batch" and bd >= 0:
        return (bd,)
    if broadcast == "heads" and hd >= 0:
        return (hd,)
    return ()


def physical_inputs(case, q, k, v, mask=None, bool_mask=None):
    """{name: array} as attnfuzz sends them: q, k, v (and qkv for packed layouts) in the
    case's layouts and strides from canonical q [B, Hq, Sq, D], k, v; mask / bool_mask
    (given [B', Hq', Sq', Sk'] or 2-D) in the rank, shape, dtype and stride-0 form of the
    case's mask specs. case: a Case or a case dict."""
    if not isinstance(case, Case):
        case = Case(case)
    dt = dtypes.DTYPES[case.dtype]
    B = case.batch
    out = {}
    dims = {"q": (case.q_heads, case.q_len, case.head_dim), "k": (case.kv_heads, case.kv_len, case.head_dim),
            "v": (case.kv_heads, case.kv_len, case.v_head_dim)}
    canon = {"q": q, "k": k, "v": v}
    if case.packed:
        s = _spec(case, "q")
        lay = s["layout"]
        H, S, D = dims["q"]
        shape = physical_shape(lay, B, H, S, D)
        qkv = strided_empty(shape, dt, s["perm"], s["pad"], _bcast_dims(lay, s["broadcast"]))
        out["qkv"] = qkv
        for n in ("q", "k", "v"):
            w = _PACKED_WHICH[n]
            if lay == "qkv_bs3hd":
                view = qkv[:, :, w]
            elif lay == "qkv_bsh3d":
                view = qkv[:, :, :, w]
            else:
                view = qkv[:, w * H * D:(w + 1) * H * D, :]
            layouts.to_bhsd(view, lay, H, D)[...] = np.asarray(canon[n]).astype(dt)
            out[n] = view
    else:
        for n in ("q", "k", "v"):
            s = _spec(case, n)
            H, S, D = dims[n]
            x = strided_empty(physical_shape(s["layout"], B, H, S, D), dt, s["perm"], s["pad"],
                              _bcast_dims(s["layout"], s["broadcast"]))
            layouts.to_bhsd(x, s["layout"], H, D)[...] = np.asarray(canon[n]).astype(dt)
            out[n] = x
    full = (B, case.q_heads, case.q_len, case.kv_len)
    for name, spec, m in (("mask", case.amask, mask), ("bool_mask", case.bmask, bool_mask)):
        if spec is None or m is None:
            continue
        mdt = np.bool_ if name == "bool_mask" else dtypes.DTYPES[spec.get("dtype", "f32")]
        fd = spec.get("full_dims", "qk")
        m = np.asarray(m)
        m = m.reshape((1,) * (4 - m.ndim) + m.shape)
        small = tuple(f if letter in fd else 1 for f, letter in zip(full, "bhqk"))
        m = np.broadcast_to(m, full)[tuple(slice(0, n) for n in small)]
        if spec.get("rank", 4) == 2:
            arr = np.ascontiguousarray(m.reshape(small[2], small[3]).astype(mdt))
        elif spec.get("expanded"):
            base = np.ascontiguousarray(m.astype(mdt))
            arr = np.broadcast_to(base, full)  # stride 0 on the broadcast dims
        else:
            arr = np.ascontiguousarray(m.astype(mdt))
        out[name] = arr
    return out


def derived(case):
    """The run request's "derived" object."""
    if not isinstance(case, Case):
        case = Case(case)
    return {"scale": case.scale, "diag_offset": case.diag_offset, "valid_keys": case.valid_keys}


def run_frame(case, arrays, rid=1):
    """The bytes of a run frame for case (a dict) and the physical arrays (physical_inputs),
    packed arrays travelling once."""
    raw = case.raw if isinstance(case, Case) else case
    order = [n for n in ("q", "k", "v", "qkv", "mask", "bool_mask") if n in arrays]
    entries, parts = protocol.entries_for([(n, arrays[n]) for n in order])
    header = {"type": "run", "id": rid, "case": raw, "derived": derived(case), "tensors": entries}
    return protocol.encode_frame(header, parts)


BYE = protocol.encode_frame({"type": "bye"})


class WorkerProcess:
    """A worker started with pipes, as attnfuzz starts one. .hello is its hello header."""

    def __init__(self, argv, env=None, stderr=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        self.reader = protocol.FrameReader(self.proc.stdout)
        first = self.reader.read()
        if first is None:
            raise protocol.ProtocolError("worker %s exited before hello (status %s)" % (argv, self.proc.wait()))
        self.hello = first[0]

    def send(self, frame_bytes):
        self.proc.stdin.write(frame_bytes)
        self.proc.stdin.flush()

    def call(self, frame_bytes):
        """Sends one frame, returns the reply (header, payload)."""
        self.send(frame_bytes)
        r = self.reader.read()
        if r is None:
            raise protocol.ProtocolError("worker closed its stdout")
        return r

    def close(self, timeout=5):
        """Sends bye and returns the exit status."""
        try:
            self.send(BYE)
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.close()
