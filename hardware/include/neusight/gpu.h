// gpu.h - the hardware stage: the GPU database, spec-sheet numbers only, loaded from data files.
//
// Takes: hardware/data/gpus.json (built in) or a user's device JSON in the
// neusight-data/device_configs format (Device, Dev_Mem, Mem_Bw, Num_Sm, Core_Per_SM, Freq,
// SingleFLOPs, L2Cache).
// Gives: Gpu records, looked up by name or alias (case-insensitive), and the directory of the
// project's data files (data_dir), which the later stages read their tables from.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "neusight/graph.h"

namespace neusight {

// FP32 lanes of one SIMD unit of an AMD GCN / CDNA compute unit (a wave64 instruction runs
// over four cycles on it). Device JSONs in the dataset's AMD form count SIMD units in
// Core_Per_SM; their lanes follow from the vector peak (load_device_json).
constexpr int kAmdSimdLanes = 16;

struct Gpu {
  std::string name;                  // canonical name, e.g. "NVIDIA B200"
  std::vector<std::string> aliases;  // short alias first ("b200"), then exact Device names
  std::string vendor = "nvidia";     // "nvidia" | "amd"
  std::string arch;                  // "sm_60" ... "sm_100", "sm_120", "gfx908" (CDNA) ...
  int num_sm = 0;                    // SMs (NVIDIA) or compute units (AMD)
  double boost_mhz = 0;
  int fp32_cores_per_sm = 0;         // FP32 lanes per SM (per CU on AMD: 4 SIMDs x 16 = 64)
  double fp32_gflops = 0;            // FP32 non-tensor peak
  // Dense tensor-core (matrix-core) peaks in GFLOP/s; 0 = not supported.
  double tf32_gflops = 0, fp16_gflops = 0, bf16_gflops = 0, fp8_gflops = 0, int8_gops = 0;
  double fp4_gflops = 0;             // FP4 (NVFP4 / MXFP4) tensor cores, Blackwell; 0 = none
  double fp16_simt_gflops = 0;       // non-tensor FP16 (0: same as fp32)
  double fp32_matrix_gflops = 0;     // FP32 on matrix cores (AMD CDNA); 0 = none
  double mem_gb = 0;
  double mem_bw_gbps = 0;
  double l2_mb = 0;
  double smem_per_sm_kb = 0;
  // L1 data cache per SM (CU) that holds global loads where it is a separate array from shared
  // memory (KB; Pascal GP100 24, GP104 48; AMD CDNA's vector L1 16-32 beside its LDS). 0 where
  // L1 and shared memory are one array (Volta and newer): smem_per_sm_kb bounds both.
  double l1_kb = 0;
  // Power: the board power limit (TDP, W; one GCD's share on multi-die AMD parts) and the
  // process node's marketing name in nm (16 for TSMC 16FF+, 12 for 12FFN, 8 for Samsung 8N,
  // 4 for TSMC 4N/4NP). 0 = unknown; then no power limit is assumed (precision.h).
  double board_power_w = 0;
  double process_nm = 0;
  int regs_per_sm = 65536;
  int max_blocks_per_sm = 32;
  int max_threads_per_sm = 2048;
  // Interconnect.
  std::string nvlink;                // "" none, "nvlink3", ...
  double nvlink_gbps = 0;            // per-GPU unidirectional bandwidth, GB/s
  // GPUs one NVLink / Infinity Fabric domain joins: 2 for PCIe cards paired by a bridge,
  // 4 or 8 for the boards' fabrics (HGX NVSwitch, DGX-1 mesh, AMD OAM platforms), 72 for an
  // NVL72 rack. 0: not stated (the link is taken to join any number).
  int nvlink_domain = 0;
  double pcie_gbps = 0;              // per-direction PCIe bandwidth, GB/s
  std::string source;                // where the numbers come from
  // The neusight-data device config's SM count, FP32 peak and DRAM bandwidth where they differ
  // from the spec sheet's (the L4's gives the full AD104 die, 60 SMs and 31.3 TFLOPS, where the
  // card enables 58: 7,424 lanes, 30.3 TFLOPS; the H100 SXM5's 3,430 GB/s where its datasheet
  // gives 3.35 TB/s); 0 where it agrees. A device JSON field equal to one of these reads as the
  // entry's (load_device_json), so the dataset's file and a what-if edited from it in another
  // field stand on the spec sheet's numbers.
  int dataset_num_sm = 0;
  double dataset_fp32_gflops = 0;
  double dataset_mem_bw_gbps = 0;

  // Peak rate for a compute precision on the matrix units (falls back to FP32 SIMT; FP64: the
  // vector units' FP64 rate, the architecture's share of the FP32 one).
  double peak_gflops(DType compute) const;
  // Peak rate of matrix products: as peak_gflops, except that FP32 GEMMs run on FP32 matrix
  // units where the GPU has them (AMD CDNA's MFMA) and FP64 ones on FP64 matrix units (A100's
  // and H100's DMMA, CDNA 2 and 3's FP64 MFMA); vector kernels never do.
  double gemm_peak_gflops(DType compute) const;
  // The matrix units' math per FP32 lane-clock for each dtype they run: their dense peak over
  // the lanes' FP32 rate at the boost clock (SMs x lanes x 2 x clock) to the nearest power of
  // two (16 for FP16 on the A100 and H100, 2 for FP32 on the MI100's MFMA; gpu.cpp says why),
  // the width of the units as the GPU was listed or loaded
  // (freeze_matrix_widths). A what-if that edits a peak afterwards (the same units at a faster
  // clock) leaves it: the tile a GEMM gets and the clocks its math takes stay, and its time
  // falls with the peak. Entries of 0 (a Gpu never frozen) are computed from the peaks.
  std::array<double, 7> matrix_width{};
  double matrix_lanes(DType compute) const;
  void set_matrix_lanes(DType compute, double lanes);  // no effect for a dtype without a slot
  const std::string& alias() const { return aliases.empty() ? name : aliases.front(); }
};

// True when the GPU has matrix units (tensor cores / AMD matrix cores) for `dtype`: its dense
// peak for the dtype is listed (int4 weights: the FP16 units they are dequantized for; FP32:
// FP32 matrix cores, where listed: CDNA's FP32 MFMA, which rocBLAS runs FP32 GEMMs on, also
// where the vector peak counts dual issue and equals it, as the MI300X's does). NVIDIA GPUs before Volta (sm_70) have none: the P4's
// INT8 rate is DP4A, a SIMT instruction.
bool has_matrix_units(const Gpu& gpu, DType dtype);

// Every FLOP rate of a GPU (its CUDA cores' and its matrix units'), for what scales them together.
inline constexpr double Gpu::*kFlopRates[] = {&Gpu::fp32_gflops, &Gpu::tf32_gflops,      &Gpu::fp16_gflops,
                                              &Gpu::bf16_gflops, &Gpu::fp8_gflops,       &Gpu::fp4_gflops,
                                              &Gpu::int8_gops,   &Gpu::fp16_simt_gflops, &Gpu::fp32_matrix_gflops};

// `gpu` with `sms` SMs of its own: every FLOP rate, the DRAM bandwidth and the board power
// scaled by sms / num_sm (the per-SM rates, each SM's power and its share of the bandwidth
// stay), the L2, the memory and everything per SM as they are.
Gpu gpu_with_sms(const Gpu& gpu, int sms);
// The same in place: `g` (a copy of `of`) given `sms` SMs of `of`'s, without copying the rest.
void set_sms(Gpu& g, const Gpu& of, int sms);

// Sets gpu.matrix_width from its peaks, lanes, SMs and clock (done by every loader).
void freeze_matrix_widths(Gpu& gpu);

class GpuDatabase {
 public:
  // Loads the built-in database (the data file next to the binary, in the build tree or
  // the install tree; NEUSIGHT_DATA_DIR overrides). Throws RuntimeError naming the file.
  static const GpuDatabase& builtin();
  // Loads a database file. Throws InputError for malformed or incomplete entries.
  static GpuDatabase load(const std::string& path);

  const std::vector<Gpu>& all() const { return gpus_; }
  // Name, alias (case-insensitive) or path to a device JSON. Throws InputError listing the
  // closest names when nothing matches.
  Gpu resolve(const std::string& name_or_path) const;
  // A comma-separated list of resolve()'s names in its order; `all` (any case) stands for every
  // GPU of the database in the database's order. Throws InputError naming `what` for an empty
  // item, and resolve()'s errors.
  std::vector<Gpu> resolve_list(const std::string& list, const std::string& what = "--gpu") const;
  // Whether a resolve_list() list names `all`.
  static bool names_all(const std::string& list);
  const Gpu* find(const std::string& name) const;  // nullptr when unknown

 private:
  std::vector<Gpu> gpus_;
};

// Reads a GPU from a JSON file: a device JSON in the neusight-data/device_configs format, or one
// entry in the database format (with "name", as `gpus --json` prints it), which also gives the
// matrix units' peaks and the architecture. A device JSON's Core_Per_SM is FP32 lanes per SM;
// the AMD form (SingleFLOPsVEC) counts SIMD units there, so its lanes per CU follow from the
// vector peak over CUs x clock, in whole SIMDs of kAmdSimdLanes. A device JSON naming a database
// GPU takes the entry's architecture numbers, and its SM split where the JSON gives the same
// lanes split another way, and its SMs, FP32 peak or bandwidth where the JSON gives the dataset's
// number for it (Gpu::dataset_num_sm and the two after it). Throws InputError.
Gpu load_device_json(const std::string& path);

// Reads one GPU from JSON text: a device JSON (with "Device", as above) or an entry in the
// database format (with "name", as format_gpus_json writes it). `what` names the source in
// errors. Throws InputError.
Gpu parse_gpu_json(const std::string& text, const std::string& what);

// Every GPU of `db` as a JSON array of entries in the format of hardware/data/gpus.json.
std::string format_gpus_json(const GpuDatabase& db);
std::string format_gpus_json(const std::vector<Gpu>& gpus);  // those GPUs alone, in the same format

// One GPU as a device JSON in the neusight-data/device_configs format (Device, Dev_Mem, Mem_Bw,
// Num_Sm, Core_Per_SM, Freq, L2Cache, and SingleFLOPs, or for AMD SingleFLOPsVEC and
// SingleFLOPsMM), which load_device_json reads back as the same numbers.
std::string format_device_json(const Gpu& gpu);

// Directory of the project's data files (gpus.json, tiles, weights): NEUSIGHT_DATA_DIR, else
// next to the executable (build tree), else the install prefix's share/neusight.
std::string data_dir();

// Registers a data directory to try after NEUSIGHT_DATA_DIR (the installed package's
// neusightConfig.cmake points consumers at <prefix>/share/neusight through this).
void set_default_data_dir(const std::string& dir);

#ifdef NEUSIGHT_DATA_DIR_HINT
inline const bool kNeusightDataDirHint = (set_default_data_dir(NEUSIGHT_DATA_DIR_HINT), true);
#endif

}  // namespace neusight
