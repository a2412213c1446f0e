// neusight_onnx.cpp - the Python module `neusight_onnx`: the CLI's analyses as functions that
// return the CLI's JSON as dicts, on the same library and steps (tools/pipeline.h).
//
// Keyword arguments become the CLI's flags and go through its parser, so a bad value gets the
// CLI's one-line message: InputError (exit 2) raises ValueError, RuntimeError (exit 1)
// RuntimeError; an argument of the wrong Python type raises TypeError. The GIL is released
// while a model is loaded, analysed, predicted and written.
#include <dlfcn.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "neusight/compare.h"
#include "neusight/dataset.h"
#include "neusight/model_builder.h"
#include "neusight/neusight.h"
#include "neusight/predictor.h"
#include "outputs.h"
#include "pipeline.h"

#ifndef NEUSIGHT_PY_DATA_REL
#define NEUSIGHT_PY_DATA_REL ""
#endif

namespace py = pybind11;

namespace neusight::python {
namespace {

using Argv = std::vector<std::string>;

// The C++ reports behind a report dict, for the writers.
struct ReportHandle {
  std::shared_ptr<const std::vector<Report>> reports;  // every GPU of the call, in order
  size_t index = 0;
  Options options;  // write_annotated infers the model's shapes again with them
};
struct ComparisonHandle {
  std::shared_ptr<const Comparison> comparison;
};

// dict subclasses created at import (kept for the life of the process).
PyObject* g_report_type = nullptr;
PyObject* g_comparison_type = nullptr;

std::string type_name(py::handle v) { return py::str(py::type::handle_of(v).attr("__name__")); }

[[noreturn]] void type_error(const std::string& what, const std::string& expected, py::handle got) {
  throw py::type_error(what + ": expected " + expected + ", got " + type_name(got));
}

bool is_pathlike(py::handle v) { return py::isinstance<py::str>(v) || py::hasattr(v, "__fspath__"); }

std::string fspath(py::handle v) {
  py::object p = py::module_::import("os").attr("fspath")(v);
  if (!py::isinstance<py::str>(p)) type_error("path", "str", p);
  return p.cast<std::string>();
}

// An integer argument as the CLI flag's text (the flag's parser checks the value).
std::string int_text(py::handle v, const std::string& what) {
  if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v)) type_error(what, "an int", v);
  return py::str(v);
}

// A number argument (int or float, not bool) as the CLI flag's text; `what` names it and its unit.
std::string number_text(py::handle v, const std::string& what, const std::string& unit) {
  if (py::isinstance<py::bool_>(v) || !(py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)))
    type_error(what, "a number (" + unit + ")", v);
  return py::str(py::float_(py::reinterpret_borrow<py::object>(v)));
}

std::string str_arg(py::handle v, const std::string& what) {
  if (!py::isinstance<py::str>(v)) type_error(what, "a str", v);
  return v.cast<std::string>();
}

std::string json_dumps(py::handle v) { return py::str(py::module_::import("json").attr("dumps")(v)); }
py::object json_loads(const std::string& text) { return py::module_::import("json").attr("loads")(py::str(text)); }

// The analysis keyword arguments, parsed as the CLI parses its flags.
struct AnalysisArgs {
  py::object batch = py::none(), seq = py::none(), dims = py::none(), shapes = py::none();
  py::object mode = py::str("inference"), dtype = py::none(), fusion = py::str("eager"), timing = py::str("device");
  py::object parallel = py::none(), link_bw = py::none(), kv_dtype = py::none(), attention = py::none();
  py::object host_dispatch_us = py::none(), image_size = py::none(), images = py::none();
  py::object predictor = py::str("neusight"), weights = py::none(), optimizer = py::none(), latency_slo = py::none();
  py::object recompute = py::none(), train_tokens = py::none(), gpu_cost = py::none(), lora = py::none();
  py::object prefix_cached = py::none(), sparsity = py::none();

  // latency_slo in ms (0 without it), refused beside a batch as --latency-slo is.
  double slo_ms() const {
    if (latency_slo.is_none()) return 0;
    if (!batch.is_none()) throw InputError("latency_slo chooses the batch; give it without batch");
    const double v = std::stod(number_text(latency_slo, "latency_slo", "ms"));
    if (!(v > 0)) throw InputError("latency_slo: expected a positive time in ms");
    return v;
  }

  Options parse() const { return parse_argv(argv()); }

  // The CLI's options of `argv` (argv() plus a command's own flags).
  static Options parse_argv(const Argv& argv) {
    // The main job's flags (tools/flags.h): parse_analysis_options and parse_parallel_options
    // read them.
    const cli::Args args(argv, cli::Command::analyze);
    Options opt = cli::parse_analysis_options(args);
    cli::parse_parallel_options(args, opt);
    return opt;
  }

  // The keyword arguments as the CLI's flags; fusion and timing only when given (None: the
  // flag's default, or --generate's).
  Argv argv() const {
    Argv argv;
    auto flag = [&](const char* f, const std::string& v) {
      argv.push_back(f);
      argv.push_back(v);
    };
    if (!batch.is_none()) flag("--batch", int_text(batch, "batch"));
    if (!seq.is_none()) flag("--seq", int_text(seq, "seq"));
    if (!dims.is_none()) {
      if (!py::isinstance<py::dict>(dims)) type_error("dims", "a dict of name: int", dims);
      for (auto [k, v] : py::reinterpret_borrow<py::dict>(dims))
        flag("--dim", str_arg(k, "dims key") + "=" + int_text(v, "dims['" + py::str(k).cast<std::string>() + "']"));
    }
    if (!shapes.is_none()) {
      // {input: [1, 3, 224, 224]} (or a "1x3x224x224" string): the CLI's --shape NAME=DIMS.
      if (!py::isinstance<py::dict>(shapes)) type_error("shapes", "a dict of name: list of int", shapes);
      for (auto [k, v] : py::reinterpret_borrow<py::dict>(shapes)) {
        const std::string name = str_arg(k, "shapes key");
        std::string dims_text;
        if (py::isinstance<py::str>(v)) {
          dims_text = v.cast<std::string>();
        } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
          for (auto d : py::reinterpret_borrow<py::sequence>(v))
            dims_text += (dims_text.empty() ? "" : "x") + int_text(py::reinterpret_borrow<py::object>(d), "shapes['" + name + "']");
        } else {
          type_error("shapes['" + name + "']", "a list of int or a string such as '1x3x224x224'", v);
        }
        flag("--shape", name + "=" + dims_text);
      }
    }
    flag("--mode", str_arg(mode, "mode"));
    if (!optimizer.is_none()) flag("--optimizer", str_arg(optimizer, "optimizer"));
    if (!recompute.is_none()) flag("--recompute", str_arg(recompute, "recompute"));
    if (!lora.is_none())  // a rank, or 'R,targets=REGEX' as --lora
      flag("--lora", py::isinstance<py::int_>(lora) && !py::isinstance<py::bool_>(lora)
                         ? std::to_string(lora.cast<int64_t>())
                         : str_arg(lora, "lora"));
    if (!prefix_cached.is_none()) flag("--prefix-cached", int_text(prefix_cached, "prefix_cached"));
    if (!sparsity.is_none()) flag("--sparsity", str_arg(sparsity, "sparsity"));
    if (!gpu_cost.is_none()) {
      // A number (every GPU) or {name: USD}, as --gpu-cost USD or NAME=USD,...
      std::string text;
      if (py::isinstance<py::dict>(gpu_cost)) {
        for (auto [k, v] : py::reinterpret_borrow<py::dict>(gpu_cost))
          text += (text.empty() ? "" : ",") + str_arg(k, "gpu_cost key") + "=" + number_text(v, "gpu_cost value", "USD");
      } else {
        text = number_text(gpu_cost, "gpu_cost", "USD a GPU-hour");
      }
      flag("--gpu-cost", text);
    }
    if (!train_tokens.is_none())
      flag("--train-tokens", py::isinstance<py::str>(train_tokens) ? train_tokens.cast<std::string>()
                                                                   : number_text(train_tokens, "train_tokens", "tokens"));
    if (!dtype.is_none()) flag("--dtype", str_arg(dtype, "dtype"));
    if (!kv_dtype.is_none()) flag("--kv-dtype", str_arg(kv_dtype, "kv_dtype"));
    if (!fusion.is_none()) flag("--fusion", str_arg(fusion, "fusion"));
    if (!attention.is_none()) flag("--attention", str_arg(attention, "attention"));
    if (!timing.is_none()) flag("--timing", str_arg(timing, "timing"));
    if (!host_dispatch_us.is_none())
      flag("--host-dispatch-us", number_text(host_dispatch_us, "host_dispatch_us", "us"));
    flag("--predictor", str_arg(predictor, "predictor"));
    if (!weights.is_none()) flag("--weights", fspath(weights));
    if (!parallel.is_none()) {
      if (py::isinstance<py::str>(parallel)) {
        flag("--parallel", parallel.cast<std::string>());
      } else if (py::isinstance<py::dict>(parallel)) {
        std::string spec;
        for (auto [k, v] : py::reinterpret_borrow<py::dict>(parallel))
          spec += (spec.empty() ? "" : ",") + str_arg(k, "parallel key") + "=" + py::str(v).cast<std::string>();
        flag("--parallel", spec);
      } else {
        type_error("parallel", "a str such as 'dp=2,tp=4' or a dict", parallel);
      }
    }
    if (!link_bw.is_none()) flag("--link-bw", number_text(link_bw, "link_bw", "GB/s"));
    if (!images.is_none()) flag("--images", int_text(images, "images"));
    if (!image_size.is_none()) {  // N, or (height, width)
      if (py::isinstance<py::list>(image_size) || py::isinstance<py::tuple>(image_size)) {
        const auto hw = py::reinterpret_borrow<py::sequence>(image_size);
        if (py::len(hw) != 2) type_error("image_size", "an int or (height, width)", image_size);
        flag("--image-size", int_text(hw[0], "image_size height") + "x" + int_text(hw[1], "image_size width"));
      } else {
        flag("--image-size", int_text(image_size, "image_size"));
      }
    }
    return argv;
  }
};

// A model argument, read with the GIL held; loaded with it released.
struct ModelSource {
  std::string path;   // a file
  std::string bytes;  // or serialized ModelProto bytes
  std::string what;   // names the bytes in errors

  // Bytes have no file name: the report names the graph instead.
  LoadedModel load() const {
    if (!path.empty()) return load_model(path);
    LoadedModel loaded = load_model_from_bytes(bytes, what);
    loaded.model.path = "";
    return loaded;
  }
};

ModelSource model_source(py::handle model) {
  ModelSource s;
  if (is_pathlike(model)) {
    s.path = fspath(model);
    if (s.path.empty()) throw InputError("model: empty path");
  } else if (py::isinstance<py::bytes>(model) || py::isinstance<py::bytearray>(model) ||
             py::isinstance<py::memoryview>(model)) {
    s.bytes = py::bytes(py::module_::import("builtins").attr("bytes")(model)).cast<std::string>();
    s.what = "model bytes";
  } else if (py::hasattr(model, "SerializeToString")) {
    s.bytes = model.attr("SerializeToString")().cast<std::string>();
    s.what = "onnx.ModelProto";
  } else {
    type_error("model", "a path, bytes or an onnx.ModelProto", model);
  }
  return s;
}

// A GPU argument: a name, alias or device-JSON path, or a dict (device JSON or a gpus() entry).
struct GpuSource {
  std::string name;  // for GpuDatabase::resolve
  std::string json;  // or a dict's JSON text

  Gpu resolve() const { return json.empty() ? GpuDatabase::builtin().resolve(name) : parse_gpu_json(json, "gpu dict"); }
};

GpuSource gpu_source(py::handle gpu) {
  GpuSource s;
  if (is_pathlike(gpu)) {
    s.name = fspath(gpu);
    if (s.name.empty()) throw InputError("gpu: empty GPU name");
  } else if (py::isinstance<py::dict>(gpu)) {
    s.json = json_dumps(gpu);
  } else {
    type_error("gpu", "a GPU name, a device-JSON path or a dict", gpu);
  }
  return s;
}

// One GPU, or a list of them or a comma-separated string (`many` says which was given).
std::vector<GpuSource> gpu_sources(py::handle gpu, bool& many) {
  many = py::isinstance<py::list>(gpu) || py::isinstance<py::tuple>(gpu);
  std::vector<GpuSource> out;
  // "all": every GPU of the database, in its order (a list of reports).
  auto add = [&out, &many](py::handle g) {
    GpuSource s = gpu_source(g);
    if (s.json.empty() && s.name.find(',') == std::string::npos && GpuDatabase::names_all(s.name)) {
      for (const Gpu& each : GpuDatabase::builtin().all()) out.push_back(GpuSource{each.name, ""});
      many = true;
    } else {
      out.push_back(std::move(s));
    }
  };
  if (!many) {
    add(gpu);
    // "h100,l4": a list, as the CLI's --gpu takes it (unless a file of that name exists).
    if (out.size() == 1 && out[0].json.empty() && out[0].name.find(',') != std::string::npos &&
        !std::filesystem::exists(out[0].name)) {
      const std::string list = out[0].name;
      out.clear();
      many = true;
      size_t from = 0;
      while (from <= list.size()) {
        const size_t comma = std::min(list.find(',', from), list.size());
        const std::string item = list.substr(from, comma - from);
        if (item.empty()) throw InputError("gpu: empty GPU name in '" + list + "'");
        out.push_back(GpuSource{item, ""});
        from = comma + 1;
      }
    }
    return out;
  }
  for (py::handle g : gpu) add(g);
  if (out.empty()) throw InputError("gpu: the GPU list is empty");
  return out;
}

std::vector<Gpu> resolve_all(const std::vector<GpuSource>& sources) {
  std::vector<Gpu> gpus;
  for (const auto& s : sources) gpus.push_back(s.resolve());
  return gpus;
}

py::object new_dict_of(PyObject* type, py::handle content, py::object native) {
  py::object d = py::reinterpret_borrow<py::object>(type)(content);
  d.attr("_native") = std::move(native);
  return d;
}

// Report dicts from one call's reports: one dict, or a list when a GPU list was given.
py::object report_dicts(std::vector<Report> reports, const Options& opt, bool many) {
  auto shared = std::make_shared<const std::vector<Report>>(std::move(reports));
  std::string text;
  {
    py::gil_scoped_release nogil;
    text = format_json(*shared);
  }
  py::object parsed = json_loads(text);
  if (shared->size() == 1) {
    py::object one = new_dict_of(g_report_type, parsed, py::cast(ReportHandle{shared, 0, opt}));
    if (!many) return one;
    py::list l;
    l.append(one);
    return l;
  }
  py::list l;
  for (size_t i = 0; i < shared->size(); ++i)
    l.append(new_dict_of(g_report_type, parsed[py::int_(i)], py::cast(ReportHandle{shared, i, opt})));
  return l;
}

// The reports on every GPU: at the bound batch, or (latency_slo) each GPU's largest batch within it.
std::vector<Report> predict_reports(const LoadedModel& loaded, const std::vector<Gpu>& gpus, const Options& opt,
                                    double slo_ms, const std::vector<std::string>& notes) {
  if (!(slo_ms > 0)) return cli::predict_gpus(prepare(loaded, opt), loaded, gpus, opt, notes);
  std::map<int64_t, Analysis> analyses;
  return cli::predict_within_latency(loaded, gpus, opt, slo_ms, notes, analyses);
}

py::object analyze(py::handle model, py::handle gpu, const AnalysisArgs& a) {
  const double slo = a.slo_ms();
  const Options opt = a.parse();
  bool many = false;
  const std::vector<GpuSource> gpu_src = gpu_sources(gpu, many);
  const ModelSource src = model_source(model);
  std::vector<Report> reports;
  {
    py::gil_scoped_release nogil;
    const std::vector<Gpu> gpus = resolve_all(gpu_src);  // GPUs first, as the CLI
    const LoadedModel loaded = src.load();
    reports = predict_reports(loaded, gpus, opt, slo, {});
  }
  return report_dicts(std::move(reports), opt, many);
}

// A Hugging Face config argument (a path or a dict), read with the GIL held; parsed with it
// released.
struct ConfigSource {
  std::string path;  // a config.json
  std::string json;  // or a dict's JSON text

  ModelConfig read() const { return json.empty() ? read_hf_config(path) : parse_hf_config(json, "config"); }
};

ConfigSource config_source(py::handle config) {
  ConfigSource s;
  if (py::isinstance<py::dict>(config)) s.json = json_dumps(config);
  else if (is_pathlike(config)) s.path = fspath(config);
  else type_error("config", "a config.json path or a dict", config);
  return s;
}

py::object from_config(py::handle config, py::handle gpu, const AnalysisArgs& a) {
  const double slo = a.slo_ms();
  Options opt = a.parse();
  if (slo > 0) opt.dims.batch = 1;  // each GPU's batch is searched for
  bool many = false;
  const std::vector<GpuSource> gpu_src = gpu_sources(gpu, many);
  const ConfigSource cfg = config_source(config);
  std::vector<Report> reports;
  {
    py::gil_scoped_release nogil;
    const std::vector<Gpu> gpus = resolve_all(gpu_src);
    std::vector<std::string> notes;
    const LoadedModel loaded = cli::load_config_model(cfg.read(), opt, "--config needs --batch N and --seq N", notes);
    reports = predict_reports(loaded, gpus, opt, slo, notes);
  }
  return report_dicts(std::move(reports), opt, many);
}

// A model argument of generate() / compare(): a Hugging Face config (a dict, or a path ending
// in .json) or an ONNX model.
bool is_config_arg(py::handle m) {
  return py::isinstance<py::dict>(m) || (is_pathlike(m) && cli::is_config_path(fspath(m)));
}

// The decoder of a generate() or compare() model: a config's (its config into `target`, its
// notes into `notes`), an ONNX encoder-decoder's with `enc`, or an ONNX decoder's.
Decoder source_decoder(const std::optional<ConfigSource>& cfg, const ModelSource& src, const std::optional<ModelSource>& enc,
                       const Options& opt, std::vector<std::string>& notes, std::optional<ModelConfig>* target = nullptr) {
  if (cfg) {
    const ModelConfig c = cli::with_image_options(cfg->read(), opt);
    notes = cli::config_notes(c, opt, true);
    if (target) *target = c;
    return config_decoder(c);
  }
  return enc ? onnx_seq2seq_decoder(enc->load(), src.load(), opt) : onnx_decoder(src.load());
}

py::object generate(py::handle model, py::handle gpu, py::handle prompt, py::handle new_tokens, py::handle speculative,
                    py::handle tpot_slo, py::handle ttft_slo, py::handle encoder, const AnalysisArgs& a) {
  Argv argv = a.argv();
  argv.push_back("--generate");
  argv.push_back(int_text(prompt, "prompt") + ":" + int_text(new_tokens, "new_tokens"));
  if (!speculative.is_none()) {
    argv.push_back("--speculative");
    argv.push_back(str_arg(speculative, "speculative"));
  }
  if (!tpot_slo.is_none()) {
    argv.push_back("--tpot-slo");
    argv.push_back(number_text(tpot_slo, "tpot_slo", "ms"));
  }
  if (!ttft_slo.is_none()) {
    argv.push_back("--ttft-slo");
    argv.push_back(number_text(ttft_slo, "ttft_slo", "ms"));
  }
  const cli::Args args(argv, cli::Command::analyze);
  const ServingTargets slo{args.get_double("--tpot-slo", 0), args.get_double("--ttft-slo", 0)};
  GenerationOptions gen = cli::parse_generation(args);
  const std::string draft_path = args.has("--speculative") ? cli::parse_speculative(args.get("--speculative"), gen) : "";
  const Options opt = cli::generation_options(args, AnalysisArgs::parse_argv(argv));
  bool many = false;
  const std::vector<GpuSource> gpu_src = gpu_sources(gpu, many);
  std::optional<ConfigSource> cfg;
  ModelSource src;
  if (is_config_arg(model)) cfg = config_source(model);
  else src = model_source(model);
  std::optional<ModelSource> enc;
  if (!encoder.is_none()) {
    if (cfg) throw InputError("encoder goes with an ONNX decoder (a config builds its own encoder)");
    enc = model_source(encoder);
  }
  std::vector<Report> reports;
  {
    py::gil_scoped_release nogil;
    const std::vector<Gpu> gpus = resolve_all(gpu_src);
    std::vector<std::string> notes;
    std::optional<ModelConfig> target;
    const Decoder decoder = source_decoder(cfg, src, enc, opt, notes, &target);
    std::optional<Decoder> draft;
    if (!draft_path.empty()) draft = cli::load_draft_decoder(draft_path, opt, target ? &*target : nullptr);
    reports = predict_generations(decoder, opt, gen, draft ? &*draft : nullptr, gpus, slo);
    for (auto& r : reports) r.warnings.insert(r.warnings.end(), notes.begin(), notes.end());
  }
  return report_dicts(std::move(reports), opt, many);
}

// compare(generate=(prompt, new_tokens)): the argv of `compare --generate PROMPT:NEW`.
Argv generation_argv(const AnalysisArgs& a, py::handle generate_arg) {
  if ((!py::isinstance<py::tuple>(generate_arg) && !py::isinstance<py::list>(generate_arg)) || py::len(generate_arg) != 2)
    type_error("generate", "a pair (prompt, new_tokens)", generate_arg);
  Argv argv = a.argv();
  argv.push_back("--generate");
  argv.push_back(int_text(generate_arg[py::int_(0)], "generate prompt") + ":" +
                 int_text(generate_arg[py::int_(1)], "generate new_tokens"));
  return argv;
}

// compare(encoder=...): one encoder for every ONNX model, or a list with one per model (None
// for a model without one, a config among them), as `compare --encoder`.
std::vector<std::optional<ModelSource>> encoder_sources(py::handle encoder, const std::vector<bool>& config) {
  std::vector<std::optional<ModelSource>> out(config.size());
  if (encoder.is_none()) return out;
  const bool per_model = py::isinstance<py::list>(encoder) || py::isinstance<py::tuple>(encoder);
  if (per_model && py::len(encoder) != config.size())
    throw InputError("encoder: give one encoder for every ONNX model or one per model (" +
                     std::to_string(config.size()) + "), got " + std::to_string(py::len(encoder)));
  for (size_t m = 0; m < config.size(); ++m) {
    py::handle e = per_model ? py::handle(encoder[py::int_(m)]) : encoder;
    if (e.is_none() || (config[m] && !per_model)) continue;
    if (config[m]) throw InputError("encoder: model " + std::to_string(m + 1) + " is a config (it builds its own encoder); give None");
    out[m] = model_source(e);
  }
  if (std::none_of(out.begin(), out.end(), [](const auto& e) { return e.has_value(); }))
    throw InputError("encoder: no ONNX model takes an encoder (a config builds its own)");
  return out;
}

py::object compare(py::handle models, py::handle gpu, const AnalysisArgs& a, py::handle top_arg,
                   py::handle labels_arg, py::handle generate_arg, py::handle encoder_arg) {
  if (!py::isinstance<py::list>(models) && !py::isinstance<py::tuple>(models))
    type_error("models", "a list of models", models);
  if (py::len(models) < 2) throw InputError("compare: give at least two models (A.onnx B.onnx ...)");
  if (!encoder_arg.is_none() && generate_arg.is_none()) throw InputError("encoder applies to generate=(prompt, new_tokens)");
  // generate=: each model's generation, as `compare --generate` (serving kernels and kernel
  // timing unless fusion / timing say otherwise).
  std::optional<GenerationOptions> gen;
  Options opt;
  if (generate_arg.is_none()) {
    opt = a.parse();
  } else {
    const Argv argv = generation_argv(a, generate_arg);
    const cli::Args args(argv, cli::Command::compare);
    gen = cli::parse_generation(args);
    opt = cli::generation_options(args, AnalysisArgs::parse_argv(argv));
  }
  const std::string top_text = int_text(top_arg, "top");
  const int top = static_cast<int>(cli::Args({"--top", top_text}, cli::Command::compare).get_int("--top", 10, 0));
  bool many = false;
  const std::vector<GpuSource> gpu_src = gpu_sources(gpu, many);

  // Each model: an ONNX model, or a Hugging Face config (a dict, or a path ending in .json).
  struct Item {
    std::optional<ConfigSource> config;
    ModelSource model;
  };
  std::vector<Item> items;
  std::vector<std::string> names;  // for the default labels: file names, else model1, model2, ...
  for (py::handle m : models) {
    Item it;
    const std::string path = is_pathlike(m) ? fspath(m) : "";
    if (is_config_arg(m)) it.config = config_source(m);
    else it.model = model_source(m);
    names.push_back(!path.empty() ? path : "model" + std::to_string(items.size() + 1));
    items.push_back(std::move(it));
  }
  std::vector<bool> is_config;
  for (const auto& it : items) is_config.push_back(it.config.has_value());
  const std::vector<std::optional<ModelSource>> encoders = encoder_sources(encoder_arg, is_config);
  std::vector<std::string> labels;
  if (labels_arg.is_none()) {
    labels = cli::model_labels(names);
  } else {
    if (!py::isinstance<py::list>(labels_arg) && !py::isinstance<py::tuple>(labels_arg))
      type_error("labels", "a list of str", labels_arg);
    for (py::handle l : labels_arg) labels.push_back(str_arg(l, "labels item"));
    if (labels.size() != items.size())
      throw InputError("labels: " + std::to_string(labels.size()) + " labels for " + std::to_string(items.size()) +
                       " models");
  }

  std::shared_ptr<Comparison> c;
  {
    py::gil_scoped_release nogil;
    const std::vector<Gpu> gpus = resolve_all(gpu_src);
    std::vector<std::vector<Report>> reports;
    for (size_t m = 0; gen && m < items.size(); ++m) {  // generations
      std::vector<std::string> notes;
      const Decoder decoder = source_decoder(items[m].config, items[m].model, encoders[m], opt, notes);
      std::vector<Report> per_gpu = predict_generations(decoder, opt, *gen, nullptr, gpus);
      for (auto& r : per_gpu) r.warnings.insert(r.warnings.end(), notes.begin(), notes.end());
      reports.push_back(std::move(per_gpu));
    }
    for (const auto& it : gen ? std::vector<Item>{} : items) {
      std::vector<std::string> notes;
      const std::string name = it.config && !it.config->path.empty() ? it.config->path : "config";
      const LoadedModel loaded =
          it.config ? cli::load_config_model(it.config->read(), opt, name + ": a config needs --batch N and --seq N",
                                             notes)
                    : it.model.load();
      reports.push_back(cli::predict_gpus(prepare(loaded, opt), loaded, gpus, opt, notes));
    }
    c = std::make_shared<Comparison>(compare_reports(labels, std::move(reports), top));
  }
  std::string text;
  {
    py::gil_scoped_release nogil;
    text = format_compare_json(*c);
  }
  return new_dict_of(g_comparison_type, json_loads(text), py::cast(ComparisonHandle{c}));
}

py::list gpus() {
  std::string text;
  {
    py::gil_scoped_release nogil;
    text = format_gpus_json(GpuDatabase::builtin());
  }
  return json_loads(text);
}

py::list kernels(py::handle rows, py::handle gpu, py::handle devices, py::handle predictor_arg, py::handle weights,
                 py::handle timing_arg) {
  const std::string predictor = str_arg(predictor_arg, "predictor");
  if (!is_predictor_name(predictor))
    throw InputError("--predictor: expected neusight, neusight-paper or roofline, got '" + predictor + "'");
  std::optional<Timing> timing;  // None: each row in its dtype's convention (cli::default_row_timing)
  if (!timing_arg.is_none()) timing = cli::kernels_timing(str_arg(timing_arg, "timing"));
  const bool from_row = py::isinstance<py::str>(gpu) && gpu.cast<std::string>() == "from-row";
  std::optional<GpuSource> fixed_src;
  if (!from_row) fixed_src = gpu_source(gpu);
  const std::string devices_dir = devices.is_none() ? "" : fspath(devices);
  const std::string weights_dir = weights.is_none() ? "" : fspath(weights);

  // Rows: a dataset CSV, or dicts with the same columns (what csv.DictReader gives).
  std::string csv;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> fields;
  py::list given;
  if (is_pathlike(rows)) {
    csv = fspath(rows);
  } else if (py::isinstance<py::list>(rows) || py::isinstance<py::tuple>(rows)) {
    given = py::reinterpret_steal<py::list>(PySequence_List(rows.ptr()));
    if (!given) throw py::error_already_set();
    for (size_t i = 0; i < given.size(); ++i) {
      py::handle r = given[i];
      const std::string where = "rows[" + std::to_string(i) + "]";
      if (!py::isinstance<py::dict>(r)) type_error(where, "a dict of column: value", r);
      std::vector<std::string> keys, values;
      for (auto [k, v] : py::reinterpret_borrow<py::dict>(r)) {
        keys.push_back(str_arg(k, where + " column"));
        values.push_back(v.is_none() ? "" : py::str(v).cast<std::string>());
      }
      if (i == 0) header = keys;
      else if (keys != header) throw InputError(where + ": columns differ from rows[0]'s");
      fields.push_back(std::move(values));
    }
    if (given.size() == 0) throw InputError("rows: no rows");
  } else {
    type_error("rows", "a CSV path or a list of dicts", rows);
  }

  Dataset d;
  cli::KernelRows k;
  {
    py::gil_scoped_release nogil;
    const std::map<std::string, Gpu> dir_gpus =
        devices_dir.empty() ? std::map<std::string, Gpu>{} : cli::load_devices_dir(devices_dir);
    std::optional<Gpu> fixed;
    if (fixed_src) fixed = fixed_src->resolve();
    d = csv.empty() ? dataset_from_rows(std::move(header), std::move(fields), "rows") : read_dataset(csv);
    const std::string what = csv.empty() ? "rows" : csv;
    if (from_row && d.column("Device") < 0) throw InputError(what + ": --gpu from-row needs a Device column");
    k = cli::predict_kernel_rows(
        d,
        [&](size_t i) { return csv.empty() ? "rows[" + std::to_string(i) + "]" : csv + ": row " + std::to_string(i + 2); },
        fixed, dir_gpus, predictor, weights_dir, timing);
  }

  py::list out;
  for (size_t i : k.kept) {
    py::dict row;
    if (csv.empty()) {
      row = py::dict(py::reinterpret_borrow<py::dict>(given[i]).attr("copy")());
    } else {
      for (size_t c = 0; c < d.header.size(); ++c) row[py::str(d.header[c])] = py::str(d.rows[i].fields[c]);
    }
    const cli::KernelRowPrediction& p = k.rows[i];
    row["kernel_class"] = p.cls;
    row["pred_latency_ms"] = p.ms;
    row["tile"] = p.tile;
    row["tiles"] = p.tiles;
    row["waves"] = p.waves;
    row["pred_low_ms"] = p.low;
    row["pred_high_ms"] = p.high;
    out.append(row);
  }
  return out;
}

// The C++ side of a report dict; ValueError for anything else.
const ReportHandle& report_handle(py::handle report, const std::string& what) {
  if (!PyObject_TypeCheck(report.ptr(), reinterpret_cast<PyTypeObject*>(g_report_type)))
    throw InputError(what + ": expected a report returned by analyze() or from_config(), got " + type_name(report));
  return py::cast<const ReportHandle&>(report.attr("_native"));
}

void write_text(const std::string& path, const std::string& text) {
  cli::OutputSet out;
  out.add_text(path, text);
  out.commit();
}

void write_html(py::handle report, py::handle path_arg) {
  if (!is_pathlike(path_arg)) type_error("path", "a str or os.PathLike", path_arg);
  const std::string path = fspath(path_arg);
  if (PyObject_TypeCheck(report.ptr(), reinterpret_cast<PyTypeObject*>(g_comparison_type))) {
    const auto c = py::cast<const ComparisonHandle&>(report.attr("_native")).comparison;
    py::gil_scoped_release nogil;
    write_text(path, format_compare_html(*c));
    return;
  }
  std::vector<Report> reports;
  if (py::isinstance<py::list>(report) || py::isinstance<py::tuple>(report)) {
    for (py::handle r : report) {
      const ReportHandle& h = report_handle(r, "report list item");
      reports.push_back((*h.reports)[h.index]);
    }
    if (reports.empty()) throw InputError("report: the report list is empty");
  } else {
    const ReportHandle& h = report_handle(report, "report");
    reports.push_back((*h.reports)[h.index]);
  }
  py::gil_scoped_release nogil;
  write_text(path, format_html(reports));
}

void write_annotated(py::handle model, py::handle report, py::handle path_arg) {
  if (!is_pathlike(path_arg)) type_error("path", "a str or os.PathLike", path_arg);
  const std::string path = fspath(path_arg);
  const ReportHandle& h = report_handle(report, "report");
  const auto reports = h.reports;
  const Report& r = (*reports)[h.index];
  if (r.generation)
    throw InputError("write_annotated: a generate() report has no annotation of one graph (as --out does not apply to "
                     "--generate); annotate an analyze() report");
  const Options opt = h.options;
  const ModelSource src = model_source(model);
  py::gil_scoped_release nogil;
  const LoadedModel loaded = src.load();
  const Analysis analysis = prepare(loaded, opt);
  bool same = analysis.graph.nodes.size() == r.nodes.size();
  for (size_t i = 0; same && i < r.nodes.size(); ++i) same = analysis.graph.nodes[i].name == r.nodes[i].name;
  if (!same)
    throw InputError("write_annotated: the report is not of this model (its nodes differ: " +
                     std::to_string(r.nodes.size()) + " in the report, " +
                     std::to_string(analysis.graph.nodes.size()) + " in the model)");
  const AnnotatedWrite ann = cli::annotations_for(r);
  cli::OutputSet out;
  out.add(path, [&](const std::string& tmp) { neusight::write_annotated(loaded, analysis.graph, ann, tmp); });
  out.commit();
}

// A dict subclass that carries the C++ result in its one slot; copies and pickles are plain
// dicts (the C++ side stays with the original).
PyObject* make_dict_type(const char* name, const char* doc) {
  py::object dict_type = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyDict_Type));
  py::dict ns;
  ns["__slots__"] = py::make_tuple("_native");
  ns["__module__"] = "neusight_onnx";
  ns["__doc__"] = doc;
  py::object type = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(
      name, py::make_tuple(dict_type), ns);
  type.attr("__reduce__") = py::cpp_function(
      [dict_type](py::handle self) {
        return py::make_tuple(dict_type, py::make_tuple(py::reinterpret_steal<py::object>(PyDict_Copy(self.ptr()))));
      },
      py::is_method(type));
  return type.release().ptr();
}

// The data files (GPU database, tiles, weights) next to this module: the build tree's data/
// beside python/, or the install prefix's share/neusight. NEUSIGHT_DATA_DIR still wins.
void find_data_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_data_dir), &info) == 0 || !info.dli_fname) return;
  namespace fs = std::filesystem;
  const fs::path here = fs::path(info.dli_fname).parent_path();
  std::error_code ec;
  for (const fs::path& cand : {here / ".." / "data", here / NEUSIGHT_PY_DATA_REL})
    if (fs::exists(cand / "gpus.json", ec)) {
      set_default_data_dir(fs::weakly_canonical(cand, ec).string());
      return;
    }
}

// The analysis keyword arguments every model-predicting function takes.
AnalysisArgs analysis_args(py::object batch, py::object seq, py::object dims, py::object shapes, py::object mode,
                           py::object dtype, py::object fusion, py::object timing, py::object parallel,
                           py::object link_bw, py::object predictor, py::object weights, py::object attention,
                           py::object host_dispatch_us) {
  AnalysisArgs a;
  a.batch = std::move(batch);
  a.seq = std::move(seq);
  a.dims = std::move(dims);
  a.shapes = std::move(shapes);
  a.mode = std::move(mode);
  a.dtype = std::move(dtype);
  a.fusion = std::move(fusion);
  a.timing = std::move(timing);
  a.parallel = std::move(parallel);
  a.link_bw = std::move(link_bw);
  a.predictor = std::move(predictor);
  a.weights = std::move(weights);
  a.attention = std::move(attention);
  a.host_dispatch_us = std::move(host_dispatch_us);
  return a;
}

}  // namespace
}  // namespace neusight::python

PYBIND11_MODULE(neusight_onnx, m) {
  using namespace neusight::python;
  using namespace pybind11::literals;
  m.doc() =
      "Predicts how fast an ONNX model runs on a GPU (the NeuSight method), as the neusight-onnx CLI does.\n\n"
      "analyze() and from_config() return the CLI's --json report as a dict (a list for a list of GPUs); "
      "compare() the `compare --json` object. Bad input raises ValueError, a failure RuntimeError, both with "
      "the CLI's one-line message; a wrong argument type raises TypeError.";
  m.attr("__version__") = neusight::version();
  neusight::single_threaded_blas();  // loading the module started OpenBLAS's workers (predictor.h)
  find_data_dir();
  m.attr("data_dir") = neusight::data_dir();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const neusight::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const neusight::RuntimeError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  py::class_<ReportHandle>(m, "_ReportHandle");
  py::class_<ComparisonHandle>(m, "_ComparisonHandle");
  g_report_type = make_dict_type(
      "Report", "A report of analyze() / from_config(): the CLI's --json object as a dict, which the writers accept.");
  g_comparison_type =
      make_dict_type("Comparison", "The result of compare(): `neusight-onnx compare --json` as a dict.");
  m.attr("Report") = py::handle(g_report_type);
  m.attr("Comparison") = py::handle(g_comparison_type);

  const py::none none;
  m.def(
      "analyze",
      [](py::object model, py::object gpu, py::object batch, py::object seq, py::object dims, py::object shapes,
         py::object mode, py::object dtype, py::object fusion, py::object timing, py::object parallel,
         py::object link_bw, py::object predictor, py::object weights, py::object attention,
         py::object host_dispatch_us, py::object optimizer, py::object latency_slo, py::object recompute,
         py::object train_tokens, py::object gpu_cost, py::object lora, py::object sparsity) {
        AnalysisArgs a = analysis_args(batch, seq, dims, shapes, mode, dtype, fusion, timing, parallel, link_bw,
                                       predictor, weights, attention, host_dispatch_us);
        a.optimizer = std::move(optimizer);
        a.recompute = std::move(recompute);
        a.lora = std::move(lora);
        a.sparsity = std::move(sparsity);
        a.latency_slo = std::move(latency_slo);
        a.train_tokens = std::move(train_tokens);
        a.gpu_cost = std::move(gpu_cost);
        return analyze(model, gpu, a);
      },
      "model"_a, "gpu"_a, "batch"_a = none, "seq"_a = none, "dims"_a = none, "shapes"_a = none, "mode"_a = "inference",
      "dtype"_a = none, "fusion"_a = "eager", "timing"_a = "device", "parallel"_a = none, py::kw_only(),
      "link_bw"_a = none, "predictor"_a = "neusight", "weights"_a = none, "attention"_a = none,
      "host_dispatch_us"_a = none, "optimizer"_a = none, "latency_slo"_a = none, "recompute"_a = none,
      "train_tokens"_a = none, "gpu_cost"_a = none, "lora"_a = none, "sparsity"_a = none,
      "Predicts `model` (a path, bytes of a serialized ModelProto, or an onnx.ModelProto) on `gpu` (a name, an\n"
      "alias, a device-JSON path, a dict in that format or a gpus() entry; or a list of them, or \"h100,l4\"). Returns the CLI's\n"
      "--json report as a dict, or a list of them for a list of GPUs. batch/seq/dims bind symbolic dims\n"
      "(dims={'NAME': VALUE}); mode 'inference'|'training'; dtype None (auto)|'fp32'|'tf32'|'fp16'|'bf16'|'fp8'|\n"
      "'fp4'|'int8'; fusion 'none'|'eager'|'full'; attention None (auto)|'fused'|'unfused' as --attention; timing\n"
      "'device'|'kernel'|'eager'; host_dispatch_us as --host-dispatch-us; parallel 'dp=N,tp=N,pp=N[,microbatches=M]\n"
      "[,schedule=gpipe|1f1b][,vp=V][,zero=1|2|3][,sp=1]' or a dict of those, with link_bw in GB/s; optimizer\n"
      "(training) 'sgd'|'momentum'|'adam' as --optimizer; recompute (training) 'none'|'full'|'selective' as\n"
      "--recompute; lora a rank or 'R[,adapters=N][,targets=REGEX]' as --lora (trained, or in inference served);\n"
      "sparsity '2:4[,targets=REGEX]' or 'auto' as --sparsity (linear layers' weights pruned 2:4, inference);\n"
      "latency_slo (ms) as --latency-slo: per GPU the largest batch within it that fits (batch then unset); train_tokens (training; a number or '15T') as --train-tokens; gpu_cost (USD a GPU-hour, or\n"
      "{gpu: USD}) as --gpu-cost. The report's 'throughput' holds samples/s, tokens/s, TFLOP/s, the share of the\n"
      "peak (MFU) and the costs. The GIL is released while it runs.");
  m.def(
      "from_config",
      [](py::object config, py::object gpu, py::object batch, py::object seq, py::object dims, py::object mode,
         py::object dtype, py::object fusion, py::object timing, py::object parallel, py::object link_bw,
         py::object predictor, py::object weights, py::object attention, py::object host_dispatch_us,
         py::object image_size, py::object images, py::object optimizer, py::object latency_slo, py::object recompute,
         py::object train_tokens, py::object gpu_cost, py::object lora, py::object sparsity) {
        AnalysisArgs a = analysis_args(batch, seq, dims, py::none(), mode, dtype, fusion, timing, parallel, link_bw,
                                       predictor, weights, attention, host_dispatch_us);
        a.image_size = std::move(image_size);
        a.images = std::move(images);
        a.optimizer = std::move(optimizer);
        a.recompute = std::move(recompute);
        a.lora = std::move(lora);
        a.sparsity = std::move(sparsity);
        a.latency_slo = std::move(latency_slo);
        a.train_tokens = std::move(train_tokens);
        a.gpu_cost = std::move(gpu_cost);
        return from_config(config, gpu, a);
      },
      "config"_a, "gpu"_a, "batch"_a = none, "seq"_a = none, "dims"_a = none, "mode"_a = "inference", "dtype"_a = none,
      "fusion"_a = "eager", "timing"_a = "device", "parallel"_a = none, py::kw_only(), "link_bw"_a = none,
      "predictor"_a = "neusight", "weights"_a = none, "attention"_a = none, "host_dispatch_us"_a = none,
      "image_size"_a = none, "images"_a = none, "optimizer"_a = none, "latency_slo"_a = none, "recompute"_a = none,
      "train_tokens"_a = none, "gpu_cost"_a = none, "lora"_a = none, "sparsity"_a = none,
      "Predicts the model of a Hugging Face config (a config.json path or a dict) like `neusight-onnx --config`;\n"
      "batch and seq are required (batch not with latency_slo); image_size (an int or (height, width)) as\n"
      "--image-size, images as --images.\n"
      "Arguments and result as analyze().");
  m.def(
      "compare",
      [](py::object models, py::object gpu, py::object batch, py::object seq, py::object dims, py::object mode,
         py::object dtype, py::object fusion, py::object timing, py::object top, py::object labels,
         py::object predictor, py::object weights, py::object attention, py::object host_dispatch_us,
         py::object image_size, py::object images, py::object generate, py::object encoder, py::object kv_dtype,
         py::object optimizer, py::object recompute, py::object lora, py::object parallel, py::object link_bw,
         py::object prefix_cached, py::object sparsity) {
        AnalysisArgs a = analysis_args(batch, seq, dims, py::none(), mode, dtype, fusion, timing, parallel,
                                       link_bw, predictor, weights, attention, host_dispatch_us);
        a.image_size = std::move(image_size);
        a.images = std::move(images);
        a.kv_dtype = std::move(kv_dtype);
        a.optimizer = std::move(optimizer);
        a.recompute = std::move(recompute);
        a.lora = std::move(lora);
        a.prefix_cached = std::move(prefix_cached);
        a.sparsity = std::move(sparsity);
        return compare(models, gpu, a, top, labels, generate, encoder);
      },
      "models"_a, "gpu"_a, "batch"_a = none, "seq"_a = none, "dims"_a = none, "mode"_a = "inference", "dtype"_a = none,
      "fusion"_a = none, "timing"_a = none, py::kw_only(), "top"_a = 10, "labels"_a = none,
      "predictor"_a = "neusight", "weights"_a = none, "attention"_a = none, "host_dispatch_us"_a = none,
      "image_size"_a = none, "images"_a = none, "generate"_a = none, "encoder"_a = none, "kv_dtype"_a = none,
      "optimizer"_a = none, "recompute"_a = none, "lora"_a = none, "parallel"_a = none, "link_bw"_a = none,
      "prefix_cached"_a = none, "sparsity"_a = none,
      "Compares model variants across GPUs like `neusight-onnx compare`: `models` holds at least two models\n"
      "(paths, bytes or ModelProtos; a config dict or a path ending in .json is a Hugging Face config), `gpu`\n"
      "one GPU or a list. Returns the `compare --json` object as a dict. `labels` names the models (default:\n"
      "the file names; model1, model2, ... for the others); `top` the changed nodes listed per variant.\n"
      "generate=(prompt, new_tokens) compares the models' generations as `compare --generate` (batch, default 1;\n"
      "fusion and timing default to a serving engine's, as in generate()); encoder: the ONNX encoder of\n"
      "encoder-decoders in optimum's two files, one for every ONNX model or a list with one per model (None for\n"
      "a config's), as --encoder. fusion and timing default to 'eager' and 'device' otherwise. optimizer,\n"
      "recompute, lora, sparsity, parallel and link_bw (every model on the same GPUs) as in analyze();\n"
      "prefix_cached (with generate) as in generate().");
  m.def(
      "generate",
      [](py::object model, py::object gpu, py::object prompt, py::object new_tokens, py::object batch, py::object dtype,
         py::object fusion, py::object timing, py::object parallel, py::object speculative, py::object kv_dtype,
         py::object link_bw, py::object predictor, py::object weights, py::object tpot_slo, py::object attention,
         py::object host_dispatch_us, py::object image_size, py::object images, py::object encoder, py::object dims,
         py::object shapes, py::object ttft_slo, py::object gpu_cost, py::object lora, py::object prefix_cached,
         py::object sparsity) {
        if ((!tpot_slo.is_none() || !ttft_slo.is_none()) && !batch.is_none() && int_text(batch, "batch") != "1")
          throw neusight::InputError(std::string(tpot_slo.is_none() ? "ttft_slo" : "tpot_slo") +
                                     " chooses the batch; give it without batch");
        AnalysisArgs a = analysis_args(batch, py::none(), dims, shapes, py::str("inference"), dtype, fusion, timing,
                                       parallel, link_bw, predictor, weights, attention, host_dispatch_us);
        a.kv_dtype = std::move(kv_dtype);
        a.image_size = std::move(image_size);
        a.images = std::move(images);
        a.gpu_cost = std::move(gpu_cost);
        a.lora = std::move(lora);
        a.prefix_cached = std::move(prefix_cached);
        a.sparsity = std::move(sparsity);
        return generate(model, gpu, prompt, new_tokens, speculative, tpot_slo, ttft_slo, encoder, a);
      },
      "model"_a, "gpu"_a, "prompt"_a, "new_tokens"_a, "batch"_a = 1, "dtype"_a = none, "fusion"_a = none,
      "timing"_a = none, "parallel"_a = none, py::kw_only(), "speculative"_a = none, "kv_dtype"_a = none,
      "link_bw"_a = none, "predictor"_a = "neusight", "weights"_a = none, "tpot_slo"_a = none, "attention"_a = none,
      "host_dispatch_us"_a = none, "image_size"_a = none, "images"_a = none, "encoder"_a = none, "dims"_a = none,
      "shapes"_a = none, "ttft_slo"_a = none, "gpu_cost"_a = none, "lora"_a = none, "prefix_cached"_a = none,
      "sparsity"_a = none,
      "Predicts an LLM generation like `neusight-onnx --generate PROMPT:NEW`: a prefill of `prompt` tokens, then\n"
      "`new_tokens` decode steps with a KV cache, for `batch` sequences. `model` is a Hugging Face config (a dict or\n"
      "a path ending in .json: a decoder, or T5 / Switch / Whisper, whose prompt is the encoder's text / the decoder's\n"
      "special tokens) or an ONNX decoder with past_key_values inputs (path, bytes or ModelProto). As\n"
      "serving engines run (kernel timing, fused kernels) unless fusion / timing say otherwise; parallel\n"
      "'tp=N[,ep=M]'; speculative 'K,accept=P[,draft=MODEL]' as --speculative; kv_dtype as --kv-dtype; tpot_slo\n"
      "(ms) as --tpot-slo: per GPU the largest batch that fits with a mean TPOT of at most it (batch then unused);\n"
      "ttft_slo (ms) as --ttft-slo, the same for the time to first token (both given: both met); gpu_cost as in\n"
      "analyze() (the generation's usd_per_m_tokens); lora as --lora (the adapters served unmerged);\n"
      "prefix_cached as --prefix-cached (the prompt's first tokens cached, held once); sparsity as in analyze().\n"
      "Returns the CLI's --json report (its 'generation' object: ttft_ms, tpot_ms, tokens_per_s, each with\n"
      "its 80% interval (ttft_low_ms, ttft_high_ms, ...), kv_cache_bytes, memory_bytes, ...), or a list of\n"
      "them for a list of GPUs. image_size (an int or (height, width)) as --image-size, images as --images.\n"
      "encoder: an encoder-decoder's ONNX encoder (optimum's encoder_model.onnx; `model` its\n"
      "decoder_model_merged.onnx) as --encoder; dims / shapes as in analyze() bind its input dims (Whisper's).");
  m.def("gpus", &gpus, "The GPU database: one dict per GPU (name, aliases, spec-sheet numbers), as `gpus --json`.");
  m.def("kernels", &kernels, "rows"_a, "gpu"_a, "devices"_a = none, "predictor"_a = "neusight", "weights"_a = none,
        "timing"_a = none,
        "Predicts dataset-format kernel rows like `neusight-onnx kernels`: `rows` is a CSV path or a list of\n"
        "dicts with the dataset's columns (OPName, Device, B, M, N, K, ...); `gpu` a GPU (rows whose Device\n"
        "names another are skipped) or 'from-row' (each row on its Device, looked up in `devices`, a folder\n"
        "of device JSONs, then in the database); `timing` 'eager'|'device'|'kernel' (None: eager for fp32\n"
        "rows, kernel for other dtypes). Returns each predicted row as a dict with kernel_class,\n"
        "pred_latency_ms, tile, tiles, waves, pred_low_ms and pred_high_ms added.");
  m.def("write_html", &write_html, "report"_a, "path"_a,
        "Writes the self-contained HTML report of an analyze() report, a list of them (one model on several\n"
        "GPUs; the first is charted in detail) or a compare() result.");
  m.def("write_annotated", &write_annotated, "model"_a, "report"_a, "path"_a,
        "Writes `model` (the one analyze() predicted) with each node's latency in its doc_string and the\n"
        "prediction in metadata_props, as `--out` does.");
}
