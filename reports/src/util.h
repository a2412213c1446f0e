// util.h - small text helpers shared by the report writers (table, CSV, HTML, compare).
#pragma once

#include <string>

#include "neusight/report.h"

namespace neusight::detail {

std::string shape_str(const TensorInfo& t);  // "[1,128,768]", symbolic names kept, "?" unknown
std::string pad(const std::string& s, size_t width, bool right = false);  // cuts a left-aligned s to width
std::string fixed(double v, int decimals);
std::string html_escape(const std::string& s);
double finite(double x);  // NaN/inf -> 0
// " (80% interval LOW - HIGH UNIT)" for bounds already formatted, "" where `has` is false.
std::string interval_text(bool has, const std::string& low, const std::string& high, const std::string& unit);
// An HTML cell's value with its 80% interval on a second, smaller line (where `has`).
std::string html_with_interval(const std::string& value, const std::string& low, const std::string& high, bool has);
// The kernel that stands for a node in one-line views: its slowest forward kernel (else its
// slowest kernel); nullptr for a node without kernels.
const KernelReport* main_kernel(const NodeReport& n);
// The nodes that run kernels, in graph order; with `top` > 0 the `top` slowest, slowest first.
std::vector<const NodeReport*> kernel_nodes(const std::vector<NodeReport>& nodes, int top = 0);
bool any_extrapolated(const NodeReport& n);
// The width of a column of the reports' GPU aliases under a header `header` characters wide:
// the longest alias, whole (a cut alias is no name the CLI takes).
size_t alias_width(const std::vector<Report>& reports, size_t header);
const char* bound_name(const KernelReport& k);  // "compute" | "memory" | "host" | "-" (unknown class)
// The precision and unit the kernel's math ran in on the report's GPU (precision.h
// math_precision: "fp16-tensor", "fp32-simt", "none" ...); "-" for an unknown kernel.
std::string math_name(const KernelReport& k, const Gpu& gpu);
std::string mode_name(Mode m);

}  // namespace neusight::detail

#include <nlohmann/json_fwd.hpp>

namespace neusight::detail {

// The "generation" object of the JSON report (generation.cpp).
nlohmann::json generation_json(const GenerationReport& g);
// The "parallel" object of the JSON report (parallel.cpp).
nlohmann::json parallel_json(const ParallelReport& p);
// The report's `memory` object (report.h MemoryFootprint).
nlohmann::json memory_json(const MemoryFootprint& m);
// The HTML section of a generation: per-step latency along it, one line per GPU (generation.cpp).
std::string generation_html(const std::vector<Report>& reports);

}  // namespace neusight::detail
