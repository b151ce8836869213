"""tinygrad 0.14: softmax over an axis of length 1 returns 1 for a NaN or -inf score, so
attention with one key returns V where IEEE arithmetic (and torch, numpy) gives NaN.

Found by attnfuzz (target:tinygrad/explicit, bundles diverge-05844fb69eb4b278: an additive
mask of -inf on the only key, and nan_mismatch-1cc168111626a189: a NaN query). softmax is
x - max(x), exp, / sum: with one element, max(x) is x itself and the rewriter folds
x - x to 0, which is false for NaN and +-inf (NaN - NaN and -inf - -inf are NaN). With two
keys the same scores give NaN. Only tinygrad and numpy.

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


def softmax(scores):
    return Tensor(np.array(scores, dtype=np.float32)).softmax(-1).numpy()


bad = []
for scores in ([float("nan")], [float("-inf")], [float("nan"), 0.5], [float("-inf"), float("-inf")]):
    got = softmax(scores)
    x = np.array(scores, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max())
        want = e / e.sum()
    same = np.array_equal(got, want, equal_nan=True)
    print("softmax(%s): tinygrad %s, IEEE %s%s" % (scores, got, want, "" if same else "  <- differs"))
    if not same:
        bad.append(scores)

# the attention the bundles ran: one key masked with -inf (additive), and a NaN query
q = Tensor(np.array([[[[float("nan")]]]], np.float32))
k = Tensor(np.array([[[[0.3]]]], np.float32))
v = Tensor(np.array([[[[-0.72]]]], np.float32))
print("attention with a NaN query and one key:", (q @ k.transpose(-2, -1)).softmax(-1).matmul(v).numpy().ravel(),
      "(IEEE: nan)")

if bad:
    print("BUG: tinygrad's softmax over one element gives 1 for %s (IEEE: NaN)" % bad)
    sys.exit(1)
print("FIXED: softmax over one element propagates NaN / -inf")
sys.exit(0)
