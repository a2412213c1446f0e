// unit-precision.cpp - where reduced-precision math runs, the tensor-core operand port, timing conventions.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "neusight/dataset.h"
#include "neusight/gpu.h"
#include "neusight/neusight_model.h"
#include "neusight/precision.h"
#include "neusight/predictor.h"
#include "neusight/tiling.h"

using namespace neusight;

namespace {

Kernel linear(int64_t m, int64_t reduction, int64_t out, const char* dtype) {
  return kernel_from_dataset("linear", {{"B", "1"},
                                        {"M", std::to_string(m)},
                                        {"N", std::to_string(reduction)},
                                        {"K", std::to_string(out)},
                                        {"dtype", dtype}});
}

}  // namespace

TEST_CASE("precision: timing names") {
  Timing t = Timing::eager;
  CHECK(parse_timing("device", t));
  CHECK(t == Timing::device);
  CHECK(std::string(timing_name(t)) == "device");
  CHECK(parse_timing("kernel", t));
  CHECK(t == Timing::kernel);
  CHECK(std::string(timing_name(t)) == "kernel");
  CHECK(parse_timing("eager", t));
  CHECK(t == Timing::eager);
  CHECK_FALSE(parse_timing("wall", t));
  CHECK(t == Timing::eager);
}

TEST_CASE("precision: the P4's INT8 rate is DP4A (SIMT), not matrix units, tiling and the predictor agree") {
  const GpuDatabase& db = GpuDatabase::builtin();
  const Gpu p4 = db.resolve("p4"), t4 = db.resolve("t4");
  REQUIRE(p4.int8_gops > 0);
  CHECK_FALSE(has_matrix_units(p4, DType::i8));
  CHECK(has_matrix_units(t4, DType::i8));
  Kernel k = linear(4096, 4096, 4096, "fp32");
  k.dtype = DType::i8;
  CHECK(math_precision(k, p4) == "int8-simt");
  CHECK_FALSE(tile_kernel(k, p4).config.tensor_core);
}

TEST_CASE("precision: half-precision GEMMs run on tensor cores, or at the FP32 rate without them") {
  const GpuDatabase& db = GpuDatabase::builtin();
  const Gpu v100 = db.resolve("v100-sxm2"), p100 = db.resolve("p100-sxm"), a100 = db.resolve("a100-40gb");
  const Kernel h = linear(4096, 4096, 4096, "fp16");
  CHECK(has_matrix_units(v100, h.dtype));
  CHECK_FALSE(has_matrix_units(p100, h.dtype));
  CHECK(math_peak_gflops(h, v100) == v100.fp16_gflops);
  // P100 has fast FP16 SIMT, but cuBLAS accumulates half products in FP32: FP32 rate.
  REQUIRE(p100.fp16_simt_gflops > p100.fp32_gflops);
  CHECK(math_peak_gflops(h, p100) == p100.fp32_gflops);
  const Kernel run = kernel_as_run(h, p100);
  CHECK(run.dtype == DType::f32);
  CHECK(run.bytes == h.bytes);  // still half the bytes of FP32
  CHECK(kernel_as_run(h, v100).dtype == DType::f16);
  // BF16 on a GPU without BF16 tensor cores (V100): FP32 rate.
  CHECK(math_peak_gflops(linear(64, 64, 64, "bf16"), v100) == v100.fp32_gflops);
  CHECK(math_peak_gflops(linear(64, 64, 64, "bf16"), a100) == a100.bf16_gflops);
  // FP32 GEMMs are unchanged; vector kernels use the vector peak.
  const Kernel f = linear(64, 64, 64, "fp32");
  CHECK(math_peak_gflops(f, a100) == a100.gemm_peak_gflops(DType::f32));
  CHECK(kernel_as_run(f, p100).dtype == DType::f32);
  // 4-bit weight-only GEMMs compute in half precision.
  Kernel q = h;
  q.dtype = DType::u4;
  CHECK(math_peak_gflops(q, a100) == a100.fp16_gflops);
  CHECK(kernel_as_run(q, a100).dtype == DType::f16);
}

TEST_CASE("precision: operand port demand follows per-SM tensor rate and warp tile") {
  const GpuDatabase& db = GpuDatabase::builtin();
  const Gpu v100 = db.resolve("v100-sxm2"), a100 = db.resolve("a100-40gb"), p100 = db.resolve("p100-sxm");
  const Kernel h = linear(8192, 8192, 8192, "fp16");
  const Tiling tv = tile_kernel(h, v100), ta = tile_kernel(h, a100);
  REQUIRE(tv.config.tensor_core);
  REQUIRE(ta.config.tensor_core);
  // Hand-worked: flops/clock/SM x (wm + wn) x 2 B / (2 wm wn x 128 B/clock).
  const double fv = v100.fp16_gflops * 1e3 / (v100.num_sm * v100.boost_mhz);
  const double wm = double(tv.config.warp_m), wn = double(tv.config.warp_n);
  CHECK(operand_port_demand(h, tv, v100) == doctest::Approx(fv * (wm + wn) * 2 / (2 * wm * wn * 128)));
  // A100 delivers twice V100's tensor FLOPs per SM clock through the same port.
  CHECK(operand_port_demand(h, ta, a100) > 1.5 * operand_port_demand(h, tv, v100));
  // Not on tensor cores: no demand, GPU unchanged.
  const Tiling tp = tile_kernel(kernel_as_run(h, p100), p100);
  CHECK(operand_port_demand(kernel_as_run(h, p100), tp, p100) == 0);
  // Compute-bound: the sustained tensor peak, further lowered by 1 / (1 + d).
  const double sustained = kMatrixSustainedFraction * a100.fp16_gflops;
  CHECK(gpu_as_run(h, ta, a100, 0).fp16_gflops == doctest::Approx(sustained));  // term off
  const Gpu g = gpu_as_run(h, ta, a100, 1);
  CHECK(g.fp16_gflops < sustained);
  CHECK(g.fp16_gflops == doctest::Approx(sustained / (1 + operand_port_demand(h, ta, a100))));
  CHECK(g.mem_bw_gbps == a100.mem_bw_gbps);
  // A memory-bound GEMV leaves the port mostly idle.
  const Kernel gemv = linear(1, 8192, 8192, "fp16");
  const Gpu gg = gpu_as_run(gemv, tile_kernel(gemv, a100), a100, 1);
  CHECK(gg.fp16_gflops > 0.99 * sustained);
}

TEST_CASE("precision: matrix units sustain a fixed fraction of their dense peak, the same on every GPU") {
  const GpuDatabase& db = GpuDatabase::builtin();
  const Kernel h = linear(8192, 8192, 8192, "fp16");
  const Kernel f = linear(8192, 8192, 8192, "fp32");
  for (const char* name : {"v100-sxm2", "t4", "a100-sxm4-80gb", "h100-sxm", "b200"}) {
    CAPTURE(name);
    const Gpu g = db.resolve(name);
    const Tiling t = tile_kernel(h, g);
    REQUIRE(t.config.tensor_core);
    CHECK(matrix_sustained_fraction(h, t, g) == kMatrixSustainedFraction);
    CHECK(gpu_as_run(h, t, g, 0).fp16_gflops == doctest::Approx(kMatrixSustainedFraction * g.fp16_gflops));
    // Everything but the matrix peak is the spec sheet's.
    CHECK(gpu_as_run(h, t, g, 0).fp32_gflops == g.fp32_gflops);
    CHECK(gpu_as_run(h, t, g, 0).mem_bw_gbps == g.mem_bw_gbps);
  }
  // FP32 SIMT GEMMs (what the MLPs were trained on) and streaming kernels: unchanged.
  const Gpu a100 = db.resolve("a100-sxm4-80gb");
  CHECK(matrix_sustained_fraction(f, tile_kernel(f, a100), a100) == 1.0);
  const Kernel add = kernel_from_dataset("add", {{"B", "4096"}, {"H", "4096"}, {"dtype", "fp16"}});
  CHECK(matrix_sustained_fraction(add, tile_kernel(add, a100), a100) == 1.0);
  // No tensor cores for the dtype (P100): the FP32 rate, not lowered.
  const Gpu p100 = db.resolve("p100-sxm");
  const Kernel run = kernel_as_run(h, p100);
  CHECK(matrix_sustained_fraction(run, tile_kernel(run, p100), p100) == 1.0);
  // A large FP16 GEMM is predicted at no more than the sustained fraction of the peak.
  auto p = make_neusight_predictor("");
  const auto r = p->predict({h}, {tile_kernel(h, a100)}, a100);
  CHECK(r[0].utilization <= kMatrixSustainedFraction + 1e-9);
  CHECK(r[0].utilization > 0.5 * kMatrixSustainedFraction);
}

TEST_CASE("precision: device timing replaces a GEMM's eager fixed cost and a streaming kernel's dispatch bound") {
  const GpuDatabase& db = GpuDatabase::builtin();
  const Gpu a100 = db.resolve("a100-sxm4-80gb");
  auto eager = make_neusight_predictor("");
  auto device = make_neusight_predictor("", PrecisionOptions{Timing::device});
  CHECK(eager->name() == device->name());
  std::vector<Kernel> ks = {
      kernel_from_dataset("add", {{"B", "1"}, {"H", "4096"}, {"dtype", "fp16"}}),
      kernel_from_dataset("ln", {{"B", "8"}, {"H", "4096"}, {"dtype", "fp16"}}),
      kernel_from_dataset("add", {{"B", "16384"}, {"H", "8192"}, {"dtype", "fp16"}}),
      linear(16, 4096, 4096, "fp16"),
      linear(8192, 8192, 8192, "fp16"),
  };
  std::vector<Tiling> ts;
  for (const Kernel& k : ks) ts.push_back(tile_kernel(k, a100));
  const auto pe = eager->predict(ks, ts, a100);
  const auto pd = device->predict(ks, ts, a100);
  for (size_t i = 0; i < ks.size(); ++i) {
    CAPTURE(i);
    CHECK(pd[i].latency_ms >= pd[i].roofline_ms);
    CHECK(pd[i].roofline_ms == pe[i].roofline_ms);
    CHECK(pd[i].latency_ms >= kDeviceKernelFloorMs);
    CHECK(pd[i].latency_ms <= pe[i].latency_ms * (1 + 1e-9));  // device timing never adds time
  }
  // A one-row add is its dispatch in eager timing (tens of microseconds, the timing harness's
  // included), the host's dispatch of one op in device timing; a large add is its device time
  // in both.
  CHECK(pe[0].latency_ms > 10 * kDeviceKernelFloorMs);
  CHECK(pd[0].latency_ms >= kHostDispatchMs);
  CHECK(pd[0].latency_ms < 1.2 * kHostDispatchMs);
  CHECK(pd[2].latency_ms == doctest::Approx(pe[2].latency_ms).epsilon(0.05));
  // A GEMM of 16 rows sheds the eager fixed cost; a large one is dominated by its math.
  CHECK(pd[3].latency_ms < pe[3].latency_ms - 0.5 * kDeviceKernelFloorMs);
  CHECK(pd[4].latency_ms == doctest::Approx(pe[4].latency_ms).epsilon(0.05));
}

TEST_CASE("precision: kernel timing gives a streaming kernel's device time, bounded by the launch floor") {
  const Gpu a100 = GpuDatabase::builtin().resolve("a100-sxm4-80gb");
  const ModelSet models = load_model_set(data_dir() + "/weights");
  auto device = make_neusight_predictor("", PrecisionOptions{Timing::device});
  auto strip = make_neusight_predictor("", PrecisionOptions{Timing::kernel});
  // An RMSNorm-sized row norm of 64 rows and of 4096 rows, and a 16M-element add, fp16;
  // device timing bounds kernel timing's answer by the host's dispatch (root sum of squares).
  std::vector<Kernel> ks = {kernel_from_dataset("ln", {{"B", "64"}, {"H", "4096"}, {"dtype", "fp16"}}),
                            kernel_from_dataset("ln", {{"B", "4096"}, {"H", "4096"}, {"dtype", "fp16"}}),
                            kernel_from_dataset("add", {{"B", "4096"}, {"H", "4096"}, {"dtype", "fp16"}})};
  std::vector<Tiling> ts;
  for (const Kernel& k : ks) ts.push_back(tile_kernel(k, a100));
  const auto pd = device->predict(ks, ts, a100);
  const auto ps = strip->predict(ks, ts, a100);
  for (size_t i = 0; i < ks.size(); ++i) {
    CAPTURE(i);
    UtilClass c;
    REQUIRE(util_class_of(ks[i], c));
    TileFeatures f = tile_features(c, ks[i], ts[i], a100);
    f.device_only = true;
    const double dev = predict_latency_ms(models.classes[int(c)], {f})[0];
    // The device time and the launch-to-completion floor, combined as the law combines the
    // dispatch and the device time; never below the roofline, never above device timing.
    CHECK(ps[i].latency_ms == doctest::Approx(std::max(std::hypot(kDeviceKernelFloorMs, dev), ps[i].roofline_ms)));
    CHECK(ps[i].latency_ms >= ps[i].roofline_ms);
    CHECK(ps[i].latency_ms >= kDeviceKernelFloorMs);
    CHECK(pd[i].latency_ms == doctest::Approx(std::hypot(kHostDispatchMs, ps[i].latency_ms)).epsilon(1e-12));
    CHECK(pd[i].latency_low_ms == doctest::Approx(std::hypot(kHostDispatchLowMs, ps[i].latency_low_ms)).epsilon(1e-12));
    CHECK(pd[i].latency_high_ms == doctest::Approx(std::hypot(kHostDispatchHighMs, ps[i].latency_high_ms)).epsilon(1e-12));
  }
  // A one-wave norm is a few microseconds of device time (Vidur measures 4-8 us for 8-64
  // rows on the A100), not the eager dispatch; the large ones stay far above the floor.
  CHECK(ps[0].latency_ms < 0.012);
  CHECK(ps[1].latency_ms > ps[0].latency_ms);
  CHECK(ps[2].latency_ms > 10 * kDeviceKernelFloorMs);
}

TEST_CASE("precision: a half-precision GEMM on a GPU without tensor cores is predicted at the FP32 rate") {
  const Gpu p100 = GpuDatabase::builtin().resolve("p100-sxm");
  auto p = make_neusight_predictor("");
  const Kernel h = linear(4096, 4096, 4096, "fp16");
  const Kernel f = linear(4096, 4096, 4096, "fp32");
  const auto r = p->predict({h, f}, {tile_kernel(h, p100), tile_kernel(f, p100)}, p100);
  // Compute bound: the same math at the same rate; the half-precision one moves half the bytes.
  CHECK(r[0].latency_ms == doctest::Approx(r[1].latency_ms).epsilon(0.15));
  CHECK(r[0].compute_bound);
  // At least the time of its FLOPs at the FP32 peak, not at the (twice as high) FP16 SIMT peak.
  CHECK(r[0].latency_ms >= h.flops / (p100.fp32_gflops * 1e6));
  // Below the roofline as the P100's large FP32 GEMMs run (0.70-0.83 of the FP32 peak).
  CHECK(r[0].latency_ms > 1.1 * r[0].roofline_ms);
}

TEST_CASE("precision: math_precision names the unit and precision a kernel's math runs in") {
  const GpuDatabase& db = GpuDatabase::builtin();
  const Gpu a100 = db.resolve("a100-sxm4-80gb"), p100 = db.resolve("p100-sxm"), v100 = db.resolve("v100-sxm2");
  const Gpu h100 = db.resolve("h100-sxm"), mi300 = db.resolve("mi300x");
  CHECK(math_precision(linear(64, 64, 64, "fp16"), a100) == "fp16-tensor");
  CHECK(math_precision(linear(64, 64, 64, "bf16"), a100) == "bf16-tensor");
  CHECK(math_precision(linear(64, 64, 64, "fp32"), a100) == "fp32-simt");
  CHECK(math_precision(linear(64, 64, 64, "fp16"), p100) == "fp32-simt");  // no tensor cores
  CHECK(math_precision(linear(64, 64, 64, "bf16"), v100) == "fp32-simt");  // no BF16 tensor cores
  CHECK(math_precision(linear(64, 64, 64, "fp8"), h100) == "fp8-tensor");
  CHECK(math_precision(linear(64, 64, 64, "fp8"), a100) == "fp16-tensor");  // upcast to FP16
  CHECK(math_precision(linear(64, 64, 64, "fp16"), mi300) == "fp16-matrix");
  Kernel q = linear(64, 64, 64, "fp16");
  q.dtype = DType::u4;  // weight-only: dequantized, FP16 math
  CHECK(math_precision(q, a100) == "fp16-tensor");
  const Kernel add = kernel_from_dataset("add", {{"B", "4"}, {"H", "4096"}, {"dtype", "fp16"}});
  CHECK(math_precision(add, a100) == "fp32-simt");
  Kernel copy = add;
  copy.cls = KernelClass::memory;
  CHECK(math_precision(copy, a100) == "none");
}

TEST_CASE("precision: memory-parallelism bound of latency-limited kernels (Little's law), vectorized kernels unaffected") {
  const Gpu a100 = GpuDatabase::builtin().resolve("a100-sxm4-80gb");
  const double lat = global_memory_latency_ms(a100);
  CHECK(lat == doctest::Approx(kGlobalMemoryLatencyCycles / (a100.boost_mhz * 1e3)));
  CHECK(lat * 1e6 == doctest::Approx(333).epsilon(0.01));  // ns at 1410 MHz
  const double bw_ms = a100.mem_bw_gbps * 1e6;             // bytes per ms
  // vLLM-style rms_norm: one block of 1024 threads per row, scalar 2-byte loads, one in flight.
  const int64_t resident = int64_t(a100.num_sm) * 2;  // 2048 threads per SM / 1024
  auto norm = [](int64_t rows, int64_t cols) {
    return kernel_from_dataset("ln", {{"B", std::to_string(rows)}, {"H", std::to_string(cols)}, {"dtype", "fp16"}});
  };
  Kernel k = norm(resident * 20, 4096);
  CHECK(memory_parallelism_ms(k, a100) < 0);  // undescribed: the NeuSight law as before
  k.access = {2, 1, 1024};
  const double mp = memory_parallelism_ms(k, a100);
  CHECK(mp == doctest::Approx(20 * 4 * lat + k.bytes / bw_ms));
  // Little's law: the latency part moves the bytes read at bytes-in-flight / latency,
  // bytes in flight = SMs x resident threads x 2 bytes.
  const double read_bytes = double(k.rows) * double(k.cols) * 2;
  const double in_flight = double(a100.num_sm) * a100.max_threads_per_sm * 2;
  CHECK(read_bytes / (mp - k.bytes / bw_ms) == doctest::Approx(in_flight / lat));
  // Fewer rows than resident blocks: one wave, the latency part does not grow with the rows.
  Kernel small = norm(64, 4096), one_wave = norm(resident, 4096);
  small.access = one_wave.access = k.access;
  CHECK(memory_parallelism_ms(small, a100) - small.bytes / bw_ms ==
        doctest::Approx(memory_parallelism_ms(one_wave, a100) - one_wave.bytes / bw_ms));
  // Two independent loads in flight halve the round trips (silu_and_mul reads gate and up).
  Kernel act = k;
  act.inputs = 2;
  act.access.loads_in_flight = 2;
  CHECK(memory_parallelism_ms(act, a100) - act.bytes / bw_ms == doctest::Approx(mp - k.bytes / bw_ms));
  // A dependent index load before the first pass (rotary_embedding's position) adds one round
  // trip per wave.
  Kernel indexed = k;
  indexed.access.index_loads = 1;
  CHECK(memory_parallelism_ms(indexed, a100) == doctest::Approx(mp + 20 * lat));
  // Occupancy from the GPU's limits: 256-thread blocks, 8 resident per SM (2048 threads).
  Kernel narrow = norm(int64_t(a100.num_sm) * 8, 256);
  narrow.access = {2, 1, 256};
  CHECK(memory_parallelism_ms(narrow, a100) == doctest::Approx(1 * lat + narrow.bytes / bw_ms));
  // A wide-load kernel with many bytes in flight is bandwidth bound: close to its roofline.
  Kernel wide = k;
  wide.access = {16, 4, 128};
  CHECK(memory_parallelism_ms(wide, a100) < 1.05 * k.bytes / bw_ms);

  // Predictor: kernel timing predicts a described kernel as floor + bound; an undescribed
  // kernel is predicted exactly as before, eager never below the bound.
  auto device = make_neusight_predictor("", PrecisionOptions{Timing::kernel});
  auto eager = make_neusight_predictor("");
  Kernel plain = k;
  plain.access = {};
  const std::vector<Kernel> ks{k, plain};
  const std::vector<Tiling> ts{tile_kernel(k, a100), tile_kernel(plain, a100)};
  const auto d = device->predict(ks, ts, a100), e = eager->predict(ks, ts, a100);
  CHECK(d[0].latency_ms == doctest::Approx(kDeviceKernelFloorMs + mp));
  CHECK(d[0].utilization == doctest::Approx(d[0].roofline_ms / d[0].latency_ms));
  CHECK(e[0].latency_ms >= d[0].latency_ms);
  const auto d1 = device->predict({plain}, {ts[1]}, a100), e1 = eager->predict({plain}, {ts[1]}, a100);
  // A kernel predicts the same alone as in a batch (to rounding: BLAS may block a batch of
  // two differently from a batch of one on some CPUs).
  CHECK(d[1].latency_ms == doctest::Approx(d1[0].latency_ms).epsilon(1e-12));
  CHECK(e[1].latency_ms == doctest::Approx(e1[0].latency_ms).epsilon(1e-12));
  CHECK(d[1].latency_ms != d[0].latency_ms);
}

TEST_CASE("precision: two-pass row kernels add their block reduction and a cached second pass per wave") {
  const Gpu a100 = GpuDatabase::builtin().resolve("a100-sxm4-80gb");
  const double lat = global_memory_latency_ms(a100);
  const double cycle = 1.0 / (a100.boost_mhz * 1e3);  // ms per SM cycle
  const double bw_ms = a100.mem_bw_gbps * 1e6;
  // The reduction: two warp reductions of 5 shuffle + add steps, two shared-memory exchanges.
  CHECK(kBlockReductionCycles == doctest::Approx(446));
  CHECK(kL1HitLatencyCycles < kSharedMemoryLatencyCycles + 10);
  CHECK(kL2HitLatencyCycles > kL1HitLatencyCycles);
  CHECK(kL2HitLatencyCycles < kGlobalMemoryLatencyCycles);
  const int64_t resident = int64_t(a100.num_sm) * 2;  // 1024-thread blocks, 2 per SM
  Kernel k = kernel_from_dataset("ln", {{"B", std::to_string(resident * 20)}, {"H", "4096"}, {"dtype", "fp16"}});
  k.access = {2, 1, 1024};
  const double first = memory_parallelism_ms(k, a100);
  CHECK(first == doctest::Approx(20 * 4 * lat + k.bytes / bw_ms));  // the first pass only, as before
  // A second row tensor doubles the first pass's round trips; a per-column operand counted in
  // the kernel's inputs (rms_norm's weight) does not when the description names the row tensors.
  Kernel two = k;
  two.inputs = 2;
  CHECK(memory_parallelism_ms(two, a100) == doctest::Approx(20 * 8 * lat + k.bytes / bw_ms));
  two.access.row_tensors = 1;
  CHECK(memory_parallelism_ms(two, a100) == doctest::Approx(first));
  // + one block reduction per wave.
  Kernel r = k;
  r.access.block_reductions = 1;
  CHECK(memory_parallelism_ms(r, a100) - first == doctest::Approx(20 * kBlockReductionCycles * cycle));
  // + a second pass of ceil(4096 / 1024) = 4 iterations, each one cache round trip.
  Kernel l1 = r, l2 = r;
  l1.access.cached_pass_level = 1;
  l2.access.cached_pass_level = 2;
  CHECK(memory_parallelism_ms(l1, a100) - memory_parallelism_ms(r, a100) ==
        doctest::Approx(20 * 4 * kL1HitLatencyCycles * cycle));
  CHECK(memory_parallelism_ms(l2, a100) - memory_parallelism_ms(r, a100) ==
        doctest::Approx(20 * 4 * kL2HitLatencyCycles * cycle));
  // The weight read with the second pass is not in L1 in the first wave: that wave waits on L2.
  Kernel w = l1;
  w.access.cached_pass_weight = true;
  CHECK(memory_parallelism_ms(w, a100) - memory_parallelism_ms(l1, a100) ==
        doctest::Approx(4 * (kL2HitLatencyCycles - kL1HitLatencyCycles) * cycle));
  // One wave: the weight's L2 round trips are the whole second pass.
  Kernel one = w, one_l2 = l2;
  one.rows = one_l2.rows = resident;
  one.bytes = one_l2.bytes = k.bytes / 20;
  CHECK(memory_parallelism_ms(one, a100) == doctest::Approx(memory_parallelism_ms(one_l2, a100)));
  // Stores and the weight's bytes stay in bytes / bandwidth: no step for them. Undescribed steps
  // (the defaults) leave the bound as it was.
  CHECK(ThreadAccess{}.block_reductions == 0);
  CHECK(ThreadAccess{}.cached_pass_level == 0);
  CHECK_FALSE(ThreadAccess{}.cached_pass_weight);
}

TEST_CASE("precision: FP32 SIMT GEMMs run at the clock the board power holds and the issue and shared-memory rates allow") {
  const GpuDatabase& db = GpuDatabase::builtin();
  // The 70-75 W cards of the training data: about 0.55 of their boost clock under dense FFMA.
  CHECK(power_clock_fraction(db.resolve("t4")) ==
        doctest::Approx(70.0 / (2560 * 1590e6) / kSimtBoostJoulesPerLaneCycle16nm));
  CHECK(power_clock_fraction(db.resolve("p4")) < 0.75);
  // 250 W cards and newer flagships hold it.
  for (const char* name : {"p100", "a100-40gb", "h100", "b200"}) {
    CAPTURE(name);
    CHECK(power_clock_fraction(db.resolve(name)) == 1.0);
  }
  CHECK(power_clock_fraction(db.resolve("v100")) > 0.9);
  CHECK(power_clock_fraction(db.resolve("mi300x")) > 0.95);
  // A 72 W card with 7,424 lanes at 2.04 GHz on a 4 nm node does not.
  CHECK(power_clock_fraction(db.resolve("l4")) < 0.6);
  // 128-lane SMs lose the FFMA slots the main loop's loads take, and their FFMAs need more
  // shared-memory bandwidth than the port delivers: the scarcer bounds (128 / 144 B per clock).
  const double smem_share = kSharedMemoryBytesPerClock / (128 * kSimtSmemBytesPerFfma);
  CHECK(smem_share == doctest::Approx(128.0 / 144.0));
  CHECK(smem_share < kSimtFfmaIssueShare);
  CHECK(simt_sustained_fraction(db.resolve("h100")) == doctest::Approx(smem_share));
  // 64-lane SMs need 72 B per clock: neither bounds them.
  CHECK(simt_sustained_fraction(db.resolve("a100-40gb")) == 1.0);
  CHECK(simt_sustained_fraction(db.resolve("v100")) == doctest::Approx(power_clock_fraction(db.resolve("v100"))));
  // A power-limited 128-lane card: both.
  CHECK(simt_sustained_fraction(db.resolve("l4")) == doctest::Approx(smem_share * power_clock_fraction(db.resolve("l4"))));
  // Unknown power (a device JSON without TDP): no limit; more power never lowers the clock.
  Gpu g = db.resolve("l4");
  const double f = power_clock_fraction(g);
  g.board_power_w *= 2;
  CHECK(power_clock_fraction(g) >= f);
  g.board_power_w = 0;
  CHECK(power_clock_fraction(g) == 1.0);
  // Newer nodes need less power per lane.
  CHECK(process_energy_scale(4) < process_energy_scale(7));
  CHECK(process_energy_scale(7) < process_energy_scale(12));
  CHECK(process_energy_scale(16) == 1.0);
}

TEST_CASE("precision: the weight-streaming law streams at its fraction of the bandwidth plus its setup") {
  const Gpu a100 = GpuDatabase::builtin().resolve("a100-sxm-80gb");
  const Kernel k = kernel_from_dataset(
      "linear", {{"B", "1"}, {"M", "1"}, {"N", "4096"}, {"K", "11008"}, {"dtype", "fp16"}});
  const double stream_ms = k.bytes / (kWeightStreamDramFraction * a100.mem_bw_gbps * 1e6);
  CHECK(weight_stream_ms(k, a100, a100.fp32_gflops) == doctest::Approx(stream_ms + kWeightStreamSetupUs * 1e-3));
  // Faster memory streams faster; without CUDA-core math the stream alone counts.
  Gpu fast = a100;
  fast.mem_bw_gbps *= 2;
  CHECK(weight_stream_ms(k, fast, a100.fp32_gflops) < weight_stream_ms(k, a100, a100.fp32_gflops));
  CHECK(weight_stream_ms(k, a100, 0) == weight_stream_ms(k, a100, a100.fp32_gflops));
  // Many rows at a low math rate make it bound by the math.
  const Kernel wide = kernel_from_dataset(
      "linear", {{"B", "1"}, {"M", "512"}, {"N", "4096"}, {"K", "11008"}, {"dtype", "fp16"}});
  CHECK(weight_stream_ms(wide, a100, a100.fp32_gflops) ==
        doctest::Approx(wide.flops / (a100.fp32_gflops * 1e6) + kWeightStreamSetupUs * 1e-3));
  Gpu none = a100;
  none.mem_bw_gbps = 0;
  CHECK(weight_stream_ms(k, none, a100.fp32_gflops) == 0);
}

TEST_CASE("precision: a library GEMM on matrix units carries its fixed time, FP32 SIMT GEMMs the floor") {
  const Gpu a100 = GpuDatabase::builtin().resolve("a100-sxm4-80gb");
  auto device = make_neusight_predictor("", PrecisionOptions{Timing::kernel});
  const Kernel half = kernel_from_dataset("linear", {{"B", "1"}, {"M", "512"}, {"N", "512"}, {"K", "512"}, {"dtype", "fp16"}});
  const Kernel full = kernel_from_dataset("linear", {{"B", "1"}, {"M", "512"}, {"N", "512"}, {"K", "512"}});
  const Tiling th = tile_kernel(half, a100), tf = tile_kernel(full, a100);
  REQUIRE(th.config.tensor_core);
  REQUIRE_FALSE(tf.config.tensor_core);
  const Prediction ph = device->predict({half}, {th}, a100)[0];
  const Prediction pf = device->predict({full}, {tf}, a100)[0];
  // A 0.27 GFLOP tensor-core GEMM: its fixed time and at least its roofline.
  CHECK(ph.latency_ms >= kGemmKernelFixedUs * 1e-3 + ph.roofline_ms * (1 - 1e-9));
  CHECK(ph.latency_ms < kGemmKernelFixedUs * 1e-3 + 10 * ph.roofline_ms);
  // The FP32 one: its learned time with the device floor, no added fixed time.
  CHECK(pf.latency_ms >= kDeviceKernelFloorMs);
  CHECK(pf.latency_ms >= pf.roofline_ms);
}

TEST_CASE("precision: a single tensor-core GEMM runs on the fastest tile the library offers, and the tile reported is the cost model's unless another is clearly faster") {
  const GpuDatabase& db = GpuDatabase::builtin();
  PrecisionOptions one{Timing::kernel};
  one.fastest_tile = false;
  auto fastest = make_neusight_predictor("", PrecisionOptions{Timing::kernel});
  auto chosen = make_neusight_predictor("", one);
  PrecisionOptions alone = one;
  alone.fewer_sm_tilings = false;
  auto bare = make_neusight_predictor("", alone);
  size_t retiled = 0;
  for (const char* name : {"a40", "a100-sxm4-80gb", "h100-sxm", "l40s", "b200", "mi300x"}) {
    const Gpu g = db.resolve(name);
    for (int64_t m : {96, 200, 384, 1000, 2048, 8192}) {
      CAPTURE(name);
      CAPTURE(m);
      const Kernel k = linear(m, 11008, 4096, "bf16");
      const Tiling t = tile_kernel(k, g);
      REQUIRE(t.config.tensor_core);
      const std::vector<Tiling> alts = tile_alternatives(k, g);
      REQUIRE(alts.size() >= 2);
      // The cost model's choice is one of the offered tiles.
      CHECK(std::any_of(alts.begin(), alts.end(), [&](const Tiling& a) {
        return a.tile == t.tile && a.config.split_k == t.config.split_k && a.tiles == t.tiles;
      }));
      const Prediction f = fastest->predict({k}, {t}, g)[0];
      const Prediction c = chosen->predict({k}, {t}, g)[0];
      // Without the offered tiles a GEMM is priced on its own and those it gets on fewer SMs,
      // and reports its own tile (a fewer-SM tiling bounds the latency, it is not run here).
      CHECK(!c.tiling);
      if (c.fewer_sm_bound > 0) {
        CHECK(c.fewer_sm_bound < g.num_sm);
        CHECK(c.latency_ms <= chosen->predict({k}, {t}, g)[0].latency_ms);
      }
      CHECK(f.latency_ms <= c.latency_ms * (1 + 1e-12));
      // No offered tile is priced faster than the latency.
      for (const Tiling& a : alts) CHECK(f.latency_ms <= chosen->predict({k}, {a}, g)[0].latency_ms * (1 + 1e-9));
      if (f.tiling) {
        ++retiled;
        // Another tile is reported only where it is priced faster than the cost model's.
        CHECK(bare->predict({k}, {*f.tiling}, g)[0].latency_ms < bare->predict({k}, {t}, g)[0].latency_ms);
        CHECK(std::any_of(alts.begin(), alts.end(), [&](const Tiling& a) { return same_grid(a, *f.tiling); }));
      }
    }
  }
  CAPTURE(retiled);
  // Strided batched GEMMs keep the cost model's tile.
  const Gpu h100 = db.resolve("h100-sxm");
  const Kernel b = kernel_from_dataset("bmm", {{"B", "32"}, {"M", "512"}, {"N", "128"}, {"K", "512"}, {"dtype", "fp16"}});
  CHECK(!fastest->predict({b}, {tile_kernel(b, h100)}, h100)[0].tiling);
}

TEST_CASE("precision: FP4 runs on Blackwell's FP4 tensor cores, as FP8 on Hopper and FP16 on Ampere") {
  const GpuDatabase& db = GpuDatabase::builtin();
  const Gpu b200 = db.resolve("b200"), h100 = db.resolve("h100-sxm"), a100 = db.resolve("a100-sxm4-80gb");
  CHECK(parse_dtype("fp4") == DType::f4e2m1);
  CHECK(parse_dtype("nvfp4") == DType::f4e2m1);
  CHECK(std::string(dtype_name(DType::f4e2m1)) == "fp4");
  CHECK(element_bytes(DType::f4e2m1) == 0.5);
  CHECK(b200.fp4_gflops == doctest::Approx(2 * b200.fp8_gflops));
  CHECK(h100.fp4_gflops == 0);
  auto big = [](const char* dt) {
    Kernel k = linear(8192, 8192, 8192, dt);
    if (std::string(dt) == "fp16") return k;
    k.dtype = std::string(dt) == "fp8" ? DType::f8e4m3fn : DType::f4e2m1;
    k.bytes *= std::string(dt) == "fp8" ? 0.5 : 0.25;
    return k;
  };
  const Kernel f4 = big("fp4"), f8 = big("fp8"), f16 = big("fp16");
  CHECK(math_precision(f4, b200) == "fp4-tensor");
  CHECK(math_precision(f4, h100) == "fp8-tensor");   // no FP4 tensor cores: FP8 ones
  CHECK(math_precision(f4, a100) == "fp16-tensor");  // nor FP8 ones
  CHECK(math_peak_gflops(f4, b200) == b200.fp4_gflops);
  CHECK(math_peak_gflops(f4, h100) == h100.fp8_gflops);
  const Tiling t = tile_kernel(f4, b200);
  CHECK(t.config.tensor_core);
  CHECK(gpu_as_run(f4, t, b200, 0).fp4_gflops == doctest::Approx(kMatrixSustainedFraction * b200.fp4_gflops));
  auto p = make_neusight_predictor("");
  auto ms = [&](const Kernel& k, const Gpu& g) { return p->predict({k}, {tile_kernel(k, g)}, g)[0].latency_ms; };
  // A compute-bound 8192^3 GEMM: FP4 about twice as fast as FP8 on the B200, as fast on the H100.
  const double b4 = ms(f4, b200), b8 = ms(f8, b200), h4 = ms(f4, h100), h8 = ms(f8, h100);
  CHECK(b8 / b4 > 1.6);
  CHECK(b8 / b4 < 2.05);
  CHECK(h4 == doctest::Approx(h8).epsilon(0.05));
  CHECK(ms(f16, b200) / b8 > 1.6);
}

TEST_CASE("precision: a weight-only 8-bit GEMM runs its math in half precision, not on the integer units") {
  // MatMulNBits with 8-bit weights and FP16 activations (GPTQ / RTN int8 weight-only): the
  // weights are dequantized in the kernel, the MMAs are FP16's. A 2048-token prefill projection
  // is compute-bound: as fast as the 4-bit one and the FP16 one within a few percent, never at
  // the INT8 peak (twice the FP16 one on an H100).
  const Gpu h100 = GpuDatabase::builtin().resolve("h100");
  Kernel fp16 = linear(2048, 4096, 4096, "fp16");
  Kernel w8 = fp16, w4 = fp16, int8 = linear(2048, 4096, 4096, "int8");
  w8.dtype = DType::u8;
  w8.weight_only = true;
  w8.bytes = 2048.0 * 4096 * 2 + 4096.0 * 4096 + 2048.0 * 4096 * 2;
  w4.dtype = DType::u4;
  w4.weight_only = true;
  w4.bytes = 2048.0 * 4096 * 2 + 4096.0 * 4096 / 2 + 2048.0 * 4096 * 2;
  CHECK(math_precision(w8, h100) == "fp16-tensor");
  CHECK(math_precision(w4, h100) == "fp16-tensor");
  CHECK(math_peak_gflops(w8, h100) == h100.fp16_gflops);
  PrecisionOptions o;
  o.timing = Timing::kernel;
  auto p = make_neusight_predictor("", o);
  std::vector<Kernel> ks = {fp16, w8, w4, int8};
  std::vector<Tiling> ts;
  for (const auto& k : ks) ts.push_back(tile_kernel(k, h100));
  const auto pr = p->predict(ks, ts, h100);
  CHECK(pr[1].latency_ms == doctest::Approx(pr[0].latency_ms).epsilon(0.05));
  CHECK(pr[1].latency_ms == doctest::Approx(pr[2].latency_ms).epsilon(0.05));
  CHECK(pr[3].latency_ms < 0.7 * pr[1].latency_ms);  // W8A8 on the INT8 units is another GEMM
}

TEST_CASE("precision: FP64 runs at the architecture's FP64 rate, on DMMA / FP64 MFMA where there are such units") {
  // The datasheets' FP64 peaks (TFLOPS): vector, then the GEMMs' rate.
  const GpuDatabase& db = GpuDatabase::builtin();
  struct Row {
    const char* gpu;
    double vector, gemm;
    const char* math;
  };
  for (const Row& r : {Row{"a100", 9.75, 19.5, "fp64-tensor"}, Row{"h100", 33.5, 66.9, "fp64-tensor"},
                       Row{"b200", 37.2, 37.2, "fp64-simt"}, Row{"rtx4090", 1.29, 1.29, "fp64-simt"},
                       Row{"t4", 0.253, 0.253, "fp64-simt"}, Row{"v100", 7.0, 7.0, "fp64-simt"},
                       Row{"mi210", 22.6, 45.3, "fp64-matrix"}, Row{"mi300x", 81.7, 163.4, "fp64-matrix"}}) {
    CAPTURE(r.gpu);
    const Gpu g = db.resolve(r.gpu);
    CHECK(g.peak_gflops(DType::f64) / 1000 == doctest::Approx(r.vector).epsilon(0.02));
    CHECK(g.gemm_peak_gflops(DType::f64) / 1000 == doctest::Approx(r.gemm).epsilon(0.02));
    Kernel k = linear(4096, 4096, 4096, "fp32");
    k.dtype = DType::f64;
    k.bytes *= 2;
    CHECK(math_precision(k, g) == std::string(r.math));
  }
  // A consumer card's FP64 GEMM takes tens of times its FP32 one.
  const Gpu rtx = db.resolve("rtx4090");
  Kernel f32 = linear(4096, 4096, 4096, "fp32"), f64 = f32;
  f64.dtype = DType::f64;
  f64.bytes *= 2;
  auto p = make_neusight_predictor("", PrecisionOptions{});
  const std::vector<Kernel> ks = {f32, f64};
  const auto pr = p->predict(ks, {tile_kernel(f32, rtx), tile_kernel(f64, rtx)}, rtx);
  CHECK(pr[1].latency_ms > 30 * pr[0].latency_ms);
}

TEST_CASE("precision: 2:4 sparsity runs on sparse matrix units from Ampere and CDNA 3, at twice the peak") {
  const GpuDatabase& db = GpuDatabase::builtin();
  for (const char* name : {"a100", "a10", "l4", "h100", "b200", "rtx5090"}) {
    CAPTURE(name);
    const Gpu g = db.resolve(name);
    CHECK(has_sparse_matrix_units(g, DType::bf16));
    CHECK(has_sparse_matrix_units(g, DType::tf32));
    CHECK_FALSE(has_sparse_matrix_units(g, DType::f32));
    const Gpu s = sparse_2_4_gpu(g);
    CHECK(s.bf16_gflops == doctest::Approx(2 * g.bf16_gflops));
    CHECK(s.matrix_lanes(DType::bf16) == doctest::Approx(2 * g.matrix_lanes(DType::bf16)));
    CHECK(s.fp32_gflops == g.fp32_gflops);
    CHECK(s.mem_bw_gbps == g.mem_bw_gbps);
  }
  CHECK(has_sparse_matrix_units(db.resolve("h100"), DType::f8e4m3fn));
  CHECK_FALSE(has_sparse_matrix_units(db.resolve("a100"), DType::f8e4m3fn));  // no FP8 units
  CHECK(has_sparse_matrix_units(db.resolve("b200"), DType::f4e2m1));
  for (const char* name : {"v100", "t4", "p100", "mi100", "mi250"}) {
    CAPTURE(name);
    const Gpu g = db.resolve(name);
    CHECK_FALSE(has_sparse_matrix_units(g, DType::f16));
    CHECK(sparse_2_4_gpu(g).fp16_gflops == g.fp16_gflops);
  }
  CHECK(has_sparse_matrix_units(db.resolve("mi300x"), DType::bf16));
  CHECK_FALSE(has_sparse_matrix_units(db.resolve("mi300x"), DType::tf32));
  // The weight (k x n) read compressed: half its values and a 2-bit index of each.
  Kernel k = linear(64, 4096, 4096, "bf16");
  k.sparse_2_4 = true;
  const Kernel run = sparse_2_4_as_run(k);
  CHECK(k.bytes - run.bytes == doctest::Approx(4096.0 * 4096.0 * (2 - 1.125)));
  CHECK(runs_sparse_2_4(k, db.resolve("h100")));
  CHECK_FALSE(runs_sparse_2_4(k, db.resolve("v100")));
  CHECK(math_precision(k, db.resolve("h100")) == "bf16-tensor-2:4");
  CHECK(math_precision(k, db.resolve("v100")) == "fp32-simt");
}
