"""test_shape_values.py - sequence / optional outputs in --json and in the annotated model,
data-dependent outputs resolved from constants, through the real binary."""
import os
import tempfile
import unittest

import onnx
from onnx import helper, numpy_helper

import numpy as np

from cli_util import run, run_json


def save(model, d):
    path = os.path.join(d, "m.onnx")
    onnx.save(model, path)
    return path


def sequence_model():
    x = numpy_helper.from_array(np.zeros((5, 2), np.float32), "X")
    split = numpy_helper.from_array(np.array([2, 3], np.int64), "split")
    nodes = [
        helper.make_node("SplitToSequence", ["X", "split"], ["S"], axis=0),
        helper.make_node("SequenceLength", ["S"], ["L"]),
        helper.make_node("Optional", ["X"], ["O"]),
    ]
    seq_t = helper.make_tensor_sequence_value_info("S", onnx.TensorProto.FLOAT, None)
    opt_t = helper.make_value_info("O", helper.make_optional_type_proto(helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None)))
    g = helper.make_graph(nodes, "g", [], [seq_t, helper.make_tensor_value_info("L", onnx.TensorProto.INT64, None), opt_t],
                          [x, split])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


class ShapeValues(unittest.TestCase):
    def test_sequence_and_optional_outputs_in_json(self):
        with tempfile.TemporaryDirectory() as d:
            r = run_json(save(sequence_model(), d), "--gpu", "b200", "--predictor", "roofline")
            outs = {o["name"]: o for o in r["graph_outputs"]}
            s = outs["S"]
            self.assertEqual(s["kind"], "sequence")
            self.assertTrue(s["elements_known"])
            self.assertEqual([e["shape"] for e in s["elements"]], [[2, 2], [3, 2]])
            self.assertEqual(outs["L"]["shape"], [])
            self.assertNotIn("kind", outs["L"])  # tensors keep the contract's plain form
            o = outs["O"]
            self.assertEqual(o["kind"], "optional")
            self.assertEqual([e["shape"] for e in o["elements"]], [[5, 2]])

    def test_annotated_model_keeps_sequence_types(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "a.onnx")
            code, _, se = run(save(sequence_model(), d), "--gpu", "b200", "--predictor", "roofline", "--out", out, "--quiet")
            self.assertEqual(code, 0, se)
            a = onnx.load(out)
            onnx.checker.check_model(a)
            kinds = {o.name: o.type.WhichOneof("value") for o in a.graph.output}
            self.assertEqual(kinds["S"], "sequence_type")
            self.assertEqual(kinds["O"], "optional_type")

    def test_nonmaxsuppression_of_constants(self):
        boxes = numpy_helper.from_array(np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11]]], np.float32), "boxes")
        scores = numpy_helper.from_array(np.array([[[0.9, 0.8, 0.7]]], np.float32), "scores")
        mx = numpy_helper.from_array(np.array([10], np.int64), "max")
        iou = numpy_helper.from_array(np.array([0.5], np.float32), "iou")
        g = helper.make_graph([helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou"], ["sel"])], "g", [],
                              [helper.make_tensor_value_info("sel", onnx.TensorProto.INT64, None)], [boxes, scores, mx, iou])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
        m.ir_version = 7
        with tempfile.TemporaryDirectory() as d:
            r = run_json(save(m, d), "--gpu", "b200", "--predictor", "roofline")
            self.assertEqual(r["graph_outputs"][0]["shape"], [2, 3])


    def test_known_ops_downstream_of_a_runtime_shape_are_not_called_unknown(self):
        # A Reshape to a shape fed at run time (as a Pad of pads the graph computes): the ops
        # after it are known ops whose shapes are not inferred. The warning lists them apart
        # from unknown ops and names the Reshape, where the shapes stop being known; an op of no
        # known domain keeps its own warning, and the known ops after it name it.
        F, I = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
        nodes = [helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
                 helper.make_node("Relu", ["r"], ["a"], name="relu"),
                 helper.make_node("Sigmoid", ["a"], ["y"], name="sig"),
                 helper.make_node("Frobnicate", ["x"], ["f"], name="frob", domain="com.example"),
                 helper.make_node("Tanh", ["f"], ["z"], name="tanh")]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4, 8]),
                                           helper.make_tensor_value_info("s", I, [2])],
                              [helper.make_tensor_value_info("y", F, [None, None]),
                               helper.make_tensor_value_info("z", F, [None, None])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
        with tempfile.TemporaryDirectory() as d:
            code, _, err = run(save(m, d), "--gpu", "h100", "--predictor", "roofline")
            self.assertEqual(code, 0, err)
            warns = [l for l in err.splitlines() if "warning:" in l]
            unknown = [w for w in warns if "unknown ops" in w]
            self.assertEqual(len(unknown), 1, warns)
            self.assertIn("com.example.Frobnicate", unknown[0])
            self.assertNotIn("Relu", unknown[0])
            known = [w for w in warns if "known ops not predicted, their shapes not inferred" in w]
            self.assertEqual(len(known), 1, warns)
            self.assertIn(": Relu, Sigmoid, Tanh (", known[0])
            self.assertIn("from node 'reshape' (Reshape) on", known[0])
            r = run_json(save(m, d), "--gpu", "h100", "--predictor", "roofline")
            self.assertEqual(r["unknown_ops"], ["Relu", "Sigmoid", "Tanh", "com.example.Frobnicate"])
        # Downstream of the unknown op alone: the known ops name its node.
        m.graph.node.remove(m.graph.node[0])
        m.graph.node.remove(m.graph.node[0])
        m.graph.node.remove(m.graph.node[0])
        del m.graph.output[0]
        with tempfile.TemporaryDirectory() as d:
            code, _, err = run(save(m, d), "--gpu", "h100", "--predictor", "roofline")
            self.assertEqual(code, 0, err)
            self.assertIn("known ops not predicted, their shapes not inferred: Tanh (downstream of the unknown op of node "
                          "'frob')", err)

    def test_a_window_wider_than_its_input_is_one_error_and_no_output(self):
        # faceplugin's MobileFaceNet (npm faceplugin-face-recognition-js, fr_feature.onnx) bound
        # to a 16x16 image: its 7x7 depthwise head meets a 1x1 map. The Conv's output dims were
        # left unknown, ONNX's own inference (the hints) then gave the Reshape after it the
        # square of the negative size (a [1, 12800] output of a [1, 512] model) and the run
        # succeeded; onnxruntime refuses it ("Invalid input shape"). A pool whose kernel is one
        # wider than its input gave 1 (C++ division truncates) where onnxruntime computes 0.
        F = onnx.TensorProto.FLOAT
        w = numpy_helper.from_array(np.zeros((8, 1, 7, 7), np.float32), "w")
        s = numpy_helper.from_array(np.array([1, -1], np.int64), "s")
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="head", group=8, kernel_shape=[7, 7]),
                 helper.make_node("Reshape", ["c", "s"], ["y"], name="flat")]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 8, 7, 7])],
                              [helper.make_tensor_value_info("y", F, [1, 8])], [w, s])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        pool = helper.make_graph([helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[2, 2],
                                                   strides=[2, 2])], "p",
                                 [helper.make_tensor_value_info("x", F, [1, 8, 2, 2])],
                                 [helper.make_tensor_value_info("y", F, None)])
        pm = helper.make_model(pool, opset_imports=[helper.make_opsetid("", 13)])
        with tempfile.TemporaryDirectory() as d:
            path = save(m, d)
            r = run_json(path, "--gpu", "h100", "--predictor", "roofline")
            self.assertEqual(r["graph_outputs"][0]["shape"], [1, 8])
            outs = [os.path.join(d, n) for n in ("r.json", "r.csv", "r.html", "a.onnx")]
            pool_path = os.path.join(d, "pool.onnx")
            onnx.save(pm, pool_path)
            for model, shape, node in ((path, "1x8x4x4", "head"), (pool_path, "1x8x1x1", "pool")):
                code, _, err = run(model, "--gpu", "h100", "--shape", "x=" + shape, "--json", outs[0], "--csv", outs[1],
                                   "--html", outs[2], "--out", outs[3])
                self.assertEqual(code, 2, err)
                lines = [l for l in err.splitlines() if "error:" in l]
                self.assertEqual(len(lines), 1, err)
                self.assertIn("node '%s'" % node, lines[0])
                self.assertIn("wider than the padded input", lines[0])
                self.assertFalse(any(os.path.exists(o) for o in outs))
            # A pool in ceil mode has its window where the input starts: 1 output, as PyTorch.
            pm.graph.node[0].attribute.append(helper.make_attribute("ceil_mode", 1))
            onnx.save(pm, pool_path)
            r = run_json(pool_path, "--gpu", "h100", "--predictor", "roofline", "--shape", "x=1x8x1x1")
            self.assertEqual(r["graph_outputs"][0]["shape"], [1, 8, 1, 1])

if __name__ == "__main__":
    unittest.main()
