// tile_agreement - how often the derived GEMM tile and tile count match the library's launch.
//
// Reads every GEMM row of neusight-data/kernels/{train,test}/{linear,bmm}*, takes the
// library's threadblock tile from the kernel name (cuBLAS `sgemm_AxB`: A along the output
// columns, B along the rows; xmma's `tilesizeAxB`: A along the rows, B along the columns, as
// the launch grid's x and y count them) and its grid size from Grid x*y*z, and compares
// them with tile_kernel() on the row's GPU from the built-in database. Prints per GPU and split
// the share of rows where the tile and the tile count agree, and the baseline "always that
// GPU's most common tile" (its count computed with that tile, no split-K).
//
//   tile_agreement [--shared DIR] [--tiles tiles.json]
//   tile_agreement --fit [--write tiles.json]   refit the cost model of each architecture class
//       that has training data, on the train/ rows only (the A100 80GB appears only in test/
//       and is never used), and optionally rewrite the tile table with the fitted numbers.
//   tile_agreement --dump-features FILE [--class NAME,...]   the inputs of fit_gemm_rules.py
//       (README "Learned rules"): every train row of the classes with a learned rule (or those
//       named) with the library's choice and the rule features tiling computes for it.
//   tile_agreement --rows FILE.csv [--column NAME] [--timing eager|device|kernel]
//       how much the tile matters to the latency: the FP32 GEMM rows of a measured CSV in the
//       dataset's format (bench/device_validation's fp32.csv; default column Latency, eager
//       timing) predicted by the shipped NeuSight weights on the tile derived here, on the
//       library's own tile (from the kernel name) and on a constant 128x128: MAPE and median
//       predicted / measured per op, with the tile agreement of each.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "neusight/dataset.h"
#include "neusight/gpu.h"
#include "neusight/precision.h"
#include "neusight/predictor.h"
#include "neusight/tiling.h"
#include "tile_table.h"

using namespace neusight;
namespace fs = std::filesystem;

namespace {

struct Row {
  Kernel kernel;
  std::string device, kernel_name;
  bool train = false;
  int64_t lib_m = 0, lib_n = 0;  // library tile along IR m (rows) and n (columns)
  int64_t grid = 0, grid_z = 0;
};

struct Sample {
  const Gpu* gpu;
  std::vector<Row> rows;
};

bool library_tile(const std::string& name, int64_t& m, int64_t& n) {
  static const std::regex sgemm("sgemm_([0-9]+)x([0-9]+)");
  static const std::regex tilesize("tilesize([0-9]+)x([0-9]+)");
  std::smatch mt;
  if (std::regex_search(name, mt, sgemm)) {  // cuBLAS column-major: AxB = A along n, B along m
    n = std::stoll(mt[1]);
    m = std::stoll(mt[2]);
    return true;
  }
  if (std::regex_search(name, mt, tilesize)) {  // grid x counts tiles of A rows, grid y of B columns
    m = std::stoll(mt[1]);
    n = std::stoll(mt[2]);
    return true;
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InputError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::map<std::string, Sample> load_rows(const std::string& shared, const GpuDatabase& db) {
  std::vector<std::pair<std::string, bool>> files;
  const std::string base = shared + "/neusight-data/kernels";
  for (const char* op : {"linear", "bmm"}) {
    std::vector<std::string> train;
    for (const auto& e : fs::directory_iterator(base + "/train/" + op)) train.push_back(e.path().string());
    std::sort(train.begin(), train.end());
    for (const auto& f : train) files.emplace_back(f, true);
    files.emplace_back(base + "/test/" + op + ".csv", false);
  }
  std::map<std::string, Sample> out;
  for (const auto& [path, train] : files) {
    Dataset ds = read_dataset(path);
    for (auto& r : ds.rows) {
      Row row;
      if (!library_tile(r.kernel_name, row.lib_m, row.lib_n)) continue;
      row.kernel = r.kernel;
      row.device = r.device;
      row.train = train;
      row.kernel_name = r.kernel_name;
      row.grid = r.grid[0] * r.grid[1] * r.grid[2];
      row.grid_z = r.grid[2];
      auto it = out.find(r.device);
      if (it == out.end()) {
        const Gpu* g = db.find(r.device);
        if (!g) throw InputError(path + ": device '" + r.device + "' is not in the GPU database");
        it = out.emplace(r.device, Sample{g, {}}).first;
      }
      it->second.rows.push_back(std::move(row));
    }
  }
  return out;
}

struct Score {
  int64_t rows = 0, tile_ok = 0, count_ok = 0, base_tile_ok = 0, base_count_ok = 0, tile128_ok = 0;
  double pct(int64_t v) const { return rows ? 100.0 * v / rows : 0; }
};

Score score(const Sample& s, const TileTable& table, int which /*0 all, 1 train, 2 test*/) {
  // Baseline: the GPU's most common library tile (over all its rows).
  std::map<std::pair<int64_t, int64_t>, int64_t> freq;
  for (const auto& r : s.rows) ++freq[{r.lib_m, r.lib_n}];
  std::pair<int64_t, int64_t> common{0, 0};
  int64_t best = -1;
  for (const auto& [t, c] : freq)
    if (c > best) best = c, common = t;
  Score sc;
  for (const auto& r : s.rows) {
    if ((which == 1 && !r.train) || (which == 2 && r.train)) continue;
    const Tiling t = tile_kernel(r.kernel, *s.gpu, table);
    ++sc.rows;
    sc.tile_ok += t.config.tb_m == r.lib_m && t.config.tb_n == r.lib_n;
    sc.count_ok += t.tiles == r.grid;
    sc.base_tile_ok += common.first == r.lib_m && common.second == r.lib_n;
    sc.tile128_ok += r.lib_m == 128 && r.lib_n == 128;  // a constant 128x128 tile
    const GemmShape& g = r.kernel.gemm;
    sc.base_count_ok += g.batch * ceil_div(g.m, common.first) * ceil_div(g.n, common.second) == r.grid;
  }
  return sc;
}

// ---- fitting ------------------------------------------------------------------------------

double objective(const std::vector<const Sample*>& samples, const TileTable& table) {
  double v = 0;
  for (const Sample* s : samples) {
    const Score sc = score(*s, table, 1);
    if (sc.rows) v += (double(sc.tile_ok) + double(sc.count_ok)) / double(sc.rows);
  }
  return v;
}

void fit_class(TileTable& table, size_t ci, const std::vector<const Sample*>& samples) {
  GemmClass& cls = table.classes[ci];
  std::vector<double*> params;
  std::vector<std::string> names;
  for (auto& c : cls.simt) {
    if (c.single) params.push_back(&c.efficiency), names.push_back(c.config.name + ".efficiency");
    if (c.batched) params.push_back(&c.batched_efficiency), names.push_back(c.config.name + ".batched_efficiency");
  }
  const size_t n_eff = params.size();
  params.push_back(&cls.cost.dram_fraction), names.push_back("dram_fraction");
  params.push_back(&cls.cost.tile_overhead_us), names.push_back("tile_overhead_us");
  params.push_back(&cls.cost.split_k_overhead_us), names.push_back("split_k_overhead_us");
  params.push_back(&cls.cost.min_k_per_split), names.push_back("min_k_per_split");
  // The fit scores FP32 rows (SIMT): split_k_max_fill is fitted only where it decides them.
  if (cls.cost.split_k_max_occupancy > 0)
    params.push_back(&cls.cost.split_k_max_occupancy), names.push_back("split_k_max_occupancy");
  else if (cls.cost.split_k_max_fill > 0)
    params.push_back(&cls.cost.split_k_max_fill), names.push_back("split_k_max_fill");
  double best = objective(samples, table);
  std::printf("fit %s: start objective %.4f (tile + count agreement summed over %zu GPUs)\n", cls.name.c_str(), best,
              samples.size());
  const double steps[] = {0.25, 0.5, 0.7, 0.85, 0.95, 1.05, 1.18, 1.4, 2.0, 4.0};
  for (int round = 0; round < 10; ++round) {
    bool improved = false;
    for (size_t p = 0; p < params.size(); ++p) {
      const double orig = *params[p];
      double best_v = orig;
      for (double f : steps) {
        *params[p] = orig * f;
        if (p < n_eff && *params[p] > 4) continue;
        const double o = objective(samples, table);
        if (o > best + 1e-9) best = o, best_v = *params[p], improved = true;
      }
      *params[p] = best_v;
    }
    std::printf("  round %d: objective %.4f\n", round + 1, best);
    std::fflush(stdout);
    if (!improved) break;
  }
  for (size_t p = 0; p < params.size(); ++p) std::printf("  %s = %.4g\n", names[p].c_str(), *params[p]);
}

void write_table(const std::string& path, const TileTable& table, const std::set<std::string>& fitted) {
  nlohmann::json j = nlohmann::json::parse(read_file(path));
  auto round4 = [](double v) { return std::round(v * 1e4) / 1e4; };
  for (const auto& cls : table.classes) {
    if (!fitted.count(cls.name)) continue;
    auto& jc = j["gemm"][cls.name];
    for (auto& c : jc["simt"])
      for (const auto& cand : cls.simt)
        if (c["name"] == cand.config.name) {
          c["efficiency"] = round4(cand.efficiency);
          c["batched_efficiency"] = round4(cand.batched_efficiency);
        }
    jc["cost"]["dram_fraction"] = round4(cls.cost.dram_fraction);
    jc["cost"]["tile_overhead_us"] = round4(cls.cost.tile_overhead_us);
    jc["cost"]["split_k_overhead_us"] = round4(cls.cost.split_k_overhead_us);
    jc["cost"]["min_k_per_split"] = std::round(cls.cost.min_k_per_split);
    if (cls.cost.split_k_max_fill > 0) jc["cost"]["split_k_max_fill"] = round4(cls.cost.split_k_max_fill);
    if (cls.cost.split_k_max_occupancy > 0) jc["cost"]["split_k_max_occupancy"] = round4(cls.cost.split_k_max_occupancy);
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(1) << "\n";
    if (!f) throw RuntimeError(tmp + ": cannot write");
  }
  fs::rename(tmp, path);
  std::printf("wrote %s\n", path.c_str());
}

// ---- features of the learned rules (--dump-features) ------------------------------------------

// Names of the rule features (tile_table.h, kGemmRuleFeatures) of a class whose distinct simt
// tiles are cls.rule.tiles: the tile trees' features, then the split tree's own.
std::vector<std::string> rule_feature_names(const GemmClass& cls) {
  std::vector<std::string> names = {"log2_m", "log2_n", "log2_k", "log2_batch", "log2_out_fill", "log2_m_over_n",
                                    "log2_out_tiles_over_sm", "log2_k_over_out_tiles"};
  for (int i : cls.rule.tiles) {
    const TileConfig& c = cls.simt[static_cast<size_t>(i)].config;
    const std::string dims = std::to_string(c.tb_m) + "x" + std::to_string(c.tb_n);
    names.push_back("last_wave_fill_" + dims);
    names.push_back("padding_efficiency_" + dims);
  }
  for (const char* n : {"log2_occupancy", "log2_waves", "log2_tb_m", "log2_tb_n", "log2_threads", "blocks_per_sm"})
    names.push_back(std::string("split: ") + n);
  for (int s = 1; s <= kGemmRuleSplitFills; ++s) names.push_back("split: last_wave_fill_split_" + std::to_string(s));
  return names;
}

// One train row as the rule fit sees it: the library's tile (its candidate name, the kernel name
// without the operand-layout suffix) and split factor (Grid z), the tile trees' features, each
// simt candidate's output tiles and, for a linear row, each candidate's split-tree features.
nlohmann::json feature_row(const Row& r, const std::string& label, const GemmClass& cls, const Gpu& gpu) {
  const GemmShape& g = r.kernel.gemm;
  const size_t n = 8 + 2 * cls.rule.tiles.size();
  double x[kGemmRuleFeatures];
  gemm_rule_features(g, cls, gpu, 0, x);
  nlohmann::json row = {{"op", r.kernel.op}, {"B", g.batch},       {"M", g.m},          {"N", g.k},
                        {"K", g.n},          {"tile", label},      {"tile_m", r.lib_m}, {"tile_n", r.lib_n},
                        {"grid", r.grid},    {"split", r.grid_z},  {"x", std::vector<double>(x, x + n)}};
  nlohmann::json out = nlohmann::json::object(), split = nlohmann::json::object();
  for (const GemmCandidate& c : cls.simt) {
    const int64_t out_tiles = g.batch * ceil_div(g.m, c.config.tb_m) * ceil_div(g.n, c.config.tb_n);
    out[c.config.name] = out_tiles;
    if (r.kernel.op != "linear") continue;
    double xs[kGemmRuleFeatures];
    std::copy(x, x + n, xs);
    gemm_rule_split_features(c, cls, gpu, out_tiles, xs);
    split[c.config.name] = std::vector<double>(xs, xs + n + kGemmRuleSplitFeatures);
  }
  row["out_tiles"] = std::move(out);
  if (r.kernel.op == "linear") row["split_x"] = std::move(split);
  return row;
}

// The input of tiling/data/fit_gemm_rules.py (README "Learned rules"): per class and training
// GPU, the train rows whose kernel is a cuBLAS sgemm, in file order (linear, then bmm).
// Classes: those named, in that order, else those with a learned rule.
void dump_features(const std::string& path, const std::map<std::string, Sample>& samples, const TileTable& table,
                   std::vector<std::string> names) {
  static const std::regex sgemm(R"((\w*sgemm_(\d+)x(\d+)\w*?)(_(nn|nt|tn|tt))?$)");
  if (names.empty())
    for (const GemmClass& c : table.classes)
      if (c.rule.present()) names.push_back(c.name);
  nlohmann::json classes = nlohmann::json::array();
  for (const std::string& name : names) {
    auto it = std::find_if(table.classes.begin(), table.classes.end(), [&](const GemmClass& c) { return c.name == name; });
    if (it == table.classes.end()) throw InputError("--class: no gemm class '" + name + "' in the tile table");
    const GemmClass& c = *it;
    GemmClass cls = c;  // the per-tile features exist also where the class has no rule yet
    cls.rule.tiles = gemm_rule_tiles(cls.simt);
    nlohmann::json cands = nlohmann::json::array();
    for (const GemmCandidate& k : cls.simt)
      cands.push_back({{"name", k.config.name}, {"tb_m", k.config.tb_m}, {"tb_n", k.config.tb_n}});
    for (const auto& [dev, s] : samples) {
      if (&table.gemm_class(s.gpu->arch) != &c) continue;
      nlohmann::json rows = nlohmann::json::array();
      for (const Row& r : s.rows) {
        std::smatch mt;
        if (r.train && std::regex_search(r.kernel_name, mt, sgemm)) rows.push_back(feature_row(r, mt[1], cls, *s.gpu));
      }
      if (rows.empty()) continue;
      classes.push_back({{"class", c.name}, {"device", dev}, {"features", rule_feature_names(cls)},
                         {"candidates", cands}, {"rows", std::move(rows)}});
    }
  }
  std::ofstream out(path);
  out << nlohmann::json{{"classes", std::move(classes)}}.dump() << "\n";
  if (!out) throw RuntimeError(path + ": cannot write");
}


// ---- the tile's effect on the latency (--rows) ------------------------------------------------

// The tiling of a SIMT GEMM on a given tb_m x tb_n: the class's cost model with that tile as
// its only candidate (the class's candidate of that shape, else a copy of its first one
// reshaped), its split-K chosen as for any tile. `table` is a scratch copy of the tile table.
Tiling forced_tiling(const Kernel& k, const Gpu& gpu, TileTable& table, int64_t tm, int64_t tn) {
  const GemmClass& found = table.gemm_class(gpu.arch);
  GemmClass& cls = table.classes[size_t(&found - table.classes.data())];
  const std::vector<GemmCandidate> simt = cls.simt;
  const GemmRule rule = cls.rule;
  GemmCandidate c = simt.front();
  for (const auto& s : simt)
    if (s.config.tb_m == tm && s.config.tb_n == tn) {
      c = s;
      break;
    }
  c.config.tb_m = tm;
  c.config.tb_n = tn;
  c.single = c.batched = true;
  cls.simt = {c};
  cls.rule = GemmRule{};
  const Tiling t = tile_kernel(k, gpu, table);
  cls.simt = simt;
  cls.rule = rule;
  return t;
}

struct Errors {
  std::vector<double> ratio;  // predicted / measured
  int64_t same_tile = 0;
  void add(double pred, double meas, bool same) {
    ratio.push_back(pred / meas);
    same_tile += same;
  }
  double mape() const {
    double s = 0;
    for (double r : ratio) s += std::fabs(r - 1);
    return ratio.empty() ? 0 : 100 * s / double(ratio.size());
  }
  double median() const {
    std::vector<double> v = ratio;
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  }
};

// --rows: each FP32 GEMM row with a library tile in its kernel name, predicted on three tilings.
int price_rows(const std::string& path, const std::string& column, Timing timing) {
  const Dataset d = read_dataset(path);
  const int col = d.column(column);
  if (col < 0) throw InputError(path + ": no column '" + column + "'");
  const GpuDatabase& db = GpuDatabase::builtin();
  TileTable scratch = TileTable::builtin();
  PrecisionOptions o;
  o.timing = timing;
  o.fewer_sm_tilings = false;  // each tiling priced as given
  const auto predictor = make_neusight_predictor("", o);
  static const char* kWays[] = {"derived tile", "library's tile", "constant 128x128"};
  std::map<std::string, Errors[3]> by_op;
  for (const DatasetRow& r : d.rows) {
    int64_t lm = 0, ln = 0;
    const double meas = r.fields[size_t(col)].empty() ? 0 : std::atof(r.fields[size_t(col)].c_str());
    if (r.kernel.cls != KernelClass::gemm || r.kernel.dtype != DType::f32 || !(meas > 0) ||
        !library_tile(r.kernel_name, lm, ln))
      continue;
    const Gpu* gpu = db.find(r.device);
    if (!gpu) throw InputError(path + ": device '" + r.device + "' is not in the GPU database");
    const Tiling tilings[3] = {tile_kernel(r.kernel, *gpu), forced_tiling(r.kernel, *gpu, scratch, lm, ln),
                               forced_tiling(r.kernel, *gpu, scratch, 128, 128)};
    for (int w = 0; w < 3; ++w) {
      const double pred = predictor->predict({r.kernel}, {tilings[w]}, *gpu)[0].latency_ms;
      const bool same = tilings[w].config.tb_m == lm && tilings[w].config.tb_n == ln;
      by_op[r.kernel.gemm.batch > 1 ? "bmm" : "linear"][w].add(pred, meas, same);
    }
  }
  std::printf("%s (%s, %s timing): FP32 GEMMs priced by the shipped weights on three tilings; MAPE %% / median "
              "predicted/measured (same tile as the library %%)\n",
              path.c_str(), column.c_str(), timing_name(timing));
  std::printf("%-8s %6s", "op", "rows");
  for (const char* w : kWays) std::printf(" %30s", w);
  std::printf("\n");
  for (const auto& [op, e] : by_op) {
    std::printf("%-8s %6zu", op.c_str(), e[0].ratio.size());
    for (int w = 0; w < 3; ++w)
      std::printf("        %6.1f / %4.2f (%5.1f%%)", e[w].mape(), e[w].median(),
                  100.0 * double(e[w].same_tile) / double(std::max<size_t>(e[w].ratio.size(), 1)));
    std::printf("\n");
  }
  return 0;
}

// --shown-tile: how far the tile a report shows is from the tiling its latency is priced on.
// A tensor-core GEMM's latency is the least price over the tiles the library offers (and the
// bounds of GPUs of its kind with fewer SMs); the tile shown is the cost model's unless an
// offered one is priced faster by more than the networks' own spread (predictor.h
// Prediction::tiling). For random BF16 projections (seed fixed) on five GPUs: how often the
// cost model's tile is shown, and the shown tile's own price (on it alone) over the latency.
int shown_tile_gap() {
  PrecisionOptions alone{Timing::kernel};
  alone.fastest_tile = false;
  alone.fewer_sm_tilings = false;
  const auto bare = make_neusight_predictor("", alone);
  const auto full = make_neusight_predictor("", PrecisionOptions{Timing::kernel});
  const int64_t dims[] = {1, 8, 16, 64, 128, 256, 512, 1024, 2048, 4096, 5120, 8192, 11008, 14336, 16384, 28672};
  const size_t n_dims = sizeof(dims) / sizeof(dims[0]);
  std::printf("BF16 linear GEMMs, 400 random shapes a GPU (dims of LLM projections; the streamed ones left out), "
              "kernel timing;\ntile shown: the cost model's or another offered; the shown tile's own price over the "
              "latency (median, 90th percentile, largest)\n%-10s %5s %11s %8s %7s %6s %6s\n",
              "gpu", "GEMMs", "cost model", "another", "median", "p90", "max");
  for (const char* name : {"a100-80gb", "h100", "l40s", "b200", "mi300x"}) {
    const Gpu g = GpuDatabase::builtin().resolve(name);
    std::mt19937 rng(7);
    std::vector<double> gaps;
    int own = 0, other = 0;
    for (int i = 0; i < 400; ++i) {
      auto pick = [&] { return std::to_string(dims[rng() % n_dims]); };
      const Kernel k =
          kernel_from_dataset("linear", {{"B", "1"}, {"M", pick()}, {"N", pick()}, {"K", pick()}, {"dtype", "bf16"}});
      const Tiling t = tile_kernel(k, g);
      const Prediction f = full->predict({k}, {t}, g)[0];
      if (f.streamed) continue;
      gaps.push_back(bare->predict({k}, {f.tiling ? *f.tiling : t}, g)[0].latency_ms / f.latency_ms);
      ++(f.tiling ? other : own);
    }
    if (gaps.empty()) continue;
    std::sort(gaps.begin(), gaps.end());
    std::printf("%-10s %5zu %11d %8d %7.3f %6.3f %6.3f\n", name, gaps.size(), own, other, gaps[gaps.size() / 2],
                gaps[gaps.size() * 9 / 10], gaps.back());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shared = std::getenv("NEUSIGHT_SHARED_DIR") ? std::getenv("NEUSIGHT_SHARED_DIR") : NEUSIGHT_SHARED_DIR;
  std::string tiles = NEUSIGHT_TILES_JSON, write;
  bool fit = false;
  std::string only;  // --class NAME: fit only this architecture class
  std::string dump, dump_features_path, rows_csv, column = "Latency", timing = "eager";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shared" && i + 1 < argc) shared = argv[++i];
    else if (a == "--tiles" && i + 1 < argc) tiles = argv[++i];
    else if (a == "--write" && i + 1 < argc) write = argv[++i];
    else if (a == "--fit") fit = true;
    else if (a == "--class" && i + 1 < argc) only = argv[++i];
    else if (a == "--dump" && i + 1 < argc) dump = argv[++i];
    else if (a == "--dump-features" && i + 1 < argc) dump_features_path = argv[++i];
    else if (a == "--rows" && i + 1 < argc) rows_csv = argv[++i];
    else if (a == "--column" && i + 1 < argc) column = argv[++i];
    else if (a == "--timing" && i + 1 < argc) timing = argv[++i];
    else if (a == "--shown-tile") return shown_tile_gap();
    else {
      std::fprintf(stderr, "usage: tile_agreement [--shared DIR] [--tiles tiles.json] [--fit [--class NAME] [--write tiles.json]] [--dump rows.csv]\n"
                   "       tile_agreement --dump-features FILE [--class NAME,...]\n"
                   "       tile_agreement --rows FILE.csv [--column NAME] [--timing eager|device|kernel]\n"
                   "       tile_agreement --shown-tile\n");
      return 2;
    }
  }
  try {
    if (!rows_csv.empty()) {
      Timing t;
      if (!parse_timing(timing, t)) throw InputError("--timing: '" + timing + "' is not eager, device or kernel");
      return price_rows(rows_csv, column, t);
    }
    const auto t0 = std::chrono::steady_clock::now();
    TileTable table = TileTable::parse(read_file(tiles), tiles);
    const auto samples = load_rows(shared, GpuDatabase::builtin());
    if (!dump_features_path.empty()) {
      std::vector<std::string> classes;
      std::stringstream names(only);
      for (std::string name; std::getline(names, name, ',');)
        if (!name.empty()) classes.push_back(name);
      dump_features(dump_features_path, samples, table, classes);
      std::printf("wrote %s\n", dump_features_path.c_str());
      return 0;
    }
    if (fit) {
      std::set<std::string> fitted;
      for (size_t ci = 0; ci < table.classes.size(); ++ci) {
        std::vector<const Sample*> train;
        for (const auto& [dev, s] : samples) {
          bool has_train = false;
          for (const auto& r : s.rows) has_train |= r.train;
          if (has_train && &table.gemm_class(s.gpu->arch) == &table.classes[ci]) train.push_back(&s);
        }
        if (train.empty() || (!only.empty() && table.classes[ci].name != only)) continue;
        fit_class(table, ci, train);
        fitted.insert(table.classes[ci].name);
      }
      if (!write.empty()) write_table(write, table, fitted);
    }
    if (!dump.empty()) {  // every row with the library's and the derived choice, for study
      std::ofstream out(dump);
      out << "device,split,op,B,M,N,K,lib_tile,lib_grid,tile,tiles,split_k\n";
      for (const auto& [dev, s] : samples)
        for (const auto& r : s.rows) {
          const Tiling t = tile_kernel(r.kernel, *s.gpu, table);
          const GemmShape& g = r.kernel.gemm;
          out << dev << "," << (r.train ? "train" : "test") << "," << r.kernel.op << "," << g.batch << "," << g.m << ","
              << g.k << "," << g.n << "," << r.lib_m << "x" << r.lib_n << "," << r.grid << "," << t.tile << ","
              << t.tiles << "," << t.config.split_k << "\n";
        }
    }
    std::printf("GEMM rows of neusight-data/kernels (linear + bmm, fp32); tile = threadblock MxN equals the "
                "library's, count = derived tiles equal Grid x*y*z; base = the GPU's most common library tile "
                "(an oracle constant); 128x128 = that constant tile\n");
    std::printf("%-24s %-6s %6s %8s %8s %10s %10s %9s  %s\n", "GPU", "split", "rows", "tile%", "count%", "base tile%",
                "base cnt%", "128x128%", "arch");
    for (const auto& [dev, s] : samples) {
      for (int which : {1, 2, 0}) {
        const Score sc = score(s, table, which);
        if (!sc.rows) continue;
        std::printf("%-24s %-6s %6lld %8.1f %8.1f %10.1f %10.1f %9.1f  %s\n", dev.c_str(),
                    which == 1 ? "train" : which == 2 ? "test" : "all", static_cast<long long>(sc.rows),
                    sc.pct(sc.tile_ok), sc.pct(sc.count_ok), sc.pct(sc.base_tile_ok), sc.pct(sc.base_count_ok),
                    sc.pct(sc.tile128_ok), s.gpu->arch.c_str());
      }
    }
    std::vector<std::string> ruled;
    for (const auto& c : table.classes)
      if (c.rule.present())
        ruled.push_back(c.name + (c.rule.single_tile.empty() ? " (batched)" : c.rule.batched_tile.empty() ? " (single)" : ""));
    if (!ruled.empty()) {
      std::printf("learned rules (tiles.json gemm.<class>.rule):");
      for (const auto& r : ruled) std::printf(" %s", r.c_str());
      std::printf("; their train rows are in-sample, cross-validated figures: tiling/data/fit_gemm_rules.py --cv\n");
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("(%.1f s)\n", secs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tile_agreement: %s\n", e.what());
    return 1;
  }
  return 0;
}
