// merge.cpp - two models as one graph (an encoder-decoder export's encoder feeding its decoder).
#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>

#include "neusight/onnx_frontend.h"
#include "onnx_proto.h"

namespace neusight {
namespace {

// Every value name a graph (and its subgraphs) defines or reads.
void collect_names(const onnx::GraphProto& g, std::set<std::string>& names) {
  for (const auto& v : g.input()) names.insert(v.name());
  for (const auto& v : g.output()) names.insert(v.name());
  for (const auto& v : g.value_info()) names.insert(v.name());
  for (const auto& t : g.initializer()) names.insert(t.name());
  for (const auto& n : g.node()) {
    for (const auto& s : n.input()) names.insert(s);
    for (const auto& s : n.output()) names.insert(s);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_names(a.g(), names);
      for (const auto& sg : a.graphs()) collect_names(sg, names);
    }
  }
}

void collect_node_names(const onnx::GraphProto& g, std::set<std::string>& names) {
  for (const auto& n : g.node()) names.insert(n.name());
}

// Renames every value of `g` (and of its subgraphs) through `rename`.
void rename_values(onnx::GraphProto& g, const std::function<std::string(const std::string&)>& rename) {
  for (auto& v : *g.mutable_input()) v.set_name(rename(v.name()));
  for (auto& v : *g.mutable_output()) v.set_name(rename(v.name()));
  for (auto& v : *g.mutable_value_info()) v.set_name(rename(v.name()));
  for (auto& t : *g.mutable_initializer()) t.set_name(rename(t.name()));
  for (auto& n : *g.mutable_node()) {
    for (auto& s : *n.mutable_input()) s = rename(s);
    for (auto& s : *n.mutable_output()) s = rename(s);
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) rename_values(*a.mutable_g(), rename);
      for (auto& sg : *a.mutable_graphs()) rename_values(sg, rename);
    }
  }
}

}  // namespace

LoadedModel merge_models(const LoadedModel& first, const LoadedModel& second,
                         const std::map<std::string, std::string>& connect, const std::string& prefix,
                         const std::string& what) {
  if (!first.proto || !second.proto) throw InputError(what + ": a model built in memory cannot be merged");
  const onnx::ModelProto& a = first.proto->model;
  onnx::ModelProto merged = second.proto->model;
  // The default domain's opset must agree (one graph runs under one set of operator versions);
  // other domains take the newer version.
  auto opset = [](const onnx::ModelProto& m, const std::string& domain) -> int64_t {
    for (const auto& o : m.opset_import())
      if (o.domain() == domain || (domain.empty() && o.domain() == "ai.onnx")) return o.version();
    return -1;
  };
  if (opset(a, "") != opset(merged, ""))
    throw InputError(what + ": the two models import different ONNX opsets (" + std::to_string(opset(a, "")) +
                     " and " + std::to_string(opset(merged, "")) + "); export them together");
  for (const auto& o : a.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") continue;
    bool found = false;
    for (auto& m : *merged.mutable_opset_import())
      if (m.domain() == o.domain()) {
        m.set_version(std::max(m.version(), o.version()));
        found = true;
      }
    if (!found) *merged.add_opset_import() = o;
  }
  for (const auto& f : a.functions()) {
    for (const auto& g : merged.functions())
      if (g.name() == f.name() && g.domain() == f.domain())
        throw InputError(what + ": both models define the function '" + f.name() + "'");
    *merged.add_functions() = f;
  }

  // The first model's names: a connected tensor takes the name of the input it feeds; any other
  // that the second model also uses takes the prefix.
  std::set<std::string> taken, second_nodes;
  collect_names(merged.graph(), taken);
  collect_node_names(merged.graph(), second_nodes);
  std::unordered_map<std::string, std::string> to;
  for (const auto& [input, tensor] : connect) to[tensor] = input;
  auto rename = [&](const std::string& n) -> std::string {
    if (n.empty()) return n;
    if (auto it = to.find(n); it != to.end()) return it->second;
    return taken.count(n) ? prefix + n : n;
  };
  onnx::GraphProto g = a.graph();
  std::set<std::string> first_inputs, first_outputs;
  for (const auto& v : g.input()) first_inputs.insert(v.name());
  for (const auto& v : g.output()) first_outputs.insert(v.name());
  for (const auto& [input, tensor] : connect)
    if (!first_inputs.count(tensor) && !first_outputs.count(tensor))
      throw InputError(what + ": the first model has no input or output '" + tensor + "' to feed '" + input + "'");
  rename_values(g, rename);
  for (auto& n : *g.mutable_node())
    if (second_nodes.count(n.name())) n.set_name(prefix + n.name());

  // The second model's inputs fed by the first model's outputs disappear; those that are the
  // first model's inputs (the same mask) are declared once, by the first.
  std::set<std::string> fed;
  for (const auto& [input, tensor] : connect) fed.insert(input);
  onnx::GraphProto* out = merged.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  for (const auto& v : g.input()) *inputs.Add() = v;
  for (const auto& v : out->input())
    if (!fed.count(v.name())) *inputs.Add() = v;
  out->mutable_input()->Swap(&inputs);
  // The first model's nodes run first; its weights and shapes join the second's.
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (const auto& n : g.node()) *nodes.Add() = n;
  for (const auto& n : out->node()) *nodes.Add() = n;
  out->mutable_node()->Swap(&nodes);
  for (const auto& t : g.initializer()) *out->add_initializer() = t;
  for (const auto& t : g.sparse_initializer()) *out->add_sparse_initializer() = t;
  for (const auto& v : g.value_info()) *out->add_value_info() = v;
  return load_model_from_proto(std::move(merged), what);
}

}  // namespace neusight
