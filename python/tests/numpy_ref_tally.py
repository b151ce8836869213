"""The numpy_ref worker, also appending each case's q/k/v layouts (one line per case) to the
file named by AF_LAYOUT_TALLY: campaign_numpy_ref.py checks that its campaign met every
layout. Usage: numpy_ref_tally.py (a worker: frames on stdin/stdout)."""

import os
import sys

import _util  # noqa: F401 (puts python/ on sys.path)

from attnfuzz.targets import numpy_ref

_tally = open(os.environ["AF_LAYOUT_TALLY"], "a", buffering=1)


class Tally(numpy_ref.Target):
    """numpy_ref's target, writing each case's layouts to the tally first."""

    def execute(self, art, req):
        s = req.case.specs
        _tally.write("%s %s %s\n" % (s["q"]["layout"], s["k"]["layout"], s["v"]["layout"]))
        return super().execute(art, req)


if __name__ == "__main__":
    from attnfuzz.targets import _base

    sys.exit(_base.main(numpy_ref.STACK, Tally, ["float64"]))
