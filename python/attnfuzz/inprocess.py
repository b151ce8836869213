"""Fuzz an attention function of this Python process: the function becomes a worker
(attnfuzz.worker.serve) answered on a thread here, and `attnfuzz fuzz --backend
worker:...` runs cases against the float64 reference for a budget. The pytest plugin's
fixture `attnfuzz_fuzz` is this (docs/commands.md, "pytest").

    from attnfuzz.inprocess import fuzz_function
    res = fuzz_function(my_attention, runs=2000, crashes="crashes")
    if res.finding:
        print(res.finding.kind, res.finding.bundle)      # the minimized bundle's directory

The function is called as fn(q, k, v, mask=None, causal=False, scale=None) on canonical
[B, H, S, D] arrays (numpy in the case's dtype, or torch tensors with array="torch") and
returns [B, Hq, Sq, Dv] (numpy or torch). Keyword arguments are passed only when the case
has them: causal=True for a causal case (its diagonal the one `causal` names, "bottom_right"
as FlashAttention-2 and the design's default, "top_left" as torch's is_causal), scale= a
given scale (else the function uses 1/sqrt(D)), mask= an additive float mask broadcast to
[B, Hq, Sq, Sk]. The cases stay within what such a function takes: f32 (and f16 with
dtypes=["f32", "f16"]), Hq == Hkv unless gqa=True, BHSD views, no dropout, padding or
boolean masks. The conventions default to a textbook implementation's (a masked key's or
weight-0 value's Inf or NaN propagating as IEEE arithmetic says); conventions= replaces any.

attnfuzz runs the function through a relay process (attnfuzz/_relay.py: a few lines of the
standard library that copy the worker's pipes to a Unix socket this process listens on), so
what the function closes over (a model, a GPU context, fixtures) stays here.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

import numpy as np

from . import layouts, masks

DEFAULT_CONVENTIONS = {"masked_values": "ieee", "masked_keys": "ieee"}


class Outcome:
    """What fuzz_function found: finding (a Finding, or None) and execs (the cases run)."""

    def __init__(self, finding, execs):
        self.finding, self.execs = finding, execs


class Finding:
    """A bundle the campaign stored: kind, bundle (its directory), who (the backend),
    error (the function's exception as "Type: message" for kind error, else None)."""

    def __init__(self, kind, bundle, who):
        self.kind, self.bundle, self.who = kind, bundle, who
        self.error = None
        try:
            with open(os.path.join(bundle, "case.json")) as f:
                self.error = next((b.get("error") for b in json.load(f).get("backends") or [] if b.get("error")), None)
        except (OSError, ValueError):
            pass

    def __repr__(self):
        return "%s on %s: bundle %s" % (self.kind, self.who, self.bundle)


def request_runner(fn, array="numpy"):
    """run(req) for attnfuzz.worker.serve calling fn as the module's doc says."""
    if array not in ("numpy", "torch"):
        raise ValueError("array: numpy or torch, not %r" % (array,))

    def run(req):
        case = req.case
        q, k, v = (np.ascontiguousarray(x) for x in layouts.case_inputs_bhsd(case, req.q, req.k, req.v))
        kw = {}
        if case.causal:
            kw["causal"] = True
        if case.scale_given:
            kw["scale"] = float(case.scale)
        if req.mask is not None:
            kw["mask"] = np.ascontiguousarray(masks.additive_bhsd(case, req.mask)).astype(q.dtype)
        if array == "torch":
            import torch
            # copies: the request's views are read-only, torch tensors are not
            q, k, v = (torch.from_numpy(np.array(x)) for x in (q, k, v))
            if "mask" in kw:
                kw["mask"] = torch.from_numpy(np.array(kw["mask"]))
        out = fn(q, k, v, **kw)
        if hasattr(out, "detach"):       # a torch tensor
            out = out.detach().float().cpu().numpy() if str(out.dtype) == "torch.bfloat16" else out.detach().cpu().numpy()
        return np.asarray(out)
    return run


def hello_caps(dtypes=("f32",), gqa=False):
    caps = list(dtypes) + ["causal", "scale", "amask", "cross", "dv"]
    return caps + ["gqa"] if gqa else caps


def _serve_on(conn, run, name, caps, conventions, dtypes):
    from .worker import serve
    with conn, conn.makefile("rb") as fin, conn.makefile("wb") as fout:
        try:
            serve(run, name=name, version="in-process", caps=caps, layouts=["bhsd"], dtypes=list(dtypes),
                  conventions=conventions, stdin=fin, stdout=fout)
            fout.flush()
        except (OSError, ValueError):
            pass  # attnfuzz killed the relay (a timeout): the next connection starts afresh


class _Server:
    """A Unix socket answering each connection (one relay process) with serve() on a thread."""

    def __init__(self, path, run, name, caps, conventions, dtypes):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4)
        self.args = (run, name, caps, conventions, dtypes)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=_serve_on, args=(conn,) + self.args, daemon=True).start()

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def fuzz_function(fn, runs=None, time=None, seed=1, crashes=None, exe=None, name=None, array="numpy",
                  causal="bottom_right", dtypes=("f32",), gqa=False, conventions=None, timeout=10,
                  extra_args=()):
    """Runs `attnfuzz fuzz` against fn until the first finding, runs cases or time seconds
    (default runs=1000). Returns an Outcome: the Finding (its bundle minimized) or None, and
    the cases run. crashes: where bundles go (default in a new temporary directory, kept
    then). exe: the
    attnfuzz binary (default: as the pytest plugin finds it). Raises RuntimeError when
    attnfuzz fails to run (exit 2)."""
    exe = exe or attnfuzz_exe()
    if not exe:
        raise RuntimeError("no attnfuzz binary ($ATTNFUZZ_EXE, the wheel's, build/attnfuzz, PATH)")
    if causal not in ("bottom_right", "top_left"):
        raise ValueError("causal: bottom_right or top_left, not %r" % (causal,))
    conv = dict(DEFAULT_CONVENTIONS, causal=[causal])
    conv.update(conventions or {})
    name = name or getattr(fn, "__name__", "fn")
    work = tempfile.mkdtemp(prefix="attnfuzz-inprocess-")
    crashes = crashes or os.path.join(work, "crashes")
    sock = os.path.join(work, "sock")
    server = _Server(sock, request_runner(fn, array), name, hello_caps(dtypes, gqa), conv, dtypes)
    relay = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_relay.py")
    stats = os.path.join(work, "stats.json")
    cmd = [exe, "fuzz", "--backend", "worker:%s %s %s" % (sys.executable, relay, sock), "--crashes", crashes,
           "--max-findings", "1", "--seed", str(seed), "--timeout", str(timeout), "--no-known", "--quiet",
           "--serving", "0", "--fp8", "0", "--backward", "0", "--stats", stats]
    if time is not None:
        cmd += ["--time", str(time)]
    if runs is not None or time is None:
        cmd += ["--runs", str(runs or 1000)]
    try:
        r = subprocess.run(cmd + list(extra_args), capture_output=True, text=True, env=exe_env(exe))
        execs = 0
        if os.path.exists(stats):
            with open(stats) as f:
                execs = int(json.load(f).get("execs", 0))
    finally:
        server.close()
        if not crashes.startswith(work + os.sep):
            shutil.rmtree(work, ignore_errors=True)
    found = sorted(d for d in os.listdir(crashes) if not d.startswith(".")) if os.path.isdir(crashes) else []
    if r.returncode == 2 or (r.returncode == 1 and not found):
        raise RuntimeError("attnfuzz fuzz exited %d: %s" % (r.returncode, (r.stderr or r.stdout).strip()[-2000:]))
    if not found:
        return Outcome(None, execs)
    return Outcome(Finding(found[0].split("-", 1)[0], os.path.join(crashes, found[0]), "worker:" + name), execs)


def attnfuzz_exe(given=None):
    """The attnfuzz binary, or None: given, else $ATTNFUZZ_EXE, else the wheel's
    (attnfuzz/bin/attnfuzz), else build/attnfuzz of the checkout this package is in, else
    `attnfuzz` on PATH."""
    if given:
        return given
    if os.environ.get("ATTNFUZZ_EXE"):
        return os.environ["ATTNFUZZ_EXE"]
    from . import __main__ as wheel
    if os.access(wheel.binary(), os.X_OK):
        return wheel.binary()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = os.path.join(root, "build", "attnfuzz")
    return p if os.access(p, os.X_OK) else shutil.which("attnfuzz")


def exe_env(exe):
    """The environment to run exe in: the wheel's binary gets this interpreter as
    $ATTNFUZZ_PYTHON, as the wheel's `attnfuzz` command gives it (attnfuzz/__main__.py), so
    its targets run here; a checkout's build/attnfuzz finds its own .venv."""
    from . import __main__ as wheel
    if os.path.realpath(exe) == os.path.realpath(wheel.binary()):
        return dict(os.environ, ATTNFUZZ_PYTHON=sys.executable)
    return None
