// neusight_predictor.cpp - the trained tile-utilization predictor: batched per class, roofline-bounded.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "neusight/dataset.h"
#include "neusight/neusight_model.h"
#include "neusight/precision.h"
#include "neusight/predictor.h"

namespace neusight {
namespace {

// L2 sizes (MB) of the GPUs a model set was trained on (its info["devices"]), ascending.
std::vector<double> trained_l2(const ModelSet& m) {
  std::vector<double> out;
  auto it = m.info.find("devices");
  if (it == m.info.end()) return out;
  for (const std::string& name : split_csv_line(it->second))
    if (const Gpu* g = GpuDatabase::builtin().find(name))
      if (std::find(out.begin(), out.end(), g->l2_mb) == out.end()) out.push_back(g->l2_mb);
  std::sort(out.begin(), out.end());
  return out;
}

class NeusightPredictor final : public Predictor {
  // A GEMM's tilings on GPUs of its kind with fewer SMs, by shape and dtype (other_tilings).
  using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, int>;
  using TilingMemo = std::map<ShapeKey, std::vector<FewerSmTiling>>;

 public:
  NeusightPredictor(ModelSet m, PrecisionOptions o)
      : m_(std::move(m)), o_(o), paper_(m_.classes[0].formulation == Formulation::paper) {
    // The published formulation sees the GPU's own L2 and has no fixed cost.
    if (!paper_) trained_l2_ = trained_l2(m_);
  }

  // GEMM inputs carry neither the L2 size nor the GPU's SM count (kFeatureSms). The streaming
  // classes' networks (and the streaming alternative of matrix-unit GEMMs) see the L2 size, and
  // need not be monotone in it: they are evaluated at
  // the L2 sizes of the training GPUs at or above this GPU's (the largest when it exceeds
  // them all: the networks clamp there anyway), and the latency is the largest answer, the
  // least envelope above the networks' answers at those sizes that does not grow with the L2.
  // A GPU with an L2 beyond every training GPU's (H100, L4, B200) keeps the networks' answer.
  std::vector<Prediction> predict(const std::vector<Kernel>& kernels, const std::vector<Tiling>& tilings,
                                  const Gpu& gpu) const override {
    if (tilings.size() != kernels.size()) throw RuntimeError("predict: one tiling per kernel expected");
    std::vector<double> l2s;  // trained_l2_ is ascending
    for (double t : trained_l2_)
      if (t >= gpu.l2_mb) l2s.push_back(t);
    if (l2s.empty()) l2s.push_back(trained_l2_.empty() ? gpu.l2_mb : trained_l2_.back());
    TilingMemo memo;
    std::vector<Prediction> out = predict_at(kernels, tilings, gpu, l2s.front(), memo);
    if (l2s.size() == 1) {
      bound_by_host(out);
      return out;
    }
    std::vector<size_t> idx;
    std::vector<Kernel> ks;
    std::vector<Tiling> ts;
    for (size_t i = 0; i < kernels.size(); ++i) {
      UtilClass c;
      if (!util_class_of(kernels[i], c)) continue;
      // GEMMs only where they have a streaming alternative, whose inputs see the L2.
      if (c == UtilClass::gemm) {
        const auto [run, t] = as_run(kernels[i], tilings[i], gpu);
        if (streams_from(run, t, gpu, offered_tiles(run, t, gpu), fewer_sm_tilings(run, gpu, memo)) == 0) continue;
      }
      idx.push_back(i);
      ks.push_back(kernels[i]);
      ts.push_back(tilings[i]);
    }
    for (size_t v = 1; v < l2s.size() && !idx.empty(); ++v) {
      const std::vector<Prediction> o = predict_at(ks, ts, gpu, l2s[v], memo);
      for (size_t j = 0; j < idx.size(); ++j)
        if (o[j].latency_ms > out[idx[j]].latency_ms) out[idx[j]] = o[j];
    }
    bound_by_host(out);
    return out;
  }

  // Device timing: each kernel's kernel-timing time, bounded by the host's dispatch of its op
  // (precision.h kHostDispatchMs) as the law combines the dispatch; the interval's bounds by
  // the fastest and the slowest measured host.
  void bound_by_host(std::vector<Prediction>& out) const {
    if (paper_ || o_.timing != Timing::device) return;
    for (Prediction& p : out) {
      if (!(p.latency_ms > 0)) continue;
      p.host_bound = p.latency_ms < o_.host_dispatch_ms;
      p.latency_ms = std::hypot(o_.host_dispatch_ms, p.latency_ms);
      if (p.latency_high_ms > 0) {  // without an interval low_ms() and high_ms() are the latency
        p.latency_low_ms = std::hypot(o_.host_dispatch_low_ms, p.latency_low_ms);
        p.latency_high_ms = std::hypot(o_.host_dispatch_high_ms, p.latency_high_ms);
      }
      p.utilization = p.roofline_ms / p.latency_ms;
    }
  }

  std::vector<Prediction> predict_at(const std::vector<Kernel>& kernels, const std::vector<Tiling>& tilings,
                                     const Gpu& gpu, double feature_l2_mb, TilingMemo& memo) const {
    std::vector<Prediction> out(kernels.size());
    std::vector<double> sd(kernels.size(), 0.0);  // uncertainty in natural-log units (neusight_model.h)
    // The part of a latency the networks do not predict (FixedPart): the interval leaves it be.
    std::vector<FixedPart> fixed(kernels.size());
    const ClassBatches b = roofline_and_features(kernels, tilings, gpu, feature_l2_mb, memo, out);
    apply_networks(b, out, sd, fixed);
    // A latency-limited kernel priced by its memory parallelism alone (device or kernel timing, no
    // network): its class's spread at its roofline time, which the networks' kernels of the
    // same class carry (an interval of zero width would claim an exact answer).
    for (size_t i = 0; i < out.size(); ++i) {
      UtilClass c;
      if (sd[i] > 0 || paper_ || memory_parallelism_ms(kernels[i], gpu) < 0 || !util_class_of(kernels[i], c) ||
          m_.classes[int(c)].empty())
        continue;
      sd[i] = interval_log_sd_at(m_.classes[int(c)], out[i].roofline_ms);
    }
    // The 80% interval: the predicted part of the latency times exp(-+ z sd), recombined with
    // the fixed part as the latency was; never below the roofline.
    for (size_t i = 0; i < out.size(); ++i) {
      Prediction& p = out[i];
      const double w = std::exp(kIntervalZ * sd[i]);
      const FixedPart& f = fixed[i];
      const double varied = f.ms <= 0  ? p.latency_ms
                            : f.added ? std::max(0.0, p.latency_ms - f.ms)
                                      : std::sqrt(std::max(0.0, p.latency_ms * p.latency_ms - f.ms * f.ms));
      const double wf = std::exp(kIntervalZ * f.log_sd);
      p.latency_low_ms = std::max(p.roofline_ms, f.with(varied / w, 1 / wf));
      p.latency_high_ms = f.with(varied * w, wf);
    }
    return out;
  }
  std::string name() const override { return formulation_name(paper_ ? Formulation::paper : Formulation::neusight); }
  double simt_clock_fraction(const Gpu& gpu) const override { return paper_ ? 1.0 : power_clock_fraction(gpu); }

 private:
  // The kernels the networks price, by class: their indices and feature rows.
  struct ClassBatches {
    std::vector<size_t> members[kNumUtilClasses];
    std::vector<TileFeatures> feats[kNumUtilClasses];
    // Per member: a library GEMM on matrix-unit tiles (its fixed time, kGemmKernelFixedUs).
    std::vector<char> library_gemm[kNumUtilClasses];
    // Per member: the weight-streaming law of its operands (library GEMMs on matrix units; 0
    // for the others), below which no such GEMM runs.
    std::vector<double> stream_floor_ms[kNumUtilClasses];
    // Per member: the alternative tiling it prices (an index into `alternatives`; -1: the
    // tiling given). A single GEMM on tensor-core tiles has one member per tile the library
    // offers (tile_alternatives), consecutive in `members`.
    std::vector<int> alternative[kNumUtilClasses];
    std::vector<Tiling> alternatives;
    // Per alternative: the SM count of the GPU of this kind it is priced on where that GPU has
    // fewer SMs (a bound, tilings_on_fewer_sms), 0 where it is a tile the library offers here.
    std::vector<int> alternative_fewer_sms;
    // Library GEMMs on matrix units that are not skinny: the stream of their operands (the
    // skinny ones' price, streaming_alternative), below which no tiling runs.
    std::vector<size_t> floor_members;
    std::vector<TileFeatures> floor_feats;
    // Skinny matrix-unit GEMMs and their weight-streaming alternative (streaming_alternative).
    std::vector<size_t> gemv_members;
    std::vector<TileFeatures> gemv_feats;
    std::vector<double> gemv_law_ms;  // weight_stream_ms of each (precision.h)
  };

  static constexpr int64_t kSimtGemvRows = 4;

  // Skinny: the output's rows (or columns) fill at most a quarter of the tensor-core tile along
  // them, so that three quarters of its MMAs are padding; libraries switch to GEMV and skinny
  // split-K kernels there.
  static bool skinny(const Kernel& run, const Tiling& t) {
    return 4 * run.gemm.m <= t.config.tb_m || 4 * run.gemm.n <= t.config.tb_n;
  }

  // The tiles the library offers a single tensor-core GEMM that is not skinny for its own tile
  // (tile_alternatives), when it runs on the fastest of them (fastest_tile); empty otherwise.
  // Strided batched GEMMs keep the tile cost model's choice: batched kernels come from a
  // smaller set, and on the MI100's traced BMMs (FP32 on matrix cores) the least of them was
  // 0.64x of the measured time where the chosen tile gives 0.81x (bench/e2e_accuracy).
  std::vector<Tiling> offered_tiles(const Kernel& run, const Tiling& t, const Gpu& gpu) const {
    if (!offers_tiles(run, t)) return {};
    return tile_alternatives(run, gpu);
  }
  bool offers_tiles(const Kernel& run, const Tiling& t) const {
    return o_.fastest_tile && run.cls == KernelClass::gemm && t.config.tensor_core && !run.gemm.batched &&
           run.gemm.batch <= 1 && !skinny(run, t);
  }

  // A GEMM's tilings on GPUs of this one's kind with fewer SMs (tiling.h tilings_on_fewer_sms,
  // with the tiles offered there), once per shape and dtype in a call (`memo`); none in the
  // published formulation.
  const std::vector<FewerSmTiling>& fewer_sm_tilings(const Kernel& run, const Gpu& gpu, TilingMemo& memo) const {
    static const std::vector<FewerSmTiling> none;
    if (paper_ || !o_.fewer_sm_tilings || run.cls != KernelClass::gemm) return none;
    const GemmShape& s = run.gemm;
    const ShapeKey key{s.m, s.n, s.k, s.batch, s.batched, int(run.dtype)};
    auto it = memo.find(key);
    if (it == memo.end())
      it = memo.emplace(key, tilings_on_fewer_sms(run, gpu, [&](const Tiling& c) { return offers_tiles(run, c); })).first;
    return it->second;
  }

  // The fewest SMs of this GPU's kind (gpu_with_sms) on which a kernel (as it runs) has the
  // weight-streaming alternative below, 0 where it has it on none up to this GPU's: a skinny
  // GEMM on matrix units, in this formulation, with streaming networks to price it. A GEMM
  // skinny for any tile offered is one: the library then has its streaming kernel. `t` and
  // `offered` are its tilings on this GPU, `fewer` those on fewer SMs: a GPU of more SMs
  // streams it wherever one of fewer does.
  int streams_from(const Kernel& run, const Tiling& t, const Gpu& gpu, const std::vector<Tiling>& offered,
                   const std::vector<FewerSmTiling>& fewer) const {
    if (paper_ || run.cls != KernelClass::gemm || m_.classes[int(UtilClass::elementwise)].empty()) return 0;
    // On CUDA cores: a GEMM of fewer than kSimtGemvRows rows is a GEMV (cuBLAS's gemv kernels
    // for PyTorch's one-token linear; its batched GEMV for a decode step's attention products
    // over the cache), far below the FP32 kernel data's smallest (512 rows in neusight-data's
    // linear rows, 7 in its batched products, whose reductions go down to 1; 16 in
    // DeepBench's): the stream of its operands prices it.
    if (!has_matrix_units(gpu, run.dtype)) return run.gemm.m < kSimtGemvRows ? 1 : 0;
    // A convolution runs on the convolution library's implicit-GEMM kernels, which have no GEMV
    // path: it picks a tile as narrow as the channels (64 output channels, a 64-wide tile), so a
    // convolution streams only where it is skinny for its own tile.
    const bool conv = run.op == "conv";
    int from = 0;
    auto on = [&](const std::vector<int>& sms) {
      if (!sms.empty() && (from == 0 || sms.front() < from)) from = sms.front();
    };
    for (const FewerSmTiling& f : fewer)
      if (skinny(run, f.tiling)) {
        on(f.chosen_on);
        if (!conv) on(f.offered_on);
      }
    if (from == 0 && (skinny(run, t) || (!conv && std::any_of(offered.begin(), offered.end(),
                                                              [&](const Tiling& a) { return skinny(run, a); }))))
      from = gpu.num_sm;
    return from;
  }

  // The kernel as its math runs on this GPU (precision.h) and its tiling (tiled anew when the
  // dtype changed).
  static std::pair<Kernel, Tiling> as_run(const Kernel& k, const Tiling& t, const Gpu& gpu) {
    Kernel run = kernel_as_run(k, gpu);
    Tiling rt = run.dtype == k.dtype ? t : tile_kernel(run, gpu);
    return {std::move(run), std::move(rt)};
  }

  // The GPU's CUDA cores alone: no matrix unit (FP16 at the SIMT FP16 rate where there is one,
  // every other dtype at the FP32 rate).
  static Gpu cuda_cores(const Gpu& gpu) {
    Gpu cuda = gpu;
    cuda.tf32_gflops = cuda.fp16_gflops = cuda.bf16_gflops = cuda.fp8_gflops = cuda.int8_gops = 0;
    cuda.fp32_matrix_gflops = 0;
    return cuda;
  }

  // A skinny GEMM on matrix units runs as a kernel that streams its operands once (cuBLAS's
  // gemv and its split-K kernels for a few rows; vLLM's decode GEMMs): the tiled kernel's MMAs
  // would be mostly padding and its grid would leave SMs idle. Its time is the weight-streaming
  // law's (precision.h: what the libraries' kernels measurably reach, less of the bandwidth
  // than an elementwise stream, plus a split-K reduction), never below what the streaming
  // networks give a reduction over the same bytes (eager timing: with the dispatch); its math
  // runs on the matrix units at their sustained rate (split-K GEMMs with a short tile; for a
  // few rows it is far below the stream). The GEMM networks never saw a GEMM of so few rows (no FP32
  // training row has fewer than 4), so they are not asked for a tiled answer.
  // `cuda` is cuda_cores() of the GPU.
  TileFeatures streaming_alternative(const Kernel& run, const Gpu& cuda, double feature_l2_mb) const {
    Kernel s = run;
    s.cls = KernelClass::reduce;
    s.op = "gemv";
    s.inputs = 1;
    // One row per element of the output's long side, as long as the longer of the reduction and
    // the output's short side: a few tokens through wide weights stream the weights' rows (n of
    // k), a wide activation through a few output columns the activation's rows (m of k), and a
    // reduction shorter than the output's short side writes output rows (m of n).
    s.rows = std::max<int64_t>(1, run.gemm.batch * std::max(run.gemm.m, run.gemm.n));
    s.cols = std::max<int64_t>(1, std::max(run.gemm.k, std::min(run.gemm.m, run.gemm.n)));
    // The networks price the stream of these bytes (one add per weight element, as the
    // reductions they learned); the GEMM's math is the law's other bound.
    s.flops = double(s.rows) * double(s.cols);
    TileFeatures f = tile_features(UtilClass::elementwise, s, tile_kernel(s, cuda), cuda, feature_l2_mb);
    f.device_only = device_only();
    return f;
  }

  // The feature rows of kernel `i` (class `c`, as it runs `run` on tiling `t`, on `run_gpu`,
  // its own row `f`): a GEMM's other tilings beside it, or its weight stream.
  void add_rows(ClassBatches& b, size_t i, UtilClass c, const Kernel& run, const Tiling& t, const Gpu& run_gpu,
                const TileFeatures& f, const Gpu& gpu, const Gpu& cuda, double feature_l2_mb, TilingMemo& memo) const {
    const bool device = o_.timing != Timing::eager;
    // A skinny matrix-unit GEMM is priced as its weight stream (apply_networks); the GEMM
    // networks price the others.
    const bool library = on_matrix_units(run, t, gpu) && !is_flash_gemm(run);
    const std::vector<Tiling> offered = offered_tiles(run, t, gpu);
    const std::vector<FewerSmTiling>& fewer = fewer_sm_tilings(run, gpu, memo);
    const int stream_from = streams_from(run, t, gpu, offered, fewer);
    bool streamed = false;
    if (stream_from > 0) {
      const TileFeatures s = streaming_alternative(run, cuda, feature_l2_mb);
      if (s.base_ms > 0) {
        b.gemv_members.push_back(i);
        b.gemv_feats.push_back(s);
        b.gemv_law_ms.push_back(gemv_law_ms(run, gpu, run_gpu));
        streamed = true;
      }
    }
    // No library GEMM on matrix units runs faster than the weight-streaming law of its
    // operands (precision.h): a floor for the tiled answer where the operands' stream, not
    // the math, is the time (decode and small-batch GEMMs just above the skinny ones).
    const double floor_ms = library ? weight_stream_ms(run, gpu, math_peak_gflops(run, run_gpu)) : 0.0;
    auto add = [&](const TileFeatures& row, int alt) {
      b.members[int(c)].push_back(i);
      b.feats[int(c)].push_back(row);
      b.library_gemm[int(c)].push_back(library);
      b.stream_floor_ms[int(c)].push_back(floor_ms);
      b.alternative[int(c)].push_back(alt);
    };
    // Another tiling, priced on this GPU's kind with `sms` SMs.
    auto add_tiling = [&](const Tiling& alt, int sms) {
      const Gpu on = sms == gpu.num_sm ? gpu : gpu_with_sms(gpu, sms);
      const Gpu alt_gpu = gpu_as_run(run, alt, on, o_.operand_port_weight, o_.matrix_fraction);
      TileFeatures fa = features(c, run, alt, alt_gpu, feature_l2_mb);
      if (!(fa.base_ms > 0)) return;
      fa.device_only = f.device_only;
      if (device) fa.waves = f.waves;
      add(fa, int(b.alternatives.size()));
      b.alternatives.push_back(alt);
      b.alternative_fewer_sms.push_back(sms == gpu.num_sm ? 0 : sms);
    };
    // A GEMV on CUDA cores is also priced on its tiles (its own and, below, those of fewer
    // SMs): cuBLAS's sgemv reads the weights no slower than the tiled sgemm of a few more rows
    // does, so the faster is taken (apply_networks keeps the tiled answer where it is shorter).
    const bool simt_gemv = streamed && !library && !has_matrix_units(gpu, run.dtype);
    if (simt_gemv) add(f, -1);
    if (!streamed) {
      add(f, -1);
      // A single GEMM runs on the tile the library's heuristic expects fastest among those
      // it offers (offered_tiles): the networks price each, the latency is the least.
      if (library)
        for (const Tiling& alt : offered)
          if (!same_grid(alt, t)) add_tiling(alt, gpu.num_sm);
    }
    // Nor does a GEMM run slower than on a GPU of this one's kind with fewer SMs: this GPU
    // runs each grid it gets there (tilings_on_fewer_sms) in no more waves, so each is priced
    // on the most SMs it is chosen or offered on (below those that stream the GEMM, when this
    // GPU does), and more SMs at the same per-SM rates never predict slower for a change of
    // tile.
    for (const FewerSmTiling& fs : fewer) {
      int sms = 0;
      for (const std::vector<int>* on : {&fs.chosen_on, &fs.offered_on}) {
        if (on == &fs.offered_on && !library) break;
        auto end = streamed && !simt_gemv ? std::lower_bound(on->begin(), on->end(), stream_from) : on->end();
        if (end != on->begin()) sms = std::max(sms, *(end - 1));
      }
      if (sms == 0) continue;
      if ((!streamed || simt_gemv) && (same_grid(fs.tiling, t) || std::any_of(offered.begin(), offered.end(), [&](const Tiling& a) {
                          return library && same_grid(fs.tiling, a);
                        })))
        continue;
      add_tiling(fs.tiling, sms);
    }
    const bool tiled = !b.members[int(c)].empty() && b.members[int(c)].back() == i;
    if (library && tiled) {
      const TileFeatures fs = streaming_alternative(run, cuda, feature_l2_mb);
      if (fs.base_ms > 0) {
        b.floor_members.push_back(i);
        b.floor_feats.push_back(fs);
      }
    }
  }

  // Every kernel's roofline prediction into `out`, and the feature rows of those the
  // networks refine.
  ClassBatches roofline_and_features(const std::vector<Kernel>& kernels, const std::vector<Tiling>& tilings,
                                     const Gpu& gpu, double feature_l2_mb, TilingMemo& memo,
                                     std::vector<Prediction>& out) const {
    ClassBatches b;
    const Gpu cuda = cuda_cores(gpu);
    const bool device = o_.timing != Timing::eager;
    const double bw = gpu.mem_bw_gbps * 1e9;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const Kernel& k = kernels[i];
      Prediction& p = out[i];
      p.roofline_ms = roofline_ms(k, gpu);
      const double peak = math_peak_gflops(k, gpu) * 1e9;
      p.compute_bound = peak > 0 && bw > 0 && k.flops / peak >= k.bytes / bw;
      p.latency_ms = p.roofline_ms;
      p.utilization = p.latency_ms > 0 ? 1.0 : 0.0;
      // A latency-limited kernel (Kernel::access, precision.h): its code is not the vectorized
      // library kernels the MLPs learned, so off eager timing it is the memory-parallelism
      // time plus the device floor; in eager timing that is a lower bound on the law's
      // prediction (which carries the framework's dispatch), applied below.
      const double mp = memory_parallelism_ms(k, gpu);
      if (mp >= 0) {
        p.latency_ms = std::max(p.roofline_ms, o_.device_floor_ms + mp);
        p.utilization = p.roofline_ms > 0 ? p.roofline_ms / p.latency_ms : 0.0;
        if (device) continue;
      }
      UtilClass c;
      if (!util_class_of(k, c) || tilings[i].tiles <= 0 || p.roofline_ms <= 0) continue;
      // A row kernel over rows of no elements (a reduction over a dim bound to 0 writes its
      // output and reads nothing) is its traffic: no network saw a row of length 0.
      if (k.cls != KernelClass::gemm && (k.rows == 0 || k.cols == 0)) continue;
      // The published method prices memory-only ops (copies, gathers, concatenations) as
      // bytes / bandwidth: the roofline set above.
      if (paper_ && k.cls == KernelClass::memory) continue;
      const ClassModel& cm = m_.classes[int(c)];
      if (cm.empty()) continue;
      // Precision (precision.h): the MLPs see the kernel as its math runs on this GPU.
      const auto [run, t] = as_run(k, tilings[i], gpu);
      const Gpu run_gpu = gpu_as_run(run, t, gpu, o_.operand_port_weight, o_.matrix_fraction);
      TileFeatures f = features(c, run, t, run_gpu, feature_l2_mb);
      if (!(f.base_ms > 0)) continue;
      // Device and kernel timing (precision.h): the kernel's device time alone, without the
      // dispatch its eager timing is bounded by.
      f.device_only = device_only();
      // Device timing: the law without its alpha / waves term (utilization gamma). In the
      // eager training data a kernel of few waves carries the framework's per-launch cost,
      // and what the learned fixed cost did not absorb of it the law puts in alpha / waves,
      // which vanishes only for many waves (a 1-wave A100 RMSNorm of 8-64 rows: 19-33 us
      // predicted with the term, 4-8 us measured by Vidur). Back to back on the device the
      // launch overlaps the kernel before it, and the ramp-up and drain of one launch are
      // the device floor that replaces the dispatch below; wave quantization stays in
      // base_ms (waves x per-wave time).
      if (device) f.waves = std::numeric_limits<double>::infinity();
      add_rows(b, i, c, run, t, run_gpu, f, gpu, cuda, feature_l2_mb, memo);
    }
    return b;
  }

  // Each class's networks over its feature rows: the latencies into `out`, the spread into `sd`.
  // A fixed time in a kernel's latency that no network predicts: a library GEMM's prologue and
  // epilogue (added to its tiles' time) or, off eager timing, the launch-to-completion floor
  // (joined by root sum of squares). It varies by its class's calibrated spread
  // (interval_log_sd_at) alone, the rest by the network's too: a one-element kernel at the
  // floor is not a thousand times uncertain because its network's input lies far below the
  // training range.
  struct FixedPart {
    double ms = 0;
    bool added = false;
    double log_sd = 0;
    double with(double varied, double scale) const {
      const double x = ms * scale;
      return ms <= 0 ? varied : added ? x + varied : std::hypot(x, varied);
    }
  };

  void apply_networks(const ClassBatches& b, std::vector<Prediction>& out, std::vector<double>& sd,
                      std::vector<FixedPart>& fixed_part) const {
    const ClassModel& ew = m_.classes[int(UtilClass::elementwise)];
    // The operands' stream of each tiled library GEMM, priced as a skinny GEMM's (below).
    std::vector<double> stream_ms(out.size(), 0.0);
    // Per kernel: priced on a tiling the library runs on this GPU (not only on fewer SMs').
    std::vector<char> own_tiled(out.size(), 0);
    if (!b.floor_members.empty()) {
      const std::vector<double> lat = predict_latency_ms(ew, b.floor_feats);
      for (size_t j = 0; j < b.floor_members.size(); ++j)
        stream_ms[b.floor_members[j]] = device_only() ? std::hypot(o_.device_floor_ms, lat[j]) : lat[j];
    }
    for (int c = 0; c < kNumUtilClasses; ++c) {
      if (b.members[c].empty()) continue;
      std::vector<char> extra;
      std::vector<double> own_sd;
      const std::vector<double> lat = predict_latency_ms(m_.classes[c], b.feats[c], &extra, &own_sd);
      // The law (neusight_model.h) bounds a kernel by the dispatch (eager timing) or gives its
      // device time alone (device and kernel timing), which the launch-to-completion floor
      // bounds as the dispatch bounds eager timings.
      // A kernel with alternative tilings takes the fastest (its members are consecutive).
      std::vector<double> bound;  // per member: the kernel's bounds before the networks
      for (size_t j = 0; j < b.members[c].size(); ++j) bound.push_back(out[b.members[c][j]].latency_ms);
      // The tile the prediction reports is the one the library runs on this GPU: the cost
      // model's (the tiling given, first), unless another tile it offers is priced faster by
      // more than the networks' own spread on the given one (a closer price is a tie the
      // networks do not resolve, and the cost model's tile vocabulary knows what cuBLAS and
      // CUTLASS prefer). The latency is the least price whatever the tile; the bounds of GPUs
      // with fewer SMs may price the kernel faster but are not a tile it runs here.
      double report_best = 0;
      bool report_seen = false;
      for (size_t j = 0; j < b.members[c].size(); ++j) {
        Prediction& p = out[b.members[c][j]];
        const bool first = j == 0 || b.members[c][j - 1] != b.members[c][j];
        const double class_sd = interval_log_sd_at(m_.classes[c], p.roofline_ms);
        const double sd_j = std::hypot(class_sd, own_sd[j]);
        // A library GEMM on matrix units adds its fixed time (precision.h kGemmKernelFixedUs:
        // prologue, epilogue, launch) to its tiles' time, in place of the device floor (and on
        // top of the eager dispatch, which covers none of it); the FP32 networks learned the
        // fixed cost of FP32 tiles, not of tiles 8-16x faster.
        const double fixed = b.library_gemm[c][j] != 0 ? kGemmKernelFixedUs * 1e-3 : 0.0;
        const double l = fixed > 0 ? lat[j] + fixed : device_only() ? std::hypot(o_.device_floor_ms, lat[j]) : lat[j];
        // Never faster than the roofline (nor, eager, than a latency-limited kernel's
        // memory-parallelism time, set above).
        const double latency =
            std::max({l, p.roofline_ms, bound[j], b.stream_floor_ms[c][j], stream_ms[b.members[c][j]]});
        const int alt = b.alternative[c][j];
        const int fewer_sms = alt >= 0 ? b.alternative_fewer_sms[size_t(alt)] : 0;
        if (first) report_seen = false;
        if (fewer_sms == 0 && (alt < 0 || !report_seen || latency < report_best)) {
          report_best = alt < 0 ? latency * std::exp(-own_sd[j]) : latency;
          report_seen = true;
          own_tiled[b.members[c][j]] = 1;
          if (alt >= 0) p.tiling = b.alternatives[size_t(alt)];
          else p.tiling.reset();
        }
        if (!first && !(latency < p.latency_ms)) continue;
        p.latency_ms = latency;
        p.utilization = p.roofline_ms / p.latency_ms;
        p.extrapolated = extra[j] != 0;
        sd[b.members[c][j]] = sd_j;
        fixed_part[b.members[c][j]] = fixed > 0 ? FixedPart{fixed, true, class_sd}
                                      : device_only() ? FixedPart{o_.device_floor_ms, false, class_sd}
                                                      : FixedPart{};
        p.fewer_sm_bound = fewer_sms;
      }
    }
    // Skinny matrix-unit GEMMs: the weight stream, in place of a tiled answer on this GPU (but
    // for the tilings of a GPU of its kind with fewer SMs on which it does not stream, priced
    // above).
    if (b.gemv_members.empty()) return;
    std::vector<char> tiled(out.size(), 0);
    for (int c = 0; c < kNumUtilClasses; ++c)
      for (size_t i : b.members[c]) tiled[i] = 1;
    std::vector<char> extra;
    std::vector<double> own_sd;
    const std::vector<double> lat = predict_latency_ms(ew, b.gemv_feats, &extra, &own_sd);
    for (size_t j = 0; j < b.gemv_members.size(); ++j) {
      Prediction& p = out[b.gemv_members[j]];
      // The streaming networks know what a stream of these bytes costs where the data came
      // from (eager: with the dispatch); the weight-streaming law (precision.h) what the
      // libraries' GEMV and split-K kernels reach, below an elementwise stream's bandwidth.
      const double net = device_only() ? std::hypot(o_.device_floor_ms, lat[j]) : lat[j];
      const double l = std::max({p.roofline_ms, net, b.gemv_law_ms[j]});
      if (tiled[b.gemv_members[j]] && p.latency_ms <= l) {
        // Bounded by a tiling of a GPU with fewer SMs, it still streams here.
        if (!own_tiled[b.gemv_members[j]]) p.streamed = true;
        continue;
      }
      fixed_part[b.gemv_members[j]] = FixedPart{};
      p.tiling.reset();
      p.fewer_sm_bound = 0;
      p.latency_ms = l;
      p.utilization = p.roofline_ms / l;
      p.extrapolated = extra[j] != 0;
      p.streamed = true;
      sd[b.gemv_members[j]] = std::hypot(interval_log_sd_at(ew, p.roofline_ms), own_sd[j]);
    }
  }

  // The weight-streaming law (precision.h) of a streamed GEMM. On matrix units with its
  // intercept, which was measured on those libraries' split-K GEMV kernels (their partials'
  // reduction and second launch) and which their tiled GEMMs pay as kGemmKernelFixedUs. A GEMV
  // on CUDA cores (cuBLAS's sgemv: one launch, no split-K workspace) pays what the FP32 GEMMs
  // beside it pay instead, the device floor off eager timing (the networks learned their fixed
  // cost): with the intercept a one-token FP32 projection of small weights took 4.7 us where
  // the same projection of four tokens, tiled, takes 2.7 us.
  double gemv_law_ms(const Kernel& run, const Gpu& gpu, const Gpu& run_gpu) const {
    const double math = math_peak_gflops(run, run_gpu);
    // A library GEMM's fixed time (kGemmKernelFixedUs) is the matrix libraries'; FlashAttention
    // of a few queries is one kernel of its own, at the device floor as its tiled form is.
    if (has_matrix_units(gpu, run.dtype) && !is_flash_gemm(run)) return weight_stream_ms(run, gpu, math);
    const double law = weight_stream_ms(run, gpu, math, 0.0);
    return device_only() ? std::hypot(o_.device_floor_ms, law) : law;
  }

  // Off eager timing the networks give a kernel's device time alone (the published
  // formulation has no dispatch to leave out).
  bool device_only() const { return !paper_ && o_.timing != Timing::eager; }

  TileFeatures features(UtilClass c, const Kernel& k, const Tiling& t, const Gpu& gpu, double feature_l2_mb) const {
    return paper_ ? paper_tile_features(k, t, gpu) : tile_features(c, k, t, gpu, feature_l2_mb);
  }

  ModelSet m_;
  PrecisionOptions o_;
  bool paper_ = false;              // the published formulation (neusight_model.h)
  std::vector<double> trained_l2_;  // L2 sizes (MB) of the training GPUs, ascending
};

}  // namespace

std::unique_ptr<Predictor> make_neusight_predictor(const std::string& weights_dir, const PrecisionOptions& options) {
  const std::string dir = weights_dir.empty() ? data_dir() + "/weights" : weights_dir;
  return std::make_unique<NeusightPredictor>(load_model_set(dir), options);
}

const char* predictor_kind_name(PredictorKind k) {
  switch (k) {
    case PredictorKind::neusight: return "neusight";
    case PredictorKind::neusight_paper: return "neusight-paper";
    case PredictorKind::roofline: return "roofline";
  }
  return "neusight";
}

bool parse_predictor_kind(const std::string& name, PredictorKind& out) {
  for (PredictorKind k : {PredictorKind::neusight, PredictorKind::neusight_paper, PredictorKind::roofline})
    if (name == predictor_kind_name(k)) {
      out = k;
      return true;
    }
  return false;
}

bool is_predictor_name(const std::string& name) {
  PredictorKind k;
  return parse_predictor_kind(name, k);
}

std::unique_ptr<Predictor> make_predictor(PredictorKind kind, const std::string& weights_dir,
                                          const PrecisionOptions& options) {
  switch (kind) {
    case PredictorKind::roofline: return make_roofline_predictor();
    case PredictorKind::neusight: return make_neusight_predictor(weights_dir, options);
    case PredictorKind::neusight_paper: break;
  }
  std::unique_ptr<Predictor> p =
      make_neusight_predictor(weights_dir.empty() ? data_dir() + "/weights/paper" : weights_dir, options);
  if (p->name() != predictor_kind_name(kind))
    throw InputError("--predictor neusight-paper: " + weights_dir + " holds weights of another formulation");
  return p;
}

std::unique_ptr<Predictor> make_predictor(const std::string& name, const std::string& weights_dir,
                                          const PrecisionOptions& options) {
  PredictorKind kind;
  if (!parse_predictor_kind(name, kind))
    throw InputError("--predictor: expected neusight, neusight-paper or roofline, got '" + name + "'");
  return make_predictor(kind, weights_dir, options);
}

std::unique_ptr<Predictor> make_neusight_predictor(const std::string& weights_dir) {
  return make_neusight_predictor(weights_dir, PrecisionOptions{});
}

}  // namespace neusight
