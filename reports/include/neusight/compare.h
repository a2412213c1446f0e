// compare.h - compare model variants (pruned, distilled, resized ...) across GPUs.
//
// Takes: the reports of several models, each predicted on the same GPUs.
// Gives: end-to-end latency per model and GPU, speed-up against the first model (each with its
// 80% interval), per-class
// deltas, and the nodes whose latency changed most (matched by name, then by position);
// as a terminal table, JSON or a self-contained HTML page.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "neusight/report.h"

namespace neusight {

// One node of a variant set against the first model.
struct NodeDelta {
  std::string name;        // the variant's node name ("" when removed)
  std::string base_name;   // the first model's node name ("" when added)
  std::string op_type;
  // "name" | "quantized" (onnxruntime's quantizer replaced it: ConvInteger "X_quant" for Conv
  // "X", either model the quantized one) | "position" | "added" | "removed"
  std::string matched_by;
  double base_ms = 0, ms = 0;
  double delta_ms() const { return ms - base_ms; }
};

// Model `model` against model 0 on GPU `gpu`.
struct VariantDelta {
  size_t model = 0, gpu = 0;
  double e2e_ms = 0, base_ms = 0;
  double speedup = 0;                          // base_ms / e2e_ms (> 1: the variant is faster)
  // Its 80% interval (predictor.h ratio_interval: kernels the two models share err together,
  // so the variant of a model is compared more surely than either is predicted).
  double speedup_low = 0, speedup_high = 0;
  // --generate: output tokens/s against the first model's, and its 80% interval (the
  // generations' kernels weighted as they run, GenerationReport::time); 0 without generations.
  double tokens_per_s_speedup = 0, tokens_per_s_speedup_low = 0, tokens_per_s_speedup_high = 0;
  std::map<std::string, double> class_delta_ms;  // variant - base, per kernel class
  std::vector<NodeDelta> top_nodes;            // largest |delta| first
  int matched_by_name = 0, matched_by_quantized = 0, matched_by_position = 0, added = 0, removed = 0;
};

struct Comparison {
  std::vector<std::string> models;          // labels (file names)
  std::vector<std::vector<Report>> reports;  // [model][gpu]
  std::vector<VariantDelta> deltas;          // for every model (including the first) and GPU
  const VariantDelta& at(size_t model, size_t gpu) const;
};

// Matches the nodes of `variant` to those of `base`: by name first (and a node onnxruntime's
// quantizer replaced to the float node), then the remaining ones by position among nodes of
// the same op type whose names agree but for their numbers, then by position among the
// renamed ones (a name whose form the other model lacks); the rest are added or removed.
std::vector<NodeDelta> match_nodes(const Report& base, const Report& variant);

// Throws InputError when the models were not predicted on the same GPUs.
Comparison compare_reports(std::vector<std::string> models, std::vector<std::vector<Report>> reports,
                           int top_nodes = 10);

// The GPUs a compare table puts across (each a latency and a speed-up column); more run down,
// one row per GPU, with the class and node deltas of the first GPU alone.
constexpr size_t kCompareGpuColumns = 3;
std::string format_compare_table(const Comparison& c, bool color = false);
std::string format_compare_json(const Comparison& c);
std::string format_compare_html(const Comparison& c);

}  // namespace neusight
