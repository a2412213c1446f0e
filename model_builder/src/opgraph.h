// opgraph.h - reader of the operator graphs NeuSight traced from PyTorch
// (../shared/neusight-data/e2e/opgraph/*.csv) and of the per-op latency CSVs next to the
// end-to-end labels: the tests and bench/e2e_accuracy compare built models against them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace neusight {

// One CSV record: header name -> field. Fields may be double-quoted and hold commas and
// newlines (the traces quote Python reprs).
using CsvRecord = std::map<std::string, std::string>;

// Splits one CSV line at the commas outside double quotes (quotes removed).
std::vector<std::string> csv_fields(const std::string& line);

// Reads a whole CSV file (first line = header). Throws std::runtime_error when the file
// cannot be opened.
std::vector<CsvRecord> read_csv_records(const std::string& path);

// A kernel listed in an opgraph FwOps / BwOps / AccOps cell, e.g. ['Linear', (4096, 1280, 3840)]
// (dims: dataset order, Linear M,N,K / BMM B,M,N,K / VEC rows,cols; AccOps write [1, n]) or
// ['MEM', ((4, 1024), (4, 1024, 1280))] (shapes: the tensors it touches; dims empty).
struct TracedKernel {
  std::string kind;
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> shapes;
};

// The kernels of one cell, in order ("[]" -> none).
std::vector<TracedKernel> parse_traced_kernels(const std::string& cell);

// One traced operator (one opgraph row).
struct TracedOp {
  std::string name, op_name;  // Name, OpName (Linear, BMM, VECadd, misc, fused, ...)
  std::vector<TracedKernel> fw, bw, acc;
  std::string input_shapes;   // InputShapes as written ("[(4, 1024, 1280), (1,)]")
  // True when a binary VEC op has a scalar operand (a (1,)-shaped input): the dataset's 'u'
  // kernels (GPT-2 divides by torch.full([], ...), BERT by a Python float: the same kernel).
  bool scalar_operand() const;
};

// Reads an opgraph CSV. Throws std::runtime_error when the file cannot be opened.
std::vector<TracedOp> read_opgraph(const std::string& path);

// "Linear 4096,1280,3840" / "VECsoftmax 81920,1024": kind and dims as one word, the
// comparison key the tests use ("u" appended to binary VEC ops with a scalar operand when
// `scalar` is set).
std::string traced_key(const TracedKernel& k, bool scalar = false);

}  // namespace neusight
