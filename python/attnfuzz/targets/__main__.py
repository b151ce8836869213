"""python -m attnfuzz.targets --list: every known target as JSON (for `attnfuzz backends`)."""

import json
import os
import sys

from attnfuzz.targets import list_targets


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["--list"]:
        print("usage: python -m attnfuzz.targets --list\n"
              "       python -m attnfuzz.targets.STACK VARIANT   (a worker; see docs/worker-protocol.md)",
              file=sys.stderr)
        return 2
    # a stack's native code may write to fd 1 while importing: point fd 1 at stderr meanwhile
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        rows = list_targets()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    json.dump(rows, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
