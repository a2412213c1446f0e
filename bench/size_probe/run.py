#!/usr/bin/env python3
"""size_probe - does a larger problem ever predict faster? GEMMs one dimension at a time, then models.

Kernels: random GEMMs of the dataset's format (linear: B x M rows through an N x K weight; bmm:
B products of M x N by N x K), fixed seed, each paired with the same GEMM one dimension larger
(x1.25 and x2), through the real CLI (`neusight-onnx kernels`, GPU time: --timing kernel) on
several GPUs, FP32 and BF16. A larger GEMM does at least the work of the smaller one (it
contains it), so a physical model never predicts it faster; prints per GPU, dtype and the
dimension grown the share of pairs where the larger one is predicted faster by more than 1%
and by more than 5%, and the worst ratio with its shapes.

Models: Hugging Face configs of tests/data at batch 1-16 (sequence 512) and sequence 128-2048
(batch 2), default timing and dtype: the steps where a larger batch or sequence predicts a
faster model.

    python3 bench/size_probe/run.py [--bin build/bin/neusight-onnx] [--pairs N] [--gpus LIST] [--seed S]
"""
import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIMS = ("M", "N", "K")
SIZES = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192]
MODELS = ["llama3_8b", "mixtral_8x7b", "qwen3_30b_a3b", "deberta_v3_base", "t5_base", "kimi_k2"]


def gpu_names(binary, aliases):
    out = subprocess.run([binary, "gpus", "--json"], check=True, capture_output=True, text=True).stdout
    db = json.loads(out)
    names = {}
    for a in aliases:
        hit = [g for g in db if a.lower() == g["name"].lower() or a.lower() in [x.lower() for x in g["aliases"]]]
        if not hit:
            sys.exit(f"size_probe: unknown GPU {a}")
        names[a] = hit[0]["name"]
    return names


def random_pairs(n, seed):
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        op = "linear" if i % 2 == 0 else "bmm"
        b = 1 if op == "linear" else rng.choice([1, 4, 12, 16, 32, 64, 128])
        dims = {d: rng.choice(SIZES) for d in DIMS}
        d = DIMS[(i // 2) % 3]
        f = 1.25 if (i // 6) % 2 == 0 else 2.0
        big = dict(dims)
        big[d] = max(dims[d] + 1, int(round(dims[d] * f)))
        pairs.append((op, b, dims, big, d, f))
    return pairs


def kernel_table(binary, name, dtype, pairs, tmp):
    src, dst = os.path.join(tmp, "in.csv"), os.path.join(tmp, "out.csv")
    with open(src, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["OPName", "Device", "dtype", "B", "M", "N", "K"])
        for op, b, small, big, _, _ in pairs:
            w.writerow([op, name, dtype, b, small["M"], small["N"], small["K"]])
            w.writerow([op, name, dtype, b, big["M"], big["N"], big["K"]])
    subprocess.run([binary, "kernels", "--gpu", "from-row", "--csv", src, "--out", dst, "--timing", "kernel"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(dst) as f:
        return [float(r["pred_latency_ms"]) for r in csv.DictReader(f)]


def probe_kernels(binary, gpus, pairs):
    names = gpu_names(binary, gpus)
    print(f"size_probe: {len(pairs)} GEMM pairs (dataset format, seed fixed), the larger one dimension x1.25 or x2; GPU time (--timing kernel)")
    print("  share of pairs whose larger GEMM is predicted faster by more than 1% (by the dimension grown) and by more than 5%; the worst pair")
    print(f"  {'gpu':11s} {'dtype':5s} {'M':>6s} {'N':>6s} {'K':>6s} {'all':>6s} {'>5%':>6s}  worst: larger / smaller time (op B MxNxK -> MxNxK)")
    with tempfile.TemporaryDirectory() as tmp:
        for a in gpus:
            for dtype in ("fp32", "bf16"):
                t = kernel_table(binary, names[a], dtype, pairs, tmp)
                ratios = [(t[2 * i + 1] / t[2 * i], p) for i, p in enumerate(pairs)]
                share = {}
                for d in DIMS + ("all",):
                    sel = [r for r, p in ratios if d == "all" or p[4] == d]
                    share[d] = 100.0 * sum(r < 0.99 for r in sel) / len(sel)
                f5 = 100.0 * sum(r < 0.95 for r, _ in ratios) / len(ratios)
                r, p = min(ratios, key=lambda x: x[0])
                worst = f"{r:.3f} ({p[0]} {p[1]} {p[2]['M']}x{p[2]['N']}x{p[2]['K']} -> {p[3]['M']}x{p[3]['N']}x{p[3]['K']})"
                cells = "".join(f" {share[d]:5.1f}%" for d in DIMS + ("all",))
                print(f"  {a:11s} {dtype:5s}{cells} {f5:5.1f}%  {worst}")


def model_ms(binary, config, gpu, batch, seq, tmp):
    out = os.path.join(tmp, "r.json")
    r = subprocess.run([binary, "--config", config, "--batch", str(batch), "--seq", str(seq), "--gpu", gpu,
                        "--json", out, "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    with open(out) as f:
        return json.load(f)["e2e_latency_ms"]


def probe_models(binary, gpus):
    print("\nmodels (Hugging Face configs of tests/data, default timing and dtype): steps to a larger batch (seq 512) or sequence (batch 2) predicted faster")
    steps = bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for m in MODELS:
            path = os.path.join(ROOT, "tests", "data", m + ".json")
            if not os.path.exists(path):
                continue
            config = path
            for gpu in gpus:
                for axis, values in (("batch", [1, 2, 4, 8, 16]), ("seq", [128, 256, 512, 1024, 2048])):
                    prev = None
                    for v in values:
                        ms = model_ms(binary, config, gpu, v if axis == "batch" else 2, v if axis == "seq" else 512, tmp)
                        if ms is None:
                            break
                        if prev is not None:
                            steps += 1
                            if ms < prev[1] * 0.999:
                                bad += 1
                                print(f"  {m:14s} {gpu:10s} {axis} {prev[0]} -> {v}: {prev[1]:.3f} -> {ms:.3f} ms (x{ms / prev[1]:.3f})")
                        prev = (v, ms)
    print(f"  {bad} of {steps} steps predicted faster")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "neusight-onnx"))
    ap.add_argument("--pairs", type=int, default=6000)
    ap.add_argument("--gpus", default="h100,h200,l4,b200,a100-80gb,v100,mi300x")
    ap.add_argument("--model-gpus", default="h100,l4")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        sys.exit(f"size_probe: {a.bin} not built")
    probe_kernels(a.bin, a.gpus.split(","), random_pairs(a.pairs, a.seed))
    probe_models(a.bin, a.model_gpus.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
