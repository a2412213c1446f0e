// neusight_predictor.cpp - the trained tile-utilization predictor: batched per class, roofline-bounded.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <limits>
#include <utility>

#include "neusight/dataset.h"
#include "neusight/neusight_model.h"
#include "neusight/precision.h"
#include "neusight/predictor.h"

namespace neusight {
namespace {

// A streaming kernel cut down to its first wave of tiles (rows, or elements of a single-row
// kernel, scaled with its bytes and FLOPs); the kernel itself when it has no more than one.
Kernel first_wave(const Kernel& k, const Tiling& t, const Gpu& gpu) {
  const double concurrent = double(std::max(1, gpu.num_sm)) * double(std::max<int64_t>(t.blocks_per_sm, 1));
  const double s = std::min(1.0, concurrent / double(std::max<int64_t>(t.tiles, 1)));
  if (s >= 1.0) return k;
  Kernel w = k;
  if (w.rows > 1)
    w.rows = std::max<int64_t>(1, int64_t(std::floor(double(k.rows) * s)));
  else
    w.cols = std::max<int64_t>(1, int64_t(std::floor(double(k.cols) * s)));
  const double kept = double(w.rows) * double(w.cols) / std::max(1.0, double(k.rows) * double(k.cols));
  w.bytes *= kept;
  w.flops *= kept;
  return w;
}

// The learned fixed cost of a class (the law at base_ms = 0), when it is one constant: the
// law's third output does not depend on the inputs when the last layer's weights into it are
// zero (the trainer holds them there), and it is then the ensemble's geometric mean (as in
// predict_latency_ms) of kMaxOverheadMs * sigmoid(bias). Returns a negative value when some net's o2 depends on its
// inputs; the fixed cost must then be evaluated per kernel.
double constant_fixed_cost_ms(const ClassModel& m) {
  if (m.nets.empty()) return -1;
  double sum = 0;
  for (const UtilNet& n : m.nets) {
    if (n.layers.empty()) return -1;
    const DenseLayer& L = n.layers.back();
    if (L.out != kNetOutputs) return -1;
    for (int i = 0; i < L.in; ++i)
      if (L.w[size_t(i) * kNetOutputs + 2] != 0.0) return -1;
    const double o[kNetOutputs] = {0, 0, L.b[2]};
    sum += std::log(law_latency_ms(m.floor, 0.0, 1.0, o, nullptr));
  }
  return std::exp(sum / double(m.nets.size()));
}

// The range of machine balance (FP32 FLOP per DRAM byte, fp32_gflops / mem_bw_gbps) over the
// GPUs a model set was trained on (its info["devices"], resolved in the built-in database);
// {0, 0} when a name does not resolve.
std::pair<double, double> trained_balance(const ModelSet& m) {
  auto it = m.info.find("devices");
  if (it == m.info.end()) return {0, 0};
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const std::string& name : split_csv_line(it->second)) {
    if (name.empty()) continue;
    const Gpu* g = GpuDatabase::builtin().find(name);
    if (!g || !(g->fp32_gflops > 0) || !(g->mem_bw_gbps > 0)) return {0, 0};
    const double b = g->fp32_gflops / g->mem_bw_gbps;
    lo = std::min(lo, b);
    hi = std::max(hi, b);
  }
  return hi > 0 ? std::make_pair(lo, hi) : std::make_pair(0.0, 0.0);
}

// The bandwidth (GB/s) the GEMM networks' inputs see for this GPU, or 0 when it is its own: a
// GPU with more FLOPs per byte of DRAM bandwidth than any training GPU is seen with its
// bandwidth raised to the training GPUs' highest machine balance. The network learned a tile's utilization from its compute time
// and its operand traffic time per SM, jointly; each input is clamped to its own training
// range, but a GPU beyond the training GPUs' balance (L4: 104 FLOP/B, L40S 106, RTX 4090 82,
// A10 52, against 12.5-30 for A100..P4) gives pairs the networks never saw, and they
// answered with 2-3% utilization (GPT-2 Large on an L4: 12x its roofline). Held at the edge of
// the training range, the pair is one the networks know; the bandwidth limit itself stays in
// the law's base time, which uses the real bandwidth. Only this side is held: a GPU with more
// bandwidth per FLOP than the training GPUs (A100 80GB: 10.1) extrapolates benignly, and
// holding it too took the A100 80GB's unseen test kernels from 5.2 / 5.6% to 8.8 / 8.2%
// (BMM / linear, bench/kernel_accuracy (b)).
double held_bandwidth_gbps(const Gpu& gpu, std::pair<double, double> range) {
  if (!(range.second > 0) || !(gpu.fp32_gflops > 0) || !(gpu.mem_bw_gbps > 0)) return 0;
  if (gpu.fp32_gflops / gpu.mem_bw_gbps <= range.second) return 0;
  return gpu.fp32_gflops / range.second;
}

class NeusightPredictor final : public Predictor {
 public:
  NeusightPredictor(ModelSet m, PrecisionOptions o) : m_(std::move(m)), o_(o), balance_(trained_balance(m_)) {
    for (int c = 0; c < kNumUtilClasses; ++c) fixed_ms_[c] = constant_fixed_cost_ms(m_.classes[c]);
  }

  std::vector<Prediction> predict(const std::vector<Kernel>& kernels, const std::vector<Tiling>& tilings,
                                  const Gpu& gpu) const override {
    if (tilings.size() != kernels.size()) throw RuntimeError("predict: one tiling per kernel expected");
    std::vector<Prediction> out(kernels.size());
    std::vector<size_t> members[kNumUtilClasses];
    std::vector<TileFeatures> feats[kNumUtilClasses];
    std::vector<double> wave_ms[kNumUtilClasses];  // kernel timing: device time of the first wave
    const bool device = o_.timing != Timing::eager;
    const bool strip_dispatch = o_.timing == Timing::kernel;
    // One decision per GPU (gpu_as_run leaves the FP32 rate and the bandwidth as they are).
    const double held_bw = o_.hold_balance ? held_bandwidth_gbps(gpu, balance_) : 0;
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
      // library kernels the MLPs learned, so in device timing it is the memory-parallelism
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
      const ClassModel& cm = m_.classes[int(c)];
      if (cm.empty()) continue;
      // Precision (precision.h): the MLPs see the kernel as its math runs on this GPU.
      const Kernel run = kernel_as_run(k, gpu);
      const Tiling t = run.dtype == k.dtype ? tilings[i] : tile_kernel(run, gpu);
      const Gpu as_run = gpu_as_run(run, t, gpu, o_.operand_port_weight);
      TileFeatures f = tile_features(c, run, t, as_run);
      if (!(f.base_ms > 0)) continue;
      if (c == UtilClass::gemm && held_bw > 0) {
        // The networks' inputs at a machine balance they know (held_bandwidth_gbps); the
        // base time keeps the GPU's real numbers.
        Gpu seen = as_run;
        seen.mem_bw_gbps = held_bw;
        const TileFeatures fs = tile_features(c, run, t, seen);
        std::copy(std::begin(fs.x), std::end(fs.x), std::begin(f.x));
        p.extrapolated = true;
      }
      if (strip_dispatch && c != UtilClass::gemm) {
        // Kernel timing (precision.h): eager(k) - eager(first wave) + the first wave's device time.
        const Kernel w = first_wave(run, t, gpu);
        const Tiling tw = tile_kernel(w, gpu);
        members[int(c)].push_back(i);
        feats[int(c)].push_back(f);
        feats[int(c)].push_back(tile_features(c, w, tw, gpu_as_run(w, tw, gpu, o_.operand_port_weight)));
        wave_ms[int(c)].push_back(std::max(o_.device_floor_ms, roofline_ms(w, gpu)));
        continue;
      }
      // Device timing: the law without its alpha / waves term (utilization gamma). In the
      // eager training data a kernel of few waves carries the framework's per-launch cost,
      // and what the learned fixed cost did not absorb of it the law puts in alpha / waves,
      // which vanishes only for many waves (a 1-wave A100 RMSNorm of 8-64 rows: 19-33 us
      // predicted with the term, 4-8 us measured by Vidur). Back to back on the device the
      // launch overlaps the kernel before it, and the ramp-up and drain of one launch are
      // the device floor that replaces the fixed cost below; wave quantization stays in
      // base_ms (waves x per-wave time).
      if (device) f.waves = std::numeric_limits<double>::infinity();
      members[int(c)].push_back(i);
      feats[int(c)].push_back(f);
      if (device && fixed_ms_[int(c)] < 0) {  // the law at base_ms = 0 is the learned fixed cost, replaced below
        f.base_ms = 0;
        feats[int(c)].push_back(f);
      }
    }
    for (int c = 0; c < kNumUtilClasses; ++c) {
      if (members[c].empty()) continue;
      std::vector<char> extra;
      const std::vector<double> lat = predict_latency_ms(m_.classes[c], feats[c], &extra);
      const bool strip = strip_dispatch && c != int(UtilClass::gemm);
      const bool per_kernel_fixed = device && fixed_ms_[c] < 0;
      const size_t step = per_kernel_fixed || strip ? 2 : 1;
      for (size_t j = 0; j < members[c].size(); ++j) {
        Prediction& p = out[members[c][j]];
        if (strip) {
          p.latency_ms = std::max({lat[step * j] - lat[step * j + 1] + wave_ms[c][j], o_.device_floor_ms, p.roofline_ms});
          p.utilization = p.roofline_ms / p.latency_ms;
          p.extrapolated = p.extrapolated || extra[step * j] != 0;
          continue;
        }
        // Device timing swaps the learned fixed cost for the device floor where that cost is
        // larger; it never adds time: an isolated (eager) timing contains the device time.
        const double learned_fixed = per_kernel_fixed ? lat[step * j + 1] : fixed_ms_[c];
        const double fixed = device ? std::min(0.0, o_.device_floor_ms - learned_fixed) : 0.0;
        // Never faster than the roofline (nor, eager, than a latency-limited kernel's
        // memory-parallelism time, set above).
        p.latency_ms = std::max({lat[step * j] + fixed, p.roofline_ms, p.latency_ms});
        p.utilization = p.roofline_ms / p.latency_ms;
        p.extrapolated = p.extrapolated || extra[step * j] != 0;
      }
    }
    return out;
  }
  std::string name() const override { return "neusight"; }
  std::vector<std::string> notes(const Gpu& gpu) const override {
    if (!o_.hold_balance || !(held_bandwidth_gbps(gpu, balance_) > 0)) return {};
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s has %.0f FP32 FLOP per DRAM byte, beyond the %.1f-%.1f of the GPUs the predictor was trained on: "
                  "its GEMMs are predicted as at %.1f (extrapolated)",
                  gpu.name.c_str(), gpu.fp32_gflops / gpu.mem_bw_gbps, balance_.first, balance_.second, balance_.second);
    return {buf};
  }

 private:
  ModelSet m_;
  PrecisionOptions o_;
  std::pair<double, double> balance_;  // trained_balance(m_)
  double fixed_ms_[kNumUtilClasses];  // constant learned fixed cost per class, or < 0
};

}  // namespace

std::unique_ptr<Predictor> make_neusight_predictor(const std::string& weights_dir, const PrecisionOptions& options) {
  const std::string dir = weights_dir.empty() ? data_dir() + "/weights" : weights_dir;
  return std::make_unique<NeusightPredictor>(load_model_set(dir), options);
}

std::unique_ptr<Predictor> make_neusight_predictor(const std::string& weights_dir) {
  return make_neusight_predictor(weights_dir, PrecisionOptions{});
}

}  // namespace neusight
