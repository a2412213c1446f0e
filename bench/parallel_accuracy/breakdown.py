#!/usr/bin/python3
"""breakdown.py - where the per-GPU time of the measured parallel runs goes, and why it is over-predicted.

    /usr/bin/python3 bench/parallel_accuracy/breakdown.py [--build build] [--all]

For every labelled multi-GPU run (e2e/labels/<GPU>/<model>-train-<seq>-<batch>-<par>.json) the
per-GPU kernel list the CLI predicts is split into GEMMs, vector kernels (elementwise, softmax,
layernorm, memory), update kernels and collectives, each with the CLI's default predictor and
with the roofline; kernels predicted under 50 us are counted apart. The last column is the GEMM
throughput the measurement implies if every non-GEMM kernel and all communication were exactly as
predicted. Then the single-GPU runs of the same model on NVIDIA GPUs (no parallelism at all) are
predicted the same way, and the per-kernel training data's floor for tiny elementwise kernels is
printed. Nothing here is a pass/fail test; it is the evidence behind the README's explanation.
"""
import argparse
import csv
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # importing run.py must leave no __pycache__ in the source tree
from run import DATA, NAME, ROOT, parallel_spec  # noqa: E402

SMALL_MS = 0.05
FLOOR_GPU = "NVIDIA_A100-PCIE-40GB"  # the per-kernel data of the labelled runs' chip (A100, SM80)
SINGLE = re.compile(r"^(?P<model>gpt2_large)-(?P<mode>inf|train)-(?P<seq>\d+)-(?P<batch>\d+)$")


def cli(binary, args, predictor=""):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = [binary, *args, "--json", out, "--quiet"] + (["--predictor", predictor] if predictor else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"breakdown.py: {' '.join(cmd)} failed: {p.stderr.strip()}")
        with open(out) as f:
            return json.load(f)


def group(k):
    if k["class"] == "collective":
        return "collective"
    if k["phase"] == "update":
        return "update"
    return "gemm" if k["class"] == "gemm" else "vector"


def launch_floor_ms(gpu_file):
    """Median latency of the tiny (<= 65536 elements) adds measured for a GPU in kernels/train: the
    cost of one isolated launch as timed in the per-kernel data, whatever the kernel does."""
    path = os.path.join(DATA, "kernels", "train", "add", gpu_file + ".csv")
    with open(path) as f:
        lat = [float(r["Latency"]) for r in csv.DictReader(f) if int(r["B"]) * int(r["H"]) <= 1 << 16]
    return statistics.median(lat)


def without_floor(pred, roof, floor_ms):
    """What-if: each kernel takes max(predicted - floor, roofline), i.e. back to back on one stream the
    launch overlaps the previous kernel. Update kernels count in the share the iteration holds (pp:
    the slowest stage's only)."""
    upd = sum(k["latency_ms"] for n in pred["nodes"] for k in n["kernels"] if k["phase"] == "update")
    upd_share = pred.get("parallel", pred)["update_ms"] / upd if upd > 0 else 0
    cut = 0.0
    for a, b in zip(pred["nodes"], roof["nodes"]):
        for k, kr in zip(a["kernels"], b["kernels"]):
            if k["class"] == "collective":
                continue
            d = k["latency_ms"] - max(k["latency_ms"] - floor_ms, kr["latency_ms"])
            cut += d * (upd_share if k["phase"] == "update" else 1)
    return pred["e2e_latency_ms"] - cut


def split(pred, roof):
    """Per group: [kernels, predicted ms, roofline ms, flops]; plus the small kernels."""
    g = {n: [0, 0.0, 0.0, 0.0] for n in ("gemm", "vector", "update", "collective", "small")}
    for a, b in zip(pred["nodes"], roof["nodes"]):
        for k, kr in zip(a["kernels"], b["kernels"]):
            for name in (group(k), "small") if k["latency_ms"] < SMALL_MS and k["class"] != "collective" else (group(k),):
                row = g[name]
                row[0] += 1
                row[1] += k["latency_ms"]
                row[2] += kr["latency_ms"]
                row[3] += k["flops"]
    return g


def parallel_runs(binary):
    floor = launch_floor_ms(FLOOR_GPU)
    print("Per-GPU kernels of the measured multi-GPU runs (predicted / roofline ms; kernels)")
    print(f"{'run':<36} {'measured':>9} {'predicted':>9}  {'GEMM':>17} {'TF/s':>5}  {'vector':>15}  "
          f"{'update':>13}  {'collective':>10}  {'< 50 us':>22}  {'implied GEMM TF/s':>17}  "
          f"{'no floor':>8} {'error':>6}")
    errors = []
    for path in sorted(glob.glob(os.path.join(DATA, "e2e", "labels", "*", "*.json"))):
        m = NAME.match(os.path.basename(path)[:-5])
        if not m:
            continue
        gpu = os.path.basename(os.path.dirname(path)).replace("_", " ")
        with open(path) as f:
            measured = json.load(f)["e2e_latency"]
        args = ["--config", os.path.join(DATA, "model_configs", m["model"] + ".json"), "--batch", m["batch"],
                "--seq", m["seq"], "--gpu", gpu, "--mode", "training", "--parallel", parallel_spec(m["par"])]
        pred, roof = cli(binary, args), cli(binary, args, "roofline")
        g = split(pred, roof)
        gemm_ms = g["gemm"][1]
        # Every GEMM is on the critical path here (dp, tp, and pp with one microbatch, whose
        # stages run one after another): with everything else as predicted, they must take
        # measured - (predicted - predicted GEMM time).
        implied = g["gemm"][3] / max(measured - (pred["e2e_latency_ms"] - gemm_ms), 1e-9) / 1e9
        nf = without_floor(pred, roof, floor)
        errors.append(100 * abs(nf - measured) / measured)
        name = f"{m['model']} b{m['batch']} {parallel_spec(m['par'])}"
        print(f"{name:<36} {measured:>9.1f} {pred['e2e_latency_ms']:>9.1f}  {gemm_ms:>7.1f} / {g['gemm'][2]:>7.1f} "
              f"{g['gemm'][3] / gemm_ms / 1e9:>5.1f}  {g['vector'][1]:>6.1f} / {g['vector'][2]:>6.1f}  "
              f"{g['update'][1]:>5.1f} / {g['update'][2]:>5.1f}  {g['collective'][1]:>10.1f}  "
              f"{g['small'][0]:>5} {g['small'][1]:>6.1f} / {g['small'][2]:>5.1f}  {implied:>17.1f}  "
              f"{nf:>8.1f} {100 * (nf - measured) / measured:>+5.1f}%")
    print("(GEMM TF/s: predicted throughput; the spec-sheet FP32 peak of the A100 is 19.5)")
    print(f"(no floor: what-if, every kernel max(predicted - {1000 * floor:.1f} us, roofline); {1000 * floor:.1f} us is the"
          f" median of the tiny adds of {FLOOR_GPU} in kernels/train, nothing taken from these labels;"
          f" mean |error| {statistics.mean(errors):.1f}%)")


def all_single_gpu_runs(binary):
    """--all: the what-if on every single-GPU label whose GPU has per-kernel data (its own floor)."""
    pattern = re.compile(r"^(?P<model>[a-z0-9_]+)-(?P<mode>inf|train)-(?P<seq>\d+)-(?P<batch>\d+)$")
    print("\nEvery single-GPU run whose GPU has kernels/train data: predicted and what-if error")
    by_gpu = {}
    for path in sorted(glob.glob(os.path.join(DATA, "e2e", "labels", "*", "*.json"))):
        gpu_dir = os.path.basename(os.path.dirname(path))
        m = pattern.match(os.path.basename(path)[:-5])
        cfg = os.path.join(DATA, "model_configs", (m["model"] if m else "") + ".json")
        if not m or not os.path.exists(cfg) or not os.path.exists(
                os.path.join(DATA, "kernels", "train", "add", gpu_dir + ".csv")):
            continue
        with open(path) as f:
            meas = json.load(f)["e2e_latency"]
        args = ["--config", cfg, "--batch", m["batch"], "--seq", m["seq"], "--gpu", gpu_dir.replace("_", " "),
                "--mode", "training" if m["mode"] == "train" else "inference"]
        r = cli(binary, args)
        nf = without_floor(r, cli(binary, args, "roofline"), launch_floor_ms(gpu_dir))
        e0, e1 = 100 * (r["e2e_latency_ms"] - meas) / meas, 100 * (nf - meas) / meas
        by_gpu.setdefault(gpu_dir, []).append((abs(e0), abs(e1)))
        print(f"  {gpu_dir + ' ' + os.path.basename(path)[:-5]:<52} {meas:>9.1f} {r['e2e_latency_ms']:>9.1f} {e0:>+6.1f}%"
              f" {nf:>9.1f} {e1:>+6.1f}%")
    every = [e for v in by_gpu.values() for e in v]
    for gpu_dir, v in sorted(by_gpu.items()):
        print(f"  {gpu_dir:<28} {len(v):>3} runs, mean |error| {statistics.mean(e[0] for e in v):5.1f}% -> "
              f"{statistics.mean(e[1] for e in v):5.1f}% without the floor")
    if every:
        print(f"  all {len(every)} runs: {statistics.mean(e[0] for e in every):.1f}% -> "
              f"{statistics.mean(e[1] for e in every):.1f}%")


def single_gpu_runs(binary):
    print("\nThe same model on one GPU, no parallelism (e2e/labels, NVIDIA GPUs with the A100's or V100's chip)")
    print(f"{'run':<44} {'measured':>9} {'predicted':>9} {'error':>7}   forward meas/pred   backward+update meas/pred"
          f"   {'no floor':>8} {'error':>7}")
    for path in sorted(glob.glob(os.path.join(DATA, "e2e", "labels", "*", "gpt2_large-*.json"))):
        gpu_dir = os.path.basename(os.path.dirname(path))
        m = SINGLE.match(os.path.basename(path)[:-5])
        if not m or not ("A100" in gpu_dir or "V100" in gpu_dir):
            continue
        with open(path) as f:
            label = json.load(f)
        mode = "training" if m["mode"] == "train" else "inference"
        args = ["--config", os.path.join(DATA, "model_configs", "gpt2_large.json"), "--batch", m["batch"],
                "--seq", m["seq"], "--gpu", gpu_dir.replace("_", " "), "--mode", mode]
        r = cli(binary, args)
        nf = without_floor(r, cli(binary, args, "roofline"), launch_floor_ms(gpu_dir))
        meas, pred = label["e2e_latency"], r["e2e_latency_ms"]
        fw = f"{label['fw_latency']:.1f} / {r['forward_ms']:.1f}"
        bw = f"{label['bwall_latency']:.1f} / {r['backward_ms'] + r['update_ms']:.1f}" if mode == "training" else "-"
        print(f"{gpu_dir + ' ' + os.path.basename(path)[:-5]:<44} {meas:>9.1f} {pred:>9.1f} "
              f"{100 * (pred - meas) / meas:>+6.1f}%   {fw:>17}   {bw:>25}   {nf:>8.1f} {100 * (nf - meas) / meas:>+6.1f}%")


def gemm_neighbours(binary):
    """The runs' distinct linear-layer GEMMs: predicted throughput next to same-sized A100 kernels."""
    data = os.path.join(DATA, "kernels", "train", "linear", "NVIDIA_A100-PCIE-40GB.csv")
    if not os.path.exists(data):
        return
    with open(data) as f:
        rows = [(int(r["M"]), int(r["N"]), int(r["K"]), float(r["Latency"])) for r in csv.DictReader(f)
                if int(r["B"] or 1) == 1]
    print("\nLinear GEMMs of the dp=4 (batch 1) and pp=4 (batch 4) runs, dataset order (M, N, K): predicted TF/s on the"
          "\nA100 SXM4 next to the measured A100 PCIe kernels (same chip and spec peak) within 15% in every dimension")
    shapes = {}
    for par in ("dp4", "pp4_1"):
        r = cli(binary, ["--config", os.path.join(DATA, "model_configs", "gpt2_large.json"), "--batch", "4", "--seq",
                         "1024", "--gpu", "NVIDIA A100-SXM4-40GB", "--mode", "training", "--parallel", parallel_spec(par)])
        for n in r["nodes"]:
            for k in n["kernels"]:
                g = k.get("gemm")
                if k["class"] == "gemm" and g and g["batch"] == 1:
                    shapes.setdefault((g["m"], g["k"], g["n"]), k["flops"] / k["latency_ms"] / 1e9)
    for (m, n, k), tf in sorted(shapes.items()):
        near = [2 * a * b * c / lat / 1e9 for a, b, c, lat in rows
                if abs(a / m - 1) <= 0.15 and abs(b / n - 1) <= 0.15 and abs(c / k - 1) <= 0.15]
        meas = f"{statistics.median(near):5.1f} (median of {len(near)})" if near else "    - (none)"
        print(f"  ({m:>5}, {n:>5}, {k:>5})  predicted {tf:5.1f}   measured kernels {meas}")


def kernel_floor():
    print("\nTiny elementwise kernels in the per-kernel training data (kernels/train, isolated launches)")
    for path in sorted(glob.glob(os.path.join(DATA, "kernels", "train", "add", "*.csv"))):
        with open(path) as f:
            rows = [r for r in csv.DictReader(f) if int(r["B"]) * int(r["H"]) <= 1 << 16]
        if rows:
            lat = [1000 * float(r["Latency"]) for r in rows]
            print(f"  {os.path.basename(path)[:-4]:<28} add over <= 65536 elements: {len(rows):>4} kernels, "
                  f"median {statistics.median(lat):5.1f} us, min {min(lat):5.1f} us")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--all", action="store_true", help="also the what-if on every single-GPU label (~1 min)")
    args = ap.parse_args()
    binary = os.environ.get("NEUSIGHT_BIN", os.path.join(args.build, "bin", "neusight-onnx"))
    if not os.path.exists(binary):
        sys.exit(f"breakdown.py: {binary} not found; build first (or set NEUSIGHT_BIN)")
    parallel_runs(binary)
    single_gpu_runs(binary)
    gemm_neighbours(binary)
    kernel_floor()
    if args.all:
        all_single_gpu_runs(binary)


if __name__ == "__main__":
    main()
