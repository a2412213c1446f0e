// context_parallel.cpp - Megatron-LM's context parallelism on a graph's kernel list: one GPU's
// share of every sequence, and the ring that passes the keys and values round the group.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "neusight/parallel.h"
#include "neusight/parameters.h"
#include "shard.h"

namespace neusight {

using parallel_detail::divide_first;
using parallel_detail::rescale_gemm;
using parallel_detail::shrink_vector;

namespace {

// The bytes of the keys and values a FlashAttention kernel reads (its second operand), and for
// the backward also writes as their gradients.
double flash_kv_bytes(const Kernel& k) {
  if (k.operand_elems.size() < 2) return 0;
  return double(k.operand_elems[1]) * element_bytes(k.dtype) * (k.op == "flash_attention_bwd" ? 2.0 : 1.0);
}

// Per node: it computes from held values alone (a weight's transpose or cast), on no tokens.
std::vector<char> weight_only_nodes(const Graph& g) {
  const std::unordered_set<std::string> held = held_values(g);
  std::unordered_set<std::string> derived(held.begin(), held.end());
  std::vector<char> only(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    bool all = !n.inputs.empty();
    for (const auto& in : n.inputs)
      if (!in.empty() && !derived.count(in)) all = false;
    if (!all) continue;
    only[i] = 1;
    for (const auto& o : n.outputs) derived.insert(o);
  }
  return only;
}

// One kernel on this GPU's 1/cp of the tokens. `fwd`: its node's forward GEMM, whose rows are
// the tokens (a backward GEMM carries them as rows, or as the reduction of a weight's gradient).
// Under Ulysses (a2a) FlashAttention runs every token of 1/cp of the heads instead.
void split_tokens(Kernel& k, const GemmShape* fwd, int cp, CpComm comm) {
  k.moe.tokens /= cp;  // a mixture's routing: this GPU's tokens
  if (k.cls == KernelClass::gemm && is_flash_gemm(k) && comm == CpComm::a2a) {
    // Every query and key of 1/cp of the (batch x head) pairs: all of it 1/cp.
    const GemmShape before = k.gemm;
    divide_first({&k.gemm.batch, &k.gemm.m}, cp);
    const double share = before.batch * before.m > 0 ? double(k.gemm.batch * k.gemm.m) / double(before.batch * before.m) : 1.0;
    k.flops *= share;
    k.bytes *= share;
    for (auto& e : k.operand_elems) e = static_cast<int64_t>(std::llround(double(e) * share));
  } else if (k.cls == KernelClass::gemm && is_flash_gemm(k)) {
    // The local queries against every key: the products shrink with the queries, the K/V
    // read (and their gradients written) stays whole.
    const int64_t queries = k.gemm.m;
    const double kv = flash_kv_bytes(k);
    divide_first({&k.gemm.m}, cp);
    const double share = queries > 0 ? double(k.gemm.m) / double(queries) : 1.0;
    k.flops *= share;
    k.bytes = kv + (k.bytes - kv) * share;
  } else if (k.cls == KernelClass::gemm) {
    const GemmShape before = k.gemm;
    const int64_t tokens = fwd ? fwd->m : k.gemm.m;
    if (k.gemm.m == tokens) divide_first({&k.gemm.m}, cp);
    else if (k.gemm.k == tokens) divide_first({&k.gemm.k}, cp);
    else if (k.gemm.n == tokens) divide_first({&k.gemm.n}, cp);
    else divide_first({&k.gemm.batch, &k.gemm.m}, cp);
    rescale_gemm(k, before);
  } else if (k.cls == KernelClass::collective) {
    k.bytes /= cp;
    k.cols = std::max<int64_t>(1, (k.cols + cp - 1) / cp);
  } else if (k.cls != KernelClass::unknown) {
    shrink_vector(k, cp);
  }
}

// Ulysses' all-to-all beside a FlashAttention kernel (before it or after it): of the local
// tokens' tensors it re-shards (the whole attention's `elems`, 1/cp of them a GPU's), the
// (cp - 1) / cp a GPU sends.
Kernel alltoall_kernel(const Kernel& attention, double elems, int cp, const char* what) {
  const double bytes = elems / cp * double(cp - 1) / cp * element_bytes(attention.dtype);
  char buf[200];
  std::snprintf(buf, sizeof buf, "context-parallel all-to-all (Ulysses) over %d GPUs: %s, %.2f MB sent", cp, what, bytes / 1e6);
  return parallel_detail::collective_beside(attention, "cp_alltoall", bytes, buf);
}

Kernel ring_kernel(const Kernel& attention, int cp) {
  const double chunk = flash_kv_bytes(attention) / cp;
  char buf[200];
  std::snprintf(buf, sizeof buf, "context-parallel ring: %d steps of %.2f MB (%s) to the next of %d GPUs beside the attention",
                cp - 1, chunk / 1e6, attention.phase == Phase::forward ? "K and V" : "K, V and their gradients", cp);
  Kernel r = parallel_detail::collective_beside(attention, "cp_ring", double(cp - 1) * chunk, buf);
  r.rows = cp - 1;
  r.cols = static_cast<int64_t>(chunk / element_bytes(attention.dtype));
  return r;
}

}  // namespace

KernelList shard_context_parallel(const Graph& g, const KernelList& in, int cp, CpComm comm) {
  if (cp <= 1) return in;
  KernelList out = in;
  out.kernels.clear();
  const std::vector<char> weight_only = weight_only_nodes(g);
  std::unordered_map<int, GemmShape> fwd_gemm;  // node -> its forward GEMM (the first)
  for (const Kernel& k : in.kernels)
    if (k.cls == KernelClass::gemm && k.phase == Phase::forward && k.node >= 0) fwd_gemm.emplace(k.node, k.gemm);
  for (const Kernel& k0 : in.kernels) {
    Kernel k = k0;
    const bool whole = k.phase == Phase::update || k.op == "embedding_grad" ||
                       (k.node >= 0 && static_cast<size_t>(k.node) < weight_only.size() && weight_only[static_cast<size_t>(k.node)]);
    const bool attention = !whole && k.cls == KernelClass::gemm && is_flash_gemm(k) && flash_kv_bytes(k) > 0;
    // The whole attention's Q (and O, the same size) and K + V elements, for Ulysses' exchanges.
    const double q = attention && !k.operand_elems.empty() ? double(k.operand_elems[0]) : 0;
    const double kv = attention && k.operand_elems.size() > 1 ? double(k.operand_elems[1]) : 0;
    const bool fwd = k.phase == Phase::forward;
    // Ulysses re-shards whole heads over the group: Transformer Engine's a2a asks that cp
    // divide a GPU's query heads and its KV heads.
    if (attention && comm == CpComm::a2a && (k.heads % cp != 0 || k.kv_heads % cp != 0))
      throw InputError("--parallel cp=" + std::to_string(cp) + ",cp_comm=a2a: Ulysses spreads whole heads over the cp GPUs, and a "
                       "GPU's attention has " + std::to_string(k.heads) + " query and " + std::to_string(k.kv_heads) +
                       " KV heads (after tp): cp must divide both (cp_comm=p2p, the ring, takes any)");
    if (attention && comm == CpComm::a2a)
      out.kernels.push_back(alltoall_kernel(k, fwd ? q + kv : q, cp, fwd ? "Q, K and V to 1/cp of the heads" : "the output's gradient to 1/cp of the heads"));
    if (!whole) {
      auto it = fwd_gemm.find(k.node);
      split_tokens(k, it == fwd_gemm.end() ? nullptr : &it->second, cp, comm);
    }
    out.kernels.push_back(k);
    if (attention && comm == CpComm::a2a)
      out.kernels.push_back(alltoall_kernel(k, fwd ? q : q + kv, cp, fwd ? "the output back to the local tokens" : "the gradients of Q, K and V back to the local tokens"));
    else if (attention)
      out.kernels.push_back(ring_kernel(k, cp));
  }
  return out;
}

double cp_ring_exposed_ms(double ring_bytes, double attention_ms, int cp, const Link& link) {
  if (cp <= 1 || ring_bytes <= 0) return 0;
  const double step = p2p_ms(ring_bytes / (cp - 1), link);
  return (cp - 1) * std::max(0.0, step - attention_ms / cp);
}

std::vector<double> time_context_parallel_rings(const std::vector<Kernel>& kernels, std::vector<Prediction>& preds,
                                                int cp, const Link& link) {
  std::vector<double> transfer(kernels.size(), 0);
  for (size_t i = 0; i < kernels.size() && i < preds.size(); ++i) {
    const Kernel& k = kernels[i];
    if (k.op == "cp_alltoall" && cp > 1) {  // on the critical path whole
      preds[i] = parallel_detail::all_to_all_prediction(k.bytes, link);
      transfer[i] = preds[i].latency_ms;
      continue;
    }
    if (k.op != "cp_ring" || cp <= 1) continue;
    // The attention kernel it runs beside: the nearest before it of the same node and phase.
    double attention = 0;
    for (size_t j = i; j-- > 0;)
      if (kernels[j].node == k.node && kernels[j].phase == k.phase && is_flash_gemm(kernels[j])) {
        attention = preds[j].latency_ms;
        break;
      }
    preds[i] = parallel_detail::link_prediction(link, [&](const Link& l) { return cp_ring_exposed_ms(k.bytes, attention, cp, l); });
    transfer[i] = (cp - 1) * p2p_ms(k.bytes / (cp - 1), link);
  }
  return transfer;
}

}  // namespace neusight
