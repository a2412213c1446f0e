"""`neusight-onnx kernels` and `train` through the real binary (CLI_CONTRACT.md, per-kernel evaluation)."""
import csv
import json
import os
import shutil
import tempfile
import unittest

from cli_util import fixture, run

TEST = fixture("kernels", "test")


def sample_csv(path, src, devices, per_device, extra=None):
    """Writes the first `per_device` rows of each device in `devices` from a test CSV (fixtures)."""
    with open(os.path.join(TEST, src), newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    dev = header.index("Device")
    out, seen = [], {}
    for r in body:
        if r[dev] in devices and seen.get(r[dev], 0) < per_device:
            seen[r[dev]] = seen.get(r[dev], 0) + 1
            out.append(r)
    if extra:
        header = header + [extra[0]]
        out = [r + [extra[1]] for r in out]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(out)
    return header, out


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class Kernels(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_rows_of_the_chosen_gpu_with_contract_columns(self):
        src = os.path.join(self.dir, "in.csv")
        header, rows = sample_csv(src, "linear.csv", {"NVIDIA A100 80GB PCIe", "Tesla T4"}, 20)
        out = os.path.join(self.dir, "out.csv")
        code, _, err = run("kernels", "--gpu", "a100-80gb", "--csv", src, "--out", out)
        self.assertEqual(code, 0, err)
        got = read(out)
        self.assertEqual(len(got), 20)  # the T4 rows are skipped, and the warning says so
        self.assertIn("20 of 40 rows ran on another GPU than NVIDIA A100 80GB PCIe and were skipped", err)
        with open(out, newline="") as f:
            self.assertEqual(next(csv.reader(f)), header + ["kernel_class", "pred_latency_ms", "tile", "tiles", "waves",
                                                            "pred_low_ms", "pred_high_ms"])
        errs = []
        for r in got:
            self.assertEqual(r["Device"], "NVIDIA A100 80GB PCIe")
            self.assertEqual(r["kernel_class"], "gemm")
            self.assertRegex(r["tile"], r"^\d+x\d+$")
            self.assertGreater(int(r["tiles"]), 0)
            self.assertGreater(int(r["waves"]), 0)
            pred, meas = float(r["pred_latency_ms"]), float(r["Latency"])
            self.assertGreater(pred, 0)
            # The 80% interval brackets the prediction and is never degenerate.
            self.assertLess(float(r["pred_low_ms"]), pred)
            self.assertGreater(float(r["pred_high_ms"]), pred)
            errs.append(abs(pred - meas) / meas)
        self.assertLess(sum(errs) / len(errs), 0.3)

    def test_latency_column_is_never_read(self):
        src = os.path.join(self.dir, "in.csv")
        header, rows = sample_csv(src, "softmax.csv", {"Tesla T4"}, 10)
        lat = header.index("Latency")
        blank = os.path.join(self.dir, "blank.csv")
        with open(blank, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows([r[:lat] + ["999"] + r[lat + 1:] for r in rows])
        a, b = os.path.join(self.dir, "a.csv"), os.path.join(self.dir, "b.csv")
        self.assertEqual(run("kernels", "--gpu", "t4", "--csv", src, "--out", a)[0], 0)
        self.assertEqual(run("kernels", "--gpu", "t4", "--csv", blank, "--out", b)[0], 0)
        self.assertEqual([r["pred_latency_ms"] for r in read(a)], [r["pred_latency_ms"] for r in read(b)])
        self.assertTrue(all(r["tile"] == r["H"] for r in read(a)))  # row length for softmax

    def test_from_row_and_devices_dir(self):
        src = os.path.join(self.dir, "in.csv")
        sample_csv(src, "elem.csv", {"Tesla P4", "NVIDIA A100 80GB PCIe"}, 5)
        out = os.path.join(self.dir, "out.csv")
        code, _, err = run("kernels", "--gpu", "from-row", "--csv", src, "--out", out)
        self.assertEqual(code, 0, err)
        got = read(out)
        self.assertEqual(len(got), 10)
        self.assertEqual({r["kernel_class"] for r in got}, {"elementwise"})
        # --devices DIR: a renamed copy of the T4 spec answers for a device name the database lacks.
        devdir = os.path.join(self.dir, "devices")
        os.mkdir(devdir)
        with open(fixture("device_configs", "Tesla_T4.json")) as f:
            spec = json.load(f)
        spec["Device"] = "Lab GPU"
        with open(os.path.join(devdir, "lab.json"), "w") as f:
            json.dump(spec, f)
        lab = os.path.join(self.dir, "lab.csv")
        with open(src, newline="") as f:
            rows = list(csv.reader(f))
        dev = rows[0].index("Device")
        with open(lab, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(rows[0])
            w.writerows([r[:dev] + ["Lab GPU"] + r[dev + 1:] for r in rows[1:]])
        code, _, err = run("kernels", "--gpu", "from-row", "--devices", devdir, "--csv", lab, "--out", out)
        self.assertEqual(code, 0, err)
        self.assertEqual(len(read(out)), 10)
        code, _, err = run("kernels", "--gpu", "from-row", "--csv", lab, "--out", os.path.join(self.dir, "x.csv"))
        self.assertEqual(code, 2)
        self.assertIn("Lab GPU", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "x.csv")))

    def test_dtype_column(self):
        src = os.path.join(self.dir, "in.csv")
        sample_csv(src, "linear.csv", {"NVIDIA A100 80GB PCIe"}, 10, extra=("dtype", "fp16"))
        fp32 = os.path.join(self.dir, "fp32.csv")
        sample_csv(fp32, "linear.csv", {"NVIDIA A100 80GB PCIe"}, 10)
        a, b = os.path.join(self.dir, "a.csv"), os.path.join(self.dir, "b.csv")
        self.assertEqual(run("kernels", "--gpu", "a100-80gb", "--csv", src, "--out", a)[0], 0)
        self.assertEqual(run("kernels", "--gpu", "a100-80gb", "--csv", fp32, "--out", b)[0], 0)
        half = sum(float(r["pred_latency_ms"]) for r in read(a))
        single = sum(float(r["pred_latency_ms"]) for r in read(b))
        self.assertLess(half, single)

    def test_bad_input(self):
        out = os.path.join(self.dir, "out.csv")
        code, _, err = run("kernels", "--gpu", "t4", "--csv", os.path.join(self.dir, "missing.csv"), "--out", out)
        self.assertEqual(code, 2)
        self.assertIn("missing.csv", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        bad = os.path.join(self.dir, "bad.csv")
        with open(bad, "w") as f:
            f.write("OPName,Device,B,M,N,K\nlinear,Tesla T4,1,abc,3,4\n")
        code, _, err = run("kernels", "--gpu", "t4", "--csv", bad, "--out", out)
        self.assertEqual(code, 2)
        self.assertIn("bad.csv", err)
        code, _, err = run("kernels", "--gpu", "no-such-gpu", "--csv", bad, "--out", out)
        self.assertEqual(code, 2)
        self.assertFalse(os.path.exists(out))

    def test_roofline_predictor_flag(self):
        src = os.path.join(self.dir, "in.csv")
        sample_csv(src, "bmm.csv", {"Tesla T4"}, 10)
        a, b = os.path.join(self.dir, "a.csv"), os.path.join(self.dir, "b.csv")
        self.assertEqual(run("kernels", "--gpu", "t4", "--csv", src, "--out", a)[0], 0)
        self.assertEqual(run("kernels", "--gpu", "t4", "--csv", src, "--out", b, "--predictor", "roofline")[0], 0)
        for x, y in zip(read(a), read(b)):
            self.assertGreaterEqual(float(x["pred_latency_ms"]), float(y["pred_latency_ms"]) * (1 - 1e-9))

    def test_published_formulation_and_timing_flags(self):
        # --predictor neusight-paper predicts with the shipped published-formulation weights;
        # --timing kernel never exceeds eager timing (it strips the per-launch dispatch).
        src = os.path.join(self.dir, "in.csv")
        sample_csv(src, "bmm.csv", {"Tesla T4"}, 10)
        a, b, c = (os.path.join(self.dir, n) for n in ("a.csv", "b.csv", "c.csv"))
        code, _, err = run("kernels", "--gpu", "t4", "--csv", src, "--out", a, "--predictor", "neusight-paper")
        self.assertEqual(code, 0, err)
        self.assertEqual(run("kernels", "--gpu", "t4", "--csv", src, "--out", b)[0], 0)
        self.assertEqual(run("kernels", "--gpu", "t4", "--csv", src, "--out", c, "--timing", "kernel")[0], 0)
        paper, eager, kernel = read(a), read(b), read(c)
        self.assertEqual(len(paper), 10)
        self.assertNotEqual([r["pred_latency_ms"] for r in paper], [r["pred_latency_ms"] for r in eager])
        for x, y in zip(kernel, eager):
            self.assertLessEqual(float(x["pred_latency_ms"]), float(y["pred_latency_ms"]) * (1 + 1e-9))
        for flag, value in (("--timing", "wall"), ("--predictor", "neusight-papr")):
            out = os.path.join(self.dir, "bad.csv")
            code, _, err = run("kernels", "--gpu", "t4", "--csv", src, "--out", out, flag, value)
            self.assertEqual(code, 2)
            self.assertIn(flag, err)
            self.assertEqual(len(err.strip().splitlines()), 1)
            self.assertFalse(os.path.exists(out))

    def test_default_timing_follows_the_rows_dtype(self):
        # Without --timing, FP32 rows are predicted in eager timing (neusight-data's PyTorch
        # microbenchmarks) and rows of other dtypes in kernel timing (profiler durations,
        # back-to-back library calls), row by row in one mixed file.
        src = os.path.join(self.dir, "in.csv")
        with open(src, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["OPName", "Latency", "Device", "B", "M", "N", "K", "dtype"])
            for dtype in ("fp32", "fp16", "bf16", "fp32", "tf32"):
                w.writerow(["linear", "0", "NVIDIA H100 80GB HBM3", "1", "16", "4096", "4096", dtype])
        outs = {}
        for name, extra in (("default", ()), ("eager", ("--timing", "eager")), ("kernel", ("--timing", "kernel"))):
            outs[name] = os.path.join(self.dir, name + ".csv")
            code, _, err = run("kernels", "--gpu", "h100", "--csv", src, "--out", outs[name], *extra)
            self.assertEqual(code, 0, err)
        default, eager, kernel = (read(outs[n]) for n in ("default", "eager", "kernel"))
        for d, e, k in zip(default, eager, kernel):
            expected = e if d["dtype"] == "fp32" else k
            self.assertEqual(d["pred_latency_ms"], expected["pred_latency_ms"], d["dtype"])
        # A 16-row projection is a few microseconds of GPU time, tens of them timed from PyTorch.
        self.assertLess(float(kernel[1]["pred_latency_ms"]), 0.5 * float(eager[1]["pred_latency_ms"]))


class Train(unittest.TestCase):
    def test_small_training_run(self):
        with tempfile.TemporaryDirectory() as d:
            code, out, err = run("train", "--data", fixture(), "--out", d, "--devices",
                                 "Tesla T4,Tesla P4", "--ops", "softmax,ln", "--classes", "softmax,layernorm",
                                 "--max-rows", "200", "--epochs", "5", "--hidden", "16,layernorm=8", "--layers", "2",
                                 "--ensemble", "1,softmax=2")
            self.assertEqual(code, 0, err)
            self.assertIn("softmax", out)
            with open(os.path.join(d, "MANIFEST")) as f:
                manifest = f.read()
            self.assertIn("hidden=16,layernorm=8", manifest)
            self.assertIn("ensemble=1,softmax=2", manifest)
            # Per-class sizes: softmax two networks of 16 units, layernorm one of 8.
            with open(os.path.join(d, "weights.json")) as f:
                classes = json.load(f)["classes"]
            self.assertEqual(len(classes["softmax"]["nets"]), 2)
            self.assertEqual(len(classes["layernorm"]["nets"]), 1)
            self.assertEqual(classes["softmax"]["nets"][0]["layers"][0]["out"], 16)
            self.assertEqual(classes["layernorm"]["nets"][0]["layers"][0]["out"], 8)
            self.assertIn("kernels/train/softmax/Tesla_T4.csv", manifest)
            self.assertNotIn("A100", manifest.split("data files")[1])
            self.assertRegex(manifest, r"[0-9a-f]{64}  kernels/train/ln/Tesla_P4.csv")
            # The trained weights predict through `kernels --weights`.
            src = os.path.join(d, "in.csv")
            sample_csv(src, "softmax.csv", {"Tesla T4"}, 5)
            code, _, err = run("kernels", "--gpu", "t4", "--csv", src, "--out", os.path.join(d, "o.csv"),
                               "--weights", d)
            self.assertEqual(code, 0, err)

    def test_training_takes_the_test_rows_when_asked(self):
        # --test-rows: the chosen GPUs' rows of kernels/test (one CSV per class for every GPU)
        # join their training rows; the other GPUs' test rows stay out.
        counts = []
        for extra in ((), ("--test-rows",)):
            with tempfile.TemporaryDirectory() as d:
                code, out, err = run("train", "--data", fixture(), "--out", d, "--devices", "Tesla T4",
                                     "--ops", "softmax", "--classes", "softmax", "--max-rows", "100", "--epochs", "2",
                                     "--hidden", "8", "--layers", "1", *extra)
                self.assertEqual(code, 0, err)
                counts.append(int(out.split("softmax")[1].split()[0]))
                with open(os.path.join(d, "MANIFEST")) as f:
                    manifest = f.read()
                self.assertEqual("kernels/test/softmax.csv" in manifest, bool(extra))
                self.assertEqual("test_rows=1" in manifest, bool(extra))
        with open(fixture("kernels", "test", "softmax.csv"), newline="") as f:
            t4 = sum(1 for r in csv.DictReader(f) if r["Device"] == "Tesla T4")
        self.assertGreater(t4, 0)
        self.assertEqual(counts[1] - counts[0], min(t4, 100))

    def test_training_leaves_out_a_sweep_that_contradicts_the_test_rows(self):
        # With --test-rows, a GPU's GEMM sweep (kernels/train/OP) whose latencies at the test
        # rows' shapes are more than 2x theirs is left out and named in the MANIFEST.
        with open(os.path.join(TEST, "linear.csv"), newline="") as f:
            rows = list(csv.reader(f))
        header, body = rows[0], [r for r in rows[1:] if r[rows[0].index("Device")] == "Tesla T4"][:40]
        self.assertGreater(len(body), 5)
        lat = header.index("Latency")
        for factor, left_out in ((3.0, True), (1.1, False)):
            with tempfile.TemporaryDirectory() as data, tempfile.TemporaryDirectory() as out:
                os.makedirs(os.path.join(data, "kernels", "train", "linear"))
                os.makedirs(os.path.join(data, "kernels", "test"))
                for name, scale in ((os.path.join("train", "linear", "Tesla_T4.csv"), factor),
                                    (os.path.join("test", "linear.csv"), 1.0)):
                    with open(os.path.join(data, "kernels", name), "w", newline="") as f:
                        w = csv.writer(f)
                        w.writerow(header)
                        for r in body:
                            w.writerow(r[:lat] + [str(float(r[lat]) * scale)] + r[lat + 1:])
                code, _, err = run("train", "--data", data, "--out", out, "--devices", "Tesla T4", "--ops", "linear",
                                   "--classes", "gemm", "--epochs", "1", "--hidden", "8", "--layers", "1",
                                   "--test-rows", "--quiet")
                self.assertEqual(code, 0, err)
                with open(os.path.join(out, "MANIFEST")) as f:
                    manifest = f.read()
                self.assertEqual("left out" in manifest, left_out, manifest)
                if left_out:
                    self.assertRegex(manifest.split("left out")[1], r"kernels/train/linear/Tesla_T4.csv .*3\.00")

    def test_refuses_unseen_gpus(self):
        with tempfile.TemporaryDirectory() as d:
            code, _, err = run("train", "--data", fixture(), "--out", d, "--devices",
                               "NVIDIA A100 80GB PCIe")
            self.assertEqual(code, 2)
            self.assertIn("--devices", err)

    def test_rejects_bad_per_class_sizes(self):
        with tempfile.TemporaryDirectory() as d:
            for flag, value in (("--hidden", "16,bogus=3"), ("--hidden", "0"), ("--ensemble", "2,gemm=x")):
                code, _, err = run("train", "--data", fixture(), "--out", d, flag, value)
                self.assertEqual(code, 2, (flag, value))
                self.assertIn(flag, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    unittest.main()
