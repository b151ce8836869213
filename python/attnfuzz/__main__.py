"""`attnfuzz` installed from the wheel: the command on PATH (and `python -m attnfuzz`).

The wheel carries the binary inside this package (attnfuzz/bin/attnfuzz, its shared
libraries beside the package in attnfuzz.libs/). This replaces the Python process with
it, setting ATTNFUZZ_PYTHON to this interpreter: the real targets (`target:STACK/VARIANT`),
`attnfuzz backends` and the report's repro scripts then run with the Python of the
environment attnfuzz is installed in, which imports this package and the stacks installed
beside it (src/core/proc.c: an installed binary takes no project root and no PYTHONPATH).
A value the caller set is replaced: only an interpreter that has this package can run its
targets (install attnfuzz into every environment that holds a stack to fuzz).

In a checkout the package has no binary: use build/attnfuzz there."""

import os
import sys


def binary():
    """The path of the binary the wheel installed in this package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "attnfuzz")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    exe = binary()
    if not os.access(exe, os.X_OK):
        print("attnfuzz: %s is missing: this attnfuzz package was not installed from a wheel "
              "(in a checkout, run build/attnfuzz; scripts/build_wheel.sh builds the wheel)" % exe, file=sys.stderr)
        return 2
    env = dict(os.environ, ATTNFUZZ_PYTHON=sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(exe, ["attnfuzz"] + argv, env)
    return 2  # not reached: execve returns only by raising


if __name__ == "__main__":
    sys.exit(main())
