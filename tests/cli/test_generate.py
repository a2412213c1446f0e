"""--generate PROMPT:NEW: LLM generation (prefill + KV-cache decode) through the real binary.

Bad input is one line and exit 2 with no output file; the JSON "generation" object, the HTML
chart, GPU lists, the ONNX decoder path (export --kv-cache fed back), tensor parallelism and the
number of decode steps a long generation predicts.
"""
import json
import os
import tempfile
import unittest

from cli_util import EXAMPLE, SOURCE, needs_shared, run, shared
import gqa_decoder
import merged_decoder
import seq2seq_onnx

LLAMA3_8B = os.path.join(SOURCE, "tests", "data", "llama3_8b.json")
SMALL = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 4000, "torch_dtype": "float16"}
KEYS = ["ttft_ms", "tpot_ms", "tpot_last_ms", "total_ms", "tokens_per_s", "kv_cache_bytes", "memory_bytes", "max_batch"]


class Generate(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.small = os.path.join(self.dir, "small_llama.json")
        with open(self.small, "w") as f:
            json.dump(SMALL, f)

    def tearDown(self):
        self._tmp.cleanup()

    def gen_json(self, *args):
        out = os.path.join(self.dir, "g.json")
        rc, so, se = run(*args, "--json", out, "--quiet")
        self.assertEqual(rc, 0, se)
        with open(out) as f:
            return json.load(f)

    def test_tpot_slo_picks_the_largest_batch_that_meets_it(self):
        # Llama-3-8B on an H100: a target between batch 1's TPOT and the full GPU's.
        cfg = LLAMA3_8B
        one = self.gen_json("--config", cfg, "--generate", "512:32", "--dtype", "bf16", "--gpu", "h100")["generation"]
        slo = 2.5 * one["tpot_ms"]
        r = self.gen_json("--config", cfg, "--generate", "512:32", "--dtype", "bf16", "--gpu", "h100",
                          "--tpot-slo", str(slo))["generation"]
        t = r["tpot_slo"]
        self.assertTrue(t["met"])
        self.assertEqual(t["limit"], "tpot")
        self.assertEqual(t["batch"], r["batch"])
        self.assertGreater(r["batch"], 1)
        self.assertLessEqual(r["tpot_ms"], slo)
        self.assertGreater(t["next_tpot_ms"], slo)
        self.assertGreater(t["next_batch"], r["batch"])
        # The same figures as a plain run at that batch; the next batch misses.
        for batch, check in ((r["batch"], lambda v: self.assertAlmostEqual(v, r["tpot_ms"], places=9)),
                             (t["next_batch"], lambda v: self.assertGreater(v, slo))):
            plain = self.gen_json("--config", cfg, "--generate", "512:32", "--dtype", "bf16", "--gpu", "h100",
                                  "--batch", str(batch))["generation"]
            check(plain["tpot_ms"])
        # A loose target is stopped by the memory (the batch's sequences fit beside its
        # activations); an impossible one reports batch 1 as missing it.
        loose = self.gen_json("--config", cfg, "--generate", "512:32", "--dtype", "bf16", "--gpu", "h100",
                              "--tpot-slo", "100000")["generation"]
        self.assertEqual(loose["tpot_slo"]["limit"], "memory")
        self.assertGreaterEqual(loose["max_batch"], loose["batch"])
        tight = self.gen_json("--config", cfg, "--generate", "512:32", "--dtype", "bf16", "--gpu", "h100,b200",
                              "--tpot-slo", str(one["tpot_ms"] / 2))
        self.assertEqual(tight[0]["generation"]["batch"], 1)
        self.assertFalse(tight[0]["generation"]["tpot_slo"]["met"])
        self.assertEqual(tight[0]["generation"]["tpot_slo"]["limit"], "none")
        # The GPU table marks the batch that misses the target, and says why below it.
        rc, so, se = run("--config", cfg, "--generate", "512:32", "--dtype", "bf16", "--gpu", "h100,b200",
                         "--tpot-slo", str(one["tpot_ms"] / 2))
        self.assertEqual(rc, 0, se)
        self.assertRegex(so, r"NVIDIA H100 80GB HBM3 +1 \(misses\) ")
        self.assertIn("is not met, not even at batch 1", so)
        page = os.path.join(self.dir, "slo.html")
        rc, so, se = run("--config", cfg, "--generate", "512:32", "--dtype", "bf16", "--gpu", "h100",
                         "--tpot-slo", str(slo), "--html", page)
        self.assertEqual(rc, 0, se)
        with open(page) as f:
            self.assertIn('<th class="n">batch</th>', f.read())
        self.assertIn("TPOT target", so)
        self.assertIn("batch %d meets it" % r["batch"], so)
        for args, needle in [(("--batch", "4", "--tpot-slo", "10"), "without --batch"),
                             (("--tpot-slo", "0"), "positive"), (("--tpot-slo", "x"), "--tpot-slo")]:
            rc, so, se = run("--config", cfg, "--generate", "512:32", "--gpu", "h100", *args)
            self.assertEqual(rc, 2, se)
            self.assertIn(needle, se)
        rc, so, se = run("--config", cfg, "--batch", "1", "--seq", "64", "--gpu", "h100", "--tpot-slo", "10")
        self.assertEqual(rc, 2, se)
        self.assertIn("applies to --generate", se)

    def test_gpu_cost_of_the_output_tokens(self):
        base = ("--config", self.small, "--generate", "64:16", "--batch", "4")
        rs = self.gen_json(*base, "--gpu", "h100,b200", "--gpu-cost", "h100=2,b200=6", "--parallel", "tp=2")
        for r, usd in zip(rs, (2, 6)):
            g = r["generation"]
            want = usd * 2 / 3600 / g["tokens_per_s"] * 1e6  # tp=2: two GPUs' hours
            self.assertAlmostEqual(g["usd_per_m_tokens"], want, delta=1e-9 * want)
            self.assertLess(g["usd_per_m_tokens_low"], g["usd_per_m_tokens"])
            self.assertGreater(g["usd_per_m_tokens_high"], g["usd_per_m_tokens"])
        rc, so, se = run(*base, "--gpu", "h100,b200", "--gpu-cost", "h100=2,b200=6", "--parallel", "tp=2")
        self.assertEqual(rc, 0, se)
        self.assertIn("$/1M tok", so)
        self.assertIn("per 1M output tokens", so)
        self.assertEqual(self.gen_json(*base, "--gpu", "h100")["generation"]["usd_per_m_tokens"], 0)

    def test_ttft_slo_alone_and_beside_the_tpot_slo(self):
        # The largest batch whose time to first token is within the target; with both targets,
        # the largest within both: the smaller of the two batches, as both times grow with it.
        base = ("--config", LLAMA3_8B, "--generate", "512:32", "--dtype", "bf16", "--gpu", "h100")
        one = self.gen_json(*base)["generation"]
        ttft, tpot = 20 * one["ttft_ms"], 2.5 * one["tpot_ms"]
        r = self.gen_json(*base, "--ttft-slo", str(ttft))["generation"]
        t = r["tpot_slo"]
        self.assertTrue(t["met"])
        self.assertEqual((t["limit"], t["ttft_ms"], t["tpot_ms"]), ("ttft", ttft, 0))
        self.assertLessEqual(r["ttft_ms"], ttft)
        self.assertGreater(t["next_ttft_ms"], ttft)
        self.assertGreater(r["batch"], 1)
        by_tpot = self.gen_json(*base, "--tpot-slo", str(tpot))["generation"]["batch"]
        both = self.gen_json(*base, "--tpot-slo", str(tpot), "--ttft-slo", str(ttft))["generation"]
        self.assertEqual(both["batch"], min(by_tpot, r["batch"]))
        self.assertEqual(both["tpot_slo"]["limit"], "tpot" if by_tpot < r["batch"] else "ttft")
        rc, so, se = run(*base, "--tpot-slo", str(tpot), "--ttft-slo", str(ttft))
        self.assertEqual(rc, 0, se)
        self.assertIn("TPOT target", so)
        self.assertIn("TTFT target", so)
        # Not met at batch 1 on either GPU: the GPU table says which targets.
        rc, so, se = run("--config", LLAMA3_8B, "--generate", "512:32", "--dtype", "bf16", "--gpu", "h100,b200",
                         "--tpot-slo", str(one["tpot_ms"] / 2), "--ttft-slo", str(one["ttft_ms"] / 2))
        self.assertEqual(rc, 0, se)
        self.assertIn("the targets (TPOT ", so)
        self.assertIn(") are not met, not even at batch 1", so)
        for args, needle in [(("--batch", "4", "--ttft-slo", "10"), "--ttft-slo chooses the batch"),
                             (("--ttft-slo", "0"), "positive"), (("--ttft-slo", "x"), "--ttft-slo")]:
            rc, so, se = run(*base, *args)
            self.assertEqual(rc, 2, se)
            self.assertIn(needle, se)
            self.assertEqual(len([l for l in se.splitlines() if l.strip()]), 1, se)
        rc, so, se = run("--config", LLAMA3_8B, "--batch", "1", "--seq", "64", "--gpu", "h100", "--ttft-slo", "10")
        self.assertEqual(rc, 2, se)
        self.assertIn("applies to --generate", se)

    def test_bad_input_is_one_line_exit_2_and_no_file(self):
        out = os.path.join(self.dir, "r.json")
        for spec, needle in [("0:5", "prompt"), ("5:0", "new token"), ("abc", "PROMPT:NEW"), ("12", "PROMPT:NEW"),
                             ("1:2:3", "PROMPT:NEW"), ("x:4", "--generate PROMPT"), ("-3:4", "prompt")]:
            rc, so, se = run("--config", self.small, "--generate", spec, "--gpu", "h100", "--json", out)
            self.assertEqual(rc, 2, (spec, se))
            lines = [l for l in se.splitlines() if l.strip()]
            self.assertEqual(len(lines), 1, se)
            self.assertTrue(lines[0].startswith("neusight-onnx: error: "), lines[0])
            self.assertIn(needle, lines[0])
            self.assertEqual(so, "")
            self.assertFalse(os.path.exists(out))
        for extra, needle in [(["--seq", "8"], "--seq"), (["--mode", "training"], "training"),
                              (["--group", "layer"], "no node table"),
                              (["--out", os.path.join(self.dir, "a.onnx")], "--out")]:
            rc, so, se = run("--config", self.small, "--generate", "8:8", "--gpu", "h100", "--json", out, *extra)
            self.assertEqual(rc, 2, se)
            self.assertIn(needle, se)
            self.assertFalse(os.path.exists(out))
        # An encoder has no decode step; a plain (cache-less) ONNX model neither.
        bert = os.path.join(self.dir, "bert.json")
        with open(bert, "w") as f:
            json.dump({"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "intermediate_size": 128, "vocab_size": 100}, f)
        rc, so, se = run("--config", bert, "--generate", "8:8", "--gpu", "h100")
        self.assertEqual(rc, 2, se)
        self.assertIn("KV-cache", se)
        plain = os.path.join(self.dir, "plain.onnx")
        self.assertEqual(run("export", "--config", self.small, "-o", plain)[0], 0)
        rc, so, se = run(plain, "--generate", "8:8", "--gpu", "h100")
        self.assertEqual(rc, 2, se)
        self.assertIn("past_key_values", se)

    def test_t5_encoder_decoder_generation(self):
        # A small Flan-T5: the encoder reads the prompt in the prefill, a step caches the
        # decoder's own tokens and the encoder's keys and values.
        t5 = os.path.join(self.dir, "flan_t5_small.json")
        with open(t5, "w") as f:
            json.dump({"model_type": "t5", "d_model": 128, "d_kv": 32, "d_ff": 256, "num_heads": 4, "num_layers": 2,
                       "num_decoder_layers": 3, "vocab_size": 1000, "feed_forward_proj": "gated-gelu",
                       "tie_word_embeddings": False}, f)
        g = self.gen_json("--config", t5, "--generate", "100:10", "--batch", "2", "--gpu", "h100")["generation"]
        self.assertTrue(g["kv_cache"]["encoder_decoder"])
        self.assertEqual(g["kv_cache"]["layers"], 3)
        self.assertEqual(g["kv_cache_bytes"], 2 * 3 * 4 * 32 * (1 + 10 + 100) * 2 * 2)  # served in fp16
        self.assertEqual([s["kv_len"] for s in g["decode_samples"]][::len(g["decode_samples"]) - 1], [1, 10])
        rc, so, se = run("--config", t5, "--generate", "100:10", "--gpu", "h100")
        self.assertEqual(rc, 0, se)
        self.assertIn("(11 decoder + 100 encoder tokens)", so)
        # Whisper: the prompt is the decoder's, the encoder's audio positions are fixed.
        whisper = os.path.join(self.dir, "whisper_small.json")
        with open(whisper, "w") as f:
            json.dump({"model_type": "whisper", "d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
                       "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
                       "decoder_ffn_dim": 128, "vocab_size": 500, "num_mel_bins": 16, "max_source_positions": 50}, f)
        w = self.gen_json("--config", whisper, "--generate", "4:20", "--gpu", "h100")["generation"]
        self.assertEqual((w["kv_cache"]["decoder_tokens"], w["kv_cache"]["encoder_tokens"]), (24, 50))
        self.assertEqual(w["kv_cache_bytes"], 2 * 2 * 4 * 16 * (4 + 20 + 50) * 2)  # served in fp16
        self.assertEqual(w["decode_samples"][0]["kv_len"], 4)
        rc, so, se = run("--config", whisper, "--generate", "400:100", "--gpu", "h100")
        self.assertEqual(rc, 2, se)
        self.assertIn("448 learned positions", se)
        # Its exported decode step alone cannot generate: one line naming --config.
        step = os.path.join(self.dir, "t5_step.onnx")
        rc, so, se = run("export", "--config", t5, "--kv-cache", "-o", step)
        self.assertEqual(rc, 0, se)
        rc, so, se = run(step, "--generate", "8:8", "--gpu", "h100")
        self.assertEqual(rc, 2, se)
        self.assertIn("encoder-decoder", se)
        self.assertIn("--config", se)
        self.assertEqual(len([l for l in se.splitlines() if l.strip()]), 1, se)

    def test_json_generation_object_and_defaults(self):
        r = self.gen_json("--config", self.small, "--generate", "64:16", "--batch", "2", "--gpu", "h100")
        g = r["generation"]
        # Served as vLLM's --dtype auto loads the checkpoint: its torch_dtype, float16.
        self.assertEqual((r["dtype"], r["dtype_source"]), ("fp16", "config"))
        self.assertIn("FlashAttention, fused kernels (--fusion full)", g["execution"])
        for k in KEYS:
            self.assertIn(k, g)
            self.assertGreater(g[k], 0)
        self.assertEqual(g["kv_cache_bytes"], 2 * 2 * 2 * 64 * (64 + 16) * 2 * 2)
        f32 = self.gen_json("--config", self.small, "--generate", "64:16", "--batch", "2", "--gpu", "h100", "--dtype", "fp32")
        self.assertIn("not as FlashAttention, which runs 16-bit", f32["generation"]["execution"])
        self.assertEqual(f32["generation"]["kv_cache_bytes"], 2 * g["kv_cache_bytes"])
        self.assertAlmostEqual(g["total_ms"], g["ttft_ms"] + 16 * g["tpot_ms"], places=6)
        self.assertAlmostEqual(g["tokens_per_s"], 2 * 16 / (g["total_ms"] / 1000), places=3)
        for k in ["ttft_ms", "tpot_ms", "total_ms"]:  # each with its 80% interval, summed as it is
            self.assertLess(g[k.replace("_ms", "_low_ms")], g[k])
            self.assertGreater(g[k.replace("_ms", "_high_ms")], g[k])
        self.assertAlmostEqual(g["total_high_ms"], g["ttft_high_ms"] + 16 * g["tpot_high_ms"], places=6)
        self.assertLess(g["tokens_per_s_low"], g["tokens_per_s"])
        self.assertGreater(g["tokens_per_s_high"], g["tokens_per_s"])
        self.assertEqual(r["latency_low_ms"], g["ttft_low_ms"])  # the report is the prefill's
        for s in g["decode_samples"]:
            self.assertLess(s["latency_low_ms"], s["latency_ms"])
            self.assertGreater(s["latency_high_ms"], s["latency_ms"])
        self.assertEqual(r["timing"], "kernel")
        self.assertNotIn("throughput", r)  # the generation's own rates say it
        # How hard each phase works the GPU: the prefill's share of the dense peak (MFU), the decode
        # steps' DRAM bytes per token over the time per token against the bandwidth (MBU); neither
        # above 1, and a token reads at least every weight a step reads.
        self.assertEqual(g["prefill_peak_math"], "fp16-tensor")
        self.assertGreater(g["prefill_mfu"], 0)
        self.assertLess(g["prefill_mfu"], 1)
        self.assertAlmostEqual(g["prefill_mfu"], g["prefill_tflops"] / g["prefill_peak_tflops"], delta=1e-9)
        self.assertAlmostEqual(g["decode_gbps"], g["decode_bytes_per_token"] / g["tpot_ms"] * 1e-6,
                               delta=1e-6 * g["decode_gbps"])
        self.assertGreater(g["decode_mbu"], 0)
        self.assertLess(g["decode_mbu"], 1)
        self.assertGreaterEqual(g["decode_bytes_per_token"], g["weight_read_ms"] * g["decode_gbps"] / g["decode_mbu"] * 1e6)
        # FlashAttention's share, apart from the classes its kernels are in (prefill gemm, decode reduce).
        self.assertGreater(g["prefill_attention_ms"], 0)
        self.assertLess(g["prefill_attention_ms"], g["prefill_by_class_ms"]["gemm"])
        self.assertGreater(g["decode_attention_ms"], 0)
        self.assertLessEqual(g["decode_attention_ms"],
                             g["decode_by_class_ms"].get("reduce", 0) + g["decode_by_class_ms"]["gemm"] + 1e-9)
        self.assertEqual(r["attention_ms"], g["prefill_attention_ms"])
        flash = sum(k["latency_ms"] for n in r["nodes"] for k in n["kernels"] if k["op"] == "flash_attention")
        self.assertAlmostEqual(r["attention_ms"], flash, places=6)
        code, out, err = run("--config", self.small, "--generate", "64:16", "--batch", "2", "--gpu", "h100")
        self.assertEqual(code, 0, err)
        self.assertIn("(FlashAttention kernels, counted in gemm and reduce above)", out)
        h = self.gen_json("--config", self.small, "--generate", "64:16", "--dtype", "bf16", "--gpu", "h100")
        self.assertIn("FlashAttention, fused kernels (--fusion full)", h["generation"]["execution"])
        self.assertEqual(r["e2e_latency_ms"], g["ttft_ms"])
        # --timing / --fusion given: kept, and the report says so.
        e = self.gen_json("--config", self.small, "--generate", "64:16", "--gpu", "h100", "--fusion", "eager",
                          "--timing", "device")["generation"]
        self.assertIn("--fusion eager", e["execution"])
        self.assertIn("device timing", e["execution"])

    def test_a_config_is_served_in_the_dtype_vllm_loads_it_in(self):
        # vLLM's --dtype auto: a bfloat16 or float16 checkpoint in its own dtype, an FP32 one
        # (or a config naming none) in FP16; --dtype overrides it. Not the analysis of a
        # config (--batch --seq), which runs as PyTorch's from_pretrained loads it: FP32.
        cases = (("bfloat16", [], "bf16", "config", None),
                 ("dtype:bfloat16", [], "bf16", "config", None),  # transformers 4.56+ name it dtype
                 ("float32", [], "fp16", "config", "served in fp16, as vLLM's --dtype auto"),
                 (None, [], "fp16", "config", "names no torch_dtype"),
                 ("bfloat16", ["--dtype", "fp32"], "fp32", "--dtype", None))
        for torch_dtype, flags, dtype, source, note in cases:
            with self.subTest(torch_dtype=torch_dtype, flags=flags):
                cfg = dict(SMALL)
                cfg.pop("torch_dtype")
                if torch_dtype and torch_dtype.startswith("dtype:"):
                    cfg["dtype"] = torch_dtype[len("dtype:"):]
                elif torch_dtype:
                    cfg["torch_dtype"] = torch_dtype
                path = os.path.join(self.dir, "served.json")
                with open(path, "w") as f:
                    json.dump(cfg, f)
                r = self.gen_json("--config", path, "--generate", "64:8", "--gpu", "h100", *flags)
                self.assertEqual((r["dtype"], r["dtype_source"]), (dtype, source))
                dtype_notes = [w for w in r["warnings"] if "torch_dtype" in w or "stores its weights" in w]
                self.assertEqual(len(dtype_notes), 1 if note else 0, dtype_notes)
                if note:
                    self.assertIn(note, dtype_notes[0])
                rc, so, se = run("--config", path, "--generate", "64:8", "--gpu", "h100", *flags)
                self.assertEqual(rc, 0, se)
                label = "as vLLM's --dtype auto serves it" if source == "config" else "(--dtype)"
                self.assertIn(f"new tokens, {dtype} ", so)
                self.assertIn(label, so)
                a = self.gen_json("--config", path, "--batch", "1", "--seq", "64", "--gpu", "h100", *flags)
                self.assertEqual(a["dtype"], "fp32" if not flags else dtype)
        # compare --generate serves each config in its own dtype.
        bf16 = os.path.join(self.dir, "bf16.json")
        with open(bf16, "w") as f:
            json.dump({**SMALL, "torch_dtype": "bfloat16"}, f)
        out = os.path.join(self.dir, "c.json")
        rc, so, se = run("compare", self.small, bf16, "--generate", "64:8", "--gpu", "h100", "--json", out, "--quiet")
        self.assertEqual(rc, 0, se)
        with open(out) as f:
            text = f.read()
        self.assertIn('"fp16"', text)
        self.assertIn('"bf16"', text)

    def test_terminal_gpu_list_and_html(self):
        html = os.path.join(self.dir, "g.html")
        rc, so, se = run("--config", self.small, "--generate", "128:64", "--dtype", "fp16", "--gpu", "h100,a100-80gb",
                         "--html", html)
        self.assertEqual(rc, 0, se)
        for needle in ["time to first token", "time per token", "output tokens/s", "KV cache", "by class",
                       "NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe", "vs first", "new tokens, fp16 (--dtype)"]:
            self.assertIn(needle, so)
        self.assertIn("80% interval  vs first", so)  # the GPU table's tokens/s interval
        for line in so.splitlines():  # every time and the rate with its 80% interval
            if line.strip().startswith(("time to first token", "time per token", "total ", "output tokens/s")):
                self.assertIn("(80% interval ", line)
        with open(html) as f:
            page = f.read()
        self.assertIn("Decode step latency along the generation", page)
        for gpu in ["NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe"]:  # one step-latency line per GPU
            self.assertIn(gpu + "</title></polyline>", page)
        # The first GPU's decode step, node by node (the last step predicted: 128 + 63 cached).
        self.assertIn("Slowest nodes of a decode step", page)
        self.assertIn("NVIDIA H100 80GB HBM3, the last step predicted (191 tokens cached)", page)
        self.assertIn("<td>lm_head/MatMul</td>", page)

    def test_compare_generation_across_models_and_gpus(self):
        wide = os.path.join(self.dir, "wide_llama.json")
        with open(wide, "w") as f:
            json.dump(dict(SMALL, hidden_size=1024, intermediate_size=2048), f)
        out = os.path.join(self.dir, "c.json")
        rc, so, se = run("compare", self.small, wide, "--generate", "128:32", "--dtype", "fp16", "--gpu", "h100,l40s",
                         "--json", out)
        self.assertEqual(rc, 0, se)
        self.assertIn("generation: time to first token / per output token", so)
        with open(out) as f:
            c = json.load(f)
        rows = c["results"]
        self.assertEqual(len(rows), 4)
        for row in rows:
            for k in KEYS:
                self.assertGreater(row["generation"][k], 0)
        by = {(r["model"], r["gpu_alias"]): r for r in rows}
        # The wider model is slower per token on both GPUs; the first model is its own baseline.
        for gpu in ["h100", "l40s"]:
            base, var = by[("small_llama.json", gpu)], by[("wide_llama.json", gpu)]
            self.assertEqual(base["tokens_per_s_speedup"], 1)
            self.assertLess(var["tokens_per_s_speedup"], 1)
            # The speed-up's 80% interval: exactly 1 for the baseline; around the variant's,
            # narrower than the two tokens/s intervals taken apart.
            self.assertEqual((base["tokens_per_s_speedup_low"], base["tokens_per_s_speedup_high"]), (1, 1))
            self.assertLess(var["tokens_per_s_speedup_low"], var["tokens_per_s_speedup"])
            self.assertGreater(var["tokens_per_s_speedup_high"], var["tokens_per_s_speedup"])
            bg, vg = base["generation"], var["generation"]
            self.assertGreater(var["tokens_per_s_speedup_low"], vg["tokens_per_s_low"] / bg["tokens_per_s_high"])
            self.assertLess(var["tokens_per_s_speedup_high"], vg["tokens_per_s_high"] / bg["tokens_per_s_low"])
        self.assertRegex(so, r"x \([0-9.]+-[0-9.]+\)")
        rc, so, se = run("compare", self.small, wide, "--generate", "0:32", "--gpu", "h100", "--json", out + "2")
        self.assertEqual(rc, 2, se)
        self.assertFalse(os.path.exists(out + "2"))

    def test_attention_flag(self):
        def gen(*extra):
            return self.gen_json("--config", self.small, "--generate", "256:16", "--batch", "4", "--dtype", "bf16",
                                 "--gpu", "h100", *extra)["generation"]
        eager, sdpa, full = (gen("--fusion", "eager", "--attention", "unfused"),
                             gen("--fusion", "eager", "--attention", "fused"), gen())
        self.assertIn("unfused attention, unfused kernels (--fusion eager, --attention unfused)", eager["execution"])
        self.assertIn("FlashAttention, unfused kernels (--fusion eager, --attention fused)", sdpa["execution"])
        # Automatic at 16 bits: transformers' default, SDPA, under eager as well.
        auto = gen("--fusion", "eager")
        self.assertIn("FlashAttention, unfused kernels (--fusion eager)", auto["execution"])
        self.assertEqual(auto["ttft_ms"], sdpa["ttft_ms"])
        # FlashAttention keeps the scores on chip: faster than MatMul + Softmax, slower than a
        # fully fused graph whose norms and activations are fused too.
        self.assertLess(sdpa["ttft_ms"], eager["ttft_ms"])
        self.assertGreater(sdpa["ttft_ms"], full["ttft_ms"])
        unfused = gen("--attention", "unfused")
        self.assertIn("unfused attention, fused kernels (--fusion full, --attention unfused)", unfused["execution"])
        self.assertGreater(unfused["ttft_ms"], full["ttft_ms"])
        # The plain analysis takes it too; auto is the default.
        base = ["--config", self.small, "--batch", "2", "--seq", "128", "--dtype", "fp16", "--gpu", "h100"]
        a = self.gen_json(*base)["e2e_latency_ms"]
        self.assertEqual(self.gen_json(*base, "--attention", "auto")["e2e_latency_ms"], a)
        # At 16 bits under eager, auto is transformers' default: SDPA.
        self.assertEqual(self.gen_json(*base, "--attention", "fused")["e2e_latency_ms"], a)
        self.assertGreater(self.gen_json(*base, "--attention", "unfused")["e2e_latency_ms"], a)
        out = os.path.join(self.dir, "r.json")
        # Training: FlashAttention-2's forward and backward at 16 bits (SDPA's, as transformers
        # trains), unless asked for eager attention; auto and fused the same.
        train = self.gen_json(*base, "--mode", "training", "--attention", "unfused")
        flash = self.gen_json(*base, "--mode", "training", "--attention", "fused")
        self.assertEqual(self.gen_json(*base, "--mode", "training")["e2e_latency_ms"], flash["e2e_latency_ms"])
        self.assertEqual(train["attention_ms"], 0)
        ops = {k["op"] for n in flash["nodes"] for k in n["kernels"]}
        self.assertTrue({"flash_attention", "flash_attention_bwd", "flash_bwd_dot"} <= ops)
        self.assertNotIn("softmax", ops)
        # FlashAttention loads its own rows: no library GEMM's 16-byte alignment warning.
        self.assertFalse([w for w in flash["warnings"] if "16 bytes" in w], flash["warnings"])
        self.assertGreater(flash["attention_ms"], 0)
        self.assertLess(flash["e2e_latency_ms"], train["e2e_latency_ms"])
        self.assertLess(flash["memory"]["activations_gib"], train["memory"]["activations_gib"])
        for extra, needle in [(["--attention", "flash"], "--attention: expected auto, fused or unfused")]:
            rc, so, se = run(*base, "--json", out, *extra)
            self.assertEqual(rc, 2, se)
            lines = [l for l in se.splitlines() if l.strip()]
            self.assertEqual(len(lines), 1, se)
            self.assertIn(needle, lines[0])
            self.assertFalse(os.path.exists(out))

    def test_tensor_parallel_generation(self):
        one = self.gen_json("--config", LLAMA3_8B, "--generate", "512:32", "--gpu", "h100", "--dtype", "fp16")["generation"]
        self.assertEqual(one["tensor_parallel"], 1)
        self.assertNotIn("collective", one["decode_by_class_ms"])
        prev = one
        for tp in (2, 8):
            g = self.gen_json("--config", LLAMA3_8B, "--generate", "512:32", "--gpu", "h100", "--dtype", "fp16",
                              "--parallel", f"tp={tp}")["generation"]
            self.assertEqual(g["tensor_parallel"], tp)
            # The whole model's KV cache and weights; one GPU holds its share of them.
            self.assertEqual(g["kv_cache_bytes"], one["kv_cache_bytes"])
            self.assertAlmostEqual(g["memory_per_gpu_bytes"], one["weight_bytes"] / tp + one["kv_cache_bytes"] / tp +
                                   one["activation_bytes"], delta=1)
            # Each GPU streams 1/tp of the weights: never faster than that bound, faster than fewer GPUs,
            # and the all-reduces after the row-parallel GEMMs are on the critical path.
            self.assertAlmostEqual(g["weight_read_ms"], one["weight_read_ms"] / tp, places=9)
            self.assertGreaterEqual(g["tpot_ms"], g["weight_read_ms"])
            self.assertLess(g["tpot_ms"], prev["tpot_ms"])
            self.assertLess(g["ttft_ms"], prev["ttft_ms"])
            self.assertGreater(g["decode_by_class_ms"]["collective"], 0)
            self.assertGreater(g["prefill_by_class_ms"]["collective"], 0)
            self.assertIn(f"tensor parallel over {tp} GPUs", g["execution"])
            prev = g
        out = os.path.join(self.dir, "r.json")
        for spec, line in (("dp=2", "takes tp=N and pp=N"), ("tp=2,pp=2,microbatches=4", "min(pp, batch) microbatches")):
            rc, so, se = run("--config", LLAMA3_8B, "--generate", "8:8", "--gpu", "h100", "--parallel", spec, "--json", out)
            self.assertEqual(rc, 2, se)
            self.assertEqual(len(se.strip().splitlines()), 1, se)
            self.assertIn(line, se)
            self.assertFalse(os.path.exists(out))

    def test_an_onnx_decoders_cumsum_positions_are_read_off_the_graph(self):
        # OPT as Hugging Face exports it: positions from a CumSum of the mask, less 1, the cached
        # ones sliced off, 2 added before the lookup into a table of 32 + 2 rows: 32 positions.
        import opt_positions_decoder
        path = os.path.join(self.dir, "opt_positions.onnx")
        opt_positions_decoder.build(path, positions=32)
        g = self.gen_json(path, "--generate", "16:8", "--gpu", "h100")["generation"]
        self.assertEqual((g["max_tokens"], g["max_tokens_positions"]), (32, True))
        rc, _, se = run(path, "--generate", "30:4", "--gpu", "h100")
        self.assertEqual(rc, 2, se)
        self.assertEqual(se.strip(), "neusight-onnx: error: --generate: 30 + 4 tokens outgrow the model's 32 learned positions")

    def test_a_cached_prefix_is_prefilled_no_more_and_held_once(self):
        # --prefix-cached C: the prompt's first C tokens are in the cache (vLLM's prefix caching
        # of a shared system prompt); the prefill computes the other P - C against them, and the
        # prefix's keys and values are held once for the batch.
        base = ("--config", LLAMA3_8B, "--gpu", "h100", "--dtype", "bf16", "--batch", "16")
        full = self.gen_json(*base, "--generate", "2048:256")["generation"]
        cached = self.gen_json(*base, "--generate", "2048:256", "--prefix-cached", "1536")["generation"]
        short = self.gen_json(*base, "--generate", "512:256")["generation"]
        self.assertEqual(cached["cached_prefix"], 1536)
        self.assertLess(cached["ttft_ms"], 0.5 * full["ttft_ms"])
        self.assertGreater(cached["ttft_ms"], short["ttft_ms"])  # its 512 tokens attend to 2048
        self.assertAlmostEqual(cached["tpot_ms"], full["tpot_ms"], delta=1e-9)  # the same cache to read
        per_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, BF16
        self.assertEqual(full["kv_cache_bytes"], 16 * (2048 + 256) * per_token)
        self.assertEqual(cached["kv_cache_bytes"], (16 * (512 + 256) + 1536) * per_token)
        self.assertGreater(cached["max_batch"], 2 * full["max_batch"])
        # The longest sequence: the prefix and the sequence's own tokens in its share of the room.
        self.assertGreater(cached["max_tokens"], full["max_tokens"])
        rc, out, err = run(*base, "--generate", "2048:256", "--prefix-cached", "1536")
        self.assertEqual(rc, 0, err)
        self.assertIn("prompt 2048 tokens (the first 1536 cached, held once)", out)
        t5 = os.path.join(SOURCE, "tests", "data", "flan_t5_base.json")
        for args, line in ((("--generate", "64:8", "--prefix-cached", "64"), "at least one token is left"),
                           (("--batch", "2", "--seq", "16", "--prefix-cached", "3"), "applies to --generate"),
                           (("--generate", "64:8", "--prefix-cached", "0"), "--prefix-cached")):
            with self.subTest(args=args):
                rc, _, se = run("--config", LLAMA3_8B, "--gpu", "h100", *args)
                self.assertEqual(rc, 2, se)
                self.assertIn(line, se)
        rc, _, se = run("--config", t5, "--gpu", "h100", "--generate", "64:8", "--prefix-cached", "8")
        self.assertEqual(rc, 2, se)
        self.assertIn("decoder-only", se)

    def test_longest_sequence_that_fits(self):
        # Llama 3 8B (full attention everywhere): the cache of max_batch sequences of 1280 tokens is
        # what 8 sequences of max_tokens hold.
        g = self.gen_json("--config", LLAMA3_8B, "--generate", "1024:256", "--batch", "8", "--gpu", "h100")["generation"]
        self.assertAlmostEqual(g["max_tokens"] * 8, g["max_batch"] * 1280, delta=1280 + 8)
        self.assertFalse(g["max_tokens_positions"])
        # Gemma 2 9B: half its layers keep a 4096-token window, so a long sequence costs less a token.
        gemma = os.path.join(SOURCE, "tests", "data", "gemma2_9b.json")
        g = self.gen_json("--config", gemma, "--generate", "1024:256", "--batch", "8", "--gpu", "h100")["generation"]
        self.assertGreater(g["max_tokens"] * 8, 1.5 * g["max_batch"] * 1280)
        # GPT-2 Large: its 1024 learned positions bound it first.
        gpt2 = os.path.join(SOURCE, "tests", "data", "neusight-data", "model_configs", "gpt2_large.json")
        if os.path.exists(gpt2):
            g = self.gen_json("--config", gpt2, "--generate", "512:64", "--gpu", "h100")["generation"]
            self.assertEqual(g["max_tokens"], 1024)
            self.assertTrue(g["max_tokens_positions"])

    def test_pipeline_parallel_generation(self):
        # Llama 3 8B on 2 x 2 GPUs, vLLM's --tensor-parallel-size 2 --pipeline-parallel-size 2:
        # 16 sequences as two microbatches of 8, each stage serving both a decode round.
        args = ("--config", LLAMA3_8B, "--generate", "512:32", "--gpu", "h100", "--batch", "16", "--gpu-cost", "2")
        tp = self.gen_json(*args, "--parallel", "tp=2")["generation"]
        half = self.gen_json("--config", LLAMA3_8B, "--generate", "512:32", "--gpu", "h100", "--batch", "8",
                             "--parallel", "tp=2")["generation"]
        g = self.gen_json(*args, "--parallel", "tp=2,pp=2")["generation"]
        self.assertEqual((g["tensor_parallel"], g["pipeline_parallel"], g["gpus"]), (2, 2, 4))
        p = g["pipeline"]
        self.assertEqual((p["stages"], p["microbatches"], p["micro_batch"]), (2, 2, 8))
        self.assertEqual(len(p["prefill_stage_ms"]), 2)
        self.assertIn("pipeline parallel over 2 stages (2 microbatches)", g["execution"])
        # A round is at least one microbatch's step through both stages.
        self.assertGreaterEqual(g["tpot_ms"], half["tpot_ms"])
        self.assertLess(g["tpot_ms"], 1.2 * half["tpot_ms"])
        # Each GPU holds about half of what a tp=2 GPU holds; the cost counts four GPUs' hours.
        self.assertLess(g["memory_per_gpu_bytes"], 0.6 * tp["memory_per_gpu_bytes"])
        self.assertAlmostEqual(g["usd_per_m_tokens"], 2 * 4 / 3600 / g["tokens_per_s"] * 1e6,
                               delta=1e-9 * g["usd_per_m_tokens"])
        self.assertAlmostEqual(sum(g["prefill_by_class_ms"].values()), g["ttft_ms"], delta=1e-6 * g["ttft_ms"])
        # Requests a second: the batch's 16 sequences over the total.
        self.assertAlmostEqual(g["requests_per_s"], 16 / (g["total_ms"] / 1000), delta=1e-9 * g["requests_per_s"])
        rc, so, se = run(*args, "--parallel", "tp=2,pp=2")
        self.assertEqual(rc, 0, se)
        self.assertIn("pipeline parallel", so)
        self.assertIn("x 4 GPUs", so)
        out = os.path.join(self.dir, "pp.json")
        rc, so, se = run(*args, "--parallel", "pp=2", "--speculative", "3", "--json", out)
        self.assertEqual(rc, 2, se)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertFalse(os.path.exists(out))

    def test_expert_parallel_generation(self):
        # Mixtral (8 experts, top-2) on 4 GPUs: each expert split 4 ways, or 2 whole experts per GPU.
        mixtral = os.path.join(SOURCE, "tests", "data", "mixtral_8x7b.json")
        args = ("--config", mixtral, "--generate", "512:8", "--dtype", "fp8", "--gpu", "h100")
        tp = self.gen_json(*args, "--parallel", "tp=4")["generation"]
        ep = self.gen_json(*args, "--parallel", "tp=4,ep=4")["generation"]
        self.assertEqual((tp["expert_parallel"], ep["expert_parallel"]), (1, 4))
        self.assertIn("experts over 4 of them", ep["execution"])
        # The same memory per GPU and all-reduces; one token reaches 2 experts, all on some GPU: the
        # busiest GPU streams at least a tensor-parallel GPU's share of their weights.
        self.assertEqual(ep["memory_per_gpu_bytes"], tp["memory_per_gpu_bytes"])
        self.assertGreaterEqual(ep["tpot_ms"], tp["tpot_ms"])
        rc, so, se = run(*args, "--parallel", "tp=4,ep=4")
        self.assertEqual(rc, 0, se)
        self.assertIn("expert parallel", so)
        out = os.path.join(self.dir, "ep.json")
        rc, so, se = run(*args, "--parallel", "tp=4,ep=3", "--json", out)
        self.assertEqual(rc, 2, se)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertIn("must divide tp=4", se)
        self.assertFalse(os.path.exists(out))
        # Whole experts per GPU: no more GPUs than Mixtral's 8 experts.
        rc, so, se = run(*args, "--parallel", "tp=16,ep=16", "--json", out)
        self.assertEqual(rc, 2, se)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertIn("more GPUs than the model's 8 experts", se)
        self.assertFalse(os.path.exists(out))
        # A dense model has nothing to spread: said once, predicted as tensor parallel.
        rc, so, se = run("--config", LLAMA3_8B, "--generate", "64:4", "--gpu", "h100", "--parallel", "tp=2,ep=2")
        self.assertEqual(rc, 0, se)
        self.assertEqual((so + se).count("no mixture of experts"), 1, so + se)

    def test_time_to_first_token_never_falls_with_a_longer_prompt(self):
        # FlashAttention of a few queries (16 or fewer: its tile mostly padding) streams its
        # keys and values at the device floor, as its tiled form; it paid a library GEMM's fixed
        # time, so a 16-token prompt took longer than a 20-token one.
        ttft = [self.gen_json("--config", LLAMA3_8B, "--generate", f"{p}:4", "--dtype", "bf16", "--gpu", "h100")
                ["generation"]["ttft_ms"] for p in (8, 16, 20, 24, 32)]
        self.assertEqual(ttft, sorted(ttft), ttft)

    def test_kv_dtype(self):
        args = ("--config", self.small, "--generate", "1024:16", "--batch", "4", "--dtype", "bf16", "--gpu", "h100")
        bf16 = self.gen_json(*args)["generation"]
        fp8 = self.gen_json(*args, "--kv-dtype", "fp8")["generation"]
        self.assertEqual(fp8["kv_cache_bytes"], bf16["kv_cache_bytes"] / 2)
        self.assertEqual((bf16["kv_cache"]["dtype"], fp8["kv_cache"]["dtype"]), ("bf16", "fp8"))
        self.assertLess(fp8["tpot_ms"], bf16["tpot_ms"])
        self.assertGreater(fp8["max_batch"], bf16["max_batch"])
        self.assertFalse([w for w in self.gen_json(*args, "--kv-dtype", "fp8")["warnings"] if "--kv-dtype" in w])
        # An FP32 model's attention (MatMul and Softmax) reads the cache in FP32: the memory
        # changes, the time does not, and the report says so.
        f32 = ("--config", self.small, "--generate", "1024:16", "--batch", "4", "--gpu", "h100", "--dtype", "fp32")
        plain, narrow = self.gen_json(*f32), self.gen_json(*f32, "--kv-dtype", "fp8")
        self.assertEqual(narrow["generation"]["tpot_ms"], plain["generation"]["tpot_ms"])
        self.assertLess(narrow["generation"]["kv_cache_bytes"], plain["generation"]["kv_cache_bytes"])
        self.assertEqual(len([w for w in narrow["warnings"] if "--kv-dtype fp8 sets the cache's memory" in w]), 1)
        # The onnxruntime-genai form (GroupQueryAttention) reads its cache the same way.
        path = os.path.join(self.dir, "gqa_kv.onnx")
        gqa_decoder.build(path, nbits=False)
        a = self.gen_json(path, "--generate", "1024:16", "--gpu", "h100")["generation"]
        b = self.gen_json(path, "--generate", "1024:16", "--gpu", "h100", "--kv-dtype", "fp8")["generation"]
        self.assertEqual(b["kv_cache_bytes"], a["kv_cache_bytes"] / 2)
        self.assertLess(b["tpot_ms"], a["tpot_ms"])
        out = os.path.join(self.dir, "kv.json")
        for extra, needle in ((("--kv-dtype", "int8"), "--kv-dtype: expected"),
                              (("--kv-dtype", "fp8", "--mode", "training"), "inference")):
            rc, so, se = run("--config", self.small, "--batch", "1", "--seq", "8", "--gpu", "h100", *extra, "--json", out)
            self.assertEqual(rc, 2, se)
            self.assertEqual(len(se.strip().splitlines()), 1, se)
            self.assertIn(needle, se)
            self.assertFalse(os.path.exists(out))

    def test_speculative_decoding(self):
        draft = os.path.join(self.dir, "draft.json")
        with open(draft, "w") as f:
            json.dump({**SMALL, "num_hidden_layers": 1}, f)
        args = ("--config", self.small, "--generate", "256:32", "--dtype", "fp16", "--gpu", "h100")
        plain = self.gen_json(*args)["generation"]
        g = self.gen_json(*args, "--speculative", f"3,accept=0.7,draft={draft}")["generation"]
        sp = g["speculative"]
        self.assertNotIn("speculative", plain)
        self.assertEqual((sp["proposed"], sp["acceptance"], sp["draft"]), (3, 0.7, draft))
        self.assertAlmostEqual(sp["tokens_per_step"], (1 - 0.7 ** 4) / 0.3, places=9)
        self.assertAlmostEqual(g["decode_samples"][0]["latency_ms"],
                               (sp["verify_ms"] + 3 * sp["draft_step_ms"]) / sp["tokens_per_step"], places=9)
        self.assertAlmostEqual(g["ttft_ms"], plain["ttft_ms"] + sp["draft_ttft_ms"], places=9)
        self.assertIn("speculative decoding (3 proposed", g["execution"])
        rc, so, se = run(*args, "--speculative", "3,accept=0.7")
        self.assertEqual(rc, 0, se)
        self.assertIn("tokens a step (3 proposed, each accepted with p 0.70", so)
        # The weights' bound is a verifying step's, which yields several tokens.
        self.assertRegex(so, r"weights / DRAM bandwidth [0-9.]+ ms a step of [0-9.]+ tokens\)")
        out = os.path.join(self.dir, "sp.json")
        for bad, needle in (("0,accept=0.5", "at least 1"), ("3", "accept=P"), ("3,accept=1.5", "(0, 1]"),
                            ("3,accept=0.5,foo=1", "expected K,accept=P"), ("x,accept=0.5", "--speculative K"),
                            ("3,accept=0.5,accept=0.6", "twice"), (f"3,accept=0.5,draft={EXAMPLE}", "--speculative draft: ")):
            rc, so, se = run(*args, "--speculative", bad, "--json", out)
            self.assertEqual(rc, 2, (bad, se))
            self.assertEqual(len(se.strip().splitlines()), 1, se)
            self.assertIn(needle, se)
            self.assertFalse(os.path.exists(out))
        rc, so, se = run("--config", self.small, "--batch", "1", "--seq", "8", "--gpu", "h100", "--speculative", "3,accept=0.5")
        self.assertEqual(rc, 2, se)
        self.assertIn("--speculative applies to --generate", se)
        # DeepSeek-R1's multi-token-prediction module as the draft; a Llama has none.
        ds = os.path.join(SOURCE, "tests", "data", "deepseek_r1.json")
        g = self.gen_json("--config", ds, "--generate", "256:8", "--dtype", "fp8", "--gpu", "h200", "--parallel", "tp=8",
                          "--speculative", "1,accept=0.8,draft=mtp")["generation"]
        self.assertEqual(g["speculative"]["draft"], "mtp")
        self.assertLess(g["speculative"]["draft_step_ms"], g["speculative"]["verify_ms"] / 10)
        rc, so, se = run(*args, "--speculative", "2,accept=0.8,draft=mtp")
        self.assertEqual(rc, 2, se)
        self.assertIn("num_nextn_predict_layers", se)

    def test_sliding_window_and_latent_caches_say_how_they_are_kept(self):
        cfg = os.path.join(self.dir, "windowed.json")
        with open(cfg, "w") as f:
            json.dump({**SMALL, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"] * (SMALL["num_hidden_layers"] // 2)}, f)
        g = self.gen_json("--config", cfg, "--generate", "100:8", "--dtype", "fp16", "--gpu", "h100")["generation"]
        kv = g["kv_cache"]
        self.assertEqual((kv["tensors"], kv["sliding_layers"], kv["window"]), (2, SMALL["num_hidden_layers"] // 2, 16))
        rc, so, se = run("--config", os.path.join(SOURCE, "tests", "data", "deepseek_r1.json"), "--generate", "64:4",
                         "--dtype", "fp8", "--gpu", "h200", "--parallel", "tp=8")
        self.assertEqual(rc, 0, se)
        self.assertIn("61 layers x a latent of 576 x 68 tokens x 1", so)

    def test_memory_warning_above_gpu_memory(self):
        rc, so, se = run("--config", LLAMA3_8B, "--generate", "8192:128", "--batch", "16", "--dtype", "fp16",
                         "--gpu", "l4", "--quiet")
        self.assertEqual(rc, 0, se)
        self.assertIn("more than the", se)
        # How many such sequences fit, and none where the weights alone overflow.
        g = self.gen_json("--config", LLAMA3_8B, "--generate", "8192:128", "--dtype", "fp16", "--gpu", "l4,h100")
        self.assertLess(g[0]["generation"]["max_batch"], 16)
        self.assertGreater(g[1]["generation"]["max_batch"], 16)
        rc, so, se = run("--config", os.path.join(SOURCE, "tests", "data", "llama3_70b.json"), "--generate", "64:8",
                         "--dtype", "fp16", "--gpu", "h100")
        self.assertEqual(rc, 0, se)
        self.assertIn("fits                      0 seqs", so)

    def test_onnx_decoder_export_predicts_like_the_config(self):
        step = os.path.join(self.dir, "step.onnx")
        rc, so, se = run("export", "--config", self.small, "--kv-cache", "-o", step)
        self.assertEqual(rc, 0, se)
        a = self.gen_json("--config", self.small, "--generate", "256:32", "--dtype", "fp16", "--gpu", "h100")["generation"]
        b = self.gen_json(step, "--generate", "256:32", "--dtype", "fp16", "--gpu", "h100")["generation"]
        self.assertAlmostEqual(a["tpot_ms"], b["tpot_ms"], delta=0.01 * a["tpot_ms"])
        self.assertAlmostEqual(a["ttft_ms"], b["ttft_ms"], delta=0.1 * a["ttft_ms"])
        self.assertEqual(a["kv_cache_bytes"], b["kv_cache_bytes"])
        # Without --dtype both are served as vLLM loads the checkpoint (the config's float16):
        # the export's weights are FP32, its metadata (neusight.serving_dtype) says so.
        a = self.gen_json("--config", self.small, "--generate", "256:32", "--gpu", "h100")
        b = self.gen_json(step, "--generate", "256:32", "--gpu", "h100")
        self.assertEqual((b["dtype"], b["dtype_source"]), (a["dtype"], a["dtype_source"]))
        self.assertEqual((b["dtype"], b["dtype_source"]), ("fp16", "config"))
        self.assertAlmostEqual(a["generation"]["tpot_ms"], b["generation"]["tpot_ms"], delta=0.01 * a["generation"]["tpot_ms"])
        # Sliding-window layers keep their window of the cache: the export says which in its
        # metadata (neusight.sliding_window, neusight.sliding_layers), as the graph does not.
        windowed = os.path.join(self.dir, "windowed.json")
        with open(windowed, "w") as f:
            json.dump(dict(SMALL, model_type="mistral", sliding_window=256), f)
        step = os.path.join(self.dir, "windowed_step.onnx")
        rc, so, se = run("export", "--config", windowed, "--kv-cache", "-o", step)
        self.assertEqual(rc, 0, se)
        a = self.gen_json("--config", windowed, "--generate", "2048:64", "--dtype", "bf16", "--gpu", "h100")["generation"]
        b = self.gen_json(step, "--generate", "2048:64", "--dtype", "bf16", "--gpu", "h100")["generation"]
        self.assertEqual(a["kv_cache_bytes"], b["kv_cache_bytes"])
        self.assertEqual((b["kv_cache"]["window"], b["kv_cache"]["sliding_layers"]), (256, SMALL["num_hidden_layers"]))
        # Recurrent layers' states (a state-space model's alone, a hybrid's beside the cache) are
        # the step's past_*_state.N inputs, held as the config's are.
        for name, cfg in (("mamba2", {"model_type": "mamba2", "hidden_size": 256, "num_hidden_layers": 2,
                                      "num_heads": 8, "head_dim": 64, "state_size": 64, "n_groups": 2,
                                      "vocab_size": 1000, "chunk_size": 64}),
                          ("qwen3_next", {"model_type": "qwen3_next", "hidden_size": 256, "intermediate_size": 512,
                                          "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                                          "head_dim": 64, "vocab_size": 1000, "num_experts": 8,
                                          "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                                          "shared_expert_intermediate_size": 64, "linear_num_key_heads": 2,
                                          "linear_num_value_heads": 4, "linear_key_head_dim": 32,
                                          "linear_value_head_dim": 32})):
            with self.subTest(model=name):
                path = os.path.join(self.dir, name + ".json")
                with open(path, "w") as f:
                    json.dump(cfg, f)
                step = os.path.join(self.dir, name + "_step.onnx")
                rc, so, se = run("export", "--config", path, "--kv-cache", "-o", step)
                self.assertEqual(rc, 0, se)
                a = self.gen_json("--config", path, "--generate", "256:32", "--dtype", "bf16", "--gpu", "h100")["generation"]
                b = self.gen_json(step, "--generate", "256:32", "--dtype", "bf16", "--gpu", "h100")["generation"]
                self.assertGreater(b["kv_cache"]["state_bytes"], 0)
                self.assertEqual(a["kv_cache"]["state_bytes"], b["kv_cache"]["state_bytes"])
                self.assertEqual(a["kv_cache"]["state_layers"], b["kv_cache"]["state_layers"])
                self.assertEqual(a["kv_cache_bytes"], b["kv_cache_bytes"])
                self.assertAlmostEqual(a["tpot_ms"], b["tpot_ms"], delta=0.02 * a["tpot_ms"])

    def test_optimum_merged_decoder_predicts_like_its_step(self):
        # decoder_model_merged.onnx: an If on use_cache_branch between the step with its cache
        # and the forward pass, the weights held once outside. The prefill takes the branch
        # without the cache, each step the one with it (no condition left unknown); a step's
        # cache Concat of the outer graph's past is appended in place, as in the plain step;
        # the embedding, read by a Gather inside the branch, is no weight a step streams.
        fwd, step, merged = (os.path.join(self.dir, f) for f in ("fwd.onnx", "step.onnx", "merged.onnx"))
        for args in (("-o", fwd), ("--kv-cache", "-o", step)):
            rc, so, se = run("export", "--config", self.small, *args)
            self.assertEqual(rc, 0, se)
        merged_decoder.build(fwd, step, merged)
        # Under tensor parallelism the branch's nodes take their roles as the step's own do
        # (column- and row-parallel projections, sharded heads, an all-reduce after each row).
        tpot = {}
        for tp in ("1", "2"):
            a = self.gen_json(step, "--generate", "256:32", "--dtype", "fp16", "--gpu", "h100", "--parallel", "tp=" + tp)
            b = self.gen_json(merged, "--generate", "256:32", "--dtype", "fp16", "--gpu", "h100", "--parallel", "tp=" + tp)
            self.assertEqual([w for w in b["warnings"] if "If" in w or "whole" in w], [])
            a, b = a["generation"], b["generation"]
            for k in ("tpot_ms", "weight_read_ms", "kv_cache_bytes"):
                self.assertAlmostEqual(a[k], b[k], delta=0.01 * a[k], msg=(tp, k))
            self.assertAlmostEqual(a["ttft_ms"], b["ttft_ms"], delta=0.1 * a["ttft_ms"])
            self.assertEqual(a["decode_by_class_ms"].keys(), b["decode_by_class_ms"].keys())
            tpot[tp] = b["tpot_ms"]
        self.assertNotAlmostEqual(tpot["1"], tpot["2"], delta=0.01 * tpot["1"])

    def test_gqa_rotary_matmulnbits_decoder_predicts_like_the_config(self):
        # The same Llama-style model as SMALL, as onnxruntime-genai exports it.
        cfg = self.gen_json("--config", self.small, "--generate", "256:32", "--batch", "2", "--dtype", "fp16",
                            "--gpu", "h100")["generation"]
        for nbits in (False, True):
            path = os.path.join(self.dir, f"gqa_{nbits}.onnx")
            gqa_decoder.build(path, nbits=nbits)
            g = self.gen_json(path, "--generate", "256:32", "--batch", "2", "--gpu", "h100")["generation"]
            self.assertIn("FlashAttention", g["execution"])
            self.assertEqual(g["kv_cache_bytes"], cfg["kv_cache_bytes"])
            for k in ("ttft_ms", "tpot_ms"):
                self.assertAlmostEqual(g[k], cfg[k], delta=0.1 * cfg[k], msg=(nbits, k))

    @needs_shared("onnx-models")
    def test_onnxruntime_genai_export_with_stacked_past(self):
        model = shared("onnx-models", "ort_genai_tiny_random_gpt2_fp32.onnx")
        g = self.gen_json(model, "--generate", "32:16", "--batch", "2", "--gpu", "h100")["generation"]
        # past_N inputs [2, batch, 4 heads, past, 8], 5 layers, FP32.
        self.assertEqual((g["kv_cache"]["layers"], g["kv_cache"]["kv_heads"], g["kv_cache"]["head_dim"]), (5, 4, 8))
        self.assertEqual(g["kv_cache_bytes"], 2 * 5 * 4 * 8 * (32 + 16) * 2 * 4)
        self.assertGreater(g["tpot_last_ms"], 0)
        # Its EmbedLayerNormalization's position table has 512 rows: no longer sequence fits.
        self.assertEqual((g["max_tokens"], g["max_tokens_positions"]), (512, True))
        rc, _, se = run(model, "--generate", "500:13", "--gpu", "h100")
        self.assertEqual(rc, 2, se)
        self.assertEqual(se.strip(), "neusight-onnx: error: --generate: 500 + 13 tokens outgrow the model's 512 learned positions")

    def test_long_generation_predicts_as_few_steps_as_a_short_one(self):
        # The analysis time is the prefill plus the decode steps actually predicted (a few, the
        # rest interpolated), so a 64k-token generation costs what a 128-token one does;
        # bench/generation/run.py prints the two analysis times.
        short = self.gen_json("--config", LLAMA3_8B, "--generate", "512:128", "--gpu", "h100")["generation"]
        long = self.gen_json("--config", LLAMA3_8B, "--generate", "512:65536", "--gpu", "h100")["generation"]
        self.assertEqual(len(long["decode_samples"]), len(short["decode_samples"]))
        self.assertLessEqual(len(long["decode_samples"]), 6)
        self.assertEqual([s["kv_len"] for s in long["decode_samples"]][::len(long["decode_samples"]) - 1],
                         [512, 512 + 65536 - 1])
        self.assertGreater(long["tpot_last_ms"], short["tpot_last_ms"])  # the cache grew


    def test_top_lists_the_slowest_nodes_of_the_prefill_and_a_decode_step(self):
        # --top N: the prefill's N slowest nodes and the last decode step's; the JSON carries
        # that step's nodes (those that run kernels), whose times make up the step's.
        rc, so, se = run("--config", self.small, "--generate", "256:32", "--gpu", "h100", "--top", "3")
        self.assertEqual(rc, 0, se)
        self.assertIn("slowest nodes of the prefill (256 tokens)", so)
        self.assertIn("slowest nodes of the last decode step (287 cached)", so)
        self.assertEqual(so.count("(the 3 slowest of "), 2)
        step_table = so.split("slowest nodes of the last decode step")[1]
        self.assertIn("lm_head", step_table)
        g = self.gen_json("--config", self.small, "--generate", "256:32", "--gpu", "h100")["generation"]
        step = g["decode_step"]
        self.assertEqual(step["kv_len"], 287)
        self.assertAlmostEqual(step["latency_ms"], g["tpot_last_ms"], delta=1e-9)
        total = sum(n["latency_ms"] for n in step["nodes"])
        self.assertGreater(total, 0.9 * step["latency_ms"])
        self.assertLessEqual(total, step["latency_ms"] * (1 + 1e-9))
        self.assertTrue(all(n["class"] for n in step["nodes"]))
        # A node's class is its main kernel's, as the table shows it: a mixture's MoE node is a
        # GEMM (its experts), not the top-k of its router that runs first.
        moe = os.path.join(self.dir, "small_moe.json")
        with open(moe, "w") as f:
            json.dump(dict(SMALL, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2), f)
        nodes = self.gen_json("--config", moe, "--generate", "64:4", "--gpu", "h100")["generation"]["decode_step"]["nodes"]
        experts = [n for n in nodes if n["op_type"] == "MoE"]
        self.assertEqual(len(experts), SMALL["num_hidden_layers"])
        self.assertEqual({n["class"] for n in experts}, {"gemm"})

    def test_encoder_decoder_in_two_onnx_files(self):
        # optimum's encoder_model.onnx + decoder_model_merged.onnx (T5, BART): the prefill is the
        # encoder over the prompt feeding the decoder's first pass over its start token; each
        # step reads the self-attention cache of the decoder's tokens and the cross-attention
        # cache of the prompt's.
        enc, dec = os.path.join(self.dir, "encoder_model.onnx"), os.path.join(self.dir, "decoder_model_merged.onnx")
        seq2seq_onnx.build(enc, dec)
        r = {p: self.gen_json(dec, "--encoder", enc, "--generate", f"{p}:32", "--gpu", "h100") for p in (256, 512)}
        self.assertEqual([w for w in r[512]["warnings"] if "If" in w or "unknown" in w], [])
        g = {p: r[p]["generation"] for p in r}
        n = seq2seq_onnx
        self.assertEqual(g[512]["kv_cache_bytes"], 2 * n.LAYERS * n.HEADS * n.HD * ((1 + 32) + 512) * 4)
        self.assertEqual(g[512]["kv_cache"]["encoder_tokens"], 512)
        self.assertGreater(g[512]["ttft_ms"], 1.1 * g[256]["ttft_ms"])  # the encoder reads the prompt
        self.assertGreater(g[512]["tpot_ms"], g[256]["tpot_ms"])  # cross-attention over it
        # The encoder's nodes are the prefill's, before the decoder's If.
        names = [x["name"] for x in r[512]["nodes"]]
        self.assertEqual(names[-1], "optimum::if")
        self.assertGreater(len(names), 40)
        self.assertGreater(g[512]["weight_bytes"], 0)
        # An encoder exported apart that names its batch dim otherwise: both bound to the batch.
        other = os.path.join(self.dir, "encoder_b.onnx")
        seq2seq_onnx.build(other, os.path.join(self.dir, "unused.onnx"), encoder_batch="batch")
        b = self.gen_json(dec, "--encoder", other, "--generate", "512:32", "--gpu", "h100", "--batch", "2")
        self.assertEqual([w for w in b["warnings"] if "binds no" in w], [])
        self.assertEqual(b["generation"]["kv_cache_bytes"], 2 * g[512]["kv_cache_bytes"])
        # A tiny model's batch searched per GPU: figures too wide for the GPU table's columns
        # overflow them whole (the tokens/s interval's bounds are not cut).
        rc, so, se = run(dec, "--encoder", enc, "--generate", "8:8", "--gpu", "h100,a100", "--tpot-slo", "0.3")
        self.assertEqual(rc, 0, se)
        rows = [l for l in so.splitlines() if l.startswith(("NVIDIA H100 80GB HBM3 ", "NVIDIA A100-SXM4-40GB "))]
        self.assertEqual(len(rows), 2, so)
        for row in rows:
            self.assertRegex(row, r" \d+\.\d - \d+\.\d ")

    def test_compare_encoder_decoders_in_two_onnx_files(self):
        # compare --encoder: one encoder for every ONNX decoder, or one per model in order with an
        # empty entry for a --config model, which builds its own encoder.
        enc, dec = os.path.join(self.dir, "encoder_model.onnx"), os.path.join(self.dir, "decoder_model_merged.onnx")
        seq2seq_onnx.build(enc, dec)
        alone = self.gen_json(dec, "--encoder", enc, "--generate", "256:32", "--gpu", "h100")["generation"]
        out = os.path.join(self.dir, "c.json")
        for encoders in (enc, enc + "," + enc):
            rc, so, se = run("compare", dec, dec, "--encoder", encoders, "--generate", "256:32", "--gpu", "h100",
                             "--json", out)
            self.assertEqual(rc, 0, se)
            with open(out) as f:
                rows = json.load(f)["results"]
            self.assertEqual(len(rows), 2)
            for row in rows:
                self.assertAlmostEqual(row["generation"]["ttft_ms"], alone["ttft_ms"], places=9)
                self.assertAlmostEqual(row["generation"]["tpot_ms"], alone["tpot_ms"], places=9)
                self.assertEqual(row["generation"]["kv_cache"]["encoder_tokens"], 256)
        t5 = os.path.join(self.dir, "small_t5.json")
        with open(t5, "w") as f:
            json.dump({"model_type": "t5", "d_model": 64, "d_kv": 16, "d_ff": 256, "num_layers": 2, "num_heads": 4,
                       "vocab_size": 1000, "feed_forward_proj": "relu"}, f)
        for encoders in ("," + enc, enc):
            rc, so, se = run("compare", t5, dec, "--encoder", encoders, "--generate", "256:32", "--gpu", "h100",
                             "--json", out)
            self.assertEqual(rc, 0, (encoders, se))
            with open(out) as f:
                rows = json.load(f)["results"]
            self.assertEqual([r["generation"]["kv_cache"]["encoder_tokens"] for r in rows], [256, 256])
        cases = [
            ((dec, dec, "--encoder", ",".join([enc] * 3), "--generate", "8:8"), "one per model (2), got 3"),
            ((t5, dec, "--encoder", enc + ",", "--generate", "8:8"), "builds its own encoder"),
            ((t5, t5, "--encoder", enc, "--generate", "8:8"), "no ONNX model takes an encoder"),
            ((dec, dec, "--encoder", enc, "--batch", "1", "--seq", "8"), "applies to --generate"),
            ((dec, dec, "--encoder", ",", "--generate", "8:8"), "no ONNX model takes an encoder"),
        ]
        for args, text in cases:
            rc, so, se = run("compare", *args, "--gpu", "h100", "--json", out + "2")
            self.assertEqual(rc, 2, (args, se))
            self.assertEqual(len(se.strip().splitlines()), 1, se)
            self.assertIn(text, se)
            self.assertFalse(os.path.exists(out + "2"))

    def test_whisper_style_encoder_reads_its_features(self):
        # An audio encoder (input_features, a stride-2 convolution): its output's length, 1500
        # for 3000 frames, is the cross-attention cache's; the prompt is the decoder's.
        enc, dec = os.path.join(self.dir, "encoder_model.onnx"), os.path.join(self.dir, "decoder_model_merged.onnx")
        seq2seq_onnx.build(enc, dec, features=True)
        rc, so, se = run(dec, "--encoder", enc, "--generate", "4:32", "--gpu", "h100")
        self.assertEqual(rc, 2)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertIn("--encoder", se)
        self.assertIn("feature_size", se)
        g = self.gen_json(dec, "--encoder", enc, "--generate", "4:32", "--gpu", "h100",
                          "--dim", "feature_size=80", "--dim", "encoder_sequence_length=3000")["generation"]
        n = seq2seq_onnx
        self.assertEqual(g["kv_cache_bytes"], 2 * n.LAYERS * n.HEADS * n.HD * ((4 + 32) + 1500) * 4)
        # The encoder's input bound whole (--shape, as the error suggests) predicts the same.
        s = self.gen_json(dec, "--encoder", enc, "--generate", "4:32", "--gpu", "h100",
                          "--shape", "input_features=1x80x3000")["generation"]
        self.assertEqual((s["ttft_ms"], s["tpot_ms"], s["kv_cache_bytes"]), (g["ttft_ms"], g["tpot_ms"], g["kv_cache_bytes"]))
        rc, so, se = run(dec, "--encoder", enc, "--generate", "4:32", "--gpu", "h100", "--dim", "feature_size=80",
                         "--dim", "encoder_sequence_length=3000")
        self.assertEqual(rc, 0, se)
        self.assertIn("seqs (of 36 decoder + 1500 encoder tokens:", so)

    def test_encoder_flag_errors(self):
        enc, dec = os.path.join(self.dir, "encoder_model.onnx"), os.path.join(self.dir, "decoder_model_merged.onnx")
        seq2seq_onnx.build(enc, dec)
        other_enc, other_dec = os.path.join(self.dir, "e16.onnx"), os.path.join(self.dir, "d16.onnx")
        seq2seq_onnx.build(other_enc, other_dec, decoder_opset=16)
        step = os.path.join(self.dir, "step.onnx")
        rc, so, se = run("export", "--config", self.small, "--kv-cache", "-o", step)
        self.assertEqual(rc, 0, se)
        cases = [
            ((dec, "--encoder", enc, "--batch", "1", "--seq", "8", "--gpu", "h100"), "applies to --generate"),
            ((step, "--encoder", enc, "--generate", "8:8", "--gpu", "h100"), "past_key_values.N.decoder"),
            ((dec, "--encoder", os.path.join(self.dir, "missing.onnx"), "--generate", "8:8", "--gpu", "h100"), "missing.onnx"),
            ((other_dec, "--encoder", enc, "--generate", "8:8", "--gpu", "h100"), "opsets"),
            (("--config", self.small, "--encoder", enc, "--generate", "8:8", "--gpu", "h100"), "ONNX decoder"),
        ]
        for args, text in cases:
            rc, so, se = run(*args)
            self.assertEqual(rc, 2, (args, se))
            self.assertEqual(len(se.strip().splitlines()), 1, se)
            self.assertIn(text, se)
        # The decoder alone names the flag.
        rc, so, se = run(dec, "--generate", "8:8", "--gpu", "h100")
        self.assertEqual(rc, 2)
        self.assertIn("--encoder", se)

if __name__ == "__main__":
    unittest.main()
