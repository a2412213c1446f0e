// table.cpp - the terminal report: per-node or per-layer table, class totals, phases, GPU list.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <sstream>

#include "neusight/report.h"
#include "util.h"

namespace neusight {
using detail::pad;

namespace {

// ANSI styles, empty when colour is off so piped output stays plain.
struct Style {
  bool on;
  std::string operator()(const std::string& s, const char* code) const {
    return on ? std::string("\033[") + code + "m" + s + "\033[0m" : s;
  }
};

std::string pct(double part, double total) { return total > 0 ? detail::fixed(100.0 * part / total, 1) : "0.0"; }

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

void class_totals(std::ostream& os, const Report& r, const Style& st) {
  std::vector<std::pair<std::string, double>> cls(r.totals_by_class.begin(), r.totals_by_class.end());
  std::stable_sort(cls.begin(), cls.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::map<std::string, int> count;
  // Device timing: the kernels the host's dispatch outlasts (Prediction::host_bound).
  int host = 0, all = 0;
  double host_ms = 0;
  for (const auto& n : r.nodes)
    for (const auto& k : n.kernels) {
      ++count[kernel_class_name(k.kernel.cls)];
      ++all;
      if (k.prediction.host_bound) ++host, host_ms += k.prediction.latency_ms;
    }
  for (const auto& k : r.extra_kernels) ++count[kernel_class_name(k.kernel.cls)];
  std::map<std::string, std::string> ranges = interval_ranges_by(r, false);
  const bool interval = std::any_of(ranges.begin(), ranges.end(), [](const auto& s) { return !s.second.empty(); });
  os << "\n" << st("by kernel class", "1") << "\n";
  os << pad("class", 12) << " " << pad("kernels", 8, true) << " " << pad("ms", 11, true) << " " << pad("%", 6, true)
     << (interval ? " " + pad("80% interval", 21, true) : "") << "\n";
  for (const auto& [c, ms] : cls)
    os << pad(c, 12) << " " << pad(std::to_string(count[c]), 8, true) << " " << pad(format_ms(ms), 11, true) << " "
       << pad(pct(ms, r.share_base_ms()), 6, true) << (interval ? " " + pad(ranges[c], 21, true) : "") << "\n";
  if (r.attention_ms > 0) {
    int attention = 0;
    for (const auto& n : r.nodes)
      for (const auto& k : n.kernels) attention += is_attention_kernel(k.kernel);
    os << pad("attention", 12) << " " << pad(std::to_string(attention), 8, true) << " " << pad(format_ms(r.attention_ms), 11, true)
       << " " << pad(pct(r.attention_ms, r.share_base_ms()), 6, true) << "  (FlashAttention kernels, counted in their class above)\n";
  }
  if (host > 0) {
    char dispatch[32];
    std::snprintf(dispatch, sizeof dispatch, "%.2f us", r.host_dispatch_us);
    os << "host-bound: " << host << " of " << all << " kernels, " << format_ms(host_ms)
       << " ms (each at least the framework's dispatch of its op, " << dispatch
       << ", --host-dispatch-us; --timing kernel gives GPU time alone)\n";
  }
}

void node_rows(std::ostream& os, const Report& r, const TableOptions& opt, const Style& st, bool& extrapolated) {
  const std::vector<const NodeReport*> rows = detail::kernel_nodes(r.nodes, opt.top);
  size_t name_w = 4;
  for (const NodeReport* n : rows) name_w = std::max(name_w, n->name.size());
  name_w = std::min<size_t>(name_w, 48);
  size_t math_w = 11;  // "fp16-tensor"; "uint8-tensor" and the like widen it
  size_t op_w = 14;    // up to "SkipSimplifiedLayerNormalization" (32)
  for (const NodeReport* n : rows) {
    math_w = std::max(math_w, detail::math_name(*detail::main_kernel(*n), r.gpu).size());
    op_w = std::max(op_w, std::min<size_t>(n->op_type.size(), 32));
  }
  os << st(pad("node", name_w) + " " + pad("op", op_w) + " " + pad("class", 11) + " " + pad("math", math_w) + " " +
               pad("output", 20) + " " +
               pad("tile", 9) + " " + pad("waves", 6, true) + " " + pad("bound", 7) + " " + pad("util%", 6, true) +
               " " + pad("ms", 11, true) + " " + pad("%", 6, true),
           "1")
     << "\n";
  for (const NodeReport* n : rows) {
    const KernelReport& m = *detail::main_kernel(*n);
    const bool ex = detail::any_extrapolated(*n);
    extrapolated = extrapolated || ex;
    const std::string bound = detail::bound_name(m);
    const std::string share = pct(n->latency_ms, r.share_base_ms());
    const bool unknown = m.kernel.cls == KernelClass::unknown;
    os << pad(n->name, name_w) << " " << pad(n->op_type, op_w) << " " << pad(kernel_class_name(m.kernel.cls), 11) << " "
       << pad(detail::math_name(m, r.gpu), math_w) << " "
       << pad(n->outputs.empty() ? "" : detail::shape_str(n->outputs.front()), 20) << " " << pad(m.tiling.tile, 9)
       << " " << pad(std::to_string(m.tiling.waves), 6, true) << " "
       << st(pad(bound, 7), bound == "compute" ? "36" : bound == "memory" ? "33" : bound == "host" ? "35" : "2") << " "
       << pad(unknown ? "-" : detail::fixed(100.0 * m.prediction.utilization, 1), 6, true) << " "
       << st(pad(format_ms(n->latency_ms) + (ex ? "*" : ""), 11, true),
             r.share_base_ms() > 0 && n->latency_ms >= 0.05 * r.share_base_ms() ? "1;31" : "0")
       << " " << pad(share, 6, true) << "\n";
  }
  if (opt.top > 0)
    os << "(the " << rows.size() << " slowest of " << r.nodes.size() << " nodes)\n";
}

void layer_rows(std::ostream& os, const Report& r, const TableOptions& opt, const Style& st) {
  std::vector<LayerSummary> layers = group_by_layer(r);
  const size_t all = layers.size();
  if (opt.top > 0) {
    std::stable_sort(layers.begin(), layers.end(),
                     [](const auto& a, const auto& b) { return a.latency_ms > b.latency_ms; });
    if (layers.size() > static_cast<size_t>(opt.top)) layers.resize(static_cast<size_t>(opt.top));
  }
  const bool training = r.mode == Mode::training;
  size_t name_w = 5;
  for (const auto& l : layers) name_w = std::max(name_w, l.name.size());
  name_w = std::min<size_t>(name_w, 48);
  std::string head = pad("layer", name_w) + " " + pad("nodes", 6, true) + " " + pad("top class", 11) + " ";
  if (training) head += pad("fwd ms", 10, true) + " " + pad("bwd ms", 10, true) + " " + pad("upd ms", 10, true) + " ";
  head += pad("ms", 11, true) + " " + pad("%", 6, true);
  os << st(head, "1") << "\n";
  for (const auto& l : layers) {
    std::string top;
    double top_ms = -1;
    for (const auto& [c, ms] : l.by_class)
      if (ms > top_ms) top = c, top_ms = ms;
    os << pad(l.name, name_w) << " " << pad(std::to_string(l.nodes), 6, true) << " " << pad(top, 11) << " ";
    if (training)
      os << pad(format_ms(l.forward_ms), 10, true) << " " << pad(format_ms(l.backward_ms), 10, true) << " "
         << pad(format_ms(l.update_ms), 10, true) << " ";
    os << pad(format_ms(l.latency_ms), 11, true) << " " << pad(pct(l.latency_ms, r.share_base_ms()), 6, true) << "\n";
  }
  if (opt.top > 0) os << "(the " << layers.size() << " slowest of " << all << " layers)\n";
}

}  // namespace

std::string layer_of(const std::string& name) {
  size_t pos = 0;
  while (pos <= name.size()) {
    size_t next = name.find_first_of("./", pos);
    const size_t end = next == std::string::npos ? name.size() : next;
    if (end > pos && all_digits(name.substr(pos, end - pos)) && pos > 0) return name.substr(0, end);
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  const size_t slash = name.rfind('/');
  if (slash != std::string::npos && slash > 0) return name.substr(0, slash);
  return name;
}

std::vector<LayerSummary> group_by_layer(const Report& r) {
  std::vector<LayerSummary> out;
  std::map<std::string, size_t> index;
  for (const auto& n : r.nodes) {
    if (n.kernels.empty()) continue;
    const std::string layer = layer_of(n.name);
    auto it = index.find(layer);
    if (it == index.end()) {
      it = index.emplace(layer, out.size()).first;
      out.push_back(LayerSummary{layer, 0, 0, 0, 0, 0, {}});
    }
    LayerSummary& l = out[it->second];
    ++l.nodes;
    for (const auto& k : n.kernels) {
      const double ms = detail::finite(k.prediction.latency_ms);
      l.latency_ms += ms;
      (k.kernel.phase == Phase::forward ? l.forward_ms : k.kernel.phase == Phase::backward ? l.backward_ms
                                                                                            : l.update_ms) += ms;
      l.by_class[kernel_class_name(k.kernel.cls)] += ms;
    }
  }
  return out;
}

std::string format_table(const Report& r, const TableOptions& opt) {
  std::ostringstream os;
  const Style st{opt.color};
  os << st("neusight-onnx: " + (r.model_name.empty() ? std::string("model") : r.model_name) + " on " + r.gpu.name,
           "1")
     << " (" << detail::mode_name(r.mode) << ", " << dtype_label(r) << ", " << r.predictor << (r.timing.empty() ? "" : ", " + r.timing + " timing") << ")\n\n";
  bool extrapolated = false;
  if (opt.group_layers) layer_rows(os, r, opt, st);
  else node_rows(os, r, opt, st, extrapolated);
  if (extrapolated) os << "* outside the predictor's training range (extrapolated)\n";
  class_totals(os, r, st);
  if (r.parallel)
    os << "(nodes, classes and phases: one micro-batch through every stage, " << format_ms(r.share_base_ms())
       << " ms of kernels on the GPUs, the shares of it; the " << (r.parallel->inference ? "pipeline" : "iteration")
       << " below)\n";
  if (r.mode == Mode::training) {
    const double t = r.share_base_ms();
    std::map<std::string, std::string> ranges = interval_ranges_by(r, true);
    const bool interval = std::any_of(ranges.begin(), ranges.end(), [](const auto& s) { return !s.second.empty(); });
    os << "\n" << st("by phase", "1") << "\n"
       << pad("phase", 12) << " " << pad("ms", 11, true) << " " << pad("%", 6, true)
       << (interval ? " " + pad("80% interval", 21, true) : "") << "\n";
    for (const auto& [name, ms] : {std::pair<const char*, double>{"forward", r.forward_ms}, {"backward", r.backward_ms},
                                   {"update", r.update_ms}}) {
      const std::string& cell = ranges[name];
      os << pad(name, 12) << " " << pad(format_ms(ms), 11, true) << " " << pad(pct(ms, t), 6, true)
         << (cell.empty() ? "" : " " + pad(cell, 21, true)) << "\n";
    }
  }
  if (!r.unknown_ops.empty()) {
    // Nodes without a kernel rule or without inferred shapes; kernels of a control-flow body
    // count for no node of their own (the If or Loop holding them is predicted).
    if (r.unpredicted_nodes > 0)
      os << "\nnot predicted (" << r.unpredicted_nodes << (r.unpredicted_nodes == 1 ? " node" : " nodes") << ", 0 ms):";
    else
      os << "\nnot predicted (kernels of control-flow bodies, 0 ms):";
    for (const auto& u : r.unknown_ops) os << " " << u;
    os << "\n";
  }
  if (r.folded_nodes > 0)
    os << "\nconstant folded: " << r.folded_nodes << (r.folded_nodes == 1 ? " node" : " nodes")
       << " computed from constants before the run (no kernel)\n";
  os << "\n" << st("end-to-end latency: " + format_ms(r.e2e_latency_ms) + " ms", "1;32");
  os << detail::interval_text(r.e2e_high_ms > r.e2e_low_ms, format_ms(r.e2e_low_ms), format_ms(r.e2e_high_ms), " ms");
  if (r.unpredicted_nodes > 0)
    os << "; " << r.unpredicted_nodes << (r.unpredicted_nodes == 1 ? " node" : " nodes") << " not predicted";
  os << "\n";
  if (r.throughput) os << "throughput: " << throughput_text(*r.throughput, r.mode) << "\n";
  if (r.memory) os << (r.memory->fits() ? "memory: " : st("memory: ", "1;31")) << memory_text(*r.memory) << "\n";
  if (r.latency_slo) os << st("latency target: ", "1") << latency_slo_text(r) << "\n";
  return os.str();
}

std::string format_top_nodes(const Report& r, const std::string& title, int top, bool color) {
  std::ostringstream os;
  const Style st{color};
  os << st(title, "1") << "\n";
  bool extrapolated = false;
  node_rows(os, r, TableOptions{top, false, color}, st, extrapolated);
  if (extrapolated) os << "* outside the predictor's training range (extrapolated)\n";
  return os.str();
}

std::string latency_slo_text(const Report& r) {
  const Report::LatencySlo& s = *r.latency_slo;
  const std::string slo = format_ms(s.slo_ms) + " ms";
  if (!s.met)
    return "not met: batch 1 takes " + format_ms(r.e2e_latency_ms) + " ms" +
           (r.e2e_latency_ms <= s.slo_ms ? " but does not fit" : "") + " (target " + slo + ")";
  std::string t = "batch " + std::to_string(s.batch) + " within " + slo + " (" + format_ms(r.e2e_latency_ms) + " ms, " +
                  detail::fixed(r.slo_items_per_s(), 1) + " items/s)";
  if (s.next_batch > 0)
    t += "; batch " + std::to_string(s.next_batch) +
         (s.next_fits ? " takes " + format_ms(s.next_latency_ms) + " ms" : " does not fit the memory");
  else
    t += "; the search stops at batch " + std::to_string(Report::kMaxSloBatch);
  return t;
}

// --latency-slo on a GPU list: each GPU's batch, latency and throughput at the target, and the
// throughput against the first GPU's.
std::string slo_gpu_table(const std::vector<Report>& reports) {
  std::ostringstream os;
  size_t w = 3;
  for (const auto& r : reports) w = std::max(w, r.gpu.name.size());
  const size_t aw = detail::alias_width(reports, 5);  // "alias"
  os << pad("gpu", w) << " " << pad("alias", aw) << " " << pad("batch", 7, true) << " " << pad("e2e ms", 11, true) << " "
     << pad("80% interval", 21, true) << " " << pad("items/s", 11, true) << " " << pad("vs first", 9, true) << "  limit\n";
  const double first = reports.front().slo_items_per_s();
  for (const auto& r : reports) {
    const bool met = r.latency_slo->met;
    os << pad(r.gpu.name, w) << " " << pad(r.gpu.alias(), aw) << " "
       << pad(met ? std::to_string(r.latency_slo->batch) : "-", 7, true) << " " << pad(format_ms(r.e2e_latency_ms), 11, true)
       << " " << pad(range_text(r.e2e_low(), r.e2e_high()), 21, true) << " "
       << pad(met ? detail::fixed(r.slo_items_per_s(), 1) : "-", 11, true) << " "
       << pad(met && first > 0 ? detail::fixed(r.slo_items_per_s() / first, 2) + "x" : "-", 9, true) << "  "
       << r.latency_slo->limit() << "\n";
  }
  return os.str();
}

std::string format_gpu_table(const std::vector<Report>& reports) {
  std::ostringstream os;
  if (reports.empty()) return "";
  if (std::all_of(reports.begin(), reports.end(), [](const Report& r) { return r.latency_slo.has_value(); }))
    return slo_gpu_table(reports);
  const bool training = std::any_of(reports.begin(), reports.end(), [](const Report& r) { return r.mode == Mode::training; });
  size_t w = 3;
  for (const auto& r : reports) w = std::max(w, r.gpu.name.size());
  const size_t aw = detail::alias_width(reports, 5);  // "alias"
  os << pad("gpu", w) << " " << pad("alias", aw) << " ";
  if (training) os << pad("forward ms", 11, true) << " " << pad("backward ms", 11, true) << " " << pad("update ms", 11, true) << " ";
  // The end-to-end latency's 80% interval where the predictor gives one (not the roofline).
  const bool interval = std::any_of(reports.begin(), reports.end(), [](const Report& r) { return r.e2e_high_ms > r.e2e_low_ms; });
  // Whether the run fits one GPU's memory (reports that count it: not --parallel, --generate).
  const bool memory = std::any_of(reports.begin(), reports.end(), [](const Report& r) { return r.memory.has_value(); });
  // Columns from the reports' throughput, each shown where some report has a value for it ("":
  // none): the share of the GEMMs' dense peak (training: model FLOPs, MFU); where --gpu-cost
  // prices the GPUs, the cost of a million tokens (else a thousand samples); --train-tokens:
  // the run's days, and its cost where priced.
  struct Column {
    std::string header;
    size_t width;
    std::function<std::string(const Throughput&)> cell;
  };
  std::vector<Column> columns;
  auto add_column = [&](Column c) {
    if (std::any_of(reports.begin(), reports.end(), [&](const Report& r) { return r.throughput && !c.cell(*r.throughput).empty(); }))
      columns.push_back(std::move(c));
  };
  add_column({training ? "MFU" : "peak", 6, [](const Throughput& t) {
    return t.peak_tflops > 0 ? detail::fixed(100 * t.utilization(), 1) + "%" : std::string();
  }});
  const size_t before_cost = columns.size();
  add_column({"$/1M tok", 9, [](const Throughput& t) { return t.usd_per_m_tokens > 0 ? format_usd(t.usd_per_m_tokens) : std::string(); }});
  if (columns.size() == before_cost)
    add_column({"$/1k smp", 9, [](const Throughput& t) { return t.usd_per_k_samples > 0 ? format_usd(t.usd_per_k_samples) : std::string(); }});
  add_column({"run days", 9, [](const Throughput& t) {
    return t.train_days > 0 ? detail::fixed(t.train_days, t.train_days >= 10 ? 1 : 2) : std::string();
  }});
  add_column({"run $", 9, [](const Throughput& t) { return t.train_usd > 0 ? format_usd(t.train_usd) : std::string(); }});
  os << pad("e2e ms", 11, true) << " " << (interval ? pad("80% interval", 21, true) + " " : "") << pad("vs first", 9, true)
     << (interval ? " " + pad("80% interval", 15, true) : "");
  for (const Column& c : columns) os << " " << pad(c.header, c.width, true);
  os << (memory ? "  memory" : "") << "\n";
  const Report& first = reports.front();
  for (const auto& r : reports) {
    os << pad(r.gpu.name, w) << " " << pad(r.gpu.alias(), aw) << " ";
    if (training)
      os << pad(format_ms(r.forward_ms), 11, true) << " " << pad(format_ms(r.backward_ms), 11, true) << " "
         << pad(format_ms(r.update_ms), 11, true) << " ";
    os << pad(format_ms(r.e2e_latency_ms), 11, true) << " "
       << (interval ? pad(range_text(r.e2e_low(), r.e2e_high()), 21, true) + " " : "");
    // The speed-up with its interval (the two GPUs' errors independent); none for the first.
    const SpeedupInterval s = speedup_over(first, r);
    os << pad(r.e2e_latency_ms > 0 ? detail::fixed(first.e2e_latency_ms / r.e2e_latency_ms, 2) + "x" : "-", 9, true);
    if (interval)
      os << " " << pad(&r != &first && s.speedup > 0 ? detail::fixed(s.low, 2) + " - " + detail::fixed(s.high, 2) : "", 15, true);
    for (const Column& c : columns) {
      const std::string text = r.throughput ? c.cell(*r.throughput) : std::string();
      os << " " << pad(text.empty() ? "-" : text, c.width, true);
    }
    if (r.memory)
      os << "  " << (r.memory->fits() ? std::string("fits") : "needs " + std::to_string(r.memory->gpus_to_hold()) + " GPUs");
    os << "\n";
  }
  return os.str();
}

}  // namespace neusight
