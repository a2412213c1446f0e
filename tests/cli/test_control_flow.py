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


if __name__ == "__main__":
    unittest.main()
