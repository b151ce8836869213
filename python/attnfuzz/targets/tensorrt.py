"""TensorRT attention: engines built from the same ONNX graphs as the ONNX Runtime target
(attnfuzz.targets.onnx_graphs), Q, K, V in the case's physical layout.

Variants (`python -m attnfuzz.targets.tensorrt VARIANT`, `--backend target:tensorrt/VARIANT`):
  exported_sdpa  the graph torch.onnx.export writes for F.scaled_dot_product_attention (the
                 scale split as Sqrt on Q and K: where the TensorRT 10.7 scale bug lived)
  explicit       the unfused MatMul / Softmax / MatMul graph (TensorRT's MHA fusion under test)

Precision: f32 cases build an FP32 engine, with the TF32 builder flag set only when the case
allows TF32 (TensorRT sets it by default: the silent-TF32 bug class), f16 cases a strongly
typed engine from the f16 graph. Engines are cached by the graph's static structure (the
compile_key fields). Buffers live on the GPU through torch (CUDA).

TensorRT needs an NVIDIA GPU and the `tensorrt` Python package; where either is missing,
available() says why and the worker exits 3 with that message.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from attnfuzz.targets import _common, onnx_graphs

NAME = "tensorrt"

VARIANTS = {
    "exported_sdpa": "TensorRT engine of the graph torch.onnx.export writes for SDPA (GPU)",
    "explicit": "TensorRT engine of the unfused MatMul/Softmax/MatMul graph (GPU)",
}

COMPILE_KEY = ["shapes", "dtype", "layouts", "masks", "causal", "scale", "softcap", "dropout"]


def available(variant: str) -> tuple:
    if variant not in VARIANTS:
        return False, f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})"
    try:
        import tensorrt  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return False, f"tensorrt does not import: {type(e).__name__}: {e}"
    try:
        import onnx  # noqa: F401
        import torch
    except Exception as e:  # noqa: BLE001
        return False, f"tensorrt target needs onnx and torch (for CUDA buffers): {e}"
    if not torch.cuda.is_available():
        return False, "tensorrt is installed but torch sees no CUDA device"
    return True, ""


_TORCH_DT = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "bool": "bool", "i64": "int64"}


class _Target:
    def __init__(self, variant: str):
        import tensorrt as trt
        import torch
        self.trt, self.torch = trt, torch
        self.variant = variant
        self.kind = variant
        self.logger = trt.Logger(trt.Logger.ERROR)
        self.runtime = trt.Runtime(self.logger)
        self.cache = _common.LRU(16)
        self.dtypes = ["f32", "f16"]

    def hello(self) -> dict:
        caps = ["f32", "f16", "tf32", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal",
                "padding", "window", "strided", "mask_dtype"]
        conv = {"causal": ["top_left", "bottom_right", "bottom_right_valid", "explicit"],
                "masked_rows": "nan", "dropout": "none", "masked_values": "ieee"}
        if self.kind == "explicit":
            caps += ["softcap", "dropout"]
            conv["dropout"] = "counter"
        return {"caps": caps, "layouts": list(_common.ALL_LAYOUTS), "dtypes": self.dtypes,
                "limits": {}, "conventions": conv, "compile_key": COMPILE_KEY}

    def engine(self, spec, allow_tf32: bool):
        trt = self.trt
        key = (tuple(sorted((k, repr(v)) for k, v in spec.items())), bool(allow_tf32))
        hit = self.cache.get(key)
        if hit is not None:
            return hit, 0.0
        t0 = time.perf_counter()
        model = onnx_graphs.build(spec)
        flags = 0
        if spec["dtype"] != "f32":
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        builder = trt.Builder(self.logger)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(model.SerializeToString()):
            errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT's ONNX parser refused the graph: {errs}")
        config = builder.create_builder_config()
        if spec["dtype"] == "f32":
            if allow_tf32:
                config.set_flag(trt.BuilderFlag.TF32)
            else:
                config.clear_flag(trt.BuilderFlag.TF32)     # on by default in TensorRT
        blob = builder.build_serialized_network(network, config)
        if blob is None:
            raise RuntimeError("TensorRT failed to build the engine (see stderr)")
        engine = self.runtime.deserialize_cuda_engine(blob)
        context = engine.create_execution_context()
        self.cache.put(key, (engine, context))
        return (engine, context), time.perf_counter() - t0

    def run(self, case, q, k, v, mask=None, bool_mask=None):
        from attnfuzz.worker import Result, Unsupported
        torch = self.torch
        if case.dtype not in self.dtypes:
            raise Unsupported(f"dtype {case.dtype}")
        spec = onnx_graphs.feeds_spec(onnx_graphs.graph_spec(case, self.kind, opset=18),
                                      mask, bool_mask)
        (engine, ctx), compile_s = self.engine(spec, case.allow_tf32)
        feeds = {}
        if case.packed:
            feeds["qkv"] = case.qkv
        else:
            feeds["q"], feeds["k"], feeds["v"] = q, k, v
        if mask is not None:
            feeds["mask"] = mask
        if bool_mask is not None:
            feeds["bool_mask"] = bool_mask
        if spec["struct"]:
            feeds["struct"] = _common.structural_allowed(case)
        if spec["dropout"] > 0:
            if spec["dropout"] >= 1:
                feeds["keep"] = np.zeros((case.batch, case.q_heads, case.q_len, case.kv_len), bool)
            else:
                from attnfuzz.rng import dropout_keep
                feeds["keep"] = dropout_keep(case.dropout_seed, case.dropout_p, case.batch,
                                             case.q_heads, case.q_len, case.kv_len)
        dev = {}
        for name, x in feeds.items():
            x = np.ascontiguousarray(x)
            if x.dtype.name == "bfloat16":
                t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
            else:
                t = torch.from_numpy(x)
            dev[name] = t.to("cuda")
            ctx.set_tensor_address(name, dev[name].data_ptr())
        out_dt = getattr(torch, _TORCH_DT[onnx_graphs.out_dtype(spec)])
        shape = tuple(ctx.get_tensor_shape("out"))
        out = torch.empty(shape, dtype=out_dt, device="cuda")
        ctx.set_tensor_address("out", out.data_ptr())
        stream = torch.cuda.current_stream()
        t0 = time.perf_counter()
        if not ctx.execute_async_v3(stream.cuda_stream):
            raise RuntimeError("TensorRT execute_async_v3 returned false")
        stream.synchronize()
        run_s = time.perf_counter() - t0
        o = out.cpu()
        o = o.view(torch.int16).numpy().view(__import__("ml_dtypes").bfloat16) \
            if o.dtype == torch.bfloat16 else o.numpy()
        return Result(o, layout=_common.OUT_LAYOUT[case.layouts["q"]], compile_s=compile_s,
                      run_s=run_s)


def make_target(variant: str) -> _Target:
    """The variant's declarations (hello()) and run function, for tests and tools."""
    return _Target(variant)


def repro_snippet(variant: str) -> str:
    """Standalone source: `attention(case, q, k, v, mask=None, bool_mask=None)` with
    tensorrt, onnx, torch (CUDA buffers) and numpy."""
    return "\n".join([
        "import tensorrt as trt", "import torch", onnx_graphs.standalone_source(), f'''
def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """tensorrt/{variant}: physical numpy inputs -> the output as [B, Hq, Sq, Dv]."""
    spec = feeds_spec(graph_spec(case, {variant!r}, opset=18), mask, bool_mask)
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    flags = 0 if spec["dtype"] == "f32" else 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(build(spec).SerializeToString())
    config = builder.create_builder_config()
    if spec["dtype"] == "f32":
        (config.set_flag if case.allow_tf32 else config.clear_flag)(trt.BuilderFlag.TF32)
    engine = trt.Runtime(logger).deserialize_cuda_engine(builder.build_serialized_network(network, config))
    ctx = engine.create_execution_context()
    feeds = {{"qkv": case.qkv}} if case.packed else {{"q": q, "k": k, "v": v}}
    if mask is not None:
        feeds["mask"] = mask
    if bool_mask is not None:
        feeds["bool_mask"] = bool_mask
    if spec["struct"]:
        feeds["struct"] = structural_allowed(case)
    if spec["dropout"] > 0:
        feeds["keep"] = keep if spec["dropout"] < 1 else np.zeros(
            (case.batch, case.q_heads, case.q_len, case.kv_len), bool)
    dev = {{}}
    for name, x in feeds.items():
        dev[name] = torch.from_numpy(np.ascontiguousarray(x)).cuda()
        ctx.set_tensor_address(name, dev[name].data_ptr())
    dt = {{"f32": torch.float32, "f16": torch.float16}}[out_dtype(spec)]
    out = torch.empty(tuple(ctx.get_tensor_shape("out")), dtype=dt, device="cuda")
    ctx.set_tensor_address("out", out.data_ptr())
    ctx.execute_async_v3(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return output_bhsd(out.cpu().numpy(), OUT_LAYOUT[case.layouts["q"]], case.q_heads, case.v_head_dim)
'''])


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in VARIANTS:
        print(f"attnfuzz.targets.tensorrt: unknown variant {argv[0] if argv else '(none)'!r}; "
              f"known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    variant = argv[0]
    ok, why = available(variant)
    if not ok:
        print(f"attnfuzz.targets.tensorrt: {variant} is unavailable: {why}", file=sys.stderr)
        return 3
    import tensorrt
    from attnfuzz.worker import serve
    t = _Target(variant)
    h = t.hello()
    serve(t.run, name=NAME, version=tensorrt.__version__, caps=h["caps"], layouts=h["layouts"],
          variant=variant, dtypes=h["dtypes"], limits=h["limits"] or None,
          conventions=h["conventions"], compile_key=h["compile_key"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
