"""ONNX Runtime attention: ONNX graphs (attnfuzz.targets._onnx_graphs) fed Q, K, V in the
case's physical layout, run on the CPU execution provider.

Variants (`python -m attnfuzz.targets.ort VARIANT`, `--backend target:ort/VARIANT`):
  attention       the ONNX Attention op (opset 24, 25 for sliding windows): 3-D inputs with
                  head counts when Q, K, V are all bsd, else 4-D; bool or float attn_mask;
                  softcap; causal and window at the past length through past_key/past_value
                  (KV cache) and at the valid length through nonpad_kv_seqlen
  explicit        MatMul / Mul / Add / Where / Softmax / MatMul with ORT_ENABLE_ALL: the
                  optimizer's attention fusions are what is under test
  explicit_noopt  the same graph with every graph optimization disabled
  exported_sdpa   the graph torch.onnx.export(dynamo=False) writes for
                  F.scaled_dot_product_attention (the scale split as Sqrt on Q and K)

Structural masks: each variant uses the stack's own form where it has one (Attention's
is_causal, past length, nonpad_kv_seqlen; the explicit graph's tril; the exporter's Trilu
is_causal mask, top-left) and otherwise takes a boolean mask built the way user code
builds it (numpy, [B, 1, Sq, Sk]) as one more graph input, so every diagonal is supported.

Inputs are copied contiguous (ORT takes no strides): strided cases are accepted and the
graph sees their values. Sessions are cached by the graph's static structure. The output is
bound through IOBinding to a buffer inside guard bands (attnfuzz.guard): a write past it is
reported in the result's guard_writes.
"""

from __future__ import annotations

import sys

import numpy as np

from attnfuzz import guard, layouts
from attnfuzz.targets import _base, _common, _onnx_graphs

_KIND = {"attention": "attention", "explicit": "explicit", "explicit_noopt": "explicit",
         "exported_sdpa": "exported_sdpa"}

_V = _base.Variant
STACK = _base.Stack("ort", imports=("onnx", "onnxruntime"), pip=("onnx==1.23.2", "onnxruntime==1.32.0"),
                    version_of="onnxruntime", variants=(
    _V("attention", "the ONNX Attention op (opset 24/25), CPU execution provider", compiled=True),
    _V("explicit", "unfused MatMul/Softmax/MatMul ONNX graph, ORT_ENABLE_ALL (fusions under test)", compiled=True),
    _V("explicit_noopt", "unfused MatMul/Softmax/MatMul ONNX graph, optimizations disabled", compiled=True),
    _V("exported_sdpa", "the graph torch.onnx.export writes for F.scaled_dot_product_attention", compiled=True),
))


class Target(_base.Target):
    STACK = STACK

    def __init__(self, variant: str):
        super().__init__(variant)
        import onnxruntime as ort
        self.ort = ort
        self.kind = _KIND[variant]
        self.opt = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if variant == "explicit_noopt"
                    else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)

    def declare(self) -> dict:
        caps = ["f32", "f16", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal",
                "padding", "window", "strided", "mask_dtype"]
        # ONNX computes MatMul, Mul and Add in their input type (T1): f16 scores, scale and
        # additive mask in f16 (the Attention op's spec too; onnx.reference agrees)
        conv = {"scores": "dtype"}
        if self.kind == "attention":
            caps.append("softcap")
            # the boolean masks become an additive -inf that is added to the scores: a masked
            # key's NaN or +Inf score makes its row NaN (pytorch#101967's class; the spec's)
            conv.update(masked_values="ieee", masked_keys="ieee")
        elif self.kind == "explicit":
            caps += ["softcap", "dropout"]
            conv.update(masked_rows="nan", masked_values="ieee", dropout="counter")
        else:
            # A float attn_mask path has no IsNaN guard: fully masked rows give NaN there. The
            # exporter adds a boolean mask as Where(m, 0, -inf) (masked_keys "ieee").
            conv.update(masked_rows="nan", masked_values="ieee", masked_keys="ieee")
        # ORT's CPU provider lacks the bf16 kernels
        return {"caps": caps, "dtypes": ["f32", "f16"], "conventions": conv}

    def refuse(self, req):
        case = req.case
        if self.kind == "attention" and case.scale_given and not case.scale > 0:
            from attnfuzz.worker import Unsupported
            # The op's reference splits sqrt(scale) over Q and K; ORT refuses scale <= 0.
            raise Unsupported("the ONNX Attention op takes a positive scale only")

    def structure(self, req):
        spec = _onnx_graphs.feeds_spec(_onnx_graphs.graph_spec(req.case, self.kind), req.mask, req.bool_mask)
        return tuple(sorted((k, repr(v)) for k, v in spec.items()))

    def build(self, req):
        spec = _onnx_graphs.feeds_spec(_onnx_graphs.graph_spec(req.case, self.kind), req.mask, req.bool_mask)
        so = self.ort.SessionOptions()
        so.graph_optimization_level = self.opt
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = self.ort.InferenceSession(_onnx_graphs.build(spec).SerializeToString(), so,
                                         providers=["CPUExecutionProvider"])
        return sess, spec

    def execute(self, art, req):
        from attnfuzz.worker import Result
        sess, spec = art
        case = req.case
        lay = _common.OUT_LAYOUT[case.layouts["q"]]
        shape = layouts.out_shape(lay, case.batch, case.q_heads, case.q_len, case.v_head_dim)
        g = guard.numpy_out(shape, _ORT_FLOATS[sess.get_outputs()[0].type])
        io = sess.io_binding()
        for n, x in _onnx_graphs.feeds(req, spec).items():
            x = ort_value(self.ort, x)
            if isinstance(x, np.ndarray):
                io.bind_cpu_input(n, np.ascontiguousarray(x))
            else:
                io.bind_ortvalue_input(n, x)
        io.bind_output("out", "cpu", 0, g.inner.dtype, list(shape), g.inner.ctypes.data)
        sess.run_with_iobinding(io)
        return Result(g.inner, layout=lay, guard_writes=guard.writes(g))


# the graph output's ONNX type -> the numpy dtype of the buffer it is bound to
_ORT_FLOATS = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


def ort_value(ort, x):
    """A numpy input for ORT: bfloat16 (which ORT's numpy binding does not know) as an
    OrtValue of ONNX type BFLOAT16 over the same bits."""
    if x.dtype.name == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint16), 16)
    return x


def repro_snippet(variant: str) -> str:
    """Standalone source: `attention(req)` (an attnfuzz.request.Request, the repro's copy)
    with onnx, onnxruntime and numpy only; the graph is built by the same ONNX helper calls."""
    opt = "ORT_DISABLE_ALL" if variant == "explicit_noopt" else "ORT_ENABLE_ALL"
    return _common.snippet(["import onnxruntime as ort"], _onnx_graphs.model_objects() + [ort_value],
                           consts=_onnx_graphs.CONSTS, tail=f'''

def attention(req):
    """ort/{variant}: the request's physical numpy inputs (req.keep: the dropout keep mask
    [B, Hq, Sq, Sk] when the case has dropout) -> the output as [B, Hq, Sq, Dv]."""
    case = req.case
    spec = feeds_spec(graph_spec(case, {_KIND[variant]!r}), req.mask, req.bool_mask)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.{opt}
    sess = ort.InferenceSession(build(spec).SerializeToString(), so, providers=["CPUExecutionProvider"])
    f = {{n: ort_value(ort, x) for n, x in feeds(req, spec).items()}}
    out = sess.run(["out"], f)[0]
    return layouts.to_bhsd(out, OUT_LAYOUT[case.layouts["q"]], case.q_heads, case.v_head_dim)
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK))
