"""numpy_ref: docs/design.md section 2 in numpy float64 (attnfuzz.reference) as a worker,
backward included.

    python -m attnfuzz.targets.numpy_ref [float64]

Every layout and feature, the serving forms included (THD and paged inputs gathered back to
the padded view as a kernel reads them, a packed case's output returned in THD form),
dropout by the counter RNG; the output is float64, so against
the C oracle it must be clean: a finding names a disagreement between the two oracles (or
the protocol). A reference, not a stack under test: campaign scripts leave it out."""

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
                         "causal", "padding", "window", "dropout", "strided", "mask_dtype"],
                "conventions": {"dropout": "counter"}}

    def execute(self, art, case, q, k, v, mask, bool_mask):
        out = attention(case, q, k, v, mask=mask, bool_mask=bool_mask)
        if case.thd:  # the packed case's rows in THD form, as a varlen kernel returns them
            return Result(np.concatenate([out[b, :, :case.seg_q(b)].transpose(1, 0, 2) for b in range(case.batch)]),
                          layout="thd")
        if not case.grads:
            return out
        g = gradients(case, q, k, v, case.dout, mask=mask, bool_mask=bool_mask)
        return Result(out, grads={n: g[n] for n in case.grads})


def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    if case.forms:  # THD and page caches back to the padded view
        qb, kb, vb = serving.gather(case, dict(case.serving_tensors, q=q, k=k, v=v))
    else:
        qb, kb, vb = layouts.case_inputs_bhsd(case, q, k, v)
    return reference.attention(case, qb, kb, vb, mask=mask, bool_mask=bool_mask, keep=keep)


def gradients(case, q, k, v, dout, mask=None, bool_mask=None, keep=None):
    """reference.backward on the physical inputs and dO (in the output layout)."""
    qb, kb, vb = layouts.case_inputs_bhsd(case, q, k, v)
    do = layouts.to_bhsd(dout, case.out_layout, case.q_heads, case.v_head_dim)
    return reference.backward(case, qb, kb, vb, do, mask=mask, bool_mask=bool_mask, keep=keep)


def repro_snippet(variant="float64"):
    """The reference itself: a repro of a numpy_ref finding is a disagreement between the
    two oracles, so it runs with attnfuzz."""
    return ("import numpy as np\nfrom attnfuzz import layouts, reference, serving\n\n" + inspect.getsource(attention)
            + "\n\n" + inspect.getsource(gradients))


if __name__ == "__main__":
    sys.exit(_base.main(STACK, Target))
