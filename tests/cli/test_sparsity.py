"""--sparsity 2:4: pruned linear layers on sparse tensor cores, through the real binary."""
import json
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

    def test_auto_finds_the_pruned_weights_in_the_model(self):
        # An MLP with fp16 weights inline: MatMul's B [K, N] pruned along K (axis 0), Gemm's
        # transposed B [N, K] along K (axis 1), a dense head; and the same model unpruned.
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        def write(path, pruned, wrong_axis=False):
            rng = np.random.default_rng(0)
            w1 = rng.standard_normal((512, 2048)).astype(np.float16)
            w2 = rng.standard_normal((512, 2048)).astype(np.float16)
            w3 = rng.standard_normal((512, 64)).astype(np.float16)
            if pruned:
                w1.reshape(128, 4, 2048)[:, :2, :] = 0
                w2.reshape(512, 512, 4)[:, :, 1:3] = 0
            if wrong_axis:  # zeros along the output dim: no pattern along the reduction
                w1 = rng.standard_normal((512, 2048)).astype(np.float16)
                w1.reshape(512, 512, 4)[:, :, :2] = 0
            nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
                     helper.make_node("Relu", ["h"], ["r"], name="act"),
                     helper.make_node("Gemm", ["r", "w2"], ["g"], name="fc2", transB=1),
                     helper.make_node("MatMul", ["g", "w3"], ["y"], name="head")]
            g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 512])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 64])],
                                  [numpy_helper.from_array(w, n) for w, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"))])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
            onnx.checker.check_model(m)
            onnx.save(m, path)

        with tempfile.TemporaryDirectory() as d:
            dense, pruned, wrong = (os.path.join(d, f) for f in ("dense.onnx", "pruned.onnx", "wrong.onnx"))
            write(dense, False)
            write(pruned, True)
            write(wrong, True, wrong_axis=True)
            args = ["--gpu", "a100", "--batch", "8192", "--sparsity", "auto"]
            r = run_json(pruned, *args)
            self.assertEqual(r["sparsity"]["targets"], "auto")
            self.assertEqual(r["sparsity"]["pruned_gemms"], 2)
            by_node = {n["name"]: n["kernels"][0] for n in r["nodes"]}
            self.assertEqual(by_node["fc1"]["math"], "fp16-tensor-2:4")
            self.assertEqual(by_node["fc2"]["math"], "fp16-tensor-2:4")
            self.assertEqual(by_node["head"]["math"], "fp16-tensor")
            # fc1's pruned columns along the wrong axis: fc2 alone.
            self.assertEqual(run_json(wrong, *args)["sparsity"]["pruned_gemms"], 1)
            rc, _, err = run(dense, *args)
            self.assertEqual(rc, 0, err)
            self.assertIn("--sparsity auto: no GEMM weight is pruned 2:4 (3 checked); the model runs dense", err)
            # compare: the pruned variant against the dense one, each as its weights say.
            with tempfile.TemporaryDirectory() as o:
                out = os.path.join(o, "c.json")
                rc, _, err = run("compare", dense, pruned, *args, "--json", out)
                self.assertEqual(rc, 0, err)
                with open(out) as f:
                    c = json.load(f)
            speedup = {r["model"]: r["speedup"] for r in c["results"]}
            self.assertEqual(speedup["dense.onnx"], 1.0)
            self.assertGreater(speedup["pruned.onnx"], 1.2)
            self.assertLess(speedup["pruned.onnx"], 2.0)

    def test_convolutions_prune_along_their_input_channels(self):
        # A CNN: a first convolution over 3 channels (no group of four: dense), two 64-channel
        # convolutions (one pruned along its input channels, one along its output channels:
        # no pattern along the reduction), a head.
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.default_rng(1)
        w0 = rng.standard_normal((64, 3, 3, 3)).astype(np.float16)
        w1 = rng.standard_normal((64, 64, 3, 3)).astype(np.float16)
        w1.reshape(64, 16, 4, 3, 3)[:, :, :2] = 0
        w2 = rng.standard_normal((64, 64, 3, 3)).astype(np.float16)
        w2.reshape(16, 4, 64, 3, 3)[:, :2] = 0
        w3 = rng.standard_normal((64, 10)).astype(np.float16)
        nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
                 helper.make_node("Conv", ["c0", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
                 helper.make_node("Conv", ["c1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
                 helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="pool"),
                 helper.make_node("Flatten", ["p"], ["f"], name="flat"),
                 helper.make_node("MatMul", ["f", "w3"], ["y"], name="head")]
        g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 3, 56, 56])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 10])],
                              [numpy_helper.from_array(w, n) for w, n in ((w0, "w0"), (w1, "w1"), (w2, "w2"), (w3, "w3"))])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(m)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "cnn.onnx")
            onnx.save(m, path)
            auto = run_json(path, "--gpu", "h100", "--batch", "64", "--sparsity", "auto")
            math = {n["name"]: n["kernels"][0]["math"] for n in auto["nodes"] if n["kernels"]}
            self.assertEqual(auto["sparsity"]["pruned_gemms"], 1)
            self.assertEqual(math["conv1"], "fp16-tensor-2:4")
            self.assertEqual(math["conv2"], "fp16-tensor")
            # Told every layer is pruned: the two 64-channel convolutions; the first (3 input
            # channels) and the head stay dense.
            told = run_json(path, "--gpu", "h100", "--batch", "64", "--sparsity", "2:4")
            math = {n["name"]: n["kernels"][0]["math"] for n in told["nodes"] if n["kernels"]}
            self.assertEqual(told["sparsity"]["pruned_gemms"], 2)
            self.assertEqual((math["conv0"], math["conv1"], math["conv2"], math["head"]),
                             ("fp16-tensor", "fp16-tensor-2:4", "fp16-tensor-2:4", "fp16-tensor"))
            self.assertLess(told["e2e_latency_ms"], auto["e2e_latency_ms"])

    def test_int8_quantize_dequantize_weights(self):
        # An INT8 QDQ MLP (TensorRT's 2:4 case): each weight an INT8 initializer through
        # DequantizeLinear, zero point 0; the first two pruned along the reduction, the head
        # dense; a copy whose second weight has a zero point of 3 (its stored zeros are no zero
        # weights, so auto cannot read the pattern there).
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        def write(path, zero_point=0):
            rng = np.random.default_rng(2)
            nodes, inits, x = [], [], "x"
            for i, (k, n) in enumerate(((1024, 1024), (1024, 1024), (1024, 64))):
                w = rng.integers(-127, 127, size=(k, n)).astype(np.int8)
                if i < 2:
                    w.reshape(k // 4, 4, n)[:, :2] = 0
                zp = zero_point if i == 1 else 0
                inits += [numpy_helper.from_array(w, f"w{i}_q"),
                          numpy_helper.from_array(np.array(0.01, np.float32), f"w{i}_s"),
                          numpy_helper.from_array(np.array(zp, np.int8), f"w{i}_z"),
                          numpy_helper.from_array(np.array(0.02, np.float32), f"a{i}_s"),
                          numpy_helper.from_array(np.array(0, np.int8), f"a{i}_z")]
                nodes += [helper.make_node("QuantizeLinear", [x, f"a{i}_s", f"a{i}_z"], [f"xq{i}"]),
                          helper.make_node("DequantizeLinear", [f"xq{i}", f"a{i}_s", f"a{i}_z"], [f"xd{i}"]),
                          helper.make_node("DequantizeLinear", [f"w{i}_q", f"w{i}_s", f"w{i}_z"], [f"w{i}_d"]),
                          helper.make_node("MatMul", [f"xd{i}", f"w{i}_d"], [f"h{i}"], name=f"fc{i}")]
                x = f"h{i}"
            g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1024])],
                                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 64])], inits)
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            onnx.checker.check_model(m)
            onnx.save(m, path)

        with tempfile.TemporaryDirectory() as d:
            path, shifted = os.path.join(d, "q.onnx"), os.path.join(d, "zp.onnx")
            write(path)
            write(shifted, zero_point=3)
            full = ["--gpu", "h100", "--batch", "8192", "--fusion", "full"]
            dense = run_json(path, *full)
            for flag in ("auto", "2:4"):
                r = run_json(path, *full, "--sparsity", flag)
                math = {n["name"]: n["kernels"][0]["math"] for n in r["nodes"] if n["name"].startswith("fc")}
                self.assertEqual(math, {"fc0": "int8-tensor-2:4", "fc1": "int8-tensor-2:4", "fc2": "int8-tensor"}, flag)
                self.assertEqual(r["sparsity"]["sparse_gemms"], 2)
                self.assertLess(r["e2e_latency_ms"], dense["e2e_latency_ms"])
                # Two INT8 weights of 1 MiB held at 5 / 8 of a byte an element.
                self.assertAlmostEqual(r["sparsity"]["weights_saved_gib"] * 2 ** 30, 2 * 2 ** 20 * 3 / 8, delta=1)
            r = run_json(shifted, *full, "--sparsity", "auto")
            self.assertEqual(r["sparsity"]["pruned_gemms"], 1)
            # onnxruntime's CUDA kernels dequantize first: FP32 GEMMs, no sparse units for them.
            rc, _, err = run(path, "--gpu", "h100", "--batch", "8192", "--sparsity", "auto")
            self.assertEqual(rc, 0, err)
            self.assertIn("no sparse matrix units for fp32 GEMMs: the 2 2:4-pruned GEMMs run dense", err)

    def test_auto_reads_a_long_per_channel_zero_point(self):
        # A per-channel INT8 QDQ projection of 4,104 output channels (an LLM's MLP is wider):
        # auto reads its zero point's 4,104 values, all 0 (pruned) or one of them 3 (not read).
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        def write(path, shifted):
            k, n = 1024, 4104
            w = np.random.default_rng(3).integers(-127, 127, size=(k, n)).astype(np.int8)
            w.reshape(k // 4, 4, n)[:, :2] = 0
            zp = np.zeros(n, np.int8)
            zp[-1] = 3 if shifted else 0
            inits = [numpy_helper.from_array(w, "w_q"), numpy_helper.from_array(np.full(n, 0.01, np.float32), "w_s"),
                     numpy_helper.from_array(zp, "w_z"), numpy_helper.from_array(np.array(0.02, np.float32), "a_s"),
                     numpy_helper.from_array(np.array(0, np.int8), "a_z")]
            nodes = [helper.make_node("QuantizeLinear", ["x", "a_s", "a_z"], ["xq"]),
                     helper.make_node("DequantizeLinear", ["xq", "a_s", "a_z"], ["xd"]),
                     helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w_d"], axis=1),
                     helper.make_node("MatMul", ["xd", "w_d"], ["y"], name="fc")]
            g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])], inits)
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            onnx.checker.check_model(m)
            onnx.save(m, path)

        with tempfile.TemporaryDirectory() as d:
            path, shifted = os.path.join(d, "q.onnx"), os.path.join(d, "zp.onnx")
            write(path, False)
            write(shifted, True)
            full = ["--gpu", "h100", "--batch", "8192", "--fusion", "full", "--sparsity", "auto"]
            r = run_json(path, *full)
            self.assertEqual(r["sparsity"]["sparse_gemms"], 1)
            self.assertEqual([n["kernels"][0]["math"] for n in r["nodes"] if n["name"] == "fc"], ["int8-tensor-2:4"])
            rc, _, err = run(shifted, *full, "--json", os.path.join(d, "r.json"))
            self.assertEqual(rc, 0, err)
            self.assertIn("no GEMM weight is pruned 2:4 (0 checked, 1 whose values are not in the file", err)

    def test_bad_input_is_one_line_and_no_file(self):
        cases = [(["--sparsity", "2:8"], "expected 2:4"),
                 (["--sparsity", "2:4,targets=("], "not a regular expression"),
                 (["--sparsity", "2:4,targets=nothing_here"], "no prunable layer's weight name matches"),
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
