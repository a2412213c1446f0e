// op_traits.h - the elementwise (pointwise) ops, described once for every stage.
//
// Takes: an op's (domain, op type) and the model's opset for that domain.
// Gives: its OpTraits: how its output shape follows its inputs (shape inference), the
// elementwise kernel it lowers to and its FLOPs per output element (lowering), and whether
// torch.compile-style fusion treats it as pointwise (lowering's fusion plan). An op with
// traits needs no entry in any other op list: shape inference gives it a shape rule when it
// has no special one, lowering registers its elementwise kernel, fusion asks `fusible`.
#pragma once

#include <cstdint>
#include <string>

#include "neusight/op_registry.h"

namespace neusight {

struct OpTraits {
  // Inputs the output's shape comes from: 1 = input 0's shape and type (further inputs are
  // scalars or per-channel parameters), 2 or 3 = the numpy broadcast of that many inputs,
  // kVariadic = the broadcast of all inputs.
  static constexpr int kVariadic = -1;
  int arity = 1;
  // Lowered as one elementwise kernel named `kernel` doing `flops_per_element` operations per
  // output element. False: the op is lowered by another rule (a copy, an identity).
  bool elementwise = true;
  const char* kernel = "";
  double flops_per_element = 1;
  // Pointwise for fusion: each output element reads the same position of each (broadcast)
  // input, so chains fuse into one kernel and into a following row-wise kernel's prologue.
  bool fusible = true;
};

// Every elementwise op, keyed by (domain, op type, since-opset) like the stages' rule tables.
const OpRegistry<OpTraits>& op_traits();
// The traits serving `op` of `domain` at `opset` (0: latest); nullptr for other ops.
const OpTraits* find_op_traits(const std::string& domain, const std::string& op, int64_t opset = 0);

}  // namespace neusight
