"""Softmax statistics through the worker protocol (cap lse, want_lse, lse_base): campaigns of
attnfuzz against lse_worker.py. Its natural-log and declared base-2 forms must be clean; the
undeclared base-2 form must be found as lse_diverge, in a bundle whose ref_lse and
lse.<backend> attnfuzz.bundle loads, ref_lse agreeing with an independent numpy computation
from the bundle's q and k (a case without masks or softcap), the worker's being log2 of it.
Usage: campaign_lse.py ATTNFUZZ [RUNS]. Exits 77 (ctest: skipped) without worker: backends."""

import os
import subprocess
import sys
import tempfile

import numpy as np

import _util

from attnfuzz import bundle, layouts


def campaign(attnfuzz, mode, runs, crashes, seed):
    here = os.path.dirname(os.path.abspath(__file__))
    worker = "worker:%s %s %s" % (sys.executable, os.path.join(here, "lse_worker.py"), mode)
    env = dict(os.environ, PYTHONPATH=_util.PYDIR)
    cmd = [attnfuzz, "fuzz", "--backend", worker, "--runs", str(runs), "--crashes", crashes, "--quiet",
           "--seed", str(seed), "--max-findings", "3"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    print("%s: %s" % (mode, (p.stdout[-600:] + p.stderr[-600:]).strip()))
    return p


def independent_lse(b):
    """log sum_j exp(scale q.k) per row from the bundle's arrays (float64, plain numpy)."""
    c = b["case"]
    q = layouts.to_bhsd(b["q"], c["q"]["layout"], c["q_heads"], c["head_dim"]).astype(np.float64)
    k = layouts.to_bhsd(b["k"], c["k"]["layout"], c["kv_heads"], c["head_dim"]).astype(np.float64)
    k = np.repeat(k, c["q_heads"] // c["kv_heads"], axis=1)
    scale = c.get("scale") if c.get("scale") is not None else 1.0 / np.sqrt(c["head_dim"])
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    m = s.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(s - m).sum(axis=-1, keepdims=True)))[..., 0]


def main():
    attnfuzz = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("nat", "base2"):
            crashes = os.path.join(tmp, mode)
            p = campaign(attnfuzz, mode, runs, crashes, 11)
            err = p.stderr.lower()
            if p.returncode == 2 and "worker" in err and ("not in this build" in err or "unknown" in err):
                print("skipped: %s has no worker: backend" % attnfuzz)
                return 77
            found = sorted(os.listdir(crashes)) if os.path.isdir(crashes) else []
            if p.returncode != 0 or found:
                print("FAIL: statistics in form %s are not clean (exit %d, bundles %s)" % (mode, p.returncode, found))
                return 1
        crashes = os.path.join(tmp, "wrong")
        campaign(attnfuzz, "wrong", runs, crashes, 11)
        found = sorted(os.listdir(crashes)) if os.path.isdir(crashes) else []
        lse = [f for f in found if f.startswith("lse_diverge-")]
        if not lse:
            print("FAIL: undeclared base-2 statistics not found (bundles %s)" % found)
            return 1
        checked = 0
        for name in lse:
            b = bundle.load(os.path.join(crashes, name))
            c = b["case"]
            assert b["meta"]["tensor"] == "lse", b["meta"]["tensor"]
            got = [k for k in b if k.startswith("lse.")]
            assert len(got) == 1, sorted(b)
            ref, mine = b["ref_lse"], b[got[0]]
            assert ref.shape == (c["batch"], c["q_heads"], c["q_len"]) and ref.dtype == np.float64
            fin = np.isfinite(ref)
            # the worker's values, converted as read (its hello said natural log): log2 of ref
            assert np.allclose(mine[fin], ref[fin] / np.log(2.0), rtol=1e-12, atol=1e-12), (mine, ref)
            plain = not (c.get("causal") or c.get("amask") or c.get("bmask") or c.get("key_padding")
                         or c.get("softcap") or c.get("window_left", -1) >= 0 or c.get("window_right", -1) >= 0
                         or c.get("serving") or c.get("fp8") or c.get("dropout_p"))
            if plain and np.isfinite(b["q"]).all() and np.isfinite(b["k"]).all():
                want = independent_lse(b)
                assert np.allclose(ref, want, rtol=1e-10, atol=1e-10), (ref, want)
                checked += 1
        print("ok: %d lse_diverge bundle(s), %d checked against plain numpy" % (len(lse), checked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
