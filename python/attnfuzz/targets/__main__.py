"""The stacks' declarations and availability for scripts and `attnfuzz backends`.

    python -m attnfuzz.targets --list [WHERE...]      JSON: every variant, available here or why not
    python -m attnfuzz.targets --declared             JSON: every stack's declaration (imports no stack)
    python -m attnfuzz.targets --names [WHERE...]     STACK/VARIANT per line (with `available`:
                                                      the others that match, and why not, on stderr)
    python -m attnfuzz.targets --campaigns [WHERE...] the campaigns scripts run over those variants,
                                                      one per line: NAME STACK/VARIANT... (a stack's
                                                      variants, as STACK-eager and STACK-compiled
                                                      where it has both)
    python -m attnfuzz.targets --requirements FILE [MORE...]
                                                  FILE's pins, every stack's pip pins, MORE's pins

WHERE words narrow the variants (all must hold): cpu, gpu, eager, compiled, campaign (not
a reference oracle), smoke (in CI's smoke campaign), serving (runs a serving form: packed,
paged, sinks, alibi), available (can run here: imports the stacks), or stack names and
STACK/VARIANT names (any of them), e.g. `--names available cpu campaign` for a CPU campaign
over every stack installed, `--campaigns torch/sdpa_math torch/compile`.
Worker: python -m attnfuzz.targets.STACK VARIANT (docs/worker-protocol.md)."""

import json
import os
import sys

from attnfuzz import targets


def _stdout_to_stderr():
    """A stack's native code may write to fd 1 while importing: fd 1 points at stderr
    meanwhile; returns the saved descriptor."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    return saved


def _restore(saved):
    sys.stdout.flush()
    os.dup2(saved, 1)
    os.close(saved)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("--list", "--declared", "--names", "--campaigns", "--requirements"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd, where = argv[0], argv[1:]
    if cmd == "--requirements":
        if not where:
            print("usage: python -m attnfuzz.targets --requirements FILE [MORE...]", file=sys.stderr)
            return 2
        print("\n".join(targets.requirements(*where)))
        return 0
    if cmd == "--declared":
        json.dump(targets.declared(), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    saved = _stdout_to_stderr()
    try:
        if cmd == "--list" or "available" in where:
            rows = targets.list_targets()
        else:
            rows = targets.declared_rows()
    finally:
        _restore(saved)
    if cmd in ("--names", "--campaigns") and "available" in where:
        # what would match but cannot run here, and why (on stderr)
        others = [w for w in where if w != "available"]
        for r in targets.select(rows, others):
            if not r["available"]:
                print("skipped %s: %s" % (r["target"], r["reason"]), file=sys.stderr)
    rows = targets.select(rows, where)
    if cmd == "--list":
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif cmd == "--campaigns":
        for name, variants in targets.campaigns(rows):
            print(name, *variants)
    else:
        for r in rows:
            print(r["target"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
