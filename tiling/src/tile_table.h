// tile_table.h - the data behind tile_kernel (tiling/data/tiles.json): candidate tiles, the cost
// model of each architecture class and its learned selection rules. Not installed: the
// tile_agreement bench (which refits the cost parameters on the training GPUs and rewrites the
// file) and the unit tests include it from the stage's sources.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "neusight/tiling.h"

namespace neusight {

// One candidate threadblock configuration of a library kernel.
struct GemmCandidate {
  TileConfig config;         // threads, stages, warp shape; tb_k for 16-bit inputs
  int regs_per_thread = 128;
  double efficiency = 1;     // relative per-SM throughput of one tile of this kernel
  double batched_efficiency = 1;  // the same in the library's batched (strided) GEMM
  bool batched = true;       // offered for batched (strided) products
  bool single = true;        // offered for single products
  bool split_k = true;       // may be split along k
};

// Cost model of one architecture class (how a library heuristic weighs candidates).
struct GemmCost {
  double dram_fraction = 0.5;      // share of a tile's operand bytes that come from DRAM
  double tile_overhead_us = 1;     // fixed cost per wave (prologue/epilogue)
  double split_k_overhead_us = 5;  // extra launch + reduction setup when split-K is used
  double min_k_per_split = 256;    // each split keeps at least this much of k
  int max_split_k = 32;
  // How a heuristic counts time over the SMs. false: waves of num_sm x blocks_per_sm tiles,
  // each wave costing blocks_per_sm tile times (a partial wave costs a full one). true: each
  // SM works through its share of the grid, ceil(tiles / num_sm) tile times (co-resident
  // tiles share the SM; a partial wave costs only the tiles it holds) and every tile pays
  // tile_overhead_us, which makes split-K factors that fill whole waves (tiles x split a
  // multiple of the SMs) the cheap ones.
  bool sm_waves = false;
  // Split k only when the output tiles fill less than this share of one wave of SMs
  // (out tiles < split_k_max_fill x SMs; 0: no such limit). Applies to tensor-core candidates,
  // and to SIMT ones when split_k_max_occupancy is not set.
  double split_k_max_fill = 0;
  // SIMT candidates: split k only when the output, unsplit, occupies less than this share of
  // the SMs' resident threads (out tiles x threads per tile < split_k_max_occupancy x SMs x max
  // threads per SM; 0: use split_k_max_fill). cuBLAS's FP32 sgemm on Ampere splits long k only
  // while the output's thread blocks hold fewer than ~5.5 warps per SM (0.086 of the A100's
  // 64), whatever the tile: the 32x32 sliced tile (4 warps) up to ~150 output tiles on the
  // 108-SM A100, the 256-thread tiles up to ~75; never above.
  double split_k_max_occupancy = 0;
  // true: the tile is chosen by its cost without split-K, and only then split (k split
  // factor by the same cost); false: tile and split factor are chosen together.
  bool split_after_tile = false;
  // The per-SM FP32 rate (GFLOP/s) and DRAM bandwidth (GB/s) the cost above is evaluated at:
  // those of the GPU its constants were fitted on. A library's kernel choice is a heuristic of
  // the architecture, the SM count and the shape; with the rates fixed here, the tile chosen
  // for a GPU never depends on its FLOP or bandwidth figures (tensor-core tiles: this FP32
  // rate times the GPU's dtype-to-FP32 peak ratio), so a faster spec cannot pick a tile that
  // predicts slower. 0: the GPU's own rates.
  double ref_fp32_gflops_per_sm = 0;
  double ref_bw_gbps_per_sm = 0;
  // The L2 size (MB) tensor-core candidates are priced at (operands that fit are read from DRAM
  // once): that of the same GPU, so the tile never depends on the GPU's own L2 and a larger L2
  // cannot choose a tile that predicts slower. 0: the GPU's own.
  double ref_l2_mb = 0;
};

// A learned selection rule (tiles.json gemm.<class>.rule, fitted by
// tiling/data/fit_gemm_rules.py on the class's train/ rows): classification trees over shape
// features (kGemmRuleFeatures, computed by gemm_rule_features) that give the SIMT tile of a
// single product and its split-K factor, and the tile of a batched product. Each tile tree is
// optional (empty: those products keep the cost model); where a class has one it replaces the
// cost model for SIMT (fp32) GEMMs; tensor-core GEMMs keep the cost model.
struct RuleTree {
  struct Node {
    int feature = -1;  // -1: leaf
    double threshold = 0;
    int left = 0, right = 0;  // feature value < threshold goes left
    std::string label;        // leaf of a tile tree: candidate name
    int value = 0;            // leaf: candidate index in the class's simt list, or the split factor
  };
  // One tree or a forest (tiles.json: a list of nodes, or a list of such lists): each tree's
  // nodes in preorder, children after their parent, left/right indices into `nodes`.
  std::vector<Node> nodes;
  std::vector<int> roots;  // index in `nodes` of each tree's root
  bool empty() const { return nodes.empty(); }
  // The leaf value of the one tree, or the trees' majority vote (ties: the smaller value).
  int eval(const double* x) const;
};

// Features 0-7: log2 m, log2 n, log2 k, log2 batch, log2(batch m n / (SMs 128 128)), log2(m / n),
// and for the split tree log2(output tiles / SMs), log2(k / output tiles) of the chosen tile (log2
// of max(x, 1) for the plain dimensions). Then, for each distinct SIMT tile (tb_m x tb_n) of the
// class in the order of its simt list (GemmRule::tiles, at most kGemmRuleMaxTiles), two
// features of that tile on this GEMM: 8 + 2i its last-wave fill (output tiles over SMs x its
// blocks per SM, divided by the whole waves it needs; 1 = the last wave is full) and 9 + 2i its
// padding efficiency (m n over the padded output, 1 = m and n are multiples of the tile).
// After those (from n = 8 + 2 x tiles), kGemmRuleSplitFeatures inputs of the split tree only, on
// the chosen candidate (set_split_features): log2(output tiles x threads / (SMs x max threads per
// SM)), log2(output tiles / (SMs x blocks per SM)), log2 tb_m, log2 tb_n, log2 threads, blocks
// per SM, and for s = 1..kGemmRuleSplitFills the last-wave fill of its output tiles split s ways.
// fit_gemm_rules.py learns from these values as tile_agreement --dump-features writes them.
constexpr int kGemmRuleMaxTiles = 16;
constexpr int kGemmRuleSplitFills = 4;
constexpr int kGemmRuleSplitFeatures = 6 + kGemmRuleSplitFills;
constexpr int kGemmRuleFeatures = 8 + 2 * kGemmRuleMaxTiles + kGemmRuleSplitFeatures;
struct GemmClass;
void gemm_rule_features(const GemmShape& s, const GemmClass& cls, const Gpu& gpu, int64_t out_tiles, double* x);
// The split tree's inputs for candidate c with out_tiles output tiles: x holds the shape's
// gemm_rule_features; sets x[6], x[7] and the kGemmRuleSplitFeatures after the per-tile ones.
void gemm_rule_split_features(const GemmCandidate& c, const GemmClass& cls, const Gpu& gpu, int64_t out_tiles,
                              double* x);
// GemmRule::tiles of a simt list: the index of the first candidate of each distinct tb_m x tb_n,
// in list order, at most kGemmRuleMaxTiles.
std::vector<int> gemm_rule_tiles(const std::vector<GemmCandidate>& simt);

struct GemmRule {
  RuleTree single_tile, batched_tile, split;
  std::vector<int> tiles;  // simt index of the first candidate of each distinct tb_m x tb_n (features 8+)
  bool present() const { return !single_tile.empty() || !batched_tile.empty(); }
};

struct GemmClass {
  std::string name;
  GemmCost cost;
  // Tensor-core candidates may run stream-K (TileConfig::stream_k) when it beats the same
  // tile's data-parallel grid: CUTLASS 3's sm90 and sm100 kernels' stream-K tile scheduler,
  // which cuBLAS 12 selects on Hopper and Blackwell for grids with a partial last wave.
  bool tensor_stream_k = false;
  std::vector<GemmCandidate> simt, tensor;
  GemmRule rule;  // optional (empty: the cost model alone)
};

struct TileTable {
  std::vector<std::pair<std::string, std::string>> arch_classes;  // arch -> class name
  std::vector<GemmClass> classes;
  int elementwise_threads = 128, elementwise_elements_per_thread = 4;
  int softmax_warp_max_cols = 1024, softmax_warps_per_block = 4, softmax_two_rows_max_cols = 128;
  int layernorm_rows_per_block = 1;

  // The class for an architecture ("sm_89", "gfx942"): exact entry, else the newest listed
  // architecture of the same family at or below it. Throws InputError when none fits.
  const GemmClass& gemm_class(const std::string& arch) const;
  static TileTable parse(const std::string& json_text, const std::string& what);  // InputError
  static const TileTable& builtin();  // data_dir()/tiles.json; RuntimeError naming the file
};

Tiling tile_kernel(const Kernel& kernel, const Gpu& gpu, const TileTable& table);

}  // namespace neusight
