// cmd_compare.cpp - `neusight-onnx compare A.onnx B.onnx [...] --gpu g1,g2`: model variants
// side by side (end-to-end latency, speed-up against the first, class deltas, changed nodes).
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "args.h"
#include "commands.h"
#include "memory.h"
#include "outputs.h"
#include "pipeline.h"
#include "neusight/compare.h"
#include "neusight/neusight.h"

namespace neusight::cli {
namespace {

// --encoder ENC[,ENC...]: one encoder for every ONNX model, or one per model in order, an
// empty entry for a model without one (a --config model builds its own encoder).
std::vector<std::string> encoder_paths(const Args& args, const std::vector<std::string>& models) {
  std::vector<std::string> out(models.size());
  if (!args.has("--encoder")) return out;
  const std::vector<std::string> given = split(args.get("--encoder"), ',');
  if (given.size() != 1 && given.size() != models.size())
    throw InputError("--encoder: give one encoder for every ONNX model or one per model (" +
                     std::to_string(models.size()) + "), got " + std::to_string(given.size()));
  for (size_t m = 0; m < models.size(); ++m) {
    const std::string& enc = given.size() == 1 ? given[0] : given[m];
    if (enc.empty()) continue;
    if (is_config_path(models[m])) {
      if (given.size() == 1) continue;  // the one encoder is the ONNX models'
      throw InputError("--encoder: " + models[m] + " is a config (it builds its own encoder); leave its entry empty");
    }
    out[m] = enc;
  }
  if (std::all_of(out.begin(), out.end(), [](const std::string& e) { return e.empty(); }))
    throw InputError("--encoder: no ONNX model takes an encoder (a --config model builds its own)");
  return out;
}

}  // namespace

int cmd_compare(const Argv& argv) {
  Args args(argv, Command::compare);
  const auto& models = args.positionals();
  if (models.size() < 2) throw InputError("compare: give at least two models (A.onnx B.onnx ...)");
  if (!args.has("--gpu")) throw InputError("compare: --gpu is required (see `neusight-onnx gpus`)");
  Options opt = parse_analysis_options(args);
  parse_parallel_options(args, opt);  // every model on the same GPUs of each kind
  const int top = static_cast<int>(args.get_int("--top", 10, 0));
  for (const char* flag : {"--encoder", "--prefix-cached"})
    if (args.has(flag) && !args.has("--generate")) throw InputError(std::string(flag) + " applies to --generate PROMPT:NEW");

  const std::vector<Gpu> gpus = GpuDatabase::builtin().resolve_list(args.get("--gpu"));

  // Every model is loaded and predicted before anything is written.
  std::vector<std::vector<Report>> reports;
  if (args.has("--generate")) {  // each model's generation (its prefill is what the table compares)
    const GenerationOptions gen = parse_generation(args);
    const Options gopt = generation_options(args, opt);
    const std::vector<std::string> encoders = encoder_paths(args, models);
    for (size_t m = 0; m < models.size(); ++m) {
      const std::string& path = models[m];
      std::vector<std::string> notes;
      const Decoder decoder =
          encoders[m].empty() ? load_decoder(path, is_config_path(path), gopt, notes)
                              : onnx_seq2seq_decoder(load_model(encoders[m]), load_model(path), gopt);
      std::vector<Report> per_gpu = predict_generations(decoder, gopt, gen, nullptr, gpus);
      for (auto& r : per_gpu) r.warnings.insert(r.warnings.end(), notes.begin(), notes.end());
      print_warnings_once(per_gpu, path + ": ");
      reports.push_back(std::move(per_gpu));
    }
  }
  for (const auto& path : args.has("--generate") ? std::vector<std::string>{} : models) {
    std::vector<std::string> notes;  // a half-precision checkpoint predicted in FP32, a tp that does not divide
    const LoadedModel loaded =
        is_config_path(path) ? load_config_model(path, opt, path + ": a config needs --batch N and --seq N", notes)
               : load_model(path);
    const Analysis analysis = prepare(loaded, opt);
    std::vector<Report> per_gpu = predict_gpus(analysis, loaded, gpus, opt, notes);
    print_warnings_once(per_gpu, path + ": ");
    reports.push_back(std::move(per_gpu));
  }
  const Comparison c = compare_reports(model_labels(models), std::move(reports), top);

  OutputSet outputs;  // both or neither
  if (args.has("--json")) outputs.add_text(args.get("--json"), format_compare_json(c));
  if (args.has("--html")) outputs.add_text(args.get("--html"), format_compare_html(c));
  outputs.commit();
  if (!args.has("--quiet") && !outputs.writes_stdout()) {
    std::cout << format_compare_table(c, stdout_is_tty() && !args.has("--no-color"));
    std::cout.flush();
  }
  exit_now(0);  // the graph, analysis and reports need no teardown
  return 0;
}

}  // namespace neusight::cli
