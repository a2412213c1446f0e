// unit-predictor.cpp - roofline bound.
#include <doctest/doctest.h>

#include "neusight/gpu.h"
#include "neusight/predictor.h"

using namespace neusight;

TEST_CASE("roofline: compute- and memory-bound kernels") {
  const Gpu g = GpuDatabase::builtin().resolve("a100-40gb");
  Kernel k;
  k.cls = KernelClass::gemm;
  k.flops = 19492e9;  // one second of FP32 peak
  k.bytes = 1;
  CHECK(roofline_ms(k, g) == doctest::Approx(1000));
  k.flops = 1;
  k.bytes = 1555e9;
  CHECK(roofline_ms(k, g) == doctest::Approx(1000));
}
