"""Helpers shared by the real targets (torch, ort, tensorrt).

Everything here is the kind of code a user writes around an attention call: the
structural mask (causal / key padding / sliding window on the diagonal
d(b, i) = i + offset(b), DESIGN.md section 2) as a boolean array, the output layout that
goes with an input layout, and a small bounded cache for compiled artifacts.
"""

from __future__ import annotations

import collections

import numpy as np

# The output layout of a model whose inputs come in layout L: a packed QKV model returns
# its output unpacked in the same family.
OUT_LAYOUT = {
    "bhsd": "bhsd",
    "bshd": "bshd",
    "sbhd": "sbhd",
    "bsd": "bsd",
    "channels_first": "channels_first",
    "qkv_bs3hd": "bshd",
    "qkv_bsh3d": "bshd",
    "qkv_channels_first": "channels_first",
}

PACKED = ("qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first")
ALL_LAYOUTS = ["bhsd", "bshd", "sbhd", "bsd", "channels_first",
               "qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first"]


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


class LRU:
    """A small least-recently-used cache for compiled artifacts (modules, sessions, engines)."""

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
