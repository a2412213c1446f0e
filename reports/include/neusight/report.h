// report.h - the report structure every output format is written from.
//
// Takes: the results of all stages (built by analyze() in api/).
// Gives: terminal table, JSON (CLI contract), CSV, and the inputs of the HTML report and
// the annotated ONNX model.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "neusight/gpu.h"
#include "neusight/lowering.h"
#include "neusight/predictor.h"
#include "neusight/tiling.h"

namespace neusight {

struct KernelReport {
  Kernel kernel;
  Tiling tiling;
  Prediction prediction;
};

struct NodeReport {
  std::string name;
  std::string op_type;
  std::string domain;
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;
  std::vector<KernelReport> kernels;
  double latency_ms = 0;  // sum over its kernels, all phases
};

struct Report {
  Gpu gpu;
  std::string model_name;
  std::string predictor;  // "neusight" | "roofline"
  Mode mode = Mode::inference;
  Fusion fusion = Fusion::eager;
  DType dtype = DType::f32;
  double e2e_latency_ms = 0;
  double forward_ms = 0, backward_ms = 0, update_ms = 0;
  std::vector<TensorInfo> graph_outputs;
  std::vector<NodeReport> nodes;          // graph order
  std::vector<KernelReport> extra_kernels;  // kernels tied to no node (collectives ...)
  std::vector<std::string> warnings;
  std::vector<std::string> unknown_ops;
  std::map<std::string, double> totals_by_class;  // ms per kernel class
};

// Fills the totals (e2e, per phase, per class, per node) from the kernels' predictions.
void summarize(Report& report);

struct TableOptions {
  int top = 0;            // 0: every node; N: the N slowest
  bool group_layers = false;
  bool color = false;     // ANSI colour (only on a TTY)
};

std::string format_table(const Report& report, const TableOptions& options);
std::string format_json(const std::vector<Report>& reports);  // one object, or an array for several GPUs
std::string format_csv(const Report& report, bool per_kernel);

}  // namespace neusight
