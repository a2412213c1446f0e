// unit-gpu-database.cpp - every entry of hardware/data/gpus.json is complete and self-consistent.
#include <unistd.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "neusight/gpu.h"
#include "test_util.h"

using namespace neusight;
namespace fs = std::filesystem;

namespace {

std::string norm(std::string s) {
  for (auto& c : s) c = (c == '_' || c == ' ') ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// log2 distance of a per-SM-per-clock rate from the nearest power of two.
double pow2_distance(double peak_gflops, const Gpu& g) {
  const double per_clk = peak_gflops * 1e9 / (g.num_sm * g.boost_mhz * 1e6);
  const double l = std::log2(per_clk);
  return std::fabs(l - std::round(l));
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = (fs::temp_directory_path() / ("neusight-unit-" + std::to_string(::getpid()) + "-" + name)).string();
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("gpu database: every entry is complete and its peaks follow from SMs x clock x per-SM rates") {
  const GpuDatabase& db = GpuDatabase::builtin();
  REQUIRE(db.all().size() >= 30);
  for (const Gpu& g : db.all()) {
    INFO("GPU " << g.name);
    CHECK(!g.source.empty());
    CHECK(!g.aliases.empty());
    CHECK((g.vendor == "nvidia" || g.vendor == "amd"));
    CHECK((g.arch.rfind(g.vendor == "amd" ? "gfx" : "sm_", 0) == 0));
    CHECK(g.num_sm > 0);
    CHECK(g.boost_mhz > 500);
    CHECK(g.boost_mhz < 3500);
    CHECK(g.mem_gb > 0);
    CHECK(g.mem_bw_gbps > 0);
    CHECK(g.l2_mb > 0);
    CHECK(g.smem_per_sm_kb >= 48);
    CHECK(g.regs_per_sm >= 65536);
    CHECK(g.max_blocks_per_sm >= 16);
    CHECK(g.max_threads_per_sm >= 1024);
    CHECK(g.pcie_gbps > 0);
    // Board power (W) and process node (nm) for the power-limited clock (precision.h).
    CHECK(g.board_power_w >= 50);
    CHECK(g.board_power_w <= 1500);
    CHECK(g.process_nm >= 3);
    CHECK(g.process_nm <= 16);
    CHECK((g.nvlink.empty() == (g.nvlink_gbps == 0)));
    // Every GPU with NVLink / Infinity Fabric says how many GPUs one domain joins.
    CHECK((g.nvlink.empty() == (g.nvlink_domain == 0)));
    if (!g.nvlink.empty()) CHECK(g.source.find("NVLink domain") != std::string::npos);
    // FP32 peak = SMs x FP32 lanes x 2 (FMA) x clock, within 15% (datasheets quote other clocks).
    const double fp32 = g.num_sm * g.fp32_cores_per_sm * 2.0 * g.boost_mhz / 1000.0;
    CHECK(g.fp32_gflops == doctest::Approx(fp32).epsilon(0.15));
    // Dense matrix peaks: a power-of-two number of FLOPs per clock per SM (within ~19%).
    for (double p : {g.tf32_gflops, g.fp16_gflops, g.bf16_gflops, g.fp8_gflops, g.fp4_gflops, g.int8_gops, g.fp32_matrix_gflops})
      if (p > 0) CHECK(pow2_distance(p, g) < 0.25);
    // Precision ladder: TF32 = FP16 / 2, FP8 = 2 x FP16, BF16 <= FP16, all above FP32 SIMT.
    if (g.tf32_gflops > 0 && g.fp16_gflops > 0) CHECK(g.tf32_gflops * 2 <= g.fp16_gflops * 1.02);
    if (g.fp8_gflops > 0) CHECK(g.fp8_gflops == doctest::Approx(2 * g.fp16_gflops).epsilon(0.02));
    if (g.fp4_gflops > 0) CHECK(g.fp4_gflops == doctest::Approx(2 * g.fp8_gflops).epsilon(0.02));
    CHECK(g.bf16_gflops <= g.fp16_gflops * 1.001);
    if (g.fp16_gflops > 0) CHECK(g.fp16_gflops > g.fp32_gflops);
    // Compute-to-bandwidth balance of a real GPU.
    CHECK(g.fp32_gflops / g.mem_bw_gbps > 2);
    CHECK(g.fp32_gflops / g.mem_bw_gbps < 200);
  }
}

TEST_CASE("gpu database: aliases are unique, short aliases lower case without vendor") {
  const GpuDatabase& db = GpuDatabase::builtin();
  std::map<std::string, std::string> seen;
  for (const Gpu& g : db.all()) {
    std::set<std::string> own = {norm(g.name)};
    for (const auto& a : g.aliases) own.insert(norm(a));
    for (const auto& k : own) {
      INFO("alias " << k << " of " << g.name);
      CHECK(seen.count(k) == 0);
      seen[k] = g.name;
    }
    const std::string& s = g.alias();
    INFO("short alias " << s);
    CHECK(s == norm(s));
    CHECK(s.find("nvidia") == std::string::npos);
    CHECK(s.find("amd") == std::string::npos);
    CHECK(s.find("tesla") == std::string::npos);
  }
  // The GPUs the project promises (CLI_CONTRACT).
  for (const char* a : {"p100", "v100", "v100-sxm", "v100-pcie", "t4", "a10", "a10g", "a100-40gb", "a100-80gb", "a100-sxm-80gb",
                        "a100", "a40", "a6000", "l4", "l40s", "rtx3090", "rtx4090", "rtx5090", "h100", "h100-pcie", "h100-nvl",
                        "h200", "h20", "b200", "b100", "gb200", "mi100", "mi210", "mi250x", "mi300x", "mi325x"}) {
    INFO(a);
    CHECK(db.find(a) != nullptr);
  }
  CHECK(db.resolve("h100").name == "NVIDIA H100 80GB HBM3");
}

TEST_CASE("gpu database: names resolve whatever their separators, and an unknown name suggests the GPUs of its model number") {
  const GpuDatabase& db = GpuDatabase::builtin();
  // Without separators every name and alias still names one GPU.
  std::map<std::string, std::string> seen;
  for (const Gpu& g : db.all()) {
    std::set<std::string> own;
    for (const auto& a : g.aliases) own.insert(a);
    own.insert(g.name);
    std::set<std::string> keys;
    for (const auto& a : own) {
      std::string k;
      for (unsigned char ch : a)
        if (std::isalnum(ch)) k += char(std::tolower(ch));
      keys.insert(k);
    }
    for (const auto& k : keys) {
      INFO(k << " of " << g.name);
      CHECK(seen.count(k) == 0);
      seen[k] = g.name;
    }
  }
  CHECK(db.resolve("rtx-4090").name == "NVIDIA GeForce RTX 4090");
  CHECK(db.resolve("RTX 4090").name == "NVIDIA GeForce RTX 4090");
  CHECK(db.resolve("h100sxm").name == "NVIDIA H100 80GB HBM3");
  CHECK(db.resolve("H100 SXM5").name == "NVIDIA H100 80GB HBM3");
  CHECK(db.resolve("A100 SXM4 80GB").name == "NVIDIA A100-SXM4-80GB");
  CHECK(db.resolve("h800").name == "NVIDIA H800");
  CHECK(db.resolve("a800").name == "NVIDIA A800-SXM4-80GB");
  CHECK(db.resolve("a30").name == "NVIDIA A30");
  // One line naming three GPUs, the one that carries the name's model number first.
  auto hint = [&](const std::string& name) {
    try {
      db.resolve(name);
    } catch (const InputError& e) {
      const std::string m = e.what();
      const size_t at = m.find("closest: ");
      return at == std::string::npos ? m : m.substr(at + 9, m.find(';', at) - at - 9);
    }
    return std::string("resolved");
  };
  CHECK(hint("4090") == "rtx4090, p100, v100");
  CHECK(hint("NVIDIA H100").rfind("h100, ", 0) == 0);
  CHECK(hint("mi300").rfind("mi300x, ", 0) == 0);
  CHECK(hint("h100-hbm2e").rfind("h100", 0) == 0);
  CHECK(hint("nvidia b300").rfind("b", 0) == 0);
  CHECK_THROWS_AS(db.resolve("xyz"), InputError);
}

TEST_CASE("gpu database: a GPU list resolves each name in order, all stands for the database") {
  const GpuDatabase& db = GpuDatabase::builtin();
  auto names = [](const std::vector<Gpu>& gpus) {
    std::vector<std::string> out;
    for (const Gpu& g : gpus) out.push_back(g.name);
    return out;
  };
  const std::vector<std::string> every = names(db.all());
  CHECK(names(db.resolve_list("all")) == every);
  CHECK(names(db.resolve_list("All")) == every);
  CHECK(names(db.resolve_list("h100,l4")) == std::vector<std::string>{"NVIDIA H100 80GB HBM3", "NVIDIA L4"});
  std::vector<std::string> t4_then_all{"Tesla T4"};
  t4_then_all.insert(t4_then_all.end(), every.begin(), every.end());
  CHECK(names(db.resolve_list("t4,all")) == t4_then_all);
  CHECK(GpuDatabase::names_all("h100,all"));
  CHECK_FALSE(GpuDatabase::names_all("h100,l4"));
  CHECK_FALSE(GpuDatabase::names_all("tall"));
  for (const std::string bad : {"", ",", "h100,", ",all", "h100,,l4"}) {
    INFO(bad);
    CHECK_THROWS_WITH_AS(db.resolve_list(bad), doctest::Contains("empty GPU name"), InputError);
  }
  CHECK_THROWS_AS(db.resolve_list("h100,xyz"), InputError);
}

// Entries whose SM structure the database corrects against the dataset's device JSON. For them
// the totals are compared instead of Num_Sm: SMs x FP32 lanes, and as for every entry the FP32
// rate, clock, memory, bandwidth and L2.
//   Tesla P4: its GP104 chip has 20 SMs of 128 FP32 lanes (GP100's SMs have 64); the
//   dataset's JSON describes it as 40 SMs of 64 lanes, the same 2,560 lanes.
// Entries with dataset_num_sm / dataset_fp32_gflops / dataset_mem_bw_gbps (the L4: the dataset's
// JSON gives the full die's 60 SMs and their FP32 peak, the card enables 58; the H100 SXM5:
// 3,430 GB/s where its datasheet says 3.35 TB/s) keep the file's numbers beside the spec
// sheet's, and the file reads as the entry.
const std::set<std::string> kSmStructureCorrected = {"Tesla P4"};

TEST_CASE("gpu database: device_configs entries keep the dataset's numbers (the spec sheet's beside them) and read as the entry" * doctest::test_suite("shared-data")) {
  if (!test::have_dataset("device_configs")) return;
  const GpuDatabase& db = GpuDatabase::builtin();
  int n = 0;
  for (const auto& e : fs::directory_iterator(test::dataset_dir() + "/device_configs")) {
    std::ifstream f(e.path());
    const auto j = nlohmann::json::parse(f);
    const std::string dev = j["Device"].get<std::string>();
    INFO(dev);
    const Gpu* g = db.find(dev);
    REQUIRE(g != nullptr);
    const double dataset_fp32 = (j.contains("SingleFLOPs") ? j["SingleFLOPs"] : j["SingleFLOPsVEC"]).get<double>();
    if (kSmStructureCorrected.count(dev)) {
      CHECK(g->num_sm * g->fp32_cores_per_sm == j["Num_Sm"].get<int>() * j["Core_Per_SM"].get<int>());
    } else if (g->dataset_num_sm > 0) {
      // The spec sheet's SMs and FP32 peak where the file's differ (the L4), the file's kept
      // beside them.
      CHECK(g->dataset_num_sm == j["Num_Sm"].get<int>());
      CHECK(g->dataset_fp32_gflops == dataset_fp32);
      CHECK(g->num_sm < g->dataset_num_sm);
      CHECK(g->fp32_gflops == doctest::Approx(2e-3 * g->num_sm * g->fp32_cores_per_sm * g->boost_mhz).epsilon(0.002));
    } else {
      CHECK(g->num_sm == j["Num_Sm"].get<int>());
    }
    CHECK(g->boost_mhz == j["Freq"].get<double>());
    CHECK(g->mem_gb == j["Dev_Mem"].get<double>());
    CHECK((g->dataset_mem_bw_gbps > 0 ? g->dataset_mem_bw_gbps : g->mem_bw_gbps) == j["Mem_Bw"].get<double>());
    CHECK(g->l2_mb == j["L2Cache"].get<double>());
    if (g->dataset_num_sm == 0) CHECK(g->fp32_gflops == dataset_fp32);
    if (j.contains("SingleFLOPsMM")) CHECK(g->fp32_matrix_gflops == j["SingleFLOPsMM"].get<double>());
    // `--gpu path/to/device.json` and `--gpu "<its Device name>"` predict the same: the file
    // reads as the entry (the AMD form counts SIMD units in Core_Per_SM, the P4's splits its
    // lanes 40 x 64).
    const Gpu got = load_device_json(e.path().string());
    CHECK(got.vendor == g->vendor);
    CHECK(got.arch == g->arch);
    CHECK(got.num_sm == g->num_sm);
    CHECK(got.fp32_cores_per_sm == g->fp32_cores_per_sm);
    CHECK(got.fp32_gflops == g->fp32_gflops);
    CHECK(got.mem_bw_gbps == g->mem_bw_gbps);
    CHECK(got.fp32_matrix_gflops == g->fp32_matrix_gflops);
    CHECK(got.board_power_w == g->board_power_w);
    ++n;
  }
  CHECK(n >= 12);
}

TEST_CASE("gpu database: a dataset number the spec sheet corrects reads as the spec sheet's, field by field") {
  // The H100's device config as the dataset writes it (3,430 GB/s): the datasheet's 3.35 TB/s;
  // edited in another field (a what-if), the bandwidth still reads as the datasheet's, while an
  // edited bandwidth is the user's own.
  const Gpu& h100 = GpuDatabase::builtin().resolve("h100");
  REQUIRE(h100.dataset_mem_bw_gbps == 3430);
  CHECK(h100.mem_bw_gbps == 3350);
  const std::string base = R"({"Device": "NVIDIA H100 80GB HBM3", "Dev_Mem": 80, "Num_Sm": 132, "Core_Per_SM": 128,
                               "Freq": 1980, "L2Cache": 50, )";
  CHECK(parse_gpu_json(base + R"("Mem_Bw": 3430, "SingleFLOPs": 66908})", "h100").mem_bw_gbps == 3350);
  const Gpu faster = parse_gpu_json(base + R"("Mem_Bw": 3430, "SingleFLOPs": 133816})", "x2");
  CHECK(faster.mem_bw_gbps == 3350);
  CHECK(faster.fp32_gflops == 133816);
  CHECK(parse_gpu_json(base + R"("Mem_Bw": 1715, "SingleFLOPs": 66908})", "half").mem_bw_gbps == 1715);
  // The L4's: 60 SMs of the full die and their peak read as the card's 58 and 30.3 TFLOPS.
  const Gpu l4 = parse_gpu_json(R"({"Device": "NVIDIA L4", "Dev_Mem": 24, "Mem_Bw": 300, "Num_Sm": 60,
                                    "Core_Per_SM": 128, "Freq": 2040, "SingleFLOPs": 31334, "L2Cache": 48})",
                                "l4");
  CHECK(l4.num_sm == 58);
  CHECK(l4.fp32_gflops == 30300);
  // The database entry's JSON (gpus --json) carries the dataset's numbers and reads back alike.
  for (const auto& x : nlohmann::json::parse(format_gpus_json(GpuDatabase::builtin())))
    if (x["name"] == "NVIDIA H100 80GB HBM3") {
      CHECK(x["dataset_mem_bw_gbps"] == 3430);
      CHECK(parse_gpu_json(x.dump(), "entry").dataset_mem_bw_gbps == 3430);
    }
}

TEST_CASE("gpu database: a device JSON's Core_Per_SM counts lanes, or SIMD units in the AMD form") {
  const std::string amd = R"({"Device": "Some CDNA GPU", "Dev_Mem": 64, "Mem_Bw": 1640, "Num_Sm": 104,)"
                          R"( "Core_Per_SM": 4, "Freq": 1700, "SingleFLOPsMM": 45300, "SingleFLOPsVEC": 22600, "L2Cache": 16})";
  const Gpu a = parse_gpu_json(amd, "amd");
  CHECK(a.vendor == "amd");
  CHECK(a.fp32_cores_per_sm == 4 * kAmdSimdLanes);
  // 104 CUs x 64 lanes x 2 FLOP x 1.7 GHz: the JSON's own vector peak.
  CHECK(2.0 * a.num_sm * a.fp32_cores_per_sm * a.boost_mhz / 1e3 == doctest::Approx(a.fp32_gflops).epsilon(0.01));
  // CDNA3 counts dual-issue FP32 in its vector peak: 304 CUs at 2.1 GHz, 163.4 TFLOPS, 128
  // lanes' worth per CU, whatever Core_Per_SM says.
  const std::string cdna3 = R"({"Device": "Some CDNA3 GPU", "Dev_Mem": 192, "Mem_Bw": 5300, "Num_Sm": 304,)"
                            R"( "Core_Per_SM": 4, "Freq": 2100, "SingleFLOPsMM": 163400, "SingleFLOPsVEC": 163400, "L2Cache": 4})";
  CHECK(parse_gpu_json(cdna3, "cdna3").fp32_cores_per_sm == 128);
  const std::string nv = R"({"Device": "Some GPU", "Dev_Mem": 16, "Mem_Bw": 320, "Num_Sm": 40, "Core_Per_SM": 64,)"
                         R"( "Freq": 1590, "SingleFLOPs": 8141, "L2Cache": 4})";
  CHECK(parse_gpu_json(nv, "nv").fp32_cores_per_sm == 64);
  // The dataset's P4 (40 SMs of 64 lanes) takes its die's split, 20 of 128; a what-if JSON
  // with other lanes keeps its own.
  const std::string p4 = R"({"Device": "Tesla P4", "Dev_Mem": 8, "Mem_Bw": 192, "Num_Sm": 40, "Core_Per_SM": 64,)"
                         R"( "Freq": 1113, "SingleFLOPs": 5699, "L2Cache": 2})";
  const Gpu p = parse_gpu_json(p4, "p4");
  CHECK(p.num_sm == 20);
  CHECK(p.fp32_cores_per_sm == 128);
  std::string more = p4;
  more.replace(more.find("\"Num_Sm\": 40"), 12, "\"Num_Sm\": 80");
  const Gpu m = parse_gpu_json(more, "p4 x2");
  CHECK(m.num_sm == 80);
  CHECK(m.fp32_cores_per_sm == 64);
}

TEST_CASE("gpu database: format_device_json writes each entry as a device JSON that reads back as it") {
  for (const Gpu& want : GpuDatabase::builtin().all()) {
    CAPTURE(want.name);
    const std::string text = format_device_json(want);
    const auto j = nlohmann::json::parse(text);
    CHECK(j["Device"] == want.name);
    CHECK(j.contains("SingleFLOPs") == (want.vendor != "amd"));
    const Gpu got = parse_gpu_json(text, "device JSON");
    CHECK(got.name == want.name);
    CHECK(got.vendor == want.vendor);
    CHECK(got.arch == want.arch);
    CHECK(got.num_sm == want.num_sm);
    CHECK(got.fp32_cores_per_sm == want.fp32_cores_per_sm);
    CHECK(got.boost_mhz == want.boost_mhz);
    CHECK(got.fp32_gflops == want.fp32_gflops);
    CHECK(got.fp32_matrix_gflops == want.fp32_matrix_gflops);
    CHECK(got.fp16_gflops == want.fp16_gflops);
    CHECK(got.mem_gb == want.mem_gb);
    CHECK(got.mem_bw_gbps == want.mem_bw_gbps);
    CHECK(got.l2_mb == want.l2_mb);
    CHECK(got.board_power_w == want.board_power_w);
  }
}

TEST_CASE("gpu database: malformed or incomplete files are rejected with a clear message") {
  const std::string good =
      R"({"name": "X", "aliases": ["x"], "arch": "sm_80", "num_sm": 10, "boost_mhz": 1000, "fp32_gflops": 1280,)"
      R"( "mem_gb": 8, "mem_bw_gbps": 100, "l2_mb": 4})";
  CHECK(GpuDatabase::load(write_temp("db-ok.json", "{\"gpus\": [" + good + "]}")).all().size() == 1);
  CHECK_THROWS_WITH_AS(GpuDatabase::load(write_temp("db-empty.json", R"({"gpus": []})")), doctest::Contains("empty"),
                       InputError);
  CHECK_THROWS_WITH_AS(GpuDatabase::load(write_temp("db-nolist.json", R"({"gpu": 1})")), doctest::Contains("'gpus'"),
                       InputError);
  CHECK_THROWS_WITH_AS(GpuDatabase::load(write_temp("db-broken.json", R"({"gpus": [)")), doctest::Contains("malformed"),
                       InputError);
  std::string no_sm = good;
  no_sm.replace(no_sm.find("\"num_sm\": 10, "), 14, "");
  CHECK_THROWS_WITH_AS(GpuDatabase::load(write_temp("db-nosm.json", "{\"gpus\": [" + no_sm + "]}")),
                       doctest::Contains("num_sm"), InputError);
  std::string neg = good;
  neg.replace(neg.find("\"l2_mb\": 4"), 10, "\"l2_mb\": -4");
  CHECK_THROWS_AS(GpuDatabase::load(write_temp("db-neg.json", "{\"gpus\": [" + neg + "]}")), InputError);
  std::string str = good;
  str.replace(str.find("\"mem_gb\": 8"), 11, "\"mem_gb\": \"8\"");
  CHECK_THROWS_WITH_AS(GpuDatabase::load(write_temp("db-str.json", "{\"gpus\": [" + str + "]}")),
                       doctest::Contains("mem_gb"), InputError);
  CHECK_THROWS_WITH_AS(GpuDatabase::load(write_temp("db-dup.json", "{\"gpus\": [" + good + ", " + good + "]}")),
                       doctest::Contains("more than once"), InputError);
  std::string arch = good;
  arch.replace(arch.find("\"sm_80\""), 7, "\"\"");
  CHECK_THROWS_WITH_AS(GpuDatabase::load(write_temp("db-arch.json", "{\"gpus\": [" + arch + "]}")),
                       doctest::Contains("arch"), InputError);
}

TEST_CASE("gpu database: format_gpus_json entries read back as the same GPU, malformed device JSON text is rejected") {
  const GpuDatabase& db = GpuDatabase::builtin();
  const nlohmann::json all = nlohmann::json::parse(format_gpus_json(db));
  REQUIRE(all.size() == db.all().size());
  for (size_t i = 0; i < all.size(); ++i) {
    const Gpu& want = db.all()[i];
    const Gpu got = parse_gpu_json(all[i].dump(), "entry");
    CAPTURE(want.name);
    CHECK(got.name == want.name);
    CHECK(got.aliases == want.aliases);
    CHECK(got.arch == want.arch);
    CHECK(got.vendor == want.vendor);
    CHECK(got.num_sm == want.num_sm);
    CHECK(got.fp32_gflops == want.fp32_gflops);
    CHECK(got.fp16_gflops == want.fp16_gflops);
    CHECK(got.mem_bw_gbps == want.mem_bw_gbps);
    CHECK(got.l2_mb == want.l2_mb);
    CHECK(got.board_power_w == want.board_power_w);
    CHECK(got.process_nm == want.process_nm);
    CHECK(got.nvlink_gbps == want.nvlink_gbps);
    CHECK(got.nvlink_domain == want.nvlink_domain);
    CHECK(got.source == want.source);
  }
  CHECK_THROWS_WITH_AS(parse_gpu_json("{\"Device\": ", "gpu dict"), "gpu dict: malformed JSON", InputError);
  CHECK_THROWS_WITH_AS(parse_gpu_json("{}", "gpu dict"), "gpu dict: missing field 'Device'", InputError);
}

TEST_CASE("gpu database: counts are whole numbers up to 2^20, spec numbers 0 or 1e-3 to 1e12") {
  const auto dev = [](const std::string& sm, const std::string& lanes, const std::string& freq) {
    return R"({"Device": "X", "Dev_Mem": 80, "Mem_Bw": 3350, "Num_Sm": )" + sm + R"(, "Core_Per_SM": )" + lanes +
           R"(, "Freq": )" + freq + R"(, "SingleFLOPs": 66900, "L2Cache": 50})";
  };
  CHECK(parse_gpu_json(dev("132", "128", "1980"), "d").fp32_cores_per_sm == 128);
  CHECK(parse_gpu_json(dev("1048576", "128", "1980"), "d").num_sm == 1048576);
  CHECK_THROWS_WITH_AS(parse_gpu_json(dev("132", "1e12", "1980"), "d"),
                       "d: field 'Core_Per_SM' must be a whole number of at most 2^20", InputError);
  CHECK_THROWS_WITH_AS(parse_gpu_json(dev("1.5", "128", "1980"), "d"),
                       "d: field 'Num_Sm' must be a whole number of at most 2^20", InputError);
  CHECK_THROWS_WITH_AS(parse_gpu_json(dev("132", "128", "1e-300"), "d"),
                       "d: field 'Freq' out of range (0 or 1e-3 to 1e12)", InputError);
}

TEST_CASE("gpu database: a dataset device JSON reads as its text does") {
  const std::string path = test::fixture_dir() + "/device_configs/NVIDIA_L4.json";
  std::ifstream f(path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const Gpu from_file = load_device_json(path), from_text = parse_gpu_json(text, "text");
  CHECK(from_text.name == from_file.name);
  CHECK(from_text.num_sm == from_file.num_sm);
  CHECK(from_text.fp32_gflops == from_file.fp32_gflops);
  CHECK(from_text.board_power_w == from_file.board_power_w);
  CHECK(from_text.source == "text");
}

TEST_CASE("gpu database: a GPU file may hold a database entry, matrix peaks and all (a GPU not in the database)") {
  // The B200's entry as `gpus --json` prints it, renamed: a spec sheet for a GPU the database
  // lacks, with its matrix units' peaks (a device JSON has no field for them).
  nlohmann::json e;
  for (const auto& x : nlohmann::json::parse(format_gpus_json(GpuDatabase::builtin())))
    if (x["name"] == "NVIDIA B200") e = x;
  REQUIRE(e.is_object());
  e["name"] = "Future GPU";
  e["aliases"] = nlohmann::json::array({"future"});
  e["bf16_gflops"] = 2.0 * e["bf16_gflops"].get<double>();
  const Gpu g = GpuDatabase::builtin().resolve(write_temp("future-gpu.json", e.dump()));
  const Gpu& b200 = GpuDatabase::builtin().resolve("b200");
  CHECK(g.name == "Future GPU");
  CHECK(g.arch == b200.arch);
  CHECK(g.bf16_gflops == 2 * b200.bf16_gflops);
  CHECK(g.fp8_gflops == b200.fp8_gflops);
  CHECK(has_matrix_units(g, DType::bf16));
  e.erase("arch");
  CHECK_THROWS_WITH_AS(GpuDatabase::builtin().resolve(write_temp("future-noarch.json", e.dump())),
                       doctest::Contains("arch"), InputError);
}
