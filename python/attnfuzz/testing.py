"""Building run frames by hand and talking to a worker process: what attnfuzz's worker
backend does, in Python, for tests and benchmarks of workers.

    arrays = physical_inputs(case, q, k, v)          # canonical -> the case's layouts
    frame = run_frame(case, arrays, rid=1)
    with WorkerProcess([sys.executable, "my_worker.py"]) as w:
        hello = w.hello
        header, payload = w.call(frame)

Strides follow the C library's rule (attnfuzz.layouts.physical_inputs)."""

import subprocess

import numpy as np

from . import dtypes, layouts, protocol, serving
from .case import Case

# The physical placement lives in attnfuzz.layouts (repro scripts copy it); these names
# stay here for the tests and tools that build frames.
physical_shape = layouts.physical_shape
strided_empty = layouts.strided_empty
lehmer_order = layouts.lehmer_order


def physical_inputs(case, q, k, v, mask=None, bool_mask=None, dout=None):
    """{name: array} as attnfuzz sends them (layouts.physical_inputs): q, k, v (and qkv for
    packed layouts) in the case's layouts and strides from canonical q [B, Hq, Sq, D], k,
    v; mask / bool_mask in the form of the case's mask specs; do from canonical dout for a
    backward case. case: a Case or a case dict."""
    if not isinstance(case, Case):
        case = Case(case)
    out = layouts.physical_inputs(case, q, k, v, mask, bool_mask, dtype_of=dtypes.DTYPES.__getitem__,
                                  dout=dout)
    if case.forms:  # a serving case: q, k, v in THD or page-cache form, and its tables
        out.update(serving.physical(case, q, k, v, dtype_of=dtypes.DTYPES.__getitem__))
    return out


def derived(case):
    """The run request's "derived" object."""
    if not isinstance(case, Case):
        case = Case(case)
    return {"scale": case.scale, "diag_offset": case.diag_offset, "valid_keys": case.valid_keys}


def run_frame(case, arrays, rid=1):
    """The bytes of a run frame for case (a dict) and the physical arrays (physical_inputs),
    packed arrays travelling once."""
    raw = case.raw if isinstance(case, Case) else case
    order = [n for n in ("q", "k", "v", "qkv", "mask", "bool_mask", "do") + serving.TABLES if n in arrays]
    entries, parts = protocol.entries_for([(n, arrays[n]) for n in order])
    header = {"type": "run", "id": rid, "case": raw, "derived": derived(case), "tensors": entries}
    return protocol.encode_frame(header, parts)


BYE = protocol.encode_frame({"type": "bye"})


class WorkerProcess:
    """A worker started with pipes, as attnfuzz starts one. .hello is its hello header."""

    def __init__(self, argv, env=None, stderr=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        self.reader = protocol.FrameReader(self.proc.stdout)
        first = self.reader.read()
        if first is None:
            raise protocol.ProtocolError("worker %s exited before hello (status %s)" % (argv, self.proc.wait()))
        self.hello = first[0]

    def send(self, frame_bytes):
        self.proc.stdin.write(frame_bytes)
        self.proc.stdin.flush()

    def call(self, frame_bytes):
        """Sends one frame, returns the reply (header, payload)."""
        self.send(frame_bytes)
        r = self.reader.read()
        if r is None:
            raise protocol.ProtocolError("worker closed its stdout")
        return r

    def close(self, timeout=60):
        """Sends bye and returns the exit status (a stack's interpreter teardown, torch's or
        TVM's, took more than 5 s on a loaded 2-core machine: the limit only catches a hang)."""
        try:
            self.send(BYE)
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.close()
