"""attnfuzz.triage on hand-made bundles whose answer is known: the output of a seeded bug
(causal mask on the wrong diagonal) is explained by no model and is a real bug; an output
equal to the reference of flushed inputs is the DAZ precision model; a fully masked row
given the finite-bias softmax by a backend that declares masked rows as the mean (a finite
bias) is a convention, and the same bias changing a row with live
keys is a leak (a real bug). TF32 rounding and the judge against hand values; with a built
attnfuzz, a built-in mutant's bundle (real bug, the built-ins pass it, the causal mask
needed), and a corpus bundle's own entry matches and --blind leaves it out."""

import json
import os
import shutil
import tempfile
import unittest

import numpy as np

import _util  # noqa: F401

from attnfuzz import bundle, case as case_mod, known, reference, triage

RNG = np.random.default_rng(7)


def make_case(**over):
    c = {"batch": 1, "q_heads": 2, "kv_heads": 2, "q_len": 4, "kv_len": 4, "head_dim": 8, "v_head_dim": 8,
         "dtype": "f32", "allow_tf32": False, "scale": None, "scale_placement": "scores", "softcap": 0,
         "causal": False, "diagonal": "bottom_right", "diagonal_offset": 0, "key_padding": None,
         "window": [-1, -1], "additive_mask": None, "bool_mask": None, "dropout_p": 0, "dropout_seed": 0}
    c.update(over)
    return c


def write_bundle(root, name, case, q, k, v, out, atol, rtol=1e-6, conventions=None, bool_mask=None,
                 kind="diverge", who="mutant:test"):
    """A bundle as attnfuzz writes one (docs/case-json.md): the reference computed here."""
    d = os.path.join(root, name)
    os.makedirs(d)
    c = case_mod.Case(case)
    ref = reference.attention(c, q, k, v, bool_mask=bool_mask)
    arrays = {"q": q, "k": k, "v": v, "ref": ref, "out.test": out.astype(np.float32)}
    if bool_mask is not None:
        arrays["bool_mask"] = bool_mask
    for key, a in arrays.items():
        bundle.save_array(os.path.join(d, key + bundle.SUFFIX), a)
    err = np.where(np.isfinite(out) & np.isfinite(ref), np.abs(out - ref), 0.0)
    worst = [int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape)]
    meta = {"format": "attnfuzz-bundle", "version": 1, "kind": kind, "signature": "0" * 16, "who": who,
            "case": case, "features": "f32", "tolerance": {"atol": atol, "rtol": rtol, "fudge": 4, "honest": False},
            "backends": [{"name": who, "verdict": kind, "output": "out.test.npy.zst",
                          "metrics": {"worst_index": worst, "max_abs": float(err.max())},
                          "conventions": conventions or {"masked_rows": "zero"}}]}
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(meta, f)
    return d


class Models(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="test-triage-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_triage(self, d):
        return triage.triage(d, [], share=False)

    def test_wrong_diagonal_is_a_real_bug(self):
        case = make_case(causal=True)
        q, k, v = (RNG.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
        # the seeded bug: the causal mask one key too far (every query sees one more key)
        bm = np.tril(np.ones((4, 4), dtype=bool), 1)[None, None]
        wrong = reference.attention(case_mod.Case(make_case()), q, k, v, bool_mask=bm)
        d = write_bundle(self.tmp, "mutant", case, q, k, v, wrong, atol=1e-5)
        r = self.run_triage(d)
        self.assertEqual(r["verdict"]["class"], "real_bug")
        self.assertIsNone(r["best_model"])
        self.assertGreater(r["models"][0]["fail"], 0)

    def test_flushed_inputs_are_precision(self):
        case = make_case()
        q, k = (RNG.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(2))
        v = RNG.standard_normal((1, 2, 4, 8)).astype(np.float32)
        v[:, :, :, :4] = (RNG.uniform(0.2, 1.0, (1, 2, 4, 4)) * 1e-39).astype(np.float32)   # f32 subnormals
        c = case_mod.Case(case)
        out = reference.attention(c, q, k, np.where(np.abs(v) < 2.0 ** -126, 0.0, v))
        self.assertTrue(np.all(out[..., :4] == 0.0))
        d = write_bundle(self.tmp, "daz", case, q, k, v, out, atol=1e-45)
        r = self.run_triage(d)
        self.assertEqual(r["best_model"], "daz_inputs")
        self.assertEqual(r["verdict"]["class"], "precision")
        self.assertGreaterEqual(r["verdict"]["confidence"], 0.9)   # exact

    def test_products_in_f16_are_precision(self):
        # query 0 against key 0: products +-300 * 300 = +-90000, each +-Inf in f16, their sum
        # NaN, where the exact score is 0; the other rows' products fit. An implementation
        # that multiplies in f16 gives NaN in query 0's rows only.
        case = make_case(dtype="f16")
        q = np.full((1, 2, 4, 8), 0.5, dtype=np.float32)
        q[:, :, 0, :] = 300.0
        k = np.full((1, 2, 4, 8), 0.25, dtype=np.float32)
        k[:, :, 0, :] = np.where(np.arange(8) % 2, -300.0, 300.0)
        v = RNG.standard_normal((1, 2, 4, 8)).astype(np.float16).astype(np.float32)
        out = reference.attention(case_mod.Case(case), q, k, v)
        out[:, :, 0, :] = np.nan
        d = write_bundle(self.tmp, "products", case, q, k, v, out, atol=1e-3, rtol=1e-3, kind="nan_mismatch")
        r = self.run_triage(d)
        rows = {m["name"]: m for m in r["models"]}
        self.assertEqual(rows["reference"]["fail"], 16)                # 2 heads x 8 of query 0
        self.assertEqual(rows["qk_dtype"]["fail"], 16)                 # the sum, 0, fits f16
        self.assertEqual(rows["qk_products_dtype"]["fail"], 0)
        self.assertEqual(r["best_model"], "qk_products_dtype")
        self.assertEqual(r["verdict"]["class"], "precision")

    def _masked(self):
        q, k, v = (RNG.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
        bm = np.ones((1, 2, 4, 4), dtype=bool)
        bm[:, :, 1, :] = False            # row 1 fully masked
        bm[:, :, 2, 0] = False            # row 2: key 0 masked, three live
        return q, k, v, bm

    def test_finite_bias_in_a_masked_row_is_a_convention(self):
        case = make_case(bool_mask={"rank": 4, "full_dims": "bhqk"})
        q, k, v, bm = self._masked()
        c = case_mod.Case(case)
        # a bias of -0.7 * f32 max at masked keys: row 1 the mean of V, row 2 as the reference
        scores = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * c.scale
        s = np.where(bm, scores, -0.7 * float(np.finfo(np.float32).max))
        w = np.exp(s - s.max(-1, keepdims=True))
        out = (w / w.sum(-1, keepdims=True)) @ v.astype(np.float64)
        d = write_bundle(self.tmp, "bias", case, q, k, v, out, atol=1e-5, bool_mask=bm,
                         conventions={"masked_rows": "mean"})
        r = self.run_triage(d)
        self.assertEqual(r["verdict"]["class"], "convention")
        byname = {m["name"]: m for m in r["models"]}
        self.assertEqual(byname["bias_replace_jax_large_negative"]["fail"], 0)
        self.assertIn(r["best_model"], ("masked_rows_mean", "bias_replace_jax_large_negative"))

    def test_finite_bias_in_a_live_row_is_a_leak(self):
        case = make_case(bool_mask={"rank": 4, "full_dims": "bhqk"})
        q, k, v, bm = self._masked()
        q[:, :, 2] *= 0.0
        k[:, :, 0] = 0.0
        q[:, :, 2, 0], k[:, :, 0, 0] = 300.0, 300.0     # the masked key 0 of row 2 scores 31820
        c = case_mod.Case(case)
        scores = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * c.scale
        s = np.where(bm, scores, scores - 1e4)          # a bias of -1e4 added: the masked key wins
        w = np.exp(s - s.max(-1, keepdims=True))
        out = (w / w.sum(-1, keepdims=True)) @ v.astype(np.float64)
        d = write_bundle(self.tmp, "leak", case, q, k, v, out, atol=1e-5, bool_mask=bm)
        r = self.run_triage(d)
        self.assertTrue(r["best_model"].startswith("bias_add_"), r["best_model"])
        self.assertEqual(r["verdict"]["class"], "real_bug")
        self.assertIn("leak", r["verdict"]["evidence"])

    def test_draft_entry_and_page(self):
        case = make_case(causal=True, dtype="f16")
        q, k, v = (RNG.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
        out = np.zeros((1, 2, 4, 8))
        d = write_bundle(self.tmp, "zeros", case, q, k, v, out, atol=1e-3, who="target:ort/attention")
        r = triage.triage(d, [], share=False, out_dir=os.path.join(self.tmp, "out"))
        e = r["draft_entry"]
        self.assertEqual(e["backends"], ["target:ort/attention"])
        self.assertEqual(e["kinds"], ["diverge"])
        self.assertIn("dtype == f16", e["when"])
        self.assertIn("causal", e["when"])
        with open(r["upstream_page"]) as f:
            page = f.read()
        self.assertIn("## Repro", page)
        self.assertIn("Expected against actual", page)


class Numbers(unittest.TestCase):
    def test_tf32(self):
        x = np.array([1.0 + 2.0 ** -11, 1.0 + 2.0 ** -10, 1.0 + 3 * 2.0 ** -11, np.inf])
        self.assertEqual(list(triage._tf32(x)), [1.0, 1.0 + 2.0 ** -10, 1.0 + 2.0 ** -9, np.inf])

    def test_judge(self):
        ref = np.array([1.0, 0.0, np.nan, 2.0])
        out = np.array([1.0005, 0.0, np.nan, np.inf])
        j = triage.judge(out, ref, 1e-3, 0.0)
        self.assertEqual((j["fail"], j["class"]), (1, 1))
        self.assertFalse(j["exact"])
        self.assertTrue(triage.judge(ref, ref, 0.0, 0.0)["exact"])


class Mutant(unittest.TestCase):
    def test_builtin_mutant_bundle(self):
        exe = triage.attnfuzz_exe()
        if not exe:
            self.skipTest("no built attnfuzz (build/attnfuzz)")
        import subprocess
        tmp = tempfile.mkdtemp(prefix="test-triage-mutant-")
        try:
            subprocess.run([exe, "fuzz", "--backend", "mutant:causal_top_left", "--max-findings", "1", "--time", "60",
                            "--no-known", "--crashes", tmp], capture_output=True, check=False, timeout=300)
            found = [os.path.join(tmp, n) for n in os.listdir(tmp) if n.startswith("diverge-")]
            self.assertTrue(found, "the mutant campaign stored no bundle")
            r = triage.triage(found[0], [], share=True, timeout=20, share_with=["explicit", "fused"])
            self.assertEqual(r["verdict"]["class"], "real_bug")
            self.assertIsNone(r["best_model"])
            self.assertEqual([s["result"] for s in r["sharing"]], ["passes", "passes"])
            causal = [p for p in r["sensitivity"] if p["field"] == "causal"]
            self.assertEqual([p["keeps"] for p in causal], [False])   # the bug is in the causal mask
        finally:
            shutil.rmtree(tmp)


class CheckKinds(unittest.TestCase):
    """The kinds beyond one output: an LSE in base 2 named by its model, a run-to-run
    difference a real bug by its kind."""

    def _found(self, backend, *extra):
        exe = triage.attnfuzz_exe()
        if not exe:
            self.skipTest("no built attnfuzz (build/attnfuzz)")
        import subprocess
        tmp = tempfile.mkdtemp(prefix="test-triage-kinds-")
        self.addCleanup(shutil.rmtree, tmp)
        subprocess.run([exe, "fuzz", "--backend", backend, "--max-findings", "1", "--time", "60", "--no-known",
                        "--crashes", tmp] + list(extra), capture_output=True, check=False, timeout=300)
        found = [os.path.join(tmp, n) for n in os.listdir(tmp) if not n.startswith(".")]
        self.assertTrue(found, "the mutant campaign stored no bundle")
        return triage.triage(found[0], [], share=False)

    def test_lse_base2(self):
        r = self._found("mutant:lse_base2")
        self.assertEqual((r["kind"], r["tensor"]), ("lse_diverge", "lse"))
        self.assertEqual(r["best_model"], "lse_base2")
        self.assertEqual(r["verdict"]["class"], "real_bug")

    def test_nondeterministic(self):
        r = self._found("mutant:racy_sum", "--determinism", "0.5")
        self.assertEqual(r["kind"], "nondeterministic")
        self.assertEqual(r["verdict"]["class"], "real_bug")
        self.assertIsNone(r["best_model"])


class Gradients(unittest.TestCase):
    """A dV finding on a GQA case with one key: every weight is 1, so dV is the sum of the
    dO rows, written out here by hand. Four f16 rows near 65504 whose per-head sums pass
    65520: the heads' sums added in f16 overflow where the whole sum does not."""
    DO = np.array([[24624, 17744, -41248, -60480, 33216, 34400, -40736, 45120],
                   [-18944, 61248, 54240, -63136, 34272, -25488, 33280, 53408],
                   [43584, -30480, 52448, 47488, -61504, -29872, 21968, -46880],
                   [18512, 29824, -43584, 48000, 23664, 23536, -22064, -39648]], np.float64)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="test-triage-grad-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def _bundle(self, name, dv):
        case = make_case(q_heads=2, kv_heads=1, q_len=2, kv_len=1, dtype="f16",
                         backward={"grads": ["dv"], "do": {"dist": "near_overflow", "seed": 7}})
        q = RNG.standard_normal((1, 2, 2, 8)).astype(np.float16).astype(np.float32)
        k, v = (RNG.standard_normal((1, 1, 1, 8)).astype(np.float16).astype(np.float32) for _ in range(2))
        d = write_bundle(self.tmp, name, case, q, k, v, reference.attention(case_mod.Case(case), q, k, v), 1e-3)
        ref_dv = self.DO.sum(axis=0).reshape(1, 1, 1, 8)              # one key: dV = the sum of the dO rows
        for key, a in (("do", self.DO.reshape(1, 2, 2, 8).astype(np.float32)), ("ref_dv", ref_dv),
                       ("dv.test", dv.reshape(1, 1, 1, 8).astype(np.float32))):
            bundle.save_array(os.path.join(d, key + bundle.SUFFIX), a)
        with open(os.path.join(d, "case.json")) as f:
            meta = json.load(f)
        err = np.where(np.isfinite(dv), np.abs(dv - ref_dv.ravel()), np.inf)
        meta.update(kind="inf_mismatch", tensor="dv")
        meta["backends"][0].update(verdict="ok", grads={"dv": {
            "output": "dv.test" + bundle.SUFFIX, "verdict": "inf_mismatch",
            "metrics": {"worst_index": [0, 0, 0, int(np.argmax(err))], "n_inf": int((~np.isfinite(dv)).sum())},
            "tolerance": {"atol": 1.0, "rtol": 1e-3, "fudge": 2, "honest": False}}})
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(meta, f)
        return d

    def test_heads_summed_in_f16_is_precision(self):
        heads = self.DO.reshape(2, 2, 8).sum(axis=1)                  # each head's exact sum
        with np.errstate(over="ignore", invalid="ignore"):
            got = (heads[0].astype(np.float16) + heads[1]).astype(np.float16).astype(np.float64)
        self.assertEqual(int((~np.isfinite(got) & (np.abs(self.DO.sum(0)) <= 65504)).sum()), 3)
        r = triage.triage(self._bundle("inf_mismatch-grad", got), [], share=False)
        rows = {m["name"]: m for m in r["models"]}
        self.assertEqual(rows["reference"]["fail"], 5)               # 3 +-Inf where representable, 2 beyond 65504
        self.assertEqual(rows["grad_group_sum_dtype"]["fail"], 0)
        self.assertTrue(rows["grad_group_sum_dtype"]["exact"])
        self.assertEqual(r["best_model"], "grad_group_sum_dtype")
        self.assertEqual(r["verdict"]["class"], "precision")

    def test_a_wrong_gradient_is_not_explained(self):
        wrong = self.DO[:2].sum(axis=0)                              # one head's rows only: a dropped head
        r = triage.triage(self._bundle("diverge-grad", wrong), [], share=False)
        rows = {m["name"]: m for m in r["models"]}
        self.assertGreater(rows["grad_group_sum_dtype"]["fail"], 0)
        self.assertIsNone(r["best_model"])
        self.assertEqual(r["verdict"]["class"], "real_bug")


class CachedVersions(unittest.TestCase):
    """versions_showing over a hand-made bisect cache: three versions of a one-file package
    whose VERSION the script reads; the script exits 1 (the bug) from 2.0 on. The verdicts
    are written here from that rule, not from the code."""

    def test_each_cached_version_run(self):
        tmp = tempfile.mkdtemp(prefix="test-triage-cache-")
        self.addCleanup(shutil.rmtree, tmp)
        for v in ("10.0", "2.0", "1.0"):           # listed out of order: release order is expected
            d = os.path.join(tmp, "bisect", "fakepkg", v)
            os.makedirs(d)
            with open(os.path.join(d, "fakepkg.py"), "w") as f:
                f.write("VERSION = %r\n" % v)
            open(os.path.join(d, ".attnfuzz-installed"), "w").close()
        os.makedirs(os.path.join(tmp, "bisect", "fakepkg", "3.0"))   # not marked installed: left out
        script = os.path.join(tmp, "repro.py")
        with open(script, "w") as f:
            f.write("import sys, fakepkg\nbug = int(fakepkg.VERSION.split('.')[0]) >= 2\n"
                    "print('BUG' if bug else 'FIXED', fakepkg.VERSION)\nsys.exit(1 if bug else 0)\n")
        old = os.environ.get("ATTNFUZZ_CACHE")
        os.environ["ATTNFUZZ_CACHE"] = tmp
        try:
            rows = triage.versions_showing(tmp, package="fakepkg", script=script, timeout=60)
        finally:
            if old is None:
                del os.environ["ATTNFUZZ_CACHE"]
            else:
                os.environ["ATTNFUZZ_CACHE"] = old
        self.assertEqual([(r["version"], r["verdict"], r["line"]) for r in rows],
                         [("1.0", "good", "FIXED 1.0"), ("2.0", "bug", "BUG 2.0"), ("10.0", "bug", "BUG 10.0")])


class Corpus(unittest.TestCase):
    BUNDLE = os.path.join(known.ROOT, "corpus", "findings", "ort", "bundles", "diverge-4e91112d4929395a")

    def test_own_entry_and_blind(self):
        if not triage.attnfuzz_exe():
            self.skipTest("no built attnfuzz (build/attnfuzz)")
        entries = known.load()
        r = triage.triage(self.BUNDLE, entries, share=False)
        self.assertEqual(r["known_match"], "ort-attention-mask-lowest-drops-key")
        self.assertEqual(r["verdict"]["class"], "real_bug")
        self.assertEqual(r["versions"], {"target:ort/attention": {"version": "1.32.0"}})   # its case.json
        b = triage.triage(self.BUNDLE, entries, share=False, blind=True)
        self.assertEqual(b["left_out"], ["ort-attention-mask-lowest-drops-key"])
        self.assertNotEqual(b["known_match"], "ort-attention-mask-lowest-drops-key")


if __name__ == "__main__":
    unittest.main()
