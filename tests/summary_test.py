#!/usr/bin/env python3
"""python -m attnfuzz.summary (the closing table of scripts/campaign.sh) over a crashes
directory made by two small campaigns of mutants, as campaign.sh lays one out:

  stats.json        mutant:causal_top_left, --max-findings 1 --no-minimize (the
                    built-ins' name: one bundle as found)
  stats-fake.json   mutant:bshd_as_bhsd, a known bug of a known.json written here, beside
                    mutant:scale_sqrt_q_only, new findings (minimized: a few bundles)
  stats-cut.json    the built-in explicit, stopped by SIGINT: "interrupted"
  stats-none.json   never written (a campaign not reached: "not run")

Each row must hold what the stats hold, computed here from the JSON and the bundles
(executions, hits per known entry, each signature's bundle path under the crashes
directory and the backend its case.json names), and the command alone must print them.
Standard library only.

    summary_test.py ATTNFUZZ SOURCE_DIR
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time


def under(crashes, bundle):
    """The stats name a bundle by the path the campaign wrote (crashes/NAME) or by NAME."""
    return os.path.join(crashes, os.path.basename(bundle))


def main():
    attnfuzz, src = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(src, "python"))
    from attnfuzz import summary

    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL:", what, file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="af-summary-") as tmp:
        os.chdir(tmp)  # the table's paths are relative to the current directory
        crashes = "crashes"
        known = os.path.join(tmp, "known.json")
        with open(known, "w") as f:
            json.dump({"format": "attnfuzz-known", "version": 1, "entries": [{
                "id": "test-bshd-as-bhsd", "class": "real_bug", "title": "BSHD read as BHSD",
                "backends": ["mutant:bshd_as_bhsd"], "kinds": ["diverge", "nan_mismatch", "inf_mismatch"]}]}, f)
        runs = [
            ["--backend", "mutant:causal_top_left", "--max-findings", "1", "--runs", "3000", "--no-known",
             "--no-minimize", "--stats", crashes + "/stats.json"],
            ["--backend", "mutant:bshd_as_bhsd", "--backend", "mutant:scale_sqrt_q_only", "--runs", "300",
             "--known", known, "--stats", crashes + "/stats-fake.json"],
        ]
        for extra in runs:
            p = subprocess.run([attnfuzz, "fuzz", "--seed", "3", "--crashes", crashes, "--quiet"] + extra,
                               capture_output=True, text=True)
            check(p.returncode in (0, 1), "fuzz %s: exit %d: %s" % (extra, p.returncode, p.stderr[-400:]))
        # a campaign stopped by Ctrl-C (SIGINT) once it has written its stats: "interrupted"
        cut = crashes + "/stats-cut.json"
        p = subprocess.Popen([attnfuzz, "fuzz", "--backend", "explicit", "--time", "300", "--no-known", "--quiet",
                              "--crashes", crashes, "--stats", cut], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        for _ in range(1200):  # a hang guard: the stats come after a second
            if os.path.exists(cut) or p.poll() is not None:
                break
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        check(p.returncode == 0, "interrupted campaign: exit %s: %s" % (p.returncode, err[-300:]))
        paths = [crashes + "/stats.json", crashes + "/stats-fake.json", cut, crashes + "/stats-none.json"]
        stats = {}
        for pth in paths[:3]:
            with open(pth) as f:
                stats[pth] = json.load(f)
        a, b, c = stats[paths[0]], stats[paths[1]], stats[paths[2]]
        check(c["interrupted"] and c["finished"] and not a["interrupted"] and not b["interrupted"],
              "interrupted: %s %s %s" % (a["interrupted"], b["interrupted"], c["interrupted"]))
        # the campaigns made what the table is to show: a finding each, known hits in one
        check(len(a["signatures"]) == 1, "causal_top_left: %d signatures, want 1" % len(a["signatures"]))
        check(len(b["signatures"]) >= 1, "scale_sqrt_q_only: no signature")
        check(any(k["hits"] > 0 and k["id"] == "test-bshd-as-bhsd" for k in b["known"]),
              "no hit on the known entry: %s" % b["known"])

        rows = summary.summarize(crashes, paths)
        check([r["name"] for r in rows] == [summary.BUILTIN, "fake", "cut", "none"],
              "names %s" % [r["name"] for r in rows])
        check(not rows[3]["ran"] and rows[3]["error"] == "not run", "stats-none: %s" % rows[3])
        text = summary.render(rows)
        marks = {l.split()[0]: l.split()[5:] for l in text.splitlines()[2:6]}
        check(marks == {summary.BUILTIN: [], "fake": [], "cut": ["interrupted"], "none": ["not", "run"]},
              "the lines' notes: %s" % marks)
        for row, st in zip(rows, (a, b, c)):
            check(row["ran"] and row["cases"] == st["execs"], "%s: cases %s, stats execs %s" % (
                row["name"], row["cases"], st["execs"]))
            want_known = sorted((k["id"], k["hits"]) for k in st["known"] if k["hits"])
            check(sorted((k[0], k[1]) for k in row["known"]) == want_known, "%s: known %s, want %s" % (
                row["name"], row["known"], want_known))
            for k in st["known"]:
                if k["hits"] and k.get("bundle"):
                    check(os.path.isdir(under(crashes, k["bundle"])), "exemplar %s missing" % k["bundle"])
                    check(under(crashes, k["bundle"]) in text, "exemplar %s not in the table" % k["bundle"])
            want_new = sorted(under(crashes, s["bundle"]) for s in st["signatures"] if s.get("bundle"))
            got_new = sorted(n["path"] for n in row["new"] if n["path"])
            check(got_new == want_new and len(want_new) == len(st["signatures"]), "%s: bundles %s, want %s" % (
                row["name"], got_new, want_new))
            for n in row["new"]:
                with open(os.path.join(n["path"], "case.json")) as f:
                    cj = json.load(f)
                check(n["present"] and n["who"] == cj["who"] and n["kind"] == cj["kind"],
                      "%s: %s %s, case.json %s %s" % (n["path"], n["kind"], n["who"], cj["kind"], cj["who"]))
            # the campaign's line: name, cases, known hits, new bundles
            line = [l.split() for l in text.splitlines() if l.split()[:1] == [row["name"]]]
            want = [row["name"], str(st["execs"]), None, str(sum(k["hits"] for k in st["known"])),
                    str(len(st["signatures"]))]
            check(line and [x for x, w in zip(line[0], want) if w is not None] == [w for w in want if w is not None],
                  "%s: line %s, want %s" % (row["name"], line[:1], want))
        check("not run" in text, "no 'not run' line")

        # alone, as campaign.sh calls it, and over every stats*.json of the directory
        env = dict(os.environ, PYTHONPATH=os.path.join(src, "python"))
        for argv in ([crashes] + paths, [crashes]):
            p = subprocess.run([sys.executable, "-m", "attnfuzz.summary"] + argv, capture_output=True, text=True,
                               env=env)
            check(p.returncode == 0, "summary %s: exit %d: %s" % (argv, p.returncode, p.stderr))
            for st in (a, b):
                for s in st["signatures"]:
                    check(under(crashes, s["bundle"]) in p.stdout, "%s not printed" % s["bundle"])
                for k in st["known"]:
                    check(not k["hits"] or k["id"] in p.stdout, "%s not printed" % k["id"])
        p = subprocess.run([sys.executable, "-m", "attnfuzz.summary", "nowhere"], capture_output=True, text=True,
                           env=env)
        check(p.returncode == 2, "no stats: exit %d, want 2" % p.returncode)
        print(text)

    if failures:
        print("%d failure(s)" % len(failures), file=sys.stderr)
        return 1
    print("summary: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
