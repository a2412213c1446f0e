// unit-lowering.cpp - nodes to kernels, training kernels.
#include <doctest/doctest.h>

#include "neusight/lowering.h"
#include "neusight/onnx_frontend.h"
#include "neusight/shape_inference.h"
#include "test_util.h"

using namespace neusight;

namespace {
Graph example_graph(int64_t batch, int64_t seq) {
  LoadedModel m = load_model(test::example_model());
  Graph g = m.model.graph;
  DimBindings b;
  b.batch = batch;
  b.seq = seq;
  bind_dims(g, b);
  infer_shapes(g, m.model);
  return g;
}
}  // namespace

TEST_CASE("lowering: GPT-2 small forward GEMM FLOPs match the analytic count") {
  const int64_t B = 2, S = 128, d = 768, L = 12, V = 50257;
  Graph g = example_graph(B, S);
  KernelList kl = lower(g, LoweringOptions{});
  double gemm = 0;
  for (const auto& k : kl.kernels)
    if (k.cls == KernelClass::gemm) gemm += k.flops;
  const double T = double(B) * S;
  const double expected = L * (24.0 * T * d * d + 4.0 * B * double(S) * S * d) + 2.0 * T * d * V;
  CHECK(gemm == doctest::Approx(expected).epsilon(0.01));
}

TEST_CASE("lowering: training adds backward GEMMs of twice the forward FLOPs") {
  Graph g = example_graph(2, 64);
  LoweringOptions o;
  o.mode = Mode::training;
  KernelList kl = lower(g, o);
  double fwd = 0, bwd = 0;
  bool update = false;
  for (const auto& k : kl.kernels) {
    if (k.cls != KernelClass::gemm) {
      update = update || k.phase == Phase::update;
      continue;
    }
    (k.phase == Phase::forward ? fwd : bwd) += k.flops;
  }
  CHECK(bwd == doctest::Approx(2 * fwd).epsilon(0.001));
  CHECK(update);
}
