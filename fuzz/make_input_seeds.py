#!/usr/bin/python3
"""make_input_seeds.py - write the seed corpus of neusight_fuzz_inputs (fuzz_inputs.cpp).

    /usr/bin/python3 fuzz/make_input_seeds.py SOURCE_DIR OUT_DIR

Each seed is one selector byte and a text: 0 + a Hugging Face config (tests/data/*.json, the
neusight-data fixture configs and make_corpus.py's tiny ones), 1 + a device JSON (every entry of hardware/data/gpus.json,
and each in the dataset's device_configs form), 2 + a kernels CSV (the first rows of each
neusight-data fixture test file). Only the project's own files; nothing is downloaded.
"""
import glob
import json
import os
import sys


def write(out, name, selector, text):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([selector]) + text.encode())


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    configs = sorted(glob.glob(os.path.join(src, "tests", "data", "*.json")) +
                     glob.glob(os.path.join(src, "tests", "data", "neusight-data", "model_configs", "*.json")))
    for path in configs:
        with open(path) as f:
            write(out, "config-" + os.path.basename(path), 0, f.read())
    # The pipeline corpus's tiny configs of every family: small enough to be built and predicted.
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from make_corpus import CONFIGS
    except ImportError:  # make_corpus needs python3-onnx; the files above still seed every reader
        CONFIGS = {}
    for name, cfg in CONFIGS.items():
        write(out, "config-tiny-" + name + ".json", 0, json.dumps(cfg))
    with open(os.path.join(src, "hardware", "data", "gpus.json")) as f:
        gpus = json.load(f)["gpus"]
    for g in gpus:
        stem = g["aliases"][0] if g.get("aliases") else g["name"].replace(" ", "_")
        write(out, "device-" + stem + ".json", 1, json.dumps(g))
        dataset_form = {"Device": g["name"], "Dev_Mem": g["mem_gb"], "Mem_Bw": g["mem_bw_gbps"], "Num_Sm": g["num_sm"],
                        "Core_Per_SM": g.get("fp32_cores_per_sm", 64), "Freq": g["boost_mhz"],
                        "SingleFLOPs": g["fp32_gflops"], "L2Cache": g["l2_mb"]}
        write(out, "device-" + stem + "-dataset.json", 1, json.dumps(dataset_form))
    for path in sorted(glob.glob(os.path.join(src, "tests", "data", "neusight-data", "kernels", "test", "*.csv"))):
        with open(path) as f:
            lines = f.read().splitlines()[:12]
        write(out, "kernels-" + os.path.basename(path), 2, "\n".join(lines) + "\n")
    print(f"make_input_seeds: {len(os.listdir(out))} seeds in {out}")


if __name__ == "__main__":
    main()
