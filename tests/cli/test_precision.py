"""Precision through the pipeline: --dtype auto|fp32|fp16|bf16|fp8|fp4|int8 and the kernels command's dtype column."""
import json
import math
import csv
import os
import tempfile
import unittest

import onnx
from onnx import TensorProto, helper

from cli_util import EXAMPLE, SOURCE, run, run_json

FLOAT_TYPES = {"fp32", "fp16", "bf16", "fp8", "tf32"}


def kernels(report):
    return [k for n in report["nodes"] for k in n["kernels"]]


def half_model(path, elem=TensorProto.FLOAT16):
    """x[256,256] @ W[256,512] + b, LayerNorm, Relu: every tensor in `elem`. 256 rows: a GEMM the
    tensor cores' tiles run (a few rows would stream as a GEMV on the CUDA cores)."""
    w = helper.make_tensor("W", elem, [256, 512], [0.0] * (256 * 512))
    b = helper.make_tensor("b", elem, [512], [0.0] * 512)
    s = helper.make_tensor("s", elem, [512], [1.0] * 512)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("LayerNormalization", ["a", "s", "b"], ["n"], axis=-1),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    g = helper.make_graph(nodes, "half", [helper.make_tensor_value_info("x", elem, [256, 256])],
                          [helper.make_tensor_value_info("y", elem, [256, 512])], [w, b, s])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


class DtypeFlag(unittest.TestCase):
    def test_forced_dtypes_reach_every_float_kernel(self):
        # Attention as MatMul + Softmax in every dtype (automatic runs FlashAttention at 16 bits),
        # so that the same kernels are compared.
        args = (EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "64", "--attention", "unfused")
        fp32 = run_json(*args, "--dtype", "fp32")
        self.assertEqual(fp32["dtype"], "fp32")
        for dt in ("fp16", "bf16", "fp8"):
            with self.subTest(dtype=dt):
                r = run_json(*args, "--dtype", dt)
                self.assertEqual(r["dtype"], dt)
                ks = kernels(r)
                self.assertEqual(len(ks), len(kernels(fp32)))
                floats = [k for k in ks if k["dtype"] in FLOAT_TYPES]
                self.assertTrue(floats)
                # fp8 narrows the GEMMs of weights alone (W8A8, as serving engines run it); the
                # rest (attention's products included) BF16.
                rest = "bf16" if dt == "fp8" else dt
                linears = [k for k in ks if k["class"] == "gemm" and k["op"] == "linear"]
                self.assertTrue(linears and all(k["dtype"] == dt for k in linears))
                self.assertTrue(all(k["dtype"] == rest for k in floats if k not in linears))
                # Tensor cores and half the bytes: faster than FP32 on an H100.
                self.assertLess(r["e2e_latency_ms"], fp32["e2e_latency_ms"])

    def test_auto_takes_the_models_dtype(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "half.onnx")
            half_model(path)
            auto = run_json(path, "--gpu", "a100-80gb")
            self.assertEqual(auto["dtype"], "fp16")
            ks = kernels(auto)
            self.assertTrue(any(k["class"] == "gemm" for k in ks))
            self.assertTrue(all(k["dtype"] == "fp16" for k in ks))
            forced = run_json(path, "--gpu", "a100-80gb", "--dtype", "fp32")
            self.assertTrue(all(k["dtype"] == "fp32" for k in kernels(forced)))
            self.assertGreater(forced["e2e_latency_ms"], 0)

    def test_report_says_why_the_dtype(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "half.onnx")
            half_model(path)
            self.assertEqual(run_json(path, "--gpu", "a100-80gb")["dtype_source"], "weights")
            self.assertEqual(run_json(path, "--gpu", "a100-80gb", "--dtype", "bf16")["dtype_source"], "--dtype")
            code, out, err = run(path, "--gpu", "a100-80gb", "--dtype", "bf16")
            self.assertEqual(code, 0, err)
            self.assertIn("(inference, bf16 (--dtype),", out.splitlines()[0])
            # A narrow dtype says what it narrows: the weights' GEMMs, the rest 16-bit.
            fp8 = run_json(path, "--gpu", "h100", "--dtype", "fp8")
            self.assertEqual((fp8["dtype"], fp8["activation_dtype"]), ("fp8", "bf16"))
            self.assertEqual(run_json(path, "--gpu", "h100", "--dtype", "int8")["activation_dtype"], "fp16")
            self.assertEqual(run_json(path, "--gpu", "h100")["activation_dtype"], "fp16")
            code, out, err = run(path, "--gpu", "h100", "--dtype", "fp4")
            self.assertEqual(code, 0, err)
            self.assertIn("(inference, fp4 (--dtype: the weights' GEMMs; the rest bf16),", out.splitlines()[0])
            page, annotated = os.path.join(d, "r.html"), os.path.join(d, "a.onnx")
            self.assertEqual(run(path, "--gpu", "a100-80gb", "--html", page, "--out", annotated, "--quiet")[0], 0)
            with open(page) as f:
                self.assertIn("fp16 (weights)", f.read())
            meta = {p.key: p.value for p in onnx.load(annotated).metadata_props}
            self.assertEqual(meta["neusight.dtype_source"], "weights")
            # No float weights: the float inputs decide.
            g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "inputs_only",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, 64])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, 64])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
            m.ir_version = 8
            onnx.save(m, path)
            r = run_json(path, "--gpu", "a100-80gb")
            self.assertEqual((r["dtype"], r["dtype_source"]), ("fp16", "inputs"))

    def test_a_dtype_without_matrix_units_is_said_once(self):
        for gpu, dt, math in [("a100-80gb", "fp8", "fp16-tensor"), ("v100", "bf16", "fp32-simt"),
                              ("h100", "fp4", "fp8-tensor"), ("v100", "int8", "int8-simt")]:
            code, out, err = run(EXAMPLE, "--gpu", gpu, "--batch", "1", "--seq", "64", "--dtype", dt, "--quiet")
            self.assertEqual(code, 0, err)
            notes = [l for l in err.splitlines() if "matrix units" in l]
            self.assertEqual(len(notes), 1, err)
            self.assertIn(f"{dt} GEMMs are predicted as {math}", notes[0])
        code, out, err = run(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "64", "--dtype", "fp8", "--quiet")
        self.assertNotIn("matrix units", err)

    def test_a_tensor_core_gemm_with_unaligned_rows_is_said_once(self):
        # Attention scores of 197 tokens in FP16: rows of 394 bytes, not a multiple of 16. The
        # libraries run such products on narrow-load kernels; the report says so, with their
        # share of the time and the longest. 200 tokens (400 bytes) are aligned; FP32 on the
        # CUDA cores never concerns it.
        def attention(path, tokens, elem):
            g = helper.make_graph(
                [helper.make_node("MatMul", ["q", "k"], ["s"], name="attn/qk"),
                 helper.make_node("MatMul", ["s", "v"], ["o"], name="attn/pv")], "scores",
                [helper.make_tensor_value_info("q", elem, [8, 12, tokens, 64]),
                 helper.make_tensor_value_info("k", elem, [8, 12, 64, tokens]),
                 helper.make_tensor_value_info("v", elem, [8, 12, tokens, 64])],
                [helper.make_tensor_value_info("o", elem, [8, 12, tokens, 64])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
            m.ir_version = 8
            onnx.save(m, path)

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "scores.onnx")
            attention(path, 197, TensorProto.FLOAT16)
            for gpu in ("h100", "a100-80gb", "b200"):
                r = run_json(path, "--gpu", gpu)
                notes = [w for w in r["warnings"] if "not a multiple of 16 bytes" in w]
                self.assertEqual(len(notes), 1, r["warnings"])
                self.assertIn("2 tensor-core GEMMs, 100% of the predicted time, have", notes[0])
                self.assertRegex(notes[0], r"the longest: attn/(qk: 197x64 by 64x197|pv: 197x197 by 197x64) "
                                           r"in fp16: a multiple of 8 elements")
                # Each such kernel says it too (JSON, and the annotated model's node text).
                self.assertTrue(all("narrow-load kernel" in k.get("note", "") for k in kernels(r)), kernels(r))
            annotated = os.path.join(d, "annotated.onnx")
            code, out, err = run(path, "--gpu", "h100", "--out", annotated, "--quiet")
            self.assertEqual(code, 0, err)
            docs = [n.doc_string for n in onnx.load(annotated).graph.node]
            self.assertTrue(docs and all("narrow-load kernel, priced aligned" in doc for doc in docs), docs)
            # A GPU list says it once, on stderr too; where the GPUs' shares differ, as a range.
            code, out, err = run(path, "--gpu", "h100,a100-80gb,b200,p100")
            self.assertEqual(code, 0, err)
            lines = [l for l in err.splitlines() if "not a multiple of 16 bytes" in l]
            self.assertEqual(len(lines), 1, err)
            self.assertIn("2 tensor-core GEMMs, 100% of the predicted time, have", lines[0])
            config = os.path.join(SOURCE, "tests", "data", "dinov2_base.json")
            code, out, err = run("--config", config, "--batch", "8", "--gpu", "h100,l4", "--dtype", "bf16",
                                 "--attention", "unfused")
            self.assertEqual(code, 0, err)
            lines = [l for l in err.splitlines() if "not a multiple of 16 bytes" in l]
            self.assertEqual(len(lines), 1, err)
            self.assertRegex(lines[0], r"tensor-core GEMMs, \d+-\d+% of the predicted time on 2 GPUs, have")
            # No matrix units for FP16 on the P100: nothing to say.
            r = run_json(path, "--gpu", "p100")
            self.assertFalse([w for w in r["warnings"] if "16 bytes" in w], r["warnings"])
            for tokens, elem in ((200, TensorProto.FLOAT16), (197, TensorProto.FLOAT)):
                attention(path, tokens, elem)
                r = run_json(path, "--gpu", "h100")
                self.assertFalse([w for w in r["warnings"] if "16 bytes" in w], (tokens, r["warnings"]))
                self.assertFalse([k for k in kernels(r) if "narrow-load" in k.get("note", "")])

    def test_a_gpu_list_says_each_kind_of_gpu_warning_once(self):
        # Every GPU of the database (`--gpu all`), Llama 3 70B in BF16 for 2048 + 256 tokens: the
        # GPUs that lack BF16 matrix units, those short of its memory and those whose power
        # cannot hold their boost clock (the FP32 SIMT GEMMs of the pre-Ampere ones among them)
        # are each one line on stderr naming every such GPU; each GPU's report (JSON) keeps
        # its own.
        cfg = os.path.join(SOURCE, "tests", "data", "llama3_70b.json")
        code, out, err = run("--config", cfg, "--generate", "2048:256", "--gpu", "all", "--quiet")
        self.assertEqual(code, 0, err)
        lines = err.splitlines()
        units = [l for l in lines if "matrix units" in l]
        self.assertEqual(len(units), 1, err)
        self.assertRegex(units[0], r"Tesla P4, .* and Tesla T4 have no bf16 matrix units: bf16 GEMMs are predicted as fp32-simt")
        memory = [l for l in lines if "generation needs" in l]
        self.assertEqual(len(memory), 1, err)
        self.assertRegex(memory[0], r"generation needs 13\d\.\d GiB \(weights 131\.\d .*\), more than the memory of \d+ GPUs: "
                                    r"Tesla P4 8 GiB, .*NVIDIA L4 24 GiB")
        self.assertNotIn("NVIDIA B200", memory[0])  # 180 GB hold it
        power = [l for l in lines if "boost clock" in l]
        self.assertEqual(len(power), 1, err)
        self.assertRegex(power[0], r"\d GPUs have less power than holds their boost clock .*Tesla T4 0\.\d\d \(70 W for 2560 FP32 lanes")
        reports = run_json("--config", cfg, "--generate", "2048:256", "--gpu", "l4,t4")
        self.assertTrue(any(w.startswith("generation needs") and w.endswith("more than the 24 GiB of NVIDIA L4")
                            for w in reports[0]["warnings"]), reports[0]["warnings"])
        self.assertIn("Tesla T4 has no bf16 matrix units: bf16 GEMMs are predicted as fp32-simt with bf16 operands",
                      reports[1]["warnings"])
        # A training step too big for some GPUs of a list: one line, each GPU's memory and how
        # many of it hold the step; one GPU alone says it as before.
        with tempfile.TemporaryDirectory() as d:
            page = os.path.join(d, "r.html")
            code, out, err = run(EXAMPLE, "--gpu", "h100,l4,b200", "--batch", "64", "--seq", "1024", "--mode", "training",
                                 "--quiet", "--html", page)
            self.assertEqual(code, 0, err)
            with open(page) as f:
                html = f.read()
        # The HTML charts the first GPU and lists every GPU's warnings as stderr says them.
        warnings = html[html.index("<h2>Warnings</h2>"):]
        self.assertIn("NVIDIA L4: 72 W for 7424 FP32 lanes at 4 nm is below the power", warnings)  # the L4 alone
        self.assertEqual(warnings.count("the training step needs"), 1)
        memory = [l for l in err.splitlines() if "needs" in l]
        self.assertEqual(len(memory), 1, err)
        self.assertRegex(memory[0], r"the training step needs 1\d\d\.\d GiB \(weights .*\), more than the memory of 2 GPUs; "
                                    r"the predictions assume it fits \(split evenly: --parallel tp, pp, or dp with zero=3\): "
                                    r"NVIDIA H100 80GB HBM3 80\.0 GiB \(2 hold it\), NVIDIA L4 24\.0 GiB \(\d+ hold it\)$")
        code, out, err = run(EXAMPLE, "--gpu", "l4", "--batch", "64", "--seq", "1024", "--mode", "training", "--quiet")
        self.assertRegex(err, r"NVIDIA L4: the training step needs 1\d\d\.\d GiB \(.*\), more than its 24\.0 GiB; the prediction "
                              r"assumes it fits \(\d+ such GPUs hold it split evenly: --parallel tp, pp, or dp with zero=3\)")

    def test_a_gpu_file_with_a_database_entry_gives_its_matrix_units(self):
        # A GPU the database lacks, described as `gpus --json` prints an entry: its BF16 peak
        # reaches the GEMMs (a device JSON has no field for it: BF16 would run on CUDA cores).
        code, out, err = run("gpus", "--json")
        self.assertEqual(code, 0, err)
        entry = next(e for e in json.loads(out) if e["name"] == "NVIDIA B200")
        entry.update(name="Future GPU", aliases=["future"])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "future.json")
            with open(path, "w") as f:
                json.dump(entry, f)
            r = run_json(EXAMPLE, "--gpu", path, "--batch", "1", "--seq", "256", "--dtype", "bf16")
            self.assertEqual(r["gpu"], "Future GPU")
            self.assertIn("bf16-tensor", {k["math"] for k in kernels(r) if k["class"] == "gemm"})
            b200 = run_json(EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "256", "--dtype", "bf16")
            self.assertAlmostEqual(r["e2e_latency_ms"], b200["e2e_latency_ms"], delta=1e-9 * b200["e2e_latency_ms"])
            del entry["arch"]
            with open(path, "w") as f:
                json.dump(entry, f)
            code, _, err = run(EXAMPLE, "--gpu", path, "--batch", "1", "--seq", "8")
            self.assertEqual(code, 2)
            self.assertIn("arch", err)

    def test_unknown_dtype_is_an_input_error(self):
        code, _, err = run(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "8", "--dtype", "fp7")
        self.assertEqual(code, 2)
        self.assertIn("--dtype", err)
        # INT8 W8A8 is an inference precision; integer dtypes other than int8 are no compute dtype.
        for extra in (("--dtype", "int8", "--mode", "training"), ("--dtype", "int16")):
            code, _, err = run(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "8", *extra)
            self.assertEqual(code, 2, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn("--dtype", err)


class TimingFlag(unittest.TestCase):
    def paired_kernels(self, slow, fast):
        """The kernels of two timings of one model, pairwise; asserts that none is slower in
        `fast` nor below its roofline there. Returns the pairs and how many are >10% faster."""
        ks, kf = kernels(slow), kernels(fast)
        self.assertEqual(len(ks), len(kf))
        smaller = 0
        for a, b in zip(ks, kf):
            self.assertLessEqual(b["latency_ms"], a["latency_ms"] * (1 + 1e-9))
            self.assertGreaterEqual(b["latency_ms"], b["roofline_ms"] * (1 - 1e-9))
            smaller += b["latency_ms"] < 0.9 * a["latency_ms"]
        return list(zip(ks, kf)), smaller

    def test_device_timing_drops_the_per_launch_dispatch(self):
        args = (EXAMPLE, "--gpu", "a100-80gb", "--batch", "1", "--seq", "64")
        eager = run_json(*args, "--timing", "eager")
        device = run_json(*args, "--timing", "device")
        self.assertLess(device["e2e_latency_ms"], eager["e2e_latency_ms"])
        self.assertEqual((eager["timing"], device["timing"]), ("eager", "device"))
        self.assertEqual(run_json(*args)["timing"], "device")  # the default for whole models
        self.assertNotIn("timing", run_json(*args, "--predictor", "roofline"))
        pairs, smaller = self.paired_kernels(eager, device)
        self.assertGreater(smaller, len(pairs) // 4)  # a seq-64 model is mostly small kernels

    def test_kernel_timing_is_device_time_at_least_the_launch_floor(self):
        # Kernel timing (profiler durations, CUDA graphs) is each kernel's GPU time, at least
        # the 2 us launch floor; device timing bounds that by the host's dispatch of each op
        # (precision.h kHostDispatchMs, 10.81 us), combined as a root sum of squares.
        args = (EXAMPLE, "--gpu", "a100-80gb", "--batch", "1", "--seq", "64")
        device = run_json(*args, "--timing", "device")
        kernel = run_json(*args, "--timing", "kernel")
        self.assertEqual(kernel["timing"], "kernel")
        self.assertLess(kernel["e2e_latency_ms"], device["e2e_latency_ms"])
        pairs, smaller = self.paired_kernels(device, kernel)
        self.assertTrue(pairs)
        self.assertGreater(smaller, len(pairs) // 4)  # the host bounds a seq-64 model's small kernels
        for a, b in pairs:
            self.assertGreaterEqual(b["latency_ms"], 0.002 * (1 - 1e-9))  # the device floor
            self.assertGreaterEqual(a["latency_ms"], 0.01081 * (1 - 1e-9))  # the host's dispatch
            expected = math.hypot(0.01081, b["latency_ms"])
            self.assertAlmostEqual(a["latency_ms"], expected, delta=1e-9 + 1e-6 * expected)
            # "host" bound exactly where the dispatch outlasts the kernel's own time.
            self.assertEqual(a["bound"] == "host", b["latency_ms"] < 0.01081)
            self.assertNotEqual(b["bound"], "host")

    def test_terminal_counts_the_host_bound_kernels(self):
        args = (EXAMPLE, "--gpu", "a100-80gb", "--batch", "1", "--seq", "64", "--top", "1", "--no-color")
        code, out, err = run(*args)
        self.assertEqual(code, 0, err)
        line = [l for l in out.splitlines() if l.startswith("host-bound:")]
        self.assertEqual(len(line), 1, out)
        self.assertIn("--timing kernel", line[0])
        code, out, err = run(*args, "--timing", "kernel")
        self.assertEqual(code, 0, err)
        self.assertNotIn("host-bound:", out)


    def test_host_dispatch_flag_sets_the_device_timing_floor(self):
        # --host-dispatch-us replaces the 10.81 us of every kernel's root sum of squares with
        # the host's own dispatch; the report says which it used.
        args = (EXAMPLE, "--gpu", "a100-80gb", "--batch", "1", "--seq", "64")
        kernel = kernels(run_json(*args, "--timing", "kernel"))
        base = run_json(*args)
        self.assertAlmostEqual(base["host_dispatch_us"], 10.81, places=6)
        slow, fast = run_json(*args, "--host-dispatch-us", "25"), run_json(*args, "--host-dispatch-us", "4")
        self.assertEqual((slow["host_dispatch_us"], fast["host_dispatch_us"]), (25, 4))
        self.assertGreater(slow["e2e_latency_ms"], base["e2e_latency_ms"])
        self.assertLess(fast["e2e_latency_ms"], base["e2e_latency_ms"])
        # The interval moves with it: a slower host, a later lower bound.
        self.assertGreater(slow["latency_low_ms"], base["latency_low_ms"])
        for k, b in zip(kernels(slow), kernel):
            expected = math.hypot(0.025, b["latency_ms"])
            self.assertAlmostEqual(k["latency_ms"], expected, delta=1e-9 + 1e-6 * expected)
            self.assertEqual(k["bound"] == "host", b["latency_ms"] < 0.025)
        code, out, err = run(*args, "--host-dispatch-us", "25", "--top", "1", "--no-color")
        self.assertEqual(code, 0, err)
        self.assertIn("25.00 us", [l for l in out.splitlines() if l.startswith("host-bound:")][0])
        self.assertNotIn("host_dispatch_us", run_json(*args, "--timing", "kernel"))
        # Bad values and timings it does not apply to: one line, exit 2.
        for extra, needle in [(["--host-dispatch-us", "0"], "positive"), (["--host-dispatch-us", "-3"], "positive"),
                              (["--host-dispatch-us", "fast"], "positive"), (["--host-dispatch-us", "1e9"], "100000"),
                              (["--host-dispatch-us", "20", "--timing", "kernel"], "applies to device timing")]:
            code, out, err = run(*args, *extra)
            self.assertEqual(code, 2, (extra, err))
            lines = [l for l in err.splitlines() if l.strip()]
            self.assertEqual(len(lines), 1, err)
            self.assertIn(needle, lines[0])



class MathPrecisionInReports(unittest.TestCase):
    """Every report says which precision and unit each kernel's math ran in ("math")."""

    def test_json_math_per_kernel(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "half.onnx")
            half_model(path)
            cases = [
                ("a100-80gb", (), "fp16-tensor"),   # FP16 tensor cores
                ("p100-sxm", (), "fp32-simt"),      # no tensor cores: FP32 accumulate on CUDA cores
                ("a100-80gb", ("--dtype", "fp32"), "fp32-simt"),
                ("v100", ("--dtype", "bf16"), "fp32-simt"),   # Volta has no BF16 tensor cores
                ("h100", ("--dtype", "fp8"), "fp8-tensor"),
                ("a100-80gb", ("--dtype", "fp8"), "fp16-tensor"),  # no FP8 units: runs as FP16
                ("b200", ("--dtype", "fp4"), "fp4-tensor"),        # NVFP4 weight GEMMs
                ("h100", ("--dtype", "fp4"), "fp8-tensor"),        # no FP4 units: runs as FP8
                ("a100-80gb", ("--dtype", "int8"), "int8-tensor"),  # W8A8 weight GEMMs
                ("mi300x", ("--dtype", "int8"), "int8-matrix"),
            ]
            for gpu, extra, gemm_math in cases:
                with self.subTest(gpu=gpu, extra=extra):
                    ks = kernels(run_json(path, "--gpu", gpu, *extra))
                    self.assertTrue(ks)
                    for k in ks:
                        if k["class"] == "gemm":
                            self.assertEqual(k["math"], gemm_math)
                        elif k["class"] in ("memory", "collective"):
                            self.assertEqual(k["math"], "none")
                        else:  # streaming kernels compute in FP32 whatever their storage dtype
                            self.assertEqual(k["math"], "fp32-simt", k)

    def test_table_csv_and_html_say_the_math(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "half.onnx")
            half_model(path)
            args = (path, "--gpu", "a100-80gb")
            r = run_json(*args)
            code, out, err = run(*args)
            self.assertEqual(code, 0, err)
            lines = out.splitlines()
            head = next(l for l in lines if l.split()[:1] == ["node"])
            self.assertIn("math", head.split())
            gemm_nodes = [n["name"] for n in r["nodes"] if any(k["class"] == "gemm" for k in n["kernels"])]
            self.assertTrue(gemm_nodes)
            for name in gemm_nodes:
                row = next(l for l in lines if l.split()[:1] == [name])
                self.assertIn("fp16-tensor", row.split())
            kcsv, ncsv, page = (os.path.join(d, f) for f in ("k.csv", "n.csv", "r.html"))
            self.assertEqual(run(*args, "--csv", kcsv, "--csv-kernels", "--quiet")[0], 0)
            self.assertEqual(run(*args, "--csv", ncsv, "--quiet")[0], 0)
            self.assertEqual(run(*args, "--html", page, "--quiet")[0], 0)
            with open(kcsv) as f:
                rows = list(csv.DictReader(f))
            self.assertEqual([x["math"] for x in rows], [k["math"] for k in kernels(r)])
            with open(ncsv) as f:
                nodes = {x["node"]: x for x in csv.DictReader(f)}
            for name in gemm_nodes:
                self.assertEqual(nodes[name]["math"], "fp16-tensor")
            with open(page) as f:
                html = f.read()
            self.assertIn("<th>math</th>", html)
            self.assertIn("<td>fp16-tensor</td>", html)


class KernelsDtypeColumn(unittest.TestCase):
    def test_dtype_column_per_row(self):
        with tempfile.TemporaryDirectory() as d:
            src, out = os.path.join(d, "in.csv"), os.path.join(d, "out.csv")
            with open(src, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["OPName", "Device", "B", "M", "N", "K", "H", "dtype"])
                for dt in ("fp32", "tf32", "fp16", "bf16", "fp8"):
                    w.writerow(["linear", "NVIDIA H100 80GB HBM3", 1, 4096, 4096, 4096, "", dt])
                w.writerow(["linear", "NVIDIA H100 80GB HBM3", 1, 4096, 4096, 4096, "", ""])  # default fp32
                w.writerow(["ln", "NVIDIA H100 80GB HBM3", 4096, "", "", "", 4096, "fp16"])
                w.writerow(["ln", "NVIDIA H100 80GB HBM3", 4096, "", "", "", 4096, "fp32"])
            code, _, err = run("kernels", "--gpu", "h100", "--csv", src, "--out", out)
            self.assertEqual(code, 0, err)
            with open(out, newline="") as f:
                rows = list(csv.DictReader(f))
            lat = [float(r["pred_latency_ms"]) for r in rows]
            fp32, tf32, fp16, bf16, fp8, default, ln16, ln32 = lat
            self.assertEqual(default, fp32)
            self.assertLess(tf32, fp32)
            self.assertLess(fp16, tf32)
            self.assertLess(fp8, fp16)
            self.assertAlmostEqual(bf16, fp16, delta=0.05 * fp16)  # same peak on an H100
            self.assertLess(ln16, ln32)  # half the bytes

    def test_bad_dtype_is_an_input_error(self):
        with tempfile.TemporaryDirectory() as d:
            src, out = os.path.join(d, "in.csv"), os.path.join(d, "out.csv")
            with open(src, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["OPName", "Device", "B", "M", "N", "K", "dtype"])
                w.writerow(["linear", "NVIDIA H100 80GB HBM3", 1, 64, 64, 64, "fp7"])
            code, _, err = run("kernels", "--gpu", "h100", "--csv", src, "--out", out)
            self.assertEqual(code, 2)
            self.assertIn("fp7", err)
            self.assertFalse(os.path.exists(out))


class PowerLimitedGpus(unittest.TestCase):
    def test_the_report_says_when_a_gpu_cannot_hold_its_boost_clock(self):
        # L4: 72 W for 7,424 FP32 lanes on a 4 nm node, below the power per lane that holds the
        # boost clock under dense FP32 math (precision.h); the H100 SXM (700 W) holds it.
        reports = run_json(EXAMPLE, "--gpu", "l4,h100", "--batch", "1", "--seq", "64")
        by_gpu = {r["gpu_alias"]: r for r in reports}
        notes = [w for w in by_gpu["l4"]["warnings"] if "boost clock" in w]
        self.assertEqual(len(notes), 1, by_gpu["l4"]["warnings"])
        self.assertIn("NVIDIA L4", notes[0])
        self.assertFalse([w for w in by_gpu["h100"]["warnings"] if "boost clock" in w])
        gemms = [k for k in kernels(by_gpu["l4"]) if k["class"] == "gemm"]
        self.assertTrue(gemms)
        # GEMMs stay within a few times their roofline.
        self.assertLess(sum(k["latency_ms"] for k in gemms), 5 * sum(k["roofline_ms"] for k in gemms))
        code, _, err = run(EXAMPLE, "--gpu", "l4,l4", "--batch", "1", "--seq", "64", "--quiet")
        self.assertEqual(code, 0)
        self.assertEqual(len([l for l in err.splitlines() if "boost clock" in l]), 1)  # said once on stderr
        # A BF16 model's GEMMs run on tensor cores: nothing to say about the FP32 lanes' clock.
        bf16 = run_json(EXAMPLE, "--gpu", "l4", "--batch", "1", "--seq", "64", "--dtype", "bf16")
        self.assertFalse([w for w in bf16["warnings"] if "boost clock" in w])
        # The roofline predictor assumes the spec-sheet peak and says nothing.
        roof = run_json(EXAMPLE, "--gpu", "l4", "--batch", "1", "--seq", "64", "--predictor", "roofline")
        self.assertFalse([w for w in roof["warnings"] if "boost clock" in w])


if __name__ == "__main__":
    unittest.main()


def qdq_model(path):
    """x -> QuantizeLinear -> DequantizeLinear -> MatMul <- DequantizeLinear <- int8 W [1024, 4096]."""
    w = helper.make_tensor("Wq", TensorProto.INT8, [1024, 4096], b"\0" * (1024 * 4096), raw=True)
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [0.05])
    z = helper.make_tensor("z", TensorProto.INT8, [], [0])
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="quant_x"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dequant_x"),
        helper.make_node("DequantizeLinear", ["Wq", "s", "z"], ["wd"], name="dequant_w"),
        helper.make_node("MatMul", ["xd", "wd"], ["y"], name="matmul"),
    ]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1024])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4096])], [w, s, z])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


class QuantizeDequantize(unittest.TestCase):
    def test_full_fusion_runs_dequantize_inside_an_int8_gemm(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "qdq.onnx")
            qdq_model(path)
            eager = run_json(path, "--gpu", "h100", "--batch", "512", "--fusion", "eager")
            full = run_json(path, "--gpu", "h100", "--batch", "512", "--fusion", "full")
            self.assertEqual(len(kernels(eager)), 4)
            eager_gemm = [k for k in kernels(eager) if k["class"] == "gemm"][0]
            self.assertEqual(eager_gemm["math"], "fp32-simt")
            by_name = {n["name"]: n for n in full["nodes"]}
            self.assertEqual(by_name["dequant_x"]["kernels"], [])
            self.assertEqual(by_name["dequant_w"]["kernels"], [])
            gemm = by_name["matmul"]["kernels"][0]
            self.assertEqual(gemm["dtype"], "int8")
            self.assertEqual(gemm["math"], "int8-tensor")
            # int8 operands, fp32 output.
            self.assertEqual(gemm["bytes"], 512 * 1024 + 1024 * 4096 + 512 * 4096 * 4)
            self.assertLess(full["e2e_latency_ms"], eager["e2e_latency_ms"])
