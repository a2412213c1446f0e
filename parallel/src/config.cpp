// config.cpp - the --parallel spec, the interconnect model, and the report section's text/JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "neusight/parallel.h"

namespace neusight {

namespace {

int parse_degree(const std::string& key, const std::string& value, const std::string& spec) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || v < 1 || v > 1000000)
    throw InputError("--parallel: " + key + " must be a positive integer, got '" + value + "' in '" + spec + "'");
  return static_cast<int>(v);
}

std::string gb(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.1f" : (v >= 1 ? "%.3f" : "%.4f"), v);
  return buf;
}

}  // namespace

const char* schedule_name(PipelineSchedule s) { return s == PipelineSchedule::gpipe ? "gpipe" : "1f1b"; }

ParallelConfig parse_parallel(const std::string& spec) {
  ParallelConfig c;
  c.active = true;
  if (spec.empty()) throw InputError("--parallel: empty spec (expected dp=N,tp=N,pp=N[,microbatches=M])");
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError("--parallel: expected KEY=VALUE, got '" + part + "' in '" + spec + "'");
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "dp") c.dp = parse_degree(key, value, spec);
    else if (key == "tp") c.tp = parse_degree(key, value, spec);
    else if (key == "pp") c.pp = parse_degree(key, value, spec);
    else if (key == "microbatches" || key == "mb") c.microbatches = parse_degree(key, value, spec);
    else if (key == "schedule") {
      if (value == "gpipe") c.schedule = PipelineSchedule::gpipe;
      else if (value == "1f1b") c.schedule = PipelineSchedule::one_f_one_b;
      else throw InputError("--parallel: schedule must be gpipe or 1f1b, got '" + value + "'");
    } else {
      throw InputError("--parallel: unknown key '" + key + "' (expected dp, tp, pp, microbatches, schedule)");
    }
  }
  return c;
}

int64_t parallel_micro_batch(const ParallelConfig& c, Mode mode, int64_t global_batch) {
  if (mode != Mode::training) throw InputError("--parallel predicts training: add --mode training");
  if (global_batch <= 0) throw InputError("--parallel needs --batch N (the global batch)");
  const int64_t replicas = int64_t(c.dp) * c.microbatches;
  if (global_batch % replicas != 0)
    throw InputError("--parallel: global batch " + std::to_string(global_batch) + " does not divide into dp=" +
                     std::to_string(c.dp) + " x microbatches=" + std::to_string(c.microbatches));
  return global_batch / replicas;
}

void check_inference_parallel(const ParallelConfig& c) {
  if (c.dp != 1 || c.pp != 1 || c.microbatches != 1)
    throw InputError("--parallel for inference takes tp=N alone: dp, pp and microbatches split training batches and stages (--mode training)");
  if (c.tp < 1) throw InputError("--parallel: tp must be at least 1");
}

void time_tensor_parallel_collectives(const std::vector<Kernel>& kernels, std::vector<Prediction>& preds, int tp,
                                      const Link& link) {
  for (size_t i = 0; i < kernels.size() && i < preds.size(); ++i)
    if (kernels[i].cls == KernelClass::collective) {
      preds[i] = Prediction{};
      preds[i].latency_ms = allreduce_ms(kernels[i].bytes, tp, link);
    }
}

Link link_for(const Gpu& gpu, double override_gbps) {
  Link l;
  if (override_gbps > 0) {
    l.kind = "override";
    l.spec_gbps = override_gbps;
  } else if (gpu.nvlink_gbps > 0) {
    l.kind = gpu.nvlink.empty() ? "nvlink" : gpu.nvlink;
    l.spec_gbps = gpu.nvlink_gbps;
  } else if (gpu.pcie_gbps > 0) {
    l.kind = "pcie";
    l.spec_gbps = gpu.pcie_gbps;
  } else {
    throw InputError(gpu.name + ": no interconnect bandwidth in the GPU database; give --link-bw GBps");
  }
  return l;
}

double ring_allreduce_ms(double bytes, int n, const Link& link) {
  if (n <= 1 || bytes <= 0) return 0;
  const double steps = 2.0 * (n - 1);
  return steps / n * bytes / (link.gbps() * 1e9) * 1e3 + steps * link.step_latency_us * 1e-3;
}

double allreduce_ms(double bytes, int n, const Link& link) {
  const double ring = ring_allreduce_ms(bytes, n, link);
  if (n <= 1 || bytes <= 0 || link.kind == "pcie") return ring;
  const double ms_per_byte = 1e3 / (link.gbps() * 1e9), step_ms = link.step_latency_us * 1e-3;
  const double two_shot = 2.0 * (n - 1) / n * bytes * ms_per_byte + 2 * step_ms;
  const double one_shot = double(n - 1) * bytes * ms_per_byte + step_ms;
  return std::min({ring, two_shot, one_shot});
}

double p2p_ms(double bytes, const Link& link) {
  if (bytes <= 0) return 0;
  return bytes / (link.gbps() * 1e9) * 1e3 + link.step_latency_us * 1e-3;
}

std::string format_parallel(const ParallelReport& p) {
  const auto& c = p.config;
  std::ostringstream os;
  os << "\nparallel training: dp=" << c.dp << " tp=" << c.tp << " pp=" << c.pp << " (" << c.gpus()
     << " GPUs), global batch " << p.global_batch << ", micro-batch " << p.micro_batch << " x "
     << c.microbatches << " microbatches, schedule " << schedule_name(c.schedule) << "\n";
  os << "  link: " << p.link.kind << " " << p.link.spec_gbps << " GB/s x " << p.link.efficiency
     << " efficiency = " << p.link.gbps() << " GB/s per direction\n";
  os << "  iteration            " << ms(p.iteration_ms) << " ms\n";
  os << "  compute (busiest)    " << ms(p.compute_ms) << " ms (tensor-parallel all-reduces " << ms(p.tp_comm_ms)
     << " ms included)\n";
  os << "  pipeline bubble      " << ms(p.bubble_ms) << " ms (" << gb(100 * p.bubble_fraction) << "% of the pipeline)\n";
  os << "  pipeline send/recv   " << ms(p.pp_comm_ms) << " ms exposed\n";
  os << "  gradient all-reduce  " << ms(p.dp_comm_ms) << " ms in " << p.dp_buckets << " buckets, "
     << ms(p.dp_exposed_ms) << " ms exposed\n";
  os << "  optimizer step       " << ms(p.update_ms) << " ms\n";
  os << "  communication        " << ms(p.comm_ms) << " ms, exposed " << ms(p.exposed_comm_ms) << " ms\n";
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const auto& st = p.stages[s];
    os << "  stage " << s << ": nodes " << st.first_node << ".." << st.last_node << " (" << st.first_name << " .. "
       << st.last_name << "), fwd " << ms(st.forward_ms) << " ms, bwd " << ms(st.backward_ms) << " ms per microbatch; "
       << "memory " << gb(st.total_gb) << " GB = weights " << gb(st.weights_gb) << " + grads " << gb(st.gradients_gb)
       << " + Adam " << gb(st.optimizer_gb) << " + activations " << gb(st.activations_gb) << "\n";
  }
  os << "  peak memory per GPU  " << gb(p.peak_memory_gb) << " GB of " << gb(p.memory_capacity_gb) << " GB\n";
  return os.str();
}

void to_json(nlohmann::json& j, const ParallelReport& p) {
  auto fin = [](double x) { return std::isfinite(x) ? x : 0.0; };
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : p.stages)
    stages.push_back({{"first_node", s.first_name},
                      {"last_node", s.last_name},
                      {"nodes", s.last_node - s.first_node + 1},
                      {"forward_ms", fin(s.forward_ms)},
                      {"backward_ms", fin(s.backward_ms)},
                      {"update_ms", fin(s.update_ms)},
                      {"send_bytes", fin(s.send_bytes)},
                      {"params", fin(s.params)},
                      {"memory_gb",
                       {{"weights", fin(s.weights_gb)},
                        {"gradients", fin(s.gradients_gb)},
                        {"optimizer", fin(s.optimizer_gb)},
                        {"activations", fin(s.activations_gb)},
                        {"total", fin(s.total_gb)}}}});
  j = nlohmann::json{{"dp", p.config.dp},
                     {"tp", p.config.tp},
                     {"pp", p.config.pp},
                     {"gpus", p.config.gpus()},
                     {"microbatches", p.config.microbatches},
                     {"schedule", schedule_name(p.config.schedule)},
                     {"global_batch", p.global_batch},
                     {"micro_batch", p.micro_batch},
                     {"link", {{"kind", p.link.kind},
                               {"spec_gbps", fin(p.link.spec_gbps)},
                               {"efficiency", fin(p.link.efficiency)},
                               {"step_latency_us", fin(p.link.step_latency_us)}}},
                     {"iteration_ms", fin(p.iteration_ms)},
                     {"compute_ms", fin(p.compute_ms)},
                     {"tp_comm_ms", fin(p.tp_comm_ms)},
                     {"dp_comm_ms", fin(p.dp_comm_ms)},
                     {"dp_exposed_ms", fin(p.dp_exposed_ms)},
                     {"dp_buckets", p.dp_buckets},
                     {"pp_comm_ms", fin(p.pp_comm_ms)},
                     {"comm_ms", fin(p.comm_ms)},
                     {"exposed_comm_ms", fin(p.exposed_comm_ms)},
                     {"bubble_ms", fin(p.bubble_ms)},
                     {"bubble_fraction", fin(p.bubble_fraction)},
                     {"update_ms", fin(p.update_ms)},
                     {"memory_capacity_gb", fin(p.memory_capacity_gb)},
                     {"peak_memory_gb", fin(p.peak_memory_gb)},
                     {"stages", stages}};
}

}  // namespace neusight
