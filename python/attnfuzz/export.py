"""`attnfuzz export` (python -m attnfuzz.export): a bundle as an ONNX model with its
test data set, and as Polygraphy's input and output JSON, for trackers and tools that take
those (docs/commands.md, "attnfuzz export").

    python -m attnfuzz.export BUNDLE --onnx DIR [--expect reference|recorded] [--graph KIND]
    python -m attnfuzz.export BUNDLE --polygraphy inputs.json --polygraphy-outputs outputs.json

The ONNX model is the graph the ONNX Runtime and TensorRT targets build for the case
(attnfuzz.targets._onnx_graphs): Q, K, V (or the packed QKV buffer) in the case's physical
layouts and dtype, the masks as attnfuzz sends them, the structural masks the op cannot
express as a boolean input `struct`, a dropout keep mask as a boolean input `keep`, and one
output `out` in the query's output layout. The graph kind: that of the bundle's backend for
an ORT or TensorRT finding (the model then is the one that failed), else the ONNX Attention
op (opset 24, 25 with a window; --opset 23 where no key padding needs opset 24's
nonpad_kv_seqlen) where it expresses the case, else the explicit
MatMul/Softmax graph; `--graph` chooses. DIR gets model.onnx and test_data_set_0/input_N.pb
(in the graph's input order) and output_0.pb: the float64 reference cast to the model's
output dtype (`--expect reference`, the default) or the output the bundle recorded for its
failing backend (`--expect recorded`), both in the output layout.

Polygraphy: `--polygraphy FILE` writes the feeds as `polygraphy run --load-inputs FILE`
reads them (a JSON list of one dict {input name: array}, each array the base64 of its .npy
bytes, polygraphy/json/serde.py), `--polygraphy-outputs FILE` the expected output as a
RunResults (`polygraphy run --load-outputs FILE`) of one runner named "attnfuzz-reference"
(or "attnfuzz-recorded").

What ONNX cannot take is refused with the field named: the serving forms (THD, page
caches, decode tables, sinks, ALiBi), FP8 inputs. A backward bundle exports its forward.
"""

import argparse
import base64
import io
import json
import os
import sys

import numpy as np

from . import bundle, layouts
from .case import Case
from .repro import failing_backend
from .request import Request

OUT_NAMES = ("out",)
GRAPHS = ("attention", "explicit", "exported_sdpa")
# The ORT and TensorRT targets' variants -> graph kind (ort.py, tensorrt.py).
_VARIANT_GRAPH = {"attention": "attention", "explicit": "explicit", "explicit_noopt": "explicit",
                  "exported_sdpa": "exported_sdpa"}


class ExportError(ValueError):
    """A bundle that cannot be exported (the message names the field)."""


def refusal(case):
    """Why the case cannot be an ONNX model (a sentence naming the field), or None."""
    if case.forms:
        return "the case's serving forms (%s) have no ONNX form: field \"serving\"" % ", ".join(sorted(case.forms))
    if case.fp8:
        return "FP8 inputs (%s) have no ONNX Attention or MatMul form here: field \"fp8\"" % case.fp8
    return None


def graph_kind(case, meta, asked=None):
    """The graph kind: asked, else the bundle's ORT or TensorRT variant's, else the Attention
    op where it expresses the case (no dropout, a positive scale), else explicit."""
    if asked:
        if asked not in GRAPHS:
            raise ExportError("--graph %s: one of %s" % (asked, ", ".join(GRAPHS)))
        if asked == "attention" and case.dropout_p > 0:
            raise ExportError("--graph attention: the Attention op has no dropout keep mask (field \"dropout_p\" "
                              "is %g); use --graph explicit" % case.dropout_p)
        return asked
    b = failing_backend(meta) or {}
    name = str(b.get("name") or meta.get("who") or "")
    for stack in ("target:ort/", "target:tensorrt/"):
        if name.startswith(stack) and name[len(stack):] in _VARIANT_GRAPH:
            return _VARIANT_GRAPH[name[len(stack):]]
    if case.dropout_p > 0 or (case.scale_given and not case.scale > 0):
        return "explicit"
    return "attention"


def request_of(b):
    """The request attnfuzz sent for the bundle b (bundle.load): physical inputs in the
    case's dtype and layouts, the masks as sent, the dropout keep mask (as the repro
    scripts' inputs() builds it)."""
    from . import rng
    case = Case(b["case"])
    arrays = layouts.physical_inputs(case, b["q"], b["k"], b["v"], b.get("mask"), b.get("bool_mask"))
    keep = None
    if 0 < case.dropout_p < 1:
        keep = rng.dropout_keep(case.dropout_seed, case.dropout_p, case.batch, case.q_heads, case.q_len,
                                case.kv_len)
    return Request.from_arrays(case, arrays, keep=keep)


def _np_dtype(name):
    from . import dtypes
    return dtypes.DTYPES[name]


class Export:
    """A bundle as a model: .model (onnx.ModelProto), .feeds {input name: array} in the
    graph's input order, .expected (the output array), .spec, .kind, .expect, .backend."""

    def __init__(self, path, expect="reference", graph=None, opset=0):
        from .targets import _onnx_graphs
        b = bundle.load(path)
        meta = b["meta"]
        case = Case(b["case"])
        why = refusal(case)
        if why:
            raise ExportError("%s: %s" % (path, why))
        self.kind = graph_kind(case, meta, graph)
        req = request_of(b)
        spec = _onnx_graphs.feeds_spec(_onnx_graphs.graph_spec(case, self.kind, opset), req.mask, req.bool_mask)
        if opset and spec.get("nonpad") and opset < 24:
            raise ExportError("%s: --opset %d: the key padding (field \"key_padding\") goes to the Attention op as "
                              "nonpad_kv_seqlen, an input of opset 24" % (path, opset))
        if opset and spec.get("window") and opset < 25:
            raise ExportError("%s: --opset %d: the window (field \"window\") is an attribute of opset 25's "
                              "Attention" % (path, opset))
        self.spec = spec
        self.model = _onnx_graphs.build(spec)
        feeds = _onnx_graphs.feeds(req, spec)
        self.feeds = {i.name: feeds[i.name] for i in self.model.graph.input}
        out_dt = _np_dtype(_onnx_graphs.out_dtype(spec))
        self.expect = expect
        backend = failing_backend(meta) or {}
        self.backend = backend.get("name")
        if expect == "reference":
            canon = b["ref"]
        elif expect == "recorded":
            key = (backend.get("output") or "").replace(bundle.SUFFIX, "")
            if key not in b:
                raise ExportError("%s: --expect recorded: the bundle holds no output of its backend %s "
                                  "(kind %s)" % (path, self.backend, meta.get("kind")))
            canon = b[key]
        else:
            raise ExportError("--expect %s: reference or recorded" % expect)
        out_layout = layouts.OUT_LAYOUT[case.layouts["q"]]
        with np.errstate(over="ignore"):   # beyond the dtype's range is its inf, as the model's would be
            self.expected = np.ascontiguousarray(layouts.from_bhsd(np.asarray(canon), out_layout)).astype(out_dt)
        # the targets leave the output's shape to the runtime; a model file states it (the
        # ONNX checker and TensorRT's parser want it)
        out = self.model.graph.output[0]
        from onnx import helper
        out.CopyFrom(helper.make_tensor_value_info(out.name, out.type.tensor_type.elem_type, list(self.expected.shape)))

    def write_onnx(self, out_dir):
        """DIR/model.onnx and DIR/test_data_set_0/{input_N,output_0}.pb; returns the model's path."""
        import onnx
        from onnx import numpy_helper
        data = os.path.join(out_dir, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        model_path = os.path.join(out_dir, "model.onnx")
        onnx.save(self.model, model_path)
        for i, (name, x) in enumerate(self.feeds.items()):
            _write_pb(os.path.join(data, "input_%d.pb" % i), numpy_helper.from_array(x, name))
        _write_pb(os.path.join(data, "output_0.pb"), numpy_helper.from_array(self.expected, OUT_NAMES[0]))
        return model_path

    def polygraphy_inputs(self):
        """The JSON object of `polygraphy run --load-inputs`: a list of feed dicts."""
        return [{n: polygraphy_array(x) for n, x in self.feeds.items()}]

    def polygraphy_outputs(self):
        """The JSON object of a RunResults with one runner and one iteration."""
        runner = "attnfuzz-" + self.expect
        it = {"outputs": {OUT_NAMES[0]: {"values": polygraphy_array(self.expected), "polygraphy_class": "LazyArray"}},
              "runtime": 0.0, "runner_name": runner, "polygraphy_class": "IterationResult"}
        return {"lst": [[runner, [it]]], "polygraphy_class": "RunResults"}


def _write_pb(path, tensor):
    with open(path, "wb") as f:
        f.write(tensor.SerializeToString())


def polygraphy_array(x):
    """A numpy array in Polygraphy's JSON encoding (serde.py: the base64 of np.save's bytes
    under "array", the class marker "ndarray"). numpy has no bfloat16 of its own: such an
    array is refused (np.save would need a pickle)."""
    x = np.asarray(x)
    if x.dtype.kind not in "fbiu":
        raise ExportError("Polygraphy's JSON holds numpy's own dtypes; %s is not one (export --onnx instead)"
                          % x.dtype.name)
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(x), allow_pickle=False)
    return {"array": base64.b64encode(buf.getvalue()).decode(), "polygraphy_class": "ndarray"}


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def main(argv=None):
    p = argparse.ArgumentParser(prog="attnfuzz export", description=__doc__.split("\n\n")[0])
    p.add_argument("bundle")
    p.add_argument("--onnx", metavar="DIR", help="write DIR/model.onnx and DIR/test_data_set_0/")
    p.add_argument("--polygraphy", metavar="FILE", help="the inputs for polygraphy run --load-inputs FILE")
    p.add_argument("--polygraphy-outputs", metavar="FILE", help="the expected output as Polygraphy RunResults")
    p.add_argument("--expect", choices=("reference", "recorded"), default="reference",
                   help="expected output: the float64 reference at the model's precision (default) or the "
                        "bundle's recorded output of its failing backend")
    p.add_argument("--graph", choices=GRAPHS, help="the graph kind (default: the ORT/TensorRT variant's, else "
                                                   "attention where it expresses the case, else explicit)")
    p.add_argument("--opset", type=int, default=0, help="opset (default 24 for attention, 25 with a window, 18 else)")
    a = p.parse_args(argv)
    if not (a.onnx or a.polygraphy or a.polygraphy_outputs):
        p.error("nothing to write: give --onnx DIR, --polygraphy FILE or --polygraphy-outputs FILE")
    try:
        e = Export(a.bundle, expect=a.expect, graph=a.graph, opset=a.opset)
        if a.onnx:
            print("%s: %s graph, expected %s -> %s" % (a.bundle, e.kind, e.expect, e.write_onnx(a.onnx)))
        if a.polygraphy:
            _write_json(a.polygraphy, e.polygraphy_inputs())
            print("%s: inputs %s -> %s" % (a.bundle, ", ".join(e.feeds), a.polygraphy))
        if a.polygraphy_outputs:
            _write_json(a.polygraphy_outputs, e.polygraphy_outputs())
            print("%s: expected output -> %s" % (a.bundle, a.polygraphy_outputs))
    except (ExportError, ValueError, OSError) as err:
        print("attnfuzz export: %s" % err, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
