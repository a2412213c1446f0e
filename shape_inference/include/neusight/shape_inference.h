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
  int64_t batch = -1;                    // --batch: first symbolic input dim
  int64_t seq = -1;                      // --seq: second symbolic input dim
};

struct ShapeResult {
  std::vector<std::string> warnings;
  std::vector<std::string> unknown_ops;  // op types with no shape rule (still inferred as far as possible)
};

// Binds dims on the graph inputs. Throws InputError listing every symbolic input dim that
// stays unbound, and for negative or overflowing values.
void bind_dims(Graph& graph, const DimBindings& bindings);

// Infers shapes in place (graph must be topologically sorted, as the frontend leaves it).
// `hints` (optional, e.g. onnx_shape_hints() of the frontend) fill what the project's own
// rules leave unknown; they never override a rule. Symbolic hint dims take the values bound
// on the graph inputs. If/Loop/Scan/SequenceMap bodies are inferred too and kept on their
// node (Attribute::graphs[0], and Attribute::trips per iteration when a loop was unrolled; see
// lowering/README.md, "Control flow"), in `graph` only: the Model's own bodies are not written.
ShapeResult infer_shapes(Graph& graph, const Model& model,
                         const std::map<std::string, TensorInfo>* hints = nullptr);

}  // namespace neusight
