"""Every error path of the Python module: the exception the CLI's exit code maps to (2 ->
ValueError, 1 -> RuntimeError) with the CLI's one-line message; TypeError for wrong types."""
import json
import os
import tempfile
import unittest

from py_util import DEVICE_JSON, EXAMPLE, cli_error, neusight_onnx as n

OK = ("--gpu", "h100", "--batch", "1", "--seq", "8")
GOOD_DEVICE = {"Device": "Test GPU", "Dev_Mem": 16, "Mem_Bw": 320, "Num_Sm": 40, "Core_Per_SM": 64,
               "Freq": 1590, "SingleFLOPs": 8141, "L2Cache": 4}


class SameAsCli(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, content):
        p = os.path.join(self.dir, name)
        with open(p, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
        return p

    def assert_same(self, call, *cli_args, rename=None):
        """`call()` raises what the CLI run with `cli_args` reports; `rename` maps the CLI's
        name for the input (a file path) to the module's (e.g. 'model bytes')."""
        code, message = cli_error(*cli_args)
        if rename:
            message = message.replace(*rename)
        with self.assertRaises(ValueError if code == 2 else RuntimeError) as cm:
            call()
        self.assertIs(type(cm.exception), ValueError if code == 2 else RuntimeError)
        self.assertEqual(str(cm.exception), message)

    # --- the model -------------------------------------------------------------------------
    def test_model_files(self):
        missing = os.path.join(self.dir, "missing.onnx")
        self.assert_same(lambda: n.analyze(missing, "h100", batch=1, seq=8), missing, *OK)
        self.assert_same(lambda: n.analyze(self.dir, "h100", batch=1, seq=8), self.dir, *OK)

    def test_model_bytes(self):
        for name, content in (("empty.onnx", b""), ("junk.onnx", b"\x08\x07junk" * 50), ("text.onnx", b"hello\n")):
            with self.subTest(name=name):
                p = self.write(name, content)
                self.assert_same(lambda: n.analyze(content, "h100", batch=1, seq=8), p, *OK,
                                 rename=(p, "model bytes"))
        with open(EXAMPLE, "rb") as f:
            truncated = f.read()[:5000]
        p = self.write("truncated.onnx", truncated)
        self.assert_same(lambda: n.analyze(truncated, "h100", batch=1, seq=8), p, *OK, rename=(p, "model bytes"))

    # --- GPUs ------------------------------------------------------------------------------
    def test_unknown_gpu(self):
        self.assert_same(lambda: n.analyze(EXAMPLE, "h1000", batch=1, seq=8), EXAMPLE, "--gpu", "h1000",
                         "--batch", "1", "--seq", "8")
        self.assert_same(lambda: n.analyze(EXAMPLE, ["b200", "h1000"], batch=1, seq=8), EXAMPLE, "--gpu",
                         "b200,h1000", "--batch", "1", "--seq", "8")

    def test_device_json(self):
        missing = os.path.join(self.dir, "nope.json")
        self.assert_same(lambda: n.analyze(EXAMPLE, missing, batch=1, seq=8), EXAMPLE, "--gpu", missing,
                         "--batch", "1", "--seq", "8")
        cases = {"no_sm": {k: v for k, v in GOOD_DEVICE.items() if k != "Num_Sm"},
                 "negative": {**GOOD_DEVICE, "Mem_Bw": -5},
                 "wrong_type": {**GOOD_DEVICE, "Freq": "fast"},
                 "not_object": [1, 2, 3]}
        for name, device in cases.items():
            with self.subTest(device=name):
                p = self.write(name + ".json", json.dumps(device))
                self.assert_same(lambda: n.analyze(EXAMPLE, p, batch=1, seq=8), EXAMPLE, "--gpu", p,
                                 "--batch", "1", "--seq", "8")
                if isinstance(device, dict):  # the same dict, given directly
                    self.assert_same(lambda: n.analyze(EXAMPLE, device, batch=1, seq=8), EXAMPLE, "--gpu", p,
                                     "--batch", "1", "--seq", "8", rename=(p, "gpu dict"))

    # --- options ---------------------------------------------------------------------------
    def test_options(self):
        cases = [
            (dict(), ()),  # unbound dims
            (dict(batch=0, seq=8), ("--batch", "0", "--seq", "8")),
            (dict(batch=1, seq=-2), ("--batch", "1", "--seq", "-2")),
            (dict(batch=2**70, seq=8), ("--batch", str(2**70), "--seq", "8")),
            (dict(batch=1, dims={"sequence": -1}), ("--batch", "1", "--dim", "sequence=-1")),
            (dict(batch=1, seq=8, mode="bogus"), ("--batch", "1", "--seq", "8", "--mode", "bogus")),
            (dict(batch=1, seq=8, dtype="int16"), ("--batch", "1", "--seq", "8", "--dtype", "int16")),
            (dict(batch=1, seq=8, fusion="maybe"), ("--batch", "1", "--seq", "8", "--fusion", "maybe")),
            (dict(batch=1, seq=8, attention="flash"), ("--batch", "1", "--seq", "8", "--attention", "flash")),
            (dict(batch=1, seq=8, host_dispatch_us=-1), ("--batch", "1", "--seq", "8", "--host-dispatch-us", "-1.0")),
            (dict(batch=1, seq=8, timing="kernel", host_dispatch_us=5),
             ("--batch", "1", "--seq", "8", "--timing", "kernel", "--host-dispatch-us", "5.0")),
            (dict(batch=1, seq=8, timing="wall"), ("--batch", "1", "--seq", "8", "--timing", "wall")),
            (dict(batch=1, seq=8, predictor="oracle"), ("--batch", "1", "--seq", "8", "--predictor", "oracle")),
            (dict(batch=8, seq=8, mode="training", parallel="dp=0"),
             ("--batch", "8", "--seq", "8", "--mode", "training", "--parallel", "dp=0")),
            (dict(batch=8, seq=8, mode="training", parallel={"dp": 2, "xp": 2}),
             ("--batch", "8", "--seq", "8", "--mode", "training", "--parallel", "dp=2,xp=2")),
            (dict(batch=1, seq=8, link_bw=100), ("--batch", "1", "--seq", "8", "--link-bw", "100")),
            (dict(batch=8, seq=8, mode="training", parallel="dp=2", link_bw=-1),
             ("--batch", "8", "--seq", "8", "--mode", "training", "--parallel", "dp=2", "--link-bw", "-1.0")),
            (dict(batch=1, seq=8, weights=os.path.join("/nonexistent", "weights")),
             ("--batch", "1", "--seq", "8", "--weights", os.path.join("/nonexistent", "weights"))),
        ]
        for kwargs, flags in cases:
            with self.subTest(kwargs=kwargs):
                self.assert_same(lambda: n.analyze(EXAMPLE, "h100", **kwargs), EXAMPLE, "--gpu", "h100", *flags)

    def test_shapes_like_the_cli(self):
        # shapes= is the CLI's --shape: the same one-line errors (test_module: the same reports).
        for bad, flag in (({"input_ids": [1, -3]}, "input_ids=1x-3"), ({"no_such_input": [1, 8]}, "no_such_input=1x8"),
                          ({"input_ids": [1, 8, 2]}, "input_ids=1x8x2")):
            with self.subTest(shapes=bad):
                self.assert_same(lambda: n.analyze(EXAMPLE, "h100", shapes=bad), EXAMPLE, "--gpu", "h100", "--shape", flag)
        with self.assertRaises(TypeError):
            n.analyze(EXAMPLE, "h100", shapes=[1, 8])

    # --- other functions -------------------------------------------------------------------
    def test_from_config(self):
        cfg = self.write("cfg.json", json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4}))
        self.assert_same(lambda: n.from_config(cfg, "h100"), "--config", cfg, "--gpu", "h100")
        bad = self.write("bad.json", json.dumps({"model_type": "resnet"}))
        self.assert_same(lambda: n.from_config(bad, "h100", batch=1, seq=8), "--config", bad, *OK)
        self.assert_same(lambda: n.from_config({"model_type": "resnet"}, "h100", batch=1, seq=8), "--config", bad,
                         *OK, rename=(bad, "config"))
        self.assert_same(lambda: n.from_config(self.dir, "h100", batch=1, seq=8), "--config", self.dir, *OK)

    def test_generate(self):
        # The CLI's one-line errors for --generate: token counts, a training-only flag, a
        # model without a KV cache.
        cfg = self.write("cfg.json", json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                                  "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}))
        self.assert_same(lambda: n.generate(cfg, "h100", 0, 8), "--config", cfg, "--gpu", "h100", "--generate", "0:8")
        self.assert_same(lambda: n.generate(cfg, "h100", 8, 8, parallel="tp=2,ep=3"), "--config", cfg, "--gpu", "h100",
                         "--generate", "8:8", "--parallel", "tp=2,ep=3")
        self.assert_same(lambda: n.generate(EXAMPLE, "h100", 8, 8), EXAMPLE, "--gpu", "h100", "--generate", "8:8")
        with self.assertRaises(TypeError):
            n.generate(cfg, "h100", "8", 8)
        with self.assertRaises(TypeError):  # a number of ms, as link_bw is one of GB/s
            n.generate(cfg, "h100", 8, 8, tpot_slo="5")

    def test_compare(self):
        self.assert_same(lambda: n.compare([EXAMPLE], "h100", batch=1, seq=8), "compare", EXAMPLE, *OK)
        self.assert_same(lambda: n.compare([EXAMPLE, EXAMPLE], "h100", batch=1, seq=8, top=-1), "compare",
                         EXAMPLE, EXAMPLE, *OK, "--top", "-1")
        with self.assertRaisesRegex(ValueError, "^labels: 1 labels for 2 models$"):
            n.compare([EXAMPLE, EXAMPLE], "h100", batch=1, seq=8, labels=["a"])

    def test_kernels(self):
        bad = self.write("bad.csv", "OPName,Device,B,M,N,K\nlinear,Tesla T4,1,abc,3,4\n")
        out = os.path.join(self.dir, "out.csv")
        self.assert_same(lambda: n.kernels(bad, "t4"), "kernels", "--gpu", "t4", "--csv", bad, "--out", out)
        nodev = self.write("nodev.csv", "OPName,B,M,N,K\nlinear,1,2,3,4\n")
        self.assert_same(lambda: n.kernels(nodev, "from-row"), "kernels", "--gpu", "from-row", "--csv", nodev,
                         "--out", out)
        unknown = self.write("unknown.csv", "OPName,Device,B,M,N,K\nlinear,Tesla Z9,1,2,3,4\n")
        self.assert_same(lambda: n.kernels(unknown, "from-row"), "kernels", "--gpu", "from-row", "--csv",
                         unknown, "--out", out)
        self.assert_same(lambda: n.kernels(unknown, "from-row", predictor="oracle"), "kernels", "--gpu",
                         "from-row", "--csv", unknown, "--out", out, "--predictor", "oracle")
        self.assert_same(lambda: n.kernels(unknown, "from-row", devices=self.dir + "/none"), "kernels", "--gpu",
                         "from-row", "--csv", unknown, "--out", out, "--devices", self.dir + "/none")
        # Rows as dicts name the row by its index.
        with self.assertRaisesRegex(ValueError, r"^rows\[0\]: device 'Tesla Z9' is not in the database$"):
            n.kernels([{"OPName": "linear", "Device": "Tesla Z9", "B": 1, "M": 2, "N": 3, "K": 4}], "from-row")
        with self.assertRaisesRegex(ValueError, r"^rows\[1\]: columns differ from rows\[0\]'s$"):
            n.kernels([{"OPName": "linear", "B": 1, "M": 2, "N": 3, "K": 4}, {"OPName": "linear"}], "h100")
        with self.assertRaisesRegex(ValueError, r"^rows\[0\]: unknown op 'conv9'$"):
            n.kernels([{"OPName": "conv9", "B": 1}], "h100")
        with self.assertRaisesRegex(ValueError, "^rows: no OPName column$"):
            n.kernels([{"Op": "linear"}], "h100")

    def test_writers(self):
        r = n.analyze(EXAMPLE, "h100", batch=1, seq=8)
        for target in (self.dir, os.path.join(self.dir, "no", "such", "r.html")):
            with self.subTest(target=target):
                self.assert_same(lambda: n.write_html(r, target), EXAMPLE, *OK, "--html", target)
                self.assert_same(lambda: n.write_annotated(EXAMPLE, r, target), EXAMPLE, *OK, "--out", target)
        with self.assertRaisesRegex(ValueError, "^report: expected a report returned by analyze"):
            n.write_html(dict(r), os.path.join(self.dir, "r.html"))
        other = n.from_config({"model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 4, "vocab_size": 100,
                               "n_positions": 64}, "h100", batch=1, seq=8)
        with self.assertRaisesRegex(ValueError, "^write_annotated: the report is not of this model"):
            n.write_annotated(EXAMPLE, other, os.path.join(self.dir, "a.onnx"))
        gen = n.generate({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                          "num_attention_heads": 4, "vocab_size": 100}, "h100", 16, 4)
        with self.assertRaisesRegex(ValueError, "^write_annotated: a generate\\(\\) report"):
            n.write_annotated(EXAMPLE, gen, os.path.join(self.dir, "a.onnx"))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "a.onnx")))


class WrongTypes(unittest.TestCase):
    def test_type_errors(self):
        cases = [
            (lambda: n.analyze(3, "h100", batch=1, seq=8), "^model: expected a path, bytes or an onnx.ModelProto, got int$"),
            (lambda: n.analyze(EXAMPLE, 3, batch=1, seq=8), "^gpu: expected a GPU name"),
            (lambda: n.analyze(EXAMPLE, "h100", batch="1", seq=8), "^batch: expected an int, got str$"),
            (lambda: n.analyze(EXAMPLE, "h100", batch=True, seq=8), "^batch: expected an int, got bool$"),
            (lambda: n.analyze(EXAMPLE, "h100", batch=1, seq=8.0), "^seq: expected an int, got float$"),
            (lambda: n.analyze(EXAMPLE, "h100", batch=1, dims=[("sequence", 8)]), "^dims: expected a dict"),
            (lambda: n.analyze(EXAMPLE, "h100", batch=1, seq=8, mode=None), "^mode: expected a str, got NoneType$"),
            (lambda: n.analyze(EXAMPLE, "h100", batch=1, seq=8, parallel=4), "^parallel: expected a str"),
            (lambda: n.from_config(42, "h100", batch=1, seq=8), "^config: expected a config.json path or a dict"),
            (lambda: n.compare(EXAMPLE, "h100", batch=1, seq=8), "^models: expected a list of models, got str$"),
            (lambda: n.kernels(5, "h100"), "^rows: expected a CSV path or a list of dicts, got int$"),
            (lambda: n.kernels([5], "h100"), r"^rows\[0\]: expected a dict of column: value, got int$"),
        ]
        for call, pattern in cases:
            with self.subTest(pattern=pattern):
                with self.assertRaisesRegex(TypeError, pattern):
                    call()

    def test_empty_gpu_list(self):
        with self.assertRaisesRegex(ValueError, "^gpu: the GPU list is empty$"):
            n.analyze(EXAMPLE, [], batch=1, seq=8)


if __name__ == "__main__":
    unittest.main()
