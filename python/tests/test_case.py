"""Case: defaults of docs/case-json.md, derived values (scale, diagonal offsets, valid keys)
and compile keys."""

import math
import unittest

import _util  # noqa: F401

from attnfuzz.case import Case


class Defaults(unittest.TestCase):
    def test_defaults(self):
        c = Case({})
        self.assertEqual((c.batch, c.q_heads, c.kv_heads, c.q_len, c.kv_len, c.head_dim, c.v_head_dim),
                         (1, 1, 1, 1, 1, 1, 1))
        self.assertEqual((c.dtype, c.allow_tf32, c.placement, c.softcap, c.causal), ("f32", False, "scores", 0.0, False))
        self.assertEqual((c.diagonal, c.window, c.key_padding, c.amask, c.bmask), ("top_left", (-1, -1), None, None, None))
        self.assertEqual((c.dropout_p, c.dropout_seed, c.layout, c.packed), (0.0, 0, "bhsd", False))
        self.assertEqual(c.layouts, {"q": "bhsd", "k": "bhsd", "v": "bhsd"})
        c = Case({"q_heads": 8, "q_len": 5, "head_dim": 16})
        self.assertEqual((c.kv_heads, c.kv_len, c.v_head_dim), (8, 5, 16))

    def test_scale(self):
        c = Case({"head_dim": 64, "scale": None})
        self.assertEqual(c.scale, 0.125)
        self.assertFalse(c.scale_given)
        c = Case({"head_dim": 3})
        self.assertEqual(c.scale, 1.0 / math.sqrt(3.0))
        c = Case({"head_dim": 64, "scale": -2.5, "scale_placement": "sqrt_qk"})
        self.assertEqual((c.scale, c.scale_given, c.placement), (-2.5, True, "sqrt_qk"))
        # the request's derived values win
        self.assertEqual(Case({"head_dim": 4}, {"scale": 0.75}).scale, 0.75)

    def test_diagonals_and_valid_keys(self):
        base = {"batch": 3, "q_len": 4, "kv_len": 9, "key_padding": [9, 2, 0]}
        want = {"top_left": [0, 0, 0], "bottom_right": [5, 5, 5], "bottom_right_valid": [5, -2, -4]}
        for d, off in want.items():
            c = Case(dict(base, diagonal=d))
            self.assertEqual(c.diag_offset, off, d)
            self.assertEqual(c.valid_keys, [9, 2, 0])
        c = Case(dict(base, diagonal="explicit", diagonal_offset=-3))
        self.assertEqual(c.diag_offset, [-3, -3, -3])
        c = Case({"batch": 2, "q_len": 3, "kv_len": 7, "diagonal": "bottom_right_valid"})
        self.assertEqual((c.valid_keys, c.diag_offset), ([7, 7], [4, 4]))
        c = Case({"batch": 2}, {"diag_offset": [1, 2], "valid_keys": [3, 4]})
        self.assertEqual((c.diag_offset, c.valid_keys), ([1, 2], [3, 4]))

    def test_fields(self):
        c = Case({"dropout_seed": "18446744073709551615", "dropout_p": 0.25, "window": [3, -1], "softcap": 30,
                  "additive_mask": {"full_dims": "bk", "rank": 4}, "bool_mask": None, "causal": True})
        self.assertEqual(c.dropout_seed, 2 ** 64 - 1)
        self.assertEqual((c.dropout_p, c.window, c.softcap, c.causal), (0.25, (3, -1), 30.0, True))
        self.assertEqual(c.amask["full_dims"], "bk")
        self.assertIsNone(c.bmask)
        self.assertEqual(Case({"dropout_seed": 12}).dropout_seed, 12)

    def test_packed_specs(self):
        c = Case({"q": {"layout": "qkv_bsh3d", "perm": 5, "pad": 2}, "k": {"layout": "bhsd", "seed": 4}})
        self.assertTrue(c.packed)
        self.assertEqual(c.layouts, {"q": "qkv_bsh3d", "k": "qkv_bsh3d", "v": "qkv_bsh3d"})
        self.assertEqual((c.specs["k"]["perm"], c.specs["v"]["pad"], c.specs["k"]["seed"]), (5, 2, 4))
        c = Case({"q": {"layout": "bshd"}, "k": {"layout": "sbhd"}})
        self.assertFalse(c.packed)
        self.assertEqual(c.layouts, {"q": "bshd", "k": "sbhd", "v": "bhsd"})


class Keys(unittest.TestCase):
    def test_key_fields(self):
        base = {"batch": 2, "q_heads": 4, "kv_heads": 2, "q_len": 3, "kv_len": 5, "head_dim": 8, "dtype": "f16",
                "scale": 0.5, "softcap": 0, "causal": True, "dropout_p": 0.1, "dropout_seed": 1,
                "additive_mask": {"full_dims": "qk", "rank": 2, "dtype": "f32", "seed": 1},
                "q": {"layout": "bshd", "seed": 1}, "k": {"layout": "bhsd", "seed": 2}, "v": {"seed": 3}}
        tensors = [{"name": "q", "dtype": "f16", "shape": [2, 3, 4, 8], "strides": [192, 64, 16, 2], "offset": 0}]
        c0 = Case(base, None, tensors)
        self.assertEqual(c0.key(), c0.key("shapes", "dtype", "layouts", "masks", "causal", "scale", "softcap",
                                          "dropout"))
        hash(c0.key())

        def changed(**kw):
            d = dict(base)
            d.update(kw)
            return Case(d, None, tensors)

        # values, seeds and mask contents are outside every key
        c = changed(dropout_seed=99, q={"layout": "bshd", "seed": 7},
                    additive_mask={"full_dims": "qk", "rank": 2, "dtype": "f32", "seed": 5})
        self.assertEqual(c.key(), c0.key())
        cases = {"shapes": changed(q_len=4), "dtype": changed(dtype="bf16"),
                 "layouts": changed(k={"layout": "bshd"}), "masks": changed(additive_mask=None),
                 "causal": changed(causal=False), "scale": changed(scale=0.25), "softcap": changed(softcap=5.0),
                 "dropout": changed(dropout_p=0.2)}
        for field, c in cases.items():
            self.assertNotEqual(c.key(field), c0.key(field), field)
            others = [f for f in cases if f != field]
            self.assertEqual(c.key(*others), c0.key(*others), field)
        # strides are part of "layouts"
        t2 = [dict(tensors[0], strides=[384, 128, 32, 2])]
        self.assertNotEqual(Case(base, None, t2).key("layouts"), c0.key("layouts"))
        self.assertEqual(Case(base, None, t2).key("shapes", "masks"), c0.key("shapes", "masks"))
        with self.assertRaises(ValueError):
            c0.key("values")

    def test_required_caps(self):
        """The caps attnfuzz wants declared before it sends a case (af_case_required_caps)."""
        plain = {"batch": 1, "q_heads": 2, "q_len": 3, "head_dim": 4, "dtype": "f16"}
        self.assertEqual(Case(plain).required_caps(), {"f16"})
        c = Case(dict(plain, kv_heads=1, kv_len=5, v_head_dim=2, scale=0.5, softcap=3.0, causal=True,
                      key_padding=[4], window=[2, -1], dropout_p=0.1, allow_tf32=True,
                      additive_mask={"dtype": "f32"}, bool_mask={"rank": 2}))
        self.assertEqual(c.required_caps(), {"f16", "tf32", "gqa", "cross", "dv", "scale", "softcap", "causal",
                                             "padding", "window", "dropout", "amask", "mask_dtype", "bmask"})
        self.assertEqual(Case(dict(plain, additive_mask={"dtype": "f16"})).required_caps(), {"f16", "amask"})
        for strided in ({"k": {"pad": 1}}, {"v": {"perm": 2}}, {"q": {"broadcast": "batch"}},
                        {"bool_mask": {"expanded": True}}):
            self.assertIn("strided", Case(dict(plain, **strided)).required_caps(), strided)
        # a packed buffer's strides are q's: k and v carry none of their own
        self.assertNotIn("strided", Case(dict(plain, q={"layout": "qkv_bs3hd"})).required_caps())


if __name__ == "__main__":
    unittest.main()
