"""Conventions measured on this host: what a target's fully masked row gives in each dtype.
One probe serves the targets (a stack whose answer depends on the CPU declares what it
measured at start-up: openvino) and the self-test (tests/targets_selftest.py checks that a
target's declaration and the measurement agree).

The probe: B 1, H 2, Sq = Sk = 4, D 16, inputs N(0, 1) rounded to the dtype (seed 7), a 2-D
boolean mask whose query row 2 attends to nothing and whose key 1 is masked for every query.
Row 2 of the output is then, by masked_rows name (docs/worker-protocol.md):
  "nan"       NaN (or 0: a path that zeroes the row stays right under "nan")
  "zero"      0
  "mean"      the mean of V over every key of the row (uniform weights: the masked logits
              became one finite value)
  "unmasked"  attention over every key, as if the mask were absent (the mask added as a
              finite bias the scores still show through)
"""

from __future__ import annotations

import numpy as np

from attnfuzz import dtypes, layouts, reference, rng, testing
from attnfuzz.case import Case
from attnfuzz.request import Request, caller

# the order classify() tries them in: "nan" before "zero" (both take an all-0 row)
MASKED_ROWS = ("zero", "nan", "mean", "unmasked")


def masked_row_probe(dt):
    """(case dict, q, k, v, bool mask): the probe in dtype dt, q/k/v float64 [1, 2, 4, 16]
    holding values of dt, the mask bool [4, 4]."""
    c = {"batch": 1, "q_heads": 2, "kv_heads": 2, "q_len": 4, "kv_len": 4, "head_dim": 16, "dtype": dt,
         "q": {"layout": "bhsd"}, "k": {"layout": "bhsd"}, "v": {"layout": "bhsd"},
         "bool_mask": {"rank": 2, "full_dims": "qk", "dtype": "f32", "expanded": False}}
    r = np.random.default_rng(7)
    q, k, v = (r.standard_normal((1, 2, 4, 16)).astype(dtypes.DTYPES[dt]).astype(np.float64) for _ in range(3))
    bm = np.ones((4, 4), dtype=bool)
    bm[2, :] = False          # query row 2 attends to nothing
    bm[:, 1] = False          # key 1 masked for every query
    return c, q, k, v, bm


def run_case(run, c, arrays):
    """run's answer to case c (a bhsd case, no serving form) as [B, Hq, Sq, Dv] float64, run
    called as the worker kit calls it (run(req), or the old positional form)."""
    from attnfuzz.worker import Result
    cs = Case(c, testing.derived(c))
    res = caller(run)(Request.from_arrays(cs, arrays, keep=rng.case_keep))
    res = res if isinstance(res, Result) else Result(res)
    return layouts.to_bhsd(np.asarray(res.out), res.layout, cs.q_heads, cs.v_head_dim).astype(np.float64)


def fits(row, name, q, k, v, dt):
    """Does row (the probe's output row 2, [H, Dv]) follow masked_rows `name`?"""
    if name == "nan":
        return bool(np.isnan(row).all() or (row == 0).all())
    if name == "zero":
        return bool((row == 0).all())
    if name == "mean":
        return bool(np.allclose(row, v[0].mean(axis=1), atol=1e-2))
    if name == "unmasked":
        c = {"batch": 1, "q_heads": 2, "kv_heads": 2, "q_len": 4, "kv_len": 4, "head_dim": 16, "dtype": dt}
        return bool(np.allclose(row, reference.attention(Case(c), q, k, v)[0, :, 2, :], atol=1e-2))
    raise ValueError("masked_rows %r is none of %s" % (name, ", ".join(MASKED_ROWS)))


def classify(row, q, k, v, dt):
    """The masked_rows name row follows ("zero" before "nan" for a row of 0), or None."""
    for name in MASKED_ROWS:
        if fits(row, name, q, k, v, dt):
            return name
    return None


def masked_rows(run, dts):
    """{dtype: the masked_rows name the fully masked row of run (a target's run, or what a
    target calls before its hello is known) follows here} for each of dts (None where it
    follows none; a dtype it refuses the probe in is left out)."""
    from attnfuzz.worker import Unsupported
    out = {}
    for dt in dts:
        c, q, k, v, bm = masked_row_probe(dt)
        try:
            o = run_case(run, c, testing.physical_inputs(c, q, k, v, bool_mask=bm))
        except Unsupported:
            continue
        out[dt] = classify(o[0, :, 2, :], q, k, v, dt)
    return out
