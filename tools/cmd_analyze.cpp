// cmd_analyze.cpp - the main job: predict a model's latency on one or more GPUs.
#include <cstdio>
#include <iostream>
#include <optional>

#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "memory.h"
#include "outputs.h"
#include "pipeline.h"
#include "neusight/neusight.h"

namespace neusight::cli {
namespace {

// "[####      ]" for step `done` of `total` (the TTY progress line on stderr).
std::string progress_bar(size_t done, size_t total) {
  const size_t width = 20, filled = total ? width * done / total : width;
  return "[" + std::string(filled, '#') + std::string(width - filled, ' ') + "]";
}

// --top N with --generate: the N slowest nodes of the prefill and of the last decode step.
std::string generation_top_nodes(const Report& r, int top, bool color) {
  const GenerationReport& g = *r.generation;
  Report step;
  step.gpu = r.gpu;
  step.nodes = g.step_nodes;
  step.e2e_latency_ms = g.step_node_ms;
  return format_top_nodes(r, "slowest nodes of the prefill (" + std::to_string(g.prompt) + " tokens)", top, color) + "\n" +
         format_top_nodes(step, "slowest nodes of the last decode step (" + std::to_string(g.step_kv_len) + " cached)", top,
                          color);
}

// `--gpu all` prints the GPU table alone; what it leaves out is in the files.
std::string all_gpus_note() {
  return "--gpu all: one row per GPU of the database; each GPU's own table is in --json, --csv and --html, or name "
         "the GPUs\n\n";
}

// --latency-slo MS (0 without it): the batch is searched for, so neither --batch nor a
// generation goes with it (predict_for_latency_slo refuses --parallel training).
double latency_slo(const Args& args) {
  if (!args.has("--latency-slo")) return 0;
  if (args.has("--generate")) throw InputError("--latency-slo applies to a forward pass; a generation takes --tpot-slo MS");
  if (args.has("--batch")) throw InputError("--latency-slo chooses the batch; give it without --batch");
  return args.get_double("--latency-slo", 0);
}

// --generate: a prefill of the prompt, then decode steps with a KV cache (neusight.h).
int run_generate(const Args& args, const Options& base, const std::vector<Gpu>& gpus) {
  GenerationOptions gen = parse_generation(args);
  for (const char* flag : {"--tpot-slo", "--ttft-slo"})
    if (args.has(flag) && args.has("--batch"))
      throw InputError(std::string(flag) + " chooses the batch; give it without --batch");
  const std::string draft_path = args.has("--speculative") ? parse_speculative(args.get("--speculative"), gen) : "";
  const Options opt = generation_options(args, base);
  std::vector<std::string> notes;
  const bool config = args.has("--config");
  ModelConfig target;  // the --config model's (mtp drafts from it)
  if (config && args.has("--encoder"))
    throw InputError("--encoder goes with an ONNX decoder (a --config model builds its own encoder)");
  const Decoder decoder =
      args.has("--encoder")
          ? onnx_seq2seq_decoder(load_model(args.get("--encoder")), load_model(args.positionals()[0]), opt)
          : load_decoder(config ? args.get("--config") : args.positionals()[0], config, opt, notes, &target);
  std::optional<Decoder> draft;
  if (!draft_path.empty()) draft = load_draft_decoder(draft_path, opt, config ? &target : nullptr);
  std::vector<Report> reports = predict_generations(decoder, opt, gen, draft ? &*draft : nullptr, gpus,
                                                    ServingTargets{args.get_double("--tpot-slo", 0), args.get_double("--ttft-slo", 0)});
  for (auto& r : reports) r.warnings.insert(r.warnings.end(), notes.begin(), notes.end());
  print_warnings_once(reports);
  OutputSet outputs;  // all or none
  if (args.has("--json")) outputs.add_text(args.get("--json"), format_json(reports));
  if (args.has("--html")) outputs.add_text(args.get("--html"), format_html(reports));
  if (args.has("--csv")) outputs.add_text(args.get("--csv"), format_csv(reports, args.has("--csv-kernels")));
  outputs.commit();
  if (!args.has("--quiet") && !outputs.writes_stdout()) {
    const bool color = stdout_is_tty() && !args.has("--no-color");
    const int top = static_cast<int>(args.get_int("--top", 0, 0));
    const bool every_gpu = GpuDatabase::names_all(args.get("--gpu"));
    for (size_t i = 0; i < reports.size() && !every_gpu; ++i) {
      std::cout << (i ? "\n" : "") << format_generation(reports[i], color);
      if (top > 0) std::cout << "\n" << generation_top_nodes(reports[i], top, color);
    }
    if (every_gpu) std::cout << all_gpus_note();
    if (reports.size() > 1) std::cout << (every_gpu ? "" : "\n") << format_generation_gpu_table(reports);
    std::cout.flush();
  }
  exit_now(0);
  return 0;
}

}  // namespace

int cmd_analyze(const Argv& argv) {
  Args args(argv, Command::analyze);
  const auto& pos = args.positionals();
  if (args.has("--config") == !pos.empty())
    throw InputError(pos.empty() ? "no model given (MODEL.onnx or --config CFG.json)"
                                 : "give either MODEL.onnx or --config, not both");
  if (pos.size() > 1) throw InputError("unexpected argument '" + pos[1] + "'");
  if (!args.has("--gpu")) throw InputError("--gpu is required (see `neusight-onnx gpus`)");

  Options opt = parse_analysis_options(args);
  for (const char* f : {"--image-size", "--images"})
    if (args.has(f) && !args.has("--config"))
      throw InputError(std::string(f) + " applies to --config vision-language models (an ONNX model's image dims: --dim or --shape)");
  parse_parallel_options(args, opt);
  const int top = static_cast<int>(args.get_int("--top", 0, 0));
  const std::string group = args.get("--group");
  if (group != "node" && group != "layer") throw InputError("--group: expected node or layer, got '" + group + "'");

  // GPUs first: a typo in --gpu should fail before any model work.
  const std::vector<Gpu> gpus = GpuDatabase::builtin().resolve_list(args.get("--gpu"));
  const double slo = latency_slo(args);
  if (args.has("--generate")) return run_generate(args, opt, gpus);
  for (const char* flag : {"--speculative", "--tpot-slo", "--ttft-slo", "--encoder", "--prefix-cached"})
    if (args.has(flag)) throw InputError(std::string(flag) + " applies to --generate PROMPT:NEW");

  if (slo > 0) opt.dims.batch = 1;  // each GPU's batch is searched for (a --config graph keeps it symbolic)
  std::vector<std::string> notes;  // a half-precision checkpoint predicted in FP32, a tp that does not divide
  const LoadedModel loaded =
      args.has("--config")
          ? load_config_model(args.get("--config"), opt, "--config needs --batch N and --seq N", notes)
          : load_model(pos[0]);
  std::map<int64_t, Analysis> slo_analyses;  // --latency-slo: every batch tried, shared by the GPUs
  const Analysis analysis = slo > 0 ? Analysis{} : prepare(loaded, opt);

  const bool progress = ::isatty(2) != 0 && gpus.size() > 1 && !args.has("--quiet");
  auto before_each = [&](size_t i) {
    if (progress) std::fprintf(stderr, "\r%s predicting on %s (%zu/%zu)\033[K", progress_bar(i, gpus.size()).c_str(),
                               gpus[i].alias().c_str(), i + 1, gpus.size());
  };
  const std::vector<Report> reports = slo > 0 ? predict_within_latency(loaded, gpus, opt, slo, notes, slo_analyses, before_each)
                                              : predict_gpus(analysis, loaded, gpus, opt, notes, before_each);
  if (progress) std::fprintf(stderr, "\r\033[K");
  // The analysis the first GPU's report was made from (--out annotates the model with it).
  const Analysis& first = slo > 0 ? slo_analyses.at(reports.front().latency_slo->batch) : analysis;

  // The reports keep their warnings (JSON, HTML), a GPU's own notes included.
  print_warnings_once(reports);

  // All outputs or none: each is written to a temporary file first, renamed at the end.
  OutputSet outputs;
  if (args.has("--json")) outputs.add_text(args.get("--json"), format_json(reports));
  if (args.has("--html")) outputs.add_text(args.get("--html"), format_html(reports));
  if (args.has("--csv")) outputs.add_text(args.get("--csv"), format_csv(reports, args.has("--csv-kernels")));
  if (args.has("--out")) {
    // One latency per node: the model annotated for the first GPU of a list.
    if (reports.size() > 1)
      std::fprintf(stderr, "neusight-onnx: warning: --out annotates the model for the first GPU (%s); the other GPUs' "
                           "latencies are in --json, --csv and --html\n", reports.front().gpu.alias().c_str());
    const AnnotatedWrite ann = annotations_for(reports.front());
    outputs.add(args.get("--out"),
                [&](const std::string& tmp) { write_annotated(loaded, first.graph, ann, tmp); });
  }
  outputs.commit();

  if (!args.has("--quiet") && !outputs.writes_stdout()) {  // '-' put a report there
    TableOptions to;
    to.top = top;
    to.color = stdout_is_tty() && !args.has("--no-color");
    to.group_layers = group == "layer";
    const bool every_gpu = GpuDatabase::names_all(args.get("--gpu"));
    for (size_t i = 0; i < reports.size() && !every_gpu; ++i) {
      if (i) std::cout << "\n";
      std::cout << format_table(reports[i], to);
      if (reports[i].parallel) std::cout << format_parallel(*reports[i].parallel);
    }
    if (every_gpu) std::cout << all_gpus_note();
    if (reports.size() > 1) std::cout << (every_gpu ? "" : "\n") << format_gpu_table(reports);
    std::cout.flush();
  }
  exit_now(0);  // the graph, analysis and reports need no teardown
  return 0;
}

}  // namespace neusight::cli
