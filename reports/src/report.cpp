// report.cpp - totals, terminal table, JSON (CLI contract) and CSV.
#include "neusight/report.h"

#include "util.h"
#include "neusight/precision.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <map>

namespace neusight {
using nlohmann::json;

const char* dtype_source_name(DTypeSource s) {
  switch (s) {
    case DTypeSource::option: return "--dtype";
    case DTypeSource::weights: return "weights";
    case DTypeSource::inputs: return "inputs";
    case DTypeSource::config: return "config";
    case DTypeSource::fallback: break;
  }
  return "default";
}

double Report::slo_items_per_s() const {
  return latency_slo && latency_slo->met && e2e_latency_ms > 0 ? double(latency_slo->batch) * 1e3 / e2e_latency_ms : 0.0;
}

std::string unaligned_gemms_warning(const UnalignedGemms& u, double share_high, int gpus) {
  char share[64];
  if (share_high > u.share && gpus > 1)
    std::snprintf(share, sizeof share, "%.0f-%.0f%% of the predicted time on %d GPUs", 100.0 * u.share,
                  100.0 * share_high, gpus);
  else
    std::snprintf(share, sizeof share, "%.0f%% of the predicted time", 100.0 * u.share);
  return std::to_string(u.count) + " tensor-core GEMM" + (u.count > 1 ? "s" : "") + ", " + share + ", " +
         (u.count > 1 ? "have" : "has") + " an operand or output row that is not a multiple of 16 bytes" +
         (u.longest.empty() ? "" : " (the longest: " + u.longest + ")") +
         ": libraries run such GEMMs on narrow-load kernels, slower than the aligned kernels predicted here "
         "(docs/ACCURACY.md, \"Measured on an H200\")";
}

namespace {
std::string power_part(const GpuWarning& w) {
  char b[128];
  std::snprintf(b, sizeof b, "%.0f W for %lld FP32 lanes at %.0f nm", w.power_w, static_cast<long long>(w.lanes), w.process_nm);
  return b;
}

// The axes that split a GPU's memory: data parallelism alone replicates it, ZeRO-3 shards it.
const char* parallel_axes(const GpuWarning& w) { return w.training ? "tp, pp, or dp with zero=3" : "tp or pp"; }

// "A, B and C"
std::string names_joined(const std::vector<const GpuWarning*>& alike) {
  std::string out;
  for (size_t i = 0; i < alike.size(); ++i)
    out += (i == 0 ? "" : i + 1 == alike.size() ? " and " : ", ") + alike[i]->gpu;
  return out;
}
}  // namespace

std::string gpu_warning_text(const GpuWarning& w) {
  switch (w.kind) {
    case GpuWarning::Kind::power_limited:
      return w.gpu + ": " + power_part(w) +
             " is below the power that holds its boost clock under dense FP32 math: FP32 SIMT GEMMs are predicted at " +
             detail::fixed(w.clock_fraction, 2) + " of the boost clock (precision.h)";
    case GpuWarning::Kind::no_matrix_units: return w.gpu + " has no " + w.subject;
    case GpuWarning::Kind::memory:
      return w.gpu + ": " + w.subject + ", more than its " + detail::fixed(w.capacity_gib, 1) +
             " GiB; the prediction assumes it fits (" + std::to_string(w.gpus_to_hold) +
             " such GPUs hold it split evenly: --parallel " + parallel_axes(w) + ")" +
             (w.activations_most ? "; --recompute full or selective keeps fewer activations" : "");
    case GpuWarning::Kind::generation_memory:
      return w.subject + ", more than the " + detail::fixed(w.capacity_gib, 0) + " GiB of " + w.gpu;
  }
  return w.subject;
}

std::string gpu_warnings_joined(const std::vector<const GpuWarning*>& alike) {
  if (alike.empty()) return "";
  const GpuWarning& w = *alike.front();
  if (alike.size() == 1) return gpu_warning_text(w);
  const std::string n = std::to_string(alike.size());
  std::string each;
  for (const GpuWarning* g : alike) {
    each += each.empty() ? "" : ", ";
    switch (w.kind) {
      case GpuWarning::Kind::power_limited:
        each += g->gpu + " " + detail::fixed(g->clock_fraction, 2) + " (" + power_part(*g) + ")";
        break;
      case GpuWarning::Kind::memory:
        each += g->gpu + " " + detail::fixed(g->capacity_gib, 1) + " GiB (" + std::to_string(g->gpus_to_hold) + " hold it)";
        break;
      case GpuWarning::Kind::generation_memory: each += g->gpu + " " + detail::fixed(g->capacity_gib, 0) + " GiB"; break;
      case GpuWarning::Kind::no_matrix_units: break;
    }
  }
  switch (w.kind) {
    case GpuWarning::Kind::power_limited:
      return n + " GPUs have less power than holds their boost clock under dense FP32 math: FP32 SIMT GEMMs are "
                 "predicted at a fraction of it (precision.h): " + each;
    case GpuWarning::Kind::no_matrix_units: return names_joined(alike) + " have no " + w.subject;
    case GpuWarning::Kind::memory:
      return w.subject + ", more than the memory of " + n + " GPUs; the predictions assume it fits (split evenly: --parallel " +
             parallel_axes(w) + "): " + each;
    case GpuWarning::Kind::generation_memory: return w.subject + ", more than the memory of " + n + " GPUs: " + each;
  }
  return gpu_warning_text(w);
}

void add_gpu_warning(Report& r, GpuWarning w) {
  r.warnings.push_back(gpu_warning_text(w));
  r.gpu_warnings.push_back(std::move(w));
}

std::vector<std::string> warnings_once(const std::vector<Report>& reports) {
  // The unaligned tensor-core GEMMs of several GPUs differ only in their share of the time:
  // one warning says it as a range, where it stood in the first GPU's warnings.
  const Report* first = nullptr;
  double lo = 1, hi = 0;
  int gpus = 0;
  for (const auto& r : reports)
    if (r.unaligned_gemms) {
      if (!first) first = &r;
      lo = std::min(lo, r.unaligned_gemms->share);
      hi = std::max(hi, r.unaligned_gemms->share);
      ++gpus;
    }
  // A GPU's own warnings (power, matrix units, memory) that other GPUs of the list give alike:
  // one line for those of a kind and subject, where the first of them stood.
  using Key = std::pair<GpuWarning::Kind, std::string>;
  std::map<Key, std::vector<const GpuWarning*>> alike;
  for (const auto& r : reports)
    for (const auto& g : r.gpu_warnings) {
      auto& group = alike[{g.kind, g.subject}];
      if (std::none_of(group.begin(), group.end(), [&](const GpuWarning* o) { return o->gpu == g.gpu; })) group.push_back(&g);
    }
  std::vector<std::string> said;
  for (const auto& r : reports) {
    const std::string unaligned = r.unaligned_gemms ? unaligned_gemms_warning(*r.unaligned_gemms) : std::string();
    std::map<std::string, const GpuWarning*> own;
    for (const auto& g : r.gpu_warnings) own.emplace(gpu_warning_text(g), &g);
    for (const auto& w : r.warnings) {
      std::string line = w;
      if (r.unaligned_gemms && w == unaligned) {
        if (&r != first) continue;
        UnalignedGemms joined = *first->unaligned_gemms;
        joined.share = lo;
        line = unaligned_gemms_warning(joined, hi, gpus);
      } else if (auto it = own.find(w); it != own.end()) {
        const auto& group = alike[{it->second->kind, it->second->subject}];
        if (group.front()->gpu != it->second->gpu) continue;
        line = gpu_warnings_joined(group);
      }
      if (std::find(said.begin(), said.end(), line) == said.end()) said.push_back(line);
    }
  }
  return said;
}

int MemoryFootprint::gpus_to_hold() const {
  return capacity_gib > 0 ? std::max(1, static_cast<int>(std::ceil(total_gib() * tp * pp / capacity_gib - 1e-9))) : 0;
}

namespace detail {
json memory_json(const MemoryFootprint& m) {
  return json{{"weights_gib", finite(m.weights_gib)},     {"activations_gib", finite(m.activations_gib)},
              {"gradients_gib", finite(m.gradients_gib)}, {"optimizer_gib", finite(m.optimizer_gib)},
              {"total_gib", finite(m.total_gib())},       {"capacity_gib", finite(m.capacity_gib)},
              {"fits", m.fits()},                         {"gpus_to_hold", m.gpus_to_hold()},
              {"optimizer", m.optimizer},                 {"tp", m.tp}, {"pp", m.pp},
              {"master_weights", m.master_weights},      {"recompute_segments", m.recompute_segments},
              {"recompute", m.recompute_segments == 0 ? "none" : m.recompute_attention ? "selective" : "full"},
              {"trainable_params", finite(m.trainable_params)},
              {"lora_rank", m.lora_rank},
              {"adapter_params", finite(m.adapter_params)},
              {"lora_adapters", m.lora_adapters},
              {"lora_nf4", m.lora_nf4},
              {"sparse_2_4_gib", finite(m.sparse_2_4_gib)}};
}
}  // namespace detail

namespace {
// What optimizer_gib holds, in words: "adam state", "sgd state and FP32 master weights".
std::string optimizer_words(const MemoryFootprint& m) {
  return (m.optimizer.empty() ? std::string("optimizer") : m.optimizer) + " state" +
         (m.master_weights ? " and FP32 master weights" : "");
}
// How one GPU's share is split off in inference: "tensor parallel over 2, the fullest of 4
// pipeline stages: "; "" on one GPU.
std::string split_words(const MemoryFootprint& m) {
  std::string s;
  if (m.tp > 1) s = "tensor parallel over " + std::to_string(m.tp);
  if (m.pp > 1) s += (s.empty() ? "" : ", ") + std::string("the fullest of ") + std::to_string(m.pp) + " pipeline stages";
  return s.empty() ? s : s + ": ";
}
}  // namespace

std::string memory_text(const MemoryFootprint& m) {
  auto gib = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, v < 10 ? "%.2f" : "%.1f", v);
    return std::string(b);
  };
  std::string s = gib(m.total_gib()) + " GiB";
  if (m.tp > 1 || m.pp > 1) s += " per GPU";
  if (m.capacity_gib > 0) s += " of " + gib(m.capacity_gib) + " GiB";
  s += " (" + split_words(m) + "weights " + gib(m.weights_gib);
  if (m.sparse_2_4_gib > 0) s += ", " + gib(m.sparse_2_4_gib) + " of them 2:4-compressed";
  if (!m.training && m.lora_rank > 0)
    s += " with LoRA's rank-" + std::to_string(m.lora_rank) + " adapters unmerged (" +
         (m.lora_adapters > 1 ? std::to_string(m.lora_adapters) + " adapters, " : std::string("")) +
         detail::fixed(m.adapter_params / 1e6, 1) + "M parameters" +
         (m.lora_nf4 ? "; the model's linear layers in NF4)" : ")");
  if (m.training)
    s += ", gradients " + gib(m.gradients_gib) + ", " + optimizer_words(m) + " " +
         gib(m.optimizer_gib) +
         (m.lora_rank > 0 ? " of LoRA's rank-" + std::to_string(m.lora_rank) + " adapters (" +
                                detail::fixed(m.trainable_params / 1e6, 1) + "M parameters; the model's frozen" +
                                (m.lora_nf4 ? ", its linear layers' in NF4: QLoRA)" : ")")
                          : "");
  s += ", activations " + gib(m.activations_gib) +
       (!m.training ? " at most alive at once)"
                    : m.recompute_segments > 0
                          ? " kept for the backward pass, " +
                                (m.recompute_attention ? std::to_string(m.recompute_segments) + " attention cores recomputed)"
                                                       : "checkpointed in " + std::to_string(m.recompute_segments) + " segments)")
                          : " kept for the backward pass)");
  if (!m.fits()) s += ": does not fit, " + std::to_string(m.gpus_to_hold()) + " such GPUs hold it";
  return s;
}

GpuWarning memory_warning(const MemoryFootprint& m, const std::string& gpu) {
  const auto gib = [](double v) { return detail::fixed(v, 1); };
  std::string parts = "weights " + gib(m.weights_gib);
  if (m.training) parts += ", gradients " + gib(m.gradients_gib) + ", " + optimizer_words(m) + " " + gib(m.optimizer_gib);
  parts += ", activations " + gib(m.activations_gib);
  GpuWarning w;
  w.kind = GpuWarning::Kind::memory;
  w.gpu = gpu;
  w.subject = std::string("the ") + (m.training ? "training step" : "forward pass") + " needs " + gib(m.total_gib()) +
              " GiB" + (m.tp > 1 || m.pp > 1 ? " per GPU (" : " (") + split_words(m) + parts + ")";
  w.capacity_gib = m.capacity_gib;
  w.gpus_to_hold = m.gpus_to_hold();
  w.training = m.training;
  w.activations_most = m.training && m.recompute_segments == 0 && m.activations_gib > 0.5 * m.total_gib();
  return w;
}

std::string dtype_label(const Report& r) {
  std::string out = std::string(dtype_name(r.dtype)) + " (" + dtype_source_name(r.dtype_source);
  if (r.dtype_source == DTypeSource::config) out += ", as vLLM's --dtype auto serves it";
  if (r.dtype_source == DTypeSource::option && narrow_weight_gemms(r.dtype))
    out += std::string(": the weights' GEMMs; the rest ") + dtype_name(activation_dtype(r.dtype));
  if (r.sparsity) out += "; " + sparsity_label(r);
  return out + ")";
}

std::string sparsity_label(const Report& r) {
  if (!r.sparsity) return "";
  const SparsityReport& s = *r.sparsity;
  return "2:4 sparse: " + std::to_string(s.sparse_gemms) + " of " + std::to_string(s.pruned_gemms) + " pruned GEMMs on " +
         (r.gpu.vendor == "amd" ? "sparse matrix cores" : "sparse tensor cores");
}

void add_kernels(const Report& r, double weight, IntervalSum& sum) {
  for_each_kernel(r, [&](const KernelReport& k) { sum.add(k.prediction, weight); });
}

IntervalSum interval_sum(const Report& r) {
  IntervalSum all;
  add_kernels(r, 1, all);
  return all;
}

std::map<std::string, std::string> interval_ranges_by(const Report& r, bool by_phase) {
  std::map<std::string, IntervalSum> sums;
  for_each_kernel(r, [&](const KernelReport& k) {
    sums[by_phase ? phase_name(k.kernel.phase) : kernel_class_name(k.kernel.cls)].add(k.prediction);
  });
  std::map<std::string, std::string> ranges;
  for (const auto& [key, s] : sums) ranges[key] = range_text(s.low_ms(), s.high_ms());
  return ranges;
}

std::string range_text(double low_ms, double high_ms) {
  return high_ms > low_ms ? format_ms(low_ms) + " - " + format_ms(high_ms) : "";
}

SpeedupInterval speedup_over(const Report& first, const Report& r) {
  return gpu_speedup_interval(first.e2e_latency_ms, first.e2e_low(), first.e2e_high(), r.e2e_latency_ms, r.e2e_low(),
                              r.e2e_high());
}

void summarize(Report& r) {
  r.e2e_latency_ms = r.forward_ms = r.backward_ms = r.update_ms = 0;
  r.e2e_low_ms = r.e2e_high_ms = 0;
  r.totals_by_class.clear();
  r.attention_ms = 0;
  r.folded_nodes = r.unpredicted_nodes = 0;
  IntervalSum all;  // predictor.h: one GPU's kernels err partly together
  auto add = [&](const KernelReport& k) {
    const double ms = k.prediction.latency_ms;
    all.add(k.prediction);
    switch (k.kernel.phase) {
      case Phase::forward: r.forward_ms += ms; break;
      case Phase::backward: r.backward_ms += ms; break;
      case Phase::update: r.update_ms += ms; break;
    }
    r.totals_by_class[kernel_class_name(k.kernel.cls)] += ms;
    if (is_attention_kernel(k.kernel)) r.attention_ms += ms;
  };
  for (auto& n : r.nodes) {
    if (n.no_kernel == "constant folded") ++r.folded_nodes;
    if (std::any_of(n.kernels.begin(), n.kernels.end(),
                    [](const KernelReport& k) { return k.kernel.cls == KernelClass::unknown; }))
      ++r.unpredicted_nodes;
    IntervalSum node;
    for (const auto& k : n.kernels) {
      node.add(k.prediction);
      add(k);
    }
    n.latency_ms = node.latency_ms();
    n.latency_low_ms = node.low_ms();
    n.latency_high_ms = node.high_ms();
  }
  for (const auto& k : r.extra_kernels) add(k);
  r.e2e_latency_ms = r.forward_ms + r.backward_ms + r.update_ms;
  r.e2e_low_ms = all.low_ms();
  r.e2e_high_ms = all.high_ms();
}

std::optional<Throughput> step_throughput(const Report& r, int64_t samples, int64_t tokens, int gpus, double train_tokens,
                                          double usd_per_gpu_hour) {
  if (!(r.e2e_latency_ms > 0) || !std::isfinite(r.e2e_latency_ms)) return std::nullopt;
  Throughput t;
  // FLOPs by the math they run on; the GEMMs' (else every kernel's) largest share names the peak.
  std::map<std::string, std::pair<double, double>> gemm_math, any_math;  // math -> (flops, peak GFLOP/s)
  for_each_kernel(r, [&](const KernelReport& kr) {
    const Kernel& k = kr.kernel;
    if (!(k.flops > 0)) return;
    t.flops += k.flops;
    if (!k.recomputed) t.model_flops += k.flops;
    // A 2:4 sparse GEMM's FLOPs count against its math's dense peak, as the share of the peak
    // (MFU) is quoted.
    std::string math = math_precision(k, r.gpu);
    if (const size_t sparse = math.rfind("-2:4"); sparse != std::string::npos) math.erase(sparse);
    for (auto* by : {&any_math, k.cls == KernelClass::gemm ? &gemm_math : nullptr}) {
      if (!by) continue;
      auto& [flops, peak] = (*by)[math];
      flops += k.flops;
      peak = std::max(peak, math_peak_gflops(k, r.gpu));
    }
  });
  // One GPU's share of an iteration: each pipeline GPU runs its stage for every micro-batch.
  if (r.parallel && r.parallel->config.pp > 0) {
    const double share = double(std::max(1, r.parallel->config.microbatches)) / r.parallel->config.pp;
    t.flops *= share;
    t.model_flops *= share;
  }
  const auto& by = gemm_math.empty() ? any_math : gemm_math;
  const auto top = std::max_element(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
  if (top != by.end()) {
    t.peak_math = top->first;
    t.peak_tflops = top->second.second * 1e-3;
  }
  // A rate over the latency, its bounds from the latency's (the low rate from the high time).
  auto rate = [&](double work, double& value, double& low, double& high) {
    value = work * 1e3 / r.e2e_latency_ms;
    low = work * 1e3 / r.e2e_high();
    high = r.e2e_low() > 0 ? work * 1e3 / r.e2e_low() : value;
  };
  rate(t.model_flops * 1e-12, t.tflops, t.tflops_low, t.tflops_high);
  if (samples > 0) {
    t.samples = samples;
    rate(double(samples), t.samples_per_s, t.samples_per_s_low, t.samples_per_s_high);
  }
  if (samples > 0 && tokens > 0) {
    t.tokens = tokens;
    rate(double(tokens), t.tokens_per_s, t.tokens_per_s_low, t.tokens_per_s_high);
  }
  t.gpus = std::max(1, gpus);
  if (train_tokens > 0 && t.tokens > 0) {
    // Whole steps: the last one runs however few tokens it has left.
    const double steps = std::ceil(train_tokens / double(t.tokens)), day_ms = 86400e3;
    t.train_tokens = train_tokens;
    t.train_days = steps * r.e2e_latency_ms / day_ms;
    t.train_days_low = steps * r.e2e_low() / day_ms;
    t.train_days_high = steps * r.e2e_high() / day_ms;
    t.gpu_hours = t.train_days * 24 * t.gpus;
  }
  if (usd_per_gpu_hour > 0) {
    t.usd_per_gpu_hour = usd_per_gpu_hour;
    const UsdRange c = usd_per_m_tokens(usd_per_gpu_hour, t.gpus, t.tokens_per_s, t.tokens_per_s_low, t.tokens_per_s_high);
    t.usd_per_m_tokens = c.usd;
    t.usd_per_m_tokens_low = c.low;
    t.usd_per_m_tokens_high = c.high;
    if (t.samples_per_s > 0) t.usd_per_k_samples = usd_per_gpu_hour * t.gpus / 3600 / t.samples_per_s * 1e3;
    t.train_usd = t.gpu_hours * usd_per_gpu_hour;
  }
  return t;
}

UsdRange usd_per_m_tokens(double usd_per_gpu_hour, int gpus, double tokens_per_s, double tokens_per_s_low,
                          double tokens_per_s_high) {
  if (!(tokens_per_s > 0)) return {};
  const double usd_per_s = usd_per_gpu_hour * gpus / 3600;
  const double usd = usd_per_s / tokens_per_s * 1e6;
  return {usd, tokens_per_s_high > 0 ? usd_per_s / tokens_per_s_high * 1e6 : usd,
          tokens_per_s_low > 0 ? usd_per_s / tokens_per_s_low * 1e6 : usd};
}

namespace detail {

std::string shape_str(const TensorInfo& t) {
  if (!t.has_shape) return "?";
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) s += ",";
    const Dim& d = t.shape[i];
    s += d.known() ? std::to_string(d.value) : (d.param.empty() ? "?" : d.param);
  }
  return s + "]";
}

std::string pad(const std::string& s, size_t w, bool right) {
  // Right-aligned fields are numbers: never cut (a cut number reads as another), overflow.
  if (s.size() >= w) return right ? s : s.substr(0, w);
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string interval_text(bool has, const std::string& low, const std::string& high, const std::string& unit) {
  return has ? " (80% interval " + low + " - " + high + unit + ")" : std::string();
}

size_t alias_width(const std::vector<Report>& reports, size_t header) {
  size_t w = header;
  for (const auto& r : reports) w = std::max(w, r.gpu.alias().size());
  return w;
}

std::string html_with_interval(const std::string& value, const std::string& low, const std::string& high, bool has) {
  return has ? value + "<br><small>" + low + " - " + high + "</small>" : value;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::isfinite(v) ? v : 0.0);
  return buf;
}

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

double finite(double x) { return std::isfinite(x) ? x : 0.0; }

std::vector<const NodeReport*> kernel_nodes(const std::vector<NodeReport>& nodes, int top) {
  std::vector<const NodeReport*> rows;
  for (const auto& n : nodes)
    if (!n.kernels.empty()) rows.push_back(&n);
  if (top > 0) {
    std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->latency_ms > b->latency_ms; });
    if (rows.size() > static_cast<size_t>(top)) rows.resize(static_cast<size_t>(top));
  }
  return rows;
}

const KernelReport* main_kernel(const NodeReport& n) {
  const KernelReport* best = nullptr;
  for (const auto& k : n.kernels) {
    const bool fwd = k.kernel.phase == Phase::forward;
    const bool best_fwd = best && best->kernel.phase == Phase::forward;
    if (!best || (fwd && !best_fwd) || (fwd == best_fwd && k.prediction.latency_ms > best->prediction.latency_ms))
      best = &k;
  }
  return best;
}

bool any_extrapolated(const NodeReport& n) {
  for (const auto& k : n.kernels)
    if (k.prediction.extrapolated) return true;
  return false;
}

const char* bound_name(const KernelReport& k) {
  if (k.kernel.cls == KernelClass::unknown) return "-";
  return k.prediction.bound();
}

std::string math_name(const KernelReport& k, const Gpu& gpu) {
  if (k.kernel.cls == KernelClass::unknown) return "-";
  // A GEMV (a GEMM predicted as a stream of its operands with one output row or column: one
  // token through a weight) computes on the CUDA cores: FP16 (and FP8, widened to it) and BF16
  // in their own precision, other floats in FP32. A streamed GEMM of more rows runs the
  // libraries' split-K kernels on the matrix units, as its math is priced (precision.h).
  if (k.prediction.streamed && std::min(k.kernel.gemm.m, k.kernel.gemm.n) <= 1) {
    const DType t = k.kernel.dtype;
    if (t == DType::f16 || is_fp8(t) || is_fp4(t)) return "fp16-simt";
    if (t == DType::bf16) return "bf16-simt";
    // Weight-only quantized GEMMs dequantize to half precision on the way (precision.h).
    if (k.kernel.weight_only || t == DType::u4 || t == DType::i4) return "fp16-simt";
    return is_float(t) ? "fp32-simt" : "int-simt";
  }
  return math_precision(k.kernel, gpu);
}

std::string mode_name(Mode m) { return m == Mode::training ? "training" : "inference"; }

}  // namespace detail

std::string format_ms(double ms) {
  char buf[32];
  ms = detail::finite(ms);
  if (ms >= 100) std::snprintf(buf, sizeof buf, "%.1f", ms);
  else if (ms >= 1) std::snprintf(buf, sizeof buf, "%.3f", ms);
  else std::snprintf(buf, sizeof buf, "%.4f", ms);
  return buf;
}

namespace {

// A rate with three significant figures and no exponent: "0.512", "24.5", "12544".
std::string format_rate(double v) {
  char buf[48];
  v = detail::finite(v);
  std::snprintf(buf, sizeof buf, v >= 1e15 ? "%.3g" : v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : v >= 1 ? "%.2f" : "%.3f", v);
  return buf;
}

}  // namespace

std::string format_usd(double v) {
  char buf[48];
  v = detail::finite(v);
  if (v >= 1e6) std::snprintf(buf, sizeof buf, "$%.3gM", v / 1e6);
  else if (v >= 1e4) std::snprintf(buf, sizeof buf, "$%.0fk", v / 1e3);
  else if (v >= 1) std::snprintf(buf, sizeof buf, "$%.2f", v);
  else std::snprintf(buf, sizeof buf, "$%.3g", v);
  return buf;
}

std::string throughput_text(const Throughput& t, Mode mode) {
  auto with_interval = [](double v, double low, double high, const std::string& unit) {
    std::string s = format_rate(v) + " " + unit;
    if (high > low) s += " (80% interval " + format_rate(low) + " - " + format_rate(high) + ")";
    return s;
  };
  std::string s;
  if (t.samples > 0) s += with_interval(t.samples_per_s, t.samples_per_s_low, t.samples_per_s_high, "samples/s");
  if (t.tokens > 0) s += ", " + with_interval(t.tokens_per_s, t.tokens_per_s_low, t.tokens_per_s_high, "tokens/s");
  if (!s.empty()) s += "; ";
  const bool training = mode == Mode::training;
  s += format_rate(t.tflops) + " TFLOP/s" + (training ? " of model FLOPs" : "") + " a GPU";
  if (t.model_flops > 0 && t.flops > t.model_flops * 1.0005)
    s += " (" + format_rate(t.tflops * t.flops / t.model_flops) + " with the recomputation)";
  if (t.peak_tflops > 0) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * t.utilization());
    s += std::string(", ") + pct + " of the " + t.peak_math + " dense peak (" + format_rate(t.peak_tflops) + " TFLOP/s)" +
         (training ? ": MFU" : "");
  }
  if (t.train_tokens > 0) {
    const double v = t.train_tokens;
    const std::string tokens = v >= 1e12 ? format_rate(v / 1e12) + "T"
                               : v >= 1e9 ? format_rate(v / 1e9) + "B"
                               : v >= 1e6 ? format_rate(v / 1e6) + "M"
                                          : format_rate(v);
    s += "; " + tokens + " tokens in " +
         with_interval(t.train_days, t.train_days_low, t.train_days_high, "days") + " on " + std::to_string(t.gpus) +
         (t.gpus == 1 ? " GPU, " : " GPUs, ") + format_rate(t.gpu_hours) + " GPU-hours";
    if (t.train_usd > 0) s += ", " + format_usd(t.train_usd);
  }
  if (t.usd_per_m_tokens > 0) {
    s += "; " + format_usd(t.usd_per_m_tokens) + " per 1M tokens";
    if (t.usd_per_m_tokens_high > t.usd_per_m_tokens_low)
      s += " (80% interval " + format_usd(t.usd_per_m_tokens_low) + " - " + format_usd(t.usd_per_m_tokens_high) + ")";
    s += " at " + format_usd(t.usd_per_gpu_hour) + " a GPU-hour";
  } else if (t.usd_per_k_samples > 0) {
    s += "; " + format_usd(t.usd_per_k_samples) + " per 1k samples at " + format_usd(t.usd_per_gpu_hour) + " a GPU-hour";
  }
  return s;
}

namespace {
using detail::finite;
using detail::shape_str;

json shape_json(const TensorInfo& t) {
  json a = json::array();
  if (!t.has_shape) return a;
  for (const auto& d : t.shape) {
    if (d.known()) a.push_back(d.value);
    else if (!d.param.empty()) a.push_back(d.param);
    else a.push_back(nullptr);
  }
  return a;
}

json tensor_json(const TensorInfo& t) {
  json j{{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", shape_json(t)}};
  // Sequence / optional values: "kind", and what they hold ("elements": one entry per element
  // when "elements_known", else at most one entry every element matches).
  if (t.kind != ValueKind::tensor) {
    j["kind"] = t.kind == ValueKind::sequence ? "sequence" : "optional";
    j["elements_known"] = t.elements_known;
    json e = json::array();
    for (const auto& x : t.elements) {
      json ej = tensor_json(x);
      ej.erase("name");
      if (x.kind == ValueKind::tensor && !x.has_shape) ej["shape"] = nullptr;  // rank unknown
      e.push_back(std::move(ej));
    }
    j["elements"] = std::move(e);
  }
  return j;
}

json kernel_json(const KernelReport& k, const Gpu& gpu) {
  json j{{"class", kernel_class_name(k.kernel.cls)},
         {"phase", phase_name(k.kernel.phase)},
         {"op", k.kernel.op},
         {"dtype", dtype_name(k.kernel.dtype)},
         {"math", detail::math_name(k, gpu)},
         {"flops", finite(k.kernel.flops)},
         {"bytes", finite(k.kernel.bytes)},
         {"tile", k.tiling.tile},
         {"tiles", k.tiling.tiles},
         {"waves", k.tiling.waves},
         {"latency_ms", finite(k.prediction.latency_ms)},
         {"latency_low_ms", finite(k.prediction.low_ms())},
         {"latency_high_ms", finite(k.prediction.high_ms())},
         {"roofline_ms", finite(k.prediction.roofline_ms)},
         {"utilization", finite(k.prediction.utilization)},
         {"bound", k.prediction.bound()},
         {"extrapolated", k.prediction.extrapolated}};
  if (k.kernel.cls == KernelClass::gemm)
    j["gemm"] = {{"batch", k.kernel.gemm.batch}, {"m", k.kernel.gemm.m}, {"n", k.kernel.gemm.n}, {"k", k.kernel.gemm.k}};
  else if (k.kernel.rows > 0)
    j["vector"] = {{"rows", k.kernel.rows}, {"cols", k.kernel.cols}};
  if (k.kernel.recomputed) j["recomputed"] = true;
  if (k.kernel.sparse_2_4) j["sparse_2_4"] = true;
  if (!k.kernel.note.empty()) j["note"] = k.kernel.note;
  return j;
}

// Everything but "nodes" (see report_text).
json report_json(const Report& r) {
  json j;
  j["gpu"] = r.gpu.name;
  j["gpu_alias"] = r.gpu.alias();
  j["model"] = r.model_name;
  j["predictor"] = r.predictor;
  if (!r.timing.empty()) j["timing"] = r.timing;
  if (r.host_dispatch_us > 0) j["host_dispatch_us"] = r.host_dispatch_us;
  j["mode"] = r.mode == Mode::training ? "training" : "inference";
  j["dtype"] = dtype_name(r.dtype);
  j["dtype_source"] = dtype_source_name(r.dtype_source);
  // The dtype of the tensors other than the weights' GEMM operands (lowering.h activation_dtype).
  j["activation_dtype"] = dtype_name(r.dtype_source == DTypeSource::option ? activation_dtype(r.dtype) : r.dtype);
  j["e2e_latency_ms"] = finite(r.e2e_latency_ms);
  j["latency_low_ms"] = finite(r.e2e_low_ms);
  j["latency_high_ms"] = finite(r.e2e_high_ms);
  // How the model's (and each node's) interval joins its kernels' (predictor.h IntervalSum).
  j["interval_kernel_correlation"] = kKernelErrorCorrelation;
  j["forward_ms"] = finite(r.forward_ms);
  j["backward_ms"] = finite(r.backward_ms);
  j["update_ms"] = finite(r.update_ms);
  j["totals_by_class_ms"] = r.totals_by_class;
  j["attention_ms"] = finite(r.attention_ms);
  json outs = json::array();
  for (const auto& t : r.graph_outputs) outs.push_back(tensor_json(t));
  j["graph_outputs"] = std::move(outs);
  // "nodes" is streamed by report_text (it is the only part that grows with the model).
  json extra = json::array();
  for (const auto& k : r.extra_kernels) extra.push_back(kernel_json(k, r.gpu));
  if (!extra.empty()) j["extra_kernels"] = std::move(extra);
  if (r.parallel) j["parallel"] = detail::parallel_json(*r.parallel);
  if (r.generation) j["generation"] = detail::generation_json(*r.generation);
  if (r.memory) j["memory"] = detail::memory_json(*r.memory);
  if (r.sparsity)
    j["sparsity"] = {{"pattern", "2:4"},
                     {"targets", r.sparsity->targets},
                     {"pruned_gemms", r.sparsity->pruned_gemms},
                     {"sparse_gemms", r.sparsity->sparse_gemms},
                     {"weights_saved_gib", finite(r.sparsity->weights_saved_gib)}};
  if (r.throughput) {
    const Throughput& t = *r.throughput;
    json& o = j["throughput"] = {{"flops", finite(t.flops)},
                                 {"model_flops", finite(t.model_flops)},
                                 {"tflops", finite(t.tflops)},
                                 {"tflops_low", finite(t.tflops_low)},
                                 {"tflops_high", finite(t.tflops_high)},
                                 {"peak_math", t.peak_math},
                                 {"peak_tflops", finite(t.peak_tflops)},
                                 {"utilization", finite(t.utilization())}};
    if (t.samples > 0)
      o.update({{"samples", t.samples},
                {"samples_per_s", finite(t.samples_per_s)},
                {"samples_per_s_low", finite(t.samples_per_s_low)},
                {"samples_per_s_high", finite(t.samples_per_s_high)}});
    if (t.tokens > 0)
      o.update({{"tokens", t.tokens},
                {"tokens_per_s", finite(t.tokens_per_s)},
                {"tokens_per_s_low", finite(t.tokens_per_s_low)},
                {"tokens_per_s_high", finite(t.tokens_per_s_high)}});
    o["gpus"] = t.gpus;
    if (t.usd_per_gpu_hour > 0)
      o.update({{"usd_per_gpu_hour", finite(t.usd_per_gpu_hour)},
                {"usd_per_m_tokens", finite(t.usd_per_m_tokens)},
                {"usd_per_m_tokens_low", finite(t.usd_per_m_tokens_low)},
                {"usd_per_m_tokens_high", finite(t.usd_per_m_tokens_high)},
                {"usd_per_k_samples", finite(t.usd_per_k_samples)},
                {"train_usd", finite(t.train_usd)}});
    if (t.train_tokens > 0)
      o.update({{"train_tokens", finite(t.train_tokens)},
                {"train_days", finite(t.train_days)},
                {"train_days_low", finite(t.train_days_low)},
                {"train_days_high", finite(t.train_days_high)},
                {"gpu_hours", finite(t.gpu_hours)}});
  }
  if (r.latency_slo) {
    const Report::LatencySlo& s = *r.latency_slo;
    j["latency_slo"] = {{"slo_ms", s.slo_ms},
                        {"met", s.met},
                        {"batch", s.batch},
                        {"items_per_s", finite(r.slo_items_per_s())},
                        {"next_batch", s.next_batch},
                        {"next_latency_ms", finite(s.next_latency_ms)},
                        {"next_fits", s.next_fits},
                        {"limit", s.limit()}};
  }
  j["warnings"] = r.warnings;
  j["unknown_ops"] = r.unknown_ops;
  j["folded_nodes"] = r.folded_nodes;
  j["unpredicted_nodes"] = r.unpredicted_nodes;
  return j;
}

// Streaming writer for the per-node part of the JSON report, one node a line. Building it as
// a DOM cost more than load, shapes, lowering and prediction together on a 3,500-node graph.
void put_str(std::string& out, const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80 || c < 0x20 || c == '"' || c == '\\') {  // rare: let nlohmann escape (and fix bad UTF-8)
      out += json(s).dump(-1, ' ', false, json::error_handler_t::replace);
      return;
    }
  out += '"';
  out += s;
  out += '"';
}

void put_num(std::string& out, double v) {
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf, finite(v));
  out.append(buf, r.ptr);
}

void put_int(std::string& out, int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void put_key(std::string& out, const char* key, bool first = false) {
  if (!first) out += ", ";
  out += '"';
  out += key;
  out += "\": ";
}

void put_tensor(std::string& out, const TensorInfo& t) {
  out += '{';
  put_key(out, "name", true);
  put_str(out, t.name);
  put_key(out, "dtype");
  put_str(out, dtype_name(t.dtype));
  put_key(out, "shape");
  out += '[';
  if (t.has_shape)
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) out += ", ";
      const Dim& d = t.shape[i];
      if (d.known()) put_int(out, d.value);
      else if (!d.param.empty()) put_str(out, d.param);
      else out += "null";
    }
  out += "]}";
}

void put_kernel(std::string& out, const KernelReport& k, const Gpu& gpu) {
  out += '{';
  put_key(out, "class", true);
  put_str(out, kernel_class_name(k.kernel.cls));
  put_key(out, "phase");
  put_str(out, phase_name(k.kernel.phase));
  put_key(out, "op");
  put_str(out, k.kernel.op);
  put_key(out, "dtype");
  put_str(out, dtype_name(k.kernel.dtype));
  put_key(out, "math");
  put_str(out, detail::math_name(k, gpu));
  put_key(out, "flops");
  put_num(out, k.kernel.flops);
  put_key(out, "bytes");
  put_num(out, k.kernel.bytes);
  put_key(out, "tile");
  put_str(out, k.tiling.tile);
  put_key(out, "tiles");
  put_int(out, k.tiling.tiles);
  put_key(out, "waves");
  put_int(out, k.tiling.waves);
  put_key(out, "latency_ms");
  put_num(out, k.prediction.latency_ms);
  put_key(out, "latency_low_ms");
  put_num(out, k.prediction.low_ms());
  put_key(out, "latency_high_ms");
  put_num(out, k.prediction.high_ms());
  put_key(out, "roofline_ms");
  put_num(out, k.prediction.roofline_ms);
  put_key(out, "utilization");
  put_num(out, k.prediction.utilization);
  put_key(out, "bound");
  out += '"';
  out += k.prediction.bound();
  out += '"';
  put_key(out, "extrapolated");
  out += k.prediction.extrapolated ? "true" : "false";
  if (k.kernel.cls == KernelClass::gemm) {
    put_key(out, "gemm");
    out += "{\"batch\": ";
    put_int(out, k.kernel.gemm.batch);
    out += ", \"m\": ";
    put_int(out, k.kernel.gemm.m);
    out += ", \"n\": ";
    put_int(out, k.kernel.gemm.n);
    out += ", \"k\": ";
    put_int(out, k.kernel.gemm.k);
    out += '}';
  } else if (k.kernel.rows > 0) {
    put_key(out, "vector");
    out += "{\"rows\": ";
    put_int(out, k.kernel.rows);
    out += ", \"cols\": ";
    put_int(out, k.kernel.cols);
    out += '}';
  }
  if (!k.kernel.body_node.empty()) {
    put_key(out, "body_node");
    put_str(out, k.kernel.body_node);
  }
  if (k.kernel.recomputed) {
    put_key(out, "recomputed");
    out += "true";
  }
  if (k.kernel.sparse_2_4) {
    put_key(out, "sparse_2_4");
    out += "true";
  }
  if (!k.kernel.note.empty()) {
    put_key(out, "note");
    put_str(out, k.kernel.note);
  }
  out += '}';
}

void put_node(std::string& out, const NodeReport& n, const Gpu& gpu) {
  out += '{';
  put_key(out, "name", true);
  put_str(out, n.name);
  put_key(out, "op_type");
  put_str(out, n.op_type);
  if (!n.domain.empty()) {
    put_key(out, "domain");
    put_str(out, n.domain);
  }
  if (!n.no_kernel.empty()) {
    put_key(out, "no_kernel");
    put_str(out, n.no_kernel);
    if (n.no_kernel == "constant folded") {
      put_key(out, "folded");
      out += "true";
    }
  }
  put_key(out, "latency_ms");
  put_num(out, n.latency_ms);
  put_key(out, "latency_low_ms");
  put_num(out, n.latency_low_ms);
  put_key(out, "latency_high_ms");
  put_num(out, n.latency_high_ms);
  put_key(out, "outputs");
  out += '[';
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (i) out += ", ";
    put_tensor(out, n.outputs[i]);
  }
  out += "]";
  put_key(out, "kernels");
  out += '[';
  for (size_t i = 0; i < n.kernels.size(); ++i) {
    if (i) out += ", ";
    put_kernel(out, n.kernels[i], gpu);
  }
  out += "]}";
}

// One report object: the streamed "nodes" first, then every other field from report_json.
void report_text(std::string& out, const Report& r) {
  out += "{\n \"nodes\": [";
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    out += i ? ",\n  " : "\n  ";
    put_node(out, r.nodes[i], r.gpu);
  }
  out += "\n ]";
  const json j = report_json(r);
  for (auto it = j.begin(); it != j.end(); ++it) {
    out += ",\n \"";
    out += it.key();
    out += "\": ";
    out += it.value().dump(-1, ' ', false, json::error_handler_t::replace);
  }
  out += "\n}";
}

}  // namespace

std::string format_json(const std::vector<Report>& reports) {
  std::string out;
  size_t kernels = 0;
  for (const auto& r : reports)
    for (const auto& n : r.nodes) kernels += n.kernels.size() + 1;
  out.reserve(512 * kernels + 4096);
  if (reports.size() == 1) {
    report_text(out, reports[0]);
  } else {
    out += "[\n";
    for (size_t i = 0; i < reports.size(); ++i) {
      if (i) out += ",\n";
      report_text(out, reports[i]);
    }
    out += "\n]";
  }
  out += '\n';
  return out;
}

namespace {

// One CSV field, quoted where it holds a separator, a quote or a line break.
std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return o + "\"";
}

// A report's CSV rows (per node, or per kernel) after the header where `header`, each led by
// `lead`: the GPU's column of a GPU list with its comma (the header's `gpu` column), or "".
void write_csv(std::ostream& os, const Report& r, bool per_kernel, const std::string& lead, bool header) {
  const auto q = csv_cell;
  const char* gpu_column = lead.empty() ? "" : "gpu,";
  if (per_kernel) {
    if (header)
      os << gpu_column << "node,op_type,class,phase,op,dtype,math,flops,bytes,tile,tiles,waves,bound,latency_ms,roofline_ms,"
                      "utilization,extrapolated\n";
    auto row = [&](const std::string& node, const std::string& op_type, const KernelReport& k) {
      os << lead << q(node) << "," << q(op_type) << "," << kernel_class_name(k.kernel.cls) << ","
         << phase_name(k.kernel.phase) << "," << q(k.kernel.op) << "," << dtype_name(k.kernel.dtype) << ","
         << detail::math_name(k, r.gpu) << "," << finite(k.kernel.flops) << "," << finite(k.kernel.bytes) << "," << q(k.tiling.tile) << ","
         << k.tiling.tiles << "," << k.tiling.waves << "," << detail::bound_name(k) << ","
         << finite(k.prediction.latency_ms) << "," << finite(k.prediction.roofline_ms) << ","
         << finite(k.prediction.utilization) << "," << (k.prediction.extrapolated ? 1 : 0) << "\n";
    };
    for (const auto& n : r.nodes)
      for (const auto& k : n.kernels) row(n.name, n.op_type, k);
    for (const auto& k : r.extra_kernels) row("", "", k);
    return;
  }
  if (header)
    os << gpu_column << "node,op_type,output_shape,kernels,flops,bytes,latency_ms,share,layer,class,math,tile,waves,bound,"
                    "utilization,extrapolated\n";
  for (const auto& n : r.nodes) {
    double flops = 0, bytes = 0;
    for (const auto& k : n.kernels) {
      flops += finite(k.kernel.flops);
      bytes += finite(k.kernel.bytes);
    }
    const KernelReport* m = detail::main_kernel(n);
    os << lead << q(n.name) << "," << q(n.op_type) << "," << q(n.outputs.empty() ? "" : shape_str(n.outputs.front())) << ","
       << n.kernels.size() << "," << flops << "," << bytes << "," << finite(n.latency_ms) << ","
       << (r.share_base_ms() > 0 ? finite(n.latency_ms / r.share_base_ms()) : 0) << "," << q(layer_of(n.name)) << ","
       << (m ? kernel_class_name(m->kernel.cls) : "") << "," << (m ? detail::math_name(*m, r.gpu) : "") << ","
       << q(m ? m->tiling.tile : "") << "," << (m ? m->tiling.waves : 0) << "," << (m ? detail::bound_name(*m) : "") << ","
       << (m ? finite(m->prediction.utilization) : 0) << "," << (detail::any_extrapolated(n) ? 1 : 0) << "\n";
  }
}

}  // namespace

std::string format_csv(const std::vector<Report>& reports, bool per_kernel) {
  if (reports.size() == 1) return format_csv(reports.front(), per_kernel);
  std::ostringstream os;
  os.precision(9);
  for (size_t i = 0; i < reports.size(); ++i)
    write_csv(os, reports[i], per_kernel, csv_cell(reports[i].gpu.alias()) + ",", i == 0);
  return os.str();
}

std::string format_csv(const Report& r, bool per_kernel) {
  std::ostringstream os;
  os.precision(9);
  write_csv(os, r, per_kernel, "", true);
  return os.str();
}

}  // namespace neusight
