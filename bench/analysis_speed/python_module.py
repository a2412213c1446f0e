#!/usr/bin/python3
"""python_module.py - the Python module's import time and its analysis of the bundled example
against the CLI's.

    /usr/bin/python3 bench/analysis_speed/python_module.py [--build build] [--repeat 7]

  * import:  `import neusight_onnx` in a fresh interpreter (wall ms, perf_counter around it)
  * cli:     neusight-onnx build/examples/gpt2-small.onnx --gpu b200 --batch 1 --seq 1024
             --json out.json --quiet, the whole process (CPU ms of the child, wall ms)
  * module:  neusight_onnx.analyze(same model, "b200", batch=1, seq=1024) in a fresh
             interpreter after the import: the first call (it loads the GPU database and the
             weights, as every CLI run does) and the median of five more calls in the same
             process (CPU ms of the process during the call, wall ms)
Medians of --repeat fresh processes; prints the module/CLI ratios (target <= 1.2 for the
first call). Nothing here is a pass/fail test.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CHILD = r"""
import json, statistics, sys, time
t0 = time.perf_counter()
import neusight_onnx as n
import_ms = (time.perf_counter() - t0) * 1e3
def call():
    w, c = time.perf_counter(), time.process_time()
    r = n.analyze(sys.argv[1], "b200", batch=1, seq=1024)
    return (time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3, r["e2e_latency_ms"]
first = call()
more = [call() for _ in range(5)]
print(json.dumps({"import_ms": import_ms, "first_wall": first[0], "first_cpu": first[1], "e2e": first[2],
                  "warm_wall": statistics.median(m[0] for m in more),
                  "warm_cpu": statistics.median(m[1] for m in more)}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    cli = os.path.join(a.build, "bin", "neusight-onnx")
    model = os.path.join(a.build, "examples", "gpt2-small.onnx")
    module_dir = os.path.join(a.build, "python")
    if not os.access(cli, os.X_OK) or not os.path.isdir(module_dir):
        raise SystemExit(f"python_module.py: build the CLI and the module first (cmake --build {a.build})")
    env = dict(os.environ, PYTHONPATH=module_dir)

    cli_runs, mod_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            p = subprocess.Popen([cli, model, "--gpu", "b200", "--batch", "1", "--seq", "1024", "--json", out,
                                  "--quiet"])
            _, status, ru = os.wait4(p.pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit("the CLI failed")
            cli_runs.append(((time.perf_counter() - t0) * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3))
            p = subprocess.run([sys.executable, "-c", CHILD, model], capture_output=True, text=True, env=env)
            if p.returncode != 0:
                raise SystemExit(p.stderr)
            mod_runs.append(json.loads(p.stdout))
        with open(out) as f:
            cli_e2e = json.load(f)["e2e_latency_ms"]

    med = lambda xs: statistics.median(xs)
    cli_wall, cli_cpu = med(r[0] for r in cli_runs), med(r[1] for r in cli_runs)
    m = {k: med(r[k] for r in mod_runs) for k in ("import_ms", "first_wall", "first_cpu", "warm_wall", "warm_cpu")}
    print(f"python_module: GPT-2 small (bundled example), --gpu b200 --batch 1 --seq 1024; median of {a.repeat}")
    print(f"  import neusight_onnx      {m['import_ms']:7.1f} ms wall (target < 50)")
    print(f"  CLI, whole process        {cli_cpu:7.1f} ms CPU [{cli_wall:.1f} wall]")
    print(f"  analyze(), first call     {m['first_cpu']:7.1f} ms CPU [{m['first_wall']:.1f} wall]  "
          f"x{m['first_cpu'] / cli_cpu:.2f} CPU, x{m['first_wall'] / cli_wall:.2f} wall of the CLI (target <= 1.2)")
    print(f"  analyze(), later calls    {m['warm_cpu']:7.1f} ms CPU [{m['warm_wall']:.1f} wall]")
    same = all(r["e2e"] == cli_e2e for r in mod_runs)
    print(f"  e2e_latency_ms            {cli_e2e} (CLI) {'==' if same else '!='} module")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
