"""Runs every standalone repro under corpus/findings/<stack>/*.py with this Python and checks
that it still shows its bug. The repros' convention (corpus/findings/README.md):

  exit 1 and a line starting "BUG"    the bug is present           -> ok
  exit 0 and a line starting "FIXED"  the stack fixed it           -> reported "fixed", test fails
  exit 77 and a line starting "SKIP"  cannot run here (no GPU)     -> skipped
  anything else (a traceback, a timeout)                           -> "broken", test fails

A stack whose module does not import skips all its repros. Usage:
findings_repros.py [--jobs N] [--timeout S] [STACK ...]. Exit 0 when every repro that ran
still shows its bug, 1 otherwise, 77 when none could run."""

import argparse
import concurrent.futures
import importlib.util
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FINDINGS = os.path.join(ROOT, "corpus", "findings")
sys.path.insert(0, os.path.join(ROOT, "python"))


def stack_modules():
    """{findings directory: the modules its repros need}: corpus/findings/<stack> and
    <stack>-cuda need what the stack's declaration imports (attnfuzz.targets)."""
    from attnfuzz import targets
    out = {}
    for st in targets.declared():
        need = st.get("imports", [st["stack"]])
        out[st["stack"]] = out[st["stack"] + "-cuda"] = need
    return out


def run_one(path, timeout):
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    except subprocess.TimeoutExpired:
        return path, "broken", "timed out after %ds" % timeout, time.time() - t0
    lines = p.stdout.splitlines()
    tag = {1: "BUG", 0: "FIXED", 77: "SKIP"}.get(p.returncode)
    said = [l for l in lines if tag and l.startswith(tag)]
    if p.returncode == 1 and said:
        status = "bug present"
    elif p.returncode == 0 and said:
        status = "FIXED"
    elif p.returncode == 77:
        status = "skipped"
    else:
        status = "broken"
    if status in ("bug present", "skipped"):
        detail = said[-1] if said else ""
    else:   # the whole story for what needs a person
        detail = ("exit %d\n" % p.returncode + p.stdout[-2000:] + p.stderr[-2000:]).rstrip()
    return path, status, detail, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("stacks", nargs="*")
    a = ap.parse_args()
    stacks = a.stacks or sorted(d for d in os.listdir(FINDINGS) if os.path.isdir(os.path.join(FINDINGS, d)))
    todo = []
    needs = stack_modules()
    for stack in stacks:
        files = sorted(f for f in os.listdir(os.path.join(FINDINGS, stack)) if f.endswith(".py"))
        missing = [m for m in needs.get(stack, [stack]) if importlib.util.find_spec(m.split(".")[0]) is None]
        if missing:
            for f in files:
                print("%-62s skipped (%s does not import)" % (stack + "/" + f, ", ".join(missing)))
            continue
        todo += [os.path.join(FINDINGS, stack, f) for f in files]
    counts = {}
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as ex:
        for path, status, detail, secs in ex.map(lambda p: run_one(p, a.timeout), todo):
            counts[status] = counts.get(status, 0) + 1
            name = os.path.relpath(path, FINDINGS)
            print("%-62s %-12s %5.1fs  %s" % (name, status, secs, detail.splitlines()[0][:100] if detail else ""))
            if status in ("FIXED", "broken"):
                for line in detail.splitlines()[1:]:
                    print("    " + line)
            sys.stdout.flush()
    print("%s in %.0fs" % (", ".join("%d %s" % (n, s) for s, n in sorted(counts.items())) or "nothing ran",
                           time.time() - t0))
    if counts.get("FIXED"):
        print("FIXED upstream (the installed version no longer shows the bug): update docs/findings.md, "
              "then move or delete the repro")
    if counts.get("FIXED") or counts.get("broken"):
        return 1
    return 0 if counts.get("bug present") else 77


if __name__ == "__main__":
    sys.exit(main())
