#!/usr/bin/env python3
"""spec_probe - does the prediction follow the spec sheet? One field of a device JSON at a time.

GPT-2 Large (neusight-data/model_configs/gpt2_large.json), batch 8, sequence 1024, FP32
inference, through the real CLI with `--gpu path.json`: the H100 SXM device JSON of
neusight-data and copies with `SingleFLOPs` x2, `Mem_Bw` / 2, and every rate x2
(SingleFLOPs, Mem_Bw, Freq). Prints the GEMM time, the whole-model time and the ratios.
A physical model: FLOPs x2 makes these compute-bound GEMMs much faster (>= 1.33x), bandwidth
/ 2 slows them little (<= 1.35x), everything x2 is close to 2x.

    python3 bench/spec_probe/run.py [--bin build/bin/neusight-onnx] [--gpu-json FILE] [--timing T] [--weights DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("NEUSIGHT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))


def gemm_ms(binary, config, gpu_json, timing, weights, tmp):
    out = os.path.join(tmp, "r.json")
    cmd = [binary, "--config", config, "--batch", "8", "--seq", "1024", "--gpu", gpu_json, "--json", out, "--quiet"]
    if timing:
        cmd += ["--timing", timing]
    if weights:
        cmd += ["--weights", weights]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        r = json.load(f)
    return r["totals_by_class_ms"].get("gemm", 0.0), r["e2e_latency_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "neusight-onnx"))
    ap.add_argument("--gpu-json", default=os.path.join(SHARED, "neusight-data", "device_configs", "NVIDIA_H100_80GB_HBM3.json"))
    ap.add_argument("--timing", default="")
    ap.add_argument("--weights", default="")
    a = ap.parse_args()
    config = os.path.join(SHARED, "neusight-data", "model_configs", "gpt2_large.json")
    if not os.path.exists(config) or not os.path.exists(a.gpu_json):
        print("spec_probe: skipped, ../shared/neusight-data is absent")
        return 0
    with open(a.gpu_json) as f:
        spec = json.load(f)
    edits = [("as published", {}), ("SingleFLOPs x2", {"SingleFLOPs": 2}), ("Mem_Bw / 2", {"Mem_Bw": 0.5}),
             ("SingleFLOPs, Mem_Bw, Freq x2", {"SingleFLOPs": 2, "Mem_Bw": 2, "Freq": 2})]
    with tempfile.TemporaryDirectory() as tmp:
        base = None
        print(f"spec_probe: GPT-2 Large, batch 8, seq 1024, FP32 inference on {spec['Device']} ({a.gpu_json})")
        print(f"  {'device JSON':32s} {'GEMMs ms':>10s} {'model ms':>10s} {'GEMM x':>8s} {'model x':>8s}")
        for name, edit in edits:
            s = dict(spec)
            for k, f in edit.items():
                s[k] = spec[k] * f
            path = os.path.join(tmp, "gpu.json")
            with open(path, "w") as f:
                json.dump(s, f)
            g, e = gemm_ms(a.bin, config, path, a.timing, a.weights, tmp)
            if base is None:
                base = (g, e)
            print(f"  {name:32s} {g:10.2f} {e:10.2f} {base[0] / g:8.2f} {base[1] / e:8.2f}")
        print("  (x = time as published / time edited: above 1 faster, below 1 slower)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
