// neusight_model.h - the NeuSight tile-utilization model: features, MLPs, weights.
//
// Takes: a Kernel, its Tiling and a Gpu (spec-sheet numbers only).
// Gives: the wave-quantized roofline time of the kernel (`base_ms`, utilization 1) and the
// bounded per-tile features an MLP maps to alpha, gamma; latency = base_ms / utilization with
// utilization = gamma - alpha / waves in [floor, 1]. The trainer (training.h) fits those MLPs
// to the measured kernels of the dataset.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "neusight/gpu.h"
#include "neusight/lowering.h"
#include "neusight/tiling.h"

namespace neusight {

// Kernel classes with their own learned utilization. Memory-only and reduction kernels are
// streaming kernels and use the elementwise model (bandwidth-bound tiles, same law).
enum class UtilClass { gemm = 0, elementwise = 1, softmax = 2, layernorm = 3 };
constexpr int kNumUtilClasses = 4;
const char* util_class_name(UtilClass c);
// The class a kernel is predicted with; false for kernels without a tile model (collective, unknown).
bool util_class_of(const Kernel& k, UtilClass& out);

// Which formulation a model set follows.
//   neusight - this project's: rate-free, clamped GEMM inputs with the rates in the law's base
//              time, a learned fixed cost and overlap share, streaming classes evaluated over
//              the training GPUs' L2 sizes (below and neusight_predictor.cpp).
//   paper    - the published one (Lee et al., ASPLOS '25; ../shared/docs/METHOD.md), kept
//              for comparison (`--predictor neusight-paper`): every class sees the same four
//              per-SM-normalised, log2-scaled tile inputs (tile_flops / per-SM peak,
//              tile_MB / per-SM bandwidth, waves x tile_MB over per-SM memory and per-SM L2),
//              waves count ceil(tiles / SMs), latency = waves x per-wave roofline time /
//              utilization with utilization = gamma - alpha / waves (the law below without the
//              fixed cost or overlap terms), inputs never clamped.
enum class Formulation { neusight, paper };
// "neusight" | "neusight-paper": the ModelSet::info["formulation"] value.
const char* formulation_name(Formulation f);

constexpr int kMaxFeatures = 10;
// The SM count the networks' wave inputs (waves, last-wave fill) are computed at, whatever
// the GPU's: the V100's, inside the training GPUs' 20-108. The GPU's own waves enter through
// the law's base time, so at fixed per-SM rates more SMs never predict a kernel slower.
constexpr int kFeatureSms = 80;
// The FP32 lanes per SM the GEMM networks' work input (a wave's math in lane clocks) is counted
// at, whatever the GPU's: 64, those of every training GPU but the P4. A GPU's own lanes (128 on
// Pascal GP104, GA10x, Ada, Hopper, Blackwell) set its per-SM rate, which enters through the
// law's base time with the issue, shared-memory and power limits of precision.h; a network input
// that saw them could learn their effect from one training GPU (the P4, whose power-limited clock
// shares its rows) and carry it, unbounded, to every 128-lane GPU.
constexpr int kFeatureLanesPerSm = 64;

struct TileFeatures {
  double x[kMaxFeatures] = {};  // raw features (log2 scaled; see feature_names())
  double base_ms = 0;           // waves x concurrent tiles x per-tile roofline time
  // GEMMs: waves x the shorter of a wave's compute and memory times (base_ms holds the longer):
  // the part that overlaps the other imperfectly. Streaming kernels: the idle SMs' share of
  // the last wave (base_ms holds the full waves and the active share of the last). The law
  // adds a learned share of it (0-1).
  double overlap_ms = 0;
  double waves = 1;
  // SIMT GEMMs on an SM wider than the networks' reference (kFeatureLanesPerSm FP32 lanes):
  // how much longer than base_ms the math would take on the reference SM at the same clock,
  // max(0, compute x r - base) with r = simt_lane_ratio (0 elsewhere). The utilization the
  // networks learned on 64-lane SMs puts a tile's time above its roofline in the SM's clocks
  // (the pipeline's prologue and epilogue, latencies the loop does not hide), which more
  // lanes do not shorten: the law charges (1/u - 1) on it too (law_latency_ms).
  double lane_excess_ms = 0;
  // The law's device time alone, without the dispatch (device and kernel timing): set by the
  // predictor.
  bool device_only = false;
};

// Feature names of a class, in order (documented in the weights file too).
const std::vector<std::string>& feature_names(UtilClass c, Formulation f = Formulation::neusight);
// The published formulation's inputs, base time (waves x per-wave roofline time) and waves.
TileFeatures paper_tile_features(const Kernel& k, const Tiling& t, const Gpu& gpu);
// Computes the features of one kernel. Requires a valid tiling (tiles > 0).
TileFeatures tile_features(UtilClass c, const Kernel& k, const Tiling& t, const Gpu& gpu);
// The same with the streaming classes' L2 inputs (the L2 size, a footprint over it) computed
// as if the GPU had `feature_l2_mb` MB of L2; everything else is the GPU's own (the
// predictor's envelope over the training GPUs' L2 sizes, neusight_predictor.cpp).
TileFeatures tile_features(UtilClass c, const Kernel& k, const Tiling& t, const Gpu& gpu, double feature_l2_mb);

// One dense layer, row-major weights [in x out].
struct DenseLayer {
  int in = 0, out = 0;
  std::vector<double> w, b;
};

// One trained network of a class: input clamp ranges (the training range), standardization,
// hidden layers (ReLU) and a 3-unit output (gamma, alpha, overhead logits).
struct UtilNet {
  std::vector<double> lo, hi, mean, scale;
  std::vector<DenseLayer> layers;
};

struct ClassModel {
  UtilClass cls = UtilClass::gemm;
  double floor = 0.05;          // lowest utilization the law may return
  // Spread (natural-log units) of the class's error on GPUs it was not trained on, beyond
  // the ensemble's own spread: calibrated on leave-one-GPU-out (bench/kernel_accuracy
  // --calibrate) so that kIntervalZ x sqrt(this^2 + ensemble^2) covers 80% of the measured
  // latencies. 0 when not calibrated (the ensemble's spread alone).
  double interval_log_sd = 0;
  // The same spread by the kernel's roofline time (calibrated the same way on the rows of each
  // band of roofline times): `interval_roofline_ms` ascending (each band's geometric centre),
  // `interval_log_sd_by_roofline` the spread there. Short kernels carry the launch and dispatch
  // jitter; long ones only the rates. Empty: interval_log_sd for every kernel.
  std::vector<double> interval_roofline_ms, interval_log_sd_by_roofline;
  Formulation formulation = Formulation::neusight;  // paper: no fixed cost, inputs not clamped
  std::vector<UtilNet> nets;    // ensemble: latencies combined by geometric mean
  bool empty() const { return nets.empty(); }
};

struct ModelSet {
  ClassModel classes[kNumUtilClasses];
  std::map<std::string, std::string> info;  // provenance (seed, devices, command, ...)
};

// The law. The network's four outputs o give utilization u = floor + (1-floor) *
// sigmoid(o0) * (1 - sigmoid(o1) / waves) (gamma - alpha / waves, in [floor, 1]), a
// bounded fixed cost per kernel (launch, ramp-up, tail) kMaxOverheadMs * sigmoid(o2), one
// learned constant per class (the network's weights into o2 are held at zero), and the share
// beta = sigmoid(o3) of overlap_ms charged (a GEMM's shorter roofline time that does not
// overlap the longer one; a streaming kernel's idle share of its last wave):
//   device_ms  = (base_ms + beta overlap_ms) / u + (1/u - 1) lane_excess_ms   (>= base_ms >= the roofline)
//   latency_ms = sqrt(overhead^2 + device_ms^2)
// The eager timings show the dispatch as a floor (an elementwise op 30 us on the P4, T4 and
// A100 hosts, 38 us on the V100's; a small bmm 31-54 us; for any kernel below a few us of
// device time: the host's launch pipelines with the device's work), so the law takes the root
// sum of squares, a smooth maximum that the trainer's gradient reaches on both sides.
// base_ms and overlap_ms fall as the GPU's FLOP rate or bandwidth rise and never grow with
// its SMs at fixed per-SM rates; lane_excess_ms grows only where base_ms falls by as much
// (memory time below the 64-lane math time), which the law charges at 1/u - 1 < 1/u; and
// the network sees no rate, so a faster GPU never predicts slower.
constexpr int kNetOutputs = 4;
constexpr double kMaxOverheadMs = 0.05;
double law_latency_ms(double floor, const TileFeatures& f, const double* o, double* util);
// The published law: base_ms / u, no fixed cost (o2) or overlap (o3).
double paper_law_latency_ms(double floor, const TileFeatures& f, const double* o);

// Batched latency (ms) for n feature rows of one class (geometric mean over the ensemble). `extrapolated[i]` is
// set when a feature lay outside the training range (it is then clamped to it). `log_sd[i]`
// (when given) is the prediction's own uncertainty in natural-log units: the ensemble
// members' spread and, for inputs outside the training range, kOutOfRangeLogSd per training
// standard deviation they lie beyond it.
// The class spread (interval_log_sd units) for a kernel of roofline time `roofline_ms`: linear
// in log(roofline time) between the calibrated bands' centres, the end bands' values beyond
// them; interval_log_sd without bands.
double interval_log_sd_at(const ClassModel& m, double roofline_ms);

std::vector<double> predict_latency_ms(const ClassModel& m, const std::vector<TileFeatures>& f,
                                       std::vector<char>* extrapolated = nullptr, std::vector<double>* log_sd = nullptr);

// 80% two-sided interval of a normal distribution: +-1.2816 standard deviations.
constexpr double kIntervalZ = 1.2816;
// Uncertainty added per standard deviation (of the training inputs) that an input lies
// outside the training range, in natural-log units: an assumption, not a fit (10% per
// standard deviation); the calibration of interval_log_sd absorbs what it misses.
constexpr double kOutOfRangeLogSd = 0.1;

// weights.json in `dir` (minified JSON with a "schema" version; this build reads schema 9).
// Throws RuntimeError naming the file when missing, malformed or of another schema.
ModelSet load_model_set(const std::string& dir);
// Writes weights.json in schema 9 (atomically) into `dir` (created when missing).
void save_model_set(const ModelSet& m, const std::string& dir);

// The five training GPUs of the published model (Device names of the dataset).
const std::vector<std::string>& training_devices();

}  // namespace neusight
