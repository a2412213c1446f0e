// report.h - the report structure every output format is written from.
//
// Takes: the results of all stages (built by analyze() in api/).
// Gives: terminal table, JSON (CLI contract), CSV, and the inputs of the HTML report and
// the annotated ONNX model.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "neusight/gpu.h"
#include "neusight/lowering.h"
#include "neusight/parallel.h"
#include "neusight/predictor.h"
#include "neusight/tiling.h"

namespace neusight {

struct KernelReport {
  Kernel kernel;
  Tiling tiling;
  Prediction prediction;
};

struct NodeReport {
  std::string name;
  std::string op_type;
  std::string domain;
  std::vector<TensorInfo> outputs;
  std::vector<KernelReport> kernels;
  // Why the node launches no kernel of its own ("constant folded", "view", "host (shape
  // computation)", ...); empty when it does or when another node's kernel does its work.
  std::string no_kernel;
  double latency_ms = 0;  // sum over its kernels, all phases
  // The 80% interval of that sum (predictor.h IntervalSum: repeated kernels err together,
  // distinct ones are correlated by kKernelErrorCorrelation).
  double latency_low_ms = 0, latency_high_ms = 0;
};

// An LLM generation (--generate) on one GPU: the prefill of the prompt, then decode steps of
// one token per sequence, each reading the KV cache and appending its own entry.
struct GenerationStep {
  int64_t kv_len = 0;      // cache entries per sequence before the step (past length)
  double latency_ms = 0;   // one step
  double low_ms = 0, high_ms = 0;  // its 80% interval (the step's e2e_low_ms / e2e_high_ms)
  std::map<std::string, double> by_class;  // ms per kernel class
  double attention_ms = 0;                 // of those, the fused attention kernels' (Report::attention_ms)
};

struct GenerationReport {
  int64_t batch = 0, prompt = 0, new_tokens = 0;
  int64_t cached_prefix = 0;  // prompt tokens already cached, held once for the batch (--prefix-cached)
  double ttft_ms = 0;       // time to first token: the prefill
  double tpot_ms = 0;       // time per output token: mean decode step
  double tpot_last_ms = 0;  // the last decode step (longest cache)
  double total_ms = 0;      // prefill + every decode step
  double tokens_per_s = 0;  // batch x new tokens / total
  // The batch's sequences over the total: requests served a second at this batch.
  double requests_per_s() const { return new_tokens > 0 ? tokens_per_s / double(new_tokens) : 0; }
  // 80% intervals of the four above: the prefill's and every decode step's bounds added up as
  // errors that move together (the same kernels' predictions make them all), tokens/s from the
  // total's bounds.
  double ttft_low_ms = 0, ttft_high_ms = 0, tpot_low_ms = 0, tpot_high_ms = 0;
  double total_low_ms = 0, total_high_ms = 0, tokens_per_s_low = 0, tokens_per_s_high = 0;
  // The kernels of the whole generation, each weighted by how often it runs per total_ms (the
  // prefill's once, a sampled decode step's by its share of the interpolated steps, per token
  // yielded): what compare's tokens/s speed-up interval is drawn from (predictor.h
  // ratio_interval).
  IntervalSum time;
  // Memory: the KV cache at the end (2 x layers x kv_heads x head_dim x tokens x batch x
  // element size; one tensor for a latent cache, the window for sliding-window layers), the weights
  // held (a tied LM head once, as the embedding; of them the embedding table, read by a gather:
  // a decode step reads the rest), the largest activation working set of one prefill kernel, and
  // their sum.
  double kv_cache_bytes = 0, weight_bytes = 0, embedding_bytes = 0, activation_bytes = 0, memory_bytes = 0;
  // --lora: the adapters served unmerged among the weights (their bytes, rank and count; 0
  // rank: none).
  double lora_bytes = 0;
  int64_t lora_rank = 0, lora_adapters = 0;
  // The weights a decode step reads (all but the embedding table and, in a mixture of
  // experts, the experts its tokens do not reach on average) over the DRAM bandwidth: what no
  // decode step can beat.
  double weight_read_ms = 0;
  // How hard each phase works its GPU (one GPU's, under tp): the prefill's model FLOPs over
  // the time to first token against the dense peak of its GEMMs' math (MFU, report.h
  // Throughput), and the DRAM bytes the decode steps' kernels move per output token over the
  // time per token (weights, the KV cache, activations; collectives are not DRAM traffic)
  // against the spec bandwidth (MBU, model bandwidth utilization).
  double prefill_tflops = 0, prefill_peak_tflops = 0;
  std::string prefill_peak_math;
  double decode_bytes_per_token = 0, decode_gbps = 0, decode_mbu = 0;
  // --gpu-cost: one GPU's hourly cost (USD; 0: not given) and the cost of a million output
  // tokens at tokens_per_s on the tp GPUs, with its 80% interval (from tokens/s's).
  double usd_per_gpu_hour = 0, usd_per_m_tokens = 0, usd_per_m_tokens_low = 0, usd_per_m_tokens_high = 0;
  double prefill_mfu() const { return prefill_peak_tflops > 0 ? prefill_tflops / prefill_peak_tflops : 0; }
  int64_t layers = 0, kv_heads = 0, head_dim = 0;
  int kv_tensors = 2;                          // 1: a latent cache (multi-head latent attention)
  std::string kv_dtype;                        // the cache's element type ("bf16", "fp8", ...)
  int64_t sliding_layers = 0, window = 0;      // layers whose cache keeps only the last `window` tokens
  // Recurrent layers (Mamba-2, gated DeltaNet), whose per-sequence states (convolution and scan)
  // the cache holds beside the attention layers' keys and values, and those states' bytes (in
  // kv_cache_bytes).
  int64_t state_layers = 0;
  double state_bytes = 0;
  // An encoder-decoder: each layer's cache holds the decoder's tokens (T5: its start token and
  // the new ones; Whisper: the prompt and the new ones) and, for cross-attention, the encoder's
  // (T5: the prompt's; Whisper: its audio positions). Both 0 for a decoder.
  int64_t decoder_tokens = 0, encoder_tokens = 0;
  bool encoder_decoder() const { return encoder_tokens > 0; }
  // Tensor parallelism (--parallel tp=N): the GPUs one copy of the model runs on, their link,
  // and one GPU's memory (its 1/tp of the split weights and of the KV heads). Every time
  // above is then one GPU's, its TP all-reduces (class "collective") included, and
  // weight_read_ms is one GPU's share of the weights over its bandwidth.
  int tp = 1;
  int ep = 1;  // --parallel ep=N: a mixture's experts spread over N of the tp GPUs (the busiest GPU's times)
  std::string link;
  double memory_per_gpu_bytes = 0;
  // Pipeline parallelism (--parallel pp=N, vLLM's --pipeline-parallel-size): pp stages of tp
  // GPUs each, the batch over `microbatches` microbatches of at most `micro_batch` sequences
  // (one per stage, as vLLM's virtual engines, at most the batch). TTFT and each decode step
  // are then the pipeline's (parallel.h pipelined_prefill_ms, pipelined_step_ms); a class's
  // time is one GPU's, its stage's kernels for every microbatch (the stages' mean), and
  // "pipeline" the rest: the stages' idle time and their sends. Memory is the fullest stage's
  // GPU's. The stages' times for one microbatch: the prefill's and the last sampled step's,
  // and the longest send between stages (pp_link).
  int pp = 1;
  int microbatches = 1;
  int64_t micro_batch = 0;
  int gpus() const { return tp * pp; }  // the GPUs one copy of the model runs on
  std::string pp_link;
  std::vector<double> prefill_stage_ms, step_stage_ms;
  double prefill_hop_ms = 0, step_hop_ms = 0;
  // The share of a GPU's memory a serving engine takes for weights, KV cache and activations
  // (vLLM's default gpu_memory_utilization, 0.9).
  static constexpr double kServingMemoryFraction = 0.9;
  // Sequences of prompt + new tokens whose KV cache fits one GPU's memory beside its weights
  // and this batch's activations, at kServingMemoryFraction of its capacity, as a serving
  // engine sizes its cache; 0 when the rest alone does not fit or the memory is unknown.
  int64_t max_batch = 0;
  // The longest sequence (prompt + new tokens) whose KV cache fits at this batch beside the
  // same weights and activations, at most the learned positions (a decoder's; 0: unknown, an
  // encoder-decoder or a draft model's generation, or the memory is short even without a cache).
  int64_t max_tokens = 0;
  bool max_tokens_positions = false;  // max_tokens is the learned positions, not the memory
  // Speculative decoding (--speculative): tokens proposed per step (0: plain decoding), their
  // acceptance, the tokens a step yields, and at the first sampled step the verifying step's
  // time and one draft step's (0 without a draft model). TPOT, total and tokens/s are then per
  // output token; the KV cache and memory include the draft's.
  struct Speculative {
    int64_t proposed = 0;
    double acceptance = 0, tokens_per_step = 0, verify_ms = 0, draft_step_ms = 0, draft_ttft_ms = 0;
    double draft_weight_bytes = 0, draft_kv_cache_bytes = 0;
    std::string draft;  // the draft model ("" without one)
  } speculative;
  // --tpot-slo / --ttft-slo: the serving targets the batch was chosen for (0: none), whether
  // batch `batch` meets them and fits (false: not even batch 1 does), and the batch above it
  // that does not: its TPOT and TTFT, whether its TPOT is over its target, and whether its
  // sequences fit (next_batch 0: `batch` is the most that fit at batch 1).
  struct TpotSlo {
    double tpot_ms = 0, ttft_ms = 0;
    bool met = false;
    int64_t next_batch = 0;
    double next_tpot_ms = 0, next_ttft_ms = 0;
    bool next_over_tpot = false;
    bool next_fits = true;
    bool active() const { return tpot_ms > 0 || ttft_ms > 0; }
    // What stopped the search: "none" (not met), "tpot" or "ttft" (the next batch's time per
    // output token or to the first token) or "memory".
    const char* limit() const {
      return !met ? "none" : next_batch > 0 && next_fits ? (next_over_tpot ? "tpot" : "ttft") : "memory";
    }
  } tpot_slo;
  std::vector<GenerationStep> samples;  // the decode steps predicted; the others interpolated linearly
  // The nodes of the last decode step predicted (the longest cache; under speculative decoding
  // the verifying step), in graph order: where a step's time goes.
  std::vector<NodeReport> step_nodes;
  int64_t step_kv_len = 0;
  double step_node_ms = 0;  // that step's latency (its nodes' and extra kernels')
  std::vector<double> step_ms;          // every decode step (interpolated), for charts
  std::map<std::string, double> prefill_by_class, decode_by_class;  // ms; decode: all steps
  double prefill_attention_ms = 0, decode_attention_ms = 0;          // of those, the fused attention kernels'
  std::string execution;  // how it was predicted, e.g. "kernel timing, FlashAttention (--fusion full)"
};

// Tensor-core GEMMs whose operand or output rows are not a multiple of 16 bytes: libraries run
// them on narrow-load kernels, priced here as the aligned ones (one warning per report).
struct UnalignedGemms {
  int64_t count = 0;
  double share = 0;     // of the report's predicted time, 0-1
  std::string longest;  // the longest one: "node: MxK by KxN in dtype: a multiple of E elements is aligned"
};
// The warning of `u`; with share_high > share (reports of several GPUs joined), the share as a
// range over `gpus` GPUs.
std::string unaligned_gemms_warning(const UnalignedGemms& u, double share_high = -1, int gpus = 1);

// A warning about one GPU that the other GPUs of a list may give word for word but for the GPU
// and its numbers (a power-limited clock, missing matrix units, a run larger than its memory).
// A report says it as gpu_warning_text() among Report::warnings; the CLI says those of a GPU
// list that share a kind and a subject once (gpu_warnings_joined).
struct GpuWarning {
  enum class Kind { power_limited, no_matrix_units, memory, generation_memory };
  Kind kind = Kind::power_limited;
  std::string gpu;  // the GPU's name
  // What the GPUs of one joined line share: empty (power_limited); "bf16 matrix units: bf16
  // GEMMs are predicted as fp32-simt with bf16 operands" (no_matrix_units); "the training step
  // needs 148.0 GiB (weights 0.6, ...)" (memory); "generation needs 132.4 GiB (...)"
  // (generation_memory).
  std::string subject;
  // power_limited: the board's power, its FP32 lanes, its process node and the fraction of the
  // boost clock its FP32 SIMT GEMMs are predicted at.
  double power_w = 0, process_nm = 0, clock_fraction = 1;
  int64_t lanes = 0;
  // The memory kinds: the GPU's memory; memory: the GPUs of it that hold the run split evenly,
  // and the --parallel axes that split it (a training step: tp, pp, or dp with ZeRO-3; a
  // forward pass: tp).
  double capacity_gib = 0;
  int gpus_to_hold = 0;
  bool training = false;
  // A training step whose activations, not checkpointed, are most of its memory: the warning
  // names --recompute.
  bool activations_most = false;
};
// One GPU's warning, as its report says it.
std::string gpu_warning_text(const GpuWarning& w);
// One line for the warnings of several GPUs of a kind and subject (`alike`, in the list's
// order; with one, gpu_warning_text()).
std::string gpu_warnings_joined(const std::vector<const GpuWarning*>& alike);

// Device memory one GPU needs for the run, in GiB: the weights as held; in training their
// gradients and the optimizer's state (--optimizer: none for SGD, a momentum buffer, Adam's two
// FP32 moments; and an FP32 master copy of 16-bit parameters: what the multi-GPU plan counts,
// parallel.h); and the activations: in inference
// the most alive at once (each tensor from the kernel that writes it to the last that reads
// it), in training all the forward pass writes (kept for the backward pass). A framework's own
// workspace and allocator slack are not counted.
struct MemoryFootprint {
  bool training = false;
  std::string optimizer;  // training: "sgd", "momentum" or "adam" (whose state optimizer_gib is)
  // Training in a 16-bit dtype: optimizer_gib includes an FP32 master copy of the parameters.
  bool master_weights = false;
  double weights_gib = 0, gradients_gib = 0, optimizer_gib = 0, activations_gib = 0;
  double capacity_gib = 0;  // the GPU's memory (0: unknown)
  // Tensor-parallel inference (--parallel tp=N): the figures are one GPU's of tp. Pipeline
  // parallel (pp=N): weights_gib is the fullest stage's, activations one microbatch's.
  int tp = 1, pp = 1;
  // Training under --recompute full: the segments recomputed in the backward pass (0: none);
  // activations_gib is then the checkpoints' tensors, the rest kept and the largest segment's.
  // Under --recompute selective (recompute_attention): the attention cores recomputed.
  int recompute_segments = 0;
  bool recompute_attention = false;
  // Training: the parameters the optimizer updates (under --lora the adapters' alone) and the
  // adapters' rank (0: no LoRA).
  double trainable_params = 0;
  int64_t lora_rank = 0;
  // Inference under --lora: the adapters served unmerged beside the model (in weights_gib),
  // all `lora_adapters` of them.
  double adapter_params = 0;
  int64_t lora_adapters = 1;
  bool lora_nf4 = false;  // QLoRA: the linear layers' frozen weights held in NF4
  // --sparsity 2:4: the GiB of weights_gib held 2:4-compressed (those the GPU runs sparse); 0: none.
  double sparse_2_4_gib = 0;
  double total_gib() const { return weights_gib + gradients_gib + optimizer_gib + activations_gib; }
  bool fits() const { return !(capacity_gib > 0) || total_gib() <= capacity_gib; }
  // GPUs of this capacity that hold it together, were it split evenly (0: unknown capacity);
  // under tensor parallelism the tp GPUs' total.
  int gpus_to_hold() const;
};

// Why the model was predicted in its dtype: the --dtype option, the float dtype most of the
// model's weights (elements) are stored in, its float inputs when it has no float weights,
// FP32 when it has neither, or (a generation of a Hugging Face config) the dtype a serving
// engine loads its checkpoint in (Decoder::serving_dtype).
enum class DTypeSource { option, weights, inputs, fallback, config };
const char* dtype_source_name(DTypeSource s);  // "--dtype", "weights", "inputs", "default", "config"

// What a run does with one GPU (Report::throughput): its FLOPs in the step the latency times
// (inference: the forward pass; training: forward, backward and update; --parallel training:
// one GPU's share of an iteration) over that latency, against the dense spec-sheet peak of the
// math most of its GEMM FLOPs run on (precision.h math_precision / math_peak_gflops; not the
// power-limited clock). In training the utilization is the model FLOPs utilization (MFU, as
// PaLM defines it): kernels that --recompute runs again count in `flops`, not in it. Rates
// carry the latency's 80% interval (the low rate from its high bound).
struct Throughput {
  double flops = 0;        // one GPU's kernels in one step, recomputation included
  double model_flops = 0;  // the same without the recomputed kernels
  double tflops = 0, tflops_low = 0, tflops_high = 0;  // model_flops over the latency, TFLOP/s
  std::string peak_math;   // "bf16-tensor", "fp32-simt", ...
  double peak_tflops = 0;  // that math's dense peak on the GPU
  double utilization() const { return peak_tflops > 0 ? tflops / peak_tflops : 0; }
  // Samples a step (all GPUs: --parallel's global batch) where --batch bound an input dim, and
  // tokens (samples x --seq) where --seq did too; 0: not known, no rate.
  int64_t samples = 0, tokens = 0;
  double samples_per_s = 0, samples_per_s_low = 0, samples_per_s_high = 0;
  double tokens_per_s = 0, tokens_per_s_low = 0, tokens_per_s_high = 0;
  // --train-tokens: the run at this step's tokens/s on `gpus` GPUs (0 tokens: not asked).
  double train_tokens = 0;
  int gpus = 1;
  double train_days = 0, train_days_low = 0, train_days_high = 0;
  double gpu_hours = 0;
  // --gpu-cost: one GPU's hourly cost (USD; 0: not given), the cost of a million tokens (or,
  // without tokens, a thousand samples) at this rate on `gpus` GPUs, with its 80% interval,
  // and of the training run (--train-tokens).
  double usd_per_gpu_hour = 0;
  double usd_per_m_tokens = 0, usd_per_m_tokens_low = 0, usd_per_m_tokens_high = 0;
  double usd_per_k_samples = 0;
  double train_usd = 0;
};

// --sparsity 2:4 (lowering.h SparsityOptions): the pruned linear layers' GEMMs and how many of
// them run on sparse matrix units on this GPU (the rest dense: no sparse units for their math,
// or dense is faster there), and the weight memory their compression saves on one GPU.
struct SparsityReport {
  std::string targets = "all";
  int pruned_gemms = 0;
  int sparse_gemms = 0;
  double weights_saved_gib = 0;
};

struct Report {
  Gpu gpu;
  std::string model_name;
  std::string predictor;  // "neusight" | "neusight-paper" | "roofline"
  std::string timing;     // "device" | "eager" (NeuSight timing convention; "" for roofline)
  double host_dispatch_us = 0;  // device timing: the host's dispatch of one op (0: not device timing)
  Mode mode = Mode::inference;
  Fusion fusion = Fusion::eager;
  DType dtype = DType::f32;
  DTypeSource dtype_source = DTypeSource::fallback;
  double e2e_latency_ms = 0;
  double e2e_low_ms = 0, e2e_high_ms = 0;  // 80% interval of e2e_latency_ms
  // The interval's bounds, the latency itself where there is none (as Prediction::low_ms).
  double e2e_low() const { return e2e_high_ms > 0 ? e2e_low_ms : e2e_latency_ms; }
  double e2e_high() const { return e2e_high_ms > 0 ? e2e_high_ms : e2e_latency_ms; }
  double forward_ms = 0, backward_ms = 0, update_ms = 0;
  // What the nodes', classes' and phases' shares are of: the end-to-end latency; under
  // --parallel training the sum of their kernels (one micro-batch through every stage), not
  // the iteration.
  double share_base_ms() const { return parallel ? forward_ms + backward_ms + update_ms : e2e_latency_ms; }
  std::vector<TensorInfo> graph_outputs;
  std::vector<NodeReport> nodes;          // graph order
  std::vector<KernelReport> extra_kernels;  // kernels tied to no node (collectives ...)
  std::vector<std::string> warnings;
  std::optional<UnalignedGemms> unaligned_gemms;  // its warning is among `warnings` too
  std::vector<GpuWarning> gpu_warnings;           // theirs are among `warnings` too
  std::vector<std::string> unknown_ops;
  int folded_nodes = 0;       // nodes computed from constants only (no kernel)
  int unpredicted_nodes = 0;  // nodes with an "unknown" kernel (no time counted)
  std::map<std::string, double> totals_by_class;  // ms per kernel class
  // Of those, the fused attention kernels' (lowering.h is_attention_kernel: FlashAttention in
  // class gemm, its decode form in class reduce), which the class enum does not name.
  double attention_ms = 0;
  // Multi-GPU training (--parallel): e2e_latency_ms is then this iteration time, while nodes
  // and phase totals are one micro-batch on the GPUs of the model-parallel group.
  std::optional<ParallelReport> parallel;
  // --generate: e2e_latency_ms, nodes and class totals are then the prefill's forward pass
  // (under pipeline parallelism one microbatch's, through every stage).
  std::optional<GenerationReport> generation;
  // One GPU's memory for the run (absent under --parallel and --generate, whose reports count
  // their own per GPU).
  std::optional<MemoryFootprint> memory;
  std::optional<SparsityReport> sparsity;  // --sparsity 2:4
  // --latency-slo: the report is at the largest batch whose end-to-end latency is at most
  // `slo_ms` and whose memory fits the GPU (met: batch 1 does), and the batch above it that
  // does not: its latency and whether it fits (next_batch 0: the search's cap, kMaxSloBatch).
  struct LatencySlo {
    double slo_ms = 0;
    bool met = false;
    int64_t batch = 0;
    int64_t next_batch = 0;
    double next_latency_ms = 0;
    bool next_fits = true;
    // What stopped the search: "none" (not met), "latency", "memory" or "cap".
    const char* limit() const { return !met ? "none" : next_batch == 0 ? "cap" : next_fits ? "latency" : "memory"; }
  };
  std::optional<LatencySlo> latency_slo;
  // Set by step_throughput (absent under --generate, whose report has its own rates).
  std::optional<Throughput> throughput;
  // Its throughput at that batch (items a second); 0 when the target is not met.
  double slo_items_per_s() const;
  static constexpr int64_t kMaxSloBatch = 65536;
};

// The warning of a run larger than the memory of the GPU named `gpu` (m.fits() false): what it
// needs ("the training step needs 148.0 GiB (weights 0.6, ...)"), the GPU's memory, how many
// such GPUs hold it.
GpuWarning memory_warning(const MemoryFootprint& m, const std::string& gpu);

// The report's dtype and why, as the terminal and HTML say it: "fp16 (weights)", or under a
// forced narrow dtype that narrows the weights' GEMMs alone (lowering.h narrow_weight_gemms)
// "fp8 (--dtype: the weights' GEMMs; the rest bf16)".
std::string dtype_label(const Report& r);
// "2:4 sparse: 224 of 224 pruned GEMMs on sparse tensor cores" (SparsityReport), "" without.
std::string sparsity_label(const Report& r);

// The footprint in one line, as the terminal and HTML say it: "12.4 GiB of 80 GiB (weights
// 10.1, activations 2.3 at most alive at once)", and when it does not fit "... : does not fit,
// N such GPUs hold it".
std::string memory_text(const MemoryFootprint& m);

// Fills the totals (e2e, per phase, per class, per node) from the kernels' predictions.
void summarize(Report& report);

// The report's Throughput after summarize (and the parallel plan): `samples` and `tokens` a
// step (0: unknown). Under --parallel training the kernels (one micro-batch through every
// stage of one GPU's model-parallel share) count microbatches / pp times. `gpus`: the GPUs
// the step runs on (--parallel's, tensor-parallel inference's tp). `train_tokens` > 0 (with
// tokens > 0) adds the time to train on them. Empty when the latency is 0.
std::optional<Throughput> step_throughput(const Report& report, int64_t samples, int64_t tokens, int gpus = 1,
                                          double train_tokens = 0, double usd_per_gpu_hour = 0);

// Calls f(const KernelReport&) for every kernel of the report: its nodes' in graph order, then
// the extra ones.
template <class F>
void for_each_kernel(const Report& report, F f) {
  for (const auto& n : report.nodes)
    for (const auto& k : n.kernels) f(k);
  for (const auto& k : report.extra_kernels) f(k);
}

// Every kernel of the report (its nodes' and the extra ones) as one sum with its interval
// (predictor.h IntervalSum): summarize's e2e bounds, and compare's speed-up interval. The
// second form adds them, `weight` times each, to `sum`.
IntervalSum interval_sum(const Report& report);
void add_kernels(const Report& report, double weight, IntervalSum& sum);
// The 80% interval of each kernel class's kernels summed (by kernel_class_name), or of each
// phase's (by_phase: phase_name), as range_text: kernels err partly together, as in the
// end-to-end latency's. For the totals tables of the terminal and the HTML page.
std::map<std::string, std::string> interval_ranges_by(const Report& report, bool by_phase);
// "low - high" in ms, or "" where high is not above low (no interval: the roofline predictor).
std::string range_text(double low_ms, double high_ms);
// The speed-up of `report` over `first` (the first's latency over this one's: another GPU, one
// model) with its 80% interval, the two GPUs' errors independent (predictor.h
// gpu_speedup_interval).
SpeedupInterval speedup_over(const Report& first, const Report& report);

struct TableOptions {
  int top = 0;            // 0: every node; N: the N slowest
  bool group_layers = false;
  bool color = false;     // ANSI colour (only on a TTY)
};

std::string format_table(const Report& report, const TableOptions& options);

// The `top` slowest nodes of a report under a bold `title` (the node table's rows, shares of
// its e2e latency): --generate --top prints the prefill's and a decode step's.
std::string format_top_nodes(const Report& report, const std::string& title, int top, bool color);

// The layer a node belongs to, from its name: the prefix through the first all-digit
// component ("transformer.h.11.mlp.c_fc/MatMul" -> "transformer.h.11",
// "/model/layers.0/attn/MatMul" -> "/model/layers.0"); else the name without its last
// "/" part; else the name itself.
std::string layer_of(const std::string& node_name);

// Nodes summed per layer (in order of first appearance).
struct LayerSummary {
  std::string name;
  int nodes = 0;
  double latency_ms = 0;
  double forward_ms = 0, backward_ms = 0, update_ms = 0;
  std::map<std::string, double> by_class;  // ms per kernel class
};
std::vector<LayerSummary> group_by_layer(const Report& report);

// --latency-slo in a line: "batch 24 within 50 ms (49.1 ms, 489.0 items/s); batch 25 takes
// 51.3 ms", or why it is not met.
std::string latency_slo_text(const Report& report);

// One row per GPU: end-to-end latency, phases, speed-up against the first (GPU lists); under
// --latency-slo each GPU's batch, latency and throughput (items/s) against the first's.
std::string format_gpu_table(const std::vector<Report>& reports);

// --generate: the summary (TTFT, TPOT, tokens/s, memory, per-phase class breakdown) of one
// report, and one row per GPU for a GPU list.
std::string format_generation(const Report& report, bool color = false);
std::string format_generation_gpu_table(const std::vector<Report>& reports);

// --parallel: the multi-GPU training section (plan_iteration's result) as terminal text.
std::string format_parallel(const ParallelReport& report);

// Adds a GPU's warning to a report: typed (Report::gpu_warnings), and its text among
// Report::warnings.
void add_gpu_warning(Report& r, GpuWarning w);

// The distinct warnings of one model's reports on a GPU list, in order (a model's own warnings
// come with every GPU's report): the GPUs' own warnings of a kind and subject
// (Report::gpu_warnings) joined into one line naming every such GPU, their unaligned
// tensor-core GEMMs (Report::unaligned_gemms) into one with the share as a range.
std::vector<std::string> warnings_once(const std::vector<Report>& reports);

// The self-contained HTML report (inline SVG and script, no network) for one model on
// one or more GPUs; the first report is the one charted in detail.
std::string format_html(const std::vector<Report>& reports);

// Short "x.xxx" latency text used by every text format.
std::string format_ms(double ms);
// The cost of a million tokens at `tokens_per_s` on `gpus` GPUs of `usd_per_gpu_hour` each,
// its bounds from the rate's (the high cost from the low rate; a rate bound of 0 gives the
// cost itself). All 0 when the rate is not positive.
struct UsdRange {
  double usd = 0, low = 0, high = 0;
};
UsdRange usd_per_m_tokens(double usd_per_gpu_hour, int gpus, double tokens_per_s, double tokens_per_s_low,
                          double tokens_per_s_high);
// "$2.49", "$0.0123", "$12k", "$1.99M": a cost in US dollars.
std::string format_usd(double usd);
// The throughput in one line, as the terminal and HTML say it: "24.5 samples/s (80% interval
// 20.1 - 29.3), 12544 tokens/s; 312 TFLOP/s, 31.5% of the bf16-tensor dense peak (989 TFLOP/s)",
// in training "... of model FLOPs ... (MFU)".
std::string throughput_text(const Throughput& t, Mode mode);
std::string format_json(const std::vector<Report>& reports);  // one object, or an array for several GPUs
std::string format_csv(const Report& report, bool per_kernel);
// The reports of one model on several GPUs: with more than one, each row leads with the GPU's
// alias (a `gpu` column first), every GPU's rows in turn; one report's CSV otherwise.
std::string format_csv(const std::vector<Report>& reports, bool per_kernel);

}  // namespace neusight
