// parallel.cpp - the multi-GPU section of a report (training; a pipeline-parallel forward pass):
// terminal text and JSON.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "neusight/report.h"
#include "util.h"

namespace neusight {

namespace {

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

// What each data-parallel GPU holds a share of at a ZeRO stage.
const char* zero_text(int zero) {
  switch (zero) {
    case 1: return " (optimizer state sharded over dp)";
    case 2: return " (optimizer state and gradients sharded over dp)";
    case 3: return " (optimizer state, gradients and parameters sharded over dp)";
  }
  return "";
}

std::string link_text(const Link& l) {
  std::ostringstream ls;
  ls << l.kind << " " << l.spec_gbps << " GB/s x " << l.efficiency << " efficiency = " << l.gbps() << " GB/s per direction";
  return ls.str();
}

// A pipeline-parallel forward pass: the microbatches through the stages, no backward.
std::string format_parallel_inference(const ParallelReport& p) {
  const auto& c = p.config;
  std::ostringstream os;
  os << "\nparallel inference: tp=" << c.tp << " pp=" << c.pp << " (" << c.gpus() << " GPUs), ";
  if (p.global_batch > 0)
    os << "batch " << p.global_batch << ", micro-batch " << p.micro_batch << " x " << c.microbatches
       << (c.microbatches > 1 ? " microbatches" : " microbatch");
  else
    os << "the model's own batch as one microbatch (--batch binds no dim)";
  os << (c.microbatches > 1 ? " through the stages one after another\n" : " through the stages\n");
  if (c.tp > 1 && (p.tp_link.kind != p.link.kind || p.tp_link.spec_gbps != p.link.spec_gbps))
    os << "  link, tensor parallel (" << c.tp << " GPUs): " << link_text(p.tp_link) << "\n"
       << "  link, pipeline (" << c.gpus() << " GPUs): " << link_text(p.link) << "\n";
  else
    os << "  link: " << link_text(p.link) << "\n";
  os << "  latency              " << ms(p.iteration_ms) << " ms (the last microbatch out of the last stage)\n";
  os << "  compute (busiest)    " << ms(p.compute_ms) << " ms";
  if (c.tp > 1) os << " (tensor-parallel all-reduces " << ms(p.tp_comm_ms) << " ms included)";
  os << "\n";
  os << "  pipeline fill        " << ms(p.bubble_ms) << " ms idle on the busiest GPU (" << gb(100 * p.bubble_fraction)
     << "% of the latency)\n";
  os << "  pipeline send/recv   " << ms(p.pp_comm_ms) << " ms exposed\n";
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const auto& st = p.stages[s];
    os << "  stage " << s << ": nodes " << st.first_node << ".." << st.last_node << " (" << st.first_name << " .. "
       << st.last_name << "), " << ms(st.forward_ms) << " ms per microbatch; memory " << gb(st.total_gb)
       << " GiB = weights " << gb(st.weights_gb) << " + activations " << gb(st.activations_gb) << "\n";
  }
  os << "  peak memory per GPU  " << gb(p.peak_memory_gb) << " GiB of " << gb(p.memory_capacity_gb) << " GiB\n";
  return os.str();
}

}  // namespace

std::string format_parallel(const ParallelReport& p) {
  if (p.inference) return format_parallel_inference(p);
  const auto& c = p.config;
  std::ostringstream os;
  os << "\nparallel training: dp=" << c.dp << " tp=" << c.tp << " pp=" << c.pp;
  if (c.cp > 1) os << " cp=" << c.cp << (c.cp_comm == CpComm::a2a ? " (all-to-all)" : "");
  if (c.ep > 1) os << " ep=" << c.ep;
  os << " (" << c.gpus()
     << " GPUs), global batch " << p.global_batch << ", micro-batch " << p.micro_batch << " x "
     << c.microbatches << " microbatches, schedule " << schedule_name(c.schedule);
  if (c.virtual_stages > 1) os << " interleaved, " << c.virtual_stages << " model chunks a GPU";
  if (c.sequence_parallel) os << ", sequence parallel over tp";
  if (c.zero > 0) os << ", ZeRO stage " << c.zero << zero_text(c.zero);
  if (c.overlap_gather) os << ", parameter all-gather under the next forward";
  os << "\n";
  // One line per link the axes cross (tensor parallel within its group, data parallel, pipeline).
  const bool one_link = p.tp_link.kind == p.link.kind && p.tp_link.spec_gbps == p.link.spec_gbps &&
                        p.dp_link.kind == p.link.kind && p.dp_link.spec_gbps == p.link.spec_gbps &&
                        (c.cp <= 1 || (p.cp_link.kind == p.link.kind && p.cp_link.spec_gbps == p.link.spec_gbps)) &&
                        (c.ep <= 1 || (p.ep_link.kind == p.link.kind && p.ep_link.spec_gbps == p.link.spec_gbps));
  if (one_link) {
    os << "  link: " << link_text(p.link) << "\n";
  } else {
    if (c.tp > 1) os << "  link, tensor parallel (" << c.tp << " GPUs): " << link_text(p.tp_link) << "\n";
    if (c.cp > 1) os << "  link, context parallel (" << c.tp * c.cp << " GPUs spanned): " << link_text(p.cp_link) << "\n";
    if (c.ep > 1)
      os << "  link, expert parallel (" << c.tp * c.cp * c.ep << " GPUs spanned): " << link_text(p.ep_link) << "\n";
    if (c.dp * c.cp > 1) {
      os << "  link, data parallel (" << c.tp * c.dp * c.cp << " GPUs spanned): " << link_text(p.dp_link);
      if (p.dp_domain_gpus > 1)
        os << " across NVLink domains; hierarchical: " << p.dp_domain_gpus << " data-parallel GPUs a domain reduce on "
           << link_text(p.dp_intra_link) << " first";
      os << "\n";
    }
    os << "  link, " << (c.pp > 1 ? "pipeline (" : "all (") << c.gpus() << " GPUs): " << link_text(p.link) << "\n";
  }
  os << "  iteration            " << ms(p.iteration_ms) << " ms\n";
  os << "  compute (busiest)    " << ms(p.compute_ms) << " ms (tensor-parallel all-reduces " << ms(p.tp_comm_ms)
     << " ms included)\n";
  os << "  pipeline bubble      " << ms(p.bubble_ms) << " ms (" << gb(100 * p.bubble_fraction) << "% of the pipeline)\n";
  os << "  pipeline send/recv   " << ms(p.pp_comm_ms) << " ms exposed\n";
  if (c.cp > 1 && c.cp_comm == CpComm::a2a)
    os << "  context all-to-all    " << ms(p.cp_comm_ms) << " ms (Ulysses: the attention's heads and back), "
       << ms(p.cp_exposed_ms) << " ms exposed\n";
  else if (c.cp > 1)
    os << "  context-parallel ring " << ms(p.cp_comm_ms) << " ms of K/V transfers, " << ms(p.cp_exposed_ms)
       << " ms exposed beside the attention\n";
  if (c.ep > 1) os << "  expert all-to-all     " << ms(p.ep_comm_ms) << " ms (tokens to their experts and back)\n";
  if (c.zero == 0)
    os << "  gradient all-reduce  " << ms(p.dp_comm_ms) << " ms in " << p.dp_buckets << " buckets, "
       << ms(p.dp_exposed_ms) << " ms exposed\n";
  else
    os << "  gradient reduce-scatter " << ms(p.dp_comm_ms - p.dp_gather_ms) << " ms in " << p.dp_buckets
       << " buckets, parameter all-gather " << ms(p.dp_gather_ms) << " ms; " << ms(p.dp_exposed_ms) << " ms exposed\n";
  os << "  optimizer step       " << ms(p.update_ms) << " ms\n";
  os << "  communication        " << ms(p.comm_ms) << " ms, exposed " << ms(p.exposed_comm_ms) << " ms\n";
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const auto& st = p.stages[s];
    os << "  stage " << s;
    if (c.virtual_stages > 1) os << " (GPU " << st.gpu << ")";
    os << ": nodes " << st.first_node << ".." << st.last_node << " (" << st.first_name << " .. "
       << st.last_name << "), fwd " << ms(st.forward_ms) << " ms, bwd " << ms(st.backward_ms) << " ms per microbatch; "
       << "memory " << gb(st.total_gb) << " GiB = weights " << gb(st.weights_gb) << " + grads " << gb(st.gradients_gb)
       << " + optimizer " << gb(st.optimizer_gb) << " + activations " << gb(st.activations_gb) << "\n";
  }
  os << "  peak memory per GPU  " << gb(p.peak_memory_gb) << " GiB of " << gb(p.memory_capacity_gb) << " GiB\n";
  return os.str();
}

nlohmann::json detail::parallel_json(const ParallelReport& p) {
  auto link_json = [&](const Link& l) {
    return nlohmann::json{{"kind", l.kind},
                          {"spec_gbps", finite(l.spec_gbps)},
                          {"efficiency", finite(l.efficiency)},
                          {"step_latency_us", finite(l.step_latency_us)}};
  };
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : p.stages)
    stages.push_back({{"gpu", s.gpu},
                      {"first_node", s.first_name},
                      {"last_node", s.last_name},
                      {"nodes", s.last_node - s.first_node + 1},
                      {"forward_ms", finite(s.forward_ms)},
                      {"backward_ms", finite(s.backward_ms)},
                      {"update_ms", finite(s.update_ms)},
                      {"send_bytes", finite(s.send_bytes)},
                      {"params", finite(s.params)},
                      {"memory_gb",
                       {{"weights", finite(s.weights_gb)},
                        {"gradients", finite(s.gradients_gb)},
                        {"optimizer", finite(s.optimizer_gb)},
                        {"activations", finite(s.activations_gb)},
                        {"total", finite(s.total_gb)}}}});
  return nlohmann::json{{"mode", p.inference ? "inference" : "training"},
                     {"dp", p.config.dp},
                     {"tp", p.config.tp},
                     {"pp", p.config.pp},
                     {"cp", p.config.cp},
                     {"cp_comm", cp_comm_name(p.config.cp_comm)},
                     {"ep", p.config.ep},
                     {"gpus", p.config.gpus()},
                     {"microbatches", p.config.microbatches},
                     {"schedule", schedule_name(p.config.schedule)},
                     {"zero", p.config.zero},
                     {"overlap_gather", p.config.overlap_gather},
                     {"virtual_stages", p.config.virtual_stages},
                     {"sequence_parallel", p.config.sequence_parallel},
                     {"global_batch", p.global_batch},
                     {"micro_batch", p.micro_batch},
                     {"link", link_json(p.link)},
                     {"tp_link", link_json(p.tp_link)},
                     {"dp_link", link_json(p.dp_link)},
                     {"cp_link", link_json(p.cp_link)},
                     {"ep_link", link_json(p.ep_link)},
                     {"dp_domain_gpus", p.dp_domain_gpus},
                     {"dp_intra_link", link_json(p.dp_intra_link)},
                     {"iteration_ms", finite(p.iteration_ms)},
                     {"compute_ms", finite(p.compute_ms)},
                     {"tp_comm_ms", finite(p.tp_comm_ms)},
                     {"dp_comm_ms", finite(p.dp_comm_ms)},
                     {"dp_exposed_ms", finite(p.dp_exposed_ms)},
                     {"dp_buckets", p.dp_buckets},
                     {"dp_gather_ms", finite(p.dp_gather_ms)},
                     {"pp_comm_ms", finite(p.pp_comm_ms)},
                     {"cp_comm_ms", finite(p.cp_comm_ms)},
                     {"cp_exposed_ms", finite(p.cp_exposed_ms)},
                     {"ep_comm_ms", finite(p.ep_comm_ms)},
                     {"comm_ms", finite(p.comm_ms)},
                     {"exposed_comm_ms", finite(p.exposed_comm_ms)},
                     {"bubble_ms", finite(p.bubble_ms)},
                     {"bubble_fraction", finite(p.bubble_fraction)},
                     {"update_ms", finite(p.update_ms)},
                     {"memory_capacity_gb", finite(p.memory_capacity_gb)},
                     {"peak_memory_gb", finite(p.peak_memory_gb)},
                     {"stages", stages}};
}

}  // namespace neusight
