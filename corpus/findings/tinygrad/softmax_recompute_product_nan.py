"""tinygrad 0.14: softmax of a product whose values pass about 1e10 in float32 is NaN when
the product is fused into the softmax's kernels, and right when it is realized first.

softmax(x) is exp(x - max(x)) / sum: at the row's argmax the exponent must be exactly 0.
With x = q * k not realized, the product is computed again inside each kernel that reads
it (the row max's, and the exp's), and in the exp's kernel the C compiler may contract
`q * k - max` into one fused multiply-add: the argmax's exponent is then the rounding
error of q * k (about |q k| * 2^-24: 600 at 1e10) instead of 0, every weight underflows to
0 (or overflows) and the row is 0/0 = NaN. The same class as XLA:CPU's jit softmax
(jax-ml/jax#38609) and FlashAttention-4's and FlashInfer's exp2 FMA.

Found by attnfuzz's H200 campaign of target:tinygrad/gpu of 2026-12-02 (bundle
nan_mismatch-2f01e4163ce35023: f32, one query, two keys, head dim 1, scores -1.8e37 and
-5.2e36: NaN where V of the second key is expected); the same happens on the CPU device
(clang), which this script runs on by default. The GPU's f16 and bf16 bundles fail at
smaller scores (1e4 in f16, 2e5 in bf16): the argmax's score rounded to the case dtype in
one kernel and not in the other; this script checks float32 on whatever device tinygrad
picks.

Exit 1 and a BUG line while the bug is present, 0 and FIXED once fixed, 77 where tinygrad
does not import.
"""
import sys

import numpy as np

try:
    from tinygrad import Tensor
except ImportError:
    print("SKIP: tinygrad does not import")
    sys.exit(77)

# the bundle's inputs: softmax over q * k, one query, two keys (head dim 1, scale 1)
q = np.array([[9.9362e37]], np.float32)
k = np.array([[-0.1852, -0.0519]], np.float32)
fused = (Tensor(q) * Tensor(k)).softmax(-1).numpy()
realized = (Tensor(q) * Tensor(k)).realize().softmax(-1).numpy()
print("softmax(q * k) fused %s, realized first %s (want [0, 1])" % (fused.ravel(), realized.ravel()))

# where it starts: random products of magnitude 10^e, the first key the largest
rng = np.random.default_rng(0)
first_bad = None
for e in range(2, 39):
    wrong = 0
    for _ in range(4):
        a = np.float32(1 + rng.random())
        b = np.float32(10.0 ** e / a * (1 + rng.random() * 1e-3))
        p = (Tensor(np.array([[a]], np.float32)) * Tensor(np.array([[b, b * 0.5]], np.float32))).softmax(-1).numpy()
        wrong += bool(np.isnan(p).any())  # a well-defined softmax: NaN is wrong
    if wrong and first_bad is None:
        first_bad = e
print("the first magnitude with a NaN row: %s" % ("1e%d" % first_bad if first_bad else "none up to 1e38"))

attention = (Tensor(q.reshape(1, 1, 1, 1)).scaled_dot_product_attention(
    Tensor(k.reshape(1, 1, 2, 1)), Tensor(np.array([-1.3139, 0.0459], np.float32).reshape(1, 1, 2, 1)))).numpy()
print("scaled_dot_product_attention on the bundle: %s (want V of key 2: 0.0459)" % attention.ravel())

if np.isnan(fused).any() or np.isnan(attention).any():
    print("BUG: tinygrad's fused softmax of a large product is NaN where realizing the product first gives [0, 1]")
    sys.exit(1)
print("FIXED: the fused softmax of a large product is right")
sys.exit(0)
