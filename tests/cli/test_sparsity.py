"""--sparsity 2:4: pruned linear layers on sparse tensor cores, through the real binary."""
import os
import subprocess
import sys
import tempfile
import unittest

from cli_util import EXAMPLE, SOURCE, run, run_json

LLAMA3_8B = os.path.join(SOURCE, "tests", "data", "llama3_8b.json")
BASE = ["--config", LLAMA3_8B, "--batch", "4", "--seq", "1024", "--dtype", "bf16"]


def kernels(report):
    return [k for n in report["nodes"] for k in n["kernels"]]


class SparsityTest(unittest.TestCase):
    def test_pruned_layers_run_sparse_with_compressed_weights(self):
        dense = run_json(*BASE, "--gpu", "h100")
        sparse = run_json(*BASE, "--gpu", "h100", "--sparsity", "2:4")
        s = sparse["sparsity"]
        # Llama 3 8B: seven linear layers in each of 32 blocks; the head stays dense.
        self.assertEqual(s["pruned_gemms"], 32 * 7)
        self.assertEqual(s["sparse_gemms"], 32 * 7)
        self.assertEqual(s["targets"], "all")
        self.assertNotIn("sparsity", dense)
        # 6.98B parameters in those layers, 16 bits dense, 9 compressed (half the values, a 2-bit index each).
        linear = 32 * (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336)
        self.assertAlmostEqual(s["weights_saved_gib"], linear * (2 - 1.125) / 2**30, places=4)
        self.assertAlmostEqual(dense["memory"]["weights_gib"] - sparse["memory"]["weights_gib"], s["weights_saved_gib"],
                               places=4)
        self.assertLess(sparse["e2e_latency_ms"], dense["e2e_latency_ms"])
        self.assertGreater(sparse["e2e_latency_ms"], 0.5 * dense["e2e_latency_ms"])
        pruned = [k for k in kernels(sparse) if k.get("sparse_2_4")]
        self.assertEqual(len(pruned), 32 * 7)
        self.assertTrue(all(k["math"] == "bf16-tensor-2:4" for k in pruned))
        head = [k for n in sparse["nodes"] if n["name"].startswith("lm_head") for k in n["kernels"]]
        self.assertTrue(head and all(k["math"] == "bf16-tensor" for k in head))
        # The share of the peak stays against the dense peak.
        self.assertEqual(sparse["throughput"]["peak_math"], "bf16-tensor")
        self.assertEqual(sparse["throughput"]["peak_tflops"], dense["throughput"]["peak_tflops"])
        rc, out, err = run(*BASE, "--gpu", "h100", "--sparsity", "2:4,targets=mlp")
        self.assertEqual(rc, 0, err)
        self.assertIn("2:4 sparse: 96 of 96 pruned GEMMs on sparse tensor cores", out)

    def test_a_gpu_without_sparse_units_runs_them_dense(self):
        dense = run_json(*BASE, "--gpu", "v100")
        sparse = run_json(*BASE, "--gpu", "v100", "--sparsity", "2:4")
        self.assertEqual(sparse["sparsity"]["sparse_gemms"], 0)
        self.assertAlmostEqual(sparse["e2e_latency_ms"], dense["e2e_latency_ms"], places=6)
        self.assertAlmostEqual(sparse["memory"]["weights_gib"], dense["memory"]["weights_gib"], places=6)
        rc, out, err = run(*BASE, "--gpu", "h100,v100,t4", "--sparsity", "2:4")
        self.assertEqual(rc, 0, err)
        # One line for the GPUs alike.
        lines = [l for l in err.splitlines() if "sparse matrix units" in l]
        self.assertEqual(len(lines), 1, err)
        self.assertIn("Tesla V100-PCIE-32GB and Tesla T4 have no sparse matrix units", lines[0])

    def test_generation_streams_the_compressed_weights(self):
        gen = ["--config", LLAMA3_8B, "--generate", "512:64", "--batch", "8", "--gpu", "h100"]
        dense = run_json(*gen)["generation"]
        sparse = run_json(*gen, "--sparsity", "2:4")["generation"]
        self.assertLess(sparse["tpot_ms"], dense["tpot_ms"])
        self.assertLess(sparse["ttft_ms"], dense["ttft_ms"])
        # A decode step streams its weights: at most the compression's 16 / 9 faster.
        self.assertGreater(sparse["tpot_ms"], dense["tpot_ms"] * 9 / 16 * 0.99)
        self.assertLess(sparse["weight_bytes"], dense["weight_bytes"])
        self.assertGreater(sparse["max_batch"], dense["max_batch"])

    def test_annotated_model_says_it(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "a.onnx")
            rc, _, err = run(EXAMPLE, "--gpu", "a100", "--dtype", "fp16", "--batch", "1", "--seq", "128",
                             "--sparsity", "2:4", "--out", out, "--quiet")
            self.assertEqual(rc, 0, err)
            script = ("import onnx, sys; m = onnx.load(sys.argv[1], load_external_data=False); "
                      "print(dict((p.key, p.value) for p in m.metadata_props)['neusight.sparsity'])")
            p = subprocess.run([sys.executable, "-c", script, out], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("2:4 sparse: 48 of 48 pruned GEMMs", p.stdout)

    def test_bad_input_is_one_line_and_no_file(self):
        cases = [(["--sparsity", "2:8"], "expected 2:4"),
                 (["--sparsity", "2:4,targets=("], "not a regular expression"),
                 (["--sparsity", "2:4,targets=nothing_here"], "no linear layer's weight name matches"),
                 (["--sparsity", "2:4", "--mode", "training"], "inference"),
                 (["--sparsity", "2:4", "--parallel", "pp=2"], "tp alone")]
        for extra, words in cases:
            with tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "r.json")
                rc, so, err = run(*BASE, "--gpu", "h100", *extra, "--json", out)
                self.assertEqual(rc, 2, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(words, err)
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
