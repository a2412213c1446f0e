// unit-weights-file.cpp - the NeuSight weights file: exact round trip of the shipped weights,
// any JSON layout, and a clear RuntimeError (never a crash) for every truncation or corruption.
#include <unistd.h>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "neusight/neusight_model.h"
#include "neusight/onnx_frontend.h"
#include "test_util.h"

using namespace neusight;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const char* name) : path(std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& text) const { write_file_atomic((path / "weights.json").string(), text); }
};

bool same(const ModelSet& a, const ModelSet& b) {
  if (a.info != b.info) return false;
  for (int c = 0; c < kNumUtilClasses; ++c) {
    const ClassModel &x = a.classes[c], &y = b.classes[c];
    if (x.floor != y.floor || x.nets.size() != y.nets.size()) return false;
    for (size_t n = 0; n < x.nets.size(); ++n) {
      const UtilNet &p = x.nets[n], &q = y.nets[n];
      if (p.lo != q.lo || p.hi != q.hi || p.mean != q.mean || p.scale != q.scale) return false;
      if (p.layers.size() != q.layers.size()) return false;
      for (size_t l = 0; l < p.layers.size(); ++l)
        if (p.layers[l].w != q.layers[l].w || p.layers[l].b != q.layers[l].b || p.layers[l].in != q.layers[l].in)
          return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("weights file: the shipped weights read exactly like a reference JSON parser reads them") {
  const std::string dir = test::source_dir() + "/predictor/weights";
  const ModelSet m = load_model_set(dir);
  // nlohmann/json as the reference reader of the same file: every number bit-identical.
  const nlohmann::json j = nlohmann::json::parse(read_text(dir + "/weights.json"));
  for (int c = 0; c < kNumUtilClasses; ++c) {
    const ClassModel& cm = m.classes[c];
    const char* name = util_class_name(static_cast<UtilClass>(c));
    REQUIRE(j["classes"].contains(name));
    const auto& nets = j["classes"][name]["nets"];
    REQUIRE(cm.nets.size() == nets.size());
    CHECK(cm.floor == j["classes"][name]["floor"].get<double>());
    for (size_t n = 0; n < nets.size(); ++n) {
      CHECK(cm.nets[n].lo == nets[n]["lo"].get<std::vector<double>>());
      CHECK(cm.nets[n].scale == nets[n]["scale"].get<std::vector<double>>());
      for (size_t l = 0; l < cm.nets[n].layers.size(); ++l) {
        CHECK(cm.nets[n].layers[l].w == nets[n]["layers"][l]["w"].get<std::vector<double>>());
        CHECK(cm.nets[n].layers[l].b == nets[n]["layers"][l]["b"].get<std::vector<double>>());
      }
    }
  }
  // Saved and read back: identical; pretty-printed by another tool: identical.
  TempDir t("neusight-unit-weights-file");
  save_model_set(m, t.path.string());
  CHECK(same(m, load_model_set(t.path.string())));
  t.write(j.dump(2));
  CHECK(same(m, load_model_set(t.path.string())));
}

TEST_CASE("weights file: escapes and unicode in strings, numbers in every JSON form") {
  ModelSet m = load_model_set(test::source_dir() + "/predictor/weights");
  nlohmann::json j = nlohmann::json::parse(read_text(test::source_dir() + "/predictor/weights/weights.json"));
  j["info"]["command"] = "train --out \"a b\"\\c\n\t/ \u00e9 \xF0\x9F\x98\x80";
  j["classes"]["gemm"]["floor"] = 0.5;
  TempDir t("neusight-unit-weights-escapes");
  // ensure_ascii: the reader must decode \u escapes (and surrogate pairs) to the same UTF-8.
  t.write(j.dump(-1, ' ', true));
  const ModelSet back = load_model_set(t.path.string());
  CHECK(back.info.at("command") == j["info"]["command"].get<std::string>());
  CHECK(back.classes[0].floor == 0.5);
  // Numbers as 5e-1 and 0.50E+0 are the same number.
  std::string text = read_text((t.path / "weights.json").string());
  const auto pos = text.find("\"floor\":0.5");
  REQUIRE(pos != std::string::npos);
  text.replace(pos, 11, "\"floor\" : 5E-1 ");
  t.write(text);
  CHECK(load_model_set(t.path.string()).classes[0].floor == 0.5);
}

TEST_CASE("weights file: every truncation and corruption is a RuntimeError naming the file") {
  const std::string good = read_text(test::source_dir() + "/predictor/weights/weights.json");
  REQUIRE(good.size() > 1000);
  TempDir t("neusight-unit-weights-bad");
  auto fails_cleanly = [&](const std::string& text) {
    t.write(text);
    try {
      (void)load_model_set(t.path.string());
      return false;
    } catch (const RuntimeError& e) {
      return std::string(e.what()).find("weights.json") != std::string::npos;
    }
  };
  // Truncated anywhere (every 997th byte, and the last ones).
  int checked = 0;
  for (size_t n = 0; n < good.size(); n += 997, ++checked) CHECK(fails_cleanly(good.substr(0, n)));
  for (size_t n = good.size() - 5; n < good.size(); ++n) CHECK(fails_cleanly(good.substr(0, n)));
  CHECK(checked > 100);
  const char* bad[] = {
      "",
      "[]",
      "{\"format\": \"neusight-weights-8\"}",                                      // no classes
      "{\"format\": \"neusight-weights-8\", \"classes\": []}",                     // wrong type
      "{\"format\": \"neusight-weights-8\", \"classes\": {\"gemm\": {\"floor\": \"x\"}}}",
      "{\"format\": \"neusight-weights-8\", \"classes\": {}} trailing",
      "{\"format\": \"neusight-weights-8\", \"info\": {\"a\": \"\\q\"}, \"classes\": {}}",
      "{\"format\": \"neusight-weights-8\", \"info\": {\"a\": \"\\u12\"}, \"classes\": {}}",
      "{\"format\": \"neusight-weights-8\", \"classes\": {\"gemm\": {\"floor\": 1e999}}}",
      "{\"format\": \"neusight-weights-8\", \"classes\": {\"gemm\": {\"floor\": NaN}}}",
      "{\"format\": \"neusight-weights-8\", \"classes\": {\"gemm\": {\"floor\": 01}}}",
      "{\"format\": \"neusight-weights-8\", \"classes\": {\"gemm\": {\"floor\": -}}}",
      "{\"format\": \"neusight-weights-8\" \"classes\": {}}",
      "{\"format\": \"neusight-weights-8\", \"classes\": {,}}",
  };
  for (const char* b : bad) CHECK_MESSAGE(fails_cleanly(b), b);
  // Nesting far beyond any weights file is refused, not recursed into.
  CHECK(fails_cleanly(std::string(100000, '[')));
  // A layer whose weights do not chain.
  nlohmann::json j = nlohmann::json::parse(good);
  j["classes"]["gemm"]["nets"][0]["layers"][0]["w"].erase(0);
  CHECK(fails_cleanly(j.dump()));
}
