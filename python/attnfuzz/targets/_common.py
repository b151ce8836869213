"""Host-side code shared by the real targets' model code: the user code around an attention
call, not the part under test. Model code calls these by the names `_common.X`, `masks.X`
and `layouts.X`; snippet() copies their source into standalone repro scripts.

- the structural mask (causal / key padding / sliding window on the diagonal
  d(b, i) = i + offset(b), docs/design.md section 2) as a boolean input, and whether a
  stack's native "causal from the top-left" flag can express a case (plain_causal for one
  case, offset_zero_always for every value draw of a compile key);
- span_view, to rebuild a strided numpy view in a framework (torch takes strided views);
  the graph compilers (openvino, tvm, jax) take dense tensors, and the graph each builds
  does the layout handling itself (transposes, the bsd head split, the packed-QKV slices);
- the explicit graphs' scale placement and dropout scale;
- snippet(): the standalone source of a target's model code for repro scripts.
"""

from __future__ import annotations

import inspect

import numpy as np

from attnfuzz import layouts, masks

ALL_LAYOUTS = list(layouts.ALL)
OUT_LAYOUT = layouts.OUT_LAYOUT


def structural_allowed(case):
    """The structural masks as bool [B, 1, Sq, Sk] (True = attend), or None when none apply
    (masks.allowed: causal j > d(b, i), the window j < d - left and j > d + right, key
    padding j >= key_padding[b] are masked)."""
    return masks.allowed(case) if masks.has_structural(case) else None


def plain_causal(case) -> bool:
    """Causal with offset 0 for every row and nothing else structural: what is_causal=True means
    in PyTorch SDPA (top-left)."""
    left, right = case.window
    return (bool(case.causal) and case.key_padding is None and left < 0 and right < 0
            and all(int(o) == 0 for o in case.diag_offset))


def offset_zero_always(case) -> bool:
    """True when the diagonal offset is 0 for every row of every value draw of this compile
    key: top-left, an explicit offset 0, or bottom-right with Sq == Sk. (bottom_right_valid
    depends on the key padding values, which change between draws.)"""
    d = case.diagonal
    if d == "top_left":
        return True
    if d == "explicit":
        return case.diagonal_offset == 0
    if d == "bottom_right":
        return case.q_len == case.kv_len
    return False


def span_view(x: np.ndarray) -> tuple:
    """(flat, shape, strides_in_elements) for a strided numpy view with non-negative strides:
    `flat` is the 1-D span of memory the view touches, so a framework can rebuild the exact
    view (stride-0 broadcast dims and padded rows included) with as_strided."""
    item = x.itemsize
    shape = tuple(int(n) for n in x.shape)
    strides = tuple(int(s) for s in x.strides)
    if any(s < 0 or s % item for s in strides):
        raise ValueError(f"span_view: strides {strides} are not non-negative multiples of {item}")
    if 0 in shape:
        return np.empty(0, dtype=x.dtype), shape, tuple(s // item for s in strides)
    span = 1 + sum((n - 1) * (s // item) for n, s in zip(shape, strides))
    flat = np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(item,))
    return flat, shape, tuple(s // item for s in strides)


def dense_arguments(req, inputs, *old):
    """The inputs of a graph built from dense tensors, in order, as contiguous numpy arrays:
    the request's q, k, v (or the packed qkv buffer), then each name of inputs: "mask" (the
    additive mask as sent), "bool_mask" (as sent), "struct" (the structural masks, bool
    [B, 1, Sq, Sk]), "kv_len" (int32 key lengths), "keep" (the dropout keep mask). The old
    positional form dense_arguments(case, q, k, v, mask, bool_mask, keep, inputs) (the
    packed buffer case.qkv: an old-form hook's case) is taken too."""
    if old:
        case, q, k, v, mask, bool_mask, keep, inputs = (req, inputs) + old
        qkv = case.qkv if case.packed else None
    else:
        case, q, k, v, mask, bool_mask, qkv = req.case, req.q, req.k, req.v, req.mask, req.bool_mask, req.qkv
    args = [qkv] if case.packed else [q, k, v]
    for n in inputs:
        if n == "mask":
            args.append(mask)
        elif n == "bool_mask":
            args.append(bool_mask)
        elif n == "struct":
            args.append(structural_allowed(case))
        elif n == "kv_len":
            args.append(np.asarray(case.key_padding, dtype=np.int32))
        elif n == "keep":
            args.append(keep if old else req.keep)
        else:
            raise ValueError("dense_arguments: unknown input %r" % (n,))
    return [np.ascontiguousarray(a) for a in args]


def dropout_scale(p: float) -> float:
    """1/(1-p) for kept weights; 0 when p = 1 (every weight dropped)."""
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


def scale_factors(case):
    """(on_scores, on_q, on_k): the factors an explicit graph applies at the case's placement
    (equal products in exact arithmetic)."""
    s = float(case.scale)
    pl = case.placement
    if pl == "q":
        return 1.0, s, 1.0
    if pl == "k":
        return 1.0, 1.0, s
    if pl == "sqrt_qk":
        r = float(np.sqrt(abs(s)))
        return 1.0, r, (r if s >= 0 else -r)
    return s, 1.0, 1.0


# What snippet() puts in every repro: the helpers above and the layout/mask code they call,
# reachable as _common.X, masks.X and layouts.X as in the targets' own code.
HOST = {
    "_common": (structural_allowed, plain_causal, offset_zero_always, span_view, dense_arguments, dropout_scale,
                scale_factors),
    "masks": (masks.allowed, masks.has_structural),
    "layouts": (layouts.to_bhsd, layouts.from_bhsd, layouts.out_shape, layouts.physical_shape,
                layouts.packed_views, layouts.grads_bhsd),
}
HOST_CONSTS = {"ALL_LAYOUTS": ALL_LAYOUTS, "OUT_LAYOUT": OUT_LAYOUT, "PER_TENSOR": layouts.PER_TENSOR}


def snippet(imports, objects, consts=None, namespaces=None, tail=""):
    """Standalone Python source for a repro script: the import lines, constants (NAME =
    repr(value)), the host helpers of HOST and the source of each object (functions and
    classes of a target's model code, copied verbatim), namespace classes so that model
    code calling `_common.f(...)`, `masks.f(...)` or `layouts.f(...)` runs unchanged (plus
    any namespaces given: {"name": [objects]}), then tail (usually the
    `attention(case, q, k, v, mask=None, bool_mask=None, keep=None)` entry point).
    The source never imports attnfuzz."""
    consts = dict(HOST_CONSTS, **(consts or {}))
    spaces = {k: list(v) for k, v in HOST.items()}
    for k, v in (namespaces or {}).items():
        spaces.setdefault(k, []).extend(v)
    parts = ["import math", "import numpy as np"] + list(imports) + [""]
    parts += ["%s = %r" % (k, v) for k, v in consts.items()]
    # the namespaces' functions, then the classes naming them (bound now: the model code
    # below may define functions of the same names, e.g. its own to_bhsd)
    for objs in spaces.values():
        parts += [inspect.getsource(o) for o in objs]
    for space, objs in spaces.items():
        parts.append("\nclass %s:  # the name the model code calls these by" % space)
        parts += ["    %s = %s" % (k, k) for k in consts]
        parts += ["    %s = staticmethod(%s)" % (o.__name__, o.__name__) for o in objs]
    parts += [inspect.getsource(o) for o in objects]
    parts.append(tail)
    return "\n".join(parts) + "\n"


# The seconds a torch.compile (Inductor) variant's first build of a structure may take
# (its hello's compile_timeout): C++ or Triton code generation and a compiler run. A flex case
# of 2,706 keys built in 38 s and a compiled explicit one in 22 s on a 2-core VM running two
# test suites; the main job beside those suites (load about 8) timed both out at the
# default 60 s + 10 s, its torch-compiled campaign 2 cases in 307 s, both right on replay.
INDUCTOR_COMPILE_TIMEOUT = 300


# -- the hello's "libs" --------------------------------------------------------------------

def torch_libs(torch, cuda, device="cuda"):
    """What the hello's "libs" adds for torch (the stack's own version aside): "onednn" (the
    oneDNN its CPU kernels link, as torch.__config__ reports it), and on CUDA "cuda",
    "cudnn" and "sm" (the device's compute capability, 90 for 9.0)."""
    import re
    out = {}
    m = re.search(r"MKL-DNN v(\d+(?:\.\d+)*)", torch.__config__.show())
    if m:
        out["onednn"] = m.group(1)
    if cuda:
        if torch.version.cuda:
            out["cuda"] = str(torch.version.cuda)
        v = torch.backends.cudnn.version()
        if v:   # cuDNN 9: 91900 is 9.19.0; cuDNN 8: 8902 is 8.9.2
            out["cudnn"] = ("%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100) if v >= 90000
                            else "%d.%d.%d" % (v // 1000, v // 100 % 10, v % 100))
        major, minor = torch.cuda.get_device_capability(device)
        out["sm"] = str(major * 10 + minor)
    return out


def jax_libs(gpu):
    """What the hello's "libs" adds for jax: "jaxlib", and "cudnn" where a GPU runs it (as
    jaxlib reports the cuDNN it loaded)."""
    out = {}
    try:
        import jaxlib
        out["jaxlib"] = str(jaxlib.__version__)
    except Exception:  # noqa: BLE001 - no jaxlib version to report
        pass
    if gpu:
        try:
            from jax._src.lib import cuda_versions
            v = cuda_versions.cudnn_get_version() if cuda_versions else None
            if v:
                out["cudnn"] = "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
        except Exception:  # noqa: BLE001 - a jaxlib without the query
            pass
    return out
