"""Keeps the known bugs (corpus/findings/<stack>/known.json, docs/known.md) and the triage
(docs/findings.md, docs/findings-campaigns.md) in agreement, and every committed bundle
matched by its entry.

    known_entries_test.py ATTNFUZZ ROOT
        - every entry: a unique id, its repro and bundles exist, its id is named in
          docs/findings.md or docs/findings-campaigns.md, and so are its repro and bundles;
        - every docs/findings.md row that names a repro or a bundle names an entry (its
          "known entry" column) whose repro and bundles are the row's, of the row's class;
          every id that column names exists;
        - every bundle under corpus/findings/*/bundles is listed by exactly one entry, and
          `ATTNFUZZ known BUNDLE` (no backend runs: the GPU ones are checked here too) says
          it is that entry.

    known_entries_test.py --replay ATTNFUZZ ROOT DIR...
        runs the project's pytest plugin over DIR... (`pytest --attnfuzz-regress DIR
        --attnfuzz-strict`: one `ATTNFUZZ regress` of the CPU bundles, replayed by their real
        targets): it must pass, and each bundle must be an expected failure naming its entry
        ("known bug ID"), or, where this host lacks what the entry needs (its "needs", e.g. a
        CPU flag), a skip saying "needs ...".

Standard library only, but --replay runs pytest (python/requirements-test.txt). Exit 0 when all holds, 1 otherwise."""

import glob
import json
import os
import re
import subprocess
import sys

ID = re.compile(r"`([a-z0-9][a-z0-9-]*)`")
REPRO = re.compile(r"corpus/findings/[a-z0-9_-]+/[A-Za-z0-9_]+\.py")
BUNDLE = re.compile(r"([a-z0-9_-]+)/bundles/([a-z_]+-[0-9a-f]{16})")


def load_entries(root):
    entries = {}
    for path in sorted(glob.glob(os.path.join(root, "corpus", "findings", "*", "known.json"))):
        with open(path) as f:
            doc = json.load(f)
        for e in doc["entries"]:
            e["_file"] = os.path.relpath(path, root)
            b = e.get("bundle", [])
            e["_bundles"] = [b] if isinstance(b, str) else list(b)
            if e["id"] in entries:
                raise SystemExit("FAIL duplicate id %s in %s and %s" % (e["id"], path, entries[e["id"]]["_file"]))
            entries[e["id"]] = e
    return entries


def table_rows(path):
    """The rows of the markdown tables of path, as lists of cells."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("| ") and not line.startswith("| ---"):
                rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def check_static(attnfuzz, root):
    bad = []
    entries = load_entries(root)
    findings = open(os.path.join(root, "docs", "findings.md")).read()
    campaigns = open(os.path.join(root, "docs", "findings-campaigns.md")).read()
    docs = findings + campaigns
    listed = {}
    for eid, e in entries.items():
        if e.get("repro") and not os.path.isfile(os.path.join(root, e["repro"])):
            bad.append("%s: repro %s does not exist" % (eid, e["repro"]))
        if e.get("repro") and e["repro"] not in docs:
            bad.append("%s: its repro %s is in neither findings page" % (eid, e["repro"]))
        for b in e["_bundles"]:
            if not os.path.isfile(os.path.join(root, b, "case.json")):
                bad.append("%s: bundle %s does not exist" % (eid, b))
            short = b.replace("corpus/findings/", "")
            name = os.path.basename(b)
            if short not in docs and name not in docs:
                bad.append("%s: its bundle %s is in neither findings page" % (eid, b))
            if b in listed:
                bad.append("bundle %s is listed by %s and %s" % (b, listed[b], eid))
            listed[b] = eid
        if "`%s`" % eid not in docs:
            bad.append("%s: the id is named in neither findings page" % eid)

    # docs/findings.md: every row with a repro or a bundle names its entries
    header = None
    for cells in table_rows(os.path.join(root, "docs", "findings.md")):
        if cells[0] == "stack":
            header = cells
            continue
        if not header or "known entry" not in header:
            bad.append("docs/findings.md: the table has no \"known entry\" column")
            break
        row = dict(zip(header, cells))
        ids = ID.findall(row.get("known entry", ""))
        ids = [i for i in ids if "-" in i]  # entry ids, not `unsupported` or `tf32`
        repros = REPRO.findall(row.get("repro", ""))
        bundles = ["corpus/findings/%s/bundles/%s" % m for m in BUNDLE.findall(row.get("repro", ""))]
        what = "docs/findings.md row \"%s | %s\"" % (row.get("stack"), row.get("finding", "")[:60])
        for i in ids:
            if i not in entries:
                bad.append("%s: names entry %s, which no known.json has" % (what, i))
        if (repros or bundles) and not ids:
            bad.append("%s: names a repro or bundle but no entry" % what)
            continue
        mine = [entries[i] for i in ids if i in entries]
        for r in repros:
            if not any(e.get("repro") == r for e in mine):
                bad.append("%s: its repro %s is no repro of %s" % (what, r, ", ".join(ids)))
        for b in bundles:
            if not any(b in e["_bundles"] for e in mine):
                bad.append("%s: its bundle %s is no bundle of %s" % (what, b, ", ".join(ids)))
        cls = row.get("class", "")
        want = "precision" if cls.startswith("precision") else "convention" if cls.startswith("convention") else "real_bug"
        for e in mine:
            if e["class"] != want:
                bad.append("%s: class %r, but entry %s is %s" % (what, cls, e["id"], e["class"]))

    # every committed bundle: listed once, and matched by its entry without running anything
    for case in sorted(glob.glob(os.path.join(root, "corpus", "findings", "*", "bundles", "*", "case.json"))):
        b = os.path.relpath(os.path.dirname(case), root)
        if b not in listed:
            bad.append("bundle %s is listed by no entry" % b)
            continue
        p = subprocess.run([attnfuzz, "known", os.path.join(root, b)], capture_output=True, text=True)
        said = re.search(r"known bug ([a-z0-9-]+)", p.stdout)
        if not said or said.group(1) != listed[b]:
            bad.append("bundle %s: attnfuzz known says %r, its entry is %s" % (b, (p.stdout + p.stderr).strip()[-300:],
                                                                              listed[b]))
        else:
            print("ok    %s is %s" % (b, listed[b]))
    return bad


def check_replay(attnfuzz, root, dirs):
    """The bundles replayed through the project's pytest plugin (one `attnfuzz regress --junit`
    under it, --attnfuzz-strict), as a CI job of a user runs them: each item's outcome read from
    pytest's JUnit XML (xfail "known bug ID", skip "needs ...", failure)."""
    import tempfile
    import xml.etree.ElementTree as ET
    bad = []
    entries = load_entries(root)
    listed = {b: e["id"] for e in entries.values() for b in e["_bundles"]}
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"))
    with tempfile.TemporaryDirectory(prefix="known-replay-") as tmp:
        xml = os.path.join(tmp, "pytest.xml")
        # a compiling target's first build takes over a minute on a loaded 2-core machine: the
        # timeout is a hang guard here, not a speed bound
        cmd = [sys.executable, "-m", "pytest", "-p", "attnfuzz.pytest_plugin", "-p", "no:cacheprovider", "-q", "-rxs",
               "--attnfuzz-strict", "--attnfuzz-timeout", "300", "--attnfuzz-exe", attnfuzz, "--junitxml", xml]
        for d in dirs:
            cmd += ["--attnfuzz-regress", os.path.relpath(d, root)]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        if p.returncode != 0:
            bad.append("pytest --attnfuzz-regress exited %d" % p.returncode)
        seen, skipped = {}, {}
        if os.path.exists(xml):
            for tc in ET.parse(xml).getroot().iter("testcase"):
                # pytest's JUnit writes a nodeid without "::" (a bundle's path) with "/" as "."
                b = (tc.get("classname") + "." if tc.get("classname") else "") + tc.get("name", "")
                sk, fail = tc.find("skipped"), tc.find("failure")
                if fail is None:
                    fail = tc.find("error")
                if fail is not None:
                    seen[b] = "(failed: %s)" % (fail.get("message") or "").splitlines()[0][:200]
                elif sk is not None and sk.get("type") == "pytest.xfail":
                    m = re.match(r"known bug (\S+)", sk.get("message") or "")
                    seen[b] = m.group(1) if m else "(xfail: %s)" % sk.get("message")
                elif sk is not None:
                    seen[b] = "(skipped)"
                    m = re.search(r"known bug ([a-z0-9-]+)", sk.get("message") or "")
                    if m:
                        seen[b] = m.group(1)
                    skipped[b] = sk.get("message") or "skip"
                else:
                    seen[b] = None
    for d in dirs:
        for case in sorted(glob.glob(os.path.join(d, "*", "case.json"))):
            b = os.path.relpath(os.path.dirname(case), root)
            dotted = b.replace(os.sep, ".")
            if dotted in seen:
                seen[b] = seen.pop(dotted)
            if dotted in skipped:
                skipped[b] = skipped.pop(dotted)
            want = listed.get(b)
            if b in skipped and entries.get(want, {}).get("needs") and seen.get(b) == "(skipped)":
                seen[b] = want   # "skip (needs ...)": regress names the need, not the entry
            if seen.get(b) != want:
                bad.append("bundle %s replayed as known bug %s, its entry is %s" % (b, seen.get(b), want))
            elif b in skipped and not entries[want].get("needs"):
                bad.append("bundle %s: %s, but its entry %s needs nothing" % (b, skipped[b], want))
            elif b in skipped:
                print("skip  %s is %s: %s on this host" % (b, want, skipped[b]))
            else:
                print("ok    %s replays as %s" % (b, want))
    return bad


def main(argv):
    if len(argv) >= 4 and argv[1] == "--replay":
        bad = check_replay(argv[2], os.path.abspath(argv[3]), [os.path.abspath(d) for d in argv[4:]])
    elif len(argv) == 3:
        bad = check_static(argv[1], os.path.abspath(argv[2]))
    else:
        print(__doc__)
        return 2
    for b in bad:
        print("FAIL  " + b)
    print("%d problems" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
