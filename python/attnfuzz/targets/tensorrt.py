"""TensorRT attention: engines built from the same ONNX graphs as the ONNX Runtime target
(attnfuzz.targets._onnx_graphs), Q, K, V in the case's physical layout.

Variants (`python -m attnfuzz.targets.tensorrt VARIANT`, `--backend target:tensorrt/VARIANT`):
  exported_sdpa  the graph torch.onnx.export writes for F.scaled_dot_product_attention (the
                 scale split as Sqrt on Q and K: where the TensorRT 10.7 scale bug lived)
  explicit       the unfused MatMul / Softmax / MatMul graph (TensorRT's MHA fusion under test)

Precision: f32 cases build an FP32 engine, with the TF32 builder flag set only when the case
allows TF32 (TensorRT sets it by default: the silent-TF32 bug class), f16 cases a strongly
typed engine from the f16 graph. Engines are cached by the graph's static structure (the
compile_key fields). Buffers live on the GPU through torch (CUDA).

TensorRT needs an NVIDIA GPU and the `tensorrt` Python package, which the set-up does not
install (several GB); where either is missing, the variants are unavailable and the worker
exits 3 saying why.
"""

from __future__ import annotations

import sys

import numpy as np

from attnfuzz.targets import _base, _common, _onnx_graphs


def _probe(variant):
    import torch
    return None if torch.cuda.is_available() else "tensorrt is installed but torch sees no CUDA device"


_V = _base.Variant
STACK = _base.Stack("tensorrt", imports=("tensorrt", "onnx", "torch"), version_of="tensorrt", probe=_probe,
                    variants=(
    _V("exported_sdpa", "TensorRT engine of the graph torch.onnx.export writes for SDPA (GPU)", gpu=True,
       compiled=True),
    _V("explicit", "TensorRT engine of the unfused MatMul/Softmax/MatMul graph (GPU)", gpu=True, compiled=True),
))


class Target(_base.Target):
    STACK = STACK
    CACHE_SIZE = 16

    def __init__(self, variant: str):
        super().__init__(variant)
        import tensorrt as trt
        import torch
        self.trt, self.torch = trt, torch
        self.logger = trt.Logger(trt.Logger.ERROR)
        self.runtime = trt.Runtime(self.logger)

    def declare(self) -> dict:
        caps = ["f32", "f16", "tf32", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal",
                "padding", "window", "strided", "mask_dtype"]
        conv = {"masked_rows": "nan", "masked_values": "ieee"}
        if self.variant == "explicit":
            caps += ["softcap", "dropout"]
            conv["dropout"] = "counter"
        return {"caps": caps, "dtypes": ["f32", "f16"], "conventions": conv}

    def _spec(self, req):
        return _onnx_graphs.feeds_spec(_onnx_graphs.graph_spec(req.case, self.variant, opset=18), req.mask,
                                       req.bool_mask)

    def structure(self, req):
        return tuple(sorted((k, repr(v)) for k, v in self._spec(req).items())), req.case.allow_tf32

    def build(self, req):
        trt = self.trt
        case = req.case
        spec = self._spec(req)
        flags = 0
        if spec["dtype"] != "f32":
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        builder = trt.Builder(self.logger)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(_onnx_graphs.build(spec).SerializeToString()):
            errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT's ONNX parser refused the graph: {errs}")
        config = builder.create_builder_config()
        if spec["dtype"] == "f32":
            if case.allow_tf32:
                config.set_flag(trt.BuilderFlag.TF32)
            else:
                config.clear_flag(trt.BuilderFlag.TF32)     # on by default in TensorRT
        blob = builder.build_serialized_network(network, config)
        if blob is None:
            raise RuntimeError("TensorRT failed to build the engine (see stderr)")
        engine = self.runtime.deserialize_cuda_engine(blob)
        return engine, engine.create_execution_context(), spec

    def execute(self, art, req):
        from attnfuzz.worker import Result
        engine, ctx, spec = art
        out = run_engine(ctx, spec, _onnx_graphs.feeds(req, spec))
        return Result(out, layout=_common.OUT_LAYOUT[req.case.layouts["q"]])


def run_engine(ctx, spec, feeds):
    """Runs an execution context on numpy feeds (copied to the GPU through torch); the
    output as numpy."""
    import torch
    dev = {}
    for name, x in feeds.items():
        t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if x.dtype.name == "bfloat16" \
            else torch.from_numpy(x)
        dev[name] = t.to("cuda")
        ctx.set_tensor_address(name, dev[name].data_ptr())
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[out_dtype(spec)]
    out = torch.empty(tuple(ctx.get_tensor_shape("out")), dtype=dt, device="cuda")
    ctx.set_tensor_address("out", out.data_ptr())
    stream = torch.cuda.current_stream()
    if not ctx.execute_async_v3(stream.cuda_stream):
        raise RuntimeError("TensorRT execute_async_v3 returned false")
    stream.synchronize()
    o = out.cpu()
    if o.dtype == torch.bfloat16:
        import ml_dtypes
        return o.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return o.numpy()


out_dtype = _onnx_graphs.out_dtype


def repro_snippet(variant: str) -> str:
    """Standalone source: `attention(req)` with tensorrt, onnx, torch (CUDA buffers) and
    numpy."""
    return _common.snippet(["import tensorrt as trt", "import torch"], _onnx_graphs.model_objects() + [run_engine],
                           consts=_onnx_graphs.CONSTS, tail=f'''

def attention(req):
    """tensorrt/{variant}: the request's physical numpy inputs -> the output as [B, Hq, Sq, Dv]."""
    case = req.case
    spec = feeds_spec(graph_spec(case, {variant!r}, opset=18), req.mask, req.bool_mask)
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
    out = run_engine(engine.create_execution_context(), spec, feeds(req, spec))
    return layouts.to_bhsd(out, OUT_LAYOUT[case.layouts["q"]], case.q_heads, case.v_head_dim)
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK))
