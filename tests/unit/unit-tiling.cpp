// unit-tiling.cpp - GPU database and tile/wave arithmetic.
#include <doctest/doctest.h>

#include "neusight/gpu.h"
#include "neusight/tiling.h"
#include "test_util.h"

using namespace neusight;

TEST_CASE("tiling: grid arithmetic") {
  CHECK(ceil_div(10, 3) == 4);
  CHECK(ceil_div(9, 3) == 3);
  CHECK(waves_for(108, 108) == 1);
  CHECK(waves_for(109, 108) == 2);
}

TEST_CASE("gpu database: names, aliases, device JSONs") {
  const GpuDatabase& db = GpuDatabase::builtin();
  CHECK(db.resolve("b200").name == "NVIDIA B200");
  CHECK(db.resolve("B200").name == "NVIDIA B200");
  CHECK(db.resolve("Tesla T4").num_sm == 40);
  CHECK(db.resolve("NVIDIA A100 80GB PCIe").mem_bw_gbps == 1935);
  CHECK_THROWS_WITH_AS(db.resolve("b2000"), doctest::Contains("b200"), InputError);
  Gpu h = db.resolve(test::shared_dir() + "/neusight-data/device_configs/NVIDIA_H100_80GB_HBM3.json");
  CHECK(h.num_sm == 132);
  CHECK(h.arch == "sm_90");
}

TEST_CASE("tiling: elementwise tile is 512 fp32 elements per block") {
  Kernel k;
  k.cls = KernelClass::elementwise;
  k.rows = 127;
  k.cols = 168;
  k.flops = 127 * 168;
  k.bytes = 3 * 4 * 127 * 168;
  Tiling t = tile_kernel(k, GpuDatabase::builtin().resolve("t4"));
  CHECK(t.tile == "512");
  CHECK(t.tiles == 42);
  CHECK(t.waves == 2);
}
