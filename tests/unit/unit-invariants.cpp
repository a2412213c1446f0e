// unit-invariants.cpp - physical invariants of the shipped predictor, property style: random
// kernels of every class on every GPU of the database, fixed seed. A faster spec (every peak
// together or one dtype's alone, bandwidth, L2, power; a faster board of the same die) never
// predicts slower; a GPU with every rate doubled runs 1.6-2.0x faster; a compute-bound GEMM
// follows the FLOP rate, not the bandwidth.
#include <doctest/doctest.h>

#include <sstream>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "neusight/dataset.h"
#include "neusight/gpu.h"
#include "neusight/precision.h"
#include "neusight/predictor.h"

using namespace neusight;

namespace {

// Random kernels of every class the predictor models, with shapes of the dataset's range and
// beyond (1 to 2^15 per dim), in FP32 and, for GEMMs, every dtype the GPU may run.
std::vector<Kernel> random_kernels(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  auto dim = [&](int lo_log, int hi_log) {
    std::uniform_real_distribution<double> u(lo_log, hi_log);
    return std::to_string(int64_t(std::llround(std::exp2(u(g)))));
  };
  static const char* ew[] = {"add", "addu", "mul", "div", "gelu", "relu", "tanh", "pow"};
  static const DType gemm_dtypes[] = {DType::f32, DType::f32, DType::f32, DType::tf32, DType::f16, DType::bf16,
                                      DType::f8e4m3fn, DType::f4e2m1, DType::i8};
  constexpr size_t kGemmDtypes = sizeof(gemm_dtypes) / sizeof(gemm_dtypes[0]);
  std::vector<Kernel> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Kernel k;
    switch (i % 8) {
      case 0: k = kernel_from_dataset("bmm", {{"B", dim(0, 9)}, {"M", dim(0, 13)}, {"N", dim(0, 13)}, {"K", dim(0, 13)}}); break;
      case 1: k = kernel_from_dataset("linear", {{"B", "1"}, {"M", dim(0, 15)}, {"N", dim(4, 14)}, {"K", dim(4, 14)}}); break;
      case 2: k = kernel_from_dataset(ew[g() % 8], {{"B", dim(0, 14)}, {"H", dim(0, 14)}}); break;
      case 3: k = kernel_from_dataset("softmax", {{"B", dim(0, 16)}, {"H", dim(2, 15)}}); break;
      case 4: k = kernel_from_dataset("ln", {{"B", dim(0, 16)}, {"H", dim(2, 14)}}); break;
      case 5: {  // a copy / transpose / gather: bytes only
        k.cls = KernelClass::memory;
        k.op = "copy";
        k.rows = std::stoll(dim(0, 14));
        k.cols = std::stoll(dim(0, 14));
        k.bytes = 8.0 * double(k.rows) * double(k.cols);
        break;
      }
      case 6: {  // a row reduction
        k.cls = KernelClass::reduce;
        k.op = "reduce_sum";
        k.rows = std::stoll(dim(0, 14));
        k.cols = std::stoll(dim(1, 14));
        k.flops = double(k.rows) * double(k.cols);
        k.bytes = 4.0 * double(k.rows) * (double(k.cols) + 1);
        break;
      }
      default: {  // a GEMM in another dtype
        k = kernel_from_dataset("linear", {{"B", "1"}, {"M", dim(0, 14)}, {"N", dim(6, 14)}, {"K", dim(6, 14)}});
        const DType t = gemm_dtypes[g() % kGemmDtypes];
        const double scale = std::max(1, dtype_bits(t == DType::tf32 ? DType::f32 : t)) / 32.0;
        k.dtype = t;
        k.bytes *= scale;
        break;
      }
    }
    out.push_back(std::move(k));
  }
  return out;
}

// `tile_on`: the GPU the tiles are chosen for (by default the one predicted).
std::vector<double> predict(const Predictor& p, const std::vector<Kernel>& ks, const Gpu& gpu,
                            const Gpu* tile_on = nullptr) {
  std::vector<Tiling> ts;
  ts.reserve(ks.size());
  for (const auto& k : ks) ts.push_back(tile_kernel(k, tile_on ? *tile_on : gpu));
  const auto pr = p.predict(ks, ts, gpu);
  std::vector<double> out;
  out.reserve(pr.size());
  for (const auto& x : pr) out.push_back(x.latency_ms);
  return out;
}

// Every FLOP rate of a GPU (SIMT and matrix units) times f.
Gpu scale_flops(Gpu g, double f) {
  for (double Gpu::*rate : kFlopRates) g.*rate *= f;
  return g;
}

// One dtype's peak times f, the GPU's other rates as they are: the rate its GEMMs' math runs
// at (a matrix unit's, or the CUDA cores' for FP32), which also changes the ratio of that
// peak to the FP32 one.
Gpu scale_dtype_peak(Gpu g, DType t, double f) {
  switch (t) {
    case DType::f32: g.fp32_gflops *= f; break;
    case DType::tf32: g.tf32_gflops *= f; break;
    case DType::f16: g.fp16_gflops *= f; break;
    case DType::bf16: g.bf16_gflops *= f; break;
    case DType::f8e4m3fn: g.fp8_gflops *= f; break;
    case DType::f4e2m1: g.fp4_gflops *= f; break;
    case DType::i8: g.int8_gops *= f; break;
    default: break;
  }
  return g;
}

// Runs `check(before, after, kernel)` over n random kernels on every GPU; returns failures.
struct Failure {
  std::string gpu;
  Kernel k;
  double before = 0, after = 0;
};

std::vector<Failure> sweep(const Predictor& p, size_t per_gpu, uint64_t seed, const std::function<Gpu(const Gpu&)>& change,
                           const std::function<bool(double, double, const Kernel&, const Gpu&)>& ok,
                           bool hold_tiles = false) {
  std::vector<Failure> bad;
  uint64_t s = seed;
  for (const Gpu& gpu : GpuDatabase::builtin().all()) {
    const auto ks = random_kernels(per_gpu, s++);
    const Gpu other = change(gpu);
    const auto a = predict(p, ks, gpu), b = predict(p, ks, other, hold_tiles ? &gpu : nullptr);
    for (size_t i = 0; i < ks.size(); ++i)
      if (!ok(a[i], b[i], ks[i], gpu)) bad.push_back({gpu.name, ks[i], a[i], b[i]});
  }
  return bad;
}

void report(const char* what, const std::vector<Failure>& bad) {
  double worst = 1;
  for (const auto& f : bad) worst = std::max(worst, std::max(f.after / f.before, f.before / f.after));
  std::map<std::string, int> ops;
  for (const auto& f : bad) ++ops[f.k.op];
  std::string hist;
  for (const auto& [o, n] : ops) hist += o + ":" + std::to_string(n) + " ";
  std::map<std::string, int> dtypes;
  for (const auto& f : bad) ++dtypes[dtype_name(f.k.dtype)];
  for (const auto& [t, n] : dtypes) hist += std::string(t) + ":" + std::to_string(n) + " ";
  if (!bad.empty()) MESSAGE(std::string(what) << ": " << bad.size() << " kernels, worst ratio " << worst << " (" << hist << ")");
  for (size_t i = 0; i < bad.size() && i < 5; ++i) {
    std::ostringstream os;
    os.precision(12);
    os << "  " << bad[i].gpu << " " << bad[i].k.op << " " << bad[i].k.gemm.batch << "x" << bad[i].k.gemm.m << "x"
       << bad[i].k.gemm.k << "x" << bad[i].k.gemm.n << " rows " << bad[i].k.rows << " cols " << bad[i].k.cols << " dtype "
       << dtype_name(bad[i].k.dtype) << ": " << bad[i].before << " -> " << bad[i].after << " ms";
    MESSAGE(os.str());
  }
  CHECK(bad.empty());
}

// 40 GPUs x 320 kernels = 12,800 kernels per property and timing convention. The sanitized
// suite (scripts/ci_sanitize.sh), which looks for memory and undefined-behaviour errors, sets
// NEUSIGHT_PROPERTY_KERNELS to draw fewer; the release suite checks the properties in full.
size_t per_gpu_kernels() {
  const char* v = std::getenv("NEUSIGHT_PROPERTY_KERNELS");
  const long n = v ? std::strtol(v, nullptr, 10) : 0;
  return n > 0 && n < 320 ? size_t(n) : 320;
}
const size_t kPerGpu = per_gpu_kernels();
// Relative tolerance. The networks are smooth but not exactly monotone in their L2-relative
// inputs: where a footprint crosses the L2 size they can move a latency by parts in 10^9 (a T4
// FP16 GEMM, 6008 x 92 x 267: 0.02281113716 ms at its L2, 0.02281113728 ms at twice it).
// Effects that matter are orders of magnitude above 1e-6.
constexpr double kTol = 1e-6;

bool not_slower(double before, double after, const Kernel&, const Gpu&) { return after <= before * (1 + kTol); }

}  // namespace

TEST_CASE("invariants: a faster spec never predicts slower (peak FLOPs, bandwidth, L2, board power)") {
  for (Timing t : {Timing::eager, Timing::device, Timing::kernel}) {
    PrecisionOptions o;
    o.timing = t;
    auto p = make_neusight_predictor("", o);
    CAPTURE(timing_name(t));
    report("peak x2", sweep(*p, kPerGpu, 11, [](const Gpu& g) { return scale_flops(g, 2); }, not_slower));
    report("peak x1.1", sweep(*p, kPerGpu, 12, [](const Gpu& g) { return scale_flops(g, 1.1); }, not_slower));
    // One dtype's peak alone (the tensor peak of a board that clocks its units higher, or
    // the CUDA cores' under a tensor-core GEMM): every kernel of every dtype, never slower.
    uint64_t seed = 40;
    for (DType t : {DType::f32, DType::tf32, DType::f16, DType::bf16, DType::f8e4m3fn, DType::f4e2m1, DType::i8})
      for (double f : {1.1, 2.0}) {
        const std::string what = std::string("peak of ") + dtype_name(t) + (f > 1.5 ? " x2" : " x1.1");
        report(what.c_str(), sweep(*p, kPerGpu, seed++, [t, f](const Gpu& g) { return scale_dtype_peak(g, t, f); }, not_slower));
      }
    report("bandwidth x2", sweep(*p, kPerGpu, 13, [](const Gpu& g) {
             Gpu h = g;
             h.mem_bw_gbps *= 2;
             return h;
           }, not_slower));
    report("bandwidth x1.1", sweep(*p, kPerGpu, 14, [](const Gpu& g) {
             Gpu h = g;
             h.mem_bw_gbps *= 1.1;
             return h;
           }, not_slower));
    report("L2 x2", sweep(*p, kPerGpu, 15, [](const Gpu& g) {
             Gpu h = g;
             h.l2_mb *= 2;
             return h;
           }, not_slower));
    report("board power x2", sweep(*p, kPerGpu, 18, [](const Gpu& g) {
             Gpu h = g;
             h.board_power_w *= 2;
             return h;
           }, not_slower));
  }
}

TEST_CASE("invariants: a GPU of the database at least as fast as another of its die in every rate never predicts slower") {
  // Boards of one die and SM count (B200 and GB200, H100 SXM and H200, the A100s) whose
  // rates (every peak, bandwidth, L2, board power) are each at least the other's: the faster
  // board runs every kernel in at most the other's time, whatever clocks their spec sheets quote.
  const auto& all = GpuDatabase::builtin().all();
  auto at_least = [](const Gpu& a, const Gpu& b) {
    return a.arch == b.arch && a.num_sm == b.num_sm && a.fp32_cores_per_sm == b.fp32_cores_per_sm &&
           a.fp32_gflops >= b.fp32_gflops && a.tf32_gflops >= b.tf32_gflops && a.fp16_gflops >= b.fp16_gflops &&
           a.bf16_gflops >= b.bf16_gflops && a.fp8_gflops >= b.fp8_gflops && a.fp4_gflops >= b.fp4_gflops &&
           a.int8_gops >= b.int8_gops && a.fp32_matrix_gflops >= b.fp32_matrix_gflops &&
           a.mem_bw_gbps >= b.mem_bw_gbps && a.l2_mb >= b.l2_mb && a.board_power_w >= b.board_power_w;
  };
  int pairs = 0;
  for (Timing t : {Timing::eager, Timing::kernel}) {
    PrecisionOptions o;
    o.timing = t;
    auto p = make_neusight_predictor("", o);
    CAPTURE(timing_name(t));
    uint64_t seed = 60;
    for (const Gpu& slow : all)
      for (const Gpu& fast : all) {
        if (&slow == &fast || !at_least(fast, slow)) continue;
        ++pairs;
        const auto ks = random_kernels(kPerGpu, seed++);
        const auto a = predict(*p, ks, slow), b = predict(*p, ks, fast);
        std::vector<Failure> bad;
        for (size_t i = 0; i < ks.size(); ++i)
          if (!not_slower(a[i], b[i], ks[i], slow)) bad.push_back({fast.name + " against " + slow.name, ks[i], a[i], b[i]});
        report("the faster board", bad);
      }
  }
  MESSAGE("pairs of boards checked: " << pairs / 2);
  CHECK(pairs >= 8);  // B200 / GB200, H100 SXM / H200 and the A100s at least
}

TEST_CASE("invariants: more SMs at fixed per-SM rates never predict slower, tiles held or chosen anew") {
  // Each SM keeps its FLOP rate, its share of the DRAM bandwidth and of the board power
  // (gpu_with_sms). The networks count waves on kFeatureSms SMs and the GPU's own waves are in
  // the law's base time, so with the same tile no kernel predicts slower. The tile of a GEMM is
  // the library's choice for the SM count (tiling.h) and may change (as may the tile of a GEMM
  // re-tiled because its dtype runs as another, BF16 on a GPU without BF16 units): a GEMM's
  // price then takes its tilings on fewer SMs too (tilings_on_fewer_sms), so none may predict
  // slower either. One SM more, 10% more and twice as many.
  auto plus1 = [](const Gpu& g) { return gpu_with_sms(g, g.num_sm + 1); };
  auto plus10 = [](const Gpu& g) { return gpu_with_sms(g, g.num_sm + std::max(1, g.num_sm / 10)); };
  auto x2 = [](const Gpu& g) { return gpu_with_sms(g, 2 * g.num_sm); };
  using Change = std::pair<const char*, std::function<Gpu(const Gpu&)>>;
  uint64_t seed = 16;
  for (Timing t : {Timing::eager, Timing::device, Timing::kernel}) {
    PrecisionOptions o;
    o.timing = t;
    auto p = make_neusight_predictor("", o);
    CAPTURE(timing_name(t));
    for (bool held : {true, false})
      for (const auto& [name, change] : {Change{"SMs +1", plus1}, Change{"SMs +10%", plus10}, Change{"SMs x2", x2}}) {
        const std::string what = std::string(name) + (held ? ", tiles held" : ", tiles chosen anew");
        report(what.c_str(), sweep(*p, kPerGpu, seed++, change, not_slower, held));
      }
  }
}

TEST_CASE("invariants: FLOPs, bandwidth, clock (and board power) all doubled run every kernel 1.6-2.0x faster") {
  // Fixed costs that are host or launch time (the eager dispatch the MLPs learned, the device
  // floor) do not scale with the GPU's rates, so the kernels checked are those whose plain
  // roofline is at least 20x the largest fixed cost (kMaxOverheadMs).
  auto p = make_neusight_predictor("", PrecisionOptions{});
  std::vector<Failure> bad;
  size_t checked = 0;
  uint64_t s = 21;
  for (const Gpu& gpu : GpuDatabase::builtin().all()) {
    // Every rate doubled, board power too: at the same energy per operation twice the rate
    // draws twice the power (a power-limited board whose clock alone is raised runs no
    // faster: precision.h, power_clock_fraction).
    Gpu fast = scale_flops(gpu, 2);
    fast.mem_bw_gbps *= 2;
    fast.boost_mhz *= 2;
    fast.board_power_w *= 2;
    const auto ks = random_kernels(kPerGpu * 6, s++);
    const auto a = predict(*p, ks, gpu), b = predict(*p, ks, fast);
    for (size_t i = 0; i < ks.size(); ++i) {
      if (roofline_ms(ks[i], gpu) < 20 * 0.05) continue;
      ++checked;
      const double speedup = a[i] / b[i];
      if (!(speedup >= 1.6 && speedup <= 2.0 * (1 + kTol))) bad.push_back({gpu.name, ks[i], a[i], b[i]});
    }
  }
  MESSAGE("kernels checked: " << checked);
  CHECK(checked > 2000 * kPerGpu / 320);
  report("all rates x2", bad);
}

TEST_CASE("invariants: a compute-bound GEMM follows the FLOP rate, not the bandwidth") {
  // Intensity at least 4x the GPU's balance at the rate the math runs: doubling the FLOPs
  // speeds it up at least 1.6x; halving the bandwidth slows it at most 1.2x.
  auto p = make_neusight_predictor("", PrecisionOptions{});
  std::vector<Failure> slow_flops, bw_bound;
  size_t checked = 0;
  std::mt19937_64 g(31);
  for (const Gpu& gpu : GpuDatabase::builtin().all()) {
    std::vector<Kernel> ks;
    while (ks.size() < kPerGpu) {
      const auto cand = random_kernels(64, g());
      for (const auto& k : cand) {
        if (k.cls != KernelClass::gemm || roofline_ms(k, gpu) < 1.0) continue;
        const double balance = math_peak_gflops(k, gpu) / gpu.mem_bw_gbps;
        if (k.flops / k.bytes >= 4 * balance) ks.push_back(k);
      }
    }
    Gpu fast = scale_flops(gpu, 2), narrow = gpu;
    narrow.mem_bw_gbps /= 2;
    const auto a = predict(*p, ks, gpu), b = predict(*p, ks, fast), c = predict(*p, ks, narrow);
    for (size_t i = 0; i < ks.size(); ++i) {
      ++checked;
      if (!(a[i] / b[i] >= 1.6)) slow_flops.push_back({gpu.name, ks[i], a[i], b[i]});
      if (!(c[i] / a[i] <= 1.2)) bw_bound.push_back({gpu.name, ks[i], a[i], c[i]});
    }
  }
  MESSAGE("compute-bound GEMMs checked: " << checked);
  report("FLOPs x2 (>= 1.6x faster)", slow_flops);
  report("bandwidth / 2 (<= 1.2x slower)", bw_bound);
}

namespace {

// Single GEMMs of `shapes` random weights (sides 2^lo to 2^hi) per GPU that `use` accepts, for
// the rows `next` steps through from 1 to `max_rows`: each step to one more row that predicts
// more than 10% faster (where `counts` says the step is checked) is a failure.
// `shapes` in the full suite, fewer in proportion where NEUSIGHT_PROPERTY_KERNELS draws fewer
// kernels (at least one).
int scaled_shapes(int shapes) { return std::max<int>(1, static_cast<int>(shapes * kPerGpu / 320)); }

struct RowSteps {
  size_t pairs = 0, over_2 = 0;
  std::vector<Failure> bad;
};
RowSteps row_steps(uint64_t seed, double lo, double hi, int shapes, const std::string& dtype, int64_t max_rows,
                   const std::function<int64_t(int64_t)>& next, const std::function<bool(const Gpu&)>& use,
                   const std::function<bool(int64_t)>& counts) {
  auto p = make_neusight_predictor("", PrecisionOptions{Timing::kernel});
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  RowSteps r;
  for (const Gpu& gpu : GpuDatabase::builtin().all()) {
    if (!use(gpu)) continue;
    for (int shape = 0; shape < shapes; ++shape) {
      const int64_t n = std::llround(std::exp2(u(g))), k = std::llround(std::exp2(u(g)));
      std::vector<Kernel> ks;
      for (int64_t m = 1; m <= max_rows; m = next(m))
        ks.push_back(kernel_from_dataset("linear", {{"B", "1"},
                                                    {"M", std::to_string(m)},
                                                    {"N", std::to_string(k)},
                                                    {"K", std::to_string(n)},
                                                    {"dtype", dtype}}));
      const auto lat = predict(*p, ks, gpu);
      for (size_t i = 1; i < ks.size(); ++i) {
        ++r.pairs;
        if (lat[i] < lat[i - 1] * 0.98) ++r.over_2;
        if (lat[i] < lat[i - 1] * 0.90 && counts(ks[i - 1].gemm.m)) r.bad.push_back({gpu.name, ks[i], lat[i - 1], lat[i]});
      }
    }
  }
  MESSAGE("row steps checked: " << r.pairs << ", faster by more than 2%: " << r.over_2);
  return r;
}

}  // namespace

TEST_CASE("invariants: a single 16-bit GEMM on matrix units never predicts much faster with more rows") {
  // More tokens through the same weights: the library runs them on whichever of its tiles is
  // fastest (tiling.h tile_alternatives), and no GEMM runs faster than its operands' stream
  // (precision.h weight-streaming law), so one more row never buys a faster kernel but at the
  // seam between a skinny GEMM's stream price and the tiled price (at most 10%).
  const RowSteps r = row_steps(
      41, 8, 14, scaled_shapes(6), "fp16", 8192, [](int64_t m) { return m + (m < 64 ? 1 : m < 512 ? 8 : 64); },
      [](const Gpu& gpu) { return has_matrix_units(gpu, DType::f16); }, [](int64_t) { return true; });
  CHECK(r.pairs > 10000 * scaled_shapes(6) / 6);
  report("one more row", r.bad);
}

TEST_CASE("invariants: an FP32 GEMV on CUDA cores never predicts slower than the tiled GEMM of a few more rows") {
  // One to three tokens run as a GEMV (a weight stream at the device floor), four and more on
  // the networks' tiles: the seam between the two prices must not make a GEMV slower than the
  // tiled GEMM of more rows (at most 10%, as for matrix units above). Above the seam the learned
  // SIMT tile rule (tiling.h) answers rows below the FP32 data's smallest (512) with steps of
  // its own, which this test does not cover.
  const RowSteps r = row_steps(
      43, 6, 14, scaled_shapes(60), "fp32", 8, [](int64_t m) { return m + 1; }, [](const Gpu&) { return true; },
      [](int64_t m) { return m < 4; });
  CHECK(r.pairs > 10000 * scaled_shapes(60) / 60);
  report("a GEMV against more rows", r.bad);
}
