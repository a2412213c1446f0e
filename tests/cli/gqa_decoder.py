"""An onnxruntime-genai style decoder for the tests: a Llama-style decoder with KV cache built
from com.microsoft GroupQueryAttention, RotaryEmbedding and (optionally) MatMulNBits, with
past_key_values.N.key/value inputs and present.N.key/value outputs; weights as stubs."""
import numpy as np
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper

def build(path, hidden=512, heads=8, kv=2, ffn=1024, layers=2, vocab=4000, nbits=False):
    """Writes the decoder to `path` (FP16; 4-bit MatMulNBits projections with `nbits`)."""
    hd = hidden // heads
    nodes, inits = [], []
    def w(name, shape, dt=T.FLOAT16):
        # An external-data stub: shapes and bytes, never the values.
        t = onnx.TensorProto(); t.name = name; t.data_type = dt; t.dims.extend(shape)
        t.data_location = onnx.TensorProto.EXTERNAL
        e = t.external_data.add(); e.key = "location"; e.value = "w.bin"
        inits.append(t); return name
    def c(name, arr):
        inits.append(numpy_helper.from_array(np.array(arr), name)); return name
    def n(op, ins, outs, name, domain="", **attrs):
        nodes.append(h.make_node(op, ins, outs, name=name, domain=domain, **attrs)); return outs[0]
    def linear(x, din, dout, name):
        if nbits:
            blk = 32
            wq = w(name + ".qweight", [dout, din // blk, blk // 2], T.UINT8)
            sc = w(name + ".scales", [dout * (din // blk)], T.FLOAT16)
            return n("MatMulNBits", [x, wq, sc], [name + "_out"], name, "com.microsoft", K=din, N=dout, bits=4, block_size=blk)
        return n("MatMul", [x, w(name + ".weight", [din, dout])], [name + "_out"], name)
    inputs = [h.make_tensor_value_info("input_ids", T.INT64, ["batch_size", "sequence_length"]),
              h.make_tensor_value_info("attention_mask", T.INT64, ["batch_size", "total_sequence_length"]),
              h.make_tensor_value_info("position_ids", T.INT64, ["batch_size", "sequence_length"])]
    outputs = [h.make_tensor_value_info("logits", T.FLOAT16, ["batch_size", "sequence_length", vocab])]
    for l in range(layers):
        for kvn in ("key", "value"):
            inputs.append(h.make_tensor_value_info(f"past_key_values.{l}.{kvn}", T.FLOAT16, ["batch_size", kv, "past_sequence_length", hd]))
            outputs.append(h.make_tensor_value_info(f"present.{l}.{kvn}", T.FLOAT16, ["batch_size", kv, "total_sequence_length", hd]))
    # seqlens_k = sum(mask) - 1 (int32), total = mask.shape[1] (int32 scalar)
    s = n("ReduceSum", ["attention_mask", c("one_axis", np.array([1], np.int64))], ["mask_sum"], "mask_sum", keepdims=0)
    s = n("Sub", [s, c("one64", np.array(1, np.int64))], ["mask_sub"], "mask_sub")
    seqlens = n("Cast", [s], ["seqlens_k"], "seqlens_k", to=T.INT32)
    shp = n("Shape", ["attention_mask"], ["mask_shape"], "mask_shape")
    tot = n("Gather", [shp, c("idx1", np.array(1, np.int64))], ["total_len64"], "total_len", axis=0)
    total = n("Cast", [tot], ["total_len"], "total_len_cast", to=T.INT32)
    cos = w("cos_cache", [4096, hd // 2]); sin = w("sin_cache", [4096, hd // 2])
    x = n("Gather", [w("embed_tokens.weight", [vocab, hidden]), "input_ids"], ["embed"], "embed", axis=0)
    skip = None
    for l in range(layers):
        p = f"layers.{l}"
        a = n("SimplifiedLayerNormalization", [x, w(p + ".input_layernorm.weight", [hidden])], [p + "_ln1"], p + ".input_layernorm", epsilon=1e-5, axis=-1)
        q = linear(a, hidden, heads * hd, p + ".q_proj")
        k = linear(a, hidden, kv * hd, p + ".k_proj")
        v = linear(a, hidden, kv * hd, p + ".v_proj")
        q = n("RotaryEmbedding", [q, "position_ids", cos, sin], [p + "_qrot"], p + ".q_rotary", "com.microsoft", num_heads=heads)
        k = n("RotaryEmbedding", [k, "position_ids", cos, sin], [p + "_krot"], p + ".k_rotary", "com.microsoft", num_heads=kv)
        o = n("GroupQueryAttention", [q, k, v, f"past_key_values.{l}.key", f"past_key_values.{l}.value", seqlens, total],
              [p + "_attn", f"present.{l}.key", f"present.{l}.value"], p + ".attn", "com.microsoft", num_heads=heads, kv_num_heads=kv)
        o = linear(o, heads * hd, hidden, p + ".o_proj")
        x = n("Add", [x, o], [p + "_res1"], p + ".residual1")
        f = n("SimplifiedLayerNormalization", [x, w(p + ".post_attention_layernorm.weight", [hidden])], [p + "_ln2"], p + ".post_attention_layernorm", epsilon=1e-5, axis=-1)
        g = linear(f, hidden, ffn, p + ".gate_proj")
        g = n("Mul", [g, n("Sigmoid", [g], [p + "_sig"], p + ".sigmoid")], [p + "_silu"], p + ".silu")
        u = linear(f, hidden, ffn, p + ".up_proj")
        d = linear(n("Mul", [g, u], [p + "_gu"], p + ".gate_up"), ffn, hidden, p + ".down_proj")
        x = n("Add", [x, d], [p + "_res2"], p + ".residual2")
    x = n("SimplifiedLayerNormalization", [x, w("norm.weight", [hidden])], ["final_ln"], "norm", epsilon=1e-5, axis=-1)
    n("MatMul", [x, w("lm_head.weight", [hidden, vocab])], ["logits"], "lm_head")
    g = h.make_graph(nodes, "gqa_decoder", inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, path)

