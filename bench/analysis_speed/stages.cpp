// stages.cpp - time each stage of one analysis in-process and print one JSON line.
//
//   analysis_speed_stages MODEL.onnx --gpu b200 --batch 1 --seq 2048 [--repeat N] [--predictor P]
//
// Stages: protobuf parse alone (read bytes + ModelProto parse), load (parse + IR + checks),
// prepare (bind dims, shape inference, lowering), predict (tiling + prediction), json
// (report text), weights (reading the shipped NeuSight weights file, which every NeuSight
// prediction does once), tiles (reading the tile table, tiling/data/tiles.json, which every
// run that tiles a kernel does once). Each figure is the median of N repeats, in milliseconds of
// process CPU time (stable on a busy machine; equal to wall time on an idle one, all single-threaded).
// run.py (same folder) adds the whole CLI, peak RSS and ONNX's own shape inference.
#include <algorithm>
#include <filesystem>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "neusight/neusight.h"
#include "neusight/neusight_model.h"
#include "tile_table.h"

namespace {

// Process CPU time in ms.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// The whole file, as the stages timed here read their inputs.
std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [--gpu G] [--batch N] [--seq N] [--repeat N] [--predictor P]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  std::string gpu_name = "b200";
  neusight::Options opt;
  int repeat = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--gpu") gpu_name = v;
    else if (f == "--batch") opt.dims.batch = std::atoll(v.c_str());
    else if (f == "--seq") opt.dims.seq = std::atoll(v.c_str());
    else if (f == "--repeat") repeat = std::max(1, std::atoi(v.c_str()));
    else if (f == "--predictor" && parse_predictor_kind(v, opt.predictor)) continue;
    else {
      std::fprintf(stderr, "unknown option %s\n", f.c_str());
      return 2;
    }
  }
  try {
    const neusight::Gpu gpu = neusight::GpuDatabase::builtin().resolve(gpu_name);
    std::vector<double> parse, load, prep, pred, json, weights, tiles;
    size_t nodes = 0, kernels = 0, json_bytes = 0;
    const std::string weights_dir = neusight::data_dir() + "/weights";
    const auto weights_bytes = std::filesystem::file_size(weights_dir + "/weights.json");
    const std::string tiles_path = neusight::data_dir() + "/tiles.json";
    const auto tiles_bytes = std::filesystem::file_size(tiles_path);
    double e2e = 0;
    for (int r = 0; r < repeat; ++r) {
      double t0 = cpu_ms();
      {
        onnx::ModelProto mp;
        if (!mp.ParseFromString(file_bytes(path))) throw neusight::InputError(path + ": protobuf parse failed");
        parse.push_back(cpu_ms() - t0);
      }
      t0 = cpu_ms();
      const neusight::LoadedModel loaded = neusight::load_model(path);
      load.push_back(cpu_ms() - t0);
      t0 = cpu_ms();
      const neusight::Analysis a = neusight::prepare(loaded, opt);
      prep.push_back(cpu_ms() - t0);
      t0 = cpu_ms();
      const neusight::Report rep = neusight::predict(a, loaded.model, gpu, opt);
      pred.push_back(cpu_ms() - t0);
      t0 = cpu_ms();
      const std::string text = neusight::format_json({rep});
      json.push_back(cpu_ms() - t0);
      t0 = cpu_ms();
      const neusight::ModelSet w = neusight::load_model_set(weights_dir);
      weights.push_back(cpu_ms() - t0);
      t0 = cpu_ms();
      {
        const neusight::TileTable table = neusight::TileTable::parse(file_bytes(tiles_path), tiles_path);
        tiles.push_back(cpu_ms() - t0);
      }
      nodes = loaded.model.graph.nodes.size();
      kernels = a.kernels.kernels.size();
      e2e = rep.e2e_latency_ms;
      json_bytes = text.size();
    }
    std::printf("{\"nodes\": %zu, \"kernels\": %zu, \"parse_ms\": %.3f, \"load_ms\": %.3f, \"prepare_ms\": %.3f, "
                "\"predict_ms\": %.3f, \"json_ms\": %.3f, \"json_bytes\": %zu, \"weights_ms\": %.3f, "
                "\"weights_bytes\": %zu, \"tiles_ms\": %.3f, \"tiles_bytes\": %zu, \"predictor\": \"%s\", "
                "\"e2e_latency_ms\": %.6f}\n",
                nodes, kernels, median(parse), median(load), median(prep), median(pred), median(json), json_bytes,
                median(weights), size_t(weights_bytes), median(tiles), size_t(tiles_bytes),
                predictor_kind_name(opt.predictor), e2e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "analysis_speed_stages: %s\n", e.what());
    return 1;
  }
  return 0;
}
