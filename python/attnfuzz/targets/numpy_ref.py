"""numpy_ref: DESIGN.md section 2 in numpy float64 (attnfuzz.reference) as a worker.

    python -m attnfuzz.targets.numpy_ref [float64]

Every layout and feature, dropout by the counter RNG; the output is float64, so against
the C oracle it must be clean: a finding names a disagreement between the two oracles (or
the protocol)."""

import sys

import numpy as np

from attnfuzz import layouts, reference

VARIANTS = {"float64": "numpy float64 reference of DESIGN.md section 2 (every layout and feature)"}
DEFAULT_VARIANT = "float64"

CAPS = ["f32", "f16", "bf16", "tf32", "gqa", "cross", "dv", "scale", "softcap", "amask", "bmask", "causal",
        "padding", "window", "dropout", "strided", "mask_dtype"]
CONVENTIONS = {"causal": ["top_left", "bottom_right", "bottom_right_valid", "explicit"], "masked_rows": "zero",
               "dropout": "counter", "masked_values": "exclude"}


def available(variant=DEFAULT_VARIANT):
    if variant not in VARIANTS:
        return False, "unknown variant %r (known: %s)" % (variant, ", ".join(VARIANTS))
    return True, ""


def run(case, q, k, v, mask=None, bool_mask=None):
    qb, kb, vb = layouts.case_inputs_bhsd(case, q, k, v)
    return reference.attention(case, qb, kb, vb, mask=mask, bool_mask=bool_mask)


def repro_snippet(variant=DEFAULT_VARIANT):
    return '''import numpy as np
from attnfuzz import layouts, reference

def attention(case, q, k, v, mask=None, bool_mask=None):
    """DESIGN.md section 2 in numpy float64 (attnfuzz.reference)."""
    qb, kb, vb = layouts.case_inputs_bhsd(case, q, k, v)
    return reference.attention(case, qb, kb, vb, mask=mask, bool_mask=bool_mask)
'''


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    variant = argv[0] if argv else DEFAULT_VARIANT
    if variant not in VARIANTS:
        print("attnfuzz.targets.numpy_ref: unknown variant %r (known: %s)" % (variant, ", ".join(VARIANTS)),
              file=sys.stderr)
        return 2
    from attnfuzz.worker import serve

    return serve(run, name="numpy_ref", version=np.__version__, variant=variant, caps=CAPS,
                 layouts=list(layouts.ALL), dtypes=["f32", "f16", "bf16"], conventions=CONVENTIONS,
                 compile_key=[])


if __name__ == "__main__":
    sys.exit(main())
