// weights_file.cpp - the NeuSight weights file (weights.json): load with validation, save atomically.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "neusight/neusight_model.h"
#include "neusight/onnx_frontend.h"

namespace neusight {

namespace {

using nlohmann::json;

json layer_json(const DenseLayer& L) { return {{"in", L.in}, {"out", L.out}, {"w", L.w}, {"b", L.b}}; }

}  // namespace

void save_model_set(const ModelSet& m, const std::string& dir) {
  json j;
  j["format"] = "neusight-weights-7";
  j["law"] = "latency_ms = max_overhead_ms*sigmoid(o2) + base_ms / u, u = floor + (1-floor)*sigmoid(o0)*(1 - sigmoid(o1)/waves)";
  j["max_overhead_ms"] = kMaxOverheadMs;
  j["info"] = m.info;
  json classes = json::object();
  for (const ClassModel& c : m.classes) {
    if (c.empty()) continue;
    json cj;
    cj["floor"] = c.floor;
    cj["features"] = feature_names(c.cls);
    json nets = json::array();
    for (const UtilNet& n : c.nets) {
      json nj = {{"lo", n.lo}, {"hi", n.hi}, {"mean", n.mean}, {"scale", n.scale}};
      json layers = json::array();
      for (const auto& L : n.layers) layers.push_back(layer_json(L));
      nj["layers"] = layers;
      nets.push_back(nj);
    }
    cj["nets"] = nets;
    classes[util_class_name(c.cls)] = cj;
  }
  j["classes"] = classes;
  std::filesystem::create_directories(dir);
  // Compact floats: 9 significant digits are plenty for the weights.
  std::string text = j.dump(0);
  write_file_atomic(dir + "/weights.json", text);
}

ModelSet load_model_set(const std::string& dir) {
  const std::string path = dir + "/weights.json";
  std::ifstream in(path);
  if (!in) throw RuntimeError(path + ": cannot open the NeuSight weights (retrain with `neusight-onnx train`)");
  ModelSet m;
  try {
    // Whole file into memory first: nlohmann's istream adapter reads a character at a time
    // and made this 600 KB parse a visible part of every CLI run.
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const json j = json::parse(text);
    if (j.value("format", "") != "neusight-weights-7") throw RuntimeError("unknown format");
    if (j.contains("info"))
      for (auto& [k, v] : j["info"].items()) m.info[k] = v.is_string() ? v.get<std::string>() : v.dump();
    for (int ci = 0; ci < kNumUtilClasses; ++ci) {
      const UtilClass c = static_cast<UtilClass>(ci);
      ClassModel& cm = m.classes[ci];
      cm.cls = c;
      const auto& cls = j.at("classes");
      if (!cls.contains(util_class_name(c))) continue;
      const json& cj = cls.at(util_class_name(c));
      cm.floor = cj.at("floor").get<double>();
      if (cj.at("features").get<std::vector<std::string>>() != feature_names(c))
        throw RuntimeError(std::string("features of class ") + util_class_name(c) + " differ from this build's");
      const size_t d = feature_names(c).size();
      for (const json& nj : cj.at("nets")) {
        UtilNet n;
        n.lo = nj.at("lo").get<std::vector<double>>();
        n.hi = nj.at("hi").get<std::vector<double>>();
        n.mean = nj.at("mean").get<std::vector<double>>();
        n.scale = nj.at("scale").get<std::vector<double>>();
        if (n.lo.size() != d || n.hi.size() != d || n.mean.size() != d || n.scale.size() != d)
          throw RuntimeError("input ranges have the wrong size");
        int prev = int(d);
        for (const json& lj : nj.at("layers")) {
          DenseLayer L;
          L.in = lj.at("in").get<int>();
          L.out = lj.at("out").get<int>();
          L.w = lj.at("w").get<std::vector<double>>();
          L.b = lj.at("b").get<std::vector<double>>();
          if (L.in != prev || L.w.size() != size_t(L.in) * L.out || L.b.size() != size_t(L.out))
            throw RuntimeError("layer shapes do not chain");
          prev = L.out;
          n.layers.push_back(std::move(L));
        }
        if (prev != kNetOutputs || n.layers.empty()) throw RuntimeError("the last layer must have 3 outputs");
        cm.nets.push_back(std::move(n));
      }
    }
  } catch (const RuntimeError& e) {
    throw RuntimeError(path + ": " + e.what());
  } catch (const std::exception& e) {
    throw RuntimeError(path + ": malformed weights file: " + e.what());
  }
  return m;
}

}  // namespace neusight
