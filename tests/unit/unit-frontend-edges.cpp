// unit-frontend-edges.cpp - dangling edges, nodes out of order, ONNX hints never override rules.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "onnx_proto.h"
#include "neusight/shape_inference.h"

using namespace neusight;

namespace {

// An opset-17 model whose graph has one FP32 input X (no shape yet) and nothing else.
onnx::ModelProto model_with_input_x() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* x = m.mutable_graph()->add_input();
  x->set_name("X");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  return m;
}

// model_with_input_x() holding one initializer `name` of a byte-wide type with the given
// values: as raw_data, or one value in each int32_data (INT8 sign-extended, as ONNX stores it).
LoadedModel model_with_byte_initializer(const std::string& name, int data_type, const std::vector<int64_t>& dims,
                                        const std::string& bytes, bool raw) {
  onnx::ModelProto m = model_with_input_x();
  auto* g = m.mutable_graph();
  g->add_output()->set_name("X");
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(data_type);
  for (int64_t d : dims) t->add_dims(d);
  if (raw) {
    t->set_raw_data(bytes);
  } else {
    for (char c : bytes)
      t->add_int32_data(data_type == onnx::TensorProto::INT8 ? int32_t(int8_t(c)) : int32_t(uint8_t(c)));
  }
  return load_model_from_proto(m, "m");
}

onnx::ModelProto two_node_model(bool reversed, bool dangling) {
  onnx::ModelProto m = model_with_input_x();
  auto* g = m.mutable_graph();
  auto* tt = g->mutable_input(0)->mutable_type()->mutable_tensor_type();
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  tt->mutable_shape()->add_dim()->set_dim_value(8);
  g->add_output()->set_name("Z");
  onnx::NodeProto a, b;
  a.set_op_type("Relu");
  a.set_name("a");
  a.add_input(dangling ? "nobody" : "X");
  a.add_output("Y");
  b.set_op_type("Sigmoid");
  b.set_name("b");
  b.add_input("Y");
  b.add_output("Z");
  *g->add_node() = reversed ? b : a;
  *g->add_node() = reversed ? a : b;
  return m;
}

}  // namespace

TEST_CASE("frontend: a name no node produces is an input error naming it") {
  CHECK_THROWS_WITH_AS(load_model_from_proto(two_node_model(false, true), "m"), doctest::Contains("nobody"), InputError);
}

TEST_CASE("frontend: nodes out of topological order are sorted, shapes resolve") {
  LoadedModel lm = load_model_from_proto(two_node_model(true, false), "m");
  REQUIRE(lm.model.graph.nodes.size() == 2);
  CHECK(lm.model.graph.nodes[0].name == "a");
  Graph g = lm.model.graph;
  DimBindings b;
  b.batch = 3;
  bind_dims(g, b);
  const auto hints = onnx_shape_hints(lm, g);
  CHECK(hints.count("Z") == 1);
  infer_shapes(g, lm.model, &hints);
  const TensorInfo* z = g.find("Z");
  REQUIRE(z);
  REQUIRE(z->fully_known());
  CHECK(z->shape[0].value == 3);
  CHECK(z->shape[1].value == 8);
}

TEST_CASE("shape inference: hints fill only what rules leave unknown") {
  LoadedModel lm = load_model_from_proto(two_node_model(false, false), "m");
  Graph g = lm.model.graph;
  DimBindings b;
  b.batch = 3;
  bind_dims(g, b);
  std::map<std::string, TensorInfo> hints;
  TensorInfo wrong;
  wrong.name = "Y";
  wrong.has_shape = true;
  wrong.shape = {Dim::of(99), Dim::of(99)};
  hints["Y"] = wrong;
  infer_shapes(g, lm.model, &hints);
  CHECK(g.find("Y")->shape[0].value == 3);  // the rule wins over a wrong hint
}

namespace {

// X + H -> Z, node "a": the second model of the merge below, whose X, Z and "a" are also names
// of two_node_model.
onnx::ModelProto add_model(int opset) {
  onnx::ModelProto m = two_node_model(false, false);
  m.mutable_opset_import(0)->set_version(opset);
  auto* g = m.mutable_graph();
  *g->add_input() = g->input(0);
  g->mutable_input(1)->set_name("H");
  g->clear_node();
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->set_name("a");
  n->add_input("X");
  n->add_input("H");
  n->add_output("Z");
  return m;
}

}  // namespace

TEST_CASE("frontend: merge_models feeds the second model from the first, renaming the first's clashes") {
  const LoadedModel first = load_model_from_proto(two_node_model(false, false), "first");
  const LoadedModel merged = merge_models(first, load_model_from_proto(add_model(17), "second"), {{"H", "Z"}}, "enc/", "both");
  const Graph& g = merged.model.graph;
  CHECK(g.inputs == std::vector<std::string>{"enc/X", "X"});
  CHECK(g.outputs == std::vector<std::string>{"Z"});
  REQUIRE(g.nodes.size() == 3);
  CHECK(g.nodes[0].name == "enc/a");
  CHECK(g.nodes[0].inputs[0] == "enc/X");
  CHECK(g.nodes[1].outputs[0] == "H");
  CHECK(g.nodes[2].name == "a");
  Graph bound = g;
  DimBindings b;
  b.batch = 3;
  bind_dims(bound, b);
  infer_shapes(bound, merged.model);
  const TensorInfo* z = bound.find("Z");
  REQUIRE(z);
  REQUIRE(z->fully_known());
  CHECK(z->shape[0].value == 3);
  // Different default opsets, a connection to a name the first model does not expose.
  CHECK_THROWS_WITH_AS(merge_models(first, load_model_from_proto(add_model(16), "s"), {{"H", "Z"}}, "enc/", "m"),
                       doctest::Contains("opsets"), InputError);
  CHECK_THROWS_WITH_AS(merge_models(first, load_model_from_proto(add_model(17), "s"), {{"H", "Y"}}, "enc/", "m"),
                       doctest::Contains("no input or output 'Y'"), InputError);
}

TEST_CASE("frontend: initializer_pruned_2_4 reads float and byte-wide quantized weights along the axis") {
  // A [8, 4] weight: rows 0-1 of every four rows zero (pruned along axis 0, not along axis 1).
  auto model = [](int data_type, bool raw, uint8_t zero_byte) {
    std::string bytes;
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 4; ++c) bytes.push_back(static_cast<char>(r % 4 < 2 ? zero_byte : uint8_t(0x11 + r + c)));
    return model_with_byte_initializer("w", data_type, {8, 4}, bytes, raw);
  };
  const int kFloat8E4M3FN = 17, kFloat8E4M3FNUZ = 18;
  for (bool raw : {true, false}) {
    CAPTURE(raw);
    const LoadedModel i8 = model(onnx::TensorProto::INT8, raw, 0);
    CHECK(initializer_pruned_2_4(i8, "w", 0) == std::optional<bool>(true));
    CHECK(initializer_pruned_2_4(i8, "w", 1) == std::optional<bool>(false));
    CHECK(initializer_pruned_2_4(model(onnx::TensorProto::UINT8, raw, 0), "w", 0) == std::optional<bool>(true));
    // FP8 E4M3FN: -0 (0x80) is a zero; E4M3FNUZ spends 0x80 on NaN.
    CHECK(initializer_pruned_2_4(model(kFloat8E4M3FN, raw, 0x80), "w", 0) == std::optional<bool>(true));
    CHECK(initializer_pruned_2_4(model(kFloat8E4M3FNUZ, raw, 0x80), "w", 0) == std::optional<bool>(false));
    CHECK(initializer_pruned_2_4(model(kFloat8E4M3FNUZ, raw, 0), "w", 0) == std::optional<bool>(true));
  }
  // Another name, an axis out of range, a type it does not read: no answer.
  const LoadedModel i8 = model(onnx::TensorProto::INT8, true, 0);
  CHECK(!initializer_pruned_2_4(i8, "v", 0));
  CHECK(!initializer_pruned_2_4(i8, "w", 2));
  CHECK(!initializer_pruned_2_4(model(onnx::TensorProto::INT16, false, 0), "w", 0));
}

TEST_CASE("frontend: initializer_all_zero reads a per-channel zero point of any length") {
  // A zero point of 5,000 channels (longer than the graph keeps values of), raw or int32_data.
  auto model = [](int data_type, bool raw, int nonzero_at) {
    std::string bytes(5000, '\0');
    if (nonzero_at >= 0) bytes[static_cast<size_t>(nonzero_at)] = 3;
    return model_with_byte_initializer("z", data_type, {5000}, bytes, raw);
  };
  const int kFloat8E4M3FN = 17;
  for (bool raw : {true, false}) {
    CAPTURE(raw);
    CHECK(initializer_all_zero(model(onnx::TensorProto::INT8, raw, -1), "z") == std::optional<bool>(true));
    CHECK(initializer_all_zero(model(onnx::TensorProto::UINT8, raw, 4999), "z") == std::optional<bool>(false));
    CHECK(initializer_all_zero(model(kFloat8E4M3FN, raw, -1), "z") == std::optional<bool>(true));
  }
  CHECK(!initializer_all_zero(model(onnx::TensorProto::INT8, true, -1), "w"));
  CHECK(!initializer_all_zero(model(onnx::TensorProto::INT16, false, -1), "z"));
}
