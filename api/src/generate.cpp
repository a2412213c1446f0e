// generate.cpp - an LLM generation: one prefill of the prompt, then decode steps of one token
// per sequence reading a growing KV cache; a few decode steps predicted, the rest interpolated.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "batch_search.h"
#include "footprint.h"
#include "neusight/neusight.h"
#include "pipeline.h"
#include "positions.h"

namespace neusight {
namespace {



// Expert weights a decode step of `tokens` tokens leaves unread: per MoE / QMoE node, its
// expert weights times the share of experts the tokens do not reach (moe_experts_reached).
double unread_expert_bytes(const Graph& g, const Options& o, int64_t tokens) {
  double unread = 0;
  // A branch's own tensor, else the outer graph's it reads (the weights).
  const auto find = [&](const Graph& sg, const std::string& name) {
    const TensorInfo* t = sg.find(name);
    return t ? t : g.find(name);
  };
  each_node(g, [&](const Graph& sg, const Node& n) {
    if (n.op_type != "MoE" && n.op_type != "QMoE") return;
    const TensorInfo* router = n.inputs.size() > 1 && !n.inputs[1].empty() ? find(sg, n.inputs[1]) : nullptr;
    if (!router || router->shape.size() != 2 || !router->shape[1].known()) return;
    const int64_t experts = router->shape[1].value;
    const double reached = moe_experts_reached(double(tokens), experts, n.attr_i("k", 1));
    const MoeWeightInputs w = moe_weight_inputs(n.op_type);
    double b = 0;
    for (size_t weight : {w.fc1, w.fc2, w.fc3})
      for (size_t i = weight; i <= weight + (w.scales ? 1 : 0); ++i) {
        const TensorInfo* t = i < n.inputs.size() && !n.inputs[i].empty() ? find(sg, n.inputs[i]) : nullptr;
        if (t && t->is_initializer) b += gemm_weight_bytes(t, o);
      }
    if (experts > 0) unread += b * (1.0 - reached / double(experts));
  });
  return unread;
}

// Whether `name` is one of `g`'s graph inputs.
bool has_input(const Graph& g, const std::string& name) {
  return std::find(g.inputs.begin(), g.inputs.end(), name) != g.inputs.end();
}

// Binds `name` to `v` in `o` where it is a dim of `g`'s inputs (no warning for the others).
void bind_if_input_dim(Options& o, const Graph& g, const std::string& name, int64_t v) {
  if (name.empty()) return;
  for (const auto& in : g.inputs)
    if (const TensorInfo* t = g.find(in); t && t->has_shape)
      for (const auto& dim : t->shape)
        if (!dim.known() && dim.param == name) {
          o.dims.named[name] = v;
          return;
        }
}

// Options of one phase: batch, the step's tokens and, for a graph with a cache, its length.
Options phase_options(const Options& base, const Decoder& d, int64_t batch, int64_t tokens, int64_t past, bool cache) {
  Options o = base;
  // Serving engines load Q, K, V and gate, up as concatenated weights.
  o.serving_kernels = base.fusion == Fusion::full && base.mode == Mode::inference;
  o.dims.batch = batch;
  o.dims.seq = tokens;
  if (!d.token_dim.empty()) {  // an ONNX encoder-decoder's decoder: its tokens by name
    o.dims.seq = -1;
    o.dims.named[d.token_dim] = tokens;
  }
  if (!d.batch_dims.empty()) o.dims.batch = -1;
  for (const auto& b : d.batch_dims) o.dims.named[b] = batch;
  if (!cache) return o;
  if (!d.cache_branch.empty()) o.dims.values[d.cache_branch] = past > 0 ? 1.0 : 0.0;
  if (!d.past_dim.empty()) o.dims.named[d.past_dim] = past;
  for (const auto& t : d.total_dims) o.dims.named[t] = past + tokens;
  return o;
}

// An encoder-decoder's dims that hold the encoder's length (its cross-attention cache's, and an
// ONNX decoder's hidden states' and mask's), bound where `g` has them.
void bind_encoder_lengths(Options& o, const Graph& g, const Decoder& d, int64_t prompt) {
  if (!d.encoder_decoder()) return;
  // --shape / --value of the encoder's inputs (a features encoder's input_features) bind the
  // prefill, which runs it; a step's graph has no such input.
  auto keep_inputs = [&g](auto& by_input) {
    for (auto it = by_input.begin(); it != by_input.end();) it = has_input(g, it->first) ? std::next(it) : by_input.erase(it);
  };
  keep_inputs(o.dims.shapes);
  keep_inputs(o.dims.values);
  bind_if_input_dim(o, g, d.encoder_dim, d.encoder_cached(prompt));
  for (const auto& dim : d.encoder_bound_dims) bind_if_input_dim(o, g, dim, d.encoder_cached(prompt));
}

// The prefill's options. An ONNX encoder-decoder's (one graph: the encoder, then the
// decoder's first pass, without a cache): the encoder reads the prompt (or its features, bound
// by the caller's dims), the decoder its start token (or, Whisper, the prompt).
Options prefill_options(const Options& base, const Decoder& d, int64_t batch, int64_t prompt) {
  if (d.token_dim.empty()) return phase_options(base, d, batch, prompt, 0, d.prefill_is_step);
  Options o = phase_options(base, d, batch, d.decoder_cached(prompt), 0, true);
  bind_if_input_dim(o, d.prefill.model.graph, d.encoder_input_dim, prompt);
  bind_encoder_lengths(o, d.prefill.model.graph, d, prompt);
  return o;
}

// Values at every integer point of [x.front(), x.back()], linear between the samples.
double interpolate(const std::vector<int64_t>& x, const std::vector<double>& y, int64_t at) {
  if (x.size() == 1 || at <= x.front()) return y.front();
  for (size_t i = 1; i < x.size(); ++i)
    if (at <= x[i]) return y[i - 1] + (y[i] - y[i - 1]) * double(at - x[i - 1]) / double(x[i] - x[i - 1]);
  return y.back();
}

// Sum over every integer point of [x.front(), x.back()] of the linear interpolation.
double interpolated_sum(const std::vector<int64_t>& x, const std::vector<double>& y) {
  if (x.size() == 1) return y.front();
  double sum = y.back();
  for (size_t i = 1; i < x.size(); ++i) {
    const double n = double(x[i] - x[i - 1]);  // points x[i-1] .. x[i]-1
    sum += n * y[i - 1] + (y[i] - y[i - 1]) * (n - 1) / 2.0;
  }
  return sum;
}

// The recurrent layers of a hybrid or state-space config and each sequence's states there:
// Mamba-2 layers (Mamba-2 and Nemotron-H's 'M' blocks, Granite 4.0-H's mamba layers) keep a
// [head_dim x state] scan state per head, Qwen3-Next's gated DeltaNet layers a [key_dim x
// value_dim] one per value head, both the last conv_kernel - 1 inputs of their convolution.
// `layers` is left the attention layers' count.
void recurrent_layers(const ModelConfig& c, Decoder& d) {
  int64_t mamba = 0, delta = 0, attention = 0;
  for (int64_t l = 0; l < c.layers; ++l) {
    mamba += mamba_layer(c, l);
    delta += delta_layer(c, l);
    attention += attention_layer(c, l);
  }
  if (mamba + delta == 0) return;
  d.layers = attention;
  d.state_layers = mamba + delta;
  const double taps = double(c.conv_kernel - 1);
  const double mamba_conv = double(c.mamba_heads * c.mamba_head_dim + 2 * c.ssm_groups * c.ssm_state);
  const double delta_conv = double(2 * c.delta_key_heads * c.delta_key_dim + c.delta_value_heads * c.delta_value_dim);
  d.state_elements =
      double(mamba) * (double(c.mamba_heads) * double(c.mamba_head_dim) * double(c.ssm_state) + mamba_conv * taps) +
      double(delta) * (double(c.delta_value_heads) * double(c.delta_key_dim) * double(c.delta_value_dim) + delta_conv * taps);
}

}  // namespace

Decoder config_decoder(const ModelConfig& config) {
  Decoder d;
  // T5 and Whisper: the step's caches are the decoder layers' self-attention and
  // cross-attention keys and values, of every head (build_t5_generation, build_whisper_generation).
  const bool encoder_decoder = config.decoder_layers > 0;
  d.step = build_model(config, BuildOptions{true});  // an encoder family fails here, naming the decoders
  BuildOptions prefill;
  prefill.last_logits = true;
  d.prefill = build_model(config, prefill);
  d.prefill.model.path = d.step.model.path = "";
  d.past_dim = "past_sequence";
  d.layers = encoder_decoder ? config.decoder_layers : config.layers;
  if (encoder_decoder) d.encoder_dim = "encoder_sequence";
  d.encoder_tokens = config.source_positions;  // Whisper's audio positions; 0 for T5
  d.kv_heads = encoder_decoder ? config.heads : config.kv_heads;
  d.head_dim = config.head_dim;
  d.kv_dtype = DType::f32;
  d.serving_dtype = config_serving_dtype(config);
  if (config.tie_embeddings) d.tied_head_weight = config.model_type == "whisper" ? "proj_out.weight" : "lm_head.weight";
  if (config.kv_lora_rank > 0) {  // MLA: one latent of kv_lora_rank + qk_rope per token
    d.kv_heads = 1;
    d.head_dim = config.kv_lora_rank + config.qk_rope_dim;
    d.kv_tensors = 1;
  }
  recurrent_layers(config, d);
  if (config.image_in_sequence()) d.image_tokens = config.vision.sequence_tokens();
  if (config.learned_positions) d.max_positions = config.max_positions;
  if (!encoder_decoder) {
    auto built = std::make_shared<std::pair<std::once_flag, LoadedModel>>();
    d.cached_prefill = [config, built]() -> const LoadedModel& {
      std::call_once(built->first, [&] {
        BuildOptions o{true};
        o.last_logits = true;
        built->second = build_model(config, o);
        built->second.model.path = "";
      });
      return built->second;
    };
  }
  // A state-space model keeps no keys or values: no heads or tensors to describe.
  if (d.layers == 0) d.kv_heads = d.head_dim = d.kv_tensors = 0;
  // A window of at least the model's positions (SmolLM3's rotary layers) never binds.
  if (config.sliding_window > 0 && (config.max_positions <= 0 || config.sliding_window < config.max_positions)) {
    d.window = config.sliding_window;
    d.sliding_layers = std::count(config.sliding_layers.begin(), config.sliding_layers.end(), true);
  }
  return d;
}

Decoder mtp_decoder(const ModelConfig& config) {
  if (config.mtp_layers <= 0)
    throw InputError((config.source.empty() ? std::string("config") : config.source) +
                     ": no multi-token-prediction module (num_nextn_predict_layers) to draft with");
  ModelConfig m = config;
  m.layers = 1;
  m.dense_layers.clear();  // the module's layer is a mixture-of-experts layer
  if (!m.sliding_layers.empty()) m.sliding_layers.resize(1);
  m.mtp_layers = 0;
  m.mtp_module = true;
  Decoder d = config_decoder(m);
  d.prefill.model.path = d.step.model.path = "mtp";
  return d;
}

namespace {
// The recurrent layers' states of a hybrid or state-space decoder step (this tool's export:
// past_conv_state.N for a layer's convolution, past_ssm_state.N for a Mamba-2 layer's scan,
// past_delta_state.N for a gated DeltaNet layer's): [batch, ...] of a fixed size, held whatever
// the sequence's length. Sets d.state_layers and d.state_elements; returns the states' type
// (undefined without any).
DType recurrent_state_inputs(const Graph& g, const std::string& what, Decoder& d) {
  static const std::regex state_re(R"(past_(conv|ssm|delta)_state\.(\d{1,6}))");
  std::set<int64_t> layers;
  DType dtype = DType::undefined;
  for (const auto& name : g.inputs) {
    std::smatch m;
    if (!std::regex_match(name, m, state_re)) continue;
    const TensorInfo* t = g.find(name);
    bool fixed = t && t->has_shape && t->shape.size() >= 2 && (!t->shape[0].known() || t->shape[0].value == 1);
    double elements = 1;
    for (size_t i = 1; fixed && i < t->shape.size(); ++i) {
      fixed = t->shape[i].known() && t->shape[i].value > 0;
      elements *= double(t->shape[i].value);
    }
    if (!fixed) throw InputError(what + ": input '" + name + "' must be [batch, ...] with every other dim a fixed size");
    d.state_elements += elements;
    layers.insert(std::stoll(m[2].str()));
    dtype = t->dtype;
  }
  d.state_layers = static_cast<int64_t>(layers.size());
  return dtype;
}

}  // namespace

Decoder onnx_decoder(LoadedModel model) {
  const Graph& g = model.model.graph;
  const std::string what = model.model.path.empty() ? "model" : model.model.path;
  // optimum / onnxruntime-genai: past_key_values.N.key and .value, [batch, kv_heads, past,
  // head_dim]; onnxruntime's older GPT-2 exports: past_N holding both, [2, batch, heads, past,
  // head_dim].
  static const std::regex split_re(R"(past_key_values\.(\d{1,6})\.(key|value))");
  static const std::regex stacked_re(R"(past_(\d{1,6}))");
  Decoder d;
  std::set<int64_t> layers;
  bool values = false;
  for (const auto& name : g.inputs) {
    std::smatch m;
    const bool split = std::regex_match(name, m, split_re);
    if (!split && !std::regex_match(name, m, stacked_re)) continue;
    const TensorInfo* t = g.find(name);
    const size_t o = split ? 0 : 1;  // offset of the [batch, heads, past, head_dim] dims
    if (!t || !t->has_shape || t->shape.size() != 4 + o || (!split && t->shape[0].value != 2) ||
        !t->shape[o + 1].known() || !t->shape[o + 3].known() || t->shape[o + 2].known() || t->shape[o + 2].param.empty())
      throw InputError(what + ": input '" + name + "' must be " +
                       (split ? "[batch, kv_heads, past_length, head_dim]" : "[2, batch, heads, past_length, head_dim]") +
                       " with a symbolic past length");
    const Dim& past = t->shape[o + 2];
    if (d.past_dim.empty()) {
      d.past_dim = past.param;
      d.kv_heads = t->shape[o + 1].value;
      d.head_dim = t->shape[o + 3].value;
      d.kv_dtype = t->dtype;
    } else if (past.param != d.past_dim || t->shape[o + 1].value != d.kv_heads || t->shape[o + 3].value != d.head_dim) {
      throw InputError(what + ": the KV-cache inputs disagree on their shape ('" + name + "')");
    }
    layers.insert(std::stoll(m[1].str()));
    values = values || !split || m[2].str() == "value";
  }
  const DType state_dtype = recurrent_state_inputs(g, what, d);
  if (layers.empty() && d.state_layers > 0) {
    // A state-space model keeps no keys or values; its states are held in their inputs' type.
    d.layers = 0;
    d.kv_heads = d.head_dim = d.kv_tensors = 0;
    d.kv_dtype = state_dtype;
  } else if (layers.empty()) {
    static const std::regex cross_re(R"(past_key_values\.\d{1,6}\.(decoder|encoder)\.(key|value))");
    for (const auto& name : g.inputs)
      if (std::regex_match(name, cross_re))
        throw InputError(what + ": an encoder-decoder's decode step ('" + name +
                         "'): --generate needs its encoder too (--encoder encoder_model.onnx, or its config.json with --config)");
    throw InputError(what + ": --generate needs a decoder with a KV cache (past_key_values.N.key / .value or past_N "
                            "inputs) or recurrent states (past_conv_state.N, past_ssm_state.N, past_delta_state.N)");
  } else {
    d.layers = static_cast<int64_t>(layers.size());
    if (!values) d.kv_tensors = 1;  // keys alone: a latent cache (MLA)
  }
  // GroupQueryAttention layers with a local window (onnxruntime-genai's sliding-window layers).
  for (const Node& n : g.nodes) {
    if (n.op_type != "GroupQueryAttention") continue;
    const int64_t w = n.attr_i("local_window_size", -1);
    if (w <= 0) continue;
    ++d.sliding_layers;
    d.window = d.window > 0 ? std::min(d.window, w) : w;
  }
  // A decoder step this tool exported says its sliding-window layers in its metadata.
  if (d.sliding_layers == 0) {
    const auto& meta = model.model.metadata;
    const auto w = meta.find("neusight.sliding_window"), n = meta.find("neusight.sliding_layers");
    // A positive decimal integer below 2^62, or 0 (the pair is then ignored).
    auto positive = [](const std::string& text) -> int64_t {
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      return errno == 0 && end != text.c_str() && *end == '\0' && v > 0 && v < (int64_t(1) << 62) ? v : 0;
    };
    const int64_t window = w != meta.end() ? positive(w->second) : 0;
    const int64_t layers = n != meta.end() ? positive(n->second) : 0;
    if (window > 0 && layers > 0) {
      d.window = window;
      d.sliding_layers = layers;
    }
  }
  d.sliding_layers = std::min(d.sliding_layers, d.layers);
  // A decoder step this tool exported from a config says the dtype a serving engine loads its
  // checkpoint in (its weights are FP32, as from_pretrained loads them).
  if (const auto s = model.model.metadata.find("neusight.serving_dtype"); s != model.model.metadata.end())
    if (const auto dt = parse_dtype(s->second); dt && is_float(*dt)) d.serving_dtype = *dt;
  // An attention mask over past + new tokens has its own symbolic length.
  for (const auto& name : g.inputs) {
    const TensorInfo* t = g.find(name);
    if (name != "attention_mask" || !t || !t->has_shape || t->shape.size() != 2) continue;
    const Dim& len = t->shape[1];
    if (!len.known() && !len.param.empty() && len.param != d.past_dim) d.total_dims.push_back(len.param);
  }
  // optimum's merged decoder: `use_cache_branch` [1] chooses the branch with the cache.
  if (has_input(g, "use_cache_branch")) d.cache_branch = "use_cache_branch";
  d.max_positions = learned_positions(g);
  d.step = std::move(model);
  d.prefill = d.step;
  d.prefill_is_step = true;
  return d;
}

namespace {

// A symbolic dim of a graph input's axis, or "" (a fixed or unnamed dim, a missing input).
std::string input_dim(const Graph& g, const std::string& name, size_t axis) {
  const TensorInfo* t = g.find(name);
  if (!t || !t->has_shape || t->shape.size() <= axis || t->shape[axis].known()) return "";
  return t->shape[axis].param;
}

// The decoder's caches: past_key_values.N.decoder (self-attention) and .encoder
// (cross-attention) keys and values, [batch, heads, length, head_dim].
void seq2seq_caches(const Graph& g, const std::string& what, Decoder& d) {
  static const std::regex re(R"(past_key_values\.(\d{1,6})\.(decoder|encoder)\.(key|value))");
  std::set<int64_t> layers;
  for (const auto& name : g.inputs) {
    std::smatch m;
    if (!std::regex_match(name, m, re)) continue;
    const TensorInfo* t = g.find(name);
    if (!t || !t->has_shape || t->shape.size() != 4 || !t->shape[1].known() || !t->shape[3].known() ||
        t->shape[2].known() || t->shape[2].param.empty())
      throw InputError(what + ": input '" + name + "' must be [batch, heads, length, head_dim] with a symbolic length");
    std::string& dim = m[2].str() == "decoder" ? d.past_dim : d.encoder_dim;
    if (d.kv_heads == 0) {
      d.kv_heads = t->shape[1].value;
      d.head_dim = t->shape[3].value;
      d.kv_dtype = t->dtype;
    }
    if ((!dim.empty() && dim != t->shape[2].param) || t->shape[1].value != d.kv_heads || t->shape[3].value != d.head_dim)
      throw InputError(what + ": the cache inputs disagree on their shape ('" + name + "')");
    dim = t->shape[2].param;
    layers.insert(std::stoll(m[1].str()));
  }
  if (d.past_dim.empty() || d.encoder_dim.empty())
    throw InputError(what + ": --encoder takes an encoder-decoder's decoder, with past_key_values.N.decoder and "
                     ".encoder key / value inputs (optimum's decoder_model_merged.onnx)");
  d.layers = static_cast<int64_t>(layers.size());
}

// The encoder's length of a features encoder (Whisper): its output's second dim as `options`
// bind its inputs.
int64_t encoder_output_length(const LoadedModel& encoder, const std::string& output, const Options& options) {
  Options o = options;
  o.dims.batch = 1;
  o.dims.seq = -1;
  Analysis a;
  try {
    a = prepare(encoder, o);
  } catch (const InputError& e) {
    throw InputError(std::string("--encoder: ") + e.what());
  }
  const TensorInfo* t = a.graph.find(output);
  if (!t || !t->has_shape || t->shape.size() != 3 || !t->shape[1].known())
    throw InputError("--encoder: the length of the encoder's output '" + output +
                     "' stays unknown; bind its input dims with --dim NAME=N or --shape");
  return t->shape[1].value;
}

}  // namespace

Decoder onnx_seq2seq_decoder(LoadedModel encoder, LoadedModel decoder, const Options& options) {
  const Graph& g = decoder.model.graph;
  const Graph& e = encoder.model.graph;
  const std::string what = decoder.model.path.empty() ? "decoder" : decoder.model.path;
  const std::string ewhat = encoder.model.path.empty() ? "encoder" : encoder.model.path;
  Decoder d;
  seq2seq_caches(g, what, d);
  for (const char* name : {"decoder_input_ids", "input_ids"})
    if (d.token_dim.empty()) d.token_dim = input_dim(g, name, 1);
  if (d.token_dim.empty())
    throw InputError(what + ": no token input (input_ids or decoder_input_ids, [batch, symbolic length])");
  if (!has_input(g, "encoder_hidden_states"))
    throw InputError(what + ": no encoder_hidden_states input: --encoder takes the merged decoder "
                     "(optimum's decoder_model_merged.onnx), whose first pass computes the cross-attention cache");
  if (e.outputs.empty()) throw InputError(ewhat + ": the encoder has no output");
  const std::string states = std::find(e.outputs.begin(), e.outputs.end(), "last_hidden_state") != e.outputs.end()
                                 ? std::string("last_hidden_state")
                                 : e.outputs.front();
  std::map<std::string, std::string> connect{{"encoder_hidden_states", states}};
  for (const auto& name : {std::string("encoder_hidden_states"), std::string("encoder_attention_mask")}) {
    const std::string dim = input_dim(g, name, 1);
    if (!dim.empty() && dim != d.encoder_dim) d.encoder_bound_dims.push_back(dim);
  }
  if (has_input(g, "encoder_attention_mask") && has_input(e, "attention_mask"))
    connect["encoder_attention_mask"] = "attention_mask";
  // An encoder of token ids reads the prompt; one of features its own input.
  for (const auto& name : e.inputs)
    if (const TensorInfo* t = e.find(name); t && (t->dtype == DType::i64 || t->dtype == DType::i32) && name != "attention_mask") {
      d.encoder_input_dim = input_dim(e, name, 1);
      if (d.encoder_input_dim.empty())
        throw InputError(ewhat + ": the encoder's token input '" + name + "' needs a symbolic length [batch, length]");
      break;
    }
  if (d.encoder_input_dim.empty()) d.encoder_tokens = encoder_output_length(encoder, states, options);
  // The batch dims each graph names (by the first input's first axis), bound by name in both.
  for (const Graph* x : {&g, &e})
    for (const auto& name : x->inputs) {
      const std::string b = input_dim(*x, name, 0);
      if (!b.empty() && std::find(d.batch_dims.begin(), d.batch_dims.end(), b) == d.batch_dims.end()) d.batch_dims.push_back(b);
      break;
    }
  if (has_input(g, "use_cache_branch")) d.cache_branch = "use_cache_branch";
  d.prefill = merge_models(encoder, decoder, connect, "encoder/", ewhat + " + " + what);
  d.prefill.model.path = decoder.model.path;
  d.step = std::move(decoder);
  return d;
}

double expected_tokens_per_step(int64_t proposed, double acceptance) {
  if (proposed <= 0) return 1.0;
  const double a = std::clamp(acceptance, 0.0, 1.0);
  if (a >= 1.0) return double(proposed + 1);
  return (1.0 - std::pow(a, double(proposed + 1))) / (1.0 - a);
}

namespace {

// The bytes one token adds to one attention layer's cache: its keys and values (one latent
// for MLA) of every KV head, in `t`.
double kv_token_bytes(const Decoder& d, DType t) {
  return double(d.kv_tensors) * double(d.kv_heads) * double(d.head_dim) * element_bytes(t);
}

// The generation's requests and options that no analysis can run: one clear line each.
void check_generation(const Decoder& d, const Options& options, const GenerationOptions& gen, const Decoder* draft) {
  if (gen.prompt < 1) throw InputError("--generate: the prompt needs at least one token");
  if (gen.prompt < d.image_tokens)
    throw InputError("--generate: the prompt holds " + std::to_string(d.image_tokens) +
                     " image tokens: it needs at least that many, got " + std::to_string(gen.prompt));
  if (gen.new_tokens < 1) throw InputError("--generate: at least one new token is needed");
  // Learned positions: the decoder's tokens and, where the prompt is the encoder's (BART,
  // Marian: a table of the same size), the prompt each within the table.
  if (d.max_positions > 0 && d.decoder_cached(gen.prompt) + gen.new_tokens > d.max_positions)
    throw InputError("--generate: " + std::to_string(d.decoder_cached(gen.prompt)) + " + " +
                     std::to_string(gen.new_tokens) + " tokens outgrow the model's " +
                     std::to_string(d.max_positions) + " learned positions");
  if (d.max_positions > 0 && d.prompt_encoded() && gen.prompt > d.max_positions)
    throw InputError("--generate: a prompt of " + std::to_string(gen.prompt) + " tokens outgrows the encoder's " +
                     std::to_string(d.max_positions) + " learned positions");
  if (gen.speculative < 0 || gen.speculative > 64)
    throw InputError("--speculative: the draft proposes 1 to 64 tokens a step, got " + std::to_string(gen.speculative));
  if (gen.speculative > 0 && !(gen.acceptance > 0 && gen.acceptance <= 1))
    throw InputError("--speculative: the acceptance is a probability in (0, 1]");
  if (draft && gen.speculative == 0) throw InputError("--speculative: a draft model needs a count of proposed tokens");
  if (options.mode != Mode::inference) throw InputError("--generate predicts inference (no --mode training)");
  if (options.parallel.active) check_inference_parallel(options.parallel, true);
  if (gen.cached_prefix < 0 || (gen.cached_prefix > 0 && gen.cached_prefix >= gen.prompt))
    throw InputError("--prefix-cached: " + std::to_string(gen.cached_prefix) + " cached tokens of a " +
                     std::to_string(gen.prompt) + "-token prompt; at least one token is left for the prefill");
  if (gen.cached_prefix > 0 && (d.encoder_decoder() || d.image_tokens > 0 || d.layers == 0 || d.state_layers > 0))
    throw InputError("--prefix-cached: a decoder-only text model's prompt prefix (not an encoder-decoder's, a model's "
                     "with recurrent states or one whose prompt holds images)");
  if (options.lora.rank > 0 && options.parallel.active && options.parallel.pp > 1)
    throw InputError("--lora with --generate takes --parallel tp alone (the adapters are not placed on pipeline stages)");
  if (options.lora.nf4_base)
    throw InputError("--lora base=nf4 with --generate: a serving engine's 4-bit weights are a quantized checkpoint "
                     "(GPTQ, AWQ: --config), not QLoRA's NF4; --lora R serves the adapters beside the model's weights");
}

}  // namespace

GenerationAnalysis prepare_generation(const Decoder& d, const Options& options, const GenerationOptions& gen,
                                      const Decoder* draft) {
  check_generation(d, options, gen, draft);
  GenerationAnalysis a;
  a.gen = gen;
  a.batch = options.dims.batch > 0 ? options.dims.batch : 1;
  a.pp = options.parallel.active ? std::max(1, options.parallel.pp) : 1;
  if (a.pp > 1 && (gen.speculative > 0 || draft))
    throw InputError("--speculative with --parallel pp: speculative decoding is predicted on one pipeline stage "
                     "(vLLM runs it without pipeline parallelism)");
  // Serving engines place whole layers on the stages (vLLM: at least one a stage).
  if (a.pp > 1 && d.layers + d.state_layers > 0 && a.pp > d.layers + d.state_layers)
    throw InputError("--parallel pp=" + std::to_string(a.pp) + ": the model has " +
                     std::to_string(d.layers + d.state_layers) + " layers, and a pipeline stage holds at least one");
  // The phases run one microbatch of the pipeline's (the whole batch without one), each
  // analysed as one GPU group's whole model: the stages are cut from its nodes' times.
  a.microbatches = static_cast<int>(std::min<int64_t>(a.pp, a.batch));
  a.micro_batch = (a.batch + a.microbatches - 1) / a.microbatches;
  Options base = options;
  base.parallel.pp = 1;
  base.parallel.even_layers = false;  // the stages are cut after the analyses (pipelined)
  if (gen.cached_prefix > 0) {
    // The prompt's uncached tokens against the cached prefix: a step of that many tokens.
    a.prefill = prepare(d.cached_prefill ? d.cached_prefill() : d.step,
                        phase_options(base, d, a.micro_batch, gen.prompt - gen.cached_prefix, gen.cached_prefix, true));
  } else {
    a.prefill = prepare(d.prefill, prefill_options(base, d, a.micro_batch, gen.prompt));
  }
  a.prefill.memory.reset();  // the generation counts its memory itself (KV cache, serving share)
  const int n = static_cast<int>(std::min<int64_t>(std::max(gen.samples, 2), gen.new_tokens));
  const int64_t first = d.decoder_cached(gen.prompt), last = first + gen.new_tokens - 1;
  for (int j = 0; j < n; ++j) {
    const int64_t kv = n == 1 ? first : first + static_cast<int64_t>(std::llround(double(j) * double(last - first) / (n - 1)));
    if (!a.kv.empty() && a.kv.back() == kv) continue;
    a.kv.push_back(kv);
    // Speculative decoding: the step verifies the proposed tokens and the one after them.
    Options step = phase_options(base, d, a.micro_batch, 1 + gen.speculative, kv, true);
    bind_encoder_lengths(step, d.step.model.graph, d, gen.prompt);
    a.steps.push_back(prepare(d.step, step));
    a.steps.back().memory.reset();
  }
  if (draft) {
    GenerationOptions plain = gen;
    plain.speculative = 0;
    a.draft_decoder = std::make_shared<const Decoder>(*draft);
    a.draft = std::make_shared<const GenerationAnalysis>(prepare_generation(*draft, options, plain));
  }
  weight_bytes(a.prefill.graph, options, a.weight_bytes, a.embedding_bytes);
  // --lora: the adapters served unmerged, one copy's; a GPU's under tp from its own kernels.
  a.weight_bytes += a.prefill.lora_bytes;
  a.lora_bytes_per_gpu = lora_adapter_bytes(a.prefill.kernels.kernels, options.lora.adapters);
  if (!d.tied_head_weight.empty())  // read by every step, held once: as the embedding
    a.tied_weight_bytes = gemm_weight_bytes(a.prefill.graph.find(d.tied_head_weight), options);
  a.unread_expert_bytes = unread_expert_bytes(a.prefill.graph, options, a.micro_batch);
  if (!d.prefill_is_step && !a.steps.empty()) {
    double step = 0, step_embedding = 0;
    weight_bytes(a.steps.front().graph, options, step, step_embedding);
    step += a.steps.front().lora_bytes;
    a.prefill_only_bytes = std::max(0.0, a.weight_bytes - step);
  }
  a.activation_bytes = activation_use(a.prefill, base).largest_kernel_bytes;
  // The cache is held as the activations are (BF16 under fp8 and fp4) unless --kv-dtype says.
  const DType kv_dtype = options.kv_dtype != DType::undefined ? options.kv_dtype
                         : options.dtype != DType::undefined ? activation_dtype(options.dtype)
                                                              : d.kv_dtype;
  // Exactly 2 (K and V; 1 for a latent cache) x layers x KV heads x head size x tokens x batch x
  // element size; a sliding-window layer keeps at most its window of tokens. An
  // encoder-decoder's layers keep the decoder's tokens and, for cross-attention, the encoder's.
  const int64_t tokens = d.decoder_cached(gen.prompt) + gen.new_tokens + d.encoder_cached(gen.prompt);
  const double layer_tokens = double(d.layers - d.sliding_layers) * double(tokens) +
                              double(d.sliding_layers) * double(d.window > 0 ? std::min(tokens, d.window) : tokens);
  a.kv_dtype = kv_dtype;
  const double row = kv_token_bytes(d, kv_dtype);
  a.kv_cache_bytes = row * layer_tokens * double(a.batch);
  // A cached prefix is held once for the batch on the full-attention layers (its blocks shared,
  // as vLLM shares them; a sliding window's are the sequences' own).
  if (gen.cached_prefix > 0) {
    a.kv_shared_bytes = row * double(d.layers - d.sliding_layers) * double(gen.cached_prefix);
    a.kv_cache_bytes -= a.kv_shared_bytes * double(a.batch - 1);
  }
  // Recurrent states, in the activations' type (an FP8 --kv-dtype is the attention cache's).
  const DType state_dtype = options.dtype != DType::undefined ? activation_dtype(options.dtype) : d.kv_dtype;
  a.state_bytes = d.state_elements * double(a.batch) * element_bytes(state_dtype);
  a.kv_cache_bytes += a.state_bytes;
  return a;
}

namespace {

// A phase's classes on one GPU of the pipeline: its stage's kernels for every microbatch, the
// stages' mean (microbatches / pp of one microbatch's through every stage), and "pipeline" the
// rest of the phase's time: the stages' idle time and their sends.
void pipeline_classes(std::map<std::string, double>& by_class, double& attention_ms, double phase_ms, int microbatches,
                      int pp) {
  const double share = double(microbatches) / double(pp);
  double busy = 0;
  for (auto& [c, ms] : by_class) busy += ms *= share;
  attention_ms *= share;
  by_class["pipeline"] = std::max(0.0, phase_ms - busy);
}

// Speculative decoding's fixed part: the tokens a step yields and, with a draft model, its
// prefill (added to the first token) and its memory.
void speculative_setup(const GenerationAnalysis& a, const Gpu& gpu, const Options& options, GenerationReport& g) {
  auto& sp = g.speculative;
  sp.proposed = a.gen.speculative;
  sp.acceptance = sp.proposed > 0 ? a.gen.acceptance : 0;
  sp.tokens_per_step = expected_tokens_per_step(a.gen.speculative, a.gen.acceptance);
  if (!a.draft) return;
  const Report dp = predict(a.draft->prefill, a.draft_decoder->prefill.model, gpu, options);
  sp.draft_ttft_ms = dp.e2e_latency_ms;
  g.ttft_ms += dp.e2e_latency_ms;  // the draft reads the prompt too before it can propose
  add_kernels(dp, 1, g.time);
  g.ttft_low_ms += dp.e2e_low();
  g.ttft_high_ms += dp.e2e_high();
  for (const auto& [c, ms] : dp.totals_by_class) g.prefill_by_class[c] += ms;
  g.prefill_attention_ms += dp.attention_ms;
  sp.draft = a.draft_decoder->prefill.model.path.empty() ? a.draft_decoder->prefill.model.graph.name
                                                          : a.draft_decoder->prefill.model.path;
  sp.draft_weight_bytes = a.draft->weight_bytes - a.draft->tied_weight_bytes;
  sp.draft_kv_cache_bytes = a.draft->kv_cache_bytes;
}

// The sampled decode steps (under speculative decoding: a verifying step and its drafts per
// token yielded), then every step interpolated, TPOT, total and tokens/s.
void decode_steps(const GenerationAnalysis& a, const Decoder& d, const Gpu& gpu, const Options& options,
                  const Link& pp_link, GenerationReport& g) {
  auto& sp = g.speculative;
  const double proposed = double(sp.proposed);
  std::vector<double> step_ms, low_ms, high_ms, step_bytes;
  std::map<std::string, std::vector<double>> by_class;
  // The DRAM bytes a report's kernels move (collectives cross links, not DRAM).
  auto dram_bytes = [](const Report& r) {
    double b = 0;
    for_each_kernel(r, [&](const KernelReport& k) {
      if (k.kernel.cls != KernelClass::collective) b += k.kernel.bytes;
    });
    return b;
  };
  for (size_t i = 0; i < a.steps.size(); ++i) {
    Report s = predict(a.steps[i], d.step.model, gpu, options);
    double bytes = dram_bytes(s);
    // How many of the interpolated steps this sample stands for (interpolated_sum is linear).
    std::vector<double> unit(a.steps.size(), 0.0);
    unit[i] = 1;
    const double steps = interpolated_sum(a.kv, unit);
    const double per_token = sp.proposed > 0 ? 1 / sp.tokens_per_step : 1.0;
    // Pipeline parallelism: one GPU runs its stage's kernels for every microbatch a round.
    const double gpu_share = a.pp > 1 ? double(a.microbatches) / double(a.pp) : 1.0;
    add_kernels(s, steps * per_token * gpu_share, g.time);
    GenerationStep st{a.kv[i], s.e2e_latency_ms, s.e2e_low(), s.e2e_high(), s.totals_by_class, s.attention_ms};
    if (a.pp > 1) {
      const PipelinedPhase p = pipelined(a.steps[i], s, pp_link, a.pp, a.microbatches, false, options.parallel.even_layers);
      st.latency_ms = p.ms;
      st.low_ms *= p.scale;
      st.high_ms *= p.scale;
      pipeline_classes(st.by_class, st.attention_ms, p.ms, a.microbatches, a.pp);
      bytes *= gpu_share;
      g.step_stage_ms = p.stage_ms;  // the last sample's stays
      g.step_hop_ms = p.hop_ms;
    }
    if (sp.proposed > 0) {
      double draft_ms = 0, draft_low = 0, draft_high = 0;
      if (a.draft && i < a.draft->steps.size()) {
        const Report ds = predict(a.draft->steps[i], a.draft_decoder->step.model, gpu, options);
        bytes += proposed * dram_bytes(ds);
        draft_ms = ds.e2e_latency_ms;
        draft_low = ds.e2e_low();
        draft_high = ds.e2e_high();
        add_kernels(ds, steps * proposed / sp.tokens_per_step, g.time);
        for (const auto& [c, ms] : ds.totals_by_class) st.by_class[c] += proposed * ms;
        st.attention_ms += proposed * ds.attention_ms;
      }
      if (i == 0) {
        sp.verify_ms = s.e2e_latency_ms;
        sp.draft_step_ms = draft_ms;
      }
      st.latency_ms = (s.e2e_latency_ms + proposed * draft_ms) / sp.tokens_per_step;
      st.low_ms = (s.e2e_low() + proposed * draft_low) / sp.tokens_per_step;
      st.high_ms = (s.e2e_high() + proposed * draft_high) / sp.tokens_per_step;
      for (auto& [c, ms] : st.by_class) ms /= sp.tokens_per_step;
      st.attention_ms /= sp.tokens_per_step;
    }
    if (i + 1 == a.steps.size()) {
      g.step_nodes = std::move(s.nodes);  // the step's nodes are not read after this
      g.step_kv_len = a.kv[i];
      g.step_node_ms = s.e2e_latency_ms;
    }
    step_ms.push_back(st.latency_ms);
    step_bytes.push_back(sp.proposed > 0 ? bytes / sp.tokens_per_step : bytes);
    low_ms.push_back(st.low_ms);
    high_ms.push_back(st.high_ms);
    for (const auto& [c, ms] : st.by_class) by_class[c];
    g.samples.push_back(std::move(st));
  }
  for (auto& [c, v] : by_class)
    for (const auto& st : g.samples) {
      auto it = st.by_class.find(c);
      v.push_back(it == st.by_class.end() ? 0.0 : it->second);
    }
  const double decode_ms = interpolated_sum(a.kv, step_ms);
  for (const auto& [c, v] : by_class) g.decode_by_class[c] = interpolated_sum(a.kv, v);
  std::vector<double> attention;
  for (const auto& st : g.samples) attention.push_back(st.attention_ms);
  g.decode_attention_ms = interpolated_sum(a.kv, attention);
  g.step_ms.reserve(static_cast<size_t>(a.gen.new_tokens));
  for (int64_t j = 0; j < a.gen.new_tokens; ++j) g.step_ms.push_back(interpolate(a.kv, step_ms, a.kv.front() + j));
  g.tpot_ms = decode_ms / double(a.gen.new_tokens);
  const double decode_bytes = interpolated_sum(a.kv, step_bytes);
  g.decode_bytes_per_token = decode_bytes / double(a.gen.new_tokens);
  g.decode_gbps = decode_ms > 0 ? decode_bytes / (decode_ms * 1e-3) * 1e-9 : 0;
  g.decode_mbu = gpu.mem_bw_gbps > 0 ? g.decode_gbps / gpu.mem_bw_gbps : 0;
  g.tpot_last_ms = step_ms.back();
  g.total_ms = g.ttft_ms + decode_ms;
  const double tokens = double(a.batch) * double(a.gen.new_tokens);
  g.tokens_per_s = g.total_ms > 0 ? tokens / (g.total_ms / 1000.0) : 0;
  // The interval: every step's bounds, summed as the latency is.
  const double decode_low = interpolated_sum(a.kv, low_ms), decode_high = interpolated_sum(a.kv, high_ms);
  g.tpot_low_ms = decode_low / double(a.gen.new_tokens);
  g.tpot_high_ms = decode_high / double(a.gen.new_tokens);
  g.total_low_ms = g.ttft_low_ms + decode_low;
  g.total_high_ms = g.ttft_high_ms + decode_high;
  g.tokens_per_s_low = g.total_high_ms > 0 ? tokens / (g.total_high_ms / 1000.0) : 0;
  g.tokens_per_s_high = g.total_low_ms > 0 ? tokens / (g.total_low_ms / 1000.0) : 0;
}

// A cache's share on one of tp GPUs: its KV heads spread over them, a head never split (with
// fewer heads than GPUs each GPU keeps one).
double kv_share_of(int64_t kv_heads, double tp) {
  return kv_heads > 0 ? std::ceil(double(kv_heads) / tp) / double(kv_heads) : 1.0 / tp;
}

// The longest sequence (prompt and new tokens) whose cache fits `budget` bytes, a sequence's
// share of the room on a GPU over its share of the cache: each token adds its keys and values
// to the full-attention layers, and to the sliding-window layers up to their window; the
// recurrent states stay one size. At most the learned positions; 0 when the states alone do
// not fit; the caches held whole (`budget` already divided by the GPU's share).
int64_t longest_sequence(const Decoder& d, const GenerationAnalysis& a, double budget) {
  const double row = kv_token_bytes(d, a.kv_dtype);
  const double full = row * double(d.layers - d.sliding_layers), sliding = row * double(d.sliding_layers);
  const double left = budget - a.state_bytes / double(a.batch);
  if (left <= 0) return 0;
  if (full + sliding <= 0) return 0;  // a state-space model's memory does not grow with it
  double tokens = left / (full + sliding);
  if (d.window > 0 && sliding > 0 && tokens > double(d.window))
    tokens = full > 0 ? (left - double(d.window) * sliding) / full : 1e15;
  if (d.max_positions > 0) tokens = std::min(tokens, double(d.max_positions));
  return static_cast<int64_t>(std::max(0.0, std::floor(std::min(tokens, 1e15))));
}

// Memory: the whole and one GPU's (tensor parallel: 1/tp of the weights, Megatron splitting
// every GEMM weight and the vocabulary; the norms' vectors, replicated, are negligible;
// pipeline parallel: the fullest stage's), the sequences that fit, the longest one, and a
// warning when one GPU's memory is short.
void memory(const GenerationAnalysis& a, const Decoder& d, const Gpu& gpu, const Options& options,
            const std::vector<int>& stage_cuts, GenerationReport& g, Report& r) {
  const auto& sp = g.speculative;
  g.kv_cache_bytes = a.kv_cache_bytes;
  g.kv_dtype = dtype_name(a.kv_dtype);
  // --sparsity 2:4: the pruned weights held compressed where this GPU runs them sparse.
  const double sparse_saved = holds_sparse_2_4(a.prefill, gpu) ? a.prefill.sparse_saved_bytes : 0.0;
  const double held = a.weight_bytes - a.tied_weight_bytes - sparse_saved;  // a tied LM head is the embedding
  g.weight_bytes = held;
  if (options.lora.rank > 0) {
    g.lora_bytes = a.prefill.lora_bytes;
    g.lora_rank = options.lora.rank;
    g.lora_adapters = options.lora.adapters;
  }
  g.embedding_bytes = a.embedding_bytes;
  g.activation_bytes = a.activation_bytes;
  g.memory_bytes = held + a.kv_cache_bytes + a.activation_bytes + sp.draft_weight_bytes + sp.draft_kv_cache_bytes;
  const double tp = double(g.tp);
  // Pipeline stages: the fullest stage's weights, and its layers' share of the cache (vLLM
  // splits the layers evenly).
  const std::vector<double> stages = a.pp > 1 ? stage_weight_bytes(a.prefill.graph, options, stage_cuts) : std::vector<double>{};
  const double stage_held = stages.empty() ? held : *std::max_element(stages.begin(), stages.end());
  const double layer_share = a.pp <= 1 ? 1.0
                             : d.layers > 0 ? std::ceil(double(d.layers) / a.pp) / double(d.layers)
                                            : 1.0 / a.pp;
  const double kv_share = kv_share_of(d.kv_heads, tp) * layer_share;
  const double draft_kv_share = a.draft ? kv_share_of(a.draft_decoder->kv_heads, tp) : 1.0 / tp;
  const double draft_bytes = sp.draft_weight_bytes / tp + sp.draft_kv_cache_bytes * draft_kv_share;
  // The adapters a GPU holds: vLLM keeps the A of column-parallel layers and the B of
  // row-parallel ones whole on every GPU.
  const double held_per_gpu = (stage_held - a.prefill.lora_bytes) / tp + a.lora_bytes_per_gpu;
  g.memory_per_gpu_bytes = held_per_gpu + a.kv_cache_bytes * kv_share + a.activation_bytes + draft_bytes;
  // Capacity: the KV cache one more sequence adds against what the weights and the activations
  // leave of the engine's share of the memory (an engine bounds the tokens of a step, so its
  // activations do not grow with the sequences it holds).
  // A cached prefix is held once whatever the batch: beside the weights, not per sequence.
  const double per_sequence =
      ((a.kv_cache_bytes - a.kv_shared_bytes) * kv_share + sp.draft_kv_cache_bytes * draft_kv_share) / double(a.batch);
  const double room = GenerationReport::kServingMemoryFraction * gpu.mem_gb * kGiB - held_per_gpu -
                      sp.draft_weight_bytes / tp - a.activation_bytes - a.kv_shared_bytes * kv_share;
  if (gpu.mem_gb > 0 && per_sequence > 0 && room > 0)
    g.max_batch = static_cast<int64_t>(std::min(std::floor(room / per_sequence), 1e15));
  if (gpu.mem_gb > 0 && room > 0 && !a.draft && !d.encoder_decoder()) {
    g.max_tokens = longest_sequence(d, a, room / double(a.batch) / kv_share);
    // A cached prefix is held apart from the room: a sequence holds it and its own tokens.
    if (a.gen.cached_prefix > 0 && g.max_tokens > 0) {
      g.max_tokens += a.gen.cached_prefix;
      if (d.max_positions > 0) g.max_tokens = std::min(g.max_tokens, d.max_positions);
    }
    g.max_tokens_positions = d.max_positions > 0 && g.max_tokens == d.max_positions;
  }
  if (gpu.mem_bw_gbps > 0)
    g.weight_read_ms = (a.weight_bytes - sparse_saved - a.embedding_bytes - a.unread_expert_bytes - a.prefill_only_bytes) / tp /
                       (gpu.mem_bw_gbps * 1e9) * 1e3;
  if (!(gpu.mem_gb > 0 && g.memory_per_gpu_bytes > gpu.mem_gb * kGiB)) return;
  char draft_part[64] = "";
  if (a.draft) std::snprintf(draft_part, sizeof draft_part, " + draft %.1f", draft_bytes / kGiB);
  char buf[360];
  std::snprintf(buf, sizeof buf, "generation needs %.1f GiB%s (weights %.1f + KV cache %.1f + activations %.1f%s)",
                g.memory_per_gpu_bytes / kGiB, g.gpus() > 1 ? " per GPU" : "", held_per_gpu / kGiB,
                g.kv_cache_bytes * kv_share / kGiB, g.activation_bytes / kGiB, draft_part);
  GpuWarning w;
  w.kind = GpuWarning::Kind::generation_memory;
  w.gpu = gpu.name;
  w.subject = buf;
  w.capacity_gib = gpu.mem_gb;
  add_gpu_warning(r, std::move(w));
}

// "nvlink4, 450 GB/s x 0.80 per direction": a link as the report names it.
std::string link_text(const Link& link) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s, %.0f GB/s x %.2f per direction", link.kind.c_str(), link.spec_gbps, link.efficiency);
  return buf;
}

// Whether the decode step's attention runs as FlashAttention (16-bit attention under full).
bool flash_step(const GenerationAnalysis& a) {
  const auto& step_kernels = a.steps.front().kernels.kernels;
  return std::any_of(step_kernels.begin(), step_kernels.end(),
                     [](const Kernel& k) { return is_attention_kernel(k); });
}

// How the generation was predicted: timing, attention, parallelism, speculation.
void execution(const GenerationAnalysis& a, const Gpu& gpu, const Options& options, const Report& r, GenerationReport& g) {
  const std::string timing = r.timing.empty() ? "roofline" : r.timing + " timing";
  const bool flash = flash_step(a);
  const std::string elementwise = options.fusion == Fusion::full ? "fused kernels" : "unfused kernels";
  // The flags that chose it: --fusion, and --attention where it was given.
  std::string flags = std::string(" (--fusion ") + fusion_name(options.fusion);
  if (options.attention == Attention::fused) flags += ", --attention fused";
  if (options.attention == Attention::unfused) flags += ", --attention unfused";
  flags += ")";
  if (flash)
    g.execution = timing + ", FlashAttention, " + elementwise + flags;
  else if (options.fusion == Fusion::full && options.attention != Attention::unfused)
    g.execution = timing + ", fused kernels; attention not as FlashAttention, which runs 16-bit (--fusion full)";
  else
    g.execution = timing + ", unfused attention, " + elementwise + flags;
  if (g.tp > 1) {
    g.link = link_text(link_for(gpu, options.parallel.link_gbps, g.tp));
    g.execution += ", tensor parallel over " + std::to_string(g.tp) + " GPUs";
    if (g.ep > 1) g.execution += ", experts over " + std::to_string(g.ep) + " of them";
  }
  if (g.pp > 1)
    g.execution += ", pipeline parallel over " + std::to_string(g.pp) + " stages (" + std::to_string(g.microbatches) +
                   (g.microbatches > 1 ? " microbatches" : " microbatch") + ")";
  const auto& sp = g.speculative;
  if (sp.proposed > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ", speculative decoding (%lld proposed, acceptance %.2f: %.2f tokens a step)",
                  static_cast<long long>(sp.proposed), sp.acceptance, sp.tokens_per_step);
    g.execution += buf;
  }
}

}  // namespace

Report predict_generation(const GenerationAnalysis& a, const Decoder& d, const Gpu& gpu, const Options& given) {
  Options options = given;  // the phases' analyses: one stage group's whole model
  options.parallel.pp = 1;
  Report r = predict(a.prefill, d.prefill.model, gpu, options);
  GenerationReport g;
  if (r.throughput) {  // the generation's own rates say the rest
    g.prefill_tflops = r.throughput->tflops;
    g.prefill_peak_tflops = r.throughput->peak_tflops;
    g.prefill_peak_math = r.throughput->peak_math;
  }
  r.throughput.reset();
  g.batch = a.batch;
  g.prompt = a.gen.prompt;
  g.cached_prefix = a.gen.cached_prefix;
  g.new_tokens = a.gen.new_tokens;
  g.layers = d.layers;
  g.kv_heads = d.kv_heads;
  g.head_dim = d.head_dim;
  g.kv_tensors = d.kv_tensors;
  g.sliding_layers = d.sliding_layers;
  g.window = d.window;
  g.state_layers = d.state_layers;
  g.state_bytes = a.state_bytes;
  if (d.encoder_decoder()) {
    g.decoder_tokens = d.decoder_cached(a.gen.prompt) + a.gen.new_tokens;
    g.encoder_tokens = d.encoder_cached(a.gen.prompt);
  }
  g.ttft_ms = r.e2e_latency_ms;
  g.ttft_low_ms = r.e2e_low();
  g.ttft_high_ms = r.e2e_high();
  g.prefill_by_class = r.totals_by_class;
  g.prefill_attention_ms = r.attention_ms;
  g.tp = options.parallel.active ? std::max(1, options.parallel.tp) : 1;
  g.ep = g.tp > 1 ? std::max(1, options.parallel.ep) : 1;
  g.pp = a.pp;
  g.microbatches = a.microbatches;
  g.micro_batch = a.micro_batch;
  Link pp_link;
  std::vector<int> stage_cuts;
  if (g.pp > 1) {
    // Stages tp GPUs apart: within one NVLink domain while all tp x pp GPUs fit in it.
    pp_link = link_for(gpu, options.parallel.link_gbps, g.tp * g.pp);
    g.pp_link = link_text(pp_link);
    const PipelinedPhase p = pipelined(a.prefill, r, pp_link, g.pp, g.microbatches, true, options.parallel.even_layers);
    g.ttft_ms = p.ms;
    g.ttft_low_ms *= p.scale;
    g.ttft_high_ms *= p.scale;
    g.prefill_stage_ms = p.stage_ms;
    g.prefill_hop_ms = p.hop_ms;
    stage_cuts = p.cuts;
    pipeline_classes(g.prefill_by_class, g.prefill_attention_ms, p.ms, g.microbatches, g.pp);
    g.prefill_tflops *= double(g.microbatches) / double(g.pp) / p.scale;  // one GPU's FLOPs over TTFT
    // The report's latency is the prefill's: its microbatches through the stages.
    r.e2e_latency_ms = p.ms;
    r.e2e_low_ms *= p.scale;
    r.e2e_high_ms *= p.scale;
  }
  add_kernels(r, g.pp > 1 ? double(g.microbatches) / double(g.pp) : 1.0, g.time);
  speculative_setup(a, gpu, options, g);
  decode_steps(a, d, gpu, options, pp_link, g);
  if (const double usd = options.gpu_cost(gpu); usd > 0 && g.tokens_per_s > 0) {
    const UsdRange c = usd_per_m_tokens(usd, g.gpus(), g.tokens_per_s, g.tokens_per_s_low, g.tokens_per_s_high);
    g.usd_per_gpu_hour = usd;
    g.usd_per_m_tokens = c.usd;
    g.usd_per_m_tokens_low = c.low;
    g.usd_per_m_tokens_high = c.high;
  }
  memory(a, d, gpu, options, stage_cuts, g, r);
  execution(a, gpu, options, r, g);
  // A --kv-dtype narrower than the attention's reads: only FlashAttention reads the cache in
  // its own type; MatMul and Softmax attention (FP32 models, --attention unfused) read it in
  // theirs, so the cache's memory changes and its time per token does not.
  if (options.kv_dtype != DType::undefined && d.kv_heads > 0 && !flash_step(a))
    r.warnings.push_back("--kv-dtype " + std::string(dtype_name(options.kv_dtype)) +
                         " sets the cache's memory; the attention runs as MatMul and Softmax, which read the cache in "
                         "the attention's dtype, so the time per token does not change (FlashAttention reads it "
                         "narrow: a 16-bit model, --dtype bf16)");
  r.generation = std::move(g);
  return r;
}

Report predict_generation_for_targets(const Decoder& decoder, const Options& options, const GenerationOptions& gen,
                                      const Decoder* draft, const Gpu& gpu, const ServingTargets& targets,
                                      std::map<int64_t, GenerationAnalysis>* cache) {
  if (!(targets.tpot_ms >= 0) || !(targets.ttft_ms >= 0) || !targets.any())
    throw InputError("--tpot-slo / --ttft-slo: the target times must be above 0 ms");
  std::map<int64_t, GenerationAnalysis> own;
  std::map<int64_t, GenerationAnalysis>& analyses = cache ? *cache : own;
  auto at = [&](int64_t batch) {
    Options o = options;
    o.dims.batch = batch;
    auto it = analyses.find(batch);
    if (it == analyses.end()) it = analyses.emplace(batch, prepare_generation(decoder, o, gen, draft)).first;
    return predict_generation(it->second, decoder, gpu, o);
  };
  // A batch qualifies when it meets the target and its sequences fit beside the weights and
  // its own activations (which grow with it; unknown memory: always).
  auto fits = [&](const Report& r) { return !(gpu.mem_gb > 0) || r.generation->max_batch >= r.generation->batch; };
  auto over_tpot = [&](const Report& r) { return targets.tpot_ms > 0 && r.generation->tpot_ms > targets.tpot_ms; };
  auto over_ttft = [&](const Report& r) { return targets.ttft_ms > 0 && r.generation->ttft_ms > targets.ttft_ms; };
  auto meets = [&](const Report& r) { return !over_tpot(r) && !over_ttft(r) && fits(r); };
  // How far a batch is from the targets (at most 1 where it meets them): each time over its
  // target, and the batch over the sequences that fit beside it (where memory is known). The
  // search places its probes by it.
  auto score = [&](const Report& r) {
    const GenerationReport& g = *r.generation;
    double s = 0;
    if (targets.tpot_ms > 0) s = std::max(s, g.tpot_ms / targets.tpot_ms);
    if (targets.ttft_ms > 0) s = std::max(s, g.ttft_ms / targets.ttft_ms);
    if (gpu.mem_gb > 0) s = std::max(s, double(g.batch) / double(std::max<int64_t>(g.max_batch, 1)));
    return s;
  };
  Report best = at(1);
  GenerationReport::TpotSlo slo;
  slo.tpot_ms = targets.tpot_ms;
  slo.ttft_ms = targets.ttft_ms;
  slo.met = meets(best);
  auto fail = [&](int64_t batch, const Report& r) {
    slo.next_batch = batch;
    slo.next_tpot_ms = r.generation->tpot_ms;
    slo.next_ttft_ms = r.generation->ttft_ms;
    slo.next_over_tpot = over_tpot(r);
    slo.next_fits = fits(r);
  };
  if (slo.met) {
    // Up to the sequences that fit at batch 1.
    const int64_t fit1 = best.generation->max_batch;
    const int64_t cap = gpu.mem_gb > 0 ? std::max<int64_t>(fit1, 1) : 65536;
    largest_batch_meeting(best, cap, BatchBracket::kFromCap, at, meets, fail, score);
  }
  best.generation->tpot_slo = slo;
  return best;
}

std::vector<Report> predict_generations(const Decoder& decoder, const Options& given, const GenerationOptions& gen,
                                        const Decoder* draft, const std::vector<Gpu>& gpus, const ServingTargets& targets) {
  Options options = given;
  const bool served = options.dtype == DType::undefined && decoder.serving_dtype != DType::undefined;
  if (served) options.dtype = decoder.serving_dtype;
  std::vector<Report> reports;
  if (targets.any()) {
    std::map<int64_t, GenerationAnalysis> analyses;  // shared by the GPUs
    for (const auto& gpu : gpus)
      reports.push_back(predict_generation_for_targets(decoder, options, gen, draft, gpu, targets, &analyses));
  } else {
    const GenerationAnalysis analysis = prepare_generation(decoder, options, gen, draft);
    for (const auto& gpu : gpus) reports.push_back(predict_generation(analysis, decoder, gpu, options));
  }
  if (served)
    for (Report& r : reports) r.dtype_source = DTypeSource::config;
  return reports;
}

}  // namespace neusight
