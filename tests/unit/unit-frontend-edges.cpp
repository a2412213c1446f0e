// unit-frontend-edges.cpp - dangling edges, nodes out of order, ONNX hints never override rules.
#include <doctest/doctest.h>

#include "onnx_proto.h"
#include "neusight/shape_inference.h"

using namespace neusight;

namespace {

onnx::ModelProto two_node_model(bool reversed, bool dangling) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  auto* x = g->add_input();
  x->set_name("X");
  auto* tt = x->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
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
