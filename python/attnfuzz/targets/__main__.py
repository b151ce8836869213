"""python -m attnfuzz.targets --list: every known target as JSON (for `attnfuzz backends`)."""

import json
import sys

from attnfuzz.targets import list_targets


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["--list"]:
        print("usage: python -m attnfuzz.targets --list\n"
              "       python -m attnfuzz.targets.STACK VARIANT   (a worker; see docs/worker-protocol.md)",
              file=sys.stderr)
        return 2
    json.dump(list_targets(), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
