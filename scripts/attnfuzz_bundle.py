#!/usr/bin/python3
"""The attnfuzz repro bundle loader; it lives in python/attnfuzz/bundle.py (the attnfuzz
package). This shim keeps `python3 scripts/attnfuzz_bundle.py BUNDLE...` and
`import attnfuzz_bundle` (with scripts/ on sys.path) working; it needs only numpy and
zstandard, so Debian's /usr/bin/python3 runs it.

    import attnfuzz_bundle as ab
    b = ab.load("crashes/diverge-0123456789abcdef")
"""

import os
import sys

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in sys.path:
    sys.path.insert(0, _PY)

from attnfuzz.bundle import *  # noqa: E402,F401,F403
from attnfuzz.bundle import __doc__ as _bundle_doc  # noqa: E402,F401
from attnfuzz.bundle import _case_line, main  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
