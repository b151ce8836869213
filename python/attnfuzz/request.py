"""Request: everything one run of a case gets (docs/worker-protocol.md, "`run`").

    req = Request(case, q, k, v, mask=None, bool_mask=None, dout=None, qkv=None, tables=None, keep=None,
                  want_lse=False)
    req.case, req.q, req.k, req.v, req.mask, req.bool_mask   # the case and its inputs as sent
    req.dout        # a backward case's upstream gradient dO (the output layout), else None
    req.qkv         # a packed layout's whole buffer (q, k, v are views of it), else None
    req.tables      # a serving case's tables {name: array} (cu_seqlens_q, block_table, ...)
    req.sinks, req.alibi_slopes   # two of them, None where the case has not that form
    req.keep        # the dropout keep mask a target applies, bool [B, Hq, Sq, Sk], or None
    req.want_lse    # the run asks for the softmax statistics (a worker with cap "lse"): a
                    # target that has them returns Result(out, lse=[B, Hq, Sq] array)

The worker kit builds one from a run frame (attnfuzz.worker), the tests and repro scripts
from arrays they made (from_arrays); a target reads its inputs from it and nothing rides on
the case object. A request is a value: code that moves its tensors elsewhere (a CUDA batch
uploaded in one copy) makes another with replace(), the case shared.

keep is computed when first read when given as a function of the case (the worker kit gives
the counter RNG's rule, attnfuzz.rng.case_keep: most targets never read it).

The old positional form run(case, q, k, v, mask=None, bool_mask=None) reads qkv, dout and
serving_tensors on its case: old_form(req) gives those arguments, the case a CaseView that
answers them from the request. This module imports nothing of attnfuzz (repro scripts copy
it)."""

import inspect

# The serving tables a run request may carry (attnfuzz.serving.TABLES).
TABLES = ("cu_seqlens_q", "cu_seqlens_k", "seqlens_k", "block_table", "sinks", "alibi_slopes")


class Request:
    """One run's inputs (the module's doc)."""

    __slots__ = ("case", "q", "k", "v", "mask", "bool_mask", "dout", "qkv", "tables", "_keep", "want_lse")

    def __init__(self, case, q, k, v, mask=None, bool_mask=None, dout=None, qkv=None, tables=None, keep=None,
                 want_lse=False):
        self.case, self.q, self.k, self.v = case, q, k, v
        self.mask, self.bool_mask = mask, bool_mask
        self.dout, self.qkv = dout, qkv
        self.tables = dict(tables or {})
        self._keep = keep
        self.want_lse = bool(want_lse)

    @classmethod
    def from_arrays(cls, case, arrays, keep=None, want_lse=False):
        """The request of case whose tensors are arrays {name: array} by protocol name: q, k,
        v, mask, bool_mask, do, qkv and the serving tables (what attnfuzz.layouts.
        physical_inputs and attnfuzz.serving.physical make, or a frame's views)."""
        return cls(case, arrays.get("q"), arrays.get("k"), arrays.get("v"), arrays.get("mask"),
                   arrays.get("bool_mask"), dout=arrays.get("do"), qkv=arrays.get("qkv"),
                   tables={n: arrays[n] for n in TABLES if n in arrays}, keep=keep, want_lse=want_lse)

    @property
    def keep(self):
        if callable(self._keep):
            self._keep = self._keep(self.case)
        return self._keep

    def _table(self, name, form):
        if form not in self.case.forms:
            return None
        t = self.tables.get(name)
        if t is None:
            raise ValueError("request: a %s case without its %s tensor" % (form, name))
        return t

    @property
    def sinks(self):
        """float32 [Hq]: the sink logits sent, or None without the form sinks."""
        return self._table("sinks", "sinks")

    @property
    def alibi_slopes(self):
        """float32 [Hq]: the ALiBi slopes sent, or None without the form alibi."""
        return self._table("alibi_slopes", "alibi")

    def replace(self, **changes):
        """Another request: this one's fields with changes ({field: value}; tables a whole
        dict; keep as it stands now, computed or not)."""
        fields = {n: getattr(self, n) for n in ("case", "q", "k", "v", "mask", "bool_mask", "dout", "qkv", "tables")}
        fields["keep"] = self._keep
        fields["want_lse"] = self.want_lse
        fields.update(changes)
        return Request(**fields)

    def tensors(self):
        """{field: array} of every tensor it holds (q, k, v, mask, bool_mask, dout, qkv, and
        the tables by name), None ones left out."""
        out = {n: getattr(self, n) for n in ("q", "k", "v", "mask", "bool_mask", "dout", "qkv")}
        out.update(self.tables)
        return {n: a for n, a in out.items() if a is not None}


class CaseView:
    """The case as the old positional form sees it: the request's case, whose attributes it
    answers, and the request's qkv, dout and serving_tensors (its tables), sinks and
    alibi_slopes, which the case itself no longer holds. Setting qkv or dout sets the
    request's."""

    __slots__ = ("_req",)

    def __init__(self, req):
        object.__setattr__(self, "_req", req)

    def __getattr__(self, name):
        req = object.__getattribute__(self, "_req")
        if name in ("qkv", "dout", "sinks", "alibi_slopes"):
            return getattr(req, name)
        if name == "serving_tensors":
            return req.tables
        return getattr(req.case, name)

    def __setattr__(self, name, value):
        if name not in ("qkv", "dout"):
            raise AttributeError("CaseView: %s is the case's (read only here)" % name)
        setattr(object.__getattribute__(self, "_req"), name, value)


def old_form(req):
    """(case, q, k, v, mask, bool_mask): the old positional form's arguments, case a CaseView."""
    return CaseView(req), req.q, req.k, req.v, req.mask, req.bool_mask


def takes_request(fn):
    """Is fn written for run(req)? The rule, by signature: exactly one positional parameter
    without a default (a bound method's self aside): run(req), run(req, verbose=False). The
    old form run(case, q, k, v, mask=None, bool_mask=None) has four; a callable taking
    *args, or whose signature cannot be read, is taken as the old form (as it was called
    before requests)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    required = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return len(required) == 1


def caller(fn):
    """fn as a function of one request: fn itself when it takes a request (takes_request),
    else an adapter calling fn(case, q, k, v, mask=..., bool_mask=...) with old_form(req)."""
    if takes_request(fn):
        return fn

    def call_old_form(req):
        case, q, k, v, mask, bool_mask = old_form(req)
        return fn(case, q, k, v, mask=mask, bool_mask=bool_mask)
    return call_old_form
