// gpu.cpp - load the GPU database and device JSONs, resolve names and aliases.
#include "neusight/gpu.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>
#include <nlohmann/json.hpp>

#ifndef NEUSIGHT_INSTALL_DATA_DIR
#define NEUSIGHT_INSTALL_DATA_DIR ""
#endif
#ifndef NEUSIGHT_SOURCE_DATA_DIR
#define NEUSIGHT_SOURCE_DATA_DIR ""
#endif

namespace neusight {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Normalised key for matching: lower case, '_' and ' ' treated like '-'.
std::string key(const std::string& s) {
  std::string k = lower(s);
  for (auto& ch : k)
    if (ch == '_' || ch == ' ') ch = '-';
  return k;
}

// The key without separators: "rtx-4090", "RTX 4090" and "rtx4090" are one name.
std::string compact(const std::string& s) {
  std::string k;
  for (unsigned char ch : s)
    if (std::isalnum(ch)) k += char(std::tolower(ch));
  return k;
}

// The lower-case alphanumeric words of a name but the vendor and brand words.
std::vector<std::string> model_words(const std::string& s) {
  static const char* const brands[] = {"nvidia", "amd", "geforce", "tesla", "instinct", "radeon", "quadro"};
  std::vector<std::string> out;
  std::string word;
  auto flush = [&] {
    if (!word.empty() && std::find(std::begin(brands), std::end(brands), word) == std::end(brands)) out.push_back(word);
    word.clear();
  };
  for (unsigned char ch : s) {
    if (std::isalnum(ch)) word += char(std::tolower(ch));
    else flush();
  }
  flush();
  return out;
}

// The model numbers of a name's model words: each word up to the end of its first run of digits
// ("h100" of "H100-SXM5", "4090" of "RTX 4090", "mi300" of "MI300"), a word without digits
// whole. A GPU whose names contain one is a closer suggestion than any name a few edits away
// ("b100" is one edit from "h100").
std::vector<std::string> model_numbers(const std::vector<std::string>& words) {
  std::vector<std::string> out;
  for (const std::string& word : words) {
    const size_t d = word.find_first_of("0123456789");
    size_t e = d;
    while (e < word.size() && std::isdigit(static_cast<unsigned char>(word[e]))) ++e;
    out.push_back(d == std::string::npos ? word : word.substr(0, e));
  }
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

double num(const json& j, const char* field, const std::string& what, bool required, double fallback = 0) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) throw InputError(what + ": missing field '" + field + "'");
    return fallback;
  }
  if (!it->is_number()) throw InputError(what + ": field '" + std::string(field) + "' must be a number");
  double v = it->get<double>();
  // Spec numbers are MHz, GFLOPS, GB/s, GB, MB, W, nm, counts: a nonzero value below 1e-3 is
  // an error of units and would put latencies beyond what a double holds.
  if (!(v >= 0) || v > 1e12 || (v > 0 && v < 1e-3))
    throw InputError(what + ": field '" + std::string(field) + "' out of range (0 or 1e-3 to 1e12)");
  return v;
}

// A count (SMs, lanes, registers, threads, blocks, GPUs): a whole number of at most 2^20, so
// that products of two stay exact in any integer type the stages use.
int count(const json& j, const char* field, const std::string& what, bool required, int fallback = 0) {
  const double v = num(j, field, what, required, fallback);
  if (v != std::floor(v) || v > double(1 << 20))
    throw InputError(what + ": field '" + std::string(field) + "' must be a whole number of at most 2^20");
  return static_cast<int>(v);
}

std::string str(const json& j, const char* field, const std::string& what, bool required) {
  auto it = j.find(field);
  if (it == j.end()) {
    if (required) throw InputError(what + ": missing field '" + field + "'");
    return "";
  }
  if (!it->is_string()) throw InputError(what + ": field '" + std::string(field) + "' must be a string");
  return it->get<std::string>();
}

Gpu gpu_from_db_entry(const json& j, const std::string& file) {
  if (!j.is_object()) throw InputError(file + ": every GPU entry must be an object");
  Gpu g;
  g.name = str(j, "name", file, true);
  const std::string what = file + ": GPU '" + g.name + "'";
  if (auto it = j.find("aliases"); it != j.end()) {
    if (!it->is_array()) throw InputError(what + ": 'aliases' must be a list of strings");
    for (const auto& a : *it) {
      if (!a.is_string()) throw InputError(what + ": 'aliases' must be a list of strings");
      g.aliases.push_back(a.get<std::string>());
    }
  }
  g.vendor = str(j, "vendor", what, false);
  if (g.vendor.empty()) g.vendor = "nvidia";
  g.arch = str(j, "arch", what, true);
  if (g.arch.empty()) throw InputError(what + ": 'arch' must name the architecture (sm_80, gfx942, ...)");
  g.num_sm = count(j, "num_sm", what, true);
  g.boost_mhz = num(j, "boost_mhz", what, true);
  g.fp32_cores_per_sm = count(j, "fp32_cores_per_sm", what, false, 64);
  g.fp32_gflops = num(j, "fp32_gflops", what, true);
  g.tf32_gflops = num(j, "tf32_gflops", what, false);
  g.fp16_gflops = num(j, "fp16_gflops", what, false);
  g.bf16_gflops = num(j, "bf16_gflops", what, false);
  g.fp8_gflops = num(j, "fp8_gflops", what, false);
  g.fp4_gflops = num(j, "fp4_gflops", what, false);
  g.int8_gops = num(j, "int8_gops", what, false);
  g.fp16_simt_gflops = num(j, "fp16_simt_gflops", what, false);
  g.fp32_matrix_gflops = num(j, "fp32_matrix_gflops", what, false);
  g.mem_gb = num(j, "mem_gb", what, true);
  g.mem_bw_gbps = num(j, "mem_bw_gbps", what, true);
  g.l2_mb = num(j, "l2_mb", what, true);
  g.smem_per_sm_kb = num(j, "smem_per_sm_kb", what, false, 64);
  g.l1_kb = num(j, "l1_kb", what, false);
  g.board_power_w = num(j, "board_power_w", what, false);
  g.process_nm = num(j, "process_nm", what, false);
  g.regs_per_sm = count(j, "regs_per_sm", what, false, 65536);
  g.max_blocks_per_sm = count(j, "max_blocks_per_sm", what, false, 32);
  g.max_threads_per_sm = count(j, "max_threads_per_sm", what, false, 2048);
  g.nvlink = str(j, "nvlink", what, false);
  g.nvlink_gbps = num(j, "nvlink_gbps", what, false);
  g.nvlink_domain = count(j, "nvlink_domain", what, false);
  g.pcie_gbps = num(j, "pcie_gbps", what, false, 16);
  g.source = str(j, "source", what, false);
  g.dataset_num_sm = count(j, "dataset_num_sm", what, false);
  g.dataset_fp32_gflops = num(j, "dataset_fp32_gflops", what, false);
  g.dataset_mem_bw_gbps = num(j, "dataset_mem_bw_gbps", what, false);
  if (g.num_sm <= 0 || g.fp32_gflops <= 0 || g.mem_bw_gbps <= 0 || g.mem_gb <= 0 || g.l2_mb <= 0 || g.boost_mhz <= 0)
    throw InputError(what + ": num_sm, boost_mhz, fp32_gflops, mem_gb, mem_bw_gbps and l2_mb must be positive");
  freeze_matrix_widths(g);
  return g;
}

json parse_json_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError(path + ": is a directory, not a JSON file");
  std::ifstream f(path);
  if (!f) throw InputError(path + ": cannot open");
  try {
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return json::parse(text);
  } catch (const json::exception& e) {
    std::string msg = e.what();
    throw InputError(path + ": malformed JSON (" + msg.substr(msg.find(']') + 1 == std::string::npos ? 0 : msg.find(']') + 2) + ")");
  }
}

std::string exe_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return fs::path(buf).parent_path().string();
}

}  // namespace

namespace {

// FP64 against FP32 on the CUDA cores (vector units): the architecture's FP64 FMA results per
// clock per SM over its FP32 ones (CUDA C++ Programming Guide, "Arithmetic Instructions"
// throughput table: GP100, GV100, GA100, GH100 and GB100/GB200 1:2; GP10x 1:32; TU10x 1:32;
// GA10x, AD10x and GB20x 1:64). AMD from the CDNA whitepapers' vector peaks over FP32's
// as the database counts it: CDNA 1 (MI100) 1:2, CDNA 2 (MI200) 1:1, CDNA 3 and 4 1:2 (their
// FP32 vector peak counts dual issue).
double fp64_vector_ratio(const Gpu& g) {
  const std::string& a = g.arch;
  if (g.vendor == "amd") return a == "gfx90a" ? 1.0 : 0.5;
  if (a == "sm_60" || a == "sm_70" || a == "sm_72" || a == "sm_80" || a == "sm_90" || a == "sm_100" || a == "sm_103")
    return 0.5;
  if (a == "sm_61" || a == "sm_62" || a == "sm_75") return 1.0 / 32;
  return 1.0 / 64;
}

// FP64 GEMMs on matrix units over the vector rate: A100's and H100's DMMA tensor cores and
// CDNA 2 and 3's FP64 MFMA (their datasheets: 19.5 against 9.7 TFLOPS, 67 against 34, 45.3
// against 22.6 per MI200 GCD, 163.4 against 81.7); 1 elsewhere (Blackwell's and CDNA 4's FP64
// tensor peak is their vector one; MI100's FP64 MFMA runs at its vector rate).
double fp64_matrix_ratio(const Gpu& g) {
  const std::string& a = g.arch;
  return a == "sm_80" || a == "sm_90" || a == "gfx90a" || a == "gfx942" ? 2.0 : 1.0;
}

}  // namespace

double Gpu::peak_gflops(DType compute) const {
  switch (compute) {
    case DType::f64: return fp32_gflops * fp64_vector_ratio(*this);
    case DType::tf32: return tf32_gflops > 0 ? tf32_gflops : (fp32_matrix_gflops > 0 ? fp32_matrix_gflops : fp32_gflops);
    case DType::f16: return fp16_gflops > 0 ? fp16_gflops : (fp16_simt_gflops > 0 ? fp16_simt_gflops : fp32_gflops);
    case DType::bf16: return bf16_gflops > 0 ? bf16_gflops : (fp16_gflops > 0 ? fp16_gflops : fp32_gflops);
    case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
      return fp8_gflops > 0 ? fp8_gflops : peak_gflops(DType::f16);
    case DType::f4e2m1: return fp4_gflops > 0 ? fp4_gflops : peak_gflops(DType::f8e4m3fn);
    case DType::i8: case DType::u8: return int8_gops > 0 ? int8_gops : fp32_gflops;
    default: return fp32_gflops;
  }
}

namespace {

// The dtypes Gpu::matrix_width holds, a slot each; the others share their units' slot.
constexpr DType kMatrixWidthDtypes[7] = {DType::tf32, DType::f16, DType::bf16, DType::f8e4m3fn,
                                         DType::f4e2m1, DType::i8, DType::f32};

// The slot of Gpu::matrix_width a GEMM dtype's math takes (-1: none).
int matrix_width_slot(DType t) {
  if (is_fp8(t)) t = DType::f8e4m3fn;
  if (t == DType::u8) t = DType::i8;
  if (t == DType::undefined) t = DType::f32;
  const auto* end = std::end(kMatrixWidthDtypes);
  const auto* it = std::find(std::begin(kMatrixWidthDtypes), end, t);
  return it == end ? -1 : static_cast<int>(it - std::begin(kMatrixWidthDtypes));
}

// The matrix units' width for `t`: their dense peak over the FP32 lanes' rate at the boost
// clock (the FP32 peak where the clock or the lanes are not given), to the nearest power of
// two. The units do a power-of-two multiple of the lanes' FMAs per clock (an H100 SM 4,096
// FP16 FLOPs to its 256 FP32 ones: 16), while the spec sheets quote the matrix peak at another
// clock than the FP32 one (the H100 SXM5's 989 TFLOPS at 1.83 GHz, its 67 at 1.98: 14.8), and
// two boards of one die (B200, GB200) at their own clocks.
double live_matrix_lanes(const Gpu& g, DType t) {
  double lane_rate = double(g.num_sm) * double(g.fp32_cores_per_sm) * 2.0 * g.boost_mhz * 1e-3;
  if (!(lane_rate > 0)) lane_rate = g.fp32_gflops;
  const double w = lane_rate > 0 ? g.gemm_peak_gflops(t) / lane_rate : 0.0;
  return w > 0 ? std::exp2(std::round(std::log2(w))) : 0.0;
}

}  // namespace

double Gpu::matrix_lanes(DType compute) const {
  const int slot = matrix_width_slot(compute);
  if (slot >= 0 && matrix_width[size_t(slot)] > 0) return matrix_width[size_t(slot)];
  return live_matrix_lanes(*this, compute);
}

void Gpu::set_matrix_lanes(DType compute, double lanes) {
  const int slot = matrix_width_slot(compute);
  if (slot >= 0) matrix_width[size_t(slot)] = lanes;
}

void freeze_matrix_widths(Gpu& g) {
  for (size_t i = 0; i < g.matrix_width.size(); ++i) g.matrix_width[i] = live_matrix_lanes(g, kMatrixWidthDtypes[i]);
}

void set_sms(Gpu& g, const Gpu& of, int sms) {
  if (of.num_sm <= 0) return;
  const double f = double(sms) / of.num_sm;
  for (double Gpu::*rate : kFlopRates) g.*rate = of.*rate * f;
  g.mem_bw_gbps = of.mem_bw_gbps * f;
  g.board_power_w = of.board_power_w * f;
  g.num_sm = sms;
}

Gpu gpu_with_sms(const Gpu& gpu, int sms) {
  Gpu g = gpu;
  if (sms != gpu.num_sm) set_sms(g, gpu, sms);
  return g;
}

double Gpu::gemm_peak_gflops(DType compute) const {
  if ((compute == DType::f32 || compute == DType::undefined) && has_matrix_units(*this, compute)) return fp32_matrix_gflops;
  if (compute == DType::f64) return peak_gflops(compute) * fp64_matrix_ratio(*this);
  return peak_gflops(compute);
}

bool has_matrix_units(const Gpu& gpu, DType dtype) {
  if (gpu.vendor == "nvidia" && gpu.arch.rfind("sm_", 0) == 0 && std::atoi(gpu.arch.c_str() + 3) < 70) return false;
  switch (dtype) {
    case DType::tf32: return gpu.tf32_gflops > 0;
    case DType::f16: return gpu.fp16_gflops > 0;
    case DType::bf16: return gpu.bf16_gflops > 0;
    case DType::i8: case DType::u8: return gpu.int8_gops > 0;
    case DType::u4: case DType::i4: return gpu.fp16_gflops > 0;
    case DType::f4e2m1: return gpu.fp4_gflops > 0;
    case DType::f32: case DType::undefined: return gpu.fp32_matrix_gflops > 0;
    default: return is_fp8(dtype) && gpu.fp8_gflops > 0;
  }
}

namespace {

// A device JSON object (neusight-data/device_configs format); `path` names it in errors.
Gpu gpu_from_device_json(const json& j, const std::string& path) {
  if (!j.is_object()) throw InputError(path + ": device JSON must be an object");
  Gpu g;
  g.name = str(j, "Device", path, true);
  g.aliases = {g.name};
  g.num_sm = count(j, "Num_Sm", path, true);
  g.boost_mhz = num(j, "Freq", path, true);
  g.fp32_cores_per_sm = count(j, "Core_Per_SM", path, false, 64);
  g.mem_gb = num(j, "Dev_Mem", path, true);
  g.mem_bw_gbps = num(j, "Mem_Bw", path, true);
  g.l2_mb = num(j, "L2Cache", path, true);
  if (j.contains("SingleFLOPs")) {
    g.fp32_gflops = num(j, "SingleFLOPs", path, true);
  } else if (j.contains("SingleFLOPsVEC")) {
    g.vendor = "amd";
    g.fp32_gflops = num(j, "SingleFLOPsVEC", path, true);
    g.fp32_matrix_gflops = num(j, "SingleFLOPsMM", path, false);
  } else {
    throw InputError(path + ": missing field 'SingleFLOPs'");
  }
  if (g.num_sm <= 0 || g.fp32_gflops <= 0 || g.mem_bw_gbps <= 0 || g.mem_gb <= 0 || g.l2_mb <= 0 || g.boost_mhz <= 0)
    throw InputError(path + ": Num_Sm, Freq, SingleFLOPs, Dev_Mem, Mem_Bw and L2Cache must be positive");
  // The AMD form counts SIMD units per compute unit in Core_Per_SM (4 on CDNA), each
  // kAmdSimdLanes FP32 lanes wide; the lanes follow from the vector peak over CUs x clock, in
  // whole SIMDs (MI100: 23.1 TFLOPS / (2 x 120 CUs x 1.502 GHz) = 64 lanes; a CDNA3 CU's
  // dual-issue FP32 counts twice, as its peak does), so a peak edited for a what-if moves the
  // lanes with it.
  if (g.vendor == "amd")
    g.fp32_cores_per_sm =
        kAmdSimdLanes * std::max(1, static_cast<int>(std::lround(g.fp32_gflops * 1e3 /
                                                                 (2.0 * g.num_sm * g.boost_mhz * kAmdSimdLanes))));
  // Architecture-dependent numbers a device JSON lacks come from the built-in entry of the
  // same name when there is one, else from conservative defaults.
  g.arch = g.vendor == "amd" ? "cdna" : "sm_80";
  g.smem_per_sm_kb = 64;
  const Gpu* known = GpuDatabase::builtin().find(g.name);
  if (known) {
    g.arch = known->arch;
    g.vendor = known->vendor;
    g.smem_per_sm_kb = known->smem_per_sm_kb;
    g.l1_kb = known->l1_kb;
    g.regs_per_sm = known->regs_per_sm;
    g.max_blocks_per_sm = known->max_blocks_per_sm;
    g.max_threads_per_sm = known->max_threads_per_sm;
    g.tf32_gflops = known->tf32_gflops;
    g.fp16_gflops = known->fp16_gflops;
    g.bf16_gflops = known->bf16_gflops;
    g.fp8_gflops = known->fp8_gflops;
    g.fp4_gflops = known->fp4_gflops;
    g.int8_gops = known->int8_gops;
    g.nvlink = known->nvlink;
    g.nvlink_gbps = known->nvlink_gbps;
    g.nvlink_domain = known->nvlink_domain;
    g.pcie_gbps = known->pcie_gbps;
    g.board_power_w = known->board_power_w;
    g.process_nm = known->process_nm;
    // The same lanes split another way (the dataset's P4: 40 SMs of 64 where its GP104 die
    // has 20 of 128) take the die's split; a JSON whose lanes differ (a what-if) keeps its own.
    if (g.num_sm * g.fp32_cores_per_sm == known->num_sm * known->fp32_cores_per_sm) {
      g.num_sm = known->num_sm;
      g.fp32_cores_per_sm = known->fp32_cores_per_sm;
    }
    // The dataset's own numbers for a GPU whose spec sheet says otherwise (the L4's 60 SMs of
    // the full die, the H100's bandwidth) read as the spec sheet's, each field on its own.
    if (known->dataset_num_sm > 0 && g.num_sm == known->dataset_num_sm && g.fp32_cores_per_sm == known->fp32_cores_per_sm)
      g.num_sm = known->num_sm;
    if (known->dataset_fp32_gflops > 0 && g.fp32_gflops == known->dataset_fp32_gflops) g.fp32_gflops = known->fp32_gflops;
    if (known->dataset_mem_bw_gbps > 0 && g.mem_bw_gbps == known->dataset_mem_bw_gbps) g.mem_bw_gbps = known->mem_bw_gbps;
  }
  // Optional fields beyond the neusight-data format: board power (W) and process node (nm).
  if (j.contains("TDP")) g.board_power_w = num(j, "TDP", path, true);
  if (j.contains("Process_Nm")) g.process_nm = num(j, "Process_Nm", path, true);
  g.source = path;
  // The matrix units are the listed GPU's (a what-if edit of its clock or peaks runs them
  // faster, not wider); a GPU the database lacks gets them from its own numbers.
  if (known) g.matrix_width = known->matrix_width;
  else freeze_matrix_widths(g);
  return g;
}

// One GPU from JSON: a database entry (with "name", as `gpus --json` prints them: every
// field, the matrix units' peaks too) or a device JSON (with "Device").
Gpu gpu_from_json(const json& j, const std::string& what) {
  if (j.is_object() && !j.contains("Device") && j.contains("name")) return gpu_from_db_entry(j, what);
  return gpu_from_device_json(j, what);
}

}  // namespace

Gpu load_device_json(const std::string& path) { return gpu_from_json(parse_json_file(path), path); }

Gpu parse_gpu_json(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    throw InputError(what + ": malformed JSON");
  }
  return gpu_from_json(j, what);
}

std::string format_gpus_json(const GpuDatabase& db) { return format_gpus_json(db.all()); }

std::string format_gpus_json(const std::vector<Gpu>& gpus) {
  json out = json::array();
  for (const auto& g : gpus) {
    json e;
    e["name"] = g.name;
    e["aliases"] = g.aliases;
    e["vendor"] = g.vendor;
    e["arch"] = g.arch;
    e["num_sm"] = g.num_sm;
    e["boost_mhz"] = g.boost_mhz;
    e["fp32_cores_per_sm"] = g.fp32_cores_per_sm;
    e["fp32_gflops"] = g.fp32_gflops;
    e["tf32_gflops"] = g.tf32_gflops;
    e["fp16_gflops"] = g.fp16_gflops;
    e["bf16_gflops"] = g.bf16_gflops;
    e["fp8_gflops"] = g.fp8_gflops;
    if (g.fp4_gflops > 0) e["fp4_gflops"] = g.fp4_gflops;
    e["int8_gops"] = g.int8_gops;
    e["fp16_simt_gflops"] = g.fp16_simt_gflops;
    e["fp32_matrix_gflops"] = g.fp32_matrix_gflops;
    e["mem_gb"] = g.mem_gb;
    e["mem_bw_gbps"] = g.mem_bw_gbps;
    e["l2_mb"] = g.l2_mb;
    e["smem_per_sm_kb"] = g.smem_per_sm_kb;
    if (g.l1_kb > 0) e["l1_kb"] = g.l1_kb;
    e["board_power_w"] = g.board_power_w;
    e["process_nm"] = g.process_nm;
    e["regs_per_sm"] = g.regs_per_sm;
    e["max_blocks_per_sm"] = g.max_blocks_per_sm;
    e["max_threads_per_sm"] = g.max_threads_per_sm;
    e["nvlink"] = g.nvlink;
    e["nvlink_gbps"] = g.nvlink_gbps;
    e["nvlink_domain"] = g.nvlink_domain;
    e["pcie_gbps"] = g.pcie_gbps;
    e["source"] = g.source;
    if (g.dataset_num_sm > 0) e["dataset_num_sm"] = g.dataset_num_sm;
    if (g.dataset_fp32_gflops > 0) e["dataset_fp32_gflops"] = g.dataset_fp32_gflops;
    if (g.dataset_mem_bw_gbps > 0) e["dataset_mem_bw_gbps"] = g.dataset_mem_bw_gbps;
    out.push_back(std::move(e));
  }
  return out.dump(1) + "\n";
}

std::string format_device_json(const Gpu& gpu) {
  // Whole numbers as integers, as the dataset writes them.
  const auto number = [](double v) { return v == std::floor(v) && std::fabs(v) < 1e15 ? json(int64_t(v)) : json(v); };
  json j;
  j["Device"] = gpu.name;
  j["Dev_Mem"] = number(gpu.mem_gb);
  j["Mem_Bw"] = number(gpu.mem_bw_gbps);
  j["Num_Sm"] = gpu.num_sm;
  // The AMD form counts SIMD units (gpu_from_device_json).
  j["Core_Per_SM"] = gpu.vendor == "amd" ? gpu.fp32_cores_per_sm / kAmdSimdLanes : gpu.fp32_cores_per_sm;
  j["Freq"] = number(gpu.boost_mhz);
  if (gpu.vendor == "amd") {
    j["SingleFLOPsVEC"] = number(gpu.fp32_gflops);
    if (gpu.fp32_matrix_gflops > 0) j["SingleFLOPsMM"] = number(gpu.fp32_matrix_gflops);
  } else {
    j["SingleFLOPs"] = number(gpu.fp32_gflops);
  }
  j["L2Cache"] = number(gpu.l2_mb);
  return j.dump(1) + "\n";
}

namespace {
std::string& default_data_dir() {
  static std::string dir;
  return dir;
}
}  // namespace

void set_default_data_dir(const std::string& dir) { default_data_dir() = dir; }

std::string data_dir() {
  if (const char* env = std::getenv("NEUSIGHT_DATA_DIR"); env && *env) return env;
  std::error_code ec;
  const std::string exe = exe_dir();
  for (const std::string& cand : {default_data_dir(), exe + "/data", exe + "/../data", exe + "/../share/neusight",
                                  std::string(NEUSIGHT_INSTALL_DATA_DIR), std::string(NEUSIGHT_SOURCE_DATA_DIR)}) {
    if (!cand.empty() && fs::exists(fs::path(cand) / "gpus.json", ec)) return cand;
  }
  return std::string(NEUSIGHT_SOURCE_DATA_DIR);
}

GpuDatabase GpuDatabase::load(const std::string& path) {
  json j = parse_json_file(path);
  if (!j.is_object() || !j.contains("gpus") || !j["gpus"].is_array())
    throw InputError(path + ": a GPU database needs a 'gpus' list");
  GpuDatabase db;
  std::vector<std::string> keys;
  for (const auto& e : j["gpus"]) {
    Gpu g = gpu_from_db_entry(e, path);
    std::vector<std::string> own = {key(g.name)};
    for (const auto& a : g.aliases) own.push_back(key(a));
    std::sort(own.begin(), own.end());
    own.erase(std::unique(own.begin(), own.end()), own.end());
    for (const auto& k : own) {
      if (std::find(keys.begin(), keys.end(), k) != keys.end())
        throw InputError(path + ": GPU name or alias '" + k + "' appears more than once");
      keys.push_back(k);
    }
    db.gpus_.push_back(std::move(g));
  }
  if (db.gpus_.empty()) throw InputError(path + ": the GPU database is empty");
  return db;
}

const GpuDatabase& GpuDatabase::builtin() {
  static const GpuDatabase db = [] {
    const std::string path = data_dir() + "/gpus.json";
    try {
      return load(path);
    } catch (const InputError& e) {
      throw RuntimeError(std::string("built-in GPU database unusable: ") + e.what());
    }
  }();
  return db;
}

const Gpu* GpuDatabase::find(const std::string& name) const {
  const std::string k = key(name);
  for (const auto& g : gpus_) {
    if (key(g.name) == k) return &g;
    for (const auto& a : g.aliases)
      if (key(a) == k) return &g;
  }
  // Separators aside ("rtx-4090", "H100 SXM"): the one GPU whose name or alias it is.
  const std::string c = compact(name);
  if (c.empty()) return nullptr;
  const Gpu* hit = nullptr;
  for (const auto& g : gpus_) {
    bool named = compact(g.name) == c;
    for (const auto& a : g.aliases) named = named || compact(a) == c;
    if (!named) continue;
    if (hit && hit != &g) return nullptr;  // two GPUs: ambiguous, resolve() lists them
    hit = &g;
  }
  return hit;
}

namespace {
// The items of a comma-separated list, empty ones included ("a,,b" has three).
std::vector<std::string> list_items(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}
}  // namespace

bool GpuDatabase::names_all(const std::string& list) {
  for (const std::string& name : list_items(list))
    if (key(name) == "all") return true;
  return false;
}

std::vector<Gpu> GpuDatabase::resolve_list(const std::string& list, const std::string& what) const {
  std::vector<Gpu> out;
  for (const std::string& name : list_items(list)) {
    if (name.empty()) throw InputError(what + ": empty GPU name in '" + list + "'");
    if (key(name) == "all" && !find(name))
      out.insert(out.end(), gpus_.begin(), gpus_.end());
    else
      out.push_back(resolve(name));
  }
  return out;
}

Gpu GpuDatabase::resolve(const std::string& name_or_path) const {
  if (const Gpu* g = find(name_or_path)) return *g;
  std::error_code ec;
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".json");
  if (looks_like_path || fs::exists(name_or_path, ec)) {
    if (!fs::exists(name_or_path, ec)) throw InputError(name_or_path + ": device JSON not found");
    return load_device_json(name_or_path);
  }
  // Suggest the closest GPUs, each by its first alias: those whose names contain more of the
  // name's model numbers first, then the fewest edits between the names without separators.
  const std::vector<std::string> words = model_words(name_or_path);
  const std::vector<std::string> numbers = model_numbers(words);
  std::string c;  // the name without separators, vendor and brand words
  for (const auto& w : words) c += w;
  struct Candidate {
    size_t missing, edits;
    std::string alias;
    bool operator<(const Candidate& o) const { return std::tie(missing, edits) < std::tie(o.missing, o.edits); }
  };
  std::vector<Candidate> cands;
  for (const auto& g : gpus_) {
    std::vector<std::string> names = g.aliases;
    names.push_back(g.name);
    Candidate best{numbers.size(), std::string::npos, g.aliases.empty() ? g.name : g.aliases.front()};
    for (const auto& n : names) {
      const std::string cn = compact(n);
      size_t missing = 0;
      for (const auto& m : numbers) missing += cn.find(m) == std::string::npos ? 1 : 0;
      best = std::min(best, Candidate{missing, edit_distance(c, cn), best.alias});
    }
    cands.push_back(best);
  }
  std::stable_sort(cands.begin(), cands.end());
  std::string hint;
  for (size_t i = 0; i < cands.size() && i < 3; ++i) hint += (i ? ", " : "") + cands[i].alias;
  throw InputError("unknown GPU '" + name_or_path + "' (closest: " + hint + "; `neusight-onnx gpus` lists all)");
}

}  // namespace neusight
