"""Binding a model's inputs: --shape (NAME=DIMS, NAME:DIMS, comma lists, repeated), --batch /
--seq on unnamed and -1 dims, warnings for flags that bind nothing, the unbound-dims error,
bad values (one line, exit 2), and --value for a scalar input."""
import json
import os
import tempfile
import unittest

import onnx
from onnx import TensorProto, helper

from cli_util import run, run_json


def input_info(name, dims):
    """A float input; a dim is an int (fixed, -1 stored as dim_value -1), a str (symbolic) or None (unnamed)."""
    t = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    shape = t.type.tensor_type.shape
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif isinstance(d, str):
            dim.dim_param = d
    return t


def relu_model(path, inputs):
    """One Relu per input (x -> y_x)."""
    nodes = [helper.make_node("Relu", [n], [f"y_{n}"], name=f"relu_{n}") for n, _ in inputs]
    g = helper.make_graph(nodes, "g", [input_info(n, d) for n, d in inputs],
                          [helper.make_tensor_value_info(f"y_{n}", TensorProto.FLOAT, None) for n, _ in inputs])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def out_shape(report, name):
    return next(o["shape"] for o in report["graph_outputs"] if o["name"] == name)


def warnings_of(stderr):
    return [l for l in stderr.splitlines() if "warning:" in l]


class ShapeFlag(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.trt = os.path.join(self.d, "trt.onnx")  # TensorRT-sample style: [-1, 3, 32, 32]
        relu_model(self.trt, [("x", [-1, 3, 32, 32])])
        self.vad = os.path.join(self.d, "vad.onnx")  # unnamed dims: [?, ?] and a named one
        relu_model(self.vad, [("audio", [None, None]), ("state", [2, "batch", 64])])
        self.fixed = os.path.join(self.d, "fixed.onnx")
        relu_model(self.fixed, [("img", [1, 3, 16, 16])])

    def tearDown(self):
        self.tmp.cleanup()

    def json_and_err(self, *args):
        out = os.path.join(self.d, "r.json")
        rc, _, err = run(*args, "--json", out, "--quiet", "--predictor", "roofline")
        self.assertEqual(rc, 0, err)
        with open(out) as f:
            return json.load(f), err

    def fails(self, *args, needle=""):
        rc, out, err = run(*args, "--predictor", "roofline", "--quiet")
        self.assertEqual(rc, 2, f"stdout={out[:300]} stderr={err}")
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("neusight-onnx: error: "), lines[0])
        self.assertIn(needle, lines[0])
        return lines[0]

    def test_shape_sets_minus_one_dims_both_spellings(self):
        for flag in ("x=8x3x32x32", "x:8x3x32x32"):
            r, err = self.json_and_err(self.trt, "--gpu", "a100", "--shape", flag)
            self.assertEqual(out_shape(r, "y_x"), [8, 3, 32, 32])
            self.assertEqual(warnings_of(err), [])

    def test_shape_comma_list_and_repeated(self):
        r, _ = self.json_and_err(self.vad, "--gpu", "a100", "--shape", "audio=2x16000,state=2x2x64")
        self.assertEqual(out_shape(r, "y_audio"), [2, 16000])
        self.assertEqual(out_shape(r, "y_state"), [2, 2, 64])
        r, _ = self.json_and_err(self.vad, "--gpu", "a100", "--shape", "audio=3x100", "--shape", "state:2x3x64")
        self.assertEqual(out_shape(r, "y_audio"), [3, 100])
        self.assertEqual(out_shape(r, "y_state"), [2, 3, 64])

    def test_shape_binds_a_symbolic_name_everywhere(self):
        # audio's unnamed dims from --shape; state's `batch` from --dim; both together.
        r, _ = self.json_and_err(self.vad, "--gpu", "a100", "--shape", "audio=4x512", "--dim", "batch=4")
        self.assertEqual(out_shape(r, "y_state"), [2, 4, 64])

    def test_shape_changing_a_fixed_dim_warns_once(self):
        r, err = self.json_and_err(self.fixed, "--gpu", "a100", "--shape", "img=8x3x16x16")
        self.assertEqual(out_shape(r, "y_img"), [8, 3, 16, 16])
        w = warnings_of(err)
        self.assertEqual(len(w), 1, err)
        self.assertIn("axis 0 1 -> 8", w[0])
        self.assertIn("img", w[0])

    def test_batch_and_seq_bind_unnamed_leading_dims(self):
        r, err = self.json_and_err(self.trt, "--gpu", "a100", "--batch", "4")
        self.assertEqual(out_shape(r, "y_x"), [4, 3, 32, 32])
        self.assertEqual(warnings_of(err), [])
        # audio [?, ?]: --batch the first, --seq the second; state's `batch` is the first name.
        r, err = self.json_and_err(self.vad, "--gpu", "a100", "--batch", "2", "--seq", "800")
        self.assertEqual(out_shape(r, "y_audio"), [2, 800])
        self.assertEqual(out_shape(r, "y_state"), [2, 2, 64])
        self.assertEqual(warnings_of(err), [])

    def test_batch_and_dim_naming_the_same_dim(self):
        # --batch and --dim batch=N both bind the first symbolic dim: agreeing, fine; differing,
        # an error (--batch moved on to the sequence dim before). --dim naming another dim
        # leaves --batch and --seq the first and second of the rest.
        named = os.path.join(self.d, "named.onnx")
        relu_model(named, [("ids", ["batch", "sequence"]), ("past", ["batch", "past_len"])])
        r, err = self.json_and_err(named, "--gpu", "a100", "--batch", "4", "--seq", "8", "--dim", "batch=4",
                                   "--dim", "past_len=3")
        self.assertEqual(out_shape(r, "y_ids"), [4, 8])
        self.assertEqual(out_shape(r, "y_past"), [4, 3])
        self.assertEqual(warnings_of(err), [])
        self.fails(named, "--gpu", "a100", "--batch", "2", "--seq", "8", "--dim", "batch=4",
                   needle="--batch 2 and --dim batch=4 both bind 'batch'")
        self.fails(named, "--gpu", "a100", "--batch", "2", "--seq", "8", "--dim", "sequence=16",
                   needle="--seq 8 and --dim sequence=16 both bind 'sequence'")
        first_past = os.path.join(self.d, "first_past.onnx")
        relu_model(first_past, [("past", ["past_len", "batch"]), ("ids", ["batch", "sequence"])])
        r, _ = self.json_and_err(first_past, "--gpu", "a100", "--dim", "past_len=5", "--batch", "2", "--seq", "7")
        self.assertEqual(out_shape(r, "y_past"), [5, 2])
        self.assertEqual(out_shape(r, "y_ids"), [2, 7])

    def test_flags_that_bind_nothing_warn(self):
        r, err = self.json_and_err(self.fixed, "--gpu", "a100", "--batch", "8")
        self.assertEqual(out_shape(r, "y_img"), [1, 3, 16, 16])  # fixed: not silently changed
        w = warnings_of(err)
        self.assertEqual(len(w), 1, err)
        self.assertIn("--batch 8 binds no input dim", w[0])
        self.assertIn("--shape", w[0])
        self.assertIn("--batch 8 binds no input dim", r["warnings"][0])
        _, err = self.json_and_err(self.fixed, "--gpu", "a100", "--seq", "128", "--dim", "sequence=7")
        w = warnings_of(err)
        self.assertEqual(len(w), 2, err)
        self.assertTrue(any("--seq 128 binds no input dim" in l for l in w), w)
        self.assertTrue(any("--dim sequence=7 binds no input dim" in l for l in w), w)

    def test_unbound_error_names_input_axis_and_shape_line(self):
        line = self.fails(self.trt, "--gpu", "a100", needle="'x' axis 0 (unnamed)")
        self.assertIn("--shape x=Nx3x32x32", line)
        line = self.fails(self.vad, "--gpu", "a100", "--batch", "2", needle="'audio' axis 1 (unnamed)")
        self.assertIn("--shape audio=2xN", line)
        self.assertNotIn("state", line)  # bound by --batch

    def test_bad_shape_values_one_line(self):
        self.fails(self.trt, "--gpu", "a100", "--shape", "x=1x-3", needle="x=1x-3")
        self.fails(self.trt, "--gpu", "a100", "--shape", "x=1x3xx32", needle="dim 2")
        self.fails(self.trt, "--gpu", "a100", "--shape", "x=", needle="--shape")
        self.fails(self.trt, "--gpu", "a100", "--shape", "8x3x32x32", needle="NAME=DIMS")
        self.fails(self.trt, "--gpu", "a100", "--shape", "nope=1x3x32x32", needle="no graph input named 'nope'")
        line = self.fails(self.trt, "--gpu", "a100", "--shape", "x=1x3x32", needle="rank 4")
        self.assertIn("not 3", line)
        self.fails(self.trt, "--gpu", "a100", "--shape", "x=1x3x32x32", "--shape", "x=2x3x32x32",
                   needle="given twice")
        self.fails(self.trt, "--gpu", "a100", "--shape", f"x={2**63}x3x32x32", needle="out of range")
        self.fails(self.vad, "--gpu", "a100", "--shape", "audio=1x1,state=2x3x64", "--dim", "batch=4",
                   needle="conflicts")

    def test_bad_value_flags_one_line(self):
        self.fails(self.trt, "--gpu", "a100", "--batch", "1", "--value", "x=1", needle="not a single value")
        self.fails(self.trt, "--gpu", "a100", "--batch", "1", "--value", "nope=1", needle="no graph input named 'nope'")
        self.fails(self.trt, "--gpu", "a100", "--batch", "1", "--value", "x=abc", needle="expected a number")
        self.fails(self.trt, "--gpu", "a100", "--batch", "1", "--value", "x", needle="NAME=VALUE")
        self.fails(self.trt, "--gpu", "a100", "--batch", "1", "--value", "x=nan", needle="expected a number")


if __name__ == "__main__":
    unittest.main()


class LatencySlo(unittest.TestCase):
    """--latency-slo: per GPU the largest batch within the target that fits its memory."""

    def test_each_gpu_gets_the_largest_batch_within_the_target(self):
        from cli_util import EXAMPLE
        rs = run_json(EXAMPLE, "--seq", "128", "--latency-slo", "20", "--gpu", "h100,l4")
        self.assertEqual(len(rs), 2)
        for r in rs:
            s = r["latency_slo"]
            self.assertTrue(s["met"])
            self.assertEqual(s["limit"], "latency")
            self.assertLessEqual(r["e2e_latency_ms"], 20)
            self.assertEqual(r["graph_outputs"][0]["shape"][0], s["batch"])  # the report is at that batch
            self.assertAlmostEqual(s["items_per_s"], s["batch"] * 1e3 / r["e2e_latency_ms"], places=6)
            self.assertEqual(s["next_batch"], s["batch"] + 1)
            self.assertGreater(s["next_latency_ms"], 20)
            # The same as asking for those batches.
            at = run_json(EXAMPLE, "--seq", "128", "--batch", str(s["batch"]), "--gpu", r["gpu_alias"])
            self.assertEqual(at["e2e_latency_ms"], r["e2e_latency_ms"])
            above = run_json(EXAMPLE, "--seq", "128", "--batch", str(s["next_batch"]), "--gpu", r["gpu_alias"])
            self.assertEqual(above["e2e_latency_ms"], s["next_latency_ms"])
        self.assertGreater(rs[0]["latency_slo"]["batch"], rs[1]["latency_slo"]["batch"])  # the H100 takes more
        code, out, err = run(EXAMPLE, "--seq", "128", "--latency-slo", "20", "--gpu", "h100,l4")
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"latency target: batch \d+ within 20\.000 ms \([0-9.]+ ms, [0-9.]+ items/s\); batch \d+ takes")
        self.assertRegex(out, r"(?m)^NVIDIA L4 +l4 +\d+ +[0-9.]+ +[0-9.]+ - [0-9.]+ +[0-9.]+ +0\.\d\dx  latency$")
        # A target batch 1 misses: the report at batch 1, not met.
        r = run_json(EXAMPLE, "--seq", "128", "--latency-slo", "0.01", "--gpu", "h100")
        self.assertFalse(r["latency_slo"]["met"])
        self.assertEqual(r["latency_slo"]["limit"], "none")
        self.assertEqual(r["graph_outputs"][0]["shape"][0], 1)

    def test_multi_gpu_inference_searches_the_global_batch(self):
        # Tensor and pipeline parallel: the largest global batch within the target, as asking
        # for it and the next one with --batch gives.
        from cli_util import EXAMPLE
        base = (EXAMPLE, "--seq", "1024", "--dtype", "bf16", "--gpu", "h100")
        one = run_json(*base, "--latency-slo", "10")["latency_slo"]
        for spec in ("tp=2", "pp=2", "tp=2,pp=2"):
            with self.subTest(spec=spec):
                r = run_json(*base, "--latency-slo", "10", "--parallel", spec)
                s = r["latency_slo"]
                self.assertTrue(s["met"])
                self.assertGreater(s["batch"], one["batch"])
                at = run_json(*base, "--batch", str(s["batch"]), "--parallel", spec)
                self.assertEqual(at["e2e_latency_ms"], r["e2e_latency_ms"])
                above = run_json(*base, "--batch", str(s["next_batch"]), "--parallel", spec)
                self.assertEqual(above["e2e_latency_ms"], s["next_latency_ms"])
                self.assertGreater(s["next_latency_ms"], 10)

    def test_memory_stops_the_batch_and_bad_uses_are_refused(self):
        from cli_util import EXAMPLE, SOURCE
        cfg = os.path.join(SOURCE, "tests", "data", "llama3_8b.json")
        r = run_json("--config", cfg, "--seq", "2048", "--dtype", "bf16", "--latency-slo", "100000", "--gpu", "l4")
        s = r["latency_slo"]
        self.assertTrue(s["met"])
        self.assertEqual(s["limit"], "memory")
        self.assertFalse(s["next_fits"])
        self.assertTrue(r["memory"]["fits"])
        with tempfile.TemporaryDirectory() as d:
            static = os.path.join(d, "static.onnx")
            relu_model(static, [("x", [4, 8])])
            for args, msg in (((EXAMPLE, "--seq", "8", "--batch", "2"), "without --batch"),
                              ((static,), "no input dim of the model grows with the batch"),
                              ((EXAMPLE, "--seq", "8", "--mode", "training", "--parallel", "dp=2"), "tp and pp alone"),
                              ((EXAMPLE, "--seq", "8", "--parallel", "pp=2,microbatches=2"), "tp and pp alone"),
                              ((EXAMPLE, "--seq", "8", "--latency-slo", "-1"), "--latency-slo"),
                              (("--config", cfg, "--generate", "16:2"), "a generation takes --tpot-slo")):
                with self.subTest(args=args):
                    extra = () if "--latency-slo" in args else ("--latency-slo", "10")
                    code, _, err = run(*args, *extra, "--gpu", "h100")
                    self.assertEqual(code, 2, err)
                    self.assertIn(msg, err)
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
