"""The closing table of a campaign run: per campaign (the built-ins, each real stack) the
cases it ran, its known-bug hits by entry and the new bundles it stored, read from the
stats JSON each campaign writes (`attnfuzz fuzz --stats`) and the bundles in the crashes
directory. Standard library only: it runs with any python3 (PYTHONPATH=python).

    python -m attnfuzz.summary CRASHES                 every CRASHES/stats*.json
    python -m attnfuzz.summary CRASHES STATS.json...   those stats files (missing: not run)

A stats file's campaign is named by its file name: `stats.json` is the built-ins'
campaign, `stats-NAME.json` the campaign NAME (scripts/campaign.sh writes one per stack,
`torch-eager` and `torch-compiled` for torch's halves). From each file:

  cases       `execs` (the parent's sum for a --jobs campaign), and `elapsed` seconds;
              "interrupted" when Ctrl-C stopped it (`interrupted`), "unfinished" when
              its stats are a progress write (`finished` false: killed, or still running)
  known hits  `known`: per known-bug entry id (docs/known.md) the findings counted
              against it, and its exemplar bundle (`known-ID`) when one is stored
  new         `signatures`: one per new finding signature, with its kind, the backend
              that failed (`who`) and its bundle under CRASHES (minimized or as found);
              one another process had stored already is marked so, one not stored
              says where its input is (the stats' `input_hex`)

A bundle's backend is read from its case.json (`who`, else the failing entry of
`backends`) where the bundle is there. Paths are printed relative to the current
directory. Exit 0 when the table is printed (whatever it holds), 2 when no stats file
could be read.
"""

import json
import os
import sys

BUILTIN = "built-ins"


def campaign_name(path):
    """stats.json -> built-ins, stats-NAME.json -> NAME."""
    base = os.path.basename(path)
    if base.endswith(".json"):
        base = base[: -len(".json")]
    if base == "stats":
        return BUILTIN
    if base.startswith("stats-"):
        return base[len("stats-"):]
    return base


def _bundle_backend(bundle_dir):
    """The failing backend its case.json names, or None when it cannot be read."""
    try:
        with open(os.path.join(bundle_dir, "case.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if doc.get("who"):
        return doc["who"]
    for b in doc.get("backends") or []:
        if b.get("verdict") not in (None, "ok", "pass", "skip"):
            return b.get("name")
    return None


def _bundle_path(crashes, name):
    """A bundle the stats name, under crashes: the stats hold its path as the campaign
    wrote it (with the --crashes directory in front) or its bare name; bundles sit
    directly under the crashes directory either way."""
    return os.path.join(crashes, os.path.basename(name.rstrip("/")))


def _rel(path):
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def read_campaign(crashes, path):
    """One row: a dict with name, stats path, whether it ran, its cases, time, known hits
    (list of (id, hits, bundle path or None)) and new bundles (list of dicts)."""
    row = {"name": campaign_name(path), "stats": path, "ran": False, "cases": 0, "elapsed": 0.0,
           "finished": False, "interrupted": False, "known": [], "new": [], "error": None}
    try:
        with open(path) as f:
            st = json.load(f)
    except FileNotFoundError:
        row["error"] = "not run"
        return row
    except (OSError, ValueError) as e:
        row["error"] = "unreadable stats: %s" % e
        return row
    row["ran"] = True
    row["cases"] = int(st.get("execs", 0))
    row["elapsed"] = float(st.get("elapsed", 0.0))
    row["finished"] = bool(st.get("finished", False))
    row["interrupted"] = bool(st.get("interrupted", False))
    for k in st.get("known") or []:
        if not k.get("hits"):
            continue
        b = _bundle_path(crashes, k["bundle"]) if k.get("bundle") else None
        row["known"].append((k.get("id", "?"), int(k["hits"]), _rel(b) if b else None))
    row["known"].sort(key=lambda t: (-t[1], t[0]))
    for s in st.get("signatures") or []:
        item = {"kind": s.get("kind", "?"), "who": s.get("who", "?"), "signature": s.get("signature", ""),
                "count": int(s.get("count", 0)), "minimized": bool(s.get("minimized", True)),
                "elsewhere": bool(s.get("stored_elsewhere", False)), "path": None, "present": False}
        if s.get("bundle"):
            d = _bundle_path(crashes, s["bundle"])
            item["path"] = _rel(d)
            item["present"] = os.path.isdir(d)
            who = _bundle_backend(d) if item["present"] else None
            if who:
                item["who"] = who
        row["new"].append(item)
    return row


def stats_files(crashes):
    """Every stats*.json directly under crashes: the built-ins' first, then by name."""
    try:
        names = [n for n in os.listdir(crashes) if n.startswith("stats") and n.endswith(".json")]
    except OSError:
        return []
    return [os.path.join(crashes, n) for n in sorted(names, key=lambda n: (n != "stats.json", n))]


def summarize(crashes, paths=None):
    """The rows of the stats files paths (default: every stats*.json under crashes)."""
    if not paths:
        paths = stats_files(crashes)
    return [read_campaign(crashes, p) for p in paths]


def _table(head, lines, right):
    widths = [max([len(h)] + [len(l[i]) for l in lines]) for i, h in enumerate(head)]

    def fmt(cols):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths))).rstrip()

    return [fmt(head), fmt(["-" * w for w in widths])] + [fmt(l) for l in lines]


def render(rows):
    """The table as text: one line per campaign, then the known-bug hits by entry and the
    new bundles, each under its campaign's name."""
    out = []
    lines = []
    for r in rows:
        if not r["ran"]:
            lines.append([r["name"], "-", "-", "-", "-", r["error"] or ""])
            continue
        stored = sum(1 for n in r["new"] if n["path"] and not n["elsewhere"])
        note = "interrupted" if r["interrupted"] else "" if r["finished"] else "unfinished"
        lines.append([r["name"], str(r["cases"]), "%.0fs" % r["elapsed"], str(sum(k[1] for k in r["known"])),
                      str(stored), note])
    out += _table(["campaign", "cases", "time", "known hits", "new bundles", "note"], lines, right={1, 2, 3, 4})
    known = [[r["name"], k[0], str(k[1]), k[2] or "(counted, no exemplar)"] for r in rows for k in r["known"]]
    out.append("")
    if known:
        out.append("known-bug hits by entry (docs/known.md):")
        out += ["  " + l for l in _table(["campaign", "entry", "hits", "exemplar"], known, right={2})]
    else:
        out.append("known-bug hits by entry: none")
    new = []
    for r in rows:
        for n in r["new"]:
            if not n["path"]:
                where = "(not stored: input_hex in %s)" % _rel(r["stats"])
            else:
                where = n["path"]
                if not n["present"]:
                    where += " (missing)"
                elif n["elsewhere"]:
                    where += " (stored by another campaign or run)"
                elif not n["minimized"]:
                    where += " (as found)"
            new.append([r["name"], n["kind"], n["who"], str(n["count"]), where])
    out.append("")
    if new:
        out.append("new bundles (attnfuzz show PATH; attnfuzz report CRASHES -o report):")
        out += ["  " + l for l in _table(["campaign", "kind", "backend", "hits", "bundle"], new, right={3})]
    else:
        out.append("new bundles: none")
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 0 if argv else 2
    crashes, paths = argv[0], argv[1:]
    rows = summarize(crashes, paths)
    if not any(r["ran"] for r in rows):
        print("attnfuzz.summary: no stats file to read under %s%s" % (
            crashes, "" if not paths else " (%s)" % ", ".join(paths)), file=sys.stderr)
        if not rows:
            return 2
    print(render(rows))
    return 0 if any(r["ran"] for r in rows) else 2


if __name__ == "__main__":
    sys.exit(main())
