"""The Python module against the CLI: the same reports, comparisons, kernel rows and files."""
import concurrent.futures
import copy
import csv
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

import onnx

from py_util import same, DEVICE_JSON, EXAMPLE, SOURCE, fixture, neusight_onnx as n, run, run_json

CONFIG = os.path.join(SOURCE, "examples", "gpt2-small.json")


class Analyze(unittest.TestCase):
    def test_dict_equals_cli_json(self):
        r = n.analyze(EXAMPLE, gpu="h100", batch=1, seq=128)
        self.assertIsInstance(r, dict)
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "128")))
        self.assertEqual(json.loads(json.dumps(r)), r)

    def test_options_equal_cli_flags(self):
        r = n.analyze(EXAMPLE, "a100", dims={"batch": 2, "sequence": 64}, mode="training", dtype="bf16",
                      fusion="full", timing="kernel")
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "a100", "--dim", "batch=2", "--dim", "sequence=64",
                                     "--mode", "training", "--dtype", "bf16", "--fusion", "full",
                                     "--timing", "kernel")))

    def test_attention_equals_cli_flag(self):
        for value in ("fused", "unfused", "auto"):
            with self.subTest(attention=value):
                r = n.analyze(EXAMPLE, "h100", batch=2, seq=64, dtype="fp16", attention=value)
                self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "h100", "--batch", "2", "--seq", "64", "--dtype",
                                                 "fp16", "--attention", value)))

    def test_host_dispatch_equals_cli_flag(self):
        r = n.analyze(EXAMPLE, "h100", batch=1, seq=64, host_dispatch_us=20)
        self.assertEqual(r["host_dispatch_us"], 20)
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "64",
                                         "--host-dispatch-us", "20")))

    def test_shapes_equal_cli_shape_flag(self):
        want = run_json(EXAMPLE, "--gpu", "h100", "--shape", "input_ids=2x16")
        for shapes in ({"input_ids": [2, 16]}, {"input_ids": (2, 16)}, {"input_ids": "2x16"}):
            with self.subTest(shapes=shapes):
                self.assertTrue(same(n.analyze(EXAMPLE, "h100", shapes=shapes), want))

    def test_parallel_equals_cli(self):
        want = run_json(EXAMPLE, "--gpu", "h100", "--batch", "8", "--seq", "128", "--mode", "training",
                        "--parallel", "dp=2,tp=2,microbatches=2", "--link-bw", "100")
        for parallel in ("dp=2,tp=2,microbatches=2", {"dp": 2, "tp": 2, "microbatches": 2}):
            with self.subTest(parallel=parallel):
                r = n.analyze(EXAMPLE, "h100", batch=8, seq=128, mode="training", parallel=parallel, link_bw=100)
                self.assertTrue(same(r, want))

    def test_gpu_list_equals_cli_array(self):
        rs = n.analyze(EXAMPLE, ["b200", "h100", "l4"], batch=1, seq=128)
        self.assertIsInstance(rs, list)
        self.assertTrue(same(rs, run_json(EXAMPLE, "--gpu", "b200,h100,l4", "--batch", "1", "--seq", "128")))
        one = n.analyze(EXAMPLE, ["h100"], batch=1, seq=128)
        self.assertEqual(one, [n.analyze(EXAMPLE, "h100", batch=1, seq=128)])

    def test_bytes_and_model_proto(self):
        want = run_json(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "128")
        with open(EXAMPLE, "rb") as f:
            data = f.read()
        proto = onnx.load(EXAMPLE, load_external_data=False)
        for model in (data, bytearray(data), proto):
            with self.subTest(model=type(model).__name__):
                r = n.analyze(model, "h100", batch=1, seq=128)
                # No file name: the report names the graph instead; everything else is the same.
                self.assertEqual(r["model"], proto.graph.name)
                self.assertTrue(same({**r, "model": want["model"]}, want))

    def test_gpu_all_is_every_database_gpu(self):
        names = [g["name"] for g in n.gpus()]
        rs = n.analyze(EXAMPLE, "all", batch=1, seq=32)
        self.assertEqual([r["gpu"] for r in rs], names)
        self.assertTrue(same(rs, run_json(EXAMPLE, "--gpu", "all", "--batch", "1", "--seq", "32")))
        self.assertEqual([r["gpu"] for r in n.analyze(EXAMPLE, ["l4", "ALL"], batch=1, seq=32)],
                         ["NVIDIA L4"] + names)

    def test_optimizer_and_latency_slo_equal_the_cli(self):
        r = n.analyze(EXAMPLE, "h100", batch=1, seq=64, mode="training", optimizer="adam")
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "64", "--mode", "training",
                                         "--optimizer", "adam")))
        self.assertEqual(r["memory"]["optimizer"], "adam")
        r = n.analyze(EXAMPLE, "h100", batch=2, seq=64, mode="training", recompute="full", parallel={"dp": 2, "zero": 3})
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "h100", "--batch", "2", "--seq", "64", "--mode", "training",
                                         "--recompute", "full", "--parallel", "dp=2,zero=3")))
        self.assertEqual(r["parallel"]["zero"], 3)
        # lora as --lora: a rank, or a rank and its targets.
        r = n.analyze(EXAMPLE, "h100", batch=2, seq=64, mode="training", lora=8)
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "h100", "--batch", "2", "--seq", "64", "--mode", "training",
                                         "--lora", "8")))
        self.assertEqual(r["memory"]["lora_rank"], 8)
        r = n.analyze(EXAMPLE, "h100", batch=2, seq=64, mode="training", lora="4,targets=attn")
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "h100", "--batch", "2", "--seq", "64", "--mode", "training",
                                         "--lora", "4,targets=attn")))
        # sparsity as --sparsity.
        r = n.analyze(EXAMPLE, ["a100", "v100"], batch=2, seq=64, dtype="bf16", sparsity="2:4,targets=mlp")
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "a100,v100", "--batch", "2", "--seq", "64", "--dtype", "bf16",
                                         "--sparsity", "2:4,targets=mlp")))
        self.assertEqual([x["sparsity"]["sparse_gemms"] for x in r], [24, 0])
        # gpu_cost as --gpu-cost: one price, or one per GPU.
        r = n.analyze(EXAMPLE, ["h100", "b200"], batch=2, seq=64, gpu_cost={"h100": 2.5, "b200": 5})
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "h100,b200", "--batch", "2", "--seq", "64",
                                         "--gpu-cost", "h100=2.5,b200=5")))
        self.assertTrue(same(n.analyze(EXAMPLE, "h100", batch=2, seq=64, gpu_cost=2.5),
                             run_json(EXAMPLE, "--gpu", "h100", "--batch", "2", "--seq", "64", "--gpu-cost", "2.5")))
        # train_tokens as --train-tokens: a count or the CLI's text.
        r = n.analyze(EXAMPLE, "h100", batch=2, seq=64, mode="training", train_tokens=2e9)
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", "h100", "--batch", "2", "--seq", "64", "--mode", "training",
                                         "--train-tokens", "2B")))
        self.assertGreater(r["throughput"]["train_days"], 0)
        self.assertTrue(same(n.analyze(EXAMPLE, "h100", batch=2, seq=64, mode="training", train_tokens="2B"), r))
        with self.assertRaisesRegex(ValueError, "--train-tokens applies to --mode training"):
            n.analyze(EXAMPLE, "h100", batch=2, seq=64, train_tokens=2e9)
        rs = n.analyze(EXAMPLE, ["h100", "l4"], seq=128, latency_slo=20)
        self.assertTrue(same(rs, run_json(EXAMPLE, "--gpu", "h100,l4", "--seq", "128", "--latency-slo", "20")))
        self.assertTrue(all(x["latency_slo"]["met"] for x in rs))
        # A comma list as the CLI's --gpu takes it.
        self.assertTrue(same(n.analyze(EXAMPLE, "h100,l4", seq=128, latency_slo=20), rs))
        with self.assertRaisesRegex(ValueError, "empty GPU name"):
            n.analyze(EXAMPLE, "h100,", batch=1, seq=64)
        with self.assertRaisesRegex(ValueError, "latency_slo chooses the batch"):  # an input error
            n.analyze(EXAMPLE, "h100", batch=2, seq=128, latency_slo=20)

    def test_path_like(self):
        import pathlib
        r = n.analyze(pathlib.Path(EXAMPLE), pathlib.Path(DEVICE_JSON), batch=1, seq=32)
        self.assertTrue(same(r, run_json(EXAMPLE, "--gpu", DEVICE_JSON, "--batch", "1", "--seq", "32")))

    def test_gpu_dict(self):
        want = run_json(EXAMPLE, "--gpu", DEVICE_JSON, "--batch", "1", "--seq", "32")
        with open(DEVICE_JSON) as f:
            device = json.load(f)
        r = n.analyze(EXAMPLE, device, batch=1, seq=32)
        self.assertTrue(same(r["e2e_latency_ms"], want["e2e_latency_ms"]))
        self.assertTrue(same(r["nodes"], want["nodes"]))
        # A gpus() entry is a GPU too, and predicts as its name does.
        entry = next(g for g in n.gpus() if g["name"] == "NVIDIA B200")
        self.assertEqual(n.analyze(EXAMPLE, entry, batch=1, seq=32), n.analyze(EXAMPLE, "b200", batch=1, seq=32))

    def test_from_config_equals_cli(self):
        want = run_json("--config", CONFIG, "--gpu", "h100", "--batch", "1", "--seq", "64")
        self.assertTrue(same(n.from_config(CONFIG, "h100", batch=1, seq=64), want))
        with open(CONFIG) as f:
            cfg = json.load(f)
        r = n.from_config(cfg, "h100", batch=1, seq=64)
        self.assertTrue(same(r["e2e_latency_ms"], want["e2e_latency_ms"]))
        self.assertTrue(same(r["nodes"], want["nodes"]))

    def test_image_size_equals_cli(self):
        # A Qwen2.5-VL config's image: an int or (height, width), as --image-size.
        cfg = os.path.join(SOURCE, "tests", "data", "qwen2_5_vl_7b.json")
        want = run_json("--config", cfg, "--gpu", "h100", "--batch", "1", "--seq", "300", "--dtype", "bf16",
                        "--image-size", "300x500")
        got = n.from_config(cfg, "h100", batch=1, seq=300, dtype="bf16", image_size=(300, 500))
        self.assertTrue(same(got["e2e_latency_ms"], want["e2e_latency_ms"]))
        self.assertNotEqual(got["e2e_latency_ms"], n.from_config(cfg, "h100", batch=1, seq=300, dtype="bf16")["e2e_latency_ms"])
        two = run_json("--config", cfg, "--gpu", "h100", "--batch", "1", "--seq", "400", "--dtype", "bf16",
                       "--image-size", "300x500", "--images", "2")
        got = n.from_config(cfg, "h100", batch=1, seq=400, dtype="bf16", image_size=(300, 500), images=2)
        self.assertTrue(same(got["e2e_latency_ms"], two["e2e_latency_ms"]))
        gen = run_json("--config", cfg, "--gpu", "h100", "--generate", "1400:8", "--image-size", "1024")
        self.assertTrue(same(n.generate(cfg, "h100", 1400, 8, image_size=1024)["generation"], gen["generation"]))
        c = n.compare([cfg, cfg], "h100", batch=1, seq=1400, image_size=1024)
        self.assertEqual(len(c["models"]), 2)
        with self.assertRaises(TypeError):
            n.from_config(cfg, "h100", batch=1, seq=300, image_size=(1, 2, 3))
        with self.assertRaisesRegex(ValueError, "--image-size applies to Qwen2-VL"):
            n.from_config(CONFIG, "h100", batch=1, seq=64, image_size=448)

    def test_generate_equals_cli(self):
        # A config (path and dict), the ONNX decoder exported from it, a GPU list, the serving
        # defaults and explicit options: the CLI's --generate report, key for key.
        cfg = os.path.join(SOURCE, "tests", "data", "mixtral_8x7b.json")
        want = run_json("--config", cfg, "--gpu", "h100,b200", "--generate", "128:16", "--batch", "2",
                        "--dtype", "int8", "--parallel", "tp=4,ep=4")
        self.assertTrue(same(n.generate(cfg, ["h100", "b200"], 128, 16, batch=2, dtype="int8",
                                        parallel={"tp": 4, "ep": 4}), want))
        with open(cfg) as f:
            as_dict = json.load(f)
        got = n.generate(as_dict, "h100", 128, 16, batch=2, dtype="int8", parallel="tp=4,ep=4")
        self.assertTrue(same(got["generation"], want[0]["generation"]))
        # LoRA adapters served unmerged, as --lora.
        llama = os.path.join(SOURCE, "tests", "data", "llama3_8b.json")
        want = run_json("--config", llama, "--gpu", "h100", "--generate", "128:16", "--dtype", "bf16", "--lora",
                        "8,targets=q_proj")
        self.assertTrue(same(n.generate(llama, "h100", 128, 16, dtype="bf16", lora="8,targets=q_proj"), want))
        want = run_json("--config", llama, "--gpu", "h100", "--generate", "128:16", "--prefix-cached", "96")
        self.assertTrue(same(n.generate(llama, "h100", 128, 16, prefix_cached=96), want))
        t5 = os.path.join(SOURCE, "tests", "data", "flan_t5_base.json")  # an encoder-decoder
        want = run_json("--config", t5, "--gpu", "a100-80gb", "--generate", "256:32", "--dtype", "bf16")
        got = n.generate(t5, "a100-80gb", 256, 32, dtype="bf16")
        self.assertTrue(same(got, want))
        self.assertTrue(got["generation"]["kv_cache"]["encoder_decoder"])
        with tempfile.TemporaryDirectory() as d:
            small = os.path.join(d, "small_llama.json")
            with open(small, "w") as f:
                json.dump({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
                           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}, f)
            step = os.path.join(d, "step.onnx")
            self.assertEqual(run("export", "--config", small, "--kv-cache", "-o", step)[0], 0)
            want = run_json(step, "--gpu", "l40s", "--generate", "64:8", "--fusion", "eager", "--timing", "device")
            got = n.generate(step, "l40s", 64, 8, fusion="eager", timing="device")
            self.assertTrue(same(got, want))
            self.assertIn("FlashAttention, unfused kernels", got["generation"]["execution"])
            self.assertTrue(same(n.generate(onnx.load(step), "l40s", 64, 8, fusion="eager", timing="device")["generation"],
                                 want["generation"]))
            # Speculative decoding with the ONNX decoder as its own draft.
            spec = f"2,accept=0.6,draft={step}"
            want = run_json("--config", small, "--gpu", "h100", "--generate", "64:8", "--speculative", spec)
            self.assertTrue(same(n.generate(small, "h100", 64, 8, speculative=spec), want))
            # Pipeline stages (vLLM's --pipeline-parallel-size) beside tensor parallelism.
            want = run_json("--config", small, "--gpu", "h100,l40s", "--generate", "64:8", "--batch", "4",
                            "--parallel", "tp=2,pp=2")
            got = n.generate(small, ["h100", "l40s"], 64, 8, batch=4, parallel={"tp": 2, "pp": 2})
            self.assertTrue(same(got, want))
            self.assertEqual(got[0]["generation"]["pipeline"]["microbatches"], 2)
            want = run_json("--config", small, "--gpu", "h100", "--generate", "64:8", "--kv-dtype", "fp8")
            self.assertTrue(same(n.generate(small, "h100", 64, 8, kv_dtype="fp8"), want))
            # A latency target: the batch searched per GPU, as --tpot-slo.
            want = run_json("--config", small, "--gpu", "h100,l40s", "--generate", "64:8", "--tpot-slo", "0.05")
            self.assertTrue(same(n.generate(small, ["h100", "l40s"], 64, 8, tpot_slo=0.05), want))
            want = run_json("--config", small, "--gpu", "h100", "--generate", "64:8", "--ttft-slo", "0.5", "--tpot-slo", "0.05")
            self.assertTrue(same(n.generate(small, "h100", 64, 8, tpot_slo=0.05, ttft_slo=0.5), want))
            with self.assertRaisesRegex(ValueError, "without batch"):
                n.generate(small, "h100", 64, 8, batch=4, tpot_slo=0.05)

    def test_generate_encoder_decoder_equals_cli(self):
        # optimum's two files (encoder, merged decoder), T5-style and Whisper-style, as --encoder.
        import seq2seq_onnx
        with tempfile.TemporaryDirectory() as d:
            enc, dec = os.path.join(d, "encoder_model.onnx"), os.path.join(d, "decoder_model_merged.onnx")
            seq2seq_onnx.build(enc, dec)
            want = run_json(dec, "--encoder", enc, "--gpu", "h100", "--generate", "128:16", "--batch", "2")
            self.assertTrue(same(n.generate(dec, "h100", 128, 16, batch=2, encoder=enc), want))
            self.assertTrue(same(n.generate(onnx.load(dec), "h100", 128, 16, batch=2, encoder=onnx.load(enc))["generation"],
                                 want["generation"]))
            seq2seq_onnx.build(enc, dec, features=True)
            want = run_json(dec, "--encoder", enc, "--gpu", "h100", "--generate", "4:16", "--dim", "feature_size=80",
                            "--dim", "encoder_sequence_length=3000")
            got = n.generate(dec, "h100", 4, 16, encoder=enc, dims={"feature_size": 80, "encoder_sequence_length": 3000})
            self.assertTrue(same(got, want))
            with self.assertRaisesRegex(ValueError, "--encoder"):
                n.generate(dec, "h100", 4, 16, encoder=enc)
            with self.assertRaisesRegex(ValueError, "ONNX decoder"):
                n.generate(CONFIG, "h100", 4, 16, encoder=enc)

    def test_report_copies_are_plain_dicts(self):
        r = n.analyze(EXAMPLE, "h100", batch=1, seq=16)
        self.assertIsInstance(r, n.Report)
        for c in (copy.copy(r), copy.deepcopy(r), pickle.loads(pickle.dumps(r))):
            self.assertIs(type(c), dict)
            self.assertEqual(c, r)


class Sweep(unittest.TestCase):
    def test_thread_pool_sweep_equals_serial(self):
        variants = [(1, 64), (2, 128), (4, 32)]
        gpus = ["h100", "a100", "l4"]
        serial = {(b, s): [r["e2e_latency_ms"] for r in n.analyze(EXAMPLE, gpus, batch=b, seq=s)]
                  for b, s in variants}
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            futures = {(b, s, g): pool.submit(n.analyze, EXAMPLE, g, batch=b, seq=s)
                       for b, s in variants for g in gpus}
            for (b, s, g), f in futures.items():
                self.assertEqual(f.result()["e2e_latency_ms"], serial[(b, s)][gpus.index(g)])

    def test_gil_is_released_during_analysis(self):
        # The worker reads its device JSON from a FIFO that only this thread fills: with the
        # GIL held by the worker this thread could never write, and the child would hang.
        script = r"""
import os, sys, threading
import neusight_onnx as n
fifo = os.path.join(sys.argv[1], "gpu.json")
os.mkfifo(fifo)
out = {}
t = threading.Thread(target=lambda: out.update(r=n.analyze(sys.argv[2], fifo, batch=1, seq=8)))
t.start()
with open(sys.argv[3]) as src, open(fifo, "w") as dst:
    dst.write(src.read())
t.join()
print(out["r"]["gpu"])
"""
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, "-c", script, d, EXAMPLE, DEVICE_JSON], capture_output=True,
                               text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "NVIDIA H100 80GB HBM3")

    def test_import_reads_no_data(self):
        # Import stays cheap because the GPU database and weights load on first use
        # (bench/analysis_speed/python_module.py prints the import time): with no data
        # directory at all the import succeeds, and the first call says what is missing.
        script = ("import neusight_onnx as n\n"
                  "try:\n    n.gpus()\nexcept Exception as e:\n    print(type(e).__name__)\n")
        env = {**os.environ, "NEUSIGHT_DATA_DIR": "/nonexistent/neusight-data"}
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(p.stdout.strip(), ("RuntimeError", "ValueError"))


class OtherCommands(unittest.TestCase):
    def test_gpus_equals_cli(self):
        code, out, err = run("gpus", "--json")
        self.assertEqual(code, 0, err)
        gpus = n.gpus()
        self.assertEqual(gpus, json.loads(out))
        self.assertIn("b200", next(g for g in gpus if g["name"] == "NVIDIA B200")["aliases"])

    def test_compare_equals_cli(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "c.json")
            code, _, err = run("compare", EXAMPLE, CONFIG, "--gpu", "h100,l4", "--batch", "1", "--seq", "64",
                               "--json", out, "--quiet")
            self.assertEqual(code, 0, err)
            with open(out) as f:
                want = json.load(f)
        c = n.compare([EXAMPLE, CONFIG], ["h100", "l4"], batch=1, seq=64)
        self.assertIsInstance(c, n.Comparison)
        self.assertTrue(same(c, want))
        with open(EXAMPLE, "rb") as f:
            c2 = n.compare([f.read(), EXAMPLE], "h100", batch=1, seq=64, labels=["a", "b"], top=3)
        self.assertEqual(c2["models"], ["a", "b"])
        # Training options as the CLI's: LoRA adapters under activation checkpointing.
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "c.json")
            code, _, err = run("compare", EXAMPLE, CONFIG, "--gpu", "h100", "--batch", "2", "--seq", "64", "--mode",
                               "training", "--lora", "8", "--recompute", "full", "--json", out, "--quiet")
            self.assertEqual(code, 0, err)
            with open(out) as f:
                want = json.load(f)
        c3 = n.compare([EXAMPLE, CONFIG], "h100", batch=2, seq=64, mode="training", lora=8, recompute="full")
        self.assertTrue(same(c3, want))
        # Every model on the same GPUs: parallel and link_bw as --parallel and --link-bw.
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "c.json")
            code, _, err = run("compare", EXAMPLE, CONFIG, "--gpu", "h100", "--batch", "4", "--seq", "64", "--parallel",
                               "tp=2,pp=2", "--link-bw", "100", "--json", out, "--quiet")
            self.assertEqual(code, 0, err)
            with open(out) as f:
                want = json.load(f)
        c4 = n.compare([EXAMPLE, CONFIG], "h100", batch=4, seq=64, parallel={"tp": 2, "pp": 2}, link_bw=100)
        self.assertTrue(same(c4, want))

    def test_compare_generations_equal_cli(self):
        # generate=(prompt, new_tokens) as `compare --generate`, encoder= as --encoder.
        import seq2seq_onnx
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "c.json")
            small = os.path.join(d, "small.json")
            with open(small, "w") as f:
                json.dump({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}, f)
            code, _, err = run("compare", small, CONFIG, "--gpu", "h100,l4", "--generate", "64:8", "--dtype", "fp16",
                               "--json", out, "--quiet")
            self.assertEqual(code, 0, err)
            with open(out) as f:
                want = json.load(f)
            self.assertTrue(same(n.compare([small, CONFIG], ["h100", "l4"], generate=(64, 8), dtype="fp16"), want))
            enc, dec = os.path.join(d, "encoder_model.onnx"), os.path.join(d, "decoder_model_merged.onnx")
            seq2seq_onnx.build(enc, dec)
            code, _, err = run("compare", dec, dec, "--encoder", enc, "--gpu", "h100", "--generate", "128:16",
                               "--batch", "2", "--json", out, "--quiet")
            self.assertEqual(code, 0, err)
            with open(out) as f:
                want = json.load(f)
            self.assertTrue(same(n.compare([dec, dec], "h100", generate=(128, 16), batch=2, encoder=enc), want))
            self.assertTrue(same(n.compare([dec, dec], "h100", generate=(128, 16), batch=2, encoder=[enc, enc]), want))
            with self.assertRaisesRegex(ValueError, "one per model"):
                n.compare([dec, dec], "h100", generate=(128, 16), encoder=[enc])
            with self.assertRaisesRegex(ValueError, "applies to generate"):
                n.compare([dec, dec], "h100", batch=1, seq=8, encoder=enc)
            with self.assertRaises(TypeError):
                n.compare([dec, dec], "h100", generate=128, encoder=enc)

    def test_kernels_equal_cli(self):
        csv_in = fixture("kernels", "test", "softmax.csv")
        with open(csv_in) as f:
            rows = list(csv.DictReader(f))
        for gpu in ("from-row", "v100"):
            with tempfile.TemporaryDirectory() as d:
                csv_out = os.path.join(d, "out.csv")
                code, _, err = run("kernels", "--gpu", gpu, "--csv", csv_in, "--out", csv_out)
                self.assertEqual(code, 0, err)
                with open(csv_out) as f:
                    want = list(csv.DictReader(f))
            for given in (csv_in, rows):
                with self.subTest(gpu=gpu, rows=type(given).__name__):
                    got = n.kernels(given, gpu)
                    self.assertEqual(len(got), len(want))
                    for g, w in zip(got, want):
                        self.assertEqual(set(g), set(w))
                        for k, v in w.items():
                            if k.startswith("pred_"):  # the CSV keeps 9 significant digits
                                self.assertAlmostEqual(g[k], float(v), delta=1e-8 * float(v))
                            elif k in ("tiles", "waves"):
                                self.assertEqual(g[k], int(v))
                            else:
                                self.assertEqual(g[k], v)
        self.assertLess(len(n.kernels(rows, "v100")), len(rows))

    def test_kernels_timing(self):
        # timing=None predicts fp32 rows in eager timing and other dtypes in kernel timing, as
        # the CLI does without --timing; a given timing applies to every row.
        rows = [{"OPName": "linear", "Latency": "0", "Device": "NVIDIA H100 80GB HBM3", "B": "1", "M": "16",
                 "N": "4096", "K": "4096", "dtype": dt} for dt in ("fp32", "fp16")]
        default = n.kernels(rows, "h100")
        eager = n.kernels(rows, "h100", timing="eager")
        kernel = n.kernels(rows, "h100", timing="kernel")
        self.assertEqual(default[0]["pred_latency_ms"], eager[0]["pred_latency_ms"])
        self.assertEqual(default[1]["pred_latency_ms"], kernel[1]["pred_latency_ms"])
        self.assertLess(kernel[1]["pred_latency_ms"], eager[1]["pred_latency_ms"])
        with self.assertRaises(ValueError):
            n.kernels(rows, "h100", timing="wall")


class ReadmeExample(unittest.TestCase):
    def test_sweep_example_runs(self):
        with open(os.path.join(SOURCE, "README.md")) as f:
            code = f.read().split("```python\n", 1)[1].split("```", 1)[0]
        self.assertLessEqual(len(code.strip().splitlines()), 10)
        p = subprocess.run([sys.executable, "-c", code], cwd=SOURCE, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.strip().splitlines()
        self.assertEqual(lines[0].split(), ["ms", "a100", "h100", "b200"])
        self.assertEqual([l.split()[:2] for l in lines[1:]], [["12", "layers"], ["6", "layers"], ["3", "layers"]])
        want = n.from_config(os.path.join(SOURCE, "examples", "gpt2-small.json"), "h100", batch=8, seq=512)
        self.assertEqual(lines[1].split()[3], f"{want['e2e_latency_ms']:.2f}")


class Writers(unittest.TestCase):
    def test_html_and_annotated_equal_cli(self):
        with tempfile.TemporaryDirectory() as d:
            html, ann = os.path.join(d, "cli.html"), os.path.join(d, "cli.onnx")
            code, _, err = run(EXAMPLE, "--gpu", "h100,b200", "--batch", "1", "--seq", "64", "--html", html,
                               "--out", ann, "--quiet")
            self.assertEqual(code, 0, err)
            rs = n.analyze(EXAMPLE, ["h100", "b200"], batch=1, seq=64)
            n.write_html(rs, os.path.join(d, "py.html"))
            n.write_annotated(EXAMPLE, rs[0], os.path.join(d, "py.onnx"))
            for a, b in (("cli.html", "py.html"), ("cli.onnx", "py.onnx")):
                with open(os.path.join(d, a), "rb") as fa, open(os.path.join(d, b), "rb") as fb:
                    self.assertEqual(fa.read(), fb.read(), b)

    def test_compare_html(self):
        with tempfile.TemporaryDirectory() as d:
            want = os.path.join(d, "cli.html")
            code, _, err = run("compare", EXAMPLE, CONFIG, "--gpu", "h100", "--batch", "1", "--seq", "32",
                               "--html", want, "--quiet")
            self.assertEqual(code, 0, err)
            c = n.compare([EXAMPLE, CONFIG], "h100", batch=1, seq=32)
            got = os.path.join(d, "py.html")
            n.write_html(c, got)
            with open(want) as fa, open(got) as fb:
                self.assertEqual(fa.read(), fb.read())


if __name__ == "__main__":
    unittest.main()
