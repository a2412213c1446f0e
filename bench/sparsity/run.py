#!/usr/bin/env python3
"""sparsity - what --sparsity 2:4 predicts against the same model dense, per GPU.

Through the real CLI: Llama-3-8B in BF16, every linear layer but the head pruned 2:4, on GPUs
with sparse tensor cores (A100 80GB, L40S, H100, H200, B200, MI300X) and one without (V100).
Prints per GPU the prefill of 8 x 2048 tokens (--fusion eager, device timing: PyTorch's
to_sparse_semi_structured path), a decode step's TPOT at batch 8 and batch 64 (512 + 128,
the serving defaults), the weights held, and the bounds the physics sets: a compute-bound GEMM
at most 2x (the sparse peak), a weight stream at most 16 / 9 (the compressed bytes). These are
predictions of an unvalidated path (docs/ACCURACY.md): no sparse GEMM was measured.

    python3 bench/sparsity/run.py [--bin build/bin/neusight-onnx] [--config tests/data/llama3_8b.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUS = ["a100-80gb", "l40s", "h100", "h200", "b200", "mi300x", "v100"]


def run_json(binary, args, tmp):
    out = os.path.join(tmp, "r.json")
    p = subprocess.run([binary, *args, "--json", out, "--quiet"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"sparsity: {' '.join(args)}: {p.stderr.strip()}")
    with open(out) as f:
        r = json.load(f)
    return r if isinstance(r, list) else [r]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "neusight-onnx"))
    ap.add_argument("--config", default=os.path.join(ROOT, "tests", "data", "llama3_8b.json"))
    a = ap.parse_args()
    gpus = ",".join(GPUS)
    with tempfile.TemporaryDirectory() as tmp:
        prefill = ["--config", a.config, "--gpu", gpus, "--dtype", "bf16", "--batch", "8", "--seq", "2048"]
        dense = run_json(a.bin, prefill, tmp)
        sparse = run_json(a.bin, prefill + ["--sparsity", "2:4"], tmp)
        decode = {}
        for batch in (8, 64):
            gen = ["--config", a.config, "--gpu", gpus, "--generate", "512:128", "--batch", str(batch)]
            decode[batch] = (run_json(a.bin, gen, tmp), run_json(a.bin, gen + ["--sparsity", "2:4"], tmp))
    print(f"sparsity: {os.path.basename(a.config)} BF16, --sparsity 2:4 against dense (x = dense time / sparse time)")
    print(f"  {'gpu':26} {'sparse':>7} {'prefill 8x2048 ms':>24} {'x':>6} {'TPOT b8 ms':>18} {'x':>6} "
          f"{'TPOT b64 ms':>18} {'x':>6} {'weights GiB':>16}")
    for i, d in enumerate(dense):
        s = sparse[i]
        d8, s8 = decode[8][0][i]["generation"], decode[8][1][i]["generation"]
        d64, s64 = decode[64][0][i]["generation"], decode[64][1][i]["generation"]
        gemms = f"{s['sparsity']['sparse_gemms']}/{s['sparsity']['pruned_gemms']}"
        print(f"  {d['gpu']:26} {gemms:>7} {d['e2e_latency_ms']:10.1f} -> {s['e2e_latency_ms']:9.1f} "
              f"{d['e2e_latency_ms'] / s['e2e_latency_ms']:6.2f} {d8['tpot_ms']:7.2f} -> {s8['tpot_ms']:6.2f} "
              f"{d8['tpot_ms'] / s8['tpot_ms']:6.2f} {d64['tpot_ms']:7.2f} -> {s64['tpot_ms']:6.2f} "
              f"{d64['tpot_ms'] / s64['tpot_ms']:6.2f} {d['memory']['weights_gib']:6.2f} -> {s['memory']['weights_gib']:5.2f}")
    print("  bounds: a compute-bound GEMM at most 2.00x, a weight stream at most 1.78x (16 / 9 bits a weight)")


if __name__ == "__main__":
    main()
