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

TEST_CASE("roofline: FP32 GEMMs use FP32 matrix units where the spec sheet has them (AMD CDNA)") {
  const Gpu mi100 = GpuDatabase::builtin().resolve("mi100");
  REQUIRE(mi100.fp32_matrix_gflops > mi100.fp32_gflops);
  Kernel gemm;
  gemm.cls = KernelClass::gemm;
  gemm.flops = mi100.fp32_matrix_gflops * 1e9;  // one second at the matrix peak
  gemm.bytes = 1;
  CHECK(roofline_ms(gemm, mi100) == doctest::Approx(1000));
  Kernel vec = gemm;
  vec.cls = KernelClass::elementwise;
  vec.flops = mi100.fp32_gflops * 1e9;  // vector kernels stay on the vector peak
  CHECK(roofline_ms(vec, mi100) == doctest::Approx(1000));
  const Gpu a100 = GpuDatabase::builtin().resolve("a100-40gb");
  CHECK(a100.gemm_peak_gflops(DType::f32) == a100.fp32_gflops);
}
