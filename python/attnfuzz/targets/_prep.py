"""Host-side preparation shared by the graph-compiler targets (openvino, tvm, jax).

These stacks take dense tensors: a user holding a strided numpy view (padded rows, a
permuted memory order, a stride-0 broadcast) hands them a dense copy of it, in the same
logical (physical-layout) dim order. The graph each target builds then does the layout
handling itself (transposes, the bsd head split, the packed-QKV slices), so that part is
what the compiler sees.

What lives here is the user code around the graph: the structural mask (causal / key
padding / sliding window on the diagonal d(b, i) = i + offset(b), DESIGN.md section 2) as
a boolean input, the decision whether a stack's native "causal from the top-left" flag can
express a case, the dropout keep mask of the counter RNG, and a small LRU of compiled
artifacts.
"""

from __future__ import annotations

import collections

import numpy as np

PACKED = ("qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first")
UNPACKED = ("bhsd", "bshd", "sbhd", "bsd", "channels_first")
ALL_LAYOUTS = list(UNPACKED + PACKED)

# The output layout of a model whose Q comes in layout L: a packed model returns its
# output unpacked in the same family.
OUT_LAYOUT = {"bhsd": "bhsd", "bshd": "bshd", "sbhd": "sbhd", "bsd": "bsd", "channels_first": "channels_first",
              "qkv_bs3hd": "bshd", "qkv_bsh3d": "bshd", "qkv_channels_first": "channels_first"}


def dense(x):
    """A dense C-order copy of a (maybe strided, maybe stride-0) view, same shape and dtype;
    x itself when it already is one."""
    if x is None:
        return None
    return np.ascontiguousarray(x)


def inputs(case, q, k, v):
    """The dense input arrays a model takes: [qkv] for a packed case, else [q, k, v], each
    in its physical shape."""
    if case.packed:
        if case.qkv is None:
            raise ValueError("_prep.inputs: a packed case without its qkv buffer")
        return [dense(case.qkv)]
    return [dense(q), dense(k), dense(v)]


def has_structural(case) -> bool:
    """True when causal, key padding or a sliding window masks keys."""
    left, right = case.window
    return bool(case.causal) or case.key_padding is not None or left >= 0 or right >= 0


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


def structural_allowed(case):
    """bool [B, 1, Sq, Sk], True = attend, for the structural masks (causal masks j > d,
    the window j < d - left and j > d + right, key padding j >= key_padding[b]); None when
    the case has none."""
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
        allowed &= j < np.asarray(case.key_padding, dtype=np.int64).reshape(B, 1, 1)
    return allowed.reshape(B, 1, Sq, Sk)


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
    """A small least-recently-used cache of compiled artifacts, keyed by case.key(...)."""

    def __init__(self, capacity: int = 32):
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
