// compare.cpp - model variants against the first: speed-ups, class deltas, changed nodes.
#include "neusight/compare.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "util.h"

namespace neusight {
using detail::finite;
using detail::pad;

const VariantDelta& Comparison::at(size_t model, size_t gpu) const {
  for (const auto& d : deltas)
    if (d.model == model && d.gpu == gpu) return d;
  throw RuntimeError("comparison has no entry for model " + std::to_string(model) + " on GPU " + std::to_string(gpu));
}

std::vector<NodeDelta> match_nodes(const Report& base, const Report& variant) {
  std::vector<NodeDelta> out;
  std::unordered_map<std::string, size_t> base_by_name;
  for (size_t i = 0; i < base.nodes.size(); ++i) base_by_name.emplace(base.nodes[i].name, i);
  std::vector<bool> base_used(base.nodes.size(), false);
  std::vector<bool> var_used(variant.nodes.size(), false);
  auto delta = [](const NodeReport* b, const NodeReport* v, const char* how) {
    NodeDelta d;
    d.name = v ? v->name : "";
    d.base_name = b ? b->name : "";
    d.op_type = v ? v->op_type : b->op_type;
    d.matched_by = how;
    d.base_ms = b ? finite(b->latency_ms) : 0;
    d.ms = v ? finite(v->latency_ms) : 0;
    return d;
  };
  for (size_t j = 0; j < variant.nodes.size(); ++j) {
    auto it = base_by_name.find(variant.nodes[j].name);
    if (it == base_by_name.end() || base_used[it->second]) continue;
    if (base.nodes[it->second].op_type != variant.nodes[j].op_type) continue;
    base_used[it->second] = var_used[j] = true;
    out.push_back(delta(&base.nodes[it->second], &variant.nodes[j], "name"));
  }
  // A node onnxruntime's quantizer replaced (quantize_dynamic's ConvInteger / MatMulInteger,
  // the QOperator format's QLinearConv / QLinearMatMul: the float node's name + "_quant") to
  // the float node it replaced, either model the quantized one.
  auto quantized_of = [](const NodeReport& q, const NodeReport& f) {
    static const std::map<std::string, std::set<std::string>> replaces = {
        {"ConvInteger", {"Conv"}}, {"QLinearConv", {"Conv"}}, {"MatMulInteger", {"MatMul", "Gemm"}},
        {"QLinearMatMul", {"MatMul", "Gemm"}}};
    auto it = replaces.find(q.op_type);
    return it != replaces.end() && it->second.count(f.op_type) && q.name == f.name + "_quant";
  };
  // The nodes of `q` named X_quant to the unmatched node X of `f` they replaced.
  auto pair_quantized = [&](const Report& q, std::vector<bool>& q_used, const Report& f, std::vector<bool>& f_used,
                            const std::unordered_map<std::string, size_t>& f_by_name, bool q_is_variant) {
    for (size_t i = 0; i < q.nodes.size(); ++i) {
      const std::string& name = q.nodes[i].name;
      if (q_used[i] || name.size() <= 6 || name.compare(name.size() - 6, 6, "_quant") != 0) continue;
      auto it = f_by_name.find(name.substr(0, name.size() - 6));
      if (it == f_by_name.end() || f_used[it->second] || !quantized_of(q.nodes[i], f.nodes[it->second])) continue;
      q_used[i] = f_used[it->second] = true;
      const NodeReport *qn = &q.nodes[i], *fn = &f.nodes[it->second];
      out.push_back(q_is_variant ? delta(fn, qn, "quantized") : delta(qn, fn, "quantized"));
    }
  };
  pair_quantized(variant, var_used, base, base_used, base_by_name, true);
  std::unordered_map<std::string, size_t> var_by_name;
  for (size_t j = 0; j < variant.nodes.size(); ++j) var_by_name.emplace(variant.nodes[j].name, j);
  pair_quantized(base, base_used, variant, var_used, var_by_name, false);
  // The rest by position: the k-th unmatched node of an op type to the k-th of the base, first
  // among nodes whose names agree but for their numbers (an exporter's renumbered "MatMul_12",
  // layer 3 of a model with layers renumbered), then among those whose name has no such
  // counterpart anywhere in the other model (a renamed node). A deeper or wider variant's
  // extra layers, whose names the base knows by their form, are added, not paired with an
  // unrelated leftover of the base (a dense MLP's GEMM the variant replaced by experts).
  auto form = [](const std::string& name) {
    std::string f;
    for (char ch : name)
      if (ch < '0' || ch > '9') f += ch;
    return f;
  };
  std::set<std::string> base_forms, var_forms;
  for (const auto& n : base.nodes) base_forms.insert(n.op_type + "\n" + form(n.name));
  for (const auto& n : variant.nodes) var_forms.insert(n.op_type + "\n" + form(n.name));
  auto pair_by_position = [&](const std::function<std::string(const NodeReport&)>& key,
                              const std::function<bool(const NodeReport&, const std::set<std::string>&)>& eligible) {
    std::map<std::string, std::deque<size_t>> free_base;
    for (size_t i = 0; i < base.nodes.size(); ++i)
      if (!base_used[i] && eligible(base.nodes[i], var_forms)) free_base[key(base.nodes[i])].push_back(i);
    for (size_t j = 0; j < variant.nodes.size(); ++j) {
      if (var_used[j] || !eligible(variant.nodes[j], base_forms)) continue;
      auto& q = free_base[key(variant.nodes[j])];
      if (q.empty()) continue;
      const size_t i = q.front();
      q.pop_front();
      base_used[i] = var_used[j] = true;
      out.push_back(delta(&base.nodes[i], &variant.nodes[j], "position"));
    }
  };
  pair_by_position([&](const NodeReport& n) { return n.op_type + "\n" + form(n.name); },
                   [](const NodeReport&, const std::set<std::string>&) { return true; });
  pair_by_position([](const NodeReport& n) { return n.op_type; },
                   [&](const NodeReport& n, const std::set<std::string>& other) {
                     return !other.count(n.op_type + "\n" + form(n.name));
                   });
  for (size_t j = 0; j < variant.nodes.size(); ++j)
    if (!var_used[j]) out.push_back(delta(nullptr, &variant.nodes[j], "added"));
  for (size_t i = 0; i < base.nodes.size(); ++i)
    if (!base_used[i]) out.push_back(delta(&base.nodes[i], nullptr, "removed"));
  return out;
}

Comparison compare_reports(std::vector<std::string> models, std::vector<std::vector<Report>> reports, int top_nodes) {
  if (models.size() != reports.size() || reports.empty()) throw InputError("compare: need one report list per model");
  const size_t gpus = reports.front().size();
  for (size_t m = 0; m < reports.size(); ++m) {
    if (reports[m].size() != gpus) throw InputError("compare: every model must be predicted on the same GPUs");
    for (size_t g = 0; g < gpus; ++g)
      if (reports[m][g].gpu.name != reports[0][g].gpu.name)
        throw InputError("compare: GPU lists differ between " + models[0] + " and " + models[m]);
  }
  Comparison c;
  c.models = std::move(models);
  c.reports = std::move(reports);
  std::vector<IntervalSum> base_sums;  // each GPU's first model, the base of every speed-up interval
  for (const Report& base : c.reports[0]) base_sums.push_back(interval_sum(base));
  for (size_t m = 0; m < c.reports.size(); ++m)
    for (size_t g = 0; g < gpus; ++g) {
      const Report& base = c.reports[0][g];
      const Report& var = c.reports[m][g];
      VariantDelta d;
      d.model = m;
      d.gpu = g;
      d.e2e_ms = finite(var.e2e_latency_ms);
      d.base_ms = finite(base.e2e_latency_ms);
      d.speedup = d.e2e_ms > 0 ? d.base_ms / d.e2e_ms : 0;
      d.speedup_low = d.speedup_high = d.speedup;
      if (m > 0 && d.speedup > 0) {
        // The kernels' sums' interval, about the latencies' ratio (under --parallel the latency
        // is a pipeline's or an iteration's, not the sum of one micro-batch's kernels).
        const RatioInterval ri = ratio_interval(base_sums[g], interval_sum(var));
        if (ri.ratio > 0) {
          d.speedup_low = finite(d.speedup * ri.low / ri.ratio);
          d.speedup_high = finite(d.speedup * ri.high / ri.ratio);
        }
      }
      if (base.generation && var.generation && base.generation->tokens_per_s > 0) {
        const GenerationReport &bg = *base.generation, &vg = *var.generation;
        d.tokens_per_s_speedup = d.tokens_per_s_speedup_low = d.tokens_per_s_speedup_high =
            finite(vg.tokens_per_s / bg.tokens_per_s);
        // tokens/s = tokens / time: the speed-up is the ratio of the times (times the tokens'
        // ratio, which is exact), with the times' interval.
        const RatioInterval ri = m > 0 ? ratio_interval(bg.time, vg.time) : RatioInterval{};
        if (ri.ratio > 0) {
          d.tokens_per_s_speedup_low = finite(d.tokens_per_s_speedup * ri.low / ri.ratio);
          d.tokens_per_s_speedup_high = finite(d.tokens_per_s_speedup * ri.high / ri.ratio);
        }
      }
      for (const auto& [cls, ms] : base.totals_by_class) d.class_delta_ms[cls] -= finite(ms);
      for (const auto& [cls, ms] : var.totals_by_class) d.class_delta_ms[cls] += finite(ms);
      auto nodes = match_nodes(base, var);
      for (const auto& n : nodes) {
        if (n.matched_by == "name") ++d.matched_by_name;
        else if (n.matched_by == "quantized") ++d.matched_by_quantized;
        else if (n.matched_by == "position") ++d.matched_by_position;
        else if (n.matched_by == "added") ++d.added;
        else ++d.removed;
      }
      std::stable_sort(nodes.begin(), nodes.end(), [](const NodeDelta& a, const NodeDelta& b) {
        return std::fabs(a.delta_ms()) > std::fabs(b.delta_ms());
      });
      if (m > 0) {
        if (top_nodes >= 0 && nodes.size() > static_cast<size_t>(top_nodes)) nodes.resize(static_cast<size_t>(top_nodes));
        d.top_nodes = std::move(nodes);
      }
      c.deltas.push_back(std::move(d));
    }
  return c;
}

namespace {

std::string signed_ms(double v) { return (v > 0 ? "+" : v < 0 ? "-" : " ") + format_ms(std::fabs(v)); }

// "0.41x (0.37-0.47)": a speed-up with its 80% interval; the first model's alone ("1.00x").
std::string speedup_text(double v, double low, double high, bool first) {
  const std::string s = detail::fixed(v, 2) + "x";
  return first ? s : s + " (" + detail::fixed(low, 2) + "-" + detail::fixed(high, 2) + ")";
}

// "12.3 (10.1-14.2)": a latency with its 80% interval.
std::string latency_text(const Report& r, double ms) {
  return format_ms(ms) + " (" + format_ms(r.e2e_low()) + "-" + format_ms(r.e2e_high()) + ")";
}

// "model on gpu (N GPUs hold it)" for every model and GPU whose run does not fit one GPU.
std::string too_large_text(const Comparison& c) {
  std::string out;
  for (size_t m = 0; m < c.models.size(); ++m)
    for (const Report& r : c.reports[m])
      if (r.memory && !r.memory->fits())
        out += std::string(out.empty() ? "" : ", ") + c.models[m] + " on " + r.gpu.alias() + " (" +
               std::to_string(r.memory->gpus_to_hold()) + " GPUs hold it)";
  return out;
}

// Model x GPU: a row per model, a latency and speed-up column pair per GPU.
void table_by_model(std::ostream& os, const Comparison& c, size_t mw, const std::function<std::string(const std::string&)>& bold) {
  const size_t gpus = c.reports.front().size();
  // Each model's memory on one GPU (the same on every GPU; report.h MemoryFootprint).
  const bool memory = c.reports[0][0].memory.has_value();
  std::string head = pad("model", mw) + (memory ? " " + pad("memory GiB", 10, true) : "");
  for (size_t g = 0; g < gpus; ++g)
    head += " " + pad(c.reports[0][g].gpu.alias() + " ms", 24, true) + " " + pad("speed-up", 17, true);
  os << bold(head) << "\n";
  for (size_t m = 0; m < c.models.size(); ++m) {
    os << pad(c.models[m], mw);
    const auto& mem = c.reports[m][0].memory;
    if (memory) os << " " << pad(mem ? detail::fixed(mem->total_gib(), 2) : "-", 10, true);
    for (size_t g = 0; g < gpus; ++g) {
      const auto& d = c.at(m, g);
      os << " " << pad(latency_text(c.reports[m][g], d.e2e_ms), 24, true) << " "
         << pad(speedup_text(d.speedup, d.speedup_low, d.speedup_high, m == 0), 17, true);
    }
    os << "\n";
  }
}

// The width of a column of the GPUs' aliases, and a model's name cut to fit a column head
// (tables that run down, one row per GPU).
size_t gpu_column_width(const Comparison& c) { return detail::alias_width(c.reports[0], 3); }  // "gpu"
std::string short_model_label(const std::string& model) {
  return model.size() > 21 ? model.substr(0, 20) + "~" : model;
}

// GPU x model, for more GPUs than fit across: a row per GPU, the first model's latency, then
// each other model's latency and speed-up; the models' memory on a line of its own.
void table_by_gpu(std::ostream& os, const Comparison& c, const std::function<std::string(const std::string&)>& bold) {
  const size_t gpus = c.reports.front().size();
  if (c.reports[0][0].memory) {
    os << "memory GiB (one GPU):";
    for (size_t m = 0; m < c.models.size(); ++m)
      os << (m ? ", " : " ") << c.models[m] << " "
         << (c.reports[m][0].memory ? detail::fixed(c.reports[m][0].memory->total_gib(), 2) : std::string("-"));
    os << "\n";
  }
  const size_t gw = gpu_column_width(c);
  std::string head = pad("gpu", gw);
  for (size_t m = 0; m < c.models.size(); ++m) {
    const std::string label = short_model_label(c.models[m]);
    head += " " + pad(label + " ms", 24, true) + (m ? " " + pad("speed-up", 17, true) : "");
  }
  os << bold(head) << "\n";
  for (size_t g = 0; g < gpus; ++g) {
    os << pad(c.reports[0][g].gpu.alias(), gw);
    for (size_t m = 0; m < c.models.size(); ++m) {
      const auto& d = c.at(m, g);
      os << " " << pad(latency_text(c.reports[m][g], d.e2e_ms), 24, true);
      if (m) os << " " << pad(speedup_text(d.speedup, d.speedup_low, d.speedup_high, false), 17, true);
    }
    os << "\n";
  }
}

// --generate over a few GPUs: a block per GPU, a row per model.
void generation_by_model(std::ostream& os, const Comparison& c, size_t mw,
                         const std::function<std::string(const std::string&)>& bold) {
  const size_t gpus = c.reports.front().size();
  for (size_t g = 0; g < gpus; ++g) {
    os << bold(c.reports[0][g].gpu.name) << "\n"
       << pad("model", mw) << " " << pad("TTFT ms", 11, true) << " " << pad("TPOT ms", 10, true) << " "
       << pad("tokens/s", 10, true) << " " << pad("speed-up", 17, true) << "\n";
    for (size_t m = 0; m < c.models.size(); ++m) {
      const auto& gen = c.reports[m][g].generation;
      if (!gen) continue;
      const auto& d = c.at(m, g);
      os << pad(c.models[m], mw) << " " << pad(format_ms(gen->ttft_ms), 11, true) << " "
         << pad(format_ms(gen->tpot_ms), 10, true) << " " << pad(detail::fixed(gen->tokens_per_s, 1), 10, true) << " "
         << pad(speedup_text(d.tokens_per_s_speedup, d.tokens_per_s_speedup_low, d.tokens_per_s_speedup_high, m == 0),
                17, true)
         << "\n";
    }
  }
}

// --generate over many GPUs: a row per GPU, each model's TTFT / TPOT and tokens/s, and the other
// models' speed-up in tokens/s.
void generation_by_gpu(std::ostream& os, const Comparison& c, const std::function<std::string(const std::string&)>& bold) {
  const size_t gw = gpu_column_width(c);
  std::string head = pad("gpu", gw);
  for (size_t m = 0; m < c.models.size(); ++m) {
    const std::string label = short_model_label(c.models[m]);
    head += " " + pad(label + " TTFT/TPOT ms", 36, true) + " " + pad("tokens/s", 9, true) + (m ? " " + pad("speed-up", 17, true) : "");
  }
  os << bold(head) << "\n";
  for (size_t g = 0; g < c.reports[0].size(); ++g) {
    os << pad(c.reports[0][g].gpu.alias(), gw);
    for (size_t m = 0; m < c.models.size(); ++m) {
      const auto& gen = c.reports[m][g].generation;
      const auto& d = c.at(m, g);
      os << " " << pad(gen ? format_ms(gen->ttft_ms) + " / " + format_ms(gen->tpot_ms) : "-", 36, true) << " "
         << pad(gen ? detail::fixed(gen->tokens_per_s, 1) : "-", 9, true);
      if (m)
        os << " " << pad(speedup_text(d.tokens_per_s_speedup, d.tokens_per_s_speedup_low, d.tokens_per_s_speedup_high, false), 17, true);
    }
    os << "\n";
  }
}

// Under --parallel, the GPUs each model runs on (one copy of the model; dp replicas with it):
// "" on one GPU.
std::string multi_gpu_line(const Report& r) {
  int dp = 1, tp = 1, pp = 1, cp = 1;
  if (r.parallel) {
    dp = r.parallel->config.dp;
    cp = r.parallel->config.cp;
    tp = r.parallel->config.tp;
    pp = r.parallel->config.pp;
  } else if (r.generation) {
    tp = r.generation->tp;
    pp = r.generation->pp;
  } else if (r.memory) {
    tp = r.memory->tp;
  }
  const int gpus = dp * tp * pp * cp;
  if (gpus <= 1) return "";
  std::string split;
  for (const auto& [axis, n] : {std::pair<const char*, int>{"dp", dp}, {"tp", tp}, {"pp", pp}, {"cp", cp}})
    if (n > 1) split += std::string(split.empty() ? "" : ", ") + axis + "=" + std::to_string(n);
  return "each model on " + std::to_string(gpus) + " GPUs of each kind (" + split + "); memory is one GPU's\n";
}

}  // namespace

std::string format_compare_table(const Comparison& c, bool color) {
  std::ostringstream os;
  std::function<std::string(const std::string&)> bold = [&](const std::string& s) {
    return color ? "\033[1m" + s + "\033[0m" : s;
  };
  const size_t gpus = c.reports.front().size();
  size_t mw = 5;
  for (const auto& m : c.models) mw = std::max(mw, m.size());
  mw = std::min<size_t>(mw, 40);
  // End-to-end latency and speed-up against the first model: GPUs across, or down when more
  // than kCompareGpuColumns.
  const bool by_gpu = gpus > kCompareGpuColumns;
  os << bold("end-to-end latency and speed-up against " + c.models[0] + " (80% intervals)") << "\n";
  os << multi_gpu_line(c.reports[0][0]);
  if (by_gpu) table_by_gpu(os, c, bold);
  else table_by_model(os, c, mw, bold);
  const std::string too_large = too_large_text(c);
  if (!too_large.empty()) os << "does not fit one GPU's memory: " << too_large << "\n";
  if (c.reports[0][0].generation) {
    // --generate: the latency above is the prefill; the generation per model and GPU.
    os << "\n" << bold("generation: time to first token / per output token, output tokens/s (speed-up against " +
                       c.models[0] + ")") << "\n";
    if (by_gpu) generation_by_gpu(os, c, bold);
    else generation_by_model(os, c, mw, bold);
  }
  // Class and node deltas per model and GPU (only the first GPU's when the GPUs run down).
  const size_t delta_gpus = by_gpu ? 1 : gpus;
  for (size_t m = 1; m < c.models.size(); ++m)
    for (size_t g = 0; g < delta_gpus; ++g) {
      const auto& d = c.at(m, g);
      os << "\n" << bold(c.models[m] + " vs " + c.models[0] + " on " + c.reports[0][g].gpu.name) << "\n";
      os << pad("class", 12) << " " << pad("base ms", 11, true) << " " << pad("ms", 11, true) << " "
         << pad("delta ms", 12, true) << "\n";
      for (const auto& class_delta : d.class_delta_ms) {
        const std::string& cls = class_delta.first;  // (not a structured binding: lambdas capture it)
        const double delta = class_delta.second;
        auto get = [&](const Report& r) {
          auto it = r.totals_by_class.find(cls);
          return it == r.totals_by_class.end() ? 0.0 : it->second;
        };
        os << pad(cls, 12) << " " << pad(format_ms(get(c.reports[0][g])), 11, true) << " "
           << pad(format_ms(get(c.reports[m][g])), 11, true) << " " << pad(signed_ms(delta), 12, true) << "\n";
      }
      os << "nodes matched by name " << d.matched_by_name;
      if (d.matched_by_quantized > 0) os << ", as quantized " << d.matched_by_quantized;
      os << ", by position " << d.matched_by_position << ", added "
         << d.added << ", removed " << d.removed << "\n";
      if (!d.top_nodes.empty()) {
        size_t nw = 4;
        for (const auto& n : d.top_nodes) nw = std::max(nw, (n.name.empty() ? n.base_name : n.name).size());
        nw = std::min<size_t>(nw, 44);
        os << pad("node", nw) << " " << pad("op", 12) << " " << pad("match", 9) << " " << pad("base ms", 11, true) << " "
           << pad("ms", 11, true) << " " << pad("delta ms", 12, true) << "\n";
        for (const auto& n : d.top_nodes)
          os << pad(n.name.empty() ? n.base_name : n.name, nw) << " " << pad(n.op_type, 12) << " " << pad(n.matched_by, 9)
             << " " << pad(format_ms(n.base_ms), 11, true) << " " << pad(format_ms(n.ms), 11, true) << " "
             << pad(signed_ms(n.delta_ms()), 12, true) << "\n";
      }
    }
  if (by_gpu && c.models.size() > 1)
    os << "\nthe class and node deltas on the other " << gpus - 1 << " GPUs are in --json and --html\n";
  return os.str();
}

std::string format_compare_json(const Comparison& c) {
  using nlohmann::json;
  json j;
  j["models"] = c.models;
  json gpus = json::array();
  for (const auto& r : c.reports.front()) gpus.push_back(json{{"name", r.gpu.name}, {"alias", r.gpu.alias()}});
  j["gpus"] = gpus;
  json rows = json::array();
  for (const auto& d : c.deltas) {
    const Report& r = c.reports[d.model][d.gpu];
    json row{{"model", c.models[d.model]},
             {"gpu", r.gpu.name},
             {"gpu_alias", r.gpu.alias()},
             {"mode", detail::mode_name(r.mode)},
             {"dtype", dtype_name(r.dtype)},
             {"e2e_latency_ms", d.e2e_ms},
             {"latency_low_ms", finite(r.e2e_low())},
             {"latency_high_ms", finite(r.e2e_high())},
             {"base_latency_ms", d.base_ms},
             {"speedup", d.speedup},
             {"speedup_low", d.speedup_low},
             {"speedup_high", d.speedup_high},
             {"forward_ms", finite(r.forward_ms)},
             {"backward_ms", finite(r.backward_ms)},
             {"update_ms", finite(r.update_ms)},
             {"totals_by_class_ms", r.totals_by_class},
             {"class_delta_ms", d.class_delta_ms},
             {"matched", {{"name", d.matched_by_name}, {"quantized", d.matched_by_quantized},
                          {"position", d.matched_by_position}, {"added", d.added},
                          {"removed", d.removed}}}};
    json nodes = json::array();
    for (const auto& n : d.top_nodes)
      nodes.push_back(json{{"name", n.name}, {"base_name", n.base_name}, {"op_type", n.op_type},
                           {"matched_by", n.matched_by}, {"base_ms", n.base_ms}, {"ms", n.ms},
                           {"delta_ms", n.delta_ms()}});
    row["top_changed_nodes"] = nodes;
    if (r.memory) row["memory"] = detail::memory_json(*r.memory);
    if (r.generation) {
      row["generation"] = detail::generation_json(*r.generation);
      row["tokens_per_s_speedup"] = d.tokens_per_s_speedup;
      row["tokens_per_s_speedup_low"] = d.tokens_per_s_speedup_low;
      row["tokens_per_s_speedup_high"] = d.tokens_per_s_speedup_high;
    }
    rows.push_back(row);
  }
  j["results"] = rows;
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace neusight
