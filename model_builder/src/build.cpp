// build.cpp - Hugging Face config -> ONNX graph that mirrors the PyTorch model.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graph_builder.h"
#include "neusight/model_builder.h"
#include "neusight/onnx_proto.h"

namespace neusight {
using nlohmann::json;
using builder::GraphBuilder;

namespace {

int64_t get_int(const json& j, std::initializer_list<const char*> keys, const std::string& what, bool required,
                int64_t fallback = 0) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it != j.end() && it->is_number_integer()) {
      const int64_t v = it->get<int64_t>();
      if (v < 0) throw InputError(what + ": field '" + k + "' must be non-negative");
      return v;
    }
  }
  if (required) throw InputError(what + ": missing field '" + std::string(*keys.begin()) + "'");
  return fallback;
}

constexpr int kF32 = onnx::TensorProto::FLOAT;
constexpr int kI64 = onnx::TensorProto::INT64;
constexpr int kBool = onnx::TensorProto::BOOL;

// Shared shape plumbing of one graph: the batch and sequence dims as 1-element tensors,
// computed from the input the way PyTorch exports do (Shape -> Gather -> Unsqueeze).
struct ShapeDims {
  std::string batch, seq, seq_scalar;
};

ShapeDims shape_dims(GraphBuilder& b, const std::string& input_ids) {
  ShapeDims d;
  const std::string shape = b.node("Shape", "input_shape", {input_ids});
  const std::string i0 = b.ints("const_idx0", {0}, true);
  const std::string i1 = b.ints("const_idx1", {1}, true);
  const std::string ax0 = b.ints("const_axes0", {0});
  const std::string bs = b.node("Gather", "batch_size", {shape, i0});
  b.attr_i("axis", 0);
  d.seq_scalar = b.node("Gather", "seq_len", {shape, i1});
  b.attr_i("axis", 0);
  d.batch = b.node("Unsqueeze", "batch_size_1d", {bs, ax0});
  d.seq = b.node("Unsqueeze", "seq_len_1d", {d.seq_scalar, ax0});
  return d;
}

// y = x W + bias (PyTorch addmm / Linear), W stored as [in, out].
std::string linear(GraphBuilder& b, const std::string& prefix, const std::string& x, int64_t in, int64_t out,
                   bool bias = true) {
  const std::string w = b.weight(prefix + ".weight", {in, out});
  std::string y = b.node("MatMul", prefix + "/MatMul", {x, w});
  if (bias) {
    const std::string bb = b.weight(prefix + ".bias", {out});
    y = b.node("Add", prefix + "/Add", {y, bb});
  }
  return y;
}

std::string layer_norm(GraphBuilder& b, const std::string& prefix, const std::string& x, int64_t hidden, double eps) {
  const std::string g = b.weight(prefix + ".weight", {hidden});
  const std::string be = b.weight(prefix + ".bias", {hidden});
  const std::string y = b.node("LayerNormalization", prefix + "/LayerNormalization", {x, g, be});
  b.attr_i("axis", -1);
  b.attr_f("epsilon", static_cast<float>(eps));
  return y;
}

// HF "gelu_new": 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), as eager PyTorch
// runs it (one kernel per operator).
std::string gelu_new(GraphBuilder& b, const std::string& p, const std::string& x) {
  const std::string half = b.scalar_f(p + "/c_half", 0.5f);
  const std::string three = b.scalar_f(p + "/c_three", 3.0f);
  const std::string coef = b.scalar_f(p + "/c_coef", 0.044715f);
  const std::string s2pi = b.scalar_f(p + "/c_s2pi", static_cast<float>(std::sqrt(2.0 / M_PI)));
  const std::string one = b.scalar_f(p + "/c_one", 1.0f);
  const std::string m0 = b.node("Mul", p + "/Mul", {x, half});
  const std::string pw = b.node("Pow", p + "/Pow", {x, three});
  const std::string m1 = b.node("Mul", p + "/Mul_1", {pw, coef});
  const std::string a0 = b.node("Add", p + "/Add", {x, m1});
  const std::string m2 = b.node("Mul", p + "/Mul_2", {a0, s2pi});
  const std::string th = b.node("Tanh", p + "/Tanh", {m2});
  const std::string a1 = b.node("Add", p + "/Add_1", {th, one});
  return b.node("Mul", p + "/Mul_3", {m0, a1});
}

// Multi-head causal self-attention in the decomposed form PyTorch exports.
std::string gpt2_attention(GraphBuilder& b, const std::string& p, const std::string& x, const ModelConfig& c,
                           const ShapeDims& d, const std::string& causal_mask) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.hidden / c.heads;
  const std::string qkv = linear(b, p + ".c_attn", x, h, 3 * h);
  const std::string split = b.ints(p + "/split_sizes", {h, h, h});
  auto parts = b.node_n("Split", p + "/Split", {qkv, split}, 3);
  b.attr_i("axis", 2);
  const std::string heads_shape = b.node("Concat", p + "/heads_shape",
                                         {d.batch, d.seq, b.ints(p + "/nh_hd", {nh, hd})});
  b.attr_i("axis", 0);
  auto to_heads = [&](const std::string& t, const std::string& name, std::vector<int64_t> perm) {
    const std::string r = b.node("Reshape", p + "/" + name + "_Reshape", {t, heads_shape});
    const std::string tr = b.node("Transpose", p + "/" + name + "_Transpose", {r});
    b.attr_ints("perm", perm);
    return tr;
  };
  const std::string q = to_heads(parts[0], "q", {0, 2, 1, 3});
  const std::string k = to_heads(parts[1], "k", {0, 2, 3, 1});
  const std::string v = to_heads(parts[2], "v", {0, 2, 1, 3});
  std::string s = b.node("MatMul", p + "/attn/MatMul", {q, k});
  s = b.node("Div", p + "/attn/Div", {s, b.scalar_f(p + "/attn/scale", static_cast<float>(std::sqrt(double(hd))))});
  s = b.node("Where", p + "/attn/Where", {causal_mask, s, b.scalar_f(p + "/attn/min", -3.4028234663852886e38f)});
  s = b.node("Softmax", p + "/attn/Softmax", {s});
  b.attr_i("axis", -1);
  std::string o = b.node("MatMul", p + "/attn/MatMul_1", {s, v});
  o = b.node("Transpose", p + "/attn/Transpose", {o});
  b.attr_ints("perm", {0, 2, 1, 3});
  const std::string merged_shape = b.node("Concat", p + "/merged_shape", {d.batch, d.seq, b.ints(p + "/h", {h})});
  b.attr_i("axis", 0);
  o = b.node("Reshape", p + "/attn/Reshape", {o, merged_shape});
  return linear(b, p + ".c_proj", o, h, h);
}

LoadedModel build_gpt2(const ModelConfig& c) {
  auto holder = std::make_shared<ProtoHolder>();
  onnx::ModelProto& m = holder->model;
  m.set_ir_version(8);
  m.set_producer_name("neusight-onnx model_builder");
  m.set_doc_string("GPT-2 style decoder built from " + c.source);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name(c.model_type);
  GraphBuilder b(g, "weights.bin");

  const std::string ids = b.input("input_ids", kI64, {-1, -1}, {"batch", "sequence"});
  ShapeDims d = shape_dims(b, ids);
  const int64_t h = c.hidden;
  const std::string wte = b.weight("transformer.wte.weight", {c.vocab, h});
  const std::string wpe = b.weight("transformer.wpe.weight", {c.max_positions, h});
  std::string x = b.node("Gather", "transformer.wte/Gather", {wte, ids});
  const std::string pos = b.node("Range", "position_ids", {b.ints("const_zero", {0}, true), d.seq_scalar,
                                                            b.ints("const_one", {1}, true)});
  const std::string pos2 = b.node("Unsqueeze", "position_ids_2d", {pos, b.ints("const_axes0b", {0})});
  const std::string pe = b.node("Gather", "transformer.wpe/Gather", {wpe, pos2});
  x = b.node("Add", "transformer/embed_Add", {x, pe});

  // Causal mask: the registered `bias` buffer sliced to [1, 1, seq, seq] once per forward.
  const std::string bias = b.weight("transformer.causal_bias", {1, 1, c.max_positions, c.max_positions}, kBool);
  const std::string ends = b.node("Concat", "transformer/causal_ends", {d.seq, d.seq});
  b.attr_i("axis", 0);
  const std::string mask = b.node("Slice", "transformer/causal_Slice",
                                  {bias, b.ints("const_zero1", {0, 0}), ends, b.ints("const_axes23", {2, 3})});

  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l);
    const std::string ln1 = layer_norm(b, p + ".ln_1", x, h, c.layer_norm_eps);
    const std::string attn = gpt2_attention(b, p + ".attn", ln1, c, d, mask);
    x = b.node("Add", p + "/residual_Add", {x, attn});
    const std::string ln2 = layer_norm(b, p + ".ln_2", x, h, c.layer_norm_eps);
    std::string f = linear(b, p + ".mlp.c_fc", ln2, h, c.ffn);
    f = c.activation == "relu" ? b.node("Relu", p + ".mlp/Relu", {f}) : gelu_new(b, p + ".mlp/gelu", f);
    f = linear(b, p + ".mlp.c_proj", f, c.ffn, h);
    x = b.node("Add", p + "/residual_Add_1", {x, f});
  }
  x = layer_norm(b, "transformer.ln_f", x, h, c.layer_norm_eps);
  const std::string logits = linear(b, "lm_head", x, h, c.vocab, false);
  g->mutable_node(g->node_size() - 1)->set_output(0, "logits");
  b.output("logits", kF32);

  LoadedModel lm;
  lm.model = to_ir(*holder, "");
  lm.model.graph.name = c.model_type;
  lm.proto = std::move(holder);
  return lm;
}

}  // namespace

ModelConfig read_hf_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": is a directory, not a config file");
  std::ifstream f(path);
  if (!f) throw InputError(path + ": cannot open config");
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception&) {
    throw InputError(path + ": malformed JSON config");
  }
  if (!j.is_object()) throw InputError(path + ": config must be a JSON object");
  ModelConfig c;
  c.source = std::filesystem::path(path).filename().string();
  c.model_type = j.value("model_type", std::string());
  if (c.model_type.empty()) throw InputError(path + ": missing field 'model_type'");
  if (c.model_type == "gpt2") {
    c.layers = get_int(j, {"n_layer", "num_hidden_layers"}, path, true);
    c.hidden = get_int(j, {"n_embd", "hidden_size"}, path, true);
    c.heads = get_int(j, {"n_head", "num_attention_heads"}, path, true);
    c.ffn = get_int(j, {"n_inner"}, path, false, 4 * c.hidden);
    if (c.ffn == 0) c.ffn = 4 * c.hidden;
    c.vocab = get_int(j, {"vocab_size"}, path, true);
    c.max_positions = get_int(j, {"n_positions", "n_ctx"}, path, false, 1024);
    c.activation = j.value("activation_function", std::string("gelu_new"));
    c.layer_norm_eps = j.value("layer_norm_epsilon", 1e-5);
  } else {
    throw InputError(path + ": model_type '" + c.model_type + "' is not supported yet");
  }
  if (c.layers <= 0 || c.hidden <= 0 || c.heads <= 0 || c.hidden % c.heads != 0)
    throw InputError(path + ": hidden size must be a positive multiple of the head count");
  return c;
}

LoadedModel build_model(const ModelConfig& c) {
  if (c.model_type == "gpt2") return build_gpt2(c);
  throw InputError("model_type '" + c.model_type + "' is not supported yet");
}

}  // namespace neusight
