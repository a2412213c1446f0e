"""`compare` on GPT-2 variants built by `export`: direction, speed-ups and their intervals, class deltas,
node matching."""
import json
import os
import tempfile
import unittest

from cli_util import SOURCE, run, run_json

GPUS = "b200,h100"


def export(d, name, **overrides):
    with open(os.path.join(SOURCE, "examples", "gpt2-small.json")) as f:
        cfg = json.load(f)
    cfg.update(overrides)
    cfg_path = os.path.join(d, name + ".json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    out = os.path.join(d, name + ".onnx")
    code, _, err = run("export", "--config", cfg_path, "-o", out)
    if code != 0:
        raise AssertionError(f"export {name}: {err}")
    return out


class Compare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        cls.base = export(d, "gpt2_12l")
        cls.shallow = export(d, "gpt2_6l", n_layer=6)
        cls.narrow = export(d, "gpt2_512h", n_embd=512, n_head=8)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def compare(self, *models, extra=()):
        out = os.path.join(self.tmp.name, "c.json")
        html = os.path.join(self.tmp.name, "c.html")
        code, table, err = run("compare", *models, "--gpu", GPUS, "--batch", "2", "--seq", "256", "--json", out,
                               "--html", html, *extra)
        self.assertEqual(code, 0, err)
        with open(out) as f:
            c = json.load(f)
        with open(html) as f:
            page = f.read()
        return c, table, page

    def result(self, c, model, gpu_alias):
        rows = [r for r in c["results"] if r["model"] == model and r["gpu_alias"] == gpu_alias]
        self.assertEqual(len(rows), 1)
        return rows[0]

    def test_fewer_layers_is_faster_on_every_gpu(self):
        c, table, page = self.compare(self.base, self.shallow)
        self.assertEqual(c["models"], ["gpt2_12l.onnx", "gpt2_6l.onnx"])
        self.assertEqual([g["alias"] for g in c["gpus"]], ["b200", "h100"])
        for gpu in ("b200", "h100"):
            base = self.result(c, "gpt2_12l.onnx", gpu)
            var = self.result(c, "gpt2_6l.onnx", gpu)
            self.assertAlmostEqual(base["speedup"], 1.0)
            self.assertLess(var["e2e_latency_ms"], base["e2e_latency_ms"])
            self.assertGreater(var["speedup"], 1.2)
            # Six of twelve blocks go (the embeddings and the LM head stay): under 2x.
            self.assertLess(var["speedup"], 2.0)
            self.assertAlmostEqual(var["speedup"], base["e2e_latency_ms"] / var["e2e_latency_ms"], places=6)
            for row in (base, var):  # each latency with its 80% interval
                self.assertLess(row["latency_low_ms"], row["e2e_latency_ms"])
                self.assertGreater(row["latency_high_ms"], row["e2e_latency_ms"])
            # The speed-up's interval: the base against itself exactly 1; the variant's around
            # its speed-up, narrower than the two latencies' intervals taken apart (the blocks
            # both keep err together).
            self.assertEqual((base["speedup_low"], base["speedup_high"]), (1.0, 1.0))
            self.assertLess(var["speedup_low"], var["speedup"])
            self.assertGreater(var["speedup_high"], var["speedup"])
            self.assertGreater(var["speedup_low"], base["latency_low_ms"] / var["latency_high_ms"])
            self.assertLess(var["speedup_high"], base["latency_high_ms"] / var["latency_low_ms"])
            for cls in ("gemm", "elementwise", "softmax", "layernorm"):
                self.assertLess(var["class_delta_ms"][cls], 0, cls)
            total = sum(var["class_delta_ms"].values())
            self.assertAlmostEqual(total, var["e2e_latency_ms"] - base["e2e_latency_ms"], delta=1e-6)
            # Blocks 0-5 keep their names; blocks 6-11 are removed, nothing is added.
            self.assertGreater(var["matched"]["name"], 0)
            self.assertEqual(var["matched"]["added"], 0)
            self.assertGreater(var["matched"]["removed"], 0)
            top = var["top_changed_nodes"]
            self.assertEqual(len(top), 10)
            for n in top:
                self.assertEqual(n["matched_by"], "removed")
                self.assertRegex(n["base_name"], r"^transformer\.h\.([6-9]|1[01])\.")
                self.assertLess(n["delta_ms"], 0)
            deltas = [abs(n["delta_ms"]) for n in top]
            self.assertEqual(deltas, sorted(deltas, reverse=True))
        # Memory: each model's footprint (the same on both GPUs), fewer blocks less of it.
        mem = {m: self.result(c, m, "h100")["memory"]["total_gib"] for m in c["models"]}
        self.assertLess(mem["gpt2_6l.onnx"], mem["gpt2_12l.onnx"])
        self.assertEqual(self.result(c, "gpt2_6l.onnx", "b200")["memory"]["total_gib"], mem["gpt2_6l.onnx"])
        self.assertRegex(table, r"gpt2_6l\.onnx +%.2f " % mem["gpt2_6l.onnx"])
        self.assertNotIn("does not fit", table)
        self.assertIn("gpt2_6l.onnx vs gpt2_12l.onnx on", table)
        self.assertIn("80% interval", table)
        self.assertIn("x (80% interval ", page)
        # The page's table: each speed-up with its interval below it (none for the base).
        self.assertRegex(page, r"[0-9.]+x<br><small>[0-9.]+ - [0-9.]+</small>")
        self.assertNotIn("<th class=\"n\">80% interval</th>", page)
        self.assertRegex(table, r"gemm\s+[0-9.]+\s+[0-9.]+\s+-[0-9.]+")
        self.assertIn("Nodes that changed most", page)
        self.assertNotIn("https://", page)

    def test_every_model_on_the_same_multi_gpu_split(self):
        # --parallel: each model's latency is what the main job predicts with it, the table says
        # the split, and a shallower model is still faster.
        c, table, _ = self.compare(self.base, self.shallow, extra=("--parallel", "tp=2,pp=2", "--quiet"))
        self.assertEqual(table, "")
        code, table, err = run("compare", self.base, self.shallow, "--gpu", GPUS, "--batch", "2", "--seq", "256",
                               "--parallel", "tp=2,pp=2")
        self.assertEqual(code, 0, err)
        self.assertIn("each model on 4 GPUs of each kind (tp=2, pp=2); memory is one GPU's", table)
        for model, path in (("gpt2_12l.onnx", self.base), ("gpt2_6l.onnx", self.shallow)):
            for gpu in GPUS.split(","):
                one = run_json(path, "--gpu", gpu, "--batch", "2", "--seq", "256", "--parallel", "tp=2,pp=2")
                self.assertEqual(self.result(c, model, gpu)["e2e_latency_ms"], one["e2e_latency_ms"], (model, gpu))
        self.assertLess(self.result(c, "gpt2_6l.onnx", "h100")["e2e_latency_ms"],
                        self.result(c, "gpt2_12l.onnx", "h100")["e2e_latency_ms"])
        # The speed-up's interval (the kernels' correlated errors) is about the pipelines' ratio.
        for gpu in GPUS.split(","):
            r = self.result(c, "gpt2_6l.onnx", gpu)
            self.assertLess(r["speedup_low"], r["speedup"])
            self.assertGreater(r["speedup_high"], r["speedup"])

    def test_narrower_hidden_shrinks_matched_nodes(self):
        c, _, _ = self.compare(self.base, self.narrow, extra=("--top", "5"))
        var = self.result(c, "gpt2_512h.onnx", "b200")
        self.assertGreater(var["speedup"], 1.0)
        self.assertEqual(var["matched"]["added"], 0)
        self.assertEqual(var["matched"]["removed"], 0)
        self.assertLess(var["class_delta_ms"]["gemm"], 0)
        top = var["top_changed_nodes"]
        self.assertEqual(len(top), 5)
        for n in top:
            self.assertEqual(n["matched_by"], "name")
            self.assertEqual(n["name"], n["base_name"])
            self.assertLess(n["delta_ms"], 0)
        # The LM head (768 -> 512 times 50257) is the one node that shrinks most.
        self.assertEqual(top[0]["name"], "lm_head/MatMul")

    def test_three_models_against_the_first(self):
        c, table, _ = self.compare(self.base, self.shallow, self.narrow)
        self.assertEqual(len(c["results"]), 6)
        self.assertEqual(table.count(" vs gpt2_12l.onnx on "), 4)

    def test_many_gpus_run_down_the_table(self):
        # More GPUs than fit across (here 5): one row per GPU, the first model's latency and each
        # other model's latency and speed-up; the class and node deltas of the first GPU alone,
        # the rest in the JSON (every model on every GPU).
        out = os.path.join(self.tmp.name, "many.json")
        gpus = ["b200", "h100", "l4", "a100-80gb", "mi300x"]
        code, table, err = run("compare", self.base, self.shallow, self.narrow, "--gpu", ",".join(gpus), "--batch", "2",
                               "--seq", "256", "--json", out)
        self.assertEqual(code, 0, err)
        with open(out) as f:
            c = json.load(f)
        self.assertEqual(len(c["results"]), 15)
        lines = table.splitlines()
        self.assertRegex(lines[1], r"^memory GiB \(one GPU\): gpt2_12l\.onnx [0-9.]+, gpt2_6l\.onnx [0-9.]+, gpt2_512h\.onnx")
        self.assertRegex(lines[2], r"^gpu +gpt2_12l\.onnx ms +gpt2_6l\.onnx ms +speed-up +gpt2_512h\.onnx ms +speed-up$")
        for i, gpu in enumerate(gpus):
            row = lines[3 + i]
            self.assertTrue(row.startswith(gpu + " "), row)
            var = self.result(c, "gpt2_6l.onnx", gpu)
            self.assertIn("%.2fx (%.2f-%.2f)" % (var["speedup"], var["speedup_low"], var["speedup_high"]), row)
        self.assertEqual(table.count(" vs gpt2_12l.onnx on "), 2)  # the first GPU's, for each variant
        self.assertIn("the class and node deltas on the other 4 GPUs are in --json and --html", table)

    def test_many_gpus_run_down_the_generation_table(self):
        # --generate over four GPUs: one row per GPU, each model's TTFT / TPOT and tokens/s, the
        # second's speed-up in tokens/s as the JSON has it.
        out = os.path.join(self.tmp.name, "gen.json")
        a, b = (os.path.join(SOURCE, "tests", "data", n + ".json") for n in ("phi3_mini", "smollm3_3b"))
        gpus = ["h100", "l4", "b200", "mi300x"]
        code, table, err = run("compare", a, b, "--generate", "64:8", "--gpu", ",".join(gpus), "--json", out)
        self.assertEqual(code, 0, err)
        with open(out) as f:
            c = json.load(f)
        lines = table.splitlines()
        head = lines.index(next(l for l in lines if l.startswith("generation:"))) + 1
        self.assertRegex(lines[head], r"^gpu +phi3_mini\.json TTFT/TPOT ms +tokens/s +smollm3_3b\.json TTFT/TPOT ms +tokens/s +speed-up$")
        for i, gpu in enumerate(gpus):
            row = lines[head + 1 + i]
            self.assertTrue(row.startswith(gpu + " "), row)
            var = self.result(c, "smollm3_3b.json", gpu)
            self.assertIn("%.2fx" % var["tokens_per_s_speedup"], row)

    def test_bad_input(self):
        code, _, err = run("compare", self.base, "--gpu", "b200", "--batch", "1", "--seq", "8")
        self.assertEqual(code, 2)
        self.assertIn("at least two models", err)
        code, _, err = run("compare", self.base, "/nonexistent.onnx", "--gpu", "b200", "--batch", "1", "--seq", "8",
                           "--json", os.path.join(self.tmp.name, "never.json"))
        self.assertEqual(code, 2)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "never.json")))
        code, _, err = run("compare", self.base, self.shallow, "--batch", "1", "--seq", "8")
        self.assertEqual(code, 2)
        self.assertIn("--gpu", err)


if __name__ == "__main__":
    unittest.main()
