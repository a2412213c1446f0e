// weights_file.cpp - the NeuSight weights file (weights.json): minified JSON whose "schema"
// names its layout, the networks' number arrays packed as base64 of little-endian IEEE
// doubles (exact, and read without decimal parsing); load with validation (a small strict
// JSON reader, see below), save atomically (nlohmann/json).
#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "neusight/neusight_model.h"
#include "neusight/onnx_frontend.h"

namespace neusight {

namespace {

using nlohmann::json;

// The layout version this build writes and reads. Schema 8 (a "format": "neusight-weights-8"
// key, one value a line, arrays as JSON numbers) has the same keys;
// predictor/convert_weights.py rewrites such files.
constexpr int kWeightsSchema = 9;

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The doubles as base64 (RFC 4648, padded) of their little-endian IEEE 754 bytes.
std::string pack_doubles(const std::vector<double>& v) {
  std::string bytes(v.size() * 8, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint64_t u;
    std::memcpy(&u, &v[i], 8);
    for (int b = 0; b < 8; ++b) bytes[8 * i + size_t(b)] = char((u >> (8 * b)) & 0xff);
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t x = 0;
    for (size_t k = 0; k < 3; ++k) x = x << 8 | (k < n ? uint8_t(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kBase64[(x >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

json layer_json(const DenseLayer& L) {
  return {{"in", L.in}, {"out", L.out}, {"w", pack_doubles(L.w)}, {"b", pack_doubles(L.b)}};
}

}  // namespace

void save_model_set(const ModelSet& m, const std::string& dir) {
  json j;
  j["schema"] = kWeightsSchema;
  j["law"] = "device_ms = (base_ms + sigmoid(o3)*overlap_ms) / u + (1/u - 1)*lane_excess_ms, "
             "u = floor + (1-floor)*sigmoid(o0)*(1 - sigmoid(o1)/waves); "
             "latency_ms = hypot(max_overhead_ms*sigmoid(o2), device_ms) (streaming classes: waves = infinity)";
  j["max_overhead_ms"] = kMaxOverheadMs;
  j["info"] = m.info;
  json classes = json::object();
  for (const ClassModel& c : m.classes) {
    if (c.empty()) continue;
    json cj;
    cj["floor"] = c.floor;
    if (c.interval_log_sd > 0) cj["interval_log_sd"] = c.interval_log_sd;
    if (!c.interval_roofline_ms.empty()) {
      cj["interval_roofline_ms"] = c.interval_roofline_ms;
      cj["interval_log_sd_by_roofline"] = c.interval_log_sd_by_roofline;
    }
    cj["features"] = feature_names(c.cls, c.formulation);
    json nets = json::array();
    for (const UtilNet& n : c.nets) {
      json nj = {{"lo", pack_doubles(n.lo)},
                 {"hi", pack_doubles(n.hi)},
                 {"mean", pack_doubles(n.mean)},
                 {"scale", pack_doubles(n.scale)}};
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
  // Minified; the scalars in the shortest text that reads back to the same bits.
  std::string text = j.dump();
  write_file_atomic(dir + "/weights.json", text);
}

namespace {

// The doubles of pack_doubles' text. Throws RuntimeError naming `what` for anything else.
std::vector<double> unpack_doubles(const std::string& text, const std::string& what) {
  static const auto table = [] {
    std::array<int8_t, 256> t;
    t.fill(-1);
    for (int i = 0; i < 64; ++i) t[uint8_t(kBase64[i])] = int8_t(i);
    return t;
  }();
  size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  if (text.size() % 4 != 0) throw RuntimeError(what + ": packed numbers of a length that is not a multiple of 4");
  const size_t nbytes = text.size() / 4 * 3 - pad;
  if (nbytes % 8 != 0) throw RuntimeError(what + ": packed numbers that are not whole doubles");
  std::vector<uint8_t> bytes(nbytes + 3);
  const size_t body = text.size() - pad;
  // Whole groups of four characters, then the padded one (its missing characters count as 0).
  const unsigned char* t = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0, o = 0;
  for (; i + 4 <= body; i += 4, o += 3) {
    const int a = table[t[i]], b = table[t[i + 1]], c = table[t[i + 2]], d = table[t[i + 3]];
    if ((a | b | c | d) < 0) throw RuntimeError(what + ": invalid character in packed numbers");
    const uint32_t x = uint32_t(a) << 18 | uint32_t(b) << 12 | uint32_t(c) << 6 | uint32_t(d);
    bytes[o] = uint8_t(x >> 16), bytes[o + 1] = uint8_t(x >> 8), bytes[o + 2] = uint8_t(x);
  }
  if (i < body) {
    uint32_t x = 0;
    for (size_t k = 0; k < 4; ++k) {
      const int v = i + k < body ? table[t[i + k]] : 0;
      if (v < 0) throw RuntimeError(what + ": invalid character in packed numbers");
      x = x << 6 | uint32_t(v);
    }
    bytes[o] = uint8_t(x >> 16), bytes[o + 1] = uint8_t(x >> 8), bytes[o + 2] = uint8_t(x);
  }
  std::vector<double> out(nbytes / 8);
  for (size_t j = 0; j < out.size(); ++j) {
    uint64_t u = 0;
    for (int k = 7; k >= 0; --k) u = u << 8 | bytes[8 * j + size_t(k)];
    std::memcpy(&out[j], &u, 8);
    if (!std::isfinite(out[j])) throw RuntimeError(what + ": packed number out of range");
  }
  return out;
}

// ---- a small strict JSON reader for the weights file ------------------------------------
// Every CLI run reads the file, so it is read without nlohmann's lexer (several times slower):
// the networks' arrays come packed (unpack_doubles above), and an array whose elements are
// all numbers (also accepted) is kept as one vector<double>, read with std::from_chars. Full
// JSON grammar (RFC 8259), nesting bounded, errors carry the byte offset.

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
  // An array of numbers: packed (base64 of little-endian doubles, what save_model_set
  // writes) or a JSON array.
  std::vector<double> as_numbers(const std::string& what) const {
    if (kind == string) return unpack_doubles(str, what);
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
      // The common case first: a run of plain characters, appended at once.
      const char* run = p_;
      const char* quote = static_cast<const char*>(std::memchr(p_, '"', size_t(e_ - p_)));
      const char* stop = quote ? quote : e_;
      while (p_ != stop && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20) ++p_;
      o.append(run, p_);
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

// Throws unless `j` is a weights file of kWeightsSchema, saying which schema it has.
void check_schema(const JNode& j) {
  if (j.kind != JNode::object) throw RuntimeError("not a weights file (expected a JSON object)");
  const JNode* schema = j.find("schema");
  if (!schema) {
    const JNode* format = j.find("format");
    if (format && format->kind == JNode::string && format->str == "neusight-weights-8")
      throw RuntimeError("weights schema 8, this build reads schema " + std::to_string(kWeightsSchema) +
                         " (convert with predictor/convert_weights.py)");
    throw RuntimeError("no \"schema\" key: not a NeuSight weights file");
  }
  if (schema->kind == JNode::number && schema->num == kWeightsSchema) return;
  const bool whole = schema->kind == JNode::number && schema->num == std::floor(schema->num) && std::fabs(schema->num) < 1e9;
  throw RuntimeError("unknown weights schema " + (whole ? std::to_string(int64_t(schema->num)) : schema->dump()) +
                     ", this build reads schema " + std::to_string(kWeightsSchema) +
                     " (retrain with predictor/retrain.sh)");
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
    check_schema(j);
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
      if (const JNode* r = cj->find("interval_roofline_ms")) {
        cm.interval_roofline_ms = r->as_numbers("interval_roofline_ms");
        cm.interval_log_sd_by_roofline = cj->at("interval_log_sd_by_roofline").as_numbers("interval_log_sd_by_roofline");
        const auto& x = cm.interval_roofline_ms;
        bool ok = x.size() == cm.interval_log_sd_by_roofline.size();
        for (size_t i = 0; ok && i < x.size(); ++i) ok = x[i] > 0 && (i == 0 || x[i] > x[i - 1]);
        for (double v : cm.interval_log_sd_by_roofline) ok = ok && v >= 0 && std::isfinite(v);
        if (!ok)
          throw RuntimeError(std::string("interval bands of class ") + util_class_name(c) +
                             ": roofline times must be positive and ascending, one non-negative spread each");
      }
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
