// tiling.h - CUTLASS-style tile shapes and waves of each kernel on a target GPU.
//
// Takes: a Kernel (lowering.h) and a Gpu (gpu.h).
// Gives: the threadblock tile a vendor library would choose, the number of tiles (grid
// size, batch and split-K included) and waves = ceil(tiles / concurrent tiles).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "neusight/gpu.h"
#include "neusight/lowering.h"

namespace neusight {

// One threadblock configuration in CUTLASS's vocabulary.
struct TileConfig {
  std::string name;                      // candidate name from tiles.json ("" for vector kernels)
  int64_t tb_m = 1, tb_n = 1, tb_k = 1;  // threadblock shape M x N x K
  int64_t warp_m = 0, warp_n = 0, warp_k = 0;
  int stages = 1;
  int split_k = 1;
  // Stream-K (tensor cores, Hopper and newer): the grid's k iterations are shared out evenly
  // over the SMs instead of whole tiles, so a partial last wave costs its share of one (plus a
  // fixup of the tiles split between two SMs) rather than a full wave.
  bool stream_k = false;
  int threads = 128;                     // threads per block
  bool tensor_core = false;
};

struct Tiling {
  TileConfig config;
  int64_t tiles = 0;          // thread blocks in the grid (batch and split-K included)
  int64_t blocks_per_sm = 1;  // concurrent tiles per SM (occupancy)
  int64_t waves = 0;          // ceil(tiles / (num_sm * blocks_per_sm))
  // Contract string: "ROWSxCOLS" for GEMMs (rows along m, cols along n), elements per tile
  // for elementwise kernels, row length for softmax / layernorm.
  std::string tile;
  // Work of one tile, for the predictor's per-tile features.
  double tile_flops = 0;
  double tile_bytes = 0;
};

// Grid arithmetic (CUTLASS threadblock_swizzle): ceil-divide helpers.
inline int64_t ceil_div(int64_t a, int64_t b) { return b <= 0 ? 0 : (a + b - 1) / b; }
inline int64_t waves_for(int64_t tiles, int64_t concurrent) {
  return concurrent <= 0 ? 0 : ceil_div(tiles, concurrent);
}

Tiling tile_kernel(const Kernel& kernel, const Gpu& gpu);

// A tensor-core GEMM's other tilings: every tile the library offers for it, each at its own
// best split-K (tile_kernel's choice among them), for a predictor that prices them all, as the
// libraries' heuristics pick among their kernels the one they expect fastest. The cost model
// that chooses the splits runs at the class's reference rates and the matrix units' width
// (Gpu::matrix_lanes), so no peak changes the set. Empty for every other kernel (SIMT GEMMs
// follow the learned rule; vector kernels have one tiling).
std::vector<Tiling> tile_alternatives(const Kernel& kernel, const Gpu& gpu);

// A GEMM's tiling on the GPUs of `gpu`'s kind with fewer SMs (gpu_with_sms: the same SMs, each
// at the same rates), and the SM counts of 1 to gpu.num_sm - 1 on which it is tile_kernel's
// choice or (where `with_alternatives` says so of that choice) one of tile_alternatives'.
struct FewerSmTiling {
  Tiling tiling;                    // as it runs on those GPUs (its waves over gpu's SMs)
  std::vector<int> chosen_on;       // ascending
  std::vector<int> offered_on;      // ascending; the SM counts it is offered but not chosen on
  int last() const { return std::max(chosen_on.empty() ? 0 : chosen_on.back(), offered_on.empty() ? 0 : offered_on.back()); }
};
// Every distinct such tiling, for a predictor that never predicts a GPU slower than one of its
// kind with fewer SMs, whatever tile the library's heuristic picks on either: the GPU runs any
// grid the smaller one runs, each tile at the same rate in no more waves, so the smaller GPU's
// time for it bounds its own. SM counts up to kFewerSmsScanned (a device JSON may give up to
// 2^20; no GPU of the database has more than 304), so that the property is exact up to one
// more than that. Empty for every other kernel.
constexpr int kFewerSmsScanned = 1024;
std::vector<FewerSmTiling> tilings_on_fewer_sms(const Kernel& kernel, const Gpu& gpu,
                                                const std::function<bool(const Tiling&)>& with_alternatives);

// Whether two tilings are the same grid of the same kernel configuration.
bool same_grid(const Tiling& a, const Tiling& b);

// The DRAM bytes a kernel moves on `gpu` beyond Kernel::bytes: for each operand with
// Kernel::l2_reuse entries, the largest miss_bytes among those whose footprint exceeds the
// GPU's L2 (the reused data does not fit in the cache whatever the replacement policy, so it
// comes from DRAM again); 0 for every other kernel.
double l2_miss_bytes(const Kernel& kernel, const Gpu& gpu);
// The kernel as it runs on `gpu`: bytes + l2_miss_bytes, l2_reuse cleared.
Kernel on_gpu(const Kernel& kernel, const Gpu& gpu);

}  // namespace neusight
