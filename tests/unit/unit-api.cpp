// unit-api.cpp - the public analyze() entry point end to end.
#include <doctest/doctest.h>

#include "neusight/neusight.h"
#include "onnx_proto.h"
#include "test_util.h"

using namespace neusight;

TEST_CASE("api: analyze() on the example gives positive per-node and end-to-end latencies") {
  LoadedModel m = load_model(test::example_model());
  Options o;
  o.dims.batch = 1;
  o.dims.seq = 256;
  o.predictor = PredictorKind::roofline;
  Report r = analyze(m.proto->model, GpuDatabase::builtin().resolve("b200"), o);
  CHECK(r.e2e_latency_ms > 0);
  CHECK(r.nodes.size() == m.model.graph.nodes.size());
  double sum = 0;
  for (const auto& n : r.nodes) sum += n.latency_ms;
  CHECK(sum == doctest::Approx(r.e2e_latency_ms));
  CHECK(r.graph_outputs.at(0).shape.at(2).value == 50257);
}
