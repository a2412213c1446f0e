// weights_file.cpp - the NeuSight weights file (weights.json): load with validation (a small
// strict JSON reader, see below), save atomically (nlohmann/json).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
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
  j["format"] = "neusight-weights-8";
  j["law"] = "latency_ms = max_overhead_ms*sigmoid(o2) + (base_ms + sigmoid(o3)*overlap_ms) / u, "
             "u = floor + (1-floor)*sigmoid(o0)*(1 - sigmoid(o1)/waves)";
  j["max_overhead_ms"] = kMaxOverheadMs;
  j["info"] = m.info;
  json classes = json::object();
  for (const ClassModel& c : m.classes) {
    if (c.empty()) continue;
    json cj;
    cj["floor"] = c.floor;
    if (c.interval_log_sd > 0) cj["interval_log_sd"] = c.interval_log_sd;
    cj["features"] = feature_names(c.cls, c.formulation);
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

namespace {

// ---- a small strict JSON reader for the weights file ------------------------------------
// The file is ~30,000 numbers; nlohmann's lexer took 10-15 ms of every CLI run to read them
// (more than the MLPs' forward pass over a 175B-parameter graph), std::from_chars under 1 ms.
// Arrays whose elements are all numbers are kept as one vector<double>. Full JSON grammar
// (RFC 8259), nesting bounded, errors carry the byte offset.

struct JNode {
  enum Kind { null, boolean, number, string, array, object } kind = null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<double> numbers;                          // array of numbers only
  std::vector<JNode> items;                             // any other array
  std::vector<std::pair<std::string, JNode>> members;   // object, in file order

  const JNode* find(const std::string& key) const {
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }
  const JNode& at(const std::string& key) const {
    const JNode* v = kind == object ? find(key) : nullptr;
    if (!v) throw RuntimeError("missing key \"" + key + "\"");
    return *v;
  }
  double as_number(const std::string& what) const {
    if (kind != number) throw RuntimeError(what + " must be a number");
    return num;
  }
  const std::string& as_string(const std::string& what) const {
    if (kind != string) throw RuntimeError(what + " must be a string");
    return str;
  }
  std::vector<double> as_numbers(const std::string& what) const {
    if (kind != array || !items.empty()) throw RuntimeError(what + " must be an array of numbers");
    return numbers;
  }
  std::vector<std::string> as_strings(const std::string& what) const {
    std::vector<std::string> out;
    if (kind != array || !numbers.empty()) throw RuntimeError(what + " must be an array of strings");
    for (const JNode& v : items) out.push_back(v.as_string(what));
    return out;
  }
  // Compact text of a value (for info entries that are not strings).
  std::string dump() const {
    switch (kind) {
      case null: return "null";
      case boolean: return b ? "true" : "false";
      case number: return nlohmann::json(num).dump();
      case string: return nlohmann::json(str).dump();
      case array: {
        std::string o = "[";
        for (double v : numbers) o += (o.size() > 1 ? "," : "") + nlohmann::json(v).dump();
        for (const JNode& v : items) o += (o.size() > 1 ? "," : "") + v.dump();
        return o + "]";
      }
      case object: {
        std::string o = "{";
        for (const auto& [k, v] : members) o += (o.size() > 1 ? "," : "") + nlohmann::json(k).dump() + ":" + v.dump();
        return o + "}";
      }
    }
    return "null";
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : b_(text.data()), p_(b_), e_(b_ + text.size()) {}

  JNode document() {
    JNode v = value(0);
    ws();
    if (p_ != e_) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;
  const char *b_, *p_, *e_;

  [[noreturn]] void fail(const std::string& what) const {
    throw RuntimeError("malformed weights file: " + what + " at byte " + std::to_string(p_ - b_));
  }
  void ws() {
    while (p_ != e_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool eat(char c) {
    ws();
    if (p_ != e_ && *p_ == c) return ++p_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  void literal(const char* word) {
    for (const char* w = word; *w; ++w, ++p_)
      if (p_ == e_ || *p_ != *w) fail("invalid literal");
  }
  static bool digit(char c) { return c >= '0' && c <= '9'; }

  double number() {
    const char* s = p_;
    if (p_ != e_ && *p_ == '-') ++p_;
    if (p_ == e_ || !digit(*p_)) fail("invalid number");
    if (*p_ == '0') ++p_;
    else while (p_ != e_ && digit(*p_)) ++p_;
    if (p_ != e_ && *p_ == '.') {
      ++p_;
      if (p_ == e_ || !digit(*p_)) fail("invalid number");
      while (p_ != e_ && digit(*p_)) ++p_;
    }
    if (p_ != e_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ != e_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == e_ || !digit(*p_)) fail("invalid number");
      while (p_ != e_ && digit(*p_)) ++p_;
    }
    double v = 0;
    const auto r = std::from_chars(s, p_, v);
    if (r.ec != std::errc() || r.ptr != p_ || !std::isfinite(v)) fail("number out of range");
    return v;
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      if (p_ == e_) fail("truncated \\u escape");
      const char c = *p_;
      u <<= 4;
      if (digit(c)) u |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') u |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') u |= unsigned(c - 'A' + 10);
      else fail("invalid \\u escape");
    }
    return u;
  }
  static void utf8(std::string& o, unsigned cp) {
    if (cp < 0x80) o += char(cp);
    else if (cp < 0x800) o += char(0xC0 | (cp >> 6)), o += char(0x80 | (cp & 0x3F));
    else if (cp < 0x10000) o += char(0xE0 | (cp >> 12)), o += char(0x80 | ((cp >> 6) & 0x3F)), o += char(0x80 | (cp & 0x3F));
    else o += char(0xF0 | (cp >> 18)), o += char(0x80 | ((cp >> 12) & 0x3F)), o += char(0x80 | ((cp >> 6) & 0x3F)),
         o += char(0x80 | (cp & 0x3F));
  }
  std::string string_body() {  // after the opening quote
    std::string o;
    for (;;) {
      if (p_ == e_) fail("unterminated string");
      const char c = *p_++;
      if (c == '"') return o;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') { o += c; continue; }
      if (p_ == e_) fail("unterminated string");
      switch (*p_++) {
        case '"': o += '"'; break;
        case '\\': o += '\\'; break;
        case '/': o += '/'; break;
        case 'b': o += '\b'; break;
        case 'f': o += '\f'; break;
        case 'n': o += '\n'; break;
        case 'r': o += '\r'; break;
        case 't': o += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && e_ - p_ >= 6 && p_[0] == '\\' && p_[1] == 'u') {
            p_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("invalid surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(o, cp);
          break;
        }
        default: fail("invalid escape");
      }
    }
  }

  JNode value(int depth) {
    if (depth > kMaxDepth) fail("nesting too deep");
    ws();
    if (p_ == e_) fail("unexpected end of file");
    JNode v;
    switch (*p_) {
      case '{':
        ++p_;
        v.kind = JNode::object;
        if (eat('}')) return v;
        do {
          ws();
          if (p_ == e_ || *p_ != '"') fail("expected a key");
          ++p_;
          std::string k = string_body();
          expect(':');
          v.members.emplace_back(std::move(k), value(depth + 1));
        } while (eat(','));
        expect('}');
        return v;
      case '[':
        ++p_;
        v.kind = JNode::array;
        if (eat(']')) return v;
        do {
          ws();
          if (p_ != e_ && v.items.empty() && (*p_ == '-' || digit(*p_))) {
            v.numbers.push_back(number());  // the common case: an array of numbers
            continue;
          }
          if (!v.numbers.empty()) {  // a mixed array: numbers become nodes
            for (double d : v.numbers) {
              JNode n;
              n.kind = JNode::number;
              n.num = d;
              v.items.push_back(std::move(n));
            }
            v.numbers.clear();
          }
          v.items.push_back(value(depth + 1));
        } while (eat(','));
        expect(']');
        return v;
      case '"':
        ++p_;
        v.kind = JNode::string;
        v.str = string_body();
        return v;
      case 't': literal("true"); v.kind = JNode::boolean; v.b = true; return v;
      case 'f': literal("false"); v.kind = JNode::boolean; return v;
      case 'n': literal("null"); return v;
      default:
        v.kind = JNode::number;
        v.num = number();
        return v;
    }
  }
};

int as_int(const JNode& v, const std::string& what) {
  const double d = v.as_number(what);
  if (d != std::floor(d) || d < 0 || d > 1e6) throw RuntimeError(what + " must be a small non-negative integer");
  return int(d);
}

}  // namespace

ModelSet load_model_set(const std::string& dir) {
  const std::string path = dir + "/weights.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError(path + ": cannot open the NeuSight weights (retrain with `neusight-onnx train`)");
  ModelSet m;
  try {
    std::string text;
    in.seekg(0, std::ios::end);
    text.resize(size_t(std::max<std::streamoff>(in.tellg(), 0)));
    in.seekg(0, std::ios::beg);
    if (!in.read(text.data(), std::streamsize(text.size()))) throw RuntimeError("cannot read the file");
    const JNode j = JsonReader(text).document();
    const JNode* format = j.kind == JNode::object ? j.find("format") : nullptr;
    if (!format || format->kind != JNode::string || format->str != "neusight-weights-8")
      throw RuntimeError("unknown format");
    if (const JNode* info = j.find("info")) {
      if (info->kind != JNode::object) throw RuntimeError("info must be an object");
      for (const auto& [k, v] : info->members) m.info[k] = v.kind == JNode::string ? v.str : v.dump();
    }
    Formulation form = Formulation::neusight;
    if (auto it = m.info.find("formulation"); it != m.info.end()) {
      if (it->second == formulation_name(Formulation::paper)) form = Formulation::paper;
      else if (it->second != formulation_name(Formulation::neusight))
        throw RuntimeError("unknown formulation '" + it->second + "'");
    }
    const JNode& cls = j.at("classes");
    if (cls.kind != JNode::object) throw RuntimeError("classes must be an object");
    for (int ci = 0; ci < kNumUtilClasses; ++ci) {
      const UtilClass c = static_cast<UtilClass>(ci);
      ClassModel& cm = m.classes[ci];
      cm.cls = c;
      cm.formulation = form;
      const JNode* cj = cls.find(util_class_name(c));
      if (!cj) continue;
      cm.floor = cj->at("floor").as_number("floor");
      if (const JNode* sd = cj->find("interval_log_sd")) cm.interval_log_sd = sd->as_number("interval_log_sd");
      if (cj->at("features").as_strings("features") != feature_names(c, form))
        throw RuntimeError(std::string("features of class ") + util_class_name(c) + " differ from this build's");
      const size_t d = feature_names(c, form).size();
      const JNode& nets = cj->at("nets");
      if (nets.kind != JNode::array || !nets.numbers.empty()) throw RuntimeError("nets must be an array of objects");
      for (const JNode& nj : nets.items) {
        UtilNet n;
        n.lo = nj.at("lo").as_numbers("lo");
        n.hi = nj.at("hi").as_numbers("hi");
        n.mean = nj.at("mean").as_numbers("mean");
        n.scale = nj.at("scale").as_numbers("scale");
        if (n.lo.size() != d || n.hi.size() != d || n.mean.size() != d || n.scale.size() != d)
          throw RuntimeError("input ranges have the wrong size");
        int prev = int(d);
        const JNode& layers = nj.at("layers");
        if (layers.kind != JNode::array || !layers.numbers.empty()) throw RuntimeError("layers must be an array of objects");
        for (const JNode& lj : layers.items) {
          DenseLayer L;
          L.in = as_int(lj.at("in"), "in");
          L.out = as_int(lj.at("out"), "out");
          L.w = lj.at("w").as_numbers("w");
          L.b = lj.at("b").as_numbers("b");
          if (L.in != prev || L.w.size() != size_t(L.in) * L.out || L.b.size() != size_t(L.out))
            throw RuntimeError("layer shapes do not chain");
          prev = L.out;
          n.layers.push_back(std::move(L));
        }
        if (prev != kNetOutputs || n.layers.empty()) throw RuntimeError("the last layer must have " + std::to_string(kNetOutputs) + " outputs");
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
