"""--lora: low-rank adapters on a training step, and served unmerged in inference, through the real binary."""
import os
import tempfile
import unittest

from cli_util import EXAMPLE, SOURCE, run, run_json

LLAMA3_8B = os.path.join(SOURCE, "tests", "data", "llama3_8b.json")
BASE = ["--config", LLAMA3_8B, "--batch", "2", "--seq", "512", "--gpu", "h100", "--mode", "training", "--dtype",
        "bf16", "--optimizer", "adam"]


class LoraTest(unittest.TestCase):
    def test_adapters_train_the_model_frozen(self):
        full = run_json(*BASE)
        lora = run_json(*BASE, "--lora", "16")
        qv = run_json(*BASE, "--lora", "16,targets=q_proj|v_proj")
        # Llama 3 8B, rank 16 on every linear layer but the head: 41.9M parameters (PEFT's
        # figure); on q_proj and v_proj: 6.8M.
        self.assertEqual(lora["memory"]["trainable_params"], 41943040)
        self.assertEqual(qv["memory"]["trainable_params"], 6815744)
        self.assertEqual(lora["memory"]["lora_rank"], 16)
        self.assertEqual(full["memory"]["lora_rank"], 0)
        self.assertGreater(full["memory"]["trainable_params"], 8.0e9)
        # Gradients and Adam's state for the adapters alone; the frozen weights held as before.
        self.assertAlmostEqual(lora["memory"]["gradients_gib"], 41943040 * 2 / 2**30, places=6)
        # The frozen model's weights and the adapters' beside them.
        self.assertAlmostEqual(lora["memory"]["weights_gib"] - full["memory"]["weights_gib"],
                               41943040 * 2 / 2**30, places=6)
        self.assertLess(lora["memory"]["total_gib"], full["memory"]["total_gib"])
        # No frozen weight's gradient: a shorter backward pass and optimizer step.
        self.assertLess(lora["backward_ms"], full["backward_ms"])
        self.assertLess(lora["update_ms"], full["update_ms"])
        self.assertLess(qv["e2e_latency_ms"], lora["e2e_latency_ms"])
        # A frozen layer keeps no input for its weight's gradient; an adapter keeps x and x A.
        self.assertLess(qv["memory"]["activations_gib"], 0.95 * lora["memory"]["activations_gib"])
        self.assertLessEqual(lora["memory"]["activations_gib"], full["memory"]["activations_gib"])
        ops = {k["op"] for n in lora["nodes"] for k in n["kernels"]}
        self.assertTrue({"lora_a", "lora_b"} <= ops)
        rc, out, err = run(*BASE, "--lora", "16")
        self.assertEqual(rc, 0, err)
        self.assertIn("LoRA's rank-16 adapters (41.9M parameters; the model's frozen)", out)

    def test_qlora_holds_the_linear_layers_in_nf4(self):
        lora = run_json(*BASE, "--lora", "16")
        q = run_json(*BASE, "--lora", "16,base=nf4,targets=q_proj|v_proj")
        self.assertTrue(q["memory"]["lora_nf4"])
        self.assertFalse(lora["memory"]["lora_nf4"])
        # Llama 3 8B: 6.98B parameters in its linear layers but the head, at 4.127 bits instead of 16.
        linear = 32 * (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336)
        saved = linear * (2 - 4.127 / 8) / 2**30
        adapters_delta = (lora["memory"]["trainable_params"] - q["memory"]["trainable_params"]) * 2 / 2**30
        self.assertAlmostEqual(lora["memory"]["weights_gib"] - q["memory"]["weights_gib"], saved + adapters_delta,
                               delta=0.01)
        # The dequantize kernels cost time: forward and the input gradients.
        dq = [k for n in q["nodes"] for k in n["kernels"] if k["op"] == "dequantize_nf4"]
        self.assertEqual(len(dq), 7 * 32 + 7 * 31 + 4)
        rc, out, err = run(*BASE, "--lora", "16,base=nf4")
        self.assertEqual(rc, 0, err)
        self.assertIn("its linear layers' in NF4: QLoRA", out)

    def test_data_parallel_adapters(self):
        # Two GPUs: each holds the frozen model whole and all-reduces the adapters' gradients alone;
        # ZeRO-3 (FSDP) shards and gathers the frozen weights too.
        one = run_json(*BASE, "--lora", "16")
        dp = run_json(*BASE[:2], "--batch", "4", *BASE[4:], "--lora", "16", "--parallel", "dp=2")["parallel"]
        st = dp["stages"][0]["memory_gb"]
        self.assertAlmostEqual(st["weights"], one["memory"]["weights_gib"], delta=1e-6)
        self.assertAlmostEqual(st["gradients"], one["memory"]["gradients_gib"], delta=1e-6)
        self.assertGreater(dp["dp_comm_ms"], 0)
        self.assertLess(dp["dp_comm_ms"], 2.0)  # 84 MB, not the model's 16 GB
        z3 = run_json(*BASE[:2], "--batch", "4", *BASE[4:], "--lora", "16", "--parallel", "dp=2,zero=3")["parallel"]
        self.assertLess(z3["stages"][0]["memory_gb"]["weights"], 0.75 * st["weights"])
        self.assertGreater(z3["dp_gather_ms"], 10 * dp["dp_comm_ms"])

    def test_adapters_run_in_the_activations_dtype_beside_narrow_layers(self):
        # Under --dtype fp8 the frozen layers' GEMMs run FP8 W8A8; PEFT's adapters stay BF16.
        r = run_json(*BASE[:-4], "--dtype", "fp8", "--lora", "8")
        dtypes = {k["dtype"] for n in r["nodes"] for k in n["kernels"] if k["op"] in ("lora_a", "lora_b")}
        self.assertEqual(dtypes, {"bf16"})

    def test_inference_serves_the_adapters_unmerged(self):
        # Without --mode training the adapters run forward beside the frozen model (PEFT before
        # merge_and_unload): two GEMMs, a scale and an add per adapted layer; their weights held.
        inf = BASE[:-6] + ["--dtype", "bf16"]
        plain = run_json(*inf)
        lora = run_json(*inf, "--lora", "16")
        self.assertEqual(lora["memory"]["adapter_params"], 41943040)
        self.assertEqual(lora["memory"]["lora_rank"], 16)
        self.assertAlmostEqual(lora["memory"]["weights_gib"] - plain["memory"]["weights_gib"], 41943040 * 2 / 2**30,
                               places=6)
        self.assertGreater(lora["e2e_latency_ms"], plain["e2e_latency_ms"])
        self.assertEqual(lora["backward_ms"], 0)
        ops = [k["op"] for n in lora["nodes"] for k in n["kernels"]]
        self.assertEqual(ops.count("lora_a"), 7 * 32)
        rc, out, err = run(*inf, "--lora", "16")
        self.assertEqual(rc, 0, err)
        self.assertIn("with LoRA's rank-16 adapters unmerged (41.9M parameters)", out)
        # Served by vLLM (--generate): one shrink and one expand per merged GEMM's slices (Q, K, V
        # and gate, up), the parameters PEFT counts; every decode step reads the adapters too.
        gen = ["--config", LLAMA3_8B, "--generate", "256:32", "--batch", "4", "--gpu", "h100", "--dtype", "bf16"]
        g0 = run_json(*gen)["generation"]
        g = run_json(*gen, "--lora", "16")["generation"]
        qv = run_json(*gen, "--lora", "16,targets=q_proj|v_proj")["generation"]
        self.assertEqual(g["weight_bytes"] - g0["weight_bytes"], 41943040 * 2)
        self.assertEqual(qv["weight_bytes"] - g0["weight_bytes"], 6815744 * 2)
        self.assertGreater(g["tpot_ms"], qv["tpot_ms"])
        self.assertGreater(qv["tpot_ms"], g0["tpot_ms"])
        self.assertGreater(g["ttft_ms"], g0["ttft_ms"])
        # Several adapters at once (vLLM's --max-loras): each held, each decode step's sequences
        # reaching about N (1 - (1 - 1/N)^batch) of them, a grouped GEMM reading each one's A or B.
        g4 = run_json(*gen, "--lora", "16,adapters=4")["generation"]
        g64 = run_json(*gen, "--lora", "16,adapters=64")["generation"]
        self.assertEqual(g4["weight_bytes"] - g0["weight_bytes"], 4 * 41943040 * 2)
        self.assertEqual(g4["lora"], {"rank": 16, "adapters": 4, "bytes": 4 * 41943040 * 2})
        self.assertEqual(g0["lora"]["rank"], 0)
        rc, out, err = run(*gen, "--lora", "16,adapters=4")
        self.assertEqual(rc, 0, err)
        self.assertIn("with 4 rank-16 LoRA adapters of 320.0 MiB", out)
        self.assertGreater(g4["tpot_ms"], g["tpot_ms"])
        self.assertGreater(g64["tpot_ms"], g4["tpot_ms"])
        rc, out, err = run(*inf, "--lora", "16,adapters=4")
        self.assertEqual(rc, 0, err)
        self.assertIn("with LoRA's rank-16 adapters unmerged (4 adapters, 167.8M parameters)", out)
        # Tensor parallel as vLLM shards its LoRA layers: beside a column-parallel layer A whole and B
        # split, beside a row-parallel one A split and B whole: a GPU holds 28,311,552 of the
        # 41,943,040 parameters at tp=2.
        t0 = run_json(*gen, "--parallel", "tp=2")["generation"]
        t = run_json(*gen, "--parallel", "tp=2", "--lora", "16")["generation"]
        self.assertEqual(t["memory_per_gpu_bytes"] - t0["memory_per_gpu_bytes"], 28311552 * 2)
        self.assertEqual(t["weight_bytes"] - t0["weight_bytes"], 41943040 * 2)
        self.assertLess(t["tpot_ms"], g["tpot_ms"])
        self.assertEqual(run_json(*inf, "--lora", "16", "--parallel", "tp=2")["memory"]["adapter_params"], 28311552)

    def test_bad_lora_is_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            for args, needle in [
                    ([*BASE[:-6], "--lora", "16", "--parallel", "tp=2,pp=2"], "--lora in inference takes --parallel tp alone"),
                    ([*BASE[:-6], "--lora", "16,base=nf4", "--parallel", "tp=2"], "without base=nf4"),
                    (["--config", LLAMA3_8B, "--generate", "64:8", "--batch", "2", "--gpu", "h100", "--lora", "16",
                      "--parallel", "pp=2"], "--lora with --generate takes --parallel tp alone"),
                    (["--config", LLAMA3_8B, "--generate", "64:8", "--gpu", "h100", "--lora", "16,base=nf4"],
                     "--lora base=nf4 with --generate"),
                    ([*BASE, "--lora", "0"], "rank is 1 to 65536"),
                    ([*BASE, "--lora", "8,adapters=4"], "serves several adapters at once: inference"),
                    ([*BASE[:-6], "--lora", "8,adapters=0"], "adapters is 1 to 65536"),
                    ([*BASE, "--lora", "x"], "--lora"),
                    ([*BASE, "--lora", "8,heads=2"], "R[,base=nf4][,adapters=N][,targets=all|REGEX]"),
                    ([*BASE, "--lora", "8,base=int4"], "R[,base=nf4][,adapters=N][,targets=all|REGEX]"),
                    ([*BASE, "--lora", "8,targets=("], "not a regular expression"),
                    ([*BASE, "--lora", "8,targets=no_such_proj"], "no linear layer's weight name matches"),
                    ([*BASE, "--lora", "8", "--parallel", "tp=2"], "--lora with --parallel takes dp, pp and ZeRO")]:
                rc, so, se = run(*args, "--json", out)
                self.assertEqual(rc, 2, (args, se))
                lines = [l for l in se.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, se)
                self.assertIn(needle, lines[0])
                self.assertFalse(os.path.exists(out))
        # An ONNX graph: its linear layers by structure.
        r = run_json(EXAMPLE, "--gpu", "h100", "--batch", "2", "--seq", "64", "--mode", "training", "--lora", "8")
        self.assertGreater(r["memory"]["trainable_params"], 0)


if __name__ == "__main__":
    unittest.main()
