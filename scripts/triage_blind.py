#!/usr/bin/env python3
"""Blind agreement of `attnfuzz triage` (docs/triage.md): each bundle of the expected table
(docs/triage-expected.md, written before the command ran) triaged with its own known entry
left out (--blind) and without replays (--no-share: the recorded output is judged, so the
GPU bundles count too), its class compared with the expected one. Prints the Markdown table
and the two figures: agreement, and the share of conventions and precision limits called a
real bug.

    PYTHONPATH=python .venv/bin/python scripts/triage_blind.py [--expected FILE] [BUNDLE_ROOT]
"""

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from attnfuzz import known, triage  # noqa: E402


def expected_rows(path):
    """[(bundle path, class, entry id)] from the corpus table of the expected file."""
    rows = []
    with open(path) as f:
        for line in f:
            m = re.match(r"\| `([^`]+)` \| (\w+) \| `([^`]+)` \|", line)
            if m:
                rows.append(m.groups())
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--expected", default=os.path.join(known.ROOT, "docs", "triage-expected.md"))
    a = ap.parse_args(argv)
    entries = known.load()
    n = agree = cp = cp_as_bug = 0
    print("| bundle | expected | triage | confidence | decided by |")
    print("| --- | --- | --- | --- | --- |")
    for path, want, eid in expected_rows(a.expected):
        r = triage.triage(os.path.join(known.ROOT, path), entries, share=False, blind=True)
        got = r["verdict"]["class"]
        n += 1
        agree += got == want
        if want in ("convention", "precision"):
            cp += 1
            cp_as_bug += got == "real_bug"
        print("| `%s` | %s | %s%s | %.2f | %s |" % (path.split("/bundles/")[-1] if "/bundles/" in path else path, want,
                                                    got, "" if got == want else " (differs)",
                                                    r["verdict"]["confidence"],
                                                    r["best_model"] or r["known_match"] or r["kind"]))
    print()
    print("agreement %d/%d (%.0f%%); conventions and precision limits called a real bug: %d/%d (%.0f%%)"
          % (agree, n, 100.0 * agree / max(n, 1), cp_as_bug, cp, 100.0 * cp_as_bug / max(cp, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
