// report.cpp - totals, terminal table, JSON (CLI contract) and CSV.
#include "neusight/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace neusight {
using nlohmann::json;

void summarize(Report& r) {
  r.e2e_latency_ms = r.forward_ms = r.backward_ms = r.update_ms = 0;
  r.totals_by_class.clear();
  auto add = [&](const KernelReport& k) {
    const double ms = k.prediction.latency_ms;
    switch (k.kernel.phase) {
      case Phase::forward: r.forward_ms += ms; break;
      case Phase::backward: r.backward_ms += ms; break;
      case Phase::update: r.update_ms += ms; break;
    }
    r.totals_by_class[kernel_class_name(k.kernel.cls)] += ms;
  };
  for (auto& n : r.nodes) {
    n.latency_ms = 0;
    for (const auto& k : n.kernels) {
      n.latency_ms += k.prediction.latency_ms;
      add(k);
    }
  }
  for (const auto& k : r.extra_kernels) add(k);
  r.e2e_latency_ms = r.forward_ms + r.backward_ms + r.update_ms;
}

namespace {

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
  return json{{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", shape_json(t)}};
}

double finite(double x) { return std::isfinite(x) ? x : 0.0; }

json kernel_json(const KernelReport& k) {
  json j{{"class", kernel_class_name(k.kernel.cls)},
         {"phase", phase_name(k.kernel.phase)},
         {"op", k.kernel.op},
         {"dtype", dtype_name(k.kernel.dtype)},
         {"flops", finite(k.kernel.flops)},
         {"bytes", finite(k.kernel.bytes)},
         {"tile", k.tiling.tile},
         {"tiles", k.tiling.tiles},
         {"waves", k.tiling.waves},
         {"latency_ms", finite(k.prediction.latency_ms)},
         {"roofline_ms", finite(k.prediction.roofline_ms)},
         {"utilization", finite(k.prediction.utilization)},
         {"bound", k.prediction.compute_bound ? "compute" : "memory"},
         {"extrapolated", k.prediction.extrapolated}};
  if (k.kernel.cls == KernelClass::gemm)
    j["gemm"] = {{"batch", k.kernel.gemm.batch}, {"m", k.kernel.gemm.m}, {"n", k.kernel.gemm.n}, {"k", k.kernel.gemm.k}};
  else if (k.kernel.rows > 0)
    j["vector"] = {{"rows", k.kernel.rows}, {"cols", k.kernel.cols}};
  if (!k.kernel.note.empty()) j["note"] = k.kernel.note;
  return j;
}

json report_json(const Report& r) {
  json j;
  j["gpu"] = r.gpu.name;
  j["gpu_alias"] = r.gpu.alias();
  j["model"] = r.model_name;
  j["predictor"] = r.predictor;
  j["mode"] = r.mode == Mode::training ? "training" : "inference";
  j["dtype"] = dtype_name(r.dtype);
  j["e2e_latency_ms"] = finite(r.e2e_latency_ms);
  j["forward_ms"] = finite(r.forward_ms);
  j["backward_ms"] = finite(r.backward_ms);
  j["update_ms"] = finite(r.update_ms);
  j["totals_by_class_ms"] = r.totals_by_class;
  json outs = json::array();
  for (const auto& t : r.graph_outputs) outs.push_back(tensor_json(t));
  j["graph_outputs"] = outs;
  json nodes = json::array();
  for (const auto& n : r.nodes) {
    json nj{{"name", n.name}, {"op_type", n.op_type}, {"latency_ms", finite(n.latency_ms)}};
    if (!n.domain.empty()) nj["domain"] = n.domain;
    json o = json::array();
    for (const auto& t : n.outputs) o.push_back(tensor_json(t));
    nj["outputs"] = o;
    json ks = json::array();
    for (const auto& k : n.kernels) ks.push_back(kernel_json(k));
    nj["kernels"] = ks;
    nodes.push_back(nj);
  }
  j["nodes"] = nodes;
  json extra = json::array();
  for (const auto& k : r.extra_kernels) extra.push_back(kernel_json(k));
  if (!extra.empty()) j["extra_kernels"] = extra;
  j["warnings"] = r.warnings;
  j["unknown_ops"] = r.unknown_ops;
  return j;
}

std::string fmt_ms(double ms) {
  char buf[32];
  if (ms >= 100) std::snprintf(buf, sizeof buf, "%.1f", ms);
  else if (ms >= 1) std::snprintf(buf, sizeof buf, "%.3f", ms);
  else std::snprintf(buf, sizeof buf, "%.4f", ms);
  return buf;
}

std::string pad(const std::string& s, size_t w, bool right = false) {
  if (s.size() >= w) return s.substr(0, w);
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

}  // namespace

std::string format_json(const std::vector<Report>& reports) {
  if (reports.size() == 1) return report_json(reports[0]).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  json a = json::array();
  for (const auto& r : reports) a.push_back(report_json(r));
  return a.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string format_table(const Report& r, const TableOptions& opt) {
  std::ostringstream os;
  os << "neusight-onnx: " << (r.model_name.empty() ? "model" : r.model_name) << " on " << r.gpu.name << " ("
     << (r.mode == Mode::training ? "training" : "inference") << ", " << dtype_name(r.dtype) << ", " << r.predictor
     << ")\n\n";
  std::vector<const NodeReport*> rows;
  for (const auto& n : r.nodes)
    if (!n.kernels.empty()) rows.push_back(&n);
  if (opt.top > 0) {
    std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->latency_ms > b->latency_ms; });
    if (rows.size() > static_cast<size_t>(opt.top)) rows.resize(static_cast<size_t>(opt.top));
  }
  os << pad("node", 34) << " " << pad("op", 14) << " " << pad("class", 11) << " " << pad("output", 22) << " "
     << pad("tile", 9) << " " << pad("waves", 6, true) << " " << pad("bound", 7) << " " << pad("ms", 10, true) << " "
     << pad("%", 6, true) << "\n";
  const double total = r.e2e_latency_ms > 0 ? r.e2e_latency_ms : 1;
  for (const NodeReport* n : rows) {
    const KernelReport* main = &n->kernels.front();
    for (const auto& k : n->kernels)
      if (k.kernel.phase == Phase::forward && k.prediction.latency_ms > main->prediction.latency_ms) main = &k;
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.1f", 100.0 * n->latency_ms / total);
    os << pad(n->name, 34) << " " << pad(n->op_type, 14) << " " << pad(kernel_class_name(main->kernel.cls), 11) << " "
       << pad(n->outputs.empty() ? "" : shape_str(n->outputs.front()), 22) << " " << pad(main->tiling.tile, 9) << " "
       << pad(std::to_string(main->tiling.waves), 6, true) << " "
       << pad(main->kernel.cls == KernelClass::unknown ? "-" : (main->prediction.compute_bound ? "compute" : "memory"), 7)
       << " " << pad(fmt_ms(n->latency_ms), 10, true) << " " << pad(pct, 6, true) << "\n";
  }
  os << "\nby kernel class:";
  for (const auto& [cls, ms] : r.totals_by_class) os << "  " << cls << " " << fmt_ms(ms) << " ms";
  os << "\n";
  if (r.mode == Mode::training)
    os << "forward " << fmt_ms(r.forward_ms) << " ms, backward " << fmt_ms(r.backward_ms) << " ms, update "
       << fmt_ms(r.update_ms) << " ms\n";
  os << "end-to-end latency: " << fmt_ms(r.e2e_latency_ms) << " ms\n";
  return os.str();
}

std::string format_csv(const Report& r, bool per_kernel) {
  std::ostringstream os;
  auto q = [](const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string o = "\"";
    for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return o + "\"";
  };
  if (per_kernel) {
    os << "node,op_type,class,phase,op,dtype,flops,bytes,tile,tiles,waves,bound,latency_ms\n";
    for (const auto& n : r.nodes)
      for (const auto& k : n.kernels)
        os << q(n.name) << "," << q(n.op_type) << "," << kernel_class_name(k.kernel.cls) << ","
           << phase_name(k.kernel.phase) << "," << q(k.kernel.op) << "," << dtype_name(k.kernel.dtype) << ","
           << k.kernel.flops << "," << k.kernel.bytes << "," << k.tiling.tile << "," << k.tiling.tiles << ","
           << k.tiling.waves << "," << (k.prediction.compute_bound ? "compute" : "memory") << ","
           << k.prediction.latency_ms << "\n";
    return os.str();
  }
  os << "node,op_type,output_shape,kernels,flops,bytes,latency_ms,share\n";
  for (const auto& n : r.nodes) {
    double flops = 0, bytes = 0;
    for (const auto& k : n.kernels) {
      flops += k.kernel.flops;
      bytes += k.kernel.bytes;
    }
    os << q(n.name) << "," << q(n.op_type) << "," << q(n.outputs.empty() ? "" : shape_str(n.outputs.front())) << ","
       << n.kernels.size() << "," << flops << "," << bytes << "," << n.latency_ms << ","
       << (r.e2e_latency_ms > 0 ? n.latency_ms / r.e2e_latency_ms : 0) << "\n";
  }
  return os.str();
}

}  // namespace neusight
