"""The physical layouts as torch views, and numpy <-> torch without copies: the model code
the torch and tvm targets share (both build torch nn.Modules fed the physical layout).
Only torch, numpy and math: repro snippets copy these functions verbatim."""

import math

import numpy as np


def to_bhsd(x, layout, heads, dim):
    """One unpacked physical tensor -> its [B, H, S, D] view (channel h*D + d for bsd and
    channels_first)."""
    if layout == "bhsd":
        return x
    if layout == "bshd":
        return x.transpose(1, 2)
    if layout == "sbhd":
        return x.permute(1, 2, 0, 3)
    if layout == "bsd":
        b, s, _ = x.shape
        return x.reshape(b, s, heads, dim).transpose(1, 2)
    if layout == "channels_first":
        b, _, s = x.shape
        return x.reshape(b, heads, dim, s).transpose(2, 3)
    raise ValueError(f"to_bhsd: layout {layout!r} is not an unpacked layout")


def unpack_qkv(qkv, layout, heads, dim):
    """A packed QKV buffer -> q, k, v as [B, H, S, D] views, the way models split it."""
    if layout == "qkv_bs3hd":        # [B, S, 3, H, D]
        q, k, v = qkv.unbind(2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if layout == "qkv_bsh3d":        # [B, S, H, 3, D]: Q, K, V of each head adjacent (MHAv2)
        q, k, v = qkv.unbind(3)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if layout == "qkv_channels_first":  # [B, 3*H*D, S]: the UNet attention block
        b = qkv.shape[0]
        c = heads * dim
        q, k, v = qkv.reshape(b, 3 * c, -1).chunk(3, dim=1)
        return tuple(t.reshape(b, heads, dim, -1).transpose(2, 3) for t in (q, k, v))
    raise ValueError(f"unpack_qkv: layout {layout!r} is not a packed layout")


def from_bhsd(o, layout):
    """The [B, H, S, Dv] output -> the model's output layout."""
    if layout == "bhsd":
        return o
    if layout == "bshd":
        return o.transpose(1, 2)
    if layout == "sbhd":
        return o.permute(2, 0, 1, 3)
    b, h, s, dv = o.shape
    if layout == "bsd":
        return o.transpose(1, 2).reshape(b, s, h * dv)
    if layout == "channels_first":
        return o.transpose(2, 3).reshape(b, h * dv, s)
    raise ValueError(f"from_bhsd: layout {layout!r} is not an output layout")


def to_torch(x, device="cpu"):
    """A numpy view (any non-negative strides, stride-0 dims included) -> a torch tensor
    with the same shape and element strides, on `device`, without copying on CPU. A torch
    tensor (an input a batch uploaded already) is moved to `device` if it is elsewhere."""
    import torch
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if x.flags.c_contiguous and x.dtype.name != "bfloat16":
        t = torch.from_numpy(x)
        return t if device == "cpu" else t.to(device)
    item = x.itemsize
    shape = tuple(int(n) for n in x.shape)
    strides = tuple(int(s) // item for s in x.strides)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if 0 not in shape else 0
    flat = np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(item,))
    if x.dtype.name == "bfloat16":
        t = torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(flat)
    if device != "cpu":
        t = t.to(device)
    return t.as_strided(shape, strides)


def to_numpy(t):
    """A torch tensor -> a contiguous numpy array (bfloat16 as ml_dtypes.bfloat16)."""
    import torch
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def band(ok, kv, d, causal, left, right):
    """A mask_mod's structural band: ok where key kv is at or before diagonal d (causal) and
    inside the window [d - left, d + right] (a side < 0: unbounded)."""
    if causal:
        ok = ok & (kv <= d)
    if left >= 0:
        ok = ok & (kv >= d - left)
    if right >= 0:
        ok = ok & (kv <= d + right)
    return ok


FUNCTIONS = (to_bhsd, unpack_qkv, from_bhsd, to_torch, to_numpy, band)


_CPU_BF16_FLUSH = []


def cpu_bf16_gemm_flushes():
    """Measured once per process: does a bf16 matmul on this CPU read subnormal bf16
    values as 0? oneDNN's bf16 kernels on AVX512_BF16 / AMX CPUs do (VDPBF16PS treats
    denormal inputs as zero and flushes denormal results, whatever MXCSR says) where
    PyTorch hands them the product: an [8, 16] x [16, 128] one does, a smaller one may take
    another path and keep subnormals (so the declaration says "may flush")."""
    if not _CPU_BF16_FLUSH:
        import torch
        a = torch.full((1, 1, 8, 16), 0.125, dtype=torch.bfloat16)
        b = torch.full((1, 1, 16, 128), 1e-39, dtype=torch.bfloat16)
        _CPU_BF16_FLUSH.append(bool(((a @ b) == 0).all()))
    return _CPU_BF16_FLUSH[0]


def subnormal_values(torch, shape, dtype, device):
    """A probe's V: distinct subnormal values of about 1e-39 (alternating signs by element,
    a full mantissa each), in dtype on device."""
    n = math.prod(shape)
    i = torch.arange(n, dtype=torch.float64)
    v = (i % 7 + 1) * (1 - 2 * (i % 2)) * 1.1e-39
    return v.reshape(shape).to(dtype).to(device)


def flushes_subnormals(out, exact, partial=True):
    """Did a probe's output lose its subnormal values: all 0 (flushed), or, with partial,
    more than 1e-4 off the exact values (a subnormal's rounding is about 1e-6 of it; the
    math kernels stay within 5e-6)?"""
    if bool((out == 0).all()):
        return True
    return partial and float(((out.double() - exact).abs() / exact.abs()).max()) > 1e-4

