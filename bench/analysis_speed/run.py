#!/usr/bin/python3
"""run.py - how fast is a whole analysis on huge graphs, against ONNX's own shape inference.

    /usr/bin/python3 bench/analysis_speed/run.py [--build build] [--layers 12,24,48,96] [--repeat 3]

For GPT-style graphs at GPT-3 175B width (hidden 12288, 96 heads, sequence 2048) with 12, 24,
48 and 96 layers (96 = GPT-3 175B), exported by the tool itself (`neusight-onnx export
--config`), it measures
  * cli:      the whole analysis as a user runs it (process start, load, shapes, lowering,
              tiling, prediction, JSON report):
              neusight-onnx X.onnx --gpu b200 --batch 1 --seq 2048 --json out.json --quiet
  * parse:    protobuf parse of the same file alone (in-process, analysis_speed_stages)
  * stages:   load / prepare (bind, shapes, lowering) / predict / json, in-process
  * weights:  reading the shipped NeuSight weights file (predictor/weights), in-process
  * tiles:    reading the tile table (tiling/data/tiles.json), in-process
  * onnx:     Debian python3-onnx on the same file: onnx.load(path, load_external_data=False)
              and onnx.shape_inference.infer_shapes (the latter is "bare shape inference")
and prints ms, ms per 1,000 nodes, peak RSS (getrusage of each child process) and ratios.
Times are CPU time (user + system; all of it is single-threaded, so on an idle machine it
equals wall time, and unlike wall time it stays put on a busy one), median of --repeat
runs; wall times are printed beside them. Nothing here is a pass/fail test.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

ONNX_SCRIPT = r"""
import json, resource, sys, time
import onnx
t0, c0 = time.perf_counter(), time.process_time()
m = onnx.load(sys.argv[1], load_external_data=False)
t1, c1 = time.perf_counter(), time.process_time()
inferred = onnx.shape_inference.infer_shapes(m)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"load_ms": (c1 - c0) * 1e3, "infer_ms": (c2 - c1) * 1e3, "infer_wall_ms": (t2 - t1) * 1e3,
                  "value_info": len(inferred.graph.value_info),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def gpt3_config(layers):
    return {"model_type": "gpt2", "n_layer": layers, "n_embd": 12288, "n_head": 96, "n_positions": 2048,
            "n_ctx": 2048, "vocab_size": 50257, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}


def measured(cmd):
    """Runs cmd; returns (wall ms, peak RSS MB, stdout, CPU ms) of this child alone (os.wait4)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = (time.perf_counter() - t0) * 1e3
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{err.decode()}")
    return wall, ru.ru_maxrss / 1024.0, out.decode(), (ru.ru_utime + ru.ru_stime) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--layers", default="12,24,48,96")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gpu", default="b200")
    ap.add_argument("--predictor", default=None, help="neusight|roofline (default: the tool's default)")
    a = ap.parse_args()
    cli = os.path.join(a.build, "bin", "neusight-onnx")
    stages = os.path.join(a.build, "bin", "analysis_speed_stages")
    for b in (cli, stages):
        if not os.access(b, os.X_OK):
            raise SystemExit(f"run.py: {b} not built (cmake --build {a.build})")
    env_data = os.path.join(a.build, "data")
    if os.path.isdir(env_data):
        os.environ.setdefault("NEUSIGHT_DATA_DIR", env_data)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for layers in [int(x) for x in a.layers.split(",")]:
            cfg = os.path.join(tmp, f"gpt3-{layers}.json")
            with open(cfg, "w") as f:
                json.dump(gpt3_config(layers), f)
            model = os.path.join(tmp, f"gpt3-{layers}.onnx")
            subprocess.run([cli, "export", "--config", cfg, "-o", model], check=True, capture_output=True)
            size_mb = os.path.getsize(model) / 2**20
            out_json = os.path.join(tmp, "out.json")
            pred = ["--predictor", a.predictor] if a.predictor else []
            cli_cmd = [cli, model, "--gpu", a.gpu, "--batch", "1", "--seq", "2048", "--json", out_json, "--quiet", *pred]
            cli_runs = [measured(cli_cmd) for _ in range(a.repeat)]
            st = json.loads(measured([stages, model, "--gpu", a.gpu, "--batch", "1", "--seq", "2048",
                                      "--repeat", str(a.repeat), *pred])[2])
            onnx_runs = [json.loads(measured(["/usr/bin/python3", "-c", ONNX_SCRIPT, model])[2])
                         for _ in range(a.repeat)]
            with open(out_json) as f:
                report = json.load(f)
            rows.append({
                "layers": layers, "nodes": st["nodes"], "kernels": st["kernels"], "file_mb": size_mb,
                "cli_ms": statistics.median(r[3] for r in cli_runs),
                "cli_wall_ms": statistics.median(r[0] for r in cli_runs),
                "cli_rss_mb": max(r[1] for r in cli_runs),
                "parse_ms": st["parse_ms"], "load_ms": st["load_ms"], "prepare_ms": st["prepare_ms"],
                "predict_ms": st["predict_ms"], "json_ms": st["json_ms"], "predictor": st["predictor"],
                "weights_ms": st["weights_ms"], "weights_mb": st["weights_bytes"] / 1e6,
                "tiles_ms": st["tiles_ms"], "tiles_mb": st["tiles_bytes"] / 1e6,
                "onnx_load_ms": statistics.median(r["load_ms"] for r in onnx_runs),
                "onnx_infer_ms": statistics.median(r["infer_ms"] for r in onnx_runs),
                "onnx_infer_wall_ms": statistics.median(r["infer_wall_ms"] for r in onnx_runs),
                "onnx_rss_mb": max(r["rss_mb"] for r in onnx_runs),
                "e2e_latency_ms": report["e2e_latency_ms"] if isinstance(report, dict) else report[0]["e2e_latency_ms"],
            })
            r = rows[-1]
            print(f"  measured {layers} layers: {r['nodes']} nodes, cli {r['cli_ms']:.1f} ms CPU", file=sys.stderr)

    print(f"analysis_speed: GPT-3-width graphs (hidden 12288, 96 heads, seq 2048), --gpu {a.gpu} --batch 1 "
          f"--seq 2048; CPU ms (wall ms in brackets), median of {a.repeat}")
    print(f"{'layers':>6} {'nodes':>6} {'file MB':>7} | {'cli ms':>7} {'[wall]':>8} {'ms/1k n':>7} {'RSS MB':>6} | "
          f"{'parse':>6} {'load':>6} {'prepare':>7} {'predict':>7} {'json':>6} | "
          f"{'onnx load':>9} {'onnx infer':>10} {'[wall]':>8} {'RSS MB':>6} | {'cli/infer':>9} {'cli/parse':>9}")
    for r in rows:
        print(f"{r['layers']:>6} {r['nodes']:>6} {r['file_mb']:>7.2f} | {r['cli_ms']:>7.1f} "
              f"{'[' + format(r['cli_wall_ms'], '.1f') + ']':>8} "
              f"{1000 * r['cli_ms'] / r['nodes']:>7.2f} {r['cli_rss_mb']:>6.1f} | "
              f"{r['parse_ms']:>6.1f} {r['load_ms']:>6.1f} {r['prepare_ms']:>7.1f} {r['predict_ms']:>7.1f} "
              f"{r['json_ms']:>6.1f} | {r['onnx_load_ms']:>9.1f} {r['onnx_infer_ms']:>10.1f} "
              f"{'[' + format(r['onnx_infer_wall_ms'], '.1f') + ']':>8} {r['onnx_rss_mb']:>6.1f} | "
              f"{r['cli_ms'] / r['onnx_infer_ms']:>9.2f} {r['cli_ms'] / r['parse_ms']:>9.1f}")
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        per_first = first["cli_ms"] / first["nodes"]
        per_last = last["cli_ms"] / last["nodes"]
        in_proc = lambda r: r["load_ms"] + r["prepare_ms"] + r["predict_ms"] + r["json_ms"]
        print(f"growth {first['layers']}->{last['layers']} layers: nodes x{last['nodes'] / first['nodes']:.2f}, "
              f"cli time x{last['cli_ms'] / first['cli_ms']:.2f}, in-process time "
              f"x{in_proc(last) / in_proc(first):.2f}; ms per 1k nodes {1000 * per_first:.2f} -> "
              f"{1000 * per_last:.2f} (x{per_last / per_first:.2f}; 1.0 = linear)")
    big = rows[-1]
    print(f"largest ({big['layers']} layers, {big['nodes']} nodes, predictor {big['predictor']}): whole analysis "
          f"{big['cli_ms']:.1f} ms CPU [{big['cli_wall_ms']:.1f} wall] vs ONNX bare shape inference "
          f"{big['onnx_infer_ms']:.1f} ms CPU [{big['onnx_infer_wall_ms']:.1f} wall] "
          f"(x{big['cli_ms'] / big['onnx_infer_ms']:.2f} CPU, x{big['cli_wall_ms'] / big['onnx_infer_wall_ms']:.2f} wall; "
          f"target <= 1), peak RSS {big['cli_rss_mb']:.1f} MB "
          f"(target < 300), predicted e2e {big['e2e_latency_ms']:.3f} ms")
    print(f"weights load: {statistics.median(r['weights_ms'] for r in rows):.2f} ms CPU "
          f"(predictor/weights/weights.json, {big['weights_mb']:.2f} MB)")
    print(f"tile table load: {statistics.median(r['tiles_ms'] for r in rows):.2f} ms CPU "
          f"(tiling/data/tiles.json, {big['tiles_mb']:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
