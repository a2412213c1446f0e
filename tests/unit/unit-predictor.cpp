// unit-predictor.cpp - roofline bound; the interval of a sum of kernels.
#include <doctest/doctest.h>

#include <cmath>

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

namespace {
Prediction with_interval(double ms, double low, double high) {
  Prediction p;
  p.latency_ms = ms;
  p.latency_low_ms = low;
  p.latency_high_ms = high;
  return p;
}
}  // namespace

TEST_CASE("interval of a sum: one kernel keeps its own, repeated kernels add, distinct ones join by rho") {
  REQUIRE(kKernelErrorCorrelation > 0);
  REQUIRE(kKernelErrorCorrelation < 1);
  IntervalSum one;
  one.add(with_interval(2, 1.5, 3));
  CHECK(one.latency_ms() == doctest::Approx(2));
  CHECK(one.low_ms() == doctest::Approx(1.5));
  CHECK(one.high_ms() == doctest::Approx(3));

  // The same kernel three times (a layer's GEMM in three layers): one error, deviations add.
  IntervalSum repeated;
  for (int i = 0; i < 3; ++i) repeated.add(with_interval(2, 1.5, 3));
  CHECK(repeated.low_ms() == doctest::Approx(4.5));
  CHECK(repeated.high_ms() == doctest::Approx(9));

  // Two distinct kernels with equal deviations u: u sqrt(2 + 2 rho); rho 1 adds the bounds,
  // rho 0 adds them in quadrature.
  IntervalSum two;
  two.add(with_interval(2, 1.5, 3));
  two.add(with_interval(2.5, 2, 3.5));
  const double rho = kKernelErrorCorrelation;
  CHECK(two.latency_ms() == doctest::Approx(4.5));
  CHECK(two.high_ms() == doctest::Approx(4.5 + std::sqrt(2 + 2 * rho)));
  CHECK(two.low_ms() == doctest::Approx(4.5 - 0.5 * std::sqrt(2 + 2 * rho)));
  CHECK(two.high_ms(1.0) == doctest::Approx(6.5));
  CHECK(two.low_ms(1.0) == doctest::Approx(3.5));
  CHECK(two.high_ms(0.0) == doctest::Approx(4.5 + std::sqrt(2.0)));

  // A prediction without an interval (the roofline's) adds its latency and no width.
  IntervalSum plain;
  plain.add(with_interval(2, 1.5, 3));
  Prediction roof;
  roof.latency_ms = 1;
  plain.add(roof);
  CHECK(plain.low_ms() == doctest::Approx(2.5));
  CHECK(plain.high_ms() == doctest::Approx(4));
}

TEST_CASE("interval of a sum: narrower than the added bounds, never below the sum of the lows") {
  // Many distinct kernels with wide intervals: the sum's bounds stay between the quadrature
  // and the plain sums, and the lower one above the sum of the kernels' lower bounds (> 0).
  IntervalSum s;
  double low = 0, high = 0, ms = 0;
  for (int i = 1; i <= 200; ++i) {
    const double t = 0.01 * i;
    s.add(with_interval(t, t / 3, t * 3));
    low += t / 3;
    high += t * 3;
    ms += t;
  }
  CHECK(s.latency_ms() == doctest::Approx(ms));
  CHECK(s.low_ms() > low);
  CHECK(s.low_ms() < ms);
  CHECK(s.high_ms() < high);
  CHECK(s.high_ms() > ms);
  CHECK(s.low_ms(0.0) > s.low_ms());
  CHECK(s.high_ms(0.0) < s.high_ms());
}

TEST_CASE("speed-up interval: exact for one sum against itself, narrower the more two sums share") {
  IntervalSum a;
  for (int i = 1; i <= 20; ++i) a.add(with_interval(0.1 * i, 0.07 * i, 0.15 * i));
  const RatioInterval self = ratio_interval(a, a);
  CHECK(self.ratio == doctest::Approx(1));
  CHECK(self.low == doctest::Approx(1));
  CHECK(self.high == doctest::Approx(1));

  // A variant that keeps half of a's kernels and replaces the other half by others of the same
  // latencies and widths, and one that replaces them all.
  IntervalSum half, none;
  for (int i = 1; i <= 20; ++i) {
    const double t = 0.1 * i, other = t * (1 + 1e-6);
    if (i <= 10) half.add(with_interval(t, 0.07 * i, 0.15 * i));
    else half.add(with_interval(other, 0.7 * other, 1.5 * other));
    none.add(with_interval(other, 0.7 * other, 1.5 * other));
  }
  const RatioInterval rh = ratio_interval(a, half), rn = ratio_interval(a, none);
  CHECK(rh.ratio == doctest::Approx(a.latency_ms() / half.latency_ms()));
  CHECK(rh.low < rh.ratio);
  CHECK(rh.high > rh.ratio);
  CHECK(rn.high / rn.low > rh.high / rh.low);
  // Distinct kernels err partly together: the ratio of two disjoint sums is surer than their
  // bounds taken apart, and less sure at a lower correlation.
  CHECK(rn.high < a.high_ms() / none.low_ms());
  CHECK(rn.low > a.low_ms() / none.high_ms());
  CHECK(ratio_interval(a, none, 0.0).high > rn.high);
  CHECK(ratio_interval(a, none, 1.0).high == doctest::Approx(1).epsilon(1e-4));
}
