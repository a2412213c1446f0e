// parameters.cpp - the ops' parameter inputs (parameters.h).
#include "neusight/parameters.h"

#include <map>

namespace neusight {

const std::vector<int>& parameter_inputs(const Node& n) {
  static const std::vector<int> none;
  static const std::map<std::string, std::vector<int>> table = {
      // GEMMs and convolutions: weight and bias.
      {"MatMul", {1}},
      {"Gemm", {1, 2}},
      {"Conv", {1, 2}},
      {"ConvTranspose", {1, 2}},
      {"FusedMatMul", {1}},  // com.microsoft
      // Normalizations: scale and bias (not BatchNormalization's running statistics).
      {"BatchNormalization", {1, 2}},
      {"LayerNormalization", {1, 2}},
      {"InstanceNormalization", {1, 2}},
      {"GroupNormalization", {1, 2}},
      {"RMSNormalization", {1}},
      {"SimplifiedLayerNormalization", {1}},
      {"SkipLayerNormalization", {2, 3, 4}},  // com.microsoft: input, skip, gamma, beta, bias
      {"SkipSimplifiedLayerNormalization", {2, 3}},
      {"EmbedLayerNormalization", {2, 3, 4, 5, 6}},  // word, position, segment tables, gamma, beta
      // An embedding's table, PRelu's slope.
      {"Gather", {0}},
      {"PRelu", {1}},
      // Recurrent layers: W, R, B.
      {"LSTM", {1, 2, 3}},
      {"GRU", {1, 2, 3}},
      {"RNN", {1, 2, 3}},
      // com.microsoft Attention: the packed QKV weight and its bias.
      {"Attention", {1, 2}},
  };
  const auto it = table.find(n.op_type);
  return it == table.end() ? none : it->second;
}

bool is_parameter_input(const Node& n, size_t input) {
  for (int i : parameter_inputs(n))
    if (static_cast<size_t>(i) == input) return true;
  return false;
}

std::unordered_set<std::string> held_values(const Graph& g) {
  // A control-flow body given its outer scope's tensors sees the outer initializers by their
  // flag, not in its own list.
  std::unordered_set<std::string> held(g.initializers.begin(), g.initializers.end());
  for (const auto& [name, t] : g.tensors)
    if (t.is_initializer) held.insert(name);
  for (const Node& n : g.nodes)
    if (n.op_type == "Constant" && n.domain.empty())
      for (const auto& out : n.outputs)
        if (!out.empty()) held.insert(out);
  return held;
}

bool reads_weight(const Graph& g, const std::unordered_set<std::string>& held, const Node& n, size_t input) {
  if (input >= n.inputs.size() || n.inputs[input].empty() || !is_parameter_input(n, input) || !held.count(n.inputs[input]))
    return false;
  const TensorInfo* t = g.find(n.inputs[input]);
  return t && is_float(t->dtype) && t->num_elements() != 1 && t->num_elements() != 0;
}

}  // namespace neusight
