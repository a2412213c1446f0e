// dataset.h - read the NeuSight measured-kernel CSVs (neusight-data/kernels/**.csv).
//
// Takes: a CSV in the dataset's format (OPName, Latency, Device, ..., Kernel Name, Grid x/y/z,
// Block x/y/z, ..., then B,M,N,K for matrix products, B,H for vector ops, conv columns).
// Gives: rows with the measured facts kept apart from a Kernel in the project's IR, so the
// predictor never sees the measured latency. Dataset GEMM convention: output M x K,
// reduction N; the IR's GemmShape uses m = M, n = K, k = N.
#pragma once

#include <istream>
#include <map>
#include <string>
#include <vector>

#include "neusight/lowering.h"

namespace neusight {

struct DatasetRow {
  std::string op_name;     // "linear", "bmm", "add", "addu", "softmax", "ln", "conv", ...
  std::string device;      // the Device column as written
  double latency_ms = -1;  // measured (never an input to prediction)
  std::string kernel_name;
  int64_t grid[3] = {0, 0, 0};
  int64_t block[3] = {0, 0, 0};
  Kernel kernel;           // the row as a kernel in the IR (fp32 unless a dtype column says otherwise)
  std::vector<std::string> fields;  // the raw fields, in header order
};

struct Dataset {
  std::vector<std::string> header;
  std::vector<DatasetRow> rows;
  int column(const std::string& name) const;  // -1 when absent
};

// Splits one CSV line honouring double quotes ("a,b" stays one field, "" is a quote).
std::vector<std::string> split_csv_line(const std::string& line);

// Kernel for a dataset row's op and size columns. Throws InputError for unknown ops or
// missing size columns. `dtype` comes from an optional dtype column (default fp32).
Kernel kernel_from_dataset(const std::string& op_name, const std::map<std::string, std::string>& columns);

// Reads a CSV file. Throws InputError naming the file and line for malformed input.
Dataset read_dataset(const std::string& path);
// The same from a stream (the file's text); `what` names it in errors.
Dataset read_dataset(std::istream& in, const std::string& what);

// The same from rows already split into fields, in `header` order. Throws InputError naming
// `what` and the row's index ("rows[3]: ...").
Dataset dataset_from_rows(std::vector<std::string> header, std::vector<std::vector<std::string>> rows,
                          const std::string& what);

// Campaign consistency: a GPU's rows of one campaign (its kernels/train sweep of an op)
// against its rows of another (kernels/test) at matched shapes. Each row is a point in log
// dims (batch, m, n, k; elementwise rows use k alone) with its work (FLOPs, or elements) and
// latency; a row of `other` matches a row of `rows` when every log dim is within 0.15 (15%).
struct ShapeRow {
  double lb = 0, lm = 0, ln = 0, lk = 0;  // log dims
  double work = 0, ms = 0;                // FLOPs (or elements) and the measured latency
};
// The GEMM rows of `d` on `device` ("" = every device), in log dims.
std::vector<ShapeRow> gemm_shape_rows(const Dataset& d, const std::string& device);
// The adds of `d` on `device` ("" = every device) with at least `min_elements`, as rows of one
// dimension (their elements).
std::vector<ShapeRow> add_shape_rows(const Dataset& d, const std::string& device, double min_elements);
struct CampaignRatio {
  double ratio = 0;  // median over matched rows of `other`: median work-scaled `rows` latency / its latency
  int matched = 0;   // rows of `other` with a match
};
// 1.00: the two campaigns agree; above 1 `rows` ran slower than `other` at the same shapes.
CampaignRatio campaign_ratio(const std::vector<ShapeRow>& rows, const std::vector<ShapeRow>& other);

}  // namespace neusight
