"""CLI tests for multi-GPU training: --parallel dp/tp/pp, --link-bw, the report section."""
import json
import os
import tempfile
import unittest

from cli_util import EXAMPLE, run, run_json, shared

BASE = [EXAMPLE, "--gpu", "a100-40gb", "--seq", "128", "--mode", "training", "--predictor", "roofline"]


class ParallelReport(unittest.TestCase):
    def test_data_parallel_overlaps_the_gradient_all_reduce(self):
        r = run_json(*BASE, "--batch", "8", "--parallel", "dp=4")
        p = r["parallel"]
        self.assertEqual((p["dp"], p["tp"], p["pp"], p["gpus"]), (4, 1, 1, 4))
        self.assertEqual(p["micro_batch"], 2)
        self.assertAlmostEqual(r["e2e_latency_ms"], p["iteration_ms"], places=6)
        self.assertGreater(p["dp_comm_ms"], 0)
        self.assertGreaterEqual(p["dp_buckets"], 2)
        self.assertLess(p["dp_exposed_ms"], p["dp_comm_ms"])
        self.assertAlmostEqual(p["iteration_ms"], r["forward_ms"] + r["backward_ms"] + r["update_ms"]
                               + p["dp_exposed_ms"], places=3)
        for key in ("weights", "gradients", "optimizer", "activations", "total"):
            self.assertGreater(p["stages"][0]["memory_gb"][key], 0)

    def test_tensor_parallel_adds_collectives_and_splits_gemms(self):
        one = run_json(*BASE, "--batch", "4", "--parallel", "tp=1")
        two = run_json(*BASE, "--batch", "4", "--parallel", "tp=2")
        coll = [k for n in two["nodes"] for k in n["kernels"] if k["class"] == "collective"]
        self.assertEqual(len(coll), 4 * 12 + 2)  # 2 forward + 2 backward per layer, embedding, LM head
        gemm = lambda r: sum(k["flops"] for n in r["nodes"] for k in n["kernels"] if k["class"] == "gemm")
        self.assertAlmostEqual(gemm(two) / gemm(one), 0.5, delta=0.001)  # vocabulary 50257 padded
        self.assertGreater(two["parallel"]["tp_comm_ms"], 0)
        self.assertLess(two["parallel"]["stages"][0]["params"], one["parallel"]["stages"][0]["params"])
        slow = run_json(*BASE, "--batch", "4", "--parallel", "tp=2", "--link-bw", "5")
        self.assertGreater(slow["parallel"]["tp_comm_ms"], 10 * two["parallel"]["tp_comm_ms"])
        self.assertEqual(slow["parallel"]["link"]["kind"], "override")

    def test_pipeline_bubble_and_schedules(self):
        g = run_json(*BASE, "--batch", "8", "--parallel", "pp=4,microbatches=8,schedule=gpipe")["parallel"]
        f = run_json(*BASE, "--batch", "8", "--parallel", "pp=4,microbatches=8,schedule=1f1b")["parallel"]
        self.assertEqual(len(g["stages"]), 4)
        self.assertEqual(g["micro_batch"], 1)
        # Near-equal stages: close to (pp-1)/(m+pp-1) = 3/11.
        self.assertAlmostEqual(g["bubble_fraction"], 3 / 11, delta=0.06)
        self.assertGreater(g["pp_comm_ms"], 0)
        # 1F1B keeps fewer microbatches in flight than GPipe on the first stage.
        self.assertLess(f["stages"][0]["memory_gb"]["activations"], g["stages"][0]["memory_gb"]["activations"])
        more = run_json(*BASE, "--batch", "8", "--parallel", "pp=4,microbatches=1")["parallel"]
        self.assertGreater(more["bubble_fraction"], g["bubble_fraction"])

    def test_table_prints_the_section(self):
        code, out, err = run(*BASE, "--batch", "4", "--parallel", "dp=2,pp=2,microbatches=2")
        self.assertEqual(code, 0, err)
        self.assertIn("parallel training: dp=2 tp=1 pp=2 (4 GPUs)", out)
        self.assertIn("gradient all-reduce", out)
        self.assertIn("peak memory per GPU", out)

    def test_memory_warning(self):
        code, out, err = run(EXAMPLE, "--gpu", "l4", "--seq", "1024", "--batch", "128", "--mode", "training",
                             "--predictor", "roofline", "--parallel", "dp=2", "--quiet")
        self.assertEqual(code, 0, err)
        self.assertIn("GB per GPU needed", err)

    def test_bad_input_is_one_line_exit_2(self):
        cases = [
            ("--batch", "4", "--parallel", "dp=0"),
            ("--batch", "4", "--parallel", "dp=2,zz=3"),
            ("--batch", "4", "--parallel", "pp=2,schedule=zigzag"),
            ("--batch", "3", "--parallel", "dp=2"),
            ("--batch", "4", "--link-bw", "100"),
            ("--batch", "4", "--parallel", "tp=2", "--link-bw", "fast"),
            ("--batch", "4", "--parallel", "tp=2", "--link-bw", "-3"),
            ("--batch", "4", "--parallel", "pp=100000"),
        ]
        for extra in cases:
            with self.subTest(extra=extra):
                code, out, err = run(*BASE, *extra)
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
        code, out, err = run(EXAMPLE, "--gpu", "a100-40gb", "--seq", "128", "--batch", "4", "--parallel", "dp=2")
        self.assertEqual(code, 2)
        self.assertIn("--mode training", err)


class ParallelGpt2Large(unittest.TestCase):
    """The measured A100 SXM4 runs (bench/parallel_accuracy prints the figures)."""

    def test_orders_and_magnitudes_follow_the_measurements(self):
        labels = shared("neusight-data", "e2e", "labels", "NVIDIA_A100-SXM4-40GB")
        cfg = shared("neusight-data", "model_configs", "gpt2_large.json")
        if not os.path.isdir(labels):
            self.skipTest("shared data missing")
        pred, meas = {}, {}
        for par, spec in (("dp4", "dp=4"), ("tp4", "tp=4"), ("pp4_1", "pp=4,microbatches=1")):
            with open(os.path.join(labels, f"gpt2_large-train-1024-4-{par}.json")) as f:
                meas[par] = json.load(f)["e2e_latency"]
            pred[par] = run_json("--config", cfg, "--batch", "4", "--seq", "1024", "--gpu", "a100-sxm4-40gb",
                                 "--mode", "training", "--parallel", spec)["e2e_latency_ms"]
        # Pipeline with one microbatch is the slowest by far; data parallel the fastest.
        self.assertGreater(pred["pp4_1"], 2.5 * pred["tp4"])
        self.assertLess(pred["dp4"], pred["tp4"])
        for par in pred:
            self.assertLess(abs(pred[par] - meas[par]) / meas[par], 0.35, (par, pred[par], meas[par]))


if __name__ == "__main__":
    unittest.main()
