"""The failure battery: every way a user or a broken exporter can hand the CLI bad input.

Each case must exit 2 (input) or 1 (runtime) with exactly one line on stderr that names the
culprit, and must leave no output file (not even a temporary one) behind. Unknown ops are
the one non-failure here: the run continues with a single warning that lists them.
"""
import json
import os
import random
import tempfile
import unittest

import onnx
from onnx import TensorProto, helper

from cli_util import EXAMPLE, run

# 2^62 is the largest dim the tool accepts; 2^62 + 1 must be refused.
BIG = 1 << 62


class Battery(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.outdir = os.path.join(self.dir, "out")
        os.mkdir(self.outdir)

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, data):
        p = self.path(name)
        with open(p, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return p

    def assert_fails(self, *args, code=2, needle="", outputs=True):
        """Runs the CLI (asking for every output file when `outputs`) and checks the failure."""
        extra = []
        if outputs:
            extra = ["--json", os.path.join(self.outdir, "r.json"), "--csv", os.path.join(self.outdir, "r.csv"),
                     "--out", os.path.join(self.outdir, "a.onnx"), "--quiet"]
        rc, out, err = run(*args, *extra)
        self.assertEqual(rc, code, f"args={args} stdout={out[:500]} stderr={err}")
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, f"expected one stderr line, got: {err!r}")
        self.assertTrue(lines[0].startswith("neusight-onnx: error: "), lines[0])
        self.assertIn(needle, lines[0])
        self.assertNotIn("internal error", lines[0])
        self.assertEqual(os.listdir(self.outdir), [], "partial output left behind")
        return lines[0]

    # --- bad model bytes -------------------------------------------------------------------
    def test_empty_file(self):
        p = self.write("empty.onnx", b"")
        self.assert_fails(p, "--gpu", "b200", needle=p)

    def test_truncated_model(self):
        with open(EXAMPLE, "rb") as f:
            data = f.read()
        for cut in (1, 7, len(data) // 3, len(data) // 2, len(data) - 1):
            p = self.write(f"trunc{cut}.onnx", data[:cut])
            self.assert_fails(p, "--gpu", "b200", "--batch", "1", "--seq", "8", needle=p)

    def test_random_bytes(self):
        rng = random.Random(1234)
        for i in range(8):
            p = self.write(f"rand{i}.onnx", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))))
            self.assert_fails(p, "--gpu", "b200", "--batch", "1", "--seq", "8", needle=p)

    def test_text_file(self):
        p = self.write("model.onnx", "ir_version: 8\ngraph { }\n")
        self.assert_fails(p, "--gpu", "b200", needle=p)

    def test_missing_path(self):
        self.assert_fails(self.path("nope.onnx"), "--gpu", "b200", needle="nope.onnx")

    def test_directory_path(self):
        self.assert_fails(self.dir, "--gpu", "b200", needle="directory")

    def test_cyclic_graph(self):
        x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2])
        y = helper.make_tensor_value_info("B", TensorProto.FLOAT, [2, 2])
        nodes = [helper.make_node("Add", ["X", "B"], ["A"], name="a"),
                 helper.make_node("Relu", ["A"], ["B"], name="b")]
        m = helper.make_model(helper.make_graph(nodes, "cyc", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
        p = self.path("cycle.onnx")
        onnx.save(m, p)
        self.assert_fails(p, "--gpu", "b200", needle="cycle")

    def test_self_loop(self):
        x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2])
        y = helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 2])
        nodes = [helper.make_node("Add", ["X", "A"], ["A"], name="selfloop")]
        m = helper.make_model(helper.make_graph(nodes, "cyc", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
        p = self.path("self.onnx")
        onnx.save(m, p)
        self.assert_fails(p, "--gpu", "b200", needle="cycle")

    def test_tensor_produced_twice(self):
        x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2])
        y = helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 2])
        nodes = [helper.make_node("Relu", ["X"], ["A"], name="r1"), helper.make_node("Neg", ["X"], ["A"], name="r2")]
        m = helper.make_model(helper.make_graph(nodes, "dup", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
        p = self.path("dup.onnx")
        onnx.save(m, p)
        self.assert_fails(p, "--gpu", "b200", needle="twice")

    def test_deeply_nested_subgraphs(self):
        # 300 nested If bodies: recursion must be bounded (an input error, never a stack overflow).
        inner = helper.make_graph([helper.make_node("Identity", ["X"], ["Z0"], name="leaf")], "g0", [],
                                  [helper.make_tensor_value_info("Z0", TensorProto.FLOAT, [2])])
        for depth in range(1, 300):
            cond = helper.make_node("Constant", [], [f"c{depth}"], name=f"c{depth}",
                                    value=helper.make_tensor("v", TensorProto.BOOL, [], [True]))
            # One branch only, so the file grows linearly with depth.
            iff = helper.make_node("If", [f"c{depth}"], [f"Z{depth}"], name=f"if{depth}", then_branch=inner)
            inner = helper.make_graph([cond, iff], f"g{depth}", [],
                                      [helper.make_tensor_value_info(f"Z{depth}", TensorProto.FLOAT, [2])])
        x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
        top = helper.make_graph(list(inner.node), "top", [x], list(inner.output))
        m = helper.make_model(top, opset_imports=[helper.make_opsetid("", 17)])
        p = self.path("deep.onnx")
        with open(p, "wb") as f:
            f.write(m.SerializeToString())
        line = self.assert_fails(p, "--gpu", "b200", needle=p)
        self.assertRegex(line, "nested|deep|recursion|truncated|not a valid")

    # --- GPUs ------------------------------------------------------------------------------
    def test_unknown_gpu_suggests_closest(self):
        line = self.assert_fails(EXAMPLE, "--gpu", "b2000", "--batch", "1", "--seq", "8", needle="unknown GPU")
        self.assertIn("b200", line.split("unknown GPU", 1)[1].replace("'b2000'", ""))

    def test_unknown_gpu_in_list(self):
        line = self.assert_fails(EXAMPLE, "--gpu", "b200,h1000", "--batch", "1", "--seq", "8", needle="h1000")
        self.assertIn("h100", line.replace("'h1000'", ""))

    def test_empty_gpu_name(self):
        self.assert_fails(EXAMPLE, "--gpu", "b200,", "--batch", "1", "--seq", "8", needle="--gpu")

    def device(self, name, obj):
        return self.write(name, obj if isinstance(obj, str) else json.dumps(obj))

    GOOD_DEVICE = {"Device": "Test GPU", "Dev_Mem": 16, "Mem_Bw": 320, "Num_Sm": 40, "Core_Per_SM": 64,
                   "Freq": 1590, "SingleFLOPs": 8141, "L2Cache": 4}

    def test_good_device_json_works(self):
        # The control for the malformed cases below: the same file, intact, is accepted.
        p = self.device("ok.json", self.GOOD_DEVICE)
        rc, _, err = run(EXAMPLE, "--gpu", p, "--batch", "1", "--seq", "8", "--quiet")
        self.assertEqual(rc, 0, err)

    def test_device_json_syntax_error(self):
        p = self.device("syntax.json", '{"Device": "X", "Num_Sm": 40,, }')
        self.assert_fails(EXAMPLE, "--gpu", p, "--batch", "1", "--seq", "8", needle=p)

    def test_device_json_empty(self):
        p = self.device("empty.json", "")
        self.assert_fails(EXAMPLE, "--gpu", p, "--batch", "1", "--seq", "8", needle=p)

    def test_device_json_not_object(self):
        p = self.device("list.json", [1, 2, 3])
        self.assert_fails(EXAMPLE, "--gpu", p, "--batch", "1", "--seq", "8", needle=p)

    def test_device_json_missing_fields(self):
        for field in ("Num_Sm", "Mem_Bw", "Freq"):
            d = dict(self.GOOD_DEVICE)
            del d[field]
            p = self.device(f"missing_{field}.json", d)
            self.assert_fails(EXAMPLE, "--gpu", p, "--batch", "1", "--seq", "8", needle=p)

    def test_device_json_negative_numbers(self):
        for field in ("Num_Sm", "Mem_Bw", "Freq", "SingleFLOPs", "L2Cache"):
            d = dict(self.GOOD_DEVICE)
            d[field] = -5
            p = self.device(f"neg_{field}.json", d)
            self.assert_fails(EXAMPLE, "--gpu", p, "--batch", "1", "--seq", "8", needle=p)

    def test_device_json_wrong_types(self):
        for field, value in (("Num_Sm", "forty"), ("Mem_Bw", [1]), ("Freq", None), ("Device", 7)):
            d = dict(self.GOOD_DEVICE)
            d[field] = value
            p = self.device(f"type_{field}.json", d)
            self.assert_fails(EXAMPLE, "--gpu", p, "--batch", "1", "--seq", "8", needle=p)

    def test_device_json_absurd_numbers(self):
        d = dict(self.GOOD_DEVICE)
        d["Num_Sm"] = 1e300
        p = self.device("huge.json", d)
        self.assert_fails(EXAMPLE, "--gpu", p, "--batch", "1", "--seq", "8", needle=p)

    # --- dims ------------------------------------------------------------------------------
    def test_unbound_dims_listed(self):
        line = self.assert_fails(EXAMPLE, "--gpu", "b200", needle="unbound")
        self.assertIn("batch", line)
        self.assertIn("sequence", line)

    def test_negative_dims(self):
        self.assert_fails(EXAMPLE, "--gpu", "b200", "--batch", "-3", "--seq", "8", needle="--batch")
        self.assert_fails(EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "0", needle="--seq")
        self.assert_fails(EXAMPLE, "--gpu", "b200", "--dim", "batch=-1", "--seq", "8", needle="batch")

    def test_overflowing_dim_flag(self):
        self.assert_fails(EXAMPLE, "--gpu", "b200", "--batch", "99999999999999999999", "--seq", "8",
                          needle="--batch")
        self.assert_fails(EXAMPLE, "--gpu", "b200", "--batch", "1", "--dim", f"sequence={BIG + 1}",
                          needle="sequence")

    def test_overflowing_dim_product(self):
        # Each dim is accepted (<= 2^62) but tensor sizes overflow 64 bits: refused, not wrapped.
        line = self.assert_fails(EXAMPLE, "--gpu", "b200", "--batch", str(BIG), "--seq", str(BIG))
        self.assertRegex(line, "overflow|too large|out of range")

    # --- flags -----------------------------------------------------------------------------
    def test_bad_flag_values(self):
        cases = [
            (("--batch", "x", "--seq", "8"), "--batch"),
            (("--batch", "1", "--seq", "8.5"), "--seq"),
            (("--batch", "1", "--seq", "8", "--dim", "foo"), "--dim"),
            (("--batch", "1", "--seq", "8", "--dim", "=3"), "--dim"),
            (("--batch", "1", "--seq", "8", "--dim", "foo=bar"), "foo"),
            (("--batch", "1", "--seq", "8", "--mode", "bogus"), "--mode"),
            (("--batch", "1", "--seq", "8", "--dtype", "int16"), "--dtype"),
            (("--batch", "1", "--seq", "8", "--fusion", "maybe"), "--fusion"),
            (("--batch", "1", "--seq", "8", "--predictor", "oracle"), "--predictor"),
            (("--batch", "1", "--seq", "8", "--top", "-1"), "--top"),
            (("--batch", "1", "--seq", "8", "--quiet=yes"), "--quiet"),
            (("--batch", "1", "--seq", "8", "--frobnicate"), "--frobnicate"),
        ]
        for extra, needle in cases:
            with self.subTest(extra=extra):
                self.assert_fails(EXAMPLE, "--gpu", "b200", *extra, needle=needle)

    def test_missing_flag_values(self):
        for flag in ("--gpu", "--batch", "--seq", "--dim", "--mode", "--json", "--dtype"):
            with self.subTest(flag=flag):
                # The flag comes last so that it has no value.
                self.assert_fails(EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "8", flag, needle=flag,
                                  outputs=False)

    def test_no_model_no_gpu(self):
        self.assert_fails("--gpu", "b200", needle="model", outputs=False)
        self.assert_fails(EXAMPLE, "--batch", "1", needle="--gpu", outputs=False)
        self.assert_fails(EXAMPLE, EXAMPLE, "--gpu", "b200", needle="unexpected", outputs=False)

    def test_export_bad_config(self):
        cfg = self.write("cfg.json", '{"model_type": "gpt2", "n_layer": ')
        out = os.path.join(self.outdir, "m.onnx")
        rc, _, err = run("export", "--config", cfg, "-o", out)
        self.assertEqual(rc, 2, err)
        self.assertEqual(len([l for l in err.splitlines() if l.strip()]), 1, err)
        self.assertIn(cfg, err)
        self.assertEqual(os.listdir(self.outdir), [])

    # --- outputs ---------------------------------------------------------------------------
    def test_unwritable_output_paths(self):
        for flag, name in (("--json", "r.json"), ("--csv", "r.csv"), ("--out", "a.onnx")):
            with self.subTest(flag=flag):
                bad = os.path.join(self.dir, "no", "such", "dir", name)
                rc, out, err = run(EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "8", flag, bad, "--quiet")
                self.assertIn(rc, (1, 2), err)
                lines = [l for l in err.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, err)
                self.assertIn(bad, lines[0])
                self.assertFalse(os.path.exists(os.path.dirname(bad)))

    def test_output_path_is_directory(self):
        for flag in ("--json", "--csv", "--out"):
            with self.subTest(flag=flag):
                rc, out, err = run(EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "8", flag, self.outdir,
                                   "--quiet")
                self.assertIn(rc, (1, 2), err)
                lines = [l for l in err.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, err)
                self.assertIn(self.outdir, lines[0])
                self.assertEqual(os.listdir(self.outdir), [], "temporary file left behind")

    def test_failed_run_leaves_existing_output_untouched(self):
        # A failing run must not truncate or replace a report from an earlier run.
        target = os.path.join(self.dir, "keep.json")
        with open(target, "w") as f:
            f.write('{"old": true}')
        rc, _, err = run(EXAMPLE, "--gpu", "b200", "--batch", "1", "--json", target, "--quiet")
        self.assertEqual(rc, 2, err)
        with open(target) as f:
            self.assertEqual(f.read(), '{"old": true}')

    # --- unknown ops: continue with one warning --------------------------------------------
    def test_unknown_op_warns_once_and_continues(self):
        extra = [helper.make_node("FrobnicateOp", ["Y0"], ["F1"], name="frob1", domain="com.example"),
                 helper.make_node("FrobnicateOp", ["F1"], ["F2"], name="frob2", domain="com.example")]
        x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 8])
        y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
        w = helper.make_tensor("W", TensorProto.FLOAT, [8, 4], [0.0] * 32)
        nodes = [helper.make_node("MatMul", ["X", "W"], ["Y0"], name="mm")] + extra + \
                [helper.make_node("Relu", ["F2"], ["Y"], name="relu")]
        g = helper.make_graph(nodes, "unk", [x], [y], initializer=[w])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
        p = self.path("unknown.onnx")
        onnx.save(m, p)
        out = os.path.join(self.outdir, "r.json")
        rc, _, err = run(p, "--gpu", "b200", "--batch", "4", "--json", out, "--quiet")
        self.assertEqual(rc, 0, err)
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len([l for l in lines if "FrobnicateOp" in l]), 1, err)
        self.assertTrue(all("error" not in l for l in lines), err)
        with open(out) as f:
            r = json.load(f)
        names = [n["name"] for n in r["nodes"]]
        self.assertEqual(names, ["mm", "frob1", "frob2", "relu"])
        frob = [n for n in r["nodes"] if n["op_type"] == "FrobnicateOp"]
        self.assertTrue(all(k["class"] == "unknown" for n in frob for k in n["kernels"]))
        mm = r["nodes"][0]
        self.assertEqual(mm["outputs"][0]["shape"], [4, 4])
        self.assertGreater(mm["latency_ms"], 0)


if __name__ == "__main__":
    unittest.main()
