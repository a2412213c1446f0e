// unit-shape_inference.cpp - dim binding and shape propagation.
#include <doctest/doctest.h>

#include "neusight/onnx_frontend.h"
#include "neusight/shape_inference.h"
#include "lowering_graph.h"
#include "test_util.h"

using namespace neusight;

TEST_CASE("shape inference: GPT-2 example resolves every tensor once batch and sequence are bound") {
  LoadedModel m = load_model(test::example_model());
  Graph g = m.model.graph;
  DimBindings b;
  b.batch = 2;
  b.seq = 128;
  bind_dims(g, b);
  ShapeResult r = infer_shapes(g, m.model);
  CHECK(r.unknown_ops.empty());
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) {
      const TensorInfo* t = g.find(o);
      REQUIRE(t);
      INFO(o);
      CHECK(t->fully_known());
    }
  const TensorInfo* logits = g.find("logits");
  REQUIRE(logits);
  REQUIRE(logits->shape.size() == 3);
  CHECK(logits->shape[0].value == 2);
  CHECK(logits->shape[1].value == 128);
  CHECK(logits->shape[2].value == 50257);
}

TEST_CASE("shape inference: unbound dims are reported by name") {
  LoadedModel m = load_model(test::example_model());
  Graph g = m.model.graph;
  DimBindings b;
  b.batch = 2;
  CHECK_THROWS_WITH_AS(bind_dims(g, b), doctest::Contains("sequence"), InputError);
}

namespace {
std::vector<int64_t> dims_of(const TensorInfo* t) {
  std::vector<int64_t> v;
  for (const Dim& d : t->shape) v.push_back(d.known() ? d.value : -1);
  return v;
}
// A Conv/ConvTranspose/MaxPool graph on a 2x16x32x32 input; the output shape is inferred.
ShapeResult infer_window(const std::string& op, std::vector<int64_t> w_dims, const std::string& attr,
                         std::vector<int64_t> values, Graph* out = nullptr) {
  test::IrGraph b;
  std::vector<std::string> in = {b.input("x", {2, 16, 32, 32})};
  if (op != "MaxPool") in.push_back(b.w("w", w_dims));
  Node& n = b.node(op, in, {"y"});
  if (op == "MaxPool") n.attributes["kernel_shape"] = test::attr_ints({3, 3});
  if (!attr.empty()) n.attributes[attr] = test::attr_ints(values);
  b.output("y");
  Model m;
  m.opsets[""] = 17;
  ShapeResult r = infer_shapes(b.g, m);
  if (out) *out = b.g;
  return r;
}
}  // namespace

TEST_CASE("shape inference: Conv / ConvTranspose / pooling windows are validated, never divided by zero") {
  Graph g;
  infer_window("Conv", {32, 16, 3, 3}, "strides", {2, 2}, &g);
  REQUIRE(g.find("y"));
  CHECK(dims_of(g.find("y")) == std::vector<int64_t>{2, 32, 15, 15});
  infer_window("ConvTranspose", {16, 8, 2, 2}, "strides", {2, 2}, &g);
  CHECK(dims_of(g.find("y")) == std::vector<int64_t>{2, 8, 64, 64});
  infer_window("MaxPool", {}, "pads", {1, 1, 1, 1}, &g);
  CHECK(dims_of(g.find("y")) == std::vector<int64_t>{2, 16, 32, 32});
  // Found by the fuzzer (fuzz/regressions/conv-*.onnx): each was a crash before.
  CHECK_THROWS_WITH_AS(infer_window("Conv", {}, "", {}), doctest::Contains("weight of rank 0"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("ConvTranspose", {16}, "", {}), doctest::Contains("weight of rank 1"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("Conv", {32, 16, 3, 3}, "strides", {0, 1}), doctest::Contains("strides"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("MaxPool", {}, "strides", {1, 0}), doctest::Contains("strides"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("Conv", {32, 16, 3, 3}, "dilations", {1, 1, 1}), doctest::Contains("dilations"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("Conv", {32, 16, 3, 3}, "pads", {-1, 0, 0, 0}), doctest::Contains("pads"), InputError);
  // Huge strides on a transposed conv overflow 2^62: an input error, not wrapped arithmetic.
  CHECK_THROWS_WITH_AS(infer_window("ConvTranspose", {16, 8, 2, 2}, "strides", {int64_t(1) << 61, 1}),
                       doctest::Contains("out of range"), InputError);
}
