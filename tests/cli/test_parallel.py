"""CLI tests for multi-GPU training: --parallel dp/tp/pp, --link-bw, the report section."""
import ast
import csv
import json
import os
import re
import tempfile
import unittest

from cli_util import EXAMPLE, fixture, run, run_json

BASE = [EXAMPLE, "--gpu", "a100-40gb", "--seq", "128", "--mode", "training", "--predictor", "roofline"]


class ParallelReport(unittest.TestCase):
    def test_data_parallel_overlaps_the_gradient_all_reduce(self):
        r = run_json(*BASE, "--batch", "8", "--parallel", "dp=4", "--optimizer", "adam")
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

    def test_zero_stages_shard_memory_and_change_the_collectives(self):
        runs = {z: run_json(*BASE, "--batch", "8", "--optimizer", "adam", "--parallel", f"dp=4,zero={z}")
                for z in range(4)}
        mem = {z: r["parallel"]["stages"][0]["memory_gb"] for z, r in runs.items()}
        self.assertEqual([r["parallel"]["zero"] for r in runs.values()], [0, 1, 2, 3])
        self.assertAlmostEqual(mem[1]["optimizer"], mem[0]["optimizer"] / 4, places=6)
        self.assertLess(mem[2]["gradients"], mem[1]["gradients"] / 2)
        self.assertLess(mem[3]["weights"], mem[2]["weights"])
        self.assertEqual(runs[0]["parallel"]["dp_gather_ms"], 0)
        for z in (1, 2, 3):
            self.assertGreater(runs[z]["parallel"]["dp_gather_ms"], 0)
            self.assertAlmostEqual(runs[z]["e2e_latency_ms"], runs[z]["parallel"]["iteration_ms"], places=6)
        code, out, err = run(*BASE, "--batch", "8", "--parallel", "dp=4,zero=3")
        self.assertEqual(code, 0, err)
        self.assertIn("ZeRO stage 3 (optimizer state, gradients and parameters sharded over dp)", out)
        self.assertIn("gradient reduce-scatter", out)
        self.assertIn("parameter all-gather", out)
        code, _, err = run(*BASE, "--batch", "8", "--parallel", "tp=2,zero=1", "--quiet")
        self.assertEqual(code, 0, err)
        self.assertIn("dp=1: zero changes nothing", err)
        # Megatron-LM's --overlap-param-gather: the same gather, less of it exposed.
        ov = run_json(*BASE, "--batch", "8", "--optimizer", "adam", "--parallel", "dp=4,zero=1,overlap_gather=1")["parallel"]
        self.assertTrue(ov["overlap_gather"])
        self.assertFalse(runs[1]["parallel"]["overlap_gather"])
        self.assertLess(ov["dp_exposed_ms"], runs[1]["parallel"]["dp_exposed_ms"])
        code, _, err = run(*BASE, "--batch", "8", "--parallel", "dp=4,zero=3,overlap_gather=1")
        self.assertEqual(code, 2, err)
        self.assertIn("overlap_gather", err)

    def test_sequence_parallel_splits_the_norms_and_their_activations(self):
        tp = run_json(*BASE, "--batch", "4", "--parallel", "tp=4")["parallel"]
        sp = run_json(*BASE, "--batch", "4", "--parallel", "tp=4,sp=1")["parallel"]
        self.assertEqual((tp["sequence_parallel"], sp["sequence_parallel"]), (False, True))
        self.assertLess(sp["stages"][0]["memory_gb"]["activations"], tp["stages"][0]["memory_gb"]["activations"])
        self.assertAlmostEqual(sp["tp_comm_ms"], tp["tp_comm_ms"], places=6)
        code, out, err = run(*BASE, "--batch", "4", "--parallel", "tp=4,sp=1")
        self.assertEqual(code, 0, err)
        self.assertIn("sequence parallel over tp", out)

    def test_context_parallel_splits_the_sequence_and_rings_the_keys(self):
        half = BASE + ["--batch", "4", "--dtype", "bf16", "--attention", "fused"]
        one = run_json(*half, "--parallel", "tp=2")["parallel"]
        cp = run_json(*half, "--parallel", "tp=2,cp=2")
        p = cp["parallel"]
        self.assertEqual((p["cp"], p["gpus"]), (2, 4))
        self.assertGreater(p["cp_comm_ms"], 0)
        self.assertLessEqual(p["cp_exposed_ms"], p["cp_comm_ms"])
        self.assertIn("kind", p["cp_link"])
        self.assertAlmostEqual(p["stages"][0]["memory_gb"]["activations"],
                               one["stages"][0]["memory_gb"]["activations"] / 2, delta=0.01 * one["stages"][0]["memory_gb"]["activations"])
        rings = [k for n in cp["nodes"] for k in n["kernels"] if k["op"] == "cp_ring"]
        self.assertEqual(len(rings), 2 * 12)  # after each FlashAttention kernel, forward and backward
        self.assertTrue(all(k["class"] == "collective" and "context-parallel ring" in k["note"] for k in rings))
        code, out, err = run(*half, "--parallel", "tp=2,cp=2")
        self.assertEqual(code, 0, err)
        self.assertIn("cp=2 (4 GPUs)", out)
        self.assertIn("context-parallel ring", out)
        # Ulysses: an all-to-all either side of each attention, forward and backward, exposed.
        u = run_json(*half, "--parallel", "tp=2,cp=2,cp_comm=a2a")
        self.assertEqual(u["parallel"]["cp_comm"], "a2a")
        self.assertEqual(p["cp_comm"], "p2p")
        a2a = [k for n in u["nodes"] for k in n["kernels"] if k["op"] == "cp_alltoall"]
        self.assertEqual(len(a2a), 4 * 12)
        self.assertAlmostEqual(u["parallel"]["cp_exposed_ms"], u["parallel"]["cp_comm_ms"], delta=1e-9)
        code, out, err = run(*half, "--parallel", "tp=2,cp=2,cp_comm=a2a")
        self.assertEqual(code, 0, err)
        self.assertIn("cp=2 (all-to-all)", out)
        self.assertIn("context all-to-all", out)
        # 16-bit attention is FlashAttention without asking (SDPA's, as transformers trains).
        auto = run_json(*BASE, "--batch", "4", "--dtype", "bf16", "--parallel", "tp=2,cp=2")
        self.assertEqual(auto["e2e_latency_ms"], cp["e2e_latency_ms"])
        # Ring attention runs inside FlashAttention (FP32 or unfused attention has none);
        # inference takes no cp.
        with tempfile.TemporaryDirectory() as d:
            out_json = os.path.join(d, "r.json")
            for args in ([*BASE, "--batch", "4", "--parallel", "cp=2"],
                         [*BASE, "--batch", "4", "--dtype", "bf16", "--attention", "unfused", "--parallel", "cp=2"],
                         [*half, "--parallel", "tp=2,cp=2,cp_comm=ring2"],
                         [*half, "--parallel", "tp=2,cp_comm=a2a"],
                         [EXAMPLE, "--gpu", "h100", "--batch", "4", "--dtype", "bf16", "--parallel", "cp=2"]):
                code, _, err = run(*args, "--json", out_json)
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn("cp", err)
                self.assertFalse(os.path.exists(out_json))

    def test_expert_parallel_training_spreads_the_experts_over_data_parallel_gpus(self):
        cfg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "olmoe_1b_7b.json")
        base = ["--config", cfg, "--gpu", "h100", "--mode", "training", "--dtype", "bf16", "--batch", "8", "--seq", "512",
                "--predictor", "roofline", "--optimizer", "adam"]
        dense = run_json(*base, "--parallel", "dp=8")["parallel"]
        ep = run_json(*base, "--parallel", "dp=8,ep=8")
        p = ep["parallel"]
        self.assertEqual((p["ep"], p["gpus"]), (8, 8))
        self.assertGreater(p["ep_comm_ms"], 0)
        self.assertEqual(dense["ep_comm_ms"], 0)
        self.assertLess(p["stages"][0]["memory_gb"]["weights"], dense["stages"][0]["memory_gb"]["weights"] / 3)
        a2a = [k for n in ep["nodes"] for k in n["kernels"] if k["op"] == "ep_alltoall"]
        self.assertEqual(len(a2a), 4 * 16)  # dispatch and combine, forward and backward, 16 MoE layers
        code, out, err = run(*base, "--parallel", "dp=8,ep=8")
        self.assertEqual(code, 0, err)
        self.assertIn("expert all-to-all", out)
        # ep divides dp in training; a model without experts is told ep changes nothing.
        code, _, err = run(*base, "--parallel", "dp=2,ep=4")
        self.assertEqual(code, 2, err)
        self.assertIn("must divide dp=2", err)
        code, _, err = run(*BASE, "--batch", "4", "--parallel", "dp=2,ep=2", "--quiet")
        self.assertEqual(code, 0, err)
        self.assertIn("ep changes nothing", err)

    def test_a_tp_that_does_not_divide_a_config_model_is_named(self):
        cfg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "llama3_8b.json")
        for args, warned in ((["--batch", "1", "--seq", "16", "--parallel", "tp=3"], True),
                             (["--generate", "16:2", "--parallel", "tp=3"], True),
                             (["--batch", "1", "--seq", "16", "--parallel", "tp=8"], False)):
            with self.subTest(args=args):
                code, _, err = run("--config", cfg, "--gpu", "h100", "--dtype", "bf16", "--predictor", "roofline", *args)
                self.assertEqual(code, 0, err)
                line = "tp=3 does not divide llama3_8b.json's attention heads 32, KV heads 8"
                self.assertEqual(line in err, warned, err)

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
        # Megatron-LM's interleaved schedule: two model chunks a GPU, a smaller bubble.
        il = run_json(*BASE, "--batch", "8", "--parallel", "pp=4,microbatches=8,vp=2")["parallel"]
        self.assertEqual(il["virtual_stages"], 2)
        self.assertEqual([s["gpu"] for s in il["stages"]], [0, 1, 2, 3, 0, 1, 2, 3])
        self.assertLess(il["bubble_fraction"], f["bubble_fraction"])

    def test_table_prints_the_section(self):
        code, out, err = run(*BASE, "--batch", "4", "--parallel", "dp=2,pp=2,microbatches=2")
        self.assertEqual(code, 0, err)
        self.assertIn("parallel training: dp=2 tp=1 pp=2 (4 GPUs)", out)
        self.assertIn("gradient all-reduce", out)
        self.assertIn("peak memory per GPU", out)

    def test_shares_are_of_the_micro_batchs_kernels_not_the_iteration(self):
        # Nodes, classes and phases are one micro-batch through every stage; their shares add
        # up to 100% of that (they added up to a third of the iteration), and the table says so.
        args = (*BASE, "--batch", "8", "--parallel", "pp=4,microbatches=8")
        code, out, err = run(*args)
        self.assertEqual(code, 0, err)
        self.assertIn("one micro-batch through every stage", out)
        classes = out.split("by kernel class")[1].split("host-bound")[0].split("(nodes")[0]
        total = sum(float(line.split()[3]) for line in classes.strip().splitlines()[1:])  # class kernels ms %
        self.assertAlmostEqual(total, 100.0, delta=0.5)
        phases = out.split("by phase")[1].split("end-to-end")[0]
        self.assertAlmostEqual(sum(float(line.split()[2]) for line in phases.strip().splitlines()[1:]), 100.0, delta=0.5)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "n.csv")
            code, _, err = run(*args, "--csv", path, "--quiet")
            self.assertEqual(code, 0, err)
            with open(path) as f:
                self.assertAlmostEqual(sum(float(r["share"]) for r in csv.DictReader(f)), 1.0, delta=1e-6)

    def test_memory_warning(self):
        code, out, err = run(EXAMPLE, "--gpu", "l4", "--seq", "1024", "--batch", "128", "--mode", "training",
                             "--predictor", "roofline", "--parallel", "dp=2", "--quiet")
        self.assertEqual(code, 0, err)
        self.assertIn("GiB per GPU needed", err)

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
            ("--batch", "4", "--parallel", "dp=2,zero=5"),
            ("--batch", "4", "--parallel", "tp=2,sp=on"),
            ("--batch", "8", "--parallel", "pp=4,microbatches=6,vp=2"),
            ("--batch", "8", "--parallel", "pp=2,microbatches=2,vp=0"),
            ("--batch", "4", "--parallel", "dp=2,pp=2,zero=3"),
        ]
        for extra in cases:
            with self.subTest(extra=extra):
                code, out, err = run(*BASE, *extra)
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
        code, out, err = run(EXAMPLE, "--gpu", "a100-40gb", "--seq", "128", "--batch", "4", "--parallel", "dp=2")
        self.assertEqual(code, 2)
        self.assertIn("--mode training", err)


class InferencePipeline(unittest.TestCase):
    """--parallel pp=N without --mode training: a forward pass's microbatches through the stages."""
    ARGS = [EXAMPLE, "--gpu", "h100", "--seq", "1024", "--dtype", "bf16", "--quiet"]

    def test_microbatches_fill_the_stages(self):
        one = run_json(*self.ARGS, "--batch", "8")
        pp = run_json(*self.ARGS, "--batch", "8", "--parallel", "pp=2")
        p = pp["parallel"]
        self.assertEqual((p["mode"], p["pp"], p["microbatches"], p["micro_batch"], p["global_batch"]),
                         ("inference", 2, 2, 4, 8))
        self.assertEqual(len(p["stages"]), 2)
        stages = [s["forward_ms"] for s in p["stages"]]
        hop = p["pp_comm_ms"]  # one send between the two stages
        # The fill: both stages for the first microbatch, then the slower one for the second.
        self.assertAlmostEqual(pp["e2e_latency_ms"], sum(stages) + max(stages) + hop, delta=1e-6)
        self.assertAlmostEqual(p["iteration_ms"], pp["e2e_latency_ms"], delta=1e-9)
        self.assertAlmostEqual(p["bubble_ms"], pp["e2e_latency_ms"] - 2 * max(stages) - hop, delta=1e-6)
        # Faster than one GPU (kernels long enough that the host's dispatch does not set the
        # pace), slower than two GPUs' perfect split; each GPU holds a stage's weights.
        self.assertLess(pp["e2e_latency_ms"], one["e2e_latency_ms"])
        self.assertGreater(pp["e2e_latency_ms"], one["e2e_latency_ms"] / 2)
        self.assertEqual(pp["memory"]["pp"], 2)
        self.assertLess(pp["memory"]["weights_gib"], 0.7 * one["memory"]["weights_gib"])
        self.assertAlmostEqual(pp["memory"]["weights_gib"], max(s["memory_gb"]["weights"] for s in p["stages"]), delta=1e-9)
        self.assertEqual(pp["throughput"]["samples"], 8)
        # More microbatches: a shorter fill.
        four = run_json(*self.ARGS, "--batch", "8", "--parallel", "pp=2,microbatches=4")["parallel"]
        self.assertEqual((four["microbatches"], four["micro_batch"]), (4, 2))
        self.assertLess(four["bubble_fraction"], p["bubble_fraction"])
        # With tensor parallelism inside each stage: 4 GPUs, all-reduces on the busiest stage.
        tp = run_json(*self.ARGS, "--batch", "8", "--parallel", "tp=2,pp=2")["parallel"]
        self.assertEqual((tp["tp"], tp["gpus"]), (2, 4))
        self.assertGreater(tp["tp_comm_ms"], 0)

    def test_terminal_and_html_name_the_pipeline(self):
        code, out, err = run(*self.ARGS[:-1], "--batch", "4", "--parallel", "pp=2")
        self.assertEqual(code, 0, err)
        self.assertIn("parallel inference: tp=1 pp=2 (2 GPUs), batch 4, micro-batch 2 x 2 microbatches", out)
        self.assertIn("the fullest of 2 pipeline stages", out)
        self.assertEqual(out.count("ms per microbatch; memory"), 2)
        self.assertIn("the shares of it; the pipeline below)", out)
        with tempfile.TemporaryDirectory() as d:
            html = os.path.join(d, "r.html")
            code, _, err = run(*self.ARGS, "--batch", "4", "--parallel", "pp=2", "--html", html, "--quiet")
            self.assertEqual(code, 0, err)
            with open(html) as f:
                self.assertIn("<h2>Multi-GPU inference</h2>", f.read())

    def test_even_layer_split_as_vllm(self):
        # pp_split=even: Llama 3 8B's 32 layers 8 a stage (the embedding on the first, the LM head
        # on the last, which is then the slowest), where the default balances the stages' time.
        cfg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "llama3_8b.json")
        args = ("--config", cfg, "--gpu", "h100", "--dtype", "bf16", "--batch", "8", "--seq", "1024")
        even = run_json(*args, "--parallel", "pp=4,pp_split=even")["parallel"]
        balanced = run_json(*args, "--parallel", "pp=4")["parallel"]
        firsts = [s["first_node"] for s in even["stages"]]
        self.assertTrue(firsts[1].startswith("model.layers.8."), firsts)
        self.assertTrue(firsts[2].startswith("model.layers.16."), firsts)
        self.assertTrue(firsts[3].startswith("model.layers.24."), firsts)
        self.assertEqual(even["stages"][3]["last_node"], "lm_head/MatMul")
        stage_ms = [s["forward_ms"] for s in even["stages"]]
        self.assertEqual(max(stage_ms), stage_ms[3])
        self.assertGreaterEqual(even["iteration_ms"], balanced["iteration_ms"])
        # A generation's decode round waits for the head's stage too.
        gen = ("--config", cfg, "--gpu", "h100", "--dtype", "bf16", "--generate", "512:64", "--batch", "16")
        ge = run_json(*gen, "--parallel", "pp=4,pp_split=even")["generation"]
        gb = run_json(*gen, "--parallel", "pp=4")["generation"]
        self.assertGreater(ge["tpot_ms"], gb["tpot_ms"])
        for spec, line in (("pp_split=even", "give pp=N > 1"), ("pp=2,pp_split=odd", "even or balanced")):
            code, _, err = run(*args, "--parallel", spec)
            self.assertEqual(code, 2, err)
            self.assertIn(line, err)
        code, _, err = run(*args, "--mode", "training", "--parallel", "pp=2,pp_split=even")
        self.assertEqual(code, 2, err)
        self.assertIn("training's stages are balanced", err)

    def test_bad_pipelines_are_one_line(self):
        for extra, line in (
                (["--batch", "8", "--parallel", "pp=2,microbatches=3"], "batch 8 does not divide into microbatches=3"),
                (["--batch", "8", "--parallel", "microbatches=2"], "give pp=N > 1"),
                (["--parallel", "pp=2,microbatches=2"], "give --batch N"),
                (["--batch", "8", "--parallel", "pp=2,dp=2"], "takes tp=N and pp=N"),
                (["--batch", "8", "--parallel", "pp=100000"], "pp=100000")):
            with self.subTest(extra=extra):
                code, _, err = run(*self.ARGS, *extra)
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(line, err)


class Recompute(unittest.TestCase):
    """--recompute full: activation checkpointing of a training step."""

    def test_checkpointing_trades_a_forward_for_the_activations(self):
        args = (EXAMPLE, "--gpu", "h100", "--batch", "8", "--seq", "512", "--mode", "training", "--predictor", "roofline")
        plain = run_json(*args)
        ckpt = run_json(*args, "--recompute", "full")
        self.assertEqual(plain["memory"]["recompute_segments"], 0)
        self.assertGreaterEqual(ckpt["memory"]["recompute_segments"], 2 * 12)  # GPT-2 small's 12 pre-norm layers
        self.assertLess(ckpt["memory"]["activations_gib"], 0.3 * plain["memory"]["activations_gib"])
        self.assertAlmostEqual(ckpt["forward_ms"], plain["forward_ms"], places=6)
        self.assertGreater(ckpt["backward_ms"], plain["backward_ms"] + 0.5 * plain["forward_ms"])
        recomputed = [k for n in ckpt["nodes"] for k in n["kernels"] if k.get("recomputed")]
        self.assertTrue(recomputed)
        self.assertTrue(all(k["phase"] == "backward" and "recomputed forward" in k["note"] for k in recomputed))
        self.assertFalse([k for n in plain["nodes"] for k in n["kernels"] if "recomputed" in k])
        code, out, err = run(*args, "--recompute", "full")
        self.assertEqual(code, 0, err)
        self.assertIn("checkpointed in", out)
        # The multi-GPU plan keeps the checkpoints too.
        pp = run_json(*args, "--recompute", "full", "--parallel", "pp=2,microbatches=2")["parallel"]
        pp_plain = run_json(*args, "--parallel", "pp=2,microbatches=2")["parallel"]
        self.assertLess(pp["stages"][0]["memory_gb"]["activations"], 0.5 * pp_plain["stages"][0]["memory_gb"]["activations"])

    def test_selective_recomputes_the_attention_cores(self):
        args = (EXAMPLE, "--gpu", "h100", "--batch", "4", "--seq", "1024", "--mode", "training", "--predictor", "roofline")
        plain = run_json(*args)
        sel = run_json(*args, "--recompute", "selective")
        self.assertEqual(sel["memory"]["recompute"], "selective")
        self.assertEqual(sel["memory"]["recompute_segments"], 12)  # GPT-2 small's attention cores
        self.assertLess(sel["memory"]["activations_gib"], plain["memory"]["activations_gib"])
        ops = {k["op"] for n in sel["nodes"] for k in n["kernels"] if "recomputed forward" in k.get("note", "")}
        self.assertIn("softmax", ops)
        self.assertNotIn("linear", ops)
        code, out, err = run(*args, "--recompute", "selective")
        self.assertEqual(code, 0, err)
        self.assertIn("12 attention cores recomputed", out)

    def test_bad_recompute_is_one_line(self):
        for extra in (("--recompute", "full"), ("--recompute", "selective"), ("--mode", "training", "--recompute", "partial")):
            with self.subTest(extra=extra):
                code, _, err = run(EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "16", *extra)
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)


def traced_gemm_flops(path):
    """Forward and backward flops of every Linear / BMM kernel in a traced opgraph (one layer + LM head)."""
    out = {"forward": [], "backward": []}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["OpName"] not in ("Linear", "BMM"):
                continue
            for col, phase in (("FwOps", "forward"), ("BwOps", "backward")):
                for op in ast.literal_eval(row[col]):
                    flops = 2
                    for d in op[1]:
                        flops *= d
                    out[phase].append(flops)
    return {k: sorted(v) for k, v in out.items()}


class ParallelKernelsMatchTraces(unittest.TestCase):
    """Per-GPU GEMM shapes of each parallel mode against the traced opgraphs of the same runs."""

    NAME = re.compile(r"^(?P<model>.+)-train-(?P<seq>\d+)-(?P<batch>\d+)-(?P<par>dp\d+|tp\d+|pp\d+_\d+)\.csv$")

    def test_layer_and_lm_head_gemms_per_gpu(self):
        folder = fixture("e2e", "opgraph")
        checked = 0
        for name in sorted(os.listdir(folder)):
            m = self.NAME.match(name)
            cfg = fixture("model_configs", (m["model"] + ".json") if m else "")
            if not m or not os.path.exists(cfg):
                continue
            par = m["par"]
            if par.startswith("pp"):
                n, mb = par[2:].split("_")
                spec = f"pp={n},microbatches={mb}"
            else:
                spec = f"{par[:2]}={par[2:]}"
            r = run_json("--config", cfg, "--batch", m["batch"], "--seq", m["seq"], "--gpu", "a100-sxm4-40gb",
                         "--mode", "training", "--parallel", spec, "--predictor", "roofline")
            ours = {"forward": [], "backward": []}
            for node in r["nodes"]:
                # The traces hold one transformer layer (h_0) and the LM head.
                if node["name"].startswith(("transformer.h.0.", "transformer.h.0/", "lm_head")):
                    for k in node["kernels"]:
                        if k["class"] == "gemm" and k["phase"] in ours:
                            ours[k["phase"]].append(k["flops"])
            traced = traced_gemm_flops(os.path.join(folder, name))
            for phase in ours:
                with self.subTest(run=name, phase=phase):
                    a = sorted(ours[phase])
                    self.assertEqual(len(a), len(traced[phase]))
                    for x, y in zip(a, traced[phase]):
                        self.assertAlmostEqual(x / y, 1.0, delta=1e-3)  # the vocabulary split pads by one row
            checked += 1
        self.assertGreaterEqual(checked, 3)


class ParallelGpt2Large(unittest.TestCase):
    """The measured A100 SXM4 runs (bench/parallel_accuracy prints the figures)."""

    def test_orders_and_magnitudes_follow_the_measurements(self):
        labels = fixture("e2e", "labels", "NVIDIA_A100-SXM4-40GB")
        cfg = fixture("model_configs", "gpt2_large.json")
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
