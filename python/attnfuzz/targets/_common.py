"""Host-side preparation shared by the real targets (torch, ort, tensorrt, openvino, tvm,
jax): the user code around an attention call, not the part under test.

- the structural mask (causal / key padding / sliding window on the diagonal
  d(b, i) = i + offset(b), DESIGN.md section 2) as a boolean input, and whether a stack's
  native "causal from the top-left" flag can express a case (plain_causal for one case,
  offset_zero_always for every value draw of a compile key);
- the output layout that goes with an input layout, and a model output's [B, H, S, Dv] view;
- span_view, to rebuild a strided numpy view in a framework (torch takes strided views);
  the graph compilers (openvino, tvm, jax) take dense tensors, and the graph each builds
  does the layout handling itself (transposes, the bsd head split, the packed-QKV slices);
- the explicit graphs' scale placement, the counter RNG's dropout keep mask, a budget on
  materialized scores;
- a small bounded cache (LRU) of compiled artifacts (modules, sessions, engines).
"""

from __future__ import annotations

import collections

import numpy as np

PACKED = ("qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first")
UNPACKED = ("bhsd", "bshd", "sbhd", "bsd", "channels_first")
ALL_LAYOUTS = list(UNPACKED + PACKED)

# The output layout of a model whose Q comes in layout L: a packed QKV model returns its
# output unpacked in the same family.
OUT_LAYOUT = {"bhsd": "bhsd", "bshd": "bshd", "sbhd": "sbhd", "bsd": "bsd", "channels_first": "channels_first",
              "qkv_bs3hd": "bshd", "qkv_bsh3d": "bshd", "qkv_channels_first": "channels_first"}


def has_structural(case) -> bool:
    """True when the case masks keys by causal, key padding or a sliding window."""
    left, right = case.window
    return bool(case.causal) or case.key_padding is not None or left >= 0 or right >= 0


def structural_allowed(case):
    """The structural masks as bool [B, 1, Sq, Sk] (True = attend), or None when none apply.

    Causal masks j > d(b, i), the window masks j < d - left and j > d + right, key padding
    masks j >= key_padding[b]; d(b, i) = i + diag_offset[b].
    """
    if not has_structural(case):
        return None
    B, Sq, Sk = case.batch, case.q_len, case.kv_len
    i = np.arange(Sq, dtype=np.int64).reshape(1, Sq, 1)
    j = np.arange(Sk, dtype=np.int64).reshape(1, 1, Sk)
    d = i + np.asarray(case.diag_offset, dtype=np.int64).reshape(B, 1, 1)
    allowed = np.ones((B, Sq, Sk), dtype=bool)
    if case.causal:
        allowed &= j <= d
    left, right = case.window
    if left >= 0:
        allowed &= j >= d - left
    if right >= 0:
        allowed &= j <= d + right
    if case.key_padding is not None:
        kp = np.asarray(case.key_padding, dtype=np.int64).reshape(B, 1, 1)
        allowed &= j < kp
    return allowed.reshape(B, 1, Sq, Sk)


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


def output_bhsd(o, layout, heads, v_head_dim):
    """A model's output in one of the five unpacked layouts -> its [B, H, S, Dv] view."""
    o = np.asarray(o)
    if layout == "bhsd":
        return o
    if layout == "bshd":
        return o.transpose(0, 2, 1, 3)
    if layout == "sbhd":
        return o.transpose(1, 2, 0, 3)
    if layout == "bsd":
        b, s, _ = o.shape
        return o.reshape(b, s, heads, v_head_dim).transpose(0, 2, 1, 3)
    if layout == "channels_first":
        b, _, s = o.shape
        return o.reshape(b, heads, v_head_dim, s).transpose(0, 1, 3, 2)
    raise ValueError(f"output_bhsd: layout {layout!r} is not an output layout")


def span_view(x: np.ndarray) -> tuple:
    """(flat, shape, strides_in_elements) for a strided numpy view with non-negative strides:
    `flat` is the 1-D span of memory the view touches, so a framework can rebuild the exact
    view (stride-0 broadcast dims and padded rows included) with as_strided."""
    item = x.itemsize
    shape = tuple(int(n) for n in x.shape)
    strides = tuple(int(s) for s in x.strides)
    if any(s < 0 or s % item for s in strides):
        raise ValueError(f"_common.span_view: strides {strides} are not non-negative multiples of {item}")
    if 0 in shape:
        return np.empty(0, dtype=x.dtype), shape, tuple(s // item for s in strides)
    span = 1 + sum((n - 1) * (s // item) for n, s in zip(shape, strides))
    flat = np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(item,))
    return flat, shape, tuple(s // item for s in strides)


def keep_mask(case):
    """The counter RNG's dropout keep mask, bool [B, Hq, Sq, Sk] (DESIGN.md section 2)."""
    from attnfuzz import rng
    return rng.dropout_keep(case.dropout_seed, case.dropout_p, case.batch, case.q_heads, case.q_len, case.kv_len)


def have_counter_rng() -> bool:
    """True when attnfuzz.rng (the counter dropout rule) imports: an explicit graph then
    takes the keep mask as an input and declares dropout "counter"."""
    try:
        from attnfuzz import rng  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure means no counter dropout
        return False
    return hasattr(rng, "dropout_keep")


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


SCORE_BYTES_LIMIT = 1 << 30


def check_score_budget(case, limit=SCORE_BYTES_LIMIT):
    """Raises attnfuzz.worker.Unsupported when the float32 scores [B, Hq, Sq, Sk] that these
    graphs materialize (explicit softmax, XLA's dot_product_attention, host masks) would
    take more than limit bytes: the tensors fit the case budget, the scores need not."""
    n = 4 * case.batch * case.q_heads * case.q_len * case.kv_len
    if n > limit:
        from attnfuzz.worker import Unsupported
        raise Unsupported("the scores [B, Hq, Sq, Sk] would take %.1f GiB (limit %.1f GiB)"
                          % (n / 2.0 ** 30, limit / 2.0 ** 30))


class LRU:
    """A small least-recently-used cache of compiled artifacts (modules, sessions, engines),
    keyed by case.key(...)."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._d: collections.OrderedDict = collections.OrderedDict()

    def get(self, key):
        v = self._d.get(key)
        if v is not None:
            self._d.move_to_end(key)
        return v

    def put(self, key, value):
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.capacity:
            self._d.popitem(last=False)
        return value

    def __len__(self):
        return len(self._d)
