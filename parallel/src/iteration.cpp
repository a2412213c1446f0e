// iteration.cpp - one training iteration on dp x tp x pp GPUs from per-kernel predictions.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "data_path.h"
#include "shard.h"
#include "neusight/parallel.h"

namespace neusight {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool in_range(int node, size_t n) { return node >= 0 && static_cast<size_t>(node) < n; }

// The cut positions nearest the balanced targets total x j / pp among `pool` (ascending cut
// positions, at least pp - 1 of them), in order.
std::vector<int> balanced_cuts(const std::vector<double>& cum, const std::vector<int>& pool, int pp) {
  const int n = static_cast<int>(cum.size()) - 1;
  const double total = cum[static_cast<size_t>(n)];
  std::vector<int> cuts = {0};
  size_t from = 0;
  for (int j = 1; j < pp; ++j) {
    const double target = total * j / pp;
    const size_t last_allowed = pool.size() - static_cast<size_t>(pp - 1 - j) - 1;
    size_t best = from;
    // cum never falls along the pool: the distance falls to the nearest, then rises.
    for (size_t i = from + 1; i <= last_allowed; ++i) {
      const double d = std::fabs(cum[static_cast<size_t>(pool[i])] - target);
      const double d_best = std::fabs(cum[static_cast<size_t>(pool[best])] - target);
      if (d > d_best) break;
      if (d < d_best) best = i;
    }
    cuts.push_back(pool[best]);
    from = best + 1;
  }
  cuts.push_back(n);
  return cuts;
}

// A microbatch's step on the pipeline of these cuts: its slowest stage (`cum`: prefix sums of
// node cost, forward and backward, ms) and a send each way of the most data a cut carries.
double pipeline_step_ms(const std::vector<double>& cum, const std::vector<double>& cross, const std::vector<int>& cuts,
                        const std::function<double(double)>& hop_ms) {
  double slowest = 0, carried = 0;
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    slowest = std::max(slowest, cum[static_cast<size_t>(cuts[s + 1])] - cum[static_cast<size_t>(cuts[s])]);
    if (s > 0) carried = std::max(carried, cross[static_cast<size_t>(cuts[s])]);
  }
  return slowest + 2 * hop_ms(carried);
}

// Steps within this fraction of the shortest count as balanced (choose_cuts).
constexpr double kStageBalanceTolerance = 0.05;

// Cut positions 0 = c0 < c1 < ... < cp = n of the pipeline stages. Frameworks place whole
// layers (Megatron-LM, DeepSpeed): the cuts that carry the least data (`cross`, bytes), a
// block's or layer's boundary where the residual stream alone crosses. For each bound on the
// bytes a cut may carry (the distinct crossing sizes, ascending; 256 spread over them where
// there are more) the cuts nearest the balanced targets among those within it, and the
// pipeline step they give (pipeline_step_ms); the lowest bound whose step is within
// kStageBalanceTolerance of the shortest. A decoder whose layers all read the encoder's output
// (T5) thus cuts its decoder layers, carrying both.
std::vector<int> choose_cuts(const std::vector<double>& cum, const std::vector<double>& cross, int pp,
                             const std::function<double(double)>& hop_ms) {
  const int n = static_cast<int>(cum.size()) - 1;
  const double total = cum[static_cast<size_t>(n)];
  if (pp == 1) return {0, n};
  std::vector<int> candidates;
  for (int c = 1; c < n; ++c)
    if (cum[static_cast<size_t>(c)] > 0 && cum[static_cast<size_t>(c)] < total) candidates.push_back(c);
  if (static_cast<int>(candidates.size()) < pp - 1)
    throw InputError("--parallel pp=" + std::to_string(pp) + ": the model has only " +
                     std::to_string(candidates.size() + 1) + (candidates.empty() ? " part" : " parts") +
                     " with work to place on pipeline stages");
  std::vector<double> sizes;
  for (int c : candidates) sizes.push_back(cross[static_cast<size_t>(c)]);
  std::vector<std::pair<std::vector<int>, double>> tried;  // cuts, step; bounds ascending
  double shortest = INFINITY;
  for (const double bound : parallel_detail::crossing_bounds(std::move(sizes))) {
    std::vector<int> pool;
    for (int c : candidates)
      if (cross[static_cast<size_t>(c)] <= bound) pool.push_back(c);
    if (static_cast<int>(pool.size()) < pp - 1) continue;
    std::vector<int> cuts = balanced_cuts(cum, pool, pp);
    const double step = pipeline_step_ms(cum, cross, cuts, hop_ms);
    shortest = std::min(shortest, step);
    tried.emplace_back(std::move(cuts), step);
  }
  for (const auto& [cuts, step] : tried)
    if (step <= shortest * (1 + kStageBalanceTolerance)) return cuts;
  return tried.back().first;
}

// The precision of the first floating-point GEMM (undefined without one): it sets the
// element size of gradients, weights and activations.
DType compute_dtype(const std::vector<Kernel>& kernels) {
  for (const auto& k : kernels)
    if (k.cls == KernelClass::gemm && is_float(k.dtype == DType::tf32 ? DType::f32 : k.dtype)) return k.dtype;
  return DType::undefined;
}

// Pipeline stages: contiguous node ranges balanced by forward and backward time, cut where
// little activation data crosses (choose_cuts).
struct StagePlan {
  std::vector<int> cuts;      // pp + 1 cut positions
  std::vector<int> stage_of;  // per node
  std::vector<double> cross;  // activation bytes crossing each cut position
};

StagePlan place_stages(const Graph& g, const std::vector<Kernel>& kernels, const std::vector<Prediction>& preds,
                       DType compute, int pp, const Link& link) {
  const size_t nn = g.nodes.size();
  std::vector<double> node_cost(nn, 0);
  for (size_t i = 0; i < kernels.size(); ++i)
    if (kernels[i].phase != Phase::update && in_range(kernels[i].node, nn))
      node_cost[static_cast<size_t>(kernels[i].node)] += preds[i].latency_ms;
  std::vector<double> cum(nn + 1, 0);
  for (size_t i = 0; i < nn; ++i) cum[i + 1] = cum[i] + node_cost[i];
  StagePlan p;
  p.cross = parallel_detail::crossing_bytes(data_path_tensors(g, compute), g.nodes.size());
  if (nn == 0) throw InputError("--parallel: the model has no nodes");
  p.cuts = choose_cuts(cum, p.cross, pp, [&](double bytes) { return p2p_ms(bytes, link); });
  p.stage_of.assign(nn, 0);
  for (int s = 0; s < pp; ++s)
    for (int i = p.cuts[static_cast<size_t>(s)]; i < p.cuts[static_cast<size_t>(s) + 1]; ++i)
      p.stage_of[static_cast<size_t>(i)] = s;
  return p;
}

// Parameters (the update kernels' weights): owned by the stage of their first consumer, sliced
// when a split node reads them.
struct WeightPlacement {
  std::vector<TpRole> roles;                 // per node
  std::map<std::string, int> first_consumer;  // weight name -> node
  std::vector<double> node_params;           // parameters first read by each node, per GPU
  // Of those, a mixture's experts (training with ep > 1: E/ep of them a GPU), whose gradients
  // are reduced (and ZeRO-sharded) over the dp/ep GPUs holding the same experts, not over dp.
  std::vector<double> node_expert_params;
  // The parameters as the data-parallel collectives over dp GPUs carry them: the experts'
  // scaled so that a ring over dp moves what theirs over dp/ep moves ((n-1)/n of the bytes).
  std::vector<double> node_comm_params;
  // Weights held and not updated (a LoRA step's frozen model), first read by each node, per
  // GPU: no gradient, no optimizer state. In elements of the compute dtype, and (QLoRA's NF4
  // weights, lowering.h kNf4BitsPerParameter) in bytes.
  std::vector<double> node_frozen, node_frozen_nf4_bytes;
  double frozen_bytes(int node, double eb) const {
    return node_frozen[static_cast<size_t>(node)] * eb + node_frozen_nf4_bytes[static_cast<size_t>(node)];
  }
};

// A mixture's experts (the weights its node holds) over ep of the `reduce_gpus` data-parallel
// GPUs in training: 1/ep each.
WeightPlacement place_weights(const Graph& g, const std::vector<Kernel>& kernels, int tp, int ep, int reduce_gpus) {
  const size_t nn = g.nodes.size();
  WeightPlacement w;
  w.roles = tensor_parallel_roles(g, tp);
  const std::set<std::string> split_weights = tensor_parallel_split_weights(g, w.roles);
  // The parameters: what the optimizer updates (the lowering's update kernels, one each);
  // those that are no graph tensor (LoRA's adapters) go under their update kernel's node.
  std::set<std::string> params;
  std::vector<const Kernel*> adapters;
  for (const Kernel& k : kernels)
    if (k.phase == Phase::update && !k.weight.empty()) {
      params.insert(k.weight);
      if (!g.find(k.weight) && in_range(k.node, nn)) adapters.push_back(&k);
    }
  for (size_t i = 0; i < nn; ++i)
    for (const auto& name : g.nodes[i].inputs) {
      const TensorInfo* t = params.count(name) ? g.find(name) : nullptr;
      if (!t || t->num_elements() <= 1) continue;
      if (!w.first_consumer.count(name)) w.first_consumer[name] = static_cast<int>(i);
    }
  w.node_params.assign(nn, 0);
  w.node_expert_params.assign(nn, 0);
  w.node_comm_params.assign(nn, 0);
  const auto ring_share = [](double n) { return n > 1 ? (n - 1) / n : 0.0; };
  const double expert_comm =
      ep > 1 && reduce_gpus > 1 ? ring_share(double(reduce_gpus) / ep) / ring_share(double(reduce_gpus)) : 1.0;
  for (const auto& [name, node] : w.first_consumer) {
    const double e = double(g.find(name)->num_elements());
    const Node& n = g.nodes[static_cast<size_t>(node)];
    const bool experts = ep > 1 && parallel_detail::is_moe_op(n);
    const double held = (split_weights.count(name) ? e / tp : e) / (experts ? ep : 1);
    w.node_params[static_cast<size_t>(node)] += held;
    if (experts) w.node_expert_params[static_cast<size_t>(node)] += held;
    w.node_comm_params[static_cast<size_t>(node)] += experts ? held * expert_comm : held;
  }
  for (const Kernel* k : adapters) {
    w.node_params[static_cast<size_t>(k->node)] += double(k->rows) * double(k->cols);
    w.node_comm_params[static_cast<size_t>(k->node)] += double(k->rows) * double(k->cols);
  }
  // Float weights the optimizer does not update: held whole (or split) at their first reader;
  // those QLoRA dequantizes in NF4.
  w.node_frozen.assign(nn, 0);
  w.node_frozen_nf4_bytes.assign(nn, 0);
  std::set<std::string> frozen;
  for (const auto& name : g.initializers) {
    const TensorInfo* t = g.find(name);
    if (t && is_float(t->dtype) && t->num_elements() > 1 && !params.count(name)) frozen.insert(name);
  }
  const std::set<std::string> nf4 = nf4_weights(kernels);
  for (size_t i = 0; i < nn; ++i)
    for (const auto& name : g.nodes[i].inputs)
      if (frozen.erase(name)) {
        const double e = double(g.find(name)->num_elements()) / (split_weights.count(name) ? tp : 1);
        if (nf4.count(name)) w.node_frozen_nf4_bytes[i] += e * kNf4BitsPerParameter / 8.0;
        else w.node_frozen[i] += e;
      }
  return w;
}

// Per stage: forward, backward and tensor-parallel time of one microbatch; `hop` is the
// slowest send/recv between stages.
struct StageTimes {
  std::vector<double> fwd, bwd, tp_ms;
  std::vector<double> cp_ms, cp_transfer_ms;  // context-parallel rings or all-to-alls: exposed, and their transfers
  std::vector<double> ep_ms;                  // expert-parallel all-to-alls
  double hop = 0;
};

// Sums each kernel into its stage and fills r.stages (node ranges, times, update, sends).
// `ring_ms`: per kernel, a context-parallel ring's transfer time (time_context_parallel_rings).
StageTimes stage_times(const Graph& g, const std::vector<Kernel>& kernels, const std::vector<Prediction>& preds,
                       const std::vector<double>& ring_ms, const StagePlan& plan, const WeightPlacement& w, int pp,
                       ParallelReport& r) {
  const size_t nn = g.nodes.size();
  r.stages.resize(static_cast<size_t>(pp));
  StageTimes t;
  t.fwd.assign(static_cast<size_t>(pp), 0);
  t.bwd.assign(static_cast<size_t>(pp), 0);
  t.tp_ms.assign(static_cast<size_t>(pp), 0);
  t.cp_ms.assign(static_cast<size_t>(pp), 0);
  t.cp_transfer_ms.assign(static_cast<size_t>(pp), 0);
  t.ep_ms.assign(static_cast<size_t>(pp), 0);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& k = kernels[i];
    int s = in_range(k.node, nn) ? plan.stage_of[static_cast<size_t>(k.node)] : -1;
    if (k.phase == Phase::update) {
      if (s < 0) {
        auto it = w.first_consumer.find(k.weight);
        s = it != w.first_consumer.end() ? plan.stage_of[static_cast<size_t>(it->second)] : 0;
      }
      r.stages[static_cast<size_t>(s)].update_ms += preds[i].latency_ms;
      continue;
    }
    if (s < 0) s = 0;
    (k.phase == Phase::forward ? t.fwd : t.bwd)[static_cast<size_t>(s)] += preds[i].latency_ms;
    if (k.cls == KernelClass::collective && (k.op == "cp_ring" || k.op == "cp_alltoall")) {
      t.cp_ms[static_cast<size_t>(s)] += preds[i].latency_ms;
      if (i < ring_ms.size()) t.cp_transfer_ms[static_cast<size_t>(s)] += ring_ms[i];
    } else if (k.cls == KernelClass::collective && k.op == "ep_alltoall") {
      t.ep_ms[static_cast<size_t>(s)] += preds[i].latency_ms;
    } else if (k.cls == KernelClass::collective) {
      t.tp_ms[static_cast<size_t>(s)] += preds[i].latency_ms;
    }
  }
  for (int s = 0; s < pp; ++s) {
    StageReport& st = r.stages[static_cast<size_t>(s)];
    st.first_node = plan.cuts[static_cast<size_t>(s)];
    st.last_node = plan.cuts[static_cast<size_t>(s) + 1] - 1;
    st.first_name = g.nodes[static_cast<size_t>(st.first_node)].name;
    st.last_name = g.nodes[static_cast<size_t>(st.last_node)].name;
    st.forward_ms = t.fwd[static_cast<size_t>(s)];
    st.backward_ms = t.bwd[static_cast<size_t>(s)];
    if (s + 1 < pp) st.send_bytes = plan.cross[static_cast<size_t>(plan.cuts[static_cast<size_t>(s) + 1])];
    t.hop = std::max(t.hop, p2p_ms(st.send_bytes, r.link));
  }
  return t;
}

// One stage's passes as the data-parallel collectives see them: its forward and backward
// kernels in order, the parameter bytes each step is the first of its node to need (ZeRO-3's
// gathers) and the gradient bytes each backward step readies (after the last backward step of
// its node or of any later one).
struct StagePasses {
  std::vector<double> fwd_ms, bwd_ms, fwd_need, bwd_need, grad;
  double param_bytes = 0;  // the stage's parameters on one GPU (before ZeRO's sharding), as the collectives carry them
};

StagePasses stage_passes(const std::vector<Kernel>& kernels, const std::vector<Prediction>& preds, const StagePlan& plan,
                         const WeightPlacement& w, int s, double eb) {
  const size_t nn = plan.stage_of.size();
  StagePasses p;
  std::vector<int> bwd_node;
  std::set<int> fwd_seen, bwd_seen;
  auto node_bytes = [&](int node) { return w.node_comm_params[static_cast<size_t>(node)] * eb; };
  // ZeRO-3 gathers the frozen weights a step reads too (FSDP shards every parameter).
  auto gathered = [&](int node) { return node_bytes(node) + w.frozen_bytes(node, eb); };
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& k = kernels[i];
    if (k.phase == Phase::update || !in_range(k.node, nn) || plan.stage_of[static_cast<size_t>(k.node)] != s) continue;
    if (k.phase == Phase::forward) {
      p.fwd_ms.push_back(preds[i].latency_ms);
      p.fwd_need.push_back(fwd_seen.insert(k.node).second ? gathered(k.node) : 0);
    } else {
      p.bwd_ms.push_back(preds[i].latency_ms);
      p.bwd_need.push_back(bwd_seen.insert(k.node).second ? gathered(k.node) : 0);
      bwd_node.push_back(k.node);
    }
  }
  std::vector<int> last_step(nn + 1, -1);
  for (size_t j = 0; j < bwd_node.size(); ++j) last_step[static_cast<size_t>(bwd_node[j])] = static_cast<int>(j);
  for (size_t i = nn; i-- > 0;) last_step[i] = std::max(last_step[i], last_step[i + 1]);
  p.grad.assign(p.bwd_ms.size() + 1, 0);
  for (int i = plan.cuts[static_cast<size_t>(s)]; i < plan.cuts[static_cast<size_t>(s) + 1]; ++i) {
    const double bytes = node_bytes(i);
    if (bytes <= 0) continue;
    p.param_bytes += bytes;
    const int j = last_step[static_cast<size_t>(i)];
    p.grad[j < 0 ? 0 : static_cast<size_t>(j)] += bytes;
  }
  if (p.bwd_ms.empty()) p.bwd_ms.push_back(0);
  return p;
}

// Data parallel, per stage. ZeRO 0 (DDP): the gradient buckets all-reduced under the last
// microbatch's backward. 1: reduce-scattered so, and the updated parameters all-gathered after
// the optimizer step (in ZeRO-3's gather buckets, exposed). 2: reduce-scattered under every
// microbatch's backward, the step's all-gather as in 1. 3: every microbatch's forward and
// backward gather their parameters as they go (overlap_sharded), its backward reduce-scatters.
std::vector<OverlapTiming> data_parallel(const std::vector<Kernel>& kernels, const std::vector<Prediction>& preds,
                                         const StagePlan& plan, const WeightPlacement& w, const ParallelConfig& cfg,
                                         double eb, const ParallelReport& r) {
  const int pp = static_cast<int>(plan.cuts.size()) - 1, m = cfg.microbatches;  // pp x vp stages
  const double bucket = cfg.bucket_mb * 1024 * 1024;
  const int g = r.dp_domain_gpus;  // hierarchical across NVLink domains when > 1
  const std::function<double(double)> allreduce = [&](double b) {
    return hierarchical_allreduce_ms(b, cfg.dp, g, r.dp_intra_link, r.dp_link);
  };
  const std::function<double(double)> reduce_scatter = [&](double b) {
    return hierarchical_reduce_scatter_ms(b, cfg.dp, g, r.dp_intra_link, r.dp_link);
  };
  const std::function<double(double)> allgather = reduce_scatter;
  std::vector<OverlapTiming> dp(static_cast<size_t>(pp));
  if (cfg.dp <= 1) return dp;
  const std::vector<double> none;
  for (int s = 0; s < pp; ++s) {
    const StagePasses p = stage_passes(kernels, preds, plan, w, s, eb);
    OverlapTiming& o = dp[static_cast<size_t>(s)];
    if (cfg.zero == 0) {
      o = overlap_sharded(p.bwd_ms, none, p.grad, 0, bucket, allgather, allreduce);
      continue;
    }
    const double gather_bucket = kZeroGatherBucketParams * eb;
    OverlapTiming per_mb = overlap_sharded(p.bwd_ms, cfg.zero >= 3 ? p.bwd_need : none, p.grad, gather_bucket, bucket,
                                           allgather, reduce_scatter);
    if (cfg.zero >= 3) {
      const OverlapTiming f = overlap_sharded(p.fwd_ms, p.fwd_need, none, gather_bucket, bucket, allgather, reduce_scatter);
      per_mb.comm_ms += f.comm_ms;
      per_mb.exposed_ms += f.exposed_ms;
      per_mb.gather_ms += f.gather_ms;
      per_mb.live_gather_bytes = std::max(per_mb.live_gather_bytes, f.live_gather_bytes);
    }
    const int times = cfg.zero >= 2 ? m : 1;
    o = per_mb;
    o.comm_ms = times * per_mb.comm_ms;
    o.exposed_ms = times * per_mb.exposed_ms;
    o.gather_ms = times * per_mb.gather_ms;
    o.buckets = times * per_mb.buckets;
    if (cfg.zero <= 2 && cfg.overlap_gather) {
      // The updated shards gathered under the next iteration's first forward pass, a bucket
      // ahead of the kernels that read them (the same issue order as ZeRO-3's forward gathers).
      const OverlapTiming f = overlap_sharded(p.fwd_ms, p.fwd_need, none, gather_bucket, bucket, allgather, reduce_scatter);
      o.comm_ms += f.comm_ms;
      o.exposed_ms += f.exposed_ms;
      o.gather_ms += f.gather_ms;
    } else if (cfg.zero <= 2 && p.param_bytes > 0 && std::isfinite(p.param_bytes)) {
      // The updated shards all-gathered after the step, in full buckets and the rest.
      const double full = std::floor(p.param_bytes / gather_bucket), rest = p.param_bytes - full * gather_bucket;
      const double d = full * allgather(gather_bucket) + allgather(rest);
      o.comm_ms += d;
      o.exposed_ms += d;
      o.gather_ms += d;
    }
  }
  return dp;
}

// The iteration ends when the slowest stage has synchronised and stepped its optimizer; the
// report's times are that stage's.
void critical_stage_times(const PipelineTiming& t, const PipelineTiming& t0, const std::vector<OverlapTiming>& dp,
                          const StageTimes& times, int m, int pp, ParallelReport& r) {
  // Per GPU, its stages' (one each, or vp chunks interleaved): data-parallel collectives summed,
  // the longest exposed (the chunks' reductions overlap the later chunks' backward), tensor-
  // parallel time and optimizer steps summed.
  const auto gpus = static_cast<size_t>(pp);
  std::vector<OverlapTiming> gdp(gpus);
  std::vector<double> gtp(gpus, 0), gupdate(gpus, 0), gcp(gpus, 0), gcp_transfer(gpus, 0), gep(gpus, 0);
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const size_t d = s % gpus;
    gdp[d].comm_ms += dp[s].comm_ms;
    gdp[d].exposed_ms = std::max(gdp[d].exposed_ms, dp[s].exposed_ms);
    gdp[d].buckets += dp[s].buckets;
    gdp[d].gather_ms += dp[s].gather_ms;
    gtp[d] += times.tp_ms[s];
    gcp[d] += times.cp_ms[s];
    gcp_transfer[d] += times.cp_transfer_ms[s];
    gep[d] += times.ep_ms[s];
    gupdate[d] += r.stages[s].update_ms;
  }
  size_t cs = 0;
  double best = -1;
  for (size_t d = 0; d < gpus; ++d) {
    const double end = t.stage_end_ms[d] + gdp[d].exposed_ms + gupdate[d];
    if (end > best) {
      best = end;
      cs = d;
    }
  }
  r.iteration_ms = best;
  r.compute_ms = *std::max_element(t.stage_busy_ms.begin(), t.stage_busy_ms.end());
  r.tp_comm_ms = m * gtp[cs];
  r.cp_exposed_ms = m * gcp[cs];
  r.cp_comm_ms = m * gcp_transfer[cs];
  r.ep_comm_ms = m * gep[cs];
  r.dp_comm_ms = gdp[cs].comm_ms;
  r.dp_exposed_ms = gdp[cs].exposed_ms;
  r.dp_buckets = gdp[cs].buckets;
  r.dp_gather_ms = gdp[cs].gather_ms;
  r.pp_comm_ms = std::max(0.0, t.span_ms - t0.span_ms);
  r.bubble_ms = t0.bubble_ms;
  r.bubble_fraction = t0.span_ms > 0 ? t0.bubble_ms / t0.span_ms : 0;
  r.update_ms = gupdate[cs];
  r.comm_ms = r.tp_comm_ms + r.dp_comm_ms + r.pp_comm_ms + r.cp_comm_ms + r.ep_comm_ms;
  r.exposed_comm_ms = r.tp_comm_ms + r.pp_comm_ms + r.dp_exposed_ms + r.cp_exposed_ms + r.ep_comm_ms;
}

// Memory per GPU: weights, gradients, the optimizer's state (optimizer_state_bytes: none for
// SGD, a momentum buffer, Adam's two moments; plus an fp32 master copy when training in 16
// bits) and the activations of the microbatches in flight.
void stage_memory(const Graph& g, const std::vector<Kernel>& kernels, const WeightPlacement& w, const StagePlan& plan,
                  const std::vector<SavedActivation>& saved, const std::vector<OverlapTiming>& dp,
                  const ParallelConfig& cfg, double eb, const Gpu& gpu, ParallelReport& r) {
  const size_t nn = g.nodes.size();
  const int m = cfg.microbatches, pp = static_cast<int>(plan.cuts.size()) - 1;  // pp x vp stages
  std::vector<double> kept(static_cast<size_t>(pp), 0);  // per stage, one microbatch
  std::vector<std::map<int, double>> recomputed(static_cast<size_t>(pp));  // per stage and segment
  const std::vector<char> sequence = cfg.sequence_parallel ? sequence_parallel_nodes(g, w.roles) : std::vector<char>();
  for (const SavedActivation& a : saved) {
    if (!in_range(a.keeper, nn)) continue;
    const bool split = in_range(a.writer, nn) && (splits_output(w.roles[static_cast<size_t>(a.writer)]) ||
                                                  (in_range(a.writer, sequence.size()) && sequence[static_cast<size_t>(a.writer)]));
    const auto stage = static_cast<size_t>(plan.stage_of[static_cast<size_t>(a.keeper)]);
    (a.segment >= 0 ? recomputed[stage][a.segment] : kept[stage]) += a.bytes / (split ? cfg.tp : 1) / cfg.cp;
  }
  r.memory_capacity_gb = gpu.mem_gb;
  // The optimizer's FP32 state per parameter, from its update kernels (lowering.h).
  double state = 0;
  for (const auto& k : kernels)
    if (k.phase == Phase::update) {
      state = optimizer_state_bytes(k.op);
      break;
    }
  std::vector<double> gpu_gb(static_cast<size_t>(cfg.pp), 0), gpu_segment_gb(static_cast<size_t>(cfg.pp), 0);
  for (int s = 0; s < pp; ++s) {
    StageReport& st = r.stages[static_cast<size_t>(s)];
    double experts = 0;  // of st.params, a mixture's experts (sharded over dp/ep under ZeRO)
    double frozen = 0;   // bytes of weights held and not updated
    for (int i = st.first_node; i <= st.last_node; ++i) {
      st.params += w.node_params[static_cast<size_t>(i)];
      experts += w.node_expert_params[static_cast<size_t>(i)];
      frozen += w.frozen_bytes(i, eb);
    }
    const double act = kept[static_cast<size_t>(s)];
    double segment = 0;  // one segment recomputed at a time
    for (const auto& [seg, bytes] : recomputed[static_cast<size_t>(s)]) segment = std::max(segment, bytes);
    // Microbatches in flight: GPipe all, 1F1B pp - stage; interleaved, the GPU's microbatch-
    // chunks in flight (interleaved_in_flight) spread over its vp chunks.
    const double in_flight =
        cfg.virtual_stages > 1 ? double(interleaved_in_flight(s % cfg.pp, cfg.pp, cfg.virtual_stages, m)) / cfg.virtual_stages
        : cfg.schedule == PipelineSchedule::gpipe ? m
                                                  : std::min(pp - s, m);
    // ZeRO: 1/dp of the optimizer's state (1+), of the gradients (2+; plus the bucket being
    // reduced) and of the parameters (3; plus the buckets gathered at once); a mixture's experts
    // over the dp/ep GPUs that hold them.
    const double shards = cfg.dp > 1 ? cfg.dp : 1;
    const double expert_shards = std::max(1.0, shards / std::max(1, cfg.ep));
    const double sharded = (st.params - experts) / shards + experts / expert_shards;
    const double bucket = std::min(cfg.bucket_mb * 1024 * 1024, st.params * eb);
    // Frozen weights are held as parameters are (ZeRO-3, FSDP: 1/dp of them too).
    st.weights_gb = (cfg.zero >= 3 ? sharded * eb + frozen / shards + dp[static_cast<size_t>(s)].live_gather_bytes
                                   : st.params * eb + frozen) / kGiB;
    st.gradients_gb = (cfg.zero >= 2 && cfg.dp > 1 ? sharded * eb + bucket : st.params * eb) / kGiB;
    st.optimizer_gb = (cfg.zero >= 1 ? sharded : st.params) * (state + (eb < 4 ? 4.0 : 0.0)) / kGiB;
    st.activations_gb = (act * in_flight + segment) / kGiB;
    st.total_gb = st.weights_gb + st.gradients_gb + st.optimizer_gb + st.activations_gb;
    // A GPU holds its stages (vp chunks interleaved), recomputing one segment at a time.
    const auto d = static_cast<size_t>(s % cfg.pp);
    gpu_gb[d] += st.total_gb - segment / kGiB;
    gpu_segment_gb[d] = std::max(gpu_segment_gb[d], segment / kGiB);
  }
  for (size_t d = 0; d < gpu_gb.size(); ++d) r.peak_memory_gb = std::max(r.peak_memory_gb, gpu_gb[d] + gpu_segment_gb[d]);
  if (gpu.mem_gb > 0 && r.peak_memory_gb > gpu.mem_gb) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "parallel: %.1f GiB per GPU needed (weights, gradients, optimizer state, activations) but %s has %.0f GiB",
                  r.peak_memory_gb, gpu.name.c_str(), gpu.mem_gb);
    r.warnings.push_back(buf);
  }
}

}  // namespace

std::vector<int> node_layers(const Graph& g) {
  static const std::regex layer_re(R"((?:^|[./])(?:layers|h|layer|blocks)[._](\d{1,6})(?:[./_]|$))");
  std::vector<int> layer(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    std::smatch m;
    if (std::regex_search(g.nodes[i].name, m, layer_re)) layer[i] = std::stoi(m[1].str());
  }
  return layer;
}

namespace {

// vLLM's even split (get_pp_indices): layers / pp a stage, the remainder one each to the stages
// before the last; a stage begins at the first node of its first layer, the nodes before layer
// 0 on the first stage and those after the last layer on the last.
std::vector<int> even_layer_cuts(const Graph& g, int pp) {
  const std::vector<int> layer = node_layers(g);
  const int layers = 1 + *std::max_element(layer.begin(), layer.end());
  if (layers < pp)
    throw InputError("--parallel pp=" + std::to_string(pp) + " pp_split=even: the graph names " + std::to_string(layers) +
                     " layers (layers.N, h.N, layer.N, blocks.N), and each stage holds at least one");
  std::vector<int> per(static_cast<size_t>(pp), layers / pp);
  for (int i = 2; i < layers % pp + 2; ++i) ++per[static_cast<size_t>(pp - i)];
  std::vector<int> cuts{0};
  int first = 0;
  for (int s = 1; s < pp; ++s) {
    first += per[static_cast<size_t>(s - 1)];
    const auto at = std::find(layer.begin(), layer.end(), first);
    cuts.push_back(static_cast<int>(at - layer.begin()));
  }
  cuts.push_back(static_cast<int>(g.nodes.size()));
  return cuts;
}

}  // namespace

InferenceStages inference_stages(const Graph& g, const std::vector<Kernel>& kernels, const std::vector<double>& node_ms,
                                 int pp, const Link& link, bool even_layers) {
  const size_t nn = g.nodes.size();
  if (nn == 0) throw InputError("--parallel: the model has no nodes");
  if (pp < 1) throw InputError("--parallel: pp must be at least 1");
  std::vector<double> cum(nn + 1, 0);
  for (size_t i = 0; i < nn; ++i) cum[i + 1] = cum[i] + (i < node_ms.size() ? node_ms[i] : 0.0);
  const std::vector<double> cross =
      parallel_detail::crossing_bytes(data_path_tensors(g, compute_dtype(kernels)), nn);
  InferenceStages st;
  // choose_cuts prices a cut's two sends (a training step's activation and its gradient); the
  // forward-only pipeline sends once, which orders the candidate cuts the same way.
  st.cuts = even_layers && pp > 1 ? even_layer_cuts(g, pp)
                                  : choose_cuts(cum, cross, pp, [&](double bytes) { return p2p_ms(bytes, link); });
  for (int s = 0; s < pp; ++s) {
    const auto from = static_cast<size_t>(st.cuts[static_cast<size_t>(s)]);
    const auto to = static_cast<size_t>(st.cuts[static_cast<size_t>(s) + 1]);
    st.stage_ms.push_back(cum[to] - cum[from]);
    if (s > 0) st.send_bytes = std::max(st.send_bytes, cross[from]);
  }
  return st;
}

namespace {

// The stages' sum and the slowest of them.
std::pair<double, double> sum_and_slowest(const std::vector<double>& stage_ms) {
  double sum = 0, slowest = 0;
  for (double t : stage_ms) {
    sum += t;
    slowest = std::max(slowest, t);
  }
  return {sum, slowest};
}

}  // namespace

double pipelined_prefill_ms(const std::vector<double>& stage_ms, double hop_ms, int microbatches) {
  if (stage_ms.empty()) return 0;
  const auto [sum, slowest] = sum_and_slowest(stage_ms);
  return sum + double(stage_ms.size() - 1) * hop_ms + double(std::max(microbatches, 1) - 1) * slowest;
}

double pipelined_step_ms(const std::vector<double>& stage_ms, double hop_ms, int microbatches) {
  if (stage_ms.empty()) return 0;
  const auto [sum, slowest] = sum_and_slowest(stage_ms);
  const double one_token = sum + (stage_ms.size() > 1 ? double(stage_ms.size()) * hop_ms : 0.0);
  return std::max(one_token, double(std::max(microbatches, 1)) * slowest);
}

ParallelReport plan_iteration(const Graph& g, const std::vector<Kernel>& kernels, std::vector<Prediction>& preds,
                              const Gpu& gpu, const ParallelConfig& cfg, int64_t global_batch, int64_t micro_batch,
                              const std::vector<SavedActivation>& saved) {
  if (cfg.dp < 1 || cfg.tp < 1 || cfg.pp < 1 || cfg.microbatches < 1)
    throw InputError("--parallel: dp, tp, pp and microbatches must be at least 1");
  if (preds.size() != kernels.size()) throw RuntimeError("plan_iteration: one prediction per kernel expected");
  if (double(cfg.pp) * cfg.microbatches * cfg.virtual_stages > 1e7)
    throw InputError("--parallel: pp x microbatches x vp = " + std::to_string(double(cfg.pp) * cfg.microbatches * cfg.virtual_stages) +
                     " pipeline steps is too many to simulate (at most 10^7)");
  if (cfg.cp < 1) throw InputError("--parallel: cp must be at least 1");
  ParallelReport r;
  r.config = cfg;
  r.global_batch = global_batch;
  r.micro_batch = micro_batch;
  // The gradients' group: the data-parallel GPUs and, with context parallelism, every GPU of
  // their context-parallel groups (the weights are replicated over both); ZeRO shards over it.
  ParallelConfig red = cfg;
  red.dp = cfg.dp * cfg.cp;
  r.tp_link = link_for(gpu, cfg.link_gbps, cfg.tp);
  r.cp_link = link_for(gpu, cfg.link_gbps, cfg.tp * cfg.cp);
  r.ep_link = link_for(gpu, cfg.link_gbps, cfg.tp * cfg.cp * cfg.ep);
  r.dp_link = link_for(gpu, cfg.link_gbps, cfg.tp * red.dp);
  // A data-parallel group over several NVLink domains with several of its GPUs in each (its
  // ranks tp apart) reduces within the domains first.
  if (cfg.link_gbps <= 0 && gpu.nvlink_domain > 0 && gpu.nvlink_gbps > 0 && cfg.tp * red.dp > gpu.nvlink_domain &&
      gpu.nvlink_domain % cfg.tp == 0) {
    const int g = std::min(red.dp, gpu.nvlink_domain / cfg.tp);
    if (g > 1 && red.dp % g == 0) {
      r.dp_domain_gpus = g;
      r.dp_intra_link = link_for(gpu, 0, gpu.nvlink_domain);
    }
  }
  r.link = link_for(gpu, cfg.link_gbps, red.dp * cfg.tp * cfg.pp);
  const DType compute = compute_dtype(kernels);
  const double eb = element_bytes(compute == DType::undefined ? DType::f32 : compute);

  // Tensor-parallel collectives get their time from the link model.
  time_tensor_parallel_collectives(kernels, preds, cfg.tp, r.tp_link);
  // Context parallelism's rings and expert parallelism's all-to-alls then take their own times.
  const std::vector<double> rings = time_context_parallel_rings(kernels, preds, cfg.cp, r.cp_link);
  time_expert_all_to_alls(kernels, preds, r.ep_link);

  // pp stages, or pp x vp model chunks interleaved over the pp GPUs (stage s on GPU s mod pp).
  const int stages = cfg.pp * cfg.virtual_stages;
  const StagePlan plan = place_stages(g, kernels, preds, compute, stages, r.link);
  const WeightPlacement weights = place_weights(g, kernels, cfg.tp, cfg.ep, red.dp);
  const StageTimes times = stage_times(g, kernels, preds, rings, plan, weights, stages, r);
  for (size_t s = 0; s < r.stages.size(); ++s) r.stages[s].gpu = static_cast<int>(s % static_cast<size_t>(cfg.pp));

  // Pipeline schedule, with and without the send/recv hops.
  auto simulate = [&](double hop) {
    return cfg.virtual_stages > 1 ? simulate_interleaved(times.fwd, times.bwd, cfg.pp, cfg.microbatches, hop)
                                  : simulate_pipeline(times.fwd, times.bwd, cfg.microbatches, cfg.schedule, hop);
  };
  const PipelineTiming t = simulate(times.hop);
  const PipelineTiming t0 = simulate(0);
  const std::vector<OverlapTiming> dp = data_parallel(kernels, preds, plan, weights, red, eb, r);
  critical_stage_times(t, t0, dp, times, cfg.microbatches, cfg.pp, r);
  stage_memory(g, kernels, weights, plan, saved, dp, red, eb, gpu, r);
  return r;
}

}  // namespace neusight
