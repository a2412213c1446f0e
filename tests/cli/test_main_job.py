"""The main job through the real binary: table, JSON contract, annotated ONNX, bad input."""
import json
import re
import os
import subprocess
import tempfile
import unittest

from cli_util import EXAMPLE, SOURCE, fixture, run, run_json


class MainJob(unittest.TestCase):
    def test_table_on_b200(self):
        code, out, err = run(EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "1024")
        self.assertEqual(code, 0, err)
        self.assertIn("NVIDIA B200", out)
        self.assertIn("transformer.h.11.mlp.c_fc/MatMul", out)
        self.assertRegex(out, r"end-to-end latency: [0-9.]+ ms")

    def test_json_contract(self):
        r = run_json(EXAMPLE, "--gpu", "b200", "--batch", "2", "--seq", "64")
        for key in ("gpu", "mode", "dtype", "e2e_latency_ms", "forward_ms", "backward_ms", "update_ms",
                    "graph_outputs", "nodes"):
            self.assertIn(key, r)
        self.assertEqual(r["mode"], "inference")
        self.assertEqual(r["graph_outputs"][0]["shape"], [2, 64, 50257])
        self.assertGreater(r["e2e_latency_ms"], 0)
        total = 0.0
        for n in r["nodes"]:
            for k in ("name", "op_type", "latency_ms", "outputs", "kernels"):
                self.assertIn(k, n)
            for k in n["kernels"]:
                self.assertIn(k["class"], ("gemm", "elementwise", "softmax", "layernorm", "reduce", "memory",
                                           "collective", "unknown"))
                self.assertIn(k["phase"], ("forward", "backward", "update"))
                for f in ("flops", "bytes", "tile", "waves", "latency_ms"):
                    self.assertIn(f, k)
                total += k["latency_ms"]
        self.assertAlmostEqual(total, r["e2e_latency_ms"], delta=1e-6 * max(1.0, total))
        # 80% interval: per kernel, node and model, around the prediction. A sum's bounds
        # (predictor.h IntervalSum): identical kernels' deviations add, distinct kernels'
        # join with the correlation the JSON states; between the quadrature and the plain sums.
        self.assertLess(r["latency_low_ms"], r["e2e_latency_ms"])
        self.assertGreater(r["latency_high_ms"], r["e2e_latency_ms"])
        rho = r["interval_kernel_correlation"]
        self.assertTrue(0 < rho < 1)

        def joined(kernels):
            distinct = {}
            for k in kernels:
                d = distinct.setdefault((k["latency_ms"], k["latency_low_ms"], k["latency_high_ms"]), [0.0, 0.0])
                d[0] += k["latency_ms"] - k["latency_low_ms"]
                d[1] += k["latency_high_ms"] - k["latency_ms"]
            dev = [(1 - rho) * sum(v[i] ** 2 for v in distinct.values()) + rho * sum(v[i] for v in distinct.values()) ** 2
                   for i in (0, 1)]
            total = sum(k["latency_ms"] for k in kernels)
            return total - dev[0] ** 0.5, total + dev[1] ** 0.5

        everything = []
        for n in r["nodes"]:
            self.assertLessEqual(n["latency_low_ms"], n["latency_ms"] * (1 + 1e-9))
            self.assertGreaterEqual(n["latency_high_ms"], n["latency_ms"] * (1 - 1e-9))
            for k in n["kernels"]:
                self.assertLessEqual(k["latency_low_ms"], k["latency_ms"] * (1 + 1e-9))
                self.assertGreaterEqual(k["latency_high_ms"], k["latency_ms"] * (1 - 1e-9))
            if n["kernels"]:
                lo, hi = joined(n["kernels"])
                self.assertAlmostEqual(lo, n["latency_low_ms"], delta=1e-6 * max(1.0, lo))
                self.assertAlmostEqual(hi, n["latency_high_ms"], delta=1e-6 * max(1.0, hi))
            everything += n["kernels"]
        lo, hi = joined(everything)
        self.assertAlmostEqual(lo, r["latency_low_ms"], delta=1e-6 * max(1.0, lo))
        self.assertAlmostEqual(hi, r["latency_high_ms"], delta=1e-6 * max(1.0, hi))
        self.assertGreater(r["latency_low_ms"], sum(k["latency_low_ms"] for k in everything))
        self.assertLess(r["latency_high_ms"], sum(k["latency_high_ms"] for k in everything))

    def test_gpu_list_gives_array(self):
        r = run_json(EXAMPLE, "--gpu", "b200,h100,t4", "--batch", "1", "--seq", "128")
        self.assertEqual([x["gpu_alias"] for x in r], ["b200", "h100", "t4"])
        self.assertLess(r[0]["e2e_latency_ms"], r[2]["e2e_latency_ms"])

    def test_gpu_all_predicts_every_database_gpu(self):
        names = [g["name"] for g in json.loads(run("gpus", "--json")[1])]
        self.assertGreater(len(names), 30)
        rs = run_json(EXAMPLE, "--gpu", "all", "--batch", "1", "--seq", "32")
        self.assertEqual([r["gpu"] for r in rs], names)
        # The terminal gives the GPU table alone (a row per GPU) and says where the rest is.
        code, out, err = run(EXAMPLE, "--gpu", "All", "--batch", "1", "--seq", "32")
        self.assertEqual(code, 0, err)
        self.assertIn("--gpu all: one row per GPU", out)
        self.assertRegex(out, r"vs first +80% interval +peak +memory\n")
        self.assertNotIn("end-to-end latency", out)
        for name in names:
            self.assertRegex(out, r"(?m)^" + name.replace("(", r"\(").replace(")", r"\)") + r" +\S+ +[0-9.]+ ")
        # Each row's alias whole: a name --gpu takes.
        aliases = [g["aliases"][0] for g in json.loads(run("gpus", "--json")[1])]
        for alias in aliases:
            self.assertRegex(out, r" " + re.escape(alias) + r" +[0-9.]+ ")
        # `all` beside names: the named GPUs, then the database; `gpus all` lists it.
        rs = run_json(EXAMPLE, "--gpu", "l4,all", "--batch", "1", "--seq", "32")
        self.assertEqual([r["gpu"] for r in rs], ["NVIDIA L4"] + names)
        self.assertEqual(run("gpus", "all")[1], run("gpus")[1])
        code, _, err = run(EXAMPLE, "--gpu", "all,", "--batch", "1", "--seq", "32")
        self.assertEqual(code, 2)
        self.assertIn("empty GPU name", err)

    def test_memory_footprint_and_a_model_too_large_for_the_gpu(self):
        r = run_json(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "1024")
        m = r["memory"]
        for k in ("weights_gib", "activations_gib", "gradients_gib", "optimizer_gib", "total_gib", "capacity_gib"):
            self.assertGreaterEqual(m[k], 0, k)
        # GPT-2 small: 124M FP32 parameters and an untied LM head's 38.6M (0.6 GiB).
        self.assertAlmostEqual(m["weights_gib"], 0.6, delta=0.05)
        self.assertTrue(m["fits"])
        self.assertEqual(m["gpus_to_hold"], 1)
        self.assertAlmostEqual(m["total_gib"], m["weights_gib"] + m["activations_gib"], places=9)
        train = ("--gpu", "h100", "--batch", "1", "--seq", "1024", "--mode", "training")
        t = run_json(EXAMPLE, *train)
        self.assertEqual(t["memory"]["optimizer"], "sgd")  # the default, the NeuSight method's update
        self.assertEqual(t["memory"]["optimizer_gib"], 0)
        adam = run_json(EXAMPLE, *train, "--optimizer", "adam")
        self.assertGreater(adam["update_ms"], t["update_ms"])  # also reads and writes two moments
        self.assertEqual(adam["forward_ms"], t["forward_ms"])
        t = adam["memory"]
        self.assertAlmostEqual(t["gradients_gib"], t["weights_gib"], delta=0.05 * t["weights_gib"])
        self.assertAlmostEqual(t["optimizer_gib"], 2 * t["gradients_gib"], delta=0.05 * t["optimizer_gib"])
        self.assertGreater(t["activations_gib"], m["activations_gib"])
        code, _, err = run(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "8", "--optimizer", "adam")
        self.assertEqual(code, 2)
        self.assertIn("--optimizer applies to --mode training", err)
        # Llama 3 70B in BF16 (131 GiB of weights) on an L4: a warning, the terminal's line, the JSON.
        cfg = os.path.join(SOURCE, "tests", "data", "llama3_70b.json")
        code, out, err = run("--config", cfg, "--batch", "1", "--seq", "128", "--dtype", "bf16", "--gpu", "l4")
        self.assertEqual(code, 0, err)
        self.assertRegex(err, r"NVIDIA L4: the forward pass needs 13\d\.\d GiB \(weights 131\.\d, activations")
        self.assertRegex(out, r"memory: 13\d\.\d GiB of 24\.0 GiB .*: does not fit, 6 such GPUs hold it")
        big = run_json("--config", cfg, "--batch", "1", "--seq", "128", "--dtype", "bf16", "--gpu", "l4")["memory"]
        self.assertFalse(big["fits"])
        self.assertEqual(big["gpus_to_hold"], 6)
        # --parallel and --generate count their own memory per GPU.
        self.assertNotIn("memory", run_json(EXAMPLE, "--gpu", "h100", "--batch", "4", "--seq", "128", "--mode",
                                            "training", "--parallel", "dp=2"))
        self.assertNotIn("memory", run_json("--config", cfg, "--generate", "16:2", "--gpu", "h100", "--dtype", "bf16"))

    def test_training_mode_splits_phases(self):
        r = run_json(EXAMPLE, "--gpu", "a100", "--batch", "1", "--seq", "128", "--mode", "training")
        self.assertGreater(r["backward_ms"], r["forward_ms"])
        self.assertGreater(r["update_ms"], 0)

    def test_a_dim_bound_to_zero_does_no_work(self):
        # An empty batch launches no kernel over it (the batch-free ones remain: positions,
        # the mask's slices; training's optimizer step), and every interval stays finite.
        for mode in ("inference", "training"):
            one = run_json(EXAMPLE, "--gpu", "h100", "--dim", "batch=1", "--seq", "128", "--mode", mode)
            zero = run_json(EXAMPLE, "--gpu", "h100", "--dim", "batch=0", "--seq", "128", "--mode", mode)
            self.assertLess(zero["e2e_latency_ms"], 0.7 * one["e2e_latency_ms"], mode)
            self.assertLess(zero["latency_high_ms"], 3 * zero["e2e_latency_ms"], mode)
            for n in zero["nodes"]:
                for k in n["kernels"]:
                    if k["class"] == "gemm" and k["phase"] == "forward" and n["name"] != "lm_head/MatMul":
                        self.assertEqual(k["flops"], 0, n["name"])
                    self.assertLessEqual(k["latency_high_ms"], 10 * max(k["latency_ms"], 0.01), n["name"])

    def test_device_json_path(self):
        r = run_json(EXAMPLE, "--gpu", fixture("device_configs", "Tesla_T4.json"),
                     "--batch", "1", "--seq", "128")
        self.assertEqual(r["gpu"], "Tesla T4")

    def test_annotated_model_passes_checker(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "annotated.onnx")
            code, _, err = run(EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "128", "--out", out, "--quiet")
            self.assertEqual(code, 0, err)
            script = (
                "import onnx,sys\n"
                "a=onnx.load(sys.argv[1], load_external_data=False)\n"
                "b=onnx.load(sys.argv[2], load_external_data=False)\n"
                "onnx.checker.check_model(sys.argv[2])\n"
                "assert len(a.graph.node)==len(b.graph.node)\n"
                "assert [i.name for i in a.graph.initializer]==[i.name for i in b.graph.initializer]\n"
                "assert all('latency_ms=' in n.doc_string for n in b.graph.node if n.op_type=='MatMul')\n"
                "m={p.key:p.value for p in b.metadata_props}\n"
                "assert m['neusight.gpu']=='NVIDIA B200', m\n"
                "assert len(b.graph.value_info) > 100\n")
            p = subprocess.run(["/usr/bin/python3", "-c", script, EXAMPLE, out], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)


class BadInput(unittest.TestCase):
    def assert_input_error(self, *args, needle=""):
        code, out, err = run(*args)
        self.assertEqual(code, 2, f"stdout={out} stderr={err}")
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, err)
        self.assertIn(needle, lines[0])

    def test_missing_file(self):
        self.assert_input_error("/nonexistent.onnx", "--gpu", "b200", needle="/nonexistent.onnx")

    def test_not_onnx(self):
        with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
            f.write(b"this is not a model")
            f.flush()
            self.assert_input_error(f.name, "--gpu", "b200", needle="not a valid ONNX model")

    def test_gpus_json(self):
        code, out, err = run("gpus", "--json")
        self.assertEqual(code, 0, err)
        gpus = json.loads(out)
        b200 = next(g for g in gpus if g["name"] == "NVIDIA B200")
        self.assertEqual(b200["aliases"][0], "b200")
        for key in ("arch", "num_sm", "boost_mhz", "fp32_gflops", "mem_bw_gbps", "l2_mb", "board_power_w"):
            self.assertIn(key, b200)
        code, table, _ = run("gpus")
        self.assertEqual(len(table.strip().splitlines()), len(gpus) + 1)
        # Named GPUs alone (aliases, comma lists), in the order given; an unknown one an error.
        code, out, err = run("gpus", "h100", "b200,gb200", "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual([g["aliases"][0] for g in json.loads(out)], ["h100", "b200", "gb200"])
        code, table, _ = run("gpus", "l4")
        self.assertEqual(len(table.strip().splitlines()), 2)
        self.assertIn("NVIDIA L4", table)
        self.assert_input_error("gpus", "h10", needle="closest")

    def test_unknown_gpu(self):
        self.assert_input_error(EXAMPLE, "--gpu", "b2000", "--batch", "1", "--seq", "8", needle="unknown GPU")

    def test_unbound_dim(self):
        self.assert_input_error(EXAMPLE, "--gpu", "b200", "--batch", "1", needle="sequence")

    def test_bad_flag(self):
        self.assert_input_error(EXAMPLE, "--gpu", "b200", "--frobnicate", needle="--frobnicate")


if __name__ == "__main__":
    unittest.main()
