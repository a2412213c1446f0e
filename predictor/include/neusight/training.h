// training.h - the trainer of the NeuSight utilization MLPs (library neusight::predictor_training,
// linked by the CLI's `train` command and the tests; not by the analysis library).
//
// Takes: the dataset's measured kernels (dataset.h) and the GPU database.
// Gives: per-class models (neusight_model.h ClassModel) fitted by backprop + Adam,
// deterministic for a seed, and their error on samples.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "neusight/dataset.h"
#include "neusight/gpu.h"
#include "neusight/neusight_model.h"

namespace neusight {

struct Sample {
  UtilClass cls = UtilClass::gemm;
  TileFeatures f;
  double latency_ms = 0;   // measured
  std::string device;
};

// A GPU's kernels/train sweep of a GEMM op is left out of training (with --test-rows, where
// the same GPU's kernels/test rows of that op are in it) when its latencies at the test rows'
// shapes are more than this factor off them (dataset.h campaign_ratio, either way): the two
// campaigns of one GPU then contradict each other, and the test rows are those of the campaign
// the unseen GPUs' kernels come from. The dataset's ratios are 1.00-1.31 for every GPU and op
// but the P4's linear sweep (3.67 over 474 matched rows: the e2e_accuracy bench's "Kernel data").
constexpr double kCampaignConflictRatio = 2.0;

// Samples of the dataset rows whose Device is one of `devices` (GPU names resolved in `db`).
// Rows of other devices are skipped; rows with non-positive latency are skipped.
std::vector<Sample> samples_from_dataset(const Dataset& d, const GpuDatabase& db,
                                         const std::vector<std::string>& devices,
                                         Formulation formulation = Formulation::neusight);

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
  // Weight of the prior on a kernel's device time where its dispatch hides it: the
  // loss adds device_prior x w x log(u)^2, w the dispatch's share of the prediction
  // (neusight_model.h: the law combines them as sqrt(dispatch^2 + device^2)), pulling an
  // unobserved device time toward the roofline instead of leaving it free. Without it the
  // networks learn any device time below the dispatch on fast GPUs and carry it, scaled by the
  // bandwidth, to slow ones (leave one GPU out, T4: elementwise 150% wrong at 0, 16% at 1).
  double device_prior = 1.0;
  // Every network gets at least this many Adam steps: a class with few samples (softmax,
  // layernorm: ~8k rows, ~30 batches an epoch) runs more epochs than `epochs` until it does,
  // at most 10 x `epochs`.
  int min_steps = 6000;
  Formulation formulation = Formulation::neusight;
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

}  // namespace neusight
