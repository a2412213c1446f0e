#!/usr/bin/env python3
"""newer_gpus - an indirect check on the GPUs whose measured runs are not in ../shared.

The NeuSight paper's error tables (neusight-data/paper_results/nvidia_{inf,train}.csv) give,
for every end-to-end run, the plain roofline's error. Our own roofline (`--predictor roofline`)
divided by (1 - that error) estimates the measured latency, assuming both rooflines are
computed alike. The runs estimated are those whose measurements are kept back: H100 and L4
inference and training, A100 80GB training (42 runs). The same estimate is first made on the
GPUs whose measured runs are in ../shared, against those measurements, to show how far the
estimator itself can be trusted per model. An estimate, not a measurement: printed as such
and never used to fit anything. The roofline runs on the numbers the paper's did: where the
database corrects a dataset device config (the L4's SMs and FP32 peak, the H100's bandwidth), on
the config's.

    python3 bench/newer_gpus/run.py [--bin build/bin/neusight-onnx] [--weights DIR]
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("NEUSIGHT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
DATA = os.path.join(SHARED, "neusight-data")
MODELS = {"BERT-Large": ("bert_large", 512), "GPT2-Large": ("gpt2_large", 1024), "GPT3-XL": ("gpt3_xl", 2048),
          "OPT-1.3B": ("opt_13", 2048), "GPT3-2.7B": ("gpt3_27", 2048), "SwitchTrans": ("switchxl4", 512)}
HELD_OUT = {"NVIDIA_H100_80GB_HBM3": "h100", "NVIDIA_L4": "l4", "NVIDIA_A100_80GB_PCIe": "a100-80gb"}


def roofline_errors(path, mode):
    """{(device dir, mode, model, batch): roofline error %} from one of the paper's tables."""
    out, gpu, header, batches = {}, None, None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row or not any(row):
                continue
            if sum(1 for x in row if x.strip()) == 1 and row[0] not in ("Model", "Batch"):
                gpu = row[0]
            elif row[0] == "Model":
                header = row
            elif row[0] == "Batch":
                batches = row
            elif row[0] == "Roofline" and gpu and header and batches:
                model = None
                for i in range(1, len(row)):
                    model = header[i] or model
                    if model in MODELS and row[i].strip():
                        out[(gpu, mode, model, int(batches[i]))] = float(row[i])
                gpu = None
    return out


def predict(binary, config, seq, batch, mode, gpu, extra, tmp):
    path = os.path.join(tmp, "r.json")
    subprocess.run([binary, "--config", config, "--seq", str(seq), "--batch", str(batch), "--gpu", gpu,
                    "--mode", mode, "--json", path, "--quiet"] + extra,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(path) as f:
        r = json.load(f)
    return r["e2e_latency_ms"], r.get("latency_low_ms", 0), r.get("latency_high_ms", 0)


def roofline_gpus(binary, aliases, tmp):
    """{alias: the GPU the estimate's roofline runs on}: the database entry, with the SM count,
    FP32 peak and bandwidth of the dataset's device config where the database corrects them (the
    L4's 60 SMs of the full die, the H100's 3,430 GB/s), as the paper's roofline used them, written
    once into `tmp`; the alias itself where nothing is corrected."""
    out = subprocess.run([binary, "gpus", "--json"], check=True, capture_output=True, text=True).stdout
    fields = {"dataset_num_sm": ["num_sm"], "dataset_fp32_gflops": ["fp32_gflops", "fp16_simt_gflops"],
              "dataset_mem_bw_gbps": ["mem_bw_gbps"]}
    gpus = {alias: alias for alias in aliases}
    for e in json.loads(out):
        for alias in aliases:
            if alias in e["aliases"] and any(e.get(k) for k in fields):
                for k, targets in fields.items():
                    for t in targets:
                        e[t] = e.get(k) or e[t]
                gpus[alias] = os.path.join(tmp, alias + "-dataset.json")
                with open(gpus[alias], "w") as f:
                    json.dump(e, f)
    return gpus


def measured(gpu_dir, mode, name, seq, batch):
    """The measured latency of a run in ../shared, or None."""
    path = os.path.join(DATA, "e2e", "labels", gpu_dir,
                        f"{name}-{'train' if mode == 'training' else 'inf'}-{seq}-{batch}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["e2e_latency"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "neusight-onnx"))
    ap.add_argument("--weights", default="")
    a = ap.parse_args()
    tables = [(os.path.join(DATA, "paper_results", f"nvidia_{t}.csv"), m) for t, m in
              (("inf", "inference"), ("train", "training"))]
    if not all(os.path.exists(p) for p, _ in tables):
        print("newer_gpus: skipped, ../shared/neusight-data is absent")
        return 0
    extra = ["--weights", a.weights] if a.weights else []
    errs = {}
    for path, mode in tables:
        errs.update(roofline_errors(path, mode))
    print("newer_gpus: FP32, --config runs, device timing (the CLI default); "
          "'estimate' = our roofline / (1 - the paper's roofline error)")
    with tempfile.TemporaryDirectory() as tmp:
        # The estimator on GPUs whose runs are measured: estimate / measured per model.
        check = {}
        for (gpu_dir, mode, model, batch), err in sorted(errs.items()):
            name, seq = MODELS[model]
            meas = measured(gpu_dir, mode, name, seq, batch)
            if gpu_dir in HELD_OUT or meas is None:
                continue
            config = os.path.join(DATA, "model_configs", name + ".json")
            device = os.path.join(DATA, "device_configs", gpu_dir + ".json")
            roof = predict(a.bin, config, seq, batch, mode, device, ["--predictor", "roofline"], tmp)[0]
            check.setdefault((model, mode), []).append(roof / (1 - err / 100.0) / meas)
        print("the estimator where the runs are measured (estimate / measured, over "
              "V100, A100 40GB, P100, T4, P4 runs):")
        for (model, mode), v in sorted(check.items()):
            print(f"  {model:11s} {mode:9s} n={len(v):2d}  min {min(v):.3f}  max {max(v):.3f}")

        # The estimator's own bias per model and mode (geometric mean of estimate / measured on
        # the measured GPUs): 'corrected' divides it out where that model and mode were measured.
        bias = {k: math.exp(sum(math.log(x) for x in v) / len(v)) for k, v in check.items()}
        print("'corrected' = the estimate over that geometric mean of its model and mode ('-' where the model "
              "was not measured in that mode; the corrected summaries count those runs at their estimate)")
        print(f"\n  {'gpu':9s} {'model':11s} {'mode':9s} {'batch':>5s} {'estimate':>9s} {'corrected':>9s} {'predicted':>10s} "
              f"{'err%':>6s} {'corr%':>6s} {'80% interval':>19s} {'inside':>6s}")
        per_gpu = {}
        roof_gpu = roofline_gpus(a.bin, sorted(HELD_OUT.values()), tmp)
        for (gpu_dir, mode, model, batch), err in sorted(errs.items(), key=lambda x: (HELD_OUT.get(x[0][0], ""), x[0][1:])):
            if gpu_dir not in HELD_OUT:
                continue
            gpu = HELD_OUT[gpu_dir]
            name, seq = MODELS[model]
            config = os.path.join(DATA, "model_configs", name + ".json")
            roof = predict(a.bin, config, seq, batch, mode, roof_gpu[gpu], ["--predictor", "roofline"], tmp)[0]
            est = roof / (1 - err / 100.0)
            pred, lo, hi = predict(a.bin, config, seq, batch, mode, gpu, extra, tmp)
            e = 100.0 * (pred / est - 1)
            inside = lo <= est <= hi
            b = bias.get((model, mode))
            corr = est / b if b else est
            ec = 100.0 * (pred / corr - 1)
            for key in (f"{gpu} {mode}", "all"):
                per_gpu.setdefault(key, []).append((abs(e), e, inside, abs(ec), ec))
            corr_s, ec_s = (f"{corr:9.1f}", f"{ec:+6.1f}") if b else (f"{'-':>9s}", f"{'-':>6s}")
            print(f"  {gpu:9s} {model:11s} {mode:9s} {batch:5d} {est:9.1f} {corr_s} {pred:10.1f} {e:+6.1f} {ec_s} "
                  f"{lo:9.1f}-{hi:9.1f} {'yes' if inside else 'no':>6s}")
    for key, v in sorted(per_gpu.items(), key=lambda x: (x[0] == "all", x[0])):
        n = len(v)
        print(f"  {key:20s} mean |error| {sum(x[0] for x in v) / n:5.1f}%, mean signed {sum(x[1] for x in v) / n:+6.1f}%, "
              f"worst {max(x[0] for x in v):5.1f}%, inside the interval {sum(x[2] for x in v)}/{n}; "
              f"corrected: mean {sum(x[3] for x in v) / n:5.1f}%, signed {sum(x[4] for x in v) / n:+6.1f}%, "
              f"worst {max(x[3] for x in v):5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
