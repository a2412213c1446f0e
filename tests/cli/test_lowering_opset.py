"""Lowering through the real binary: the model's opset reaches the lowering (Softmax before
opset 13 normalises over the flattened trailing dims), and com.microsoft
EmbedLayerNormalization is a known fused kernel."""
import os
import tempfile
import unittest

import onnx
from onnx import TensorProto, helper

from cli_util import run_json


def softmax_model(path, opset):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 8])
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)
    g = helper.make_graph([node], "sm", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)


class LoweringOpset(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def softmax_kernel(self, opset):
        p = os.path.join(self.tmp.name, f"sm{opset}.onnx")
        softmax_model(p, opset)
        r = run_json(p, "--gpu", "a100-40gb", "--predictor", "roofline")
        ks = r["nodes"][0]["kernels"]
        self.assertEqual(len(ks), 1)
        self.assertEqual(ks[0]["class"], "softmax")
        return ks[0]

    def test_softmax_axis_follows_the_model_opset(self):
        # opset 13+: rows of the one axis (length 3); opset 11: the input is flattened from
        # axis 1 on, rows of 3 * 8 = 24 (the tile of a softmax is its row length).
        self.assertEqual(self.softmax_kernel(13)["tile"], "3")
        self.assertEqual(self.softmax_kernel(11)["tile"], "24")

    def test_embed_layer_normalization_is_one_layernorm_kernel(self):
        B, S, H, V = 2, 16, 64, 1000
        ids = helper.make_tensor_value_info("ids", TensorProto.INT32, [B, S])
        seg = helper.make_tensor_value_info("seg", TensorProto.INT32, [B, S])
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, H])
        inits = [helper.make_tensor(n, TensorProto.FLOAT, dims, [0.0] * (dims[0] * (dims[1] if len(dims) > 1 else 1)))
                 for n, dims in (("word", [V, H]), ("pos", [S, H]), ("segt", [2, H]), ("gamma", [H]), ("beta", [H]))]
        node = helper.make_node("EmbedLayerNormalization", ["ids", "seg", "word", "pos", "segt", "gamma", "beta"],
                                ["y"], name="emb", domain="com.microsoft")
        g = helper.make_graph([node], "emb", [ids, seg], [out], initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        p = os.path.join(self.tmp.name, "emb.onnx")
        onnx.save(m, p)
        r = run_json(p, "--gpu", "a100-40gb", "--predictor", "roofline")
        node = r["nodes"][0]
        self.assertEqual(node["outputs"][0]["shape"], [B, S, H])
        self.assertEqual([k["class"] for k in node["kernels"]], ["layernorm"])
        # Reads the gathered rows (3 per token), not the whole word table.
        self.assertLess(node["kernels"][0]["bytes"], V * H * 4)


if __name__ == "__main__":
    unittest.main()
