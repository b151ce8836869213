"""The numpy_ref worker returning its softmax statistics in one of three forms (argv[1]):
  nat       natural log, as the protocol's default says (must be clean)
  base2     log2, and the hello says lse_base 2 (attnfuzz converts: must be clean)
  wrong     log2 without saying so (mutant:lse_base2's bug in a worker: lse_diverge)
Usage: lse_worker.py MODE (a worker: frames on stdin/stdout); campaign_lse.py runs it."""

import math
import sys

import _util  # noqa: F401 (puts python/ on sys.path)

from attnfuzz.targets import _base, numpy_ref
from attnfuzz.worker import Result

MODE = sys.argv[1] if len(sys.argv) > 1 else "nat"


class Stats(numpy_ref.Target):
    """numpy_ref's target; its statistics in MODE's base."""

    def declare(self):
        d = dict(super().declare())
        if MODE == "base2":
            d["lse_base"] = 2
        return d

    def execute(self, art, req):
        res = super().execute(art, req)
        if MODE != "nat" and isinstance(res, Result) and res.lse is not None:
            res.lse = res.lse / math.log(2.0)
        return res


if __name__ == "__main__":
    sys.exit(_base.main(numpy_ref.STACK, Stats, ["float64"]))
