// args.h - command-line flag parsing shared by the CLI's subcommands.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "flags.h"
#include "neusight/graph.h"
#include "neusight/model_builder.h"
#include "neusight/neusight.h"

namespace neusight::cli {

// Parsed command line of one command: positionals plus the flags flags.h gives it. Flags take
// one value ("--gpu b200" or "--gpu=b200") unless the table marks them as switches. Repeated
// flags keep every value. Throws InputError for flags the command does not take.
class Args {
 public:
  Args(const std::vector<std::string>& argv, Command command);

  const std::vector<std::string>& positionals() const { return positionals_; }
  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  // The value given (a flag other than --dim, --shape and --value given twice must repeat
  // it), else the table's default for the command ("" when none).
  std::string get(const std::string& flag) const;
  std::string get(const std::string& flag, const std::string& fallback) const;
  std::vector<std::string> all(const std::string& flag) const;
  // Integer flag; throws InputError naming the flag for non-integers, or below `min`.
  int64_t get_int(const std::string& flag, int64_t fallback, int64_t min = 1) const;
  // Positive number flag (`allow_zero`: 0 too); throws InputError naming the flag otherwise.
  double get_double(const std::string& flag, double fallback, bool allow_zero = false) const;

 private:
  void check_repeats_and_paths() const;
  Command command_;
  std::vector<std::string> positionals_;
  std::map<std::string, std::vector<std::string>> values_;
};

int64_t parse_int(const std::string& text, const std::string& what);
// `text` as a number when all of it is one and it is finite (strtod's syntax), else nothing.
std::optional<double> parse_number(const std::string& text);
std::vector<std::string> split(const std::string& s, char sep);
bool stdout_is_tty();

// One --shape item, "NAME=1x3x224x224" or "NAME:1x3x224x224". Throws InputError naming it.
std::pair<std::string, std::vector<int64_t>> parse_shape_flag(const std::string& item);

// The analysis options every model-predicting subcommand shares: --batch, --seq, --dim,
// --shape, --value, --mode, --fusion, --dtype, --predictor, --weights. Throws InputError naming the flag.
Options parse_analysis_options(const Args& args);
// --image-size N or HxW into opt.image_height / image_width, --images into opt.images (unset
// without the flags).
void parse_image_options(const Args& args, Options& opt);
// The config with --image-size and --images applied (set_image_size, set_images; unchanged
// without them).
ModelConfig with_image_options(ModelConfig config, const Options& opt);

// The model of a Hugging Face config (no file behind it: its path is empty), --image-size and
// --images applied. Throws InputError(`dims_error`) without --batch and --seq. `notes` gets config_notes' lines.
LoadedModel load_config_model(const std::string& config_path, const Options& opt, const std::string& dims_error,
                              std::vector<std::string>& notes);
LoadedModel load_config_model(const ModelConfig& config, const Options& opt, const std::string& dims_error,
                              std::vector<std::string>& notes);
// What a report of a config's model says about the config: config_dtype_note's line when no
// --dtype was given (config_serving_dtype_note's for a generation, `serving`),
// config_parallel_note's under --parallel tp, config_quantization_note's,
// config_multimodal_note's (each only when not empty).
std::vector<std::string> config_notes(const ModelConfig& config, const Options& opt, bool serving = false);

// Each distinct warning of the reports once on stderr ("neusight-onnx: warning: PREFIX..."),
// in order; a model's own warnings come with every GPU's report. The GPUs' own warnings of a
// kind and subject (Report::gpu_warnings) are one line naming every such GPU, as are their
// unaligned tensor-core GEMMs (Report::unaligned_gemms).
void print_warnings_once(const std::vector<Report>& reports, const std::string& prefix = "");

}  // namespace neusight::cli
