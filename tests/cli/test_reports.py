"""Terminal table, CSV and GPU lists through the real binary: what a person reads."""
import csv
import io
import json
import os
import pty
import re
import select
import subprocess
import tempfile
import unittest

from cli_util import BIN, EXAMPLE, run, run_json

ARGS = (EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "128")
ROW = re.compile(r"^(\S+)\s+(\S+)\s+(gemm|elementwise|softmax|layernorm|reduce|memory|collective|unknown)\s")


def node_rows(out):
    return [l for l in out.splitlines() if ROW.match(l)]


def row_ms(line):
    # The last two columns are latency (ms, maybe with '*') and share (%).
    return float(line.split()[-2].rstrip("*"))


class Table(unittest.TestCase):
    def test_piped_output_is_plain_and_stable(self):
        code, out, err = run(*ARGS)
        self.assertEqual(code, 0, err)
        self.assertNotIn("\033", out)
        self.assertNotIn("\033", err)
        for col in ("node", "op", "class", "output", "tile", "waves", "bound", "util%", "ms", "%"):
            self.assertIn(col, out.splitlines()[2].split())
        self.assertIn("by kernel class", out)
        code2, out2, _ = run(*ARGS)
        self.assertEqual(out, out2)

    def test_rows_match_the_json_report(self):
        code, out, err = run(*ARGS)
        self.assertEqual(code, 0, err)
        r = run_json(*ARGS)
        with_kernels = [n for n in r["nodes"] if n["kernels"]]
        rows = node_rows(out)
        self.assertEqual(len(rows), len(with_kernels))
        self.assertEqual([l.split()[0] for l in rows], [n["name"] for n in with_kernels])
        shares = sum(float(l.split()[-1]) for l in rows)
        self.assertAlmostEqual(shares, 100.0, delta=0.1 * len(rows))
        # Class totals in the table equal the JSON's.
        for cls, ms in r["totals_by_class_ms"].items():
            m = re.search(r"^" + cls + r"\s+\d+\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+) - ([0-9.]+)$", out, re.M)
            self.assertIsNotNone(m, cls)
            self.assertAlmostEqual(float(m.group(1)), ms, delta=max(1e-4, 1e-3 * ms))
            self.assertLessEqual(float(m.group(3)), float(m.group(1)))  # its 80% interval holds it
            self.assertGreaterEqual(float(m.group(4)), float(m.group(1)))

    def test_top_n_is_the_n_slowest(self):
        code, out, err = run(*ARGS, "--top", "5")
        self.assertEqual(code, 0, err)
        rows = node_rows(out)
        self.assertEqual(len(rows), 5)
        ms = [row_ms(l) for l in rows]
        self.assertEqual(ms, sorted(ms, reverse=True))
        r = run_json(*ARGS)
        slowest = sorted((n["latency_ms"] for n in r["nodes"]), reverse=True)[:5]
        for a, b in zip(ms, slowest):
            self.assertAlmostEqual(a, b, delta=max(1e-4, 2e-3 * b))
        slowest_node = max(r["nodes"], key=lambda n: n["latency_ms"])["name"]
        self.assertEqual(rows[0].split()[0], slowest_node)
        self.assertIn("the 5 slowest of", out)

    def test_group_by_layer(self):
        code, out, err = run(*ARGS, "--group", "layer")
        self.assertEqual(code, 0, err)
        layers = re.findall(r"^(transformer\.h\.\d+)\s+(\d+)\s+(\S+)\s+([0-9.]+)\s+([0-9.]+)$", out, re.M)
        self.assertEqual([l[0] for l in layers], [f"transformer.h.{i}" for i in range(12)])
        # Identical layers: the same node count, class and time.
        self.assertEqual(len({(l[1], l[2], l[3]) for l in layers}), 1)
        # The top class and the time agree with the JSON's kernels of that layer.
        r = run_json(*ARGS)
        per_class = {}
        for n in r["nodes"]:
            if n["name"].startswith(("transformer.h.0.", "transformer.h.0/")):
                for k in n["kernels"]:
                    per_class[k["class"]] = per_class.get(k["class"], 0.0) + k["latency_ms"]
        self.assertEqual(layers[0][2], max(per_class, key=per_class.get))
        total = sum(per_class.values())
        self.assertAlmostEqual(float(layers[0][3]), total, delta=max(1e-4, 1e-3 * total))
        self.assertNotIn("mlp.c_fc/MatMul", out)
        body = out.split("\n\n")[1].splitlines()[1:]  # the layer rows
        rows = [(l.split()[0], float(l.split()[-2])) for l in body]
        slowest = max(rows, key=lambda x: x[1])  # first of equals, as the stable sort keeps it
        code, out, err = run(*ARGS, "--group", "layer", "--top", "1")
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"(?m)^" + re.escape(slowest[0]) + r"\s")
        self.assertIn("the 1 slowest of", out)

    def test_bad_group_is_an_input_error(self):
        code, _, err = run(*ARGS, "--group", "block")
        self.assertEqual(code, 2)
        self.assertIn("--group", err)

    def test_training_splits_phases(self):
        code, out, err = run(*ARGS, "--mode", "training", "--group", "layer")
        self.assertEqual(code, 0, err)
        self.assertIn("by phase", out)
        r = run_json(*ARGS, "--mode", "training")
        m = re.search(r"^backward\s+([0-9.]+)\s+([0-9.]+)\s+[0-9.]+ - [0-9.]+$", out, re.M)
        self.assertIsNotNone(m)
        self.assertAlmostEqual(float(m.group(1)), r["backward_ms"], delta=max(1e-4, 1e-3 * r["backward_ms"]))
        self.assertIn("bwd ms", out)

    def test_gpu_list_adds_a_gpu_table(self):
        code, out, err = run(*ARGS[:2], "b200,h100,t4", *ARGS[3:])
        self.assertEqual(code, 0, err)
        r = run_json(*ARGS[:2], "b200,h100,t4", *ARGS[3:])
        table = out[out.rindex("\ngpu "):]
        rows = [l for l in table.splitlines()[2:] if l.strip()]
        self.assertEqual(len(rows), 3)
        # The last column: whether the run fits the GPU's memory (JSON `memory`).
        for line, rep in zip(rows, r):
            self.assertTrue(line.endswith("  fits" if rep["memory"]["fits"] else
                                          "  needs %d GPUs" % rep["memory"]["gpus_to_hold"]), line)
        rows = [re.sub(r"  (fits|needs \d+ GPUs)$", "", l).rstrip() for l in rows]
        # Before it, the share of the dense peak the step runs at (JSON throughput.utilization).
        for line, rep in zip(rows, r):
            self.assertTrue(line.endswith(" %.1f%%" % (100 * rep["throughput"]["utilization"])), line)
        rows = [re.sub(r" +[0-9.]+%$", "", l) for l in rows]
        self.assertTrue(rows[0].endswith("1.00x"))
        for line, rep in zip(rows, r):
            self.assertIn(rep["gpu"], line)
            speedup = float([w for w in line.split() if w.endswith("x")][-1].rstrip("x"))
            self.assertAlmostEqual(speedup, r[0]["e2e_latency_ms"] / rep["e2e_latency_ms"], delta=0.01)
            if line is not rows[0]:  # the speed-up's 80% interval holds it
                low, high = float(line.split()[-3]), float(line.split()[-1])
                self.assertLessEqual(low, speedup)
                self.assertGreaterEqual(high, speedup)

    def test_colour_and_progress_only_on_a_tty(self):
        master, slave = pty.openpty()
        p = subprocess.Popen([BIN, *ARGS[:2], "b200,h100", *ARGS[3:], "--top", "3"], stdout=slave, stderr=slave,
                             stdin=subprocess.DEVNULL)
        os.close(slave)
        data = b""
        while True:
            r, _, _ = select.select([master], [], [], 120)
            if not r:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        os.close(master)
        self.assertEqual(p.wait(timeout=120), 0)
        text = data.decode("utf-8", "replace")
        self.assertIn("\033[1m", text)
        self.assertIn("predicting on", text)


class Csv(unittest.TestCase):
    def test_one_row_per_node_and_per_kernel(self):
        r = run_json(*ARGS)
        with tempfile.TemporaryDirectory() as d:
            nodes_csv, kernels_csv = os.path.join(d, "n.csv"), os.path.join(d, "k.csv")
            code, _, err = run(*ARGS, "--csv", nodes_csv, "--quiet")
            self.assertEqual(code, 0, err)
            code, _, err = run(*ARGS, "--csv", kernels_csv, "--csv-kernels", "--quiet")
            self.assertEqual(code, 0, err)
            with open(nodes_csv) as f:
                nodes = list(csv.DictReader(f))
            with open(kernels_csv) as f:
                kernels = list(csv.DictReader(f))
        self.assertEqual([n["node"] for n in nodes], [n["name"] for n in r["nodes"]])
        self.assertAlmostEqual(sum(float(n["latency_ms"]) for n in nodes), r["e2e_latency_ms"], delta=1e-6)
        self.assertAlmostEqual(sum(float(n["share"]) for n in nodes), 1.0, delta=1e-6)
        for n in nodes:
            self.assertEqual(n["layer"] != "", n["node"] != "")
        self.assertEqual(len(kernels), sum(len(n["kernels"]) for n in r["nodes"]))
        self.assertAlmostEqual(sum(float(k["latency_ms"]) for k in kernels), r["e2e_latency_ms"], delta=1e-6)
        for k in kernels:
            self.assertIn(k["class"], ("gemm", "elementwise", "softmax", "layernorm", "reduce", "memory", "collective",
                                       "unknown"))
            self.assertIn(k["bound"], ("compute", "memory", "host", "-"))

    def test_gpu_list_gives_every_gpus_rows(self):
        # A GPU list: a leading gpu column, each GPU's rows in turn, each summing to its own
        # end-to-end latency; --out annotates for the first GPU and says so.
        reports = run_json(EXAMPLE, "--gpu", "b200,l4", "--batch", "1", "--seq", "128")
        with tempfile.TemporaryDirectory() as d:
            nodes_csv, model = os.path.join(d, "n.csv"), os.path.join(d, "a.onnx")
            code, _, err = run(EXAMPLE, "--gpu", "b200,l4", "--batch", "1", "--seq", "128", "--csv", nodes_csv,
                               "--out", model, "--quiet")
            self.assertEqual(code, 0, err)
            self.assertIn("--out annotates the model for the first GPU (b200)", err)
            with open(nodes_csv) as f:
                rows = list(csv.DictReader(f))
        self.assertEqual(sorted({r["gpu"] for r in rows}), ["b200", "l4"])
        for report in reports:
            mine = [r for r in rows if r["gpu"] == report["gpu_alias"]]
            self.assertEqual([r["node"] for r in mine], [n["name"] for n in report["nodes"]])
            self.assertAlmostEqual(sum(float(r["latency_ms"]) for r in mine), report["e2e_latency_ms"], delta=1e-6)

    def test_unwritable_csv_leaves_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            code, _, err = run(*ARGS, "--csv", os.path.join(d, "missing", "n.csv"), "--quiet")
            self.assertEqual(code, 1)
            self.assertEqual(len(err.strip().splitlines()), 1)
            self.assertEqual(os.listdir(d), [])


class Throughput(unittest.TestCase):
    def test_rates_over_the_latency_in_every_format(self):
        r = run_json(*ARGS)
        t = r["throughput"]
        ms = r["e2e_latency_ms"]
        flops = sum(k["flops"] for n in r["nodes"] for k in n["kernels"])
        self.assertAlmostEqual(t["flops"], flops, delta=1e-6 * flops)
        self.assertEqual((t["samples"], t["tokens"]), (1, 128))
        self.assertAlmostEqual(t["samples_per_s"], 1e3 / ms, delta=1e-6 * t["samples_per_s"])
        self.assertAlmostEqual(t["tokens_per_s"], 128e3 / ms, delta=1e-6 * t["tokens_per_s"])
        self.assertAlmostEqual(t["tflops"], t["model_flops"] / ms * 1e-9, delta=1e-6 * t["tflops"])
        for k in ("samples_per_s", "tokens_per_s", "tflops"):
            self.assertLessEqual(t[k + "_low"], t[k])
            self.assertGreaterEqual(t[k + "_high"], t[k])
        self.assertGreater(t["utilization"], 0)
        self.assertLess(t["utilization"], 1)
        self.assertAlmostEqual(t["utilization"], t["tflops"] / t["peak_tflops"], delta=1e-9)
        self.assertEqual(t["gpus"], 1)
        # Tensor-parallel inference: the samples of the group of tp GPUs, the FLOPs of one of them.
        tp = run_json(*ARGS, "--parallel", "tp=2")["throughput"]
        self.assertEqual((tp["gpus"], tp["samples"]), (2, 1))
        self.assertLess(tp["model_flops"], 0.6 * t["model_flops"])
        code, out, err = run(*ARGS)
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"throughput: [0-9.]+ samples/s \(80% interval [0-9.]+ - [0-9.]+\), [0-9.]+ tokens/s")
        self.assertIn("of the " + t["peak_math"] + " dense peak", out)
        code, html, err = run(*ARGS, "--html", "-")
        self.assertEqual(code, 0, err)
        self.assertIn("Throughput: ", html)
        self.assertIn("<b>%d</b>" % round(t["tokens_per_s"]), html)  # the cards: tokens/s and the share of the peak
        self.assertIn("<b>%.1f%%</b>" % (100 * t["utilization"]), html)

    def test_training_reports_model_flops_utilization(self):
        base = (EXAMPLE, "--gpu", "h100", "--batch", "2", "--seq", "128", "--mode", "training", "--dtype", "bf16")
        plain = run_json(*base)["throughput"]
        re_ = run_json(*base, "--recompute", "full")["throughput"]
        self.assertEqual(plain["peak_math"], "bf16-tensor")
        self.assertGreater(re_["flops"], re_["model_flops"])
        self.assertAlmostEqual(re_["model_flops"], plain["model_flops"], delta=1e-6 * plain["model_flops"])
        code, out, err = run(*base, "--recompute", "full")
        self.assertEqual(code, 0, err)
        self.assertIn("TFLOP/s of model FLOPs a GPU", out)
        self.assertIn("with the recomputation", out)
        self.assertIn(": MFU", out)

    def test_time_to_train_on_a_token_count(self):
        base = (EXAMPLE, "--gpu", "h100", "--batch", "8", "--seq", "256", "--mode", "training", "--parallel", "dp=2")
        r = run_json(*base, "--train-tokens", "2.5B")
        t = r["throughput"]
        steps = -(-2.5e9 // (8 * 256))
        self.assertEqual((t["train_tokens"], t["gpus"]), (2.5e9, 2))
        self.assertAlmostEqual(t["train_days"], steps * r["e2e_latency_ms"] / 86400e3, delta=1e-9 * t["train_days"])
        self.assertAlmostEqual(t["gpu_hours"], t["train_days"] * 48, delta=1e-9 * t["gpu_hours"])
        self.assertLessEqual(t["train_days_low"], t["train_days"])
        self.assertGreaterEqual(t["train_days_high"], t["train_days"])
        self.assertEqual(run_json(*base, "--train-tokens", "2500000000")["throughput"]["train_days"], t["train_days"])
        code, out, err = run(*base, "--train-tokens", "2.5B")
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"2\.50B tokens in [0-9.]+ days \(80% interval [0-9.]+ - [0-9.]+\) on 2 GPUs, [0-9.]+ GPU-hours")
        self.assertNotIn("train_days", run_json(*base)["throughput"])
        with tempfile.TemporaryDirectory() as d:
            out_json = os.path.join(d, "r.json")
            for args, needle in [((*base, "--train-tokens", "12X"), "--train-tokens: expected a token count"),
                                 ((*base, "--train-tokens", "0"), "--train-tokens: expected a token count"),
                                 ((EXAMPLE, "--gpu", "h100", "--batch", "1", "--seq", "64", "--train-tokens", "1e9"),
                                  "--train-tokens applies to --mode training"),
                                 (("--config", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                                            "dinov2_base.json"), "--gpu", "h100", "--batch", "2", "--mode",
                                   "training", "--train-tokens", "1e9"), "--train-tokens needs the tokens of a step")]:
                code, so, se = run(*args, "--json", out_json)
                self.assertEqual(code, 2, se)
                lines = [l for l in se.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, se)
                self.assertIn(needle, lines[0])
                self.assertFalse(os.path.exists(out_json))

    def test_gpu_cost_prices_the_tokens_and_the_training_run(self):
        base = (EXAMPLE, "--batch", "8", "--seq", "256", "--mode", "training", "--parallel", "dp=2", "--train-tokens", "1B")
        rs = run_json(*base, "--gpu", "h100,b200", "--gpu-cost", "h100=2.5,B200=5")
        for r, usd in zip(rs, (2.5, 5.0)):
            t = r["throughput"]
            self.assertEqual(t["usd_per_gpu_hour"], usd)
            want = usd * 2 / 3600 / t["tokens_per_s"] * 1e6  # two GPUs a million tokens
            self.assertAlmostEqual(t["usd_per_m_tokens"], want, delta=1e-9 * want)
            self.assertLessEqual(t["usd_per_m_tokens_low"], t["usd_per_m_tokens"])
            self.assertGreaterEqual(t["usd_per_m_tokens_high"], t["usd_per_m_tokens"])
            self.assertAlmostEqual(t["train_usd"], t["gpu_hours"] * usd, delta=1e-9 * t["train_usd"])
        # One price for every GPU; none: no cost.
        one = run_json(*base, "--gpu", "h100", "--gpu-cost", "2.5")["throughput"]
        self.assertEqual(one["usd_per_m_tokens"], rs[0]["throughput"]["usd_per_m_tokens"])
        self.assertNotIn("usd_per_m_tokens", run_json(*base, "--gpu", "h100")["throughput"])
        code, out, err = run(*base, "--gpu", "h100,b200", "--gpu-cost", "h100=2.5,B200=5")
        self.assertEqual(code, 0, err)
        self.assertIn("$/1M tok", out)  # the GPU table's columns: the cost of tokens, the run's days and cost
        self.assertRegex(out, r"run days +run \$")
        for r in rs:
            t = r["throughput"]
            row = re.search(r"(?m)^" + re.escape(r["gpu"]) + r" .*$", out.split("\ngpu ")[-1]).group(0).split()
            self.assertEqual(row[-1], "$%.2f" % t["train_usd"])
            self.assertAlmostEqual(float(row[-2]), t["train_days"], delta=0.01)
        code, html, err = run(*base, "--gpu", "h100", "--gpu-cost", "2.5", "--html", "-")
        self.assertEqual(code, 0, err)
        self.assertIn("per 1M tokens at $2.50 a GPU-hour", html)
        code, out, err = run(*base, "--gpu", "h100", "--gpu-cost", "2.5")
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"GPU-hours, \$[0-9.]+; \$[0-9.]+ per 1M tokens \(80% interval \$[0-9.]+ - \$[0-9.]+\) at \$2.50 a GPU-hour")
        with tempfile.TemporaryDirectory() as d:
            out_json = os.path.join(d, "r.json")
            for bad, needle in [("abc", "--gpu-cost: expected"), ("h100=", "--gpu-cost: expected"), ("0", "--gpu-cost: expected"),
                                ("h100=2,h100-sxm=3", "priced twice"), ("nogpu=3", "--gpu-cost: unknown GPU")]:
                code, _, err = run(*base, "--gpu", "h100", "--gpu-cost", bad, "--json", out_json)
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(needle, err)
                self.assertFalse(os.path.exists(out_json))

    def test_samples_from_named_dims_and_no_block_in_a_generation(self):
        # --shape (or --dim) on dims named batch and sequence: the same samples and tokens.
        t = run_json(EXAMPLE, "--gpu", "h100", "--shape", "input_ids=2x64")["throughput"]
        self.assertEqual((t["samples"], t["tokens"]), (2, 128))
        self.assertEqual(run_json(EXAMPLE, "--gpu", "h100", "--dim", "batch=2", "--dim", "sequence=64")["throughput"]["tokens"], 128)
        llama = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "llama3_8b.json")
        g = run_json("--config", llama, "--gpu", "h100", "--generate", "32:4")
        self.assertNotIn("throughput", g)
        self.assertGreater(g["generation"]["tokens_per_s"], 0)


if __name__ == "__main__":
    unittest.main()
