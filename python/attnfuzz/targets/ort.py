"""ONNX Runtime attention: ONNX graphs (attnfuzz.targets.onnx_graphs) fed Q, K, V in the
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
graph sees their values. Sessions are cached by the graph's static structure.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from attnfuzz.targets import _common, onnx_graphs

NAME = "ort"

VARIANTS = {
    "attention": "the ONNX Attention op (opset 23/24), CPU execution provider",
    "explicit": "unfused MatMul/Softmax/MatMul ONNX graph, ORT_ENABLE_ALL (fusions under test)",
    "explicit_noopt": "unfused MatMul/Softmax/MatMul ONNX graph, optimizations disabled",
    "exported_sdpa": "the graph torch.onnx.export writes for F.scaled_dot_product_attention",
}

_KIND = {"attention": "attention", "explicit": "explicit", "explicit_noopt": "explicit",
         "exported_sdpa": "exported_sdpa"}

COMPILE_KEY = ["shapes", "dtype", "layouts", "masks", "causal", "scale", "softcap", "dropout"]


def available(variant: str) -> tuple:
    if variant not in VARIANTS:
        return False, f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})"
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return False, f"onnx / onnxruntime does not import: {type(e).__name__}: {e}"
    return True, ""


class _Target:
    def __init__(self, variant: str):
        import onnxruntime as ort
        self.ort = ort
        self.variant = variant
        self.kind = _KIND[variant]
        self.opt = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if variant == "explicit_noopt"
                    else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        self.cache = _common.LRU(64)
        self.dtypes = ["f32", "f16"]

    def hello(self) -> dict:
        caps = ["f32", "f16", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal",
                "padding", "window", "strided", "mask_dtype"]
        conv = {"causal": ["top_left", "bottom_right", "bottom_right_valid", "explicit"],
                "masked_rows": "zero", "dropout": "none", "masked_values": "exclude"}
        if self.kind == "attention":
            caps.append("softcap")
            conv["masked_values"] = "ieee"
        elif self.kind == "explicit":
            caps += ["softcap", "dropout"]
            conv.update(masked_rows="nan", masked_values="ieee", dropout="counter")
        else:
            # A float attn_mask path has no IsNaN guard: fully masked rows give NaN there.
            conv.update(masked_rows="nan", masked_values="ieee")
        return {"caps": caps, "layouts": list(_common.ALL_LAYOUTS), "dtypes": self.dtypes,
                "limits": {}, "conventions": conv, "compile_key": COMPILE_KEY}

    def session(self, spec):
        key = tuple(sorted((k, repr(v)) for k, v in spec.items()))
        sess = self.cache.get(key)
        if sess is not None:
            return sess, 0.0
        t0 = time.perf_counter()
        model = onnx_graphs.build(spec)
        so = self.ort.SessionOptions()
        so.graph_optimization_level = self.opt
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = self.ort.InferenceSession(model.SerializeToString(), so,
                                         providers=["CPUExecutionProvider"])
        self.cache.put(key, sess)
        return sess, time.perf_counter() - t0

    def run(self, case, q, k, v, mask=None, bool_mask=None):
        from attnfuzz.worker import Result, Unsupported
        if case.dtype not in self.dtypes:
            raise Unsupported(f"dtype {case.dtype} (ORT's CPU provider lacks the kernels)")
        if self.kind == "attention" and case.scale_given and not case.scale > 0:
            # The op's reference splits sqrt(scale) over Q and K; ORT refuses scale <= 0.
            raise Unsupported("the ONNX Attention op takes a positive scale only")
        spec = onnx_graphs.feeds_spec(onnx_graphs.graph_spec(case, self.kind), mask, bool_mask)
        sess, compile_s = self.session(spec)
        feeds = {}
        if case.packed:
            feeds["qkv"] = np.ascontiguousarray(case.qkv)
        else:
            feeds["q"], feeds["k"], feeds["v"] = (np.ascontiguousarray(t) for t in (q, k, v))
        if mask is not None:
            feeds["mask"] = _feed(self.ort, mask)
        if bool_mask is not None:
            feeds["bool_mask"] = np.ascontiguousarray(bool_mask)
        if spec["struct"]:
            feeds["struct"] = _common.structural_allowed(case)
        if spec["nonpad"]:
            feeds["nonpad"] = np.asarray(case.key_padding, dtype=np.int64)
        if spec["dropout"] > 0:
            if spec["dropout"] >= 1:
                feeds["keep"] = np.zeros((case.batch, case.q_heads, case.q_len, case.kv_len), bool)
            else:
                from attnfuzz.rng import dropout_keep
                feeds["keep"] = np.ascontiguousarray(dropout_keep(
                    case.dropout_seed, case.dropout_p, case.batch, case.q_heads, case.q_len,
                    case.kv_len))
        t0 = time.perf_counter()
        out = sess.run(["out"], feeds)[0]
        run_s = time.perf_counter() - t0
        layout = _common.OUT_LAYOUT[case.layouts["q"]]
        return Result(out, layout=layout, compile_s=compile_s, run_s=run_s)


def _feed(ort, x):
    """A numpy input for ORT: bfloat16 (which ORT's numpy binding does not know) as an
    OrtValue of ONNX type BFLOAT16 over the same bits."""
    x = np.ascontiguousarray(x)
    if x.dtype.name == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint16), 16)
    return x


def make_target(variant: str) -> _Target:
    """The variant's declarations (hello()) and run function, for tests and tools."""
    return _Target(variant)


def repro_snippet(variant: str) -> str:
    """Standalone source: `attention(case, q, k, v, mask=None, bool_mask=None)` with onnx,
    onnxruntime and numpy only; the graph is written out as ONNX helper calls' result."""
    parts = ["import onnxruntime as ort", onnx_graphs.standalone_source()]
    opt = "ORT_DISABLE_ALL" if variant == "explicit_noopt" else "ORT_ENABLE_ALL"
    parts.append(f'''
def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """ort/{variant}: physical numpy inputs -> the output as [B, Hq, Sq, Dv]. `keep`: the
    dropout keep mask [B, Hq, Sq, Sk] when the case has dropout."""
    spec = feeds_spec(graph_spec(case, {_KIND[variant]!r}), mask, bool_mask)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.{opt}
    sess = ort.InferenceSession(build(spec).SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {{}}
    if case.packed:
        feeds["qkv"] = np.ascontiguousarray(case.qkv)
    else:
        feeds["q"], feeds["k"], feeds["v"] = (np.ascontiguousarray(t) for t in (q, k, v))
    if mask is not None:
        feeds["mask"] = np.ascontiguousarray(mask)
        if feeds["mask"].dtype.name == "bfloat16":
            feeds["mask"] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(feeds["mask"].view(np.uint16), 16)
    if bool_mask is not None:
        feeds["bool_mask"] = np.ascontiguousarray(bool_mask)
    if spec["struct"]:
        feeds["struct"] = structural_allowed(case)
    if spec["nonpad"]:
        feeds["nonpad"] = np.asarray(case.key_padding, dtype=np.int64)
    if spec["dropout"] > 0:
        feeds["keep"] = np.ascontiguousarray(keep) if spec["dropout"] < 1 else np.zeros(
            (case.batch, case.q_heads, case.q_len, case.kv_len), bool)
    out = sess.run(["out"], feeds)[0]
    return output_bhsd(out, OUT_LAYOUT[case.layouts["q"]], case.q_heads, case.v_head_dim)
''')
    return "\n".join(parts)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in VARIANTS:
        print(f"attnfuzz.targets.ort: unknown variant {argv[0] if argv else '(none)'!r}; "
              f"known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    variant = argv[0]
    ok, why = available(variant)
    if not ok:
        print(f"attnfuzz.targets.ort: {variant} is unavailable: {why}", file=sys.stderr)
        return 3
    import onnxruntime
    from attnfuzz.worker import serve
    t = _Target(variant)
    h = t.hello()
    serve(t.run, name=NAME, version=onnxruntime.__version__, caps=h["caps"], layouts=h["layouts"],
          variant=variant, dtypes=h["dtypes"], limits=h["limits"] or None,
          conventions=h["conventions"], compile_key=h["compile_key"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
