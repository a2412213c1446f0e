"""A small encoder-decoder as optimum exports it in two files: encoder_model.onnx (token ids,
T5 / BART style, or audio features through a stride-2 convolution, Whisper style) and
decoder_model_merged.onnx, whose If on `use_cache_branch` runs either the first pass (self-
attention over its tokens, cross-attention keys and values projected from
encoder_hidden_states) or a step (past_key_values.N.decoder keys and values concatenated with
the new token's, cross-attention over past_key_values.N.encoder). Zero weights, built with
python3-onnx for the tests."""
import numpy as np
import onnx
from onnx import helper as h, numpy_helper as nh, TensorProto as T

D, HEADS, HD, FFN, VOCAB, LAYERS, FEATURES = 64, 4, 16, 256, 1000, 2, 80


class _G:
    """Nodes and weights of one graph under construction."""

    def __init__(self, prefix, inits):
        self.prefix, self.nodes, self.inits, self.n = prefix, [], inits, 0

    def op(self, op, ins, **attrs):
        self.n += 1
        out = f"{self.prefix}t{self.n}"
        self.nodes.append(h.make_node(op, ins, [out], name=f"{self.prefix}{op}_{self.n}", **attrs))
        return out

    def weight(self, name, shape):
        if name not in self.inits:
            self.inits[name] = nh.from_array(np.zeros(shape, np.float32), name)
        return name

    def const(self, name, values):
        if name not in self.inits:
            self.inits[name] = nh.from_array(np.array(values, np.int64), name)
        return name

    def heads(self, x):  # [b, s, D] -> [b, HEADS, s, HD]
        r = self.op("Reshape", [x, self.const("split_heads", [0, -1, HEADS, HD])])
        return self.op("Transpose", [r], perm=[0, 2, 1, 3])

    def proj(self, x, name, shape=(D, D)):
        return self.op("MatMul", [x, self.weight(name, shape)])

    def attention(self, x, k, v, name):  # x [b, s, D]; k, v [b, HEADS, t, HD]
        q = self.heads(self.proj(x, name + ".q"))
        s = self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])])
        ctx = self.op("MatMul", [self.op("Softmax", [s], axis=-1), v])
        merged = self.op("Reshape", [self.op("Transpose", [ctx], perm=[0, 2, 1, 3]), self.const("merge_heads", [0, -1, D])])
        return self.op("Add", [x, self.proj(merged, name + ".o")])

    def ffn(self, x, name):
        hid = self.op("Relu", [self.proj(x, name + ".fc1", (D, FFN))])
        return self.op("Add", [x, self.proj(hid, name + ".fc2", (FFN, D))])


def _encoder(features, batch):
    inits = {}
    g = _G("", inits)
    if features:
        inputs = [h.make_tensor_value_info("input_features", T.FLOAT, [batch, "feature_size", "encoder_sequence_length"])]
        c = g.op("Conv", ["input_features", g.weight("conv.weight", (D, FEATURES, 3))], kernel_shape=[3], strides=[2], pads=[1, 1])
        x = g.op("Transpose", [c], perm=[0, 2, 1])
    else:
        inputs = [h.make_tensor_value_info(n, T.INT64, [batch, "encoder_sequence_length"])
                  for n in ("input_ids", "attention_mask")]
        x = g.op("Gather", [g.weight("shared.weight", (VOCAB, D)), "input_ids"])
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        x = g.attention(x, g.heads(g.proj(x, p + ".k")), g.heads(g.proj(x, p + ".v")), p + ".self")
        x = g.ffn(x, p)
    g.nodes[-1].output[0] = "last_hidden_state"
    out = h.make_tensor_value_info("last_hidden_state", T.FLOAT, [batch, "encoder_sequence_length" + (" / 2" if features else ""), D])
    return h.make_graph(g.nodes, "encoder", inputs, [out], list(inits.values()))


def _branch(with_past, inits):
    g = _G("with_past/" if with_past else "no_past/", inits)
    x = g.op("Gather", [g.weight("embed.weight", (VOCAB, D)), "input_ids"])
    for i in range(LAYERS):
        p, past = f"decoder.layer.{i}", f"past_key_values.{i}"
        k, v = g.heads(g.proj(x, p + ".self.k")), g.heads(g.proj(x, p + ".self.v"))
        if with_past:
            k = g.op("Concat", [past + ".decoder.key", k], axis=2)
            v = g.op("Concat", [past + ".decoder.value", v], axis=2)
        x = g.attention(x, k, v, p + ".self")
        if with_past:
            ck, cv = past + ".encoder.key", past + ".encoder.value"
        else:
            ck = g.heads(g.proj("encoder_hidden_states", p + ".cross.k"))
            cv = g.heads(g.proj("encoder_hidden_states", p + ".cross.v"))
        x = g.attention(x, ck, cv, p + ".cross")
        x = g.ffn(x, p)
    logits = g.proj(x, "lm_head.weight", (D, VOCAB))
    out = h.make_tensor_value_info(g.prefix + "logits", T.FLOAT, None)
    g.nodes.append(h.make_node("Identity", [logits], [out.name], name=g.prefix + "logits_out"))
    return h.make_graph(g.nodes, g.prefix.rstrip("/"), [], [out])


def _decoder(features):
    inits = {}
    enc_len = "encoder_sequence_length" + (" / 2" if features else "")
    inputs = [h.make_tensor_value_info("input_ids", T.INT64, ["batch_size", "decoder_sequence_length"]),
              h.make_tensor_value_info("encoder_hidden_states", T.FLOAT, ["batch_size", enc_len, D])]
    if not features:
        inputs.insert(0, h.make_tensor_value_info("encoder_attention_mask", T.INT64, ["batch_size", "encoder_sequence_length"]))
    for i in range(LAYERS):
        for kind, length in (("decoder", "past_decoder_sequence_length"), ("encoder", "encoder_sequence_length_out")):
            for t in ("key", "value"):
                inputs.append(h.make_tensor_value_info(f"past_key_values.{i}.{kind}.{t}", T.FLOAT,
                                                       ["batch_size", HEADS, length, HD]))
    inputs.append(h.make_tensor_value_info("use_cache_branch", T.BOOL, [1]))
    then_g, else_g = _branch(True, inits), _branch(False, inits)
    node = h.make_node("If", ["use_cache_branch"], ["logits"], name="optimum::if", then_branch=then_g, else_branch=else_g)
    out = h.make_tensor_value_info("logits", T.FLOAT, ["batch_size", "decoder_sequence_length", VOCAB])
    return h.make_graph([node], "decoder_merged", inputs, [out], list(inits.values()))


def build(encoder_path, decoder_path, features=False, decoder_opset=17, encoder_batch="batch_size"):
    """Writes the encoder and the merged decoder (`features`: a Whisper-style audio encoder;
    `encoder_batch`: the encoder's name for the batch dim)."""
    onnx.save(h.make_model(_encoder(features, encoder_batch), opset_imports=[h.make_opsetid("", 17)]), encoder_path)
    onnx.save(h.make_model(_decoder(features), opset_imports=[h.make_opsetid("", decoder_opset)]), decoder_path)
