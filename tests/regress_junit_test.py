#!/usr/bin/env python3
"""regress_junit_test.py ATTNFUZZ REPO WORK - `attnfuzz regress --junit` and `--waive`.

A corpus of the six known-bug bundles of corpus/regress (verdict "same"), one of them
copied with its recorded verdicts set to ok (so it REGRESSED), another such copy that
the --waive list names, and a bundle whose case.json does not parse. The JUnit XML must
hold the essentials of the JUnit schema CI systems read: <testsuites>/<testsuite> with
tests, failures, errors, skipped and time attributes that match their <testcase>
children; one testcase per bundle with classname, name and time; a <failure> whose
message is the REGRESSED verdict line, an <error> for the unreadable bundle, a
<skipped> for the waived one. Then a kind on the waive list waives every regression of
that kind. Standard library only."""
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def set_ok(bundle):
    path = os.path.join(bundle, "case.json")
    with open(path) as f:
        meta = json.load(f)
    meta["kind"] = "ok"
    for b in meta.get("backends", []):
        b["verdict"] = "ok"
    with open(path, "w") as f:
        json.dump(meta, f)


def check_junit(path, want):
    root = ET.parse(path).getroot()
    if root.tag != "testsuites":
        fail("root element %s, want testsuites" % root.tag)
    suites = root.findall("testsuite")
    if len(suites) != 1:
        fail("%d testsuite elements" % len(suites))
    cases = suites[0].findall("testcase")
    counts = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
    by_name = {}
    for c in cases:
        for a in ("classname", "name", "time"):
            if a not in c.attrib:
                fail("testcase without %s" % a)
        float(c.attrib["time"])
        if c.attrib["name"] in by_name:
            fail("two testcases named %s" % c.attrib["name"])
        kids = [k.tag for k in c if k.tag in ("failure", "error", "skipped")]
        if len(kids) > 1:
            fail("%s: %s" % (c.attrib["name"], kids))
        outcome = kids[0] if kids else "passed"
        by_name[c.attrib["name"]] = (outcome, c)
        counts["failures"] += outcome == "failure"
        counts["errors"] += outcome == "error"
        counts["skipped"] += outcome == "skipped"
    for el in (root, suites[0]):
        for k, v in counts.items():
            if int(el.attrib.get(k, -1)) != v:
                fail("<%s %s=%s>, the testcases say %d" % (el.tag, k, el.attrib.get(k), v))
        float(el.attrib["time"])
    for name, outcome in want.items():
        got = by_name.get(name, ("missing", None))[0]
        if got != outcome:
            fail("%s: %s, want %s" % (name, got, outcome))
    if len(by_name) != len(want):
        fail("%d testcases, want %d" % (len(by_name), len(want)))
    return by_name


def main():
    af, repo, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    corpus = os.path.join(work, "corpus")
    src = os.path.join(repo, "corpus", "regress")
    known = sorted(d for d in os.listdir(src) if os.path.exists(os.path.join(src, d, "case.json")))
    for d in known:
        shutil.copytree(os.path.join(src, d), os.path.join(corpus, d))
    regressed, waived = "diverge-1111111111111111", "diverge-2222222222222222"
    for d in (regressed, waived):
        shutil.copytree(os.path.join(src, known[0]), os.path.join(corpus, d))
        set_ok(os.path.join(corpus, d))
    os.makedirs(os.path.join(corpus, "diverge-3333333333333333"))
    with open(os.path.join(corpus, "diverge-3333333333333333", "case.json"), "w") as f:
        f.write("{ not json")
    waive = os.path.join(work, "waive.txt")
    with open(waive, "w") as f:
        f.write("# accepted findings\n%s   # the second copy\n" % waived)

    junit = os.path.join(work, "regress.xml")
    r = subprocess.run([af, "regress", "--junit", junit, "--waive", waive, corpus], capture_output=True, text=True)
    print(r.stdout[-2000:], r.stderr[-1000:])
    if r.returncode != 2:
        fail("exit %d, want 2 (an unreadable bundle)" % r.returncode)
    want = {d: "passed" for d in known}
    want.update({regressed: "failure", waived: "skipped", "diverge-3333333333333333": "error"})
    cases = check_junit(junit, want)
    f = cases[regressed][1].find("failure")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("REGRESSED") and regressed in ln]
    if len(line) != 1 or f.attrib.get("message") != line[0] or line[0] not in (f.text or ""):
        fail("failure message %r, verdict line %r" % (f.attrib.get("message"), line))
    if "waive list: " + waived not in r.stdout:
        fail("the waived verdict does not name its waive entry")

    # a kind on the list waives every regression of that kind; nothing else changes
    r = subprocess.run([af, "regress", "--junit", junit, "--waive", "diverge", corpus], capture_output=True, text=True)
    want[regressed] = "skipped"
    check_junit(junit, want)
    if "REGRESSED" in r.stdout:
        fail("a waived kind still regressed")
    # without the unreadable bundle and with every regression waived: exit 0
    shutil.rmtree(os.path.join(corpus, "diverge-3333333333333333"))
    r = subprocess.run([af, "regress", "--waive", "diverge", corpus], capture_output=True, text=True)
    if r.returncode != 0:
        fail("exit %d with every regression waived" % r.returncode)
    print("junit ok: %d testcases" % len(want))


if __name__ == "__main__":
    main()
