// sparsity.cpp - 2:4 structured sparsity (lowering.h SparsityOptions): which linear layers' and
// convolutions' forward GEMMs read a weight pruned 2:4.
#include <regex>
#include <set>

#include "internal.h"

namespace neusight::lowering_detail {

namespace {

// The weight of a forward GEMM that can run 2:4 sparse, or "": a linear layer's (2-D float
// initializer) or a convolution's (float initializer of rank 3 or more, one group, not
// transposed), its reduction a whole number of groups of four (a linear layer's input
// features, a convolution's input channels, along which NVIDIA's ASP and TensorRT prune).
// A weight is an initializer, or a value computed from constants alone (`folded`: the nodes the
// lowering folded; weight-stripped models build their weights with ConstantOfShape).
std::string prunable_weight(const Graph& g, const Kernel& k, const std::set<std::string>& folded) {
  if (!layer_gemm(k) || k.node < 0 || static_cast<size_t>(k.node) >= g.nodes.size()) return "";
  const Node& n = g.nodes[static_cast<size_t>(k.node)];
  const bool conv = n.op_type == "Conv" && n.domain.empty();
  if (!conv && (n.op_type == "MatMul" || n.op_type == "Gemm") && k.gemm.k % 4 == 0) {
    if (std::string w = linear_weight(g, k); !w.empty()) return w;
  }
  if (static_cast<size_t>(k.b_input) >= n.inputs.size() || (conv && (n.attr_i("group", 1) != 1 || k.b_input != 1)))
    return "";
  if (!conv && (n.op_type != "MatMul" && n.op_type != "Gemm")) return "";
  const TensorInfo* w = g.find(n.inputs[static_cast<size_t>(k.b_input)]);
  if (!w || !is_float(w->dtype) || !w->fully_known() || !(w->is_initializer || folded.count(w->name))) return "";
  if (!conv) return w->shape.size() == 2 && k.gemm.k % 4 == 0 ? w->name : "";
  return w->shape.size() >= 3 && w->shape[1].value % 4 == 0 ? w->name : "";
}

// The outputs of the nodes the lowering folded (computed from constants alone).
std::set<std::string> folded_values(const Graph& g, const std::vector<FreeReason>& free_reason) {
  std::set<std::string> out;
  for (size_t i = 0; i < g.nodes.size() && i < free_reason.size(); ++i)
    if (free_reason[i] == FreeReason::constant_folded)
      for (const std::string& o : g.nodes[i].outputs)
        if (!o.empty()) out.insert(o);
  return out;
}

}  // namespace

std::vector<std::string> mark_sparse_2_4(const Graph& g, std::vector<Kernel>& kernels, const SparsityOptions& s,
                                         const std::vector<FreeReason>& free_reason) {
  std::vector<std::string> names;
  if (!s.two_four) return names;
  const std::set<std::string> folded = folded_values(g, free_reason);
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
    const std::string w = prunable_weight(g, k, folded);
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
    throw InputError(all ? std::string("--sparsity 2:4: the graph has no linear layer or convolution before its output "
                                       "head to prune (a GEMM of a float weight whose reduction is a multiple of 4)")
                         : "--sparsity targets=" + s.targets + ": no prunable layer's weight name matches");
  return names;
}

}  // namespace neusight::lowering_detail
