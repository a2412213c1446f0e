#!/usr/bin/env python3
"""newer_gpus - an indirect check on H100 and L4, whose measured runs are not in ../shared.

The NeuSight paper's error tables (neusight-data/paper_results/nvidia_inf.csv) give, for every
end-to-end inference run on the H100 and the L4, the plain roofline's error. Our own roofline
(`--predictor roofline`) divided by (1 - that error) estimates the measured latency, assuming
both rooflines are computed alike (FLOPs at the FP32 peak, bytes at the DRAM bandwidth, per
kernel, summed). Prints the estimate, our prediction and its error, per run and per GPU.
An estimate, not a measurement: it is reported as such and never used to fit anything.

    python3 bench/newer_gpus/run.py [--bin build/bin/neusight-onnx] [--weights DIR]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("NEUSIGHT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
MODELS = {"BERT-Large": ("bert_large", 512), "GPT2-Large": ("gpt2_large", 1024), "GPT3-XL": ("gpt3_xl", 2048),
          "OPT-1.3B": ("opt_13", 2048), "GPT3-2.7B": ("gpt3_27", 2048)}
GPUS = {"NVIDIA_H100_80GB_HBM3": "h100", "NVIDIA_L4": "l4"}


def roofline_errors(path):
    """{(gpu alias, model, batch): roofline error %} from the paper's table."""
    out, gpu, header, batches = {}, None, None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row or not any(row):
                continue
            if row[0] in GPUS:
                gpu = GPUS[row[0]]
            elif row[0] == "Model":
                header = row
            elif row[0] == "Batch":
                batches = row
            elif row[0] == "Roofline" and gpu and header and batches:
                model = None
                for i in range(1, len(row)):
                    model = header[i] or model
                    if model in MODELS and row[i].strip():
                        out[(gpu, model, int(batches[i]))] = float(row[i])
                gpu = None
    return out


def predict(binary, config, seq, batch, gpu, extra, tmp):
    path = os.path.join(tmp, "r.json")
    subprocess.run([binary, "--config", config, "--seq", str(seq), "--batch", str(batch), "--gpu", gpu, "--json", path,
                    "--quiet"] + extra, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(path) as f:
        r = json.load(f)
    return r["e2e_latency_ms"], r.get("latency_low_ms", 0), r.get("latency_high_ms", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "neusight-onnx"))
    ap.add_argument("--weights", default="")
    a = ap.parse_args()
    table = os.path.join(SHARED, "neusight-data", "paper_results", "nvidia_inf.csv")
    if not os.path.exists(table):
        print("newer_gpus: skipped, ../shared/neusight-data is absent")
        return 0
    extra = ["--weights", a.weights] if a.weights else []
    errs = roofline_errors(table)
    print("newer_gpus: FP32 inference, device timing (the CLI default for whole models); 'estimate' = our roofline / (1 - the paper's roofline error)")
    print(f"  {'gpu':5s} {'model':11s} {'batch':>5s} {'estimate':>9s} {'predicted':>10s} {'err%':>6s} "
          f"{'80% interval':>17s} {'inside':>6s}")
    per_gpu = {}
    with tempfile.TemporaryDirectory() as tmp:
        for (gpu, model, batch), err in sorted(errs.items()):
            name, seq = MODELS[model]
            config = os.path.join(SHARED, "neusight-data", "model_configs", name + ".json")
            roof = predict(a.bin, config, seq, batch, gpu, ["--predictor", "roofline"], tmp)[0]
            est = roof / (1 - err / 100.0)
            pred, lo, hi = predict(a.bin, config, seq, batch, gpu, extra, tmp)
            e = 100.0 * (pred / est - 1)
            inside = lo <= est <= hi
            per_gpu.setdefault(gpu, []).append((abs(e), e, inside))
            print(f"  {gpu:5s} {model:11s} {batch:5d} {est:9.1f} {pred:10.1f} {e:+6.1f} {lo:8.1f}-{hi:8.1f} "
                  f"{'yes' if inside else 'no':>6s}")
    for gpu, v in per_gpu.items():
        n = len(v)
        print(f"  {gpu}: mean |error| {sum(x[0] for x in v) / n:.1f}%, mean signed {sum(x[1] for x in v) / n:+.1f}%, "
              f"worst {max(x[0] for x in v):.1f}%, inside the interval {sum(x[2] for x in v)}/{n} (n={n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
