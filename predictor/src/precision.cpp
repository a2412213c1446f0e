// precision.cpp - where a kernel's math runs (tensor cores or FP32 SIMT) and the timing convention.
#include "neusight/precision.h"
#include "neusight/neusight_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace neusight {

const char* timing_name(Timing t) {
  switch (t) {
    case Timing::device: return "device";
    case Timing::kernel: return "kernel";
    default: return "eager";
  }
}

bool parse_timing(const std::string& s, Timing& out) {
  if (s == "eager") out = Timing::eager;
  else if (s == "device") out = Timing::device;
  else if (s == "kernel") out = Timing::kernel;
  else return false;
  return true;
}

namespace {

// Weight-only quantized GEMMs (MatMulNBits, QMoE; int4 weights) carry the weights' dtype; their
// math runs in the activations' half precision after dequantization.
bool weight_only(const Kernel& k) { return k.weight_only || k.dtype == DType::u4 || k.dtype == DType::i4; }

// The matrix units an FP8 or FP4 GEMM runs on where the GPU has none for its dtype: FP4 on
// FP8 ones where the GPU has those, either on FP16 ones (the library upcasts, same bytes);
// undefined when it has neither.
DType narrow_float_upcast(DType t, const Gpu& gpu) {
  if (is_fp4(t) && has_matrix_units(gpu, DType::f8e4m3fn)) return DType::f8e4m3fn;
  if ((is_fp8(t) || is_fp4(t)) && gpu.fp16_gflops > 0) return DType::f16;
  return DType::undefined;
}

}  // namespace

double math_peak_gflops(const Kernel& k, const Gpu& gpu) {
  if (k.cls != KernelClass::gemm) return gpu.peak_gflops(k.dtype);
  if (weight_only(k)) return gpu.fp16_gflops > 0 ? gpu.fp16_gflops : gpu.fp32_gflops;
  const bool reduced = k.dtype == DType::f16 || k.dtype == DType::bf16 || is_fp8(k.dtype) || is_fp4(k.dtype);
  if (reduced && !has_matrix_units(gpu, k.dtype)) {
    if (const DType up = narrow_float_upcast(k.dtype, gpu); up != DType::undefined) return gpu.gemm_peak_gflops(up);
    return gpu.gemm_peak_gflops(DType::f32);
  }
  return gpu.gemm_peak_gflops(k.dtype);
}

Kernel kernel_as_run(const Kernel& k, const Gpu& gpu) {
  if (k.cls != KernelClass::gemm) return k;
  if (weight_only(k)) {  // same shape and bytes, the math in half precision (FP32 without FP16 units)
    Kernel r = k;
    r.dtype = gpu.fp16_gflops > 0 ? DType::f16 : DType::f32;
    r.weight_only = false;
    return r;
  }
  if (const DType up = narrow_float_upcast(k.dtype, gpu);
      up != DType::undefined && !has_matrix_units(gpu, k.dtype) && gpu.fp16_gflops > 0) {
    Kernel r = k;  // FP4 on FP8 tensor cores, or FP8 / FP4 on FP16 ones; same bytes
    r.dtype = up;
    return r;
  }
  const double peak = math_peak_gflops(k, gpu);
  if (peak == gpu.gemm_peak_gflops(k.dtype)) return k;
  Kernel r = k;  // same shape and bytes; the dtype whose peak the math runs at
  r.dtype = peak == gpu.fp16_gflops ? DType::f16 : DType::f32;
  return r;
}

std::string math_precision(const Kernel& k, const Gpu& gpu) {
  auto is_float = [](DType t) {
    return t == DType::f32 || t == DType::tf32 || t == DType::f16 || t == DType::bf16 || t == DType::f64 ||
           t == DType::undefined || is_fp8(t) || is_fp4(t);
  };
  switch (k.cls) {
    case KernelClass::memory:
    case KernelClass::collective: return "none";
    case KernelClass::gemm: {
      const Kernel run = kernel_as_run(k, gpu);
      const DType t = run.dtype == DType::undefined ? DType::f32 : run.dtype;
      if (has_matrix_units(gpu, run.dtype))
        return std::string(dtype_name(t)) + (gpu.vendor == "amd" ? "-matrix" : "-tensor") +
               (runs_sparse_2_4(k, gpu) ? "-2:4" : "");
      // FP64: DMMA tensor cores (A100, H100) and CDNA's FP64 MFMA where they beat the vector rate.
      if (t == DType::f64)
        return gpu.gemm_peak_gflops(t) > gpu.peak_gflops(t) ? (gpu.vendor == "amd" ? "fp64-matrix" : "fp64-tensor")
                                                             : "fp64-simt";
      return is_float(t) ? "fp32-simt" : std::string(dtype_name(t)) + "-simt";
    }
    default:
      if (k.dtype == DType::f64) return "fp64-simt";
      return is_float(k.dtype) ? "fp32-simt" : "int-simt";
  }
}

double operand_port_demand(const Kernel& k, const Tiling& t, const Gpu& gpu) {
  if (!on_matrix_units(k, t, gpu)) return 0;
  const double wm = double(t.config.warp_m), wn = double(t.config.warp_n);
  if (wm <= 0 || wn <= 0 || gpu.num_sm <= 0 || gpu.boost_mhz <= 0) return 0;
  const double flops_per_clock = gpu.gemm_peak_gflops(k.dtype) * 1e3 / (double(gpu.num_sm) * gpu.boost_mhz);
  const double eb = element_bytes(k.dtype);
  const double operands = runs_sparse_2_4(k, gpu) ? wm + wn / 2 : wm + wn;
  return flops_per_clock * operands * eb / (2 * wm * wn * kSharedMemoryBytesPerClock);
}

bool has_sparse_matrix_units(const Gpu& gpu, DType dtype) {
  if (!has_matrix_units(gpu, dtype)) return false;
  const bool half = dtype == DType::f16 || dtype == DType::bf16;
  const bool byte = dtype == DType::i8 || dtype == DType::u8 || is_fp8(dtype);
  if (gpu.vendor == "amd") return (gpu.arch == "gfx942" || gpu.arch == "gfx950") && (half || byte);
  if (gpu.arch.rfind("sm_", 0) != 0 || std::atoi(gpu.arch.c_str() + 3) < 80) return false;
  return half || byte || dtype == DType::tf32 || dtype == DType::f4e2m1;
}

bool runs_sparse_2_4(const Kernel& k, const Gpu& gpu) {
  return k.sparse_2_4 && k.cls == KernelClass::gemm && has_sparse_matrix_units(gpu, kernel_as_run(k, gpu).dtype);
}

Kernel sparse_2_4_as_run(const Kernel& k) {
  Kernel r = k;
  const double eb = narrow_weight_gemms(k.dtype) ? narrow_operand_bytes(k.dtype) : element_bytes(k.dtype);
  const double weight = double(k.gemm.k) * double(k.gemm.n);
  r.bytes = std::max(k.bytes - weight * (eb - sparse_2_4_bytes_per_element(eb)), 0.5 * k.bytes);
  return r;
}

Gpu sparse_2_4_gpu(const Gpu& gpu) {
  Gpu g = gpu;
  const std::pair<double Gpu::*, DType> peaks[] = {{&Gpu::tf32_gflops, DType::tf32}, {&Gpu::fp16_gflops, DType::f16},
                                                   {&Gpu::bf16_gflops, DType::bf16}, {&Gpu::fp8_gflops, DType::f8e4m3fn},
                                                   {&Gpu::int8_gops, DType::i8},     {&Gpu::fp4_gflops, DType::f4e2m1}};
  for (const auto& [peak, t] : peaks) {
    if (!has_sparse_matrix_units(gpu, t)) continue;
    g.set_matrix_lanes(t, gpu.matrix_lanes(t) * 2);
    g.*peak *= 2;
  }
  return g;
}

namespace {

// How close a kernel is to compute bound: its plain roofline's compute time over its memory
// time (unpadded FLOPs at the dtype's peak, compulsory bytes at the DRAM bandwidth), at most 1.
double compute_busy(const Kernel& k, const Gpu& gpu) {
  const double peak = gpu.gemm_peak_gflops(k.dtype);
  if (k.bytes <= 0 || gpu.mem_bw_gbps <= 0) return 1.0;
  if (peak <= 0) return 0.0;
  return std::min(1.0, (k.flops / peak) / (k.bytes / gpu.mem_bw_gbps));
}

}  // namespace

bool on_matrix_units(const Kernel& k, const Tiling& t, const Gpu& gpu) {
  return k.cls == KernelClass::gemm && t.config.tensor_core && has_matrix_units(gpu, k.dtype);
}

double matrix_sustained_fraction(const Kernel& k, const Tiling& t, const Gpu& gpu, double fraction) {
  if (!on_matrix_units(k, t, gpu)) return 1.0;
  // The fraction lowers the rate of the math only; a GEMM that waits on DRAM is bound by its
  // memory time whatever the math rate, and a faster memory never lowers the math rate.
  return fraction;
}

Gpu gpu_as_run(const Kernel& k, const Tiling& t, const Gpu& gpu, double port_weight, double matrix_fraction) {
  double f = matrix_sustained_fraction(k, t, gpu, matrix_fraction);
  const double d = operand_port_demand(k, t, gpu);
  if (port_weight > 0 && d > 0) {
    // The port is busy only while the math runs at its rate.
    f /= 1.0 + port_weight * d * compute_busy(k, gpu);
  }
  if (f == 1.0) return gpu;
  Gpu g = gpu;
  // The units as run: their math per lane-clock at the sustained fraction too.
  g.set_matrix_lanes(k.dtype, gpu.matrix_lanes(k.dtype) * f);
  switch (k.dtype) {
    case DType::tf32: g.tf32_gflops *= f; break;
    case DType::f16: g.fp16_gflops *= f; break;
    case DType::bf16: g.bf16_gflops *= f; break;
    case DType::i8: case DType::u8: g.int8_gops *= f; break;
    case DType::f32: case DType::undefined: g.fp32_matrix_gflops *= f; break;
    case DType::f4e2m1: g.fp4_gflops *= f; break;
    default: if (is_fp8(k.dtype)) g.fp8_gflops *= f; break;
  }
  return g;
}

double process_energy_scale(double nm) {
  if (!(nm > 0) || nm >= 12) return 1.0;
  if (nm >= 8) return 0.6;   // Samsung 8N, TSMC 10FF
  if (nm >= 6) return 0.36;  // TSMC N7, N6
  if (nm >= 4) return 0.25;  // TSMC N5, 4N, 4NP
  return 0.19;               // N3
}

double power_clock_fraction(const Gpu& gpu) {
  const double lane_cycles_per_s = double(gpu.num_sm) * double(gpu.fp32_cores_per_sm) * gpu.boost_mhz * 1e6;
  if (!(gpu.board_power_w > 0) || !(gpu.process_nm > 0) || !(lane_cycles_per_s > 0)) return 1.0;
  const double need = kSimtBoostJoulesPerLaneCycle16nm * process_energy_scale(gpu.process_nm);
  return std::min(1.0, gpu.board_power_w / lane_cycles_per_s / need);
}

double simt_issue_fraction(const Gpu& gpu) {
  if (gpu.vendor != "nvidia") return 1.0;
  const bool issue_bound = gpu.fp32_cores_per_sm > 64;
  const double smem = gpu.fp32_cores_per_sm > 0
                          ? kSharedMemoryBytesPerClock / (double(gpu.fp32_cores_per_sm) * kSimtSmemBytesPerFfma)
                          : 1.0;
  return std::min({1.0, issue_bound ? kSimtFfmaIssueShare : 1.0, smem});
}

double simt_sustained_fraction(const Gpu& gpu) { return simt_issue_fraction(gpu) * power_clock_fraction(gpu); }

double simt_lane_ratio(const Gpu& gpu) {
  if (!(gpu.fp32_cores_per_sm > 0)) return 1.0;
  return double(gpu.fp32_cores_per_sm) * simt_issue_fraction(gpu) / double(kFeatureLanesPerSm);
}

double global_memory_latency_ms(const Gpu& gpu) {
  return gpu.boost_mhz > 0 ? kGlobalMemoryLatencyCycles / (gpu.boost_mhz * 1e3) : 0.0;
}

double memory_parallelism_ms(const Kernel& k, const Gpu& gpu) {
  const ThreadAccess& a = k.access;
  if (a.bytes_per_load <= 0 || a.block_threads <= 0 || k.rows <= 0 || k.cols <= 0) return -1;
  const double latency = global_memory_latency_ms(gpu);
  if (!(latency > 0) || gpu.num_sm <= 0 || gpu.mem_bw_gbps <= 0) return -1;
  // Occupancy: whole blocks per SM within the thread, block and (when the description gives
  // them) register limits; at least one.
  int per_sm = std::min(gpu.max_blocks_per_sm, gpu.max_threads_per_sm / a.block_threads);
  if (a.regs_per_thread > 0 && gpu.regs_per_sm > 0)
    per_sm = std::min(per_sm, gpu.regs_per_sm / (a.regs_per_thread * a.block_threads));
  per_sm = std::max(1, per_sm);
  const double resident = double(gpu.num_sm) * per_sm;
  const double waves = std::ceil(double(k.rows) / resident);
  const double elem_bytes = std::max(1.0, element_bytes(k.dtype));
  const double row_read = double(k.cols) * std::max(1, a.row_tensors > 0 ? a.row_tensors : k.inputs) * elem_bytes;
  const double per_trip = double(a.block_threads) * a.bytes_per_load * std::max(1, a.loads_in_flight);
  const double trips = std::ceil(row_read / per_trip);
  // Steps after the first pass (two-pass row kernels): block reductions, then a second pass
  // whose round trips hit cache (one per iteration: the weight load goes with the re-read).
  const double cycle_ms = 1.0 / (gpu.boost_mhz * 1e3);
  // A per-column operand (the weight) is not yet in an SM's L1 during the first wave: that
  // wave's iterations wait on L2 even when the row re-read hits L1.
  const double reduce_ms = std::max(0, a.block_reductions) * kBlockReductionCycles * cycle_ms;
  double pass_ms = 0, first_pass_ms = 0;
  if (a.cached_pass_level > 0) {
    const double hit = a.cached_pass_level == 1 ? kL1HitLatencyCycles : kL2HitLatencyCycles;
    const double first_hit = a.cached_pass_weight ? std::max(hit, kL2HitLatencyCycles) : hit;
    const double iterations = std::ceil(double(k.cols) * elem_bytes / (double(a.block_threads) * a.bytes_per_load));
    pass_ms = iterations * hit * cycle_ms;
    first_pass_ms = iterations * first_hit * cycle_ms;
  }
  return waves * ((trips + std::max(0, a.index_loads)) * latency + reduce_ms + pass_ms) + (first_pass_ms - pass_ms) +
         k.bytes / (gpu.mem_bw_gbps * 1e6);
}

double weight_stream_ms(const Kernel& k, const Gpu& gpu, double math_gflops, double setup_us) {
  if (!(gpu.mem_bw_gbps > 0)) return 0;
  const double stream = k.bytes / (kWeightStreamDramFraction * gpu.mem_bw_gbps * 1e6);
  const double math = math_gflops > 0 ? k.flops / (math_gflops * 1e6) : 0;
  return std::max(stream, math) + setup_us * 1e-3;
}

}  // namespace neusight
