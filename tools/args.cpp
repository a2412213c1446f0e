// args.cpp - command-line flag parsing.
#include "args.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "neusight/model_builder.h"
#include "neusight/precision.h"

namespace neusight::cli {

std::optional<double> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

int64_t parse_int(const std::string& text, const std::string& what) {
  if (text.empty()) throw InputError(what + ": expected an integer, got nothing");
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || v > (int64_t(1) << 62) || v < -(int64_t(1) << 62))
    throw InputError(what + ": '" + text + "' is out of range (at most 2^62)");
  if (*end != '\0') throw InputError(what + ": expected an integer, got '" + text + "'");
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool stdout_is_tty() { return ::isatty(1) != 0; }

std::pair<std::string, std::vector<int64_t>> parse_shape_flag(const std::string& item) {
  // NAME=DIMS, or trtexec's NAME:DIMS (the last separator: ONNX names may hold ':').
  size_t sep = item.rfind('=');
  if (sep == std::string::npos) sep = item.rfind(':');
  if (sep == std::string::npos || sep == 0 || sep + 1 == item.size())
    throw InputError("--shape: expected NAME=DIMS or NAME:DIMS (e.g. input=1x3x224x224), got '" + item + "'");
  const std::string name = item.substr(0, sep), text = item.substr(sep + 1);
  std::vector<int64_t> dims;
  const auto parts = split(text, 'x');
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& d = parts[i];
    if (d.empty() || !std::all_of(d.begin(), d.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      throw InputError("--shape " + name + "=" + text + ": dim " + std::to_string(i) +
                       " must be a non-negative integer, got '" + d + "'");
    dims.push_back(parse_int(d, "--shape " + name + " dim " + std::to_string(i)));
  }
  return {name, dims};
}

void parse_image_options(const Args& args, Options& opt) {
  if (args.has("--images")) opt.images = args.get_int("--images", 1, 1);
  if (!args.has("--image-size")) return;
  const std::string text = args.get("--image-size");  // N (square) or HxW
  const size_t x = text.find_first_of("xX");
  const std::string h = text.substr(0, x), w = x == std::string::npos ? h : text.substr(x + 1);
  for (const std::string& part : {h, w})
    if (part.empty() || !std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      throw InputError("--image-size: expected N or HEIGHTxWIDTH in pixels, got '" + text + "'");
  opt.image_height = parse_int(h, "--image-size height");
  opt.image_width = parse_int(w, "--image-size width");
  if (opt.image_height <= 0 || opt.image_width <= 0) throw InputError("--image-size: height and width must be positive");
}

namespace {

// A token count: a number with an optional K, M, B (or G) or T suffix ("300B", "1.5T", "1e12").
double parse_token_count(const std::string& text) {
  std::string s = text;
  double scale = 1;
  if (!s.empty()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
    const double by = c == 'K' ? 1e3 : c == 'M' ? 1e6 : (c == 'B' || c == 'G') ? 1e9 : c == 'T' ? 1e12 : 0;
    if (by > 0) {
      scale = by;
      s.pop_back();
    }
  }
  const std::optional<double> n = parse_number(s);
  const double v = n ? *n * scale : 0;
  if (!(v >= 1 && v <= 1e18))
    throw InputError("--train-tokens: expected a token count from 1 to 1e18, such as 1e12, 300B or 15T, got '" + text + "'");
  return v;
}

// --gpu-cost: "2.49" (every GPU) or "h100=2.49,b200=5.2" (by name or alias, resolved as
// --gpu resolves them), in US dollars a GPU-hour.
std::map<std::string, double> parse_gpu_cost(const std::string& text) {
  std::map<std::string, double> out;
  for (const auto& item : split(text, ',')) {
    const auto eq = item.rfind('=');
    const std::string name = eq == std::string::npos ? "" : item.substr(0, eq);
    const std::string value = eq == std::string::npos ? item : item.substr(eq + 1);
    const double usd = parse_number(value).value_or(0);
    if (!(usd > 0) || (eq != std::string::npos && name.empty()))
      throw InputError("--gpu-cost: expected USD a GPU-hour or GPU=USD,..., got '" + item + "'");
    std::string key;
    try {
      key = name.empty() ? "" : GpuDatabase::builtin().resolve(name).name;
    } catch (const InputError& e) {
      throw InputError(std::string("--gpu-cost: ") + e.what());
    }
    if (!out.emplace(key, usd).second)
      throw InputError("--gpu-cost: " + (key.empty() ? std::string("more than one price for every GPU") : key + " priced twice"));
  }
  return out;
}

}  // namespace

// --lora R[,base=nf4][,adapters=N][,targets=all|REGEX]: LoRA adapters of rank R (trained with
// --mode training, served unmerged otherwise, N of them at once); the targets last, as a
// pattern may hold commas.
void parse_lora(const Args& args, Options& opt) {
  if (!args.has("--lora")) return;
  const std::string spec = args.get("--lora");
  const std::string usage = "--lora: expected R[,base=nf4][,adapters=N][,targets=all|REGEX], got '" + spec + "'";
  size_t comma = spec.find(',');
  const std::string rank = spec.substr(0, comma);
  if (rank.empty()) throw InputError(usage);
  opt.lora.rank = parse_int(rank, "--lora");
  if (opt.lora.rank < 1 || opt.lora.rank > 65536) throw InputError("--lora: the rank is 1 to 65536, got '" + rank + "'");
  while (comma != std::string::npos) {
    const std::string rest = spec.substr(comma + 1);
    if (rest.rfind("targets=", 0) == 0) {
      if (rest.size() == 8) throw InputError(usage);
      opt.lora.targets = rest.substr(8);
      break;
    }
    const size_t next = spec.find(',', comma + 1);
    const std::string item = spec.substr(comma + 1, next == std::string::npos ? std::string::npos : next - comma - 1);
    if (item.rfind("adapters=", 0) == 0) {
      opt.lora.adapters = parse_int(item.substr(9), "--lora adapters");
      if (opt.lora.adapters < 1 || opt.lora.adapters > 65536)
        throw InputError("--lora: adapters is 1 to 65536, got '" + item.substr(9) + "'");
    } else if (item == "base=nf4") {
      opt.lora.nf4_base = true;
    } else {
      throw InputError(usage);
    }
    comma = next;
  }
}

// --sparsity 2:4[,targets=all|REGEX] | auto: the linear layers' weights pruned 2:4 (auto: those
// whose values show it); the targets last, as a pattern may hold commas.
void parse_sparsity(const Args& args, Options& opt) {
  if (!args.has("--sparsity")) return;
  const std::string spec = args.get("--sparsity");
  const size_t comma = spec.find(',');
  const std::string pattern = spec.substr(0, comma);
  if (pattern == "auto" && comma == std::string::npos) {
    opt.sparsity.from_weights = true;
    return;
  }
  if (pattern != "2:4")
    throw InputError("--sparsity: expected 2:4[,targets=all|REGEX] or auto (2:4 structured sparsity is the pattern "
                     "GPUs run), got '" + spec + "'");
  opt.sparsity.two_four = true;
  if (comma == std::string::npos) return;
  const std::string rest = spec.substr(comma + 1);
  if (rest.rfind("targets=", 0) != 0 || rest.size() == 8)
    throw InputError("--sparsity: expected 2:4[,targets=all|REGEX], got '" + spec + "'");
  opt.sparsity.targets = rest.substr(8);
}

Options parse_analysis_options(const Args& args) {
  Options opt;
  opt.dims.batch = args.get_int("--batch", -1);
  opt.dims.seq = args.get_int("--seq", -1);
  for (const auto& d : args.all("--dim")) {
    const auto eq = d.find('=');
    if (eq == std::string::npos || eq == 0) throw InputError("--dim: expected NAME=VALUE, got '" + d + "'");
    const int64_t v = parse_int(d.substr(eq + 1), "--dim " + d.substr(0, eq));
    if (v < 0) throw InputError("--dim " + d + ": dims must be non-negative");
    auto [it, fresh] = opt.dims.named.emplace(d.substr(0, eq), v);
    if (!fresh && it->second != v)
      throw InputError("--dim " + it->first + ": given twice with different values (" + std::to_string(it->second) +
                       " and " + std::to_string(v) + ")");
  }
  for (const auto& list : args.all("--shape"))
    for (const auto& item : split(list, ',')) {
      auto [name, dims] = parse_shape_flag(item);
      auto [it, fresh] = opt.dims.shapes.emplace(name, dims);
      if (!fresh && it->second != dims) throw InputError("--shape " + name + ": given twice with different dims");
    }
  for (const auto& list : args.all("--value"))
    for (const auto& item : split(list, ',')) {
      const auto eq = item.rfind('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        throw InputError("--value: expected NAME=VALUE, got '" + item + "'");
      const std::string name = item.substr(0, eq), text = item.substr(eq + 1);
      double v = 0;
      if (text == "true" || text == "false") {
        v = text == "true" ? 1 : 0;
      } else {
        const std::optional<double> n = parse_number(text);
        if (!n) throw InputError("--value " + name + ": expected a number, got '" + text + "'");
        v = *n;
      }
      opt.dims.values[name] = v;
    }
  parse_image_options(args, opt);
  const std::string mode = args.get("--mode");
  if (mode != "inference" && mode != "training")
    throw InputError("--mode: expected inference or training, got '" + mode + "'");
  opt.mode = mode == "training" ? Mode::training : Mode::inference;
  const std::string optimizer = args.get("--optimizer");
  if (optimizer == "sgd") opt.optimizer = Optimizer::sgd;
  else if (optimizer == "momentum") opt.optimizer = Optimizer::momentum;
  else if (optimizer == "adam") opt.optimizer = Optimizer::adam;
  else throw InputError("--optimizer: expected sgd, momentum or adam, got '" + optimizer + "'");
  if (args.has("--optimizer") && opt.mode != Mode::training)
    throw InputError("--optimizer applies to --mode training");
  parse_lora(args, opt);
  parse_sparsity(args, opt);
  const std::string recompute = args.get("--recompute");
  if (recompute == "none") opt.recompute = Recompute::none;
  else if (recompute == "full") opt.recompute = Recompute::full;
  else if (recompute == "selective") opt.recompute = Recompute::selective;
  else throw InputError("--recompute: expected none, full or selective, got '" + recompute + "'");
  if (opt.recompute != Recompute::none && opt.mode != Mode::training)
    throw InputError("--recompute " + recompute + " recomputes a training step's activations: add --mode training");
  const std::string fusion = args.get("--fusion");
  if (fusion == "none") opt.fusion = Fusion::none;
  else if (fusion == "eager") opt.fusion = Fusion::eager;
  else if (fusion == "full") opt.fusion = Fusion::full;
  else throw InputError("--fusion: expected none, eager or full, got '" + fusion + "'");
  const std::string attention = args.get("--attention");
  if (attention == "auto") opt.attention = Attention::automatic;
  else if (attention == "fused") opt.attention = Attention::fused;
  else if (attention == "unfused") opt.attention = Attention::unfused;
  else throw InputError("--attention: expected auto, fused or unfused, got '" + attention + "'");
  const std::string dt = args.get("--dtype");
  if (dt != "auto") {
    auto parsed = parse_dtype(dt);
    if (!parsed || !(is_float(*parsed) || *parsed == DType::i8))
      throw InputError("--dtype: expected auto, fp32, fp64, tf32, fp16, bf16, fp8, fp4 or int8, got '" + dt + "'");
    opt.dtype = *parsed;
    if (opt.dtype == DType::i8 && opt.mode == Mode::training)
      throw InputError("--dtype int8 (INT8 weight and activation GEMMs) predicts inference; training takes a float dtype");
  }
  if (args.has("--kv-dtype")) {
    const std::string kv = args.get("--kv-dtype");
    const auto parsed = parse_dtype(kv);
    if (!parsed || !is_float(*parsed) || *parsed == DType::tf32 || *parsed == DType::f4e2m1 || *parsed == DType::f64)
      throw InputError("--kv-dtype: expected fp8, fp16, bf16 or fp32, got '" + kv + "'");
    opt.kv_dtype = *parsed;
    if (opt.mode == Mode::training) throw InputError("--kv-dtype: a KV cache is an inference matter (no --mode training)");
  }
  const std::string predictor = args.get("--predictor");
  if (!parse_predictor_kind(predictor, opt.predictor))
    throw InputError("--predictor: expected neusight, neusight-paper or roofline, got '" + predictor + "'");
  opt.weights_dir = args.get("--weights");
  const std::string timing = args.get("--timing");
  if (!parse_timing(timing, opt.timing))
    throw InputError("--timing: expected device, kernel or eager, got '" + timing + "'");
  opt.host_dispatch_us = args.get_double("--host-dispatch-us", 0);
  if (args.has("--gpu-cost")) opt.gpu_cost_per_hour = parse_gpu_cost(args.get("--gpu-cost"));
  if (args.has("--train-tokens")) {
    if (opt.mode != Mode::training) throw InputError("--train-tokens applies to --mode training");
    opt.train_tokens = parse_token_count(args.get("--train-tokens"));
  }
  return opt;
}

namespace {

// Whether `flag` of `command` names a text output (a report, the kernels' CSV), which '-' sends
// to standard output, or an output that needs a path (an ONNX model, a folder).
bool text_output(Command command, const std::string& flag) {
  if (command == Command::kernels) return flag == "--out";
  return (command == Command::analyze || command == Command::compare) &&
         (flag == "--json" || flag == "--html" || flag == "--csv");
}
bool path_output(Command command, const std::string& flag) {
  return (flag == "--out" && (command == Command::analyze || command == Command::export_model || command == Command::train)) ||
         (flag == "-o" && command == Command::export_model);
}
// Whether `flag` of `command` names files the run reads (comma lists: compare's encoders).
bool path_input(Command command, const std::string& flag) {
  return flag == "--config" || flag == "--encoder" || (command == Command::kernels && flag == "--csv");
}
// Flags given once per name or value, whose repeats add (--dim, --shape, --value).
bool repeatable(const std::string& flag) { return flag == "--dim" || flag == "--shape" || flag == "--value"; }

// One file's identity for comparing paths: its canonical path, or the absolute normal form of
// one that does not exist yet.
std::string file_key(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(std::filesystem::path(path), ec).lexically_normal();
  const std::filesystem::path p = std::filesystem::weakly_canonical(abs, ec);
  return (ec ? abs : p).string();
}

}  // namespace

Args::Args(const std::vector<std::string>& argv, Command command) : command_(command) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && std::isdigit(static_cast<unsigned char>(a[1])))) {
      std::string flag = a, value;
      bool has_value = false;
      if (auto eq = a.find('='); eq != std::string::npos) {
        flag = a.substr(0, eq);
        value = a.substr(eq + 1);
        has_value = true;
      }
      const Flag* f = find_flag(command, flag);
      if (!f) throw InputError("unknown option '" + flag + "' (see --help)");
      if (!f->takes_value) {
        if (has_value) throw InputError(flag + ": takes no value");
        values_[flag].push_back("1");
      } else {
        if (!has_value) {
          if (i + 1 >= argv.size()) throw InputError(flag + ": missing value");
          value = argv[++i];
        }
        values_[flag].push_back(value);
      }
    } else {
      positionals_.push_back(a);
    }
  }
  // Standard output ('-') takes one text output; checked before any work is done.
  int on_stdout = 0;
  for (const auto& [flag, values] : values_)
    for (const auto& v : values) {
      if (v != "-") continue;
      if (path_output(command, flag))
        throw InputError(flag + ": this output is binary and needs a file path, not '-' (standard output)");
      if (text_output(command, flag) && ++on_stdout > 1)
        throw InputError("only one output can be written to standard output ('-')");
    }
  check_repeats_and_paths();
}

// A flag given twice with different values (the last won, silently); two outputs on one file
// (one of them lost); an output on a file the run reads (the model overwritten by its
// annotated copy). Checked before any work.
void Args::check_repeats_and_paths() const {
  for (const auto& [flag, values] : values_)
    for (const auto& v : values)
      if (!repeatable(flag) && v != values.front())
        throw InputError(flag + ": given twice with different values ('" + values.front() + "' and '" + v + "')");
  std::vector<std::pair<std::string, std::string>> outputs, inputs;  // (file key, "flag path")
  for (const auto& [flag, values] : values_)
    for (const auto& v : values) {
      if (v != "-" && (text_output(command_, flag) || path_output(command_, flag)))
        outputs.emplace_back(file_key(v), flag + " " + v);
      if (path_input(command_, flag))
        for (const auto& part : split(v, ','))
          if (!part.empty() && part != "-") inputs.emplace_back(file_key(part), flag + " " + part);
    }
  for (const auto& p : positionals_) inputs.emplace_back(file_key(p), p);
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (outputs[i].first == outputs[j].first)
        throw InputError(outputs[i].second + " and " + outputs[j].second + " write the same file; give each its own");
    for (const auto& in : inputs)
      if (outputs[i].first == in.first)
        throw InputError(outputs[i].second + ": would overwrite an input of this run (" + in.second +
                         "); write it elsewhere");
  }
}

std::string Args::get(const std::string& flag) const {
  const Flag* f = find_flag(command_, flag);
  return get(flag, f ? f->fallback : "");
}

std::string Args::get(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> Args::all(const std::string& flag) const {
  auto it = values_.find(flag);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::get_int(const std::string& flag, int64_t fallback, int64_t min) const {
  if (!has(flag)) return fallback;
  const int64_t v = parse_int(get(flag), flag);
  if (v < min) throw InputError(flag + ": must be at least " + std::to_string(min) + ", got " + get(flag));
  return v;
}

double Args::get_double(const std::string& flag, double fallback, bool allow_zero) const {
  if (!has(flag)) return fallback;
  const std::string s = get(flag);
  const double v = parse_number(s).value_or(-1);
  if (!(v > 0 || (allow_zero && v == 0)))
    throw InputError(flag + ": expected a " + (allow_zero ? "non-negative" : "positive") + " number, got '" + s + "'");
  return v;
}

LoadedModel load_config_model(const std::string& config_path, const Options& opt, const std::string& dims_error,
                              std::vector<std::string>& notes) {
  return load_config_model(read_hf_config(config_path), opt, dims_error, notes);
}

ModelConfig with_image_options(ModelConfig cfg, const Options& opt) {
  if (opt.image_height > 0) set_image_size(cfg, opt.image_height, opt.image_width);
  if (opt.images > 0) set_images(cfg, opt.images);
  return cfg;
}

LoadedModel load_config_model(const ModelConfig& given, const Options& opt, const std::string& dims_error,
                              std::vector<std::string>& notes) {
  const ModelConfig cfg = with_image_options(given, opt);
  // A vision encoder's sequence is its patches: the batch alone is asked for.
  if (cfg.image_size > 0 && opt.dims.batch < 0)
    throw InputError("--config of a " + cfg.model_type + " model (an image encoder) needs --batch N");
  if (cfg.image_size <= 0 && (opt.dims.batch < 0 || opt.dims.seq < 0)) throw InputError(dims_error);
  if (cfg.learned_positions && opt.dims.seq > cfg.max_positions)
    throw InputError("--seq " + std::to_string(opt.dims.seq) + ": a " + cfg.model_type + " model has learned positions for " +
                     std::to_string(cfg.max_positions) + " tokens (its config's position table)");
  if (cfg.image_in_sequence() && opt.dims.seq < cfg.vision.sequence_tokens())
    throw InputError("--seq " + std::to_string(opt.dims.seq) + ": each " + cfg.language_model_of + " sequence holds its " +
                     (cfg.vision.images > 1 ? std::to_string(cfg.vision.images) + " images' " : std::string("image's ")) +
                     std::to_string(cfg.vision.sequence_tokens()) + " tokens; --seq must be at least that");
  LoadedModel loaded = build_model(cfg);  // after the checks: a 175B graph is not built for nothing
  loaded.model.path = "";
  notes = config_notes(cfg, opt);
  return loaded;
}

std::vector<std::string> config_notes(const ModelConfig& cfg, const Options& opt, bool serving) {
  std::vector<std::string> notes;
  const std::string dtype_note =
      opt.dtype != DType::undefined ? std::string() : serving ? config_serving_dtype_note(cfg) : config_dtype_note(cfg);
  for (const std::string& n : {dtype_note,
                               config_parallel_note(cfg, opt.parallel.tp), config_quantization_note(cfg),
                               config_multimodal_note(cfg)})
    if (!n.empty()) notes.push_back(n);
  return notes;
}

void print_warnings_once(const std::vector<Report>& reports, const std::string& prefix) {
  for (const std::string& line : warnings_once(reports))
    std::fprintf(stderr, "neusight-onnx: warning: %s%s\n", prefix.c_str(), line.c_str());
}

}  // namespace neusight::cli
