"""reference.backward (docs/design.md section 2, "Backward") against two independent
computations: PyTorch's float64 autograd of an attention written here with torch ops, on
2,000 random cases covering GQA, every mask kind (additive masks of every broadcast shape
and rank, boolean masks, causal on every diagonal, key padding, windows, fully masked
rows), dropout, softcap, negative scales and Sq != Sk; and central finite differences of
reference.attention on small cases. The comparison used is checked to fail when one
gradient is off by 1%. Hand values pin the rules for zero-weight keys and dead rows.
Skipped (77 in ctest) without torch."""

import math
import sys
import unittest

import _util  # noqa: F401
import numpy as np

from attnfuzz import reference, rng
from attnfuzz.case import Case

try:
    import torch
except Exception:  # noqa: BLE001 - any import failure: the autograd comparison is skipped
    torch = None

DIAGONALS = ("top_left", "bottom_right", "bottom_right_valid", "explicit")
RTOL, ATOL = 1e-9, 1e-12


def random_case(r):
    """A random forward+backward case dict and its canonical float64 inputs."""
    B, hkv, g = int(r.integers(1, 3)), int(r.integers(1, 3)), int(r.integers(1, 4))
    Sq, Sk, D, Dv = (int(r.integers(1, 7)) for _ in range(4))
    c = {"batch": B, "q_heads": hkv * g, "kv_heads": hkv, "q_len": Sq, "kv_len": Sk, "head_dim": D,
         "v_head_dim": Dv, "dtype": "f32"}
    if r.random() < 0.5:
        c["scale"] = float(r.choice([0.3, 1.7, -0.6, 2.5]))
    if r.random() < 0.3:
        c["softcap"] = float(r.choice([1.0, 2.5, 6.0]))
    full = (B, hkv * g, Sq, Sk)
    mask = bmask = None
    if r.random() < 0.4:
        rank = 2 if r.random() < 0.3 else 4
        fd = "qk" if rank == 2 else "".join(x for x in "bhqk" if r.random() < 0.6)
        c["additive_mask"] = {"rank": rank, "full_dims": fd}
        shape = tuple(n if letter in fd else 1 for n, letter in zip(full, "bhqk"))
        mask = r.standard_normal(shape) * 2
        mask[r.random(shape) < 0.15] = -np.inf
        if rank == 2:
            mask = mask.reshape(shape[2], shape[3])
    if r.random() < 0.3:
        fd = "".join(x for x in "bhqk" if r.random() < 0.6)
        c["bool_mask"] = {"full_dims": fd}
        bmask = r.random(tuple(n if letter in fd else 1 for n, letter in zip(full, "bhqk"))) > 0.25
    if r.random() < 0.4:
        c["causal"] = True
    c["diagonal"] = str(r.choice(DIAGONALS))
    if c["diagonal"] == "explicit":
        c["diagonal_offset"] = int(r.integers(-3, 4))
    if r.random() < 0.3:
        c["key_padding"] = [int(r.integers(0, Sk + 1)) for _ in range(B)]
    elif c["diagonal"] == "bottom_right_valid":
        c["diagonal"] = "bottom_right"
    if r.random() < 0.25:
        c["window"] = [int(r.integers(-1, 4)), int(r.integers(-1, 4))]
    if r.random() < 0.25:
        c["dropout_p"] = float(r.choice([0.2, 0.5, 1.0]))
        c["dropout_seed"] = int(r.integers(0, 1 << 31))
    q = r.standard_normal((B, hkv * g, Sq, D))
    k = r.standard_normal((B, hkv, Sk, D))
    v = r.standard_normal((B, hkv, Sk, Dv))
    do = r.standard_normal((B, hkv * g, Sq, Dv))
    return c, q, k, v, do, mask, bmask


def allowed_by_loops(c, cs, bmask):
    """bool [B, Hq, Sq, Sk]: the keys no structural or boolean mask masks, by plain loops
    over the rules of docs/design.md section 2 (sharing no code with attnfuzz.masks)."""
    B, Hq, Sq, Sk = cs.batch, cs.q_heads, cs.q_len, cs.kv_len
    kp = c.get("key_padding")
    valid = list(kp) if kp is not None else [Sk] * B
    off = {"top_left": [0] * B, "bottom_right": [Sk - Sq] * B, "bottom_right_valid": [x - Sq for x in valid],
           "explicit": [c.get("diagonal_offset", 0)] * B}[c.get("diagonal", "top_left")]
    left, right = c.get("window", [-1, -1])
    a = np.ones((B, Hq, Sq, Sk), dtype=bool)
    for b in range(B):
        for i in range(Sq):
            d = i + off[b]
            for j in range(Sk):
                ok = j < valid[b]
                if c.get("causal") and j > d:
                    ok = False
                if left >= 0 and j < d - left:
                    ok = False
                if right >= 0 and j > d + right:
                    ok = False
                a[b, :, i, j] = ok
    if bmask is not None:
        a &= np.broadcast_to(bmask.reshape((1,) * (4 - bmask.ndim) + bmask.shape), a.shape)
    return a


def torch_grads(c, q, k, v, do, mask, bmask):
    """The gradients by float64 autograd of an attention written with torch ops."""
    cs = Case(c)
    g = cs.q_heads // cs.kv_heads
    qt, kt, vt = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    mt = torch.tensor(mask, dtype=torch.float64, requires_grad=True) if mask is not None else None
    kr, vr = kt.repeat_interleave(g, dim=1), vt.repeat_interleave(g, dim=1)
    s = cs.scale * (qt @ kr.transpose(-1, -2))
    if cs.softcap > 0:
        s = cs.softcap * torch.tanh(s / cs.softcap)
    if mt is not None:
        s = s + mt.reshape((1,) * (4 - mt.dim()) + tuple(mt.shape))
    allowed = torch.tensor(allowed_by_loops(c, cs, bmask))
    s = torch.where(allowed, s, torch.tensor(-math.inf, dtype=torch.float64))
    m = s.max(dim=-1, keepdim=True).values
    dead = torch.isneginf(m)
    e = torch.exp(s - torch.where(dead, torch.zeros_like(m), m))
    tot = e.sum(dim=-1, keepdim=True)
    w = torch.where(dead, torch.zeros_like(e), e / torch.where(dead, torch.ones_like(tot), tot))
    if cs.dropout_p > 0:
        keep = torch.tensor(rng.dropout_keep(cs.dropout_seed, cs.dropout_p, cs.batch, cs.q_heads, cs.q_len,
                                             cs.kv_len))
        w = torch.where(keep, w / (1 - cs.dropout_p) if cs.dropout_p < 1 else w * 0, torch.zeros_like(w))
    out = w @ vr
    (out * torch.tensor(do)).sum().backward()
    got = {"dq": qt.grad.numpy(), "dk": kt.grad.numpy(), "dv": vt.grad.numpy()}
    if mt is not None:
        got["dmask"] = mt.grad.numpy()
    return got


def agree(ref, want):
    """Every gradient of want, and no other, in ref within RTOL/ATOL."""
    if set(ref) != set(want):
        return False
    return all(ref[n].shape == want[n].shape and np.allclose(ref[n], want[n], rtol=RTOL, atol=ATOL)
               for n in want)


@unittest.skipIf(torch is None, "torch does not import")
class AgainstAutograd(unittest.TestCase):
    def test_random_cases(self):
        r = np.random.default_rng(2026)
        n, features = 2000, {}
        for t in range(n):
            c, q, k, v, do, mask, bmask = random_case(r)
            cs = Case(c)
            ref = reference.backward(cs, q, k, v, do, mask=mask, bool_mask=bmask)
            want = torch_grads(c, q, k, v, do, mask, bmask)
            if not agree(ref, want):
                bad = [g for g in want if not np.allclose(ref.get(g), want[g], rtol=RTOL, atol=ATOL)]
                self.fail("case %d %r: %s differ\nref %r\nautograd %r" % (t, c, bad, ref, want))
            for f in ("scale", "softcap", "additive_mask", "bool_mask", "causal", "key_padding", "window",
                      "dropout_p"):
                features[f] = features.get(f, 0) + (f in c)
            features["gqa"] = features.get("gqa", 0) + (cs.q_heads != cs.kv_heads)
            features["cross"] = features.get("cross", 0) + (cs.q_len != cs.kv_len)
            dead = not allowed_by_loops(c, cs, bmask).any(axis=-1).all()
            features["fully masked rows"] = features.get("fully masked rows", 0) + dead
        print("%d cases agree with float64 autograd; cases per feature: %s" % (n, features), file=sys.stderr)
        for f, count in features.items():
            self.assertGreater(count, 50, f)

    def test_a_one_percent_error_is_seen(self):
        r = np.random.default_rng(7)
        for _ in range(20):
            c, q, k, v, do, mask, bmask = random_case(r)
            ref = reference.backward(Case(c), q, k, v, do, mask=mask, bool_mask=bmask)
            want = torch_grads(c, q, k, v, do, mask, bmask)
            self.assertTrue(agree(ref, want))
            for name in want:
                if not np.abs(ref[name]).max() > 1e-6:
                    continue
                off = {n: a.copy() for n, a in ref.items()}
                i = np.unravel_index(np.argmax(np.abs(off[name])), off[name].shape)
                off[name][i] *= 1.01
                self.assertFalse(agree(off, want), "a 1%% error in %s[%s] went unseen" % (name, i))


class AgainstFiniteDifferences(unittest.TestCase):
    def test_small_cases(self):
        r = np.random.default_rng(11)
        eps, checked = 1e-6, 0
        for _ in range(60):
            c, q, k, v, do, mask, bmask = random_case(r)
            c.pop("dropout_p", None)  # a step of eps does not move the keep mask: fine, but keep it plain
            cs = Case(c)
            ref = reference.backward(cs, q, k, v, do, mask=mask, bool_mask=bmask)

            def loss(q_, k_, v_, m_):
                out = reference.attention(cs, q_, k_, v_, mask=m_, bool_mask=bmask)
                return float((out * do).sum())
            args = {"dq": q, "dk": k, "dv": v, "dmask": mask}
            for name, x in args.items():
                if x is None:
                    continue
                num = np.zeros_like(x)
                for idx in np.ndindex(x.shape):
                    if not np.isfinite(x[idx]):
                        continue          # a -inf mask entry: no neighbourhood
                    hi, lo = x.copy(), x.copy()
                    hi[idx] += eps
                    lo[idx] -= eps
                    a = [hi if y is x else y for y in (q, k, v, mask)]
                    b = [lo if y is x else y for y in (q, k, v, mask)]
                    num[idx] = (loss(*a) - loss(*b)) / (2 * eps)
                fin = np.isfinite(x)
                np.testing.assert_allclose(ref[name][fin], num[fin], rtol=1e-5, atol=1e-7, err_msg="%s %r" % (name, c))
                checked += int(fin.sum())
        self.assertGreater(checked, 1000)


class Rules(unittest.TestCase):
    def test_zero_weight_keys_and_dead_rows(self):
        # one query, keys 0 and 1; key 1 masked by a boolean mask holds NaN in k and v:
        # it gets exactly zero gradients and leaks nothing into dq
        c = Case({"batch": 1, "q_heads": 1, "q_len": 2, "kv_len": 2, "head_dim": 1, "scale": 1.0,
                  "bool_mask": {"full_dims": "qk", "rank": 2}})
        bm = np.array([[True, False], [False, False]])      # row 1 fully masked
        q = np.array([2.0, 3.0]).reshape(1, 1, 2, 1)
        k = np.array([0.5, np.nan]).reshape(1, 1, 2, 1)
        v = np.array([4.0, np.nan]).reshape(1, 1, 2, 1)
        do = np.array([1.0, 5.0]).reshape(1, 1, 2, 1)
        g = reference.backward(c, q, k, v, do, bool_mask=bm)
        # row 0 attends to key 0 alone: P = 1, dV[0] = dO[0] = 1, dS = 0 (softmax of one key)
        self.assertEqual(g["dv"].ravel().tolist(), [1.0, 0.0])
        self.assertEqual(g["dk"].ravel().tolist(), [0.0, 0.0])
        self.assertEqual(g["dq"].ravel().tolist(), [0.0, 0.0])   # the dead row 1 too

    def test_two_keys_by_hand(self):
        # scores 0 and ln 3: P = 1/4, 3/4; v = 4, 8; dO = 1
        ln3 = math.log(3.0)
        c = Case({"batch": 1, "q_heads": 1, "q_len": 1, "kv_len": 2, "head_dim": 1, "scale": 1.0})
        q = np.ones((1, 1, 1, 1))
        k = np.array([0.0, ln3]).reshape(1, 1, 2, 1)
        v = np.array([4.0, 8.0]).reshape(1, 1, 2, 1)
        g = reference.backward(c, q, k, v, np.ones((1, 1, 1, 1)))
        # dP = v = (4, 8); rowsum(P dP) = 7; dS = P (dP - 7) = (-3/4, 3/4)
        np.testing.assert_allclose(g["dv"].ravel(), [0.25, 0.75], rtol=1e-15)
        np.testing.assert_allclose(g["dq"].ravel(), [-0.75 * 0.0 + 0.75 * ln3], rtol=1e-14)
        np.testing.assert_allclose(g["dk"].ravel(), [-0.75, 0.75], rtol=1e-14)

    def test_gqa_sums_the_group(self):
        # two query heads on one kv head: dK and dV are the sums of the heads' own
        r = np.random.default_rng(3)
        c2 = Case({"batch": 1, "q_heads": 2, "kv_heads": 1, "q_len": 3, "kv_len": 4, "head_dim": 2})
        c1 = Case({"batch": 1, "q_heads": 1, "kv_heads": 1, "q_len": 3, "kv_len": 4, "head_dim": 2})
        q, k = r.standard_normal((1, 2, 3, 2)), r.standard_normal((1, 1, 4, 2))
        v, do = r.standard_normal((1, 1, 4, 2)), r.standard_normal((1, 2, 3, 2))
        both = reference.backward(c2, q, k, v, do)
        heads = [reference.backward(c1, q[:, h:h + 1], k, v, do[:, h:h + 1]) for h in range(2)]
        for n in ("dk", "dv"):
            np.testing.assert_allclose(both[n], heads[0][n] + heads[1][n], rtol=1e-12)
        np.testing.assert_allclose(both["dq"][:, 1:2], heads[1]["dq"], rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
