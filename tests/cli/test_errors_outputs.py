"""All outputs or none: a run that fails while writing one output leaves no other output.

Every output (--json, --html, --csv, --out; compare's --json/--html; export's model and its
weights stub) goes to a temporary file beside its destination and is renamed into place
only when all of them were written. These tests make a later output fail after an earlier
one could be written and check that nothing appears, earlier files keep their content and
no temporary file is left.
"""
import csv
import io
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from cli_util import BIN, EXAMPLE, SOURCE, fixture, run

BASE = [EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "8", "--quiet"]


class AllOrNothing(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.out = os.path.join(self.dir, "out")
        os.mkdir(self.out)

    def tearDown(self):
        self._tmp.cleanup()

    def p(self, name):
        return os.path.join(self.out, name)

    def assert_one_error(self, rc, err, needle):
        self.assertEqual(rc, 1, err)
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("neusight-onnx: error: "), lines[0])
        self.assertIn(needle, lines[0])

    def test_later_output_unwritable_leaves_no_earlier_output(self):
        bad = os.path.join(self.dir, "missing", "r.csv")
        for later in (["--csv", bad], ["--out", bad.replace(".csv", ".onnx")], ["--html", bad.replace(".csv", ".html")]):
            with self.subTest(later=later[0]):
                earlier = ["--csv", self.p("r.csv")] if later[0] == "--html" else ["--html", self.p("r.html")]
                rc, _, err = run(*BASE, "--json", self.p("r.json"), *earlier, *later)
                self.assert_one_error(rc, err, later[1])
                self.assertEqual(os.listdir(self.out), [], "an earlier output was left behind")

    def test_later_output_is_a_directory(self):
        rc, _, err = run(*BASE, "--json", self.p("r.json"), "--out", self.p("a.onnx"), "--csv", self.dir)
        self.assert_one_error(rc, err, self.dir)
        self.assertEqual(os.listdir(self.out), [])

    def test_failed_run_keeps_earlier_files(self):
        for name in ("r.json", "r.csv"):
            with open(self.p(name), "w") as f:
                f.write("old " + name)
        rc, _, err = run(*BASE, "--json", self.p("r.json"), "--csv", self.p("r.csv"),
                         "--html", os.path.join(self.dir, "missing", "r.html"))
        self.assert_one_error(rc, err, "r.html")
        self.assertEqual(sorted(os.listdir(self.out)), ["r.csv", "r.json"])
        for name in ("r.json", "r.csv"):
            with open(self.p(name)) as f:
                self.assertEqual(f.read(), "old " + name)

    def test_success_writes_all_and_no_temporaries(self):
        with open(self.p("r.json"), "w") as f:
            f.write("old")
        rc, _, err = run(*BASE, "--json", self.p("r.json"), "--csv", self.p("r.csv"), "--html", self.p("r.html"),
                         "--out", self.p("a.onnx"))
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(os.listdir(self.out)), ["a.onnx", "r.csv", "r.html", "r.json"])
        with open(self.p("r.json")) as f:
            self.assertIn("e2e_latency_ms", json.load(f))

    def test_compare_outputs_all_or_nothing(self):
        rc, _, err = run("compare", EXAMPLE, EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "8", "--quiet",
                         "--json", self.p("c.json"), "--html", os.path.join(self.dir, "missing", "c.html"))
        self.assert_one_error(rc, err, "c.html")
        self.assertEqual(os.listdir(self.out), [])

    def test_export_unwritable_leaves_nothing(self):
        cfg = os.path.join(self.dir, "cfg.json")
        with open(cfg, "w") as f:
            json.dump({"model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 2, "n_positions": 32,
                       "vocab_size": 100}, f)
        rc, _, err = run("export", "--config", cfg, "-o", self.out)
        self.assertEqual(rc, 1, err)
        self.assertEqual(os.listdir(self.out), [])
        rc, _, err = run("export", "--config", cfg, "-o", self.p("m.onnx"))
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(os.listdir(self.out)), ["m.onnx", "m.weights"])

    def test_non_regular_destination_is_written_directly(self):
        # /dev/stdout cannot be replaced by a rename; it is written in place at the end.
        rc, out, err = run(*BASE, "--json", "/dev/stdout")
        self.assertEqual(rc, 0, err)
        self.assertIn("e2e_latency_ms", json.loads(out))


class StandardOutput(unittest.TestCase):
    """'-' as a text output's path writes it to standard output, the table left out, and no
    file named '-' appears."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def run_in_tmp(self, *args):
        exe = os.path.abspath(BIN) if os.sep in BIN else BIN  # it runs in another folder
        p = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=600, cwd=self.dir)
        return p.returncode, p.stdout, p.stderr

    def test_each_text_output_alone_on_stdout(self):
        model = os.path.abspath(EXAMPLE)
        base = [model, "--gpu", "b200", "--batch", "1", "--seq", "8"]
        for flag in ("--json", "--csv", "--html"):
            with self.subTest(flag=flag):
                rc, out, err = self.run_in_tmp(*base, flag, "-", "--json" if flag != "--json" else "--csv",
                                               "r.other")
                self.assertEqual(rc, 0, err)
                self.assertEqual(sorted(os.listdir(self.dir)), ["r.other"])
                os.unlink(os.path.join(self.dir, "r.other"))
                if flag == "--json":
                    self.assertIn("e2e_latency_ms", json.loads(out))  # the whole stdout is the report
                elif flag == "--csv":
                    rows = list(csv.DictReader(io.StringIO(out)))
                    self.assertGreater(len(rows), 10)
                    self.assertIn("latency_ms", rows[0])
                else:
                    self.assertTrue(out.lstrip().startswith("<!DOCTYPE html>"), out[:80])
                    self.assertTrue(out.rstrip().endswith("</html>"), out[-80:])

    def test_generate_and_compare_json_on_stdout(self):
        model = os.path.abspath(EXAMPLE)
        rc, out, err = self.run_in_tmp("compare", model, model, "--gpu", "b200", "--batch", "1", "--seq", "8",
                                       "--json", "-")
        self.assertEqual(rc, 0, err)
        json.loads(out)
        cfg = os.path.join(self.dir, "cfg.json")
        with open(cfg, "w") as f:
            json.dump({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2,
                       "intermediate_size": 128, "vocab_size": 100}, f)
        rc, out, err = self.run_in_tmp("--config", cfg, "--generate", "8:4", "--gpu", "b200", "--json", "-")
        self.assertEqual(rc, 0, err)
        json.loads(out)
        self.assertEqual(os.listdir(self.dir), ["cfg.json"])

    def test_kernels_csv_on_stdout(self):
        src = os.path.abspath(fixture("kernels", "test", "linear.csv"))
        rc, out, err = self.run_in_tmp("kernels", "--gpu", "from-row", "--csv", src, "--out", "-")
        self.assertEqual(rc, 0, err)
        rows = list(csv.DictReader(io.StringIO(out)))
        self.assertGreater(len(rows), 0)
        self.assertIn("pred_latency_ms", rows[0])
        self.assertEqual(os.listdir(self.dir), [])

    def test_kernels_read_standard_input(self):
        src = os.path.abspath(fixture("kernels", "test", "linear.csv"))
        with open(src) as f:
            text = f.read()
        exe = os.path.abspath(BIN) if os.sep in BIN else BIN
        p = subprocess.run([exe, "kernels", "--gpu", "from-row", "--csv", "-", "--out", "-"], input=text,
                           capture_output=True, text=True, timeout=600, cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        want = self.run_in_tmp("kernels", "--gpu", "from-row", "--csv", src, "--out", "-")[1]
        self.assertEqual(p.stdout, want)
        p = subprocess.run([exe, "kernels", "--gpu", "from-row", "--csv", "-", "--out", "-"],
                           input="OPName,Device,B,M,N,K\nlinear,Tesla T4,1,x,2,3\n", capture_output=True, text=True,
                           timeout=600, cwd=self.dir)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stdout, "")
        self.assertTrue(p.stderr.startswith("neusight-onnx: error: standard input:"), p.stderr)

    def test_outputs_on_one_file_or_on_an_input_are_one_error(self):
        # Two outputs on one file would keep one; an output on the model it is computed from
        # would replace it; a flag given twice with different values would drop one.
        model = os.path.join(self.dir, "m.onnx")
        shutil.copy(os.path.abspath(EXAMPLE), model)
        with open(model, "rb") as f:
            before = f.read()
        base = [model, "--gpu", "b200", "--batch", "1", "--seq", "8"]
        cases = [
            (["--json", "same.out", "--csv", "./same.out"], "write the same file"),
            (["--out", "m.onnx"], "would overwrite an input of this run"),
            (["--json", model], "would overwrite an input of this run"),
            (["--html", "a.html", "--html", "b.html"], "--html: given twice with different values"),
            (["--dim", "batch=2", "--dim", "batch=3"], "--dim batch: given twice with different values (2 and 3)"),
        ]
        for extra, needle in cases:
            with self.subTest(extra=extra):
                rc, out, err = self.run_in_tmp(*base, *extra)
                self.assertEqual(rc, 2, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(needle, err)
                self.assertEqual(sorted(os.listdir(self.dir)), ["m.onnx"])
        with open(model, "rb") as f:
            self.assertEqual(f.read(), before)
        rc, _, err = self.run_in_tmp("export", "--config", os.path.join(SOURCE, "examples", "gpt2-small.json"), "-o",
                                     os.path.join(SOURCE, "examples", "gpt2-small.json"))
        self.assertEqual(rc, 2, err)
        self.assertIn("would overwrite an input", err)
        rc, _, err = self.run_in_tmp(*base, "--batch", "1", "--quiet")  # the same value again: fine
        self.assertEqual(rc, 0, err)

    def test_two_outputs_or_a_binary_one_on_stdout_are_one_error(self):
        model = os.path.abspath(EXAMPLE)
        base = [model, "--gpu", "b200", "--batch", "1", "--seq", "8"]
        for extra in (["--json", "-", "--csv", "-"], ["--out", "-"], ["--json", "r.json", "--out", "-"]):
            with self.subTest(extra=extra):
                rc, out, err = self.run_in_tmp(*base, *extra)
                self.assertEqual(rc, 2, err)  # a usage error, found before any work
                self.assertEqual(out, "")
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn("standard output", err)
                self.assertEqual(os.listdir(self.dir), [])


if __name__ == "__main__":
    unittest.main()
