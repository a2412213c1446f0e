#!/usr/bin/python3
"""make_corpus.py - write the fuzzer's seed corpus from the project's own models.

    /usr/bin/python3 fuzz/make_corpus.py NEUSIGHT_BIN OUT_DIR [EXAMPLE.onnx]

Seeds are (1) transformer graphs the tool's own model builder exports from tiny Hugging Face
style configs (`neusight-onnx export`), (2) the bundled example when given, and (3) tiny
models written here with python3-onnx, one per family of op rules (matrix products,
convolutions, shape-value subgraphs, control flow, unknown ops, odd dtypes, huge dims), so
that mutations start close to every rule. Nothing is downloaded or copied from elsewhere.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64

# Tiny configs for every model family the builder knows (a family it rejects is skipped).
CONFIGS = {
    "gpt2": {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 64,
             "vocab_size": 101, "activation_function": "gelu_new"},
    "bert": {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
             "intermediate_size": 128, "vocab_size": 101, "max_position_embeddings": 64},
    "opt": {"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "ffn_dim": 128, "vocab_size": 101, "max_position_embeddings": 64},
    "switch": {"model_type": "switch_transformers", "num_layers": 2, "num_decoder_layers": 2, "d_model": 64,
               "num_heads": 4, "d_kv": 16, "d_ff": 128, "vocab_size": 101, "num_experts": 4,
               "expert_capacity": 8},
    "llama": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101,
              "max_position_embeddings": 64, "hidden_act": "silu"},
    "gemma2": {"model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 101,
               "sliding_window": 8},
    "phi": {"model_type": "phi", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 101, "partial_rotary_factor": 0.5},
    "gpt_neox": {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                 "intermediate_size": 128, "vocab_size": 101, "rotary_pct": 0.25},
    "phi3": {"model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101},
    "mixtral": {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101, "num_local_experts": 4,
                "num_experts_per_tok": 2, "sliding_window": 8},
    "gptj": {"model_type": "gptj", "n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "vocab_size": 101},
    "falcon": {"model_type": "falcon", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
               "num_kv_heads": 2, "new_decoder_architecture": True, "vocab_size": 101},
    "starcoder2": {"model_type": "starcoder2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101, "sliding_window": 8},
    "t5": {"model_type": "t5", "num_layers": 2, "d_model": 64, "num_heads": 4, "d_kv": 16, "d_ff": 128,
           "vocab_size": 101, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
    "bloom": {"model_type": "bloom", "n_layer": 2, "hidden_size": 64, "n_head": 4, "vocab_size": 101},
    "mpt": {"model_type": "mpt", "n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 101, "max_seq_len": 64},
    "granite": {"model_type": "granite", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101, "embedding_multiplier": 12.0,
                "residual_multiplier": 0.22, "logits_scaling": 8.0},
    "cohere": {"model_type": "cohere", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
               "intermediate_size": 128, "vocab_size": 101, "use_qk_norm": True},
    "gpt_bigcode": {"model_type": "gpt_bigcode", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 64,
                    "vocab_size": 101},
    "olmo2": {"model_type": "olmo2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "intermediate_size": 128, "vocab_size": 101},
    "nemotron": {"model_type": "nemotron", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101},
    "cohere2": {"model_type": "cohere2", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101, "sliding_window": 8},
    "glm4_moe": {"model_type": "glm4_moe", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128, "vocab_size": 101,
                 "attention_bias": True, "use_qk_norm": True, "n_routed_experts": 4, "num_experts_per_tok": 2,
                 "moe_intermediate_size": 32, "n_shared_experts": 1, "first_k_dense_replace": 1},
    "llama4": {"model_type": "llama4_text", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
               "num_key_value_heads": 2, "intermediate_size": 32, "intermediate_size_mlp": 128, "vocab_size": 101,
               "num_local_experts": 4, "interleave_moe_layer_step": 2, "attention_chunk_size": 16},
    "glm4": {"model_type": "glm4", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101},
    "smollm3": {"model_type": "smollm3", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101},
    "exaone4": {"model_type": "exaone4", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101, "sliding_window": 8,
                "sliding_window_pattern": "LLLG"},
    "mamba2": {"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 4, "head_dim": 32,
               "state_size": 16, "n_groups": 2, "vocab_size": 101, "chunk_size": 16},
    "nemotron_h": {"model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 3, "hybrid_override_pattern": "M*-",
                   "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "mamba_num_heads": 4,
                   "mamba_head_dim": 32, "ssm_state_size": 16, "mamba_n_groups": 2, "vocab_size": 101},
    "qwen3_next": {"model_type": "qwen3_next", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 101,
                   "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                   "shared_expert_intermediate_size": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                   "linear_key_head_dim": 16, "linear_value_head_dim": 16},
    "granitemoehybrid": {"model_type": "granitemoehybrid", "hidden_size": 64, "intermediate_size": 32,
                         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 101,
                         "layer_types": ["mamba", "attention"], "mamba_n_heads": 4, "mamba_d_head": 16,
                         "mamba_d_state": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                         "shared_intermediate_size": 64},
    "llava": {"model_type": "llava", "text_config": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                                     "num_attention_heads": 4, "intermediate_size": 128,
                                                     "vocab_size": 101},
              "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8}},
    "llava_next": {"model_type": "llava_next", "image_grid_pinpoints": [[64, 32], [64, 64]],
                   "text_config": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                   "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 101},
                   "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128,
                                     "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32,
                                     "patch_size": 8}},
    "paligemma": {"model_type": "paligemma",
                  "text_config": {"model_type": "gemma", "num_hidden_layers": 2, "hidden_size": 64,
                                  "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 128,
                                  "vocab_size": 101},
                  "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 64, "intermediate_size": 128,
                                    "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32,
                                    "patch_size": 8}},
    "gemma3_vl": {"model_type": "gemma3", "mm_tokens_per_image": 4,
                  "text_config": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                  "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 128, "vocab_size": 101},
                  "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 64, "intermediate_size": 128,
                                    "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32,
                                    "patch_size": 8}},
    "qwen2_5_vl": {"model_type": "qwen2_5_vl", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 101,
                   "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                                     "out_hidden_size": 64, "fullatt_block_indexes": [1]}},
    "qwen3_vl": {"model_type": "qwen3_vl",
                 "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 64, "intermediate_size": 128,
                                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                                 "num_hidden_layers": 2, "vocab_size": 101},
                 "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                                   "out_hidden_size": 64, "num_position_embeddings": 16, "deepstack_visual_indexes": [0]}},
    "mistral3": {"model_type": "mistral3",
                 "text_config": {"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64,
                                 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                                 "vocab_size": 101},
                 "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                   "num_attention_heads": 2, "patch_size": 14, "image_size": 1540}},
    "llama4_vl": {"model_type": "llama4",
                  "text_config": {"model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 128,
                                  "intermediate_size_mlp": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                                  "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 101, "num_local_experts": 2,
                                  "num_experts_per_tok": 1, "interleave_moe_layer_step": 1},
                  "vision_config": {"hidden_size": 32, "intermediate_size": 128, "num_hidden_layers": 2,
                                    "num_attention_heads": 2, "image_size": 32, "patch_size": 8,
                                    "projector_input_dim": 64, "projector_output_dim": 64}},
    "vit": {"model_type": "vit", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 128, "image_size": 32, "patch_size": 8, "num_labels": 10},
    "deit": {"model_type": "deit", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 128, "image_size": 32, "patch_size": 8, "num_labels": 10},
    "dinov2": {"model_type": "dinov2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
               "mlp_ratio": 2, "use_swiglu_ffn": True, "image_size": 28, "patch_size": 14},
    "deberta": {"model_type": "deberta", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "intermediate_size": 128, "vocab_size": 101, "max_position_embeddings": 64,
                "relative_attention": True, "pos_att_type": "c2p|p2c", "position_biased_input": False},
    "clip": {"model_type": "clip", "projection_dim": 32,
             "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                             "num_attention_heads": 4, "vocab_size": 101, "max_position_embeddings": 16},
             "vision_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "image_size": 32, "patch_size": 8}},
    "siglip_vision": {"model_type": "siglip_vision_model", "hidden_size": 64, "intermediate_size": 128,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8},
    "llama_gptq": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 101,
                   "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": False}},
}


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, values, dtype=I64, dims=None):
    dims = [len(values)] if dims is None else dims
    return helper.make_tensor(name, dtype, dims, values)


def external(name, dims, dtype=F):
    """A weight whose bytes live in an external file that is never written (like exports)."""
    t = TensorProto(name=name, data_type=dtype, dims=dims)
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="weights.bin")
    return t


def model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=(), ir=8):
    g = helper.make_graph(nodes, "seed", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] +
                          [helper.make_opsetid(d, 1) for d in extra_opsets], producer_name="make_corpus")
    m.ir_version = ir
    return m


def n(op, ins, outs, **kw):
    return helper.make_node(op, ins, outs, name=outs[0] + "_" + op, **kw)


def seeds():
    out = {}
    # Linear layers, activations, GEMM variants.
    out["mlp"] = model(
        [n("MatMul", ["X", "W1"], ["h"]), n("Add", ["h", "b1"], ["hb"]), n("Gelu", ["hb"], ["g"], domain="com.microsoft"),
         n("Gemm", ["g", "W2", "b2"], ["Y"], transB=1, alpha=0.5)],
        [vi("X", ["batch", 16])], [vi("Y", None)],
        [const("W1", [0.1] * 512, F, [16, 32]), const("b1", [0.0] * 32, F, [32]),
         const("W2", [0.2] * 256, F, [8, 32]), const("b2", [0.0] * 8, F, [8])], extra_opsets=["com.microsoft"])
    # Attention core: batched matmuls, transpose, softmax, masks, layer norm.
    out["attention"] = model(
        [n("Reshape", ["X", "s4"], ["x4"]), n("Transpose", ["x4"], ["q"], perm=[0, 2, 1, 3]),
         n("Transpose", ["x4"], ["kt"], perm=[0, 2, 3, 1]), n("MatMul", ["q", "kt"], ["s"]),
         n("Div", ["s", "scale"], ["sd"]), n("Where", ["mask", "sd", "neg"], ["sm"]),
         n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "q"], ["o"]),
         n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "s3"], ["o3"]),
         n("LayerNormalization", ["o3", "gamma", "beta"], ["Y"], axis=-1, epsilon=1e-5)],
        [vi("X", ["batch", "sequence", 32]), vi("mask", [1, 1, "sequence", "sequence"], TensorProto.BOOL)],
        [vi("Y", None)],
        [const("s4", [0, 0, 4, 8]), const("s3", [0, 0, 32]), const("scale", [2.83], F, []),
         const("neg", [-1e4], F, []), const("gamma", [1.0] * 32, F, [32]), const("beta", [0.0] * 32, F, [32])])
    # Shape-value subgraph: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
    out["shape_values"] = model(
        [n("Shape", ["X"], ["sh"]), n("Gather", ["sh", "i0"], ["d0"], axis=0), n("Gather", ["sh", "i1"], ["d1"], axis=0),
         n("Mul", ["d1", "two"], ["d1x2"]), n("Unsqueeze", ["d0", "ax0"], ["u0"]), n("Unsqueeze", ["d1x2", "ax0"], ["u1"]),
         n("Concat", ["u0", "u1", "m1"], ["ns"], axis=0), n("Reshape", ["X", "ns"], ["r"]),
         n("Slice", ["r", "st", "en", "axs"], ["sl"]), n("Expand", ["sl", "ns"], ["Y"])],
        [vi("X", ["batch", "sequence", 6])], [vi("Y", None)],
        [const("i0", [0], I64, []), const("i1", [1], I64, []), const("two", [2], I64, []), const("ax0", [0]),
         const("m1", [-1]), const("st", [0]), const("en", [3]), const("axs", [2])])
    # Convolution network.
    out["cnn"] = model(
        [n("Conv", ["X", "Wc", "bc"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
         n("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"]), n("Relu", ["bn"], ["r"]),
         n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         n("ConvTranspose", ["p", "Wt"], ["ct"], kernel_shape=[2, 2], strides=[2, 2]),
         n("GlobalAveragePool", ["ct"], ["gp"]), n("Flatten", ["gp"], ["f"], axis=1),
         n("Gemm", ["f", "Wf"], ["Y"])],
        [vi("X", ["batch", 3, 16, 16])], [vi("Y", None)],
        [const("Wc", [0.1] * 216, F, [8, 3, 3, 3]), const("bc", [0.0] * 8, F, [8]),
         const("g", [1.0] * 8, F, [8]), const("b", [0.0] * 8, F, [8]), const("m", [0.0] * 8, F, [8]),
         const("v", [1.0] * 8, F, [8]), const("Wt", [0.1] * 128, F, [8, 4, 2, 2]),
         const("Wf", [0.1] * 40, F, [4, 10])])
    # Tensor plumbing: split, concat, pad, tile, range, constant-of-shape, cast, reductions.
    out["plumbing"] = model(
        [n("Split", ["X", "spl"], ["a", "b"], axis=1), n("Concat", ["b", "a"], ["c"], axis=1),
         n("Pad", ["c", "pads"], ["pd"]), n("Tile", ["pd", "reps"], ["t"]), n("ReduceMean", ["t"], ["rm"], axes=[1]),
         n("ReduceSum", ["t", "ax1"], ["rs"], keepdims=0), n("Range", ["zero", "lim", "one"], ["rg"]),
         n("ConstantOfShape", ["reps"], ["cos"], value=helper.make_tensor("v", F, [1], [1.0])),
         n("Cast", ["rg"], ["rgf"], to=F), n("ArgMax", ["t"], ["am"], axis=1),
         n("TopK", ["rs", "k"], ["tv", "ti"], axis=-1), n("CumSum", ["rm", "ax1s"], ["Y"])],
        [vi("X", ["batch", 8])], [vi("Y", None), vi("rgf", None), vi("tv", None), vi("cos", None), vi("am", None, I64)],
        [const("spl", [3, 5]), const("pads", [0, 1, 0, 1]), const("reps", [1, 2]), const("ax1", [1]),
         const("zero", [0], I64, []), const("lim", [5], I64, []), const("one", [1], I64, []), const("k", [1]),
         const("ax1s", [0], I64, [])])
    # Embedding lookup, Einsum, Resize, Clip, Erf-based GELU, Pow, Sqrt.
    out["misc"] = model(
        [n("Gather", ["E", "ids"], ["e"], axis=0), n("Einsum", ["e", "We"], ["es"], equation="bsh,hk->bsk"),
         n("Pow", ["es", "p2"], ["sq"]), n("Sqrt", ["sq"], ["rt"]), n("Erf", ["rt"], ["er"]),
         n("Clip", ["er", "lo", "hi"], ["cl"]), n("Unsqueeze", ["cl", "ax"], ["u"]),
         n("Resize", ["u", "", "scales"], ["Y"], mode="nearest")],
        [vi("ids", ["batch", "sequence"], I64)], [vi("Y", None)],
        [const("E", [0.0] * 160, F, [20, 8]), const("We", [0.0] * 32, F, [8, 4]), const("p2", [2.0], F, []),
         const("lo", [0.0], F, []), const("hi", [6.0], F, []), const("ax", [1]),
         const("scales", [1.0, 1.0, 2.0, 2.0], F, [4])])
    # Control flow: If with two branches, Loop with a body.
    then_g = helper.make_graph([n("Relu", ["X"], ["tY"])], "then", [], [vi("tY", None)])
    else_g = helper.make_graph([n("Neg", ["X"], ["eY"])], "else", [], [vi("eY", None)])
    body = helper.make_graph(
        [n("Add", ["acc", "X"], ["acc_out"]), n("Identity", ["cond_in"], ["cond_out"])], "body",
        [vi("iter", [], I64), vi("cond_in", [], TensorProto.BOOL), vi("acc", None)],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", None)])
    out["control_flow"] = model(
        [n("ReduceSum", ["X"], ["s"], keepdims=0), n("Greater", ["s", "z"], ["c"]),
         n("If", ["c"], ["i"], then_branch=then_g, else_branch=else_g),
         n("Loop", ["trip", "", "i"], ["Y"], body=body)],
        [vi("X", ["batch", 4])], [vi("Y", None)],
        [const("z", [0.0], F, []), const("trip", [3], I64, [])])
    # Unknown ops in a custom domain between known ones.
    out["unknown_op"] = model(
        [n("MatMul", ["X", "W"], ["a"]), n("FancyNorm", ["a"], ["b"], domain="org.example", gain=2.0),
         n("Relu", ["b"], ["Y"])],
        [vi("X", ["batch", 8])], [vi("Y", None)], [const("W", [0.0] * 32, F, [8, 4])], extra_opsets=["org.example"])
    # Half precision weights and inputs.
    out["fp16"] = model(
        [n("MatMul", ["X", "W"], ["a"]), n("Softmax", ["a"], ["Y"], axis=-1)],
        [vi("X", ["batch", 8], TensorProto.FLOAT16)], [vi("Y", None, TensorProto.FLOAT16)],
        [helper.make_tensor("W", TensorProto.FLOAT16, [8, 8], [0] * 64)])
    # Huge dims near the 2^62 limit (overflow paths) and an unnamed unknown dim.
    out["huge_dims"] = model(
        [n("MatMul", ["X", "W"], ["Y"])], [vi("X", [1 << 31, 1 << 31])], [vi("Y", None)],
        [external("W", [1 << 31, 4])])
    out["unknown_dim"] = model([n("Relu", ["X"], ["Y"])], [vi("X", [None, 4])], [vi("Y", None)])
    # Old IR: initializers listed as graph inputs, older opset.
    old = model([n("Add", ["X", "B"], ["Y"])], [vi("X", [2, 3]), vi("B", [3])], [vi("Y", None)],
                [const("B", [1.0, 2.0, 3.0], F, [3])], opset=9, ir=3)
    out["old_ir"] = old
    return out


def export_configs(binary, out_dir, tmp):
    for name, cfg in CONFIGS.items():
        path = os.path.join(tmp, name + ".json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        onnx_path = os.path.join(tmp, name + ".onnx")
        p = subprocess.run([binary, "export", "--config", path, "-o", onnx_path], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"make_corpus: skipping {name}: {p.stderr.strip()}", file=sys.stderr)
            continue
        shutil.copyfile(onnx_path, os.path.join(out_dir, "export_" + name + ".onnx"))


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    binary, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        export_configs(binary, out_dir, tmp)
    if len(sys.argv) == 4:
        shutil.copyfile(sys.argv[3], os.path.join(out_dir, "example.onnx"))
    for name, m in seeds().items():
        with open(os.path.join(out_dir, "seed_" + name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())
    print(f"make_corpus: {len(os.listdir(out_dir))} seeds in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
