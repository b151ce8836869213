#!/usr/bin/env python3
"""Throughput of a worker end to end through the protocol, driven with pre-built frames.

    PYTHONPATH=python .venv/bin/python scripts/bench_worker.py [--runs N] [--shape B,H,S,D]
        [-- WORKER COMMAND...]      (default: this Python -m attnfuzz.targets.numpy_ref)

Sends N run frames one at a time (as attnfuzz does: send, wait for the result) and prints
executions per second of wall time and per second of the worker's CPU time (user + system,
read from /proc before bye), so the number does not depend on how busy the driver is."""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import numpy as np  # noqa: E402

from attnfuzz import testing  # noqa: E402


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5000)
    ap.add_argument("--shape", default="1,1,1,1", help="B,H,S,D")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--layout", default="bhsd")
    ap.add_argument("cmd", nargs="*")
    a = ap.parse_args()
    B, H, S, D = (int(x) for x in a.shape.split(","))
    cmd = a.cmd or [sys.executable, "-m", "attnfuzz.targets.numpy_ref"]
    case = {"batch": B, "q_heads": H, "kv_heads": H, "q_len": S, "kv_len": S, "head_dim": D, "v_head_dim": D,
            "dtype": a.dtype, "q": {"layout": a.layout}, "k": {"layout": a.layout}, "v": {"layout": a.layout}}
    rng = np.random.default_rng(1)
    frames = []
    for i in range(16):
        q, k, v = (rng.standard_normal((B, H, S, D)) for _ in range(3))
        frames.append(testing.run_frame(case, testing.physical_inputs(case, q, k, v), rid=i))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (sys.path[0], env.get("PYTHONPATH")) if p)
    with testing.WorkerProcess(cmd, env=env) as w:
        for i in range(50):  # warm-up
            h, _ = w.call(frames[i % 16])
            if h.get("status") != "ok":
                raise SystemExit("worker answered %s" % json.dumps(h))
        c0, t0 = cpu_seconds(w.proc.pid), time.perf_counter()
        for i in range(a.runs):
            w.call(frames[i % 16])
        t1, c1 = time.perf_counter(), cpu_seconds(w.proc.pid)
        w.close()
    wall, cpu = t1 - t0, max(c1 - c0, 1e-9)
    print(json.dumps({"runs": a.runs, "shape": [B, H, S, D], "dtype": a.dtype, "layout": a.layout,
                      "execs_per_s_wall": round(a.runs / wall, 1), "execs_per_s_worker_cpu": round(a.runs / cpu, 1),
                      "worker_us_per_exec": round(1e6 * cpu / a.runs, 1)}))


if __name__ == "__main__":
    main()
