"""numpy_ref: docs/design.md section 2 in numpy float64 (attnfuzz.reference) as a worker,
backward included.

    python -m attnfuzz.targets.numpy_ref [float64]

Every layout and feature, the serving forms included (THD and paged inputs gathered back to
the padded view as a kernel reads them, a packed case's output returned in THD form),
dropout by the counter RNG; the output is float64, so against
the C oracle it must be clean: a finding names a disagreement between the two oracles (or
the protocol). It returns the softmax statistics too (cap lse: reference.lse, natural log). A reference, not a stack under test: campaign scripts leave it out."""

import inspect
import sys

import numpy as np

from attnfuzz import layouts, reference, serving
from attnfuzz.targets import _base
from attnfuzz.worker import Result

STACK = _base.Stack("numpy_ref", imports=("numpy",), reference=True, default="float64", trains=True, variants=(
    _base.Variant("float64", "numpy float64 reference of docs/design.md section 2 (every layout and feature)",
                  serving=("packed", "paged", "sinks", "alibi")),))


class Target(_base.Target):
    STACK = STACK

    def declare(self):
        return {"caps": ["f32", "f16", "bf16", "tf32", "gqa", "cross", "dv", "scale", "softcap", "amask", "bmask",
                         "causal", "padding", "window", "dropout", "strided", "mask_dtype", "lse"],
                "conventions": {"dropout": "counter"}}

    def execute(self, art, req):
        case = req.case
        out = attention(req)
        if case.thd:  # the packed case's rows in THD form, as a varlen kernel returns them
            return Result(np.concatenate([out[b, :, :case.seg_q(b)].transpose(1, 0, 2) for b in range(case.batch)]),
                          layout="thd")
        if not case.grads:
            return Result(out, lse=statistics(req)) if req.want_lse else out
        g = gradients(req)
        return Result(out, grads={n: g[n] for n in case.grads})


def attention(req):
    """reference.attention on a request's physical inputs (its keep mask: the counter RNG's;
    its sinks and slopes: the ones sent)."""
    case = req.case
    if case.forms:  # THD and page caches back to the padded view
        qb, kb, vb = serving.gather(case, dict(req.tables, q=req.q, k=req.k, v=req.v))
    else:
        qb, kb, vb = layouts.case_inputs_bhsd(case, req.q, req.k, req.v)
    return reference.attention(case, qb, kb, vb, mask=req.mask, bool_mask=req.bool_mask, keep=req.keep,
                               sinks=req.sinks, slopes=req.alibi_slopes)


def statistics(req):
    """reference.lse on a request's physical inputs: float64 [B, Hq, Sq], natural log."""
    case = req.case
    if case.forms:
        qb, kb, _ = serving.gather(case, dict(req.tables, q=req.q, k=req.k, v=req.v))
    else:
        qb, kb, _ = layouts.case_inputs_bhsd(case, req.q, req.k, req.v)
    return reference.lse(case, qb, kb, mask=req.mask, bool_mask=req.bool_mask, sinks=req.sinks,
                         slopes=req.alibi_slopes)


def gradients(req):
    """reference.backward on a request's physical inputs and dO (in the output layout)."""
    case = req.case
    qb, kb, vb = layouts.case_inputs_bhsd(case, req.q, req.k, req.v)
    do = layouts.to_bhsd(req.dout, case.out_layout, case.q_heads, case.v_head_dim)
    return reference.backward(case, qb, kb, vb, do, mask=req.mask, bool_mask=req.bool_mask, keep=req.keep)


def repro_snippet(variant="float64"):
    """The reference itself: a repro of a numpy_ref finding is a disagreement between the
    two oracles, so it runs with attnfuzz."""
    return ("import numpy as np\nfrom attnfuzz import layouts, reference, serving\n\n" + inspect.getsource(attention)
            + "\n\n" + inspect.getsource(gradients))


if __name__ == "__main__":
    sys.exit(_base.main(STACK))
