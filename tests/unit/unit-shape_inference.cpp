// unit-shape_inference.cpp - dim binding and shape propagation.
#include <doctest/doctest.h>

#include "neusight/onnx_frontend.h"
#include "neusight/shape_inference.h"
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
