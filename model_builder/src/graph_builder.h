// graph_builder.h - a small helper for writing ONNX graphs node by node (model_builder only).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace neusight::builder {

class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* g, std::string weights_file)
      : g_(g), weights_file_(std::move(weights_file)) {}

  // Symbolic/concrete input: dims >= 0 are values, names in `params` where dims < 0.
  std::string input(const std::string& name, int elem_type, const std::vector<int64_t>& dims,
                    const std::vector<std::string>& params);
  void output(const std::string& name, int elem_type);
  // An output with its shape (dims as for `input`).
  void output(const std::string& name, int elem_type, const std::vector<int64_t>& dims,
              const std::vector<std::string>& params);

  // Weight stored as an external-data stub (never materialised): offsets are laid out as
  // if one contiguous weights file existed next to the model.
  std::string weight(const std::string& name, const std::vector<int64_t>& dims, int elem_type = 1);
  // Small inline constants.
  std::string ints(const std::string& name, const std::vector<int64_t>& values, bool scalar = false);
  std::string scalar_f(const std::string& name, float v);

  // Adds a node; returns its first output name. Outputs get unique names from `name`.
  std::string node(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                   int num_outputs = 1, const std::string& domain = "");
  std::vector<std::string> node_n(const std::string& op, const std::string& name,
                                  const std::vector<std::string>& inputs, int num_outputs);

  // Attributes on the node added last.
  void attr_i(const std::string& key, int64_t v);
  void attr_f(const std::string& key, float v);
  void attr_s(const std::string& key, const std::string& v);
  void attr_ints(const std::string& key, const std::vector<int64_t>& v);

  uint64_t weight_bytes() const { return offset_; }
  onnx::NodeProto* last() { return last_; }

 private:
  onnx::GraphProto* g_;
  std::string weights_file_;
  uint64_t offset_ = 0;
  onnx::NodeProto* last_ = nullptr;
};

}  // namespace neusight::builder
