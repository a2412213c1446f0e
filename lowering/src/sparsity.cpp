// sparsity.cpp - 2:4 structured sparsity (lowering.h SparsityOptions): which linear layers' and
// convolutions' forward GEMMs read a weight pruned 2:4.
#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <unordered_map>

#include "internal.h"

namespace neusight::lowering_detail {

namespace {

// The axis of a weight, input `input` of GEMM node `n`, along which its GEMM reduces (and
// NVIDIA's ASP and TensorRT prune): a convolution's input channels (1); MatMul's B [K, N] down
// its columns (0), its A [M, K] along its rows (1); Gemm's alike, transA and transB flipping them.
int reduction_axis(const Node& n, size_t input) {
  if (n.op_type == "Conv") return 1;
  const bool gemm = n.op_type == "Gemm";
  if (input == 0) return gemm && n.attr_i("transA", 0) != 0 ? 0 : 1;
  return gemm && n.attr_i("transB", 0) != 0 ? 1 : 0;
}

struct PrunableWeight {
  std::string name;  // "" for none
  int axis = 0;      // reduction_axis
  // Whether a zero of the stored values is a zero weight: false for a quantized weight whose
  // zero point is not known to be 0 (--sparsity auto then cannot read the pattern from it).
  bool zero_is_zero = true;
};

// The initializer a quantize-dequantize model stores a weight in: `tensor` written by a
// DequantizeLinear of an integer or FP8 initializer (INT8 as TensorRT runs 2:4 sparse GEMMs;
// the GEMM reads the dequantized values, or, under --fusion full, the stored ones). Empty name
// for any other tensor.
PrunableWeight dequantized_initializer(const Graph& g, const std::unordered_map<std::string, size_t>& producer,
                                       const SparsityOptions& s, const std::string& tensor) {
  const auto it = producer.find(tensor);
  if (it == producer.end()) return {};
  const Node& dq = g.nodes[it->second];
  if (dq.op_type != "DequantizeLinear" || dq.inputs.empty()) return {};
  // The byte-wide stored types (is_quantized_storage's but the 4-bit ones, whose GEMMs the
  // predictor runs as weight-only): INT8, UINT8 and FP8.
  const TensorInfo* q = g.find(dq.inputs[0]);
  if (!q || !q->is_initializer || !q->fully_known() ||
      !(q->dtype == DType::i8 || q->dtype == DType::u8 || is_fp8(q->dtype)))
    return {};
  const TensorInfo* zp = dq.inputs.size() > 2 && !dq.inputs[2].empty() ? g.find(dq.inputs[2]) : nullptr;
  // The zero point's values: the graph's where it keeps them, else the model's (a per-channel
  // zero point too long for the graph to keep; one that is computed stays unknown).
  bool zero = !zp;
  if (zp && zp->int_value)
    zero = std::all_of(zp->int_value->begin(), zp->int_value->end(), [](int64_t v) { return v == 0; });
  else if (zp && zp->is_initializer && s.zero_values)
    zero = s.zero_values(zp->name).value_or(false);
  return {q->name, 0, zero};
}

// The weight of a forward GEMM that can run 2:4 sparse, or none: a linear layer's (2-D float
// initializer) or a convolution's (float initializer of rank 3 or more, one group, not
// transposed), its reduction a whole number of groups of four (a linear layer's input
// features, a convolution's input channels, along which NVIDIA's ASP and TensorRT prune).
// A weight is an initializer, or a value computed from constants alone (`folded`: the nodes the
// lowering folded; weight-stripped models build their weights with ConstantOfShape).
PrunableWeight prunable_weight(const Graph& g, const Kernel& k, const std::set<std::string>& folded,
                               const std::unordered_map<std::string, size_t>& producer, const SparsityOptions& s) {
  if (!layer_gemm(k) || k.node < 0 || static_cast<size_t>(k.node) >= g.nodes.size()) return {};
  const Node& n = g.nodes[static_cast<size_t>(k.node)];
  const bool conv = n.op_type == "Conv" && n.domain.empty();
  const size_t input = static_cast<size_t>(k.b_input);
  if (!conv && (n.op_type == "MatMul" || n.op_type == "Gemm") && k.gemm.k % 4 == 0) {
    if (std::string w = linear_weight(g, k); !w.empty()) return {w, reduction_axis(n, input)};
  }
  if (input >= n.inputs.size() || (conv && (n.attr_i("group", 1) != 1 || k.b_input != 1))) return {};
  if (!conv && (n.op_type != "MatMul" && n.op_type != "Gemm")) return {};
  const TensorInfo* w = g.find(n.inputs[input]);
  if (!w || !is_float(w->dtype) || !w->fully_known()) return {};
  PrunableWeight out{w->name, reduction_axis(n, input), true};
  if (!w->is_initializer && !folded.count(w->name)) {
    const PrunableWeight stored = dequantized_initializer(g, producer, s, w->name);
    if (stored.name.empty()) return {};
    out.name = stored.name;
    out.zero_is_zero = stored.zero_is_zero;
  }
  if (!conv) return w->shape.size() == 2 && k.gemm.k % 4 == 0 ? out : PrunableWeight{};
  return w->shape.size() >= 3 && w->shape[1].value % 4 == 0 ? out : PrunableWeight{};
}

// --sparsity auto: SparsityOptions::pruned_values asked once per weight, with what it found.
struct ValueScan {
  const SparsityOptions& s;
  std::map<std::string, std::optional<bool>> seen;
  int checked = 0, unread = 0;
  bool pruned(const std::string& w, int axis, bool readable = true) {
    auto it = seen.find(w);
    if (it == seen.end()) {
      it = seen.emplace(w, readable ? s.pruned_values(w, axis) : std::nullopt).first;
      ++(it->second ? checked : unread);
    }
    return it->second.value_or(false);
  }
  std::string none_pruned() const {
    return "--sparsity auto: no GEMM weight is pruned 2:4 (" + std::to_string(checked) + " checked" +
           (unread > 0 ? ", " + std::to_string(unread) +
                             " whose values are not in the file (external data, computed, or quantized with a zero "
                             "point not known to be 0), never read: --sparsity 2:4 says they are"
                       : std::string()) +
           "); the model runs dense";
  }
};

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
                                         const std::vector<FreeReason>& free_reason, std::vector<std::string>& warnings) {
  std::vector<std::string> names;
  if (!s.two_four) return names;
  const std::set<std::string> folded = folded_values(g, free_reason);
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const std::string& o : g.nodes[i].outputs)
      if (!o.empty()) producer.emplace(o, i);
  const bool from_values = static_cast<bool>(s.pruned_values);
  const bool all = !from_values && (s.targets.empty() || s.targets == "all");
  std::regex pattern;
  if (!all && !from_values) {
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
  ValueScan scan{s, {}, 0, 0};
  // SparseGPT's and Wanda's 2:4 recipes prune every linear layer of the blocks and keep the
  // output head dense.
  const auto pruned = [&](int node, const std::string& w, int axis, bool readable = true) {
    if (from_values) return scan.pruned(w, axis, readable);
    return all ? feeds[static_cast<size_t>(node)] != 0 : std::regex_search(w, pattern);
  };
  std::set<std::string> seen;
  for (Kernel& k : kernels) {
    if (k.lora_adapter) continue;
    const PrunableWeight w = prunable_weight(g, k, folded, producer, s);
    if (w.name.empty()) continue;
    // A GEMM over concatenated weights is pruned when every member is (one compressed matrix).
    std::vector<std::string> weights;
    int64_t columns = 0;
    if (!member_weight(g, k.node, columns).empty()) weights.push_back(w.name);
    bool every = weights.empty() || pruned(k.node, w.name, w.axis, w.zero_is_zero);
    for (int m : k.fused_nodes) {
      const std::string mw = member_weight(g, m, columns);
      if (mw.empty()) continue;
      weights.push_back(mw);
      every = every && pruned(m, mw, reduction_axis(g.nodes[static_cast<size_t>(m)], 1));
    }
    if (weights.empty()) {
      if (!pruned(k.node, w.name, w.axis, w.zero_is_zero)) continue;
      weights.push_back(w.name);
    } else if (!every) {
      continue;
    }
    k.sparse_2_4 = true;
    for (const std::string& name : weights)
      if (seen.insert(name).second) names.push_back(name);
  }
  if (names.empty() && from_values) {
    warnings.push_back(scan.none_pruned());
    return names;
  }
  if (names.empty())
    throw InputError(all ? std::string("--sparsity 2:4: the graph has no linear layer or convolution before its output "
                                       "head to prune (a GEMM of a float weight whose reduction is a multiple of 4)")
                         : "--sparsity targets=" + s.targets + ": no prunable layer's weight name matches");
  return names;
}

}  // namespace neusight::lowering_detail
