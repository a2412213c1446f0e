#!/usr/bin/env python3
"""Set the predictions of neusight-onnx beside what measure.py measured on a GPU.

    python3 bench/device_validation/compare.py DIR [--bin build/bin/neusight-onnx]
                                               [--configs .devrun/configs] [--gpu h200]

DIR holds measure.py's fp32.csv, lowp.csv, e2e.csv and facts.json. Prints, per kernel class
(and per precision for the GEMMs): the number of kernels, MAPE, median predicted / measured,
the share of measured times inside the 80% interval and the interval's median width
(high / low), for the NeuSight predictor, the published formulation and a plain roofline;
then every end-to-end run against `--config` predictions, and how often the tile the tiling
stage derives matches the library kernel's `tilesize` tag. Needs the CLI only (no GPU).
End-to-end runs need the Hugging Face configs (prepare.py copies them into .devrun/configs).
"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

PREDICTORS = ("neusight", "neusight-paper", "roofline")
SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared")
ELEM = {"add", "addu", "mul", "mulu", "div", "divu", "pow", "powu", "gelu", "relu", "tanh"}


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def predict_kernels(binary, rows, cols, tmp, predictor, timing):
    src = os.path.join(tmp, "in.csv")
    dst = os.path.join(tmp, "out.csv")
    with open(src, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    cmd = [binary, "kernels", "--gpu", "from-row", "--csv", src, "--out", dst, "--predictor", predictor,
           "--timing", timing]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return read(dst)


def predict_all(binary, rows, cols, tmp, timing):
    """Every predictor's predictions of `rows` in `timing`: {predictor: rows with predictions}."""
    return {p: predict_kernels(binary, rows, cols, tmp, p, timing) for p in PREDICTORS}


def grouped(preds, col, key):
    """predict_all's predictions against the measured column `col`, grouped by key(row):
    {group: {predictor: [(measured, predicted, low, high)]}}. Rows without a prediction or a
    measurement are left out."""
    groups = {}
    for p in PREDICTORS:
        for r in preds[p]:
            if not r.get("pred_latency_ms") or not r.get(col):
                continue
            g = groups.setdefault(key(r), {q: [] for q in PREDICTORS})
            lo = float(r.get("pred_low_ms") or 0)
            hi = float(r.get("pred_high_ms") or 0)
            g[p].append((float(r[col]), float(r["pred_latency_ms"]), lo, hi))
    return groups


def klass(r):
    op = r["OPName"]
    if op in ("bmm", "linear"):
        return op
    return "elementwise" if op in ELEM else {"ln": "layernorm"}.get(op, op)


def summary(pairs):
    """pairs: (measured, predicted, low, high)."""
    err = [abs(p - m) / m for m, p, _, _ in pairs]
    ratio = [p / m for m, p, _, _ in pairs]
    inside = [lo <= m <= hi for m, _, lo, hi in pairs if lo > 0]
    width = [hi / lo for _, _, lo, hi in pairs if lo > 0]
    return (len(pairs), 100 * statistics.mean(err), statistics.median(ratio),
            100 * sum(inside) / len(inside) if inside else float("nan"),
            statistics.median(width) if width else float("nan"), 100 * max(err))


def kernel_table(title, groups):
    print(title)
    print(f"  {'class':<22}{'n':>5}  " + "".join(f"{p:>28}" for p in PREDICTORS))
    print(f"  {'':<22}{'':>5}  " + "".join(f"{'MAPE  med p/m  in80  width':>28}" for _ in PREDICTORS))
    for name in groups:
        cells = ""
        n = 0
        for p in PREDICTORS:
            s = summary(groups[name][p])
            n = s[0]
            cov = f"{s[3]:5.0f}" if p != "roofline" else "    -"
            wid = f"{s[4]:5.2f}" if p != "roofline" else "    -"
            cells += f"{s[1]:9.1f} {s[2]:7.2f} {cov} {wid} "
        print(f"  {name:<22}{n:>5}  {cells}")
    print()


ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "tf32": 4, "fp32": 4}


def unaligned(r):
    """Whether a GEMM row has a dim whose rows are not a multiple of 16 bytes (every dim of a
    batched product is some operand's or the output's row length in one of its layouts)."""
    eb = ELEMENT_BYTES.get(r.get("dtype", "fp32"), 4)
    return any(int(r[c]) * eb % 16 for c in "MNK" if r.get(c))


def alignment_key(r):
    return f"{r['OPName']} {r['dtype']} {'unaligned' if unaligned(r) else 'aligned'}"


def align(binary, d, tmp):
    """The row-alignment sweep (align.csv): 16-bit attention products and LM heads with rows that
    are, or are not, multiples of 16 bytes, and small aligned GEMMs (n^3), against graph replay
    and against the profiler's kernel durations."""
    path = os.path.join(d, "align.csv")
    if not os.path.exists(path):
        return
    rows = read(path)
    cols = list(rows[0].keys())

    def key(r):
        if r["OPName"] == "linear" and r["M"] == r["N"] == r["K"]:
            return f"linear {r['dtype']} {r['M']}^3"
        return alignment_key(r)

    preds = predict_all(binary, rows, cols, tmp, "kernel")
    for col, what in (("Latency_graph", "CUDA-graph replay"), ("Latency_kernel", "the profiler's kernel durations")):
        groups = grouped(preds, col, key)
        if groups:
            kernel_table(f"Row-alignment sweep (align.csv), --timing kernel against {what}",
                         dict(sorted(groups.items())))


def kernels(binary, d, tmp):
    fp32 = read(os.path.join(d, "fp32.csv"))
    cols = list(fp32[0].keys())
    for timing, col in (("eager", "Latency"), ("kernel", "Latency_graph")):
        if col not in cols:
            continue
        groups = grouped(predict_all(binary, fp32, cols, tmp, timing), col, klass)
        what = ("PyTorch-eager time per call (--timing eager)" if timing == "eager"
                else "CUDA-graph replay, the GPU's time (--timing kernel)")
        kernel_table(f"FP32 kernels, {what}", groups)
    tiles(binary, fp32, cols, tmp)
    tile_effect(binary, os.path.join(d, "fp32.csv"))
    speedup(binary, d, tmp, SHARED)

    path = os.path.join(d, "lowp.csv")
    if not os.path.exists(path):
        return
    lowp = read(path)
    cols = list(lowp[0].keys())
    preds = {t: predict_all(binary, lowp, cols, tmp, t) for t in ("kernel", "eager")}
    for timing, col in (("kernel", "Latency_graph"), ("eager", "Latency")):
        groups = grouped(preds[timing], col, lambda r: f"{r['OPName']} {r['dtype']}")
        what = "CUDA-graph replay (--timing kernel)" if timing == "kernel" else "eager calls (--timing eager)"
        kernel_table(f"Low-precision GEMMs, {what}", dict(sorted(groups.items())))
    groups = grouped(preds["kernel"], "Latency_graph", alignment_key)
    kernel_table("Low-precision GEMMs by row alignment (unaligned: a dim of M, N, K not a multiple of 16 bytes; "
                 "the CLI warns), CUDA-graph replay", dict(sorted(groups.items())))
    align(binary, d, tmp)
    decode(binary, d, tmp)


def speedup(binary, d, tmp, shared, reference="NVIDIA A100 80GB PCIe"):
    """The same FP32 GEMM shapes on a GPU of neusight-data (its test rows): measured speedup
    from there to the measured GPU against the predicted one, by reduction length (GPU time
    both sides: the dataset's eager times over 0.05 ms, graph replay here)."""
    test = os.path.join(shared, "neusight-data", "kernels", "test")
    path = os.path.join(d, "fp32.csv")
    if not os.path.isdir(test) or not os.path.exists(path):
        return
    ref = {}
    for op in ("bmm", "linear"):
        for r in read(os.path.join(test, op + ".csv")):
            if r["Device"] == reference and float(r["Latency"]) > 0.05:
                ref[(op, r["B"], r["M"], r["N"], r["K"])] = float(r["Latency"])
    rows = [r for r in read(path) if r["OPName"] in ("bmm", "linear") and r.get("Latency_graph")
            and (r["OPName"], r["B"], r["M"], r["N"], r["K"]) in ref]
    if not rows:
        return
    cols = list(rows[0].keys())
    here = predict_kernels(binary, rows, cols, tmp, "neusight", "kernel")
    there = predict_kernels(binary, [dict(r, Device=reference) for r in rows], cols, tmp, "neusight", "kernel")
    groups = {}
    for r, a, b in zip(rows, here, there):
        n = int(r["N"])
        key = (r["OPName"], 0 if n < 128 else 1 if n < 512 else 2)
        g = groups.setdefault(key, [])
        g.append((ref[(r["OPName"], r["B"], r["M"], r["N"], r["K"])] / float(r["Latency_graph"]),
                  float(b["pred_latency_ms"]) / float(a["pred_latency_ms"])))
    print(f"FP32 GEMMs of the same shapes on the {reference} (dataset test rows over 0.05 ms) and here: speedup")
    print(f"  {'op, reduction length':<28}{'n':>5}{'measured':>10}{'predicted':>11}")
    for key in sorted(groups):
        v = groups[key]
        band = ("under 128", "128-511", "512 and more")[key[1]]
        print(f"  {key[0] + ', ' + band:<28}{len(v):>5}{statistics.median(x[0] for x in v):>10.2f}"
              f"{statistics.median(x[1] for x in v):>11.2f}")
    print()


def decode(binary, d, tmp):
    path = os.path.join(d, "decode.csv")
    if not os.path.exists(path):
        return
    rows = read(path)
    cols = list(rows[0].keys())
    preds = {t: predict_all(binary, rows, cols, tmp, t) for t in ("kernel", "eager")}
    for timing, col, what in (("kernel", "Latency_cold", "graph replay, each call streaming its weight from DRAM"),
                              ("kernel", "Latency_graph", "graph replay on one weight (L2-warm where it fits)"),
                              ("eager", "Latency", "eager calls")):
        groups = grouped(preds[timing], col,
                         lambda r: f"{r['dtype']}, {'1-16' if int(r['M']) <= 16 else '32-128'} tokens")
        kernel_table(f"Decode GEMMs through LLM weights, {what} (--timing {timing})", dict(sorted(groups.items())))


TILE = re.compile(r"tilesize(\d+)x(\d+)")
SGEMM = re.compile(r"sgemm_(\d+)x(\d+)")


def tiles(binary, rows, cols, tmp):
    """Derived tile vs the library's: cuBLAS is column-major, so its sgemm_AxB tag is (output
    columns) x (output rows) of the row-major product, while the xmma kernels' tilesizeAxB is
    (output rows) x (output columns), as their launch grids count tiles (grid x = rows / A,
    grid y = columns / B); our tile is ROWSxCOLS."""
    out = predict_kernels(binary, rows, cols, tmp, "neusight", "eager")
    n = same = same_area = base = 0
    lib_counts = {}
    for r in out:
        if r["OPName"] not in ("bmm", "linear") or not r.get("tile"):
            continue
        name = r.get("Kernel Name", "")
        m = TILE.search(name)
        if m:
            lib = (int(m.group(1)), int(m.group(2)))  # rows x cols
        else:
            m = SGEMM.search(name)
            if not m:
                continue
            lib = (int(m.group(2)), int(m.group(1)))  # rows x cols
        ours = tuple(int(v) for v in r["tile"].split("x"))
        n += 1
        same += ours == lib
        same_area += ours[0] * ours[1] == lib[0] * lib[1]
        base += lib == (128, 128)
        lib_counts[lib] = lib_counts.get(lib, 0) + 1
    if n:
        common = sorted(lib_counts.items(), key=lambda kv: -kv[1])[:5]
        print(f"FP32 GEMM tiles vs the library's tilesize tag ({n} kernels): same tile {100 * same / n:.1f}%, "
              f"same area {100 * same_area / n:.1f}%, constant 128x128 {100 * base / n:.1f}%; library's most common "
              + ", ".join(f"{a}x{b} {c}" for (a, b), c in common))
        print()


def tile_effect(binary, path):
    """What the tile is worth to the latency: bench/tile_agreement --rows prices the FP32 GEMMs
    on the derived tile, the library's own and a constant 128x128 (skipped without that binary
    beside the CLI)."""
    tool = os.path.join(os.path.dirname(os.path.abspath(binary)), "tile_agreement")
    if not os.path.exists(tool):
        print(f"tile effect: skipped ({tool} not built)")
        print()
        return
    r = subprocess.run([tool, "--rows", path, "--column", "Latency_graph", "--timing", "kernel"],
                       capture_output=True, text=True)
    print(r.stdout.rstrip() if r.returncode == 0 else f"tile effect: {r.stderr.strip()}")
    print()


def e2e(binary, d, configs, gpu, tmp):
    path = os.path.join(d, "e2e.csv")
    if not os.path.exists(path) or not os.path.isdir(configs):
        print(f"end to end: skipped ({path if not os.path.exists(path) else configs} not found)")
        print()
        return
    runs = [r for r in read(path) if r.get("latency_ms")]
    print(f"End to end, FP32 PyTorch eager, --gpu {gpu} (training: forward + backward + SGD step)")
    print(f"  {'run':<28}{'measured':>10}" + "".join(f"{p:>22}" for p in PREDICTORS) + "   in80")
    errs = {p: {"inf": [], "train": []} for p in PREDICTORS}
    busy, memory = [], []
    for r in runs:
        with open(os.path.join(configs, r["model"] + ".json")) as f:
            cfg = json.load(f)
        if cfg.get("model_type") == "bert":
            cfg["architectures"] = ["BertForSequenceClassification" if r["mode"] == "inf" else "BertForPreTraining"]
        cpath = os.path.join(tmp, r["model"] + "-" + r["mode"] + ".json")
        with open(cpath, "w") as f:
            json.dump(cfg, f)
        meas = float(r["latency_ms"])
        cells, inside = "", ""
        for p in PREDICTORS:
            js = os.path.join(tmp, "run.json")
            cmd = [binary, "--config", cpath, "--batch", r["batch"], "--seq", r["seq"], "--gpu", gpu,
                   "--mode", "inference" if r["mode"] == "inf" else "training", "--predictor", p,
                   "--json", js, "--quiet"]
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            with open(js) as f:
                rep = json.load(f)
            rep = rep[0] if isinstance(rep, list) else rep
            pred = rep["e2e_latency_ms"]
            e = (pred - meas) / meas
            errs[p][r["mode"]].append(e)
            cells += f"{pred:10.1f} {100 * e:+9.1f}%  "
            if p == "neusight" and r.get("peak_gib") and rep.get("memory"):
                memory.append((r, float(r["peak_gib"]), rep["memory"]["total_gib"], rep["memory"]))
            if p == "neusight":
                lo, hi = rep.get("latency_low_ms"), rep.get("latency_high_ms")
                inside = "yes" if lo is not None and lo <= meas <= hi else "no"
                if r.get("kernel_ms"):
                    subprocess.run(cmd[:-3] + ["--timing", "kernel", "--json", js, "--quiet"], check=True,
                                   capture_output=True, text=True)
                    with open(js) as f:
                        kr = json.load(f)
                    kr = kr[0] if isinstance(kr, list) else kr
                    busy.append((r, float(r["kernel_ms"]), kr["e2e_latency_ms"], per_class(kr)))
        print(f"  {r['model'] + ' ' + r['mode'] + ' s' + r['seq'] + ' b' + r['batch']:<28}{meas:10.1f}{cells} {inside:>4}")
    for mode in ("inf", "train", "all"):
        line = f"  {mode:<28}{'':>10}"
        for p in PREDICTORS:
            v = errs[p]["inf"] + errs[p]["train"] if mode == "all" else errs[p][mode]
            if v:
                line += f"   mean {100 * statistics.mean(abs(x) for x in v):5.1f} worst {100 * max(abs(x) for x in v):5.1f}"
        print(line)
    print()
    if busy:
        print("GPU busy time (union of kernel intervals in one profiled iteration) against --timing kernel")
        error_lines([(r, meas, pred, "") for r, meas, pred, _ in busy], 1)
        class_table(d, busy)
    if memory:
        print("Memory: PyTorch's peak allocated GiB in one iteration against the report's `memory` (training with")
        print("the default --optimizer sgd, as measured: no optimizer state); weights measured / predicted")
        error_lines([(r, meas, pred, f"   weights {float(r.get('weights_gib') or 0):7.2f} / {m['weights_gib']:7.2f}")
                     for r, meas, pred, m in memory], 2)


def error_lines(items, digits):
    """One line per (e2e row, measured, predicted, suffix) with the signed error, then the mean and worst."""
    e = []
    for r, meas, pred, suffix in items:
        e.append((pred - meas) / meas)
        print(f"  {r['model'] + ' ' + r['mode'] + ' s' + r['seq'] + ' b' + r['batch']:<28}{meas:10.{digits}f}"
              f"{pred:10.{digits}f} {100 * e[-1]:+9.1f}%{suffix}")
    print(f"  mean |error| {100 * statistics.mean(abs(x) for x in e):.1f}%, worst {100 * max(abs(x) for x in e):.1f}%, "
          f"signed mean {100 * statistics.mean(e):+.1f}%")
    print()


def kernel_class_of(name):
    """The class of a profiled kernel, from its library name (PyTorch and cuBLAS naming).
    Elementwise, copies, selects and reductions form one class: the two sides file masks,
    casts and copies differently (a `where` is a memory kernel in our lowering, an
    elementwise one in PyTorch's naming), and the lowering prices a layer norm's backward as
    an elementwise pass and a reduction, which PyTorch names after the norm."""
    n = name.lower()
    if any(t in n for t in ("gemm", "xmma", "cutlass", "cublas", "nvjet")):
        return "gemm"
    if "softmax" in n:
        return "softmax"
    if "layer_norm" in n and "grad" not in n:  # the forward; its backward kernels stream
        return "layernorm"
    return "streaming"


def per_class(rep):
    out = {}
    for node in rep.get("nodes", []):
        for k in node.get("kernels", []):
            c = k["class"] if k["class"] in ("gemm", "softmax", "layernorm") else "streaming"
            out[c] = out.get(c, 0.0) + k["latency_ms"]
    return out


def class_table(d, busy):
    path = os.path.join(d, "e2e_kernels.csv")
    if not os.path.exists(path):
        return
    meas = {}
    for x in read(path):
        c = meas.setdefault(x["run"], {})
        k = kernel_class_of(x["kernel"])
        c[k] = c.get(k, 0.0) + float(x["ms"])
    classes = ("gemm", "softmax", "layernorm", "streaming")
    print("Per kernel class, GPU time in the profiled iteration: measured ms / predicted ms (--timing kernel);")
    print("streaming = elementwise, copies, masks and reductions (a layer norm's backward among them)")
    print(f"  {'run':<28}" + "".join(f"{c:>20}" for c in classes))
    ratios = {(m, c): [] for m in ("inf", "train") for c in classes}
    for r, _, _, pred in busy:
        key = f"{r['model']}-{r['mode']}-{r['seq']}-{r['batch']}"
        if key not in meas:
            continue
        cells = ""
        for c in classes:
            a, b = meas[key].get(c, 0.0), pred.get(c, 0.0)
            cells += f"{a:9.1f} /{b:8.1f} " if a or b else f"{'-':>20}"
            if a > 0 and b > 0:
                ratios[(r["mode"], c)].append(b / a)
        print(f"  {r['model'] + ' ' + r['mode'] + ' s' + r['seq'] + ' b' + r['batch']:<28}{cells}")
    for m in ("inf", "train"):
        line = f"  {'predicted / measured, ' + m:<28}"
        for c in classes:
            v = ratios[(m, c)]
            line += f"{math.exp(statistics.mean(math.log(x) for x in v)):>20.2f}" if v else f"{'-':>20}"
        print(line)
    print()


def llm(binary, d, configs, gpu, tmp):
    path = os.path.join(d, "llm.csv")
    if not os.path.exists(path) or not os.path.isdir(configs):
        return
    rows = [r for r in read(path) if r.get("prefill_gpu_ms")]
    rows = [r for r in rows if os.path.exists(os.path.join(configs, r["model"] + ".json"))]
    if not rows:
        return
    print(f"LLM generation, BF16, --gpu {gpu}, --timing kernel: the GPU's busy time of a prefill and of one decode step")
    print("at the cache length measured, against --generate's TTFT and last decode step. eager: --fusion eager")
    print("--attention unfused (attention as MatMul + Softmax kernels); sdpa: --fusion eager, whose automatic attention")
    print("is FlashAttention beside eager elementwise kernels, as PyTorch's scaled_dot_product_attention runs;")
    print("full: --fusion full")
    setups = (("eager", ["--fusion", "eager", "--attention", "unfused"]), ("sdpa", ["--fusion", "eager"]),
              ("full", ["--fusion", "full"]))
    print(f"  {'run':<24}{'prefill':>9}" + "".join(f"{s:>17}" for s, _ in setups) + f"{'decode':>9}"
          + "".join(f"{s:>17}" for s, _ in setups))
    errs = {f"{p} {s}": [] for p in ("prefill", "decode") for s, _ in setups}
    inside = {k: 0 for k in errs}  # measured within the prediction's 80% interval
    for r in rows:
        cells_p, cells_d = "", ""
        for fusion, flags in setups:
            js = os.path.join(tmp, "gen.json")
            cmd = [binary, "--config", os.path.join(configs, r["model"] + ".json"), "--generate",
                   f"{r['prompt']}:6", "--batch", r["batch"], "--gpu", gpu, "--timing", "kernel", "--dtype", "bf16",
                   *flags, "--json", js, "--quiet"]
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            with open(js) as f:
                rep = json.load(f)
            g = (rep[0] if isinstance(rep, list) else rep)["generation"]
            pre, dec = g["ttft_ms"], g["decode_samples"][-1]["latency_ms"]
            mp, md = float(r["prefill_gpu_ms"]), float(r["decode_gpu_ms"])
            last = g["decode_samples"][-1]
            inside["prefill " + fusion] += g["ttft_low_ms"] <= mp <= g["ttft_high_ms"]
            inside["decode " + fusion] += last["latency_low_ms"] <= md <= last["latency_high_ms"]
            errs["prefill " + fusion].append((pre - mp) / mp)
            errs["decode " + fusion].append((dec - md) / md)
            cells_p += f"{pre:9.1f} {100 * (pre - mp) / mp:+6.1f}%"
            cells_d += f"{dec:9.2f} {100 * (dec - md) / md:+6.1f}%"
        print(f"  {r['model'] + ' b' + r['batch'] + ' p' + r['prompt']:<24}{float(r['prefill_gpu_ms']):9.1f}{cells_p}"
              f"{float(r['decode_gpu_ms']):9.2f}{cells_d}")
    for k, v in errs.items():
        print(f"  {k:<16} mean |error| {100 * statistics.mean(abs(x) for x in v):5.1f}%, signed "
              f"{100 * statistics.mean(v):+6.1f}%, worst {100 * max(abs(x) for x in v):5.1f}%, "
              f"inside the 80% interval {inside[k]}/{len(v)}")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--bin", default="build/bin/neusight-onnx")
    ap.add_argument("--configs", default=None,
                    help="Hugging Face configs (default .devrun/configs, else ../shared/neusight-data/model_configs)")
    ap.add_argument("--gpu", default="h200")
    args = ap.parse_args()
    if args.configs is None:
        shared = os.path.join(SHARED, "neusight-data", "model_configs")
        args.configs = ".devrun/configs" if os.path.isdir(".devrun/configs") else shared
    if not os.path.exists(args.bin):
        sys.exit(f"compare.py: {args.bin} not found (build the project first)")
    with open(os.path.join(args.dir, "facts.json")) as f:
        facts = json.load(f)
    print(f"{facts['device']}: {facts.get('sm_count')} SMs, L2 {facts.get('l2_bytes', 0) / 2**20:.0f} MiB; "
          f"copy {facts['copy_gbps']:.0f} GB/s; 8192^3 GEMM GFLOP/s "
          + ", ".join(f"{k} {v:.0f}" for k, v in facts["gemm_gflops_8192"].items())
          + f"; nvidia-smi after: {facts.get('smi_after')}")
    print()
    host_path = os.path.join(args.dir, "host.csv")
    if os.path.exists(host_path):
        print("host dispatch, us per eager call of a tiny op (--host-dispatch-us): "
              + ", ".join(f"{r['op']} {float(r['per_call_us']):.1f}" for r in read(host_path)))
        print()
    with tempfile.TemporaryDirectory() as tmp:
        kernels(args.bin, args.dir, tmp)
        e2e(args.bin, args.dir, args.configs, args.gpu, tmp)
        llm(args.bin, args.dir, ".devrun/configs" if os.path.isdir(".devrun/configs") else args.configs, args.gpu, tmp)
    repeat(args.dir)


def repeat(d):
    """Run-to-run spread where DIR/repeat/ holds an earlier measurement of the same items."""
    r = os.path.join(d, "repeat")
    if not os.path.isdir(r):
        return
    for name, key, col in (("fp32.csv", ("OPName", "B", "M", "N", "K", "H"), "Latency"),
                           ("e2e.csv", ("model", "mode", "seq", "batch"), "latency_ms")):
        a, b = os.path.join(d, name), os.path.join(r, name)
        if not (os.path.exists(a) and os.path.exists(b)):
            continue
        first = {tuple(x.get(k, "") for k in key): x[col] for x in read(b) if x.get(col)}
        q = [float(x[col]) / float(first[tuple(x.get(k, "") for k in key)]) for x in read(a)
             if x.get(col) and tuple(x.get(k, "") for k in key) in first]
        if q:
            dev = sorted(abs(v - 1) for v in q)
            print(f"run to run, {name} ({len(q)} items, this / repeat/): median {statistics.median(q):.3f}, "
                  f"mean |difference| {100 * statistics.mean(dev):.1f}%, 90th percentile {100 * dev[int(0.9 * len(dev))]:.1f}%, "
                  f"largest {100 * dev[-1]:.1f}%")


if __name__ == "__main__":
    main()
