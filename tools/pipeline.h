// pipeline.h - the steps from a parsed request to reports and output text, shared by the CLI
// and the Python module (python/) so that both give the same results and messages.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "neusight/dataset.h"
#include "neusight/neusight.h"
#include "neusight/precision.h"

namespace neusight::cli {

// --parallel and --link-bw into `opt`. Throws InputError naming the flag.
void parse_parallel_options(const Args& args, Options& opt);

// The analysed model predicted on every GPU, in order; `notes` (load_config_model) join each
// report's warnings. `before_each(i)` runs before GPU i.
std::vector<Report> predict_gpus(const Analysis& analysis, const LoadedModel& loaded, const std::vector<Gpu>& gpus,
                                 const Options& opt, const std::vector<std::string>& notes,
                                 const std::function<void(size_t)>& before_each = {});

// --latency-slo: each GPU's report at the largest batch within `slo_ms` that fits its memory
// (api predict_for_latency_slo), in order; the batches' analyses kept in `analyses` (the first
// GPU's report's for an annotated model). `notes` and `before_each` as predict_gpus's.
std::vector<Report> predict_within_latency(const LoadedModel& loaded, const std::vector<Gpu>& gpus, const Options& opt,
                                           double slo_ms, const std::vector<std::string>& notes,
                                           std::map<int64_t, Analysis>& analyses,
                                           const std::function<void(size_t)>& before_each = {});

// --generate PROMPT:NEW. Throws InputError naming the flag (non-integers, counts below 1).
GenerationOptions parse_generate(const std::string& text);
// --generate PROMPT:NEW with --prefix-cached C. Throws InputError naming the flag.
GenerationOptions parse_generation(const Args& args);
// The options of a --generate run: as serving engines run a generation (kernel timing under
// CUDA graphs, --fusion full) unless --timing / --fusion were given, batch 1 unless --batch.
// Throws InputError for flags that do not apply (--seq, --out, --parallel, --mode training).
Options generation_options(const Args& args, Options opt);
// --speculative K,accept=P[,draft=MODEL]: sets `gen`'s count and acceptance and returns the
// draft model's path ("" without one). Throws InputError naming the part.
std::string parse_speculative(const std::string& text, GenerationOptions& gen);

// Whether a model argument names a Hugging Face config (a path ending in .json, or a model
// folder holding a config.json) rather than an ONNX model.
bool is_config_path(const std::string& path);
// The draft model of --speculative: a config (a path ending in .json), an ONNX decoder, or
// "mtp", the multi-token-prediction module of `target` (the --config model; null for an ONNX
// model); its errors name the flag.
Decoder load_draft_decoder(const std::string& path, const Options& opt, const ModelConfig* target);
// The decoder of a Hugging Face config (`config` true) or an ONNX export with a KV cache;
// `notes` as load_config_model; `config_out` (when given) gets the config read.
Decoder load_decoder(const std::string& path, bool config, const Options& opt, std::vector<std::string>& notes,
                     ModelConfig* config_out = nullptr);

// What `--out` writes for `report`: each node's latency text and the model's metadata.
AnnotatedWrite annotations_for(const Report& report);

// A label per compared model: the file name, made unique with its folder when two clash.
std::vector<std::string> model_labels(const std::vector<std::string>& paths);

// The device JSONs of a folder (`kernels --devices DIR`), by lower-case Device name.
std::map<std::string, Gpu> load_devices_dir(const std::string& dir);

// `kernels`: a prediction per dataset row.
struct KernelRowPrediction {
  std::string cls, tile;
  double ms = 0, low = 0, high = 0;
  int64_t tiles = 0, waves = 0;
};
struct KernelRows {
  std::vector<size_t> kept;                 // rows predicted, in order (others ran on another GPU)
  std::vector<KernelRowPrediction> rows;    // per row of the dataset (kept ones filled)
};
// The timing a row of `dtype` is predicted in when none is given: FP32 rows in eager timing,
// the convention of neusight-data's PyTorch microbenchmarks (the only kernel data of that
// format); every other dtype in kernel timing, as the half-precision kernel data sets time
// their kernels (Vidur's profiler durations, DeepBench's and XLA's back-to-back calls).
Timing default_row_timing(DType dtype);
// `kernels --timing` (and the Python kernels(timing=)): eager, device or kernel; anything else
// is an InputError naming the flag.
Timing kernels_timing(const std::string& text);
// Predicts the rows of `d` on `fixed` (rows whose Device names another GPU are skipped), or,
// without one, each row on the GPU its Device column names (`devices` first, then the
// database), in `timing` (per row, default_row_timing, when absent). `row_name(i)` names row i
// in errors ("IN.csv: row 2"). Throws InputError.
KernelRows predict_kernel_rows(const Dataset& d, const std::function<std::string(size_t)>& row_name,
                               const std::optional<Gpu>& fixed, const std::map<std::string, Gpu>& devices,
                               const std::string& predictor, const std::string& weights_dir,
                               std::optional<Timing> timing = std::nullopt);
// The dataset's kept rows with the prediction columns appended (kernel_class,
// pred_latency_ms, tile, tiles, waves, pred_low_ms, pred_high_ms).
std::string format_kernels_csv(const Dataset& d, const KernelRows& k);

}  // namespace neusight::cli
