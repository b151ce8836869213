"""layouts.to_bhsd / from_bhsd against hand indexing, for all eight layouts, packed ones
included, with permuted, padded and stride-0 strides."""

import itertools
import unittest

import _util  # noqa: F401
import numpy as np

from attnfuzz import layouts, testing

B, H, S, D = 2, 3, 4, 5


def canon_value(b, h, s, d):
    return 1000 * b + 100 * h + 10 * s + d


def strided(shape, strides_order, pad):
    """An array of shape whose memory order is strides_order (outermost first), with pad
    elements after each innermost row, NaN everywhere first."""
    stride, strides = 8, [0] * len(shape)
    for k, dim in enumerate(reversed(strides_order)):
        strides[dim] = stride
        stride *= shape[dim] + (pad if k == 0 else 0)
    span = 8 + sum((n - 1) * st for n, st in zip(shape, strides))
    buf = np.full(span // 8, np.nan)
    return np.ndarray(shape, np.float64, buffer=buf, strides=strides)


# physical index of canonical (b, h, s, d), by hand, per unpacked layout
HAND = {
    "bhsd": ((B, H, S, D), lambda b, h, s, d: (b, h, s, d)),
    "bshd": ((B, S, H, D), lambda b, h, s, d: (b, s, h, d)),
    "sbhd": ((S, B, H, D), lambda b, h, s, d: (s, b, h, d)),
    "bsd": ((B, S, H * D), lambda b, h, s, d: (b, s, h * D + d)),
    "channels_first": ((B, H * D, S), lambda b, h, s, d: (b, h * D + d, s)),
}
# packed: the whole buffer's index of (which, b, h, s, d) and the per-tensor view
PACKED = {
    "qkv_bs3hd": ((B, S, 3, H, D), lambda w, b, h, s, d: (b, s, w, h, d), lambda x, w: x[:, :, w]),
    "qkv_bsh3d": ((B, S, H, 3, D), lambda w, b, h, s, d: (b, s, h, w, d), lambda x, w: x[:, :, :, w]),
    "qkv_channels_first": ((B, 3 * H * D, S), lambda w, b, h, s, d: (b, w * H * D + h * D + d, s),
                           lambda x, w: x[:, w * H * D:(w + 1) * H * D, :]),
}


def all_index():
    return itertools.product(range(B), range(H), range(S), range(D))


class ToBhsd(unittest.TestCase):
    def test_unpacked(self):
        for layout, (shape, idx) in HAND.items():
            orders = list(itertools.permutations(range(len(shape))))
            for order, pad in ((orders[0], 0), (orders[-1], 3), (orders[len(orders) // 2], 1)):
                x = strided(shape, order, pad)
                for b, h, s, d in all_index():
                    x[idx(b, h, s, d)] = canon_value(b, h, s, d)
                y = layouts.to_bhsd(x, layout, H, D)
                self.assertEqual(y.shape, (B, H, S, D), layout)
                self.assertTrue(np.shares_memory(x, y), layout)
                for b, h, s, d in all_index():
                    self.assertEqual(y[b, h, s, d], canon_value(b, h, s, d), (layout, order, pad))

    def test_packed(self):
        for layout, (shape, idx, view) in PACKED.items():
            for order, pad in ((tuple(range(len(shape))), 0), (tuple(reversed(range(len(shape)))), 2)):
                x = strided(shape, order, pad)
                for w in range(3):
                    for b, h, s, d in all_index():
                        x[idx(w, b, h, s, d)] = canon_value(b, h, s, d) + 10000 * w
                for w in range(3):
                    y = layouts.to_bhsd(view(x, w), layout, H, D)
                    self.assertTrue(np.shares_memory(x, y))
                    for b, h, s, d in all_index():
                        self.assertEqual(y[b, h, s, d], canon_value(b, h, s, d) + 10000 * w, (layout, w))

    def test_stride0_broadcast(self):
        # bshd with the batch dim broadcast (stride 0) and bhsd with the heads dim broadcast
        row = np.arange(S * H * D, dtype=np.float64).reshape(1, S, H, D)
        x = np.broadcast_to(row, (B, S, H, D))
        y = layouts.to_bhsd(x, "bshd", H, D)
        self.assertEqual(y.strides[0], 0)
        for b, h, s, d in all_index():
            self.assertEqual(y[b, h, s, d], row[0, s, h, d])
        x = np.broadcast_to(np.arange(B * S * D, dtype=np.float64).reshape(B, 1, S, D), (B, H, S, D))
        y = layouts.to_bhsd(x, "bhsd", H, D)
        self.assertEqual(y.strides[1], 0)

    def test_strided_empty_matches_the_c_rule(self):
        # layout.c af_strides_for: perm 0 is row-major, the last Lehmer code reverses the
        # memory order, pad follows the innermost dim, broadcast dims get stride 0
        x = testing.strided_empty((2, 3, 4, 5), np.float32, perm=0, pad=0)
        self.assertEqual(x.strides, (240, 80, 20, 4))
        x = testing.strided_empty((2, 3, 4, 5), np.float32, perm=23, pad=1)
        self.assertEqual(x.strides, (4, 4 * (2 + 1), 12 * 3, 36 * 4))
        x = testing.strided_empty((2, 3, 4, 5), np.float32, perm=1, pad=2, bcast_dims=(0,))  # order 0 1 3 2
        self.assertEqual(x.strides, (0, 4 * 5 * 6, 4, 24))
        self.assertEqual(testing.lehmer_order(1, 4), [0, 1, 3, 2])
        self.assertEqual(testing.lehmer_order(119, 5), [4, 3, 2, 1, 0])


class FromBhsd(unittest.TestCase):
    def test_outputs(self):
        x = np.empty((B, H, S, D))
        for b, h, s, d in all_index():
            x[b, h, s, d] = canon_value(b, h, s, d)
        for layout, (shape, idx) in HAND.items():
            y = layouts.from_bhsd(x, layout)
            self.assertEqual(y.shape, shape, layout)
            self.assertEqual(layouts.out_shape(layout, B, H, S, D), shape)
            for b, h, s, d in all_index():
                self.assertEqual(y[idx(b, h, s, d)], canon_value(b, h, s, d), layout)
            back = layouts.to_bhsd(y, layout, H, D)
            self.assertTrue(np.array_equal(back, x))
        with self.assertRaises(ValueError):
            layouts.from_bhsd(x, "qkv_bs3hd")
        with self.assertRaises(ValueError):
            layouts.to_bhsd(np.empty((B, S, H * D + 1)), "bsd", H, D)


if __name__ == "__main__":
    unittest.main()
