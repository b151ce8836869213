"""attnfuzz.repro on backward findings, end to end: a bundle written here from numpy (the
bundle format of docs/design.md section 6: case.json, q/k/v, do, ref and each gradient's
float64 reference from attnfuzz.reference), the standalone script written for a real
target's variant, run in a fresh process: it reproduces nothing on the true references and
fails naming the gradient when one reference is moved by 1%. Skipped (77) without torch."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import _util  # noqa: F401 - puts python/ on sys.path
import numpy as np

from attnfuzz import bundle, reference, repro
from attnfuzz.case import Case

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)


def write_bundle(d, raw, backend, seed=0):
    """A backward bundle for case raw whose references are the float64 ones."""
    c = Case(raw)
    r = np.random.default_rng(seed)
    B, Hq, Hkv, Sq, Sk, D, Dv = c.batch, c.q_heads, c.kv_heads, c.q_len, c.kv_len, c.head_dim, c.v_head_dim
    arrays = {"q": r.standard_normal((B, Hq, Sq, D)), "k": r.standard_normal((B, Hkv, Sk, D)),
              "v": r.standard_normal((B, Hkv, Sk, Dv)), "do": r.standard_normal((B, Hq, Sq, Dv))}
    arrays = {n: a.astype(np.float32) for n, a in arrays.items()}
    mask = None
    if c.amask:
        mask = r.standard_normal((1, 1, Sq, Sk)).astype(np.float32)
        arrays["mask"] = mask
    q, k, v, do = (arrays[n].astype(np.float64) for n in ("q", "k", "v", "do"))
    arrays["ref"] = reference.attention(c, q, k, v, mask=mask)
    g = reference.backward(c, q, k, v, do, mask=mask)
    for n in c.grads:
        arrays["ref_" + n] = g[n].reshape((1, 1, Sq, Sk)) if n == "dmask" else g[n]
    os.makedirs(d)
    for n, a in arrays.items():
        bundle.save_array(os.path.join(d, n + ".npy.zst"), a)
    meta = {"format": "attnfuzz-bundle", "version": 1, "case": raw, "kind": "diverge", "features": "test",
            "tolerance": {"atol": 1e-5, "rtol": 1e-5},
            "tolerances": {n: {"atol": 1e-5 * max(1.0, float(np.abs(g[n]).max())), "rtol": 1e-5} for n in c.grads},
            "backends": [{"name": backend, "verdict": "diverge"}]}
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(meta, f)


def run_script(path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # standalone: no attnfuzz
    return subprocess.run([sys.executable, path], capture_output=True, text=True, env=env, timeout=600)


class BackwardRepro(unittest.TestCase):
    CASE = {"batch": 1, "q_heads": 2, "kv_heads": 1, "q_len": 5, "kv_len": 7, "head_dim": 8, "v_head_dim": 8,
            "dtype": "f32", "causal": True, "diagonal": "bottom_right",
            "q": {"layout": "bshd"}, "k": {"layout": "bshd"}, "v": {"layout": "bshd"},
            "additive_mask": {"rank": 2, "full_dims": "qk", "dtype": "f32"},
            "backward": {"grads": ["dq", "dk", "dv", "dmask"], "do": {"perm": 1, "pad": 2}}}

    def check_variant(self, backend):
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "diverge-0000000000000001")
            write_bundle(d, self.CASE, backend)
            script = os.path.join(tmp, "repro.py")
            repro.write_repro(d, script)
            p = run_script(script)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            for n in ("output", "dq", "dk", "dv", "dmask"):
                self.assertIn(n + " ", p.stdout)
            # a reference gradient moved by 1%: the script must fail, naming it
            ref = bundle.read_array(os.path.join(d, "ref_dk.npy.zst"))
            bundle.save_array(os.path.join(d, "ref_dk.npy.zst"), ref * 1.01)
            repro.write_repro(d, script)
            p = run_script(script)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("dk ")][0]
            self.assertNotIn(" 0 of ", line)
            self.assertIn("MISMATCH", p.stdout)

    def test_torch_sdpa_math(self):
        self.check_variant("target:torch/sdpa_math")

    def test_torch_explicit(self):
        self.check_variant("target:torch/explicit")

    def test_jax_explicit(self):
        try:
            import jax  # noqa: F401
        except ImportError:
            self.skipTest("no jax")
        self.check_variant("target:jax/explicit")


if __name__ == "__main__":
    unittest.main()
