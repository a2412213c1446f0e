#!/usr/bin/env python3
"""Prepare what measure.py needs on a GPU machine that cannot read ../shared.

Writes into DIR (default .devrun, which git ignores):
  shapes.json   kernel shapes drawn (fixed seed) from the distinct shapes of
                neusight-data/kernels/test/*.csv: the transformer-layer shapes the
                published method is judged on; no latency is copied
  runs.json     the single-GPU end-to-end runs of the NeuSight campaign on its newest GPU
                (paper_results/nvidia_{inf,train}.csv: model, mode, sequence, batch)
  configs/      the Hugging Face configs those runs build (model_configs/*.json), and two
                Llama configs for the BF16 generation check

    python3 bench/device_validation/prepare.py [--shared ../shared] [--out .devrun]
"""
import argparse
import csv
import json
import os
import random
import shutil

# Models of paper_results' tables -> model_configs file and sequence length.
MODELS = {
    "BERT-Large": ("bert_large", 512),
    "GPT2-Large": ("gpt2_large", 1024),
    "GPT3-XL": ("gpt3_xl", 2048),
    "OPT-1.3B": ("opt_13", 2048),
    "GPT3-2.7B": ("gpt3_27", 2048),
}

# Upper bounds that keep one kernel's inputs and time small on one GPU (FP32 GEMMs up to
# 2 TFLOP, a few GB of operands).
MAX_GEMM_FLOP = 2.0e12
MAX_ELEMS = 1 << 29


def distinct_shapes(path, cols):
    seen, out = set(), []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            key = (r["OPName"],) + tuple(int(float(r[c])) for c in cols)
            if key not in seen:
                seen.add(key)
                out.append(key)
    return sorted(out)


def sample(rng, items, n):
    items = list(items)
    return items if len(items) <= n else sorted(rng.sample(items, n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
    ap.add_argument("--out", default=".devrun")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--gemms", type=int, default=220, help="FP32 shapes per GEMM op (bmm, linear)")
    ap.add_argument("--lowp", type=int, default=90, help="shapes per low-precision dtype")
    args = ap.parse_args()
    data = os.path.join(args.shared, "neusight-data")
    test = os.path.join(data, "kernels", "test")
    if not os.path.isdir(test):
        raise SystemExit(f"prepare.py: {test} not found (pass --shared)")
    rng = random.Random(args.seed)

    gemm = {}
    for op in ("bmm", "linear"):
        rows = [s for s in distinct_shapes(os.path.join(test, op + ".csv"), ("B", "M", "N", "K"))
                if 2.0 * s[1] * s[2] * s[3] * s[4] <= MAX_GEMM_FLOP
                and s[1] * (s[2] * s[3] + s[3] * s[4] + s[2] * s[4]) <= MAX_ELEMS]
        gemm[op] = [list(s[1:]) for s in sample(rng, rows, args.gemms)]
    vec = {}
    for name in ("elem", "ln", "softmax"):
        rows = [s for s in distinct_shapes(os.path.join(test, name + ".csv"), ("B", "H"))
                if s[1] * s[2] <= MAX_ELEMS // 2]
        vec[name] = [[s[0], s[1], s[2]] for s in sample(rng, rows, 240 if name == "elem" else 80)]
    # Low-precision GEMMs: linear shapes whose dims suit the matrix units (multiples of 16, as
    # FP8 requires), and bmm shapes.
    lin16 = [s for s in gemm["linear"] if s[1] % 16 == 0 and s[2] % 16 == 0 and s[3] % 16 == 0]
    lowp = {"linear": sample(rng, [tuple(s) for s in lin16], args.lowp),
            "bmm": sample(rng, [tuple(s) for s in gemm["bmm"]], args.lowp // 2)}
    shapes = {"gemm": gemm, "vec": vec, "lowp": {k: [list(s) for s in v] for k, v in lowp.items()},
              "source": "distinct shapes of neusight-data/kernels/test/*.csv, seed %d" % args.seed}

    runs = []
    for mode, fname in (("inf", "nvidia_inf.csv"), ("train", "nvidia_train.csv")):
        with open(os.path.join(data, "paper_results", fname), newline="") as f:
            lines = list(csv.reader(f))
        for i, line in enumerate(lines):
            if line and line[0] == "NVIDIA_H100_80GB_HBM3":
                models, batches = lines[i + 1], lines[i + 2]
                current = None
                for j in range(1, len(models)):
                    current = models[j] or current
                    if current in MODELS and batches[j]:
                        name, seq = MODELS[current]
                        runs.append({"model": name, "mode": mode, "seq": seq, "batch": int(batches[j])})
                break
    os.makedirs(os.path.join(args.out, "configs"), exist_ok=True)
    for m in sorted({r["model"] for r in runs}):
        shutil.copy(os.path.join(data, "model_configs", m + ".json"), os.path.join(args.out, "configs", m + ".json"))
    # Llama configs for the BF16 generation check (public architecture numbers of Llama 2 7B,
    # multi-head attention, and Llama 3 8B, grouped-query attention).
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 4096,
             "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    for name, extra in (("llama2_7b", {"intermediate_size": 11008, "num_key_value_heads": 32, "vocab_size": 32000,
                                       "rope_theta": 10000.0}),
                        ("llama3_8b", {"intermediate_size": 14336, "num_key_value_heads": 8, "vocab_size": 128256,
                                       "rope_theta": 500000.0, "max_position_embeddings": 8192})):
        with open(os.path.join(args.out, "configs", name + ".json"), "w") as f:
            json.dump(dict(llama, **extra), f, indent=1)
    with open(os.path.join(args.out, "shapes.json"), "w") as f:
        json.dump(shapes, f)
    with open(os.path.join(args.out, "runs.json"), "w") as f:
        json.dump(runs, f, indent=1)
    n = sum(len(v) for v in gemm.values()) + sum(len(v) for v in vec.values())
    print(f"{args.out}: {n} FP32 kernel shapes, {sum(len(v) for v in lowp.values())} low-precision GEMM shapes "
          f"(x4 dtypes), {len(runs)} end-to-end runs")


if __name__ == "__main__":
    main()
