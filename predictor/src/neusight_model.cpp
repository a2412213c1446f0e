// neusight_model.cpp - per-tile features, the batched MLP forward pass and the weights file.
#include "neusight/neusight_model.h"
#include "neusight/precision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>
#include <xtensor-blas/xlinalg.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

namespace neusight {
namespace {

double log2c(double v) { return std::log2(std::max(v, 1e-12)); }

// Ops whose per-element work is a transcendental or a division (slower than one FMA per element).
bool special_op(const std::string& op) {
  static const char* ops[] = {"pow", "gelu", "tanh", "exp", "sigmoid", "erf", "log", "sqrt", "div", "softplus",
                              "silu", "swish", "reciprocal", "sin", "cos",
                              "adam"};  // Adam's update: a square root and a division per element
  auto match = [&](const std::string& b) {
    for (const char* o : ops)
      if (b == o || b.rfind(std::string(o) + "_", 0) == 0) return true;
    return false;
  };
  // "powu", "divu": the dataset's tensor-with-scalar variants.
  return match(op) || (op.size() > 1 && op.back() == 'u' && match(op.substr(0, op.size() - 1)));
}

}  // namespace

const char* util_class_name(UtilClass c) {
  switch (c) {
    case UtilClass::gemm: return "gemm";
    case UtilClass::elementwise: return "elementwise";
    case UtilClass::softmax: return "softmax";
    case UtilClass::layernorm: return "layernorm";
  }
  return "?";
}

bool util_class_of(const Kernel& k, UtilClass& out) {
  switch (k.cls) {
    case KernelClass::gemm: out = UtilClass::gemm; return true;
    case KernelClass::elementwise:
    case KernelClass::reduce:
    case KernelClass::memory: out = UtilClass::elementwise; return true;
    case KernelClass::softmax: out = UtilClass::softmax; return true;
    case KernelClass::layernorm: out = UtilClass::layernorm; return true;
    default: return false;
  }
}

const char* formulation_name(Formulation f) { return f == Formulation::paper ? "neusight-paper" : "neusight"; }

TileFeatures paper_tile_features(const Kernel& k, const Tiling& t, const Gpu& gpu) {
  TileFeatures f;
  const bool gemm = k.cls == KernelClass::gemm;
  const double peak = (gemm ? gpu.gemm_peak_gflops(k.dtype) : gpu.peak_gflops(k.dtype)) * 1e9;  // FLOP/s
  const double bw = gpu.mem_bw_gbps * 1e9;                                                      // B/s
  const double sms = std::max(1, gpu.num_sm);
  const double tiles = double(std::max<int64_t>(t.tiles, 1));
  const double waves = std::ceil(tiles / sms);
  const double tile_flops = t.tile_flops > 0 ? t.tile_flops : k.flops / tiles;
  const double tile_mb = (gemm && t.tile_bytes > 0 ? t.tile_bytes : k.bytes / tiles) / 1048576.0;
  // Per wave: the SMs' tiles at the roofline rate min(peak, intensity x bandwidth), i.e. the
  // longer of their FLOPs at the peak and their share of the kernel's bytes at the bandwidth
  // (the intensity counts padded FLOPs over compulsory bytes).
  const double wave_s = std::max(peak > 0 ? tile_flops * sms / peak : 0.0, bw > 0 ? k.bytes / tiles * sms / bw : 0.0);
  f.base_ms = waves * wave_s * 1e3;
  f.waves = waves;
  f.x[0] = log2c(tile_flops / std::max(peak / 1e12 / sms, 1e-30));
  f.x[1] = log2c(tile_mb / std::max(gpu.mem_bw_gbps / sms, 1e-30));
  f.x[2] = log2c(waves * tile_mb / std::max(gpu.mem_gb * 1024.0 / sms, 1e-30));
  f.x[3] = log2c(waves * tile_mb / std::max(gpu.l2_mb * 1024.0 / sms, 1e-30));
  return f;
}

const std::vector<std::string>& feature_names(UtilClass c, Formulation form) {
  static const std::vector<std::string> paper = {"log2_tile_flops_over_sm_peak", "log2_tile_mb_over_sm_bandwidth",
                                                 "log2_wave_mb_over_sm_memory", "log2_wave_mb_over_sm_l2"};
  if (form == Formulation::paper) return paper;
  // GEMM: dimensionless inputs that stay in the training range on any GPU; the GPU's rates
  // enter only through the law's base time (the wave-quantized roofline at the rate the math
  // sustains), so a higher peak or bandwidth can never predict slower. Waves and the fill of
  // the last wave; the tile's arithmetic intensity tm*tn/(tm+tn) (FLOPs per operand element
  // loaded; one number for every tile shape); the reduction length after split-K; one SM's
  // share of a wave in lane clocks (its FLOPs over 2 x kFeatureLanesPerSm, times the matrix
  // units' rate over the lanes' for tensor-core GEMMs: the tile's work, counted on a 64-lane
  // SM as the waves are on kFeatureSms SMs, so that the GPU's own lanes per SM, a rate, enter
  // through the base time alone); and the kernel's arithmetic intensity in FLOPs per compulsory
  // byte (how much of its time is operand streaming). The power-limited clock (precision.h)
  // is in the base time only: with two low-power training GPUs (P4, T4), a network input would
  // let them set the efficiency of every power-limited GPU tile by tile, far outside what they
  // measured.
  // Streaming kernels (elementwise, softmax, layernorm, memory): the kernel's shape and its
  // waves on kFeatureSms SMs, plus two memory-system inputs: the L2 size and the kernel's
  // footprint (elementwise) or one wave's rows (softmax, layernorm) relative to L2. The
  // fraction of the DRAM bandwidth a streaming kernel reaches differs by memory system
  // (measured on the large test kernels: 0.73-0.75 on the 2-4 MB L2 GPUs P4, T4, P100;
  // 0.87-0.91 on V100 and A100), and rows that are re-read hit L2 when a wave's rows fit.
  // They carry the large-L2 GPUs' behaviour (A100 80GB, unseen: elementwise / softmax /
  // layernorm within 5 / 7 / 11%); a GPU left out of training with a small L2 is far off
  // (docs/ACCURACY.md, leave one GPU out). Neither
  // input depends on peak FLOPs or bandwidth, so latency stays exactly inversely proportional
  // to bandwidth; the predictor evaluates them only at training GPUs' L2 sizes, which makes
  // the latency non-increasing in the L2 size (neusight_predictor.cpp).
  // Every input is clamped to the range seen in training, so the network is never evaluated
  // outside it.
  static const std::vector<std::string> gemm = {"log2_waves",         "last_wave_fill",
                                                "log2_tile_intensity", "log2_reduction",
                                                "log2_wave_lane_clocks", "log2_flops_per_byte"};
  static const std::vector<std::string> ew = {"log2_waves",         "last_wave_fill",        "tensor_inputs",
                                              "special_function",   "log2_element_bytes",    "log2_tile_elements",
                                              "log2_l2_mb",         "log2_footprint_over_l2"};
  static const std::vector<std::string> row = {"log2_waves",         "last_wave_fill",     "log2_row_length",
                                               "log2_element_bytes", "log2_rows_per_tile", "log2_l2_mb",
                                               "log2_wave_bytes_over_l2"};
  // Softmax: the row features with the lanes' fill instead of the wave's rows over L2 (which
  // put a 40 MB-L2 GPU's rows on the footprint of short rows of the older GPUs and made the
  // forward-in-time A100 up to 30% too fast); the re-reads of long rows are in base_ms. The
  // sectors a one-row-per-warp load moves per sector it uses (row alignment, below).
  static const std::vector<std::string> softmax = {"log2_waves",         "last_wave_fill",     "log2_row_length",
                                                   "log2_element_bytes", "log2_rows_per_tile", "log2_l2_mb",
                                                   "lane_efficiency",    "sector_efficiency"};
  switch (c) {
    case UtilClass::gemm: return gemm;
    case UtilClass::elementwise: return ew;
    case UtilClass::softmax: return softmax;
    default: return row;
  }
}

namespace {
// Threads per block of the block path: a power of two covering cols/8 (4-wide vector loads,
// half the row per pass), 32 to 512.
int softmax_block_threads(int64_t cols) {
  int threads = 32;
  while (threads < 512 && threads < double(cols) / 8) threads *= 2;
  return threads;
}
// Rows (one a block) resident on one SM at a time: as many blocks as its thread limit allows,
// and no more than the rows the grid gives each SM, counted on kFeatureSms SMs as the waves
// the networks see are (so that their inputs do not depend on the SM count).
double resident_rows(const Kernel& k, const Gpu& gpu, int block_threads) {
  const double by_threads = std::max(1, gpu.max_threads_per_sm / std::max(1, block_threads));
  const double per_sm = std::ceil(double(std::max<int64_t>(k.rows, 1)) / double(kFeatureSms));
  return std::min(by_threads, per_sm);
}
// A row kernel that reads its row again (one row per block of `block_threads`): the resident
// rows' bytes over the on-chip cache that holds the re-reads, which are global loads: the L1
// where it is its own array (spec sheet l1_kb: Pascal, AMD CDNA), else the unified L1 / shared
// memory (smem_per_sm_kb). 0 for unknown on-chip memory.
double onchip_ratio(const Kernel& k, const Gpu& gpu, double eb, int block_threads) {
  const double onchip_kb = gpu.l1_kb > 0 ? gpu.l1_kb : gpu.smem_per_sm_kb;
  if (onchip_kb <= 0) return 0;
  return resident_rows(k, gpu, block_threads) * double(k.cols) * eb / (onchip_kb * 1024.0);
}
// Softmax rows longer than a warp's registers hold (1024 fp32 values: 32 lanes x 32) run one
// row per block in three passes over the row (max, sum of exponentials, normalize + write).
// The two re-reads stay on chip while the resident rows fit that cache (onchip_ratio); when
// they outgrow it, the re-reads go back to L2/DRAM and the kernel moves up to twice its
// compulsory traffic. 0 for the one-row-per-warp path.
double softmax_onchip_ratio(const Kernel& k, const Gpu& gpu, double eb) {
  return k.cols <= 1024 ? 0 : onchip_ratio(k, gpu, eb, softmax_block_threads(k.cols));
}
// Fraction of the lanes that hold row elements in a pass over the row: the one-row-per-warp
// path sizes its per-lane arrays to the next power of two of the row; the block path steps
// over the row threads x 4 elements at a time, the last step partly idle.
double softmax_lane_efficiency(const Kernel& k) {
  const double cols = double(std::max<int64_t>(k.cols, 1));
  if (k.cols <= 1024) return cols / std::exp2(std::ceil(std::log2(cols)));
  const double step = 4.0 * softmax_block_threads(k.cols);
  return cols / (std::ceil(cols / step) * step);
}
// Rows of at most 1024 columns run one row per warp with scalar, coalesced loads: each load
// instruction of a warp reads 32 consecutive elements (128 bytes in fp32). A row whose start
// is not on a 32-byte sector boundary makes that request span one sector more than it uses
// (5 sectors for 4 sectors of data). Row starts are multiples of the row's bytes, so over the
// rows they fall on multiples of g = gcd(row bytes, 32): a share 1 - g/32 of the rows is
// misaligned. Returns the requested over the transferred sectors, averaged over the rows (1
// when every row is sector-aligned; 4 / 4.875 for odd fp32 rows). The block path (longer
// rows) aligns its vector loads itself (a scalar prologue up to the alignment): 1 there.
// The training rows carry the effect (at more than 4000 rows, one-warp rows of 32-byte-aligned
// length run 5-25 points closer to the roofline than unaligned ones on every training GPU;
// the block path shows no such step); all test rows are aligned.
double softmax_sector_efficiency(const Kernel& k, double eb) {
  if (k.cols > 1024) return 1.0;
  constexpr int64_t kSector = 32;
  const double per_load = std::ceil(32 * eb / double(kSector));  // sectors of an aligned warp request
  const int64_t row_bytes = std::max<int64_t>(1, std::llround(double(std::max<int64_t>(k.cols, 1)) * eb));
  const double g = double(std::gcd(row_bytes, kSector));
  return per_load / (per_load + (1.0 - g / double(kSector)));
}
// Fraction of the re-reads that miss on chip: none while the resident rows fit the on-chip
// cache, all of them once they need twice that (log-linear in between). Where that cache is
// the unified L1 / shared memory no softmax training row outgrows it (rows stop at 4100
// columns), so the learned utilization stays that of rows served on chip and the extra
// traffic carries the long rows (measured on the test rows of every GPU: 0.38-0.45 of the
// compulsory-traffic roofline at 12288-16384 columns, 0.6-0.8 below the on-chip limit); the
// Pascal GPUs' separate 24-48 KB L1 is outgrown from 1280-2048 columns, where their rows step
// down.
double reread_miss(double ratio) {
  return ratio > 0 ? std::clamp(std::log2(ratio), 0.0, 1.0) : 0.0;
}
// PyTorch's vectorized LayerNorm kernel runs one row per block of 32 x 4 threads (every
// kernels/test row: Block 32 x 4) and reads its row twice (the mean and variance, then the
// normalized write). The re-read stays on chip while the rows resident on an SM fit its
// on-chip cache (as softmax's, above); beyond it one more read of the row comes from L2/DRAM,
// half the compulsory traffic (read + write) again. The test rows step there on every GPU:
// the A100 from 0.79-0.85 of its bandwidth at 1024-2048 columns to 0.58 by 8192, the T4 from
// 0.71 at 1024 to 0.51, the P4 from 0.67 at 1024 to 0.50, the P100 (24 KB L1) at 0.33-0.51 from
// 768 up; 0.50-0.60 everywhere beyond.
constexpr int kLayerNormBlockThreads = 128;
}  // namespace

TileFeatures tile_features(UtilClass c, const Kernel& k, const Tiling& t, const Gpu& gpu) {
  return tile_features(c, k, t, gpu, gpu.l2_mb);
}

TileFeatures tile_features(UtilClass c, const Kernel& k, const Tiling& t, const Gpu& gpu, double feature_l2_mb) {
  TileFeatures f;
  // GEMMs on CUDA cores run at the rate the FP32 lanes sustain (issue and power, precision.h).
  const bool gemm = k.cls == KernelClass::gemm;
  const bool matrix = gemm && has_matrix_units(gpu, k.dtype);
  const double simt = gemm && !matrix ? simt_sustained_fraction(gpu) : 1.0;
  // A GEMM's math per FP32 lane-clock: 1 on the CUDA cores; on matrix units their width
  // (Gpu::matrix_lanes: 16 for FP16 on the A100, times the sustained fraction as run), so that
  // a tile's math in clocks is what the unit it runs on takes, whatever a what-if does to the
  // peaks.
  const double math_per_lane = matrix ? std::max(1.0, gpu.matrix_lanes(k.dtype)) : 1.0;
  const double peak = (gemm ? gpu.gemm_peak_gflops(k.dtype) * simt : gpu.peak_gflops(k.dtype)) * 1e9;
  const double bw = gpu.mem_bw_gbps * 1e9;              // B/s
  const double l2_bytes = std::max(feature_l2_mb * 1048576.0, 1.0);  // the L2 the inputs see
  const double sms = std::max(1, gpu.num_sm);
  const double tiles = double(std::max<int64_t>(t.tiles, 1));
  const double per_sm = double(std::max<int64_t>(t.blocks_per_sm, 1));
  const double concurrent = sms * per_sm;
  // Per-tile work: its FLOPs, and its share of the kernel's compulsory traffic.
  const double tile_flops = t.tile_flops > 0 ? t.tile_flops : (tiles > 0 ? k.flops / tiles : 0);
  const double eb = element_bytes(k.dtype);
  const double onchip = c == UtilClass::softmax     ? softmax_onchip_ratio(k, gpu, eb)
                        : c == UtilClass::layernorm ? onchip_ratio(k, gpu, eb, kLayerNormBlockThreads)
                                                    : 0.0;
  // Compulsory traffic is one read and one write; re-reads that miss add up to two more reads
  // (softmax) or one (layernorm).
  const double reread_share = c == UtilClass::layernorm ? 0.5 : 1.0;
  const double tile_traffic = k.bytes / tiles * (1.0 + reread_share * reread_miss(onchip));
  const double t_c = peak > 0 ? tile_flops / peak : 0;
  const double t_m = bw > 0 ? tile_traffic / bw : 0;
  if (gemm) {
    // GEMMs: the math is the busiest SM's: the block scheduler spreads the grid over the SMs,
    // so one SM computes ceil(tiles / SMs) tiles at the per-SM peak (co-resident tiles share
    // it; a grid smaller than the SMs leaves some idle). The traffic is the kernel's (every
    // tile's share at the full bandwidth). Both fall as FLOPs, bandwidth or SMs (at fixed
    // per-SM rates) rise.
    // Stream-K grids (tiling.h) share the k iterations out evenly: the busiest SM computes
    // tiles / SMs tiles' worth (the partials of the tiles split between two SMs stay in L2).
    const double sm_tiles = t.config.stream_k ? tiles / sms : std::ceil(tiles / sms);
    const double compute_ms = sm_tiles * t_c * sms * 1e3, memory_ms = tiles * t_m * 1e3;
    f.base_ms = std::max(compute_ms, memory_ms);
    f.overlap_ms = std::min(compute_ms, memory_ms);
    if (!matrix) f.lane_excess_ms = std::max(0.0, compute_ms * simt_lane_ratio(gpu) - f.base_ms);  // wider SMs
  } else {
    // Streaming kernels: a wave is one tile on every SM's resident slots and takes the longer
    // of one SM's compute for its tiles and their traffic at the SMs' share of the bandwidth.
    // Full waves cost a wave each; the last wave's active tiles cost their share of a wave
    // (its compute is still one SM's), and the share of it left idle is overlap_ms, which the
    // law charges at a learned fraction (0: the active SMs draw the whole bandwidth; 1: each
    // SM draws only its share, a partial wave costs a full one). At fixed per-SM rates more
    // SMs never lengthen either term: the waves they save cost at least the idle share added.
    const double own_waves = std::ceil(tiles / concurrent);
    const double wave_compute = per_sm * t_c * sms;  // one SM's tiles of a wave
    const double wave_ms = std::max(wave_compute, concurrent * t_m) * 1e3;
    const double last_fill = (tiles - (own_waves - 1) * concurrent) / concurrent;
    const double last_ms = std::max(wave_compute, last_fill * concurrent * t_m) * 1e3;
    f.base_ms = (own_waves - 1) * wave_ms + last_ms;
    f.overlap_ms = wave_ms - last_ms;
  }
  // The networks' wave inputs see the kernel as tiled on kFeatureSms SMs (the GPU's own wave
  // quantization is in base_ms and overlap_ms), so a GPU with more SMs at the same per-SM
  // rates never gets a lower utilization for the same kernel.
  const double concurrent_ref = double(kFeatureSms) * per_sm;
  const double waves_ref = std::ceil(tiles / concurrent_ref);
  // Streaming kernels use no alpha / waves term (u = gamma): their few-wave cost is the
  // dispatch they are bounded by and the idle share of their last wave.
  f.waves = gemm ? waves_ref : std::numeric_limits<double>::infinity();
  const double fill_ref = tiles / (waves_ref * concurrent_ref);
  const double active = std::min(tiles, concurrent_ref);
  double* x = f.x;
  switch (c) {
    case UtilClass::gemm:
      x[0] = std::log2(waves_ref);
      x[1] = fill_ref;
      x[2] = log2c(double(t.config.tb_m) * double(t.config.tb_n) / double(t.config.tb_m + t.config.tb_n));
      x[3] = log2c(double(k.gemm.k) / double(std::max(1, t.config.split_k)));
      x[4] = log2c(per_sm * tile_flops / (2.0 * kFeatureLanesPerSm * math_per_lane));
      x[5] = log2c(k.flops / std::max(k.bytes, 1.0));
      break;
    case UtilClass::elementwise:
      x[0] = std::log2(waves_ref);
      x[1] = fill_ref;
      x[2] = k.cls == KernelClass::elementwise ? double(k.inputs) : 1.0;
      x[3] = special_op(k.op) ? 1.0 : 0.0;
      x[4] = std::log2(eb);
      x[5] = log2c(double(k.rows) * double(k.cols) / tiles);
      x[6] = log2c(feature_l2_mb);
      x[7] = log2c(k.bytes / l2_bytes);
      break;
    default:
      x[0] = std::log2(waves_ref);
      x[1] = fill_ref;
      x[2] = log2c(double(k.cols));
      x[3] = std::log2(eb);
      x[4] = log2c(double(std::max<int64_t>(k.rows, 1)) / tiles);
      x[5] = log2c(feature_l2_mb);
      x[6] = c == UtilClass::softmax ? softmax_lane_efficiency(k) : log2c(active * tile_traffic / l2_bytes);
      if (c == UtilClass::softmax) x[7] = softmax_sector_efficiency(k, eb);
      break;
  }
  return f;
}

double law_latency_ms(double floor, const TileFeatures& f, const double* o, double* util) {
  const double s1 = 1.0 / (1.0 + std::exp(-o[0]));
  const double s2 = 1.0 / (1.0 + std::exp(-o[1]));
  const double s3 = 1.0 / (1.0 + std::exp(-o[2]));
  const double s4 = 1.0 / (1.0 + std::exp(-o[3]));
  const double u = floor + (1 - floor) * s1 * (1 - s2 / f.waves);
  if (util) *util = u;
  const double device = (f.base_ms + s4 * f.overlap_ms) / u + (1 / u - 1) * f.lane_excess_ms;
  return f.device_only ? device : std::hypot(kMaxOverheadMs * s3, device);
}

double paper_law_latency_ms(double floor, const TileFeatures& f, const double* o) {
  const double s1 = 1.0 / (1.0 + std::exp(-o[0]));
  const double s2 = 1.0 / (1.0 + std::exp(-o[1]));
  return f.base_ms / (floor + (1 - floor) * s1 * (1 - s2 / f.waves));
}

double interval_log_sd_at(const ClassModel& m, double roofline_ms) {
  const std::vector<double>& x = m.interval_roofline_ms;
  const std::vector<double>& y = m.interval_log_sd_by_roofline;
  if (x.empty() || x.size() != y.size()) return m.interval_log_sd;
  if (!(roofline_ms > x.front())) return y.front();
  if (roofline_ms >= x.back()) return y.back();
  const size_t i = size_t(std::upper_bound(x.begin(), x.end(), roofline_ms) - x.begin());
  const double t = std::log(roofline_ms / x[i - 1]) / std::log(x[i] / x[i - 1]);
  return y[i - 1] + t * (y[i] - y[i - 1]);
}

namespace {

// The networks over distinct rows (predict_latency_ms below).
std::vector<double> predict_distinct_ms(const ClassModel& m, const std::vector<TileFeatures>& f,
                                        std::vector<char>* extrapolated, std::vector<double>* log_sd) {
  const size_t n = f.size();
  std::vector<double> lat(n, 0.0);
  if (extrapolated) extrapolated->assign(n, 0);
  std::vector<double> sq, beyond;  // sum of squared member log-latencies; standard deviations outside the range
  if (log_sd) {
    log_sd->assign(n, 0.0);
    sq.assign(n, 0.0);
    beyond.assign(n, 0.0);
  }
  if (n == 0 || m.nets.empty()) return lat;
  const bool paper = m.formulation == Formulation::paper;
  for (const UtilNet& net : m.nets) {
    const size_t d = net.lo.size();
    xt::xtensor<double, 2> a = xt::empty<double>({n, d});
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < d; ++j) {
        double v = f[i].x[j];
        const double margin = 0.02 * (net.hi[j] - net.lo[j]) + 1e-9;
        if (extrapolated && (v < net.lo[j] - margin || v > net.hi[j] + margin)) (*extrapolated)[i] = 1;
        if (log_sd) {
          const double out = std::max(net.lo[j] - v, v - net.hi[j]);
          if (out > 0) beyond[i] = std::max(beyond[i], out * net.scale[j]);
        }
        if (!paper) v = std::min(std::max(v, net.lo[j]), net.hi[j]);
        a(i, j) = (v - net.mean[j]) * net.scale[j];
      }
    for (size_t l = 0; l < net.layers.size(); ++l) {
      const DenseLayer& L = net.layers[l];
      auto W = xt::adapt(L.w, std::vector<size_t>{size_t(L.in), size_t(L.out)});
      xt::xtensor<double, 2> z = xt::linalg::dot(a, W);
      // Bias and ReLU in one pass over the row-major result (xtensor's broadcasting stepper
      // for `z += b` cost more than the product itself on large graphs).
      const bool relu = l + 1 < net.layers.size();
      double* zp = z.data();
      const size_t out = size_t(L.out);
      for (size_t i = 0; i < n; ++i, zp += out)
        for (size_t j = 0; j < out; ++j) {
          const double v = zp[j] + L.b[j];
          zp[j] = relu ? std::max(v, 0.0) : v;
        }
      a = std::move(z);
    }
    for (size_t i = 0; i < n; ++i) {
      const double l = std::log(paper ? paper_law_latency_ms(m.floor, f[i], &a(i, 0))
                                      : law_latency_ms(m.floor, f[i], &a(i, 0), nullptr));
      lat[i] += l;
      if (log_sd) sq[i] += l * l;
    }
  }
  // The ensemble's latency is the geometric mean of its members' (the mean in log space):
  // each network is fitted on the squared log error, so it estimates log latency, and the
  // mean of those estimates is their best combination. An arithmetic mean is pulled up by a
  // member that extrapolates slowly on an unseen GPU (forward in time, the A100s: BMM 12.7 ->
  // 11.7% seed 1, 10.7 -> 10.3% seed 2; A100 80GB and e2e figures unchanged within noise).
  const double members = double(m.nets.size());
  if (log_sd)
    for (size_t i = 0; i < n; ++i) {
      const double mean = lat[i] / members;
      const double var = std::max(0.0, sq[i] / members - mean * mean);
      (*log_sd)[i] = std::sqrt(var + std::pow(kOutOfRangeLogSd * beyond[i], 2));
    }
  for (double& v : lat) v = std::exp(v / members);
  return lat;
}

}  // namespace

std::vector<double> predict_latency_ms(const ClassModel& m, const std::vector<TileFeatures>& f,
                                       std::vector<char>* extrapolated, std::vector<double>* log_sd) {
  // A model repeats its kernels (a layer's GEMMs in every layer, and their tilings on fewer
  // SMs): rows identical in every field the law reads are evaluated once.
  std::unordered_map<std::string, size_t> seen;
  std::vector<size_t> of(f.size());
  std::vector<TileFeatures> distinct;
  std::string key(sizeof(TileFeatures::x) + 4 * sizeof(double) + 1, '\0');
  for (size_t i = 0; i < f.size(); ++i) {
    char* p = &key[0];
    std::memcpy(p, f[i].x, sizeof(TileFeatures::x));
    p += sizeof(TileFeatures::x);
    for (double v : {f[i].base_ms, f[i].overlap_ms, f[i].waves, f[i].lane_excess_ms}) {
      std::memcpy(p, &v, sizeof v);
      p += sizeof v;
    }
    *p = f[i].device_only ? 1 : 0;
    const auto [it, added] = seen.emplace(key, distinct.size());
    if (added) distinct.push_back(f[i]);
    of[i] = it->second;
  }
  if (distinct.size() == f.size()) return predict_distinct_ms(m, f, extrapolated, log_sd);
  std::vector<char> extra;
  std::vector<double> sd;
  const std::vector<double> lat =
      predict_distinct_ms(m, distinct, extrapolated ? &extra : nullptr, log_sd ? &sd : nullptr);
  std::vector<double> out(f.size());
  if (extrapolated) extrapolated->assign(f.size(), 0);
  if (log_sd) log_sd->assign(f.size(), 0.0);
  for (size_t i = 0; i < f.size(); ++i) {
    out[i] = lat[of[i]];
    if (extrapolated) (*extrapolated)[i] = extra[of[i]];
    if (log_sd) (*log_sd)[i] = sd[of[i]];
  }
  return out;
}

const std::vector<std::string>& training_devices() {
  static const std::vector<std::string> d = {"Tesla P4", "Tesla P100-PCIE-16GB", "Tesla T4", "Tesla V100-PCIE-32GB",
                                             "NVIDIA A100-PCIE-40GB"};
  return d;
}

}  // namespace neusight
