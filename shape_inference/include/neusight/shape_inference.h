// shape_inference.h - bind symbolic dims and infer every tensor's shape and dtype.
//
// Takes: a Model from the frontend and the user's dim bindings.
// Gives: the same graph with every TensorInfo filled in as far as it can be inferred, plus
// a list of warnings (unknown ops, dims that differ only by name). Shape *values* are
// propagated through shape subgraphs (Shape, Gather, Concat, Reshape ...) so that
// Reshape-heavy exports resolve to concrete shapes once batch and sequence are bound.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "neusight/graph.h"

namespace neusight {

struct DimBindings {
  std::map<std::string, int64_t> named;  // --dim NAME=VALUE
  // --batch: the first symbolic name among the input dims, and every unnamed (or -1) first
  // dim of an input; --seq: the second symbolic name, and every unnamed second dim.
  int64_t batch = -1;
  int64_t seq = -1;
  // --shape NAME=1x3x224x224: an input's whole shape, fixed dims included. A symbolic dim it
  // sets binds that name on the other inputs too.
  std::map<std::string, std::vector<int64_t>> shapes;
  // --value NAME=V: the value of a scalar graph input (an If condition, a Loop trip count),
  // known at compile time from then on.
  std::map<std::string, double> values;
};

// A warning of the analysis: what it is about and the line printed for it.
enum class WarningCode {
  binding,              // a flag that binds nothing, a --shape that changes a fixed dim
  dims_differ_by_name,  // input dims that differ only by name
  no_shape_rule,        // op types without a shape rule (also counted in unknown_ops)
  branch_infeasible,    // an If branch whose shapes are impossible for these inputs (the other is taken)
};
struct Warning {
  WarningCode code;
  std::string message;
};

struct ShapeResult {
  std::vector<Warning> warnings;
  std::vector<std::string> unknown_ops;  // op types with no shape rule (still inferred as far as possible)
};

// The batch and sequence length bound on the inputs (bind_dims): --batch / --seq where they
// bound a dim, else the value --dim or --shape gave a symbolic dim named like one ("batch",
// "batch_size", "sequence", "seq_len", ...); 0 where none is known.
struct BoundDims {
  int64_t batch = 0, seq = 0;
};

// Binds dims (and --value values) on the graph inputs. Returns warnings: a flag that binds
// nothing, a --shape that changes a fixed dim. Throws InputError naming the input and axis
// of every input dim that stays unbound (with the --shape line that binds them), for
// negative values, a --shape or --value naming no graph input, and a --shape of the wrong rank.
// `bound` (optional) receives the batch and sequence length bound.
std::vector<std::string> bind_dims(Graph& graph, const DimBindings& bindings, BoundDims* bound = nullptr);

// Infers shapes in place (graph must be topologically sorted, as the frontend leaves it).
// `hints` (optional, e.g. onnx_shape_hints() of the frontend) fill what the project's own
// rules leave unknown; they never override a rule. Symbolic hint dims take the values bound
// on the graph inputs. If/Loop/Scan/SequenceMap bodies are inferred too and kept on their
// node (Attribute::graphs[0], and Attribute::trips per iteration when a loop was unrolled; see
// lowering/README.md, "Control flow"), in `graph` only: the Model's own bodies are not written.
ShapeResult infer_shapes(Graph& graph, const Model& model,
                         const std::map<std::string, TensorInfo>* hints = nullptr);

// The (domain, op type) pairs with a shape rule ("" = ai.onnx), sorted.
std::vector<std::pair<std::string, std::string>> shape_rule_ops();

}  // namespace neusight
