// pipeline.cpp - pipeline parallelism in inference (pipeline.h).
#include "pipeline.h"

#include <algorithm>
#include <map>
#include <set>

#include "footprint.h"

namespace neusight {
namespace {
}  // namespace

PipelinedPhase pipelined(const Analysis& an, const Report& r, const Link& link, int pp, int microbatches, bool prefill,
                         bool even_layers) {
  std::vector<double> node_ms(r.nodes.size());
  double sum = 0;
  for (size_t i = 0; i < r.nodes.size(); ++i) sum += node_ms[i] = r.nodes[i].latency_ms;
  // Kernels tied to no node spread over the stages as the nodes' time does.
  if (sum > 0 && r.e2e_latency_ms > sum)
    for (double& t : node_ms) t *= r.e2e_latency_ms / sum;
  const InferenceStages st = inference_stages(an.graph, an.kernels.kernels, node_ms, pp, link, even_layers);
  PipelinedPhase p;
  p.stage_ms = st.stage_ms;
  p.cuts = st.cuts;
  p.send_bytes = st.send_bytes;
  p.hop_ms = p2p_ms(st.send_bytes, link);
  p.ms = prefill ? pipelined_prefill_ms(p.stage_ms, p.hop_ms, microbatches)
                 : pipelined_step_ms(p.stage_ms, p.hop_ms, microbatches);
  p.scale = r.e2e_latency_ms > 0 ? p.ms / r.e2e_latency_ms : 1.0;
  return p;
}

namespace {

// Per weight name, the stages of `cuts` whose nodes read it.
std::map<std::string, std::set<int>> stages_reading(const Graph& g, const std::vector<int>& cuts) {
  std::map<std::string, std::set<int>> stages_of;
  for (size_t s = 0; s + 1 < cuts.size(); ++s)
    for (int i = cuts[s]; i < cuts[s + 1]; ++i)
      for (const auto& name : g.nodes[static_cast<size_t>(i)].inputs) stages_of[name].insert(static_cast<int>(s));
  return stages_of;
}

// The part of weight `name` stage `s` of `pp` holds: all of it where a node of the stage reads
// it, 1 / pp of one no top-level node reads.
double stage_share(const std::map<std::string, std::set<int>>& stages_of, const std::string& name, int s, int pp) {
  auto it = stages_of.find(name);
  return it == stages_of.end() ? 1.0 / pp : it->second.count(s) ? 1.0 : 0.0;
}

// The weight bytes each of the `pp` stages holds (stage_weight_bytes).
std::vector<double> weight_bytes_by_stage(const Graph& g, const Options& options,
                                          const std::map<std::string, std::set<int>>& stages_of, int pp) {
  std::vector<double> bytes;
  for (int s = 0; s < pp; ++s) {
    double all = 0, embedding = 0;
    weight_bytes(g, options, all, embedding, [&](const std::string& name) { return stage_share(stages_of, name, s, pp); });
    bytes.push_back(all);
  }
  return bytes;
}

// The parameters (elements of the float initializers weight_bytes counts) stage `s` holds.
double stage_parameters(const Graph& g, const std::map<std::string, std::set<int>>& stages_of, int s, int pp) {
  double n = 0;
  for (const auto& name : g.initializers) {
    const TensorInfo* t = g.find(name);
    if (t && !t->int_value && is_float(t->dtype) && t->fully_known())
      n += double(t->num_elements()) * stage_share(stages_of, name, s, pp);
  }
  return n;
}

}  // namespace

std::vector<double> stage_weight_bytes(const Graph& g, const Options& options, const std::vector<int>& cuts) {
  return weight_bytes_by_stage(g, options, stages_reading(g, cuts), static_cast<int>(cuts.size()) - 1);
}

ParallelReport pipeline_forward(const Analysis& a, const Report& r, const Gpu& gpu, const Options& options,
                                int microbatches) {
  const ParallelConfig& c = options.parallel;
  ParallelReport p;
  p.inference = true;
  p.config = c;
  p.config.microbatches = microbatches;
  p.micro_batch = a.bound.batch;
  p.global_batch = microbatches > 1 ? options.dims.batch : a.bound.batch;
  // Megatron's rank order: a stage's tp GPUs adjacent, the stages tp apart.
  p.tp_link = p.dp_link = p.cp_link = p.ep_link = p.dp_intra_link = link_for(gpu, c.link_gbps, c.tp);
  p.link = link_for(gpu, c.link_gbps, c.tp * c.pp);
  const PipelinedPhase ph = pipelined(a, r, p.link, c.pp, microbatches, true, c.even_layers);
  p.iteration_ms = ph.ms;
  const double tp = double(c.tp);
  const auto stages_of = stages_reading(a.graph, ph.cuts);
  const std::vector<double> weights = weight_bytes_by_stage(a.graph, options, stages_of, c.pp);
  const double activations = r.memory ? r.memory->activations_gib : 0.0;
  size_t busiest = 0;
  std::vector<double> collective_ms;
  for (size_t s = 0; s + 1 < ph.cuts.size(); ++s) {
    StageReport st;
    st.gpu = static_cast<int>(s);
    st.first_node = ph.cuts[s];
    st.last_node = ph.cuts[s + 1] - 1;
    st.first_name = a.graph.nodes[static_cast<size_t>(st.first_node)].name;
    st.last_name = a.graph.nodes[static_cast<size_t>(st.last_node)].name;
    st.forward_ms = ph.stage_ms[s];
    st.send_bytes = s + 2 < ph.cuts.size() ? ph.send_bytes : 0.0;
    double comm = 0;
    for (int i = st.first_node; i <= st.last_node; ++i)
      for (const KernelReport& k : r.nodes[static_cast<size_t>(i)].kernels)
        if (k.kernel.cls == KernelClass::collective) comm += k.prediction.latency_ms;
    collective_ms.push_back(comm);
    st.weights_gb = weights[s] / tp / kGiB;
    st.activations_gb = activations;
    st.total_gb = st.weights_gb + st.activations_gb;
    st.params = stage_parameters(a.graph, stages_of, static_cast<int>(s), c.pp) / tp;
    if (ph.stage_ms[s] > ph.stage_ms[busiest]) busiest = s;
    p.peak_memory_gb = std::max(p.peak_memory_gb, st.total_gb);
    p.stages.push_back(std::move(st));
  }
  // The busiest GPU: its stage's kernels for every microbatch, its sends on the critical path;
  // the rest of the pipeline's time is its idle time (the fill and the drain).
  p.compute_ms = double(microbatches) * ph.stage_ms[busiest];
  p.tp_comm_ms = double(microbatches) * collective_ms[busiest];
  p.pp_comm_ms = double(c.pp - 1) * ph.hop_ms;
  p.comm_ms = p.exposed_comm_ms = p.tp_comm_ms + p.pp_comm_ms;
  p.bubble_ms = std::max(0.0, ph.ms - p.compute_ms - p.pp_comm_ms);
  p.bubble_fraction = ph.ms > 0 ? p.bubble_ms / ph.ms : 0.0;
  p.memory_capacity_gb = gpu.mem_gb;
  return p;
}

}  // namespace neusight
