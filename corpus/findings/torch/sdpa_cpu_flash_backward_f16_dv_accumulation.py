"""PyTorch's CPU flash SDPA backward, f16, GQA (two query heads over one key/value head):
dV of a key/value head is the sum over the query heads sharing it of each head's P^T dO,
and the kernel adds the heads' sums in f16. Four dO rows near f16's maximum whose partial
sums pass 65520 (where f16 rounds to Inf) while the whole sum does not give +-Inf in dV;
the math kernel, summing in f32, gives the finite sum (within f16's range). The same four
rows as four queries of one head (no GQA) come back finite: a head's own sum over its
queries is not the one rounded. A precision limit, not filed.
Found by attnfuzz (target:torch/sdpa_flash, the Llama capture of docs/capture.md asked as an
f16 training step, minimized); torch 2.15.0 CPU.

One key: every weight P is 1, so dV[0, 0, 0] = dO[0, 0, 0] + dO[0, 0, 1] + dO[0, 1, 0] +
dO[0, 1, 1] exactly, whatever Q, K and V are.

Exit status: 1 with a BUG line (the repros' convention; the class is precision) while
flash's dV is not finite where the f32 sum is, 0 with a FIXED line once it is.
"""
import sys
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DO = np.array([[24624, 17744, -41248, -60480, 33216, 34400, -40736, 45120],     # head 0, query 0
               [-18944, 61248, 54240, -63136, 34272, -25488, 33280, 53408],     # head 0, query 1
               [43584, -30480, 52448, 47488, -61504, -29872, 21968, -46880],    # head 1, query 0
               [18512, 29824, -43584, 48000, 23664, 23536, -22064, -39648]],    # head 1, query 1
              np.float16)
rng = np.random.default_rng(0)
q = torch.from_numpy(rng.standard_normal((1, 2, 2, 8)).astype(np.float16))
k = torch.from_numpy(rng.standard_normal((1, 1, 1, 8)).astype(np.float16))
v = torch.from_numpy(rng.standard_normal((1, 1, 1, 8)).astype(np.float16))
do = torch.from_numpy(DO.reshape(1, 2, 2, 8))


def dv_of(backend):
    vv = v.clone().requires_grad_(True)
    with sdpa_kernel([backend]):
        F.scaled_dot_product_attention(q, k, vv, enable_gqa=True).backward(do)
    return vv.grad[0, 0, 0].float().numpy()


def dv_one_head():
    """The same four dO rows as four queries of one head over the one key (no GQA)."""
    vv = v.clone().requires_grad_(True)
    q1 = torch.from_numpy(rng.standard_normal((1, 1, 4, 8)).astype(np.float16))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        F.scaled_dot_product_attention(q1, k, vv).backward(torch.from_numpy(DO.reshape(1, 1, 4, 8)))
    return vv.grad[0, 0, 0].float().numpy()


exact = DO.astype(np.float64).sum(0)                  # the sum, exact in float64
heads = DO.astype(np.float64).reshape(2, 2, 8).sum(1) # each query head's sum over its two queries, exact
with np.errstate(over="ignore", invalid="ignore"):
    across = (heads[0].astype(np.float16) + heads[1]).astype(np.float16)   # the heads' sums added in f16
flash, math, one_head = dv_of(SDPBackend.FLASH_ATTENTION), dv_of(SDPBackend.MATH), dv_one_head()
print("exact sum                  ", exact)
print("heads' sums added in f16   ", across.astype(np.float64))
print("flash dV                   ", flash)
print("math dV                    ", math)
print("flash dV, one head (no GQA)", one_head)
representable = np.abs(exact) <= 65504
print("f16 representable: %d of 8; flash non-finite there: %d (one head: %d); flash equals the heads' sums added "
      "in f16: %s" % (representable.sum(), (~np.isfinite(flash[representable])).sum(),
                      (~np.isfinite(one_head[representable])).sum(), np.array_equal(flash, across.astype(np.float32))))
if not np.isfinite(flash[representable]).all():
    print("BUG (precision): the CPU flash backward adds the query heads' dV in f16: +-Inf where the sum is finite (math: finite)")
    sys.exit(1)
print("FIXED: the CPU flash backward's dV is finite wherever the sum is representable in f16")
sys.exit(0)
