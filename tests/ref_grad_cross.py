"""The C float64 reference backward (src/backends/ref_grad.c) against the numpy one
(python/attnfuzz/reference.py backward()), two implementations of docs/design.md section 2
"Backward" that share no code: tests/grad/ref_grad_dump.c writes N generated backward cases
(every feature of the generator: masks of every shape, causal diagonals, padding, windows,
dropout, softcap, GQA, planted NaN and Inf, near-overflow and subnormal values) with their
canonical inputs and the C gradients; numpy recomputes them from the same inputs (its own
dropout rule, its own masks) and every element must agree: the same class (finite, NaN,
+Inf, -Inf), finite values within 1e-9 of the row's scale (the C bound on the sum of the
terms' absolute values: float64 summation order). The comparison is checked to fail on a
gradient whose largest element is off by one part in a million.

    ref_grad_cross.py REF_GRAD_DUMP N SEED"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from attnfuzz import reference
from attnfuzz.case import Case

RTOL = 1e-9


def read_cases(path):
    with open(path, "rb") as f:
        while True:
            line = f.readline()
            if not line:
                return
            head = json.loads(line)
            arrays = {}
            for name, shape in head["arrays"]:
                n = int(np.prod(shape))
                arrays[name] = np.frombuffer(f.read(8 * n), dtype="<f8").reshape(shape)
            yield head["case"], arrays


def classes(x):
    return np.where(np.isnan(x), 1, np.where(np.isposinf(x), 2, np.where(np.isneginf(x), 3, 0)))


def compare(c, p, gs):
    """Elements where the C gradient c and the numpy one p disagree (gs: row scales)."""
    scale = np.broadcast_to(gs[..., None], c.shape)
    cc, pc = classes(c), classes(p)
    with np.errstate(all="ignore"):
        diff = np.abs(np.where(cc == 0, c, 0.0) - np.where(pc == 0, p, 0.0))
        ok = (cc == pc) & ((cc != 0) | (diff <= RTOL * (scale + np.abs(c)) + 1e-300))
    return np.argwhere(~ok)


def main():
    tool, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "grads.bin")
        subprocess.run([tool, str(n), str(seed), out], check=True)
        ncases = nelem = 0
        failures = []
        seen = {"dq": 0, "dk": 0, "dv": 0, "dmask": 0, "nonfinite": 0, "dropout": 0, "softcap": 0}
        selfcheck = False
        for raw, a in read_cases(out):
            case = Case(raw)
            bm = a.get("bool_mask")
            g = reference.backward(case, a["q"], a["k"], a["v"], a["do"], mask=a.get("mask"),
                                   bool_mask=None if bm is None else bm != 0)
            ncases += 1
            seen["dropout"] += case.dropout_p > 0
            seen["softcap"] += case.softcap > 0
            nonfinite = False
            for name in ("dq", "dk", "dv", "dmask"):
                if name not in a:
                    continue
                c, p = a[name], np.asarray(g[name]).reshape(a[name].shape)
                seen[name] += 1
                nonfinite |= not np.isfinite(c).all()
                nelem += c.size
                bad = compare(c, p, a["gs_" + name])
                if len(bad):
                    failures.append((ncases - 1, name, len(bad), bad[0], raw))
                if not selfcheck and not len(bad) and np.isfinite(c).all() and np.abs(c).max() > 0:
                    # the comparison catches the largest element off by one part in a million
                    wrong = p.copy()
                    at = np.unravel_index(np.argmax(np.abs(c)), c.shape)
                    wrong[at] *= 1 + 1e-6
                    selfcheck = len(compare(c, wrong, a["gs_" + name])) > 0
            seen["nonfinite"] += nonfinite
        print("%d cases, %d gradient elements; cases asking dq %d, dk %d, dv %d, dmask %d; with non-finite "
              "gradients %d, dropout %d, softcap %d" % (ncases, nelem, seen["dq"], seen["dk"], seen["dv"],
                                                      seen["dmask"], seen["nonfinite"], seen["dropout"],
                                                      seen["softcap"]))
        for k, name, count, where, raw in failures[:10]:
            print("case %d %s: %d elements differ, first at %s\n  %s" % (k, name, count, list(where), json.dumps(raw)))
        if failures:
            print("%d of %d cases differ" % (len({f[0] for f in failures}), ncases))
            return 1
        if not selfcheck:
            print("self-check: no gradient off by 1e-6 failed the comparison")
            return 1
        if ncases < n:
            print("too few cases checked")
            return 1
        return 0


if __name__ == "__main__":
    sys.exit(main())
