"""The numpy_ref worker, also appending each case's q/k/v layouts (one line per case) to the
file named by AF_LAYOUT_TALLY: campaign_numpy_ref.py checks that its campaign met every
layout. Usage: numpy_ref_tally.py (a worker: frames on stdin/stdout)."""

import os
import sys

import _util  # noqa: F401 (puts python/ on sys.path)

from attnfuzz.targets import numpy_ref

_tally = open(os.environ["AF_LAYOUT_TALLY"], "a", buffering=1)


def run(case, q, k, v, mask=None, bool_mask=None):
    s = case.specs
    _tally.write("%s %s %s\n" % (s["q"]["layout"], s["k"]["layout"], s["v"]["layout"]))
    return numpy_ref.run(case, q, k, v, mask=mask, bool_mask=bool_mask)


if __name__ == "__main__":
    from attnfuzz.worker import serve
    import numpy as np

    sys.exit(serve(run, name="numpy_ref", version=np.__version__, variant="float64", caps=numpy_ref.CAPS,
                   layouts=list(numpy_ref.layouts.ALL), dtypes=["f32", "f16", "bf16"],
                   conventions=numpy_ref.CONVENTIONS, compile_key=[]))
