// analyze.cpp - wires the stages: frontend -> shapes -> lowering -> tiling -> predictor -> report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <optional>

#include "batch_search.h"
#include "footprint.h"
#include "neusight/neusight.h"
#include "neusight/precision.h"
#include "pipeline.h"

#ifndef NEUSIGHT_VERSION
#define NEUSIGHT_VERSION "0.0.0"
#endif

namespace neusight {

const char* version() { return NEUSIGHT_VERSION; }

namespace {

// The float dtype most of `names` are stored in, counting elements (each tensor at least
// one); undefined when none is a float.
DType most_common_float(const Graph& g, const std::vector<std::string>& names) {
  std::map<DType, int64_t> count;
  for (const auto& name : names) {
    const TensorInfo* t = g.find(name);
    if (t && is_float(t->dtype)) count[t->dtype] += std::max<int64_t>(t->num_elements(), 1);
  }
  DType best = DType::undefined;
  int64_t n = -1;
  for (const auto& [dt, c] : count)
    if (c > n) { n = c; best = dt; }
  return best;
}

// The dtype the model computes in and why: --dtype, else the float dtype of most weight
// elements, else of the float inputs, else fp32.
std::pair<DType, DTypeSource> model_dtype(const Graph& g, DType option) {
  if (option != DType::undefined) return {option, DTypeSource::option};
  if (DType w = most_common_float(g, g.initializers); w != DType::undefined) return {w, DTypeSource::weights};
  if (DType i = most_common_float(g, g.inputs); i != DType::undefined) return {i, DTypeSource::inputs};
  return {DType::f32, DTypeSource::fallback};
}

// One note per GEMM dtype this GPU has no matrix units for (FP8 on an A100, BF16 on a V100,
// INT8 on a P100):
// those GEMMs are predicted in the math they run in (precision.h kernel_as_run).
std::vector<GpuWarning> math_fallback_notes(const std::vector<Kernel>& kernels, const Gpu& gpu) {
  std::set<DType> seen;  // the math of a float GEMM depends on its dtype and the GPU alone
  std::vector<GpuWarning> out;
  for (const auto& k : kernels) {
    if (k.cls != KernelClass::gemm || !(is_float(k.dtype) || k.dtype == DType::i8) || !seen.insert(k.dtype).second) continue;
    const std::string math = math_precision(k, gpu);
    const std::string wanted = dtype_name(k.dtype);
    // Its own matrix units, or FP32 on the CUDA cores as ever; INT8 on the CUDA cores is a fallback.
    if (math.rfind(wanted + "-", 0) == 0 && math != "int8-simt") continue;
    const std::string stored = k.dtype == DType::tf32 ? "fp32" : wanted;  // TF32 math reads FP32 operands
    GpuWarning w;
    w.kind = GpuWarning::Kind::no_matrix_units;
    w.gpu = gpu.name;
    w.subject = wanted + " matrix units: " + wanted + " GEMMs are predicted as " + math + " with " + stored + " operands";
    out.push_back(std::move(w));
  }
  return out;
}

// A library GEMM on NVIDIA tensor cores with an operand or output row that is not a multiple
// of 16 bytes (a 197-token attention product or a 50257-word LM head in 16-bit): the libraries
// cannot load it with 16-byte vectors (nor, on Hopper and newer, with TMA, whose strides must
// be multiples of 16 bytes) and run it on a narrow-load kernel (cuBLAS's sm80 `align2` CUTLASS
// kernels on an H200) that no data here describes; it is predicted as the aligned kernel.
// FlashAttention loads its own rows (head_dim wide) and is not one. Returns the element type
// the GEMM reads when it is one, DType::undefined otherwise.
DType unaligned_tensor_gemm(const Kernel& k, const Gpu& gpu) {
  if (k.cls != KernelClass::gemm || !is_float(k.dtype) || is_attention_kernel(k))
    return DType::undefined;
  const DType read = k.dtype == DType::tf32 ? DType::f32 : k.dtype;  // TF32 math reads FP32 operands
  const double eb = element_bytes(read);
  const int64_t lda = k.trans_a ? k.gemm.m : k.gemm.k, ldb = k.trans_b ? k.gemm.k : k.gemm.n;
  auto aligned = [&](int64_t ld) { return std::fmod(double(ld) * eb, 16.0) == 0.0; };
  if (aligned(lda) && aligned(ldb) && aligned(k.gemm.n)) return DType::undefined;
  // The math path last: the rows of most GEMMs are aligned.
  const std::string math = math_precision(k, gpu);
  if (math.size() < 7 || math.compare(math.size() - 7, 7, "-tensor") != 0) return DType::undefined;
  return read;
}
inline constexpr const char* kUnalignedNote = "rows not a multiple of 16 bytes: a narrow-load kernel, priced aligned";

// Per kernel: the element type its unaligned tensor-core GEMM reads (unaligned_tensor_gemm),
// DType::undefined for every other kernel.
std::vector<DType> unaligned_reads(const std::vector<Kernel>& kernels, const Gpu& gpu) {
  std::vector<DType> out;
  out.reserve(kernels.size());
  for (const Kernel& k : kernels) out.push_back(unaligned_tensor_gemm(k, gpu));
  return out;
}

// The unaligned tensor-core GEMMs (`unaligned`: unaligned_reads) where they take at least 1% of
// the predicted time: how many, their share of it and the longest.
std::optional<UnalignedGemms> misaligned_gemms(const std::vector<Kernel>& kernels, const std::vector<Prediction>& preds,
                                               const std::vector<DType>& unaligned, const Graph& g) {
  UnalignedGemms u;
  double ms = 0, total_ms = 0, longest_ms = -1;
  for (size_t i = 0; i < kernels.size() && i < preds.size(); ++i) {
    const Kernel& k = kernels[i];
    total_ms += preds[i].latency_ms;
    const DType stored = i < unaligned.size() ? unaligned[i] : DType::undefined;
    if (stored == DType::undefined) continue;
    ms += preds[i].latency_ms;
    ++u.count;
    if (!(preds[i].latency_ms > longest_ms)) continue;
    longest_ms = preds[i].latency_ms;
    const std::string node = k.node >= 0 && size_t(k.node) < g.nodes.size() ? g.nodes[size_t(k.node)].name + ": " : "";
    u.longest = node + std::to_string(k.gemm.m) + "x" + std::to_string(k.gemm.k) + " by " + std::to_string(k.gemm.k) +
                "x" + std::to_string(k.gemm.n) + " in " + dtype_name(stored) + ": a multiple of " +
                std::to_string(int(16 / element_bytes(stored))) + " elements is aligned";
  }
  if (u.count == 0 || !(ms >= 0.01 * total_ms)) return std::nullopt;
  u.share = ms / total_ms;
  return u;
}

TensorInfo named_tensor(const std::string& name) {
  TensorInfo t;
  t.name = name;
  return t;
}

// FlashAttention's split-KV for a decode step (a "flash_decode" kernel: one block per batch
// x KV head, gemm = {batch x heads, 1, head_dim, keys}): with fewer blocks than 80% of the
// SMs the keys are split so that the blocks fill whole waves (FlashAttention-2's
// num_splits_heuristic: 128-key blocks, at most 128 splits, the fewest splits within 85% of
// the best wave efficiency). Each split writes its partial output and log-sum-exp in FP32,
// and a combine pass reads them back: those bytes are added. Other kernels: unchanged.
Kernel split_kv_on_gpu(const Kernel& k, const Gpu& gpu) {
  if (k.op != "flash_decode" || gpu.num_sm <= 0 || k.rows <= 0) return k;
  const int64_t blocks = k.rows, sms = gpu.num_sm;
  if (double(blocks) >= 0.8 * double(sms)) return k;
  const int64_t key_blocks = (k.gemm.k + 127) / 128;
  const int64_t max_splits = std::min<int64_t>({128, sms, key_blocks});
  auto eligible = [&](int64_t s) { return s == 1 || (key_blocks + s - 1) / s != (key_blocks + s - 2) / (s - 1); };
  std::vector<double> eff(static_cast<size_t>(max_splits) + 1, 0.0);
  double best = 0;
  for (int64_t s = 1; s <= max_splits; ++s) {
    if (!eligible(s)) continue;
    const double waves = double(blocks * s) / double(sms);
    eff[static_cast<size_t>(s)] = waves / std::ceil(waves);
    best = std::max(best, eff[static_cast<size_t>(s)]);
  }
  int64_t splits = 1;
  for (int64_t s = 1; s <= max_splits; ++s)
    if (eligible(s) && eff[static_cast<size_t>(s)] >= 0.85 * best) {
      splits = s;
      break;
    }
  if (splits <= 1) return k;
  Kernel out = k;
  out.bytes += 2.0 * double(splits) * double(k.gemm.batch) * double(k.gemm.n + 1) * 4.0;
  out.note += "; split-KV x" + std::to_string(splits);
  return out;
}

// Where the shapes stop being known, upstream of node k: walking up through the producers of
// inputs whose shapes are not inferred, the earliest node (in run order) whose inputs' shapes
// are all known (a Reshape to a shape fed at run time, a Pad of pads not known, a NonZero).
int unknown_shape_root(const Graph& g, int k) {
  std::map<std::string, int> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = static_cast<int>(i);
  std::set<int> seen{k};
  std::vector<int> stack{k};
  int root = -1;
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    bool inputs_known = true;
    for (const auto& in : g.nodes[static_cast<size_t>(i)].inputs) {
      const TensorInfo* t = in.empty() ? nullptr : g.find(in);
      auto it = producer.find(in);
      if (!t || t->fully_known() || it == producer.end()) continue;
      inputs_known = false;
      if (seen.insert(it->second).second) stack.push_back(it->second);
    }
    if (inputs_known && (root < 0 || i < root)) root = i;
  }
  return root < 0 ? k : root;
}

// The warnings about ops left without a prediction, by reason. Op types with no shape rule or
// no kernel rule are unknown ops; a known op whose kernel says "shapes not inferred" only sits
// downstream of a shape not inferred, and calling it unknown would send the reader after the
// wrong node: those are listed apart, with the node where the unknown shapes start.
std::vector<std::string> unpriced_op_warnings(const Analysis& a, const std::set<std::string>& unknown) {
  static const std::string kUnshaped = "shapes not inferred";
  auto bare = [](const std::string& q) { return q.substr(q.rfind('.') == std::string::npos ? 0 : q.rfind('.') + 1); };
  std::set<std::string> no_rule;  // bare op types with some unknown kernel for another reason
  for (const auto& u : a.shapes.unknown_ops) no_rule.insert(bare(u));
  std::string name, op;  // the node where the unknown shapes start, and its op type
  for (const Kernel& k : a.kernels.kernels) {
    if (k.cls != KernelClass::unknown) continue;
    const bool unshaped = k.note.size() >= kUnshaped.size() &&
                          k.note.compare(k.note.size() - kUnshaped.size(), kUnshaped.size(), kUnshaped) == 0;
    if (!unshaped) no_rule.insert(k.op);
    if (!unshaped || !name.empty() || k.node < 0 || static_cast<size_t>(k.node) >= a.graph.nodes.size()) continue;
    const int root = unknown_shape_root(a.graph, k.node);
    const Node& n = a.graph.nodes[static_cast<size_t>(root)];
    const bool inner = root == k.node && !k.body_node.empty();
    name = inner ? k.body_node : n.name;
    op = inner ? k.op : n.op_type;
  }
  std::string unknown_list, unshaped_list;
  for (const auto& u : unknown) {
    std::string& list = no_rule.count(bare(u)) ? unknown_list : unshaped_list;
    list += (list.empty() ? "" : ", ") + u;
  }
  std::vector<std::string> w;
  if (!unknown_list.empty()) w.push_back("unknown ops (no shape rule or no kernels predicted): " + unknown_list);
  // Downstream of an unknown op, the node is named without its op type (already warned of).
  if (!unshaped_list.empty())
    w.push_back("known ops not predicted, their shapes not inferred: " + unshaped_list +
                (no_rule.count(op) ? " (downstream of the unknown op of node '" + name + "')"
                                   : " (the shapes are not known before the run from node '" + name + "' (" + op + ") on)"));
  return w;
}

// What the GPU's math changes: a power-limited clock under the predictor's FP32 SIMT GEMMs
// (said where the model has such a GEMM, not for a BF16 model whose GEMMs all run on tensor
// cores), and GEMM dtypes without matrix units.
void add_math_warnings(Report& r, const Predictor& predictor, const std::vector<Kernel>& kernels, const Gpu& gpu) {
  if (std::any_of(kernels.begin(), kernels.end(), [&](const Kernel& k) {
        return k.cls == KernelClass::gemm && math_precision(k, gpu).find("-simt") != std::string::npos;
      }))
    if (const double f = predictor.simt_clock_fraction(gpu); f < 0.995) {
      GpuWarning w;
      w.kind = GpuWarning::Kind::power_limited;
      w.gpu = gpu.name;
      w.power_w = gpu.board_power_w;
      w.process_nm = gpu.process_nm;
      w.lanes = int64_t(gpu.num_sm) * gpu.fp32_cores_per_sm;
      w.clock_fraction = f;
      add_gpu_warning(r, std::move(w));
    }
  for (auto& w : math_fallback_notes(kernels, gpu)) add_gpu_warning(r, std::move(w));
}

// --recompute full: checkpoints where the data path carries least; selective: the attention
// cores FlashAttention does not already recompute. Each segment's forward runs again in the
// backward pass (after tensor parallelism's sharding, whose all-reduces it repeats). Throws
// InputError outside training.
void add_recompute(Analysis& a, const Options& options) {
  if (options.mode != Mode::training)
    throw InputError(std::string("--recompute ") + recompute_name(options.recompute) +
                     " recomputes a training step's activations: add --mode training");
  if (options.recompute == Recompute::selective) {
    std::vector<char> flash(a.graph.nodes.size(), 0);  // the nodes of FlashAttention kernels
    for (const Kernel& k : a.kernels.kernels) {
      if (k.op != "flash_attention") continue;
      for (int m : k.fused_nodes)
        if (m >= 0 && static_cast<size_t>(m) < flash.size()) flash[static_cast<size_t>(m)] = 1;
      if (k.node >= 0 && static_cast<size_t>(k.node) < flash.size()) flash[static_cast<size_t>(k.node)] = 1;
    }
    a.checkpoints = plan_attention_recompute(a.graph, flash);
  } else {
    a.checkpoints = plan_checkpoints(a.graph, held_activation_dtype(options), saved_activations(a, options));
  }
  a.kernels = with_recompute(a.kernels, *a.checkpoints);
  if (a.checkpoints->segments == 0)
    a.shapes.warnings.push_back(Warning{
        WarningCode::binding, options.recompute == Recompute::selective
                                  ? "--recompute selective: no attention core keeps its scores (none, or FlashAttention's); "
                                    "nothing is recomputed"
                                  : "--recompute full: no checkpoints keep fewer activations than the step without them; "
                                    "nothing is recomputed"});
}

// --sparsity prices inference; its weights are not placed on pipeline stages.
void check_sparsity(const Options& options) {
  if (!options.sparsity.two_four && !options.sparsity.from_weights) return;
  if (options.mode == Mode::training)
    throw InputError("--sparsity prices a pruned model's inference (--mode training would train the dense weights "
                     "and mask them, as the pruning recipes do)");
  if (options.parallel.active && options.parallel.pp > 1)
    throw InputError("--sparsity takes --parallel tp alone (the compressed weights are not placed on pipeline stages)");
}

// LoRA beside --parallel: training's adapters over dp, pp and ZeRO; inference's over tp.
void check_lora_parallel(const Options& options) {
  if (options.lora.rank <= 0 || !options.parallel.active) return;
  if (options.mode != Mode::training && (options.parallel.pp > 1 || options.lora.nf4_base))
    throw InputError("--lora in inference takes --parallel tp alone, without base=nf4 (the adapters are not placed on "
                     "pipeline stages; NF4 weights are not sharded)");
  if (options.mode == Mode::training && (options.parallel.tp > 1 || options.parallel.cp > 1 || options.parallel.ep > 1))
    throw InputError("--lora with --parallel takes dp, pp and ZeRO: the adapters of a layer split over tp, cp or ep GPUs "
                     "are not modelled");
}

}  // namespace

const char* recompute_name(Recompute r) {
  return r == Recompute::full ? "full" : r == Recompute::selective ? "selective" : "none";
}

namespace {

// The lowering's options for `options` on the analysis's bound graph (--sparsity auto reads the
// model's weights; its warning joins the shapes').
LoweringOptions lowering_options(const LoadedModel& loaded, const Options& options, Analysis& a) {
  LoweringOptions lo;
  lo.mode = options.mode;
  lo.fusion = options.fusion;
  lo.attention = options.attention;
  lo.compute_dtype = options.dtype;
  lo.kv_cache_dtype = options.kv_dtype;
  lo.serving_kernels = options.serving_kernels;
  lo.optimizer = options.optimizer;
  check_lora_parallel(options);
  if (options.lora.adapters > 1 && options.mode == Mode::training)
    throw InputError("--lora adapters=" + std::to_string(options.lora.adapters) +
                     " serves several adapters at once: inference (training trains one)");
  lo.lora = options.lora;
  lo.lora.sequences = a.bound.batch;  // each sequence's tokens use one adapter
  check_sparsity(options);
  lo.sparsity = options.sparsity;
  if (options.sparsity.from_weights) {  // --sparsity auto: the weights whose values show the pattern
    lo.sparsity.two_four = true;
    lo.sparsity.pruned_values = [&loaded](const std::string& name, int axis) {
      return initializer_pruned_2_4(loaded, name, axis);
    };
    lo.sparsity.zero_values = [&loaded](const std::string& name) { return initializer_all_zero(loaded, name); };
  }
  lo.opset = loaded.model.opset();
  for (const auto& [domain, version] : loaded.model.opsets)
    if (!domain.empty() && domain != "ai.onnx") lo.opsets[domain] = version;
  return lo;
}

}  // namespace

Analysis prepare(const LoadedModel& loaded, const Options& options) {
  Analysis a;
  a.graph = loaded.model.graph;
  DimBindings dims = options.dims;  // --parallel training: the graph runs one GPU's micro-batch
  if (options.parallel.active) {
    if (options.mode == Mode::training) {
      dims.batch = parallel_micro_batch(options.parallel, options.mode, dims.batch);
    } else {
      check_inference_parallel(options.parallel);
      if (options.parallel.microbatches_given && dims.batch <= 0)
        throw InputError("--parallel: microbatches=" + std::to_string(options.parallel.microbatches) +
                         " split the batch: give --batch N");
      if (dims.batch > 0) {  // a pipeline's microbatch (parallel.h inference_microbatches)
        const int64_t m = inference_microbatches(options.parallel, dims.batch);
        dims.batch = (dims.batch + m - 1) / m;
      }
    }
  }
  const std::vector<std::string> bind_warnings = bind_dims(a.graph, dims, &a.bound);
  // ONNX's own shape inference (the hints) costs about as much as the whole rest of the
  // analysis on a large graph, and hints only fill what the project's rules leave unknown:
  // ask for them only when some node output is still without a full shape.
  // (The bound graph is rebuilt for the second pass rather than kept as a copy: copying a
  // 4,000-node graph costs more than binding it again, and the second pass is rare.)
  a.shapes = infer_shapes(a.graph, loaded.model);
  bool complete = true;
  for (const auto& n : a.graph.nodes) {
    for (const auto& o : n.outputs) {
      const TensorInfo* t = o.empty() ? nullptr : a.graph.find(o);
      if (t && !t->fully_known()) complete = false;
    }
    if (!complete) break;
  }
  if (!complete) {
    a.graph = loaded.model.graph;
    bind_dims(a.graph, dims);
    const auto hints = onnx_shape_hints(loaded, a.graph);
    a.shapes = infer_shapes(a.graph, loaded.model, &hints);
  }
  std::vector<Warning> warnings;
  for (const auto& w : bind_warnings) warnings.push_back(Warning{WarningCode::binding, w});
  a.shapes.warnings.insert(a.shapes.warnings.begin(), warnings.begin(), warnings.end());
  a.kernels = lower(a.graph, lowering_options(loaded, options, a));
  a.lora_bytes = lora_adapter_bytes(a.kernels.kernels, options.lora.adapters);  // one copy's, before tp splits them
  a.sparse_saved_bytes = sparse_2_4_saved_bytes(a.graph, a.kernels.sparse_weights, options);
  // Whole experts per GPU: more GPUs than experts would hold fractions of one.
  if (options.parallel.active && options.parallel.ep > 1)
    for (const Kernel& k : a.kernels.kernels)
      if (k.expert_part != Kernel::ExpertPart::none && k.moe.experts > 0 && options.parallel.ep > k.moe.experts)
        throw InputError("--parallel ep=" + std::to_string(options.parallel.ep) + ": more GPUs than the model's " +
                         std::to_string(k.moe.experts) + " experts (each GPU holds whole experts)");
  // Experts over the tensor-parallel GPUs in inference, over the data-parallel ones in training.
  const bool training = options.mode == Mode::training;
  if (options.parallel.active)
    a.kernels = shard_tensor_parallel(a.graph, a.kernels, options.parallel.tp, training ? 1 : options.parallel.ep,
                                      options.parallel.sequence_parallel);
  if (options.parallel.active && options.parallel.cp > 1) {
    if (std::none_of(a.kernels.kernels.begin(), a.kernels.kernels.end(), is_flash_gemm))
      throw InputError("--parallel cp=" + std::to_string(options.parallel.cp) +
                       ": context parallelism exchanges the sequence around FlashAttention (Transformer Engine's ring or "
                       "all-to-all), and no attention here runs as FlashAttention (it needs 16-bit attention, "
                       "--fusion eager or full, and not --attention unfused)");
    a.kernels = shard_context_parallel(a.graph, a.kernels, options.parallel.cp, options.parallel.cp_comm);
  }
  // After the sequence split: a GPU's experts get the tokens of the group's shares.
  if (options.parallel.active && training && options.parallel.ep > 1)
    a.kernels = shard_expert_parallel(a.graph, a.kernels, options.parallel.ep, options.parallel.zero == 0);
  if (options.parallel.active && options.parallel.zero >= 1)
    a.kernels = shard_optimizer_updates(a.kernels, options.parallel.dp * options.parallel.cp);
  if (options.parallel.active && options.parallel.sequence_parallel && options.parallel.tp == 1)
    a.shapes.warnings.push_back(Warning{WarningCode::binding, "--parallel sp=1 splits the sequence over the tensor-parallel "
                                                              "GPUs, and tp=1: sp changes nothing"});
  if (options.parallel.active && options.parallel.zero >= 1 && options.parallel.dp * options.parallel.cp == 1)
    a.shapes.warnings.push_back(Warning{WarningCode::binding, "--parallel zero=" + std::to_string(options.parallel.zero) +
                                                                  " shards over the data-parallel GPUs, and dp=1: zero changes nothing"});
  if (options.parallel.active && options.parallel.ep > 1 &&
      std::none_of(a.kernels.kernels.begin(), a.kernels.kernels.end(),
                   [](const Kernel& k) { return k.expert_part != Kernel::ExpertPart::none; }))
    a.shapes.warnings.push_back(Warning{WarningCode::binding, "--parallel ep=" + std::to_string(options.parallel.ep) +
                                                                  ": the model has no mixture of experts to spread; ep changes nothing"});
  if (options.recompute != Recompute::none) add_recompute(a, options);
  if (!options.parallel.active || options.mode == Mode::inference) a.memory = memory_footprint(a, options, 0);
  return a;
}

// The predictor's options: the timing, and a user's host dispatch (--host-dispatch-us) scaling
// the dispatch and its interval bounds. Throws InputError for a bad value or another timing.
PrecisionOptions precision_options(const Options& options) {
  PrecisionOptions precision{options.timing};
  if (options.host_dispatch_us == 0) return precision;
  if (!(options.host_dispatch_us > 0) || !std::isfinite(options.host_dispatch_us) || options.host_dispatch_us > 1e5)
    throw InputError("--host-dispatch-us: expected a positive time in microseconds (at most 100000)");
  if (options.timing != Timing::device)
    throw InputError("--host-dispatch-us applies to device timing (--timing device), not " +
                     std::string(timing_name(options.timing)) + " timing");
  const double scale = options.host_dispatch_us * 1e-3 / kHostDispatchMs;
  precision.host_dispatch_ms *= scale;
  precision.host_dispatch_low_ms *= scale;
  precision.host_dispatch_high_ms *= scale;
  return precision;
}

namespace {

// The report's throughput: samples a step where a batch was bound (--parallel training: the
// global batch, whose micro-batch the graph runs), tokens where a sequence length was too;
// --train-tokens needs those tokens, in training.
std::optional<Throughput> report_throughput(const Report& r, const Analysis& a, const Options& options) {
  // --parallel training, and a pipeline's microbatches: the global batch, whose micro-batch the graph runs.
  const bool global = options.parallel.active && options.dims.batch > 0 &&
                      (options.mode == Mode::training || (options.parallel.pp > 1 && a.bound.batch > 0));
  const int64_t samples = a.bound.batch > 0 ? (global ? options.dims.batch : a.bound.batch) : 0;
  const int64_t tokens = samples > 0 && a.bound.seq > 0 ? samples * a.bound.seq : 0;
  if (options.train_tokens > 0 && (options.mode != Mode::training || tokens == 0))
    throw InputError(options.mode != Mode::training
                         ? "--train-tokens applies to --mode training"
                         : "--train-tokens needs the tokens of a step: --batch and --seq binding the model's batch and "
                           "sequence dims");
  return step_throughput(r, samples, tokens, options.parallel.active ? static_cast<int>(options.parallel.gpus()) : 1,
                         options.train_tokens, options.gpu_cost(r.gpu));
}

// One GPU's memory of the run and, for a pipeline-parallel forward pass (inference, pp > 1),
// the pipeline of its microbatches, each GPU then holding its stage's weights; the memory
// warning where one GPU's does not fit. `dense_held_bytes`: 2:4-pruned weights this GPU holds
// dense (one copy's; tp splits them).
std::optional<ParallelReport> memory_and_pipeline(const Analysis& a, const Gpu& gpu, const Options& options, Report& r,
                                                  double dense_held_bytes) {
  if (a.memory) {
    r.memory = a.memory;
    r.memory->capacity_gib = gpu.mem_gb;
    r.memory->weights_gib += dense_held_bytes / std::max(1, r.memory->tp) / kGiB;
    if (dense_held_bytes > 0) r.memory->sparse_2_4_gib = 0;
  }
  std::optional<ParallelReport> pipeline;
  if (options.parallel.active && options.mode == Mode::inference && options.parallel.pp > 1) {
    // A batch no dim binds runs whole (one microbatch).
    const int m = a.bound.batch > 0 ? inference_microbatches(options.parallel, options.dims.batch) : 1;
    pipeline = pipeline_forward(a, r, gpu, options, m);
    if (r.memory) {
      double fullest = 0;
      for (const StageReport& st : pipeline->stages) fullest = std::max(fullest, st.weights_gb);
      r.memory->weights_gib = fullest;
      r.memory->pp = options.parallel.pp;
    }
  }
  if (r.memory && !r.memory->fits()) add_gpu_warning(r, memory_warning(*r.memory, gpu.name));
  return pipeline;
}

// --sparsity 2:4: each pruned GEMM whose math has sparse matrix units here (precision.h
// runs_sparse_2_4) priced there too, its weight read compressed, and run that way where it is
// the faster (TensorRT's builder times both and keeps the faster; a sparse GEMM a few tokens
// long gains only the compressed weight's bytes). `kernels`, `tilings` and `preds` become the
// kernels as they run; the pruned GEMMs left dense are counted in `dense` (no sparse units for
// their math, the first's in `dense_dtype`) and `slower` (dense is faster).
void run_sparse_2_4(const Predictor& predictor, const Gpu& gpu, std::vector<Kernel>& kernels,
                    std::vector<Tiling>& tilings, std::vector<Prediction>& preds, int& dense, DType& dense_dtype,
                    int& slower) {
  dense = slower = 0;
  const Gpu sparse_gpu = sparse_2_4_gpu(gpu);
  std::vector<size_t> idx;
  std::vector<Kernel> ks;
  std::vector<Tiling> ts;
  for (size_t i = 0; i < kernels.size(); ++i) {
    Kernel& k = kernels[i];
    if (!k.sparse_2_4) continue;
    if (!runs_sparse_2_4(k, gpu)) {
      k.sparse_2_4 = false;
      if (dense++ == 0) dense_dtype = kernel_as_run(k, gpu).dtype;
      continue;
    }
    idx.push_back(i);
    ks.push_back(sparse_2_4_as_run(k));
    ts.push_back(tile_kernel(ks.back(), sparse_gpu));
  }
  if (idx.empty()) return;
  const std::vector<Prediction> sp = predictor.predict(ks, ts, sparse_gpu);
  for (size_t j = 0; j < idx.size(); ++j) {
    const size_t i = idx[j];
    if (!(sp[j].latency_ms < preds[i].latency_ms)) {
      kernels[i].sparse_2_4 = false;
      kernels[i].note += std::string(kernels[i].note.empty() ? "" : "; ") + "2:4 weight run dense (faster here)";
      ++slower;
      continue;
    }
    kernels[i] = std::move(ks[j]);
    tilings[i] = sp[j].tiling ? *sp[j].tiling : ts[j];
    preds[i] = sp[j];
  }
}

// What a report says of the `pruned` 2:4 GEMMs left dense on `gpu` (run_sparse_2_4): a GPU
// warning for those without sparse units (`dense`, of math `dtype`), a line for those faster dense.
void add_sparse_2_4_notes(Report& r, const Gpu& gpu, int pruned, int dense, DType dtype, int slower) {
  if (dense > 0) {
    GpuWarning w;
    w.kind = GpuWarning::Kind::no_matrix_units;
    w.gpu = gpu.name;
    w.subject = std::string("sparse matrix units for ") + dtype_name(dtype) + " GEMMs: the " + std::to_string(dense) +
                " 2:4-pruned GEMMs run dense (sparse tensor cores take TF32, FP16, BF16, FP8 and INT8 from Ampere on; "
                "AMD's sparse MFMA 16- and 8-bit from CDNA 3)";
    add_gpu_warning(r, std::move(w));
  }
  if (slower > 0)
    r.warnings.push_back("--sparsity 2:4: " + std::to_string(slower) + " of the " + std::to_string(pruned) +
                         " pruned GEMMs run dense on " + gpu.name + ", where that is faster");
}

// The report's SparsityReport: `sparse` of the `pruned` GEMMs on sparse units, the weights one
// GPU holds compressed (none where `dense_held` says they are held dense).
SparsityReport sparsity_report(const Analysis& a, const Options& options, int pruned, int sparse, double dense_held) {
  SparsityReport s;
  s.targets = options.sparsity.from_weights ? "auto" : options.sparsity.targets.empty() ? "all" : options.sparsity.targets;
  s.pruned_gemms = pruned;
  s.sparse_gemms = sparse;
  const int tp = options.parallel.active ? std::max(1, options.parallel.tp) : 1;
  s.weights_saved_gib = (a.sparse_saved_bytes - dense_held) / tp / kGiB;
  return s;
}

}  // namespace

Report predict(const Analysis& a, const Model& model, const Gpu& gpu, const Options& options) {
  std::unique_ptr<Predictor> predictor = make_predictor(options.predictor, options.weights_dir, precision_options(options));
  // The kernels' memory traffic on this GPU (tiling.h on_gpu): a copy only when some
  // operand's reused data does not fit in this GPU's L2.
  std::vector<Kernel> adjusted;
  const int pruned = static_cast<int>(std::count_if(a.kernels.kernels.begin(), a.kernels.kernels.end(),
                                                    [](const Kernel& k) { return k.sparse_2_4; }));
  if (pruned > 0 || std::any_of(a.kernels.kernels.begin(), a.kernels.kernels.end(), [&](const Kernel& k) {
        return l2_miss_bytes(k, gpu) > 0 || k.op == "flash_decode";
      })) {
    adjusted.reserve(a.kernels.kernels.size());
    for (const auto& k : a.kernels.kernels) adjusted.push_back(split_kv_on_gpu(on_gpu(k, gpu), gpu));
  }
  const std::vector<Kernel>& kernels = adjusted.empty() ? a.kernels.kernels : adjusted;
  std::vector<Tiling> tilings;
  tilings.reserve(kernels.size());
  for (const auto& k : kernels) tilings.push_back(tile_kernel(k, gpu));
  std::vector<Prediction> preds = predictor->predict(kernels, tilings, gpu);
  int sparse_dense = 0, sparse_slower = 0;
  DType dense_dtype = DType::undefined;
  if (pruned > 0) run_sparse_2_4(*predictor, gpu, adjusted, tilings, preds, sparse_dense, dense_dtype, sparse_slower);
  // The tile each latency belongs to (a tensor-core GEMM runs on the library's fastest).
  for (size_t i = 0; i < preds.size(); ++i)
    if (preds[i].tiling) tilings[i] = *preds[i].tiling;
  std::optional<ParallelReport> par;
  if (options.parallel.active && options.mode == Mode::training)
    par = plan_iteration(a.graph, kernels, preds, gpu, options.parallel, options.dims.batch,
                         parallel_micro_batch(options.parallel, options.mode, options.dims.batch),
                         saved_activations(a, options));
  else if (options.parallel.active)
    time_tensor_parallel_collectives(kernels, preds, options.parallel.tp,
                                     link_for(gpu, options.parallel.link_gbps, options.parallel.tp));

  Report r;
  r.gpu = gpu;
  r.model_name = model.path.empty() ? model.graph.name : std::filesystem::path(model.path).filename().string();
  r.predictor = predictor->name();
  if (options.predictor != PredictorKind::roofline) r.timing = timing_name(options.timing);
  if (options.predictor != PredictorKind::roofline && options.timing == Timing::device)
    r.host_dispatch_us = options.host_dispatch_us > 0 ? options.host_dispatch_us : kHostDispatchMs * 1e3;
  r.mode = options.mode;
  r.fusion = options.fusion;
  std::tie(r.dtype, r.dtype_source) = model_dtype(a.graph, options.dtype);
  // Unknown ops get one warning: op types without a shape rule and those lowered to
  // "unknown" kernels, listed once (shape inference's own note about them is folded in).
  std::set<std::string> unknown(a.kernels.unknown_ops.begin(), a.kernels.unknown_ops.end());
  unknown.insert(a.shapes.unknown_ops.begin(), a.shapes.unknown_ops.end());
  for (const auto& w : a.shapes.warnings)
    if (a.shapes.unknown_ops.empty() || w.code != WarningCode::no_shape_rule) r.warnings.push_back(w.message);
  for (const auto& w : a.kernels.warnings) r.warnings.push_back(w);
  add_math_warnings(r, *predictor, kernels, gpu);
  add_sparse_2_4_notes(r, gpu, pruned, sparse_dense, dense_dtype, sparse_slower);
  const std::vector<DType> unaligned = unaligned_reads(kernels, gpu);
  r.unaligned_gemms = misaligned_gemms(kernels, preds, unaligned, a.graph);
  if (r.unaligned_gemms) r.warnings.push_back(unaligned_gemms_warning(*r.unaligned_gemms));
  r.unknown_ops.assign(unknown.begin(), unknown.end());
  for (auto& w : unpriced_op_warnings(a, unknown)) r.warnings.push_back(std::move(w));
  for (const auto& name : a.graph.outputs) {
    const TensorInfo* t = a.graph.find(name);
    r.graph_outputs.push_back(t ? *t : named_tensor(name));
  }
  r.nodes.resize(a.graph.nodes.size());
  for (size_t i = 0; i < a.graph.nodes.size(); ++i) {
    const Node& n = a.graph.nodes[i];
    NodeReport& nr = r.nodes[i];
    nr.name = n.name;
    nr.op_type = n.op_type;
    nr.domain = n.domain;
    if (i < a.kernels.free_reason.size()) nr.no_kernel = free_reason_text(a.kernels.free_reason[i]);
    nr.outputs.reserve(n.outputs.size());
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      const TensorInfo* t = a.graph.find(o);
      nr.outputs.push_back(t ? *t : named_tensor(o));
    }
  }
  for (size_t i = 0; i < kernels.size(); ++i) {
    KernelReport kr{kernels[i], tilings[i], preds[i]};
    if (unaligned[i] != DType::undefined) kr.kernel.note += (kr.kernel.note.empty() ? "" : "; ") + std::string(kUnalignedNote);
    if (kernels[i].node >= 0 && static_cast<size_t>(kernels[i].node) < r.nodes.size())
      r.nodes[static_cast<size_t>(kernels[i].node)].kernels.push_back(std::move(kr));
    else
      r.extra_kernels.push_back(std::move(kr));
  }
  summarize(r);
  // Pruned weights no GEMM runs sparse here are held dense.
  const double dense_held = pruned > 0 && !holds_sparse_2_4(a, gpu) ? a.sparse_saved_bytes : 0.0;
  if (pruned > 0) r.sparsity = sparsity_report(a, options, pruned, pruned - sparse_dense - sparse_slower, dense_held);
  if (auto pipeline = memory_and_pipeline(a, gpu, options, r, dense_held)) par = std::move(pipeline);
  if (par) {  // the iteration, not the sum of one micro-batch's kernels
    // The interval scales with the iteration (the micro-batch's kernels set its width).
    const double sum = r.e2e_latency_ms;
    r.e2e_low_ms = sum > 0 ? par->iteration_ms * r.e2e_low_ms / sum : par->iteration_ms;
    r.e2e_high_ms = sum > 0 ? par->iteration_ms * r.e2e_high_ms / sum : par->iteration_ms;
    r.e2e_latency_ms = par->iteration_ms;
    r.warnings.insert(r.warnings.end(), par->warnings.begin(), par->warnings.end());
    r.parallel = std::move(par);
  }
  r.throughput = report_throughput(r, a, options);
  return r;
}

Report predict_for_latency_slo(const LoadedModel& model, const Options& given, const Gpu& gpu, double slo_ms,
                               std::map<int64_t, Analysis>* analyses) {
  if (!(slo_ms > 0) || !std::isfinite(slo_ms)) throw InputError("--latency-slo: expected a positive time in ms");
  if (given.parallel.active && (given.mode == Mode::training || given.parallel.microbatches_given))
    throw InputError("--latency-slo with --parallel takes inference's tp and pp alone (the batch it searches sets a "
                     "pipeline's microbatches)");
  std::map<int64_t, Analysis> own;
  std::map<int64_t, Analysis>& cache = analyses ? *analyses : own;
  auto analysis = [&](int64_t batch) -> const Analysis& {
    auto it = cache.find(batch);
    if (it == cache.end()) {
      Options o = given;
      o.dims.batch = batch;
      it = cache.emplace(batch, prepare(model, o)).first;
    }
    return it->second;
  };
  // The batch must bind a dim: the graph's inputs at batch 2 are not those at batch 1 (on one
  // GPU: a pipeline runs both as microbatches of one).
  std::optional<Analysis> one_gpu[2];
  for (int64_t batch = 1; given.parallel.active && batch <= 2; ++batch) {
    Options o = given;
    o.parallel = ParallelConfig{};
    o.dims.batch = batch;
    one_gpu[batch - 1] = prepare(model, o);
  }
  const Analysis& a1 = one_gpu[0] ? *one_gpu[0] : analysis(1);
  const Analysis& a2 = one_gpu[1] ? *one_gpu[1] : analysis(2);
  bool binds = false;
  for (const auto& name : a1.graph.inputs) {
    const TensorInfo *t1 = a1.graph.find(name), *t2 = a2.graph.find(name);
    binds = binds || (t1 && t2 && t1->num_elements() != t2->num_elements());
  }
  if (!binds) throw InputError("--latency-slo: no input dim of the model grows with the batch (--batch binds the first symbolic dim)");
  auto at = [&](int64_t batch) {
    Options o = given;
    o.dims.batch = batch;  // the report's samples a step
    return predict(analysis(batch), model.model, gpu, o);
  };
  auto fits = [](const Report& r) { return !r.memory || r.memory->fits(); };
  auto meets = [&](const Report& r) { return r.e2e_latency_ms <= slo_ms && fits(r); };
  Report::LatencySlo slo;
  slo.slo_ms = slo_ms;
  Report best = at(1);
  slo.met = meets(best);
  slo.batch = 1;
  auto missed = [&](int64_t batch, const Report& r) {
    slo.next_batch = batch;
    slo.next_latency_ms = r.e2e_latency_ms;
    slo.next_fits = fits(r);
  };
  // How far a batch is from the target (at most 1 where it meets it): its latency over the
  // target, and its memory over the GPU's. The search places its probes by it.
  auto score = [&](const Report& r) {
    double s = r.e2e_latency_ms / slo_ms;
    if (r.memory && r.memory->capacity_gib > 0) s = std::max(s, r.memory->total_gib() / r.memory->capacity_gib);
    return s;
  };
  if (slo.met)
    slo.batch = largest_batch_meeting(best, Report::kMaxSloBatch, BatchBracket::kDouble, at, meets, missed, score);
  best.latency_slo = slo;
  return best;
}

Report analyze(const LoadedModel& model, const Gpu& gpu, const Options& options) {
  return predict(prepare(model, options), model.model, gpu, options);
}

Report analyze(const onnx::ModelProto& proto, const Gpu& gpu, const Options& options) {
  return analyze(load_model_from_proto(proto, "model"), gpu, options);
}

}  // namespace neusight
