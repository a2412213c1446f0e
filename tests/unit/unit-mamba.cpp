// unit-mamba.cpp - recurrent token mixers and the hybrid decoders built of them (--config
// mamba2, nemotron_h, qwen3_next): the graph built, the kernels of the chunked scans and of a
// decode step's state update, and the generation's cache (per-sequence states beside the
// attention layers' keys and values).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "neusight/neusight.h"
#include "onnx_proto.h"
#include "test_util.h"

using namespace neusight;

namespace {

const char* const kMamba2 = R"({"model_type": "mamba2", "hidden_size": 256, "num_hidden_layers": 4, "num_heads": 8,
    "head_dim": 64, "state_size": 64, "n_groups": 2, "vocab_size": 1000, "chunk_size": 64})";
const char* const kNemotronH = R"({"model_type": "nemotron_h", "hidden_size": 256, "num_hidden_layers": 6,
    "hybrid_override_pattern": "M-M*M-", "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "intermediate_size": 512, "mamba_num_heads": 8, "mamba_head_dim": 64, "ssm_state_size": 64, "mamba_n_groups": 2,
    "vocab_size": 1000, "mamba_chunk_size": 64})";

Options kernel_timing(int64_t batch, int64_t seq, DType dtype = DType::bf16) {
  Options o;
  o.dims.batch = batch;
  o.dims.seq = seq;
  o.dtype = dtype;
  o.timing = Timing::kernel;
  return o;
}

// The kernels of the nodes whose name contains `node_part`, in order.
std::vector<const Kernel*> kernels_of(const Analysis& a, const std::string& node_part) {
  std::vector<const Kernel*> out;
  for (const Kernel& k : a.kernels.kernels)
    if (k.node >= 0 && a.graph.nodes[static_cast<size_t>(k.node)].name.find(node_part) != std::string::npos)
      out.push_back(&k);
  return out;
}

// The generation of `d` at batch `batch` (BF16, kernel timing, fused kernels) on the H100.
GenerationReport generate(const Decoder& d, int64_t batch, int64_t prompt, int64_t new_tokens) {
  GenerationOptions g;
  g.prompt = prompt;
  g.new_tokens = new_tokens;
  Options o = kernel_timing(batch, 0);
  o.fusion = Fusion::full;
  const Report r = predict_generation(prepare_generation(d, o, g), d, GpuDatabase::builtin().resolve("h100"), o);
  REQUIRE(r.generation);
  return *r.generation;
}

int64_t parameter_count(const LoadedModel& m) {
  int64_t p = 0;
  for (const std::string& w : m.model.graph.initializers) {
    const TensorInfo* t = m.model.graph.find(w);
    if (t && t->external_data && w.find("inv_freq") == std::string::npos) p += t->num_elements();  // a buffer
  }
  return p;
}

}  // namespace

TEST_CASE("mamba: a Mamba-2 layer is in_proj, the causal convolution, the chunked scan, the gated norm and out_proj") {
  const ModelConfig c = parse_hf_config(kMamba2, "mamba2");
  CHECK(c.block_pattern == "MMMM");
  const LoadedModel m = build_model(c);
  // in_proj to z, x, B, C and dt; conv weights and bias; A_log, D, dt_bias; the gated norm's
  // weight; out_proj; the pre-norm; embedding, head and the final norm.
  const int64_t h = 256, inner = 8 * 64, conv = inner + 2 * 2 * 64;
  const int64_t layer = h * (2 * inner + 2 * 2 * 64 + 8) + conv * 4 + conv + 3 * 8 + inner + inner * h + h;
  CHECK(parameter_count(m) == 2 * 1000 * h + 4 * layer + h);
  const Analysis a = prepare(m, kernel_timing(2, 512));
  // The chunked scan of 512 tokens in chunks of 64: the decay's cumulative sum, the chunk
  // states, their passing, C B^T and the output; the splits of in_proj's output are views.
  const auto scan = kernels_of(a, "layers.0.mixer/StateSpaceScan");
  REQUIRE(scan.size() == 5);
  CHECK(scan[0]->op == "ssd_chunk_cumsum");
  CHECK(scan[1]->cls == KernelClass::gemm);
  CHECK(scan[1]->gemm.batch == 2 * 8 * 8);  // batch x chunks x heads
  CHECK(scan[1]->gemm.m == 64);
  CHECK(scan[1]->gemm.n == 64);
  CHECK(scan[1]->gemm.k == 64);
  CHECK(scan[1]->flops == doctest::Approx(2.0 * 2 * 512 * 8 * 64 * 64));
  CHECK(scan[2]->op == "ssd_state_passing");
  CHECK(scan[3]->gemm.batch == 2 * 8 * 2);  // C B^T per group
  CHECK(scan[4]->gemm.k == 32 + 64);         // the causal half of the chunk and the state
  CHECK(kernels_of(a, "layers.0.mixer/z").empty());
  CHECK(kernels_of(a, "layers.0.mixer/xBC").empty());
  CHECK(kernels_of(a, "layers.0.mixer.conv1d").size() == 1);
  CHECK(kernels_of(a, "layers.0.mixer.norm").size() == 1);
  CHECK(kernels_of(a, "layers.0.mixer.norm").front()->cls == KernelClass::layernorm);
  // Twice the tokens: twice the scan's work (the chunks double).
  const Analysis twice = prepare(m, kernel_timing(2, 1024));
  CHECK(kernels_of(twice, "layers.0.mixer/StateSpaceScan")[1]->flops == doctest::Approx(2 * scan[1]->flops));
}

TEST_CASE("mamba: a decode step updates each head's state in one kernel and keeps no keys or values") {
  const ModelConfig c = parse_hf_config(kMamba2, "mamba2");
  const Decoder d = config_decoder(c);
  CHECK(d.layers == 0);
  CHECK(d.kv_heads == 0);  // no keys or values to describe
  CHECK(d.kv_tensors == 0);
  CHECK(d.state_layers == 4);
  const int64_t conv = 8 * 64 + 2 * 2 * 64;
  CHECK(d.state_elements == 4.0 * (8 * 64 * 64 + conv * 3));
  const Analysis step = prepare(d.step, kernel_timing(3, 1));
  const auto scan = kernels_of(step, "layers.0.mixer/StateSpaceScan");
  REQUIRE(scan.size() == 1);
  CHECK(scan[0]->op == "selective_state_update");
  CHECK(scan[0]->bytes >= 2.0 * 3 * 8 * 64 * 64 * 2);  // the states read and written, bf16
  // The cache is the states alone, whatever the length.
  const GenerationReport r = generate(d, 3, 512, 64);
  CHECK(r.kv_cache_bytes == doctest::Approx(d.state_elements * 3 * 2));
  CHECK(r.state_bytes == r.kv_cache_bytes);
  CHECK(generate(d, 3, 512, 4096).kv_cache_bytes == r.kv_cache_bytes);
}

TEST_CASE("mamba: Nemotron-H gives each layer one block: Mamba-2, attention without positions, or an MLP") {
  const ModelConfig c = parse_hf_config(kNemotronH, "nemotron-h");
  CHECK(c.block_pattern == "M-M*M-");
  CHECK(c.activation == "relu2");
  const LoadedModel m = build_model(c);
  int scans = 0, attention_q = 0, rotary = 0, up = 0;
  for (const Node& n : m.model.graph.nodes) {
    scans += n.op_type == "StateSpaceScan";
    attention_q += n.name.find("mixer.q_proj") != std::string::npos && n.op_type == "MatMul";
    rotary += n.name.find("rotary") != std::string::npos;
    up += n.name.find("mixer.up_proj") != std::string::npos && n.op_type == "MatMul";
  }
  CHECK(scans == 3);
  CHECK(attention_q == 1);
  CHECK(rotary == 0);
  CHECK(up == 2);
  // The cache: the one attention layer's keys and values over every token, and the three
  // Mamba-2 layers' states.
  const Decoder d = config_decoder(c);
  CHECK(d.layers == 1);
  CHECK(d.state_layers == 3);
  const GenerationReport r = generate(d, 2, 100, 28);
  const double kv = 2.0 * 2 * 64 * 128 * 2 * 2;
  CHECK(r.kv_cache_bytes == doctest::Approx(kv + d.state_elements * 2 * 2));
  CHECK(r.tpot_ms > 0);
  // A pattern that is not one block per layer, or names a block not built, is one clear error.
  for (const char* bad : {R"("M-M*M")", R"("M-M*ME")"}) {
    std::string cfg = kNemotronH;
    cfg.replace(cfg.find(R"("M-M*M-")"), 8, bad);
    CHECK_THROWS_WITH_AS(parse_hf_config(cfg, "bad"), doctest::Contains("hybrid_override_pattern"), InputError);
  }
}

TEST_CASE("mamba: Mamba-Codestral-7B's 7.29 billion parameters and its decode states") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/mamba_codestral_7b.json");
  const int64_t h = 4096, heads = 128, inner = heads * 64, gs = 8 * 128, conv = inner + 2 * gs;
  const int64_t layer = h * (2 * inner + 2 * gs + heads) + conv * 4 + conv + 3 * heads + inner + inner * h + h;
  const int64_t params = 2 * 32768 * h + 64 * layer + h;
  CHECK(params == 7285403648);
  CHECK(parameter_count(build_model(c)) == params);
  // A sequence's states: 64 layers x (128 heads x 64 x 128 + 10,240 channels x 3), 138 MB in
  // bf16, whatever its length.
  const Decoder d = config_decoder(c);
  CHECK(d.state_elements * 2 == doctest::Approx(138.1e6).epsilon(0.001));
}

TEST_CASE("mamba: Qwen3-Next mixes three layers in four with a gated DeltaNet, the fourth with gated attention") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/qwen3_next_80b_a3b.json");
  CHECK(std::count(c.delta_layers.begin(), c.delta_layers.end(), true) == 36);
  CHECK_FALSE(c.delta_layers[3]);
  CHECK(c.attn_output_gate);
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "qwen3_next", "hidden_size": 256, "intermediate_size": 512,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 1000, "num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 64, "layer_types": ["linear_attention", "full_attention"]})",
                                       "short layer_types"),
                       doctest::Contains("layer_types must name one type per layer"), InputError);
  const LoadedModel m = build_model(c);
  // 79.67 B parameters as its structure adds up: 12 gated-attention layers (q_proj twice the
  // heads' width, per-head q / k norms), 36 gated DeltaNet layers, 48 mixtures of 512 experts
  // of 512 with a gated shared expert.
  const int64_t h = 2048, keys = 16 * 128, values = 32 * 128, conv = 2 * keys + values;
  const int64_t attention = h * 2 * 16 * 256 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256;
  const int64_t delta = h * (2 * keys + 2 * values) + h * 2 * 32 + conv * 4 + 2 * 32 + 128 + values * h;
  const int64_t moe = 512 * 3 * h * 512 + 512 * h + 3 * h * 512 + h;
  CHECK(parameter_count(m) == 2 * 151936 * h + 12 * attention + 36 * delta + 48 * (moe + 2 * h) + h);
  int gates = 0, rules = 0;
  for (const Node& n : m.model.graph.nodes) {
    gates += n.name.find("output_gate_Sigmoid") != std::string::npos;
    rules += n.op_type == "GatedDeltaRule";
  }
  CHECK(gates == 12);
  CHECK(rules == 36);
  // A prompt of 256 tokens in chunks of 64: the gate's cumulative sum and four batched GEMMs,
  // the state recurrence one per head over every chunk.
  const Analysis a = prepare(m, kernel_timing(1, 256));
  const auto rule = kernels_of(a, "layers.0.linear_attn/GatedDeltaRule");
  REQUIRE(rule.size() == 5);
  CHECK(rule[0]->op == "gdn_chunk_cumsum");
  CHECK(rule[3]->gemm.batch == 32);
  CHECK(rule[3]->gemm.k == 2 * 256);
  CHECK(rule[1]->gemm.batch == 32 * 4);
  // A decode step: one recurrent update of every head's 128 x 128 state; the cache holds the 12
  // attention layers' keys and values and the 36 DeltaNet layers' states.
  const Decoder d = config_decoder(c);
  CHECK(d.layers == 12);
  CHECK(d.state_elements == 36.0 * (32 * 128 * 128 + conv * 3));
  const Analysis step = prepare(d.step, [] {
    Options o = kernel_timing(2, 1);
    o.dims.named["past_sequence"] = 100;
    return o;
  }());
  const auto update = kernels_of(step, "layers.0.linear_attn/GatedDeltaRule");
  REQUIRE(update.size() == 1);
  CHECK(update[0]->op == "fused_recurrent_gated_delta_rule");
  const GenerationReport r = generate(d, 2, 100, 28);
  CHECK(r.kv_cache_bytes == doctest::Approx(12.0 * 2 * 2 * 256 * 128 * 2 * 2 + d.state_elements * 2 * 2));
}

TEST_CASE("mamba: Granite 4.0-H mixes tokens with Mamba-2 where layer_types says so, attention without positions elsewhere") {
  const std::string base = R"({"model_type": "granitemoehybrid", "hidden_size": 256, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
      "layer_types": ["mamba", "mamba", "mamba", "attention"], "position_embedding_type": "nope",
      "mamba_n_heads": 8, "mamba_d_head": 64, "mamba_d_state": 64, "mamba_n_groups": 1, "mamba_chunk_size": 64,
      "shared_intermediate_size": 512, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
      "logits_scaling": 4.0)";
  // A mixture of 8 experts of 128 beside the shared SwiGLU of 512.
  const ModelConfig c = parse_hf_config(base + R"(, "num_local_experts": 8, "num_experts_per_tok": 2})", "granite-4.0-h");
  CHECK(c.mamba_layers == std::vector<bool>{true, true, true, false});
  CHECK(c.no_positions);
  CHECK(c.experts == 8);
  CHECK(c.shared_expert_ffn == 512);
  const LoadedModel m = build_model(c);
  int scans = 0, moe = 0, rotary = 0, residual_scales = 0;
  for (const Node& n : m.model.graph.nodes) {
    scans += n.op_type == "StateSpaceScan";
    moe += n.op_type == "MoE";
    rotary += n.name.find("rotary") != std::string::npos;
    residual_scales += n.name.find("_residual_scale") != std::string::npos;
  }
  CHECK(scans == 3);
  CHECK(moe == 4);
  CHECK(rotary == 0);
  CHECK(residual_scales == 2 * 4);
  const Decoder d = config_decoder(c);
  CHECK(d.layers == 1);
  CHECK(d.state_layers == 3);
  CHECK(d.state_elements == 3.0 * (8 * 64 * 64 + (8 * 64 + 2 * 64) * 3));
  CHECK(generate(d, 1, 64, 8).kv_cache_bytes == doctest::Approx(2.0 * 2 * 64 * 72 * 2 + d.state_elements * 2));
  // Without experts the shared SwiGLU is the layer's MLP.
  const ModelConfig dense = parse_hf_config(base + "}", "granite-4.0-h-micro");
  CHECK(dense.experts == 0);
  CHECK(dense.ffn == 512);
  // mamba_d_head "auto": mamba_expand x hidden over the heads; rotary only under "rope".
  std::string rope = base;
  rope.replace(rope.find(R"("nope")"), 6, R"("rope")");
  rope.replace(rope.find(R"("mamba_d_head": 64)"), 18, R"("mamba_d_head": "auto", "mamba_expand": 2)");
  const ModelConfig r = parse_hf_config(rope + "}", "granite-rope");
  CHECK_FALSE(r.no_positions);
  CHECK(r.mamba_head_dim == 2 * 256 / 8);
}

TEST_CASE("mamba: an exported decode step of a state-space or hybrid model generates as its config does") {
  // `export --kv-cache` writes a recurrent layer's states as inputs (past_conv_state.N,
  // past_ssm_state.N, past_delta_state.N): the ONNX decoder holds them as the config's does.
  const ModelConfig qwen = read_hf_config(test::source_dir() + "/tests/data/qwen3_next_80b_a3b.json");
  for (const ModelConfig& c : {parse_hf_config(kMamba2, "mamba2"), parse_hf_config(kNemotronH, "nemotron-h"), qwen}) {
    CAPTURE(c.model_type);
    const Decoder from_config = config_decoder(c);
    const Decoder from_onnx = onnx_decoder(load_model_from_proto(from_config.step.proto->model, "step.onnx"));
    CHECK(from_onnx.layers == from_config.layers);
    CHECK(from_onnx.state_layers == from_config.state_layers);
    CHECK(from_onnx.state_elements == from_config.state_elements);
    CHECK(from_onnx.kv_tensors == from_config.kv_tensors);
    const GenerationReport a = generate(from_config, 2, 128, 16), b = generate(from_onnx, 2, 128, 16);
    CHECK(b.kv_cache_bytes == doctest::Approx(a.kv_cache_bytes));
    CHECK(b.state_bytes == doctest::Approx(a.state_bytes));
    CHECK(b.state_bytes > 0);
    CHECK(b.tpot_ms == doctest::Approx(a.tpot_ms).epsilon(0.02));
  }
  // A state input must have a fixed size but for its batch.
  onnx::ModelProto p = config_decoder(parse_hf_config(kMamba2, "mamba2")).step.proto->model;
  for (auto& in : *p.mutable_graph()->mutable_input())
    if (in.name() == "past_ssm_state.0") in.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(2)->set_dim_param("s");
  CHECK_THROWS_WITH_AS(onnx_decoder(load_model_from_proto(p, "bad.onnx")),
                       doctest::Contains("past_ssm_state.0' must be [batch, ...] with every other dim a fixed size"),
                       InputError);
}
