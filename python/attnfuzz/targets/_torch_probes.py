"""The conventions the torch targets measure when they start (docs/worker-protocol.md,
"Conventions"), shared by the dense variants (attnfuzz.targets.torch) and the serving ones
(attnfuzz.targets._torch_serving): each probe runs an attention callable on a tiny input built
so that one convention shows, and a kernel that refuses the probe declares nothing.

Dense SDPA probes take sdpa(**kw), F.scaled_dot_product_attention under the variant's forced
kernel, on [1, 1, 2, 16] ones; the others any attend(q, k, v)."""

from attnfuzz.targets import _torch_layouts


def output(torch, cuda, attend, errors=(RuntimeError,)):
    """attend()'s output (synchronized on CUDA, so that a kernel's error shows here), or None
    when it raises one of errors: the kernel refuses the probe."""
    try:
        o = attend()
        if cuda:
            torch.cuda.synchronize()
        return o
    except errors:
        return None


def _nan(torch, o, index):
    return o is not None and bool(torch.isnan(o[index]).any())


def _ones(torch, dtype, device):
    return torch.ones(1, 1, 2, 16, dtype=dtype, device=device)


def masked_rows_nan(torch, sdpa, dtype, device, cuda):
    """Measured, not assumed (it changed between PyTorch versions): does the kernel give NaN
    for a fully masked row (query 1 of a boolean mask)?"""
    q = _ones(torch, dtype, device)
    m = torch.tensor([[True, True], [False, False]], device=device)
    return _nan(torch, output(torch, cuda, lambda: sdpa(query=q, key=q, value=q, attn_mask=m)), (0, 0, 1))


def _leaks(torch, sdpa, q, k, v, device, cuda):
    """Is query 0's row NaN with key 1 masked for it, by a boolean mask and, for kernels that
    take no mask, by a top-left causal mask?"""
    m = torch.tensor([[True, False], [True, True]], device=device)
    leaked = False
    for kw in ({"attn_mask": m}, {"is_causal": True}):
        leaked |= _nan(torch, output(torch, cuda, lambda: sdpa(query=q, key=k, value=v, **kw)), (0, 0, 0))
    return leaked


def masked_values_leak(torch, sdpa, dtype, device, cuda):
    """Measured: does a NaN in the value row of a masked key reach the output (P @ V over
    the masked keys too: 0 * NaN, pytorch#101967)?"""
    q = _ones(torch, dtype, device)
    v = q.clone()
    v[0, 0, 1] = float("nan")
    return _leaks(torch, sdpa, q, q, v, device, cuda)


def masked_keys_leak(torch, sdpa, dtype, device, cuda):
    """Measured: does an Inf in the key row of a masked key make its query's row NaN (the
    mask added as -inf: Inf + -inf)?"""
    q = _ones(torch, dtype, device)
    k = q.clone()
    k[0, 0, 1] = float("inf")
    return _leaks(torch, sdpa, q, k, q, device, cuda)


def flushes_denormals(torch, attend, q, v, seq_dim, cuda, partial=True, errors=(RuntimeError,)):
    """Measured: does attend(q, q, v), for a V of subnormal values (_torch_layouts.
    subnormal_values) and equal weights (q = k), lose them: all 0, or with partial more than
    1e-4 off the exact mean over seq_dim (_torch_layouts.flushes_subnormals)?"""
    o = output(torch, cuda, lambda: attend(q, q, v), errors)
    if o is None:
        return False
    exact = v.double().mean(dim=seq_dim, keepdim=True).expand_as(o)   # q = k: equal weights
    return _torch_layouts.flushes_subnormals(o, exact, partial=partial)
