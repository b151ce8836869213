"""attnfuzz.capture: layouts read from hand-built strides (packed Q/K/V views of one buffer,
transposed views, other memory orders, padded rows), masks read for their pattern (key
padding, causal diagonals, windows, fills) against hand-written patterns, identical calls
counted once, the hooks reaching by-name imports and torch._C._nn and removed afterwards,
FlexAttention block masks, nested tensors, jax (eager and traced), ONNX attention nodes, the
tiny models of examples/capture against their configs, and the corpus read by the C side
(fuzz --corpus seeds one case per directory, replay runs a case on its recorded tensors)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import _util  # noqa: F401

from attnfuzz import capture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "capture")
EXE = os.path.join(ROOT, "build", "attnfuzz")

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the pinned .venv holds torch; a bare environment skips these
    torch = None


def _importable(name):
    import importlib.util
    return importlib.util.find_spec(name) is not None


class Tmp(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="test-capture-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def cases(self, out=None):
        with open(os.path.join(out or self.dir, capture.INDEX)) as f:
            return json.load(f)["cases"]


class Structure(unittest.TestCase):
    """structure_of and mask_fields on patterns written by hand."""

    def test_key_padding_prefix(self):
        a = np.zeros((2, 1, 4, 6), bool)
        a[0, ..., :6] = True
        a[1, ..., :3] = True
        fields, complete = capture.structure_of(a, 4, 6, 2)
        self.assertTrue(complete)
        self.assertEqual(fields, {"key_padding": [6, 3]})

    def test_causal_top_left_with_padding(self):
        i, j = np.arange(5)[:, None], np.arange(5)[None, :]
        a = np.stack([(j <= i), (j <= i) & (j < 3)])[:, None]
        fields, complete = capture.structure_of(a, 5, 5, 2)
        self.assertTrue(complete)
        self.assertEqual(fields, {"key_padding": [5, 3], "causal": True, "diagonal": "top_left"})

    def test_bottom_right_and_explicit_offset(self):
        i, j = np.arange(3)[:, None], np.arange(7)[None, :]
        fields, complete = capture.structure_of((j <= i + 4)[None, None], 3, 7, 1)
        self.assertEqual((complete, fields), (True, {"causal": True, "diagonal": "bottom_right"}))
        fields, complete = capture.structure_of((j <= i + 2)[None, None], 3, 7, 1)
        self.assertEqual((complete, fields), (True, {"causal": True, "diagonal": "explicit", "diagonal_offset": 2}))

    def test_sliding_window(self):
        i, j = np.arange(8)[:, None], np.arange(8)[None, :]
        band = (j <= i) & (j >= i - 2)  # each query sees itself and the two keys before it
        fields, complete = capture.structure_of(band[None, None], 8, 8, 1)
        self.assertTrue(complete)
        self.assertEqual(fields, {"causal": True, "diagonal": "top_left", "window": [2, -1]})

    def test_random_pattern_is_not_structural(self):
        a = np.ones((1, 1, 4, 4), bool)
        a[0, 0, 1, 0] = False  # a hole in the middle of a row: no prefix, no diagonal
        notes = []
        _, obj, _ = capture.mask_fields(a, True, 1, 1, 4, 4, notes=notes)
        self.assertEqual((obj["pattern"], obj["density"]), ("random", 16))  # 1/16 of 256
        self.assertIn("unmapped", notes[0])

    def test_additive_fill_and_broadcast(self):
        lowest = np.finfo(np.float32).min
        m = np.zeros((2, 1, 1, 6), np.float32)
        m[1, ..., 4:] = lowest
        fields, obj, stored = capture.mask_fields(m, False, 2, 4, 3, 6)
        self.assertEqual(fields, {"key_padding": [6, 4]})
        self.assertEqual((obj["fill"], obj["full_dims"], obj["pattern"], obj["live_zero"]), ("lowest", "bk", "none", True))
        self.assertEqual(stored.shape, (2, 1, 1, 6))
        m[1, ..., 4:] = -np.inf
        self.assertEqual(capture.mask_fields(m, False, 2, 4, 3, 6)[1]["fill"], "neg_inf")


@unittest.skipIf(torch is None, "no torch")
class Layouts(Tmp):
    B, S, H, D = 2, 5, 3, 4

    def one(self, q, k, v, **kw):
        with capture.recording(self.dir):
            F.scaled_dot_product_attention(q, k, v, **kw)
        (c,) = self.cases()
        return c["case"]

    def test_packed_concatenated(self):
        x = torch.randn(self.B, self.S, 3, self.H, self.D)  # [B, S, 3, H, D]
        q, k, v = (t.transpose(1, 2) for t in x.unbind(2))
        self.assertEqual(self.one(q, k, v)["q"]["layout"], "qkv_bs3hd")

    def test_packed_interleaved(self):
        x = torch.randn(self.B, self.S, self.H, 3, self.D)  # [B, S, H, 3, D]
        q, k, v = (t.transpose(1, 2) for t in x.unbind(3))
        self.assertEqual(self.one(q, k, v)["q"]["layout"], "qkv_bsh3d")

    def test_packed_channels_first(self):
        B, S, H, D = self.B, self.S, self.H, self.D
        x = torch.randn(B, 3 * H * D, S)
        q, k, v = (t.reshape(B, H, D, S).transpose(-1, -2) for t in x.chunk(3, dim=1))
        c = self.one(q, k, v)
        self.assertEqual([c[n]["layout"] for n in "qkv"], ["qkv_channels_first"] * 3)
        self.assertEqual((c["q_len"], c["head_dim"], c["q_heads"]), (S, D, H))

    def test_views_of_separate_tensors(self):
        B, S, H, D = self.B, self.S, self.H, self.D
        q = torch.randn(B, S, H, D).transpose(1, 2)  # bshd
        k = torch.randn(S, B, H, D).permute(1, 2, 0, 3)  # sbhd
        v = torch.randn(B, H, S, D)
        c = self.one(q, k, v)
        self.assertEqual([c[n]["layout"] for n in "qkv"], ["bshd", "sbhd", "bhsd"])

    def test_other_order_and_padding(self):
        B, S, H, D = self.B, self.S, self.H, self.D
        q = torch.randn(H, B, S, D).transpose(0, 1)  # memory order h, b, s, d
        k = torch.randn(B, H, S, D + 3)[..., :D]     # rows of D padded by 3
        v = torch.randn(B, H, S, D)
        c = self.one(q, k, v)
        # Lehmer code of (h, b, s, d) over (b, h, s, d): h is index 1 of 4 -> 1 * 3! = 6
        self.assertEqual((c["q"]["layout"], c["q"]["perm"]), ("bhsd", 6))
        self.assertEqual((c["k"]["layout"], c["k"]["pad"]), ("bhsd", 3))

    def test_gqa_scale_dropout_causal(self):
        q, k = torch.randn(1, 8, 4, 16), torch.randn(1, 2, 6, 16)
        c = self.one(q, k, k, enable_gqa=True, scale=0.5, is_causal=True, dropout_p=0.25)
        self.assertEqual((c["q_heads"], c["kv_heads"], c["q_len"], c["kv_len"]), (8, 2, 4, 6))
        self.assertEqual((c["scale"], c["dropout_p"], c["causal"], c["diagonal"]), (0.5, 0.25, True, "top_left"))

    def test_default_scale_is_null_and_f16(self):
        q = torch.randn(1, 2, 3, 16, dtype=torch.float16)
        c = self.one(q, q, q, scale=0.25)  # 1/sqrt(16): the default, passed explicitly
        self.assertNotIn("scale", c)
        self.assertEqual(c["dtype"], "f16")


@unittest.skipIf(torch is None, "no torch")
class Hooks(Tmp):
    def test_identical_calls_counted_once_with_sites(self):
        q = torch.randn(1, 2, 3, 4)
        with capture.recording(self.dir):
            for _ in range(3):
                F.scaled_dot_product_attention(q, q, q)
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        counts = sorted(c["count"] for c in self.cases())
        self.assertEqual(counts, [1, 3])
        three = [c for c in self.cases() if c["count"] == 3][0]
        self.assertEqual(sum(three["sites"].values()), 3)
        self.assertTrue(all("test_capture.py" in s for s in three["sites"]))

    def test_by_name_imports_and_c_binding_and_restore(self):
        mod = type(sys)("user_model")
        exec("from torch.nn.functional import scaled_dot_product_attention as sdpa\n", mod.__dict__)
        sys.modules["user_model"] = mod
        orig = F.scaled_dot_product_attention
        try:
            q = torch.randn(1, 1, 2, 4)
            with capture.recording(self.dir):
                mod.sdpa(q, q, q)
                torch._C._nn.scaled_dot_product_attention(q, q, q, is_causal=True)
            self.assertEqual(sum(c["count"] for c in self.cases()), 2)
            self.assertIs(mod.sdpa, orig)
            self.assertIs(F.scaled_dot_product_attention, orig)
            self.assertIs(torch._C._nn.scaled_dot_product_attention, orig)
        finally:
            del sys.modules["user_model"]

    def test_recording_adds_to_a_corpus(self):
        q = torch.randn(1, 1, 2, 4)
        for _ in range(2):
            with capture.recording(self.dir):
                F.scaled_dot_product_attention(q, q, q)
        (c,) = self.cases()
        self.assertEqual(c["count"], 2)
        with open(os.path.join(self.dir, c["name"], "case.json")) as f:
            self.assertEqual(json.load(f)["extra"]["capture"]["count"], 2)

    def test_tensors_stored_canonical(self):
        q = torch.randn(2, 3, 5, 4).transpose(1, 2)  # [B, S=3, H=5, D] viewed as [B, H, S, D]
        m = torch.ones(2, 1, 3, 3, dtype=torch.bool)
        with capture.recording(self.dir, tensors=True):
            F.scaled_dot_product_attention(q, q, q, attn_mask=m)
        (c,) = self.cases()
        from attnfuzz import bundle
        b = bundle.load(os.path.join(self.dir, c["name"]))
        np.testing.assert_array_equal(b["q"], q.numpy())
        self.assertEqual(b["bool_mask"].shape, (2, 1, 3, 3))

    def test_flex_block_masks(self):
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except ImportError:
            self.skipTest("no flex_attention")
        S = 128
        q = torch.randn(1, 2, S, 16)

        def causal(b, h, i, j):
            return j <= i

        def window(b, h, i, j):
            return (j <= i) & (i - j <= 8)

        def odd(b, h, i, j):
            return (i + j) % 3 != 0
        with capture.recording(self.dir):
            import torch.nn.attention.flex_attention as fa
            for mod in (causal, window, odd):
                bm = create_block_mask(mod, 1, 1, S, S, device="cpu")
                fa.flex_attention(q, q, q, block_mask=bm)
            fa.flex_attention(q, q, q, score_mod=lambda s, b, h, i, j: s * 2)
        by = {tuple(c["notes"][:1]): c["case"] for c in self.cases()}
        notes = " | ".join(n for c in self.cases() for n in c["notes"])
        cases = [c["case"] for c in self.cases()]
        self.assertTrue(any(c.get("causal") and "window" not in c for c in cases), notes)
        self.assertTrue(any(c.get("window") == [8, -1] for c in cases), notes)
        self.assertIn("flex mask_mod odd unmapped", notes)
        self.assertIn("flex score_mod <lambda> unmapped", notes)
        self.assertEqual(len(by), 4)

    def test_nested_jagged(self):
        lens = [3, 5]
        try:
            q = torch.nested.nested_tensor([torch.randn(n, 2, 4) for n in lens], layout=torch.jagged).transpose(1, 2)
        except Exception as exc:  # pragma: no cover - an old torch
            self.skipTest("no jagged nested tensors: %s" % exc)
        with capture.recording(self.dir):
            try:
                F.scaled_dot_product_attention(q, q, q)
            except Exception:
                pass  # a CPU kernel may refuse it; the call was recorded first
        (c,) = self.cases()
        self.assertEqual((c["case"]["q_len"], c["case"]["key_padding"], c["case"]["q_heads"]), (5, [3, 5], 2))
        self.assertIn("nested jagged", c["notes"][0])


@unittest.skipIf(torch is None, "no torch")
class Varlen(Tmp):
    def test_thd_sequences(self):
        try:
            import torch.nn.attention.varlen as vl
        except ImportError:
            self.skipTest("no torch.nn.attention.varlen")
        lens = [3, 5]
        cu = torch.tensor([0, 3, 8], dtype=torch.int32)
        q = torch.randn(8, 4, 16)  # [T, H, D]
        with capture.recording(self.dir, tensors=True):
            try:
                vl.varlen_attn(q, q, q, cu, cu, 5, 5, window_size=(-1, 0))
            except Exception:
                pass  # a CPU build may have no kernel for it; the call was recorded first
        (c,) = self.cases()
        k = c["case"]
        self.assertEqual((k["batch"], k["q_heads"], k["q_len"], k["key_padding"], k["causal"], k["diagonal"]),
                         (2, 4, 5, lens, True, "bottom_right_valid"))
        from attnfuzz import bundle
        b = bundle.load(os.path.join(self.dir, c["name"]))
        np.testing.assert_array_equal(b["q"][1, :, :5], q[3:8].transpose(0, 1).numpy())
        self.assertTrue(np.all(b["q"][0, :, 3:] == 0))


@unittest.skipUnless(_importable("jax"), "no jax")
class Jax(Tmp):
    def test_eager_and_traced(self):
        import jax
        import jax.numpy as jnp
        q = jnp.ones((2, 6, 4, 8), jnp.float32)   # [B, T, N, H]
        k = jnp.ones((2, 6, 2, 8), jnp.float32)
        with capture.recording(self.dir):
            jax.nn.dot_product_attention(q, k, k, is_causal=True, key_value_seq_lengths=jnp.array([6, 4]))
            jax.jit(lambda a, b: jax.nn.dot_product_attention(a, b, b, local_window_size=(2, 0)))(q, k)
        cases = {c["case"].get("causal", False): c for c in self.cases()}
        eager, traced = cases[True]["case"], cases[False]["case"]
        self.assertEqual((eager["q_heads"], eager["kv_heads"], eager["key_padding"], eager["q"]["layout"]),
                         (4, 2, [6, 4], "bshd"))
        self.assertEqual(traced["window"], [2, 0])


@unittest.skipUnless(_importable("onnx"), "no onnx")
class Onnx(Tmp):
    def test_attention_and_gqa_nodes(self):
        import onnx
        from onnx import TensorProto, helper
        B, Hq, Hkv, S, D = 2, 8, 2, 10, 16
        inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT16, [B, Hq, S, D]),
                  helper.make_tensor_value_info("k", TensorProto.FLOAT16, [B, Hkv, S, D]),
                  helper.make_tensor_value_info("v", TensorProto.FLOAT16, [B, Hkv, S, D]),
                  helper.make_tensor_value_info("m", TensorProto.BOOL, [S, S]),
                  helper.make_tensor_value_info("q3", TensorProto.FLOAT, ["batch", S, Hq * D]),
                  helper.make_tensor_value_info("k3", TensorProto.FLOAT, ["batch", S, Hkv * D])]
        nodes = [helper.make_node("Attention", ["q", "k", "v", "m"], ["o"], is_causal=1, scale=0.5),
                 helper.make_node("GroupQueryAttention", ["q3", "k3", "k3"], ["o3"], domain="com.microsoft",
                                  num_heads=Hq, kv_num_heads=Hkv, local_window_size=4)]
        outputs = [helper.make_tensor_value_info("o", TensorProto.FLOAT16, None),
                   helper.make_tensor_value_info("o3", TensorProto.FLOAT, None)]
        model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                                  opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)])
        path = os.path.join(self.dir, "m.onnx")
        onnx.save(model, path)
        capture.record_onnx(path, os.path.join(self.dir, "out"))
        by = {c["api"]: c for c in self.cases(os.path.join(self.dir, "out"))}
        a = by["onnx.Attention"]["case"]
        self.assertEqual((a["q_heads"], a["kv_heads"], a["dtype"], a["scale"], a["causal"], a["q"]["layout"]),
                         (Hq, Hkv, "f16", 0.5, True, "bhsd"))
        self.assertEqual((a["bool_mask"]["full_dims"], a["bool_mask"]["rank"]), ("qk", 2))
        g = by["onnx.com.microsoft.GroupQueryAttention"]
        self.assertEqual((g["case"]["batch"], g["case"]["head_dim"], g["case"]["diagonal"], g["case"]["window"]),
                         (1, D, "bottom_right", [4, -1]))
        self.assertIn("symbolic dim batch taken as 1", g["notes"])


@unittest.skipUnless(torch is not None and _importable("transformers") and _importable("diffusers"),
                     "no transformers/diffusers (python/requirements-capture.txt)")
class Models(Tmp):
    """The example models captured through run_program (runpy, the hooks in place before the
    script imports its model code), checked against their configs."""

    def run_example(self, name):
        out = os.path.join(self.dir, name)
        _, status = capture.run_program(["python", os.path.join(EXAMPLES, name + ".py")], out)
        self.assertEqual(status, 0)
        return {c["name"]: c for c in self.cases(out)}.values()

    @staticmethod
    def dims(c):
        k = c["case"]
        return (k["batch"], k["q_heads"], k["kv_heads"], k["q_len"], k["kv_len"], k["head_dim"])

    def test_llama_gqa_causal(self):
        cases = list(self.run_example("llama_gqa"))
        self.assertEqual(len(cases), 2)
        # hidden 64 over 8 heads: D 8; 2 layers: each forward calls twice
        plain = [c for c in cases if "bool_mask" not in c["case"]][0]
        self.assertEqual(self.dims(plain), (2, 8, 2, 12, 12, 8))  # GQA 8:2 through enable_gqa
        self.assertEqual((plain["count"], plain["case"]["causal"], plain["case"]["diagonal"]), (2, True, "top_left"))
        self.assertEqual(plain["case"]["q"]["layout"], "bshd")  # q_proj(x).view(B, S, H, D).transpose(1, 2)
        padded = [c for c in cases if "bool_mask" in c["case"]][0]
        # with a mask transformers repeats K/V heads itself (repeat_kv): the call has 8 of them
        self.assertEqual(self.dims(padded), (2, 8, 8, 12, 12, 8))
        self.assertEqual((padded["case"]["key_padding"], padded["case"]["causal"], padded["case"]["bool_mask"]["pattern"]),
                         ([12, 9], True, "none"))
        self.assertTrue(all("modeling_llama" in s or "sdpa_attention" in s for s in padded["sites"]))

    def test_bert_padding(self):
        (c,) = self.run_example("bert_padding")
        self.assertEqual(self.dims(c), (2, 4, 4, 10, 10, 8))
        self.assertEqual((c["count"], c["case"]["key_padding"], c["case"].get("causal", False)), (2, [10, 6], False))
        self.assertEqual(c["case"]["bool_mask"]["pattern"], "none")

    def test_vit(self):
        (c,) = self.run_example("vit")
        self.assertEqual(self.dims(c), (2, 4, 4, 17, 17, 12))  # (32/8)^2 patches + CLS; 48/4
        self.assertEqual(c["count"], 2)
        self.assertFalse(any(f in c["case"] for f in ("causal", "key_padding", "bool_mask", "additive_mask")))

    def test_unet_packed_channels_first(self):
        cases = list(self.run_example("unet_packed_qkv"))
        got = sorted((c["case"]["q"]["layout"], c["case"]["q_len"], c["case"]["kv_len"], c["case"]["head_dim"],
                      c["count"]) for c in cases)
        # 16x16: one down-block transformer + two up-block ones (layers_per_block + 1), 32
        # channels over 4 heads; the 8x8 mid block: 64 channels; cross-attention to 7 tokens
        self.assertEqual(got, [("bshd", 64, 7, 16, 1), ("bshd", 256, 7, 8, 3),
                               ("qkv_channels_first", 64, 64, 16, 1), ("qkv_channels_first", 256, 256, 8, 3)])


@unittest.skipUnless(torch is not None and os.access(EXE, os.X_OK), "no torch or no built attnfuzz")
class Corpus(Tmp):
    """The C side reads what capture writes."""

    def test_fuzz_seeds_and_replay(self):
        B, H, S, D = 2, 2, 6, 8
        x = torch.randn(B, 3 * H * D, S, dtype=torch.float16)
        q, k, v = (t.reshape(B, H, D, S).transpose(-1, -2) for t in x.chunk(3, dim=1))
        with capture.recording(self.dir, tensors=True):
            F.scaled_dot_product_attention(q, k, v)
            m = torch.ones(B, 1, S, S, dtype=torch.bool).tril()
            F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=m)
        self.assertEqual(len(self.cases()), 2)
        stats = os.path.join(self.dir, "stats.json")
        r = subprocess.run([EXE, "fuzz", "--corpus", self.dir, "--runs", "4", "--no-known", "--stats", stats,
                            "--crashes", os.path.join(self.dir, "crashes")], capture_output=True, text=True,
                           timeout=300)
        with open(stats) as f:
            s = json.load(f)
        self.assertEqual((s["seeds"], s["seeds_run"]), (2, 2), r.stderr)  # captured.json is no seed
        packed = [c for c in self.cases() if c["case"]["q"]["layout"] == "qkv_channels_first"][0]
        d = os.path.join(self.dir, packed["name"])
        r = subprocess.run([EXE, "replay", "--no-known", "--backend", "explicit", d], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # the channel-first packed f16 overflow mutant fires on these inputs only when they
        # are large: scaled up, the replay (on the stored tensors) finds it
        from attnfuzz import bundle
        bundle.save_array(os.path.join(d, "q.npy.zst"), (q.float() * 300).numpy())
        bundle.save_array(os.path.join(d, "k.npy.zst"), (k.float() * 300).numpy())
        r = subprocess.run([EXE, "replay", "--no-known", "--backend", "mutant:packed_fp16_overflow", d],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)

    def test_only_python_programs(self):
        r = subprocess.run([EXE, "capture", "-o", self.dir, "--", "/bin/true"], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 2)
        self.assertIn("only Python programs can be captured", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, capture.INDEX)))


if __name__ == "__main__":
    unittest.main()
