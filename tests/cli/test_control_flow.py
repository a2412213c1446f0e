"""Control-flow bodies (If / Loop / Scan / SequenceMap) are priced: shape inference keeps the
body tensors' shapes, so body kernels are real kernels, not `unknown` at 0 ms. A Loop whose
carried value grows is priced trip by trip; a body shape no iteration-independent value
fixes stays `unknown`, noted."""
import os
import subprocess
import tempfile
import unittest

from cli_util import run_json

PY = "/usr/bin/python3"
NODE = "/usr/share/libonnx-testdata/data/node"

# A Loop of 3 trips: acc = Concat(acc, R) grows by a row each trip, Relu(acc) is scanned out.
MAKE = r"""
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
body = helper.make_graph([
    helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    helper.make_node("Concat", ["acc_in", "R"], ["acc_out"], axis=0),
    helper.make_node("Relu", ["acc_out"], ["r"])], "body",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []),
     helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
     helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [None, 256])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [None, 256]),
     helper.make_tensor_value_info("r", TensorProto.FLOAT, [None, 256])])
inits = [numpy_helper.from_array(np.ones((1, 256), np.float32), "R"),
         numpy_helper.from_array(np.array(3, np.int64), "M")]
g = helper.make_graph([helper.make_node("Loop", ["M", "", "acc0"], ["acc", "rs"], body=body, name="loop")], "g",
                      [helper.make_tensor_value_info("acc0", TensorProto.FLOAT, [1, 256])],
                      [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [None, 256])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
"""


def body_kernels(report, op_type):
    return [k for n in report["nodes"] if n["op_type"] == op_type for k in n["kernels"]]


@unittest.skipUnless(os.path.isdir(NODE), "libonnx-testdata not installed")
class TestData(unittest.TestCase):
    def test_scan9_sum(self):
        ks = body_kernels(run_json(f"{NODE}/test_scan9_sum/model.onnx", "--gpu", "a100"), "Scan")
        self.assertEqual(len(ks), 3)  # Add on the state, 3 trips (x is [3, 2])
        for k in ks:
            self.assertEqual(k["class"], "elementwise")
            self.assertGreater(k["latency_ms"], 0)
            self.assertEqual(k["flops"], 2)  # [2] + [2]

    def test_loop11_iteration_dependent_slice_stays_unknown(self):
        # The trip count is a graph input and x[i:i+1] has no shape without i: noted, not guessed.
        ks = body_kernels(run_json(f"{NODE}/test_loop11/model.onnx", "--gpu", "a100"), "Loop")
        self.assertTrue(ks)
        for k in ks:
            self.assertEqual(k["class"], "unknown")
            self.assertIn("trip count not known", k["note"])


@unittest.skipUnless(os.path.exists(PY), "no system python with onnx")
class TestGrowingLoop(unittest.TestCase):
    def test_each_trip_priced_with_its_shapes(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "loop.onnx")
            subprocess.run([PY, "-c", MAKE, path], check=True)
            r = run_json(path, "--gpu", "a100")
        ks = body_kernels(r, "Loop")
        relus = [k for k in ks if k["op"] == "relu"]
        self.assertEqual(len(relus), 3)
        self.assertFalse([k for k in ks if k["class"] == "unknown"])
        # Relu on [2, 256], [3, 256], [4, 256]: bytes grow by one row per trip.
        self.assertEqual([k["flops"] for k in relus], [2 * 256, 3 * 256, 4 * 256])
        self.assertLess(relus[0]["bytes"], relus[1]["bytes"])
        self.assertLess(relus[1]["bytes"], relus[2]["bytes"])


# A voice-activity-detector-style graph: one If on a bool graph input. The then branch is a
# MatMul of x (an outer-scope graph input) with a weight, the else branch a Relu of x; a
# Loop whose trip count is a graph input runs a Relu over x.
MAKE_IF = r"""
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])
then_g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["t"], name="mm")], "then", [],
                           [helper.make_tensor_value_info("t", TensorProto.FLOAT, [64, 256])])
else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="relu")], "else", [],
                           [helper.make_tensor_value_info("e", TensorProto.FLOAT, [64, 256])])
body = helper.make_graph([
    helper.make_node("Identity", ["cond_in"], ["cond_out"], name="id"),
    helper.make_node("Relu", ["x"], ["r"], name="body_relu")], "body",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []),
     helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("r", TensorProto.FLOAT, [64, 256])])
nodes = [helper.make_node("If", ["speech"], ["y"], name="vad", then_branch=then_g, else_branch=else_g),
         helper.make_node("Loop", ["steps", ""], ["rs"], name="loop", body=body)]
g = helper.make_graph(nodes, "g",
    [x, helper.make_tensor_value_info("speech", TensorProto.BOOL, []),
     helper.make_tensor_value_info("steps", TensorProto.INT64, [])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 256]),
     helper.make_tensor_value_info("rs", TensorProto.FLOAT, [None, 64, 256])],
    [numpy_helper.from_array(np.ones((256, 256), np.float32), "W")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
"""


@unittest.skipUnless(os.path.exists(PY), "no system python with onnx")
class TestIfOnGraphInput(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.tmp.name, "vad.onnx")
        subprocess.run([PY, "-c", MAKE_IF, cls.path], check=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def analyse(self, *args):
        from cli_util import run
        out = os.path.join(self.tmp.name, "r.json")
        code, _, err = run(self.path, "--gpu", "a100", "--predictor", "roofline", "--json", out, "--quiet", *args)
        self.assertEqual(code, 0, err)
        import json
        with open(out) as f:
            return json.load(f), [l for l in err.splitlines() if "warning:" in l]

    def test_unknown_condition_prices_the_dearer_branch_and_names_the_input(self):
        r, warns = self.analyse()
        ks = body_kernels(r, "If")
        self.assertEqual([k["class"] for k in ks], ["gemm"])  # the MatMul branch is dearer
        self.assertEqual(ks[0]["body_node"], "vad/mm")
        ifw = [w for w in warns if "If 'vad'" in w]
        self.assertEqual(len(ifw), 1, warns)
        self.assertIn("'speech'", ifw[0])
        self.assertIn("--value speech=V", ifw[0])
        loopw = [w for w in warns if "Loop 'loop'" in w]
        self.assertEqual(len(loopw), 1, warns)
        self.assertIn("steps", loopw[0])
        self.assertEqual(len(body_kernels(r, "Loop")), 1)  # counted once

    def test_value_picks_the_branch_and_the_trip_count(self):
        r, warns = self.analyse("--value", "speech=0", "--value", "steps=5")
        ks = body_kernels(r, "If")
        self.assertEqual([(k["class"], k["body_node"]) for k in ks], [("elementwise", "vad/relu")])
        self.assertIn("else branch (condition known)", ks[0]["note"])
        loop = body_kernels(r, "Loop")
        self.assertEqual(len(loop), 5)
        self.assertTrue(all(k["body_node"] == "loop/body_relu" for k in loop))
        self.assertEqual(warns, [])
        r, _ = self.analyse("--value", "speech=true,steps=2")
        self.assertEqual([k["class"] for k in body_kernels(r, "If")], ["gemm"])
        self.assertEqual(len(body_kernels(r, "Loop")), 2)

    def test_a_loop_whose_condition_is_false_on_entry_runs_no_trip(self):
        # Loop(M, cond): cond false on entry runs no iteration, whatever M says.
        path = os.path.join(self.tmp.name, "loop_cond.onnx")
        subprocess.run([PY, "-c", MAKE_IF.replace('["steps", ""]', '["steps", "go"]').replace(
            'helper.make_tensor_value_info("steps", TensorProto.INT64, [])]',
            'helper.make_tensor_value_info("steps", TensorProto.INT64, []), '
            'helper.make_tensor_value_info("go", TensorProto.BOOL, [])]'), path], check=True)
        from cli_util import run_json
        base = (path, "--gpu", "a100", "--predictor", "roofline", "--value", "speech=0")
        self.assertEqual(len(body_kernels(run_json(*base, "--value", "steps=5", "--value", "go=1"), "Loop")), 5)
        self.assertEqual(body_kernels(run_json(*base, "--value", "steps=5", "--value", "go=0"), "Loop"), [])
        self.assertEqual(body_kernels(run_json(*base, "--value", "go=0"), "Loop"), [])

    def test_annotated_model_carries_each_body_node_s_kernels(self):
        # --out: Netron shows a body node's own kernels in its doc_string (a Loop's trips
        # together), the node holding the body their sum; the branch not taken says nothing.
        from cli_util import run
        out = os.path.join(self.tmp.name, "annotated.onnx")
        code, _, err = run(self.path, "--gpu", "a100", "--predictor", "roofline", "--value", "speech=1,steps=3",
                           "--out", out, "--quiet")
        self.assertEqual(code, 0, err)
        check = r"""
import sys, re, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m)
ms = lambda doc: float(re.search(r"latency_ms=([0-9.e+-]+)", doc).group(1))
nodes = {n.name: n for n in m.graph.node}
vad = nodes["vad"]
then_g = [a.g for a in vad.attribute if a.name == "then_branch"][0]
else_g = [a.g for a in vad.attribute if a.name == "else_branch"][0]
mm = then_g.node[0].doc_string
assert "1 kernel of its enclosing node's" in mm and "forward gemm" in mm, mm
assert abs(ms(mm) - ms(vad.doc_string)) <= 1e-3 * ms(vad.doc_string), (mm, vad.doc_string)
assert else_g.node[0].doc_string == "", else_g.node[0].doc_string
body = [a.g for a in nodes["loop"].attribute if a.name == "body"][0]
relu = [n for n in body.node if n.name == "body_relu"][0].doc_string
assert "3 kernels" in relu and relu.count("forward elementwise relu") == 3, relu
print("ok")
"""
        r = subprocess.run([PY, "-c", check, out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "ok")

    def test_bad_value_is_one_line(self):
        from cli_util import run
        code, _, err = run(self.path, "--gpu", "a100", "--value", "speech=0.5", "--quiet")
        self.assertEqual(code, 2)
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, err)
        self.assertIn("--value speech", lines[0])
        code, _, err = run(self.path, "--gpu", "a100", "--value", "steps=1e300", "--quiet")
        self.assertEqual(code, 2)
        self.assertIn("out of range", err)


if __name__ == "__main__":
    unittest.main()


# An If on a graph input whose else branch cannot run on the inputs given: it reshapes x
# [1, 512] into rows of 300 (a length only the other branch takes, as a voice-activity
# detector's 8 kHz branch takes 256 samples where its 16 kHz one takes 512), and holds an If
# of its own on another graph input.
MAKE_INFEASIBLE = r"""
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
F = TensorProto.FLOAT
inner_then = helper.make_graph([helper.make_node("Relu", ["r"], ["a"], name="inner_relu")], "inner_then", [],
                               [helper.make_tensor_value_info("a", F, [None, None])])
inner_else = helper.make_graph([helper.make_node("Sigmoid", ["r"], ["b"], name="inner_sigmoid")], "inner_else", [],
                               [helper.make_tensor_value_info("b", F, [None, None])])
then_g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["t"], name="mm")], "then", [],
                           [helper.make_tensor_value_info("t", F, [None, None])])
else_g = helper.make_graph([helper.make_node("Reshape", ["x", "rows300"], ["r"], name="reshape"),
                            helper.make_node("If", ["flag"], ["e"], name="nested", then_branch=inner_then,
                                             else_branch=inner_else)], "else", [],
                           [helper.make_tensor_value_info("e", F, [None, None])])
g = helper.make_graph([helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)], "g",
                      [helper.make_tensor_value_info("x", F, [1, 512]), helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                       helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                      [helper.make_tensor_value_info("y", F, [None, None])],
                      [numpy_helper.from_array(np.ones((512, 512), np.float32), "W"),
                       numpy_helper.from_array(np.array([-1, 300], np.int64), "rows300")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
"""


@unittest.skipUnless(os.path.exists(PY), "no system python with onnx")
class TestIfBranchThatCannotRun(unittest.TestCase):
    def test_the_other_branch_is_priced_and_the_impossible_one_says_nothing_else(self):
        from cli_util import run
        import json
        with tempfile.TemporaryDirectory() as d:
            path, out = os.path.join(d, "branch.onnx"), os.path.join(d, "r.json")
            subprocess.run([PY, "-c", MAKE_INFEASIBLE, path], check=True)
            code, _, err = run(path, "--gpu", "h100", "--json", out, "--quiet")
            self.assertEqual(code, 0, err)
            with open(out) as f:
                r = json.load(f)
            warns = [l for l in err.splitlines() if "warning:" in l]
            # The shapes say why the else branch cannot run; the If's line which branch is priced.
            self.assertEqual(len([w for w in warns if "cannot run on these inputs" in w and "'reshape'" in w]), 1, warns)
            ifw = [w for w in warns if "If 'branch': condition 'cond'" in w]
            self.assertEqual(len(ifw), 1, warns)
            self.assertIn("so the then branch is priced", ifw[0])
            # Nothing of the branch not priced: its nested If, its ops as unknown.
            self.assertFalse([w for w in warns if "nested" in w or "unknown ops" in w], warns)
            self.assertEqual(r["unknown_ops"], [])
            self.assertEqual([(k["class"], k["body_node"]) for k in body_kernels(r, "If")], [("gemm", "branch/mm")])
            self.assertEqual(r["graph_outputs"][0]["shape"], [1, 512])  # the then branch's
            # The else branch asked for: the inputs cannot run it, one line, exit 2, no file.
            os.remove(out)
            code, so, err = run(path, "--gpu", "h100", "--value", "cond=0", "--json", out)
            self.assertEqual(code, 2)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn("Reshape", err)
            self.assertFalse(os.path.exists(out))
