// predictor.h - NeuSight latency prediction: waves x per-wave time, bounded by the roofline.
//
// Takes: kernels (lowering.h), their tilings (tiling.h) and the target Gpu.
// Gives: a Prediction per kernel. The per-tile utilization comes from small MLPs trained
// on measured kernels of five older GPUs (weights in predictor/weights, see its MANIFEST).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "neusight/gpu.h"
#include "neusight/lowering.h"
#include "neusight/tiling.h"

namespace neusight {

struct Prediction {
  double latency_ms = 0;
  // 80% interval of the latency (the measured latency falls inside about 80% of the time on
  // GPUs the predictor was not trained on; see neusight_model.h). The roofline predictor
  // gives its own latency for both.
  double latency_low_ms = 0, latency_high_ms = 0;
  // The interval's bounds; a prediction made without one (a collective's, say) is its latency.
  double low_ms() const { return latency_high_ms > 0 ? latency_low_ms : latency_ms; }
  double high_ms() const { return latency_high_ms > 0 ? latency_high_ms : latency_ms; }
  double roofline_ms = 0;     // plain roofline for the same kernel
  double utilization = 0;     // achieved fraction of the roofline rate
  bool compute_bound = false; // roofline regime
  // Device timing: the host's dispatch of the kernel's op takes longer than the kernel itself
  // (precision.h kHostDispatchMs), so the host, not the GPU, sets its time.
  bool host_bound = false;
  // What bounds the kernel, as reports name it: "host", else "compute" or "memory".
  const char* bound() const { return host_bound ? "host" : compute_bound ? "compute" : "memory"; }
  bool extrapolated = false;  // features outside the training distribution
  // A skinny GEMM on matrix units predicted as a GEMV-style stream of its operands
  // (neusight_predictor.cpp: the weight-streaming law) instead of tensor-core tiles.
  bool streamed = false;
  // Set where the library runs the kernel on another of its tiles than the tiling given
  // (tiling.h tile_alternatives: a tensor-core GEMM runs on the candidate predicted fastest, as
  // the libraries' heuristics pick it): that tiling, whose tile and waves reports show.
  std::optional<Tiling> tiling;
  // Where the latency is the bound of a GPU of this one's kind with fewer SMs (tiling.h
  // tilings_on_fewer_sms: this GPU runs the grid the library chooses there in no more waves,
  // so it is no slower), that GPU's SM count; 0 where the latency is the tile's own. The tile
  // reported stays the one the library runs here.
  int fewer_sm_bound = 0;
};

// The 80% interval of a sum of one GPU's kernel latencies (a node, a model, a training
// step). A kernel's error is partly its GPU's (the rates its class sustains there) and partly
// its own shape's, so the errors of a model's kernels are neither independent nor identical:
//   * kernels whose predictions are identical (one kernel repeated: a layer's GEMM in every
//     layer, a step's optimizer update per parameter of one shape) are the same kernel and
//     err together: their deviations from the latency add;
//   * distinct kernels are taken as equicorrelated with coefficient rho, so the sum's upper
//     deviation is sqrt((1 - rho) sum u_i^2 + rho (sum u_i)^2) over the distinct kernels'
//     summed upper deviations u_i (high - latency), the lower one alike. rho = 1 adds the
//     bounds; rho = 0 adds them in quadrature. A single kernel keeps its own interval.
// rho is data: the smallest value (steps of 0.05) at which the 80% interval covers at least
// 80% of neusight-data's 55 measured single-GPU runs (BERT, GPT-2, GPT-3, OPT, Switch;
// inference, training, fused), each predicted by the weights trained without its GPU
// (`build/bin/e2e_accuracy --logo --calibrate`; the MI100 runs by the shipped weights, that GPU
// having no kernel data). Valid for whole models of tens to thousands of kernels on one GPU.
constexpr double kKernelErrorCorrelation = 0.35;

class IntervalSum {
 public:
  // `weight` times the kernel (a kernel that runs that many times, or a share of one): its
  // latency and deviations scale, and it stays the same kernel as its other occurrences.
  void add(const Prediction& p, double weight = 1);
  double latency_ms() const { return latency_ms_; }
  // The sum's bounds for correlation `rho` between distinct kernels' errors.
  double low_ms(double rho = kKernelErrorCorrelation) const;
  double high_ms(double rho = kKernelErrorCorrelation) const;

  // One distinct prediction (latency, low, high) and what its identical kernels add up to.
  struct Distinct {
    double latency_ms = 0;          // their summed latency
    double low_dev = 0, high_dev = 0;  // their summed deviations (latency - low, high - latency)
  };
  using Key = std::tuple<double, double, double>;
  const std::map<Key, Distinct>& distinct() const { return distinct_; }

 private:
  double deviation(bool upper, double rho) const;
  double latency_ms_ = 0;
  std::map<Key, Distinct> distinct_;
};

// The 80% interval of a / b, two sums of kernels predicted on one GPU (a model's speed-up over
// a variant: the base's latency over the variant's). With IntervalSum's errors, linearized in
// log time: a kernel of relative log half-width s (ln(high / low) / 2) that is a share wa of a
// and wb of b moves ln(a / b) by (wa - wb) s, identical kernels of the two sums together;
// the deviation is sqrt((1 - rho) sum c^2 + rho (sum c)^2) over the distinct kernels' c. Two
// equal sums give an exact 1; the interval narrows as the two share more of their kernels.
struct RatioInterval {
  double ratio = 0, low = 0, high = 0;
};
RatioInterval ratio_interval(const IntervalSum& a, const IntervalSum& b, double rho = kKernelErrorCorrelation);

// The 80% interval of a / b, one model's latencies predicted on two GPUs (the second GPU's
// speed-up over the first), each with its own 80% interval [low, high]. The two GPUs' errors are
// taken as independent: in log time a's upward and b's downward deviations add in quadrature for
// the upper bound, a's downward and b's upward for the lower (bench/e2e_accuracy measures how
// often the measured speed-up falls inside). Zero where either latency is not positive.
struct SpeedupInterval {
  double speedup = 0, low = 0, high = 0;
};
SpeedupInterval gpu_speedup_interval(double a, double a_low, double a_high, double b, double b_low, double b_high);

class Predictor {
 public:
  virtual ~Predictor() = default;
  virtual std::vector<Prediction> predict(const std::vector<Kernel>& kernels,
                                          const std::vector<Tiling>& tilings,
                                          const Gpu& gpu) const = 0;
  virtual std::string name() const = 0;
  // The fraction of the boost clock this predictor runs the GPU's FP32 SIMT GEMMs at (below 1
  // on a board whose power cannot hold the clock under dense FP32 math, precision.h
  // power_clock_fraction); reports say so where a model has such a GEMM. 1 by default.
  virtual double simt_clock_fraction(const Gpu&) const { return 1.0; }
};

// Plain roofline: max(flops / peak, bytes / bandwidth) plus nothing else.
std::unique_ptr<Predictor> make_roofline_predictor();

// The trained NeuSight predictor from a weights directory ("" = built-in weights).
// Falls back to nothing: throws RuntimeError naming the missing file.
std::unique_ptr<Predictor> make_neusight_predictor(const std::string& weights_dir = "");

// OpenBLAS (which the predictor links) on the calling thread, for the whole process: it
// starts one worker per core when it loads, each spinning for about 0.1 s before it sleeps,
// and the networks' products (a few thousand rows by 32-128 columns) gain nothing from them.
// This stops the workers and keeps OpenBLAS's later calls on the calling thread. Called first
// by the CLI and when the Python module is imported (a numpy in the same process that links
// its own BLAS keeps its threads). A no-op without OpenBLAS or when the user set
// OPENBLAS_NUM_THREADS (or GOTO_/OMP_NUM_THREADS).
void single_threaded_blas();

// Roofline latency in ms for one kernel on one GPU (shared by all predictors).
double roofline_ms(const Kernel& kernel, const Gpu& gpu);

}  // namespace neusight
