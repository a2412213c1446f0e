// e2e_accuracy - predicted vs measured end-to-end latency of whole models (FP32, PyTorch eager,
// one GPU) for every single-GPU run in ../shared/neusight-data/e2e/labels, with the NeuSight
// predictor (when its weights are present) and a plain roofline; then, from the per-op CSVs of
// one traced layer, which kernel classes are off.
#include <cctype>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>  // getpid: --logo's temporary weights folder

#include "neusight/dataset.h"
#include "neusight/model_builder.h"
#include "neusight/neusight.h"
#include "opgraph.h"

namespace fs = std::filesystem;
using namespace neusight;

namespace {

struct Run {
  std::string gpu_dir, model, mode, stem;
  int64_t seq = 0, batch = 0;
  bool fusion = false;
  double measured_ms = 0, measured_fw = 0, measured_bw = 0;
  int64_t num_layer = 0;
  fs::path label_csv, opgraph_csv;
};

// "gpt2_large-inf-1024-4[-fusion].json"; nullopt for multi-GPU runs (-dp4/-tp4/-pp4...).
std::optional<Run> parse_label(const fs::path& p) {
  const std::string stem = p.stem().string();
  std::vector<std::string> parts;
  std::stringstream ss(stem);
  std::string tok;
  while (std::getline(ss, tok, '-')) parts.push_back(tok);
  if (parts.size() < 4) return std::nullopt;
  Run r;
  r.stem = stem;
  r.model = parts[0];
  r.mode = parts[1] == "train" ? "training" : "inference";
  r.seq = std::stoll(parts[2]);
  r.batch = std::stoll(parts[3]);
  for (size_t i = 4; i < parts.size(); ++i) {
    if (parts[i] == "fusion") r.fusion = true;
    else return std::nullopt;  // dp4 / tp4 / pp4_1 ...: multi-GPU, another benchmark
  }
  return r;
}

// Kernel class of a traced operator (opgraph OpName) and of one of our kernels.
std::string traced_class(const std::string& op, const std::string& fwops) {
  if (op == "Linear") return "linear";
  if (op == "BMM") return "bmm";
  if (op == "VECsoftmax") return "softmax";
  if (op == "VECln") return "layernorm";
  if (op.rfind("VEC", 0) == 0) return "elementwise";
  if (fwops.find("MEM") != std::string::npos) return "memory";
  return "other";
}

// A traced call NeuSight files under "misc" that launches a kernel our graph lowers too,
// by its target, when its output is a tensor (not a shape scalar): pointwise math (OPT's
// max, the masks' sub and lt) as elementwise, casts, masked fills and embedding lookups as
// memory; everything else stays "other" (views, shape arithmetic, parameter reads,
// inference dropout).
std::string misc_class(const std::string& target, const std::string& output_shape) {
  double numel = 1;
  bool any = false;
  for (size_t i = 0; i < output_shape.size();) {
    if (std::isdigit(static_cast<unsigned char>(output_shape[i]))) {
      size_t j = i;
      while (j < output_shape.size() && std::isdigit(static_cast<unsigned char>(output_shape[j]))) ++j;
      numel *= std::atof(output_shape.substr(i, j - i).c_str());
      any = true;
      i = j;
    } else {
      ++i;
    }
  }
  if (!any || numel <= 1) return "other";
  auto fn = [&](const char* name) {
    const std::string n = name;
    return target == n || target.find("function " + n + ">") != std::string::npos ||
           target.find("method " + n + " ") != std::string::npos;
  };
  if (fn("max") || fn("min") || fn("sub") || fn("add") || fn("mul") || fn("lt")) return "elementwise";
  if (fn("to") || fn("bool") || fn("type") || fn("masked_fill") || fn("masked_fill_") || fn("embedding") ||
      target.find("embeddings") != std::string::npos || target.find("embed_positions") != std::string::npos ||
      target.find(".wpe") != std::string::npos)
    return "memory";
  return "other";
}

std::string our_class(const Kernel& k) {
  switch (k.cls) {
    case KernelClass::gemm: return k.gemm.batch > 1 ? "bmm" : "linear";
    case KernelClass::softmax: return "softmax";
    case KernelClass::layernorm: return "layernorm";
    case KernelClass::elementwise:
    case KernelClass::reduce: return "elementwise";  // predicted as streaming kernels
    case KernelClass::memory: return "memory";
    default: return "other";
  }
}

const std::vector<std::string> kClasses = {"linear", "bmm", "elementwise", "softmax", "layernorm", "memory", "other"};

std::map<std::string, double> by_class(const Report& r) {
  std::map<std::string, double> m;
  for (const auto& n : r.nodes)
    for (const auto& k : n.kernels) {
      // torch.matmul's copies of permuted operands are inside the traced matmul's time.
      const bool matmul_copy = k.kernel.cls == KernelClass::memory && n.op_type == "MatMul";
      m[matmul_copy ? "bmm" : our_class(k.kernel)] += k.prediction.latency_ms;
    }
  for (const auto& k : r.extra_kernels) m[our_class(k.kernel)] += k.prediction.latency_ms;
  return m;
}

std::string short_gpu(const std::string& dir) {
  std::string s = dir;
  for (const char* p : {"NVIDIA_", "Tesla_", "AMD_Instinct_"})
    if (s.rfind(p, 0) == 0) s = s.substr(std::string(p).size());
  return s.substr(0, s.find('-'));
}

double err_pct(double pred, double meas) { return 100.0 * (pred - meas) / meas; }

struct Mean {
  double sum = 0, signed_sum = 0;  // of |v| and of v
  int n = 0;
  void add(double v) { sum += std::fabs(v); signed_sum += v; ++n; }
  std::string str() const {
    char b[64];
    if (!n) return "   -  ";
    std::snprintf(b, sizeof b, "%6.1f%% (n=%d)", sum / n, n);
    return b;
  }
};

// --logo: the weights trained without the run's GPU (an A100 of any memory size or form factor:
// the A100 40GB PCIe's); the bundled weights where no such folder exists (the MI100, never
// trained on). The leave-one-GPU-out sets carry no interval calibration of their own (it is set
// on them: kernel_accuracy --calibrate), so each is copied once into a temporary folder with
// the calibration of `weights` (each class's interval_* fields), as kernel_accuracy (d) gives
// them the shipped spread.
fs::path logo_temp_root() { return fs::temp_directory_path() / ("neusight-e2e-logo-" + std::to_string(::getpid())); }

std::string logo_weights(const std::string& weights, const std::string& gpu_dir) {
  static std::map<std::string, std::string> made;  // logo folder -> calibrated copy
  const std::string root = weights.empty() ? data_dir() + "/weights" : weights;
  for (const std::string& tag : {gpu_dir, std::string(gpu_dir.find("A100") != std::string::npos ? "NVIDIA_A100-PCIE-40GB" : "")}) {
    const std::string dir = root + "/logo-" + tag;
    if (tag.empty() || !fs::exists(dir + "/weights.json")) continue;
    auto it = made.find(dir);
    if (it != made.end()) return it->second;
    std::ifstream rin(root + "/weights.json"), lin(dir + "/weights.json");
    const auto shipped = nlohmann::json::parse(rin);
    auto w = nlohmann::json::parse(lin);
    for (auto& [cls, v] : w["classes"].items())
      for (const char* f : {"interval_log_sd", "interval_log_sd_by_roofline", "interval_roofline_ms"})
        if (shipped["classes"].contains(cls) && shipped["classes"][cls].contains(f)) v[f] = shipped["classes"][cls][f];
    const fs::path out = logo_temp_root() / ("logo-" + tag);
    fs::create_directories(out);
    std::ofstream(out / "weights.json") << w.dump();
    return made[dir] = out.string();
  }
  return weights;
}

// Upper median (0 for no values).
double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// What the per-op CSV says the whole run takes: the traced layer's operators times
// num_layer plus the rest (embeddings, head), as measured (raw) and with the per-op timing
// floor removed. The floor is the median forward time of the traced operators that launch
// no kernel (FwOps empty: size, view, getitem of shapes...), about 6-13 us: what timing one
// PyTorch call costs whatever it does. Corrected, every timed entry loses the floor and
// operators without kernels that take at most twice the floor are dropped.
struct PerOpSum {
  double raw = 0, corrected = 0, raw_fw = 0, corrected_fw = 0, floor_ms = 0;
};

PerOpSum per_op_sum(const fs::path& label_csv, const fs::path& opgraph_csv, int64_t num_layer) {
  static const std::regex layer0(R"(\.(h|layer|layers|block)\.0[./'])");
  std::map<std::string, bool> no_kernel;
  for (auto& row : read_csv_records(opgraph_csv.string())) no_kernel[row["Name"]] = row["FwOps"] == "[]";
  auto rows = read_csv_records(label_csv.string());
  std::vector<double> idle;
  for (auto& row : rows) {
    auto it = no_kernel.find(row["Name"]);
    const double fw = std::atof(row["fw_latency"].c_str());
    if (it != no_kernel.end() && it->second && fw > 0) idle.push_back(fw);
  }
  PerOpSum s;
  s.floor_ms = median_of(std::move(idle));
  for (auto& row : rows) {
    const double w = std::regex_search(row["meta"], layer0) ? double(num_layer) : 1.0;
    auto it = no_kernel.find(row["Name"]);
    const bool none = it == no_kernel.end() || it->second;
    for (const char* ph : {"fw", "bw", "acc"}) {
      const double v = std::atof(row[std::string(ph) + "_latency"].c_str());
      if (v <= 0) continue;
      const bool fw = ph[0] == 'f';
      s.raw += w * v;
      if (fw) s.raw_fw += w * v;
      if (none && v <= 2 * s.floor_ms) continue;
      s.corrected += w * std::max(v - s.floor_ms, 0.0);
      if (fw) s.corrected_fw += w * std::max(v - s.floor_ms, 0.0);
    }
  }
  return s;
}

// Kernel data consistency: a training GPU's train rows against its own test rows of the same
// class and matched shape (B, M, N, K each within 15%), the train latency scaled by the
// FLOPs ratio (predictor/dataset.h campaign_ratio). 1.00 means the two sets agree; a ratio
// above one means the train rows ran slower than the test rows of the same shapes, and a
// predictor trained on them predicts that GPU's kernels (and its whole models) that much
// slower. The trainer leaves a train CSV out above kCampaignConflictRatio (training.h).

}  // namespace

int main(int argc, char** argv) {
  std::string shared = std::getenv("NEUSIGHT_SHARED_DIR") ? std::getenv("NEUSIGHT_SHARED_DIR") : NEUSIGHT_SHARED_DIR;
  std::string weights;
  Timing timing = Timing::device;  // the product default for whole models
  bool per_class = true;
  bool per_run = false;  // --per-run: the per-class table of every run, one line each
  // --logo: each run of a training GPU predicted by the weights trained without that GPU
  // (weights/logo-<GPU>, predictor/retrain.sh; an A100 by the A100 40GB's), so every run is on
  // a GPU the networks never saw, as the interval's calibration assumes.
  bool logo = false;
  // --calibrate: the coverage of the 80% interval at each correlation between distinct
  // kernels' errors (predictor.h kKernelErrorCorrelation), and the smallest that covers 80%.
  bool calibrate = false;
  std::optional<Fusion> force_fusion;  // --fusion: every run with this grouping
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shared" && i + 1 < argc) shared = argv[++i];
    else if (a == "--weights" && i + 1 < argc) weights = argv[++i];
    else if (a == "--timing" && i + 1 < argc && parse_timing(argv[i + 1], timing)) ++i;
    else if (a == "--no-per-class") per_class = false;
    else if (a == "--per-run") per_run = true;
    else if (a == "--logo") logo = true;
    else if (a == "--calibrate") calibrate = true;
    else if (a == "--fusion" && i + 1 < argc) {
      const std::string f = argv[++i];
      if (f == "none") force_fusion = Fusion::none;
      else if (f == "eager") force_fusion = Fusion::eager;
      else if (f == "full") force_fusion = Fusion::full;
      else {
        std::fprintf(stderr, "e2e_accuracy: --fusion %s: expected none, eager or full\n", f.c_str());
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "usage: e2e_accuracy [--shared DIR] [--weights DIR] [--timing device|kernel|eager] [--fusion none|eager|full] [--no-per-class] [--per-run] [--logo] [--calibrate]\n");
      return 2;
    }
  }
  const fs::path data = fs::path(shared) / "neusight-data";
  const fs::path labels = data / "e2e" / "labels";
  if (!fs::is_directory(labels)) {
    std::fprintf(stderr, "e2e_accuracy: %s: missing shared data (clone ../shared next to the repo)\n", labels.c_str());
    return 1;
  }
  std::vector<Run> runs;
  for (const auto& gd : fs::directory_iterator(labels)) {
    if (!gd.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(gd.path())) {
      if (f.path().extension() != ".json") continue;
      auto r = parse_label(f.path());
      if (!r) continue;
      r->gpu_dir = gd.path().filename().string();
      std::ifstream in(f.path());
      const auto j = nlohmann::json::parse(in);
      r->measured_fw = j.value("fw_latency", 0.0);
      r->measured_bw = j.value("bwall_latency", 0.0);
      r->measured_ms = j.value("e2e_latency", 0.0);
      if (j.contains("num_layer") && j["num_layer"].is_number_integer()) r->num_layer = j["num_layer"].get<int64_t>();
      r->label_csv = f.path().parent_path() / (r->stem + ".csv");
      r->opgraph_csv = data / "e2e" / "opgraph" / (r->stem + ".csv");
      runs.push_back(*r);
    }
  }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    return std::tie(a.fusion, a.mode, a.model, a.gpu_dir, a.seq, a.batch) <
           std::tie(b.fusion, b.mode, b.model, b.gpu_dir, b.seq, b.batch);
  });

  // Is the trained predictor there? (It ships with the predictor stage once trained.)
  std::string ns_status = "available";
  try {
    make_neusight_predictor(weights);
  } catch (const std::exception& e) {
    ns_status = std::string("unavailable: ") + e.what();
  }
  const bool have_ns = ns_status == "available";
  std::printf("e2e_accuracy: %zu single-GPU runs from %s\n", runs.size(), labels.c_str());
  std::printf("FP32, PyTorch eager (%s); NeuSight predictor %s\n\n",
              !force_fusion ? "fusion runs: --fusion full"
              : *force_fusion == Fusion::none ? "every run --fusion none"
              : *force_fusion == Fusion::eager ? "every run --fusion eager" : "every run --fusion full",
              ns_status.c_str());
  if (logo)
    std::printf("--logo: each training GPU's runs predicted by the weights trained without it (%s/logo-*)\n\n",
                weights.empty() ? (data_dir() + "/weights").c_str() : weights.c_str());
  std::printf("%-8s %-11s %-5s %5s %3s %-6s %11s %11s %7s %11s %7s %19s\n", "gpu", "model", "mode", "seq", "bs", "fusion",
              "measured", "neusight", "err%", "roofline", "err%", "80% interval  in");

  // The training GPUs' own kernel data: median train / test latency of matched GEMM shapes
  // per class ([class][device dir], e.g. "Tesla_T4"), for the table at the end and the
  // consistency what-if.
  const fs::path kdir = fs::path(shared) / "neusight-data" / "kernels";
  std::vector<std::string> devs;
  std::map<std::string, std::map<std::string, std::pair<double, int>>> gemm_ratio;
  if (fs::is_directory(kdir / "train" / "linear")) {
    for (const auto& e : fs::directory_iterator(kdir / "train" / "linear"))
      if (e.path().extension() == ".csv") devs.push_back(e.path().stem().string());
    std::sort(devs.begin(), devs.end());
    for (const char* cls : {"linear", "bmm"}) {
      const Dataset test = read_dataset((kdir / "test" / (std::string(cls) + ".csv")).string());
      for (const auto& d : devs) {
        std::string device = d;
        std::replace(device.begin(), device.end(), '_', ' ');
        const fs::path train = kdir / "train" / cls / (d + ".csv");
        if (!fs::exists(train)) continue;
        const CampaignRatio cr =
            campaign_ratio(gemm_shape_rows(read_dataset(train.string()), ""), gemm_shape_rows(test, device));
        gemm_ratio[cls][d] = {cr.ratio, cr.matched};
      }
    }
  }
  std::map<std::string, ModelConfig> configs;
  std::map<std::string, std::map<std::string, Mean>> mean;  // [group][predictor]
  std::map<std::string, std::map<std::string, Mean>> by_gpu;  // NeuSight's error [group][gpu]
  // What-if: GEMMs on a training GPU divided by that GPU's train / test ratio ([group][gpu]).
  std::map<std::string, std::map<std::string, Mean>> consistent;
  // per class: [class][gpu] -> (pred, measured) sums over runs with per-op CSVs
  std::map<std::string, std::map<std::string, std::pair<double, double>>> cls_sum;
  std::map<std::string, std::map<std::string, std::pair<double, double>>> cls_sum_rf;
  std::vector<std::string> bound_lines;
  // The 80% interval of the NeuSight prediction: [group] -> (runs inside, runs), widths (high / low).
  std::map<std::string, std::pair<int, int>> cover;
  std::map<std::string, std::vector<double>> widths;
  // --calibrate: per correlation step, the runs inside.
  constexpr int kRhoSteps = 20;
  std::vector<int> inside_at(kRhoSteps + 1, 0);
  int calibrated_runs = 0;
  // Speed-up intervals (predictor.h ratio_interval): each run's kernels and measured latency.
  struct PairRun {
    std::string gpu, group, model;
    double measured = 0;
    IntervalSum sum;
    std::string stem;                   // the run's model, mode, sequence, batch and fusion
    double e2e = 0, low = 0, high = 0;  // the prediction and its 80% interval
    double roofline = 0;                // the plain roofline's
  };
  std::vector<PairRun> pair_runs;
  std::map<std::string, std::pair<Mean, Mean>> bound_mean;  // [mode] -> raw, corrected
  std::map<std::string, std::vector<double>> host_floor_ms;   // [GPU] -> each run's per-op floor
  for (const auto& r : runs) {
    try {
      if (!configs.count(r.model))
        configs[r.model] = read_hf_config((data / "model_configs" / (r.model + ".json")).string());
      ModelConfig cfg = configs[r.model];
      // NeuSight measured BERT inference as BertForSequenceClassification and training as
      // BertForPreTraining (see e2e/opgraph), whatever head the shared config names.
      if (cfg.model_type == "bert") cfg.head = r.mode == "training" ? "pretraining" : "classification";
      // The GPU as the predictor was trained on it: the database's entry of the device JSON's
      // name (which corrects the JSON's SM structure where the die differs: hardware/data), else
      // the JSON itself.
      const Gpu from_json = GpuDatabase::builtin().resolve((data / "device_configs" / (r.gpu_dir + ".json")).string());
      const Gpu* known = GpuDatabase::builtin().find(from_json.name);
      const Gpu gpu = known ? *known : from_json;
      Options o;
      o.dims.batch = r.batch;
      o.dims.seq = r.seq;
      o.mode = r.mode == "training" ? Mode::training : Mode::inference;
      o.fusion = force_fusion ? *force_fusion : r.fusion ? Fusion::full : Fusion::eager;
      o.dtype = DType::f32;
      o.weights_dir = logo ? logo_weights(weights, r.gpu_dir) : weights;
      o.timing = timing;
      const LoadedModel m = build_model(cfg);
      const Analysis a = prepare(m, o);
      Options orf = o;
      orf.predictor = PredictorKind::roofline;
      const Report rf = predict(a, m.model, gpu, orf);
      std::optional<Report> ns;
      if (have_ns) {
        Options on = o;
        on.predictor = PredictorKind::neusight;
        ns = predict(a, m.model, gpu, on);
      }
      const std::string group = r.fusion ? "fusion" : r.mode;
      char nsb[32] = "          -", nse[16] = "      -", nsi[48] = "";
      if (ns) {
        std::snprintf(nsb, sizeof nsb, "%11.1f", ns->e2e_latency_ms);
        std::snprintf(nse, sizeof nse, "%+7.1f", err_pct(ns->e2e_latency_ms, r.measured_ms));
        mean[group]["neusight"].add(err_pct(ns->e2e_latency_ms, r.measured_ms));
        by_gpu[group][short_gpu(r.gpu_dir)].add(err_pct(ns->e2e_latency_ms, r.measured_ms));
        const bool inside = ns->e2e_low() <= r.measured_ms && r.measured_ms <= ns->e2e_high();
        std::snprintf(nsi, sizeof nsi, " %8.1f-%8.1f %3s", ns->e2e_low(), ns->e2e_high(), inside ? "yes" : "no");
        IntervalSum sum = interval_sum(*ns);
        if (calibrate) {
          for (int i = 0; i <= kRhoSteps; ++i) {
            const double rho = double(i) / kRhoSteps;
            inside_at[size_t(i)] += sum.low_ms(rho) <= r.measured_ms && r.measured_ms <= sum.high_ms(rho);
          }
          ++calibrated_runs;
        }
        pair_runs.push_back({r.gpu_dir, group, r.model, r.measured_ms, std::move(sum), r.stem, ns->e2e_latency_ms,
                             ns->e2e_low(), ns->e2e_high(), rf.e2e_latency_ms});
        for (const std::string& k : {group, std::string("all")}) {
          cover[k].first += inside;
          ++cover[k].second;
          widths[k].push_back(ns->e2e_high() / ns->e2e_low());
        }
        double adjusted = ns->e2e_latency_ms;
        const auto cls = by_class(*ns);
        for (const char* c : {"linear", "bmm"}) {
          auto it = gemm_ratio[c].find(r.gpu_dir);
          if (it != gemm_ratio[c].end() && it->second.second > 0 && it->second.first > 0 && cls.count(c))
            adjusted -= cls.at(c) * (1 - 1 / it->second.first);
        }
        const double e = err_pct(adjusted, r.measured_ms);
        consistent[group][short_gpu(r.gpu_dir)].add(e);
        consistent[group]["all"].add(e);
      }
      mean[group]["roofline"].add(err_pct(rf.e2e_latency_ms, r.measured_ms));
      std::printf("%-8s %-11s %-5s %5lld %3lld %-6s %11.1f %s %s %11.1f %+7.1f%s\n", short_gpu(r.gpu_dir).c_str(),
                  r.model.c_str(), r.mode == "training" ? "train" : "inf", (long long)r.seq, (long long)r.batch,
                  o.fusion == Fusion::full ? "full" : o.fusion == Fusion::none ? "none" : "eager", r.measured_ms, nsb, nse,
                  rf.e2e_latency_ms,
                  err_pct(rf.e2e_latency_ms, r.measured_ms), nsi);
      if (r.mode == "training") {
        const Report& p = ns ? *ns : rf;
        std::printf("%-44s fw %.1f / %.1f  bw+update %.1f / %.1f  (predicted / measured, %s)\n", "", p.forward_ms,
                    r.measured_fw, p.backward_ms + p.update_ms, r.measured_bw, p.predictor.c_str());
      }

      // The measurement bound: per-op CSV sum against the end-to-end label.
      if (!r.fusion && fs::exists(r.label_csv) && fs::exists(r.opgraph_csv) && r.num_layer > 0) {
        const PerOpSum s = per_op_sum(r.label_csv, r.opgraph_csv, r.num_layer);
        char b[256];
        int n = std::snprintf(b, sizeof b, "%-8s %-11s %-5s %5lld %3lld  %5.1f us %10.1f %+7.1f %10.1f %+7.1f",
                              short_gpu(r.gpu_dir).c_str(), r.model.c_str(), r.mode == "training" ? "train" : "inf",
                              (long long)r.seq, (long long)r.batch, 1000 * s.floor_ms, s.raw,
                              err_pct(s.raw, r.measured_ms), s.corrected, err_pct(s.corrected, r.measured_ms));
        if (r.mode == "training" && r.measured_fw > 0 && n > 0)
          std::snprintf(b + n, sizeof b - size_t(n), "   fw %+6.1f -> %+6.1f", err_pct(s.raw_fw, r.measured_fw),
                        err_pct(s.corrected_fw, r.measured_fw));
        bound_lines.push_back(b);
        host_floor_ms[short_gpu(r.gpu_dir)].push_back(s.floor_ms);
        bound_mean[r.mode].first.add(err_pct(s.raw, r.measured_ms));
        bound_mean[r.mode].second.add(err_pct(s.corrected, r.measured_ms));
      }

      // Per kernel class on the traced one-layer model (the per-op CSV's scope).
      if (per_class && !r.fusion && fs::exists(r.label_csv) && fs::exists(r.opgraph_csv)) {
        std::map<std::string, std::string> op_class;
        for (auto& row : read_csv_records(r.opgraph_csv.string())) op_class[row["Name"]] = traced_class(row["OpName"], row["FwOps"]);
        std::map<std::string, double> meas;
        for (auto& row : read_csv_records(r.label_csv.string())) {
          auto it = op_class.find(row["Name"]);
          std::string cls = it == op_class.end() ? "other" : it->second;
          if (cls == "other") cls = misc_class(row["target"], row["output_shape"]);
          meas[cls] += std::atof(row["latency"].c_str());
        }
        ModelConfig one = cfg;
        one.layers = 1;
        const LoadedModel m1 = build_model(one);
        const Analysis a1 = prepare(m1, o);
        auto prf = by_class(predict(a1, m1.model, gpu, orf));
        std::map<std::string, double> pns;
        if (have_ns) {
          Options on = o;
          on.predictor = PredictorKind::neusight;
          pns = by_class(predict(a1, m1.model, gpu, on));
        }
        const std::string g = short_gpu(r.gpu_dir);
        if (per_run) {
          std::printf("%-44s", "  per class, predicted / measured ms:");
          for (const auto& c : kClasses)
            if (meas[c] > 0 || (have_ns ? pns[c] : prf[c]) > 0)
              std::printf(" %s %.2f/%.2f", c.c_str(), have_ns ? pns[c] : prf[c], meas[c]);
          std::printf("\n");
        }
        for (const auto& c : kClasses) {
          cls_sum[c][g].first += have_ns ? pns[c] : prf[c];
          cls_sum[c][g].second += meas[c];
          cls_sum_rf[c][g].first += prf[c];
          cls_sum_rf[c][g].second += meas[c];
        }
      }
    } catch (const std::exception& e) {
      std::printf("%-8s %-11s %s: error: %s\n", short_gpu(r.gpu_dir).c_str(), r.model.c_str(), r.stem.c_str(), e.what());
    }
  }

  std::printf("\nmean |error|          neusight            roofline\n");
  for (const char* g : {"inference", "training", "fusion"})
    std::printf("%-16s %20s %20s\n", g, mean[g]["neusight"].str().c_str(), mean[g]["roofline"].str().c_str());
  // The worst GPU, not only the mean over GPUs of which some are near twins.
  if (!by_gpu.empty()) {
    std::printf("\nNeuSight by GPU: mean |error| %% (mean signed %%, runs); the worst GPU last\n");
    for (const char* g : {"inference", "training", "fusion"}) {
      if (!by_gpu.count(g)) continue;
      std::printf("%-16s", g);
      std::string worst;
      double worst_err = -1;
      for (const auto& [gpu, e] : by_gpu[g]) {
        const double mean_abs = e.sum / e.n;
        std::printf(" %s %.1f (%+.1f, %d)", gpu.c_str(), mean_abs, e.signed_sum / e.n, e.n);
        if (mean_abs > worst_err) worst_err = mean_abs, worst = gpu;
      }
      std::printf("  worst %s %.1f\n", worst.c_str(), worst_err);
    }
  }
  if (calibrate && calibrated_runs) {
    std::printf("\n--calibrate: the runs inside the 80%% interval by the correlation between distinct kernels'\n"
                "errors (predictor.h kKernelErrorCorrelation = %.2f):\n", kKernelErrorCorrelation);
    int chosen = -1;
    for (int i = 0; i <= kRhoSteps; ++i) {
      const double share = double(inside_at[size_t(i)]) / calibrated_runs;
      if (chosen < 0 && share >= 0.8) chosen = i;
      std::printf("  rho %.2f: %3d / %d (%5.1f%%)\n", double(i) / kRhoSteps, inside_at[size_t(i)], calibrated_runs, 100 * share);
    }
    if (chosen >= 0) std::printf("smallest rho covering 80%%: %.2f\n", double(chosen) / kRhoSteps);
    else std::printf("no rho covers 80%%\n");
  }
  if (!pair_runs.empty()) {
    // The question `compare` answers: how much faster one model runs than another on one GPU.
    // Every pair of runs on one GPU in the same group (inference, training, fused), the first
    // over the second: predicted speed-up's 80% interval (ratio_interval) against the measured.
    std::map<std::string, std::pair<int, int>> in;
    std::map<std::string, std::vector<double>> width, error;
    for (size_t i = 0; i < pair_runs.size(); ++i)
      for (size_t j = i + 1; j < pair_runs.size(); ++j) {
        const PairRun &a = pair_runs[i], &b = pair_runs[j];
        if (a.gpu != b.gpu || a.group != b.group) continue;
        const RatioInterval ri = ratio_interval(a.sum, b.sum);
        const double measured = a.measured / b.measured;
        const bool inside = ri.low <= measured && measured <= ri.high;
        for (const std::string& k : {std::string(a.model == b.model ? "same model" : "two models"), std::string("all")}) {
          in[k].first += inside;
          ++in[k].second;
          width[k].push_back(ri.high / ri.low);
          error[k].push_back(std::fabs(100 * (ri.ratio / measured - 1)));
        }
      }
    if (!in.empty()) {
      std::printf("\nSpeed-up of one run over another on the same GPU (same mode; `compare`'s speed-up and its\n"
                  "interval, predictor.h ratio_interval): pairs inside / pairs, median width, mean |error| of the speed-up\n");
      for (const char* k : {"same model", "two models", "all"})
        if (in.count(k)) {
          double e = 0;
          for (double v : error[k]) e += v;
          std::printf("%-16s %4d / %4d (%5.1f%%)  width x%.3f  error %.1f%%\n", k, in[k].first, in[k].second,
                      100.0 * in[k].first / in[k].second, median_of(width[k]), e / double(error[k].size()));
        }
    }
  }
  if (!pair_runs.empty()) {
    // The question of hardware sizing: how much faster one GPU runs a model than another. Every
    // pair of runs of one model, mode, shape and fusion on two GPUs: the predicted speed-up
    // against the measured, and its 80% interval with the two GPUs' errors taken as
    // independent (reports' gpu_speedup_interval: each side's log deviations added in quadrature).
    std::map<std::string, std::pair<int, int>> in;
    std::map<std::string, std::vector<double>> width;
    std::map<std::string, Mean> error, roofline_error;
    for (size_t i = 0; i < pair_runs.size(); ++i)
      for (size_t j = i + 1; j < pair_runs.size(); ++j) {
        // The GPUs in name order: the speed-up of the later over the earlier.
        const bool ordered = pair_runs[i].gpu < pair_runs[j].gpu;
        const PairRun &a = pair_runs[ordered ? i : j], &b = pair_runs[ordered ? j : i];
        if (a.stem != b.stem || a.gpu == b.gpu) continue;
        const SpeedupInterval si = gpu_speedup_interval(a.e2e, a.low, a.high, b.e2e, b.low, b.high);
        const double measured = a.measured / b.measured;  // > 1: the second GPU is faster
        const bool inside = si.low <= measured && measured <= si.high;
        for (const std::string& k : {a.group, std::string("all")}) {
          in[k].first += inside;
          ++in[k].second;
          width[k].push_back(si.high / si.low);
          error[k].add(100 * (si.speedup / measured - 1));
          roofline_error[k].add(100 * (a.roofline / b.roofline / measured - 1));
        }
      }
    if (!in.empty()) {
      std::printf("\nSpeed-up of one GPU over another on the same run (model, mode, shape; the GPU table's \"vs first\"\n"
                  "and its interval, the two GPUs' errors independent): pairs inside / pairs, median width, mean |error|\n"
                  "of the speed-up (the roofline's beside it)\n");
      for (const char* k : {"inference", "training", "fusion", "all"})
        if (in.count(k))
          std::printf("%-16s %4d / %4d (%5.1f%%)  width x%.3f  error %.1f%% (roofline %.1f%%)\n", k, in[k].first, in[k].second,
                      100.0 * in[k].first / in[k].second, median_of(width[k]), error[k].sum / error[k].n,
                      roofline_error[k].sum / roofline_error[k].n);
    }
  }
  if (!cover.empty()) {
    std::printf("\nNeuSight's 80%% interval: runs inside / runs, median width (high / low)\n");
    for (const char* g : {"inference", "training", "fusion", "all"})
      if (cover.count(g))
        std::printf("%-16s %3d / %3d (%5.1f%%)  width x%.2f\n", g, cover[g].first, cover[g].second,
                    100.0 * cover[g].first / cover[g].second, median_of(widths[g]));
  }
  if (have_ns && !gemm_ratio.empty()) {
    // Not a prediction (it reads each training GPU's own test rows): how far the e2e error is
    // the disagreement between that GPU's two kernel campaigns (table at the end).
    std::printf("\nWhat-if, not a prediction: on the five training GPUs, the predicted linear and bmm time\n"
                "divided by that GPU's median train / test latency of matched shapes (table at the end),\n"
                "i.e. the predictor as if its train rows had agreed with its test rows; mean |error|:\n");
    for (const char* g : {"inference", "training", "fusion"}) {
      std::printf("%-16s %20s  by GPU:", g, consistent[g]["all"].str().c_str());
      for (const auto& [gpu, m] : consistent[g])
        if (gpu != "all") std::printf(" %s %.1f", gpu.c_str(), m.sum / std::max(1, m.n));
      std::printf("\n");
    }
  }

  if (!bound_lines.empty()) {
    std::printf("\nMeasurement bound: the per-op CSV (traced layer x num_layer + the rest) against the label;\n"
                "corrected = the per-op timing floor (median time of traced calls that launch no kernel)\n"
                "removed from every timed entry, kernel-less calls within twice the floor dropped\n");
    std::printf("%-8s %-11s %-5s %5s %3s  %8s %10s %7s %10s %7s\n", "gpu", "model", "mode", "seq", "bs", "floor",
                "per-op ms", "err%", "corrected", "err%");
    for (const auto& l : bound_lines) std::printf("%s\n", l.c_str());
    for (auto& [m, v] : bound_mean)
      std::printf("mean |per-op - label| %-9s raw %s  corrected %s\n", m.c_str(), v.first.str().c_str(),
                  v.second.str().c_str());
    // The host's dispatch of one op (precision.h kHostDispatchMs): each host's median floor,
    // and the median over the hosts (the mean of the middle two for an even count).
    std::vector<double> hosts;
    std::printf("per-op timing floor, median per host (GPU), us:");
    for (auto& [g, v] : host_floor_ms) {
      std::sort(v.begin(), v.end());
      hosts.push_back(v[(v.size() - 1) / 2] / 2 + v[v.size() / 2] / 2);
      std::printf(" %s %.2f", g.c_str(), 1000 * hosts.back());
    }
    std::sort(hosts.begin(), hosts.end());
    const size_t h = hosts.size();
    std::printf("; median over hosts %.2f us (precision.h kHostDispatchMs: %.2f us)\n",
                1000 * (hosts[(h - 1) / 2] + hosts[h / 2]) / 2, 1000 * kHostDispatchMs);
  }

  if (per_class && !cls_sum.empty()) {
    auto table = [&](const char* title, auto& sums) {
      std::printf("\n%s: predicted / measured per kernel class, one traced layer + embeddings + head,\n"
                  "summed over the runs with per-op CSVs (1.00 = exact; '-' = class absent)\n", title);
      std::vector<std::string> gpus;
      for (auto& [g, v] : sums.begin()->second) gpus.push_back(g);
      std::printf("%-12s", "class");
      for (auto& g : gpus) std::printf(" %7s", g.c_str());
      std::printf("   share of measured\n");
      double total = 0;
      for (auto& [c, m] : sums)
        for (auto& [g, pm] : m) total += pm.second;
      for (const auto& c : kClasses) {
        std::printf("%-12s", c.c_str());
        double share = 0;
        for (auto& g : gpus) {
          const auto pm = sums[c][g];
          share += pm.second;
          if (pm.second > 0) std::printf(" %7.2f", pm.first / pm.second);
          else std::printf(" %7s", pm.first > 0 ? "(+)" : "-");
        }
        std::printf("   %5.1f%%\n", total > 0 ? 100 * share / total : 0.0);
      }
    };
    if (have_ns) table("NeuSight", cls_sum);
    table("Roofline", cls_sum_rf);

    // The training GPUs' own kernel data: train rows vs test rows of matched shapes.
    std::printf("\nKernel data: each training GPU's train rows against its own test rows of matched shape\n"
                "(B, M, N, K each within 15%%; train latency scaled by FLOPs), median train / test latency\n"
                "(1.00 = consistent; above 1 the train rows, which the predictor learns, ran slower), matched rows\n");
    std::printf("%-12s", "class");
    for (const auto& d : devs) std::printf(" %14s", short_gpu(d).c_str());
    std::printf("\n");
    for (const char* cls : {"linear", "bmm"}) {
      std::printf("%-12s", cls);
      for (const auto& d : devs) {
        const auto it = gemm_ratio[cls].find(d);
        const auto [ratio, n] = it != gemm_ratio[cls].end() ? it->second : std::pair<double, int>{0, 0};
        if (n) std::printf("    %5.2f (%4d)", ratio, n);
        else std::printf(" %14s", "-");
      }
      std::printf("\n");
    }
    // Memory-bound: the large adds (elements within 15%, from 4M).
    std::printf("%-12s", "add (memory)");
    const Dataset elem = read_dataset((kdir / "test" / "elem.csv").string());
    for (const auto& d : devs) {
      std::string device = d;
      std::replace(device.begin(), device.end(), '_', ' ');
      const fs::path train = kdir / "train" / "add" / (d + ".csv");
      const CampaignRatio cr =
          fs::exists(train) ? campaign_ratio(add_shape_rows(read_dataset(train.string()), "", 0), add_shape_rows(elem, device, 4e6))
                            : CampaignRatio{};
      const double ratio = cr.ratio;
      const int n = cr.matched;
      if (n) std::printf("    %5.2f (%4d)", ratio, n);
      else std::printf(" %14s", "-");
    }
    std::printf("\n");
  }
  std::error_code ec;
  fs::remove_all(logo_temp_root(), ec);
  return 0;
}
