// parameters.h - which inputs of an op hold its learned weights, and which tensors a graph
// holds as values: described once for every stage that asks (training's parameters, tensor
// parallelism's split weights, the pipeline's and activation checkpointing's data path,
// multi-GPU weight placement).
//
// Takes: a Node, or a Graph.
// Gives: parameter_inputs(node): the input positions an op reads its learned weights at (a
// GEMM's or convolution's weight and bias, a normalization's scale and bias, an embedding's
// table, a recurrent layer's W, R and B, PRelu's slope, contrib attention's and skip
// normalizations' weights); held_values(graph): its initializers and its Constant nodes'
// outputs, the values exporters hold weights in (Paddle2ONNX and some tf2onnx graphs hold
// every weight in a Constant node, as onnxruntime folds them into initializers).
// reads_weight(...): a node reads a held float value of more than one element at one of its
// parameter inputs.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "neusight/graph.h"

namespace neusight {

// Input positions of `node`'s learned weights (any domain; empty for an op with none). An
// input there may still be an activation (attention's MatMul of two activations): the callers
// ask whether the graph holds it as a value (held_values).
const std::vector<int>& parameter_inputs(const Node& node);
bool is_parameter_input(const Node& node, size_t input);

// The names of the tensors `graph` holds as values: initializers (those of its list, and any
// tensor flagged one: an outer scope's in a control-flow body) and Constant nodes' outputs.
std::unordered_set<std::string> held_values(const Graph& graph);

// Input `input` of `node` is one of its parameter inputs and holds a float value of more than
// one element that the graph holds (`held`: held_values(graph)).
bool reads_weight(const Graph& graph, const std::unordered_set<std::string>& held, const Node& node, size_t input);

}  // namespace neusight
