#!/usr/bin/env python3
"""generation - Llama-3-8B generation figures against the memory-bandwidth bound.

Through the real CLI (`--generate`, kernel timing and --fusion full, the serving defaults):
FP16 at batch 1, prompt 512, 128 new tokens on H100, H200, B200, L40S, MI300X and A100 80GB.
Prints TPOT next to (weights other than the embedding table) / DRAM bandwidth, the tokens/s of
batch 8 against batch 1, TTFT at a 2048-token prompt against 512, the KV-cache bytes against
2 x layers x kv_heads x head_dim x tokens x batch x 2, and the analysis time of a 64k-token
generation against a 128-token one. Then TTFT and TPOT per precision (FP16, BF16, FP8, FP4) of
Llama-3-8B on one GPU and of Llama-3-70B tensor parallel over 8 GPUs (--parallel tp=8), next
to the bound (one GPU's share of the weights over its DRAM bandwidth).

    python3 bench/generation/run.py [--bin build/bin/neusight-onnx] [--config tests/data/llama3_8b.json]
                                    [--config70 tests/data/llama3_70b.json]
                                    [--mixtral tests/data/mixtral_8x7b.json]
                                    [--qwen3moe tests/data/qwen3_30b_a3b.json]
                                    [--gptoss20 tests/data/gpt_oss_20b.json]
                                    [--gptoss120 tests/data/gpt_oss_120b.json]
                                    [--deepseek tests/data/deepseek_r1.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUS = ["h100", "h200", "b200", "l40s", "mi300x", "a100-80gb"]


def generate(binary, config, spec, batch, gpus, tmp, dtype="fp16", extra=()):
    out = os.path.join(tmp, "g.json")
    cmd = [binary, "--config", config, "--generate", spec, *(["--batch", str(batch)] if batch else []), "--dtype", dtype,
           "--gpu", ",".join(gpus), "--json", out, "--quiet", *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    with open(out) as f:
        r = json.load(f)
    return (r if isinstance(r, list) else [r]), wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "neusight-onnx"))
    ap.add_argument("--config", default=os.path.join(ROOT, "tests", "data", "llama3_8b.json"))
    ap.add_argument("--config70", default=os.path.join(ROOT, "tests", "data", "llama3_70b.json"))
    ap.add_argument("--mixtral", default=os.path.join(ROOT, "tests", "data", "mixtral_8x7b.json"))
    ap.add_argument("--qwen3moe", default=os.path.join(ROOT, "tests", "data", "qwen3_30b_a3b.json"))
    ap.add_argument("--gptoss20", default=os.path.join(ROOT, "tests", "data", "gpt_oss_20b.json"))
    ap.add_argument("--gptoss120", default=os.path.join(ROOT, "tests", "data", "gpt_oss_120b.json"))
    ap.add_argument("--deepseek", default=os.path.join(ROOT, "tests", "data", "deepseek_r1.json"))
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    layers, kvh = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    with tempfile.TemporaryDirectory() as tmp:
        one, _ = generate(a.bin, a.config, "512:128", 1, GPUS, tmp)
        eight, _ = generate(a.bin, a.config, "512:128", 8, GPUS, tmp)
        long_prompt, _ = generate(a.bin, a.config, "2048:128", 1, GPUS, tmp)
        print(f"{'gpu':24} {'DRAM GB/s':>9} {'bound ms':>9} {'TPOT ms':>8} {'ratio':>6} {'TTFT ms':>8} "
              f"{'tok/s b1':>9} {'tok/s b8':>9} {'b8/b1':>6} {'TTFT 2048/512':>13}")
        for r1, r8, rl in zip(one, eight, long_prompt):
            g1, g8, gl = r1["generation"], r8["generation"], rl["generation"]
            bound = g1["weight_read_ms"]
            bw = (g1["weight_bytes"] - g1["embedding_bytes"]) / bound / 1e6
            print(f"{r1['gpu']:24} {bw:9.0f} {bound:9.3f} {g1['tpot_ms']:8.3f} {g1['tpot_ms'] / bound:6.2f} "
                  f"{g1['ttft_ms']:8.2f} {g1['tokens_per_s']:9.1f} {g8['tokens_per_s']:9.1f} "
                  f"{g8['tokens_per_s'] / g1['tokens_per_s']:6.2f} {gl['ttft_ms'] / g1['ttft_ms']:13.2f}")
        want = 2 * layers * kvh * hd * (512 + 128) * 1 * 2
        print(f"KV cache at batch 1, 640 tokens: {one[0]['generation']['kv_cache_bytes']:.0f} bytes "
              f"(2 x {layers} x {kvh} x {hd} x 640 x 1 x 2 = {want})")
        # Best of three wall times each (the machine's other work only ever adds).
        short = min(generate(a.bin, a.config, "512:128", 1, ["h100"], tmp)[1] for _ in range(3))
        longer = min(generate(a.bin, a.config, "512:65536", 1, ["h100"], tmp)[1] for _ in range(3))
        print(f"analysis time: 128 new tokens {short:.2f} s, 65536 new tokens {longer:.2f} s ({longer / short:.2f}x)")
        precision_table(a, tmp)
        moe_table(a, tmp)
        deepseek_table(a, tmp)
        speculative_table(a, tmp)
        slo_table(a, tmp)


def precision_table(a, tmp):
    """TTFT / TPOT (bound) ms per precision: 8B on one GPU, 70B over 8 GPUs (batch 1, 512:128)."""
    runs = [("8B", a.config, ()), ("70B tp=8", a.config70, ("--parallel", "tp=8"))]
    dtypes = ["fp16", "bf16", "fp8", "fp4", "int8"]
    print("\nbatch 1, prompt 512, 128 new tokens: TTFT ms / TPOT ms (bound ms) per GPU")
    print(f"{'model':9} {'gpu':24} " + " ".join(f"{d:>24}" for d in dtypes))
    for name, config, extra in runs:
        per = {d: generate(a.bin, config, "512:128", 1, GPUS, tmp, d, extra)[0] for d in dtypes}
        for i, gpu in enumerate(per["fp16"]):
            cells = []
            for d in dtypes:
                g = per[d][i]["generation"]
                cells.append(f"{g['ttft_ms']:8.2f} / {g['tpot_ms']:6.2f} ({g['weight_read_ms']:5.2f})")
            print(f"{name:9} {gpu['gpu']:24} " + " ".join(f"{c:>24}" for c in cells))


def slo_table(a, tmp):
    """--tpot-slo: per GPU the largest batch of Llama-3-8B BF16 sequences (512:128) that fits with a
    mean time per output token of at most 20 and 50 ms, and its tokens/s."""
    print("\nLlama-3-8B, BF16, prompt 512, 128 new tokens: the largest batch whose TPOT meets the target")
    print(f"{'gpu':24} {'target ms':>9} {'batch':>6} {'TPOT ms':>8} {'tokens/s':>9} {'TTFT ms':>9} {'stopped by':>22}")
    for slo in (20, 50):
        for r in generate(a.bin, a.config, "512:128", None, GPUS, tmp, "bf16", ("--tpot-slo", str(slo)))[0]:
            g, t = r["generation"], r["generation"]["tpot_slo"]
            why = ("not met at batch 1" if t["limit"] == "none" else "memory" if t["limit"] == "memory"
                   else f"batch {t['next_batch']}: {t['next_tpot_ms']:.2f} ms")
            print(f"{r['gpu']:24} {slo:9} {g['batch']:6} {g['tpot_ms']:8.2f} {g['tokens_per_s']:9.1f} "
                  f"{g['ttft_ms']:9.1f} {why:>22}")


def moe_table(a, tmp):
    """Mixtures of experts, BF16, prompt 512, 128 new tokens, batch 1 and 8: Mixtral 8x7B (top-2 of
    8 experts), Qwen3-30B-A3B (top-8 of 128), gpt-oss-20b and -120b (top-4 of 32 / 128 MXFP4
    experts, every other layer a 128-token sliding window). A decode step reads the experts its
    tokens reach (bound: those weights over the DRAM bandwidth)."""
    for name, config in (("Mixtral 8x7B", a.mixtral), ("Qwen3-30B-A3B", a.qwen3moe),
                         ("gpt-oss-20b (MXFP4 experts)", a.gptoss20), ("gpt-oss-120b (MXFP4 experts)", a.gptoss120)):
        one = generate(a.bin, config, "512:128", 1, GPUS, tmp, "bf16")[0]
        eight = generate(a.bin, config, "512:128", 8, GPUS, tmp, "bf16")[0]
        print(f"\n{name}, BF16, prompt 512, 128 new tokens: TTFT ms / TPOT ms (bound ms), tokens/s")
        two_batches(one, eight, 8, ("memory GB", lambda g: f"{g['memory_bytes'] / 1e9:9.1f}"))


def two_batches(one, many, n, *extra):
    """One row per GPU: TTFT / TPOT (bound) and tokens/s at batch 1 and batch n, then `extra`
    columns (title, formatter of batch 1's generation)."""
    print(f"{'gpu':24} {'batch 1':>26} {'tok/s':>7} {'batch ' + str(n):>26} {'tok/s':>7} "
          + " ".join(f"{t:>10}" for t, _ in extra))
    for r1, rn in zip(one, many):
        g1, gn = r1["generation"], rn["generation"]
        c1 = f"{g1['ttft_ms']:8.2f} / {g1['tpot_ms']:6.2f} ({g1['weight_read_ms']:5.2f})"
        cn = f"{gn['ttft_ms']:8.2f} / {gn['tpot_ms']:6.2f} ({gn['weight_read_ms']:5.2f})"
        print(f"{r1['gpu']:24} {c1:>26} {g1['tokens_per_s']:7.1f} {cn:>26} {gn['tokens_per_s']:7.1f} "
              + " ".join(f"{f(g1):>10}" for _, f in extra))


def deepseek_table(a, tmp):
    """DeepSeek-R1 (the DeepSeek-V3 architecture: 671B, multi-head latent attention, top-8 of 256
    experts), FP8 as its checkpoint stores it, tensor parallel over the 8 GPUs of one node,
    prompt 1024, 128 new tokens, batch 1 and 16."""
    gpus = ["h200", "b200", "mi300x"]
    # Each expert split over the 8 GPUs, then whole experts on each (32 of 256; the busiest GPU's
    # time under uniform routing).
    for spec in ("tp=8", "tp=8,ep=8"):
        extra = ("--parallel", spec)
        one = generate(a.bin, a.deepseek, "1024:128", 1, gpus, tmp, "fp8", extra)[0]
        many = generate(a.bin, a.deepseek, "1024:128", 16, gpus, tmp, "fp8", extra)[0]
        print(f"\nDeepSeek-R1, FP8, {spec}, prompt 1024, 128 new tokens: TTFT ms / TPOT ms (bound ms), tokens/s")
        two_batches(one, many, 16, ("GB per GPU", lambda g: f"{g['memory_per_gpu_bytes'] / 1e9:.1f}"),
                    ("KV MB b1", lambda g: f"{g['kv_cache_bytes'] / 1e6:.1f}"))
    # Speculative decoding with the model's own multi-token-prediction module drafting one token.
    mtp = generate(a.bin, a.deepseek, "1024:128", 1, gpus, tmp, "fp8",
                   ("--parallel", "tp=8", "--speculative", "1,accept=0.8,draft=mtp"))[0]
    print("\nDeepSeek-R1, FP8, tp=8, batch 1, the MTP module drafting 1 token at acceptance 0.8: "
          "TTFT ms / TPOT ms (verify ms + draft ms)")
    for r in mtp:
        g = r["generation"]
        s = g["speculative"]
        print(f"{r['gpu']:24} {g['ttft_ms']:8.2f} / {g['tpot_ms']:6.2f} ({s['verify_ms']:.2f} + {s['draft_step_ms']:.3f})")


# Llama-3.2-1B's architecture (its config.json's numbers), the usual draft of Llama-3-8B.
LLAMA32_1B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
              "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
              "head_dim": 64, "vocab_size": 128256, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
              "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": True}


def speculative_table(a, tmp):
    """Speculative decoding of Llama-3-8B, BF16, batch 1, prompt 512, 128 new tokens: TPOT ms
    plain, with a free draft (prompt lookup) and with Llama-3.2-1B drafting 4 tokens, at two
    acceptance rates (an input: it depends on the text and the draft)."""
    draft = os.path.join(tmp, "llama32_1b.json")
    with open(draft, "w") as f:
        json.dump(LLAMA32_1B, f)
    cases = [("plain", ()), ("lookup K=4 p=0.7", ("--speculative", "4,accept=0.7")),
             ("1B K=4 p=0.6", ("--speculative", f"4,accept=0.6,draft={draft}")),
             ("1B K=4 p=0.8", ("--speculative", f"4,accept=0.8,draft={draft}"))]
    per = {name: generate(a.bin, a.config, "512:128", 1, GPUS, tmp, "bf16", extra)[0] for name, extra in cases}
    print("\nLlama-3-8B, BF16, batch 1, prompt 512, 128 new tokens, speculative decoding: TPOT ms (TTFT ms)")
    print(f"{'gpu':24} " + " ".join(f"{name:>18}" for name, _ in cases))
    for i, r in enumerate(per["plain"]):
        cells = [f"{per[name][i]['generation']['tpot_ms']:7.2f} ({per[name][i]['generation']['ttft_ms']:6.2f})"
                 for name, _ in cases]
        print(f"{r['gpu']:24} " + " ".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
