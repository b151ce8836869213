"""Philox4x32-10 against the Random123 known-answer vectors (kat_vectors), and dropout keep
bits derived by hand from them (docs/design.md section 2: keep = w[j % 4] * 2^-32 >= p, counter
{j / 4, i, h, b}, key {seed & 0xffffffff, seed >> 32})."""

import unittest

import _util  # noqa: F401
import numpy as np

from attnfuzz import rng

KAT = [  # Random123 kat_vectors, philox4x32 10 rounds: counter, key, output
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


class Philox(unittest.TestCase):
    def test_known_answers(self):
        for ctr, key, want in KAT:
            got = rng.philox4x32(ctr, key)
            self.assertEqual(tuple(int(w) for w in got), want)

    def test_vectorized_matches_scalar(self):
        c0 = np.array([0, 0xFFFFFFFF, 0x243F6A88], dtype=np.uint64)
        c1 = np.array([0, 0xFFFFFFFF, 0x85A308D3], dtype=np.uint64)
        got = rng.philox4x32((c0, c1, 0, 0), (0, 0))
        for n in range(3):
            one = rng.philox4x32((int(c0[n]), int(c1[n]), 0, 0), (0, 0))
            self.assertEqual([int(g[n]) for g in got], [int(x) for x in one])


class Dropout(unittest.TestCase):
    def test_threshold(self):
        self.assertEqual(rng.dropout_threshold(0.0), 0)
        self.assertEqual(rng.dropout_threshold(float("nan")), 0)
        self.assertEqual(rng.dropout_threshold(0.5), 0x80000000)
        self.assertEqual(rng.dropout_threshold(0.25), 0x40000000)
        self.assertEqual(rng.dropout_threshold(2.0 ** -32), 1)
        self.assertEqual(rng.dropout_threshold(0.4), 0x66666667)  # ceil(0.4 * 2^32)
        self.assertEqual(rng.dropout_threshold(1.0), 1 << 32)

    def test_keep_bits_by_hand(self):
        # seed 0, (b, h, i) = 0, j = 0..3: counter (0, 0, 0, 0), key (0, 0): the first KAT
        # words 0x6627e8d5 0xe169c58d 0xbc57ac4c 0x9b00dbd8
        k = rng.dropout_keep(0, 0.5, 1, 1, 1, 4)
        self.assertEqual(k.tolist(), [[[[False, True, True, True]]]])
        k = rng.dropout_keep(0, 0.75, 1, 1, 1, 4)  # threshold 0xc0000000
        self.assertEqual(k[0, 0, 0].tolist(), [False, True, False, False])
        k = rng.dropout_keep(0, 0.4, 1, 1, 1, 3)  # 0x66666667 > 0x6627e8d5; Sk not a multiple of 4
        self.assertEqual(k[0, 0, 0].tolist(), [False, True, True])
        # seed (0x299f31d0 << 32) | 0xa4093822 is the third KAT's key
        seed = (0x299F31D0 << 32) | 0xA4093822
        w = rng.dropout_words(seed, 1, 1, 1, 4)[0, 0, 0]
        want = rng.philox4x32((0, 0, 0, 0), (0xA4093822, 0x299F31D0))
        self.assertEqual([int(x) for x in w], [int(x) for x in want])

    def test_counter_layout(self):
        # word (b, h, i, j) is word j % 4 of philox((j / 4, i, h, b), key)
        seed = 0x123456789
        B, Hq, Sq, Sk = 2, 3, 2, 9
        w = rng.dropout_words(seed, B, Hq, Sq, Sk)
        for b, h, i, j in [(1, 2, 1, 8), (0, 1, 1, 5), (1, 0, 0, 3), (0, 0, 1, 4)]:
            blk = rng.philox4x32((j // 4, i, h, b), (seed & 0xFFFFFFFF, seed >> 32))
            self.assertEqual(int(w[b, h, i, j]), int(blk[j % 4]), (b, h, i, j))
        p = 0.3
        thr = rng.dropout_threshold(p)
        self.assertTrue(np.array_equal(rng.dropout_keep(seed, p, B, Hq, Sq, Sk), w >= thr))

    def test_extremes(self):
        self.assertTrue(rng.dropout_keep(5, 0.0, 2, 2, 2, 2).all())
        self.assertFalse(rng.dropout_keep(5, 1.0, 2, 2, 2, 2).any())
        k = rng.dropout_keep(7, 0.5, 2, 4, 16, 64)
        self.assertTrue(0.4 < k.mean() < 0.6)


if __name__ == "__main__":
    unittest.main()
