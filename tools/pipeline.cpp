// pipeline.cpp - the shared steps of the CLI and the Python module (see pipeline.h).
#include "pipeline.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

namespace neusight::cli {
namespace {

// Latency text for annotations: four significant digits, so microsecond kernels stay visible.
std::string sig(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", ms);
  return buf;
}

// One kernel's line of a node's text: phase, class, op, latency, tile, waves, bound, utilization.
void kernel_line(std::ostream& os, const KernelReport& k) {
  os << "\n  " << phase_name(k.kernel.phase) << " " << kernel_class_name(k.kernel.cls) << " " << k.kernel.op
     << " latency_ms=" << sig(k.prediction.latency_ms) << " tile=" << k.tiling.tile << " waves=" << k.tiling.waves
     << " bound=" << k.prediction.bound() << " util=" << sig(100 * k.prediction.utilization) << "%"
     << (k.prediction.extrapolated ? " extrapolated" : "");
  if (!k.kernel.note.empty()) os << " (" << k.kernel.note << ")";
}

// The per-node text Netron shows in the node's properties.
std::string node_doc(const NodeReport& n) {
  std::ostringstream os;
  os << "neusight: latency_ms=" << sig(n.latency_ms) << " (80% interval " << sig(n.latency_low_ms) << "-"
     << sig(n.latency_high_ms) << ")";
  if (!n.no_kernel.empty()) os << "\n  no kernel: " << n.no_kernel;
  for (const auto& k : n.kernels) kernel_line(os, k);
  return os.str();
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool same_gpu(const Gpu& g, const std::string& device) {
  const std::string d = lower(device);
  if (lower(g.name) == d) return true;
  for (const auto& a : g.aliases)
    if (lower(a) == d) return true;
  return false;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace

void parse_parallel_options(const Args& args, Options& opt) {
  if (args.has("--parallel")) opt.parallel = parse_parallel(args.get("--parallel"));
  if (!args.has("--link-bw")) return;
  if (!opt.parallel.active) throw InputError("--link-bw needs --parallel");
  const std::string lb = args.get("--link-bw");
  size_t used = 0;
  try {
    opt.parallel.link_gbps = std::stod(lb, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != lb.size() || lb.empty() || !(opt.parallel.link_gbps > 0) || opt.parallel.link_gbps > 1e6)
    throw InputError("--link-bw: expected a positive bandwidth in GB/s, got '" + lb + "'");
}

std::vector<Report> predict_gpus(const Analysis& analysis, const LoadedModel& loaded, const std::vector<Gpu>& gpus,
                                 const Options& opt, const std::vector<std::string>& notes,
                                 const std::function<void(size_t)>& before_each) {
  std::vector<Report> reports;
  reports.reserve(gpus.size());
  for (const auto& g : gpus) {
    if (before_each) before_each(reports.size());
    reports.push_back(predict(analysis, loaded.model, g, opt));
    reports.back().warnings.insert(reports.back().warnings.end(), notes.begin(), notes.end());
  }
  return reports;
}

std::vector<Report> predict_within_latency(const LoadedModel& loaded, const std::vector<Gpu>& gpus, const Options& opt,
                                           double slo_ms, const std::vector<std::string>& notes,
                                           std::map<int64_t, Analysis>& analyses,
                                           const std::function<void(size_t)>& before_each) {
  std::vector<Report> reports;
  for (const auto& g : gpus) {
    if (before_each) before_each(reports.size());
    reports.push_back(predict_for_latency_slo(loaded, opt, g, slo_ms, &analyses));
    reports.back().warnings.insert(reports.back().warnings.end(), notes.begin(), notes.end());
  }
  return reports;
}

AnnotatedWrite annotations_for(const Report& r) {
  AnnotatedWrite ann;
  ann.nodes.reserve(r.nodes.size());
  // Under pipeline parallelism each node says its stage and the GPU that runs it.
  std::vector<std::string> stage_of(r.nodes.size());
  const size_t stages = r.parallel ? r.parallel->stages.size() : 0;
  for (size_t s = 0; stages > 1 && s < stages; ++s) {
    const StageReport& st = r.parallel->stages[s];
    for (int i = std::max(st.first_node, 0); i <= st.last_node && static_cast<size_t>(i) < stage_of.size(); ++i)
      stage_of[static_cast<size_t>(i)] = "\n  pipeline stage " + std::to_string(s) + " of " + std::to_string(stages) +
                                         " (pipeline GPU " + std::to_string(st.gpu) + ")";
  }
  for (size_t i = 0; i < r.nodes.size(); ++i)
    ann.nodes.push_back({r.nodes[i].name, node_doc(r.nodes[i]) + stage_of[i], r.nodes[i].latency_ms});
  // The nodes inside control-flow bodies ("<node>/<body node>"): the kernels each ran, every
  // trip of a loop together, in the order they ran.
  std::map<std::string, NodeReport> body;
  std::vector<std::string> order;
  for (const auto& n : r.nodes)
    for (const auto& k : n.kernels) {
      if (k.kernel.body_node.empty()) continue;
      auto [it, fresh] = body.try_emplace(k.kernel.body_node);
      if (fresh) order.push_back(k.kernel.body_node);
      it->second.kernels.push_back(k);
      it->second.latency_ms += k.prediction.latency_ms;
    }
  for (const auto& name : order) {
    const NodeReport& b = body[name];
    std::ostringstream os;
    os << "neusight: latency_ms=" << sig(b.latency_ms) << " (" << b.kernels.size() << " kernel"
       << (b.kernels.size() == 1 ? "" : "s") << " of its enclosing node's)";
    for (const auto& k : b.kernels) kernel_line(os, k);
    ann.nodes.push_back({name, os.str(), b.latency_ms});
  }
  ann.metadata = {{"neusight.gpu", r.gpu.name},
                  {"neusight.mode", r.mode == Mode::training ? "training" : "inference"},
                  {"neusight.dtype", dtype_name(r.dtype)},
                  {"neusight.dtype_source", dtype_source_name(r.dtype_source)},
                  {"neusight.e2e_latency_ms", sig(r.e2e_latency_ms)},
                  {"neusight.e2e_latency_low_ms", sig(r.e2e_low_ms)},
                  {"neusight.e2e_latency_high_ms", sig(r.e2e_high_ms)},
                  {"neusight.predictor", r.predictor},
                  {"neusight.version", version()}};
  // Several GPUs: the split (the e2e latency is the iteration's, or the pipeline's).
  if (r.parallel) {
    const ParallelConfig& c = r.parallel->config;
    ann.metadata.emplace_back("neusight.parallel", "dp=" + std::to_string(c.dp) + ",tp=" + std::to_string(c.tp) +
                                                       ",pp=" + std::to_string(c.pp) +
                                                       ",microbatches=" + std::to_string(c.microbatches));
    ann.metadata.emplace_back("neusight.gpus", std::to_string(c.gpus()));
  }
  if (r.sparsity) ann.metadata.emplace_back("neusight.sparsity", sparsity_label(r));
  // The timing convention is a property of the NeuSight predictor (empty for the roofline).
  if (!r.timing.empty()) ann.metadata.emplace_back("neusight.timing", r.timing);
  // One GPU's memory for the run (report.h MemoryFootprint) and whether the GPU holds it.
  if (r.memory) {
    ann.metadata.emplace_back("neusight.memory_gib", sig(r.memory->total_gib()));
    ann.metadata.emplace_back("neusight.memory_fits", r.memory->fits() ? "true" : "false");
  }
  // What the step does with a GPU (report.h Throughput): TFLOP/s and the share of the peak
  // (MFU in training), samples/s and tokens/s where they are known.
  if (r.throughput) {
    const Throughput& t = *r.throughput;
    ann.metadata.emplace_back("neusight.tflops", sig(t.tflops));
    if (t.peak_tflops > 0) ann.metadata.emplace_back("neusight.peak_utilization", sig(t.utilization()));
    if (t.samples > 0) ann.metadata.emplace_back("neusight.samples_per_s", sig(t.samples_per_s));
    if (t.tokens > 0) ann.metadata.emplace_back("neusight.tokens_per_s", sig(t.tokens_per_s));
  }
  return ann;
}

std::vector<std::string> model_labels(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(fs::path(p).filename().string());
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = i + 1; j < out.size(); ++j)
      if (out[i] == out[j]) {
        out[i] = paths[i];
        out[j] = paths[j];
      }
  return out;
}

std::map<std::string, Gpu> load_devices_dir(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw InputError("--devices " + dir + ": not a directory");
  std::map<std::string, Gpu> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") {
      Gpu g = load_device_json(e.path().string());
      out[lower(g.name)] = g;
    }
  return out;
}

Timing default_row_timing(DType dtype) { return dtype == DType::f32 ? Timing::eager : Timing::kernel; }

Timing kernels_timing(const std::string& text) {
  Timing t = Timing::eager;
  if (!parse_timing(text, t)) throw InputError("--timing: expected eager, device or kernel, got '" + text + "'");
  return t;
}

KernelRows predict_kernel_rows(const Dataset& d, const std::function<std::string(size_t)>& row_name,
                               const std::optional<Gpu>& fixed, const std::map<std::string, Gpu>& devices,
                               const std::string& predictor_name, const std::string& weights_dir,
                               std::optional<Timing> timing) {
  const int dev_col = d.column("Device");
  // One predictor per timing convention the rows use.
  std::map<Timing, std::unique_ptr<Predictor>> predictors;
  auto row_timing = [&](size_t i) { return timing ? *timing : default_row_timing(d.rows[i].kernel.dtype); };

  // Group the rows by GPU and timing so that each GPU's kernels are predicted in one batch.
  std::map<std::string, Gpu> gpus;
  std::map<std::pair<std::string, Timing>, std::vector<size_t>> groups;
  KernelRows out;
  for (size_t i = 0; i < d.rows.size(); ++i) {
    const DatasetRow& r = d.rows[i];
    const Timing t = row_timing(i);
    if (fixed) {
      if (dev_col >= 0 && !same_gpu(*fixed, r.device)) continue;
      gpus.emplace(fixed->name, *fixed);
      groups[{fixed->name, t}].push_back(i);
    } else {
      const std::string key = lower(r.device);
      if (!gpus.count(key)) {
        auto it = devices.find(key);
        if (it != devices.end()) {
          gpus.emplace(key, it->second);
        } else {
          try {
            gpus.emplace(key, GpuDatabase::builtin().resolve(r.device));
          } catch (const InputError&) {
            throw InputError(row_name(i) + ": device '" + r.device + "' is not in the database" +
                             (devices.empty() ? "" : " nor in --devices"));
          }
        }
      }
      groups[{key, t}].push_back(i);
    }
    out.kept.push_back(i);
  }

  out.rows.resize(d.rows.size());
  for (const auto& [key_timing, rows] : groups) {
    const Gpu& g = gpus.at(key_timing.first);
    std::unique_ptr<Predictor>& predictor = predictors[key_timing.second];
    if (!predictor) predictor = make_predictor(predictor_name, weights_dir, PrecisionOptions{key_timing.second});
    std::vector<Kernel> kernels;
    std::vector<Tiling> tilings;
    for (size_t i : rows) {
      kernels.push_back(d.rows[i].kernel);
      tilings.push_back(tile_kernel(d.rows[i].kernel, g));
    }
    const std::vector<Prediction> p = predictor->predict(kernels, tilings, g);
    for (size_t j = 0; j < rows.size(); ++j) {
      KernelRowPrediction& o = out.rows[rows[j]];
      o.cls = kernel_class_name(kernels[j].cls);
      o.ms = p[j].latency_ms;
      o.low = p[j].low_ms();
      o.high = p[j].high_ms();
      const Tiling& t = p[j].tiling ? *p[j].tiling : tilings[j];
      o.tile = t.tile;
      o.tiles = t.tiles;
      o.waves = t.waves;
    }
  }
  return out;
}

std::string format_kernels_csv(const Dataset& d, const KernelRows& k) {
  std::ostringstream os;
  for (size_t c = 0; c < d.header.size(); ++c) os << (c ? "," : "") << csv_field(d.header[c]);
  os << ",kernel_class,pred_latency_ms,tile,tiles,waves,pred_low_ms,pred_high_ms\n";
  for (size_t i : k.kept) {
    const DatasetRow& r = d.rows[i];
    for (size_t c = 0; c < r.fields.size(); ++c) os << (c ? "," : "") << csv_field(r.fields[c]);
    const KernelRowPrediction& o = k.rows[i];
    os << "," << o.cls << "," << num(o.ms) << "," << csv_field(o.tile) << "," << o.tiles << "," << o.waves << ","
       << num(o.low) << "," << num(o.high) << "\n";
  }
  return os.str();
}

GenerationOptions parse_generation(const Args& args) {
  GenerationOptions g = parse_generate(args.get("--generate"));
  if (args.has("--prefix-cached")) g.cached_prefix = args.get_int("--prefix-cached", 0, 1);
  return g;
}

GenerationOptions parse_generate(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos || text.find(':', colon + 1) != std::string::npos)
    throw InputError("--generate: expected PROMPT:NEW token counts (e.g. 512:128), got '" + text + "'");
  GenerationOptions g;
  g.prompt = parse_int(text.substr(0, colon), "--generate PROMPT");
  g.new_tokens = parse_int(text.substr(colon + 1), "--generate NEW");
  if (g.prompt < 1) throw InputError("--generate " + text + ": the prompt needs at least one token");
  if (g.new_tokens < 1) throw InputError("--generate " + text + ": at least one new token is needed");
  return g;
}

std::string parse_speculative(const std::string& text, GenerationOptions& gen) {
  std::stringstream ss(text);
  std::string part, draft;
  bool count = false, accept = false;
  while (std::getline(ss, part, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos && !count) {
      gen.speculative = parse_int(part, "--speculative K");
      count = true;
    } else if (eq != std::string::npos && part.substr(0, eq) == "accept") {
      if (accept) throw InputError("--speculative: accept= given twice in '" + text + "'");
      const std::string v = part.substr(eq + 1);
      gen.acceptance = parse_number(v).value_or(0);
      if (!(gen.acceptance > 0 && gen.acceptance <= 1))
        throw InputError("--speculative: accept must be a probability in (0, 1], got '" + v + "'");
      accept = true;
    } else if (eq != std::string::npos && part.substr(0, eq) == "draft") {
      if (!draft.empty()) throw InputError("--speculative: draft= given twice in '" + text + "'");
      draft = part.substr(eq + 1);
      if (draft.empty()) throw InputError("--speculative: draft= needs a model (a config .json or an ONNX decoder)");
    } else {
      throw InputError("--speculative: expected K,accept=P[,draft=MODEL], got '" + part + "' in '" + text + "'");
    }
  }
  if (!count || gen.speculative < 1)
    throw InputError("--speculative: K, the tokens drafted a step, must be at least 1 (K,accept=P[,draft=MODEL])");
  if (!accept) throw InputError("--speculative: give the acceptance, accept=P (the chance a drafted token is kept)");
  return draft;
}

Options generation_options(const Args& args, Options opt) {
  if (args.has("--seq")) throw InputError("--seq does not apply to --generate (PROMPT:NEW sets the lengths)");
  // The prefill's nodes are in --json and --csv; a decode step's, in the step graph predicted
  // at its past length.
  for (const char* flag : {"--out", "--group"})
    if (args.has(flag))
      throw InputError(std::string(flag) + " does not apply to --generate, which prints no node table (--top N: the N slowest nodes " +
                       "of the prefill and of the last decode step; every node: --json, --csv)");
  if (opt.mode != Mode::inference) throw InputError("--generate predicts inference, not --mode training");
  if (!args.has("--timing")) opt.timing = Timing::kernel;
  if (!args.has("--fusion")) opt.fusion = Fusion::full;
  if (opt.dims.batch < 0) opt.dims.batch = 1;
  return opt;
}

bool is_config_path(const std::string& path) {
  std::error_code ec;
  return (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) ||
         std::filesystem::is_regular_file(std::filesystem::path(path) / "config.json", ec);
}

Decoder load_draft_decoder(const std::string& path, const Options& opt, const ModelConfig* target) {
  std::vector<std::string> notes;  // the target's notes say what the dtype is
  try {
    if (path == "mtp") {
      if (!target) throw InputError("draft=mtp takes the module of a --config model (num_nextn_predict_layers)");
      return mtp_decoder(*target);
    }
    Decoder d = load_decoder(path, is_config_path(path), opt, notes);
    d.prefill.model.path = path;  // names the draft in the report
    return d;
  } catch (const InputError& e) {
    throw InputError(std::string("--speculative draft: ") + e.what());
  }
}

Decoder load_decoder(const std::string& path, bool config, const Options& opt, std::vector<std::string>& notes,
                     ModelConfig* config_out) {
  notes.clear();
  if (!config) return onnx_decoder(load_model(path));
  const ModelConfig cfg = with_image_options(read_hf_config(path), opt);
  if (config_out) *config_out = cfg;
  Decoder d = config_decoder(cfg);
  notes = config_notes(cfg, opt, true);
  return d;
}

}  // namespace neusight::cli
