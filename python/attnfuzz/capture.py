"""`attnfuzz capture`: a Python program's attention calls recorded as a corpus of cases.

    python -m attnfuzz.capture -o DIR [--tensors] -- python my_model.py ARGS...
    python -m attnfuzz.capture -o DIR [--tensors] -- my_model.py ARGS...
    python -m attnfuzz.capture -o DIR [--tensors] -- python -m package.module ARGS...
    python -m attnfuzz.capture -o DIR --onnx model.onnx [--dim NAME=N ...]

    with attnfuzz.capture.recording("captured/", tensors=True):   # a notebook
        model(x)

The program runs in this process (runpy), after the hooks are in place, so that the model
code it imports sees them: `torch.nn.functional.scaled_dot_product_attention` (and
`torch._C._nn`'s, and every module that had imported either by name), FlexAttention's
`flex_attention`, nested (jagged) tensors through SDPA, `torch.nn.attention.varlen.varlen_attn`
(THD with cu_seqlens), and `jax.nn.dot_product_attention`.
`record_onnx(path)` reads an ONNX model's Attention (ai.onnx), MultiHeadAttention and
GroupQueryAttention (com.microsoft) nodes instead. Only Python programs can be captured.

Every call becomes a case (docs/case-json.md): its shapes, the layout its strides show
(bhsd, a transposed bshd/sbhd view, channels_first, the packed qkv_bs3hd, qkv_bsh3d and
qkv_channels_first when q, k and v are views of one buffer; other memory orders as a
permutation), dtype, scale (null when it is the default 1/sqrt(D)), dropout, GQA, causal
(is_causal: PyTorch's top-left diagonal; jax's likewise), and a mask read for its pattern:
a key-padding prefix becomes `key_padding`, a causal (top-left, bottom-right or offset)
triangle `causal` with its `diagonal`, a band `window`; the mask object itself stays in the
case (boolean or additive, its dtype, fill, broadcast dims and rank) with the pattern
`none` when these fields say everything it masks, else `random` at its measured density.
Identical calls are one case with a count and their call sites. With --tensors the first
call's tensors are stored as well, canonical float32 (q.npy.zst ..., mask.npy.zst or
bool_mask.npy.zst at 4-D with size 1 on broadcast dims), so `attnfuzz replay` runs that
exact call; without them replay draws values from the case's seeds.

DIR is a corpus: one directory per case, `capture-<16 hex>` holding case.json (a bundle of
kind `ok` without outputs; `extra.capture` says the API, count, call sites and notes on
what did not map), and `captured.json`, the index (every case's count, sites, notes).
`attnfuzz fuzz --corpus DIR` seeds from the case.json files, `attnfuzz replay DIR/NAME`
runs one. Recording into an existing DIR adds to its counts. docs/capture.md.
"""

import argparse
import contextlib
import hashlib
import json
import math
import os
import runpy
import sys
import threading
import traceback

import numpy as np

from attnfuzz import bundle as _bundle

INDEX = "captured.json"
_LIMITS = {"batch": 64, "q_heads": 128, "kv_heads": 64, "q_len": 65536, "kv_len": 65536, "head_dim": 512,
           "v_head_dim": 512}
_HERE = os.path.dirname(os.path.abspath(__file__))


# --- the recorder ------------------------------------------------------------------------

class Recorder:
    """The calls seen, keyed by what makes two calls the same case: the API, the case and
    the notes. Thread-safe; write() puts them into a corpus directory."""

    def __init__(self, out, tensors=False):
        self.out = out
        self.tensors = tensors
        self.entries = {}
        self.order = []
        self.calls = 0
        self.errors = []
        self._lock = threading.Lock()

    def add(self, api, case, notes=(), arrays=None, site=None):
        """One call: case (a case object, docs/case-json.md), notes (what did not map),
        arrays (name -> numpy array in the bundle's form, kept for the first call only)."""
        case = _clamped(case, notes := list(notes))
        key = json.dumps({"api": api, "case": case, "notes": notes}, sort_keys=True)
        with self._lock:
            self.calls += 1
            e = self.entries.get(key)
            if e is None:
                name = "capture-" + hashlib.sha256(key.encode()).hexdigest()[:16]
                e = {"name": name, "api": api, "case": case, "notes": notes, "count": 0, "sites": {},
                     "arrays": arrays if self.tensors else None}
                self.entries[key] = e
                self.order.append(key)
            e["count"] += 1
            if site:
                e["sites"][site] = e["sites"].get(site, 0) + 1

    def note_error(self, api, exc):
        """A call whose recording failed: the program goes on, the index says why."""
        with self._lock:
            self.errors.append("%s: %s: %s" % (api, type(exc).__name__, exc))

    def write(self, command=None):
        """Writes (or adds to) the corpus in self.out; returns the index."""
        os.makedirs(self.out, exist_ok=True)
        ipath = os.path.join(self.out, INDEX)
        index = {"format": "attnfuzz-captured", "version": 1, "calls": 0, "cases": [], "errors": []}
        if os.path.exists(ipath):
            with open(ipath) as f:
                index = json.load(f)
        by_name = {c["name"]: c for c in index["cases"]}
        for key in self.order:
            e = self.entries[key]
            old = by_name.get(e["name"])
            if old is None:
                old = {"name": e["name"], "api": e["api"], "count": 0, "sites": {}, "notes": e["notes"],
                       "case": e["case"]}
                index["cases"].append(old)
                by_name[e["name"]] = old
            old["count"] += e["count"]
            for s, n in e["sites"].items():
                old["sites"][s] = old["sites"].get(s, 0) + n
            _write_case(os.path.join(self.out, e["name"]), e, old)
        index["calls"] += self.calls
        index["errors"] += self.errors
        if command:
            index.setdefault("commands", []).append(list(command))
        tmp = ipath + ".tmp.%d" % os.getpid()
        with open(tmp, "w") as f:
            json.dump(index, f, indent=1)
            f.write("\n")
        os.replace(tmp, ipath)
        return index


def _clamped(case, notes):
    """case within the case format's limits (docs/case-json.md), a note per field cut."""
    for k, hi in _LIMITS.items():
        if k in case and case[k] > hi:
            notes.append("%s %d clamped to %d" % (k, case[k], hi))
            case[k] = hi
    if case.get("q_heads", 1) % case.get("kv_heads", 1) or case.get("q_heads", 1) > 16 * case.get("kv_heads", 1):
        notes.append("q_heads %d over kv_heads %d is no GQA ratio of the case format: kv_heads set to q_heads"
                     % (case.get("q_heads", 1), case.get("kv_heads", 1)))
        case["kv_heads"] = case.get("q_heads", 1)
    return case


def _write_case(d, e, entry):
    """One case directory: case.json (kind ok, the capture's record in extra) and, the first
    time, the arrays of the first call."""
    os.makedirs(d, exist_ok=True)
    files = ["case.json"]
    for name in ("q", "k", "v", "mask", "bool_mask"):
        path = os.path.join(d, name + ".npy.zst")
        if e["arrays"] is not None and name in e["arrays"] and not os.path.exists(path):
            _bundle.save_array(path, e["arrays"][name])
        if os.path.exists(path):
            files.append(name + ".npy.zst")
    doc = {"format": "attnfuzz-bundle", "version": 1, "tool": "attnfuzz capture", "kind": "ok", "case": e["case"],
           "replay": "attnfuzz replay %s" % d, "files": files,
           "extra": {"capture": {"api": entry["api"], "count": entry["count"], "sites": entry["sites"],
                                 "notes": entry["notes"]}}}
    tmp = os.path.join(d, "case.json.tmp.%d" % os.getpid())
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(d, "case.json"))


def _site():
    """The caller of the attention function: the first frame outside this module and the
    frameworks' own wrappers (file:line function)."""
    skip = (os.path.join("torch", "nn", "functional"), os.path.join("torch", "nn", "attention"),
            os.path.join("torch", "utils"), os.path.join("jax", "_src"), os.path.abspath(__file__))
    for fr in reversed(traceback.extract_stack()[:-2]):
        if not any(s in fr.filename for s in skip) and not fr.filename.startswith("<frozen"):
            return "%s:%d %s" % (_short(fr.filename), fr.lineno, fr.name)
    return None


def _short(path):
    """A call site's file without the site-packages prefix (transformers/models/...)."""
    marker = os.sep + "site-packages" + os.sep
    return path.split(marker, 1)[1] if marker in path else path


# --- shapes, layouts, masks: framework-neutral, on (shape, strides, offset) --------------

def _dtype_name(s):
    """A framework dtype's string -> the case's dtype and a note when it does not map."""
    s = str(s).replace("torch.", "")
    if s in ("float16", "half"):
        return "f16", None
    if s in ("bfloat16",):
        return "bf16", None
    if s in ("float32", "float"):
        return "f32", None
    return "f32", "dtype %s recorded as f32" % s


def layout_of(shapes, strides, offsets):
    """The packed layout (docs/design.md section 3) of q, k, v given as canonical
    [B, H, S, D] views (their shapes, element strides and storage offsets; offsets None
    when they do not share one storage) when the three sit in one buffer at a packed
    layout's offsets and strides, else None (each then has its own, tensor_layout)."""
    (B, H, S, D), st = shapes[0], strides[0]
    if offsets is not None and shapes[0] == shapes[1] == shapes[2] and strides[0] == strides[1] == strides[2]:
        dk, dv = offsets[1] - offsets[0], offsets[2] - offsets[0]
        sb, sh, ss, sd = st
        if sd == 1 and sh == D and ss == 3 * H * D and dk == H * D and dv == 2 * H * D:
            return "qkv_bs3hd"
        if sd == 1 and sh == 3 * D and ss == 3 * H * D and dk == D and dv == 2 * D:
            return "qkv_bsh3d"
        if ss == 1 and sd == S and sh == D * S and (B == 1 or sb == 3 * H * D * S) and dk == H * D * S \
                and dv == 2 * H * D * S:
            return "qkv_channels_first"
    return None


# the canonical dims [b, h, s, d] in each unpacked layout's physical order
_PHYS = {"bhsd": (0, 1, 2, 3), "bshd": (0, 2, 1, 3), "sbhd": (2, 0, 1, 3)}


def tensor_layout(shape, strides):
    """(layout, perm, pad, broadcast, note) of one tensor's canonical [B, H, S, D] view by
    its element strides: the unpacked layout whose memory order it has (channels_first when
    D is outside S, heads outside D), else bhsd with the Lehmer code of its memory order."""
    B, H, S, D = shape
    bcast = "none"
    st = list(strides)
    if B > 1 and st[0] == 0:
        bcast = "batch"
    elif H > 1 and st[1] == 0:
        bcast = "heads"
    # memory order, outermost first, of the dims whose stride says something
    live = [d for d in range(4) if shape[d] > 1 and st[d] != 0]
    order = sorted(live, key=lambda d: -st[d])

    def fits(phys):
        return [d for d in phys if d in live] == order
    cf = (0, 1, 3, 2)
    for name, phys in (("bhsd", _PHYS["bhsd"]), ("bshd", _PHYS["bshd"]), ("sbhd", _PHYS["sbhd"]),
                       ("channels_first", cf)):
        if fits(phys):
            pad = _pad(shape, st, phys)
            return name, 0, pad, bcast, None
    # another order: bhsd with perm = the Lehmer code of the memory order
    full = order + [d for d in range(4) if d not in order]
    avail, perm = [0, 1, 2, 3], 0
    for i, d in enumerate(full):
        idx = avail.index(d)
        perm += idx * math.factorial(3 - i)
        avail.pop(idx)
    return "bhsd", perm, 0, bcast, "memory order %s of [b, h, s, d]" % ("".join("bhsd"[d] for d in full))


def _pad(shape, st, phys):
    """Elements after each innermost row (the C stride rule, src/core/layout.c): the
    stride of the dim outside the innermost one beyond the row's length, when that is a
    pad attnfuzz draws (1..64); 0 else."""
    inner, outer = phys[3], phys[2]
    if st[inner] != 1 or shape[outer] <= 1:
        return 0
    extra = st[outer] - shape[inner]
    return extra if 0 < extra <= 64 else 0


def _tensor_spec(layout, perm=0, pad=0, broadcast="none"):
    return {"layout": layout, "perm": perm, "pad": pad, "broadcast": broadcast}


def mask_fields(m, is_bool, B, H, Sq, Sk, strides=None, mask_dtype="f32", notes=None):
    """A mask (numpy, aligned from the right with [B, H, Sq, Sk], True/finite = attend) read
    for the case: (structural fields, mask object, the mask as stored in a bundle).
    Structural: key_padding (a prefix of keys per batch row), causal with its diagonal, a
    window. The mask object keeps the kind, dtype, fill, broadcast dims and rank; its
    pattern is none when the structural fields say everything it masks."""
    notes = notes if notes is not None else []
    m = np.asarray(m)
    rank = m.ndim
    m4 = m.reshape((1,) * (4 - m.ndim) + m.shape)
    full_dims = "".join(c for c, n, N in zip("bhqk", m4.shape, (B, H, Sq, Sk)) if n > 1)
    expanded = False
    if strides is not None:
        st4 = (0,) * (4 - len(strides)) + tuple(strides)
        zero = "".join(c for c, n, s in zip("bhqk", m4.shape, st4) if n > 1 and s == 0)
        if zero:
            expanded = True
            full_dims = "".join(c for c in full_dims if c not in zero)
            idx = tuple(0 if c in zero else slice(None) for c in "bhqk")
            m4 = m4[idx].reshape(tuple(1 if c in zero else n for c, n in zip("bhqk", m4.shape)))
    if is_bool:
        allowed = m4.astype(bool)
        obj = {"full_dims": full_dims or "qk", "rank": 2 if rank == 2 else 4, "expanded": expanded}
    else:
        mf = m4.astype(np.float64)
        lowest = {"f32": float(np.finfo(np.float32).min), "f16": float(np.finfo(np.float16).min),
                  "bf16": -3.3895313892515355e38}[mask_dtype]
        masked = (mf == -np.inf) | (mf <= lowest / 2) | (mf <= -1e4)
        allowed = ~masked
        vals = mf[masked]
        fill = "neg_inf"
        if vals.size:
            if np.all(vals == -np.inf):
                fill = "neg_inf"
            elif np.all(vals == vals.flat[0]) and vals.flat[0] == lowest:
                fill = "lowest"
            elif np.all(vals == -1e4):
                fill = "neg_large"
            else:
                fill = "lowest"
                notes.append("additive mask: masked values %s recorded as fill lowest" % _few(np.unique(vals)))
        live = mf[allowed]
        live_zero = bool(live.size == 0 or np.all(live == 0))
        mag = 0.0
        if not live_zero:
            rms = float(np.sqrt(np.mean(live[np.isfinite(live)] ** 2))) if np.isfinite(live).any() else 1.0
            mag = min(4.0, max(-3.0, round(4 * math.log10(max(rms, 1e-30))) / 4))
            notes.append("additive mask: live values (rms %.3g) recorded as N(0,1) * 10^%g" % (rms, mag))
        obj = {"full_dims": full_dims or "qk", "rank": 2 if rank == 2 else 4, "expanded": expanded,
               "dtype": mask_dtype, "fill": fill, "live_zero": live_zero, "log10_magnitude": mag}
    if obj["rank"] == 2 and ("b" in obj["full_dims"] or "h" in obj["full_dims"]):
        obj["rank"] = 4
    fields, complete = structure_of(np.broadcast_to(allowed, (allowed.shape[0], allowed.shape[1], Sq, Sk)), Sq, Sk, B)
    if complete:
        obj["pattern"] = "none"
    else:
        share = 1.0 - float(allowed.mean())
        obj["pattern"] = "random"
        obj["density"] = int(min(255, max(0, round(256 * share))))
        notes.append("mask pattern unmapped: recorded as random at %.1f%% masked" % (100 * share))
    stored = m4.astype(bool) if is_bool else m4.astype(np.float32)
    return fields, obj, stored


def _few(vals):
    return ", ".join("%g" % v for v in list(vals)[:3]) + (", ..." if len(vals) > 3 else "")


def structure_of(allowed, Sq, Sk, B):
    """Structural fields (key_padding, causal, diagonal, diagonal_offset, window) that give
    exactly the allowed pattern [B', H', Sq, Sk] (B' 1 or B, H' 1 or heads), and whether
    they do. Each batch row's key prefix, one diagonal offset for all rows, and a left
    window edge are tried."""
    a = allowed
    if a.shape[1] > 1 and not np.all(a == a[:, :1]):
        return {}, False  # differs per head: no structural field does that
    a = a[:, 0]
    i = np.arange(Sq)[:, None]
    j = np.arange(Sk)[None, :]
    # key padding: the number of keys any query of the batch row sees, as a prefix
    kp = [int(a[b].any(axis=0).sum()) for b in range(a.shape[0])]
    fields = {}
    prefix = [(j < n) for n in kp]
    if any(n < Sk for n in kp):
        fields["key_padding"] = kp * (B if a.shape[0] == 1 else 1)
    rows = [a[b] for b in range(a.shape[0])]
    if all(np.array_equal(r, np.broadcast_to(p, r.shape)) for r, p in zip(rows, prefix)):
        return fields, True
    # a diagonal: the last allowed key of row i is i + offset, for the rows that see a key
    offsets = set()
    for r, n in zip(rows, kp):
        for ii in range(Sq):
            live = np.nonzero(r[ii])[0]
            if live.size and live[-1] < n - 1:
                offsets.add(int(live[-1]) - ii)
    if len(offsets) > 1:
        return fields, False
    off = offsets.pop() if offsets else Sk - Sq
    tri = j <= i + off
    lefts = set()
    for r in rows:
        for ii in range(Sq):
            live = np.nonzero(r[ii])[0]
            if live.size:
                lefts.add(ii + off - int(live[0]))
    left = -1
    if lefts and min(lefts) >= 0 and max(lefts) < Sk - 1 and any(ii + off - max(lefts) > 0 for ii in range(Sq)):
        left = max(lefts)
    band = tri if left < 0 else tri & (j >= i + off - left)
    if all(np.array_equal(r, band) for r in rows):
        fields.pop("key_padding", None)  # the keys no query sees lie past the diagonal
    elif not all(np.array_equal(r, band & p) for r, p in zip(rows, prefix)):
        return fields, False
    fields["causal"] = True
    if off == 0:
        fields["diagonal"] = "top_left"
    elif off == Sk - Sq:
        fields["diagonal"] = "bottom_right"
    else:
        fields["diagonal"], fields["diagonal_offset"] = "explicit", off
    if left >= 0:
        fields["window"] = [left, -1]
    return fields, True


def base_case(B, Hq, Hkv, Sq, Sk, D, Dv, dtype, scale, notes):
    """The case's dims and dtype; scale null when it is the default 1/sqrt(D)."""
    case = {"batch": B, "q_heads": Hq, "kv_heads": Hkv, "q_len": Sq, "kv_len": Sk, "head_dim": D, "v_head_dim": Dv,
            "dtype": dtype}
    if scale is not None:
        s = float(scale)
        if abs(s - 1.0 / math.sqrt(D)) > 1e-6 / math.sqrt(D):
            case["scale"] = s
    return case


# --- PyTorch ---------------------------------------------------------------------------

def _torch_canon(x):
    """A torch tensor as canonical [B, H, S, D]: 4-D as is, 3-D [N, S, D] with one head
    (None when more dims than 4: they are folded into the batch, noted by the caller)."""
    if x.dim() == 4:
        return x
    if x.dim() == 3:
        return x.unsqueeze(1)
    if x.dim() > 4:
        return x.reshape(-1, *x.shape[-3:])
    return x.reshape(1, 1, *x.shape[-2:]) if x.dim() == 2 else x


def _np32(x):
    return x.detach().float().cpu().contiguous().numpy()


def torch_case(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
               api="torch.sdpa", tensors=False):
    """(case, notes, arrays) of one scaled_dot_product_attention call."""
    import torch
    notes = []
    if q.is_nested:
        return _torch_nested_case(q, k, v, attn_mask, dropout_p, is_causal, scale, notes, tensors)
    if q.dim() > 4:
        notes.append("%d-D inputs: leading dims folded into the batch" % q.dim())
    qc, kc, vc = (_torch_canon(t) for t in (q, k, v))
    B, Hq, Sq, D = qc.shape
    _, Hkv, Sk, Dv = vc.shape[0], kc.shape[1], kc.shape[2], vc.shape[3]
    dtype, dnote = _dtype_name(q.dtype)
    if dnote:
        notes.append(dnote)
    case = base_case(B, Hq, Hkv, Sq, Sk, D, Dv, dtype, scale, notes)
    if q.is_cuda and dtype == "f32" and torch.backends.cuda.matmul.allow_tf32:
        case["allow_tf32"] = True
    same = (q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr())
    packed = layout_of([tuple(t.shape) for t in (qc, kc, vc)], [t.stride() for t in (qc, kc, vc)],
                       [t.storage_offset() for t in (qc, kc, vc)] if same else None)
    if packed:
        for n in "qkv":
            case[n] = _tensor_spec(packed)
    else:
        for n, t in zip("qkv", (qc, kc, vc)):
            layout, perm, pad, bc, note = tensor_layout(tuple(t.shape), t.stride())
            if B > 1 and t.shape[0] == 1:
                bc = "batch"
            case[n] = _tensor_spec(layout, perm, pad, bc)
            if note:
                notes.append("%s: %s" % (n, note))
    if is_causal:
        case["causal"] = True
        case["diagonal"] = "top_left"
    if dropout_p:
        case["dropout_p"] = float(dropout_p)
    arrays = None
    if tensors:
        arrays = {"q": _np32(qc), "k": _np32(kc.expand(B, -1, -1, -1)), "v": _np32(vc.expand(B, -1, -1, -1))}
    if attn_mask is not None:
        is_bool = attn_mask.dtype == torch.bool
        mdt, _ = _dtype_name(attn_mask.dtype)
        m = attn_mask.detach().cpu()
        if not is_bool:
            m = m.float()
        fields, obj, stored = mask_fields(m.numpy(), is_bool, B, Hq, Sq, Sk, tuple(attn_mask.stride()),
                                          mdt, notes)
        case.update(fields)  # torch refuses is_causal with a mask: no diagonal to reconcile
        case["bool_mask" if is_bool else "additive_mask"] = obj
        if arrays is not None:
            arrays["bool_mask" if is_bool else "mask"] = stored
    return case, notes, arrays


def _torch_nested_case(q, k, v, attn_mask, dropout_p, is_causal, scale, notes, tensors):
    """A nested (jagged) SDPA call, q [B, H, j, D]: the case padded to the longest sequence,
    each batch row's key count as key_padding (the case has no query padding: its padded
    query rows are noted)."""
    import torch
    lens_q = [int(t.shape[-2]) for t in q.unbind()]
    lens_k = [int(t.shape[-2]) for t in k.unbind()]
    B, Hq, D = q.size(0), q.size(1), q.size(-1)
    Hkv, Dv = k.size(1), v.size(-1)
    dtype, dnote = _dtype_name(q.dtype)
    if dnote:
        notes.append(dnote)
    Sq, Sk = max(lens_q), max(lens_k)
    case = base_case(B, Hq, Hkv, Sq, Sk, D, Dv, dtype, scale, notes)
    for n in "qkv":
        case[n] = _tensor_spec("bshd")
    if min(lens_k) < Sk:
        case["key_padding"] = lens_k
    if is_causal:
        case["causal"] = True
        case["diagonal"] = "top_left"
    if dropout_p:
        case["dropout_p"] = float(dropout_p)
    notes.append("nested jagged tensors: query lengths %s padded to %d" % (lens_q, Sq))
    if attn_mask is not None:
        notes.append("a mask on nested tensors is not recorded")
    arrays = None
    if tensors:
        def pad(x, S):
            out = torch.zeros(x.size(0), x.size(1), S, x.size(-1))
            for b, t in enumerate(x.unbind()):
                out[b, :, :t.shape[-2]] = t.detach().float().cpu()
            return out.numpy()
        arrays = {"q": pad(q, Sq), "k": pad(k, Sk), "v": pad(v, Sk)}
    return case, notes, arrays


def varlen_case(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1),
                enable_gqa=False, seqused_k=None, block_table=None, tensors=False, **kw):
    """(case, notes, arrays) of one torch.nn.attention.varlen.varlen_attn call: THD inputs
    [T, H, D] cut by cu_seq_q/cu_seq_k, padded to [B, H, max, D] (layout bshd), each
    sequence's key count as key_padding; window_size (FlashAttention's (left, right),
    (-1, 0) causal) as causal and window on the bottom-right diagonal of the keys."""
    notes = []
    cq = [int(x) for x in cu_seq_q.tolist()]
    lens_q = [b - a for a, b in zip(cq, cq[1:])]
    if seqused_k is not None:
        lens_k = [int(x) for x in seqused_k.tolist()]
    else:
        ck = [int(x) for x in cu_seq_k.tolist()]
        lens_k = [b - a for a, b in zip(ck, ck[1:])]
    B, Hq, D = len(lens_q), query.shape[-2], query.shape[-1]
    Hkv, Dv = key.shape[-2], value.shape[-1]
    dtype, dnote = _dtype_name(query.dtype)
    if dnote:
        notes.append(dnote)
    Sq, Sk = int(max_q), int(max_k)
    if block_table is not None:
        notes.append("paged K/V (block_table): recorded as dense sequences")
    case = base_case(B, Hq, Hkv, Sq, Sk, D, Dv, dtype, scale, notes)
    for n in "qkv":
        case[n] = _tensor_spec("bshd")
    if min(lens_k) < Sk:
        case["key_padding"] = lens_k
    left, right = (int(w) for w in window_size)
    if right == 0:
        case["causal"], case["diagonal"] = True, "bottom_right_valid"
        if left >= 0:
            case["window"] = [left, -1]
    elif (left, right) != (-1, -1):
        case["diagonal"], case["window"] = "bottom_right_valid", [left, right]
    if len(set(lens_q)) > 1 or lens_q[0] != Sq:
        notes.append("varlen query lengths %s padded to %d (the diagonal is each sequence's bottom right: "
                     "the case aligns it to the padded length)" % (lens_q, Sq))
    arrays = None
    if tensors and block_table is None:
        def pad(x, cu, S):
            out = np.zeros((B, x.shape[-2], S, x.shape[-1]), np.float32)
            for b in range(B):
                seg = x[cu[b]:cu[b + 1]].detach().float().cpu().numpy()
                out[b, :, :seg.shape[0]] = seg.transpose(1, 0, 2)
            return out
        ck = [int(x) for x in cu_seq_k.tolist()]
        arrays = {"q": pad(query, cq, Sq), "k": pad(key, ck, Sk), "v": pad(value, ck, Sk)}
    return case, notes, arrays


def flex_case(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, tensors=False, **kw):
    """(case, notes, arrays) of one flex_attention call: the block mask's mask_mod made
    dense (create_mask) and read like an SDPA boolean mask; a score_mod is noted unmapped."""
    case, notes, arrays = torch_case(query, key, value, None, 0.0, False, scale, enable_gqa, tensors=tensors)
    if score_mod is not None:
        notes.append("flex score_mod %s unmapped" % getattr(score_mod, "__name__", type(score_mod).__name__))
    if block_mask is not None:
        from torch.nn.attention.flex_attention import create_mask
        B, Hq, Sq, Sk = case["batch"], case["q_heads"], case["q_len"], case["kv_len"]
        mod = block_mask.mask_mod
        dense = create_mask(mod, B, Hq, Sq, Sk, device=query.device).cpu().numpy()
        fields, obj, stored = mask_fields(dense, True, B, Hq, Sq, Sk, None, "f32", notes)
        name = getattr(mod, "__name__", type(mod).__name__)
        if obj["pattern"] == "none":
            case.update(fields)  # the mask_mod maps to structural fields: no mask object
            notes.append("flex mask_mod %s mapped to %s" % (name, ", ".join(sorted(fields)) or "no mask"))
        else:
            notes[-1] = "flex mask_mod %s unmapped: recorded as a random boolean mask at density %d/256" % (
                name, obj["density"])
            case.update(fields)
            case["bool_mask"] = obj
            if arrays is not None:
                arrays["bool_mask"] = stored
    if kw.get("return_lse"):
        notes.append("return_lse")
    return case, notes, arrays


# --- JAX -------------------------------------------------------------------------------

def jax_case(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False, query_seq_lengths=None,
             key_value_seq_lengths=None, local_window_size=None, implementation=None, tensors=False, **kw):
    """(case, notes, arrays) of one jax.nn.dot_product_attention call: [B, T, N, H] inputs,
    so layout bshd; values are read only when concrete (under jit they are tracers)."""
    import jax
    notes = []
    q3 = query.ndim == 3
    qs = (1,) + tuple(query.shape) if q3 else tuple(query.shape)
    ks = (1,) + tuple(key.shape) if q3 else tuple(key.shape)
    vs = (1,) + tuple(value.shape) if q3 else tuple(value.shape)
    B, Sq, Hq, D = qs
    _, Sk, Hkv, _ = ks
    Dv = vs[3]
    dtype, dnote = _dtype_name(query.dtype)
    if dnote:
        notes.append(dnote)
    case = base_case(B, Hq, Hkv, Sq, Sk, D, Dv, dtype, scale, notes)
    for n in "qkv":
        case[n] = _tensor_spec("bshd")
    if is_causal:
        case["causal"], case["diagonal"] = True, "top_left"
    if implementation:
        notes.append("implementation=%s" % implementation)

    def concrete(x):
        return x is not None and not isinstance(x, jax.core.Tracer)
    if key_value_seq_lengths is not None:
        if concrete(key_value_seq_lengths):
            case["key_padding"] = [int(n) for n in np.asarray(key_value_seq_lengths).reshape(-1)]
        else:
            notes.append("key_value_seq_lengths traced: key padding present, lengths unknown")
    if query_seq_lengths is not None:
        notes.append("query_seq_lengths: query padding is not a case field")
    if local_window_size is not None:
        w = local_window_size if isinstance(local_window_size, tuple) else (local_window_size, local_window_size)
        case["window"] = [int(w[0]), int(w[1])]
    arrays = None
    for name, m, is_bool in (("bias", bias, False), ("mask", mask, True)):
        if m is None:
            continue
        if not concrete(m):
            notes.append("%s traced: recorded as a %s mask of pattern random" % (name, "boolean" if is_bool else "additive"))
            case["bool_mask" if is_bool else "additive_mask"] = {"full_dims": "".join(
                c for c, n in zip("bhqk", (1,) * (4 - m.ndim) + tuple(m.shape)) if n > 1) or "qk",
                "pattern": "random", "density": 0}
            continue
        mdt, _ = _dtype_name(m.dtype)
        fields, obj, stored = mask_fields(np.asarray(m), is_bool, B, Hq, Sq, Sk, None, mdt, notes)
        case.update({f: val for f, val in fields.items() if f not in case})
        case["bool_mask" if is_bool else "additive_mask"] = obj
        if tensors:
            arrays = arrays or {}
            arrays["bool_mask" if is_bool else "mask"] = stored
    if tensors and all(concrete(x) for x in (query, key, value)):
        arrays = arrays or {}
        for n, x in zip("qkv", (query, key, value)):
            a = np.asarray(x, dtype=np.float32)
            a = a[None] if q3 else a
            arrays[n] = np.ascontiguousarray(a.transpose(0, 2, 1, 3))
    elif tensors:
        notes.append("tensors traced under jit: not stored")
    return case, notes, arrays


# --- the hooks -------------------------------------------------------------------------

_ACTIVE = []  # the recorders in force (a stack: recordings may nest)


def _record(api, build, args, kwargs):
    if not _ACTIVE:
        return
    rec = _ACTIVE[-1]
    try:
        case, notes, arrays = build(*args, tensors=rec.tensors, **kwargs)
        rec.add(api, case, notes, arrays, _site())
    except Exception as exc:  # recording never breaks the program
        rec.note_error(api, exc)


def _wrap(api, orig, build):
    def hooked(*args, **kwargs):
        _record(api, build, args, kwargs)
        return orig(*args, **kwargs)
    hooked.__wrapped__ = orig
    hooked.__name__ = getattr(orig, "__name__", api)
    hooked.__doc__ = getattr(orig, "__doc__", None)
    hooked._attnfuzz_capture = True
    return hooked


def _sdpa_build(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                tensors=False):
    return torch_case(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, tensors=tensors)


class _Patches:
    """The attributes replaced, to put back in reverse order."""

    def __init__(self):
        self.undo = []

    def set(self, obj, name, value):
        self.undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def everywhere(self, orig, hooked):
        """Every loaded module that imported orig by name (`from torch.nn.functional import
        scaled_dot_product_attention`) gets hooked too."""
        for mod in list(sys.modules.values()):
            d = getattr(mod, "__dict__", None)
            if not isinstance(d, dict) or mod is None:
                continue
            for name, val in list(d.items()):
                if val is orig:
                    self.set(mod, name, hooked)

    def restore(self):
        while self.undo:
            obj, name, val = self.undo.pop()
            setattr(obj, name, val)


def _install(patches):
    """Hooks every framework that is importable (a missing one is no error: a program that
    does not use it makes no such calls)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        torch = None
    if torch is not None:
        orig = F.scaled_dot_product_attention
        if not getattr(orig, "_attnfuzz_capture", False):
            hooked = _wrap("torch.sdpa", orig, _sdpa_build)
            patches.everywhere(orig, hooked)  # F, torch._C._nn and by-name importers
        try:
            import torch.nn.attention.varlen as vl
            if not getattr(vl.varlen_attn, "_attnfuzz_capture", False):
                vorig = vl.varlen_attn
                patches.everywhere(vorig, _wrap("torch.varlen_attn", vorig, varlen_case))
        except ImportError:
            pass
        try:
            import torch.nn.attention.flex_attention as fa
            if not getattr(fa.flex_attention, "_attnfuzz_capture", False):
                forig = fa.flex_attention
                patches.everywhere(forig, _wrap("torch.flex_attention", forig, flex_case))
        except ImportError:
            pass
    if "jax" in sys.modules or _importable("jax"):
        try:
            import jax
            jorig = jax.nn.dot_product_attention
            if not getattr(jorig, "_attnfuzz_capture", False):
                patches.everywhere(jorig, _wrap("jax.dot_product_attention", jorig, jax_case))
        except ImportError:
            pass


def _importable(name):
    import importlib.util
    return importlib.util.find_spec(name) is not None


@contextlib.contextmanager
def recording(out, tensors=False, command=None):
    """Records the attention calls made inside the block into the corpus out (written, or
    added to, when the block ends, also when it raises). Yields the Recorder."""
    rec = Recorder(out, tensors)
    patches = _Patches()
    _install(patches)
    _ACTIVE.append(rec)
    try:
        yield rec
    finally:
        _ACTIVE.remove(rec)
        patches.restore()
        rec.write(command)


# --- ONNX ------------------------------------------------------------------------------

def record_onnx(path, out=None, dims=None, recorder=None):
    """Records an ONNX model's attention nodes (ai.onnx Attention, com.microsoft
    MultiHeadAttention and GroupQueryAttention) from their input shapes (after shape
    inference) and attributes. dims: symbolic dim name -> size (default: 1 for a name with
    "batch" in it, else 16, noted). Writes into out unless a recorder is given; returns the
    recorder."""
    import onnx
    from onnx import shape_inference
    model = shape_inference.infer_shapes(onnx.load(path))
    g = model.graph
    shapes, etypes = {}, {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
        etypes[vi.name] = t.elem_type
    for init in g.initializer:
        shapes[init.name] = list(init.dims)
        etypes[init.name] = init.data_type
    rec = recorder or Recorder(out)
    dims = dict(dims or {})
    for node in g.node:
        if node.op_type not in ("Attention", "MultiHeadAttention", "GroupQueryAttention"):
            continue
        api = "onnx.%s%s" % (node.domain + "." if node.domain else "", node.op_type)
        try:
            case, notes = _onnx_case(node, shapes, etypes, dims)
            rec.add(api, case, notes, None, "%s node %s" % (os.path.basename(path), node.name or "?"))
        except Exception as exc:
            rec.note_error(api, exc)
    if recorder is None:
        rec.write(["onnx", path])
    return rec


def _onnx_case(node, shapes, etypes, dims):
    from onnx import TensorProto, helper
    notes = []
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    ins = list(node.input) + [""] * 8

    def shape(name):
        out = []
        for d in shapes.get(name, []):
            if isinstance(d, str):
                n = dims.get(d, 1 if "batch" in d.lower() else 16)
                if d not in dims:
                    notes.append("symbolic dim %s taken as %d" % (d, n))
                    dims[d] = n
                d = n
            out.append(d)
        return out
    dt = {TensorProto.FLOAT16: "f16", TensorProto.BFLOAT16: "bf16"}.get(etypes.get(ins[0]), "f32")
    q, k, v = shape(ins[0]), shape(ins[1]), shape(ins[2])
    if node.op_type == "Attention":
        if len(q) == 4:
            B, Hq, Sq, D = q
            _, Hkv, Sk, _ = k
            Dv = v[3]
            layout = "bhsd"
        else:
            Hq, Hkv = attrs["q_num_heads"], attrs["kv_num_heads"]
            B, Sq, D = q[0], q[1], q[2] // Hq
            Sk, Dv = k[1], v[2] // Hkv
            layout = "bsd"
        case = base_case(B, Hq, Hkv, Sq, Sk, D, Dv, dt, attrs.get("scale"), notes)
        if attrs.get("is_causal"):
            case["causal"], case["diagonal"] = True, "top_left"
        if attrs.get("softcap"):
            case["softcap"] = float(attrs["softcap"])
        mask = ins[3]
        if ins[4] or ins[5]:
            notes.append("past key/value inputs: the cache is not recorded")
    else:
        H = attrs["num_heads"]
        Hkv = attrs.get("kv_num_heads", H)
        if len(q) == 5:  # MultiHeadAttention's packed [B, S, N, 3, H]
            B, Sq, _, _, D = q
            Sk, Dv, layout = Sq, D, "qkv_bsh3d"
        elif not ins[1]:  # GroupQueryAttention's packed [B, S, (Hq + 2 Hkv) D]
            B, Sq, C = q
            D = C // (H + 2 * Hkv)
            Sk, Dv, layout = Sq, D, "bsd"
            notes.append("packed QKV [B, S, (Hq + 2 Hkv) D]: recorded as bsd")
        else:
            B, Sq, C = q
            D = C // H
            Sk = k[1]
            Dv = (v[2] // Hkv) if len(v) == 3 else v[-1]
            layout = "bsd" if len(k) == 3 else "bhsd"
        case = base_case(B, H, Hkv, Sq, Sk, D, Dv, dt, attrs.get("scale") or None, notes)
        if node.op_type == "GroupQueryAttention":
            case["causal"], case["diagonal"] = True, "bottom_right"
            if attrs.get("softcap"):
                case["softcap"] = float(attrs["softcap"])
            if attrs.get("local_window_size", -1) > 0:
                case["window"] = [int(attrs["local_window_size"]), -1]
            if attrs.get("do_rotary"):
                notes.append("do_rotary: rotary embedding inside the node is not a case field")
            mask = ""
        else:
            if attrs.get("unidirectional"):
                case["causal"], case["diagonal"] = True, "top_left"
            mask = ins[4] or ins[5]  # key_padding_mask or attention_bias
    for n in "qkv":
        case[n] = _tensor_spec(layout)
    if mask:
        is_bool = etypes.get(mask) == TensorProto.BOOL
        ms = shape(mask)
        ms4 = [1] * (4 - len(ms)) + ms
        obj = {"full_dims": "".join(c for c, n in zip("bhqk", ms4) if n > 1) or "qk", "rank": 2 if len(ms) == 2 else 4,
               "pattern": "random", "density": 0}
        case["bool_mask" if is_bool else "additive_mask"] = obj
        notes.append("mask input %s %s: its values are not in the graph (pattern random)" % (mask, ms))
    return case, notes


# --- the command -----------------------------------------------------------------------

def _program(command):
    """(kind, target, argv) for runpy: ("path", script, argv) or ("module", name, argv);
    ValueError when command is no Python program."""
    if not command:
        raise ValueError("no program given (-- python my_model.py ...)")
    first = os.path.basename(command[0])
    if first.startswith("python"):
        rest = command[1:]
        while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
            rest = rest[1:]  # interpreter options (-u, -O, -X...) have no effect here
        if rest and rest[0] == "-m" and len(rest) > 1:
            return "module", rest[1], [rest[1]] + rest[2:]
        if rest and rest[0] == "-c":
            raise ValueError("python -c is not captured: put the code in a script")
        if not rest:
            raise ValueError("no script after %s" % command[0])
        return "path", rest[0], rest
    if command[0].endswith(".py") or _is_python_script(command[0]):
        return "path", command[0], command
    raise ValueError("%s is not a Python program: only Python programs can be captured "
                     "(their attention calls are hooked in the same interpreter)" % command[0])


def _is_python_script(path):
    try:
        with open(path, "rb") as f:
            line = f.readline(200)
        return line.startswith(b"#!") and b"python" in line
    except OSError:
        return False


def run_program(command, out, tensors=False):
    """Runs command (python SCRIPT ARGS, SCRIPT ARGS, python -m MODULE ARGS) in this
    process under recording(out); returns (index, exit status)."""
    kind, target, argv = _program(command)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = list(argv)
    if kind == "path":
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    status = 0
    with recording(out, tensors, command) as rec:
        try:
            if kind == "path":
                runpy.run_path(target, run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            status = 1
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
    return _read_index(rec.out), status


def _read_index(out):
    with open(os.path.join(out, INDEX)) as f:
        return json.load(f)


def summary_lines(index):
    """The table printed at the end: count, API, case in words, first site."""
    lines = []
    for c in index["cases"]:
        k = c["case"]
        words = "B%d Hq%d Hkv%d Sq%d Sk%d D%d %s %s" % (k.get("batch", 1), k.get("q_heads", 1),
                                                        k.get("kv_heads", k.get("q_heads", 1)), k.get("q_len", 1),
                                                        k.get("kv_len", k.get("q_len", 1)), k.get("head_dim", 1),
                                                        k.get("dtype", "f32"), k.get("q", {}).get("layout", "bhsd"))
        for f in ("causal", "key_padding", "window", "additive_mask", "bool_mask", "dropout_p", "scale"):
            if k.get(f):
                words += " " + (f if f != "causal" else "causal:" + k.get("diagonal", "top_left"))
        site = next(iter(c["sites"]), "")
        lines.append("%6d  %-26s %-20s %s  %s" % (c["count"], c["api"], c["name"], words, site))
    return lines


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    command = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(prog="attnfuzz capture", description=__doc__.split("\n\n")[0],
                                 usage="attnfuzz capture -o DIR [--tensors] [--onnx MODEL [--dim NAME=N]...] "
                                       "[-- python SCRIPT|-m MODULE ARGS...]",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", required=True, help="the corpus directory (created, or added to)")
    ap.add_argument("--tensors", action="store_true", help="also store each case's first call's tensors")
    ap.add_argument("--onnx", action="append", default=[], metavar="MODEL",
                    help="record the attention nodes of an ONNX model (repeatable)")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                    help="an ONNX symbolic dim's size (default 1 for batch dims, 16 else)")
    a = ap.parse_args(argv)
    if not command and not a.onnx:
        ap.error("give a program after -- (python my_model.py ...) or --onnx MODEL")
    status = 0
    if a.onnx:
        dims = dict((d.split("=", 1)[0], int(d.split("=", 1)[1])) for d in a.dim)
        for path in a.onnx:
            record_onnx(path, a.out, dims)
    if command:
        try:
            _, status = run_program(command, a.out, a.tensors)
        except ValueError as exc:
            print("attnfuzz capture: %s" % exc, file=sys.stderr)
            return 2
    index = _read_index(a.out)
    print("attnfuzz capture: %d calls, %d cases in %s (%s)" % (index["calls"], len(index["cases"]), a.out, INDEX),
          file=sys.stderr)
    for ln in summary_lines(index):
        print(ln, file=sys.stderr)
    for e in index.get("errors", []):
        print("attnfuzz capture: not recorded: %s" % e, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
