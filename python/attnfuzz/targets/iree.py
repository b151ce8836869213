"""IREE attention: MLIR compiled by iree-compile and run by the IREE runtime, the two ways a
user reaches IREE's attention without torch: its own `iree_linalg_ext.attention` op written
directly in MLIR, and an ONNX model imported by IREE's ONNX importer (torch-mlir's ONNX
conversion), both compiled for `llvm-cpu` (the host CPU) and run on the `local-task` driver.

Variants (`python -m attnfuzz.targets.iree VARIANT`, `--backend target:iree/VARIANT`):
  attention_op   iree_linalg_ext.attention in MLIR: Q [B, Hkv, G, Sq, D] (GQA as a query
                 batch dim the K / V maps do not read), K, V, the scale as an f32
                 constant, and one mask operand (i1 for boolean and structural masks,
                 the case dtype's float for an additive one, where(allowed, mask, -inf)
                 for both); the host turns the physical layout into [B, H, S, D] with
                 numpy, as a caller of a BHSD kernel does; llvm-cpu
  onnx_explicit  the unfused MatMul / Mul / Add / Where / Softmax / MatMul ONNX graph
                 (attnfuzz.targets._onnx_graphs, the graph ORT's explicit variant runs, its
                 physical layout handled in the graph) imported with IREE's ONNX importer
                 after ONNX shape inference; llvm-cpu: IREE's own fusion of the pattern is
                 under test
  cuda           attention_op compiled for IREE's cuda target (--iree-cuda-target, sm_80
                 unless $ATTNFUZZ_IREE_CUDA_TARGET says otherwise: its PTX runs on newer
                 GPUs through the driver) on the `cuda` driver. On an H200 (2026-12-02)
                 IREE 3.13 refused sm_90 in every compile ("missing GPU target in
                 #hal.executable.target": its CUDA target table, upstream iree#22147)

What IREE 3.13 supports here (measured): the ONNX importer has no conversion for the ONNX
Attention op (`failed to legalize operation 'torch.operator' ... onnx.Attention`), hence an
explicit graph; iree_linalg_ext.attention rejects a K map that divides the head index
(`h floordiv G`: "Shape Mismatch for Key"), hence the 5-D GQA form. Every structure is one
compiled module (compile key: every field), compiled in-process by iree.compiler and cached.

Conventions, measured by the self-test on llvm-cpu: subnormal results are flushed to 0 (f32
included); a fully masked row is NaN (iree#24175 asks for 0); a NaN behind a zero weight
reaches the output; the attention op applies a boolean mask as -inf (masked_keys ieee), the
ONNX graph by Where (exclude); the ONNX graph computes its scores in the case dtype.
"""

from __future__ import annotations

import os
import struct
import sys

import numpy as np

from attnfuzz import layouts, masks
from attnfuzz.layouts import PER_TENSOR
from attnfuzz.targets import _base, _common, _onnx_graphs
from attnfuzz.targets._onnx_graphs import build, feeds, feeds_spec, graph_spec


def _probe(variant):
    import iree.runtime as rt
    driver = "cuda" if variant == "cuda" else "local-task"
    if driver not in rt.query_available_drivers():
        return "the IREE runtime has no %s driver" % driver
    if variant == "cuda":
        try:
            rt.get_device("cuda")
        except Exception as e:  # noqa: BLE001 - no CUDA device
            return "IREE's cuda driver finds no device: %s" % _base.describe(e)
    return None


_V = _base.Variant
STACK = _base.Stack("iree", imports=("iree.compiler", "iree.runtime"),
                    pip=("iree-base-compiler==3.13.0", "iree-base-runtime==3.13.0", "onnx==1.23.2"),
                    version_of="iree.compiler", probe=_probe, variants=(
    _V("attention_op", "iree_linalg_ext.attention written in MLIR, compiled for llvm-cpu", compiled=True, quick=True),
    _V("onnx_explicit", "unfused MatMul/Softmax/MatMul ONNX graph -> IREE's ONNX importer -> llvm-cpu",
       compiled=True, needs=("onnx",), quick=True, smoke=False),
    _V("cuda", "iree_linalg_ext.attention written in MLIR, compiled for IREE's cuda target", compiled=True,
       gpu=True, quick=True, smoke=False),
))

_MLIR_DTYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "bool": "i1"}


# ---------------------------------------------------------------------------------------
# The model code: only iree, onnx, numpy and math from here to the end of the section
# (repro_snippet copies it into a standalone repro.py).
# ---------------------------------------------------------------------------------------

def f32_hex(x):
    """An MLIR f32 literal of x's exact float32 bits."""
    return "0x%08X" % struct.unpack("<I", struct.pack("<f", float(x)))[0]


def tensor_type(shape, dtype):
    return "tensor<%sx%s>" % ("x".join(str(int(n)) for n in shape), _MLIR_DTYPE[str(dtype)])


def attention_mlir(cfg):
    """The MLIR of one structure: @main(q, k, v[, mask]) -> out, on [B, Hkv, G, S, D]."""
    b, hq, hkv, sq, sk, d, dv = cfg["shape"]
    g = hq // hkv
    dt = cfg["dtype"]
    qt = tensor_type((b, hkv, g, sq, d), dt)
    kt = tensor_type((b, hkv, sk, d), dt)
    vt = tensor_type((b, hkv, sk, dv), dt)
    ot = tensor_type((b, hkv, g, sq, dv), dt)
    a = "affine_map<(b, h, g, m, n, k1, k2) -> %s>"
    maps = [a % "(b, h, g, m, k1)", a % "(b, h, k2, k1)", a % "(b, h, k2, n)", a % "()"]
    args, ins, types = ["%q: " + qt, "%k: " + kt, "%v: " + vt], ["%q", "%k", "%v", "%scale"], [qt, kt, vt, "f32"]
    if cfg["mask"]:
        mt = tensor_type((b, hkv, g, sq, sk), cfg["mask"])
        maps.append(a % "(b, h, g, m, k2)")
        args.append("%mask: " + mt)
        ins.append("%mask")
        types.append(mt)
    maps.append(a % "(b, h, g, m, n)")
    return """func.func @main(%s) -> %s {
  %%scale = arith.constant %s : f32
  %%empty = tensor.empty() : %s
  %%out = iree_linalg_ext.attention <indexing_maps = [%s]>
      ins(%s : %s) outs(%%empty : %s) {
    ^bb0(%%score: f32):
      iree_linalg_ext.yield %%score : f32
  } -> %s
  return %%out : %s
}
""" % (", ".join(args), ot, f32_hex(cfg["scale"]), ot, ",\n      ".join(maps), ", ".join(ins), ", ".join(types),
       ot, ot, ot)


def onnx_mlir(model):
    """An ONNX model -> MLIR source through IREE's ONNX importer (after shape inference,
    which the importer needs for every node's type)."""
    import onnx
    from iree.compiler import ir
    from iree.compiler.extras import onnx_importer
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    ctx = ir.Context()
    info = onnx_importer.ModelInfo(model)
    m = info.create_module(context=ctx).operation
    onnx_importer.NodeImporter.define_function(info.main_graph, m).import_all()
    m.verify()
    return m.get_asm(assume_verified=True)


def compile_module(source, function, target, input_type="auto"):
    """iree-compile source for target ("llvm-cpu" or "cuda") and load it: the callable."""
    import iree.compiler as ic
    import iree.runtime as rt
    extra = ["--iree-llvmcpu-target-cpu=host"] if target == "llvm-cpu" else [
        "--iree-cuda-target=" + os.environ.get("ATTNFUZZ_IREE_CUDA_TARGET", "sm_80")]
    vmfb = ic.compile_str(source, target_backends=[target], input_type=input_type, extra_args=extra)
    ctx = rt.SystemContext(config=rt.Config("local-task" if target == "llvm-cpu" else "cuda"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    return ctx.modules.module[function]


def host_value(x, device=None):
    """numpy -> what the IREE runtime takes, contiguous: a bfloat16 array (a bf16 additive
    mask) as its uint16 bits in a buffer view typed bf16 on `device` (the runtime's numpy
    binding has no bfloat16, and a plain uint16 array arrives as ui16, which a function
    taking bf16 refuses: "tensor element type mismatch")."""
    x = np.ascontiguousarray(x)
    if x.dtype.name != "bfloat16":
        return x
    import iree.runtime as rt
    # a buffer view typed bf16 (asdevicearray types it by the numpy dtype, ignoring element_type)
    return device.allocator.allocate_buffer_copy(memory_type=rt.MemoryType.DEVICE_LOCAL,
                                                 allowed_usage=rt.BufferUsage.DEFAULT, device=device,
                                                 buffer=x.view(np.uint16), element_type=rt.HalElementType.BFLOAT_16)


def op_inputs(case, q, k, v, mask, bool_mask, cfg):
    """attention_op's inputs: Q, K, V as [B, Hkv, G, S, D] and the one mask operand."""
    b, hq, hkv, sq, sk, d, dv = cfg["shape"]
    lay = dict(case.layouts)
    if case.packed:
        q, k, v = layouts.packed_views(case.qkv, lay["q"], hq, d)
        lay = {n: PER_TENSOR[lay["q"]] for n in ("q", "k", "v")}
    q = layouts.to_bhsd(q, lay["q"], hq, d).reshape(b, hkv, hq // hkv, sq, d)
    k = layouts.to_bhsd(k, lay["k"], hkv, d)
    v = layouts.to_bhsd(v, lay["v"], hkv, dv)
    out = [q, k, v]
    if cfg["mask"]:
        allowed = bool_mask
        struct = _common.structural_allowed(case)
        if struct is not None:
            allowed = struct if allowed is None else allowed & struct
        m = mask
        if allowed is not None:
            m = allowed if m is None else np.where(allowed, m, np.array(-np.inf, dtype=m.dtype))
        out.append(np.broadcast_to(m, (b, hq, sq, sk)).reshape(b, hkv, hq // hkv, sq, sk))
    return out


def config(case, mask, bool_mask, variant):
    """The static structure of one case as plain values."""
    mask_kind = None
    if mask is not None:
        mask_kind = str(mask.dtype)
    elif bool_mask is not None or masks.has_structural(case):
        mask_kind = "bool"
    return {"kind": "onnx" if variant == "onnx_explicit" else "op",
            "target": "cuda" if variant == "cuda" else "llvm-cpu",
            "shape": (case.batch, case.q_heads, case.kv_heads, case.q_len, case.kv_len, case.head_dim,
                      case.v_head_dim),
            "dtype": {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[case.dtype],
            "scale": float(case.scale), "mask": mask_kind, "out_layout": _common.OUT_LAYOUT[case.layouts["q"]]}


def compile_case(case, mask, bool_mask, cfg):
    """The compiled function of one structure, with the ONNX graph's spec (onnx) or None."""
    if cfg["kind"] == "onnx":
        spec = feeds_spec(graph_spec(case, "explicit"), mask, bool_mask)
        model = build(spec)
        return compile_module(onnx_mlir(model), model.graph.name, cfg["target"], "onnx"), spec
    return compile_module(attention_mlir(cfg), "main", cfg["target"]), None


def run_case(fn, spec, case, q, k, v, mask, bool_mask, keep, cfg):
    """One run: the output in the model's output layout (attention_op: [B, Hq, Sq, Dv])."""
    import ml_dtypes
    # to_host() maps the result's device buffer, which a later call may reuse: copy it
    if spec is not None:
        f = feeds(case, spec, q, k, v, mask, bool_mask, keep)
        out = np.array(fn(*(host_value(f[n], fn._device) for n in spec_inputs(spec))).to_host())
    else:
        b, hq, _, sq, _, _, dv = cfg["shape"]
        args = (host_value(x, fn._device) for x in op_inputs(case, q, k, v, mask, bool_mask, cfg))
        out = np.array(fn(*args).to_host()).reshape(b, hq, sq, dv)
    return out.view(ml_dtypes.bfloat16) if cfg["dtype"] == "bfloat16" else out


def spec_inputs(spec):
    """The ONNX graph's input names in order (build's order)."""
    names = ["qkv"] if spec["packed"] else ["q", "k", "v"]
    for n, key in (("mask", "amask"), ("bool_mask", "bmask"), ("struct", "struct")):
        if spec.get(key):
            names.append(n)
    if spec.get("dropout", 0) > 0:
        names.append("keep")
    return names


class Target(_base.Target):
    """One variant: a cache of compiled IREE functions keyed by structure."""
    STACK = STACK
    CACHE_SIZE = 32

    def declare(self) -> dict:
        caps = ["f32", "f16", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal", "padding", "window",
                "strided"]
        # measured on llvm-cpu: subnormal results flushed to 0 (f32 included), a boolean
        # mask applied as -inf (a masked key's Inf or NaN score makes the row NaN)
        conv = {"masked_rows": "nan", "masked_values": "ieee", "masked_keys": "ieee", "denormals": "flush"}
        if self.variant == "onnx_explicit":
            caps += ["softcap", "dropout", "mask_dtype"]
            # ONNX MatMul, Mul and Add compute in their input type: f16 scores and mask; the
            # graph masks by Where(allowed, scores, -inf), so a masked key's Inf is dropped
            conv.update(scores="dtype", dropout="counter", masked_keys="exclude")
        return {"caps": caps, "dtypes": ["f32", "f16"], "limits": {"max_bytes": 64 << 20}, "conventions": conv}

    def libs(self):
        from importlib import metadata
        return dict(super().libs(), **{"iree.runtime": metadata.version("iree-base-runtime")})

    def build(self, case, q, k, v, mask, bool_mask):
        cfg = config(case, mask, bool_mask, self.variant)
        fn, spec = compile_case(case, mask, bool_mask, cfg)
        return fn, spec, cfg

    def execute(self, art, case, q, k, v, mask, bool_mask):
        from attnfuzz.worker import Result
        fn, spec, cfg = art
        out = run_case(fn, spec, case, q, k, v, mask, bool_mask, _base.keep_mask(case), cfg)
        return Result(out, layout=cfg["out_layout"] if spec is not None else "bhsd")


def repro_snippet(variant: str) -> str:
    """Python source defining attention(case, q, k, v, mask=None, bool_mask=None, keep=None)
    with iree.compiler, iree.runtime, onnx and numpy only; returns [B, Hq, Sq, Dv]."""
    STACK.variant(variant)
    return _common.snippet(
        ["import os", "import struct", "import iree.compiler", "import iree.runtime"],
        _onnx_graphs.model_objects() + [f32_hex, tensor_type, attention_mlir, onnx_mlir, compile_module, host_value,
                                        op_inputs, config, compile_case, run_case, spec_inputs],
        consts=dict(_onnx_graphs.CONSTS, VARIANT=variant, _MLIR_DTYPE=_MLIR_DTYPE), tail='''

def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """q, k, v: numpy arrays in the case's physical layouts (case.qkv: the packed buffer)."""
    cfg = config(case, mask, bool_mask, VARIANT)
    fn, spec = compile_case(case, mask, bool_mask, cfg)
    out = run_case(fn, spec, case, q, k, v, mask, bool_mask, keep, cfg)
    return out if spec is None else layouts.to_bhsd(out, cfg["out_layout"], case.q_heads, case.v_head_dim)
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK, Target))
