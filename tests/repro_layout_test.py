#!/usr/bin/env python3
"""repro_layout_test.py - the physical inputs a repro script rebuilds (attnfuzz.repro):
strides against hand-computed values from the case.json definitions (Lehmer-coded memory
order, padded rows, stride-0 broadcast), values against the canonical arrays read back
through index arithmetic written out here, packed QKV as views of one buffer, masks in
their own dtype and rank, and outputs of each layout back to [B, H, S, D].
Exit 77 (skipped) without numpy."""
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: no numpy")
    sys.exit(77)

from attnfuzz import repro

# the library exactly as a repro script holds it (copies of attnfuzz.case, .layouts, .rng,
# .request)
ns = {"np": np, "io": __import__("io"), "base64": __import__("base64"), "sys": sys}
exec(repro.script_library(), ns)
Case = ns["_case"].Case
L = ns["_layouts"]


def physical_inputs(c, Q, K, V, mask=None, bool_mask=None):
    """q, k, v (the packed buffer as "qkv"), the masks: the request the script hands to the
    function under test, as {field: array}."""
    req = ns["inputs"](c.raw, Q, K, V, mask, bool_mask)
    check(isinstance(req, ns["_request"].Request) and req.case.raw == c.raw, "inputs() gives the case's request")
    return req.tensors()


def check(cond, msg):
    if not cond:
        print("FAIL: " + msg)
        sys.exit(1)


def case(B=1, H=2, Hkv=2, Sq=3, Sk=5, D=4, Dv=4, **t):
    raw = {"batch": B, "q_heads": H, "kv_heads": Hkv, "q_len": Sq, "kv_len": Sk, "head_dim": D, "v_head_dim": Dv,
           "dtype": "f32"}
    raw.update(t)
    return Case(raw)


rng = np.random.default_rng(1)


def canon(B, H, S, D):
    return rng.standard_normal((B, H, S, D)).astype(np.float32)


def estrides(a):
    return tuple(s // a.itemsize for s in a.strides)


# bhsd, perm 1: memory order (b, h, d, s) -> s innermost
c = case(q={"layout": "bhsd", "perm": 1})
Q, K, V = canon(1, 2, 3, 4), canon(1, 2, 5, 4), canon(1, 2, 5, 4)
a = physical_inputs(c, Q, K, V)
q, k, v = a["q"], a["k"], a["v"]
check(q.shape == (1, 2, 3, 4) and estrides(q) == (24, 12, 1, 3), "bhsd perm 1: strides %s" % (estrides(q),))
check(np.array_equal(q, Q) and estrides(k) == (40, 20, 4, 1), "bhsd perm 1 values / k contiguous")

# bshd, pad 2: [B,S,H,D] with 2 spare elements after each D-row
c = case(q={"layout": "bshd", "pad": 2}, k={"layout": "bshd"}, v={"layout": "bshd"})
a = physical_inputs(c, Q, K, V)
q, k, v = a["q"], a["k"], a["v"]
check(q.shape == (1, 3, 2, 4) and estrides(q) == (36, 12, 6, 1), "bshd pad 2: strides %s" % (estrides(q),))
for b, s, h, d in [(0, 2, 1, 3), (0, 0, 1, 0), (0, 1, 0, 2)]:
    check(q[b, s, h, d] == Q[b, h, s, d], "bshd value at %s" % ((b, s, h, d),))

# sbhd with the heads broadcast (stride 0): K identical over heads
Kb = np.repeat(canon(2, 1, 5, 4), 2, axis=1)
c = case(B=2, k={"layout": "sbhd", "broadcast": "heads"}, q={"layout": "sbhd"}, v={"layout": "sbhd"})
a = physical_inputs(c, canon(2, 2, 3, 4), Kb, canon(2, 2, 5, 4))
q, k, v = a["q"], a["k"], a["v"]
check(k.shape == (5, 2, 2, 4) and estrides(k)[2] == 0, "sbhd heads broadcast: strides %s" % (estrides(k),))
check(np.array_equal(k.transpose(1, 2, 0, 3), Kb), "sbhd broadcast values")

# bsd and channels_first fold heads: [B,S,H*D] and [B,H*D,S], head-major
c = case(q={"layout": "bsd"}, k={"layout": "channels_first"}, v={"layout": "bhsd"})
a = physical_inputs(c, Q, K, V)
q, k, v = a["q"], a["k"], a["v"]
check(q.shape == (1, 3, 8) and q[0, 2, 1 * 4 + 3] == Q[0, 1, 2, 3], "bsd")
check(k.shape == (1, 8, 5) and k[0, 1 * 4 + 2, 4] == K[0, 1, 4, 2], "channels_first")

# packed: three views of one buffer [B,S,3,H,D]
c = case(Sk=3, q={"layout": "qkv_bs3hd"})
K3, V3 = canon(1, 2, 3, 4), canon(1, 2, 3, 4)
a = physical_inputs(c, Q, K3, V3)
q, k, v = a["q"], a["k"], a["v"]
check(a.get("qkv") is not None and a["qkv"].shape == (1, 3, 3, 2, 4), "packed buffer shape")
check(np.shares_memory(q, a["qkv"]) and np.shares_memory(v, a["qkv"]), "packed views share the buffer")
check(v[0, 2, 1, 3] == V3[0, 1, 2, 3] and a["qkv"][0, 1, 1, 0, 2] == K3[0, 0, 1, 2], "packed values")
c = case(Sk=3, q={"layout": "qkv_channels_first"})
a = physical_inputs(c, Q, K3, V3)
q, k, v = a["q"], a["k"], a["v"]
check(a["qkv"].shape == (1, 24, 3) and k[0, 1 * 4 + 2, 1] == K3[0, 1, 1, 2], "packed channels_first")

# f16 inputs, a rank-2 f16 mask, an expanded bool mask (bundle masks: 4-D, size 1 where broadcast)
c = case(dtype="f16", additive_mask={"rank": 2, "dtype": "f16"}, bool_mask={"expanded": True})
a = physical_inputs(c, Q, K, V, rng.standard_normal((1, 1, 3, 5)).astype(np.float32), np.ones((1, 1, 3, 5), bool))
check(a["q"].dtype == np.float16, "f16 inputs")
m = a["mask"]
check(m.shape == (3, 5) and m.dtype == np.float16, "rank-2 mask %s %s" % (m.shape, m.dtype))
bm = a["bool_mask"]
check(bm.shape == (1, 2, 3, 5) and estrides(bm)[1] == 0, "expanded bool mask")

# the dropout keep mask of the counter RNG, as the worker kit's targets draw it
c = case(dropout_p=0.5, dropout_seed=7)
keep = ns["inputs"](c.raw, Q, K, V, None, None).keep
check(keep.shape == (1, 2, 3, 5) and keep.dtype == np.bool_, "keep mask shape")
from attnfuzz import rng as kit_rng  # noqa: E402
check(np.array_equal(keep, kit_rng.dropout_keep(7, 0.5, 1, 2, 3, 5)), "the copied RNG draws the kit's keep mask")

# outputs in each layout back to [B,H,S,Dv]
c = case(B=2, H=3, Sq=4, Dv=5)
O = rng.standard_normal((2, 3, 4, 5))
for lay, phys in [("bshd", O.transpose(0, 2, 1, 3)), ("sbhd", O.transpose(2, 0, 1, 3)),
                  ("bsd", O.transpose(0, 2, 1, 3).reshape(2, 4, 15)),
                  ("channels_first", O.transpose(0, 1, 3, 2).reshape(2, 15, 4))]:
    check(np.array_equal(L.to_bhsd(phys, lay, 3, 5), O), "output layout " + lay)

# derived values
c = case(Sq=3, Sk=5, causal=True, diagonal="bottom_right", key_padding=None)
check(c.diag_offset == [2] and abs(c.scale - 0.5) < 1e-15, "diagonal offset / default scale")
c = case(B=2, diagonal="bottom_right_valid", key_padding=[4, 2], scale=0.25)
check(c.diag_offset == [1, -1] and c.valid_keys == [4, 2] and c.scale == 0.25, "valid-keys diagonal")
print("repro layouts ok")
