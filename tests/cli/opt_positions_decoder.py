"""A minimal decoder with OPT's learned positions as Hugging Face exports them: positions from
a CumSum of the attention mask, 1 subtracted, the cached ones sliced off, 2 added before the
lookup into a table of max_positions + 2 rows; a KV cache passed through. Weights as stubs."""
import numpy as np
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper


def build(path, positions=32, hidden=8, vocab=50):
    nodes, inits = [], []

    def w(name, shape):
        t = onnx.TensorProto(); t.name = name; t.data_type = T.FLOAT; t.dims.extend(shape)
        t.data_location = onnx.TensorProto.EXTERNAL
        e = t.external_data.add(); e.key = "location"; e.value = "w.bin"
        inits.append(t); return name

    def c(name, arr):
        inits.append(numpy_helper.from_array(np.array(arr), name)); return name

    def n(op, ins, name, **attrs):
        nodes.append(h.make_node(op, ins, [name], name=name, **attrs)); return name

    inputs = [h.make_tensor_value_info("input_ids", T.INT64, ["batch", "seq"]),
              h.make_tensor_value_info("attention_mask", T.INT64, ["batch", "total"]),
              h.make_tensor_value_info("past_key_values.0.key", T.FLOAT, ["batch", 2, "past", 4]),
              h.make_tensor_value_info("past_key_values.0.value", T.FLOAT, ["batch", 2, "past", 4])]
    tok = n("Gather", [w("embed_tokens.weight", [vocab, hidden]), "input_ids"], "tok")
    pos = n("CumSum", ["attention_mask", c("axis1", np.array(1, np.int64))], "cumsum")
    pos = n("Mul", [pos, "attention_mask"], "masked")
    pos = n("Sub", [pos, c("one", np.array(1, np.int64))], "zero_based")
    past = n("Gather", [n("Shape", ["past_key_values.0.key"], "past_shape"), c("two", np.array([2], np.int64))], "past_len")
    pos = n("Slice", [pos, past, c("end", np.array([2**62], np.int64)), c("axes", np.array([1], np.int64))], "new_positions")
    pos = n("Add", [pos, c("offset", np.array(2, np.int64))], "offset_positions")
    pe = n("Gather", [w("embed_positions.weight", [positions + 2, hidden]), pos], "pos_embed")
    x = n("Add", [tok, pe], "embed_add")
    logits = n("MatMul", [x, w("lm_head.weight", [hidden, vocab])], "logits")
    outputs = [h.make_tensor_value_info(logits, T.FLOAT, ["batch", "seq", vocab])]
    for kv in ("key", "value"):
        new = n("Reshape", [n("Slice", [x, c(f"s0_{kv}", np.array([0], np.int64)), c(f"s1_{kv}", np.array([8], np.int64)),
                                         c(f"sa_{kv}", np.array([2], np.int64))], f"{kv}_slice"),
                            c(f"shape_{kv}", np.array([0, 2, -1, 4], np.int64))], f"{kv}_new")
        new = n("Transpose", [new], f"{kv}_t", perm=[0, 1, 2, 3])
        nodes.append(h.make_node("Concat", [f"past_key_values.0.{kv}", new], [f"present.0.{kv}"], name=f"present_{kv}", axis=2))
        outputs.append(h.make_tensor_value_info(f"present.0.{kv}", T.FLOAT, ["batch", 2, "total", 4]))
    g = h.make_graph(nodes, "opt_positions", inputs, outputs, inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
