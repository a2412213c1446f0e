"""Real exported models (../shared/onnx-models): every tensor reaches a full concrete shape
after binding; external weights claiming 10 GB (file absent) load in memory independent of
that size."""
import json
import os
import resource
import subprocess
import tempfile
import unittest

import onnx
from onnx import helper, TensorProto

import cli_util as cu


def concrete_report(test, model, *args):
    r = cu.run_json(model, "--gpu", "b200", *args)
    for n in r["nodes"]:
        for o in n["outputs"]:
            test.assertTrue(all(isinstance(d, int) for d in o["shape"]), f"{n['name']} ({n['op_type']}): {o}")
    for o in r["graph_outputs"]:
        test.assertTrue(o["shape"] and all(isinstance(d, int) for d in o["shape"]), o)
    return r


class RealModels(unittest.TestCase):
    @cu.needs_shared("onnx-models")
    def test_gpt2_fused_ops_with_past(self):
        r = concrete_report(self, cu.shared("onnx-models", "ort_genai_tiny_random_gpt2_fp32.onnx"),
                            "--batch", "2", "--seq", "16", "--dim", "past_seq_len=8", "--dim", "total_seq_len=24")
        outs = {o["name"]: o["shape"] for o in r["graph_outputs"]}
        self.assertEqual(outs["logits"], [2, 16, 1000])
        self.assertEqual(outs["present_0"], [2, 2, 4, 24, 8])
        ops = {n["op_type"] for n in r["nodes"]}
        self.assertTrue({"Attention", "SkipLayerNormalization", "FastGelu", "EmbedLayerNormalization"} <= ops, ops)

    @cu.needs_shared("onnx-models")
    def test_opset23_attention_spelled_out(self):
        concrete_report(self, cu.shared("onnx-models", "onnx_attention_3d_causal_expanded.onnx"))

    @cu.needs_shared("onnx-models")
    def test_opset22_attention_head(self):
        r = concrete_report(self, cu.shared("onnx-models", "trt_attention_head.onnx"),
                            "--dim", "sequence_len=100", "--dim", "batch=100")
        self.assertEqual(r["graph_outputs"][0]["shape"], [100, 100, 100])

    @cu.needs_shared("onnx-models")
    def test_model_zoo_cnns(self):
        expect = {"resnet50": [1, 1000], "squeezenet": [1, 1000, 1, 1], "vgg19": [1, 1000], "shufflenet": [1, 1000]}
        for name, shape in expect.items():
            with self.subTest(name):
                r = concrete_report(self, cu.shared("onnx-models", f"onnx_light_{name}.onnx"))
                self.assertEqual(r["graph_outputs"][0]["shape"], shape)

    @cu.needs_shared("onnx-models")
    def test_external_weights_model(self):
        concrete_report(self, cu.shared("onnx-models", "ext_weights", "ext_weights.onnx"))

    @cu.needs_shared("onnx-models")
    def test_light_weight_generators_are_folded(self):
        # The model-zoo "light" ResNet-50 makes its 239 weights with ConstantOfShape: folded (no
        # kernel, marked), and the same graph with the weights as initializers predicts the same.
        light = cu.shared("onnx-models", "onnx_light_resnet50.onnx")
        with tempfile.TemporaryDirectory() as d:
            real = os.path.join(d, "resnet50_initializers.onnx")
            _with_initializers(light, real)
            for fusion in ("eager", "full"):
                with self.subTest(fusion):
                    a = cu.run_json(light, "--gpu", "a100", "--fusion", fusion)
                    b = cu.run_json(real, "--gpu", "a100", "--fusion", fusion)
                    gen = [n for n in a["nodes"] if n["op_type"] == "ConstantOfShape"]
                    self.assertEqual(len(gen), 239)
                    for n in gen:
                        self.assertEqual(n["kernels"], [], n["name"])
                        self.assertTrue(n.get("folded"), n)
                    self.assertEqual(a["folded_nodes"], 239)
                    self.assertEqual(b["folded_nodes"], 0)
                    self.assertLess(abs(a["e2e_latency_ms"] / b["e2e_latency_ms"] - 1), 0.01)
            _, out, _ = cu.run(light, "--gpu", "a100")
            self.assertIn("constant folded: 239 nodes", out)


def _with_initializers(src, dst):
    """`src` with every ConstantOfShape of a constant shape replaced by an initializer of that
    shape (data in an absent external file: the tool never reads weights)."""
    from onnx import numpy_helper
    m = onnx.load(src)
    shapes = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    keep, inits = [], []
    for n in m.graph.node:
        if n.op_type != "ConstantOfShape" or n.input[0] not in shapes:
            keep.append(n)
            continue
        t = TensorProto()
        t.name, t.data_type, t.data_location = n.output[0], TensorProto.FLOAT, TensorProto.EXTERNAL
        t.dims.extend(int(v) for v in shapes[n.input[0]])
        e = t.external_data.add()
        e.key, e.value = "location", "absent_weights.bin"
        inits.append(t)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.graph.initializer.extend(inits)
    with open(dst, "wb") as f:
        f.write(m.SerializeToString())


def _ext_model(path, rows, cols):
    """MatMul X[batch, rows] x W[rows, cols] with W's data claimed in an absent file."""
    w = TensorProto()
    w.name = "W"
    w.data_type = TensorProto.FLOAT
    w.dims.extend([rows, cols])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "absent_weights.bin"), ("offset", "0"), ("length", str(rows * cols * 4))):
        e = w.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")], "ext",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", rows])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with open(path, "wb") as f:
        f.write(m.SerializeToString())


def _peak_rss_kib(args):
    """Runs the CLI in a fresh python child so ru_maxrss is the CLI's alone."""
    code = ("import resource,subprocess,sys; p=subprocess.run(sys.argv[1:],capture_output=True);"
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run(["/usr/bin/python3", "-c", code, cu.BIN, *args], capture_output=True, text=True, check=True)
    rc, rss = out.stdout.split()
    return int(rc), int(rss)


class ExternalWeights(unittest.TestCase):
    def test_10gb_external_weights_memory_independent_of_size(self):
        with tempfile.TemporaryDirectory() as d:
            small, big = os.path.join(d, "small.onnx"), os.path.join(d, "big.onnx")
            _ext_model(small, 1024, 1024)      # 4 MiB claimed
            _ext_model(big, 51200, 51200)      # 10.5 GB claimed; the file does not exist
            rc_s, rss_s = _peak_rss_kib([small, "--gpu", "b200", "--batch", "8", "--quiet"])
            rc_b, rss_b = _peak_rss_kib([big, "--gpu", "b200", "--batch", "8", "--quiet"])
            self.assertEqual((rc_s, rc_b), (0, 0))
            print(f"peak RSS: 4 MiB weights {rss_s} KiB, 10.5 GB weights {rss_b} KiB")
            self.assertLess(abs(rss_b - rss_s), 32 * 1024, (rss_s, rss_b))


if __name__ == "__main__":
    unittest.main()
