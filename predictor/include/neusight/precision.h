// precision.h - reduced-precision kernels (tensor-core GEMMs, half-precision streaming kernels)
// and the timing convention a NeuSight prediction follows.
//
// Takes: a Kernel, the Gpu (spec-sheet numbers only) and PrecisionOptions.
// Gives: the precision the kernel's math runs at (tensor cores, or FP32 SIMT where the GPU has
// no tensor cores for the dtype), the kernel the utilization MLPs see for it, and the
// per-kernel fixed cost of the chosen timing convention. The predictor applies these; no
// constant here is fitted to any GPU.
#pragma once

#include <memory>
#include <string>

#include "neusight/gpu.h"
#include "neusight/lowering.h"
#include "neusight/predictor.h"
#include "neusight/tiling.h"

namespace neusight {

// What a measured latency includes.
//   eager  - the NeuSight training data: PyTorch eager, CUDA events around one op launched
//            from Python, so a small kernel is bounded by the framework's per-op dispatch (the
//            MLPs' learned fixed cost, up to kMaxOverheadMs, neusight_model.h).
//   device - a model's kernels launched one by one from the host by a framework (the wall
//            clock of a PyTorch eager run; the CLI default). Each kernel is its kernel-timing
//            time (below), bounded by the host's dispatch of one op (kHostDispatchMs): a kernel
//            shorter than that leaves the GPU waiting for the next launch, so the stream
//            advances at most one kernel per dispatch. The two combine as the law combines
//            the dispatch, sqrt(dispatch^2 + kernel^2). Applied to every kernel, as if the host
//            never ran ahead: eager models synchronise often (boolean-mask indexing, .item(),
//            the loss), and the measured runs agree (bench/e2e_accuracy).
//   kernel - the GPU time of each kernel and nothing else: profiler kernel durations
//            (CUPTI, nsys, the PyTorch profiler's device times: Vidur), or CUDA graphs with no
//            host work between kernels (vLLM's decode steps; --generate's default). Each
//            kernel is the law without its dispatch and without its alpha / waves term (the
//            dispatch of few-wave kernels the fixed cost did not absorb), combined with
//            kDeviceKernelFloorMs as the law combines the dispatch (sqrt(floor^2 +
//            device^2)).
enum class Timing { eager, device, kernel };
const char* timing_name(Timing t);
// "eager" | "device" | "kernel"; false for anything else.
bool parse_timing(const std::string& s, Timing& out);

// Shortest duration of one kernel in kernel timing: launch to completion of a kernel that
// moves a few bytes (grid launch, one DRAM round trip, completion). A property of the CUDA
// execution model, the same on every NVIDIA GPU since Pascal; not fitted to any data set.
constexpr double kDeviceKernelFloorMs = 0.002;

// Host time of one kernel-launching op of a framework running eagerly (device timing): Python,
// the framework's dispatcher and the launch. Data, not a GPU property: the per-op timing floor
// of neusight-data's traced end-to-end runs (the median time of the traced PyTorch calls that
// launch no kernel; bench/e2e_accuracy prints it under "Measurement bound"), median per host
// 6.55 us (the A100's), 6.85 (MI100's), 10.66 (P4's), 10.96 (T4's), 11.26 (V100's), 12.58
// (P100's), and the median of the six hosts, 10.81 us. The fastest and the slowest host bound
// it in the 80% interval. Holds for PyTorch eager (Hugging Face models) on the x86 servers of
// those runs; a CUDA graph or a profiler's kernel durations have no such bound (kernel timing).
constexpr double kHostDispatchMs = 0.01081;
constexpr double kHostDispatchLowMs = 0.00655;
constexpr double kHostDispatchHighMs = 0.01258;

// Sustained rate of matrix units (tensor cores, AMD matrix cores) as a fraction of the
// spec-sheet dense peak, the same on every GPU. The dense peak assumes the boost clock and
// every matrix unit busy every cycle; a long GEMM on tensor cores runs below it (the clock
// drops under the power limit at full tensor load; operand staging, epilogues). The FP32
// training data cannot show this (SIMT FMA draws far less power per cycle), so it is learned
// from the training GPUs' tensor-core measurements: the fraction that makes the geometric mean
// of predicted / measured 1 over the compute-bound FP16 GEMMs of DeepBench (kernel timing) on
// V100 and T4, 24 rows pooled, with the shipped weights: 0.846 (each GPU alone: V100 0.95, T4
// 0.75, a 70 W card; bench/half_precision prints the refit and the leave-one-GPU-out table).
// One number for all GPUs: the spec sheets give no power limit or tensor-load clock, so the
// spread between GPUs stays unexplained. Not fitted to any GPU the tool is validated on (the
// A100 and newer are unseen).
constexpr double kMatrixSustainedFraction = 0.846;

// A weight-streaming GEMM (the GEMV and split-K kernels libraries run for a few rows: an LLM's
// decode projections) as a fraction of the spec-sheet DRAM bandwidth, and its fixed time (the
// split-K partials' reduction, a second launch, and the ramp of one pass over the weights):
//   time = max(bytes / (kWeightStreamDramFraction x bandwidth), FLOPs / math peak)
//          + kWeightStreamSetupUs.
// Fitted (least relative squares, bench/half_precision prints the refit) on the one-to-16-token
// FP16 projections of 8 LLMs at tensor parallelism 1-8 in Vidur's A100 SXM4 80GB profiles (580
// rows, 4-940 MB of weights; 4.2% MAPE there), and the fit on the first four models (by name)
// predicts the last four at 5.0%, and the reverse at 3.7%. Those rows are then the fit, not a
// validation. No GPU of
// the FP32 training data has such kernels (cuBLAS runs their skinny FP32 GEMMs as tiled sgemm),
// and DeepBench's 2017 FP16 GEMVs (V100, T4) run a slower library; the law assumes every
// GPU's library streams weights as the A100's does. Its two numbers are shared by all GPUs
// through their spec bandwidth: faster memory streams faster.
constexpr double kWeightStreamDramFraction = 0.78;
constexpr double kWeightStreamSetupUs = 4.6;
// The fixed time of a library GEMM kernel on matrix units (device and kernel timing): the
// pipeline's prologue, the epilogue's stores, launch to completion. The weight-streaming law's
// intercept is the same quantity measured (the part of a GEMM's time its bytes do not explain),
// and the tiled GEMMs of Vidur's A100 profiles agree: with it the ones measured under 10 us are
// predicted at 1.12x, 10-30 us at 0.97x, 30-100 us at 0.96x (bench/half_precision). Added to
// the tiles' time, in place of the device floor's root sum of squares (eager timing: on top of
// the dispatch); FlashAttention kernels and FP32 SIMT GEMMs (whose fixed cost the networks
// learned) keep the floor.
constexpr double kGemmKernelFixedUs = kWeightStreamSetupUs;
// The law above for a GEMM (its bytes and FLOPs) on `gpu`; `math_gflops` is the rate its math
// runs at (0: the stream alone); `setup_us` its intercept. Milliseconds; 0 without a bandwidth.
double weight_stream_ms(const Kernel& k, const Gpu& gpu, double math_gflops, double setup_us = kWeightStreamSetupUs);

struct PrecisionOptions {
  Timing timing = Timing::eager;
  // Per-kernel launch-to-completion floor (bench/half_precision prints its sensitivity).
  double device_floor_ms = kDeviceKernelFloorMs;
  // Device timing's host dispatch per kernel (kHostDispatchMs) and its 80% interval bounds.
  double host_dispatch_ms = kHostDispatchMs;
  double host_dispatch_low_ms = kHostDispatchLowMs, host_dispatch_high_ms = kHostDispatchHighMs;
  // Weight of the tensor-core operand-port term (gpu_as_run), on top of the sustained
  // fraction. Off by default: without the sustained fraction the training GPUs' DeepBench
  // FP16 GEMMs favoured 1 to 1.5 (device-timing MAPE V100+T4 29.4% -> 26.1% at 1) while the
  // same weight made the unseen A100's FP16 GEMMs 1.3x too slow; the port demand doubles from
  // V100 to A100 but the measured efficiency does not halve, so the term does not transfer
  // (bench/half_precision --port-weight W).
  double operand_port_weight = 0;
  // Sustained fraction of the matrix units' dense peak (kMatrixSustainedFraction above); a
  // bench sets another to refit it leaving one GPU out.
  double matrix_fraction = kMatrixSustainedFraction;
  // A single tensor-core GEMM priced on each tile the library offers (tiling.h
  // tile_alternatives), the least latency taken, as the libraries' heuristics pick the kernel
  // they expect fastest; off: the tile cost model's choice alone (bench/half_precision prints
  // both).
  bool fastest_tile = true;
  // A GEMM also priced on the tilings it gets on GPUs of its kind with fewer SMs (tiling.h
  // tilings_on_fewer_sms), each on the most SMs it is chosen on, the least latency taken, so
  // that more SMs never predict slower; off: the tiling given (and the tiles offered) alone,
  // for a bench that prices one tiling against another.
  bool fewer_sm_tilings = true;
};

// FP32 SIMT GEMMs: the rate the CUDA cores sustain, as a fraction of the spec-sheet FP32 peak.
// Two effects, both from spec-sheet architecture facts; the learned utilization sits on top.
//
// Issue: an SM partition issues one warp instruction per clock. With 16 FP32 lanes per
// partition (64 per SM: Pascal GP100, Volta, Turing, A100) an FFMA occupies its lanes for two
// clocks and the loads and address arithmetic of an SGEMM main loop issue in between; with 32
// lanes per partition (128 per SM: GA10x, Ada, Hopper, Blackwell) an FFMA issues every clock
// at peak, so every other instruction takes a slot from it. The main loop of a SIMT SGEMM
// with an 8x8 thread tile (CUTLASS's SIMT default, cuBLAS's sgemm_128x128x8) issues per k
// step 64 FFMA, 4 LDS.128 (8 A and 8 B operands) and about 1 instruction of global-to-shared
// staging and loop control: FFMA share 64 / 69. Applied to GPUs with more than 16 FP32 lanes
// per partition (NVIDIA, 4 partitions per SM).
constexpr double kSimtFfmaIssueShare = 64.0 / 69.0;
//
// Shared memory: the same main loop reads its A and B fragments from shared memory, 4 LDS.128
// (64 B) per thread per k step for 64 FFMA, and stages half an STS.128 (8 B) of the next tile:
// kSimtSmemBytesPerFfma per lane and FFMA. Shared memory delivers kSharedMemoryBytesPerClock
// (128 B) per SM per clock on every NVIDIA GPU since Volta. 64 lanes need 72 B per clock at the
// FP32 peak; 128 lanes need 144 B, so the FFMAs run at most at 128 / 144 = 0.89 of the peak
// there. Issue slots and the shared-memory port are separate resources: the scarcer one bounds
// the rate (NVIDIA only, as the issue share).
constexpr double kSimtSmemBytesPerFfma = (4 * 16.0 + 0.5 * 16.0) / 64.0;
//
// Power: a board that cannot feed all its FP32 lanes at the boost clock under dense FFMA
// lowers the clock. Dynamic power is energy per operation times the rate, so the input is the
// board's energy per FP32 lane-cycle at the boost clock, E = W / (lanes x boost clock), and
// the sustained fraction is taken as min(1, E / E_req): E_req is the energy per lane-cycle
// that holds the boost clock, scaled by the process node's energy per operation relative to
// 16 nm (process_energy_scale). E_req at 16/12 nm is data: the median achieved FP32 rate of
// the large (>= 20 GFLOP) BMMs of neusight-data (train and test rows) relative to the 250 W
// cards (P100, V100, A100: 0.68 train / 0.81 test of the spec peak) is 0.74 / 0.54 on the P4
// (75 W, 2560 lanes at 1.113 GHz: 26.3 pJ per lane-cycle) and 0.47 / 0.53 on the T4 (70 W,
// 2560 lanes at 1.59 GHz: 17.2 pJ): E_req 41 and 34 pJ, 37.5 pJ taken (the V100 PCIe, 35.6 pJ,
// then runs at 0.95). Valid for what the data spans: NVIDIA 16-12 nm boards at 17-51 pJ per
// lane-cycle; newer nodes through the published energy scaling. A GPU without board power or
// node runs unlimited.
constexpr double kSimtBoostJoulesPerLaneCycle16nm = 37.5e-12;
// Energy per operation of a process node relative to TSMC 16FF+ at the same speed, from the
// foundries' published iso-speed power reductions: 16FF+ -> 10FF 40% lower, 10FF -> N7 40%,
// N7 -> N5 30%, N5 -> N3 about 25%; TSMC 12FFN is a 16FF+ derivative; N6 is N7-class; 4N/4NP
// N5-class; Samsung 8N between 10 and 16 nm (0.6). 1 for nodes of 12 nm and above, or unknown.
double process_energy_scale(double process_nm);
// min(kSimtFfmaIssueShare, the shared-memory share) (where they apply) x the power-limited
// clock fraction (1 when the
// board power or node is unknown). In (0, 1]. Never depends on the FP32 peak itself, so a
// higher peak always predicts faster.
double simt_sustained_fraction(const Gpu& gpu);
// min(kSimtFfmaIssueShare, the shared-memory share) alone (NVIDIA; 1 elsewhere).
double simt_issue_fraction(const Gpu& gpu);
// An SM's FFMA rate per clock over that of the 64-lane SM the GEMM networks' utilization refers
// to (kFeatureLanesPerSm: the training GPUs but the P4): lanes x simt_issue_fraction / 64
// (1.78 on Hopper, Ada, Blackwell, GA10x and the P4; 1 on 64-lane SMs). The law charges a SIMT
// GEMM's time above its roofline on the math time it would take at 64 lanes, since those
// cycles (pipeline prologue, epilogue, unhidden latencies) do not shrink with more lanes
// (TileFeatures::lane_excess_ms). 1 when the lanes are unknown.
double simt_lane_ratio(const Gpu& gpu);
// The power-limited clock fraction alone (1 when unknown or not limited).
double power_clock_fraction(const Gpu& gpu);

// Peak rate (GFLOP/s) of a GEMM's math: the dtype's dense tensor-core peak where the GPU has
// one; without tensor cores for a 16- or 8-bit float dtype, the FP32 SIMT rate, because
// cuBLAS / PyTorch accumulate half-precision products in FP32 (DeepBench's P100 FP16 GEMMs
// take as long as its FP32 ones). Other kernels: Gpu::gemm_peak_gflops / peak_gflops.
double math_peak_gflops(const Kernel& k, const Gpu& gpu);

// The kernel whose features the utilization MLPs see. Identical to `k` except for a
// half-precision GEMM on a GPU without tensor cores for its dtype: then a GEMM with the same
// shape and bytes whose math runs at the FP32 rate (dtype f32), as it does on such a GPU;
// and an FP8 GEMM on a GPU with FP16 but no FP8 tensor cores: the same GEMM in f16.
Kernel kernel_as_run(const Kernel& k, const Gpu& gpu);

// The precision and unit a kernel's math runs in on this GPU, for reports: "<dtype>-tensor"
// for a GEMM on tensor cores ("<dtype>-matrix" on AMD matrix cores), the dtype of
// kernel_as_run (a 4-bit weight-only GEMM: "fp16-tensor"); "<dtype>-simt" for a GEMM on
// CUDA cores / SIMD units ("fp32-simt" for a half-precision GEMM on a GPU without tensor
// cores for its dtype, which accumulates in FP32); streaming kernels (elementwise, softmax,
// norms, reductions) compute in FP32 on CUDA cores whatever their storage dtype ("fp32-simt";
// "fp64-simt" for double, "int-simt" for integer and boolean data); kernels that only move
// bytes (memory, collectives): "none". A 2:4-pruned GEMM on sparse matrix units
// (runs_sparse_2_4) adds "-2:4" ("bf16-tensor-2:4").
std::string math_precision(const Kernel& k, const Gpu& gpu);

// 2:4 structured sparsity (lowering.h SparsityOptions, Kernel::sparse_2_4).
// Whether the GPU has sparse matrix units for `dtype`: NVIDIA's sparse tensor cores from
// Ampere on (compute capability 8.0 and newer: TF32, FP16, BF16, INT8, and FP8 / FP4 where the
// GPU has those units; the A100, H100 and B200 datasheets list each sparse peak at twice the
// dense one) and AMD CDNA 3 and 4's sparse MFMA (gfx942, gfx950: FP16, BF16, FP8, INT8);
// none on Volta, Turing or CDNA 1 and 2.
bool has_sparse_matrix_units(const Gpu& gpu, DType dtype);
// A 2:4-pruned GEMM whose math (kernel_as_run) has sparse matrix units on this GPU.
bool runs_sparse_2_4(const Kernel& k, const Gpu& gpu);
// Such a GEMM as it runs there: its weight (B, k x n) read compressed
// (lowering.h sparse_2_4_bytes_per_element).
Kernel sparse_2_4_as_run(const Kernel& k);
// The GPU as a sparse GEMM sees it: each matrix peak with sparse units doubled, and the
// units' math per lane-clock with it (the zeros skipped, twice the useful work a clock); the
// rest as it is.
Gpu sparse_2_4_gpu(const Gpu& gpu);

// Operand delivery of tensor-core GEMMs. Per k step a warp tile (wm x wn) reads (wm + wn)
// operand elements from shared memory for 2 wm wn FLOPs, through a port of
// kSharedMemoryBytesPerClock per SM (32 banks x 4 B on every NVIDIA GPU since Kepler; AMD's
// LDS alike). The fraction of that port the tensor cores need at their dense peak is
//   d = (peak / (SMs x clock)) x (wm + wn) x element_bytes / (2 wm wn x 128)
// (V100, T4: 0.25 with 64x64 warp tiles; A100: 0.5; H100 about 0.6). A 2:4 sparse GEMM
// (runs_sparse_2_4, on sparse_2_4_gpu's doubled peak) reads a clock's share of its weight
// compressed, as many bytes as a dense clock's, and twice the activation's: (2 wm + wn) in
// place of 2 (wm + wn), the weight on the n side.
constexpr double kSharedMemoryBytesPerClock = 128;
// d of a GEMM kernel with its tiling on a GPU; 0 for kernels not on matrix units.
double operand_port_demand(const Kernel& k, const Tiling& t, const Gpu& gpu);

// Whether a kernel is a GEMM whose math runs on matrix units: tiled for tensor cores, on a
// GPU with matrix units for its dtype.
bool on_matrix_units(const Kernel& k, const Tiling& t, const Gpu& gpu);

// The fraction of its matrix peak a GEMM sustains on this GPU: kMatrixSustainedFraction for a
// GEMM whose math runs on matrix units (tensor-core tiling, units for its dtype), applied to
// the math rate only (a memory-bound GEMM's time is its memory time). Other kernels: 1.
double matrix_sustained_fraction(const Kernel& k, const Tiling& t, const Gpu& gpu,
                                 double fraction = kMatrixSustainedFraction);

// The GPU as the MLPs see the kernel: a GEMM on matrix units sees its dtype's matrix peak
// times matrix_sustained_fraction; with port_weight w > 0, further lowered by the factor
// 1 / (1 + w d b), b as above (a memory-bound GEMM leaves the port idle while it waits for
// DRAM); w = 1 means the operand
// traffic never overlaps the math. Other kernels: `gpu`. The predictor's roofline_ms stays
// at the dense peak, so a compute-bound tensor-core GEMM's reported utilization is at most
// kMatrixSustainedFraction.
Gpu gpu_as_run(const Kernel& k, const Tiling& t, const Gpu& gpu, double port_weight,
               double matrix_fraction = kMatrixSustainedFraction);

// Latency-limited streaming kernels: a kernel whose code is described by Kernel::access
// (threads that load a few bytes, then wait for them: one block per row, scalar loads in a loop
// over the row, as vLLM's rms_norm and silu_and_mul kernels do) is limited by memory-level
// parallelism, not by bandwidth. By Little's law its bandwidth is the bytes in flight (SMs x
// resident threads x bytes a thread has outstanding) over the memory latency; in waves:
//   resident blocks = SMs x min(max_blocks_per_sm, max_threads_per_sm / block_threads),
//   waves = ceil(rows / resident blocks),
//   round trips per thread = ceil(row bytes read / (block_threads x bytes_per_load x loads_in_flight)),
//   time = waves x round trips x latency + bytes / bandwidth.
// The last term is the queueing a loaded memory system adds: with a loaded latency
// L0 / (1 - u), u the fraction of the bandwidth in use, a wave moving W bytes in time t has
// t = trips x L0 / (1 - W / (t bw)), i.e. t = trips x L0 + W / bw. A vectorized kernel with
// many bytes in flight per thread reduces to its roofline; the product's own kernels carry no
// description and keep the NeuSight law.
//
// Unloaded global-memory load latency in SM clock cycles, the same on every GPU (times the
// GPU's boost clock): pointer-chase microbenchmarks put a DRAM load that hits the TLB at about
// 470 cycles on recent NVIDIA GPUs - Luo et al., "Benchmarking and Dissecting the Nvidia Hopper
// GPU Architecture", IPDPS 2024 (arXiv:2402.13499): A100 466, H800 478 cycles; the same
// order as Jia et al.'s Volta and Turing measurements (arXiv:1804.06826, arXiv:1903.07486).
// Not fitted to any data set (the training data's eager dispatch, 40-55 us, hides sub-
// microsecond latencies: bench/half_precision/README.md). A100 SXM4: 470 / 1410 MHz = 333 ns.
constexpr double kGlobalMemoryLatencyCycles = 470;
// Two-pass row kernels (vLLM rms_norm: sum of squares, block reduction, then a second pass
// that re-reads the row, reads the weight and stores) add, per wave, the dependent steps of
// their code after the first pass:
//   + block_reductions x kBlockReductionCycles
//   + second-pass iterations (ceil(row elements / block threads)) x cache hit latency
// (the weight load is issued with the re-read, so one round trip per iteration; stores do not
// wait, their bytes are in bytes / bandwidth). Latencies in SM cycles at the boost clock, from
// pointer-chase microbenchmarks (recalled, not re-read: no network here): Luo et al., IPDPS
// 2024 (arXiv:2402.13499), A100: L1 hit about 33, shared memory about 29, L2 hit about 261
// cycles (Jia et al., arXiv:1804.06826 / 1903.07486: Volta L1 28, shared 19, L2 193; Turing
// L1 32, shared 22, L2 188); dependent FP32 add 4 cycles (Jia et al., Volta and Turing).
constexpr double kL1HitLatencyCycles = 33;
constexpr double kL2HitLatencyCycles = 261;
constexpr double kSharedMemoryLatencyCycles = 29;
constexpr double kFp32AddLatencyCycles = 4;
// vLLM's blockReduceSum (csrc/reduction_utils.cuh) and rms_norm's broadcast of the inverse
// RMS: two warp reductions of 5 butterfly steps each (__shfl_xor_sync then an add; a shuffle
// crosses the shared-memory crossbar, so it is given the shared-memory latency), and two
// exchanges through shared memory across __syncthreads (the warp sums, then s_variance: a
// store, the barrier, a load). 2 x 5 x (29 + 4) + 2 x 2 x 29 = 446 cycles. The rsqrtf and the
// barrier's own cost are left out (a few tens of cycles, no cited figure).
constexpr double kBlockReductionCycles =
    2 * 5 * (kSharedMemoryLatencyCycles + kFp32AddLatencyCycles) + 2 * 2 * kSharedMemoryLatencyCycles;
// kGlobalMemoryLatencyCycles at the GPU's boost clock (ms); 0 when the clock is unknown.
double global_memory_latency_ms(const Gpu& gpu);
// Device time (ms, without the per-kernel floor) of a kernel described by Kernel::access, as
// above; a negative value when the kernel carries no description (access.bytes_per_load or
// access.block_threads is 0) or the GPU lacks the numbers.
double memory_parallelism_ms(const Kernel& k, const Gpu& gpu);

// The NeuSight predictor with a timing convention (make_neusight_predictor(dir) is eager).
std::unique_ptr<Predictor> make_neusight_predictor(const std::string& weights_dir, const PrecisionOptions& options);

// The predictors: NeuSight (weights from a directory, "" = the shipped ones), the published
// NeuSight formulation (neusight_model.h; "" = the shipped weights/paper) and the roofline.
enum class PredictorKind { neusight, neusight_paper, roofline };
// The user-facing name: "neusight", "neusight-paper", "roofline".
const char* predictor_kind_name(PredictorKind k);
// Parses a user-facing name; false (out untouched) for any other.
bool parse_predictor_kind(const std::string& name, PredictorKind& out);

std::unique_ptr<Predictor> make_predictor(PredictorKind kind, const std::string& weights_dir,
                                          const PrecisionOptions& options);
// The same by name. Throws InputError naming the choices for any other name.
std::unique_ptr<Predictor> make_predictor(const std::string& name, const std::string& weights_dir,
                                          const PrecisionOptions& options);
// True for the names make_predictor accepts.
bool is_predictor_name(const std::string& name);

}  // namespace neusight
