"""Model-local ONNX functions (ModelProto.functions, as onnxscript and PyTorch's dynamo exporter
write them): calls are inlined, so their bodies' kernels are predicted exactly as the same nodes
written out by hand; nested calls and attribute references resolve; a recursive function is a
clear one-line error; the annotated model keeps the call nodes, passes onnx.checker, carries
the body's latency on each call node and still runs in onnxruntime."""
import json
import os
import subprocess
import tempfile
import unittest

import test_annotated as ta
from cli_util import run, run_json

PY = "/usr/bin/python3"

# Writes three models into argv[1]: with functions, the same graph inlined by hand, recursive.
MAKE = r"""
import sys, os, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
d = sys.argv[1]
opset = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
# Act(x) = Softmax(x, axis=@axis) then Relu; MLP(x, w1, w2) = Act(x @ w1) @ w2 (nested call).
softmax = helper.make_node("Softmax", ["x"], ["s"])
ref = softmax.attribute.add()  # axis = the caller's attribute "axis" (ref_attr_name)
ref.name, ref.ref_attr_name, ref.type = "axis", "axis", onnx.AttributeProto.INT
act = helper.make_function("local", "Act", ["x"], ["y"], [softmax, helper.make_node("Relu", ["s"], ["y"])],
                           [helper.make_opsetid("", 17)], ["axis"])
mlp = helper.make_function("local", "MLP", ["x", "w1", "w2"], ["y"], [
    helper.make_node("MatMul", ["x", "w1"], ["h"]),
    helper.make_node("Act", ["h"], ["a"], domain="local", axis=0),
    helper.make_node("MatMul", ["a", "w2"], ["y"])], opset, [])
rng = np.random.default_rng(0)
w = [numpy_helper.from_array((rng.standard_normal(s) * 0.05).astype(np.float32), n)
     for n, s in (("W1", (64, 256)), ("W2", (256, 64)), ("W3", (64, 256)), ("W4", (256, 64)))]
X = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 64])
Z = helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["batch", 64])
g = helper.make_graph([helper.make_node("MLP", ["X", "W1", "W2"], ["Y"], domain="local", name="block0"),
                       helper.make_node("MLP", ["Y", "W3", "W4"], ["Z"], domain="local")], "fn", [X], [Z], w)
m = helper.make_model(g, opset_imports=opset, functions=[mlp, act])
onnx.checker.check_model(m)
onnx.save(m, os.path.join(d, "functions.onnx"))
def layer(x, w1, w2, y, p):
    return [helper.make_node("MatMul", [x, w1], [p + "h"]), helper.make_node("Softmax", [p + "h"], [p + "s"], axis=0),
            helper.make_node("Relu", [p + "s"], [p + "a"]), helper.make_node("MatMul", [p + "a", w2], [y])]
flat = helper.make_graph(layer("X", "W1", "W2", "Y", "a_") + layer("Y", "W3", "W4", "Z", "b_"), "flat", [X], [Z], w)
onnx.save(helper.make_model(flat, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(d, "flat.onnx"))
rec = helper.make_function("local", "Rec", ["x"], ["y"], [helper.make_node("Rec", ["x"], ["y"], domain="local")], opset, [])
g2 = helper.make_graph([helper.make_node("Rec", ["X"], ["Z"], domain="local")], "rec", [X], [Z])
onnx.save(helper.make_model(g2, opset_imports=opset, functions=[rec]), os.path.join(d, "recursive.onnx"))
# F0 calls F1 four times, F1 calls F2 four times ... : 4^16 nodes if inlined blindly.
fs = [helper.make_function("local", "F16", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])], opset, [])]
for i in range(15, -1, -1):
    fs.append(helper.make_function("local", f"F{i}", ["x"], ["y"], [
        helper.make_node(f"F{i + 1}", ["x" if k == 0 else f"t{k}"], ["y" if k == 3 else f"t{k + 1}"], domain="local")
        for k in range(4)], opset, []))
g3 = helper.make_graph([helper.make_node("F0", ["X"], ["Z"], domain="local")], "bomb", [X], [Z])
onnx.save(helper.make_model(g3, opset_imports=opset, functions=fs), os.path.join(d, "bomb.onnx"))
# Chains C0 -> C1 -> ... -> C(n-1) -> Relu: nesting n. 32 is the deepest allowed.
def chain(prefix, n, tail=None):
    fs = [helper.make_function("local", f"{prefix}{n - 1}", ["x"], ["y"],
                               [helper.make_node(tail or "Relu", ["x"], ["y"], domain="local" if tail else "")], opset, [])]
    for i in range(n - 2, -1, -1):
        fs.append(helper.make_function("local", f"{prefix}{i}", ["x"], ["y"],
                                       [helper.make_node(f"{prefix}{i + 1}", ["x"], ["y"], domain="local")], opset, []))
    return fs
for name, n in (("nest32", 32), ("nest33", 33), ("nest5000", 5000)):
    g4 = helper.make_graph([helper.make_node("C0", ["X"], ["Z"], domain="local")], name, [X], [Z])
    onnx.save(helper.make_model(g4, opset_imports=opset, functions=chain("C", n)), os.path.join(d, name + ".onnx"))
# The second call reaches F (nesting 30) through three more functions: 33 deep.
fs = chain("F", 30) + chain("G", 3, tail="F0")
g5 = helper.make_graph([helper.make_node("F0", ["X"], ["Y"], domain="local"),
                        helper.make_node("G0", ["Y"], ["Z"], domain="local")], "shared", [X], [Z])
onnx.save(helper.make_model(g5, opset_imports=opset, functions=fs), os.path.join(d, "nest_shared.onnx"))
"""

# The annotated model: checker passes, nodes unchanged, the call nodes carry the body latency.
CHECK = r"""
import json, sys, onnx
onnx.checker.check_model(sys.argv[2])
a, b = onnx.load(sys.argv[1]), onnx.load(sys.argv[2])
assert [(n.op_type, list(n.input), list(n.output)) for n in a.graph.node] == \
       [(n.op_type, list(n.input), list(n.output)) for n in b.graph.node]
assert len(b.functions) == 2
names = {v.name for v in b.graph.value_info}
print(json.dumps({"docs": [n.doc_string for n in b.graph.node], "names": [n.name for n in b.graph.node],
                  "value_info": sorted(names)}))
"""


class Functions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        p = subprocess.run([PY, "-c", MAKE, cls.tmp.name], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        cls.fn = os.path.join(cls.tmp.name, "functions.onnx")
        cls.flat = os.path.join(cls.tmp.name, "flat.onnx")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def kernels(self, report):
        return sorted((k["class"], k["phase"], k["flops"], k["bytes"]) for n in report["nodes"] for k in n["kernels"])

    def test_calls_predict_like_the_same_nodes_written_out(self):
        for mode in ("inference", "training"):
            a = run_json(self.fn, "--gpu", "h100", "--batch", "4096", "--mode", mode)
            b = run_json(self.flat, "--gpu", "h100", "--batch", "4096", "--mode", mode)
            self.assertEqual(a.get("unknown_ops", []), [])
            self.assertEqual(self.kernels(a), self.kernels(b))
            self.assertAlmostEqual(a["e2e_latency_ms"], b["e2e_latency_ms"], delta=1e-9 * b["e2e_latency_ms"])
            gemms = [k for n in a["nodes"] for k in n["kernels"] if k["class"] == "gemm"]
            # Training: two backward GEMMs per forward one, but none for the gradient of the input X.
            self.assertEqual(len(gemms), 4 if mode == "inference" else 4 + 8 - 1)
        names = [n["name"] for n in a["nodes"]]
        # Body nodes are named after the call (the nested Act call inside block0 too).
        self.assertIn("block0/MatMul_0", names)
        self.assertIn("block0/Act_1/Softmax_0", names)
        self.assertTrue(any(n.startswith("MLP_1/") for n in names), names)
        softmax = [n for n in a["nodes"] if n["op_type"] == "Softmax"]
        self.assertEqual(len(softmax), 2)
        self.assertEqual(softmax[0]["outputs"][0]["shape"], [4096, 256])

    def test_recursive_or_exploding_functions_are_one_clear_error(self):
        code, out, err = run(os.path.join(self.tmp.name, "recursive.onnx"), "--gpu", "h100", "--batch", "2")
        self.assertEqual(code, 2, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("calls itself", err)
        code, out, err = run(os.path.join(self.tmp.name, "bomb.onnx"), "--gpu", "h100", "--batch", "2", timeout=60)
        self.assertEqual(code, 2, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("would add more than", err)

    def test_nesting_deeper_than_32_calls_is_one_clear_error(self):
        a = run_json(os.path.join(self.tmp.name, "nest32.onnx"), "--gpu", "h100", "--batch", "2")
        self.assertEqual([n["op_type"] for n in a["nodes"]], ["Relu"])
        for name in ("nest33", "nest5000", "nest_shared"):
            code, out, err = run(os.path.join(self.tmp.name, name + ".onnx"), "--gpu", "h100", "--batch", "2",
                                 timeout=60)
            self.assertEqual(code, 2, name + ": " + err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn("nested too deeply", err)

    def test_annotated_model_keeps_calls_and_runs_in_onnxruntime(self):
        out = os.path.join(self.tmp.name, "annotated.onnx")
        code, _, err = run(self.fn, "--gpu", "b200", "--batch", "8", "--out", out, "--quiet")
        self.assertEqual(code, 0, err)
        p = subprocess.run([PY, "-c", CHECK, self.fn, out], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        s = json.loads(p.stdout)
        self.assertEqual(s["names"], ["block0", "MLP_1"])
        for doc in s["docs"]:
            self.assertIn("neusight: latency_ms=", doc)
            self.assertIn("inlined function body, 4 nodes", doc)
            self.assertIn("/MatMul_0 latency_ms=", doc)
        self.assertIn("Y", s["value_info"])  # the call's output is shaped
        self.assertFalse(any("/" in v for v in s["value_info"]), s)  # body-internal names are not written
        t = ta.Annotated("test_squeezenet_with_weights_loads_and_runs_unchanged")
        t.tmp = tempfile.TemporaryDirectory()
        try:
            a, b = t.ort_run(self.fn, {"X": [8, 64]}), t.ort_run(out, {"X": [8, 64]})
        finally:
            t.tmp.cleanup()
        self.assertEqual(a, b)
        self.assertEqual(len(a["Z"]), 8 * 64)


if __name__ == "__main__":
    unittest.main()
