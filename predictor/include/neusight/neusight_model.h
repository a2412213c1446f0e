// neusight_model.h - the NeuSight tile-utilization model: features, MLPs, weights, trainer.
//
// Takes: a Kernel, its Tiling and a Gpu (spec-sheet numbers only).
// Gives: the wave-quantized roofline time of the kernel (`base_ms`, utilization 1) and the
// bounded per-tile features an MLP maps to alpha, gamma; latency = base_ms / utilization with
// utilization = gamma - alpha / waves in [floor, 1]. The trainer fits those MLPs to the
// measured kernels of the dataset (backprop + Adam, deterministic for a seed).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "neusight/dataset.h"
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

constexpr int kMaxFeatures = 10;

struct TileFeatures {
  double x[kMaxFeatures] = {};  // raw features (log2 scaled; see feature_names())
  double base_ms = 0;           // waves x concurrent tiles x per-tile roofline time
  double waves = 1;
};

// Feature names of a class, in order (documented in the weights file too).
const std::vector<std::string>& feature_names(UtilClass c);
// Computes the features of one kernel. Requires a valid tiling (tiles > 0).
TileFeatures tile_features(UtilClass c, const Kernel& k, const Tiling& t, const Gpu& gpu);

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
  std::vector<UtilNet> nets;    // ensemble: latencies combined by geometric mean
  bool empty() const { return nets.empty(); }
};

struct ModelSet {
  ClassModel classes[kNumUtilClasses];
  std::map<std::string, std::string> info;  // provenance (seed, devices, command, ...)
};

// The law. The network's three outputs o give utilization u = floor + (1-floor) *
// sigmoid(o0) * (1 - sigmoid(o1) / waves) (gamma - alpha / waves, in [floor, 1]) and a
// bounded fixed cost per kernel (launch, ramp-up, tail) kMaxOverheadMs * sigmoid(o2), one
// learned constant per class (the network's weights into o2 are held at zero):
//   latency_ms = overhead + base_ms / u      (>= base_ms >= the roofline)
constexpr int kNetOutputs = 3;
constexpr double kMaxOverheadMs = 0.05;
double law_latency_ms(double floor, double base_ms, double waves, const double* o, double* util);

// Batched latency (ms) for n feature rows of one class (geometric mean over the ensemble). `extrapolated[i]` is
// set when a feature lay outside the training range (it is then clamped to it).
std::vector<double> predict_latency_ms(const ClassModel& m, const std::vector<TileFeatures>& f,
                                       std::vector<char>* extrapolated = nullptr);

// weights.json in `dir`. Throws RuntimeError naming the file when missing or malformed.
ModelSet load_model_set(const std::string& dir);
// Writes weights.json (atomically) into `dir` (created when missing).
void save_model_set(const ModelSet& m, const std::string& dir);

// ---- training -------------------------------------------------------------------------

struct Sample {
  UtilClass cls = UtilClass::gemm;
  TileFeatures f;
  double latency_ms = 0;   // measured
  std::string device;
};

// Samples of the dataset rows whose Device is one of `devices` (GPU names resolved in `db`).
// Rows of other devices are skipped; rows with non-positive latency are skipped.
std::vector<Sample> samples_from_dataset(const Dataset& d, const GpuDatabase& db,
                                         const std::vector<std::string>& devices);

struct TrainOptions {
  uint64_t seed = 1;
  int epochs = 60;
  int hidden = 64;
  int hidden_layers = 3;
  int batch = 256;
  double lr = 2e-3;
  double val_fraction = 0.1;
  int ensemble = 1;
  double floor_fraction = 0.5;  // floor = fraction x lowest utilization measured in training
  // Every network gets at least this many Adam steps: a class with few samples (softmax,
  // layernorm: ~8k rows, ~30 batches an epoch) runs more epochs than `epochs` until it does,
  // at most 10 x `epochs`.
  int min_steps = 6000;
};

struct TrainProgress {
  UtilClass cls;
  int member, epoch, epochs;
  double loss, val_mape;
};

// Trains the model of one class. Deterministic for options.seed.
ClassModel train_class(UtilClass c, const std::vector<Sample>& samples, const TrainOptions& o,
                       const std::function<void(const TrainProgress&)>& progress = {});

// Mean absolute percentage error (percent) of a class model on samples.
double mape_percent(const ClassModel& m, const std::vector<Sample>& samples);

// The five training GPUs of the published model (Device names of the dataset).
const std::vector<std::string>& training_devices();

}  // namespace neusight
