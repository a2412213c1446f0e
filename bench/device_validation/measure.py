#!/usr/bin/env python3
"""Measure kernels and whole models on the GPU this runs on, in neusight-data's conventions.

Runs on a machine with a CUDA GPU, PyTorch and Hugging Face transformers; reads what
prepare.py wrote (DIR/shapes.json, DIR/runs.json, DIR/configs/) and writes into OUT:

  facts.json      the device as PyTorch and nvidia-smi report it, a device-to-device copy's
                  bandwidth, large GEMMs' rates per precision (the ceilings of METHOD.md) and
                  the SM clock and board power nvidia-smi samples while each GEMM runs
  fp32.csv        FP32 kernels (bmm, linear, elementwise, softmax, layernorm) in the dataset's
                  columns; Latency = the PyTorch-eager time per call (back-to-back calls between
                  CUDA events, median of three trials), as neusight-data timed them;
                  Latency_graph = the same calls replayed from a CUDA graph (the GPU's time,
                  without the host's dispatch); GEMM rows also carry the library kernel's name,
                  grid and block read by the profiler
  lowp.csv        GEMMs in tf32, bf16, fp16 and fp8 (dtype column); Latency = eager time,
                  Latency_graph = the same calls replayed from a CUDA graph (the GPU's time);
                  the bf16 and fp8 rows also carry the kernel's name and Latency_kernel, the
                  profiler's duration of the call's kernels
  align.csv       16-bit GEMMs whose rows are, or are not, multiples of 16 bytes: attention
                  products of 192-577 tokens (ViT's 197 and 577 beside 192, 200, 256, 576) and
                  LM heads of 50257 / 50304 and 1000 / 1008 words; Latency = eager time,
                  Latency_graph = graph replay, Latency_kernel = the profiler's duration of the
                  call's kernels (small aligned GEMMs too: the fixed time of a GEMM kernel)
  decode.csv      few-token GEMMs (1-128 tokens) through LLM projection weights in bf16, fp16
                  and fp8: eager, graph replay on one weight, and graph replay rotating through
                  weight copies that exceed the L2 (Latency_cold: each call streams its weight)
  e2e.csv         whole models (FP32, eager attention, as the NeuSight campaign): inference =
                  forward under no_grad; training = forward with the LM loss, backward, and a
                  plain SGD step, each phase timed; kernel_ms = the GPU's busy time (union of
                  kernel and copy intervals) in one more iteration under the profiler; peak_gib =
                  PyTorch's peak allocated memory in one more iteration, weights_gib its parameters'
                  (compare.py sets them against the report's `memory`)
  llm.csv         BF16 Llama prefill and decode steps (SDPA attention, KV cache): host-clock
                  time, the GPU's busy time, its GEMMs' and fused attention's shares and the
                  attention kernel's name (which SDPA backend ran)
  host.csv        the host's dispatch: eager calls of tiny ops (the GPU idle between them),
                  per-call time of bare PyTorch ops and of a Hugging Face module (--host-dispatch-us)
  e2e_kernels.csv the profiled iteration's kernels by name (calls, GPU ms), per run
  log.txt         progress and any failure (one line per failed item; the rest goes on)

Nothing here is fitted or tuned: compare.py sets the predictions beside these figures.

    python3 measure.py --in .devrun --out OUT [--deadline SECONDS] [--cpu]

--cpu runs every section on the CPU with tiny shapes (host clock), to check the script.
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import time
import traceback

import torch

T0 = time.time()
ARGS = None
LOG = None


def log(msg):
    line = f"[{time.time() - T0:6.1f}s] {msg}"
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def out_of_time(margin=0.0):
    return time.time() - T0 > ARGS.deadline - margin


def dev():
    return torch.device("cpu") if ARGS.cpu else torch.device("cuda")


def sync():
    if not ARGS.cpu:
        torch.cuda.synchronize()


class Timer:
    """Milliseconds of a region: CUDA events on the GPU, the host clock on the CPU."""

    def __init__(self):
        if not ARGS.cpu:
            self.a = torch.cuda.Event(enable_timing=True)
            self.b = torch.cuda.Event(enable_timing=True)

    def start(self):
        if ARGS.cpu:
            self.t = time.perf_counter()
        else:
            self.a.record()

    def stop(self):
        if ARGS.cpu:
            return (time.perf_counter() - self.t) * 1e3
        self.b.record()
        self.b.synchronize()
        return self.a.elapsed_time(self.b)


def time_eager(fn, target_ms=15.0, max_reps=200, trials=3):
    """Per-call time of back-to-back calls (the dataset's eager timing)."""
    fn()
    fn()
    sync()
    t = Timer()
    t.start()
    fn()
    one = max(t.stop(), 1e-3)
    reps = int(min(max_reps, max(2, math.ceil(target_ms / one))))
    res = []
    for _ in range(trials):
        t.start()
        for _ in range(reps):
            fn()
        res.append(t.stop() / reps)
    return statistics.median(res), reps


def time_graph(fn, reps, trials=3):
    """Per-call time of `reps` calls replayed from one CUDA graph (no host launch cost)."""
    if ARGS.cpu:
        return time_eager(fn, max_reps=reps)[0]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    sync()
    t = Timer()
    res = []
    for _ in range(trials):
        t.start()
        g.replay()
        res.append(t.stop() / reps)
    del g
    return statistics.median(res)


def device_name():
    return "CPU" if ARGS.cpu else torch.cuda.get_device_name(0)


def smi(query):
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001 - a fact we could not read is recorded as such
        return f"unavailable: {e}"


SMI_FIELDS = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,pstate"


def under_load(fn, seconds):
    """Median SM clock (MHz) and board power (W) that nvidia-smi samples every 100 ms while fn
    runs back to back for `seconds`; None without nvidia-smi."""
    if ARGS.cpu:
        return None
    try:
        mon = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(5):
            fn()
        sync()
    mon.terminate()
    text, _ = mon.communicate(timeout=10)
    samples = []
    for line in text.splitlines():
        parts = [v.strip() for v in line.split(",")]
        try:
            samples.append((float(parts[0]), float(parts[1])))
        except (ValueError, IndexError):
            continue
    if not samples:
        return None
    return [statistics.median(v[0] for v in samples), statistics.median(v[1] for v in samples), len(samples)]


# ----------------------------------------------------------------------------------- facts
def facts(out):
    f = {"device": device_name(), "torch": torch.__version__, "smi_fields": SMI_FIELDS,
         "smi_before": smi(SMI_FIELDS)}
    if not ARGS.cpu:
        p = torch.cuda.get_device_properties(0)
        f.update({"sm_count": p.multi_processor_count, "cc": f"{p.major}.{p.minor}",
                  "total_memory_bytes": p.total_memory,
                  "l2_bytes": getattr(p, "L2_cache_size", None), "cuda": torch.version.cuda})
    n = (1 << 28) if not ARGS.cpu else (1 << 20)  # 1 GiB of FP32
    x = torch.rand(n, device=dev())
    y = torch.empty_like(x)
    ms, _ = time_eager(lambda: y.copy_(x), target_ms=50)
    f["copy_gbps"] = 2 * 4 * n / ms / 1e6
    s = 8192 if not ARGS.cpu else 256
    rates, sustained = {}, {}
    for name, dt, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                           ("bf16", torch.bfloat16, False), ("fp16", torch.float16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            a = torch.randn(s, s, device=dev(), dtype=dt)
            b = torch.randn(s, s, device=dev(), dtype=dt)
            c = torch.empty(s, s, device=dev(), dtype=dt)
            ms, _ = time_eager(lambda: torch.matmul(a, b, out=c), target_ms=100, max_reps=20)
            rates[name] = 2.0 * s ** 3 / ms / 1e9
            sustained[name] = under_load(lambda: torch.matmul(a, b, out=c), seconds=2.0)
        except RuntimeError as e:
            log(f"facts: {name} GEMM: {str(e).splitlines()[0][:120]}")
    torch.backends.cuda.matmul.allow_tf32 = False
    f["gemm_gflops_8192"] = rates
    # The SM clock and board power nvidia-smi samples while each GEMM runs for two seconds
    # (the clock a dense kernel sustains, which the power model predicts).
    f["under_load_median_sm_mhz_power_w"] = sustained
    f["smi_after"] = smi(SMI_FIELDS)
    with open(os.path.join(out, "facts.json"), "w") as fh:
        json.dump(f, fh, indent=1)
    log(f"facts: {f['device']}, copy {f['copy_gbps']:.0f} GB/s, GEMM 8192^3 GFLOP/s "
        + ", ".join(f"{k} {v:.0f}" for k, v in rates.items()) + f"; smi {f['smi_after']}")


# ------------------------------------------------------------------------------ kernel ops
def make_gemm(op, b, m, n, k, dtype):
    """op rows of the dataset: bmm [B,M,N] x [B,N,K]; linear: x [M,N] through a [K,N] weight
    with bias (B = 1). dtype: fp32, tf32, bf16, fp16, fp8."""
    d = dev()
    if dtype == "fp8":
        e4 = torch.float8_e4m3fn
        one = torch.ones((), device=d)
        x = torch.randn(b * m, n, device=d).to(e4)
        w = torch.randn(k, n, device=d).to(e4)
        if op == "bmm":
            raise ValueError("fp8 bmm is not measured")
        return lambda: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dt = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    if op == "bmm":
        x = torch.randn(b, m, n, device=d, dtype=dt)
        w = torch.randn(b, n, k, device=d, dtype=dt)
        c = torch.empty(b, m, k, device=d, dtype=dt)
        return lambda: torch.bmm(x, w, out=c)
    x = torch.randn(b * m, n, device=d, dtype=dt)
    w = torch.randn(k, n, device=d, dtype=dt)
    bias = torch.randn(k, device=d, dtype=dt)
    return lambda: torch.nn.functional.linear(x, w, bias)


def make_vec(op, rows, cols):
    d = dev()
    x = torch.randn(rows, cols, device=d)
    if op == "softmax":
        return lambda: torch.softmax(x, dim=-1)
    if op == "ln":
        w = torch.ones(cols, device=d)
        bb = torch.zeros(cols, device=d)
        return lambda: torch.nn.functional.layer_norm(x, (cols,), w, bb)
    y = torch.rand(rows, cols, device=d) + 0.5
    xp = x.abs() + 0.5
    table = {
        "add": lambda: x + y, "addu": lambda: x + 1.5, "mul": lambda: x * y, "mulu": lambda: x * 1.5,
        "div": lambda: x / y, "divu": lambda: x / 1.5, "pow": lambda: xp ** y, "powu": lambda: xp ** 3.0,
        "gelu": lambda: torch.nn.functional.gelu(x), "relu": lambda: torch.relu(x), "tanh": lambda: torch.tanh(x),
    }
    return table[op]


def trace_events(prof, path):
    """The events of a finished profiler, read back from its Chrome trace (written to `path`,
    then removed)."""
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            ev = json.load(fh)
    finally:
        try:
            os.remove(path)
        except OSError:
            pass
    return ev["traceEvents"] if isinstance(ev, dict) else ev


def kernel_names(items, path):
    """Library kernel name, grid and block of each item's last kernel, and the summed duration of
    its kernels (ms), from one profiler trace. items: (key, fn). Returns {key: (name, grid,
    block, ms)}."""
    if ARGS.cpu:
        return {}
    from torch.profiler import ProfilerActivity, profile, record_function
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for key, fn in items:
            with record_function(f"nsv_{key}"):
                fn()
            sync()
    ev = trace_events(prof, path)
    ann = sorted((e["ts"], e["ts"] + e.get("dur", 0), e["name"][4:]) for e in ev
                 if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("nsv_"))
    launch = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launch[e["args"]["correlation"]] = e["ts"]
    res, dur = {}, {}
    for e in sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        ts = launch.get(e.get("args", {}).get("correlation"))
        if ts is None:
            continue
        for a, b, key in ann:
            if a <= ts <= b:
                args = e.get("args", {})
                dur[key] = dur.get(key, 0.0) + e.get("dur", 0) / 1e3
                res[key] = (e["name"], args.get("grid", [0, 0, 0]), args.get("block", [0, 0, 0]), dur[key])
                break
    return res


def free():
    if not ARGS.cpu:
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- FP32 kernels
FP32_COLS = ["OPName", "Latency", "Latency_graph", "Device", "Kernel Name", "Grid x", "Grid y", "Grid z",
             "Block x", "Block y", "Block z", "B", "M", "N", "K", "H"]


def fp32_kernels(shapes, out, limit):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows, gemm_fns = [], []
    items = [("bmm", s) for s in shapes["gemm"]["bmm"]] + [("linear", s) for s in shapes["gemm"]["linear"]]
    for name in ("elem", "softmax", "ln"):
        items += [(s[0], s[1:]) for s in shapes["vec"][name]]
    items = items[:limit] if limit else items
    fails = 0
    for i, (op, s) in enumerate(items):
        if out_of_time(ARGS.reserve):
            log(f"fp32: out of time after {i} of {len(items)}")
            break
        try:
            if op in ("bmm", "linear"):
                b, m, n, k = s if not ARGS.cpu else [min(s[0], 4), min(s[1], 64), min(s[2], 64), min(s[3], 64)]
                fn = make_gemm(op, b, m, n, k, "fp32")
                ms, reps = time_eager(fn)
                rows.append({"OPName": op, "Latency": ms, "Device": device_name(), "B": b, "M": m, "N": n, "K": k,
                             "Latency_graph": time_graph(fn, min(reps, 50))})
                gemm_fns.append((str(len(rows) - 1), fn))
                if len(gemm_fns) >= 16:  # keep the operands of a bounded number alive
                    attach_names(rows, gemm_fns, out)
                    gemm_fns = []
            else:
                r, c = s if not ARGS.cpu else [min(s[0], 256), min(s[1], 256)]
                fn = make_vec(op, r, c)
                ms, reps = time_eager(fn)
                rows.append({"OPName": op, "Latency": ms, "Device": device_name(), "B": r, "H": c,
                             "Latency_graph": time_graph(fn, min(reps, 50))})
        except Exception as e:  # noqa: BLE001 - one failed shape is logged, the rest go on
            fails += 1
            log(f"fp32 {op} {s}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            free()
    if gemm_fns:
        attach_names(rows, gemm_fns, out)
    write_csv(os.path.join(out, "fp32.csv"), FP32_COLS, rows)
    log(f"fp32: {len(rows)} kernels measured, {fails} failed")


def attach_names(rows, fns, out):
    try:
        names = kernel_names(fns, os.path.join(out, "trace.tmp.json"))
    except Exception as e:  # noqa: BLE001 - names are extra; the timings stand without them
        log(f"profiler: {type(e).__name__}: {e}")
        return
    for key, (name, grid, block, ms) in names.items():
        r = rows[int(key)]
        r["Kernel Name"] = name
        r["Latency_kernel"] = ms
        r["Grid x"], r["Grid y"], r["Grid z"] = (list(grid) + [1, 1, 1])[:3]
        r["Block x"], r["Block y"], r["Block z"] = (list(block) + [1, 1, 1])[:3]


def write_csv(path, cols, rows):
    with open(path + ".part", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    os.replace(path + ".part", path)


# -------------------------------------------------------------------- low-precision GEMMs
LOWP_COLS = ["OPName", "Latency", "Latency_graph", "Latency_kernel", "Device", "dtype", "Kernel Name",
             "Grid x", "Grid y", "Grid z", "B", "M", "N", "K"]


def time_gemms(section, items, out, named=lambda dtype: True):
    """Eager and graph-replay times of GEMMs: items of (op, dtype, (B, M, N, K)); the library
    kernel's name, grid and kernel duration for those whose dtype `named` accepts. One line in
    the log per failure; the rest go on. Returns the rows (LOWP_COLS)."""
    rows, fails, names_batch = [], 0, []
    for i, (op, dtype, (b, m, n, k)) in enumerate(items):
        if out_of_time(ARGS.reserve):
            log(f"{section}: out of time after {i} of {len(items)}")
            break
        try:
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            fn = make_gemm(op, b, m, n, k, dtype)
            ms, reps = time_eager(fn)
            g = time_graph(fn, min(reps, 50))
            rows.append({"OPName": op, "Latency": ms, "Latency_graph": g, "Device": device_name(), "dtype": dtype,
                         "B": b, "M": m, "N": n, "K": k})
            if named(dtype):
                names_batch.append((str(len(rows) - 1), fn))
                if len(names_batch) >= 16:
                    attach_names(rows, names_batch, out)
                    names_batch = []
        except Exception as e:  # noqa: BLE001
            fails += 1
            log(f"{section} {op} {dtype} {(b, m, n, k)}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            free()
    if names_batch:
        attach_names(rows, names_batch, out)
    torch.backends.cuda.matmul.allow_tf32 = False
    log(f"{section}: {len(rows)} GEMMs measured, {fails} failed")
    return rows


def lowp_kernels(shapes, out):
    items = []
    for dtype in ("bf16", "fp16", "tf32", "fp8"):
        items += [("linear", dtype, tuple(s)) for s in shapes["lowp"]["linear"]]
        if dtype in ("bf16", "tf32"):
            items += [("bmm", dtype, tuple(s)) for s in shapes["lowp"]["bmm"]]
    if ARGS.cpu:
        items = [(op, dt, (min(s[0], 4), min(s[1], 64), min(s[2], 64), min(s[3], 64)))
                 for op, dt, s in items if dt != "fp8"][:12]
    rows = time_gemms("lowp", items, out, named=lambda dtype: dtype in ("bf16", "fp8"))
    write_csv(os.path.join(out, "lowp.csv"), LOWP_COLS, rows)


# ------------------------------------------------------------------------ row alignment
# Attention products of T tokens (96 = batch 8 x 12 heads, head_dim 64): Q K^T is bmm [B,T,64]
# x [B,64,T], P V is bmm [B,T,T] x [B,T,64]; in 16-bit a row of T elements is a multiple of
# 16 bytes when T is a multiple of 8. LM heads: 1024 tokens through a 1280-wide weight of 50257
# (GPT-2) or 50304 words, 2048-wide of 1000 or 1008. Small aligned single GEMMs (256-1024 cubed)
# give a GEMM kernel's fixed time as the profiler's kernel duration.
ALIGN_TOKENS = [192, 196, 197, 200, 256, 576, 577]


def align_items():
    items = []
    for dtype in ("bf16", "fp16"):
        for t in ALIGN_TOKENS:
            items += [("bmm", dtype, (96, t, 64, t)), ("bmm", dtype, (96, t, t, 64))]
        items += [("linear", dtype, (1, 1024, 1280, v)) for v in (50257, 50304)]
        items += [("linear", dtype, (1, 1024, 2048, v)) for v in (1000, 1008)]
        items += [("linear", dtype, (1, s, s, s)) for s in (256, 512, 1024)]
    return items


def align_kernels(out):
    items = align_items()
    if ARGS.cpu:
        items = [(op, dt, (min(s[0], 4),) + tuple(min(v, 80) for v in s[1:])) for op, dt, s in items[:10]]
    write_csv(os.path.join(out, "align.csv"), LOWP_COLS, time_gemms("align", items, out))


# ------------------------------------------------------------------------------ decode GEMMs
# Weight shapes (in, out) of public LLM projections: Llama-2 7B (4096 -> 12288 fused QKV,
# 4096 -> 4096, 4096 -> 22016 fused gate/up, 11008 -> 4096), Llama-2 13B (5120 -> 15360,
# 5120 -> 27648, 13824 -> 5120), Llama-2 70B on one GPU of eight (8192 -> 1280 QKV share,
# 8192 -> 7168 gate/up share, 3584 -> 8192 down share), and an LM head (4096 -> 32000).
DECODE_WEIGHTS = [(4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096), (5120, 15360), (5120, 27648),
                  (13824, 5120), (8192, 1280), (8192, 7168), (3584, 8192), (4096, 32000)]
DECODE_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128]
DECODE_COLS = ["OPName", "Latency", "Latency_graph", "Latency_cold", "Device", "dtype", "Kernel Name",
               "B", "M", "N", "K"]


def decode_gemms(out):
    """Few-token GEMMs through LLM weights: eager, graph replay on one weight (as a benchmark
    loop times it, L2-warm when the weight fits), and graph replay rotating through enough
    weight copies to exceed the L2 (every call streams its weight from DRAM, as a decode step
    through a whole model does)."""
    rows, fails = [], 0
    l2 = 64 << 20 if ARGS.cpu else torch.cuda.get_device_properties(0).L2_cache_size
    for dtype in ("bf16", "fp16", "fp8"):
        for n_in, n_out in DECODE_WEIGHTS:
            for tok in DECODE_TOKENS:
                if out_of_time():
                    log("decode: out of time")
                    write_csv(os.path.join(out, "decode.csv"), DECODE_COLS, rows)
                    return
                try:
                    if ARGS.cpu and (dtype == "fp8" or n_out > 4096):
                        continue
                    wbytes = n_in * n_out * (1 if dtype == "fp8" else 2)
                    copies = max(1, min(8, math.ceil(3 * l2 / wbytes)))
                    fns = [make_gemm("linear", 1, tok, n_in, n_out, dtype) for _ in range(copies)]
                    ms, reps = time_eager(fns[0])
                    g = time_graph(fns[0], min(reps, 50))
                    reps_c = copies * max(1, min(reps, 50) // copies)

                    def cold(i=[0]):
                        i[0] = (i[0] + 1) % copies
                        return fns[i[0]]()
                    gc = time_graph(cold, reps_c) if copies > 1 else g
                    rows.append({"OPName": "linear", "Latency": ms, "Latency_graph": g, "Latency_cold": gc,
                                 "Device": device_name(), "dtype": dtype, "B": 1, "M": tok, "N": n_in, "K": n_out})
                    del fns
                except Exception as e:  # noqa: BLE001
                    fails += 1
                    log(f"decode {dtype} {tok}x{n_in}x{n_out}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                    free()
        write_csv(os.path.join(out, "decode.csv"), DECODE_COLS, rows)
    log(f"decode: {len(rows)} GEMMs measured, {fails} failed")


# -------------------------------------------------------------------------------- host
def host(out):
    """Per-call time of eager calls whose GPU work is tiny: the host's dispatch of one op (what
    --host-dispatch-us describes), for bare PyTorch ops and for a small module call."""
    d = dev()
    x, y = torch.randn(8, 8, device=d), torch.randn(8, 8, device=d)
    b = torch.randn(2, 8, 8, device=d)
    lin = torch.nn.Linear(8, 8).to(d)
    ln = torch.nn.LayerNorm(8).to(d)
    ops = {"add": lambda: x + y, "mul_scalar": lambda: x * 1.5, "relu": lambda: torch.relu(x),
           "softmax": lambda: torch.softmax(x, -1), "layer_norm_module": lambda: ln(x), "bmm": lambda: torch.bmm(b, b),
           "linear_module": lambda: lin(x), "matmul": lambda: x @ y}
    rows = []
    with torch.no_grad():
        for name, fn in ops.items():
            ms, reps = time_eager(fn, target_ms=20, max_reps=2000)
            rows.append({"op": name, "per_call_us": ms * 1e3, "reps": reps})
    write_csv(os.path.join(out, "host.csv"), ["op", "per_call_us", "reps"], rows)
    log("host: " + ", ".join(f"{r['op']} {r['per_call_us']:.1f} us" for r in rows))


# --------------------------------------------------------------------------- LLM generation
LLM_COLS = ["model", "batch", "prompt", "prefill_ms", "prefill_gpu_ms", "prefill_gemm_ms", "prefill_attention_ms",
            "prefill_attention_kernel", "decode_ms", "decode_gpu_ms", "decode_gemm_ms", "decode_attention_ms",
            "decode_attention_kernel", "kv_len", "error"]
LLM_CASES = [(1, 512), (1, 2048), (8, 512), (32, 512), (8, 2048)]


ATTENTION_NAMES = ("flash", "fmha", "attention", "sdpa")  # SDPA's flash, memory-efficient and cuDNN kernels


def gemm_ms(per):
    names = ("gemm", "xmma", "cutlass", "cublas", "nvjet")  # cuBLAS, CUTLASS and cuBLAS 13's Hopper kernels
    return sum(v[1] for k, v in per.items()
               if any(t in k.lower() for t in names) and not any(t in k.lower() for t in ATTENTION_NAMES))


def attention(per):
    """GPU ms of the fused attention kernels and the name of the costliest (which SDPA backend ran)."""
    att = {k: v[1] for k, v in per.items() if any(t in k.lower() for t in ATTENTION_NAMES)}
    return sum(att.values()), (max(att, key=att.get)[:120] if att else "")


def split_profile(row, phase, per):
    """The GEMM and attention shares of a profiled call (busy_ms's kernels by name), into
    row[phase + '_...']."""
    if not per:
        return
    row[phase + "_gemm_ms"] = gemm_ms(per)
    row[phase + "_attention_ms"], row[phase + "_attention_kernel"] = attention(per)


def llm(cfg_dir, out):
    """BF16 prefill and one decode step of Llama-style configs (DIR/configs/llama*.json) with
    PyTorch's scaled-dot-product attention and the KV cache: the host-clock time of the call,
    the GPU's busy time and its GEMMs' share under the profiler."""
    import transformers as tf
    rows = []
    for name in sorted(f[:-5] for f in os.listdir(cfg_dir) if f.startswith("llama") and f.endswith(".json")):
        with open(os.path.join(cfg_dir, name + ".json")) as fh:
            cfg_dict = json.load(fh)
        cfg = tf.LlamaConfig(**{k: v for k, v in cfg_dict.items() if k not in ("model_type", "torch_dtype")})
        if ARGS.cpu:
            cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size = 2, 256, 512
            cfg.num_attention_heads, cfg.num_key_value_heads = 4, 4
        try:
            torch.set_default_dtype(torch.bfloat16)  # initialise in BF16 (half the memory and time)
            try:
                with torch.device(dev()):
                    model = tf.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
            finally:
                torch.set_default_dtype(torch.float32)
            model = model.to(dev(), dtype=torch.bfloat16).eval()
        except Exception as e:  # noqa: BLE001
            log(f"llm {name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        for batch, prompt in LLM_CASES:
            if out_of_time(10):
                log("llm: out of time")
                break
            row = {"model": name, "batch": batch, "prompt": prompt}
            try:
                p = prompt if not ARGS.cpu else 32
                ids = torch.randint(0, cfg.vocab_size, (batch, p), device=dev())
                nxt = torch.randint(0, cfg.vocab_size, (batch, 1), device=dev())
                t = Timer()
                with torch.no_grad():
                    model(input_ids=ids, use_cache=True)  # warm-up
                    t.start()
                    o = model(input_ids=ids, use_cache=True)
                    row["prefill_ms"] = t.stop()
                    del o
                    box = {}

                    def prefill():
                        box["o"] = model(input_ids=ids, use_cache=True)
                    row["prefill_gpu_ms"], _, per = busy_ms(prefill, out)
                    split_profile(row, "prefill", per)
                    past = box.pop("o").past_key_values
                    steps = []
                    for _ in range(5):
                        t.start()
                        o = model(input_ids=nxt, past_key_values=past, use_cache=True)
                        steps.append(t.stop())
                        past = o.past_key_values
                    row["decode_ms"] = statistics.median(steps)

                    def step():
                        box["o"] = model(input_ids=nxt, past_key_values=past, use_cache=True)
                    row["decode_gpu_ms"], _, per = busy_ms(step, out)
                    split_profile(row, "decode", per)
                    row["kv_len"] = p + 5
                    del past, box
                log(f"llm {name} b{batch} p{prompt}: prefill {row['prefill_ms']:.1f} ms (GPU {row['prefill_gpu_ms'] or 0:.1f}), "
                    f"decode step {row['decode_ms']:.2f} ms (GPU {row['decode_gpu_ms'] or 0:.2f})")
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                log(f"llm {name} b{batch} p{prompt}: {row['error']}")
            free()
            rows.append(row)
            write_csv(os.path.join(out, "llm.csv"), LLM_COLS, rows)
        del model
        free()


# ------------------------------------------------------------------------------ end to end
E2E_COLS = ["model", "mode", "seq", "batch", "latency_ms", "fw_ms", "bw_ms", "step_ms", "iters", "kernel_ms",
            "kernels", "peak_gib", "weights_gib", "error"]


def peak_gib(fn):
    """PyTorch's peak allocated memory (GiB) over one call of fn, from a reset of the peak (the
    model's weights, and in training the gradients still held, included); None on the CPU."""
    if ARGS.cpu:
        return None
    sync()
    torch.cuda.reset_peak_memory_stats()
    fn()
    sync()
    return torch.cuda.max_memory_allocated() / 2**30


def busy_ms(fn, out):
    """GPU busy time of one call of fn: the union of its kernel, copy and set intervals in a
    profiler trace (ms), the number of kernels, and the kernels by name ({name: [calls, ms]})."""
    if ARGS.cpu:
        return None, None, {}
    from torch.profiler import ProfilerActivity, profile
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync()
    ev = trace_events(prof, os.path.join(out, "e2e_trace.tmp.json"))
    iv = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in ev
                if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "ts" in e)
    total, end = 0.0, -1.0
    for a, b in iv:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    per = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            c = per.setdefault(e.get("name", "?"), [0, 0.0])
            c[0] += 1
            c[1] += e.get("dur", 0) / 1e3
    return total / 1e3, sum(1 for e in ev if e.get("cat") == "kernel"), per


def build_model(cfg_path, mode):
    import transformers as tf
    with open(cfg_path) as fh:
        cfg_dict = json.load(fh)
    mt = cfg_dict.pop("model_type")
    try:
        cfg = tf.AutoConfig.for_model(mt, **cfg_dict)
    except Exception:  # noqa: BLE001 - versions without for_model
        cfg = tf.CONFIG_MAPPING[mt](**cfg_dict)
    if ARGS.cpu:  # a two-layer slice: enough to exercise the code
        for key in ("n_layer", "num_hidden_layers"):
            if hasattr(cfg, key):
                setattr(cfg, key, 2)
    if mt == "bert":
        cls = tf.BertForSequenceClassification if mode == "inf" else tf.BertForPreTraining
    else:
        cls = tf.AutoModelForCausalLM
    kw = {"attn_implementation": "eager"}
    with torch.device(dev()):
        try:
            model = cls.from_config(cfg, **kw) if cls is tf.AutoModelForCausalLM else cls._from_config(cfg, **kw)
        except Exception:  # noqa: BLE001 - older or newer signatures: set it on the config
            cfg._attn_implementation = "eager"
            model = cls.from_config(cfg) if cls is tf.AutoModelForCausalLM else cls(cfg)
    return model.to(dev(), dtype=torch.float32), cfg


def e2e(runs, cfg_dir, out):
    try:
        import transformers as tf
        log(f"transformers {tf.__version__}")
    except Exception as e:  # noqa: BLE001
        log(f"e2e: transformers unavailable: {e}")
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    rows, kernel_rows = [], []
    for r in runs:
        if out_of_time(20):
            log("e2e: out of time")
            break
        row = {"model": r["model"], "mode": r["mode"], "seq": r["seq"], "batch": r["batch"]}
        model = opt = None
        per = {}  # the profiled iteration's kernels by name: calls and GPU ms
        try:
            seq = r["seq"] if not ARGS.cpu else 32
            model, cfg = build_model(os.path.join(cfg_dir, r["model"] + ".json"), r["mode"])
            row["weights_gib"] = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
            vocab = cfg.vocab_size
            ids = torch.randint(0, vocab, (r["batch"], seq), device=dev())
            t = Timer()
            if r["mode"] == "inf":
                model.eval()
                with torch.no_grad():
                    res = []
                    for it in range(1 + ARGS.iters):
                        t.start()
                        model(input_ids=ids)
                        ms = t.stop()
                        if it >= 1:
                            res.append(ms)
                        if out_of_time(5):
                            break
                    row["kernel_ms"], row["kernels"], per = busy_ms(lambda: model(input_ids=ids), out)
                    row["peak_gib"] = peak_gib(lambda: model(input_ids=ids))
                row.update(latency_ms=statistics.median(res), fw_ms=statistics.median(res), bw_ms=0, step_ms=0,
                           iters=len(res))
            else:
                model.train()
                opt = torch.optim.SGD(model.parameters(), lr=1e-6)
                kw = {"labels": ids} if cfg.model_type != "bert" else {
                    "labels": ids, "next_sentence_label": torch.zeros(r["batch"], dtype=torch.long, device=dev())}
                fw, bw, st = [], [], []
                t1, t2 = Timer(), Timer()
                for it in range(1 + ARGS.iters):
                    t.start()
                    loss = model(input_ids=ids, **kw).loss
                    a = t.stop()
                    t1.start()
                    loss.backward()
                    b = t1.stop()
                    t2.start()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    c = t2.stop()
                    del loss
                    if it >= 1:
                        fw.append(a)
                        bw.append(b)
                        st.append(c)
                    if out_of_time(5):
                        break

                def one_step():
                    model(input_ids=ids, **kw).loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                row["kernel_ms"], row["kernels"], per = busy_ms(one_step, out)
                row["peak_gib"] = peak_gib(one_step)  # SGD without momentum: no optimizer state
                row.update(fw_ms=statistics.median(fw), bw_ms=statistics.median(bw), step_ms=statistics.median(st),
                           iters=len(fw))
                row["latency_ms"] = row["fw_ms"] + row["bw_ms"] + row["step_ms"]
            log(f"e2e {r['model']} {r['mode']} s{r['seq']} b{r['batch']}: {row['latency_ms']:.1f} ms "
                f"(fw {row['fw_ms']:.1f}, bw {row['bw_ms']:.1f}, step {row['step_ms']:.1f}; {row['iters']} iters; "
                f"GPU busy {row.get('kernel_ms') or 0:.1f} ms in {row.get('kernels') or 0} kernels)")
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            log(f"e2e {r['model']} {r['mode']} b{r['batch']}: {row['error']}")
            if "OutOfMemory" not in type(e).__name__:
                LOG.write(traceback.format_exc())
        finally:
            del model, opt
            free()
        rows.append(row)
        write_csv(os.path.join(out, "e2e.csv"), E2E_COLS, rows)
        if per:
            run = f"{r['model']}-{r['mode']}-{r['seq']}-{r['batch']}"
            kernel_rows.extend({"run": run, "kernel": k, "calls": v[0], "ms": v[1]} for k, v in per.items())
            write_csv(os.path.join(out, "e2e_kernels.csv"), ["run", "kernel", "calls", "ms"], kernel_rows)


def main():
    global ARGS, LOG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--in", dest="inp", default=".devrun")
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=400.0, help="seconds after which nothing new starts")
    ap.add_argument("--reserve", type=float, default=200.0, help="seconds kept for the end-to-end runs")
    ap.add_argument("--iters", type=int, default=3, help="timed iterations per end-to-end run")
    ap.add_argument("--sections", default="facts,fp32,lowp,align,decode,host,e2e,llm")
    ap.add_argument("--limit", type=int, default=0, help="at most this many FP32 kernels (0: all)")
    ap.add_argument("--runs", default="", help="only end-to-end runs whose model-mode contains this")
    ap.add_argument("--cpu", action="store_true")
    ARGS = ap.parse_args()
    os.makedirs(ARGS.out, exist_ok=True)
    LOG = open(os.path.join(ARGS.out, "log.txt"), "a")
    if not ARGS.cpu and not torch.cuda.is_available():
        raise SystemExit("measure.py: no CUDA device (use --cpu to check the script)")
    with open(os.path.join(ARGS.inp, "shapes.json")) as fh:
        shapes = json.load(fh)
    with open(os.path.join(ARGS.inp, "runs.json")) as fh:
        runs = [r for r in json.load(fh) if ARGS.runs in f"{r['model']}-{r['mode']}"]
    torch.manual_seed(0)
    sections = ARGS.sections.split(",")
    steps = [("facts", lambda: facts(ARGS.out)), ("fp32", lambda: fp32_kernels(shapes, ARGS.out, ARGS.limit)),
             ("lowp", lambda: lowp_kernels(shapes, ARGS.out)), ("align", lambda: align_kernels(ARGS.out)),
             ("decode", lambda: decode_gemms(ARGS.out)),
             ("host", lambda: host(ARGS.out)),
             ("e2e", lambda: e2e(runs, os.path.join(ARGS.inp, "configs"), ARGS.out)),
             ("llm", lambda: llm(os.path.join(ARGS.inp, "configs"), ARGS.out))]
    for name, fn in steps:
        if name not in sections:
            continue
        try:
            fn()
        except Exception:  # noqa: BLE001 - a section that breaks leaves the others their time
            log(f"{name}: failed\n" + traceback.format_exc())
        free()
    log("done")


if __name__ == "__main__":
    main()
