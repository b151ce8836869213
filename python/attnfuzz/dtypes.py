"""The protocol's dtype names and their numpy dtypes (docs/worker-protocol.md).

bf16 is ml_dtypes.bfloat16; ml_dtypes is imported here only, so modules that need no bf16
(the bundle loader) never import it."""

import ml_dtypes
import numpy as np

NUMPY_DTYPES = {
    "f32": np.float32,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "f64": np.float64,
    "bool": np.bool_,
    "i32": np.int32,  # the serving forms' tables (cu_seqlens, block tables)
}

# np.dtype objects, for constructing views without re-resolving the type each time
DTYPES = {name: np.dtype(t) for name, t in NUMPY_DTYPES.items()}

# numpy dtype -> protocol name
NAMES = {dt: name for name, dt in DTYPES.items()}

FLOAT_NAMES = ("f32", "f16", "bf16", "f64")


def name_of(dtype):
    """The protocol name of a numpy dtype; KeyError for one the protocol lacks."""
    return NAMES[np.dtype(dtype)]
