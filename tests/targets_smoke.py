"""A short smoke campaign of one real-target stack through attnfuzz itself (the worker
process, the protocol, the oracle): `attnfuzz fuzz --backend target:STACK/VARIANT ...
--time SECONDS`. It fails when a bundle of kind error or crash appears (the worker broke
on a case it declares: the target's bug), or when attnfuzz exits 2. Findings of the
other kinds (diverge, nan_mismatch, masked_row_nan, ...) are the stack's bugs or declared
conventions: printed, never a failure; so are timeouts (a loaded machine).

Usage: targets_smoke.py ATTNFUZZ STACK VARIANT [VARIANT ...] [--time S] [--seed N]
Exit 0 clean, 1 error/crash bundles or a runtime error, 77 (ctest: skipped) when the
stack does not import or none of the variants is available here."""

import argparse
import collections
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAIL_KINDS = ("error", "crash")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("attnfuzz")
    ap.add_argument("stack")
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--time", type=float, default=15)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "python"))
    try:
        mod = importlib.import_module("attnfuzz.targets." + a.stack)
    except Exception as e:  # noqa: BLE001 - any import failure of the stack skips
        print("skipped: attnfuzz.targets.%s does not import: %s" % (a.stack, e))
        return 77
    variants = []
    for v in a.variants:
        ok, why = mod.STACK.available(v)
        if ok:
            variants.append(v)
        else:
            print("%s/%s: not available here (%s)" % (a.stack, v, why))
    if not variants:
        print("skipped: no variant of %s is available here" % a.stack)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        crashes, stats = os.path.join(tmp, "crashes"), os.path.join(tmp, "stats.json")
        cmd = [a.attnfuzz, "fuzz", "--time", str(a.time), "--seed", str(a.seed), "--crashes", crashes,
               "--stats", stats, "--no-minimize", "--quiet"]
        for v in variants:
            cmd += ["--backend", "target:%s/%s" % (a.stack, v)]
        print("$", " ".join(cmd))
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.time + 600)
        wall = time.time() - t0
        try:
            st = json.load(open(stats))
        except (OSError, ValueError):
            st = {}
        bundles = sorted(os.listdir(crashes)) if os.path.isdir(crashes) else []
        by_kind = collections.Counter(b.rsplit("-", 1)[0] for b in bundles)
        print("exit %d, %s execs in %.1fs (compile %.1fs), bundles by kind: %s"
              % (p.returncode, st.get("execs", "?"), wall, st.get("compile_seconds", 0) or 0,
                 dict(by_kind) or "none"))
        shown = 0
        for b in bundles:
            kind = b.rsplit("-", 1)[0]
            if kind not in FAIL_KINDS:
                shown += 1
                if shown > 12:
                    continue
            tag = "FAIL" if kind in FAIL_KINDS else "stack finding" if kind != "timeout" else "timeout (not a failure)"
            try:
                c = json.load(open(os.path.join(crashes, b, "case.json")))
                who = c.get("who") or c.get("backends") or ""
            except (OSError, ValueError):
                who = ""
            print("  %-14s %s %s" % (tag, b, who if isinstance(who, str) else json.dumps(who)[:80]))
            if kind in FAIL_KINDS:
                tail = os.path.join(crashes, b, "stderr.txt")
                if os.path.exists(tail):
                    print("    stderr tail:\n      " + open(tail, errors="replace").read()[-1500:].replace("\n", "\n      "))
        if shown > 12:
            print("  ... and %d more stack findings" % (shown - 12))
        bad = [b for b in bundles if b.rsplit("-", 1)[0] in FAIL_KINDS]
        if p.returncode not in (0, 1) or bad:
            print(p.stdout[-2000:], p.stderr[-3000:])
            print("FAIL: %s" % ("%d error/crash bundle(s)" % len(bad) if bad else "attnfuzz exited %d" % p.returncode))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
