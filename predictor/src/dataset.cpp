// dataset.cpp - NeuSight kernel CSVs to rows and IR kernels.
#include "neusight/dataset.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

namespace neusight {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

int Dataset::column(const std::string& name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  return -1;
}

namespace {

int64_t col_int(const std::map<std::string, std::string>& c, const std::string& name) {
  auto it = c.find(name);
  if (it == c.end() || it->second.empty()) throw InputError("missing column '" + name + "'");
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (*end != '\0' || !(v >= 0) || v > 0x1p62 || v != std::floor(v))
    throw InputError("column '" + name + "' is not a size: '" + it->second + "'");
  return static_cast<int64_t>(v);
}

// A tensor of the row's kernel: at most 2^62 elements, as shape inference allows any tensor
// (the tiling multiplies its extents in int64).
void check_elements(std::initializer_list<double> dims, const char* tensor) {
  double n = 1;
  for (double d : dims) n *= d;
  if (n > 0x1p62) throw InputError(std::string("the row's ") + tensor + " has more than 2^62 elements");
}

// Elementwise op names of the dataset; the `u` suffix means tensor-with-scalar.
bool elementwise_op(const std::string& op, std::string& base, int& inputs) {
  static const char* ops[] = {"add", "sub", "mul", "div", "pow", "relu", "gelu", "tanh", "sigmoid", "exp"};
  // Exact names first ("gelu", "relu" end in 'u' themselves), then the `u` (scalar) variants.
  std::string b = op;
  bool unary_scalar = false;
  bool exact = false;
  for (const char* o : ops) exact = exact || b == o;
  if (!exact && b.size() > 1 && b.back() == 'u') {
    b.pop_back();
    unary_scalar = true;
  }
  for (const char* o : ops)
    if (b == o) {
      base = b;
      const bool binary = b == "add" || b == "sub" || b == "mul" || b == "div" || b == "pow";
      inputs = binary && !unary_scalar ? 2 : 1;
      return true;
    }
  return false;
}

}  // namespace

Kernel kernel_from_dataset(const std::string& op_name, const std::map<std::string, std::string>& c) {
  Kernel k;
  k.op = op_name;
  k.dtype = DType::f32;
  if (auto it = c.find("dtype"); it != c.end() && !it->second.empty()) {
    auto dt = parse_dtype(it->second);
    // Floating-point types for every class; INT8 for matrix products (integer tensor cores).
    const bool product = op_name == "linear" || op_name == "bmm";
    if (!dt || !(is_float(*dt) || (product && *dt == DType::i8)))
      throw InputError("unknown dtype '" + it->second + "'" + (dt ? " for " + op_name : std::string()));
    k.dtype = *dt;
  }
  const double eb = element_bytes(k.dtype);
  std::string base;
  int inputs = 1;
  if (op_name == "linear" || op_name == "bmm") {
    k.cls = KernelClass::gemm;
    const int64_t B = col_int(c, "B"), M = col_int(c, "M"), N = col_int(c, "N"), K = col_int(c, "K");
    // linear: B batches of M rows through one weight (nn.Linear on [B, M, N]), one GEMM of
    // B x M rows; bmm: B products.
    const int64_t batch = op_name == "linear" ? 1 : B, rows = op_name == "linear" ? B * M : M;
    check_elements({double(B), double(M), double(N)}, "left operand");
    check_elements({double(batch), double(N), double(K)}, "right operand");
    check_elements({double(B), double(M), double(K)}, "output");
    k.gemm = {batch, rows, K, N, gemm_runs_batched(op_name, B)};
    // No output (a size of 0) launches no kernel, as the lowering has it.
    const Work w = B * M * K == 0 ? Work{} : work_of_gemm(k.gemm, eb);
    k.flops = w.flops;
    k.bytes = w.bytes;
  } else if (op_name == "softmax" || op_name == "ln") {
    k.cls = op_name == "softmax" ? KernelClass::softmax : KernelClass::layernorm;
    k.rows = col_int(c, "B");
    k.cols = col_int(c, "H");
    check_elements({double(k.rows), double(k.cols)}, "tensor");
    const Work w = op_name == "softmax" ? work_of_softmax(k.rows, k.cols, eb) : work_of_layernorm(k.rows, k.cols, eb);
    k.flops = w.flops;
    k.bytes = w.bytes;
  } else if (elementwise_op(op_name, base, inputs)) {
    k.cls = KernelClass::elementwise;
    k.op = op_name;
    k.rows = col_int(c, "B");
    k.cols = col_int(c, "H");
    check_elements({double(k.rows), double(k.cols)}, "tensor");
    k.inputs = inputs;
    const Work w = work_of_elementwise(double(k.rows) * k.cols, inputs, 1, eb);
    k.flops = w.flops;
    k.bytes = w.bytes;
  } else if (op_name == "conv") {
    // Implicit GEMM of a 2-D convolution with square kernel and input.
    const int64_t B = col_int(c, "B"), cin = col_int(c, "Input_Channel"), cout = col_int(c, "Output_Channel");
    const int64_t r = col_int(c, "Kernel_Szie"), in = col_int(c, "Input_Size"), stride = std::max<int64_t>(1, col_int(c, "Stride"));
    const int64_t pad = col_int(c, "Padding");
    const double padded = double(in) + 2.0 * double(pad);
    check_elements({double(B), double(cin), padded, padded}, "padded input");  // then in + 2 pad fits int64
    check_elements({double(cout), double(cin), double(r), double(r)}, "weight");
    const int64_t out = (in + 2 * pad - r) / stride + 1;
    if (out <= 0) throw InputError("conv row with empty output");
    check_elements({double(B), double(out), double(out), double(cout)}, "output");
    check_elements({double(B), double(out), double(out), double(cin), double(r), double(r)}, "unfolded input");
    k.cls = KernelClass::gemm;
    k.gemm = {1, B * out * out, cout, cin * r * r};
    const Work w = work_of_gemm(k.gemm, double(B) * cin * in * in, double(cout) * cin * r * r, eb);
    k.flops = w.flops;
    k.bytes = w.bytes;
  } else {
    throw InputError("unknown op '" + op_name + "'");
  }
  return k;
}

namespace {

// One row of `d`'s columns, its fields already split. Throws InputError (no location).
DatasetRow dataset_row(const Dataset& d, std::vector<std::string> fields) {
  if (fields.size() != d.header.size())
    throw InputError("expected " + std::to_string(d.header.size()) + " fields, got " + std::to_string(fields.size()));
  auto idx = [&](const char* n) { return d.column(n); };
  DatasetRow r;
  r.fields = std::move(fields);
  std::map<std::string, std::string> cols;
  for (size_t i = 0; i < d.header.size(); ++i) cols[d.header[i]] = r.fields[i];
  r.op_name = r.fields[idx("OPName")];
  if (const int dev = idx("Device"); dev >= 0) r.device = r.fields[dev];
  if (const int kn = idx("Kernel Name"); kn >= 0) r.kernel_name = r.fields[kn];
  auto num = [&](int c) -> double {
    if (c < 0 || r.fields[c].empty()) return -1;
    char* end = nullptr;
    double v = std::strtod(r.fields[c].c_str(), &end);
    return *end == '\0' ? v : -1;
  };
  r.latency_ms = num(idx("Latency"));
  const int g[3] = {idx("Grid x"), idx("Grid y"), idx("Grid z")};
  const int b[3] = {idx("Block x"), idx("Block y"), idx("Block z")};
  // The recorded launch (read, never an input to prediction): a count CUDA can launch, else
  // 0 (not recorded).
  auto launch = [&](int c) {
    const double v = num(c);
    return v >= 0 && v <= 0x1p31 ? static_cast<int64_t>(v) : int64_t(0);
  };
  for (int i = 0; i < 3; ++i) {
    r.grid[i] = launch(g[i]);
    r.block[i] = launch(b[i]);
  }
  r.kernel = kernel_from_dataset(r.op_name, cols);
  return r;
}

// A column name folded for comparison: lower case, without spaces and underscores.
std::string folded(const std::string& name) {
  std::string out;
  for (char c : name)
    if (c != ' ' && c != '_') out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Dataset with_header(std::vector<std::string> header, const std::string& what) {
  // A spreadsheet's UTF-8 byte order mark before the first column name is no part of it.
  if (!header.empty() && header.front().rfind("\xEF\xBB\xBF", 0) == 0) header.front().erase(0, 3);
  // The columns read by name. One written another way ("DType", "device") would be ignored
  // without a word and its rows predicted as FP32 or skipped: say which name it should have.
  static const char* known[] = {"OPName",  "Latency", "Device",  "Kernel Name", "Grid x",        "Grid y",
                                "Grid z",  "Block x", "Block y", "Block z",     "B",             "M",
                                "N",       "K",       "H",       "dtype",       "Input_Channel", "Output_Channel",
                                "Input_Size", "Kernel_Szie", "Padding", "Stride"};
  Dataset d;
  d.header = std::move(header);
  for (const char* k : known) {
    if (d.column(k) >= 0) continue;
    for (const std::string& h : d.header)
      if (folded(h) == folded(k))
        throw InputError(what + ": column '" + h + "' must be named '" + k + "' (column names are case-sensitive)");
  }
  if (d.column("OPName") < 0) throw InputError(what + ": no OPName column");
  return d;
}

}  // namespace

Dataset read_dataset(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InputError(path + ": cannot open");
  return read_dataset(f, path);
}

Dataset read_dataset(std::istream& in, const std::string& what) {
  std::string line;
  size_t lineno = 0;
  // The header is the first line with anything on it (blank lines before it are skipped).
  do {
    if (!std::getline(in, line)) throw InputError(what + ": empty CSV");
    ++lineno;
  } while (line.empty() || line == "\r");
  Dataset d = with_header(split_csv_line(line), what);
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line == "\r") continue;
    try {
      d.rows.push_back(dataset_row(d, split_csv_line(line)));
    } catch (const InputError& e) {
      throw InputError(what + ":" + std::to_string(lineno) + ": " + e.what());
    }
  }
  return d;
}

Dataset dataset_from_rows(std::vector<std::string> header, std::vector<std::vector<std::string>> rows,
                          const std::string& what) {
  Dataset d = with_header(std::move(header), what);
  d.rows.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    try {
      d.rows.push_back(dataset_row(d, std::move(rows[i])));
    } catch (const InputError& e) {
      throw InputError(what + "[" + std::to_string(i) + "]: " + e.what());
    }
  }
  return d;
}

namespace {
double median_in_place(std::vector<double>& v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}
}  // namespace

std::vector<ShapeRow> gemm_shape_rows(const Dataset& d, const std::string& device) {
  std::vector<ShapeRow> v;
  for (const auto& r : d.rows) {
    if (!device.empty() && r.device != device) continue;
    const GemmShape& g = r.kernel.gemm;
    if (r.kernel.cls != KernelClass::gemm || g.batch <= 0 || g.m <= 0 || g.n <= 0 || g.k <= 0 || r.latency_ms <= 0)
      continue;
    v.push_back({std::log(double(g.batch)), std::log(double(g.m)), std::log(double(g.n)), std::log(double(g.k)),
                 r.kernel.flops, r.latency_ms});
  }
  return v;
}

std::vector<ShapeRow> add_shape_rows(const Dataset& d, const std::string& device, double min_elements) {
  std::vector<ShapeRow> v;
  for (const auto& r : d.rows) {
    const double e = double(r.kernel.rows) * double(r.kernel.cols);
    if (r.op_name != "add" || (!device.empty() && r.device != device) || r.latency_ms <= 0 || e <= 0 ||
        e < min_elements)
      continue;
    v.push_back({0, 0, 0, std::log(e), e, r.latency_ms});
  }
  return v;
}

CampaignRatio campaign_ratio(const std::vector<ShapeRow>& rows, const std::vector<ShapeRow>& other) {
  constexpr double kTol = 0.15;  // |log ratio| per dimension
  std::vector<double> ratios, scaled;
  for (const auto& t : other) {
    scaled.clear();
    for (const auto& r : rows)
      if (std::fabs(r.lb - t.lb) < kTol && std::fabs(r.lm - t.lm) < kTol && std::fabs(r.ln - t.ln) < kTol &&
          std::fabs(r.lk - t.lk) < kTol && r.work > 0)
        scaled.push_back(r.ms * t.work / r.work);
    if (!scaled.empty()) ratios.push_back(median_in_place(scaled) / t.ms);
  }
  CampaignRatio out;
  out.matched = int(ratios.size());
  out.ratio = median_in_place(ratios);
  return out;
}

}  // namespace neusight
