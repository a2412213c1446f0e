// expert_parallel.cpp - a mixture's experts spread over data-parallel GPUs in training
// (Megatron-LM's expert model parallelism): one GPU's experts, its tokens' all-to-alls.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_set>

#include "neusight/parallel.h"
#include "neusight/parameters.h"
#include "shard.h"

namespace neusight {

using parallel_detail::shrink_vector;

namespace {

// An expert kernel as the busiest of `ep` GPUs runs it: its E/ep experts on the tokens the ep
// GPUs' routers send them (expert_parallel_load over ep times this GPU's tokens), in place of
// every expert on this GPU's own tokens. `tokens_per_expert`: the lowering's rows per expert,
// the GEMM dim that carries the tokens (the rows forward and for the input's gradient, the
// reduction of the weights' gradient).
void place_group_experts(Kernel& k, int ep, int64_t tokens_per_expert) {
  const Kernel::MoeRouting& m = k.moe;
  if (m.experts <= 0 || !(m.tokens > 0)) return;
  const ExpertLoad own = expert_parallel_load(m.tokens, m.experts, m.top_k, 1);
  const ExpertLoad busiest = expert_parallel_load(m.tokens * ep, m.experts, m.top_k, ep);
  if (!(own.routed > 0) || !(own.reached > 0) || !(busiest.reached > 0)) return;
  const double routed_share = busiest.routed / own.routed, reached_share = busiest.reached / own.reached;
  k.flops *= routed_share;
  if (k.cls == KernelClass::gemm) {
    const double weights = m.weight_bytes * reached_share;
    k.bytes = (k.bytes - m.weight_bytes) * routed_share + weights;
    k.moe.weight_bytes = weights;
    const int64_t batch = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(busiest.reached - 1e-9)));
    // Rows per expert padded to 8, as the grouped-GEMM paths pad each expert's tokens (their
    // count varies step to step; the kernels are chosen aligned).
    const int64_t rows = (std::max<int64_t>(1, static_cast<int64_t>(std::ceil(busiest.routed / double(batch) - 1e-9))) + 7) / 8 * 8;
    int64_t* token_dim = k.gemm.m == tokens_per_expert ? &k.gemm.m : k.gemm.k == tokens_per_expert ? &k.gemm.k : &k.gemm.n;
    *token_dim = rows;
    k.gemm.batch = batch;
  } else {
    k.rows = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(double(k.rows) * routed_share - 1e-9)));
    k.bytes *= routed_share;
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, " (expert parallel: the busiest of %d GPUs, %.1f of its %lld experts reached, %.0f tokens)", ep,
                busiest.reached, static_cast<long long>((m.experts + ep - 1) / ep), busiest.routed);
  k.note += buf;
}

Kernel all_to_all(const Kernel& expert, double bytes, int ep, const char* what) {
  return parallel_detail::collective_beside(expert, "ep_alltoall", bytes,
                                            "expert-parallel all-to-all over " + std::to_string(ep) + " GPUs (" + what + ")");
}

}  // namespace

KernelList shard_expert_parallel(const Graph& g, const KernelList& in, int ep, bool shrink_updates) {
  if (ep <= 1) return in;
  // The experts' weights: what a mixture node holds (its router is a GEMM of its own).
  const std::unordered_set<std::string> held = held_values(g);
  std::set<std::string> expert_weights;
  for (const Node& n : g.nodes)
    if (parallel_detail::is_moe_op(n))
      for (const auto& name : n.inputs)
        if (held.count(name)) expert_weights.insert(name);
  // Each mixture's expert kernels, per node and phase: the first and the last (the all-to-alls
  // go before and after them), the tokens a GPU sends (its routed copies x the hidden width).
  struct Span {
    size_t first = 0, last = 0;
    double bytes = 0;
  };
  std::map<std::pair<int, int>, Span> spans;
  std::map<int, int64_t> rows_per_expert;  // node -> its forward expert GEMMs' rows per expert
  for (size_t i = 0; i < in.kernels.size(); ++i) {
    const Kernel& k = in.kernels[i];
    if (k.expert_part == Kernel::ExpertPart::none || k.phase == Phase::update) continue;
    const std::pair<int, int> key{k.node, static_cast<int>(k.phase)};
    auto [it, fresh] = spans.try_emplace(key, Span{i, i, 0});
    it->second.last = i;
    if (k.cls == KernelClass::gemm && k.phase == Phase::forward && k.expert_part == Kernel::ExpertPart::up) {
      rows_per_expert.emplace(k.node, k.gemm.m);
      // Each token's top-k copies of its hidden row, all but the 1/ep staying on this GPU.
      it->second.bytes = k.moe.tokens * double(k.moe.top_k) * double(k.gemm.k) * element_bytes(k.dtype) * (ep - 1) / ep;
    }
  }
  const int forward = static_cast<int>(Phase::forward);
  for (auto& [key, span] : spans)
    if (span.bytes <= 0 && spans.count({key.first, forward})) span.bytes = spans[{key.first, forward}].bytes;
  KernelList out = in;
  out.kernels.clear();
  for (size_t i = 0; i < in.kernels.size(); ++i) {
    Kernel k = in.kernels[i];
    if (k.phase == Phase::update) {
      if (shrink_updates && expert_weights.count(k.weight)) shrink_vector(k, ep);
      out.kernels.push_back(k);
      continue;
    }
    auto span = k.expert_part == Kernel::ExpertPart::none ? spans.end() : spans.find({k.node, static_cast<int>(k.phase)});
    const bool first = span != spans.end() && span->second.first == i && span->second.bytes > 0;
    const bool last = span != spans.end() && span->second.last == i && span->second.bytes > 0;
    const bool fwd = k.phase == Phase::forward;
    if (first) out.kernels.push_back(all_to_all(k, span->second.bytes, ep, fwd ? "dispatch" : "gradients of the combine"));
    if (k.expert_part != Kernel::ExpertPart::none) {
      auto r = rows_per_expert.find(k.node);
      place_group_experts(k, ep, r == rows_per_expert.end() ? k.gemm.m : r->second);
    }
    out.kernels.push_back(k);
    if (last) out.kernels.push_back(all_to_all(k, span->second.bytes, ep, fwd ? "combine" : "gradients of the dispatch"));
  }
  return out;
}

void time_expert_all_to_alls(const std::vector<Kernel>& kernels, std::vector<Prediction>& preds, const Link& link) {
  for (size_t i = 0; i < kernels.size() && i < preds.size(); ++i)
    if (kernels[i].cls == KernelClass::collective && kernels[i].op == "ep_alltoall")
      preds[i] = parallel_detail::all_to_all_prediction(kernels[i].bytes, link);
}

}  // namespace neusight
