// rules.h - internal to shape_inference: the context a shape rule sees, shared helpers, and
// the per-family registration functions that fill the one op-type -> rule table.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "neusight/op_registry.h"
#include "neusight/shape_inference.h"

namespace neusight::shape_rules {

constexpr int64_t kMaxDim = int64_t(1) << 62;
// Highest rank a shape may have (a shape tensor of more elements is refused, not allocated).
constexpr int64_t kMaxRank = 1024;
// Largest integer tensor whose values are propagated (shape tensors are tiny).
constexpr size_t kMaxValues = 4096;

using Hints = std::map<std::string, TensorInfo>;

struct Ctx {
  Graph& g;
  const Model& model;
  const Node& n;
  ShapeResult& result;
  const Hints* hints = nullptr;
  int depth = 0;  // subgraph nesting
  // Node evaluations left for unrolling Loop / SequenceMap bodies (shared by the whole
  // inference so that huge graphs stay fast); nullptr: no unrolling.
  int64_t* unroll_budget = nullptr;
  // Inferred bodies (attribute name -> attribute with the inferred graph) that the driver
  // stores on the node once its rule returns; nullptr: the bodies are not kept.
  std::vector<std::pair<std::string, Attribute>>* bodies = nullptr;

  const TensorInfo* in(size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i].empty()) return nullptr;
    return g.find(n.inputs[i]);
  }
  bool has_in(size_t i) const { return in(i) != nullptr; }
  // A node with fewer outputs than its op defines is bad input, not a crash.
  TensorInfo& out(size_t i) {
    if (i >= n.outputs.size()) throw InputError(where() + ": missing output " + std::to_string(i));
    return g.tensor(n.outputs[i]);
  }
  size_t num_out() const { return n.outputs.size(); }
  std::string where() const { return "node '" + n.name + "' (" + n.op_type + ")"; }
  const std::vector<int64_t>* value(size_t i) const {
    const TensorInfo* t = in(i);
    return t && t->int_value ? &*t->int_value : nullptr;
  }
  int64_t opset() const { return model.opset(n.domain); }
};

using Rule = std::function<void(Ctx&)>;
// Keyed by (domain, op, opset) (op_registry.h); `t["Op"]` is ai.onnx (and any domain
// without a more specific rule), `t["domain:Op"]` another domain's.
using RuleTable = OpRegistry<Rule>;

// Helpers (infer.cpp).
int64_t checked_mul(int64_t a, int64_t b, const std::string& where);
void set_out(Ctx& c, size_t i, DType dt, const Shape& s);
void set_dtype(Ctx& c, size_t i, DType dt);
Shape dims_of(const std::vector<int64_t>& v);
// `rank` unknown dims (the output of a shape given only by its length); InputError above kMaxRank.
Shape unknown_dims(int64_t rank, const Ctx& c);
int64_t norm_axis(int64_t axis, int64_t rank, const Ctx& c);
// "[2,?,seq,64]": a shape for error messages (symbolic dims by name, unknown ones as ?).
std::string shape_text(const Shape& s);
Shape broadcast(const Shape& a, const Shape& b, const Ctx& c);
void rule_unary(Ctx& c);
void rule_broadcast(Ctx& c, DType out_dtype, std::function<int64_t(int64_t, int64_t)> op);
void rule_matmul(Ctx& c);
// Infers a subgraph (If/Loop/Scan body) in place; outer-scope tensors are visible.
void infer_subgraph(Ctx& c, Graph& body);
// Keeps `body` (inferred) as the node's attribute `key`, so that later stages see its shapes.
// `trips`: the body per iteration when it was inferred iteration by iteration (Loop /
// SequenceMap unrolled); graphs[0] becomes what every iteration agrees on.
// True when a and b agree on kind, dtype and shape (and element shapes); names and values aside.
bool same_info(const TensorInfo& a, const TensorInfo& b);
void keep_body(Ctx& c, const std::string& key, Graph body, std::vector<Graph> trips = {});

// Value helpers (rules_sequence.cpp).
// Numeric values of a tensor (float_value, else int_value), nullopt when unknown.
std::optional<std::vector<double>> numbers(const TensorInfo* t);
// Stores computed numeric values on `t` by its dtype (float_value and, when integral,
// int_value for float types; int_value for integer and bool types). Only small tensors.
void set_numbers(TensorInfo& t, const std::vector<double>& v);
// Everything known about `v` (kind, elements, values), written to output i under its name.
void set_value(Ctx& c, size_t i, const TensorInfo& v);
// `t` as a sequence / optional element (no name, no initializer flags).
TensorInfo as_element(const TensorInfo& t);
// What two possible values agree on (dims that differ become unknown, values dropped).
TensorInfo join(const TensorInfo& a, const TensorInfo& b);
// One entry every element of sequence `s` matches (empty TensorInfo when nothing is known).
TensorInfo common_element(const TensorInfo& s);
// Sets body input k to everything known about `v` (values included, for unrolling).
void set_body_value(Graph& body, size_t k, const TensorInfo& v);

// Registration per op family.
void add_core_rules(RuleTable& t);          // infer.cpp
void add_standard_rules(RuleTable& t);      // rules_standard.cpp
void add_contrib_rules(RuleTable& t);       // rules_contrib.cpp
void add_control_flow_rules(RuleTable& t);  // rules_control_flow.cpp
void add_sequence_rules(RuleTable& t);      // rules_sequence.cpp
void add_data_rules(RuleTable& t);          // rules_data.cpp
// infer.cpp: every elementwise op of op_traits.h without a rule of its own (registered last):
// input 0's shape and type, or the broadcast of the inputs.
void add_elementwise_rules(RuleTable& t);

}  // namespace neusight::shape_rules
