// unit-weights-file.cpp - the NeuSight weights file: exact round trip of the shipped weights,
// any JSON layout, and a clear RuntimeError (never a crash) for every truncation or corruption.
#include <unistd.h>
#include <doctest/doctest.h>

#include <cmath>

#include <cstring>
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

// A packed array of the file (base64 of little-endian doubles), decoded independently of the
// loader; a JSON array of numbers as it is.
std::vector<double> unpacked(const nlohmann::json& v) {
  if (v.is_array()) return v.get<std::vector<double>>();
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : v.get<std::string>()) {
    if (ch == '=') break;
    acc = acc << 6 | uint32_t(alphabet.find(ch));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(uint8_t(acc >> bits));
    }
  }
  std::vector<double> out(bytes.size() / 8);
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t u = 0;
    for (int b = 7; b >= 0; --b) u = u << 8 | bytes[8 * i + size_t(b)];
    std::memcpy(&out[i], &u, 8);
  }
  return out;
}

bool same(const ModelSet& a, const ModelSet& b) {
  if (a.info != b.info) return false;
  for (int c = 0; c < kNumUtilClasses; ++c) {
    const ClassModel &x = a.classes[c], &y = b.classes[c];
    if (x.floor != y.floor || x.nets.size() != y.nets.size()) return false;
    if (x.interval_log_sd != y.interval_log_sd || x.interval_roofline_ms != y.interval_roofline_ms ||
        x.interval_log_sd_by_roofline != y.interval_log_sd_by_roofline)
      return false;
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
      CHECK(cm.nets[n].lo == unpacked(nets[n]["lo"]));
      CHECK(cm.nets[n].scale == unpacked(nets[n]["scale"]));
      for (size_t l = 0; l < cm.nets[n].layers.size(); ++l) {
        CHECK(cm.nets[n].layers[l].w == unpacked(nets[n]["layers"][l]["w"]));
        CHECK(cm.nets[n].layers[l].b == unpacked(nets[n]["layers"][l]["b"]));
      }
    }
  }
  // Saved and read back: identical; pretty-printed by another tool: identical; the arrays
  // written as JSON numbers instead of packed: identical.
  TempDir t("neusight-unit-weights-file");
  save_model_set(m, t.path.string());
  CHECK(same(m, load_model_set(t.path.string())));
  // The shipped file is what the trainer writes, byte for byte.
  CHECK(read_text((t.path / "weights.json").string()) == read_text(dir + "/weights.json"));
  t.write(j.dump(2));
  CHECK(same(m, load_model_set(t.path.string())));
  nlohmann::json plain = j;
  for (auto& [name, cls] : plain["classes"].items())
    for (auto& net : cls["nets"]) {
      for (const char* k : {"lo", "hi", "mean", "scale"}) net[k] = unpacked(net[k]);
      for (auto& layer : net["layers"])
        for (const char* k : {"w", "b"}) layer[k] = unpacked(layer[k]);
    }
  t.write(plain.dump());
  CHECK(same(m, load_model_set(t.path.string())));
}

TEST_CASE("weights file: minified with its schema, other schemas are refused in one line naming them") {
  const std::string text = read_text(test::source_dir() + "/predictor/weights/weights.json");
  CHECK(text.find('\n') == std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(text);
  CHECK(j["schema"] == 9);
  CHECK(j["classes"]["gemm"]["nets"][0]["layers"][0]["w"].is_string());
  TempDir t("neusight-unit-weights-schema");
  auto error = [&](const std::string& body) {
    t.write(body);
    try {
      (void)load_model_set(t.path.string());
    } catch (const RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string later = error("{\"schema\": 10, \"classes\": {}}");
  CHECK(later.find("weights.json: unknown weights schema 10, this build reads schema 9") != std::string::npos);
  CHECK(later.find('\n') == std::string::npos);
  const std::string old = error("{\"format\": \"neusight-weights-8\", \"classes\": {}}");
  CHECK(old.find("weights schema 8") != std::string::npos);
  CHECK(old.find("convert_weights.py") != std::string::npos);
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
      "{\"classes\": {}}",                                                        // no schema
      "{\"schema\": 10, \"classes\": {}}",                                        // a later schema
      "{\"schema\": \"9\", \"classes\": {}}",                                     // not a number
      "{\"schema\": 9}",                                      // no classes
      "{\"schema\": 9, \"classes\": []}",                     // wrong type
      "{\"schema\": 9, \"classes\": {\"gemm\": {\"floor\": \"x\"}}}",
      "{\"schema\": 9, \"classes\": {}} trailing",
      "{\"schema\": 9, \"info\": {\"a\": \"\\q\"}, \"classes\": {}}",
      "{\"schema\": 9, \"info\": {\"a\": \"\\u12\"}, \"classes\": {}}",
      "{\"schema\": 9, \"classes\": {\"gemm\": {\"floor\": 1e999}}}",
      "{\"schema\": 9, \"classes\": {\"gemm\": {\"floor\": NaN}}}",
      "{\"schema\": 9, \"classes\": {\"gemm\": {\"floor\": 01}}}",
      "{\"schema\": 9, \"classes\": {\"gemm\": {\"floor\": -}}}",
      "{\"schema\": 9 \"classes\": {}}",
      "{\"schema\": 9, \"classes\": {,}}",
  };
  for (const char* b : bad) CHECK_MESSAGE(fails_cleanly(b), b);
  // Nesting far beyond any weights file is refused, not recursed into.
  CHECK(fails_cleanly(std::string(100000, '[')));
  // A layer whose weights do not chain.
  nlohmann::json j = nlohmann::json::parse(good);
  std::vector<double> w = unpacked(j["classes"]["gemm"]["nets"][0]["layers"][0]["w"]);
  w.erase(w.begin());
  j["classes"]["gemm"]["nets"][0]["layers"][0]["w"] = w;
  CHECK(fails_cleanly(j.dump()));
  // Packed arrays that are not base64 of whole finite doubles.
  for (const char* packed : {"AAAAAAAA8D8", "AAAAAAAA8D*=", "AAAA", "AAAAAAAA8H8=", "=AAAAAAAAAA="}) {
    nlohmann::json k = nlohmann::json::parse(good);
    k["classes"]["gemm"]["nets"][0]["lo"] = packed;
    CHECK_MESSAGE(fails_cleanly(k.dump()), packed);
  }
}

TEST_CASE("weights file: the interval's spread by roofline time is read, interpolated and checked") {
  const std::string dir = test::source_dir() + "/predictor/weights";
  const ModelSet m = load_model_set(dir);
  const ClassModel& g = m.classes[int(UtilClass::gemm)];
  REQUIRE(g.interval_roofline_ms.size() >= 2);
  REQUIRE(g.interval_roofline_ms.size() == g.interval_log_sd_by_roofline.size());
  // At the band centres the bands' values, between them in between, beyond them the ends'.
  const auto& x = g.interval_roofline_ms;
  const auto& y = g.interval_log_sd_by_roofline;
  CHECK(interval_log_sd_at(g, x[0]) == doctest::Approx(y[0]));
  CHECK(interval_log_sd_at(g, x[1]) == doctest::Approx(y[1]));
  CHECK(interval_log_sd_at(g, x[0] / 100) == y.front());
  CHECK(interval_log_sd_at(g, x.back() * 100) == y.back());
  const double mid = interval_log_sd_at(g, std::sqrt(x[0] * x[1]));
  CHECK(mid == doctest::Approx(0.5 * (y[0] + y[1])));
  // Without bands: the class's single spread.
  ClassModel plain = g;
  plain.interval_roofline_ms.clear();
  plain.interval_log_sd_by_roofline.clear();
  CHECK(interval_log_sd_at(plain, 1.0) == g.interval_log_sd);
  // Bands out of order, of another length or negative are refused in one line.
  nlohmann::json j = nlohmann::json::parse(read_text(dir + "/weights.json"));
  TempDir t("neusight-unit-weights-bands");
  auto error = [&](const nlohmann::json& body) {
    t.write(body.dump());
    try {
      (void)load_model_set(t.path.string());
    } catch (const RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json bad = j;
  bad["classes"]["gemm"]["interval_roofline_ms"] = {0.1, 0.01};
  bad["classes"]["gemm"]["interval_log_sd_by_roofline"] = {0.2, 0.3};
  CHECK(error(bad).find("interval bands of class gemm") != std::string::npos);
  bad["classes"]["gemm"]["interval_roofline_ms"] = {0.01, 0.1, 1.0};
  CHECK(error(bad).find("interval bands of class gemm") != std::string::npos);
  bad["classes"]["gemm"]["interval_log_sd_by_roofline"] = {0.2, -0.3, 0.1};
  CHECK(error(bad).find("interval bands of class gemm") != std::string::npos);
  CHECK(error(bad).find('\n') == std::string::npos);
}
