// opgraph.cpp - reader of NeuSight's traced operator graphs and per-op latency CSVs.
#include "opgraph.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <stdexcept>

namespace neusight {

std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"') quoted = !quoted;
    else if (ch == ',' && !quoted) out.emplace_back();
    else out.back() += ch;
  }
  return out;
}

std::vector<CsvRecord> read_csv_records(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::vector<CsvRecord> rows;
  std::string line;
  // CRLF files (the kernel datasets) lose their '\r' so that the last column's name and
  // values stay clean.
  auto chomp = [](std::string& l) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
  };
  if (!std::getline(f, line)) return rows;
  chomp(line);
  const auto head = csv_fields(line);
  std::string rec;
  while (std::getline(f, line)) {
    chomp(line);
    rec += line;
    if (std::count(rec.begin(), rec.end(), '"') % 2) {  // a newline inside quotes
      rec += "\n";
      continue;
    }
    const auto v = csv_fields(rec);
    rec.clear();
    CsvRecord row;
    for (size_t i = 0; i < head.size() && i < v.size(); ++i) row[head[i]] = v[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

namespace {

std::vector<int64_t> ints_in(const std::string& s) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < s.size()) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      out.push_back(std::stoll(s.substr(i, j - i)));
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

}  // namespace

std::vector<TracedKernel> parse_traced_kernels(const std::string& cell) {
  std::vector<TracedKernel> out;
  size_t pos = 0;
  while ((pos = cell.find("['", pos)) != std::string::npos) {
    const size_t name_end = cell.find('\'', pos + 2);
    if (name_end == std::string::npos) break;
    TracedKernel k;
    k.kind = cell.substr(pos + 2, name_end - pos - 2);
    // The payload: the bracketed expression after "', ".
    size_t p = cell.find_first_of("([", name_end);
    if (p == std::string::npos) break;
    int depth = 0;
    size_t q = p;
    for (; q < cell.size(); ++q) {
      if (cell[q] == '(' || cell[q] == '[') ++depth;
      else if ((cell[q] == ')' || cell[q] == ']') && --depth == 0) break;
    }
    const std::string payload = cell.substr(p + 1, q > p ? q - p - 1 : 0);
    if (payload.find('(') == std::string::npos) {
      k.dims = ints_in(payload);
    } else {  // nested tuples: the shapes of the tensors a memory op touches
      size_t a = 0;
      while ((a = payload.find('(', a)) != std::string::npos) {
        const size_t b = payload.find(')', a);
        if (b == std::string::npos) break;
        k.shapes.push_back(ints_in(payload.substr(a + 1, b - a - 1)));
        a = b + 1;
      }
    }
    out.push_back(std::move(k));
    pos = q;
  }
  return out;
}

bool TracedOp::scalar_operand() const { return input_shapes.find("(1,)") != std::string::npos; }

std::vector<TracedOp> read_opgraph(const std::string& path) {
  std::vector<TracedOp> out;
  for (auto& r : read_csv_records(path)) {
    TracedOp op;
    op.name = r["Name"];
    op.op_name = r["OpName"];
    op.fw = parse_traced_kernels(r["FwOps"]);
    op.bw = parse_traced_kernels(r["BwOps"]);
    op.acc = parse_traced_kernels(r["AccOps"]);
    op.input_shapes = r["InputShapes"];
    out.push_back(std::move(op));
  }
  return out;
}

std::string traced_key(const TracedKernel& k, bool scalar) {
  std::string kind = k.kind;
  if (scalar && (kind == "VECadd" || kind == "VECsub" || kind == "VECmul" || kind == "VECdiv" || kind == "VECpow"))
    kind += "u";
  std::string s = kind;
  for (size_t i = 0; i < k.dims.size(); ++i) s += (i ? "," : " ") + std::to_string(k.dims[i]);
  return s;
}

}  // namespace neusight
