// unit-frontend.cpp - loading, validation and IR conversion.
#include <doctest/doctest.h>

#include "neusight/onnx_frontend.h"
#include "test_util.h"

using namespace neusight;

TEST_CASE("frontend: loads the bundled example with symbolic inputs and external weights") {
  LoadedModel m = load_model(test::example_model());
  REQUIRE(m.model.graph.inputs.size() == 1);
  const TensorInfo* ids = m.model.graph.find("input_ids");
  REQUIRE(ids);
  CHECK(ids->shape.size() == 2);
  CHECK(ids->shape[0].param == "batch");
  CHECK(ids->shape[1].param == "sequence");
  const TensorInfo* w = m.model.graph.find("transformer.h.0.mlp.c_fc.weight");
  REQUIRE(w);
  CHECK(w->external_data);
  CHECK(w->shape[1].value == 3072);
  CHECK(m.model.graph.nodes.size() > 12 * 30);
}

TEST_CASE("frontend: bad bytes are input errors, never crashes") {
  CHECK_THROWS_AS(load_model_from_bytes("", "empty"), InputError);
  CHECK_THROWS_AS(load_model_from_bytes("not an onnx file at all", "text"), InputError);
  CHECK_THROWS_AS(load_model("/nonexistent/model.onnx"), InputError);
  CHECK_THROWS_AS(load_model("/tmp"), InputError);
}
