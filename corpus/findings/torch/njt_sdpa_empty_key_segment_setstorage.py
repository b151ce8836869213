"""PyTorch's SDPA on nested jagged tensors (NJT) raises "setStorage: ... out of bounds" when
one sequence has no keys and the longest key sequence has one token: queries [1, 1] against
keys [0, 1] (or [1, 0]). With two or more keys in the other sequence it runs, and gives 0
for the row without keys. The same arithmetic on padded tensors with a key-padding mask is
well defined.

    python njt_sdpa_empty_key_segment_setstorage.py

Exit status: 1 with a BUG line while it raises, 0 with a FIXED line once it runs."""
import sys

import torch
import torch.nn.functional as F


def njt(lengths, H=1, D=1):
    offsets = torch.tensor([0] + torch.cumsum(torch.tensor(lengths), 0).tolist(), dtype=torch.int64)
    values = torch.randn(int(offsets[-1]), H, D)
    return torch.nested.nested_tensor_from_jagged(values, offsets).transpose(1, 2)  # [B, H, j, D]


torch.manual_seed(0)
q, k, v = njt([1, 1]), njt([0, 1]), None
v = njt([0, 1])
try:
    F.scaled_dot_product_attention(q, k, v)
except RuntimeError as e:
    print("BUG: SDPA on nested jagged tensors, keys [0, 1]: " + str(e).splitlines()[0][:160])
    sys.exit(1)
print("FIXED: SDPA on nested jagged tensors runs with an empty key sequence beside a one-token one")
sys.exit(0)
