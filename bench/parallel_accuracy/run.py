#!/usr/bin/python3
"""run.py - multi-GPU training iterations: predicted vs measured, side by side.

    /usr/bin/python3 bench/parallel_accuracy/run.py [--build build] [--predictor P] [--gpu-dir NAME]

Every label ../shared/neusight-data/e2e/labels/<GPU>/<model>-train-<seq>-<batch>-<par>.json
with <par> = dp<N> | tp<N> | pp<N>_<microbatches> (e.g. gpt2_large-train-1024-4-pp4_1.json)
is predicted with the CLI exactly as a user runs it:

    neusight-onnx --config model_configs/<model>.json --batch <batch> --seq <seq> --gpu <GPU>
                  --mode training --parallel dp=N | tp=N | pp=N,microbatches=M --json out.json

(the CLI's default predictor unless --predictor is given), and the measured e2e_latency of the
label is printed beside the predicted iteration time with the error. Parallel configurations
whose traced operator graph exists (e2e/opgraph/<model>-train-<seq>-<batch>-<par>.csv) but that
have no label on any GPU are predicted too and listed without a measurement (e.g. GPT-3 XL).
Nothing here is a pass/fail test.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.environ.get("NEUSIGHT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
DATA = os.path.join(SHARED, "neusight-data")
NAME = re.compile(r"^(?P<model>.+)-train-(?P<seq>\d+)-(?P<batch>\d+)-(?P<par>dp\d+|tp\d+|pp\d+_\d+)$")


def parallel_spec(par):
    if par.startswith("pp"):
        n, m = par[2:].split("_")
        return f"pp={n},microbatches={m}"
    return f"{par[:2]}={par[2:]}"


def predict(binary, model, seq, batch, gpu, par, predictor, timing=""):
    cfg = os.path.join(DATA, "model_configs", model + ".json")
    if not os.path.exists(cfg):
        return None, f"no model config {model}.json"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = [binary, "--config", cfg, "--batch", str(batch), "--seq", str(seq), "--gpu", gpu,
               "--mode", "training", "--parallel", parallel_spec(par), "--json", out, "--quiet"]
        if predictor:
            cmd += ["--predictor", predictor]
        if timing:
            cmd += ["--timing", timing]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
        with open(out) as f:
            return json.load(f), ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--predictor", default="", help="default: the CLI's default predictor")
    ap.add_argument("--timing", default="", help="eager or device (default: the CLI's default)")
    ap.add_argument("--gpu-dir", default="", help="only labels of this GPU folder")
    args = ap.parse_args()
    binary = os.environ.get("NEUSIGHT_BIN", os.path.join(args.build, "bin", "neusight-onnx"))
    if not os.path.exists(binary):
        sys.exit(f"run.py: {binary} not found; build first (or set NEUSIGHT_BIN)")
    if not os.path.isdir(DATA):
        sys.exit(f"run.py: {DATA} not found; the shared data must be at ../shared (or NEUSIGHT_SHARED_DIR)")

    cases = []  # (gpu device name, model, seq, batch, par, measured or None)
    labelled = set()
    for path in sorted(glob.glob(os.path.join(DATA, "e2e", "labels", "*", "*.json"))):
        gpu_dir = os.path.basename(os.path.dirname(path))
        m = NAME.match(os.path.basename(path)[:-5])
        if not m or (args.gpu_dir and gpu_dir != args.gpu_dir):
            continue
        with open(path) as f:
            measured = json.load(f)["e2e_latency"]
        cases.append((gpu_dir.replace("_", " "), m["model"], int(m["seq"]), int(m["batch"]), m["par"], measured))
        labelled.add((m["model"], m["seq"], m["batch"], m["par"]))
    gpus_with_labels = sorted({c[0] for c in cases}) or ["NVIDIA A100-SXM4-40GB"]
    for path in sorted(glob.glob(os.path.join(DATA, "e2e", "opgraph", "*.csv"))):
        m = NAME.match(os.path.basename(path)[:-4])
        if m and (m["model"], m["seq"], m["batch"], m["par"]) not in labelled:
            for g in gpus_with_labels:
                cases.append((g, m["model"], int(m["seq"]), int(m["batch"]), m["par"], None))

    print(f"{'model':<12} {'seq':>5} {'batch':>5} {'parallel':<20} {'GPU':<24} {'predicted ms':>12} "
          f"{'measured ms':>12} {'error':>8}  predictor  (compute / exposed comm / bubble ms)")
    errors = []
    for gpu, model, seq, batch, par, measured in cases:
        r, why = predict(binary, model, seq, batch, gpu, par, args.predictor, args.timing)
        spec = parallel_spec(par)
        if r is None:
            shown = f"{measured:.1f}" if measured else "-"
            print(f"{model:<12} {seq:>5} {batch:>5} {spec:<20} {gpu:<24} {'-':>12} {shown:>12} {'-':>8}  ({why})")
            continue
        pred = r["e2e_latency_ms"]
        p = r.get("parallel", {})
        detail = f"{p.get('compute_ms', 0):.1f} / {p.get('exposed_comm_ms', 0):.1f} / {p.get('bubble_ms', 0):.1f}"
        if measured:
            err = 100.0 * abs(pred - measured) / measured
            errors.append(err)
            print(f"{model:<12} {seq:>5} {batch:>5} {spec:<20} {gpu:<24} {pred:>12.1f} {measured:>12.1f} "
                  f"{err:>7.1f}%  {r['predictor']:<9}  ({detail})")
        else:
            print(f"{model:<12} {seq:>5} {batch:>5} {spec:<20} {gpu:<24} {pred:>12.1f} {'no label':>12} "
                  f"{'-':>8}  {r['predictor']:<9}  ({detail})")
    if errors:
        print(f"\nmean absolute error over {len(errors)} labelled runs: {sum(errors) / len(errors):.1f}%")


if __name__ == "__main__":
    main()
