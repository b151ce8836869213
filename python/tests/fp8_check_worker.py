"""A worker for campaign_fp8.py: the Python reference's answer, after checking what the
worker kit hands it (q, k, v as ml_dtypes float8 views of the case's format, case.descale
the case JSON's), and appending each case's format to the file named by AF_FP8_TALLY. With
the argument "no_descale" it forgets the descales (a deliberately wrong worker: its campaign
must find it). Usage: fp8_check_worker.py [no_descale] (frames on stdin/stdout)."""

import os
import sys

import _util  # noqa: F401 (puts python/ on sys.path)

import numpy as np

from attnfuzz import dtypes, layouts, reference
from attnfuzz.worker import serve

_tally = open(os.environ["AF_FP8_TALLY"], "a", buffering=1)
_wrong = len(sys.argv) > 1 and sys.argv[1] == "no_descale"


def run(case, q, k, v, mask=None, bool_mask=None):
    # mutation turns some FP8 cases back into f16/bf16 ones: those run as they are
    want = dtypes.DTYPES[case.fp8 or case.dtype]
    for n, x in (("q", q), ("k", k), ("v", v)):
        w = dtypes.DTYPES[case.dtype] if n == "q" and case.fp8_kv else want
        assert x.dtype == w, "tensor %s dtype %s, case %s" % (n, x.dtype, case.raw.get("fp8") or case.dtype)
    ds = (case.raw.get("fp8") or {}).get("descale") or [1.0, 1.0, 1.0]
    assert [case.descale[n] for n in "qkv"] == [float(d) for d in ds]
    _tally.write("%s%s\n" % (case.fp8 or case.dtype, "_kv" if case.fp8_kv else ""))
    qb, kb, vb = layouts.case_inputs_bhsd(case, q, k, v)
    if _wrong:
        case.descale = {"q": 1.0, "k": 1.0, "v": 1.0}
    return reference.attention(case, qb, kb, vb, mask=mask, bool_mask=bool_mask)


if __name__ == "__main__":
    caps = ["f16", "bf16", "gqa", "cross", "dv", "scale", "softcap", "amask", "bmask", "causal", "padding",
            "window", "dropout", "strided", "mask_dtype", "e4m3", "e5m2", "fp8_kv"]
    serve(run, name="fp8_check", version="1", caps=caps, layouts=layouts.ALL,
          conventions={"dropout": "counter"})
