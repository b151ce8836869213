#!/usr/bin/env python3
"""merge_race_test.py ATTNFUZZ WORK - `attnfuzz merge` racing itself and a running shard
(include/attnfuzz/merge.h says why nothing can be lost or half-written). Standard
library only.

Round 1, sizes racing: three finished shards hold the same bundle names ("race-K"), each
with a different real bundle of mutant:causal_top_left behind the name (so the sizes
differ), and four merges start at once into one fresh OUT, each from a different source
(shard 1, shard 2, shard 3, the whole root): every name must end as the smallest case
any of them saw, by flops. Five rounds, each into a new OUT.

Round 2, shards writing: shard 0 runs a campaign against three mutants (bundles appear
while everything else runs), three `merge --watch 0.2` share one OUT, and a reader replays
every bundle of OUT over and over. Every replay must exit 1 (the bundle diverges: it was
read whole) and never 2 (unreadable, half there). At the end every bundle name of every
shard is in OUT (none lost), each OUT bundle replays with exit 1, each name holds the
smallest case of the shards, no temporary directory or link is left, and the merged
executions are the sum of the shards'."""
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time

AF, WORK = sys.argv[1], sys.argv[2]
NAMES = 8


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(*args, **kw):
    return subprocess.run([AF] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def flops(bundle):
    """4 B Hq Sq Sk (D + Dv) / 2, as af_case_flops, from case.json."""
    with open(os.path.join(bundle, "case.json")) as f:
        c = json.load(f)["case"]
    return 2.0 * c["batch"] * c["q_heads"] * c["q_len"] * c["kv_len"] * (c["head_dim"] + c["v_head_dim"])


def names(crashes):
    return sorted(n for n in os.listdir(crashes) if not n.startswith(".")) if os.path.isdir(crashes) else []


def replay_rc(bundle):
    return run("replay", bundle).returncode


def no_leftovers(out):
    crashes = os.path.join(out, "crashes")
    left = [n for n in os.listdir(crashes) if n.startswith(".tmp")]
    left += [n for n in os.listdir(os.path.join(crashes, ".v")) if n.startswith(".tmp")]
    if left:
        fail("%s: temporary entries left: %s" % (out, left))
    for n in names(crashes):
        if not os.path.islink(os.path.join(crashes, n)):
            fail("%s/%s is not a link to a version" % (crashes, n))


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
root = os.path.join(WORK, "root")

# a pool of real bundles of one bug, stored as found (each its own size)
r = run("fuzz", "--backend", "mutant:causal_top_left", "--no-minimize", "--runs", "800", "--seed", "5",
        "--crashes", os.path.join(WORK, "pool"), "--quiet", "--no-bind")
if r.returncode != 1:
    fail("the pool campaign exited %d: %s" % (r.returncode, r.stderr[-400:]))
pool = sorted(glob.glob(os.path.join(WORK, "pool", "*")), key=flops)
sizes = sorted(set(flops(b) for b in pool))
if len(pool) < 3 * NAMES or len(sizes) < 3:
    fail("the pool has %d bundles of %d sizes: too few to race" % (len(pool), len(sizes)))

# shards 1-3, finished: race-K is a different pool bundle in each (sizes spread out)
want = {}
for s in (1, 2, 3):
    crashes = os.path.join(root, "shard-%d" % s, "crashes")
    os.makedirs(crashes)
    for k in range(NAMES):
        src = pool[(k * 7 + s * 11) % len(pool)]
        shutil.copytree(src, os.path.join(crashes, "race-%d" % k))
        want["race-%d" % k] = min(want.get("race-%d" % k, float("inf")), flops(src))
    with open(os.path.join(root, "shard-%d" % s, "stats.json"), "w") as f:
        json.dump({"execs": 1000 * s, "elapsed": 1.0, "findings_total": s, "shard": s, "shards": 4,
                   "finished": True, "signatures": []}, f)
if len(set(want.values())) < 2:
    fail("the race names do not differ in size")


def check_smallest(out, names_wanted):
    for n, f in names_wanted.items():
        b = os.path.join(out, "crashes", n)
        if not os.path.isdir(b):
            fail("%s: %s is missing" % (out, n))
        if flops(b) != f:
            fail("%s: %s holds a case of %g flops, the smallest is %g" % (out, n, flops(b), f))


# --- round 1: four merges at once, different sources, one OUT -----------------------
for rnd in range(5):
    out = os.path.join(WORK, "race-%d" % rnd)
    sources = [[os.path.join(root, "shard-1")], [os.path.join(root, "shard-2")],
               [os.path.join(root, "shard-3")], [root]]
    procs = [subprocess.Popen([AF, "merge", "--quiet", out] + s, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for s in sources]
    for p in procs:
        _, err = p.communicate()
        if p.returncode not in (0, 1):
            fail("round 1.%d: a merge exited %d: %s" % (rnd, p.returncode, err[-400:]))
    check_smallest(out, want)
    no_leftovers(out)
print("ok   round 1: 5 x 4 merges at once from different shards keep the smallest case of every name")

# --- round 2: a shard writing, three periodic merges, a reader -------------------------
out = os.path.join(WORK, "merged")
shard0 = subprocess.Popen([AF, "fuzz", "--shard", "0/4", "--root", root, "--time", "12", "--no-minimize", "--no-bind",
                           "--quiet", "--backend", "mutant:causal_top_left", "--backend", "mutant:bshd_as_bhsd",
                           "--backend", "mutant:scale_sqrt_q_only"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
time.sleep(0.5)
watchers = [subprocess.Popen([AF, "merge", "--quiet", "--watch", "0.2", "--grace", "3", out, root],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
bad, reads = [], [0]
stop = threading.Event()


def reader():
    while not stop.is_set():
        for n in names(os.path.join(out, "crashes")):
            rc = replay_rc(os.path.join(out, "crashes", n))
            reads[0] += 1
            if rc != 1:
                bad.append((n, rc))


t = threading.Thread(target=reader)
t.start()
_, err0 = shard0.communicate()
if shard0.returncode not in (0, 1):
    fail("shard 0 exited %d: %s" % (shard0.returncode, err0[-400:]))
for w in watchers:
    try:
        _, err = w.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        w.kill()
        fail("merge --watch did not stop once every shard had finished")
    if w.returncode not in (0, 1):
        fail("a merge --watch exited %d: %s" % (w.returncode, err[-400:]))
stop.set()
t.join()
if bad:
    fail("%d of %d replays while merging did not exit 1 (read partly?): %s" % (len(bad), reads[0], bad[:5]))
print("ok   round 2: %d replays of bundles of OUT while 3 merges and a shard ran, all exit 1" % reads[0])

# nothing lost: every name of every shard is in OUT, as the smallest case
every = {}
for s in range(4):
    crashes = os.path.join(root, "shard-%d" % s, "crashes")
    for n in names(crashes):
        f = flops(os.path.join(crashes, n))
        every[n] = min(every.get(n, float("inf")), f)
shard0_names = names(os.path.join(root, "shard-0", "crashes"))
if len(shard0_names) < 3:
    fail("shard 0 stored %d bundles: too few to race with" % len(shard0_names))
if names(os.path.join(out, "crashes")) != sorted(every):
    missing = sorted(set(every) - set(names(os.path.join(out, "crashes"))))
    fail("OUT lacks %s" % missing[:5])
check_smallest(out, every)
no_leftovers(out)
for n in names(os.path.join(out, "crashes")):
    rc = replay_rc(os.path.join(out, "crashes", n))
    if rc != 1:
        fail("%s does not replay with exit 1 (%d)" % (n, rc))
with open(os.path.join(out, "stats.json")) as f:
    st = json.load(f)
with open(os.path.join(root, "shard-0", "stats.json")) as f:
    s0 = json.load(f)
if st["execs"] != s0["execs"] + 1000 + 2000 + 3000 or not st["finished"]:
    fail("merged execs %s (finished %s), want %d" % (st["execs"], st["finished"], s0["execs"] + 6000))
print("ok   round 2: %d bundles (%d written while merging), none lost, each the smallest, each replays; "
      "execs summed" % (len(every), len(shard0_names)))
