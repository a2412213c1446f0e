// cmd_kernels.cpp - `neusight-onnx kernels`: predict every row of a dataset-format kernel CSV.
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "neusight/dataset.h"
#include "neusight/onnx_frontend.h"
#include "neusight/precision.h"
#include "neusight/predictor.h"

namespace neusight::cli {
namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
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

std::string num(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace

int cmd_kernels(const Argv& argv) {
  Args args(argv, {"--gpu", "--csv", "--out", "--devices", "--predictor", "--weights", "--timing"}, {});
  if (!args.positionals().empty()) throw InputError("kernels: unexpected argument '" + args.positionals()[0] + "'");
  for (const char* f : {"--gpu", "--csv", "--out"})
    if (!args.has(f)) throw InputError(std::string("kernels: ") + f + " is required");
  const std::string pred_name = args.get("--predictor", "neusight");
  if (pred_name != "neusight" && pred_name != "roofline")
    throw InputError("--predictor: expected neusight or roofline, got '" + pred_name + "'");
  const bool from_row = args.get("--gpu") == "from-row";

  // Device JSONs of --devices DIR, by their Device name.
  std::map<std::string, Gpu> dir_gpus;
  if (args.has("--devices")) {
    const std::string dir = args.get("--devices");
    if (!std::filesystem::is_directory(dir)) throw InputError("--devices " + dir + ": not a directory");
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".json") {
        Gpu g = load_device_json(e.path().string());
        dir_gpus[lower(g.name)] = g;
      }
  }
  Gpu fixed;
  if (!from_row) fixed = GpuDatabase::builtin().resolve(args.get("--gpu"));

  const Dataset d = read_dataset(args.get("--csv"));
  const int dev_col = d.column("Device");
  if (from_row && dev_col < 0) throw InputError(args.get("--csv") + ": --gpu from-row needs a Device column");

  // The dataset's rows are PyTorch-eager timings of one op each (precision.h); profiler kernel
  // durations (Vidur, nsys) or back-to-back device timings ask for --timing kernel / device.
  const std::string timing = args.get("--timing", "eager");
  PrecisionOptions po;
  if (!parse_timing(timing, po.timing))
    throw InputError("--timing: expected eager, device or kernel, got '" + timing + "'");
  std::unique_ptr<Predictor> predictor =
      pred_name == "roofline" ? make_roofline_predictor() : make_neusight_predictor(args.get("--weights"), po);

  // Group the rows by GPU so that each GPU's kernels are predicted in one batch.
  std::map<std::string, Gpu> gpus;
  std::map<std::string, std::vector<size_t>> groups;
  std::vector<size_t> kept;
  for (size_t i = 0; i < d.rows.size(); ++i) {
    const DatasetRow& r = d.rows[i];
    if (!from_row) {
      if (dev_col >= 0 && !same_gpu(fixed, r.device)) continue;
      gpus.emplace(fixed.name, fixed);
      groups[fixed.name].push_back(i);
    } else {
      const std::string key = lower(r.device);
      if (!gpus.count(key)) {
        auto it = dir_gpus.find(key);
        if (it != dir_gpus.end()) {
          gpus.emplace(key, it->second);
        } else {
          try {
            gpus.emplace(key, GpuDatabase::builtin().resolve(r.device));
          } catch (const InputError& e) {
            throw InputError(args.get("--csv") + ": row " + std::to_string(i + 2) + ": device '" + r.device +
                             "' is not in the database" + (args.has("--devices") ? " nor in --devices" : ""));
          }
        }
      }
      groups[key].push_back(i);
    }
    kept.push_back(i);
  }

  struct Out {
    std::string cls, tile;
    double ms = 0, low = 0, high = 0;
    int64_t tiles = 0, waves = 0;
  };
  std::vector<Out> outs(d.rows.size());
  for (const auto& [key, rows] : groups) {
    const Gpu& g = gpus.at(key);
    std::vector<Kernel> kernels;
    std::vector<Tiling> tilings;
    for (size_t i : rows) {
      kernels.push_back(d.rows[i].kernel);
      tilings.push_back(tile_kernel(d.rows[i].kernel, g));
    }
    const std::vector<Prediction> p = predictor->predict(kernels, tilings, g);
    for (size_t j = 0; j < rows.size(); ++j) {
      Out& o = outs[rows[j]];
      o.cls = kernel_class_name(kernels[j].cls);
      o.ms = p[j].latency_ms;
      o.low = p[j].low_ms();
      o.high = p[j].high_ms();
      o.tile = tilings[j].tile;
      o.tiles = tilings[j].tiles;
      o.waves = tilings[j].waves;
    }
  }

  std::ostringstream os;
  for (size_t c = 0; c < d.header.size(); ++c) os << (c ? "," : "") << csv_field(d.header[c]);
  os << ",kernel_class,pred_latency_ms,tile,tiles,waves,pred_low_ms,pred_high_ms\n";
  for (size_t i : kept) {
    const DatasetRow& r = d.rows[i];
    for (size_t c = 0; c < r.fields.size(); ++c) os << (c ? "," : "") << csv_field(r.fields[c]);
    const Out& o = outs[i];
    os << "," << o.cls << "," << num(o.ms) << "," << csv_field(o.tile) << "," << o.tiles << "," << o.waves << ","
       << num(o.low) << "," << num(o.high) << "\n";
  }
  write_file_atomic(args.get("--out"), os.str());
  return 0;
}

}  // namespace neusight::cli
