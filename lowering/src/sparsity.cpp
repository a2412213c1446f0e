// sparsity.cpp - 2:4 structured sparsity (lowering.h SparsityOptions): which linear layers'
// forward GEMMs read a weight pruned 2:4.
#include <regex>
#include <set>

#include "internal.h"

namespace neusight::lowering_detail {

std::vector<std::string> mark_sparse_2_4(const Graph& g, std::vector<Kernel>& kernels, const SparsityOptions& s) {
  std::vector<std::string> names;
  if (!s.two_four) return names;
  const bool named = !s.weights.empty();
  const bool all = !named && (s.targets.empty() || s.targets == "all");
  std::regex pattern;
  if (!all && !named) {
    try {
      pattern = std::regex(s.targets, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw InputError("--sparsity targets=" + s.targets + ": not a regular expression (" + e.what() + ")");
    }
  }
  std::vector<Kernel> fwd;
  for (const Kernel& k : kernels)
    if (k.phase == Phase::forward) fwd.push_back(k);
  const std::vector<char> feeds = feeds_a_gemm(g, fwd);
  // SparseGPT's and Wanda's 2:4 recipes prune every linear layer of the blocks and keep the
  // output head dense.
  const auto pruned = [&](int node, const std::string& w) {
    if (named) return s.weights.count(w) != 0;
    return all ? feeds[static_cast<size_t>(node)] != 0 : std::regex_search(w, pattern);
  };
  std::set<std::string> seen;
  for (Kernel& k : kernels) {
    if (k.lora_adapter) continue;
    const std::string w = linear_weight(g, k);
    if (w.empty()) continue;
    // A GEMM over concatenated weights is pruned when every member is (one compressed matrix).
    std::vector<std::string> weights;
    int64_t columns = 0;
    if (!member_weight(g, k.node, columns).empty()) weights.push_back(w);
    bool every = weights.empty() || pruned(k.node, w);
    for (int m : k.fused_nodes) {
      const std::string mw = member_weight(g, m, columns);
      if (mw.empty()) continue;
      weights.push_back(mw);
      every = every && pruned(m, mw);
    }
    if (weights.empty()) {
      if (!pruned(k.node, w)) continue;
      weights.push_back(w);
    } else if (!every) {
      continue;
    }
    k.sparse_2_4 = true;
    for (const std::string& name : weights)
      if (seen.insert(name).second) names.push_back(name);
  }
  if (names.empty() && named) return names;  // --sparsity auto: pruned weights no linear layer reads
  if (names.empty())
    throw InputError(all ? std::string("--sparsity 2:4: the graph has no linear layer (a GEMM of a 2-D float weight) "
                                       "before its output head to prune")
                         : "--sparsity targets=" + s.targets + ": no linear layer's weight name matches");
  return names;
}

}  // namespace neusight::lowering_detail
