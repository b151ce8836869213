"""The protocol's dtype names and their numpy dtypes (docs/worker-protocol.md).

bf16 is ml_dtypes.bfloat16, e4m3 and e5m2 ml_dtypes.float8_e4m3fn and float8_e5m2; ml_dtypes is imported here only, so modules that need no bf16
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
    # an FP8 case's q, k, v (docs/case-json.md, "fp8"): the stored values, without the descale
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
}

# np.dtype objects, for constructing views without re-resolving the type each time
DTYPES = {name: np.dtype(t) for name, t in NUMPY_DTYPES.items()}

# numpy dtype -> protocol name
NAMES = {dt: name for name, dt in DTYPES.items()}

FLOAT_NAMES = ("f32", "f16", "bf16", "f64")
FP8_NAMES = ("e4m3", "e5m2")


def name_of(dtype):
    """The protocol name of a numpy dtype; KeyError for one the protocol lacks."""
    return NAMES[np.dtype(dtype)]


def dequantize(x, descale):
    """float64 values of an FP8 array (stored bits, ml_dtypes float8 or their uint8 form) times
    its descale: exact (4 significant bits times float32's 24), NaN and Inf kept."""
    return np.asarray(x).astype(np.float64) * float(descale)


def fp8_from_bits(bits, fmt):
    """A uint8 array of stored FP8 bits (a bundle's q/k/v of an FP8 case) as the ml_dtypes
    float8 array of format fmt ("e4m3" or "e5m2"), sharing its memory."""
    return np.asarray(bits, dtype=np.uint8).view(DTYPES[fmt])
