// graph_builder.cpp - node-by-node ONNX graph writing for the model builder.
#include "graph_builder.h"

namespace neusight::builder {

namespace {

// A tensor value's type: its element type and, for each dim, a value (>= 0) or the next name of
// `params` (a symbolic dim).
void set_tensor_type(onnx::ValueInfoProto* vi, int elem_type, const std::vector<int64_t>& dims,
                     const std::vector<std::string>& params) {
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* sh = tt->mutable_shape();
  size_t p = 0;
  for (int64_t d : dims) {
    auto* dp = sh->add_dim();
    if (d >= 0) dp->set_dim_value(d);
    else if (p < params.size()) dp->set_dim_param(params[p++]);
  }
}

}  // namespace

std::string GraphBuilder::input(const std::string& name, int elem_type, const std::vector<int64_t>& dims,
                                const std::vector<std::string>& params) {
  auto* vi = g_->add_input();
  vi->set_name(name);
  set_tensor_type(vi, elem_type, dims, params);
  return name;
}

void GraphBuilder::output(const std::string& name, int elem_type) {
  auto* vi = g_->add_output();
  vi->set_name(name);
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
}

void GraphBuilder::output(const std::string& name, int elem_type, const std::vector<int64_t>& dims,
                          const std::vector<std::string>& params) {
  auto* vi = g_->add_output();
  vi->set_name(name);
  set_tensor_type(vi, elem_type, dims, params);
}

std::string GraphBuilder::weight(const std::string& name, const std::vector<int64_t>& dims, int elem_type) {
  auto* t = g_->add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  uint64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= static_cast<uint64_t>(d);
  }
  const uint64_t width = elem_type == onnx::TensorProto::FLOAT16 || elem_type == onnx::TensorProto::BFLOAT16 ? 2
                         : elem_type == onnx::TensorProto::BOOL || elem_type == onnx::TensorProto::UINT8 ? 1
                         : elem_type == onnx::TensorProto::INT64 ? 8
                                                                  : 4;
  const uint64_t len = n * width;
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", weights_file_);
  add("offset", std::to_string(offset_));
  add("length", std::to_string(len));
  offset_ += (len + 4095) / 4096 * 4096;
  return name;
}

std::string GraphBuilder::ints(const std::string& name, const std::vector<int64_t>& values, bool scalar) {
  auto* t = g_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  if (!scalar) t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
  return name;
}

std::string GraphBuilder::scalar_f(const std::string& name, float v) {
  auto* t = g_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_float_data(v);
  return name;
}

std::vector<std::string> GraphBuilder::node_n(const std::string& op, const std::string& name,
                                              const std::vector<std::string>& inputs, int num_outputs) {
  last_ = g_->add_node();
  last_->set_op_type(op);
  last_->set_name(name);
  for (const auto& in : inputs) last_->add_input(in);
  std::vector<std::string> outs;
  for (int i = 0; i < num_outputs; ++i) {
    outs.push_back(num_outputs == 1 ? name + "_out" : name + "_out" + std::to_string(i));
    last_->add_output(outs.back());
  }
  return outs;
}

std::string GraphBuilder::node(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                               int num_outputs, const std::string& domain) {
  auto outs = node_n(op, name, inputs, num_outputs);
  if (!domain.empty()) last_->set_domain(domain);
  return outs.front();
}

void GraphBuilder::attr_i(const std::string& key, int64_t v) {
  auto* a = last_->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void GraphBuilder::attr_f(const std::string& key, float v) {
  auto* a = last_->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void GraphBuilder::attr_s(const std::string& key, const std::string& v) {
  auto* a = last_->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
void GraphBuilder::attr_ints(const std::string& key, const std::vector<int64_t>& v) {
  auto* a = last_->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INTS);
  for (auto x : v) a->add_ints(x);
}

}  // namespace neusight::builder
