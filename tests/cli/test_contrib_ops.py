"""com.microsoft contrib ops that onnxruntime runs on CUDA and exporters emit: each one in a
small model built here, analysed through the real binary: concrete output shapes and priced
kernels (never `unknown`). An op with no rule stays `unknown` with its reason, counted in the
total."""
import os
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cli_util import run, run_json

F, F16, I32, I64, U8 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8
NP = {F: np.float32, F16: np.float16, I32: np.int32, I64: np.int64, U8: np.uint8}


def inp(name, dims, dt=F):
    return ("in", name, dims, dt, None)


def const(name, dims, dt=F, value=None):
    return ("init", name, dims, dt, value)


# op: (inputs in order ("" = omitted), attributes, {output: expected shape}, expected kernel classes)
B, S, H, N, HD = 2, 8, 64, 4, 16
CASES = {
    "RotaryEmbedding": ([inp("x", [B, S, H]), inp("pos", [B, S], I64), const("cos", [32, 8]), const("sin", [32, 8])],
                        {"num_heads": N}, {"y": [B, S, H]}, {"elementwise"}),
    "GroupQueryAttention": (
        [inp("q", [B, S, H]), inp("k", [B, S, 32]), inp("v", [B, S, 32]), inp("pk", [B, 2, 5, HD]),
         inp("pv", [B, 2, 5, HD]), inp("seqlens", [B], I32), const("total", [], I32, 13)],
        {"num_heads": N, "kv_num_heads": 2}, {"y": [B, S, H], "present_k": [B, 2, 13, HD], "present_v": [B, 2, 13, HD]},
        {"gemm", "softmax", "memory"}),
    "MultiHeadAttention": ([inp("q", [B, S, H]), inp("k", [B, 12, H]), inp("v", [B, 12, H])], {"num_heads": N},
                           {"y": [B, S, H]}, {"gemm", "softmax"}),
    "Attention": ([inp("x", [B, S, H]), const("w", [H, 3 * H]), const("b", [3 * H])], {"num_heads": N},
                  {"y": [B, S, H]}, {"gemm", "softmax"}),
    "PackedAttention": ([inp("x", [12, H]), const("w", [H, 3 * H]), const("b", [3 * H]), inp("offset", [B, S], I32),
                         inp("cum", [B + 1], I32)], {"num_heads": N}, {"y": [12, H]}, {"gemm", "softmax"}),
    "PackedMultiHeadAttention": ([inp("q", [12, H]), inp("k", [12, H]), inp("v", [12, H]), "", inp("offset", [B, S], I32),
                                  inp("cum", [B + 1], I32)], {"num_heads": N}, {"y": [12, H]}, {"gemm", "softmax"}),
    "DecoderMaskedMultiHeadAttention": (
        [inp("q", [B, 1, H]), inp("k", [B, 1, H]), inp("v", [B, 1, H]), "", "", inp("pk", [B, N, 32, HD]),
         inp("pv", [B, N, 32, HD]), const("past_len", [], I32, 10)],
        {"num_heads": N}, {"y": [B, 1, H], "present_k": [B, N, 32, HD], "present_v": [B, N, 32, HD]},
        {"gemm", "softmax"}),
    "SparseAttention": (
        [inp("q", [B, S, H]), inp("k", [B, S, 32]), inp("v", [B, S, 32]), inp("pk", [B, 2, 16, HD]),
         inp("pv", [B, 2, 16, HD]), const("rows", [1, 3], I32, [0, 1, 3]), const("cols", [1, 3], I32, [0, 0, 1]),
         const("total", [], I32, 16), inp("klens", [B], I32)],
        {"num_heads": N, "kv_num_heads": 2, "sparse_block_size": 8},
        {"y": [B, S, H], "present_k": [B, 2, 16, HD], "present_v": [B, 2, 16, HD]}, {"gemm", "softmax"}),
    "SkipLayerNormalization": ([inp("x", [B, S, H]), inp("skip", [B, S, H]), const("g", [H]), const("b", [H])], {},
                               {"y": [B, S, H]}, {"layernorm"}),
    "SkipSimplifiedLayerNormalization": ([inp("x", [B, S, H]), inp("skip", [B, S, H]), const("g", [H])], {},
                                         {"y": [B, S, H]}, {"layernorm"}),
    "SimplifiedLayerNormalization": ([inp("x", [B, S, H]), const("g", [H])], {"axis": -1}, {"y": [B, S, H]},
                                     {"layernorm"}),
    "MatMulNBits": ([inp("a", [B, S, H]), const("w", [32, 2, 16], U8), const("scales", [64])],
                    {"K": H, "N": 32, "bits": 4, "block_size": 32}, {"y": [B, S, 32]}, {"gemm"}),
    "GatherBlockQuantized": ([const("data", [100, 32], U8), inp("ids", [B, S], I64), const("scales", [100, 2])],
                             {"block_size": 32, "gather_axis": 0, "quantize_axis": 1}, {"y": [B, S, H]}, {"memory"}),
    "FastGelu": ([inp("x", [B, S, H]), const("b", [H])], {}, {"y": [B, S, H]}, {"elementwise"}),
    "BiasGelu": ([inp("x", [B, S, H]), const("b", [H])], {}, {"y": [B, S, H]}, {"elementwise"}),
    "QuickGelu": ([inp("x", [B, S, H])], {"alpha": 1.702}, {"y": [B, S, H]}, {"elementwise"}),
    "BiasSplitGelu": ([inp("x", [B, 64, 128]), const("b", [128])], {}, {"y": [B, 64, 64]}, {"elementwise"}),
    "BiasAdd": ([inp("x", [B, 64, 32]), const("b", [32]), inp("skip", [B, 64, 32])], {}, {"y": [B, 64, 32]},
                {"elementwise"}),
    "GemmFastGelu": ([inp("x", [16, H]), const("w", [H, 128]), const("b", [128])], {}, {"y": [16, 128]}, {"gemm"}),
    "MoE": ([inp("x", [16, H]), inp("router", [16, 4]), const("fc1", [4, H, 128]), const("fc1_b", [4, 128]),
             const("fc2", [4, 128, H])], {"k": 2, "activation_type": "gelu"}, {"y": [16, H]},
            {"reduce", "gemm", "elementwise"}),
    "QMoE": ([inp("x", [16, H], F16), inp("router", [16, 4], F16), const("fc1", [4, H, 64], U8), const("fc1_s", [4, 128], F16),
              "", const("fc2", [4, 128, 32], U8), const("fc2_s", [4, H], F16)],
             {"k": 2, "activation_type": "relu", "expert_weight_bits": 4}, {"y": [16, H]},
             {"reduce", "gemm", "elementwise"}),
}
DOMAIN = {"SimplifiedLayerNormalization": ""}


def build(op, spec, path):
    ins, attrs, outs, _ = spec
    inputs, inits, names = [], [], []
    for item in ins:
        if item == "":
            names.append("")
            continue
        kind, name, dims, dt, value = item
        names.append(name)
        if kind == "in":
            inputs.append(helper.make_tensor_value_info(name, dt, dims))
        else:
            arr = np.zeros(dims, NP[dt]) if value is None else np.array(value, NP[dt]).reshape(dims)
            inits.append(numpy_helper.from_array(arr, name))
    node = helper.make_node(op, names, list(outs), name="n", domain=DOMAIN.get(op, "com.microsoft"), **attrs)
    g = helper.make_graph([node], op, inputs, [helper.make_tensor_value_info(o, F, None) for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(m, path)


class ContribOps(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_each_op_has_shapes_and_kernels(self):
        for op, spec in CASES.items():
            with self.subTest(op):
                path = os.path.join(self.tmp.name, op + ".onnx")
                build(op, spec, path)
                r = run_json(path, "--gpu", "h100", "--predictor", "roofline")
                self.assertEqual(r["unknown_ops"], [], r["warnings"])
                self.assertEqual(r["unpredicted_nodes"], 0)
                node = r["nodes"][0]
                shapes = {o["name"]: o["shape"] for o in node["outputs"]}
                for name, want in spec[2].items():
                    self.assertEqual(shapes[name], want, name)
                classes = {k["class"] for k in node["kernels"]}
                self.assertEqual(classes, spec[3])
                for k in node["kernels"]:
                    self.assertGreater(k["bytes"], 0, k)
                    self.assertGreater(k["latency_ms"], 0, k)
                self.assertGreater(sum(k["flops"] for k in node["kernels"]), 0)

    def test_work_counts(self):
        def kernels(op):
            path = os.path.join(self.tmp.name, op + ".onnx")
            build(op, CASES[op], path)
            return run_json(path, "--gpu", "h100", "--predictor", "roofline")["nodes"][0]["kernels"]

        # GQA: 4 query heads over 5 past + 8 new keys; the KV cache append.
        gqa = kernels("GroupQueryAttention")
        qk = next(k for k in gqa if k["class"] == "gemm")
        self.assertEqual(qk["gemm"], {"batch": B * N, "m": S, "n": 13, "k": HD})
        self.assertIn("KV cache append", [k.get("note") for k in gqa])
        # DecoderMaskedMHA: one token attends to past_sequence_length + 1 keys.
        dm = next(k for k in kernels("DecoderMaskedMultiHeadAttention") if k["class"] == "gemm")
        self.assertEqual(dm["gemm"], {"batch": B * N, "m": 1, "n": 11, "k": HD})
        # SparseAttention: 3 blocks over 2 block rows -> 2 blocks of 8 keys per query (of 16).
        sp = next(k for k in kernels("SparseAttention") if k["class"] == "gemm")
        self.assertEqual(sp["gemm"]["n"], 16)
        # PackedAttention: the projection runs on the 12 packed tokens, attention on [2, 8].
        pa = [k for k in kernels("PackedAttention") if k["class"] == "gemm"]
        self.assertEqual(pa[0]["gemm"]["m"], 12)
        self.assertEqual(pa[1]["gemm"], {"batch": B * N, "m": S, "n": S, "k": HD})
        # MoE: 16 tokens x top-2 over 4 experts: 8 tokens per expert, every expert's weights read.
        moe = [k for k in kernels("MoE") if k["class"] == "gemm"]
        self.assertEqual([k["gemm"] for k in moe], [{"batch": 4, "m": 8, "n": 128, "k": H},
                                                    {"batch": 4, "m": 8, "n": H, "k": 128}])
        self.assertEqual(moe[0]["flops"], 2 * 32 * 128 * H)
        # QMoE reads 4-bit weights: less than the MoE's FP32 weights.
        qmoe = [k for k in kernels("QMoE") if k["class"] == "gemm"]
        self.assertEqual(qmoe[0]["gemm"], {"batch": 4, "m": 8, "n": 128, "k": H})
        self.assertLess(qmoe[0]["bytes"], moe[0]["bytes"] / 4)
        # GemmFastGelu: one GEMM, the activation in its epilogue.
        self.assertEqual(len(kernels("GemmFastGelu")), 1)

    def test_onnx_rotary_embedding_needs_opset_23(self):
        # ai.onnx RotaryEmbedding exists from opset 23: lowered there, unknown at an older opset.
        x = helper.make_tensor_value_info("x", F, [B, N, S, HD])
        inits = [numpy_helper.from_array(np.zeros((B, S, 8), np.float32), n) for n in ("cos", "sin")]
        node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], name="rope")
        for opset, cls in ((23, "elementwise"), (22, "unknown")):
            g = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", F, None)], inits)
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
            path = os.path.join(self.tmp.name, f"rope{opset}.onnx")
            onnx.save(m, path)
            r = run_json(path, "--gpu", "h100", "--predictor", "roofline")
            self.assertEqual([k["class"] for k in r["nodes"][0]["kernels"]], [cls])

    def test_op_without_rule_stays_unknown_and_is_counted(self):
        x = helper.make_tensor_value_info("x", F, [B, H])
        nodes = [helper.make_node("NoSuchOp", ["x"], ["a"], name="mystery", domain="com.microsoft"),
                 helper.make_node("Relu", ["x"], ["y"], name="relu")]
        g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", F, None),
                                                helper.make_tensor_value_info("a", F, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        path = os.path.join(self.tmp.name, "unknown.onnx")
        onnx.save(m, path)
        r = run_json(path, "--gpu", "h100", "--predictor", "roofline")
        k = r["nodes"][0]["kernels"]
        self.assertEqual([x["class"] for x in k], ["unknown"])
        self.assertIn("no lowering rule for com.microsoft.NoSuchOp", k[0]["note"])
        self.assertEqual(r["unpredicted_nodes"], 1)
        _, out, _ = run(path, "--gpu", "h100", "--predictor", "roofline")
        self.assertIn("not predicted (1 node, 0 ms): com.microsoft.NoSuchOp", out)


if __name__ == "__main__":
    unittest.main()
