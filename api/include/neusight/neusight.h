// neusight.h - the public entry point: analyse an ONNX model for a GPU.
//
//   #include <neusight/neusight.h>
//   neusight::Options opts; opts.dims.batch = 8; opts.dims.seq = 512;
//   opts.dims.shapes["pixel_values"] = {8, 3, 224, 224};  // --shape: a whole input shape
//   neusight::Report r = neusight::analyze(model_proto, neusight::GpuDatabase::builtin().resolve("b200"), opts);
//   printf("%.3f ms\n", r.e2e_latency_ms);
//
// Link with the `neusight::neusight` CMake target (find_package(neusight)).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "neusight/gpu.h"
#include "neusight/lowering.h"
#include "neusight/model_builder.h"
#include "neusight/onnx_frontend.h"
#include "neusight/parallel.h"
#include "neusight/precision.h"
#include "neusight/predictor.h"
#include "neusight/report.h"
#include "neusight/shape_inference.h"
#include "neusight/tiling.h"

namespace onnx {
class ModelProto;
}

namespace neusight {

// --recompute: none, full activation checkpointing (Hugging Face's gradient checkpointing,
// Megatron-LM's --recompute-granularity full), or the attention cores alone (Megatron-LM's
// --recompute-granularity selective).
enum class Recompute { none, full, selective };
const char* recompute_name(Recompute r);  // "none" | "full" | "selective"

struct Options {
  DimBindings dims;
  Mode mode = Mode::inference;
  Fusion fusion = Fusion::eager;
  Attention attention = Attention::automatic;  // --attention (LoweringOptions::attention)
  DType dtype = DType::undefined;  // undefined = auto (from the model's tensors)
  // --kv-dtype: the KV cache's element type (LoweringOptions::kv_cache_dtype; a generation's
  // cache bytes); undefined = the activations'.
  DType kv_dtype = DType::undefined;
  PredictorKind predictor = PredictorKind::neusight;  // make_predictor (precision.h)
  std::string weights_dir;             // "" = built-in weights
  // What the predicted kernel times include (precision.h). "device" (the default for whole
  // models): a model's kernels launched one by one from the host by a framework, each its GPU
  // time but at least the host's dispatch of its op (the wall clock of a PyTorch eager run).
  // "kernel": GPU time alone (profiler durations, CUDA graphs). "eager": every kernel as if
  // timed alone from PyTorch, like the training data (framework dispatch in every small
  // kernel); the `kernels` command predicts in this convention by default.
  Timing timing = Timing::device;
  // --host-dispatch-us: device timing's dispatch of one op by the host, in microseconds (its
  // 80% interval bounds scale with it); 0 = precision.h kHostDispatchMs, the median of the
  // measured hosts. Only with Timing::device (predict() rejects it otherwise).
  double host_dispatch_us = 0;
  ParallelConfig parallel;             // multi-GPU training (--parallel); dims.batch is then global
  // Training: the optimizer the step updates with (--optimizer; LoweringOptions::optimizer),
  // and whose state the memory footprint holds.
  Optimizer optimizer = Optimizer::sgd;
  // Training: activation checkpointing (--recompute full; parallel.h plan_checkpoints): the
  // forward between checkpoints runs again in the backward pass, its activations not kept;
  // selective: the attention cores alone (plan_attention_recompute).
  Recompute recompute = Recompute::none;
  // Training with low-rank adapters (--lora; LoweringOptions::lora): the model's parameters
  // frozen, the adapters' alone updated and held with gradients and optimizer state.
  LoraOptions lora;
  // --sparsity 2:4 (LoweringOptions::sparsity): the linear layers' weights pruned 2:4, in
  // inference; each pruned GEMM runs on sparse matrix units where the GPU has them for its
  // math and where that is the faster (precision.h runs_sparse_2_4), its weight held compressed.
  SparsityOptions sparsity;
  // LoweringOptions::serving_kernels (set by --generate under --fusion full).
  bool serving_kernels = false;
  // --image-size: the image a --config vision-language model whose processor takes any size
  // (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Mistral 3, Llama 4, LLaVA-NeXT) reads, height and width in
  // pixels before the processor; 0: the builder's default (model_builder.h set_image_size). Read
  // where a config is built.
  int64_t image_height = 0, image_width = 0;
  // --images: images in each sequence of such a model (its tower built); 0: one.
  int64_t images = 0;
  // --train-tokens: training, the tokens to train on (Throughput::train_tokens); 0: none.
  // predict() throws InputError when the step's tokens are not known (--batch and --seq).
  double train_tokens = 0;
  // --gpu-cost: what one GPU costs an hour (USD), by GPU name (Gpu::name; "" for every GPU
  // not named); the reports add the cost of their work (Throughput, GenerationReport).
  std::map<std::string, double> gpu_cost_per_hour;
  // The hourly cost of `gpu` (0 when none is given).
  double gpu_cost(const Gpu& gpu) const {
    auto it = gpu_cost_per_hour.find(gpu.name);
    if (it == gpu_cost_per_hour.end()) it = gpu_cost_per_hour.find("");
    return it == gpu_cost_per_hour.end() ? 0.0 : it->second;
  }
};

// Runs every stage. Throws InputError / RuntimeError (graph.h).
Report analyze(const onnx::ModelProto& model, const Gpu& gpu, const Options& options);
Report analyze(const LoadedModel& model, const Gpu& gpu, const Options& options);

// The shape-inferred graph of the last stage, for writers that need tensor shapes.
struct Analysis {
  Graph graph;  // shapes inferred, dims bound
  KernelList kernels;
  ShapeResult shapes;
  // One GPU's memory for the run, its capacity unset (predict sets the GPU's); none under
  // --parallel (the plan counts each GPU's) or in a generation's analyses (it counts its own).
  std::optional<MemoryFootprint> memory;
  // Training under --recompute full: the checkpoints, segments and kept tensors (the kernels
  // include each segment's recomputed forward).
  std::optional<CheckpointPlan> checkpoints;
  BoundDims bound;  // the batch and sequence length bound on the inputs (a report's samples and tokens)
  // --lora: the adapters' bytes on one copy of the model (tensor parallelism then splits some
  // of them over the GPUs); 0 without adapters.
  double lora_bytes = 0;
  // --sparsity 2:4: the weight bytes the pruned weights' compression saves on one copy of the
  // model (held compressed where the GPU runs them sparse); 0 without.
  double sparse_saved_bytes = 0;
};
Analysis prepare(const LoadedModel& model, const Options& options);
// The report on `gpu` at the largest batch (the dim options.dims.batch binds; its value is
// ignored) whose end-to-end latency is at most `slo_ms` and whose memory fits the GPU, searched
// by doubling from 1 and then bisection (the latency grows with the batch), up to
// Report::kMaxSloBatch; Report::latency_slo says how it ended (not met: the report at batch 1).
// `analyses` (may be null) keeps prepare()'s analysis of each batch for other GPUs' searches.
// Throws InputError when the model has no dim the batch binds, and under --parallel training
// (inference's tp and pp search the global batch; microbatches=M is refused: the batch sets them).
Report predict_for_latency_slo(const LoadedModel& model, const Options& options, const Gpu& gpu, double slo_ms,
                               std::map<int64_t, Analysis>* analyses = nullptr);

// One GPU's memory for a forward pass (inference) or a training step (report.h
// MemoryFootprint) of an analysis made with `options`, `capacity_gib` the GPU's memory.
MemoryFootprint memory_footprint(const Analysis& analysis, const Options& options, double capacity_gib);
Report predict(const Analysis& analysis, const Model& model, const Gpu& gpu, const Options& options);

// ---- LLM generation: a prefill, then decode steps with a KV cache -----------------------

struct GenerationOptions {
  int64_t prompt = 0;      // tokens per sequence in the prefill
  int64_t new_tokens = 0;  // decode steps, one token per sequence each; step j reads prompt + j cached entries
  // Decode steps predicted (at KV lengths spread evenly from the first to the last step; the
  // others interpolated linearly between them), so a long generation costs no more to analyse.
  int samples = 6;
  // Speculative decoding (--speculative): a draft proposes `speculative` tokens per sequence,
  // one step of the model verifies them all (a decode step of speculative + 1 tokens per
  // sequence), and each proposed token is accepted with probability `acceptance`,
  // independently, until the first rejection (Leviathan et al., 2023): a step yields
  // expected_tokens_per_step() tokens. 0: plain decoding.
  int64_t speculative = 0;
  double acceptance = 0;
  // Prefix caching (--prefix-cached, vLLM's automatic prefix caching): the first
  // `cached_prefix` tokens of every prompt (a shared system prompt) are in the cache already,
  // held once for the batch; the prefill computes the rest against them. 0: none.
  int64_t cached_prefix = 0;
};
// (1 - a^(k+1)) / (1 - a) for k proposed tokens at acceptance a (k + 1 at a = 1; 1 at k = 0).
double expected_tokens_per_step(int64_t proposed, double acceptance);

// A decoder as a generation runs it: the forward pass over the prompt and one decode step
// whose inputs include the KV cache (optimum / onnxruntime-genai naming:
// past_key_values.N.key and .value, [batch, kv_heads, past_length, head_dim]).
struct Decoder {
  LoadedModel prefill;
  LoadedModel step;
  bool prefill_is_step = false;  // one graph for both (an ONNX export): the prefill binds the past length to 0
  std::string past_dim;          // the step's symbolic past-length dim
  std::vector<std::string> total_dims;  // symbolic dims that are past + sequence (attention_mask)
  // optimum's merged decoder (decoder_model_merged.onnx): the boolean input that chooses, in
  // an If, the graph without a cache (the prefill: false) or with it (a step: true); empty: none.
  std::string cache_branch;
  int64_t layers = 0, kv_heads = 0, head_dim = 0;
  // Cache tensors per layer: 2 (keys and values), 1 for multi-head latent attention (the latent
  // with the rotary key, which serves as both); none (and no heads) without attention layers.
  int kv_tensors = 2;
  // Layers of sliding-window attention, whose cache keeps only the `window` most recent
  // tokens (as serving engines and HF's sliding-window cache keep it); 0: none.
  int64_t sliding_layers = 0, window = 0;
  // Recurrent layers (Mamba-2, gated DeltaNet: a hybrid or state-space config): each
  // sequence's convolution and scan states, `state_elements` in all, held whatever its length;
  // `layers` counts the attention layers alone.
  int64_t state_layers = 0;
  double state_elements = 0;
  DType kv_dtype = DType::f32;   // the cache's stored element type (--dtype overrides it)
  // The dtype a serving engine loads the checkpoint in when --dtype is not given (a config's:
  // vLLM's --dtype auto, its torch_dtype, FP16 for an FP32 or unnamed one); undefined: the
  // graph's own (an ONNX decoder's weights). predict_generations applies it.
  DType serving_dtype = DType::undefined;
  // The prompt tokens one image fills (LLaVA: its vision tower runs in the prefill); 0: none.
  int64_t image_tokens = 0;
  // The positions a sequence may hold when they are learned (GPT-2's, OPT's and GPTBigCode's
  // tables): the prompt and the new tokens together; 0: no such limit (rotary, ALiBi).
  int64_t max_positions = 0;
  // A config decoder's prefill over a prompt whose first tokens are cached (--prefix-cached):
  // the step graph with the last position's logits alone, built the first time it is asked for
  // and kept (copies of the decoder share it). Empty for an ONNX decoder, whose step graph serves.
  std::function<const LoadedModel&()> cached_prefill;
  // The initializer the LM head reads that is the token embedding's weight, held once
  // (a config's tie_word_embeddings); empty: none.
  std::string tied_head_weight;
  // An encoder-decoder: a step's cross-attention cache holds the encoder's keys and values, of
  // this symbolic dim of the step (empty: a decoder). T5 (`encoder_tokens` 0): the prompt is
  // the encoder's input, the prefill runs the decoder over its start token, and the
  // self-attention cache holds the decoder's tokens alone (step j reads 1 + j). Whisper: the
  // encoder reads a fixed input of `encoder_tokens` positions (30 s of audio) and the prompt is
  // the decoder's (its special tokens): step j reads PROMPT + j, as a decoder's.
  std::string encoder_dim;
  int64_t encoder_tokens = 0;
  // An ONNX encoder-decoder (onnx_seq2seq_decoder): the prefill is the encoder feeding the
  // decoder's first pass, one graph. `token_dim`: the decoder's token input's symbolic length,
  // bound by name (its inputs need not start with the tokens); `encoder_input_dim`: the
  // encoder's token input's length (the prompt; empty where it reads features, as Whisper's);
  // `encoder_bound_dims`: the decoder's other dims that hold the encoder's length (its hidden
  // states', its mask's).
  std::string token_dim, encoder_input_dim;
  std::vector<std::string> encoder_bound_dims;
  // The batch dims of the two graphs' inputs (each's first input's first axis), bound by name:
  // an encoder and a decoder exported apart may name them differently.
  std::vector<std::string> batch_dims;
  bool encoder_decoder() const { return !encoder_dim.empty(); }
  // Whether the prompt is the encoder's input (T5), the decoder starting from one token.
  bool prompt_encoded() const { return encoder_decoder() && encoder_tokens == 0; }
  // Per sequence and layer, for a prompt of `prompt` tokens: the decoder's tokens cached before
  // the first decode step (the prompt; T5's start token), and the encoder's in the
  // cross-attention cache (none for a decoder; T5's prompt; Whisper's audio positions).
  int64_t decoder_cached(int64_t prompt) const { return prompt_encoded() ? 1 : prompt; }
  int64_t encoder_cached(int64_t prompt) const {
    return !encoder_decoder() ? 0 : prompt_encoded() ? prompt : encoder_tokens;
  }
};

// From a Hugging Face config (a decoder family with a KV-cache step; InputError otherwise).
Decoder config_decoder(const ModelConfig& config);
// The multi-token-prediction module of a config that has one (DeepSeek-V3:
// num_nextn_predict_layers) as speculative decoding's draft: one decoder layer of the model's
// kind (MoE, latent attention) after the module's input norms and eh_proj (its input: the
// token's embedding and the model's last hidden state), with the embedding and the head,
// which the module shares with the model (their weights counted once more here).
// InputError when the config has none.
Decoder mtp_decoder(const ModelConfig& config);
// From an ONNX encoder-decoder export in two files (optimum's encoder_model.onnx and
// decoder_model_merged.onnx: T5, BART, Marian, Whisper): the decoder's past_key_values.N.decoder
// and .encoder inputs, its encoder_hidden_states input (fed by the encoder's first output), its
// token input (input_ids or decoder_input_ids) and the use_cache_branch switch. An encoder of
// token ids reads the prompt (the decoder starts from one token); an encoder of features
// (Whisper) reads what `options`' dims bind, and its output's length is the cross-attention
// cache's. InputError naming what is missing.
Decoder onnx_seq2seq_decoder(LoadedModel encoder, LoadedModel decoder, const Options& options);
// From an ONNX decoder export with past_key_values.N.key/value inputs (or onnxruntime's
// stacked past_N, [2, batch, heads, past_length, head_dim]); InputError naming the
// file when it has none or their shapes are not [batch, kv_heads, past, head_dim].
Decoder onnx_decoder(LoadedModel model);

// The GPU-independent part: the prefill and the sampled decode steps, shapes bound and lowered.
struct GenerationAnalysis {
  GenerationOptions gen;
  int64_t batch = 1;
  // Pipeline parallelism (--parallel pp): stages, and the batch's microbatches of at most
  // micro_batch sequences, whose prefill and decode steps the analyses below are.
  int pp = 1, microbatches = 1;
  int64_t micro_batch = 1;
  Analysis prefill;
  std::vector<int64_t> kv;        // past length of each sampled decode step
  std::vector<Analysis> steps;
  double weight_bytes = 0, embedding_bytes = 0, activation_bytes = 0;
  // The LM head's weight when it is the embedding's (Decoder::tied_head_weight): in
  // weight_bytes as every step reads it, held once.
  double tied_weight_bytes = 0;
  // Expert weights a decode step (one token per sequence) leaves unread: the experts its
  // tokens do not reach (mixtures of experts; 0 otherwise).
  double unread_expert_bytes = 0;
  // Weights the prefill reads and no decode step does (LLaVA's vision tower and projector).
  double prefill_only_bytes = 0;
  double kv_cache_bytes = 0;  // the attention layers' keys and values and the recurrent layers' states
  double kv_shared_bytes = 0;  // of them, a cached prefix's, held once for the batch (--prefix-cached)
  double lora_bytes_per_gpu = 0;  // --lora: the adapters one GPU holds (Analysis::lora_bytes is one copy's)
  double state_bytes = 0;     // the recurrent states alone
  DType kv_dtype = DType::f32;  // the cache's element type
  // Speculative decoding with a draft model: its decoder and its own generation (prefill and
  // plain decode steps at the same KV lengths); empty without one (a draft that costs nothing,
  // such as prompt lookup).
  std::shared_ptr<const Decoder> draft_decoder;
  std::shared_ptr<const GenerationAnalysis> draft;
};
// Throws InputError for a prompt or new-token count below 1 (or a batch below 1), and for a
// speculative count below 0 or an acceptance outside (0, 1] (with a count), and for
// speculative decoding under pipeline parallelism. `draft`: the draft model of speculative
// decoding (it runs the same batch and options).
GenerationAnalysis prepare_generation(const Decoder& decoder, const Options& options, const GenerationOptions& gen,
                                      const Decoder* draft = nullptr);
// The prefill's report (nodes, classes, e2e = the prefill) with Report::generation filled.
Report predict_generation(const GenerationAnalysis& analysis, const Decoder& decoder, const Gpu& gpu,
                          const Options& options);

// Serving targets a generation's batch is chosen for (--tpot-slo, --ttft-slo; 0: none): the
// mean time per output token and the time to the first token, in ms.
struct ServingTargets {
  double tpot_ms = 0, ttft_ms = 0;
  bool any() const { return tpot_ms > 0 || ttft_ms > 0; }
};

// --tpot-slo / --ttft-slo: the generation at the largest batch whose mean time per output
// token and time to the first token are within `targets` on `gpu`, searched (bisection; both
// grow with the batch) from 1 up to the sequences that fit at batch 1
// (GenerationReport::max_batch; 65536 when the GPU's memory is unknown). options.dims.batch is
// ignored. The report's GenerationReport::tpot_slo says the targets, whether any batch meets
// them (else the report is batch 1's), and the next batch's TPOT and TTFT (or that the memory
// stopped the search). `cache` keeps the analyses by batch between GPUs (they do not depend
// on the GPU).
Report predict_generation_for_targets(const Decoder& decoder, const Options& options, const GenerationOptions& gen,
                                      const Decoder* draft, const Gpu& gpu, const ServingTargets& targets,
                                      std::map<int64_t, GenerationAnalysis>* cache = nullptr);
// One generation per GPU: at options.dims.batch, or (targets.any()) at the batch
// predict_generation_for_targets finds for each. Without options.dtype, in the decoder's
// serving_dtype where it has one (the reports' dtype_source: config).
std::vector<Report> predict_generations(const Decoder& decoder, const Options& options, const GenerationOptions& gen,
                                        const Decoder* draft, const std::vector<Gpu>& gpus,
                                        const ServingTargets& targets = {});

const char* version();

}  // namespace neusight
