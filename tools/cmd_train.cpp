// cmd_train.cpp - `neusight-onnx train`: fit the tile-utilization MLPs on the training GPUs' kernels.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "neusight/neusight_model.h"
#include "neusight/onnx_frontend.h"
#include "neusight/training.h"

namespace neusight::cli {
namespace {

// SHA-256 of a file (FIPS 180-4), for the manifest.
std::string sha256_file(const std::string& path) {
  static const uint32_t K[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
      0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
      0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
      0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
      0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
      0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
      0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open");
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const uint64_t bits = uint64_t(data.size()) * 8;
  data += char(0x80);
  while (data.size() % 64 != 56) data += char(0);
  for (int i = 7; i >= 0; --i) data += char((bits >> (8 * i)) & 0xff);
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < data.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(uint8_t(data[off + 4 * i])) << 24 | uint32_t(uint8_t(data[off + 4 * i + 1])) << 16 |
             uint32_t(uint8_t(data[off + 4 * i + 2])) << 8 | uint32_t(uint8_t(data[off + 4 * i + 3]));
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], ff = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & ff) ^ (~e & g)) + K[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g, g = ff, ff = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += ff, h[6] += g, h[7] += hh;
  }
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h[i]);
  return std::string(out, 64);
}

// Dataset file stem to Device name: "Tesla_P100-PCIE-16GB" -> "Tesla P100-PCIE-16GB".
std::string device_of_stem(std::string stem) {
  std::replace(stem.begin(), stem.end(), '_', ' ');
  return stem;
}

// "N" or "N,CLASS=N,...": one value per utilization class, N for the classes not named.
using PerClass = std::array<int, kNumUtilClasses>;
PerClass per_class_ints(const std::string& flag, const std::string& spec, int& all) {
  auto value = [&](const std::string& v) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < 1 || n > 4096)
      throw InputError(flag + ": expected N or N,CLASS=N,... with N in 1..4096, got '" + spec + "'");
    return int(n);
  };
  std::vector<std::pair<std::string, int>> named;
  for (const auto& part : split(spec, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos) all = value(part);
    else named.emplace_back(part.substr(0, eq), value(part.substr(eq + 1)));
  }
  PerClass out;
  out.fill(all);
  for (const auto& [name, n] : named) {
    bool ok = false;
    for (int i = 0; i < kNumUtilClasses; ++i)
      if (name == util_class_name(UtilClass(i))) out[size_t(i)] = n, ok = true;
    if (!ok) throw InputError(flag + ": unknown class '" + name + "'");
  }
  return out;
}

// The command line of a training run, checked.
struct TrainRequest {
  std::string data, out;
  TrainOptions o;
  std::string form, hidden_spec, ensemble_spec;
  PerClass hidden_for{}, ensemble_for{};
  int64_t max_rows = 0;
  bool test_rows = false;  // --test-rows: the devices' rows of kernels/test too
  std::vector<std::string> devices, ops;
  std::vector<UtilClass> classes;
};

TrainRequest parse_train_request(const Args& args) {
  if (!args.positionals().empty()) throw InputError("train: unexpected argument '" + args.positionals()[0] + "'");
  if (!args.has("--data") || !args.has("--out")) throw InputError("train: --data DIR and --out DIR are required");
  TrainRequest r;
  r.data = args.get("--data");
  r.out = args.get("--out");
  TrainOptions& o = r.o;
  o.seed = uint64_t(args.get_int("--seed", 1, 0));
  o.epochs = int(args.get_int("--epochs", o.epochs));
  // --hidden and --ensemble: N, or N,CLASS=N... to set some classes apart (gemm=64).
  r.hidden_spec = args.get("--hidden", std::to_string(o.hidden));
  r.ensemble_spec = args.get("--ensemble", std::to_string(o.ensemble));
  r.hidden_for = per_class_ints("--hidden", r.hidden_spec, o.hidden);
  r.ensemble_for = per_class_ints("--ensemble", r.ensemble_spec, o.ensemble);
  o.hidden_layers = int(args.get_int("--layers", o.hidden_layers));
  o.batch = int(args.get_int("--batch", o.batch));
  o.lr = args.get_double("--lr", o.lr);
  o.device_prior = args.get_double("--device-prior", o.device_prior, /*allow_zero=*/true);
  if (!(o.lr > 0 && o.lr < 1)) throw InputError("--lr: expected a rate in (0, 1)");
  r.max_rows = args.get_int("--max-rows", 0, 0);
  r.test_rows = args.has("--test-rows");
  // neusight (the product's) or neusight-paper (the published formulation, neusight_model.h).
  r.form = args.get("--formulation");
  if (r.form == formulation_name(Formulation::paper)) o.formulation = Formulation::paper;
  else if (r.form != formulation_name(Formulation::neusight))
    throw InputError("--formulation: expected neusight or neusight-paper, got '" + r.form + "'");
  r.devices = training_devices();
  if (args.has("--devices")) r.devices = split(args.get("--devices"), ',');
  for (const auto& dv : r.devices)
    if (std::find(training_devices().begin(), training_devices().end(), dv) == training_devices().end())
      throw InputError("--devices: '" + dv + "' is not one of the five training GPUs");
  // Convolutions are cuDNN kernels, not the GEMM library's; they stay out unless asked for.
  r.ops = split(args.get("--ops"), ',');
  for (const auto& c : split(args.get("--classes"), ',')) {
    bool ok = false;
    for (int i = 0; i < kNumUtilClasses; ++i)
      if (c == util_class_name(UtilClass(i))) r.classes.push_back(UtilClass(i)), ok = true;
    if (!ok) throw InputError("--classes: unknown class '" + c + "'");
  }
  return r;
}

// The dataset's training CSVs of the chosen ops and devices, sorted.
std::vector<std::filesystem::path> training_files(const TrainRequest& r) {
  const std::filesystem::path root = std::filesystem::path(r.data) / "kernels" / "train";
  if (!std::filesystem::is_directory(root)) throw InputError("--data " + r.data + ": no kernels/train folder");
  std::vector<std::filesystem::path> files;
  for (const auto& op : r.ops) {
    const auto dir = root / op;
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& dv : r.devices) {
      std::string stem = dv;
      std::replace(stem.begin(), stem.end(), ' ', '_');
      const auto f = dir / (stem + ".csv");
      if (std::filesystem::exists(f)) files.push_back(f);
    }
  }
  if (files.empty()) throw InputError("--data " + r.data + ": no training CSVs for the chosen devices and ops");
  std::sort(files.begin(), files.end());
  // --test-rows: kernels/test holds one CSV per class for every GPU (elem.csv: the
  // elementwise ops, by OPName); read_samples keeps the chosen devices' rows of chosen ops.
  if (r.test_rows) {
    const std::filesystem::path test = std::filesystem::path(r.data) / "kernels" / "test";
    for (const char* name : {"bmm", "elem", "linear", "ln", "softmax"}) {
      const auto f = test / (std::string(name) + ".csv");
      if (std::filesystem::exists(f)) files.push_back(f);
    }
  }
  return files;
}

// With --test-rows: the campaign ratio (dataset.h) of a GEMM train CSV against the same GPU's
// rows of that op in kernels/test; matched = 0 where there is nothing to compare. `test_sets`
// keeps each op's test CSV, read once for every GPU's sweep.
CampaignRatio train_campaign_ratio(const TrainRequest& r, const std::filesystem::path& f, const Dataset& d,
                                   std::map<std::string, Dataset>& test_sets) {
  if (!r.test_rows || f.parent_path().filename() == "test") return {};
  const std::string op = f.parent_path().filename().string();
  const auto test = std::filesystem::path(r.data) / "kernels" / "test" / (op + ".csv");
  if ((op != "linear" && op != "bmm") || !std::filesystem::exists(test)) return {};
  auto it = test_sets.find(op);
  if (it == test_sets.end()) it = test_sets.emplace(op, read_dataset(test.string())).first;
  return campaign_ratio(gemm_shape_rows(d, ""), gemm_shape_rows(it->second, device_of_stem(f.stem().string())));
}

// The samples of every file (at most --max-rows a file); `manifest_files` gets a line per file,
// `left_out` one per train CSV left out for contradicting its GPU's test rows.
std::vector<Sample> read_samples(const TrainRequest& r, const std::vector<std::filesystem::path>& files, bool tty,
                                 std::ostringstream& manifest_files, std::ostringstream& left_out) {
  std::vector<Sample> samples;
  std::map<std::string, Dataset> test_sets;
  for (const auto& f : files) {
    Dataset d = read_dataset(f.string());
    const CampaignRatio cr = train_campaign_ratio(r, f, d, test_sets);
    if (cr.matched > 0 && (cr.ratio > kCampaignConflictRatio || cr.ratio * kCampaignConflictRatio < 1)) {
      char line[160];
      std::snprintf(line, sizeof line, " (median latency over its GPU's kernels/test rows of matched shape %.2f, %d rows)\n",
                    cr.ratio, cr.matched);
      left_out << "  " << std::filesystem::relative(f, std::filesystem::path(r.data)).string() << line;
      continue;
    }
    // A test CSV (kernels/test) holds every GPU's rows and, for elem.csv, every elementwise
    // op: keep the chosen devices' rows of the chosen ops (before --max-rows).
    const bool test = f.parent_path().filename() == "test";
    auto chosen = [](const std::vector<std::string>& v, const std::string& x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    if (test)
      d.rows.erase(std::remove_if(d.rows.begin(), d.rows.end(),
                                  [&](const DatasetRow& row) {
                                    return !chosen(r.ops, row.op_name) || !chosen(r.devices, row.device);
                                  }),
                   d.rows.end());
    if (r.max_rows > 0 && int64_t(d.rows.size()) > r.max_rows) {
      // Evenly strided subsample (deterministic).
      std::vector<DatasetRow> keep;
      for (int64_t i = 0; i < r.max_rows; ++i)
        keep.push_back(std::move(d.rows[size_t(i * int64_t(d.rows.size()) / r.max_rows)]));
      d.rows = std::move(keep);
    }
    const auto s = samples_from_dataset(d, GpuDatabase::builtin(),
                                        test ? r.devices : std::vector<std::string>{device_of_stem(f.stem().string())},
                                        r.o.formulation);
    samples.insert(samples.end(), s.begin(), s.end());
    manifest_files << "  " << sha256_file(f.string()) << "  "
                   << std::filesystem::relative(f, std::filesystem::path(r.data)).string() << "\n";
    if (tty) std::fprintf(stderr, "\rread %-60s %zu samples", f.string().c_str(), samples.size());
  }
  if (tty) std::fprintf(stderr, "\n");
  return samples;
}

// Trains each chosen class into `m`; returns the summary (a line per class) also printed.
std::string train_classes(const TrainRequest& r, const std::vector<Sample>& samples, bool tty, bool quiet,
                          ModelSet& m) {
  std::ostringstream summary;
  for (UtilClass c : r.classes) {
    auto cb = [&](const TrainProgress& p) {
      if (tty)
        std::fprintf(stderr, "\r%-11s net %d/%d epoch %3d/%d  loss %.4f  val MAPE %6.2f%%   ", util_class_name(p.cls),
                     p.member + 1, r.ensemble_for[size_t(p.cls)], p.epoch, p.epochs, p.loss, p.val_mape);
    };
    TrainOptions oc = r.o;
    oc.hidden = r.hidden_for[size_t(c)];
    oc.ensemble = r.ensemble_for[size_t(c)];
    ClassModel cm = train_class(c, samples, oc, tty ? std::function<void(const TrainProgress&)>(cb) : nullptr);
    if (tty) std::fprintf(stderr, "\n");
    std::vector<Sample> mine;
    for (const auto& s : samples)
      if (s.cls == c) mine.push_back(s);
    if (cm.empty()) continue;
    char line[200];
    std::snprintf(line, sizeof line, "%-11s %7zu samples  floor %.4f  train MAPE %6.2f%%\n", util_class_name(c), mine.size(),
                  cm.floor, mape_percent(cm, mine));
    summary << line;
    if (!quiet) std::fputs(line, stdout), std::fflush(stdout);
    m.classes[int(c)] = std::move(cm);
  }
  return summary.str();
}

}  // namespace

int cmd_train(const Argv& argv) {
  const Args args(argv, Command::train);
  const TrainRequest r = parse_train_request(args);
  const TrainOptions& o = r.o;
  const std::vector<std::filesystem::path> files = training_files(r);

  const bool tty = isatty(STDERR_FILENO) && !args.has("--quiet");
  const bool quiet = args.has("--quiet");
  const auto t0 = std::chrono::steady_clock::now();
  std::ostringstream manifest_files, left_out;
  const std::vector<Sample> samples = read_samples(r, files, tty, manifest_files, left_out);

  ModelSet m;
  std::ostringstream cmd;
  cmd << "neusight-onnx train";
  for (const auto& a : argv) cmd << " " << a;
  m.info = {{"command", cmd.str()},
            {"seed", std::to_string(o.seed)},
            {"formulation", r.form},
            {"devices", [&] {
               std::string s;
               for (const auto& d : r.devices) s += (s.empty() ? "" : ",") + d;
               return s;
             }()},
            {"hyperparameters", "epochs=" + std::to_string(o.epochs) + " hidden=" + r.hidden_spec +
                                    " layers=" + std::to_string(o.hidden_layers) + " batch=" + std::to_string(o.batch) +
                                    " lr=" + std::to_string(o.lr) + " ensemble=" + r.ensemble_spec +
                                    " max_rows=" + std::to_string(r.max_rows) + (r.test_rows ? " test_rows=1" : "") +
                                    " device_prior=" + std::to_string(o.device_prior) +
                                    " loss=squared_log_error optimizer=adam"}};
  const std::string summary = train_classes(r, samples, tty, quiet, m);
  save_model_set(m, r.out);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream man;
  man << "NeuSight utilization MLP weights (weights.json: minified JSON, weights schema 9), written by "
         "`neusight-onnx train`.\n\n"
      << "command:         " << cmd.str() << "\n"
      << "seed:            " << o.seed << "\n"
      << "devices:         " << m.info["devices"] << "\n"
      << "hyperparameters: " << m.info["hyperparameters"] << "\n"
      << "training time:   " << int(secs) << " s\n\n"
      << "result (MAPE on the training samples):\n" << summary << "\n"
      << "data files (sha256, path relative to --data):\n" << manifest_files.str();
  if (!left_out.str().empty())
    man << "\nleft out (a GEMM sweep more than " << kCampaignConflictRatio
        << "x off its GPU's test rows, training.h kCampaignConflictRatio):\n" << left_out.str();
  write_file_atomic((std::filesystem::path(r.out) / "MANIFEST").string(), man.str());
  if (!quiet) std::printf("wrote %s/weights.json and MANIFEST in %.0f s\n", r.out.c_str(), secs);
  return 0;
}

}  // namespace neusight::cli
