// shard.h - one GPU's share of a kernel and the collectives beside it, shared by tensor,
// context and expert parallelism (tensor_parallel.cpp, context_parallel.cpp,
// expert_parallel.cpp) and the iteration. Internal to the parallel stage.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "neusight/graph.h"
#include "neusight/lowering.h"
#include "neusight/parallel.h"

namespace neusight::parallel_detail {

// Divides one of `dims` by tp: the first that divides evenly, else the first positive one
// rounded up (padded, as Megatron pads the vocabulary to a multiple of tp).
inline bool divide_first(std::initializer_list<int64_t*> dims, int tp) {
  for (int64_t* d : dims)
    if (*d > 0 && *d % tp == 0) {
      *d /= tp;
      return true;
    }
  for (int64_t* d : dims)
    if (*d > 0) {
      *d = (*d + tp - 1) / tp;
      return true;
    }
  return false;
}

inline double gemm_traffic(const GemmShape& s) {
  return double(s.batch) * (double(s.m) * s.k + double(s.k) * s.n + double(s.m) * s.n);
}

// Keeps the lowering's byte conventions: bytes scale with the operands' sizes.
inline void rescale_gemm(Kernel& k, const GemmShape& before) {
  const double old_traffic = gemm_traffic(before);
  k.flops = work_of_gemm(k.gemm, 1).flops;
  if (old_traffic > 0) k.bytes *= gemm_traffic(k.gemm) / old_traffic;
}

inline void shrink_vector(Kernel& k, int tp) {
  const bool rowwise = k.cls == KernelClass::softmax || k.cls == KernelClass::layernorm || k.cls == KernelClass::reduce;
  if (rowwise) divide_first({&k.rows, &k.cols}, tp);
  else divide_first({&k.cols, &k.rows}, tp);
  k.flops /= tp;
  k.bytes /= tp;
}

// A collective of `bytes` that runs beside kernel `at`: its node, phase, dtype and recompute.
inline Kernel collective_beside(const Kernel& at, const std::string& op, double bytes, std::string note) {
  Kernel c;
  c.cls = KernelClass::collective;
  c.op = op;
  c.phase = at.phase;
  c.node = at.node;
  c.dtype = at.dtype;
  c.recomputed = at.recomputed;
  c.rows = 1;
  c.cols = static_cast<int64_t>(bytes / element_bytes(at.dtype));
  c.bytes = bytes;
  c.note = std::move(note);
  return c;
}

// A mixture of experts operator (com.microsoft MoE, QMoE): the weights it holds are its experts'.
inline bool is_moe_op(const Node& n) { return n.domain == "com.microsoft" && (n.op_type == "MoE" || n.op_type == "QMoE"); }

// A collective's prediction from `time(link)`: on `link` for the latency, at its efficiency
// scaled to kLinkEfficiencyHigh and kLinkEfficiencyLow for the ends of the 80% interval.
template <class Time>
Prediction link_prediction(const Link& link, Time time) {
  Link fast = link, slow = link;
  fast.efficiency = link.efficiency * kLinkEfficiencyHigh / kLinkEfficiency;
  slow.efficiency = link.efficiency * kLinkEfficiencyLow / kLinkEfficiency;
  Prediction p;
  p.latency_ms = time(link);
  p.latency_low_ms = time(fast);
  p.latency_high_ms = time(slow);
  return p;
}

// An all-to-all in which each GPU sends `bytes` (expert parallelism's dispatch and combine,
// Ulysses' re-sharding): the time to send them point to point, on the critical path.
inline Prediction all_to_all_prediction(double bytes, const Link& link) {
  return link_prediction(link, [&](const Link& l) { return p2p_ms(bytes, l); });
}

}  // namespace neusight::parallel_detail
