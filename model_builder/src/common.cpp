// common.cpp - building blocks shared by the model families.
#include "common.h"

#include <algorithm>
#include <cmath>

namespace neusight::builder {

namespace {
onnx::ModelProto new_model(const ModelConfig& c, const std::string& doc) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("neusight-onnx model_builder");
  m.set_doc_string(doc + " built from " + c.source);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* ms = m.add_opset_import();  // com.microsoft.Gelu: PyTorch's one-kernel erf GELU
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  bool recurrent = false;  // Mamba-2's and the gated DeltaNet's scans are ai.neusight ops
  for (int64_t l = 0; l < c.layers && !recurrent; ++l) recurrent = mamba_layer(c, l) || delta_layer(c, l);
  if (recurrent) {
    auto* ns = m.add_opset_import();
    ns->set_domain("ai.neusight");
    ns->set_version(1);
  }
  m.mutable_graph()->set_name(c.model_type);
  return m;
}
}  // namespace

Net::Net(const ModelConfig& c, const std::string& doc)
    : model(new_model(c, doc)), b(model.mutable_graph(), "weights.bin"), config(c) {}

std::string Net::token_input(const std::string& name) {
  b.input(name, kI64, {-1, -1}, {"batch", "sequence"});
  if (!batch.empty()) return name;
  const std::string shape = b.node("Shape", "input_shape", {name});
  const std::string i0 = b.ints("const_idx0", {0}, true);
  const std::string i1 = b.ints("const_idx1", {1}, true);
  const std::string ax0 = b.ints("const_axes0", {0});
  batch_scalar = b.node("Gather", "batch_size", {shape, i0});
  b.attr_i("axis", 0);
  seq_scalar = b.node("Gather", "seq_len", {shape, i1});
  b.attr_i("axis", 0);
  batch = b.node("Unsqueeze", "batch_size_1d", {batch_scalar, ax0});
  seq = b.node("Unsqueeze", "seq_len_1d", {seq_scalar, ax0});
  return name;
}

void Net::output(const std::string& tensor, const std::vector<std::string>& sym_dims, const std::vector<int64_t>& dims) {
  std::vector<int64_t> all(sym_dims.size(), -1);
  all.insert(all.end(), dims.begin(), dims.end());
  auto* vi = model.mutable_graph()->add_output();
  vi->set_name(tensor);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(kF32);
  auto* sh = tt->mutable_shape();
  size_t p = 0;
  for (int64_t d : all) {
    auto* dp = sh->add_dim();
    if (d >= 0) dp->set_dim_value(d);
    else dp->set_dim_param(sym_dims[p++]);
  }
}

std::string Net::rename_last(const std::string& name) {
  b.last()->set_output(0, name);
  return name;
}

LoadedModel Net::finish(const ModelConfig& c) {
  // Sliding-window layers keep only their window of the KV cache, which nothing in the graph
  // of an exported decoder step says: the model's metadata does (read by --generate).
  const int64_t sliding = std::count(c.sliding_layers.begin(), c.sliding_layers.end(), true);
  if (c.sliding_window > 0 && sliding > 0) {
    for (const auto& [key, value] : {std::pair<const char*, int64_t>{"neusight.sliding_window", c.sliding_window},
                                     std::pair<const char*, int64_t>{"neusight.sliding_layers", sliding}}) {
      auto* p = model.add_metadata_props();
      p->set_key(key);
      p->set_value(std::to_string(value));
    }
  }
  // The graph is FP32, as from_pretrained loads it; the dtype a serving engine loads the
  // checkpoint in (config_serving_dtype) is said beside it, so that --generate on the export
  // serves it as --generate on the config does.
  auto* served = model.add_metadata_props();
  served->set_key("neusight.serving_dtype");
  served->set_value(dtype_name(config_serving_dtype(c)));
  LoadedModel lm = load_model_from_proto(std::move(model), "");
  lm.model.graph.name = c.model_type;
  return lm;
}

std::string Net::shape_bs(const std::string& name, const std::vector<int64_t>& extra) {
  std::vector<std::string> parts = {batch, seq};
  if (!extra.empty()) parts.push_back(b.ints(name + "_dims", extra));
  const std::string s = b.node("Concat", name, parts);
  b.attr_i("axis", 0);
  return s;
}

std::string f32(Net& n, const std::string& name, float v) { return n.b.scalar_f(name, v); }

std::string sequence_arange(Net& n, const std::string& name) {
  return n.b.node("Range", name, {n.b.ints("const_zero", {0}, true), n.seq_scalar, n.b.ints("const_one", {1}, true)});
}

std::string fill(Net& n, const std::string& name, const std::string& shape, int elem_type, double value) {
  const std::string y = n.b.node("ConstantOfShape", name, {shape});
  auto* a = n.b.last()->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  auto* t = a->mutable_t();
  t->set_data_type(elem_type);
  t->add_dims(1);
  if (elem_type == kI64) t->add_int64_data(static_cast<int64_t>(value));
  else t->add_float_data(static_cast<float>(value));
  return y;
}

namespace {

// Whether a quantized config's linear `prefix` is stored quantized: a projection inside a
// numbered layer (GPTQ and AWQ quantize the layers' Linear modules, not the embedding, the LM
// head or a pooler) whose name's last part is not among modules_to_not_convert.
bool quantized_linear(const ModelConfig& c, const std::string& prefix) {
  if (c.weight_bits <= 0) return false;
  const std::string last = prefix.substr(prefix.rfind('.') + 1);
  if (std::find(c.unquantized.begin(), c.unquantized.end(), last) != c.unquantized.end()) return false;
  size_t i = 0;
  while (i < prefix.size()) {
    const size_t j = std::min(prefix.find('.', i), prefix.size());
    if (j > i && std::all_of(prefix.begin() + i, prefix.begin() + j, [](char ch) { return ch >= '0' && ch <= '9'; }))
      return true;
    i = j + 1;
  }
  return false;
}

}  // namespace

std::string linear(Net& n, const std::string& prefix, const std::string& x, int64_t in, int64_t out, bool bias) {
  std::string y;
  const ModelConfig& c = n.config;
  if (quantized_linear(c, prefix)) {
    // Per-row scales (group_size -1) as 128-wide groups: MatMulNBits takes power-of-two
    // blocks, and the scales are a few percent of the packed weight either way.
    const int64_t block = c.weight_group > 0 ? c.weight_group : 128, groups = (in + block - 1) / block;
    std::vector<std::string> inputs = {x, n.b.weight(prefix + ".qweight", {out, groups, block * c.weight_bits / 8}, kU8),
                                       n.b.weight(prefix + ".scales", {out * groups})};
    if (c.weight_zero_points) inputs.push_back(n.b.weight(prefix + ".qzeros", {out * ((groups * c.weight_bits + 7) / 8)}, kU8));
    y = n.b.node("MatMulNBits", prefix + "/MatMulNBits", inputs, 1, "com.microsoft");
    n.b.attr_i("K", in);
    n.b.attr_i("N", out);
    n.b.attr_i("bits", c.weight_bits);
    n.b.attr_i("block_size", block);
  } else {
    y = n.b.node("MatMul", prefix + "/MatMul", {x, n.b.weight(prefix + ".weight", {in, out})});
  }
  if (bias) {
    const std::string bb = n.b.weight(prefix + ".bias", {out});
    y = n.b.node("Add", prefix + "/Add", {y, bb});
  }
  return y;
}

std::string layer_norm(Net& n, const std::string& prefix, const std::string& x, int64_t hidden, double eps,
                       bool bias) {
  const std::string g = n.b.weight(prefix + ".weight", {hidden});
  std::vector<std::string> in = {x, g};
  if (bias) in.push_back(n.b.weight(prefix + ".bias", {hidden}));
  const std::string y = n.b.node("LayerNormalization", prefix + "/LayerNormalization", in);
  n.b.attr_i("axis", -1);
  n.b.attr_f("epsilon", static_cast<float>(eps));
  return y;
}

std::string rms_norm(Net& n, const std::string& p, const std::string& x, int64_t hidden, double eps, bool weighted) {
  const std::string sq = n.b.node("Pow", p + "/Pow", {x, f32(n, p + "/c_two", 2.0f)});
  const std::string var = n.b.node("ReduceMean", p + "/ReduceMean", {sq});
  n.b.attr_ints("axes", {-1});
  n.b.attr_i("keepdims", 1);
  const std::string ve = n.b.node("Add", p + "/Add", {var, f32(n, p + "/c_eps", static_cast<float>(eps))});
  const std::string sd = n.b.node("Sqrt", p + "/Sqrt", {ve});
  const std::string y = n.b.node("Div", p + "/Div", {x, sd});
  if (!weighted) return y;  // Llama 4's L2Norm of its query and key heads
  return n.b.node("Mul", p + "/Mul", {n.b.weight(p + ".weight", {hidden}), y});
}

std::string dropout(Net& n, const std::string& p, const std::string& x, float ratio) {
  return n.b.node("Dropout", p + "/Dropout", {x, f32(n, p + "/ratio", ratio)});
}

std::string gelu_new(Net& n, const std::string& p, const std::string& x) {
  const std::string m0 = n.b.node("Mul", p + "/Mul", {x, f32(n, p + "/c_half", 0.5f)});
  const std::string pw = n.b.node("Pow", p + "/Pow", {x, f32(n, p + "/c_three", 3.0f)});
  const std::string m1 = n.b.node("Mul", p + "/Mul_1", {pw, f32(n, p + "/c_coef", 0.044715f)});
  const std::string a0 = n.b.node("Add", p + "/Add", {x, m1});
  const std::string m2 =
      n.b.node("Mul", p + "/Mul_2", {a0, f32(n, p + "/c_s2pi", static_cast<float>(std::sqrt(2.0 / M_PI)))});
  const std::string th = n.b.node("Tanh", p + "/Tanh", {m2});
  const std::string a1 = n.b.node("Add", p + "/Add_1", {th, f32(n, p + "/c_one", 1.0f)});
  return n.b.node("Mul", p + "/Mul_3", {m0, a1});
}

std::string gelu(Net& n, const std::string& p, const std::string& x) {
  return n.b.node("Gelu", p + "/Gelu", {x}, 1, "com.microsoft");
}

std::string activation(Net& n, const std::string& p, const std::string& x, const std::string& act) {
  if (act == "relu") return n.b.node("Relu", p + "/Relu", {x});
  if (act == "relu2")  // squared ReLU (Nemotron): torch.pow(F.relu(x), 2), two kernels
    return n.b.node("Pow", p + "/Pow", {n.b.node("Relu", p + "/Relu", {x}), f32(n, p + "/c_two", 2.0f)});
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") return gelu_new(n, p + "/gelu", x);
  if (act == "gelu") return gelu(n, p, x);
  if (act == "silu" || act == "swish") {
    const std::string s = n.b.node("Sigmoid", p + "/Sigmoid", {x});
    return n.b.node("Mul", p + "/Mul", {x, s});
  }
  if (act == "quick_gelu") {  // CLIP: x * sigmoid(1.702 x), three kernels
    const std::string s = n.b.node("Sigmoid", p + "/Sigmoid", {n.b.node("Mul", p + "/Mul", {x, f32(n, p + "/c_1_702", 1.702f)})});
    return n.b.node("Mul", p + "/Mul_1", {x, s});
  }
  throw InputError("activation '" + act + "' is not supported (gelu_new, gelu, relu, relu2, silu, quick_gelu)");
}

std::string split_heads(Net& n, const std::string& p, const std::string& x, int64_t heads, int64_t hd) {
  const std::string r = n.b.node("Reshape", p + "/Reshape", {x, n.shape_bs(p + "/shape", {heads, hd})});
  const std::string t = n.b.node("Transpose", p + "/Transpose", {r});
  n.b.attr_ints("perm", {0, 2, 1, 3});
  return t;
}

std::string merge_heads(Net& n, const std::string& p, const std::string& x, int64_t hidden) {
  const std::string t = n.b.node("Transpose", p + "/Transpose", {x});
  n.b.attr_ints("perm", {0, 2, 1, 3});
  return n.b.node("Reshape", p + "/Reshape", {t, n.shape_bs(p + "/shape", {hidden})});
}

std::string transpose_last(Net& n, const std::string& p, const std::string& k) {
  const std::string t = n.b.node("Transpose", p + "/Transpose", {k});
  n.b.attr_ints("perm", {0, 1, 3, 2});
  return t;
}

std::string seq2seq_attention(Net& n, const std::string& p, const std::string& x, const ModelConfig& c,
                              const std::string& kv, const EncoderDecoderKeys& keys, const std::string& mask,
                              bool k_bias) {
  const int64_t d = c.hidden, nh = c.heads, hd = c.head_dim;
  std::string q = linear(n, p + ".q_proj", x, d, d, true);
  q = n.b.node("Mul", p + "/q_scale", {q, f32(n, p + "/scaling", static_cast<float>(1.0 / std::sqrt(double(hd))))});
  q = split_heads(n, p + "/q", q, nh, hd);
  const std::string src = kv.empty() ? x : kv;
  const auto [k, v] = encoder_decoder_keys(n, p, keys, nh, hd, [&] {
    return std::pair{split_heads(n, p + "/k", linear(n, p + ".k_proj", src, d, d, k_bias), nh, hd),
                     split_heads(n, p + "/v", linear(n, p + ".v_proj", src, d, d, true), nh, hd)};
  });
  std::string s = n.b.node("MatMul", p + "/MatMul", {q, transpose_last(n, p + "/kT", k)});
  if (!mask.empty()) s = n.b.node("Add", p + "/mask_Add", {s, mask});
  s = n.b.node("Softmax", p + "/Softmax", {s});
  n.b.attr_i("axis", -1);
  s = dropout(n, p + ".dropout", s, c.attn_dropout);
  const std::string o = merge_heads(n, p + "/merge", n.b.node("MatMul", p + "/MatMul_1", {s, v}), d);
  return linear(n, p + ".out_proj", o, d, d, true);
}

std::string relative_position_bias(Net& n, const std::string& p, const ModelConfig& c, bool bidirectional,
                                   const std::string& past, const std::string& total) {
  constexpr int64_t kMaxDistance = 128;  // relative_attention_max_distance (T5, MPNet)
  const std::string zero = n.b.ints(p + "/zero", {0}, true), one = n.b.ints(p + "/one", {1}, true);
  const std::string ar = n.b.node("Range", p + "/arange", {zero, total.empty() ? n.seq_scalar : total, one});
  const std::string q_ar = past.empty() ? ar : n.b.node("Range", p + "/query_arange", {past, total, one});
  const std::string ctx = n.b.node("Unsqueeze", p + "/context", {q_ar, n.b.ints(p + "/ax1", {1})});
  const std::string mem = n.b.node("Unsqueeze", p + "/memory", {ar, n.b.ints(p + "/ax0", {0})});
  std::string rel = n.b.node("Sub", p + "/relative_position", {mem, ctx});
  int64_t nb = c.rel_buckets;
  std::string buckets;
  if (bidirectional) {
    nb /= 2;
    const std::string pos = n.b.node("Cast", p + "/positive", {n.b.node("Greater", p + "/Greater", {rel, n.b.ints(p + "/z", {0}, true)})});
    n.b.attr_i("to", kI64);
    buckets = n.b.node("Mul", p + "/bucket_offset", {pos, n.b.ints(p + "/half", {nb}, true)});
    rel = n.b.node("Abs", p + "/Abs", {rel});
  } else {
    rel = n.b.node("Neg", p + "/Neg", {n.b.node("Min", p + "/Min", {rel, n.b.ints(p + "/z", {0}, true)})});
  }
  const int64_t max_exact = nb / 2;
  const std::string small = n.b.node("Less", p + "/is_small", {rel, n.b.ints(p + "/max_exact", {max_exact}, true)});
  std::string large = n.b.node("Cast", p + "/rel_float", {rel});
  n.b.attr_i("to", kF32);
  large = n.b.node("Div", p + "/Div", {large, f32(n, p + "/max_exact_f", float(max_exact))});
  large = n.b.node("Log", p + "/Log", {large});
  large = n.b.node("Div", p + "/Div_1", {large, f32(n, p + "/log_ratio", float(std::log(double(kMaxDistance) / max_exact)))});
  large = n.b.node("Mul", p + "/Mul", {large, f32(n, p + "/span", float(nb - max_exact))});
  large = n.b.node("Cast", p + "/large_long", {large});
  n.b.attr_i("to", kI64);
  large = n.b.node("Add", p + "/Add", {large, n.b.ints(p + "/max_exact_i", {max_exact}, true)});
  large = n.b.node("Min", p + "/Min_1", {large, n.b.ints(p + "/last_bucket", {nb - 1}, true)});
  std::string bucket = n.b.node("Where", p + "/Where", {small, rel, large});
  if (!buckets.empty()) bucket = n.b.node("Add", p + "/Add_1", {buckets, bucket});
  const std::string vals =
      n.b.node("Gather", p + ".relative_attention_bias/Gather", {n.b.weight(p + ".relative_attention_bias.weight", {c.rel_buckets, c.heads}), bucket});
  return n.b.node("Unsqueeze", p + "/bias_4d", {vals, n.b.ints(p + "/ax0b", {0})});
}

std::string padding_positions(Net& n, const std::string& p, const std::string& ids, int64_t padding_idx,
                              const std::string& past) {
  const std::string pad = n.b.ints(p + "/padding_idx", {padding_idx}, true);
  std::string mask = n.b.node("Not", p + "/ne", {n.b.node("Equal", p + "/eq", {ids, pad})});
  mask = n.b.node("Cast", p + "/mask_int", {mask});
  n.b.attr_i("to", kI64);
  std::string cum = n.b.node("CumSum", p + "/cumsum", {mask, n.b.ints(p + "/axis1", {1}, true)});
  if (!past.empty()) cum = n.b.node("Add", p + "/plus_past", {cum, past});
  return n.b.node("Add", p + "/plus_padding_idx", {n.b.node("Mul", p + "/masked", {cum, mask}), pad});
}

std::string decoder_causal_mask(Net& n, const std::string& past, const std::string& total) {
  const std::string zero = n.b.ints("decoder/zero", {0}, true), one = n.b.ints("decoder/one", {1}, true);
  const std::string keys = n.b.node("Range", "decoder/key_positions", {zero, total.empty() ? n.seq_scalar : total, one});
  const std::string queries = past.empty() ? keys : n.b.node("Range", "decoder/query_positions", {past, total, one});
  const std::string later = n.b.node("Greater", "decoder/causal_Greater",
                                     {n.b.node("Unsqueeze", "decoder/key_row", {keys, n.b.ints("decoder/ax0", {0})}),
                                      n.b.node("Unsqueeze", "decoder/query_col", {queries, n.b.ints("decoder/ax1", {1})})});
  std::string m = n.b.node("Cast", "decoder/causal_float", {later});
  n.b.attr_i("to", kF32);
  m = n.b.node("Mul", "decoder/causal_min", {m, f32(n, "decoder/min", kFloatMin)});
  return n.b.node("Unsqueeze", "decoder/causal_4d", {m, n.b.ints("decoder/ax01", {0, 1})});
}


std::string encoder_decoder_cache_inputs(Net& n, int64_t layers, int64_t heads, int64_t hd) {
  for (int64_t l = 0; l < layers; ++l)
    for (const char* part : {"decoder", "encoder"})
      for (const char* which : {"key", "value"})
        n.b.input("past_key_values." + std::to_string(l) + "." + part + "." + which, kF32, {-1, heads, -1, hd},
                  {"batch", std::string(part) == "decoder" ? "past_sequence" : "encoder_sequence"});
  const std::string shape = n.b.node("Shape", "past/shape", {"past_key_values.0.decoder.key"});
  const std::string past = n.b.node("Gather", "past/length", {shape, n.b.ints("past/axis", {2}, true)});
  n.b.attr_i("axis", 0);
  return past;
}

std::pair<std::string, std::string> encoder_decoder_keys(
    Net& n, const std::string& p, const EncoderDecoderKeys& keys, int64_t heads, int64_t hd,
    const std::function<std::pair<std::string, std::string>()>& project) {
  const std::string past = "past_key_values." + std::to_string(keys.layer) + "." + keys.cached;
  if (keys.cached == "encoder") return {past + ".key", past + ".value"};
  std::pair<std::string, std::string> kv;
  if (keys.length.len.empty()) {
    kv = project();
  } else {
    SequenceScope scope(n, keys.length);
    kv = project();
  }
  if (keys.cached == "decoder")
    for (auto* t : {&kv.first, &kv.second}) {
      const std::string which = t == &kv.first ? "key" : "value";
      *t = n.b.node("Concat", p + "/cache_" + which, {past + "." + which, *t});
      n.b.attr_i("axis", 2);
      *t = n.rename_last("present." + std::to_string(keys.layer) + ".decoder." + which);
      n.b.output(*t, kF32, {-1, heads, -1, hd}, {"batch", "total_sequence"});
    }
  return kv;
}

std::string soft_cap(Net& n, const std::string& p, const std::string& x, double cap) {
  const std::string c = f32(n, p + "/cap", static_cast<float>(cap));
  const std::string t = n.b.node("Tanh", p + "/Tanh", {n.b.node("Div", p + "/Div", {x, c})});
  return n.b.node("Mul", p + "/Mul", {t, c});
}

std::string masked_attention(Net& n, const std::string& p, const std::string& q, const std::string& k,
                             const std::string& v, int64_t hd, const std::string& mask,
                             const std::string& dropout_prefix, float attn_dropout, int64_t merged, double softcap,
                             const std::string& bias) {
  std::string s = n.b.node("MatMul", p + "/MatMul", {q, transpose_last(n, p + "/kT", k)});
  s = n.b.node("Div", p + "/Div", {s, f32(n, p + "/scale", static_cast<float>(std::sqrt(double(hd))))});
  if (softcap > 0) s = soft_cap(n, p + "/softcap", s, softcap);
  if (!bias.empty()) s = n.b.node("Add", p + "/bias_Add", {s, bias});
  if (!mask.empty()) s = n.b.node("Add", p + "/mask_Add", {s, mask});
  s = n.b.node("Softmax", p + "/Softmax", {s});
  n.b.attr_i("axis", -1);
  s = dropout(n, dropout_prefix, s, attn_dropout);
  const std::string o = n.b.node("MatMul", p + "/MatMul_1", {s, v});
  return merge_heads(n, p + "/merge", o, merged);
}

// rotate_half(x) = cat(-x2, x1); x_embed = x * cos + rotate_half(x) * sin.
std::string rotate_half_embedding(Net& n, const std::string& p, const std::string& x, int64_t hd, const std::string& cos,
                                  const std::string& sin) {
  const std::string ax = n.b.ints(p + "/axis", {3});
  const std::string x1 = n.b.node("Slice", p + "/x1", {x, n.b.ints(p + "/s0", {0}), n.b.ints(p + "/e0", {hd / 2}), ax});
  const std::string x2 = n.b.node("Slice", p + "/x2", {x, n.b.ints(p + "/s1", {hd / 2}), n.b.ints(p + "/e1", {hd}), ax});
  const std::string neg = n.b.node("Neg", p + "/Neg", {x2});
  const std::string rot = n.b.node("Concat", p + "/rotate_half", {neg, x1});
  n.b.attr_i("axis", -1);
  const std::string a = n.b.node("Mul", p + "/Mul_cos", {x, cos});
  const std::string b = n.b.node("Mul", p + "/Mul_sin", {rot, sin});
  return n.b.node("Add", p + "/Add", {a, b});
}

std::string images_per_sequence(Net& n, const std::string& p, const std::string& features, int64_t images, int64_t tokens,
                                int64_t hidden) {
  if (images <= 1) return features;
  return n.b.node("Reshape", p, {features, n.b.ints(p + "_shape", {-1, images * tokens, hidden})});
}

std::string rotary_self_attention(Net& n, const std::string& s, const std::string& x, int64_t hidden, int64_t heads,
                                  bool bias, const std::string& cos, const std::string& sin) {
  const int64_t h = hidden, hd = hidden / heads;
  std::string q = split_heads(n, s + "/q", linear(n, s + ".q_proj", x, h, h, bias), heads, hd);
  std::string k = split_heads(n, s + "/k", linear(n, s + ".k_proj", x, h, h, bias), heads, hd);
  const std::string v = split_heads(n, s + "/v", linear(n, s + ".v_proj", x, h, h, bias), heads, hd);
  q = rotate_half_embedding(n, s + "/rotary_q", q, hd, cos, sin);
  k = rotate_half_embedding(n, s + "/rotary_k", k, hd, cos, sin);
  return linear(n, s + ".o_proj", masked_attention(n, s, q, k, v, hd, "", s + ".dropout", 0.0f, h), h, h, bias);
}

void image_batch(Net& n, const std::string& scope, const std::string& pixels, int64_t views, int64_t tokens) {
  const std::string shape = n.b.node("Shape", scope + "/input_shape", {pixels});
  std::string images = n.b.node("Gather", scope + "/batch", {shape, n.b.ints(scope + "/idx0", {0}, true)});
  n.b.attr_i("axis", 0);
  if (views > 1) images = n.b.node("Mul", scope + "/views", {images, n.b.ints(scope + "/views_per_sequence", {views}, true)});
  n.batch = n.b.node("Unsqueeze", scope + "/batch_1d", {images, n.b.ints(scope + "/axes0", {0})});
  n.seq = n.b.ints(scope + "/seq_1d", {tokens});
}

std::string image_input(Net& n, const std::string& scope, int64_t channels, int64_t height, int64_t width, int64_t tokens,
                        int64_t views) {
  const std::string pixels =
      n.b.input("pixel_values", kF32,
                views > 1 ? std::vector<int64_t>{-1, views, channels, height, width} : std::vector<int64_t>{-1, channels, height, width},
                {"batch"});
  image_batch(n, scope, pixels, views, tokens);
  if (views <= 1) return pixels;
  return n.b.node("Reshape", scope + "/flatten_views", {pixels, n.b.ints(scope + "/view_shape", {-1, channels, height, width})});
}

}  // namespace neusight::builder
