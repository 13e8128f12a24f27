#!/usr/bin/env python3
"""Tests of tools/compare_dumps.py (the comparison core) and tools/first_divergence.py (the report), standard
library only: synthetic dump directories written with compare_dumps' own .npy writer, a perturbed layer that the
report must name first, forward (not alphabetical) order, tolerances, skips, shape and NaN mismatches; then, with
a tern binary (TERN_BINARY) and the fixtures (TERN_FIXTURES_DIR), first_divergence.py end to end against a tern
dump used as the reference (--ref-dump), intact and with layer 3's attn_output perturbed. numpy, when present,
is only used to cross-check the .npy reader. Run by tests/shell/first_divergence.sh."""
import io
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import compare_dumps as cd  # noqa: E402

FIRST_DIVERGENCE = os.path.join(ROOT, "tools", "first_divergence.py")
COMPARE = os.path.join(ROOT, "tools", "compare_dumps.py")
N_LAYER, T, D = 12, 3, 8
LAYER_OPS = ["attn_norm", "attn_output", "attn_residual", "attn_post_norm", "ffn_out", "l_out"]


def synthetic_dump(d, seed=1):
    """A dump of a 12-layer model: inp_embd, per layer LAYER_OPS [T, D], result_norm, result_output [T, 16]."""
    os.makedirs(d, exist_ok=True)
    rng = random.Random(seed)

    def put(name, shape):
        n = 1
        for s in shape:
            n *= s
        cd.write_npy(os.path.join(d, name + ".npy"), shape, [rng.uniform(-2, 2) for _ in range(n)])

    put("inp_embd", (T, D))
    for il in range(N_LAYER):
        for op in LAYER_OPS:
            put(f"{op}-{il}", (T, D))
    put("result_norm", (T, D))
    put("result_output", (T, 16))


def perturb(d, name, rel=1e-2, value=None):
    path = os.path.join(d, name + ".npy")
    shape, vals = cd.read_npy(path)
    vals = [v * (1 + rel) for v in vals]
    if value is not None:
        vals[1] = value
    cd.write_npy(path, shape, vals)


def run(cmd):
    r = subprocess.run([sys.executable] + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


class NpyTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-fd-test-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_roundtrip(self):
        for shape in [(5,), (2, 3), (1, 2, 3), (3, 1, 4, 2)]:
            n = math.prod(shape)
            vals = [i * 0.25 - 1 for i in range(n)]
            p = os.path.join(self.dir, "t.npy")
            cd.write_npy(p, shape, vals)
            s, v = cd.read_npy(p)
            self.assertEqual(s, shape)
            self.assertEqual(list(v), vals)
            with open(p, "rb") as f:
                head = f.read(10)
            self.assertEqual((10 + int.from_bytes(head[8:10], "little")) % 64, 0)  # aligned header, as numpy's

    def test_rejects_bad_files(self):
        p = os.path.join(self.dir, "bad.npy")
        with open(p, "wb") as f:
            f.write(b"not an npy file at all")
        with self.assertRaises(ValueError):
            cd.read_npy(p)
        cd.write_npy(p, (4,), [1, 2, 3, 4])
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - 4)  # one value short
        with self.assertRaises(ValueError):
            cd.read_npy(p)

    def test_matches_numpy(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy not installed (the reader itself needs none)")
        a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
        for dt in (np.float32, np.float64, np.float16):
            p = os.path.join(self.dir, "np.npy")
            np.save(p, a.astype(dt))
            s, v = cd.read_npy(p)
            self.assertEqual(s, (2, 3, 4))
            self.assertTrue(np.allclose(np.array(v, dtype=np.float64), a.astype(dt).astype(np.float64).ravel()))
        p = os.path.join(self.dir, "ours.npy")
        cd.write_npy(p, (2, 3, 4), a.ravel().tolist())
        self.assertTrue(np.array_equal(np.load(p), a))


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tern-fd-test-")
        self.a, self.b = os.path.join(self.dir, "ref"), os.path.join(self.dir, "tern")
        synthetic_dump(self.a)
        synthetic_dump(self.b)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def report(self, *extra):
        out = io.StringIO()
        with redirect_stdout(out):
            code = cd.main([self.a, self.b, "--pure-python", *extra])
        return code, out.getvalue()

    def first(self, **kw):
        r = cd.compare_dirs(self.a, self.b, use_numpy=False, **kw)
        f = cd.first_divergence(r)
        return f["name"] if f else None

    def test_identical(self):
        code, out = self.report()
        self.assertEqual(code, 0, out)
        self.assertIn("no divergence", out)
        self.assertIn(f"all {2 + 1 + N_LAYER * len(LAYER_OPS)} compared tensors", out)

    def test_perturbed_layer_3_attn_output(self):
        # The bug's signature: layer 3's attention output is off, and so is everything computed after it.
        perturb(self.b, "attn_output-3")
        downstream = [f"{op}-3" for op in LAYER_OPS[2:]] + [f"{op}-{il}" for il in range(4, N_LAYER)
                                                            for op in LAYER_OPS] + ["result_norm", "result_output"]
        for name in downstream:
            perturb(self.b, name, rel=0.05)
        code, out = self.report()
        self.assertEqual(code, 1, out)
        self.assertIn("first divergence: attn_output-3:", out)
        self.assertIn("last tensor within tolerance before it: attn_norm-3", out)
        self.assertEqual(self.first(), "attn_output-3")
        # The curve: l_out within tolerance through layer 2, over it from layer 3 on.
        lines = out.splitlines()
        start = lines.index(next(l for l in lines if l.startswith("l_out per layer")))
        curve = {int(l.split()[0]): l for l in lines[start + 1:start + 1 + N_LAYER]}
        for il in range(N_LAYER):
            self.assertEqual("!" in curve[il], il >= 3, curve[il])

    def test_forward_order_not_alphabetical(self):
        perturb(self.b, "attn_norm-3")
        perturb(self.b, "ffn_out-2")  # computed before layer 3, sorts after it alphabetically
        self.assertEqual(self.first(), "ffn_out-2")
        perturb(self.b, "attn_norm-10")
        perturb(self.b, "l_out-9")
        self.assertEqual(self.first(skip=["ffn_out", "attn_norm-3"]), "l_out-9")  # layer 9 before layer 10

    def test_model_level_order(self):
        perturb(self.b, "result_output")
        self.assertEqual(self.first(), "result_output")
        perturb(self.b, "inp_embd")
        self.assertEqual(self.first(), "inp_embd")

    def test_tolerances(self):
        perturb(self.b, "attn_output-5", rel=1e-4)  # NMSE 1e-8: inside the default 1e-5
        self.assertIsNone(self.first())
        self.assertEqual(self.first(nmse_tol=1e-9), "attn_output-5")
        self.assertEqual(self.first(tols={"attn_output": 1e-9}), "attn_output-5")
        self.assertEqual(self.first(tols={"attn_output-5": 1e-9}), "attn_output-5")
        self.assertEqual(self.first(tols={"attn_*": 1e-9}), "attn_output-5")
        self.assertIsNone(self.first(tols={"attn_output-4": 1e-9}))
        code, out = self.report("--tol", "attn_output=1e-9")
        self.assertEqual(code, 1, out)
        self.assertIn("first divergence: attn_output-5", out)

    def test_skip(self):
        perturb(self.b, "attn_output-3")
        perturb(self.b, "l_out-3")
        self.assertEqual(self.first(skip=["attn_output"]), "l_out-3")
        code, out = self.report("--skip", "attn_output", "--skip", "l_out-*")
        self.assertEqual(code, 0, out)
        self.assertIn("skipped (24)", out)

    def test_shape_mismatch(self):
        cd.write_npy(os.path.join(self.b, "ffn_out-7.npy"), (T, D + 1), [0.0] * (T * (D + 1)))
        code, out = self.report()
        self.assertEqual(code, 1)
        self.assertIn("first divergence: ffn_out-7: [3, 8] vs [3, 9]: element counts differ", out)

    def test_same_count_other_shape_is_compared(self):
        _, vals = cd.read_npy(os.path.join(self.b, "l_out-1.npy"))
        cd.write_npy(os.path.join(self.b, "l_out-1.npy"), (T * D,), vals)  # [T*D] against [T, D]
        self.assertIsNone(self.first())

    def test_nan(self):
        perturb(self.b, "attn_post_norm-6", rel=0.0, value=float("nan"))
        code, out = self.report()
        self.assertEqual(code, 1)
        self.assertIn("first divergence: attn_post_norm-6", out)
        self.assertIn("1 non-finite", out)

    def test_worst_element(self):
        path = os.path.join(self.b, "attn_norm-2.npy")
        shape, vals = cd.read_npy(path)
        vals[2 * D + 5] += 1.0  # row 2, column 5
        cd.write_npy(path, shape, vals)
        r = cd.compare_dirs(self.a, self.b, use_numpy=False)
        f = cd.first_divergence(r)
        self.assertEqual((f["name"], tuple(f["worst"])), ("attn_norm-2", (2, 5)))
        self.assertAlmostEqual(f["max_abs"], 1.0, places=5)

    def test_only_one_side_and_nothing_common(self):
        os.remove(os.path.join(self.b, "attn_output-0.npy"))
        code, out = self.report()
        self.assertEqual(code, 0)
        self.assertIn("only in A (1): attn_output-0", out)
        empty = os.path.join(self.dir, "empty")
        os.makedirs(empty)
        code = run([COMPARE, self.a, empty])[0]
        self.assertEqual(code, 2)

    def test_numpy_and_pure_python_agree(self):
        if cd.np is None:
            self.skipTest("numpy not installed")
        perturb(self.b, "ffn_out-4", rel=3e-3)
        rp = cd.compare_dirs(self.a, self.b, use_numpy=False)["records"]
        rn = cd.compare_dirs(self.a, self.b, use_numpy=True)["records"]
        for p, n in zip(rp, rn):
            self.assertEqual((p["name"], p["status"], p["worst"]), (n["name"], n["status"], n["worst"]))
            self.assertTrue(math.isclose(p["nmse"], n["nmse"], rel_tol=1e-9, abs_tol=1e-300))


class TernEndToEndTest(unittest.TestCase):
    """first_divergence.py running tern itself, with a tern dump as the reference."""

    def setUp(self):
        self.tern = os.environ.get("TERN_BINARY")
        fixtures = os.environ.get("TERN_FIXTURES_DIR", os.path.join(ROOT, "tests", "fixtures"))
        self.model = os.path.join(fixtures, "models", "q35-ratio.f16.gguf")
        if not self.tern or not os.access(self.tern, os.X_OK):
            self.skipTest("TERN_BINARY not set")
        self.dir = tempfile.mkdtemp(prefix="tern-fd-test-")
        self.tokens = "32,275,315,281,64"
        self.ref = os.path.join(self.dir, "ref")
        r = subprocess.run([self.tern, "logits", "-m", self.model, "--tokens", self.tokens, "-o",
                            os.path.join(self.dir, "l.bin"), "--dump-tensors", self.ref, "-t", "1", "--kv-type", "f32"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(r.returncode, 0, r.stdout)

    def tearDown(self):
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def tool(self, *extra):
        return run([FIRST_DIVERGENCE, "-m", self.model, "--tokens", self.tokens, "--tern", self.tern, "-t", "2",
                    "--ref-dump", self.ref, *extra])

    def test_against_itself(self):
        code, out = self.tool("--pure-python")
        self.assertEqual(code, 0, out)
        self.assertIn("no divergence", out)
        self.assertIn("l_out per layer", out)

    def test_perturbed_reference(self):
        perturb(self.ref, "attn_output-3", rel=0.02)
        code, out = self.tool()
        self.assertEqual(code, 1, out)
        self.assertIn("first divergence: attn_output-3:", out)
        self.assertIn("last tensor within tolerance before it: attn_gated-3", out)

    def test_errors_are_messages(self):
        code, out = run([FIRST_DIVERGENCE, "-m", self.model, "--tokens", self.tokens, "--tern", self.tern])
        self.assertEqual(code, 2)
        self.assertIn("no reference", out)
        code, out = self.tool("--tern-arg=--no-such-flag")
        self.assertEqual(code, 1)
        self.assertIn("error: tern failed", out)


if __name__ == "__main__":
    unittest.main(verbosity=1)
