// positions.cpp - the positions an ONNX decoder's learned position table holds (positions.h).
#include "positions.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "footprint.h"

namespace neusight {
namespace {

// Every node of the decoder (an optimum merged decoder's are in If branches), by the values it
// writes, with the graph that holds it (for its own tensors; the weights are the outer graph's).
struct Producers {
  const Graph& top;
  std::unordered_map<std::string, std::pair<const Graph*, const Node*>> by_output;

  explicit Producers(const Graph& g) : top(g) {
    each_node(g, [&](const Graph& sg, const Node& n) {
      for (const auto& o : n.outputs)
        if (!o.empty()) by_output.emplace(o, std::make_pair(&sg, &n));
    });
  }
  const Node* of(const std::string& value) const {
    const auto it = by_output.find(value);
    return it == by_output.end() ? nullptr : it->second.second;
  }
  const TensorInfo* find(const std::string& value) const {
    const auto it = by_output.find(value);
    const TensorInfo* t = it != by_output.end() ? it->second.first->find(value) : nullptr;
    return t ? t : top.find(value);
  }
  // A 2-D initializer with both dims known: a table an embedding Gather reads.
  const TensorInfo* table(const std::string& value) const {
    const TensorInfo* t = top.find(value);
    const bool ok = t && t->is_initializer && t->has_shape && t->shape.size() == 2 && t->shape[0].known() &&
                    t->shape[1].known() && t->shape[0].value > 0;
    return ok ? t : nullptr;
  }
  // Whether `value` is computed from the values of the graph input `input` (not its shape
  // alone: a step's positions are counted from its tokens' shape).
  bool depends_on(const std::string& value, const std::string& input) const {
    std::vector<std::string> todo{value};
    std::unordered_set<std::string> seen;
    while (!todo.empty()) {
      const std::string v = todo.back();
      todo.pop_back();
      if (v == input) return true;
      if (v.empty() || !seen.insert(v).second) continue;
      const Node* n = of(v);
      if (n && n->op_type != "Shape" && n->op_type != "Size") todo.insert(todo.end(), n->inputs.begin(), n->inputs.end());
    }
    return false;
  }
  // A scalar integer constant's value (an initializer or a Constant node's output).
  bool scalar(const std::string& value, int64_t& out) const {
    const TensorInfo* t = find(value);
    if (!t || !t->int_value || t->int_value->size() != 1) return false;
    out = t->int_value->front();
    return true;
  }
};

// Ops a position index passes through unchanged.
bool passes_index(const std::string& op) {
  static const std::unordered_set<std::string> ops{"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape",
                                                   "Flatten", "Expand", "Slice", "Tile"};
  return ops.count(op) > 0;
}

// The offset of a Gather's indices from 0-based positions: walking back through ops that keep
// an index, constant Adds and Subs, and a mask's Mul, to the `position_ids` input or a Range
// (0-based) or a CumSum of the mask (1-based). False when the walk meets anything else.
bool position_offset(const Producers& p, std::string value, int64_t& offset) {
  offset = 0;
  for (int steps = 0; steps < 64; ++steps) {
    if (value == "position_ids") return true;
    const Node* n = p.of(value);
    if (!n || n->inputs.empty()) return false;
    if (n->op_type == "Range") return true;
    if (n->op_type == "CumSum") {
      offset += 1;
      return true;
    }
    if (passes_index(n->op_type)) {
      value = n->inputs[0];
      continue;
    }
    if (n->inputs.size() != 2) return false;
    int64_t c = 0;
    if (n->op_type == "Add" || n->op_type == "Sub") {
      const int sign = n->op_type == "Sub" ? -1 : 1;
      if (p.scalar(n->inputs[1], c)) {
        offset += sign * c;
        value = n->inputs[0];
      } else if (n->op_type == "Add" && p.scalar(n->inputs[0], c)) {
        offset += c;
        value = n->inputs[1];
      } else {
        return false;
      }
      continue;
    }
    if (n->op_type == "Mul") {  // positions times the mask (0 at padding): the positions' side
      const bool mask0 = n->inputs[0] == "attention_mask", mask1 = n->inputs[1] == "attention_mask";
      if (mask0 == mask1) return false;
      value = n->inputs[mask0 ? 1 : 0];
      continue;
    }
    return false;
  }
  return false;
}

// The output of a Gather from a table, through Casts and constant scalings (Gemma's sqrt(h)),
// or null.
const Node* embedding_gather(const Producers& p, std::string value) {
  for (int steps = 0; steps < 8; ++steps) {
    const Node* n = p.of(value);
    if (!n || n->inputs.empty()) return nullptr;
    if (n->op_type == "Gather") return n->inputs.size() == 2 && p.table(n->inputs[0]) ? n : nullptr;
    if (n->op_type == "Cast" || n->op_type == "Identity") {
      value = n->inputs[0];
    } else if (n->op_type == "Mul" && n->inputs.size() == 2) {
      const TensorInfo* a = p.find(n->inputs[1]);
      value = n->inputs[a && (a->is_initializer || a->float_value || a->int_value) ? 0 : 1];
    } else {
      return nullptr;
    }
  }
  return nullptr;
}

}  // namespace

int64_t learned_positions(const Graph& g) {
  const Producers p(g);
  int64_t found = 0;
  const auto take = [&](int64_t positions) {
    if (positions > 0) found = found > 0 ? std::min(found, positions) : positions;
  };
  each_node(g, [&](const Graph&, const Node& n) {
    if (n.op_type == "EmbedLayerNormalization" && n.inputs.size() > 3) {
      if (const TensorInfo* t = p.table(n.inputs[3])) take(t->shape[0].value);
      return;
    }
    if (n.op_type != "Add" || n.inputs.size() != 2) return;
    for (int side = 0; side < 2; ++side) {
      const Node* token = embedding_gather(p, n.inputs[side]);
      const Node* pos = embedding_gather(p, n.inputs[1 - side]);
      if (!token || !pos || token == pos || !p.depends_on(token->inputs[1], "input_ids") ||
          p.depends_on(pos->inputs[1], "input_ids"))
        continue;
      const TensorInfo* tt = p.table(token->inputs[0]);
      const TensorInfo* pt = p.table(pos->inputs[0]);
      int64_t offset = 0;
      if (tt->shape[1].value != pt->shape[1].value || !position_offset(p, pos->inputs[1], offset)) continue;
      take(pt->shape[0].value - offset);
    }
  });
  return found;
}

}  // namespace neusight
