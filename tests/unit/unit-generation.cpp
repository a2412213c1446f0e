// unit-generation.cpp - LLM generation (prefill + KV-cache decode): physics of the
// predictions, exact KV-cache bytes, the FlashAttention lowering and the ONNX decoder path.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "neusight/neusight.h"
#include "onnx_proto.h"
#include "test_util.h"

using namespace neusight;

namespace {

// A built model's parameters: its external weights but the rotary tables' inv_freq buffer;
// without the LM head when `head` is false (a tied head, held once).
int64_t parameter_count(const LoadedModel& m, bool head = true) {
  int64_t p = 0;
  for (const std::string& w : m.model.graph.initializers) {
    const TensorInfo* t = m.model.graph.find(w);
    if (t && t->external_data && w.find("inv_freq") == std::string::npos && (head || w.rfind("lm_head", 0) != 0))
      p += t->num_elements();
  }
  return p;
}

// The built model's nodes that `f` accepts.
int64_t node_count(const LoadedModel& m, const std::function<bool(const Node&)>& f) {
  return std::count_if(m.model.graph.nodes.begin(), m.model.graph.nodes.end(), f);
}

ModelConfig small_llama(int64_t heads, int64_t kv_heads) {
  ModelConfig c;
  c.model_type = "llama";
  c.layers = 2;
  c.hidden = 512;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = 512 / heads;
  c.ffn = 1024;
  c.vocab = 4000;
  c.activation = "silu";
  c.source = "small_llama";
  return c;
}

ModelConfig llama3_8b() { return read_hf_config(test::source_dir() + "/tests/data/llama3_8b.json"); }

// As the CLI's --generate runs by default: kernel timing, fused attention; `seq` tokens per
// sequence when given (a prompt of that length).
Options serving(DType dtype, int64_t batch, int64_t seq = 0) {
  Options o;
  o.dims.batch = batch;
  if (seq > 0) o.dims.seq = seq;
  o.dtype = dtype;
  o.timing = Timing::kernel;
  o.fusion = Fusion::full;
  return o;
}

GenerationReport generate(const Decoder& d, const Options& o, int64_t prompt, int64_t new_tokens, const std::string& gpu,
                          int samples = GenerationOptions{}.samples) {
  GenerationOptions g;
  g.prompt = prompt;
  g.new_tokens = new_tokens;
  g.samples = samples;
  const Report r = predict_generation(prepare_generation(d, o, g), d, GpuDatabase::builtin().resolve(gpu), o);
  REQUIRE(r.generation);
  return *r.generation;
}

int count_op(const KernelList& kl, const std::string& op) {
  return static_cast<int>(std::count_if(kl.kernels.begin(), kl.kernels.end(), [&](const Kernel& k) { return k.op == op; }));
}

}  // namespace

TEST_CASE("generation: KV-cache bytes are exactly 2 x layers x kv_heads x head_dim x tokens x batch x element size") {
  for (int64_t kv : {8, 2, 1}) {  // MHA, GQA, MQA
    const ModelConfig c = small_llama(8, kv);
    const Decoder d = config_decoder(c);
    for (DType dt : {DType::f16, DType::f32}) {
      const GenerationReport g = generate(d, serving(dt, 3), 40, 9, "h100");
      const double eb = dt == DType::f16 ? 2 : 4;
      CHECK(g.kv_cache_bytes == 2.0 * 2 * kv * 64 * (40 + 9) * 3 * eb);
      CHECK(g.memory_bytes == doctest::Approx(g.weight_bytes + g.kv_cache_bytes + g.activation_bytes));
    }
  }
}

TEST_CASE("generation: LLaVA's vision tower runs in the prefill alone, and a prompt holds its image's tokens") {
  ModelConfig c = small_llama(8, 2);
  c.language_model_of = "llava";
  c.vision.layers = 2;
  c.vision.hidden = 128;
  c.vision.heads = 4;
  c.vision.ffn = 256;
  c.vision.image_size = 64;
  c.vision.patch_size = 16;
  c.vision.feature_layer = 1;
  const Decoder d = config_decoder(c);
  CHECK(d.image_tokens == 16);
  CHECK(d.prefill.model.graph.find("pixel_values"));
  CHECK_FALSE(d.step.model.graph.find("pixel_values"));
  ModelConfig text = c;
  text.vision = ModelConfig::VisionTower{};
  const Decoder lm = config_decoder(text);
  const GenerationReport with = generate(d, serving(DType::f16, 2), 40, 8, "h100");
  const GenerationReport without = generate(lm, serving(DType::f16, 2), 40, 8, "h100");
  CHECK(with.ttft_ms > without.ttft_ms);  // the tower and projector run first
  CHECK(with.tpot_ms == doctest::Approx(without.tpot_ms));  // a step reads no image
  CHECK(with.weight_bytes > without.weight_bytes);  // held all the same
  CHECK(with.weight_read_ms == doctest::Approx(without.weight_read_ms));  // but no step reads the tower
  GenerationOptions g;
  g.prompt = 15;
  g.new_tokens = 4;
  CHECK_THROWS_WITH_AS(prepare_generation(d, serving(DType::f16, 1), g), doctest::Contains("holds 16 image tokens"), InputError);
}

TEST_CASE("generation: the sequences that fit are the KV caches beside the weights and activations") {
  const Decoder d = config_decoder(small_llama(8, 2));
  const double gib = 1024.0 * 1024.0 * 1024.0;
  for (const char* gpu : {"h100", "l4"}) {
    const Gpu& g = GpuDatabase::builtin().resolve(gpu);
    const GenerationReport r = generate(d, serving(DType::f16, 3), 1000, 24, gpu);
    const double room = 0.9 * g.mem_gb * gib - r.weight_bytes - r.activation_bytes;
    CHECK(r.max_batch == int64_t(std::floor(room / (r.kv_cache_bytes / 3))));
    // A longer generation's cache is larger: fewer sequences fit.
    CHECK(generate(d, serving(DType::f16, 3), 4000, 24, gpu).max_batch < r.max_batch);
  }
  // A GPU whose memory the weights fill holds none.
  Gpu tiny = GpuDatabase::builtin().resolve("h100");
  tiny.mem_gb = 1e-6;
  const GenerationAnalysis a = prepare_generation(d, serving(DType::f16, 1), GenerationOptions{64, 8});
  CHECK(predict_generation(a, d, tiny, serving(DType::f16, 1)).generation->max_batch == 0);
}

TEST_CASE("generation: --kv-dtype keeps the cache in its own element type beside 16-bit compute") {
  const Decoder d = config_decoder(small_llama(8, 2));
  Options o = serving(DType::bf16, 4);
  const GenerationReport bf16 = generate(d, o, 2000, 16, "h100");
  o.kv_dtype = DType::f8e4m3fn;
  const GenerationReport fp8 = generate(d, o, 2000, 16, "h100");
  CHECK(fp8.kv_cache_bytes == bf16.kv_cache_bytes / 2);
  CHECK(fp8.weight_bytes == bf16.weight_bytes);
  CHECK(fp8.tpot_ms < bf16.tpot_ms);  // a decode step reads half the cache
  CHECK(fp8.ttft_ms == doctest::Approx(bf16.ttft_ms).epsilon(0.02));
  // The step's attention reads the cache in FP8 and computes in BF16.
  o.dims.seq = 1;
  o.dims.named[d.past_dim] = 2000;
  const Analysis step = prepare(d.step, o);
  int flash = 0;
  for (const Kernel& k : step.kernels.kernels)
    if (k.op == "flash_decode") {
      ++flash;
      CHECK(k.dtype == DType::bf16);
      const double cache = 4.0 * 2 * 2001 * 64 * 2 * 1;  // batch x KV heads x keys x (key + value) x 1 byte
      CHECK(k.bytes < cache * 1.1);
      CHECK(k.bytes > cache);
    }
  CHECK(flash == 2);
}

TEST_CASE("generation: speculative decoding divides a verifying step and its drafts by the tokens it yields") {
  CHECK(expected_tokens_per_step(0, 0.5) == 1.0);
  CHECK(expected_tokens_per_step(4, 1.0) == 5.0);
  CHECK(expected_tokens_per_step(4, 0.8) == doctest::Approx((1 - std::pow(0.8, 5)) / 0.2));
  CHECK(expected_tokens_per_step(3, 0.5) == doctest::Approx(1.875));
  const Decoder d = config_decoder(small_llama(8, 2));
  ModelConfig small = small_llama(4, 2);
  small.layers = 1;
  const Decoder draft = config_decoder(small);
  const Options o = serving(DType::f16, 2);
  auto run = [&](int64_t k, double accept, const Decoder* dr) {
    GenerationOptions gen{256, 32};
    gen.speculative = k;
    gen.acceptance = accept;
    const GenerationAnalysis a = prepare_generation(d, o, gen, dr);
    return *predict_generation(a, d, GpuDatabase::builtin().resolve("h100"), o).generation;
  };
  const GenerationReport plain = run(0, 0, nullptr);
  CHECK(plain.speculative.proposed == 0);
  // A free draft whose every token is kept: a step of 5 tokens per sequence yields 5.
  const GenerationReport all = run(4, 1.0, nullptr);
  CHECK(all.speculative.tokens_per_step == 5.0);
  CHECK(all.speculative.verify_ms >= plain.samples.front().latency_ms);
  CHECK(all.samples.front().latency_ms == doctest::Approx(all.speculative.verify_ms / 5));
  CHECK(all.tpot_ms < plain.tpot_ms);
  CHECK(all.ttft_ms == plain.ttft_ms);
  CHECK(all.kv_cache_bytes == plain.kv_cache_bytes);
  // A draft model: its steps join each verifying step, its prefill the first token, its
  // weights and cache the memory; at a low acceptance it costs more than it saves.
  const GenerationReport drafted = run(4, 0.8, &draft);
  const auto& sp = drafted.speculative;
  CHECK(sp.draft_step_ms > 0);
  CHECK(drafted.samples.front().latency_ms ==
        doctest::Approx((sp.verify_ms + 4 * sp.draft_step_ms) / expected_tokens_per_step(4, 0.8)));
  CHECK(drafted.ttft_ms == doctest::Approx(plain.ttft_ms + sp.draft_ttft_ms));
  CHECK(drafted.memory_bytes == doctest::Approx(plain.memory_bytes + sp.draft_weight_bytes + sp.draft_kv_cache_bytes));
  CHECK(sp.draft_kv_cache_bytes == 2.0 * 1 * 2 * 128 * (256 + 32) * 2 * 2);
  CHECK(drafted.max_batch < plain.max_batch);
  CHECK(run(4, 0.1, &draft).tpot_ms > plain.tpot_ms);
  // Counts and probabilities out of range, and a draft without a count.
  for (auto [k, p] : {std::pair<int64_t, double>{4, 0.0}, {4, 1.5}, {-1, 0.5}, {65, 0.5}}) {
    GenerationOptions gen{16, 4};
    gen.speculative = k;
    gen.acceptance = p;
    CHECK_THROWS_AS(prepare_generation(d, o, gen), InputError);
  }
  CHECK_THROWS_AS(prepare_generation(d, o, GenerationOptions{16, 4}, &draft), InputError);
}

TEST_CASE("generation: a one-token step on CUDA cores streams its weights as on matrix units") {
  // FP32 (and the P100's FP16, which has no matrix units): one row per GEMM is a GEMV, priced by
  // the weight stream, not by tiles the FP32 kernel data never had so few rows for.
  ModelConfig c = small_llama(8, 2);
  c.hidden = 2048;
  c.head_dim = 256;
  c.ffn = 8192;
  c.layers = 4;
  const Decoder d = config_decoder(c);
  for (const auto& run : {std::pair<const char*, DType>{"v100", DType::f32}, {"a100-80gb", DType::f32},
                          {"h100", DType::f32}, {"p100", DType::f16}}) {
    const char* gpu = run.first;  // a plain variable: clang's C++17 lambdas (CAPTURE) take no structured binding
    CAPTURE(gpu);
    const GenerationReport r = generate(d, serving(run.second, 1), 64, 8, gpu);
    CHECK(r.tpot_ms >= r.weight_read_ms);
    CHECK(r.tpot_ms < 2.5 * r.weight_read_ms);
  }
}

TEST_CASE("generation: decode TPOT at batch 1 is at least the weights over DRAM bandwidth and grows with the KV cache") {
  const Decoder d = config_decoder(small_llama(8, 2));
  for (const char* gpu : {"h100", "a100-80gb", "l40s"}) {
    const Gpu& g = GpuDatabase::builtin().resolve(gpu);
    const GenerationReport r = generate(d, serving(DType::f16, 1), 128, 8192, gpu);
    const double bound_ms = (r.weight_bytes - r.embedding_bytes) / (g.mem_bw_gbps * 1e9) * 1e3;
    CHECK(r.samples.front().latency_ms >= bound_ms);
    for (size_t i = 1; i < r.samples.size(); ++i) CHECK(r.samples[i].latency_ms >= r.samples[i - 1].latency_ms);
    CHECK(r.tpot_last_ms > r.samples.front().latency_ms);
    CHECK(r.tpot_ms > r.samples.front().latency_ms);
    CHECK(r.tpot_ms < r.tpot_last_ms);
  }
}

TEST_CASE("generation: pipeline stages keep the model's time per token and split its memory") {
  ModelConfig c = small_llama(8, 2);
  c.layers = 8;
  const Decoder d = config_decoder(c);
  auto with = [&](int64_t batch, const std::string& spec) {
    Options o = serving(DType::bf16, batch);
    if (!spec.empty()) {
      o.parallel = parse_parallel(spec);
      o.parallel.active = true;
    }
    return generate(d, o, 256, 16, "h100");
  };
  // A batch of one is one microbatch: its token crosses both stages and a send each way.
  const GenerationReport one = with(1, ""), one_pp = with(1, "pp=2");
  CHECK(one_pp.microbatches == 1);
  CHECK(one_pp.tpot_ms > one.tpot_ms);
  CHECK(one_pp.tpot_ms < 1.05 * one.tpot_ms);
  CHECK(one_pp.ttft_ms > one.ttft_ms);
  CHECK(one_pp.ttft_ms < 1.05 * one.ttft_ms);
  // Eight sequences over two stages: two microbatches of four, each stage serving both a round,
  // so a round is at least one microbatch's whole step, within the slower stage's imbalance.
  const GenerationReport four = with(4, ""), eight_pp = with(8, "pp=2");
  CHECK(eight_pp.microbatches == 2);
  CHECK(eight_pp.micro_batch == 4);
  CHECK(eight_pp.gpus() == 2);
  CHECK(eight_pp.tpot_ms >= four.tpot_ms);
  CHECK(eight_pp.tpot_ms < 1.25 * four.tpot_ms);
  REQUIRE(eight_pp.prefill_stage_ms.size() == 2);
  REQUIRE(eight_pp.step_stage_ms.size() == 2);
  // The classes are one GPU's, "pipeline" the rest: they add up to the phase.
  double prefill = 0, decode = 0;
  for (const auto& [cls, ms] : eight_pp.prefill_by_class) prefill += ms;
  for (const auto& [cls, ms] : eight_pp.decode_by_class) decode += ms;
  CHECK(prefill == doctest::Approx(eight_pp.ttft_ms));
  CHECK(decode == doctest::Approx(eight_pp.total_ms - eight_pp.ttft_ms));
  CHECK(eight_pp.prefill_by_class.at("pipeline") > 0);
  // Memory: a GPU holds about half the weights and half the layers' cache.
  const GenerationReport eight = with(8, "");
  CHECK(eight_pp.kv_cache_bytes == eight.kv_cache_bytes);
  CHECK(eight_pp.memory_per_gpu_bytes < 0.75 * eight.memory_per_gpu_bytes);
  CHECK(eight_pp.memory_per_gpu_bytes > 0.4 * eight.memory_per_gpu_bytes);
  CHECK(eight_pp.max_batch > eight.max_batch);
  // Speculative decoding is predicted on one stage.
  Options o = serving(DType::bf16, 8);
  o.parallel = parse_parallel("pp=2");
  o.parallel.active = true;
  GenerationOptions g;
  g.prompt = 64;
  g.new_tokens = 4;
  g.speculative = 3;
  g.acceptance = 0.7;
  CHECK_THROWS_AS(prepare_generation(d, o, g), InputError);
}

TEST_CASE("generation: interpolated decode steps agree with predicting every step") {
  const Decoder d = config_decoder(small_llama(8, 2));
  const GenerationReport few = generate(d, serving(DType::f16, 2), 300, 48, "h100");
  const GenerationReport all = generate(d, serving(DType::f16, 2), 300, 48, "h100", 48);
  CHECK(all.samples.size() == 48);
  CHECK(few.samples.size() < 10);
  CHECK(few.total_ms == doctest::Approx(all.total_ms).epsilon(0.01));
  CHECK(few.tpot_last_ms == doctest::Approx(all.tpot_last_ms));
  CHECK(few.step_ms.size() == 48);
}

TEST_CASE("generation: TTFT, TPOT, total and tokens/s carry the steps' 80% intervals, summed as the latency is") {
  const Decoder d = config_decoder(small_llama(8, 2));
  const GenerationReport g = generate(d, serving(DType::f16, 4), 300, 48, "h100");
  CHECK(g.ttft_low_ms < g.ttft_ms);
  CHECK(g.ttft_ms < g.ttft_high_ms);
  CHECK(g.tpot_low_ms < g.tpot_ms);
  CHECK(g.tpot_ms < g.tpot_high_ms);
  CHECK(g.tokens_per_s_low < g.tokens_per_s);
  CHECK(g.tokens_per_s < g.tokens_per_s_high);
  for (const auto& s : g.samples) {
    CHECK(s.low_ms < s.latency_ms);
    CHECK(s.latency_ms < s.high_ms);
  }
  // The bounds add up as the latencies do: prefill + every step (interpolated between samples).
  CHECK(g.total_low_ms == doctest::Approx(g.ttft_low_ms + g.tpot_low_ms * 48));
  CHECK(g.total_high_ms == doctest::Approx(g.ttft_high_ms + g.tpot_high_ms * 48));
  CHECK(g.tokens_per_s_low == doctest::Approx(4 * 48 / (g.total_high_ms / 1000)));
  CHECK(g.tokens_per_s_high == doctest::Approx(4 * 48 / (g.total_low_ms / 1000)));
  // Speculative decoding divides a step's bounds as its latency by the tokens it yields (here
  // 5, every draft token kept, the drafts free).
  GenerationOptions gen{300, 48};
  gen.speculative = 4;
  gen.acceptance = 1.0;
  const Options o = serving(DType::f16, 4);
  const GenerationReport sp =
      *predict_generation(prepare_generation(d, o, gen), d, GpuDatabase::builtin().resolve("h100"), o).generation;
  CHECK(sp.samples.front().low_ms < sp.samples.front().latency_ms);
  CHECK(sp.samples.front().high_ms / sp.samples.front().latency_ms > 1.1);
  CHECK(sp.tpot_high_ms < g.tpot_high_ms);
  CHECK(sp.tpot_high_ms / sp.tpot_ms == doctest::Approx(sp.samples.front().high_ms / sp.samples.front().latency_ms).epsilon(0.05));
  // The generation's kernels weighted as they run (compare's tokens/s speed-up interval) add
  // up to its total, plain and speculative.
  CHECK(g.time.latency_ms() == doctest::Approx(g.total_ms).epsilon(1e-9));
  CHECK(sp.time.latency_ms() == doctest::Approx(sp.total_ms).epsilon(1e-9));
  const RatioInterval same = ratio_interval(g.time, g.time);
  CHECK(same.low == doctest::Approx(1));
  CHECK(same.high == doctest::Approx(1));
  // The roofline has no interval: its bounds are its figures.
  Options r = serving(DType::f16, 4);
  r.predictor = PredictorKind::roofline;
  const GenerationReport rf =
      *predict_generation(prepare_generation(d, r, GenerationOptions{300, 48}), d, GpuDatabase::builtin().resolve("h100"), r)
           .generation;
  CHECK(rf.ttft_low_ms == rf.ttft_ms);
  CHECK(rf.tpot_high_ms == rf.tpot_ms);
  CHECK(rf.tokens_per_s_low == doctest::Approx(rf.tokens_per_s));
}

TEST_CASE("generation: Llama-3-8B FP16 acceptance figures") {
  const Decoder d = config_decoder(llama3_8b());
  CHECK(d.kv_heads == 8);
  CHECK(d.head_dim == 128);
  for (const char* gpu : {"h100", "h200", "b200", "l40s", "mi300x", "a100-80gb"}) {
    const Gpu& g = GpuDatabase::builtin().resolve(gpu);
    const GenerationReport one = generate(d, serving(DType::f16, 1), 512, 128, gpu);
    const double bound_ms = (one.weight_bytes - one.embedding_bytes) / (g.mem_bw_gbps * 1e9) * 1e3;
    MESSAGE(std::string(gpu) << ": TPOT " << one.tpot_ms << " ms, bound " << bound_ms << " ms, ratio " << one.tpot_ms / bound_ms);
    CHECK(one.tpot_ms >= bound_ms);
    CHECK(one.tpot_ms <= 2.0 * bound_ms);
    CHECK(one.kv_cache_bytes == 2.0 * 32 * 8 * 128 * 640 * 1 * 2);
    if (std::string(gpu) == "h100") {
      const GenerationReport eight = generate(d, serving(DType::f16, 8), 512, 128, gpu);
      CHECK(eight.tokens_per_s > 4 * one.tokens_per_s);
      // 4x the prompt is 4x the prefill's work; less than 4x the time, since 512-row
      // projections leave SMs idle in their one wave (docs/ACCURACY.md "LLM generation").
      const GenerationReport longer = generate(d, serving(DType::f16, 1), 2048, 128, gpu);
      MESSAGE("h100: TTFT 2048 / 512 = " << longer.ttft_ms / one.ttft_ms);
      CHECK(longer.ttft_ms >= 3.0 * one.ttft_ms);
    }
  }
}

TEST_CASE("generation: TTFT grows at least linearly with the prompt, and tokens/s rises with the batch") {
  const Decoder d = config_decoder(small_llama(8, 2));
  // The times that do not grow with the prompt (each GEMM's fixed time, the weights' reads of
  // this two-layer model) cancel in the increments: each doubling adds at least twice what the
  // one before added (attention's work grows with the prompt's square), and the TTFT itself
  // grows by at least 1.75x.
  std::vector<double> ttft;
  double prev_tps = 0;
  for (int64_t prompt : {1024, 2048, 4096}) {
    ttft.push_back(generate(d, serving(DType::f16, 4), prompt, 16, "h100").ttft_ms);
    INFO("prompt ", prompt, ": TTFT ", ttft.back(), " ms");
    if (ttft.size() > 1) CHECK(ttft.back() >= 1.75 * ttft[ttft.size() - 2]);
  }
  CHECK(ttft[2] - ttft[1] >= 2 * (ttft[1] - ttft[0]));
  for (int64_t batch : {1, 2, 4, 8, 16}) {
    const GenerationReport r = generate(d, serving(DType::f16, batch), 256, 64, "h100");
    CHECK(r.tokens_per_s > prev_tps);
    prev_tps = r.tokens_per_s;
  }
}

TEST_CASE("generation: --attention fused runs FlashAttention beside eager kernels, unfused keeps MatMul + Softmax") {
  const Decoder d = config_decoder(small_llama(8, 2));
  Options o = serving(DType::f16, 2, 64);
  o.fusion = Fusion::eager;
  // Automatic: transformers' default, SDPA (FlashAttention at 16 bits); FP32 stays unfused.
  CHECK(count_op(prepare(d.prefill, o).kernels, "flash_attention") == 2);
  Options fp32 = o;
  fp32.dtype = DType::f32;
  CHECK(count_op(prepare(d.prefill, fp32).kernels, "flash_attention") == 0);
  o.attention = Attention::unfused;
  const Analysis eager = prepare(d.prefill, o);
  CHECK(count_op(eager.kernels, "flash_attention") == 0);
  CHECK(count_op(eager.kernels, "softmax") == 2);
  o.attention = Attention::fused;
  const Analysis sdpa = prepare(d.prefill, o);
  CHECK(count_op(sdpa.kernels, "flash_attention") == 2);
  CHECK(count_op(sdpa.kernels, "softmax") == 0);
  // The rest stays eager: the same norms and activations as without the fused attention.
  CHECK(count_op(sdpa.kernels, "rotary") == count_op(eager.kernels, "rotary"));
  // rotate_half's halves are views (PyTorch's basic indexing) that its neg and cat read
  // through their strides: no slice copies in eager inference; --fusion none copies them.
  CHECK(count_op(eager.kernels, "slice") == 0);
  CHECK(count_op(eager.kernels, "neg") == 2 * 2);
  Options none = o;
  none.fusion = Fusion::none;
  none.attention = Attention::unfused;
  CHECK(count_op(prepare(d.prefill, none).kernels, "slice") >= 2 * 2 * 2);  // two halves of q and k, per layer
  const Options full_options = serving(DType::f16, 2, 64);
  const Analysis full = prepare(d.prefill, full_options);
  CHECK(sdpa.kernels.kernels.size() > full.kernels.kernels.size());
  // Fused and unfused attention on the same kernels otherwise: the fused one moves fewer bytes
  // (no score matrix in memory) and is predicted faster on every GPU.
  double eager_bytes = 0, sdpa_bytes = 0;
  for (const Kernel& k : eager.kernels.kernels) eager_bytes += k.bytes;
  for (const Kernel& k : sdpa.kernels.kernels) sdpa_bytes += k.bytes;
  CHECK(sdpa_bytes < eager_bytes);
  // --attention unfused under --fusion full: MatMul + Softmax, the rest fused.
  Options u = serving(DType::f16, 2, 64);
  u.attention = Attention::unfused;
  const Analysis unfused = prepare(d.prefill, u);
  CHECK(count_op(unfused.kernels, "flash_attention") == 0);
  CHECK(count_op(unfused.kernels, "softmax") == 2);
  // Training at 16 bits runs SDPA's FlashAttention as inference does, unless asked otherwise;
  // FP32 and --fusion none keep MatMul + Softmax (the measured FP32 training runs).
  Options t = o;
  t.mode = Mode::training;
  t.dtype = DType::f16;
  t.attention = Attention::automatic;
  CHECK(count_op(prepare(d.prefill, t).kernels, "flash_attention_bwd") == 2);
  t.attention = Attention::unfused;
  const Analysis train = prepare(d.prefill, t);
  CHECK(count_op(train.kernels, "flash_attention") == 0);
  t.attention = Attention::automatic;
  t.dtype = DType::f32;
  CHECK(count_op(prepare(d.prefill, t).kernels, "flash_attention") == 0);
  t.dtype = DType::f16;
  t.fusion = Fusion::none;
  CHECK(count_op(prepare(d.prefill, t).kernels, "flash_attention") == 0);
  t.fusion = o.fusion;
  // Asked (--attention fused --mode training): FlashAttention-2's forward and backward, its
  // dropout inside the kernel; the backward 2.5 times the forward's products.
  t.attention = Attention::fused;
  const Analysis flash = prepare(d.prefill, t);
  CHECK(count_op(flash.kernels, "flash_attention") == 2);
  CHECK(count_op(flash.kernels, "flash_attention_bwd") == 2);
  CHECK(count_op(flash.kernels, "flash_bwd_dot") == 2);
  CHECK(count_op(flash.kernels, "softmax") == 0);
  CHECK(count_op(flash.kernels, "softmax_grad") == 0);
  double fwd = 0, bwd = 0;
  for (const Kernel& k : flash.kernels.kernels) {
    if (k.op == "flash_attention") fwd += k.flops;
    if (k.op == "flash_attention_bwd") bwd += k.flops;
  }
  CHECK(bwd == doctest::Approx(2.5 * fwd));
  // It keeps Q, K, V, O and the rows' log-sum-exp, never the scores or the probabilities.
  REQUIRE(train.memory);
  REQUIRE(flash.memory);
  CHECK(flash.memory->activations_gib < train.memory->activations_gib);
}

TEST_CASE("generation: eager 16-bit RMSNorms run in FP32 between two casts, as Hugging Face's modules do") {
  const Decoder d = config_decoder(small_llama(8, 2));
  Options o = serving(DType::bf16, 2, 64);
  o.fusion = Fusion::eager;
  const Analysis eager = prepare(d.prefill, o);
  const int norms = 2 * 2 + 1;  // two per layer and the final one
  const double rows = 2.0 * 64, elems = rows * 512;
  int up = 0, down = 0, fp32_math = 0;
  for (const Kernel& k : eager.kernels.kernels) {
    if (k.op == "cast" && k.dtype == DType::f32 && k.bytes == doctest::Approx(elems * (2 + 4))) ++up;
    if (k.op == "cast" && k.dtype == DType::bf16 && k.bytes == doctest::Approx(elems * (4 + 2))) ++down;
    // pow and the normalisation read the FP32 copy and write FP32 (the attention's scaling
    // divide stays BF16); the statistics are FP32.
    if ((k.op == "pow" || k.op == "div") && k.dtype == DType::f32) {
      ++fp32_math;
      CHECK(k.bytes == doctest::Approx(elems * 8).epsilon(0.01));
    }
    if (k.op == "reducemean") CHECK(k.bytes == doctest::Approx(elems * 4 + rows * 4));
  }
  CHECK(up == norms);
  CHECK(down == norms);
  CHECK(fp32_math == 2 * norms);
  // The weight's multiply reads the 16-bit copy: every mul stays BF16.
  for (const Kernel& k : eager.kernels.kernels)
    if (k.op == "mul") CHECK(k.dtype == DType::bf16);
  // FP32 runs no casts (to(float32) of an FP32 tensor is the tensor), full fusion one kernel.
  o.dtype = DType::f32;
  CHECK(count_op(prepare(d.prefill, o).kernels, "cast") == 0);
  const Analysis full = prepare(d.prefill, serving(DType::bf16, 2, 64));
  CHECK(count_op(full.kernels, "cast") == 0);
  CHECK(count_op(full.kernels, "rmsnorm") == norms);
}

TEST_CASE("generation: --fusion full runs attention as one FlashAttention kernel per layer") {
  const ModelConfig c = small_llama(8, 2);
  const Decoder d = config_decoder(c);
  Options o = serving(DType::f16, 2, 64);
  const Analysis pre = prepare(d.prefill, o);
  CHECK(count_op(pre.kernels, "flash_attention") == 2);
  CHECK(count_op(pre.kernels, "softmax") == 0);
  for (const Kernel& k : pre.kernels.kernels)
    if (k.op == "flash_attention") {
      // Causal: query i sees i + 1 keys; QK^T and PV over 64-wide heads, 2 x 8 (batch x heads).
      CHECK(k.flops == doctest::Approx(2.0 * 16 * (64.0 * 65 / 2) * 128));
      CHECK(k.cls == KernelClass::gemm);
      // Q and O over 8 heads, K and V over the 2 KV heads (read once), FP16.
      CHECK(k.bytes == doctest::Approx((2.0 * 2 * 8 * 64 * 64 + 2.0 * 2 * 2 * 64 * 64) * 2));
    }
  o.dims.seq = 1;
  o.dims.named["past_sequence"] = 1000;
  const Analysis step = prepare(d.step, o);
  CHECK(count_op(step.kernels, "flash_decode") == 2);
  CHECK(count_op(step.kernels, "concat") == 0);  // the cache append runs in the attention kernel
  CHECK(count_op(step.kernels, "rotary") == 2 * 2);  // q and k per layer, one kernel each
  CHECK(count_op(step.kernels, "transpose") == 0);   // head permutes are index math of those kernels
  for (const Kernel& k : step.kernels.kernels)
    if (k.op == "flash_decode") {
      CHECK(k.cls == KernelClass::reduce);
      CHECK(k.rows == 2 * 2);  // batch x KV heads
      // The cache (1001 entries, K and V, 2 KV heads), the new entries written, Q and O.
      CHECK(k.bytes == doctest::Approx((2.0 * 2 * 2 * 1001 * 64 + 2.0 * 2 * 2 * 64 + 2.0 * 2 * 8 * 64) * 2));
    }
  // Serving kernels: vLLM's rotary_embedding rotates a token's query and key heads in one
  // kernel (one block per token), in the prompt and in a step.
  o.serving_kernels = true;
  for (const Analysis& a : {prepare(d.step, o), [&] {
                              Options p = serving(DType::f16, 2, 64);
                              p.serving_kernels = true;
                              return prepare(d.prefill, p);
                            }()}) {
    CHECK(count_op(a.kernels, "rotary") == 2);
    for (const Kernel& k : a.kernels.kernels)
      if (k.op == "rotary") {
        const int64_t tokens = k.rows;
        CHECK((tokens == 2 || tokens == 2 * 64));
        CHECK(k.cols == (8 + 2) * 64);
        // Each head read and written, and the cos and sin rows the tokens use.
        CHECK(k.bytes >= 2.0 * tokens * (8 + 2) * 64 * 2);
        CHECK(k.access.block_threads == 8 * 64 / 2);
        CHECK(k.access.index_loads == 1);
      }
    // The new keys and values go into the paged cache by a kernel of their own (vLLM's
    // reshape_and_cache_flash: one block per token, its slot first), read as 16-bit and
    // stored: 2 tensors x 2 KV heads x 64 per token.
    CHECK(count_op(a.kernels, "kv_cache_write") == 2);
    for (const Kernel& k : a.kernels.kernels)
      if (k.op == "kv_cache_write") {
        CHECK(k.cols == 2 * 64);
        CHECK(k.bytes == doctest::Approx(double(k.rows) * 2 * 2 * 64 * (2 + 2)));
        CHECK(k.access.row_tensors == 2);
        CHECK(k.access.index_loads == 1);
      }
  }
  {
    // The attention then reads the cache and no longer appends to it.
    const Analysis a = prepare(d.step, o);
    for (const Kernel& k : a.kernels.kernels)
      if (k.op == "flash_decode")
        CHECK(k.bytes == doctest::Approx((2.0 * 2 * 2 * 1001 * 64 + 2.0 * 2 * 8 * 64) * 2));
  }
  o.serving_kernels = false;
  // Eager with unfused attention (attn_implementation "eager"): the cache concatenation
  // copies, softmax separate.
  o.fusion = Fusion::eager;
  o.attention = Attention::unfused;
  const Analysis eager = prepare(d.step, o);
  CHECK(count_op(eager.kernels, "flash_decode") == 0);
  CHECK(count_op(eager.kernels, "softmax") == 2);
  // SDPA beside eager kernels: the attention is one kernel, but the cache still grows by
  // DynamicCache's torch.cat (a copy of the whole cache, K and V, each step), which the
  // attention then reads without appending to it.
  o.attention = Attention::fused;
  const Analysis sdpa = prepare(d.step, o);
  CHECK(count_op(sdpa.kernels, "flash_decode") == 2);
  int cache_copies = 0;
  for (const Kernel& k : sdpa.kernels.kernels) {
    // Read the 1000 cached entries and the new one, write the 1001 (batch 2, 2 KV heads of 64,
    // FP16); the other concatenations are rotate_half's.
    if (k.op == "concat" && k.bytes == doctest::Approx((2.0 * 2 * 1000 * 64 + 2.0 * 2 * 64 + 2.0 * 2 * 1001 * 64) * 2))
      ++cache_copies;
    if (k.op == "flash_decode") {
      CHECK(k.bytes == doctest::Approx((2.0 * 2 * 2 * 1001 * 64 + 2.0 * 2 * 8 * 64) * 2));
      CHECK(k.note.find("append") == std::string::npos);
    }
  }
  CHECK(cache_copies == 2 * 2);  // K and V of each layer
  // Full fusion appends in place: the step moves the cache once, not three times.
  Options f = o;
  f.fusion = Fusion::full;
  double sdpa_bytes = 0, full_bytes = 0;
  for (const Kernel& k : sdpa.kernels.kernels) sdpa_bytes += k.bytes;
  for (const Kernel& k : prepare(d.step, f).kernels.kernels) full_bytes += k.bytes;
  CHECK(sdpa_bytes - full_bytes > 2 * 2.0 * 2 * 2 * 1000 * 64 * 2 * 0.99);
}

TEST_CASE("generation: an ONNX decoder export with past_key_values inputs predicts like its config") {
  const ModelConfig c = small_llama(8, 2);
  const Decoder from_config = config_decoder(c);
  const LoadedModel step = build_model(c, BuildOptions{true});
  const Decoder from_onnx = onnx_decoder(load_model_from_proto(step.proto->model, "decoder.onnx"));
  CHECK(from_onnx.layers == 2);
  CHECK(from_onnx.kv_heads == 2);
  CHECK(from_onnx.head_dim == 64);
  CHECK(from_onnx.past_dim == "past_sequence");
  const GenerationReport a = generate(from_config, serving(DType::f16, 2), 256, 32, "h100");
  const GenerationReport b = generate(from_onnx, serving(DType::f16, 2), 256, 32, "h100");
  CHECK(b.tpot_ms == doctest::Approx(a.tpot_ms));
  CHECK(b.ttft_ms == doctest::Approx(a.ttft_ms).epsilon(0.1));
  CHECK(b.kv_cache_bytes == a.kv_cache_bytes);
  // A model without a cache is refused with an input error.
  CHECK_THROWS_AS(onnx_decoder(load_model_from_proto(from_config.prefill.proto->model, "plain.onnx")), InputError);
  ModelConfig bert = c;
  bert.model_type = "bert";
  CHECK_THROWS_AS(config_decoder(bert), InputError);
  GenerationOptions bad;
  bad.prompt = 0;
  bad.new_tokens = 5;
  CHECK_THROWS_AS(prepare_generation(from_config, serving(DType::f16, 1), bad), InputError);
}

TEST_CASE("generation: a decode step splits the KV read over the keys only when batch x KV heads leaves SMs idle") {
  const Decoder d = config_decoder(small_llama(8, 2));
  const Gpu& h100 = GpuDatabase::builtin().resolve("h100");  // 132 SMs
  auto decode_notes = [&](int64_t batch) {
    Options o = serving(DType::f16, batch);
    o.dims.seq = 1;
    o.dims.named["past_sequence"] = 4096;
    const Report r = predict(prepare(d.step, o), d.step.model, h100, o);
    std::vector<std::string> notes;
    for (const auto& n : r.nodes)
      for (const auto& k : n.kernels)
        if (k.kernel.op == "flash_decode") notes.push_back(k.kernel.note);
    return notes;
  };
  for (const auto& note : decode_notes(1)) CHECK(note.find("split-KV") != std::string::npos);   // 2 blocks
  for (const auto& note : decode_notes(128)) CHECK(note.find("split-KV") == std::string::npos);  // 256 blocks
  CHECK(decode_notes(1).size() == 2);
}

TEST_CASE("generation: a mixture of experts reads only the experts its tokens reach") {
  // Mixtral 8x7B: top-2 of 8 SwiGLU experts per layer, one com.microsoft.MoE node each.
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/mixtral_8x7b.json");
  CHECK(c.experts == 8);
  CHECK(c.experts_per_token == 2);
  const LoadedModel m = build_model(c);
  const auto moe = std::count_if(m.model.graph.nodes.begin(), m.model.graph.nodes.end(), [](const Node& n) { return n.op_type == "MoE"; });
  CHECK(moe == 32);
  // The average experts reached: k at one token, nearly all at many.
  CHECK(moe_experts_reached(1, 8, 2) == doctest::Approx(2));
  CHECK(moe_experts_reached(8, 8, 2) == doctest::Approx(8 * (1 - std::pow(0.75, 8))));
  CHECK(moe_experts_reached(4096, 8, 2) == doctest::Approx(8));
  CHECK(moe_experts_reached(3, 8, 1) > moe_experts_reached(2, 8, 1));
  const Decoder d = config_decoder(c);
  const Gpu& g = GpuDatabase::builtin().resolve("h100");
  const GenerationReport one = generate(d, serving(DType::bf16, 1), 512, 64, "h100");
  const GenerationReport eight = generate(d, serving(DType::bf16, 8), 512, 64, "h100");
  const double all_ms = (one.weight_bytes - one.embedding_bytes) / (g.mem_bw_gbps * 1e9) * 1e3;
  MESSAGE("Mixtral 8x7B BF16 on the H100: TPOT b1 " << one.tpot_ms << " ms (bound " << one.weight_read_ms
                                                   << ", all weights " << all_ms << "), b8 " << eight.tpot_ms << " ms");
  // One token reads the attention, 2 of 8 experts and the head: about 28% of the weights.
  CHECK(one.weight_read_ms < 0.3 * all_ms);
  CHECK(one.weight_read_ms > 0.25 * all_ms);
  CHECK(one.tpot_ms >= one.weight_read_ms);
  CHECK(one.tpot_ms <= 2.0 * one.weight_read_ms);
  // Eight sequences reach about 7.2 experts: a step reads most of them, yet yields 8 tokens.
  CHECK(eight.weight_read_ms > 2.5 * one.weight_read_ms);
  CHECK(eight.tpot_ms > 2.0 * one.tpot_ms);
  CHECK(eight.tokens_per_s > 2.0 * one.tokens_per_s);
  // More than the 80 GB: the weights alone are 87 GiB in BF16.
  CHECK(one.memory_bytes > 80e9);
}

TEST_CASE("generation: Qwen3-MoE normalises query and key heads, and its layers' experts follow the config") {
  ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/qwen3_30b_a3b.json");
  CHECK(c.qk_norm);
  CHECK(c.experts == 128);
  CHECK(c.experts_per_token == 8);
  CHECK(c.expert_ffn == 768);
  auto count = [](const LoadedModel& m, const std::string& op) {
    return std::count_if(m.model.graph.nodes.begin(), m.model.graph.nodes.end(),
                         [&](const Node& n) { return n.op_type == op; });
  };
  const LoadedModel full = build_model(c);
  CHECK(count(full, "MoE") == 48);
  // An RMSNorm (one ReduceMean) before each attention and MLP, one over each of the query and
  // key heads, one at the end.
  CHECK(count(full, "ReduceMean") == 48 * 4 + 1);
  // decoder_sparse_step 2 and a dense first layer: layers 1, 3, 5, ... but not 1 are sparse.
  c.sparse_step = 2;
  c.dense_layers = {1};
  CHECK(count(build_model(c), "MoE") == 23);
  c.sparse_step = 1;
  c.dense_layers.clear();
  // One token reaches 8 of 128 experts: a decode step reads a small share of the weights.
  const Decoder d = config_decoder(c);
  const Gpu& g = GpuDatabase::builtin().resolve("h200");
  const GenerationReport one = generate(d, serving(DType::bf16, 1), 256, 32, "h200");
  const double all_ms = (one.weight_bytes - one.embedding_bytes) / (g.mem_bw_gbps * 1e9) * 1e3;
  MESSAGE("Qwen3-30B-A3B BF16 on the H200: TPOT " << one.tpot_ms << " ms, bound " << one.weight_read_ms << " ms, all weights "
                                                  << all_ms << " ms");
  CHECK(one.weight_read_ms < 0.15 * all_ms);
  CHECK(one.tpot_ms >= one.weight_read_ms);
  // The config's errors name the field.
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, "num_experts": 4,
      "num_experts_per_tok": 8, "moe_intermediate_size": 32})", "cfg"),
                       doctest::Contains("num_experts_per_tok"), InputError);
}

TEST_CASE("generation: Qwen2-MoE adds a gated shared expert to the routed ones") {
  // Qwen1.5-MoE-A2.7B's shape: 24 layers, 60 experts of 1408, top-4, a shared expert of 5632.
  const ModelConfig c = parse_hf_config(R"({"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048,
      "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632, "vocab_size": 151936,
      "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
      "shared_expert_intermediate_size": 5632, "norm_topk_prob": false, "hidden_act": "silu"})",
                                        "qwen2_moe");
  CHECK(c.experts == 60);
  CHECK(c.experts_per_token == 4);
  CHECK(c.shared_expert_ffn == 5632);
  CHECK_FALSE(c.normalize_routing);
  CHECK(c.qkv_bias);
  const LoadedModel m = build_model(c);
  int moe = 0, sigmoid = 0;
  for (const Node& n : m.model.graph.nodes) {
    if (n.op_type == "MoE") {
      ++moe;
      CHECK(n.attr_i("normalize_routing_weights", 1) == 0);
      CHECK(n.attr_i("k", 0) == 4);
    }
    sigmoid += n.op_type == "Sigmoid" && n.name.find("shared_expert_gate") != std::string::npos;
  }
  CHECK(moe == 24);
  CHECK(sigmoid == 24);
  // A decode step reads the attention, the shared expert, 4 of 60 routed experts per layer
  // and the head: about 2.4 of the 14.3 billion weights outside the embedding table.
  const Decoder d = config_decoder(c);
  const Gpu& g = GpuDatabase::builtin().resolve("h100");
  const GenerationReport one = generate(d, serving(DType::bf16, 1), 256, 32, "h100");
  const double all_ms = (one.weight_bytes - one.embedding_bytes) / (g.mem_bw_gbps * 1e9) * 1e3;
  CHECK(one.weight_read_ms / all_ms == doctest::Approx(2.37 / 14.3).epsilon(0.05));
  CHECK(one.tpot_ms >= one.weight_read_ms);
}

TEST_CASE("generation: sliding-window layers attend to their window and keep only it in the cache") {
  ModelConfig c = small_llama(8, 2);
  c.model_type = "mistral";
  c.sliding_window = 16;
  c.sliding_layers = {true, false};
  const Decoder d = config_decoder(c);
  CHECK(d.sliding_layers == 1);
  CHECK(d.window == 16);
  Options o = serving(DType::f16, 2, 64);
  const Analysis pre = prepare(d.prefill, o);
  std::vector<double> flops;
  for (const Kernel& k : pre.kernels.kernels)
    if (k.op == "flash_attention") flops.push_back(k.flops);
  REQUIRE(flops.size() == 2);
  // Layer 0: query i sees min(i + 1, 16) keys: 1 + ... + 16 + 48 x 16 = 904 pairs; layer 1
  // the causal triangle, 64 x 65 / 2 = 2080. QK^T and PV over 64-wide heads, 2 x 8 heads.
  CHECK(flops[0] == doctest::Approx(2.0 * 16 * 904 * 128));
  CHECK(flops[1] == doctest::Approx(2.0 * 16 * 2080 * 128));
  // A decode step at 1000 cached tokens: the sliding layer reads its 16 most recent.
  o.dims.seq = 1;
  o.dims.named["past_sequence"] = 1000;
  const Analysis step = prepare(d.step, o);
  std::vector<double> read;
  for (const Kernel& k : step.kernels.kernels)
    if (k.op == "flash_decode") read.push_back(double(k.gemm.k));
  REQUIRE(read.size() == 2);
  CHECK(read[0] == 16);
  CHECK(read[1] == 1001);
  // The cache: one layer of every token, one of the window alone.
  const GenerationReport g = generate(d, serving(DType::f16, 3), 40, 9, "h100");
  CHECK(g.kv_cache_bytes == 2.0 * 2 * 64 * (49 + 16) * 3 * 2);
  // A window longer than the generation changes nothing.
  ModelConfig wide = c;
  wide.sliding_window = 4096;
  const GenerationReport w = generate(config_decoder(wide), serving(DType::f16, 3), 40, 9, "h100");
  const GenerationReport full = generate(config_decoder(small_llama(8, 2)), serving(DType::f16, 3), 40, 9, "h100");
  CHECK(w.kv_cache_bytes == full.kv_cache_bytes);
  CHECK(w.ttft_ms == doctest::Approx(full.ttft_ms));
  CHECK(w.tpot_ms == doctest::Approx(full.tpot_ms));
}

TEST_CASE("generation: the config's sliding-window fields") {
  const std::string base = R"("num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
      "intermediate_size": 512, "vocab_size": 1000)";
  // Mistral: every layer when sliding_window is set; none when it is null.
  ModelConfig m = parse_hf_config(R"({"model_type": "mistral", "sliding_window": 4096, )" + base + "}", "m");
  CHECK(m.sliding_window == 4096);
  CHECK(m.sliding_layers == std::vector<bool>(4, true));
  m = parse_hf_config(R"({"model_type": "mistral", "sliding_window": null, )" + base + "}", "m");
  CHECK(m.sliding_layers.empty());
  // Qwen2: only with use_sliding_window, from max_window_layers on.
  ModelConfig q = parse_hf_config(R"({"model_type": "qwen2", "sliding_window": 32768, )" + base + "}", "q");
  CHECK(q.sliding_layers.empty());
  q = parse_hf_config(R"({"model_type": "qwen2", "sliding_window": 1024, "use_sliding_window": true,
      "max_window_layers": 2, )" + base + "}", "q");
  CHECK(q.sliding_layers == std::vector<bool>{false, false, true, true});
  // Phi-3 (mini-4k: a 2047-token window on every layer).
  ModelConfig phi = parse_hf_config(R"({"model_type": "phi3", "sliding_window": 2047, )" + base + "}", "p");
  CHECK(phi.sliding_layers == std::vector<bool>(4, true));
  // layer_types names each layer; it must name all of them.
  ModelConfig l = parse_hf_config(R"({"model_type": "llama", "sliding_window": 128, "layer_types":
      ["sliding_attention", "full_attention", "sliding_attention", "full_attention"], )" + base + "}", "l");
  CHECK(l.sliding_layers == std::vector<bool>{true, false, true, false});
  CHECK_THROWS_AS(parse_hf_config(R"({"model_type": "llama", "sliding_window": 128, "layer_types":
      ["sliding_attention"], )" + base + "}", "l"), InputError);
  CHECK_THROWS_AS(parse_hf_config(R"({"model_type": "llama", "layer_types":
      ["sliding_attention", "full_attention", "full_attention", "full_attention"], )" + base + "}", "l"), InputError);
}

TEST_CASE("generation: gpt-oss, MXFP4 experts and alternating sliding-window attention") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/gpt_oss_120b.json");
  CHECK(c.experts == 128);
  CHECK(c.experts_per_token == 4);
  CHECK(c.expert_weight_bits == 4);
  CHECK(c.expert_block == 32);
  CHECK(c.sliding_window == 128);
  CHECK(std::count(c.sliding_layers.begin(), c.sliding_layers.end(), true) == 18);
  CHECK((c.qkv_bias && c.o_bias && c.expert_bias));
  const LoadedModel m = build_model(c);
  int qmoe = 0;
  for (const Node& n : m.model.graph.nodes)
    if (n.op_type == "QMoE") {
      ++qmoe;
      CHECK(n.attr_i("expert_weight_bits", 0) == 4);
      CHECK(n.attr_i("k", 0) == 4);
    }
  CHECK(qmoe == 36);
  const Decoder d = config_decoder(c);
  const Gpu& g = GpuDatabase::builtin().resolve("h100");
  const GenerationReport one = generate(d, serving(DType::bf16, 1), 512, 32, "h100");
  // Its 116.8 billion weights: the experts' 114.7 in 4.25 bits (MXFP4 with a byte of scale per
  // 32), the attention, router, embedding and head in BF16: about 65 GB.
  CHECK(one.weight_bytes == doctest::Approx(114.66e9 * 4.25 / 8 + 2.13e9 * 2).epsilon(0.01));
  // The cache: 18 full layers of 544 tokens, 18 sliding ones of their 128.
  CHECK(one.kv_cache_bytes == 2.0 * 8 * 64 * (18 * 544 + 18 * 128) * 2);
  // A token reads the attention, 4 of 128 experts a layer and the head, 2.9 GB of the 65.
  const double all_ms = (one.weight_bytes - one.embedding_bytes) / (g.mem_bw_gbps * 1e9) * 1e3;
  CHECK(one.weight_read_ms / all_ms == doctest::Approx(4.96 / 64.2).epsilon(0.05));
  CHECK(one.tpot_ms >= one.weight_read_ms);
  MESSAGE("gpt-oss-120b BF16 + MXFP4 experts, H100, batch 1, 512:32: TTFT " << one.ttft_ms << " ms, TPOT " << one.tpot_ms
                                                                             << " ms (bound " << one.weight_read_ms << ")");
}

// The kernels of a prefill under a forced narrow dtype: every GEMM of a weight in `narrow`
// reading both operands at `operand_bytes` an element and writing BF16; every other float
// kernel (attention, norms, activations) in BF16. Returns the number of narrow GEMMs.
int check_narrow_prefill(const Analysis& pre, DType narrow, double operand_bytes) {
  int count = 0;
  for (const Kernel& k : pre.kernels.kernels) {
    if (k.cls == KernelClass::gemm && k.op != "flash_attention") {
      CHECK(k.dtype == narrow);
      const double out = double(k.gemm.batch) * double(k.gemm.m) * double(k.gemm.n);
      const double in = double(k.gemm.m) * double(k.gemm.k) + double(k.gemm.k) * double(k.gemm.n);
      CHECK(k.bytes == doctest::Approx(in * operand_bytes + 2 * out).epsilon(0.01));
      ++count;
    } else if (is_float(k.dtype)) {
      CHECK(k.dtype == DType::bf16);
    }
  }
  return count;
}

TEST_CASE("generation: --dtype fp4 and fp8 run the weights' GEMMs narrow and the rest in BF16") {
  const ModelConfig c = small_llama(8, 2);
  const Decoder d = config_decoder(c);
  // Q, K, V, O, gate, up and down per layer, and the head.
  CHECK(check_narrow_prefill(prepare(d.prefill, serving(DType::f4e2m1, 2, 64)), DType::f4e2m1, 0.5 + 1.0 / 16) ==
        2 * 7 + 1);
  CHECK(check_narrow_prefill(prepare(d.prefill, serving(DType::f8e4m3fn, 2, 64)), DType::f8e4m3fn, 1.0) == 2 * 7 + 1);
  // The cache and the embedding table in BF16 as under bf16; the weights in 4.5 bits and 8.
  const GenerationReport g = generate(d, serving(DType::f4e2m1, 2), 40, 9, "b200");
  const GenerationReport h = generate(d, serving(DType::f8e4m3fn, 2), 40, 9, "b200");
  const GenerationReport b = generate(d, serving(DType::bf16, 2), 40, 9, "b200");
  CHECK(g.kv_cache_bytes == 2.0 * 2 * 2 * 64 * 49 * 2 * 2);
  CHECK(h.kv_cache_bytes == b.kv_cache_bytes);
  CHECK(g.embedding_bytes == h.embedding_bytes);
  CHECK(h.embedding_bytes == b.embedding_bytes);
  CHECK((g.weight_bytes - g.embedding_bytes) / (h.weight_bytes - h.embedding_bytes) == doctest::Approx(0.5625).epsilon(0.01));
  CHECK((h.weight_bytes - h.embedding_bytes) / (b.weight_bytes - b.embedding_bytes) == doctest::Approx(0.5).epsilon(0.01));
  CHECK(g.tpot_ms < h.tpot_ms);
  CHECK(h.tpot_ms < b.tpot_ms);
  // --kv-dtype fp8 halves the cache beside FP8 GEMMs.
  Options o = serving(DType::f8e4m3fn, 2);
  o.kv_dtype = DType::f8e4m3fn;
  CHECK(generate(d, o, 40, 9, "b200").kv_cache_bytes == h.kv_cache_bytes / 2);
}

TEST_CASE("generation: --dtype int8 runs the weights' GEMMs as INT8 W8A8 and the rest in FP16") {
  const ModelConfig c = small_llama(8, 2);
  const Decoder d = config_decoder(c);
  const Analysis pre = prepare(d.prefill, serving(DType::i8, 2, 64));
  int int8 = 0, flash = 0;
  for (const Kernel& k : pre.kernels.kernels) {
    flash += k.op == "flash_attention";
    if (k.cls == KernelClass::gemm && k.op != "flash_attention") {
      // Both operands one byte, the output FP16.
      CHECK(k.dtype == DType::i8);
      const double out = double(k.gemm.batch) * double(k.gemm.m) * double(k.gemm.n);
      const double in = double(k.gemm.m) * double(k.gemm.k) + double(k.gemm.k) * double(k.gemm.n);
      CHECK(k.bytes == doctest::Approx(in + 2 * out).epsilon(0.01));
      ++int8;
    } else if (is_float(k.dtype)) {
      CHECK(k.dtype == DType::f16);  // attention (FlashAttention in FP16), norms, activations
    }
  }
  CHECK(int8 == 2 * 7 + 1);
  CHECK(flash == 2);
  // The cache and the embedding table in FP16, the GEMMs' weights in a byte; the A100's INT8
  // matrix units run twice the FP16 rate, and a decode step reads half the weights.
  const GenerationReport g = generate(d, serving(DType::i8, 2), 40, 9, "a100-80gb");
  const GenerationReport h = generate(d, serving(DType::f16, 2), 40, 9, "a100-80gb");
  CHECK(g.kv_cache_bytes == h.kv_cache_bytes);
  CHECK(g.embedding_bytes == h.embedding_bytes);
  CHECK((g.weight_bytes - g.embedding_bytes) / (h.weight_bytes - h.embedding_bytes) == doctest::Approx(0.5).epsilon(0.01));
  CHECK(g.tpot_ms < h.tpot_ms);
  CHECK(g.ttft_ms < h.ttft_ms);
}

TEST_CASE("generation: Gemma 3 text decoders (sandwich norms, scaled embedding, 5 local layers to 1 global)") {
  // Gemma-3-1B's config fields.
  const ModelConfig c = parse_hf_config(R"({"model_type": "gemma3_text", "head_dim": 256,
      "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
      "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
      "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "vocab_size": 262144})",
                                        "gemma-3-1b");
  CHECK(c.sandwich_norm);
  CHECK(c.scale_embedding);
  CHECK(c.qk_norm);
  CHECK(c.activation == "gelu_pytorch_tanh");
  CHECK(c.sliding_window == 512);
  REQUIRE(c.sliding_layers.size() == 26);
  CHECK(std::count(c.sliding_layers.begin(), c.sliding_layers.end(), true) == 22);  // layers 5, 11, 17, 23 global
  CHECK_FALSE(c.sliding_layers[5]);
  const LoadedModel m = build_model(c);
  int norms = 0;
  for (const Node& n : m.model.graph.nodes)  // one Pow per RMSNorm (the tanh GELU has its own)
    norms += n.op_type == "Pow" && n.name.find("norm/") != std::string::npos;
  CHECK(norms == 26 * 6 + 1);  // input, q, k, post-attention, pre- and post-feedforward; the final norm
  // The multimodal config nests the language model under text_config; Gemma3TextConfig's
  // defaults fill what it leaves out (the vocabulary, the window pattern).
  const ModelConfig big = parse_hf_config(R"({"model_type": "gemma3", "torch_dtype": "bfloat16",
      "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "num_attention_heads": 32,
      "num_hidden_layers": 62, "num_key_value_heads": 16, "sliding_window": 1024},
      "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "num_attention_heads": 16,
                        "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": false}})",
                                          "gemma-3-27b");
  CHECK(big.vocab == 262208);
  CHECK(big.head_dim == 128);
  CHECK(big.sliding_window == 1024);
  CHECK(std::count(big.sliding_layers.begin(), big.sliding_layers.end(), true) == 62 - 10);
  CHECK(big.torch_dtype == "bfloat16");
  CHECK_THROWS_AS(parse_hf_config(R"({"model_type": "gemma3"})", "g"), InputError);
  // A decode step: the embedding lookup reads one row per token, the cache keeps 512 tokens on
  // the local layers; the step reads the weights but the table, and the head (the table's size).
  const Decoder d = config_decoder(c);
  const GenerationReport g = generate(d, serving(DType::bf16, 1), 4096, 16, "h100");
  CHECK(g.kv_cache_bytes == 2.0 * 1 * 256 * (4 * 4112 + 22 * 512) * 2);
  CHECK(g.tpot_ms >= g.weight_read_ms);
  CHECK(g.tpot_ms < 6 * g.weight_read_ms);
}

TEST_CASE("generation: Gemma and Gemma 2 (GeGLU, 256-wide heads, Gemma 2's soft-capping and local layers, tied head)") {
  const ModelConfig g1 = read_hf_config(test::source_dir() + "/tests/data/gemma_7b.json");
  CHECK(g1.activation == "gelu_pytorch_tanh");  // HF's Gemma runs the tanh GELU whatever hidden_act says
  CHECK(g1.head_dim == 256);
  CHECK(g1.scale_embedding);
  CHECK(g1.tie_embeddings);
  CHECK_FALSE(g1.sandwich_norm);
  CHECK(g1.attn_softcap == 0);
  CHECK(g1.sliding_layers.empty());
  const ModelConfig g2 = read_hf_config(test::source_dir() + "/tests/data/gemma2_9b.json");
  CHECK(g2.sandwich_norm);
  CHECK_FALSE(g2.qk_norm);
  CHECK(g2.attn_softcap == 50.0);
  CHECK(g2.final_softcap == 30.0);
  CHECK(g2.sliding_window == 4096);
  REQUIRE(g2.sliding_layers.size() == 42);
  CHECK(g2.sliding_layers[0]);
  CHECK_FALSE(g2.sliding_layers[1]);
  CHECK(std::count(g2.sliding_layers.begin(), g2.sliding_layers.end(), true) == 21);
  // Soft-capping: one Tanh on every layer's scores and one on the logits, which it names.
  const LoadedModel m = build_model(g2);
  int tanh = 0;
  for (const Node& n : m.model.graph.nodes) tanh += n.op_type == "Tanh" && n.name.find("softcap") != std::string::npos;
  CHECK(tanh == 42 + 1);  // (the tanh GELU has its own)
  CHECK(m.model.graph.nodes.back().op_type == "Mul");
  CHECK(m.model.graph.nodes.back().outputs[0] == "logits");
  // null soft-capping: none.
  const std::string base = R"({"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
      "num_hidden_layers": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 100)";
  const std::string tiny = base + R"(, "final_logit_softcapping": null, "attn_logit_softcapping": null)";
  // Soft-capped scores still run as one FlashAttention kernel per layer (FlashAttention-2's
  // softcap); the local layers' band is known from the mask.
  const Decoder small = config_decoder(parse_hf_config(base + R"(, "sliding_window": 16})", "g"));
  const Analysis pre = prepare(small.prefill, serving(DType::bf16, 1, 64));
  CHECK(count_op(pre.kernels, "flash_attention") == 2);
  CHECK(count_op(pre.kernels, "softmax") == 0);
  const ModelConfig off = parse_hf_config(tiny + "}", "g");
  CHECK(off.attn_softcap == 0);
  CHECK(off.final_softcap == 0);
  CHECK_FALSE(parse_hf_config(tiny + R"(, "tie_word_embeddings": false})", "g").tie_embeddings);
  // Memory holds the tied head once (Gemma 7B: 8.54B parameters, its 0.79B-parameter head
  // again would make 9.32B); a decode step still reads it.
  const GenerationReport r = generate(config_decoder(g1), serving(DType::bf16, 1), 512, 16, "h100");
  CHECK(r.weight_bytes == doctest::Approx(8.538e9 * 2).epsilon(0.002));
  CHECK(r.weight_read_ms == doctest::Approx((r.weight_bytes + 256000.0 * 3072 * 2 - r.embedding_bytes) / 3350e9 * 1e3).epsilon(1e-6));
}

TEST_CASE("generation: Phi-2 (LayerNorms, partial rotary, attention and a dense MLP in parallel, biases)") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/phi_2.json");
  CHECK(c.parallel_block == 1);
  CHECK(c.layer_norm);
  CHECK(c.head_bias);
  CHECK(c.rotary_fraction == 0.4);
  CHECK(c.activation == "gelu_new");
  CHECK(c.head_dim == 80);
  const LoadedModel m = build_model(c);
  int layer_norms = 0, pows = 0, rotary_slices = 0;
  for (const Node& n : m.model.graph.nodes) {
    layer_norms += n.op_type == "LayerNormalization";
    pows += n.op_type == "Pow" && n.name.find("norm") != std::string::npos;
    rotary_slices += n.op_type == "Slice" && n.name.find("rotary_q/x_rot") != std::string::npos;
  }
  CHECK(layer_norms == 32 + 1);  // one per layer (attention and MLP share it) and the final one
  CHECK(pows == 0);
  CHECK(rotary_slices == 32);
  const TensorInfo* rot_end = nullptr;  // the rotated slice's end
  for (const Node& n : m.model.graph.nodes)
    if (n.name == "model.layers.0.self_attn/rotary_q/x_rot") rot_end = m.model.graph.find(n.inputs[2]);
  REQUIRE(rot_end);
  REQUIRE(rot_end->int_value);
  CHECK(*rot_end->int_value == std::vector<int64_t>{32});  // 0.4 x 80
  // 2.78B parameters (fp16: 5.56 GB held); a one-token step of the A100 SXM4 80GB against the
  // sum of Vidur's one-token layers (4.4 ms over 32 layers) is bench material, not a test.
  const GenerationReport r = generate(config_decoder(c), serving(DType::f16, 1), 512, 16, "a100-sxm-80gb");
  CHECK(r.weight_bytes == doctest::Approx(2.7797e9 * 2).epsilon(0.002));
  CHECK(r.tpot_ms > r.weight_read_ms);
}

TEST_CASE("generation: Phi-3 (one qkv_proj and one gate_up_proj GEMM, read in place when fused)") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/phi3_mini.json");
  CHECK(c.fused_qkv_blocks);
  CHECK(c.fused_gate_up);
  const LoadedModel m = build_model(c);
  int gemms = 0;
  for (const Node& n : m.model.graph.nodes) gemms += n.op_type == "MatMul" && n.name.find(".layers.0.") != std::string::npos;
  CHECK(gemms == 4 + 2);  // qkv, o, gate_up, down; the attention's two
  // 3.82B parameters (bf16: 7.64 GB held).
  const Decoder d = config_decoder(c);
  const GenerationReport r = generate(d, serving(DType::bf16, 1), 512, 16, "h100");
  CHECK(r.weight_bytes == doctest::Approx(3.8210e9 * 2).epsilon(0.002));
  // Fused: the gate and up halves are indices into the GEMM's output, the q, k and v blocks
  // views the rotary and the attention read; no copy kernels.
  const Analysis pre = prepare(d.prefill, serving(DType::bf16, 1, 256));
  CHECK(count_op(pre.kernels, "slice") == 0);
  CHECK(count_op(pre.kernels, "flash_attention") == 32);
}

TEST_CASE("generation: GPT-NeoX / Pythia (one fused QKV GEMM, two LayerNorms in parallel, a quarter of each head rotated)") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/pythia_6.9b.json");
  CHECK(c.parallel_block == 2);
  CHECK(c.fused_qkv);
  CHECK(c.rotary_fraction == 0.25);
  CHECK_FALSE(c.head_bias);
  const LoadedModel m = build_model(c);
  int layer_norms = 0, qkv = 0, q_proj = 0;
  for (const Node& n : m.model.graph.nodes) {
    layer_norms += n.op_type == "LayerNormalization";
    qkv += n.op_type == "MatMul" && n.name.find("query_key_value") != std::string::npos;
    q_proj += n.name.find("q_proj") != std::string::npos;
  }
  CHECK(layer_norms == 2 * 32 + 1);
  CHECK(qkv == 32);
  CHECK(q_proj == 0);
  // Served (--fusion full): the views of the fused QKV, the partial rotary's pass-through
  // slice and its Concat run inside the rotary kernel, no copies; one FlashAttention per layer.
  const Decoder d = config_decoder(c);
  Options o = serving(DType::f16, 1, 256);
  const Analysis pre = prepare(d.prefill, o);
  CHECK(count_op(pre.kernels, "flash_attention") == 32);
  CHECK(count_op(pre.kernels, "slice") == 0);
  CHECK(count_op(pre.kernels, "concat") == 0);
  CHECK(count_op(pre.kernels, "transpose") == 0);
  CHECK(count_op(pre.kernels, "rotary") == 2 * 32);
  // vLLM's rotary_embedding: a token's query and key heads in one kernel, over their rotated
  // quarter (32 heads x 32 of 128 dims each).
  o.serving_kernels = true;
  const Analysis served = prepare(d.prefill, o);
  CHECK(count_op(served.kernels, "rotary") == 32);
  for (const Kernel& k : served.kernels.kernels)
    if (k.op == "rotary") CHECK(k.cols == 2 * 32 * 32);
  // 6.86B parameters (fp16: 13.71 GB held).
  const GenerationReport r = generate(config_decoder(c), serving(DType::f16, 1), 512, 16, "a100-sxm-80gb");
  CHECK(r.weight_bytes == doctest::Approx(6.8573e9 * 2).epsilon(0.002));
  // use_parallel_residual false: attention, then the MLP, each with its residual add.
  std::ifstream f(test::source_dir() + "/tests/data/pythia_6.9b.json");
  nlohmann::json j = nlohmann::json::parse(f);
  j["use_parallel_residual"] = false;
  const ModelConfig seq = parse_hf_config(j.dump(), "pythia");
  CHECK(seq.parallel_block == 0);
  int adds = 0;
  for (const Node& n : build_model(seq).model.graph.nodes) adds += n.name.find("residual_Add") != std::string::npos;
  CHECK(adds == 2 * 32);
}

TEST_CASE("generation: GPT-J (one LayerNorm for attention and MLP side by side, unbiased projections, a biased head)") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/gptj_6b.json");
  CHECK(c.parallel_block == 1);
  CHECK(c.ffn == 4 * 4096);  // n_inner null
  CHECK(c.rotary_fraction == doctest::Approx(64.0 / 256));
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.o_bias);
  CHECK(c.head_bias);
  CHECK_FALSE(c.tie_embeddings);
  const LoadedModel m = build_model(c);
  int layer_norms = 0, biased = 0;
  for (const Node& n : m.model.graph.nodes) {
    layer_norms += n.op_type == "LayerNormalization";
    // A linear with bias is MatMul + Add of its `.bias` weight.
    if (n.op_type == "Add")
      for (const std::string& in : n.inputs) biased += in.find(".bias") != std::string::npos && in.find("layers.0.") != std::string::npos;
  }
  CHECK(layer_norms == 28 + 1);
  CHECK(biased == 2);  // fc_in, fc_out; no Q, K, V or output bias
  // 6.05B parameters: the embedding, 28 layers of 4 h^2 + 8 h^2 + biases and norms, an untied head with bias.
  const double h = 4096, layer = 12 * h * h + 4 * h + h + 2 * h;
  const double params = 50400 * h + 28 * layer + 2 * h + h * 50400 + 50400;
  const GenerationReport r = generate(config_decoder(c), serving(DType::f16, 1), 512, 16, "a100-sxm-80gb");
  CHECK(r.weight_bytes == doctest::Approx(params * 2).epsilon(0.001));
  CHECK(params == doctest::Approx(6.05e9).epsilon(0.002));
}

TEST_CASE("generation: Falcon (fused QKV with one or grouped KV heads, parallel attention and MLP, no biases)") {
  const ModelConfig c7 = read_hf_config(test::source_dir() + "/tests/data/falcon_7b.json");
  CHECK(c7.kv_heads == 1);  // multi_query
  CHECK(c7.parallel_block == 1);
  CHECK(c7.fused_qkv_blocks);
  CHECK_FALSE(c7.mlp_bias);
  CHECK(c7.tie_embeddings);
  CHECK(c7.head_dim == 64);
  const ModelConfig c40 = read_hf_config(test::source_dir() + "/tests/data/falcon_40b.json");
  CHECK(c40.kv_heads == 8);  // new_decoder_architecture: num_kv_heads
  CHECK(c40.parallel_block == 2);
  int layer_norms = 0, qkv = 0, adds_of_bias = 0;
  for (const Node& n : build_model(c40).model.graph.nodes) {
    layer_norms += n.op_type == "LayerNormalization";
    qkv += n.op_type == "MatMul" && n.name.find("qkv_proj") != std::string::npos;
    if (n.op_type == "Add")
      for (const std::string& in : n.inputs) adds_of_bias += in.find(".bias") != std::string::npos && in.find("layers.") != std::string::npos;
  }
  CHECK(layer_norms == 2 * 60 + 1);  // ln_attn, ln_mlp per layer, ln_f
  CHECK(qkv == 60);
  CHECK(adds_of_bias == 0);
  // Parameters from the configs: 6.92B (7B: one KV head), 41.3B (40B: 8 KV heads), the LM head tied.
  const auto params = [](double h, double heads, double kv, double layers, double norms) {
    const double hd = h / heads;
    const double layer = h * (heads + 2 * kv) * hd + h * h + 8 * h * h + norms * 2 * h;
    return 65024 * h + layers * layer + 2 * h;
  };
  CHECK(generate(config_decoder(c7), serving(DType::bf16, 1), 512, 16, "h100").weight_bytes ==
        doctest::Approx(params(4544, 71, 1, 32, 1) * 2).epsilon(0.001));
  CHECK(generate(config_decoder(c40), serving(DType::bf16, 1), 512, 16, "h100").weight_bytes ==
        doctest::Approx(params(8192, 128, 8, 60, 2) * 2).epsilon(0.001));
  // Falcon-7B's KV cache: one 64-wide KV head per layer.
  const GenerationReport r = generate(config_decoder(c7), serving(DType::bf16, 1), 512, 16, "h100");
  CHECK(r.kv_cache_bytes == doctest::Approx(32.0 * 2 * 64 * (512 + 16) * 2).epsilon(0.001));
}

TEST_CASE("generation: StarCoder2 (GQA with LayerNorms, biases and a dense MLP in sequence, every layer sliding)") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/starcoder2_7b.json");
  CHECK(c.parallel_block == 0);
  CHECK(c.layer_norm);
  CHECK(c.dense_mlp);
  CHECK(c.qkv_bias);
  CHECK(c.o_bias);
  CHECK(c.mlp_bias);
  CHECK(c.kv_heads == 4);
  CHECK(c.layer_norm_eps == 1e-5);
  CHECK(c.sliding_window == 4096);
  CHECK(std::count(c.sliding_layers.begin(), c.sliding_layers.end(), true) == 32);
  int layer_norms = 0, residual_adds = 0;
  for (const Node& n : build_model(c).model.graph.nodes) {
    layer_norms += n.op_type == "LayerNormalization";
    residual_adds += n.name.find("residual_Add") != std::string::npos;
  }
  CHECK(layer_norms == 2 * 32 + 1);
  CHECK(residual_adds == 2 * 32);
  // 7.17B parameters, the LM head tied; a long prompt's cache holds the window, not the prompt.
  const double h = 4608, kv = 4 * 128, f = 18432;
  const double layer = 2 * (h * h + h) + 2 * (h * kv + kv) + 2 * h * f + f + h + 2 * 2 * h;
  const double params = 49152 * h + 32 * layer + 2 * h;
  CHECK(params == doctest::Approx(7.1741e9).epsilon(0.001));
  const GenerationReport r = generate(config_decoder(c), serving(DType::bf16, 1), 8192, 16, "h100");
  CHECK(r.weight_bytes == doctest::Approx(params * 2).epsilon(0.001));
  CHECK(r.kv_cache_bytes == doctest::Approx(32.0 * 2 * 512 * 4096 * 2).epsilon(0.01));
}

TEST_CASE("generation: DeepSeek-V2 is DeepSeek-V3's latent attention and experts (V2-Lite: one query projection)") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/deepseek_v2_lite.json");
  CHECK(c.q_lora_rank == 0);  // null: q_proj
  CHECK(c.kv_lora_rank == 512);
  CHECK(c.experts == 64);
  CHECK(c.shared_expert_ffn == 2 * 1408);
  CHECK_FALSE(c.normalize_routing);
  CHECK(c.dense_layers == std::vector<int64_t>{0});
  // 15,706,484,224 parameters (the rotary table's inv_freq is a buffer, not one).
  CHECK(parameter_count(build_model(c)) == 15706484224);
  // Its decode step caches the latent: 512 + 64 values per token and layer.
  const GenerationReport r = generate(config_decoder(c), serving(DType::bf16, 1), 1024, 16, "h100");
  CHECK(r.kv_cache_bytes == doctest::Approx(27.0 * (512 + 64) * (1024 + 16) * 2).epsilon(0.001));
}

TEST_CASE("generation: GLM-4.5 is DeepSeek-V3's mixture under grouped-query attention, Kimi K2 is DeepSeek-V3") {
  // GLM-4.5-Air: 46 layers, the first dense; 96 query heads of 128 and 8 KV heads, biased
  // q/k/v; 128 experts of 1,408 (top 8) and one shared; its draft layer counted, not built.
  const ModelConfig g = read_hf_config(test::source_dir() + "/tests/data/glm4_5_air.json");
  CHECK(g.rotary_fraction == 0.5);
  CHECK_FALSE(g.qk_norm);
  CHECK(g.qkv_bias);
  CHECK(g.kv_lora_rank == 0);
  CHECK(g.dense_layers == std::vector<int64_t>{0});
  CHECK(g.mtp_layers == 1);
  const int64_t h = 4096, v = 151552, q = 96 * 128, kv = 8 * 128, ef = 1408;
  const int64_t attention = h * q + q + 2 * (h * kv + kv) + q * h;
  const int64_t moe = 128 * 3 * h * ef + 3 * h * ef + 128 * h;
  const LoadedModel gm = build_model(g);
  CHECK(parameter_count(gm) == 2 * v * h + 46 * (attention + 2 * h) + 3 * h * 10944 + 45 * moe + h);  // 106.85 B
  CHECK(node_count(gm, [](const Node& n) { return n.op_type == "MoE"; }) == 45);
  // Its KV cache: 46 layers x 2 x 8 heads x 128.
  const GenerationReport r = generate(config_decoder(g), serving(DType::bf16, 1), 1024, 16, "h100");
  CHECK(r.kv_cache_bytes == doctest::Approx(46.0 * 2 * kv * (1024 + 16) * 2).epsilon(0.001));
  CHECK(r.tpot_ms > r.weight_read_ms);
  // Kimi K2: DeepSeek-V3's architecture at 384 experts and 64 heads, one dense layer.
  const ModelConfig k = read_hf_config(test::source_dir() + "/tests/data/kimi_k2.json");
  CHECK(k.kv_lora_rank == 512);
  CHECK(k.experts == 384);
  CHECK(k.dense_layers == std::vector<int64_t>{0});
  const LoadedModel km = build_model(k);
  CHECK(node_count(km, [](const Node& n) { return n.op_type == "MoE"; }) == 60);
  const int64_t kh = 7168;
  const int64_t mla = kh * 1536 + 1536 + 1536 * 64 * 192 + kh * (512 + 64) + 512 + 512 * 64 * (128 + 128) + 64 * 128 * kh;
  const int64_t kmoe = 384 * 3 * kh * 2048 + 3 * kh * 2048 + 384 * kh;
  CHECK(parameter_count(km) == 2 * 163840 * kh + 61 * (mla + 2 * kh) + 3 * kh * 18432 + 60 * kmoe + kh);  // 1.026 T
}

TEST_CASE("generation: Llama 4 interleaves chunked rotary layers with global NoPE ones and routes to experts beside a shared one") {
  // Llama 4 Scout (a llama4 config: its text_config): 48 layers, each top-1 of 16 experts of
  // 8,192 beside a shared one; every fourth layer global without positions.
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/llama4_scout.json");
  CHECK(c.language_model_of == "llama4");
  CHECK(c.experts == 16);
  CHECK(c.expert_ffn == 8192);
  CHECK(c.shared_expert_ffn == 8192);
  CHECK(c.ffn == 16384);
  CHECK(c.sliding_window == 8192);
  CHECK(std::count(c.sliding_layers.begin(), c.sliding_layers.end(), false) == 12);
  CHECK_FALSE(c.sliding_layers[3]);
  CHECK(c.sliding_layers[4]);
  ModelConfig text = c;
  text.vision = ModelConfig::VisionTower{};
  const LoadedModel m = build_model(text);
  const int64_t h = 5120, q = 40 * 128, kv = 8 * 128;
  const int64_t layer = h * q + 2 * h * kv + q * h + 2 * h + 16 * 3 * h * 8192 + 3 * h * 8192 + 16 * h;
  CHECK(parameter_count(m) == 2 * 202048 * h + 48 * layer + h);  // 107.77 B
  CHECK(node_count(m, [](const Node& n) { return n.op_type == "MoE"; }) == 48);
  // The query and key heads of the 36 rotary layers normalised, without a weight; the 12
  // global layers' queries scaled by the temperature.
  CHECK(node_count(m, [](const Node& n) { return n.name.find("q_norm/Div") != std::string::npos; }) == 36);
  CHECK(node_count(m, [](const Node& n) { return n.name.find("k_norm/Div") != std::string::npos; }) == 36);
  CHECK(node_count(m, [](const Node& n) { return n.name.find("/attn_temperature") != std::string::npos && n.op_type == "Mul" &&
                                            n.name.find("layers.") != std::string::npos; }) == 12);
  const GenerationReport r = generate(config_decoder(c), serving(DType::bf16, 1), 1024, 16, "h100");
  CHECK(r.tpot_ms > r.weight_read_ms);
  // Maverick's layout: MoE every second layer (128 experts), dense MLPs of 16,384 between; no
  // q/k norms; an explicit no_rope_layers list.
  std::string rope = "[";
  for (int l = 0; l < 8; ++l) rope += std::string(l ? ", " : "") + ((l + 1) % 4 ? "1" : "0");
  rope += "]";
  const ModelConfig mv = parse_hf_config(R"({"model_type": "llama4_text", "hidden_size": 256, "intermediate_size": 128,
      "intermediate_size_mlp": 512, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 64, "vocab_size": 1000, "num_local_experts": 8, "interleave_moe_layer_step": 2, "use_qk_norm": false,
      "no_rope_layers": )" + rope + "}",
                                         "maverick");
  CHECK(mv.sparse_step == 2);
  const LoadedModel mm = build_model(mv);
  CHECK(node_count(mm, [](const Node& n) { return n.op_type == "MoE"; }) == 4);
  CHECK(node_count(mm, [](const Node& n) { return n.name.find("q_norm") != std::string::npos; }) == 0);
  CHECK(parameter_count(mm) == 2 * 1000 * 256 + 8 * (256 * 256 + 2 * 256 * 128 + 256 * 256 + 2 * 256) +
                              4 * (8 * 3 * 256 * 128 + 3 * 256 * 128 + 8 * 256) + 4 * 3 * 256 * 512 + 256);
  // moe_layers named explicitly; a chunk size of null: rotary layers attend to every key.
  const ModelConfig ex = parse_hf_config(R"({"model_type": "llama4_text", "hidden_size": 256, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 1000, "num_local_experts": 4,
      "moe_layers": [1, 2], "attention_chunk_size": null, "max_position_embeddings": 4096})",
                                         "explicit");
  CHECK(ex.dense_layers == std::vector<int64_t>{0, 3});
  CHECK(ex.sliding_window == 4096);
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "llama4_text", "hidden_size": 256, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 1000, "num_local_experts": 4, "moe_layers": [7]})",
                                       "bad"),
                       doctest::Contains("moe_layers"), InputError);
}

TEST_CASE("generation: GLM-4 runs Gemma 2's sandwich norms with one gate_up GEMM, SmolLM3 leaves every fourth layer without positions") {
  // GLM-4-9B-0414: 40 layers of 32 query heads and 2 KV heads of 128 (biased q/k/v), four
  // RMSNorms each, gate_up_proj of 2 x 13,696.
  const ModelConfig g = read_hf_config(test::source_dir() + "/tests/data/glm4_9b_0414.json");
  CHECK(g.sandwich_norm);
  CHECK(g.fused_gate_up);
  CHECK(g.qkv_bias);
  CHECK(g.rotary_fraction == 0.5);
  const LoadedModel gm = build_model(g);
  const int64_t h = 4096, kv = 2 * 128, f = 13696;
  const int64_t layer = h * h + h + 2 * (h * kv + kv) + h * h + h * 2 * f + f * h + 4 * h;
  CHECK(parameter_count(gm) == 2 * 151552 * h + 40 * layer + h);  // 9.40 B
  CHECK(node_count(gm, [](const Node& n) { return n.op_type == "Pow"; }) == 4 * 40 + 1);
  CHECK(node_count(gm, [](const Node& n) { return n.op_type == "MatMul" && n.name.find("gate_up_proj") != std::string::npos; }) == 40);
  // SmolLM3-3B: 36 layers, 9 of them (every fourth) without rotary; the LM head tied; no window.
  const ModelConfig sm = read_hf_config(test::source_dir() + "/tests/data/smollm3_3b.json");
  CHECK(sm.rotary_sliding_only);
  CHECK(std::count(sm.sliding_layers.begin(), sm.sliding_layers.end(), false) == 9);
  const LoadedModel smm = build_model(sm);
  const int64_t sh = 2048, skv = 4 * 128;
  CHECK(parameter_count(smm, false) == 128256 * sh + 36 * (2 * sh * sh + 2 * sh * skv + 3 * sh * 11008 + 2 * sh) + sh);
  CHECK(node_count(smm, [](const Node& n) { return n.name.find("rotary_q") != std::string::npos && n.op_type == "Mul"; }) ==
        2 * 27);
  const GenerationReport r = generate(config_decoder(sm), serving(DType::bf16, 1), 512, 16, "h100");
  CHECK(r.kv_cache_bytes == doctest::Approx(36.0 * 2 * skv * (512 + 16) * 2).epsilon(0.001));
  CHECK(r.window == 0);  // the rotary layers' window of every position never binds
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "smollm3", "hidden_size": 256, "intermediate_size": 512,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 1000, "use_sliding_window": true,
      "sliding_window": 64})",
                                       "windowed"),
                       doctest::Contains("sliding"), InputError);
}

TEST_CASE("generation: GLM-4-9B and OLMo 3 and Seed-OSS and Arcee AFM and ERNIE 4.5 and StableLM 2 build as transformers defines them") {
  // GLM-4-9B (glm): GLM-4-0414's layers without the sandwich norms: 9.40 B parameters.
  const ModelConfig glm = parse_hf_config(R"({"model_type": "glm", "hidden_size": 4096, "intermediate_size": 13696,
      "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
      "vocab_size": 151552, "attention_bias": true, "partial_rotary_factor": 0.5, "tie_word_embeddings": false})",
                                          "glm-4-9b-chat-hf");
  CHECK(glm.fused_gate_up);
  CHECK_FALSE(glm.sandwich_norm);
  CHECK(glm.rotary_fraction == 0.5);
  {
    const int64_t h = 4096, kv = 2 * 128, f = 13696;
    const int64_t layer = h * h + h + 2 * (h * kv + kv) + h * h + h * 2 * f + f * h + 2 * h;
    CHECK(parameter_count(build_model(glm)) == 2 * 151552 * h + 40 * layer + h);  // 9,399,951,360
  }
  // OLMo-3-7B (olmo3): OLMo 2's norms; three sliding-window layers (4,096) to one global.
  const ModelConfig olmo3 = parse_hf_config(R"({"model_type": "olmo3", "hidden_size": 4096, "intermediate_size": 11008,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100278,
      "sliding_window": 4096, "max_position_embeddings": 65536})",
                                            "olmo-3-7b");
  CHECK(olmo3.post_norm);
  CHECK(olmo3.qk_norm_full);
  CHECK(olmo3.sliding_window == 4096);
  CHECK(std::count(olmo3.sliding_layers.begin(), olmo3.sliding_layers.end(), true) == 24);
  CHECK_FALSE(olmo3.sliding_layers[3]);
  // Seed-OSS-36B: biased q, k, v (not o): 36.15 B.
  const ModelConfig seed = parse_hf_config(R"({"model_type": "seed_oss", "hidden_size": 5120, "intermediate_size": 27648,
      "num_hidden_layers": 64, "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128,
      "vocab_size": 155136, "attention_bias": true, "attention_out_bias": false, "mlp_bias": false,
      "tie_word_embeddings": false})",
                                           "seed-oss-36b");
  {
    const int64_t h = 5120, q = 80 * 128, kv = 8 * 128, f = 27648;
    const int64_t layer = h * q + q + 2 * (h * kv + kv) + q * h + 3 * h * f + 2 * h;
    CHECK(parameter_count(build_model(seed)) == 2 * 155136 * h + 64 * layer + h);  // 36,151,...
  }
  // Arcee AFM-4.5B: a ReLU-squared MLP without a gate: 4.62 B.
  const ModelConfig afm = parse_hf_config(R"({"model_type": "arcee", "hidden_size": 2560, "intermediate_size": 18432,
      "num_hidden_layers": 36, "num_attention_heads": 20, "num_key_value_heads": 4, "head_dim": 128,
      "vocab_size": 128004, "tie_word_embeddings": false})",
                                          "afm-4.5b");
  CHECK(afm.dense_mlp);
  CHECK(afm.activation == "relu2");
  {
    const int64_t h = 2560, kv = 4 * 128, f = 18432;
    const int64_t layer = 2 * h * h + 2 * h * kv + 2 * h * f + 2 * h;
    CHECK(parameter_count(build_model(afm)) == 2 * 128004 * h + 36 * layer + h);
    CHECK(node_count(build_model(afm), [](const Node& n) { return n.name.find("gate_proj") != std::string::npos; }) == 0);
  }
  // ERNIE-4.5-0.3B: a tied head: 0.36 B; use_bias biases every projection.
  const ModelConfig ernie = parse_hf_config(R"({"model_type": "ernie4_5", "hidden_size": 1024, "intermediate_size": 3072,
      "num_hidden_layers": 18, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128,
      "vocab_size": 103424, "use_bias": false})",
                                            "ernie-4.5-0.3b");
  CHECK(ernie.tie_embeddings);
  {
    const int64_t h = 1024, q = 2048, kv = 256, f = 3072;
    const int64_t layer = 2 * h * q + 2 * h * kv + 3 * h * f + 2 * h;
    CHECK(parameter_count(build_model(ernie), false) == 103424 * h + 18 * layer + h);  // 360,748,032
    nlohmann::json biased = nlohmann::json::parse(R"({"model_type": "ernie4_5", "hidden_size": 1024,
        "intermediate_size": 3072, "num_hidden_layers": 18, "num_attention_heads": 16, "num_key_value_heads": 2,
        "head_dim": 128, "vocab_size": 103424, "use_bias": true})");
    const int64_t bias = q + 2 * kv + h + 2 * f + h;  // q, k, v, o; gate, up, down
    CHECK(parameter_count(build_model(parse_hf_config(biased.dump(), "biased")), false) ==
          103424 * h + 18 * (layer + bias) + h);
  }
  // StableLM-2-1.6B: LayerNorms with bias, biased q, k, v, rotary on a quarter of each head:
  // 1,644,515,328 parameters, as published.
  const ModelConfig stablelm = parse_hf_config(R"({"model_type": "stablelm", "hidden_size": 2048,
      "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 32,
      "vocab_size": 100352, "partial_rotary_factor": 0.25, "use_qkv_bias": true, "use_parallel_residual": false,
      "qk_layernorm": false, "layer_norm_eps": 1e-05, "tie_word_embeddings": false})",
                                               "stablelm-2-1_6b");
  CHECK(stablelm.layer_norm);
  CHECK(stablelm.rotary_fraction == 0.25);
  CHECK(parameter_count(build_model(stablelm)) == 1644515328);
  // Each one generates (a KV-cache step exists for every family).
  for (const ModelConfig* c : {&glm, &olmo3, &seed, &afm, &ernie, &stablelm}) {
    CAPTURE(c->model_type);
    const GenerationReport r = generate(config_decoder(*c), serving(DType::bf16, 1), 256, 8, "h100");
    CHECK(r.tpot_ms > 0);
    CHECK(r.ttft_ms > r.tpot_ms);
  }
}

TEST_CASE("generation: Qwen3-VL's language model is Qwen3 (and Qwen3-MoE)") {
  const ModelConfig dense = parse_hf_config(R"({"model_type": "qwen3_vl", "vision_config": {"depth": 27},
      "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 4096, "intermediate_size": 12288,
      "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
      "vocab_size": 151936, "rope_scaling": {"mrope_section": [24, 20, 20], "mrope_interleaved": true},
      "tie_word_embeddings": false}})",
                                            "qwen3-vl-8b");
  CHECK(dense.language_model_of == "qwen3_vl");
  CHECK(dense.qk_norm);
  CHECK(dense.experts == 0);
  // Qwen3-8B's 8,190,735,360 parameters: the language model of Qwen3-VL-8B.
  const int64_t h = 4096, layer = 2 * h * 4096 + 2 * h * 1024 + 3 * h * 12288 + 2 * h + 2 * 128;
  ModelConfig text = dense;
  text.vision = ModelConfig::VisionTower{};
  CHECK(parameter_count(build_model(text)) == 2 * 151936 * h + 36 * layer + h);
  CHECK(2 * 151936 * h + 36 * layer + h == 8190735360);
  const ModelConfig moe = parse_hf_config(R"({"model_type": "qwen3_vl_moe", "text_config": {
      "model_type": "qwen3_vl_moe_text", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 64}})",
                                          "qwen3-vl-moe");
  CHECK(moe.language_model_of == "qwen3_vl_moe");
  CHECK(moe.experts == 8);
  CHECK(node_count(build_model(moe), [](const Node& n) { return n.op_type == "MoE"; }) == 2);
}

TEST_CASE("generation: EXAONE 4.0 normalises after, three local layers to one global one without positions") {
  const std::string base = R"({"model_type": "exaone4", "hidden_size": 256, "intermediate_size": 512,
      "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000)";
  const ModelConfig c = parse_hf_config(base + R"(, "sliding_window": 16, "sliding_window_pattern": "LLLG"})", "exaone");
  CHECK(c.post_norm);
  CHECK(c.qk_norm);
  CHECK(c.rotary_sliding_only);
  CHECK(c.sliding_window == 16);
  CHECK(c.sliding_layers == std::vector<bool>{true, true, true, false, true, true, true, false});
  const LoadedModel m = build_model(c);
  // Per layer the post-attention and post-feedforward norms and the q / k head norms; none
  // before the attention.
  CHECK(node_count(m, [](const Node& n) { return n.op_type == "Pow"; }) == 4 * 8 + 1);
  CHECK(node_count(m, [](const Node& n) { return n.name.find("input_layernorm") != std::string::npos; }) == 0);
  CHECK(node_count(m, [](const Node& n) { return n.name.find("rotary_q") != std::string::npos && n.op_type == "Mul"; }) ==
        2 * 6);
  // The pattern as a count, the same layers; without a window every layer global and rotary.
  CHECK(parse_hf_config(base + R"(, "sliding_window": 16, "sliding_window_pattern": 4})", "exaone").sliding_layers ==
        c.sliding_layers);
  const ModelConfig global = parse_hf_config(base + R"(, "sliding_window": null})", "exaone-1.2b");
  CHECK_FALSE(global.rotary_sliding_only);
  CHECK(node_count(build_model(global), [](const Node& n) {
          return n.name.find("rotary_q") != std::string::npos && n.op_type == "Mul";
        }) == 2 * 8);
  CHECK_THROWS_WITH_AS(parse_hf_config(base + R"(, "sliding_window": 16, "sliding_window_pattern": "LLX"})", "bad"),
                       doctest::Contains("sliding_window_pattern"), InputError);
}

TEST_CASE("generation: Granite scales its embedding, residual branches and logits, Cohere runs SwiGLU beside attention") {
  const ModelConfig g = read_hf_config(test::source_dir() + "/tests/data/granite_8b.json");
  CHECK(g.residual_multiplier == 0.22);
  CHECK(g.logits_multiplier == doctest::Approx(1.0 / 16));
  const LoadedModel gm = build_model(g);
  CHECK(parameter_count(gm, false) == 8170848256);  // granite-3.1-8b, the LM head tied
  int residual_scales = 0, embed_scale = 0, logits_scale = 0;
  for (const Node& n : gm.model.graph.nodes) {
    residual_scales += n.name.find("_residual_scale") != std::string::npos;
    embed_scale += n.name == "model.embed_tokens/scale";
    logits_scale += n.name == "lm_head/logits_scale";
  }
  CHECK(residual_scales == 2 * 40);
  CHECK(embed_scale == 1);
  CHECK(logits_scale == 1);
  // Eager, each scale is a kernel over the hidden states; served, the residual scales fold
  // into the fused residual adds and norms.
  Options eager = serving(DType::bf16, 1, 256);
  eager.fusion = Fusion::eager;
  CHECK(count_op(prepare(gm, eager).kernels, "mul") >= 2 * 40 + 2);
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/command_r.json");
  CHECK(c.parallel_block == 1);
  CHECK_FALSE(c.dense_mlp);
  CHECK_FALSE(c.norm_bias);
  const LoadedModel cm = build_model(c);
  CHECK(parameter_count(cm, false) == 34980831232);  // c4ai-command-r-v01, the LM head tied
  int layer_norms = 0, gates = 0, post_norms = 0;
  for (const Node& n : cm.model.graph.nodes) {
    layer_norms += n.op_type == "LayerNormalization";
    gates += n.op_type == "MatMul" && n.name.find("mlp.gate_proj") != std::string::npos;
    post_norms += n.name.find("post_attention_layernorm") != std::string::npos;
  }
  CHECK(layer_norms == 40 + 1);
  CHECK(gates == 40);
  CHECK(post_norms == 0);
  const GenerationReport r = generate(config_decoder(c), serving(DType::f16, 1), 512, 16, "h100");
  CHECK(r.tpot_ms > r.weight_read_ms);
}

TEST_CASE("generation: StarCoder (GPTBigCode) adds learned positions and shares one KV head") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/starcoder_15b.json");
  CHECK(c.learned_positions);
  CHECK(c.kv_heads == 1);
  CHECK(c.fused_qkv_blocks);
  CHECK(c.ffn == 24576);
  const LoadedModel m = build_model(c);
  int64_t params = 0;
  int rotary = 0, wpe = 0;
  for (const std::string& w : m.model.graph.initializers) {
    const TensorInfo* t = m.model.graph.find(w);
    if (t && t->external_data && w.rfind("lm_head", 0) != 0) params += t->num_elements();
  }
  for (const Node& n : m.model.graph.nodes) {
    rotary += n.op_type == "Cos" || n.op_type == "Sin";
    wpe += n.name == "model.wpe/Gather";
  }
  CHECK(rotary == 0);
  CHECK(wpe == 1);
  // Embedding and positions, 40 layers of LayerNorms, c_attn (h -> h + 2 x 128), c_proj and the
  // MLP, biases everywhere; the LM head tied.
  const int64_t h = 6144, f = 24576, layer = 4 * h + (h * (h + 256) + h + 256) + (h * h + h) + (h * f + f) + (f * h + h);
  CHECK(params == 49152 * h + 8192 * h + 40 * layer + 2 * h);
  // One 128-wide KV head per layer in the cache; decode positions continue past the prompt.
  const Decoder d = config_decoder(c);
  const GenerationReport r = generate(d, serving(DType::f16, 1), 512, 16, "a100-sxm-80gb");
  CHECK(r.kv_cache_bytes == doctest::Approx(40.0 * 2 * 128 * (512 + 16) * 2).epsilon(0.001));
  CHECK(count_op(prepare(d.prefill, serving(DType::f16, 1, 256)).kernels, "flash_attention") == 40);
}

TEST_CASE("generation: InternLM2 fuses Q, K and V, OLMo 2 normalises after, Nemotron squares its ReLU") {
  // InternLM2.5-7B: 7,737,708,544 parameters; one wqkv GEMM per layer.
  const LoadedModel intern = build_model(read_hf_config(test::source_dir() + "/tests/data/internlm2_5_7b.json"));
  CHECK(parameter_count(intern) == 7737708544);
  CHECK(node_count(intern, [](const Node& n) { return n.op_type == "MatMul" && n.name.find("qkv_proj") != std::string::npos; }) == 32);
  // OLMo-2-1124-7B: 7,298,617,344; no norm before the attention or the MLP, two after, and the
  // whole query and key projections normalised.
  const LoadedModel olmo = build_model(read_hf_config(test::source_dir() + "/tests/data/olmo2_7b.json"));
  CHECK(parameter_count(olmo) == 7298617344);
  CHECK(node_count(olmo, [](const Node& n) { return n.name.find("input_layernorm") != std::string::npos; }) == 0);
  CHECK(node_count(olmo, [](const Node& n) { return n.op_type == "Pow" && n.name.find("post_") != std::string::npos; }) == 2 * 32);
  CHECK(node_count(olmo, [](const Node& n) { return n.op_type == "Pow" && n.name.find("q_norm") != std::string::npos; }) == 32);
  // Minitron-8B (Nemotron): LayerNorms, relu then pow in a dense MLP, half of each head rotated.
  const ModelConfig nc = read_hf_config(test::source_dir() + "/tests/data/minitron_8b.json");
  CHECK(nc.rotary_fraction == 0.5);
  CHECK(nc.dense_mlp);
  const LoadedModel nem = build_model(nc);
  const int64_t h = 4096, f = 16384, layer = h * 48 * 128 + 2 * h * 8 * 128 + 48 * 128 * h + 2 * h * f + 2 * 2 * h;
  CHECK(parameter_count(nem) == 2 * 256000 * h + 32 * layer + 2 * h);
  CHECK(node_count(nem, [](const Node& n) { return n.op_type == "Pow" && n.name.find("mlp.act") != std::string::npos; }) == 32);
  CHECK(node_count(nem, [](const Node& n) { return n.op_type == "LayerNormalization"; }) == 2 * 32 + 1);
  const GenerationReport r = generate(config_decoder(nc), serving(DType::bf16, 1), 512, 16, "h100");
  CHECK(r.tpot_ms > r.weight_read_ms);
}

TEST_CASE("generation: OLMoE and Phi-3.5-MoE route top-k of their experts (MoE operator per layer)") {
  struct Case {
    const char* file;
    int64_t params;  // the checkpoint's
    int64_t layers, layer_norms;
  };
  // OLMoE-1B-7B 6,919,161,856 (RMSNorms, whole q/k norms); Phi-3.5-MoE 41,873,153,344
  // (LayerNorms, biases, a biased head).
  for (const Case& k : {Case{"olmoe_1b_7b", 6919161856, 16, 0}, Case{"phi3.5_moe", 41873153344, 32, 2 * 32 + 1}}) {
    INFO(k.file);
    const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/" + k.file + ".json");
    const LoadedModel m = build_model(c);
    CHECK(parameter_count(m) == k.params);
    CHECK(node_count(m, [](const Node& n) { return n.op_type == "MoE"; }) == k.layers);
    CHECK(node_count(m, [](const Node& n) { return n.op_type == "LayerNormalization"; }) == k.layer_norms);
    const GenerationReport r = generate(config_decoder(c), serving(DType::bf16, 1), 512, 16, "h100");
    CHECK(r.tpot_ms > r.weight_read_ms);
  }
}

TEST_CASE("generation: a long prompt's activations are its largest kernel's, not FlashAttention's unmaterialised scores") {
  const Decoder d = config_decoder(read_hf_config(test::source_dir() + "/tests/data/llama3_8b.json"));
  const int64_t s = 8192;
  // Served (FlashAttention, fused kernels): the MLP's gate and up outputs and their product,
  // 3 x tokens x 14336 x 2 bytes; the 32 x 8192 x 8192 scores are never written.
  const GenerationReport fused = generate(d, serving(DType::bf16, 1), s, 16, "h100");
  CHECK(fused.activation_bytes == doctest::Approx(3.0 * s * 14336 * 2).epsilon(0.01));
  // Eager attention writes them (and the probabilities): the largest working set is theirs.
  Options eager = serving(DType::bf16, 1);
  eager.fusion = Fusion::eager;
  eager.attention = Attention::unfused;
  const GenerationReport unfused = generate(d, eager, s, 16, "h100");
  CHECK(unfused.activation_bytes >= 32.0 * s * s * 2);
  CHECK(unfused.max_batch < fused.max_batch);
}

TEST_CASE("generation: Cohere 2 rotates its sliding-window layers only, its global layers use no positions") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/command_r7b.json");
  CHECK(c.rotary_sliding_only);
  CHECK(c.parallel_block == 1);
  CHECK(std::count(c.sliding_layers.begin(), c.sliding_layers.end(), true) == 24);  // 3 of every 4
  const LoadedModel m = build_model(c);
  int rotated = 0;
  for (const Node& n : m.model.graph.nodes) rotated += n.name.find("rotary_q/x1") != std::string::npos;
  CHECK(rotated == 24);
  // 8,028,033,024 parameters, the LM head tied (less the rotary table's inv_freq).
  int64_t params = 0;
  for (const std::string& w : m.model.graph.initializers) {
    const TensorInfo* t = m.model.graph.find(w);
    if (t && t->external_data && w.rfind("lm_head", 0) != 0 && w.find("inv_freq") == std::string::npos)
      params += t->num_elements();
  }
  CHECK(params == 8028033024);
  // A long prompt's cache: the global layers hold every token, the sliding ones the window.
  const GenerationReport r = generate(config_decoder(c), serving(DType::bf16, 1), 8192, 64, "h100");
  CHECK(r.kv_cache_bytes == doctest::Approx(2.0 * 8 * 128 * 2 * (8.0 * (8192 + 64) + 24.0 * 4096)).epsilon(0.001));
}

TEST_CASE("generation: ALiBi decoders (BLOOM, MPT, Falcon-RW) bias their scores instead of rotating them") {
  struct Case {
    const char* file;
    int64_t params;  // the checkpoint's, the LM head tied to the embedding
    int64_t layer_norms;
  };
  // bloom-560m 559,214,592 (a LayerNorm on the embedding too), mpt-7b 6,649,286,656 (no
  // biases anywhere), falcon-rw-1b 1,311,625,216.
  for (const Case& k : {Case{"bloom_560m", 559214592, 2 * 24 + 2}, Case{"mpt_7b", 6649286656, 2 * 32 + 1},
                        Case{"falcon_rw_1b", 1311625216, 2 * 24 + 1}}) {
    INFO(k.file);
    const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/" + k.file + ".json");
    CHECK(c.alibi);
    const LoadedModel m = build_model(c);
    int64_t params = 0;
    int rotary = 0, layer_norms = 0, bias_adds = 0;
    for (const std::string& w : m.model.graph.initializers) {
      const TensorInfo* t = m.model.graph.find(w);
      if (t && t->external_data && w.rfind("lm_head", 0) != 0 && w.find("alibi.slopes") == std::string::npos)
        params += t->num_elements();
    }
    for (const Node& n : m.model.graph.nodes) {
      rotary += n.op_type == "Cos" || n.op_type == "Sin";
      layer_norms += n.op_type == "LayerNormalization";
      bias_adds += n.name.find("self_attn/bias_Add") != std::string::npos;
    }
    CHECK(params == k.params);
    CHECK(rotary == 0);
    CHECK(layer_norms == k.layer_norms);
    CHECK(bias_adds == c.layers);
    // Served, the bias is FlashAttention's (alibi_slopes): one kernel per layer, no add of it.
    const Decoder d = config_decoder(c);
    const Analysis pre = prepare(d.prefill, serving(DType::bf16, 1, 256));
    CHECK(count_op(pre.kernels, "flash_attention") == c.layers);
    CHECK(count_op(pre.kernels, "add") == 0);
    const GenerationReport r = generate(d, serving(DType::bf16, 1), 512, 16, "h100");
    CHECK(r.tpot_ms > r.weight_read_ms);
  }
}

TEST_CASE("generation: GPTQ and AWQ checkpoints run their layers' projections on 4-bit weights (MatMulNBits)") {
  std::ifstream f(test::source_dir() + "/tests/data/llama3_8b.json");
  const nlohmann::json base = nlohmann::json::parse(f);
  nlohmann::json j = base;
  j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"sym", true}};
  const ModelConfig gptq = parse_hf_config(j.dump(), "llama3-gptq");
  CHECK(gptq.weight_bits == 4);
  CHECK(gptq.weight_group == 128);
  CHECK_FALSE(gptq.weight_zero_points);
  CHECK(config_quantization_note(gptq).empty());
  int nbits = 0, matmuls = 0, zero_point_inputs = 0;
  for (const Node& n : build_model(gptq).model.graph.nodes) {
    nbits += n.op_type == "MatMulNBits";
    matmuls += n.op_type == "MatMul" && n.name.rfind("lm_head", 0) == 0;
    if (n.op_type == "MatMulNBits") {
      CHECK(n.attr_i("bits", 0) == 4);
      CHECK(n.attr_i("block_size", 0) == 128);
      zero_point_inputs += n.inputs.size() > 3;
    }
  }
  CHECK(nbits == 32 * 7);  // q, k, v, o, gate, up, down in every layer
  CHECK(matmuls == 1);      // the LM head stays fp16
  CHECK(zero_point_inputs == 0);
  // Held: the embedding and the head in fp16, the layers' 6.98B weights in 4 bits with an
  // fp16 scale per 128 (the norms, 0.27M, in fp16).
  const double h = 4096, vocab = 128256, layer = 2 * h * h + 2 * h * 1024 + 3 * h * 14336;
  const double held = 2 * vocab * h * 2 + 32 * layer * (0.5 + 2.0 / 128) + (65 * h) * 2;
  const Options fp16 = serving(DType::f16, 1);
  const GenerationReport q = generate(config_decoder(gptq), fp16, 512, 16, "h100");
  CHECK(q.weight_bytes == doctest::Approx(held).epsilon(0.002));
  // A decode step streams a third of the bytes: faster than fp16's, never below its bound.
  const GenerationReport full = generate(config_decoder(read_hf_config(test::source_dir() + "/tests/data/llama3_8b.json")),
                                         fp16, 512, 16, "h100");
  CHECK(q.tpot_ms < 0.6 * full.tpot_ms);
  CHECK(q.tpot_ms > q.weight_read_ms);
  // AWQ: asymmetric, a zero point per group (the qzeros input); the same packed weights.
  j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"zero_point", true},
                              {"version", "gemm"}};
  const ModelConfig awq = parse_hf_config(j.dump(), "llama3-awq");
  CHECK(awq.weight_zero_points);
  zero_point_inputs = 0;
  for (const Node& n : build_model(awq).model.graph.nodes) zero_point_inputs += n.op_type == "MatMulNBits" && n.inputs.size() == 4;
  CHECK(zero_point_inputs == 32 * 7);
  // Per-row scales, unconverted modules by name, bad bit widths and groups.
  j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", -1},
                              {"modules_to_not_convert", {"down_proj"}}};
  const ModelConfig rows = parse_hf_config(j.dump(), "llama3-gptq8");
  CHECK(rows.weight_group == 0);
  nbits = 0;
  for (const Node& n : build_model(rows).model.graph.nodes) nbits += n.op_type == "MatMulNBits";
  CHECK(nbits == 32 * 6);
  j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 9}};
  CHECK_THROWS_WITH_AS(parse_hf_config(j.dump(), "q"), doctest::Contains("bits"), InputError);
  j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 48}};
  CHECK_THROWS_WITH_AS(parse_hf_config(j.dump(), "q"), doctest::Contains("group_size"), InputError);
  // A method the graph does not build is named, not silently priced as if unquantized.
  j["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
  CHECK(config_quantization_note(parse_hf_config(j.dump(), "q")).find("bitsandbytes") != std::string::npos);
  // A mixture's experts as 4-bit QMoE, its routers unconverted.
  std::ifstream fm(test::source_dir() + "/tests/data/mixtral_8x7b.json");
  nlohmann::json jm = nlohmann::json::parse(fm);
  jm["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}};
  const ModelConfig mix = parse_hf_config(jm.dump(), "mixtral-gptq");
  CHECK(mix.expert_weight_bits == 4);
  int qmoe = 0, routers_quantized = 0;
  for (const Node& n : build_model(mix).model.graph.nodes) {
    qmoe += n.op_type == "QMoE";
    routers_quantized += n.op_type == "MatMulNBits" && n.name.find("block_sparse_moe.gate") != std::string::npos;
  }
  CHECK(qmoe == 32);
  CHECK(routers_quantized == 0);
}

TEST_CASE("generation: DeepSeek-V3's multi-token-prediction module drafts as one MoE layer with the head") {
  const std::string base = R"({"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 512,
      "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 3, "vocab_size": 1000,
      "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
      "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "n_shared_experts": 1,
      "first_k_dense_replace": 1, "hidden_act": "silu")";
  const ModelConfig c = parse_hf_config(base + R"(, "num_nextn_predict_layers": 1})", "deepseek");
  CHECK(c.mtp_layers == 1);
  const Decoder mtp = mtp_decoder(c);
  CHECK(mtp.layers == 1);
  CHECK(mtp.kv_tensors == 1);  // the module's latent cache
  int moe = 0;
  for (const Node& n : mtp.step.model.graph.nodes) moe += n.op_type == "MoE";
  CHECK(moe == 1);
  // Its input: the token's embedding and the target's last hidden state, each normalised,
  // concatenated and projected (eh_proj, 2 x hidden -> hidden) before the layer.
  CHECK(std::find(mtp.step.model.graph.inputs.begin(), mtp.step.model.graph.inputs.end(), "hidden_states") !=
        mtp.step.model.graph.inputs.end());
  int eh_proj = 0;
  for (const Kernel& k : prepare(mtp.prefill, serving(DType::bf16, 2, 16)).kernels.kernels)
    if (k.cls == KernelClass::gemm && k.gemm.k == 2 * c.hidden && k.gemm.n == c.hidden) ++eh_proj;
  CHECK(eh_proj == 1);
  CHECK_THROWS_WITH_AS(mtp_decoder(parse_hf_config(base + "}", "deepseek")), doctest::Contains("num_nextn_predict_layers"),
                       InputError);
  // As the draft: a step of the module per drafted token, far cheaper than the model's.
  const Decoder d = config_decoder(c);
  const Options o = serving(DType::bf16, 1);
  GenerationOptions gen{128, 16};
  gen.speculative = 1;
  gen.acceptance = 0.8;
  const GenerationReport g =
      *predict_generation(prepare_generation(d, o, gen, &mtp), d, GpuDatabase::builtin().resolve("h200"), o).generation;
  CHECK(g.speculative.draft == "mtp");
  CHECK(g.speculative.draft_step_ms > 0);
  CHECK(g.speculative.draft_step_ms < g.speculative.verify_ms);
}

TEST_CASE("generation: DeepSeek-V3's multi-head latent attention caches the latent and decodes absorbed") {
  // DeepSeek-V3's structure, small: 4 heads of 16 + 8 (rotary) query/key dims and 16 value
  // dims over a 32-wide latent, a 64-rank query bottleneck; the first layer dense, then top-2
  // of 8 experts of 64 beside one always-on shared expert.
  const std::string cfg = R"({"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 512,
      "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 3, "vocab_size": 1000,
      "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
      "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "n_shared_experts": 1,
      "first_k_dense_replace": 1, "hidden_act": "silu"})";
  const ModelConfig c = parse_hf_config(cfg, "deepseek");
  CHECK(c.kv_lora_rank == 32);
  CHECK(c.head_dim == 24);
  CHECK(c.dense_layers == std::vector<int64_t>{0});
  CHECK(c.shared_expert_ffn == 64);
  CHECK_FALSE(c.shared_expert_gate);
  CHECK_THROWS_AS(parse_hf_config(R"({"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 512,
      "num_attention_heads": 4, "num_hidden_layers": 3, "vocab_size": 1000, "kv_lora_rank": 32,
      "qk_nope_head_dim": 16, "qk_rope_head_dim": 7, "v_head_dim": 16, "n_routed_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 64})", "odd rope"), InputError);
  const Decoder d = config_decoder(c);
  CHECK(d.kv_heads == 1);
  CHECK(d.head_dim == 32 + 8);
  CHECK(d.kv_tensors == 1);
  Options o = serving(DType::f16, 2, 64);
  const Analysis pre = prepare(d.prefill, o);
  int flash = 0;
  for (const Kernel& k : pre.kernels.kernels)
    if (k.op == "flash_attention") {
      ++flash;
      // Query/key heads of 24, value heads of 16, the causal triangle of 64 queries.
      CHECK(k.flops == doctest::Approx(2.0 * 2 * 4 * (64.0 * 65 / 2) * (24 + 16)));
      CHECK(k.gemm.n == 16);
    }
  CHECK(flash == 3);
  // A decode step after 1000 tokens: each layer's attention reads the latent cache once (one
  // shared head of 40), its values a slice of the same rows read in place.
  o.dims.seq = 1;
  o.dims.named["past_sequence"] = 1000;
  const Analysis step = prepare(d.step, o);
  int decode = 0;
  for (const Kernel& k : step.kernels.kernels) {
    if (k.op != "flash_decode") continue;
    ++decode;
    CHECK(k.rows == 2);  // batch x one latent head
    // The cache (1001 rows of 40), the new row written, the 4 heads' queries (40) and outputs (32).
    CHECK(k.bytes == doctest::Approx((2.0 * 1001 * 40 + 2.0 * 40 + 2.0 * 4 * 40 + 2.0 * 4 * 32) * 2));
    CHECK(k.flops == doctest::Approx(2.0 * 2 * 4 * 1001 * (40 + 32)));
  }
  CHECK(decode == 3);
  // No slice is copied: the query's no-rotary part is a view the absorbing GEMM reads, its
  // rotary part and the rotary key views the rotary kernels read, the latent a view its norm
  // reads, the values a view of the cache the attention reads.
  CHECK(count_op(step.kernels, "slice") == 0);
  for (const Kernel& k : step.kernels.kernels) {
    if (k.op == "rotary") {
      CHECK(k.cols == 8);
      CHECK(k.bytes < 1.5 * 2 * (2.0 * 4 * 8 * 2));  // the rotary dims read and written, not the whole heads
    }
    if (k.op == "rmsnorm") CHECK((k.cols == 64 || k.cols == 32 || k.cols == 256));  // q_a, the latent, the hidden
  }
  // The cache holds the latent alone: one tensor of 40 per token and layer.
  const GenerationReport g = generate(d, serving(DType::f16, 2), 100, 8, "h100");
  CHECK(g.kv_cache_bytes == 1.0 * 3 * 40 * 108 * 2 * 2);
  // Its ONNX export (a key cache alone) predicts as the config does.
  const Decoder from_onnx = onnx_decoder(load_model_from_proto(build_model(c, BuildOptions{true}).proto->model, "mla.onnx"));
  CHECK(from_onnx.kv_tensors == 1);
  CHECK(from_onnx.head_dim == 40);
  const GenerationReport h = generate(from_onnx, serving(DType::f16, 2), 100, 8, "h100");
  CHECK(h.kv_cache_bytes == g.kv_cache_bytes);
  CHECK(h.tpot_ms == doctest::Approx(g.tpot_ms));
}

TEST_CASE("generation: GPT-2 and OPT decode with learned positions, every head cached and a tied head") {
  // GPT-2 small: 124,439,808 parameters (HF's count; the head tied to wte).
  const ModelConfig g = read_hf_config(test::source_dir() + "/examples/gpt2-small.json");
  CHECK(g.tie_embeddings);
  const Decoder gd = config_decoder(g);
  CHECK(parameter_count(gd.prefill, false) == 124439808);
  CHECK(parameter_count(gd.step, false) == 124439808);
  CHECK(gd.max_positions == 1024);
  CHECK(gd.kv_heads == 12);
  int attn_gemms = 0;  // one fused c_attn per layer, as build_gpt2's forward
  for (const Node& n : gd.step.model.graph.nodes)
    for (const std::string& in : n.inputs) attn_gemms += n.op_type == "MatMul" && in.find("qkv_proj.weight") != std::string::npos;
  CHECK(attn_gemms == 12);
  const GenerationReport gr = generate(gd, serving(DType::f16, 1), 512, 16, "a100-sxm-80gb");
  CHECK(gr.kv_cache_bytes == doctest::Approx(12.0 * 2 * 12 * 64 * (512 + 16) * 2).epsilon(0.001));
  CHECK(gr.weight_bytes == doctest::Approx(124439808.0 * 2).epsilon(0.001));

  // OPT-125m: 125,239,296 parameters (its position table 2048 + 2 rows; the head tied).
  const nlohmann::json opt = {{"model_type", "opt"}, {"hidden_size", 768}, {"num_hidden_layers", 12},
                              {"num_attention_heads", 12}, {"ffn_dim", 3072}, {"vocab_size", 50272},
                              {"max_position_embeddings", 2048}, {"do_layer_norm_before", true},
                              {"word_embed_proj_dim", 768}};
  const ModelConfig o = parse_hf_config(opt.dump(), "opt_125m");
  const Decoder od = config_decoder(o);
  CHECK(parameter_count(od.prefill, false) == 125239296);
  CHECK(parameter_count(od.step, false) == 125239296);
  CHECK(parameter_count(build_model(o), false) == 125239296);  // as the forward pass holds them
  CHECK(od.max_positions == 2048);
  int relu = 0;
  for (const Node& n : od.step.model.graph.nodes) relu += n.op_type == "Relu";
  CHECK(relu == 12);

  // The same decoder steps as ONNX graphs: the positions are read off their tables (GPT-2's
  // Range of positions into wpe; OPT's offset by 2 into a table of 2050 rows), none for rotary.
  CHECK(onnx_decoder(load_model_from_proto(gd.step.proto->model, "gpt2.onnx")).max_positions == 1024);
  CHECK(onnx_decoder(load_model_from_proto(od.step.proto->model, "opt.onnx")).max_positions == 2048);
  const Decoder rotary = onnx_decoder(load_model_from_proto(config_decoder(small_llama(8, 2)).step.proto->model, "l.onnx"));
  CHECK(rotary.max_positions == 0);

  // OPT-350m's post-LayerNorm blocks with project_in / project_out: forward only, one clear error.
  nlohmann::json opt350 = opt;
  opt350["hidden_size"] = 1024;
  opt350["do_layer_norm_before"] = false;
  opt350["word_embed_proj_dim"] = 512;
  CHECK_THROWS_AS(config_decoder(parse_hf_config(opt350.dump(), "opt_350m")), InputError);
}

TEST_CASE("generation: Qwen2-VL and Qwen2.5-VL run their vision towers on the processor's resized image") {
  const ModelConfig q2 = read_hf_config(test::source_dir() + "/tests/data/qwen2_vl_7b.json");
  const ModelConfig q25 = read_hf_config(test::source_dir() + "/tests/data/qwen2_5_vl_7b.json");
  REQUIRE(q2.vision.qwen());
  REQUIRE(q25.vision.qwen());
  // The default image, 448 x 448: 32 x 32 patches of 14, merged 2 x 2 into 256 tokens.
  CHECK(q2.vision.tokens() == 256);
  // Tower parameters (inv_freq buffers apart): the patch Conv3d 1280 x 3 x 2 x 14 x 14, 32
  // blocks and the merger (LayerNorm or RMSNorm, 5120 -> 5120 -> 3584 with biases). Qwen2-VL's
  // block: 2 LayerNorms, qkv 1280 -> 3840, proj, fc1 1280 -> 5120, fc2; Qwen2.5-VL's: 2 RMSNorms,
  // qkv, proj and the gated MLP of 3420, biased.
  const int64_t lm = 7615616512, conv = 1280 * 3 * 2 * 14 * 14;
  const int64_t block2 = 2 * 2560 + (1280 * 3840 + 3840) + (1280 * 1280 + 1280) + (1280 * 5120 + 5120) + (5120 * 1280 + 1280);
  const int64_t block25 = 2 * 1280 + (1280 * 3840 + 3840) + (1280 * 1280 + 1280) + 2 * (1280 * 3420 + 3420) + (3420 * 1280 + 1280);
  const int64_t merger = (5120 * 5120 + 5120) + (5120 * 3584 + 3584);
  CHECK(parameter_count(build_model(q2)) == lm + conv + 32 * block2 + 2560 + merger);
  CHECK(parameter_count(build_model(q25)) == lm + conv + 32 * block25 + 1280 + merger);
  // The processor's smart_resize: sides to multiples of 28, the area into [3136, 12845056].
  ModelConfig r = q25;
  set_image_size(r, 1080, 1920);
  CHECK(r.vision.image_size == 1092);
  CHECK(r.vision.image_width == 1932);
  CHECK(r.vision.tokens() == 39 * 69);
  set_image_size(r, 10, 10);
  CHECK(r.vision.tokens() == 4);  // 56 x 56
  set_image_size(r, 8000, 8000);
  CHECK(r.vision.image_size == 3584);  // 3584^2 = 12845056, the bound itself
  CHECK(r.vision.tokens() == 128 * 128);
  ModelConfig llava = read_hf_config(test::source_dir() + "/tests/data/llava_1.5_7b.json");
  CHECK_THROWS_AS(set_image_size(llava, 448, 448), InputError);
  // Qwen2.5-VL attends within windows of 112 pixels (8 x 8 patches) but in layers 7, 15, 23
  // and 31; a 1092 x 1932 image has 10 x 18 windows. Each attention is one FlashAttention
  // kernel under full fusion, reading its queries, keys and values and writing its output once.
  set_image_size(r, 1080, 1920);
  const Analysis a = prepare(build_model(r), serving(DType::bf16, 1, 3000));
  int flash = 0, windowed = 0;
  for (const Kernel& k : a.kernels.kernels) {
    if (k.op != "flash_attention" || k.gemm.m == 3000) continue;  // the language model's own
    ++flash;
    windowed += k.gemm.batch == 10 * 18 * 16;
    const double qkvo = 4.0 * double(k.gemm.batch) * double(k.gemm.m) * 80 * 2;
    CHECK(k.bytes == doctest::Approx(qkvo).epsilon(0.01));
  }
  CHECK(flash == 32);
  CHECK(windowed == 28);
}

TEST_CASE("generation: Gemma 3 runs its SigLIP tower and average-pools the patches to 256 image tokens") {
  // google/gemma-3-4b-it: SigLIP So400m/14 at 896 pixels (4,096 patches, 416,866,032
  // parameters), the projector (mm_soft_emb_norm and a 1152 x 2560 matrix) and the text model
  // (Gemma3TextConfig's 8 heads, 4 KV heads, the head tied): 4,300,079,472 parameters in all.
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/gemma3_4b.json");
  CHECK(c.language_model_of == "gemma3");
  CHECK(c.vision.siglip());
  CHECK(c.vision.tokens() == 256);
  const LoadedModel m = build_model(c);
  CHECK(parameter_count(m, false) == 4300079472);
  ModelConfig text = c;
  text.vision = ModelConfig::VisionTower{};
  CHECK(parameter_count(m, false) - parameter_count(build_model(text), false) == 416866032 + 1152 * 2560 + 1152);
  // The pooled image: 64 x 64 patches averaged in 4 x 4 windows, one kernel; the text model
  // reads 256 image tokens before the prompt's text.
  const Analysis a = prepare(m, serving(DType::bf16, 1, 300));
  int pools = 0;
  for (const Node& nd : a.graph.nodes)
    if (nd.op_type == "AveragePool")
      if (const TensorInfo* t = a.graph.find(nd.outputs[0])) pools += t->fully_known() && t->shape[2].value == 16;
  CHECK(pools == 1);
  // A decode step runs the language model alone.
  CHECK_FALSE(config_decoder(c).step.model.graph.find("pixel_values"));
}

TEST_CASE("generation: Qwen3-VL adds interpolated positions to its tower and DeepStack features to the first layers") {
  // Qwen/Qwen3-VL-8B-Instruct: Qwen3-8B (untied head: 8,190,735,360) and the tower: the patch
  // Conv3d with a bias, a 48 x 48 position table, 27 blocks of SigLIP's widths (1152, 4304),
  // the merger (LayerNorm 1152, 4608 -> 4608 -> 4096) and three DeepStack mergers (LayerNorm
  // 4608): 8,767,123,696 parameters in all, the published count.
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/qwen3_vl_8b.json");
  REQUIRE(c.vision.qwen());
  CHECK(c.language_model_of == "qwen3_vl");
  CHECK(c.vision.position_grid == 48);
  CHECK(c.vision.deepstack_layers == std::vector<int64_t>{8, 16, 24});
  CHECK(c.vision.tokens() == 196);  // 448 pixels: 28 x 28 patches of 16, merged 2 x 2
  const LoadedModel m = build_model(c);
  CHECK(parameter_count(m) == 8767123696);
  const int64_t block = 2 * 2304 + (1152 * 3456 + 3456) + (1152 * 1152 + 1152) + (1152 * 4304 + 4304) + (4304 * 1152 + 1152);
  const int64_t merger = 2304 + (4608 * 4608 + 4608) + (4608 * 4096 + 4096), deep = merger - 2304 + 2 * 4608;
  CHECK(parameter_count(m) - 8190735360 == 1152 * 3 * 2 * 16 * 16 + 1152 + 2304 * 1152 + 27 * block + merger + 3 * deep);
  // Each DeepStack feature is added to the image tokens after one of the first three layers;
  // a decode step has no image.
  const Analysis a = prepare(m, serving(DType::bf16, 1, 400));
  int adds = 0;
  for (const Node& nd : a.graph.nodes)
    if (nd.name.find("/deepstack_Add") != std::string::npos)
      if (const TensorInfo* t = a.graph.find(nd.outputs[0])) adds += t->fully_known() && t->shape[1].value == 196;
  CHECK(adds == 3);
  CHECK_FALSE(config_decoder(c).step.model.graph.find("pixel_values"));
  // Its processor's pixel bounds: at least 65,536 pixels (256 x 256).
  ModelConfig small = c;
  set_image_size(small, 64, 64);
  CHECK(small.vision.image_size == 256);
  CHECK(small.vision.tokens() == 64);
}

TEST_CASE("generation: Mistral 3 runs its Pixtral tower and merges 2 x 2 patches into each image token") {
  // mistralai/Mistral-Small-3.1-24B-Instruct-2503: Mistral Small 24B (untied head: 23,572,403,200)
  // and Pixtral: the patch convolution, ln_pre, 24 layers of RMSNorms, q/k/v/o and a gated MLP
  // without biases (403,305,472), the projector's norm, merging_layer 4096 -> 1024, linear_1 and
  // linear_2 without biases (35,652,608): 24,011,361,280 parameters, the published count.
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/mistral_small_3.1.json");
  REQUIRE(c.vision.pixtral());
  CHECK_FALSE(c.vision.qwen());
  CHECK(c.language_model_of == "mistral3");
  CHECK(c.vision.tokens() == 256);  // 448 pixels: 32 x 32 patches of 14, merged 2 x 2
  const LoadedModel m = build_model(c);
  CHECK(parameter_count(m) == 24011361280);
  const int64_t layer = 4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024;
  CHECK(parameter_count(m) - 23572403200 == 1024 * 3 * 14 * 14 + 1024 + 24 * layer + 1024 + 4096 * 1024 + 1024 * 5120 +
                                                5120 * 5120);
  // The processor fits the image within 1540 pixels a side, whole patches: 1080 x 1920 becomes
  // 868 x 1540, 62 x 110 patches, 31 x 55 = 1,705 tokens; an odd row of patches is dropped by
  // the merger's unfold.
  ModelConfig wide = c;
  set_image_size(wide, 1080, 1920);
  CHECK(wide.vision.image_size == 868);
  CHECK(wide.vision.image_width == 1540);
  CHECK(wide.vision.tokens() == 1705);
  set_image_size(wide, 300, 300);  // 22 x 22 patches: 11 x 11 tokens
  CHECK(wide.vision.tokens() == 121);
  set_image_size(wide, 290, 300);  // 21 x 22 patches: the 21st row dropped
  CHECK(wide.vision.tokens() == 110);
  const Analysis a = prepare(build_model(wide), serving(DType::bf16, 1, 200));
  bool merged = false;
  for (const Node& nd : a.graph.nodes)
    if (nd.name == "model/merge_image")
      if (const TensorInfo* t = a.graph.find(nd.outputs[0])) merged = t->fully_known() && t->shape[1].value == 200;
  CHECK(merged);
}

TEST_CASE("generation: --images puts several images through the tower, their tokens one after another") {
  // Each family's images: the tower's batch is batch x images, the language model reads
  // images x tokens() image tokens before the text (Qwen3-VL's DeepStack features too).
  const std::string dir = test::source_dir() + "/tests/data/";
  for (const char* name : {"llava_1.5_7b.json", "qwen2_5_vl_7b.json", "qwen3_vl_8b.json", "gemma3_4b.json",
                           "mistral_small_3.1.json"}) {
    CAPTURE(name);
    ModelConfig c = read_hf_config(dir + name);
    const int64_t one = c.vision.tokens();
    set_images(c, 3);
    CHECK(c.vision.sequence_tokens() == 3 * one);
    const Analysis a = prepare(build_model(c), serving(DType::bf16, 2, 3 * one + 5));
    bool merged = false;
    int deepstack = 0;
    for (const Node& nd : a.graph.nodes) {
      const TensorInfo* t = nd.outputs.empty() ? nullptr : a.graph.find(nd.outputs[0]);
      if (!t || !t->fully_known()) continue;
      if (nd.name == "model/merge_image") merged = t->shape[0].value == 2 && t->shape[1].value == 3 * one + 5;
      if (nd.name.find("/deepstack_Add") != std::string::npos) deepstack += t->shape[1].value == 3 * one;
    }
    CHECK(merged);
    CHECK(deepstack == (c.vision.deepstack_layers.empty() ? 0 : 3));
    CHECK(config_decoder(c).image_tokens == 3 * one);
  }
  ModelConfig text = llama3_8b();
  CHECK_THROWS_AS(set_images(text, 2), InputError);
  ModelConfig llava = read_hf_config(dir + "llava_1.5_7b.json");
  CHECK_THROWS_AS(set_images(llava, 0), InputError);
  // A vision_config that is not an object is one clear error, for every tower's reader.
  for (const std::string name : {"qwen2_5_vl_7b", "qwen3_vl_8b", "mistral_small_3.1", "llama4_scout", "llava_1.5_7b",
                                 "gemma3_4b"}) {
    CAPTURE(name);
    std::ifstream f(dir + name + ".json");
    nlohmann::json j = nlohmann::json::parse(f);
    j["vision_config"] = "large";
    CHECK_THROWS_WITH_AS(parse_hf_config(j.dump(), name), doctest::Contains("'vision_config' must be an object"), InputError);
  }
}

TEST_CASE("generation: Llama 4 tiles each image, runs its vision model per tile and pixel-shuffles 576 patches to 144 tokens") {
  // meta-llama/Llama-4-Scout-17B-16E-Instruct: the text model (107,769,861,120) and the vision
  // model: the unfold patch linear (588 -> 1408, no bias), class token and positions (577 x
  // 1408), layernorm_pre / _post, 34 layers (q/k/v/o and fc1/fc2 with biases, 2 LayerNorms),
  // the adapter (5632 -> 4096 -> 4096, no biases) and the projector (4096 -> 5120): 108,641,793,536
  // parameters, the published count.
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/llama4_scout.json");
  REQUIRE(c.vision.llama4());
  const int64_t v = 1408, layer = 4 * (v * v + v) + (v * 5632 + 5632) + (5632 * v + v) + 4 * v;
  const int64_t tower = 588 * v + v + 577 * v + 4 * v + 34 * layer + 5632 * 4096 + 4096 * 4096;
  CHECK(parameter_count(build_model(c)) == 107769861120 + tower + 4096 * 5120);
  CHECK(107769861120 + tower + 4096 * 5120 == 108641793536);
  // get_best_fit: a 336 image fills one tile; 448 upscales least onto 2 x 2 (and a global
  // tile); 1080 x 1920 fits no canvas of at most 16 tiles unshrunk and shrinks least onto 3 x 5.
  ModelConfig r = c;
  set_image_size(r, 336, 336);
  CHECK(r.vision.tiles() == 1);
  CHECK(r.vision.tokens() == 144);
  set_image_size(r, 448, 448);
  CHECK(r.vision.tile_rows == 2);
  CHECK(r.vision.tile_cols == 2);
  CHECK(r.vision.tokens() == 5 * 144);
  set_image_size(r, 1080, 1920);
  CHECK(r.vision.tile_rows == 3);
  CHECK(r.vision.tile_cols == 5);
  CHECK(r.vision.tokens() == 16 * 144);
  // Each tile's 577 tokens attend among themselves; the language model reads 16 x 144 image tokens.
  const Analysis a = prepare(build_model(r), serving(DType::bf16, 1, 2400));
  int scores = 0;
  bool merged = false;
  for (const Node& nd : a.graph.nodes) {
    const TensorInfo* t = nd.outputs.empty() ? nullptr : a.graph.find(nd.outputs[0]);
    if (!t || !t->fully_known()) continue;
    scores += nd.name.find("vision_model.model.layers.") == 0 && nd.op_type == "Softmax" && t->shape[0].value == 16 &&
              t->shape[2].value == 577;
    if (nd.name == "model/merge_image") merged = t->shape[1].value == 2400;
  }
  CHECK(scores == 34);
  CHECK(merged);
}

TEST_CASE("generation: T5 encoder-decoders run the encoder in the prefill alone and cache the prompt for cross-attention") {
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/flan_t5_base.json");
  const Decoder d = config_decoder(c);
  CHECK(d.encoder_decoder());
  CHECK(d.layers == 12);
  CHECK(d.kv_heads == 12);
  CHECK(d.head_dim == 64);
  // The prefill holds the whole checkpoint (flan-t5-base, 247,577,856 parameters); a step the
  // shared embedding, the decoder's 12 layers (self-attention's q, k, v and o, cross-attention's
  // q and o: its keys and values are cached, a gated feed-forward, three RMSNorms), its
  // relative bias and final norm, and the untied head.
  CHECK(parameter_count(d.prefill) == 247577856);
  const int64_t layer = 6 * 768 * 768 + 3 * 768 * 2048 + 3 * 768;
  CHECK(parameter_count(d.step) == 2 * 32128 * 768 + 12 * layer + 32 * 12 + 768);
  CHECK(node_count(d.step, [](const Node& n) { return n.name.rfind("encoder.", 0) == 0; }) == 0);
  CHECK(node_count(d.step, [](const Node& n) { return n.name.find("EncDecAttention.k/") != std::string::npos; }) == 0);
  CHECK(d.step.model.graph.inputs.size() == 1 + 12 * 4);
  // The prefill's decoder reads its start token: one token of logits.
  CHECK(node_count(d.prefill, [](const Node& n) { return n.name.rfind("decoder.block.", 0) == 0; }) > 0);
  for (int64_t batch : {1, 3}) {
    const GenerationReport g = generate(d, serving(DType::f32, batch), 200, 20, "h100");
    // Each layer keeps K and V of the decoder's 1 + 20 tokens and of the encoder's 200.
    CHECK(g.kv_cache_bytes == 2.0 * 12 * 12 * 64 * (1 + 20 + 200) * batch * 4);
    CHECK(g.encoder_decoder());
    CHECK(g.samples.front().kv_len == 1);
    CHECK(g.samples.back().kv_len == 20);
    CHECK(g.step_ms.size() == 20);
    // A step streams the decoder's weights and the head, never the encoder's or the embedding.
    const Gpu& gpu = GpuDatabase::builtin().resolve("h100");
    CHECK(g.weight_read_ms ==
          doctest::Approx((12.0 * layer + 32128 * 768 + 32 * 12 + 768) * 4 / (gpu.mem_bw_gbps * 1e9) * 1e3).epsilon(0.01));
    CHECK(g.samples.front().latency_ms >= g.weight_read_ms);
  }
  // A longer prompt: a longer encoder pass and a longer cross-attention in every step.
  const GenerationReport short_prompt = generate(d, serving(DType::bf16, 8), 128, 16, "h100");
  const GenerationReport long_prompt = generate(d, serving(DType::bf16, 8), 4096, 16, "h100");
  CHECK(long_prompt.ttft_ms > 4 * short_prompt.ttft_ms);
  CHECK(long_prompt.samples.front().latency_ms > short_prompt.samples.front().latency_ms);
  // An encoder alone has no decode step.
  ModelConfig enc = c;
  enc.head = "encoder";
  CHECK_THROWS_WITH_AS(config_decoder(enc), doctest::Contains("generates no tokens"), InputError);
}

TEST_CASE("generation: Switch Transformer's decode steps read the experts their tokens reach") {
  // The decoder's sparse layers (every second) run as one routed MoE operator, top-1 over the
  // experts, the stacked experts holding the checkpoint's parameters: the prefill holds as many
  // as the forward pass. One sequence's step reaches one expert of 8; 64 sequences nearly all.
  const ModelConfig sw = parse_hf_config(R"({"model_type": "switch_transformers", "d_model": 256, "d_kv": 32,
      "d_ff": 1024, "num_heads": 8, "num_layers": 4, "vocab_size": 1000, "num_experts": 8, "expert_capacity": 16,
      "encoder_sparse_step": 2, "decoder_sparse_step": 2})", "switch");
  const Decoder d = config_decoder(sw);
  CHECK(d.encoder_decoder());
  CHECK(parameter_count(d.prefill) == parameter_count(build_model(sw)));
  const auto moe = [](const Node& n) { return n.op_type == "MoE"; };
  CHECK(node_count(d.step, moe) == 2);
  CHECK(node_count(d.prefill, moe) == 2);  // the decoder over its start token; the encoder keeps its eager experts
  CHECK(node_count(d.step, [](const Node& n) { return n.name.find(".experts.expert_") != std::string::npos; }) == 0);
  const Gpu& gpu = GpuDatabase::builtin().resolve("h100");
  const double expert_set = 2.0 * 256 * 1024 * 4;  // wi and wo of one expert, FP32
  const GenerationReport one = generate(d, serving(DType::f32, 1), 64, 8, "h100");
  const GenerationReport many = generate(d, serving(DType::f32, 64), 64, 8, "h100");
  // The bound's difference: 2 sparse layers x (experts reached by 64 tokens - 1) expert sets.
  const double reached = 8.0 * (1 - std::pow(1 - 1.0 / 8, 64));
  CHECK(many.weight_read_ms - one.weight_read_ms ==
        doctest::Approx(2 * (reached - 1) * expert_set / (gpu.mem_bw_gbps * 1e9) * 1e3).epsilon(0.01));
  CHECK(one.samples.front().latency_ms >= one.weight_read_ms);
  CHECK(many.samples.front().latency_ms > one.samples.front().latency_ms);
  CHECK(one.kv_cache_bytes == 2.0 * 4 * 8 * 32 * (1 + 8 + 64) * 4);
}

TEST_CASE("generation: fused attention of an encoder attends every pair, and reads a per-head position bias as no mask") {
  // A BERT's scaled scores plus a padding mask [batch, 1, 1, keys]: every query sees every key.
  const ModelConfig bert = parse_hf_config(R"({"model_type": "bert", "hidden_size": 256, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000})", "bert");
  const Options o = serving(DType::bf16, 8, 128);
  const Analysis a = prepare(build_model(bert), o);
  CHECK(count_op(a.kernels, "flash_attention") == 2);
  for (const Kernel& k : a.kernels.kernels)
    if (k.op == "flash_attention") {
      CHECK(k.flops == doctest::Approx(2.0 * 8 * 4 * 128 * 128 * (64 + 64)));
      CHECK(k.note.find("(full)") != std::string::npos);
    }
  // T5's encoder adds its relative position bias [batch, heads, queries, keys]: every pair, and
  // the bias read beside Q, K, V and O (BF16); the decoder's causal mask inside that bias is
  // not known to the kernel either, and its cross-attention's bias (zeros plus the padding
  // mask, as HF materialises it) is as large.
  const ModelConfig t5 = read_hf_config(test::source_dir() + "/tests/data/flan_t5_base.json");
  const Analysis e = prepare(build_model(t5), o);
  int encoder = 0, decoder = 0;
  for (const Kernel& k : e.kernels.kernels) {
    if (k.op != "flash_attention") continue;
    const std::string& node = e.graph.nodes[static_cast<size_t>(k.node)].name;
    CHECK(k.flops == doctest::Approx(2.0 * 8 * 12 * 128 * 128 * (64 + 64)));
    CHECK(k.note.find("(full)") != std::string::npos);
    const double qkvo = 4.0 * 8 * 12 * 128 * 64 * 2;
    CHECK(k.bytes == doctest::Approx(qkvo + 8.0 * 12 * 128 * 128 * 2));
    (node.rfind("encoder", 0) == 0 ? encoder : decoder) += 1;
  }
  CHECK(encoder == 12);
  CHECK(decoder == 2 * 12);  // self-attention and cross-attention
}

TEST_CASE("generation: BART and Marian encode the prompt once and decode from their start token") {
  // Parameters of the checkpoints, as published (the head tied to the shared embedding,
  // counted once; final_logits_bias is a buffer): facebook/bart-base 139,420,416 (learned
  // positions of 1024 + 2 rows); Helsinki-NLP/opus-mt-en-de 74,410,496 (the sinusoidal
  // tables are embedding weights too).
  const ModelConfig bart = read_hf_config(test::source_dir() + "/tests/data/bart_base.json");
  const ModelConfig marian = read_hf_config(test::source_dir() + "/tests/data/opus_mt_en_de.json");
  CHECK(parameter_count(build_model(bart), false) - 50265 == 139420416);
  CHECK(parameter_count(build_model(marian), false) - 58101 == 74410496);
  for (const ModelConfig* c : {&bart, &marian}) {
    CAPTURE(c->model_type);
    const Decoder d = config_decoder(*c);
    CHECK(d.encoder_decoder());
    CHECK(d.prompt_encoded());
    CHECK(d.tied_head_weight == "lm_head.weight");
    CHECK(parameter_count(d.prefill) == parameter_count(build_model(*c)));
    CHECK(node_count(d.step, [](const Node& n) { return n.name.rfind("model.encoder.", 0) == 0; }) == 0);
    CHECK(node_count(d.step, [](const Node& n) { return n.name.find("encoder_attn.k_proj/") != std::string::npos; }) == 0);
    const int64_t layers = c->decoder_layers, heads = c->heads, hd = c->head_dim;
    for (int64_t batch : {1, 4}) {
      const GenerationReport g = generate(d, serving(DType::f16, batch), 200, 20, "h100");
      // The decoder's start token and 20 new ones, and the encoder's 200, in every layer.
      CHECK(g.kv_cache_bytes == 2.0 * layers * heads * hd * (1 + 20 + 200) * batch * 2);
      CHECK(g.samples.front().kv_len == 1);
      CHECK(g.samples.front().latency_ms >= g.weight_read_ms);
    }
    // A longer prompt: a longer encoder pass and cross-attention.
    CHECK(generate(d, serving(DType::f16, 8), 500, 8, "h100").ttft_ms > generate(d, serving(DType::f16, 8), 50, 8, "h100").ttft_ms);
    // The encoder's table holds the prompt and the decoder's its tokens, each on its own.
    GenerationOptions g;
    g.prompt = c->max_positions;
    g.new_tokens = c->max_positions - 1;
    CHECK_NOTHROW(prepare_generation(d, serving(DType::f16, 1), g));
    g.new_tokens = c->max_positions;
    CHECK_THROWS_WITH_AS(prepare_generation(d, serving(DType::f16, 1), g), doctest::Contains("learned positions"), InputError);
    g.prompt = c->max_positions + 1;
    g.new_tokens = 1;
    CHECK_THROWS_WITH_AS(prepare_generation(d, serving(DType::f16, 1), g), doctest::Contains("the encoder's"), InputError);
  }
}

TEST_CASE("generation: mBART, Pegasus and M2M100 (NLLB) are the BART family with pre-LayerNorm layers") {
  // facebook/nllb-200-distilled-600M: 615,073,792 parameters, as published (its sinusoidal
  // position tables, 2 x 1026 rows, are buffers; no final_logits_bias).
  const ModelConfig nllb = read_hf_config(test::source_dir() + "/tests/data/nllb_200_distilled_600m.json");
  CHECK(nllb.pre_norm);
  const LoadedModel m = build_model(nllb);
  CHECK(parameter_count(m, false) - 2 * 1026 * 1024 == 615073792);
  CHECK(node_count(m, [](const Node& n) { return n.name.rfind("final_logits_bias", 0) == 0; }) == 0);
  // Each stack ends in its own LayerNorm; pre-LayerNorm layers norm a block's input, so a
  // layer's first LayerNorm reads the residual stream, not an Add's output inside the layer.
  for (const char* norm : {"model.encoder.layer_norm", "model.decoder.layer_norm"})
    CHECK(node_count(m, [&](const Node& n) { return n.name.rfind(norm, 0) == 0; }) > 0);
  CHECK(node_count(m, [](const Node& n) { return n.name.find("layernorm_embedding") != std::string::npos; }) == 0);
  // Positions counted over the non-padding token ids (encoder and decoder), a step's from its
  // cached length on.
  CHECK(node_count(m, [](const Node& n) { return n.op_type == "CumSum"; }) == 2);
  const Decoder nd = config_decoder(nllb);
  CHECK(node_count(nd.step, [](const Node& n) { return n.name.find("embed_positions/plus_past") != std::string::npos; }) == 1);
  CHECK(generate(nd, serving(DType::bf16, 4), 128, 64, "h100").tpot_ms > 0);
  // mBART: pre-LayerNorm with the embedding LayerNorm and learned positions from row 2;
  // Pegasus: sinusoidal positions from row 0, no embedding LayerNorm, final_logits_bias.
  const std::string sizes = R"("d_model": 256, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
      "decoder_attention_heads": 4, "encoder_ffn_dim": 512, "decoder_ffn_dim": 512, "vocab_size": 1000,
      "max_position_embeddings": 128})";
  const ModelConfig mbart = parse_hf_config(R"({"model_type": "mbart", )" + sizes, "mbart");
  const ModelConfig pegasus = parse_hf_config(R"({"model_type": "pegasus", )" + sizes, "pegasus");
  CHECK(mbart.pre_norm);
  CHECK(mbart.embedding_norm);
  CHECK(mbart.position_offset == 2);
  CHECK(pegasus.pre_norm);
  CHECK_FALSE(pegasus.embedding_norm);
  CHECK(pegasus.position_offset == 0);
  CHECK(pegasus.activation == "relu");
  const int64_t d = 256, f = 512, attn = 4 * (d * d + d), ffn = d * f + f + f * d + d;
  const int64_t layers = 2 * (attn + ffn + 2 * 2 * d) + 2 * (2 * attn + ffn + 3 * 2 * d) + 2 * 2 * d;  // + final norms
  CHECK(parameter_count(build_model(pegasus), false) - 1000 == 1000 * d + 2 * 128 * d + layers);
  CHECK(parameter_count(build_model(mbart), false) - 1000 == 1000 * d + 2 * 130 * d + layers + 2 * 2 * d);
}

TEST_CASE("generation: Whisper encodes 30 s of audio in the prefill and caches its 1500 positions for cross-attention") {
  // Parameters of the checkpoints (the head tied to the token embedding, counted once):
  // whisper-tiny 37,760,640; whisper-large-v3 1,543,490,560 (128 mel bins, 51,866 tokens).
  const ModelConfig tiny = parse_hf_config(R"({"model_type": "whisper", "d_model": 384, "encoder_layers": 4,
      "decoder_layers": 4, "encoder_attention_heads": 6, "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
      "decoder_ffn_dim": 1536, "vocab_size": 51865})", "whisper-tiny");
  CHECK(tiny.mel_bins == 80);
  CHECK(tiny.source_positions == 1500);
  CHECK(parameter_count(build_model(tiny)) - 51865 * 384 == 37760640);
  const ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/whisper_large_v3.json");
  const LoadedModel forward = build_model(c);
  CHECK(parameter_count(forward) - 51866 * 1280 == 1543490560);
  // input_features [batch, 128 mel bins, 3000 frames] and the decoder's tokens.
  REQUIRE(forward.model.graph.inputs.size() == 2);
  const Decoder d = config_decoder(c);
  CHECK(d.encoder_decoder());
  CHECK_FALSE(d.prompt_encoded());
  CHECK(d.encoder_tokens == 1500);
  CHECK(d.layers == 32);
  CHECK(d.kv_heads == 20);
  CHECK(d.head_dim == 64);
  CHECK(d.tied_head_weight == "proj_out.weight");
  // A step: the decoder's layers without the cross-attention's key and value projections (the
  // cache holds them), its embeddings, final norm and the head.
  const int64_t h = 1280, f = 5120;
  const int64_t layer = (4 * h * h + 3 * h) + (2 * h * h + 2 * h) + 3 * 2 * h + (h * f + f) + (f * h + h);
  CHECK(parameter_count(d.step) - 51866 * h == 51866 * h + 448 * h + 32 * layer + 2 * h);
  CHECK(node_count(d.step, [](const Node& n) { return n.name.rfind("model.encoder.", 0) == 0; }) == 0);
  // Its prompt is the decoder's (the task's special tokens); every layer keeps the decoder's
  // prompt + new tokens and the encoder's 1500 positions.
  for (int64_t batch : {1, 4}) {
    const GenerationReport g = generate(d, serving(DType::f16, batch), 4, 100, "h100");
    CHECK(g.kv_cache_bytes == 2.0 * 32 * 20 * 64 * (4 + 100 + 1500) * batch * 2);
    CHECK(g.decoder_tokens == 104);
    CHECK(g.encoder_tokens == 1500);
    CHECK(g.samples.front().kv_len == 4);
    CHECK(g.samples.back().kv_len == 103);
    CHECK(g.samples.front().latency_ms >= g.weight_read_ms);
  }
  // The encoder's work does not depend on the prompt: 4 or 256 prompt tokens differ by the
  // decoder's share alone.
  const GenerationReport four = generate(d, serving(DType::f16, 1), 4, 8, "h100");
  const GenerationReport more = generate(d, serving(DType::f16, 1), 256, 8, "h100");
  CHECK(more.ttft_ms > four.ttft_ms);
  CHECK(more.ttft_ms < 1.5 * four.ttft_ms);
  // 448 learned decoder positions hold the prompt and the new tokens.
  GenerationOptions too_long;
  too_long.prompt = 4;
  too_long.new_tokens = 445;
  CHECK_THROWS_WITH_AS(prepare_generation(d, serving(DType::f16, 1), too_long), doctest::Contains("448"), InputError);
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "whisper", "d_model": 384, "encoder_layers": 4,
      "decoder_layers": 4, "encoder_attention_heads": 6, "decoder_attention_heads": 4, "encoder_ffn_dim": 1536,
      "vocab_size": 100})", "w"), doctest::Contains("different heads"), InputError);
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "whisper", "d_model": 384, "encoder_layers": 4,
      "decoder_layers": 4, "encoder_attention_heads": 6, "encoder_ffn_dim": 1536, "vocab_size": 100,
      "max_source_positions": 100000})", "w"), doctest::Contains("max_source_positions"), InputError);
}

TEST_CASE("generation: the prefill's share of the peak and the decode's of the bandwidth stay below 1") {
  // Every kernel is priced at or above its roofline, so neither utilization can reach 1,
  // whatever the GPU, batch or precision; a decode step reads at least its weights.
  const Decoder d = config_decoder(small_llama(8, 2));
  for (const std::string gpu : {"t4", "a100-80gb", "h100", "h200", "l4", "b200", "mi300x"})
    for (const DType dt : {DType::f16, DType::bf16, DType::f8e4m3fn})
      for (const int64_t batch : {1, 16, 256}) {
        CAPTURE(gpu);
        CAPTURE(batch);
        CAPTURE(static_cast<int>(dt));
        const GenerationReport g = generate(d, serving(dt, batch), 256, 32, gpu, 3);
        CHECK(g.prefill_mfu() > 0);
        CHECK(g.prefill_mfu() < 1);
        CHECK(g.decode_mbu > 0);
        CHECK(g.decode_mbu < 1);
        const double bw = GpuDatabase::builtin().resolve(gpu).mem_bw_gbps;
        CHECK(g.decode_bytes_per_token >= g.weight_read_ms * 1e-3 * bw * 1e9 * (1 - 1e-9));
      }
}
