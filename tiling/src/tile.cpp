// tile.cpp - threadblock tile choice and wave count per kernel class, from tiles.json.
#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "neusight/tiling.h"
#include "tile_table.h"

namespace neusight {
namespace {
using nlohmann::json;

// True when a GEMM of dtype `t` gets tensor-core tiles: the GPU has matrix units for the
// dtype it runs in (has_matrix_units; TF32 on FP32 matrix cores where there are no TF32 ones,
// FP8 on FP16 ones where there are no FP8 ones), as the libraries run the dtype on them
// (cuBLAS's TF32 and IMMA kernels also where their peak is the CUDA cores', as TF32 on GA10x
// and AD10x cards): a property of the architecture, never of a rate, so that a higher peak
// cannot move a GEMM from one unit to the other. FP16 on P100 and BF16 on V100 / T4 run as
// FP32 SIMT GEMMs.
bool uses_tensor_cores(DType t, const Gpu& gpu) {
  switch (t) {
    case DType::f16: case DType::bf16: return has_matrix_units(gpu, t);
    case DType::tf32: return has_matrix_units(gpu, DType::tf32) || has_matrix_units(gpu, DType::f32);
    case DType::i8: case DType::u8: return has_matrix_units(gpu, t);
    // FP32 on matrix units (AMD CDNA's FP32 MFMA, which rocBLAS runs FP32 GEMMs on).
    case DType::f32: case DType::undefined: return has_matrix_units(gpu, DType::f32);
    // FP4: its own tensor cores (Blackwell), else FP8's or FP16's it is upcast to.
    case DType::f4e2m1:
      return has_matrix_units(gpu, t) || has_matrix_units(gpu, DType::f8e4m3fn) || has_matrix_units(gpu, DType::f16);
    default:
      return dtype_bits(t) == 8 && (has_matrix_units(gpu, t) || has_matrix_units(gpu, DType::f16));
  }
}

// ---- tiles.json parsing -------------------------------------------------------------------

const json& field(const json& j, const char* name, const std::string& what) {
  auto it = j.find(name);
  if (it == j.end()) throw InputError(what + ": missing field '" + name + "'");
  return *it;
}

double positive(const json& j, const char* name, const std::string& what) {
  const json& v = field(j, name, what);
  if (!v.is_number() || !(v.get<double>() > 0))
    throw InputError(what + ": field '" + std::string(name) + "' must be a positive number");
  return v.get<double>();
}

int64_t dim3(const json& j, const char* name, int i, const std::string& what) {
  const json& v = field(j, name, what);
  if (!v.is_array() || v.size() != 3 || !v[i].is_number_integer() || v[i].get<int64_t>() <= 0)
    throw InputError(what + ": field '" + std::string(name) + "' must be three positive integers");
  return v[i].get<int64_t>();
}

bool flag(const json& j, const char* name, bool fallback, const std::string& what) {
  auto it = j.find(name);
  if (it == j.end()) return fallback;
  if (!it->is_boolean()) throw InputError(what + ": field '" + std::string(name) + "' must be true or false");
  return it->get<bool>();
}

GemmCandidate parse_candidate(const json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + ": every candidate must be an object");
  GemmCandidate c;
  const json& name = field(j, "name", where);
  if (!name.is_string()) throw InputError(where + ": 'name' must be a string");
  c.config.name = name.get<std::string>();
  const std::string what = where + " candidate '" + c.config.name + "'";
  c.config.tb_m = dim3(j, "tb", 0, what);
  c.config.tb_n = dim3(j, "tb", 1, what);
  c.config.tb_k = dim3(j, "tb", 2, what);
  c.config.warp_m = dim3(j, "warp", 0, what);
  c.config.warp_n = dim3(j, "warp", 1, what);
  c.config.warp_k = dim3(j, "warp", 2, what);
  c.config.stages = static_cast<int>(positive(j, "stages", what));
  c.config.threads = static_cast<int>(positive(j, "threads", what));
  c.regs_per_thread = static_cast<int>(positive(j, "regs_per_thread", what));
  c.efficiency = positive(j, "efficiency", what);
  c.batched_efficiency = j.contains("batched_efficiency") ? positive(j, "batched_efficiency", what) : c.efficiency;
  c.batched = flag(j, "batched", true, what);
  c.single = flag(j, "single", true, what);
  c.split_k = flag(j, "split_k", true, what);
  if (c.regs_per_thread > 512 || c.config.threads > 1024 || c.efficiency > 4 || c.batched_efficiency > 4)
    throw InputError(what + ": regs_per_thread <= 512, threads <= 1024 and efficiency <= 4 expected");
  return c;
}

std::vector<GemmCandidate> parse_list(const json& j, const std::string& where) {
  if (!j.is_array()) throw InputError(where + ": must be a list of candidates");
  std::vector<GemmCandidate> out;
  for (const auto& c : j) out.push_back(parse_candidate(c, where));
  return out;
}

GemmCost parse_cost(const json& j, const std::string& what) {
  if (!j.is_object()) throw InputError(what + ": 'cost' must be an object");
  GemmCost c;
  c.dram_fraction = positive(j, "dram_fraction", what);
  c.tile_overhead_us = positive(j, "tile_overhead_us", what);
  c.split_k_overhead_us = positive(j, "split_k_overhead_us", what);
  c.min_k_per_split = positive(j, "min_k_per_split", what);
  c.max_split_k = static_cast<int>(positive(j, "max_split_k", what));
  c.sm_waves = flag(j, "sm_waves", false, what);
  c.split_k_max_fill = j.contains("split_k_max_fill") ? positive(j, "split_k_max_fill", what) : 0;
  c.split_k_max_occupancy = j.contains("split_k_max_occupancy") ? positive(j, "split_k_max_occupancy", what) : 0;
  if (c.split_k_max_occupancy > 1) throw InputError(what + ": 'split_k_max_occupancy' must be at most 1");
  c.split_after_tile = flag(j, "split_after_tile", false, what);
  c.ref_fp32_gflops_per_sm = j.contains("ref_fp32_gflops_per_sm") ? positive(j, "ref_fp32_gflops_per_sm", what) : 0;
  c.ref_bw_gbps_per_sm = j.contains("ref_bw_gbps_per_sm") ? positive(j, "ref_bw_gbps_per_sm", what) : 0;
  c.ref_l2_mb = j.contains("ref_l2_mb") ? positive(j, "ref_l2_mb", what) : 0;
  return c;
}

// Appends one tree (a list of nodes, indices relative to it) to t. A node is an array: [f, t, l, r]
// (feature f < threshold t goes to node l, else to node r) or [leaf] (a candidate name in a tile
// tree, a split factor in a split tree). Arrays, not objects: the file holds about 15,000 nodes
// and every run reads them.
void parse_one_tree(const json& j, const std::string& what, bool tile_leaves, RuleTree& t) {
  if (!j.is_array() || j.empty()) throw InputError(what + ": must be a non-empty list of nodes");
  const int n = static_cast<int>(j.size());
  const int base = static_cast<int>(t.nodes.size());
  t.roots.push_back(base);
  for (int i = 0; i < n; ++i) {
    const json& nd = j[i];
    // The error context is built only on an error: trees have thousands of nodes.
    auto fail = [&](const std::string& why) { throw InputError(what + " node " + std::to_string(i) + ": " + why); };
    if (!nd.is_array() || (nd.size() != 1 && nd.size() != 4))
      fail("must be [feature, threshold, left, right] or [leaf]");
    RuleTree::Node node;
    if (nd.size() == 1) {
      const json& leaf = nd[0];
      if (tile_leaves) {
        if (!leaf.is_string()) fail("a leaf must be a candidate name");
        node.label = leaf.get<std::string>();
      } else {
        if (!leaf.is_number_integer() || leaf.get<int64_t>() < 1 || leaf.get<int64_t>() > 4096)
          fail("a leaf must be a split factor 1-4096");
        node.value = leaf.get<int>();
      }
    } else {
      if (!nd[0].is_number_integer() || nd[0].get<int64_t>() < 0 || nd[0].get<int64_t>() >= kGemmRuleFeatures)
        fail("the feature index must be 0-" + std::to_string(kGemmRuleFeatures - 1));
      if (!nd[1].is_number()) fail("the threshold must be a number");
      // Children come after their parent: no cycles, every walk ends at a leaf.
      for (size_t c : {size_t(2), size_t(3)})
        if (!nd[c].is_number_integer() || nd[c].get<int64_t>() <= i || nd[c].get<int64_t>() >= n)
          fail("left and right must index later nodes of the list");
      node.feature = nd[0].get<int>();
      node.threshold = nd[1].get<double>();
      node.left = base + nd[2].get<int>();
      node.right = base + nd[3].get<int>();
    }
    t.nodes.push_back(std::move(node));
  }
}

// A tree: a list of nodes; a forest: a list of trees (majority vote). [] = no tree.
RuleTree parse_tree(const json& j, const std::string& what, bool tile_leaves) {
  if (!j.is_array()) throw InputError(what + ": must be a list of nodes");
  RuleTree t;
  if (j.empty()) return t;
  // A tree's first node is an array of scalars; a forest's first tree an array of nodes.
  const bool forest = j[0].is_array() && !j[0].empty() && j[0][0].is_array();
  size_t nodes = forest ? 0 : j.size();
  if (forest)
    for (const json& tree : j) nodes += tree.is_array() ? tree.size() : 0;
  t.nodes.reserve(nodes);  // once, for every tree of a forest
  if (!forest) {
    parse_one_tree(j, what, tile_leaves, t);
    return t;
  }
  for (size_t i = 0; i < j.size(); ++i) parse_one_tree(j[i], what + " tree " + std::to_string(i), tile_leaves, t);
  return t;
}

GemmRule parse_rule(const json& j, const std::string& what) {
  if (!j.is_object()) throw InputError(what + ": 'rule' must be an object");
  GemmRule r;
  r.single_tile = parse_tree(field(j, "single_tile", what), what + " rule 'single_tile'", true);
  r.batched_tile = parse_tree(field(j, "batched_tile", what), what + " rule 'batched_tile'", true);
  r.split = parse_tree(field(j, "split", what), what + " rule 'split'", false);
  if (!r.present()) throw InputError(what + ": rule 'single_tile' and 'batched_tile' must not both be empty");
  return r;
}

// Tile-tree leaves name simt candidates; their indices follow the class's (final) simt list.
void resolve_rule(GemmClass& c, const std::string& what) {
  c.rule.tiles = gemm_rule_tiles(c.simt);
  const int n_features = 8 + 2 * static_cast<int>(c.rule.tiles.size());
  for (const RuleTree* t : {&c.rule.single_tile, &c.rule.batched_tile, &c.rule.split})
    for (const auto& nd : t->nodes)
      if (nd.feature >= n_features + (t == &c.rule.split ? kGemmRuleSplitFeatures : 0))
        throw InputError(what + ": rule feature " + std::to_string(nd.feature) + " beyond the class's " +
                         std::to_string(c.rule.tiles.size()) + " simt tiles");
  for (RuleTree* t : {&c.rule.single_tile, &c.rule.batched_tile})
    for (auto& nd : t->nodes) {
      if (nd.feature >= 0) continue;
      nd.value = -1;
      for (size_t i = 0; i < c.simt.size(); ++i)
        if (c.simt[i].config.name == nd.label) nd.value = static_cast<int>(i);
      if (nd.value < 0) throw InputError(what + ": rule leaf '" + nd.label + "' is not a simt candidate of the class");
    }
}

int int_field(const json& parent, const char* obj, const char* name, const std::string& what) {
  const json& o = field(parent, obj, what);
  return static_cast<int>(positive(o, name, what + " '" + obj + "'"));
}

// Parses the class `name`, resolving "inherit" (fields it lacks come from the parent).
GemmClass parse_class(const json& gemm, const std::string& name, const std::string& what, int depth) {
  if (depth > 8) throw InputError(what + ": 'inherit' chain too deep at class '" + name + "'");
  auto it = gemm.find(name);
  if (it == gemm.end() || !it->is_object()) throw InputError(what + ": unknown gemm class '" + name + "'");
  const json& j = *it;
  const std::string w = what + " gemm class '" + name + "'";
  GemmClass c;
  if (auto p = j.find("inherit"); p != j.end()) {
    if (!p->is_string()) throw InputError(w + ": 'inherit' must be a class name");
    c = parse_class(gemm, p->get<std::string>(), what, depth + 1);
  } else {
    for (const char* f : {"cost", "simt", "tensor"})
      if (!j.contains(f)) throw InputError(w + ": missing field '" + f + "'");
  }
  c.name = name;
  if (j.contains("cost")) c.cost = parse_cost(j["cost"], w);
  // The L2 an inherited cost prices tensor-core operands at (GemmCost::ref_l2_mb): that of the
  // GPU this class describes.
  if (j.contains("ref_l2_mb")) c.cost.ref_l2_mb = positive(j, "ref_l2_mb", w);
  c.tensor_stream_k = flag(j, "tensor_stream_k", c.tensor_stream_k, w);
  if (j.contains("simt")) c.simt = parse_list(j["simt"], w + " simt");
  if (j.contains("tensor")) c.tensor = parse_list(j["tensor"], w + " tensor");
  if (c.simt.empty()) throw InputError(w + ": needs at least one SIMT candidate");
  if (j.contains("rule")) c.rule = parse_rule(j["rule"], w);
  if (c.rule.present()) resolve_rule(c, w);
  return c;
}

// ---- cost model -----------------------------------------------------------------------------

int64_t blocks_per_sm(const GemmCandidate& c, const Gpu& gpu, double in_bytes, int64_t tb_k) {
  const int64_t threads = c.config.threads;
  int64_t b = std::max(1, gpu.max_blocks_per_sm);
  b = std::min<int64_t>(b, gpu.max_threads_per_sm / threads);
  const int64_t regs = ((c.regs_per_thread + 7) / 8) * 8 * threads;  // allocation granularity 8
  b = std::min<int64_t>(b, gpu.regs_per_sm / regs);
  const double smem = c.config.stages * double(c.config.tb_m + c.config.tb_n) * tb_k * in_bytes;
  if (smem > 0) b = std::min<int64_t>(b, static_cast<int64_t>(gpu.smem_per_sm_kb * 1024 / smem));
  return std::max<int64_t>(b, 1);
}

struct Choice {
  const GemmCandidate* cand = nullptr;
  int split = 1;
  bool stream_k = false;
  int64_t tb_k = 8, bps = 1;
  double time = std::numeric_limits<double>::infinity();
  double rank = std::numeric_limits<double>::infinity();  // what candidates are compared by
};

Tiling finish(const Kernel& kr, const Gpu& gpu, const Choice& best, bool tc);

// Setup of a tensor-core split-K reduction: one more kernel launch on the device (CUDA's
// launch-to-completion of a short kernel, the predictor's kDeviceKernelFloorMs). The SIMT
// classes' fitted split_k_overhead_us (20 us on the A100's FP32 rows, where cuBLAS rarely
// splits) does not carry over to the tensor-core kernels, which split to fill the SMs.
constexpr double kTensorSplitKSetupUs = 2.0;
// Share of the shorter of a tensor-core tile's math and traffic time that the cost model counts
// on top of the longer (a tie-breaker between candidates, not a fitted overlap: the predictor
// learns the real share).
constexpr double kTensorExposedShare = 0.05;

// Time of a tensor-core grid of `tiles` tiles of `t_compute` seconds of math each and
// `traffic` seconds of DRAM traffic. The shorter of math and traffic never hides completely
// behind the longer: a small share of it (kTensorExposedShare) orders candidates that tie on
// the longer, e.g. the padded math of a memory-bound decode GEMM's tiles. Data-parallel, the
// busiest SM computes ceil(tiles / SMs) tiles. Stream-K (for an unsplit grid of a class with
// tensor_stream_k; sets `stream_k` where it is the faster): every SM gets tiles / SMs tiles' worth of k iterations, and at
// most one tile per SM is split between two of them, which costs one more tile's fixed cost
// (the SM that finishes it waits for the other's FP32 partial, exchanged through L2).
double tensor_grid_time(int64_t tiles, double t_compute, double traffic, const Gpu& gpu, const GemmClass& cls,
                        bool unsplit, bool& stream_k) {
  auto grid = [&](double sm_tiles, double tile_costs) {
    const double math = sm_tiles * t_compute;
    return std::max(math, traffic) + kTensorExposedShare * std::min(math, traffic) +
           tile_costs * cls.cost.tile_overhead_us * 1e-6;
  };
  const double per_sm = double(ceil_div(tiles, gpu.num_sm));
  const double dp = grid(per_sm, per_sm);
  stream_k = false;
  if (!unsplit || !cls.tensor_stream_k || tiles <= gpu.num_sm || tiles % gpu.num_sm == 0) return dp;
  const double share = double(tiles) / gpu.num_sm;
  const double sk = grid(share, share + 1);
  stream_k = sk < dp;
  return std::min(sk, dp);
}

// How full the last of `waves` (fractional) waves is: 1 when they are whole.
double last_wave_fill(double waves) { return waves / std::ceil(waves); }

// gemm_rule_features' two inputs that depend on the output tile count (x[6], x[7]; x[2] is
// log2 k): the split tree asks again with the chosen tile's count, the rest stays.
void set_out_tile_features(const Gpu& gpu, int64_t out_tiles, double* x) {
  x[6] = out_tiles > 0 ? std::log2(double(out_tiles) / std::max(gpu.num_sm, 1)) : 0;
  x[7] = x[2] - std::log2(std::max(double(out_tiles), 1.0));
}

// The split tree's own inputs (after the class's per-tile features): the chosen candidate's
// occupancy, waves, tile, threads, blocks per SM and the last-wave fill of its output tiles split
// 1..kGemmRuleSplitFills ways (tile_table.h).
void set_split_features(const GemmCandidate& c, const GemmClass& cls, const Gpu& gpu, int64_t out_tiles, double* x) {
  const double sm = std::max(gpu.num_sm, 1);
  const double threads = c.config.threads;
  const double bps = double(blocks_per_sm(c, gpu, 4.0, c.config.tb_k));
  const double ot = double(std::max<int64_t>(out_tiles, 1));
  double* f = x + 8 + 2 * cls.rule.tiles.size();
  f[0] = std::log2(ot * threads / (sm * std::max(gpu.max_threads_per_sm, 1)));
  f[1] = std::log2(ot / (sm * bps));
  f[2] = std::log2(double(c.config.tb_m));
  f[3] = std::log2(double(c.config.tb_n));
  f[4] = std::log2(threads);
  f[5] = bps;
  for (int s = 1; s <= kGemmRuleSplitFills; ++s) {
    f[5 + s] = last_wave_fill(ot * s / (sm * bps));
  }
}

// The rate a tile's math runs at per SM (FLOP/s): the dtype's matrix peak, or FP32 SIMT without
// one, both at the class's reference per-SM rates when it has them (GemmCost): the reference
// FP32 rate times the matrix units' width (Gpu::matrix_lanes), so that no peak moves the choice.
double tile_flops_per_sm(const Kernel& kr, const Gpu& gpu, const GemmCost& cost, bool tc) {
  const double sm = gpu.num_sm;
  const double peak_sm = gpu.gemm_peak_gflops(tc ? kr.dtype : DType::f32) * 1e9 / sm;
  const double fp32_sm = gpu.fp32_gflops * 1e9 / sm;
  const double width = tc ? gpu.matrix_lanes(kr.dtype) : (fp32_sm > 0 ? peak_sm / fp32_sm : 1.0);
  return cost.ref_fp32_gflops_per_sm > 0 ? cost.ref_fp32_gflops_per_sm * 1e9 * width : peak_sm;
}

// The GEMM's choice of candidate and split on `gpu` (of class `cls`); with `alternatives`, on
// tensor-core candidates, also every offered candidate's at its own best split (the chosen one
// among them).
Choice choose_gemm(const Kernel& kr, const Gpu& gpu, const GemmClass& cls, bool tc,
                   std::vector<Choice>* alternatives = nullptr) {
  const GemmShape& s = kr.gemm;
  const std::vector<GemmCandidate>& cands = tc ? cls.tensor : cls.simt;
  const bool batched = s.batched || s.batch > 1;
  const double eb = element_bytes(kr.dtype);
  const double in_bytes = tc ? eb : 4.0;
  const double sm = gpu.num_sm;
  const GemmCost& cost = cls.cost;
  const double flops_sm = tile_flops_per_sm(kr, gpu, cost, tc);
  const double bw = cost.ref_bw_gbps_per_sm > 0 ? cost.ref_bw_gbps_per_sm * 1e9 * sm : gpu.mem_bw_gbps * 1e9;

  Choice best;
  const RuleTree& tile_tree = batched ? cls.rule.batched_tile : cls.rule.single_tile;
  if (!tc && !tile_tree.empty()) {
    // Learned rule: the tree gives the tile, then (single products) the split factor.
    double x[kGemmRuleFeatures];
    gemm_rule_features(s, cls, gpu, 0, x);
    const GemmCandidate& c = cands[tile_tree.eval(x)];
    const int64_t out_tiles = s.batch * ceil_div(s.m, c.config.tb_m) * ceil_div(s.n, c.config.tb_n);
    int split = 1;
    if (!batched && c.split_k && !cls.rule.split.empty()) {
      gemm_rule_split_features(c, cls, gpu, out_tiles, x);
      split = static_cast<int>(std::min<int64_t>(cls.rule.split.eval(x), s.k));
    }
    return Choice{&c, std::max(split, 1), false, c.config.tb_k, blocks_per_sm(c, gpu, in_bytes, c.config.tb_k), 0, 0};
  }
  // Tensor cores: operands that fit in L2 are read from DRAM once whatever the tiling (the
  // tiles' re-reads hit L2); larger ones come back for the tiles that re-read them.
  const double operands = in_bytes * double(s.batch) * (double(s.m) + double(s.n)) * double(s.k);
  const bool operands_fit_l2 = operands <= (cost.ref_l2_mb > 0 ? cost.ref_l2_mb : gpu.l2_mb) * 1048576.0;
  bool any_offered = false;
  for (const auto& c : cands) any_offered |= batched ? c.batched : c.single;
  for (const auto& c : cands) {
    if (any_offered && !(batched ? c.batched : c.single)) continue;
    const int64_t tb_k = tc ? std::max<int64_t>(1, static_cast<int64_t>(c.config.tb_k * 2 / eb)) : c.config.tb_k;
    const int64_t bps = blocks_per_sm(c, gpu, in_bytes, tb_k);
    const double tm = double(c.config.tb_m), tn = double(c.config.tb_n);
    const int64_t out_tiles = s.batch * ceil_div(s.m, c.config.tb_m) * ceil_div(s.n, c.config.tb_n);
    // No split when the unsplit output already fills the SMs: SIMT tiles by the share of the
    // SMs' threads they occupy (split_k_max_occupancy), otherwise by tiles per SM.
    const bool by_threads = !tc && cost.split_k_max_occupancy > 0;
    const bool fills =
        by_threads ? double(out_tiles) * c.config.threads >= cost.split_k_max_occupancy * sm * gpu.max_threads_per_sm
                   : cost.split_k_max_fill > 0 && double(out_tiles) >= cost.split_k_max_fill * sm;
    const int max_split = (batched || !c.split_k || fills) ? 1 : std::max(1, cost.max_split_k);
    Choice mine;  // this candidate's best split
    double unsplit = 0;
    for (int split = 1; split <= max_split; ++split) {
      const int64_t kper = ceil_div(s.k, split);
      if (split > 1 && double(kper) < cost.min_k_per_split) break;
      const int64_t tiles = out_tiles * split;
      const double eff = batched ? c.batched_efficiency : c.efficiency;
      const double t_compute = 2.0 * tm * tn * double(kper) / (eff * flops_sm);
      double time;
      bool stream_k = false;
      if (tc) {
        // Tensor cores: the MMAs run over the whole tile (rows past m or columns past n are
        // computed on zeros), while the loads of those rows are predicated off. The grid is
        // spread over the SMs, and the kernel's operand traffic streams at the GPU's bandwidth
        // however few SMs draw it.
        const double rows = std::min(tm, double(s.m)), cols = std::min(tn, double(s.n));
        const double loaded = in_bytes * (rows + cols) * double(kper) * double(tiles);
        const double traffic = (operands_fit_l2 ? operands : std::max(operands, cost.dram_fraction * loaded)) / bw;
        time = tensor_grid_time(tiles, t_compute, traffic, gpu, cls, split == 1, stream_k);
      } else {
        const double waves = double(waves_for(tiles, static_cast<int64_t>(sm) * bps));
        const double t_memory = cost.dram_fraction * in_bytes * (tm + tn) * double(kper) / (bw / sm);
        // sm_waves: every tile pays the fixed cost (prologue, epilogue) on its SM; otherwise once per wave.
        const double per_sm = cost.sm_waves ? double(ceil_div(tiles, gpu.num_sm)) : waves * double(bps);
        time = per_sm * std::max(t_compute, t_memory) + (cost.sm_waves ? per_sm : waves) * cost.tile_overhead_us * 1e-6;
      }
      // Split-K: the partial tiles' FP32 workspace written and reduced, and the reduction's setup:
      // for SIMT candidates the class's fitted overhead; tensor-core kernels reduce in a second
      // launch (or in-kernel, serially), one device kernel launch (kTensorSplitKSetupUs).
      if (split > 1)
        time += (tc ? kTensorSplitKSetupUs : cost.split_k_overhead_us) * 1e-6 +
                (split + 1) * double(s.batch * s.m * s.n) * 4.0 / bw;
      if (split == 1) unsplit = time;
      if (time < mine.time) mine = Choice{&c, split, stream_k, tb_k, bps, time, time};
    }
    // split_after_tile: the tile is ranked by its unsplit time, then split as it likes best.
    mine.rank = cost.split_after_tile ? unsplit : mine.time;
    if (mine.cand && mine.rank < best.rank) best = mine;
    if (mine.cand && tc && alternatives) alternatives->push_back(mine);
  }
  return best;
}

bool uses_tensor_tiles(const Kernel& kr, const Gpu& gpu, const GemmClass& cls) {
  return uses_tensor_cores(kr.dtype, gpu) && !cls.tensor.empty();
}

// The GEMM's tiling; with `alternatives`, on tensor-core candidates, also every offered
// candidate's tiling at its own best split (the chosen one among them).
Tiling tile_gemm(const Kernel& kr, const Gpu& gpu, const TileTable& table, std::vector<Tiling>* alternatives = nullptr) {
  const GemmClass& cls = table.gemm_class(gpu.arch);
  const bool tc = uses_tensor_tiles(kr, gpu, cls);
  std::vector<Choice> alts;
  const Choice best = choose_gemm(kr, gpu, cls, tc, alternatives ? &alts : nullptr);
  if (alternatives)
    for (const Choice& a : alts) alternatives->push_back(finish(kr, gpu, a, tc));
  return finish(kr, gpu, best, tc);
}

Tiling finish(const Kernel& kr, const Gpu& gpu, const Choice& best, bool tc) {
  const GemmShape& s = kr.gemm;
  const double eb = element_bytes(kr.dtype);
  Tiling t;
  t.config = best.cand->config;
  t.config.tb_k = best.tb_k;
  t.config.warp_k = std::min<int64_t>(t.config.warp_k, best.tb_k);
  t.config.split_k = best.split;
  t.config.stream_k = best.stream_k;
  t.config.tensor_core = tc;
  t.tiles = s.batch * ceil_div(s.m, t.config.tb_m) * ceil_div(s.n, t.config.tb_n) * best.split;
  t.blocks_per_sm = best.bps;
  t.waves = waves_for(t.tiles, gpu.num_sm * t.blocks_per_sm);
  t.tile = std::to_string(t.config.tb_m) + "x" + std::to_string(t.config.tb_n);
  const double kper = double(ceil_div(s.k, best.split));
  t.tile_flops = 2.0 * t.config.tb_m * t.config.tb_n * kper;
  t.tile_bytes = eb * (double(t.config.tb_m) * kper + kper * t.config.tb_n + double(t.config.tb_m) * t.config.tb_n);
  return t;
}

Tiling tile_vector(const Kernel& kr, const Gpu& gpu, const TileTable& table) {
  Tiling t;
  const double elems = double(kr.rows) * double(kr.cols);
  if (kr.cls == KernelClass::softmax || kr.cls == KernelClass::layernorm) {
    // PyTorch: short rows (softmax) run one row per warp, several warps per block; longer
    // rows (and layernorm) one row per block.
    int64_t rows_per_block = table.layernorm_rows_per_block;
    if (kr.cls == KernelClass::softmax) {
      rows_per_block = 1;
      if (kr.cols <= table.softmax_warp_max_cols)
        rows_per_block = table.softmax_warps_per_block * (kr.cols <= table.softmax_two_rows_max_cols ? 2 : 1);
    }
    t.tiles = ceil_div(std::max<int64_t>(kr.rows, 1), rows_per_block);
    t.tile = std::to_string(kr.cols);
    t.config.tb_m = rows_per_block;
    t.config.tb_n = kr.cols;
  } else {
    // PyTorch's vectorised elementwise kernel: threads x elements per thread per block.
    const int64_t per_block = int64_t(table.elementwise_threads) * table.elementwise_elements_per_thread;
    t.tiles = ceil_div(static_cast<int64_t>(elems > 0 ? elems : 1), per_block);
    t.tile = std::to_string(per_block);
    t.config.tb_m = per_block;
    t.config.threads = table.elementwise_threads;
  }
  t.tile_flops = t.tiles > 0 ? kr.flops / double(t.tiles) : 0;
  t.tile_bytes = t.tiles > 0 ? kr.bytes / double(t.tiles) : 0;
  t.blocks_per_sm = 1;
  t.waves = waves_for(t.tiles, gpu.num_sm);
  return t;
}

// "sm_89" -> ("sm_", 89); "gfx90a" -> ("gfx", 0x90a); anything else -> (arch, -1).
int arch_number(const std::string& arch, std::string& family) {
  const bool sm = arch.compare(0, 3, "sm_") == 0, gfx = arch.compare(0, 3, "gfx") == 0;
  family = sm || gfx ? arch.substr(0, 3) : arch;
  if (!sm && !gfx) return -1;
  try {
    size_t used = 0;
    const int n = std::stoi(arch.substr(3), &used, gfx ? 16 : 10);
    return used == arch.size() - 3 ? n : -1;
  } catch (...) {
    return -1;
  }
}

}  // namespace

int RuleTree::eval(const double* x) const {
  auto walk = [&](int i) {
    while (nodes[i].feature >= 0) i = x[nodes[i].feature] < nodes[i].threshold ? nodes[i].left : nodes[i].right;
    return nodes[i].value;
  };
  if (roots.size() <= 1) return walk(0);
  // Majority vote; forests are small (tens of trees), so count in a flat list, on the stack
  // for up to 64 distinct answers (a tile index or a split factor).
  constexpr size_t kOnStack = 64;
  std::array<std::pair<int, int>, kOnStack> stack_votes;  // (value, count)
  std::vector<std::pair<int, int>> heap_votes;
  const bool on_stack = roots.size() <= kOnStack;
  if (!on_stack) heap_votes.resize(roots.size());
  std::pair<int, int>* votes = on_stack ? stack_votes.data() : heap_votes.data();
  size_t n = 0;
  for (int r : roots) {
    const int v = walk(r);
    size_t i = 0;
    while (i < n && votes[i].first != v) ++i;
    if (i == n) votes[n++] = {v, 1};
    else ++votes[i].second;
  }
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (votes[i].second > votes[best].second || (votes[i].second == votes[best].second && votes[i].first < votes[best].first))
      best = i;
  return votes[best].first;
}

void gemm_rule_features(const GemmShape& s, const GemmClass& cls, const Gpu& gpu, int64_t out_tiles, double* x) {
  auto lg = [](double v) { return std::log2(std::max(v, 1.0)); };
  const double sm = std::max(gpu.num_sm, 1);
  x[0] = lg(double(s.m));
  x[1] = lg(double(s.n));
  x[2] = lg(double(s.k));
  x[3] = lg(double(s.batch));
  x[4] = std::log2(double(s.batch) * double(s.m) * double(s.n) / (sm * 16384.0));
  x[5] = x[0] - x[1];
  set_out_tile_features(gpu, out_tiles, x);
  double* t = x + 8;
  for (int i : cls.rule.tiles) {
    const GemmCandidate& c = cls.simt[static_cast<size_t>(i)];
    const int64_t tm = c.config.tb_m, tn = c.config.tb_n;
    const int64_t pm = ceil_div(s.m, tm), pn = ceil_div(s.n, tn);
    *t++ = last_wave_fill(double(s.batch * pm * pn) / (sm * double(blocks_per_sm(c, gpu, 4.0, c.config.tb_k))));
    *t++ = double(s.m) * double(s.n) / (double(pm * tm) * double(pn * tn));
  }
}

void gemm_rule_split_features(const GemmCandidate& c, const GemmClass& cls, const Gpu& gpu, int64_t out_tiles,
                              double* x) {
  set_out_tile_features(gpu, out_tiles, x);
  set_split_features(c, cls, gpu, out_tiles, x);
}

std::vector<int> gemm_rule_tiles(const std::vector<GemmCandidate>& simt) {
  std::vector<int> tiles;
  for (size_t i = 0; i < simt.size(); ++i) {
    bool seen = false;
    for (int j : tiles) seen |= simt[j].config.tb_m == simt[i].config.tb_m && simt[j].config.tb_n == simt[i].config.tb_n;
    if (!seen && tiles.size() < size_t(kGemmRuleMaxTiles)) tiles.push_back(static_cast<int>(i));
  }
  return tiles;
}

TileTable TileTable::parse(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(what + ": malformed JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) throw InputError(what + ": must be a JSON object");
  TileTable t;
  const json& classes = field(j, "arch_classes", what);
  const json& gemm = field(j, "gemm", what);
  if (!classes.is_object() || !gemm.is_object())
    throw InputError(what + ": 'arch_classes' and 'gemm' must be objects");
  for (auto it = classes.begin(); it != classes.end(); ++it) {
    if (!it->is_string()) throw InputError(what + ": arch_classes['" + it.key() + "'] must be a class name");
    t.arch_classes.emplace_back(it.key(), it->get<std::string>());
  }
  for (auto it = gemm.begin(); it != gemm.end(); ++it) t.classes.push_back(parse_class(gemm, it.key(), what, 0));
  for (const auto& [arch, cls] : t.arch_classes) {
    bool found = false;
    for (const auto& c : t.classes) found |= c.name == cls;
    if (!found) throw InputError(what + ": arch '" + arch + "' maps to unknown gemm class '" + cls + "'");
  }
  t.elementwise_threads = int_field(j, "elementwise", "threads", what);
  t.elementwise_elements_per_thread = int_field(j, "elementwise", "elements_per_thread", what);
  t.softmax_warp_max_cols = int_field(j, "softmax", "warp_max_cols", what);
  t.softmax_warps_per_block = int_field(j, "softmax", "warps_per_block", what);
  t.softmax_two_rows_max_cols = int_field(j, "softmax", "two_rows_max_cols", what);
  t.layernorm_rows_per_block = int_field(j, "layernorm", "rows_per_block", what);
  return t;
}

const TileTable& TileTable::builtin() {
  static const TileTable table = [] {
    const std::string path = data_dir() + "/tiles.json";
    std::ifstream f(path);
    if (!f) throw RuntimeError(path + ": cannot open the tile table (set NEUSIGHT_DATA_DIR)");
    std::stringstream ss;
    ss << f.rdbuf();
    try {
      return parse(ss.str(), path);
    } catch (const InputError& e) {
      throw RuntimeError(std::string("built-in tile table unusable: ") + e.what());
    }
  }();
  return table;
}

const GemmClass& TileTable::gemm_class(const std::string& arch) const {
  std::string family;
  const int want = arch_number(arch, family);
  const std::string* best = nullptr;
  int best_num = -1;
  for (const auto& [a, cls] : arch_classes) {
    if (a == arch) {
      best = &cls;
      break;
    }
    std::string fam;
    const int n = arch_number(a, fam);
    if (fam == family && n >= 0 && n <= want && n > best_num) {
      best = &cls;
      best_num = n;
    }
  }
  if (!best) throw InputError("no tile table entry for architecture '" + arch + "'");
  for (const auto& c : classes)
    if (c.name == *best) return c;
  throw InputError("no tile table entry for architecture '" + arch + "'");
}

namespace {
// A GEMM with every dim known and positive: one the tiles can cover.
bool tileable_gemm(const Kernel& k) {
  return k.cls == KernelClass::gemm && k.gemm.m > 0 && k.gemm.n > 0 && k.gemm.k > 0 && k.gemm.batch > 0;
}
}  // namespace

Tiling tile_kernel(const Kernel& kernel, const Gpu& gpu, const TileTable& table) {
  switch (kernel.cls) {
    case KernelClass::gemm:
      if (!tileable_gemm(kernel)) return Tiling{};
      return tile_gemm(kernel, gpu, table);
    case KernelClass::elementwise:
    case KernelClass::softmax:
    case KernelClass::layernorm:
    case KernelClass::reduce:
    case KernelClass::memory:
      return tile_vector(kernel, gpu, table);
    default:
      return Tiling{};
  }
}

Tiling tile_kernel(const Kernel& kernel, const Gpu& gpu) { return tile_kernel(kernel, gpu, TileTable::builtin()); }

std::vector<Tiling> tile_alternatives(const Kernel& kernel, const Gpu& gpu) {
  std::vector<Tiling> out;
  if (tileable_gemm(kernel)) tile_gemm(kernel, gpu, TileTable::builtin(), &out);
  return out;
}

bool same_grid(const Tiling& a, const Tiling& b) {
  return a.tiles == b.tiles && a.blocks_per_sm == b.blocks_per_sm && a.config.name == b.config.name &&
         a.config.tb_m == b.config.tb_m && a.config.tb_n == b.config.tb_n && a.config.tb_k == b.config.tb_k &&
         a.config.split_k == b.config.split_k && a.config.stream_k == b.config.stream_k &&
         a.config.tensor_core == b.config.tensor_core;
}

std::vector<FewerSmTiling> tilings_on_fewer_sms(const Kernel& kernel, const Gpu& gpu,
                                                const std::function<bool(const Tiling&)>& with_alternatives) {
  std::vector<FewerSmTiling> out;
  if (kernel.cls != KernelClass::gemm || !tileable_gemm(kernel) || gpu.num_sm <= 1) return out;
  // The class and the math path follow from the architecture and the dtype alone, the same on
  // every SM count.
  const GemmClass& cls = TileTable::builtin().gemm_class(gpu.arch);
  const bool tc = uses_tensor_tiles(kernel, gpu, cls);
  // Distinct choices first (a candidate, its split, stream-K and occupancy), tilings at the end.
  auto same = [](const Choice& a, const Choice& b) {
    return a.cand == b.cand && a.split == b.split && a.stream_k == b.stream_k && a.tb_k == b.tb_k && a.bps == b.bps;
  };
  std::vector<Choice> seen;
  std::vector<std::pair<std::vector<int>, std::vector<int>>> on;  // per seen choice: chosen_on, offered_on
  auto keep = [&](const Choice& c, int sms, bool chosen) {
    size_t i = 0;
    while (i < seen.size() && !same(seen[i], c)) ++i;
    if (i == seen.size()) {
      seen.push_back(c);
      on.emplace_back();
    }
    std::vector<int>& list = chosen ? on[i].first : on[i].second;
    if (list.empty() || list.back() != sms) list.push_back(sms);
  };
  std::vector<Choice> alts;
  std::vector<std::pair<Choice, bool>> offers;  // with_alternatives of each chosen candidate and split
  Gpu small = gpu;
  for (int sms = 1; sms < std::min(gpu.num_sm, kFewerSmsScanned + 1); ++sms) {
    set_sms(small, gpu, sms);
    alts.clear();
    const Choice chosen = choose_gemm(kernel, small, cls, tc, tc ? &alts : nullptr);
    keep(chosen, sms, true);
    if (alts.empty()) continue;
    auto asked = std::find_if(offers.begin(), offers.end(), [&](const auto& o) { return same(o.first, chosen); });
    if (asked == offers.end()) asked = offers.insert(offers.end(), {chosen, with_alternatives(finish(kernel, gpu, chosen, tc))});
    if (!asked->second) continue;
    for (const Choice& a : alts)
      if (!same(a, chosen)) keep(a, sms, false);
  }
  for (size_t i = 0; i < seen.size(); ++i)
    out.push_back({finish(kernel, gpu, seen[i], tc), std::move(on[i].first), std::move(on[i].second)});
  return out;
}

double l2_miss_bytes(const Kernel& kernel, const Gpu& gpu) {
  if (kernel.l2_reuse.empty()) return 0;
  const double l2 = gpu.l2_mb * 1024.0 * 1024.0;
  std::map<int, double> worst;  // per operand
  for (const auto& r : kernel.l2_reuse)
    if (r.footprint > l2 && r.miss_bytes > 0) worst[r.operand] = std::max(worst[r.operand], r.miss_bytes);
  double extra = 0;
  for (const auto& [op, b] : worst) extra += b;
  return extra;
}

Kernel on_gpu(const Kernel& kernel, const Gpu& gpu) {
  Kernel k = kernel;
  k.bytes += l2_miss_bytes(kernel, gpu);
  k.l2_reuse.clear();
  return k;
}

}  // namespace neusight
